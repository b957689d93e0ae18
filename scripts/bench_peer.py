"""Times `kvreuse replay` against kvcache-simulator's C++ backend on one trace.

Run by scripts/bench-peer inside the venv that has kvcache-simulator installed.
Both tools get the same work: FIFO and LRU at the same capacities (in blocks), with
the first half of the requests as warm-up, because kvcache-simulator always measures
only the last 50% of requests and reports nothing for a cache that is not full by then.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvcache_sim import BYTES_PER_GIB, calculate_cache_size, load_models_data, run_sweep
from kvcache_sim.calculator import models_by_id
# Private, but pinned by the exact version: lets us time the bare C++ core as well.
from kvcache_sim.cpp_backend import _write_binary_trace, ensure_cpp_simulator
from kvcache_sim.trace import parse_trace_file

# kvcache-simulator sizes its cache in GiB of a model's KV cache, not in blocks:
# blocks = floor(GiB * 2^30 / bytes_per_block). Llama 3.1 8B in BF16 has 128 KiB per
# token, so one 512-token block is exactly 64 MiB (16 blocks per GiB) and every block
# count maps to an exactly representable GiB budget.
MODEL, PRECISION = "llama-3.1-8b", "bf16_fp16"
POLICIES = ["fifo", "lru"]
WARMUP = 0.5  # kvcache-simulator's fixed measurement window (last 50% of requests)


def timed_runs(cmd, reps):
    """Median wall time of `reps` runs of cmd (process start included), after one untimed
    run that warms the page cache; returns (median, stdout of the untimed run)."""
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def sim_hits(result):
    """{(policy, capacity): (hit tokens, measured tokens)} from a run_sweep / CLI result."""
    return {
        (policy, point["cacheBlocks"]): (r["hitTokens"], r["totalTokens"])
        for point in result["points"]
        for policy, r in point["results"].items()
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kvreuse", required=True, help="kvreuse binary")
    ap.add_argument("--trace", required=True, help="Mooncake JSONL trace")
    ap.add_argument("--block-size", type=int, default=512)
    # Capacities must not exceed the blocks seen in the warm-up half (33,131 distinct ids
    # for the synthetic trace): larger caches never fill, and kvcache-simulator omits them.
    ap.add_argument("--capacities", default="1000,10000,20000,30000", help="blocks, comma-separated")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    caps = [int(c) for c in args.capacities.split(",")]

    models = load_models_data()
    size = calculate_cache_size(models_by_id(models)[MODEL], tokens=1, precision=PRECISION,
                                block_size=args.block_size, models_data=models)
    bytes_per_block = size.bytes_per_block or size.bytes_per_token * args.block_size
    budgets = [cap * bytes_per_block / BYTES_PER_GIB for cap in caps]

    # Compile the bundled C++ core now (cached in the temp dir) so no timed run pays for it.
    # run_sweep(backend="cpp") has no Python fallback: it runs this binary or raises.
    binary = ensure_cpp_simulator()

    kvreuse_cmd = [args.kvreuse, "replay", args.trace, "--json", "--block-size", str(args.block_size),
                   "--capacity", ",".join(map(str, caps)), "--policy", ",".join(POLICIES),
                   "--warmup", str(WARMUP)]
    sim_cmd = [sys.executable, "-m", "kvcache_sim", "run", "--trace", args.trace,
               "--model", MODEL, "--kv-precision", PRECISION, "--block-size", str(args.block_size),
               "--budgets-gib", ",".join(repr(b) for b in budgets), "--policies", ",".join(POLICIES),
               "--backend", "cpp", "--format", "json", "--no-progress"]

    kv_time, kv_out = timed_runs(kvreuse_cmd, args.reps)
    sim_time, sim_out = timed_runs(sim_cmd, args.reps)
    sim_result = json.loads(sim_out)
    got_caps = [p["cacheBlocks"] for p in sim_result["points"]]
    if got_caps != caps:
        sys.exit(f"kvcache-simulator evaluated capacities {got_caps}, not {caps}: it omits "
                 "capacities larger than the trace or not filled by the end of the warm-up half")

    # In-process timing: parse the trace once, then time only the simulation call, so that
    # neither Python start-up nor its JSON parsing is counted against kvcache-simulator.
    start = time.perf_counter()
    trace = parse_trace_file(args.trace, block_size=args.block_size)
    parse_time = time.perf_counter() - start
    sweep_times = []
    for _ in range(args.reps):
        start = time.perf_counter()
        inproc = run_sweep(trace, model_id=MODEL, precision=PRECISION, budgets_gib=budgets,
                           policies=POLICIES, backend="cpp", warmup_fraction=WARMUP)
        sweep_times.append(time.perf_counter() - start)
    sweep_time = statistics.median(sweep_times)

    # The bare C++ core on the binary files run_sweep writes for it: the peer with no
    # Python at all (but also no trace parsing, which kvreuse's time includes).
    warmup = inproc["metadata"]["warmupRequests"]
    with tempfile.TemporaryDirectory() as tmp:
        files = _write_binary_trace(trace, Path(tmp))
        core_cmd = [str(binary), "--policy", "batch", "--ids", str(files.ids), "--tokens", str(files.tokens),
                    "--request-ends", str(files.request_ends), "--request-count", str(trace.request_count),
                    "--total-blocks", str(len(trace.ids)), "--warmup-requests", str(warmup),
                    "--capacities", ",".join(map(str, caps)), "--policies", ",".join(POLICIES)]
        core_time, core_out = timed_runs(core_cmd, args.reps)
    core_hits = {(policy, p["cacheBlocks"]): (p[policy]["hitTokens"], p[policy]["totalTokens"])
                 for p in json.loads(core_out)["points"] for policy in POLICIES}

    assert inproc["metadata"]["backend"] == "cpp"
    assert core_hits == sim_hits(inproc), "bare C++ core and run_sweep results differ"
    assert sim_hits(inproc) == sim_hits(sim_result), "CLI and in-process results differ"

    work = f"{'+'.join(POLICIES)} x {len(caps)} capacities"
    print(f"trace: {args.trace} ({trace.request_count} requests, {len(trace.ids)} blocks, "
          f"{trace.unique_raw_blocks} distinct ids), block size {args.block_size}")
    print(f"capacities (blocks): {', '.join(map(str, caps))}; warm-up: first "
          f"{sim_result['metadata']['warmupRequests']} requests, last {WARMUP:.0%} measured")
    print(f"kvcache-simulator {sim_result['metadata']['backend']} backend binary: {binary}")
    print(f"kvcache-simulator capacity: GiB of {MODEL} {PRECISION} KV cache, "
          f"{bytes_per_block / 2**20:g} MiB per block -> GiB budgets "
          f"{', '.join(f'{b:g}' for b in budgets)}")
    print()
    print(f"{'tool':<37} {'work':<26} {'median s':>9}  runs")
    rows = [("kvreuse replay (process)", kv_time),
            ("kvcache-simulator run (process)", sim_time),
            ("kvcache-simulator run_sweep only", sweep_time),
            ("kvcache-simulator C++ core (process)", core_time)]
    for name, t in rows:
        print(f"{name:<37} {work:<26} {t:>9.3f}  {args.reps}")
    print(f"(kvcache-simulator's Python trace parsing, excluded from run_sweep only: {parse_time:.3f} s)")
    print("Both tools produce all 8 results in ONE call/process (kvreuse in one pass; "
          "kvcache-simulator's C++ batch mode replays each (policy, capacity) in turn and also "
          "its infinite-cache ceiling), so nothing is summed.")
    print(f"ratio kvcache-simulator / kvreuse (kvreuse always as a whole process): "
          f"{sim_time / kv_time:.2f}x whole process, {sweep_time / kv_time:.2f}x run_sweep only, "
          f"{core_time / kv_time:.2f}x bare C++ core")

    # Both Python APIs in this process: kvreuse.replay reads and parses the trace itself;
    # kvcache-simulator's run_sweep gets the trace parsed already.
    try:
        import kvreuse
    except ImportError:
        print("(kvreuse's Python package is not installed here: Python API not compared)")
    else:
        py_times, py_rows = [], None
        for _ in range(args.reps):
            start = time.perf_counter()
            py_rows = kvreuse.replay(args.trace, capacities=caps, policies=POLICIES,
                                     block_size=args.block_size, warmup=WARMUP)
            py_times.append(time.perf_counter() - start)
        py_time = statistics.median(py_times)
        assert py_rows == json.loads(kv_out)["rows"], "kvreuse.replay and kvreuse replay differ"
        print(f"{'kvreuse.replay (Python API)':<37} {work:<26} {py_time:>9.3f}  {args.reps}"
              f"  (range {min(py_times):.3f}-{max(py_times):.3f})")
        print(f"Python API ratio: run_sweep / kvreuse.replay = {sweep_time / py_time:.2f}x "
              f"(run_sweep without its trace parsing), {(parse_time + sweep_time) / py_time:.2f}x "
              f"with it (parse_trace_file + run_sweep)")

    print()
    print(f"{'policy':<7} {'capacity':>9} {'kvreuse hit tok':>16} {'kvcache-sim hit tok':>20} "
          f"{'measured tok':>13}  agree")
    kv_hits = {(r["policy"], r["capacity"]): (r["f1_tokens"], r["f0_tokens"])
               for r in json.loads(kv_out)["rows"]}
    sims = sim_hits(sim_result)
    differ = set()
    for policy in POLICIES:
        for cap in caps:
            (kv, kv_total), (sim, sim_total) = kv_hits[(policy, cap)], sims[(policy, cap)]
            same = kv == sim and kv_total == sim_total
            if not same:
                differ.add(policy)
            print(f"{policy:<7} {cap:>9} {kv:>16,} {sim:>20,} {sim_total:>13,}  "
                  f"{'yes' if same else f'NO ({sim - kv:+,})'}")
    if "lru" in differ:
        print("LRU differs: kvcache-simulator's LRU is a prefix-trie LRU (evicts only leaf blocks, "
              "spares the current request's cached blocks, refreshes only the hit prefix, stops inserting at the "
              "first block it cannot place); kvreuse's evicts the least recently used id.")
    if "fifo" in differ:
        print("FIFO differs: unexpected, both insert missing ids in order and evict the oldest.")


if __name__ == "__main__":
    main()
