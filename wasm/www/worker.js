// The replay and the fleet simulation run here, off the page's thread, so the page stays
// responsive.
//
// In:  { type: "run", engine: "replay" | "fleet",
//        source: { url } | { bytes: ArrayBuffer } | { files: File[] }, options }
//      A URL or bytes are run as one text; files are read in chunks, one after another, so
//      a trace larger than memory, or a folder of kv-cache-tester conversations, runs without
//      being held whole. Bytes and files are gzip when their first bytes say so, whatever
//      the name, as the command line tells.
// Out: { type: "ready" }                   once the engine is loaded
//      { type: "start", histories }        the replay's histories, in row order
//      { type: "progress", progress, requests, ran }   ran: requests run so far
//      { type: "snapshot", point }         one point of the replay's timeline (cumulative counts)
//      { type: "done", engine, report, timeline, traceStartMs, elapsedMs, bytes, longestStepMs }
//      { type: "error", name, message, line }
// One run per worker: the page starts a new worker for every run (and to cancel one).
//
// Every call into the engine that does work (a step, or a slice of a chunk, which runs the
// requests the slice completes) is timed, and the work per call adapts so that a call takes
// about SLICE_MS: a fleet simulation costs far more per request than a replay, and more as
// its caches fill. `longestStepMs` is the longest call of the run, the ones that cannot be
// split included (the constructor, which counts a whole text's records, and `finish`, which
// merges a document set's requests by time).

import init, { Fleet, Replay } from "./pkg/kvreuse_wasm.js";

const ready = init().then(
  () => postMessage({ type: "ready" }),
  (error) => {
    postMessage({ type: "error", name: "Error", message: `cannot load the engine: ${error}` });
    throw error;
  },
);

// Aim for about this much work per call into the engine: well under the 50 ms a call may
// take, since the fleet's requests vary in cost (up to about 6 ms each on the bundled sample).
const SLICE_MS = 10;
// Timeline points over the replay.
const WINDOWS = 150;

// The engines: their class, requests run so far, and the work of a first step (requests) and
// of a first slice of a chunk (bytes), from which the work adapts.
const ENGINES = {
  replay: { Engine: Replay, ran: (replay) => replay.replayed, firstStep: 256, firstSlice: 64 << 10 },
  fleet: { Engine: Fleet, ran: (fleet) => fleet.simulated, firstStep: 1, firstSlice: 4 << 10 },
};

// The work per call (requests for a step, bytes for a slice of a chunk), adapted to the time
// calls take; and the longest call.
class Pace {
  constructor(work, min, max) {
    Object.assign(this, { work, min, max, longestMs: 0 });
  }

  // Runs `call(work)` and adapts the work towards what would have taken SLICE_MS at this
  // call's pace (growing by half at most, shrinking to a quarter at most). A call may be given
  // less than the full work (the end of a chunk, a timeline window): its pace counts all the
  // same, so a chunk smaller than the work does not stop the adapting.
  run(call, work = this.work) {
    const took = this.time(() => call(work));
    const paced = (work * SLICE_MS) / Math.max(took.ms, 0.01);
    const next = Math.min(1.5 * this.work, Math.max(0.25 * this.work, paced));
    this.work = Math.max(this.min, Math.min(this.max, Math.round(next)));
    return took.out;
  }

  // Runs `call`, counting its time towards the longest call.
  time(call) {
    const t0 = performance.now();
    const out = call();
    const ms = performance.now() - t0;
    this.longestMs = Math.max(this.longestMs, ms);
    return { out, ms };
  }
}

