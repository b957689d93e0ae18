// Node replay speed against native, measured in the same run.
//
// Both sides do the same work with the same Rust code: read the trace's lines, replay them
// through every history, build the rows. Node runs the optimized .wasm through the JS API;
// the native side is `cargo run --release -p kvreuse-wasm --example replay_native`, which
// times itself (process start and file reading excluded on both sides). Rounds alternate
// between the two so that a noisy machine slows both alike; medians are reported.
//
//   node wasm/tools/bench.mjs --pkg target/wasm-site/pkg --native target/release/examples/replay_native \
//     [--trace traces/mooncake_synthetic_trace.jsonl] [--capacity 1k,10k,100k,1M,inf] \
//     [--policy fifo,lru] [--rounds 7] [--reps 3] [--json FILE] [--min-ratio 0.4]
//
// With --min-ratio, exits with status 1 when node's speed is below that fraction of native.

import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    pkg: { type: "string", default: "target/wasm-site/pkg" },
    native: { type: "string", default: "target/release/examples/replay_native" },
    trace: { type: "string", default: "traces/mooncake_synthetic_trace.jsonl" },
    capacity: { type: "string", default: "1k,10k,100k,1M,inf" },
    policy: { type: "string", default: "fifo,lru" },
    rounds: { type: "string", default: "7" },
    reps: { type: "string", default: "3" },
    json: { type: "string" },
    "min-ratio": { type: "string" },
  },
});

const rounds = Number(args.rounds);
const reps = Number(args.reps);
const pkg = await import(pathToFileURL(resolve(args.pkg, "kvreuse_wasm.js")).href);
pkg.initSync({ module: readFileSync(resolve(args.pkg, "kvreuse_wasm_bg.wasm")) });
const { Replay } = pkg;

const text = readFileSync(args.trace, "utf8");
const options = { capacities: args.capacity, policies: args.policy };

function nodeRun() {
  const start = performance.now();
  const replay = new Replay(text, options);
  replay.step();
  const rows = replay.results();
  const ms = performance.now() - start;
  replay.free();
  return { ms, f1: rows.reduce((sum, r) => sum + r.f1_tokens, 0) };
}

function nativeRuns() {
  const out = execFileSync(args.native, [
    args.trace, "--capacity", args.capacity, "--policy", args.policy,
    "--reps", String(reps), "--warmup-runs", "1",
  ], { encoding: "utf8" });
  return JSON.parse(out);
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

// Warm the JIT and the allocator up once.
let checksum = nodeRun().f1;
const node = [];
const native = [];
for (let round = 0; round < rounds; round++) {
  for (let i = 0; i < reps; i++) {
    const run = nodeRun();
    if (run.f1 !== checksum) throw new Error("node runs disagree");
    node.push(run.ms);
  }
  const runs = nativeRuns();
  if (runs.f1_tokens_sum !== checksum) {
    throw new Error(`node and native disagree: ${checksum} vs ${runs.f1_tokens_sum} F1 tokens`);
  }
  native.push(...runs.ms);
}

const result = {
  trace: args.trace,
  capacities: args.capacity,
  policies: args.policy,
  runs: { node: node.length, native: native.length },
  node_median_ms: +median(node).toFixed(3),
  native_median_ms: +median(native).toFixed(3),
  node_speed_of_native: +(median(native) / median(node)).toFixed(3),
};
const mbPerS = (ms) => (Buffer.byteLength(text) / 1e6 / (ms / 1e3)).toFixed(1);
const line = (name, ms, runs) =>
  `  ${name.padEnd(12)} ${ms.toFixed(1).padStart(9)} ${mbPerS(ms).padStart(7)} ${String(runs).padStart(5)}`;
console.log(
  `replay of ${args.trace} (${args.capacity} x ${args.policy}), alternating rounds:\n` +
  `  ${"".padEnd(12)} ${"median ms".padStart(9)} ${"MB/s".padStart(7)} ${"runs".padStart(5)}\n` +
  `${line("node (wasm)", result.node_median_ms, node.length)}\n` +
  `${line("native", result.native_median_ms, native.length)}\n` +
  `  node speed = ${(100 * result.node_speed_of_native).toFixed(0)}% of native (median native / median node)`,
);
if (args.json) writeFileSync(args.json, JSON.stringify(result, null, 2) + "\n");
if (args["min-ratio"] !== undefined && result.node_speed_of_native < Number(args["min-ratio"])) {
  console.error(`node speed is below ${(100 * Number(args["min-ratio"])).toFixed(0)}% of native`);
  process.exit(1);
}
