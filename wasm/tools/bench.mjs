// Node speed against native, measured in the same run, for the replay or the fleets.
//
// Both sides do the same work with the same Rust code: read the trace's lines, run them
// through every history (`--engine replay`) or every fleet shape (`--engine fleet`), build the
// rows. Node runs the optimized .wasm through the JS API; the native side is
// `cargo run --release -p kvreuse-wasm --example native_timing`, which times itself (process
// start and file reading excluded on both sides). Rounds alternate between the two so that a
// noisy machine slows both alike; medians are reported.
//
//   node wasm/tools/bench.mjs [--pkg target/wasm-site/pkg] [--native target/release/examples/native_timing] \
//     [--engine replay] [--trace traces/mooncake_synthetic_trace.jsonl] \
//     [--capacity 1k,10k,100k,1M,inf] [--policy fifo,lru] \
//     [--rounds 7] [--reps 3] [--json FILE] [--min-ratio 0.4]
//   node wasm/tools/bench.mjs [--pkg target/wasm-site/pkg] ... --engine fleet \
//     [--workers 4,8] [--worker-capacity 2k,10k] [--router round-robin,kv] [--speedup 1]
//
// With --min-ratio, exits with status 1 when node's speed is below that fraction of native.

import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  options: {
    // The page's module by default (it has `Replay` and `Fleet`).
    pkg: { type: "string", default: "target/wasm-site/pkg" },
    native: { type: "string", default: "target/release/examples/native_timing" },
    engine: { type: "string", default: "replay" },
    workers: { type: "string", default: "4,8" },
    "worker-capacity": { type: "string", default: "2k,10k" },
    router: { type: "string", default: "round-robin,kv" },
    speedup: { type: "string", default: "1" },
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
const fleet = args.engine === "fleet";
if (!fleet && args.engine !== "replay") throw new Error(`--engine replay or fleet, not ${args.engine}`);
const pkgDir = args.pkg;
const pkg = await import(pathToFileURL(resolve(pkgDir, "kvreuse_wasm.js")).href);
pkg.initSync({ module: readFileSync(resolve(pkgDir, "kvreuse_wasm_bg.wasm")) });
if (!pkg[fleet ? "Fleet" : "Replay"]) throw new Error(`${pkgDir} has no ${fleet ? "Fleet" : "Replay"}`);
const Engine = fleet ? pkg.Fleet : pkg.Replay;

const text = readFileSync(args.trace, "utf8");
const options = fleet
  ? { workers: args.workers, workerCapacities: args["worker-capacity"], routers: args.router,
      speedup: Number(args.speedup) }
  : { capacities: args.capacity, policies: args.policy };
const flags = fleet
  ? ["--workers", args.workers, "--worker-capacity", args["worker-capacity"],
     "--router", args.router, "--speedup", args.speedup]
  : ["--capacity", args.capacity, "--policy", args.policy];
const shape = fleet
  ? `${args.workers} workers x ${args["worker-capacity"]} blocks x ${args.router}`
  : `${args.capacity} x ${args.policy}`;

// The checksum both sides print: F1 tokens over the rows of a replay, F5 over a fleet's.
const checksumOf = (rows) => rows.reduce((sum, r) => sum + (fleet ? r.f5_tokens : r.f1_tokens), 0);

function nodeRun() {
  const start = performance.now();
  const run = new Engine(text, options);
  run.step();
  const rows = run.results();
  const ms = performance.now() - start;
  run.free();
  return { ms, checksum: checksumOf(rows) };
}

function nativeRuns() {
  const out = execFileSync(args.native, [
    "--engine", args.engine, args.trace, ...flags,
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
let checksum = nodeRun().checksum;
const node = [];
const native = [];
for (let round = 0; round < rounds; round++) {
  for (let i = 0; i < reps; i++) {
    const run = nodeRun();
    if (run.checksum !== checksum) throw new Error("node runs disagree");
    node.push(run.ms);
  }
  const runs = nativeRuns();
  if (runs.checksum !== checksum) {
    throw new Error(`node and native disagree: checksum ${checksum} vs ${runs.checksum}`);
  }
  native.push(...runs.ms);
}

// The machine, as lscpu names it: its model and cache sizes (figures differ between VMs).
function machine() {
  try {
    const fields = Object.fromEntries(execFileSync("lscpu", { encoding: "utf8" }).split("\n")
      .map((l) => l.split(/:\s+/)).filter((kv) => kv.length === 2));
    const caches = ["L1d", "L2", "L3"].filter((k) => fields[`${k} cache`])
      .map((k) => `${k} ${fields[`${k} cache`]}`).join(", ");
    return `${fields["Model name"] ?? "unknown CPU"} (${caches})`;
  } catch {
    return "unknown CPU (no lscpu)";
  }
}

const result = {
  machine: machine(),
  engine: args.engine,
  trace: args.trace,
  shape,
  runs: { node: node.length, native: native.length },
  node_median_ms: +median(node).toFixed(3),
  native_median_ms: +median(native).toFixed(3),
  node_speed_of_native: +(median(native) / median(node)).toFixed(3),
};
const mbPerS = (ms) => (Buffer.byteLength(text) / 1e6 / (ms / 1e3)).toFixed(1);
const line = (name, ms, runs) =>
  `  ${name.padEnd(12)} ${ms.toFixed(1).padStart(9)} ${mbPerS(ms).padStart(7)} ${String(runs).padStart(5)}`;
console.log(
  `${args.engine} of ${args.trace} (${shape}), alternating rounds, on ${result.machine}:\n` +
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