async function load(source) {
  if (source.url) {
    const response = await fetch(source.url);
    if (!response.ok) throw new Error(`cannot load ${source.url}: HTTP ${response.status}`);
    return new Uint8Array(await response.arrayBuffer());
  }
  if (isGzip(new Uint8Array(source.bytes, 0, Math.min(2, source.bytes.byteLength)))) {
    const stream = new Blob([source.bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  return new Uint8Array(source.bytes);
}

// Whether `head` starts a gzip member (its magic bytes 1f 8b).
function isGzip(head) {
  return head.length >= 2 && head[0] === 0x1f && head[1] === 0x8b;
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

// The chunks of a file, decompressed when it starts as gzip does; `stored.bytes` counts the
// file's own bytes read (for progress).
async function* chunks(file, stored) {
  let stream = file.stream().pipeThrough(new TransformStream({
    transform(chunk, out) {
      stored.bytes += chunk.length;
      out.enqueue(chunk);
    },
  }));
  if (isGzip(new Uint8Array(await file.slice(0, 2).arrayBuffer()))) {
    stream = stream.pipeThrough(new DecompressionStream("gzip"));
  }
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    yield value;
  }
}

// The replay's timeline: a point (cumulative F0 and F1 per history) every `span` requests.
class Timeline {
  constructor(replay) {
    this.replay = replay;
    this.points = [point(replay)];
    this.span = 0;
    this.next = 0;
  }

  take() {
    const p = point(this.replay);
    this.points.push(p);
    postMessage({ type: "snapshot", point: p });
  }

  // While chunks arrive, JSONL requests replay as they come: a point every `span` requests,
  // estimated from the first chunks' requests per byte (`read`: the share of bytes read).
  afterSlice(read) {
    const replayed = this.replay.replayed;
    if (!this.span && replayed > 0) {
      this.span = Math.max(1, Math.ceil(replayed / read / WINDOWS));
      this.next = this.span;
    }
    if (this.span && replayed >= this.next) {
      this.take();
      this.next = replayed + this.span;
    }
  }

  // What is left after the chunks: a document set's requests, merged by time, now counted.
  afterInput() {
    if (this.replay.replayed === 0) this.span = 0;
  }

  // Steps end on window boundaries, where the timeline takes a point (a step reads lines,
  // and a line holds at most one request, so it never passes a boundary). Conversation
  // documents are counted only once read: no windows before.
  budget(work) {
    const { replay } = this;
    if (!this.span && replay.requests != null) this.span = Math.max(1, Math.ceil(replay.requests / WINDOWS));
    return this.span ? Math.min(work, this.span - (replay.replayed % this.span)) : work;
  }

  afterStep() {
    const { replay, span } = this;
    if (replay.replayed > 0 && span && (replay.replayed % span === 0 || replay.phase === "done")) this.take();
  }
}

async function run({ engine = "replay", source, options }) {
  await ready;
  const started = performance.now();
  const bytes = source.files ? null : await load(source);
  const kind = ENGINES[engine];
  const steps = new Pace(kind.firstStep, 1, 1 << 20);
  const slices = new Pace(kind.firstSlice, 1 << 10, 16 << 20);
  const sim = steps.time(() => new kind.Engine(bytes, options)).out;
  let lastPost = 0;
  const progress = (share, force = false) => {
    const now = performance.now();
    if (now - lastPost <= 50 && !force) return;
    lastPost = now;
    postMessage({ type: "progress", progress: share, requests: sim.requests ?? null, ran: kind.ran(sim) });
  };
  try {
    let timeline = null;
    if (engine === "replay") {
      postMessage({
        type: "start",
        histories: sim.results().map((r) => ({ policy: r.policy, capacity: r.capacity })),
      });
      timeline = new Timeline(sim);
    }
    let size = bytes?.length ?? 0;
    if (source.files) {
      // Files in chunks, each handed over in slices, since a push runs the requests its bytes
      // complete.
      const total = source.files.reduce((sum, f) => sum + f.size, 0);
      const stored = { bytes: 0 };
      for (const file of source.files) {
        sim.beginFile(file.name);
        for await (const chunk of chunks(file, stored)) {
          size += chunk.length;
          const read = Math.min(1, stored.bytes / Math.max(1, total));
          for (let at = 0; at < chunk.length;) {
            const end = Math.min(chunk.length, at + slices.work);
            slices.run(() => sim.push(chunk.subarray(at, end)), end - at);
            at = end;
            timeline?.afterSlice(read);
            progress(read);
          }
        }
      }
      steps.time(() => sim.finish());
      timeline?.afterInput();
    }
    for (;;) {
      if (sim.phase === "done") break;
      const budget = timeline ? timeline.budget(steps.work) : steps.work;
      steps.run((work) => sim.step(work), budget);
      timeline?.afterStep();
      progress(sim.progress, sim.phase === "done");
    }
    postMessage({
      type: "done",
      engine,
      report: sim.report(),
      timeline: timeline?.points ?? null,
      traceStartMs: engine === "replay" ? sim.traceStartMs ?? null : null,
      elapsedMs: performance.now() - started,
      bytes: size,
      longestStepMs: Math.max(steps.longestMs, slices.longestMs),
    });
  } finally {
    sim.free();
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
