// The replay runs here, off the page's thread, so the page stays responsive.
//
// In:  { type: "run", source: { url } | { bytes: ArrayBuffer, gzip: boolean }, options }
// Out: { type: "ready" }                   once the engine is loaded
//      { type: "start", histories }        the histories, in row order
//      { type: "progress", phase, progress, requests, replayed }
//      { type: "snapshot", point }         one point of the timeline (cumulative counts)
//      { type: "done", report, timeline, elapsedMs, bytes }
//      { type: "error", name, message, line }
// One run per worker: the page starts a new worker for every run (and to cancel one).

import init, { Replay } from "./pkg/kvreuse_wasm.js";

const ready = init().then(
  () => postMessage({ type: "ready" }),
  (error) => {
    postMessage({ type: "error", name: "Error", message: `cannot load the engine: ${error}` });
    throw error;
  },
);

// Aim for about this much work between progress messages.
const SLICE_MS = 30;
// Timeline points over the replay.
const WINDOWS = 150;

async function load(source) {
  if (source.url) {
    const response = await fetch(source.url);
    if (!response.ok) throw new Error(`cannot load ${source.url}: HTTP ${response.status}`);
    return new Uint8Array(await response.arrayBuffer());
  }
  if (source.gzip) {
    const stream = new Blob([source.bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  return new Uint8Array(source.bytes);
}

function point(replay) {
  const rows = replay.results();
  return {
    replayed: replay.replayed,
    timeMs: replay.traceTimeMs ?? null,
    f0: rows.map((r) => r.f0_tokens),
    f1: rows.map((r) => r.f1_tokens),
  };
}

async function run({ source, options }) {
  await ready;
  const started = performance.now();
  const bytes = await load(source);
  const replay = new Replay(bytes, options);
  try {
    postMessage({
      type: "start",
      histories: replay.results().map((r) => ({ policy: r.policy, capacity: r.capacity })),
    });
    const timeline = [point(replay)];
    let work = 256;
    let lastPost = 0;
    let span = 0;
    for (;;) {
      const phase = replay.phase;
      if (phase === "done") break;
      // Steps end on window boundaries, where the timeline takes a point (a step reads lines,
      // and a line holds at most one request, so it never passes a boundary).
      span ||= Math.max(1, Math.ceil(replay.requests / WINDOWS));
      const budget = Math.min(work, span - (replay.replayed % span));
      const t0 = performance.now();
      replay.step(budget);
      const took = performance.now() - t0;
      // Adapt the slice so a step takes about SLICE_MS.
      if (budget === work) {
        work = Math.max(16, Math.min(1 << 20, Math.round(work * (took < SLICE_MS / 2 ? 2 : took > SLICE_MS * 2 ? 0.5 : 1))));
      }
      if (replay.replayed > 0 && (replay.replayed % span === 0 || replay.phase === "done")) {
        const p = point(replay);
        timeline.push(p);
        postMessage({ type: "snapshot", point: p });
      }
      const now = performance.now();
      if (now - lastPost > 50 || replay.phase === "done") {
        lastPost = now;
        postMessage({
          type: "progress",
          phase: replay.phase,
          progress: replay.progress,
          requests: replay.requests,
          replayed: replay.replayed,
        });
      }
    }
    postMessage({
      type: "done",
      report: replay.report(),
      timeline,
      traceStartMs: replay.traceStartMs ?? null,
      elapsedMs: performance.now() - started,
      bytes: bytes.length,
    });
  } finally {
    replay.free();
  }
}

onmessage = async ({ data }) => {
  if (data.type !== "run") return;
  try {
    await run(data);
  } catch (error) {
    postMessage({
      type: "error",
      name: error?.name ?? "Error",
      message: error?.message ?? String(error),
      line: error?.line ?? null,
    });
  }
};
