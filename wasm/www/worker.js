// The replay runs here, off the page's thread, so the page stays responsive.
//
// In:  { type: "run", source: { url } | { bytes: ArrayBuffer, gzip: boolean } | { files: File[] },
//        options }
//      A URL or bytes are replayed as one text; files are read in chunks, one after another
//      (gzip by the name's .gz), so a trace larger than memory, or a folder of
//      kv-cache-tester conversations, replays without being held whole.
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

// The chunks of a file, decompressed when its name ends in .gz; `stored.bytes` counts the
// file's own bytes read (for progress).
async function* chunks(file, stored) {
  let stream = file.stream().pipeThrough(new TransformStream({
    transform(chunk, out) {
      stored.bytes += chunk.length;
      out.enqueue(chunk);
    },
  }));
  if (/\.gz$/i.test(file.name)) stream = stream.pipeThrough(new DecompressionStream("gzip"));
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    yield value;
  }
}

async function run({ source, options }) {
  await ready;
  const started = performance.now();
  const bytes = source.files ? null : await load(source);
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
    let size = bytes?.length ?? 0;
    if (source.files) {
      // Files in chunks: JSONL requests replay as their chunks arrive; a point of the timeline
      // every `span` requests, estimated from the first chunks' requests per byte.
      const total = source.files.reduce((sum, f) => sum + f.size, 0);
      const stored = { bytes: 0 };
      let next = 0;
      for (const file of source.files) {
        replay.beginFile(file.name);
        for await (const chunk of chunks(file, stored)) {
          replay.push(chunk);
          size += chunk.length;
          const read = Math.min(1, stored.bytes / Math.max(1, total));
          if (!span && replay.replayed > 0) {
            span = Math.max(1, Math.ceil(replay.replayed / read / WINDOWS));
            next = span;
          }
          if (span && replay.replayed >= next) {
            const p = point(replay);
            timeline.push(p);
            postMessage({ type: "snapshot", point: p });
            next = replay.replayed + span;
          }
          const now = performance.now();
          if (now - lastPost > 50) {
            lastPost = now;
            postMessage({
              type: "progress",
              phase: replay.phase,
              progress: read,
              requests: replay.requests,
              replayed: replay.replayed,
            });
          }
        }
      }
      replay.finish();
      // What is left: a document set's requests, merged by time, now counted.
      if (replay.replayed === 0) span = 0;
    }
    for (;;) {
      const phase = replay.phase;
      if (phase === "done") break;
      // Steps end on window boundaries, where the timeline takes a point (a step reads lines,
      // and a line holds at most one request, so it never passes a boundary).
      // (Conversation documents are counted only once read: no windows before.)
      if (!span && replay.requests !== null) span = Math.max(1, Math.ceil(replay.requests / WINDOWS));
      const budget = span ? Math.min(work, span - (replay.replayed % span)) : work;
      const t0 = performance.now();
      replay.step(budget);
      const took = performance.now() - t0;
      // Adapt the slice so a step takes about SLICE_MS.
      if (budget === work) {
        work = Math.max(16, Math.min(1 << 20, Math.round(work * (took < SLICE_MS / 2 ? 2 : took > SLICE_MS * 2 ? 0.5 : 1))));
      }
      if (replay.replayed > 0 && span && (replay.replayed % span === 0 || replay.phase === "done")) {
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
      bytes: size,
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
