"""Checks `kvreuse fleet` against NVIDIA Dynamo 1.6.1's offline trace replay, and times both.

Run by scripts/bench-fleet-peer inside the venv that has ai-dynamo 1.6.1 installed. Both tools
replay the same trace through the same grid: workers x blocks per worker x {round_robin,
kv_router}, 512-token engine and trace blocks, engine passes sped up 1000 times, arrivals at
the trace's times. Dynamo's reuse figure is its report's `prefix_cache_reused_ratio` (tokens
reused at admission over prompt tokens); kvreuse's is F5/F0. The KV router breaks exact ties
at random without a seed, so its rows are run several times and compared with their mean.

Required (exit status 1 otherwise): round-robin rows within 0.3 points, KV-router rows within
2 points of Dynamo's mean, and the KV router ahead of round-robin wherever Dynamo's is.
The speed ratio is the sum of Dynamo's run times (each call timed in this process) over the
median wall time of one `kvreuse fleet` process doing the whole grid.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import dynamo.replay as replay
from dynamo.llm import KvRouterConfig

BLOCK = 512
SPEEDUP = 1000


def machine():
    """The CPU model and cache sizes, as lscpu reports them."""
    model, caches = platform.processor() or "unknown CPU", []
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                model = value.strip()
            if key.strip() in ("L1d cache", "L2 cache", "L3 cache"):
                caches.append(f"{key.strip().split()[0]} {value.strip()}")
    except (OSError, subprocess.CalledProcessError):
        pass
    return f"{model}, {os.cpu_count()} CPUs; " + ", ".join(caches)


def dynamo_run(trace, workers, blocks, mode):
    """One Dynamo replay: (reused ratio, seconds of the call, seconds of its native part
    as Dynamo reports them, (TTFT p50, p99) in ms)."""
    kwargs = {}
    if mode == "kv_router":
        kwargs["router_config"] = KvRouterConfig(
            overlap_score_credit=1.0, prefill_load_scale=1.0, router_temperature=0.0
        )
    start = time.perf_counter()
    report = replay.run_trace_replay(
        trace,
        extra_engine_args={
            "engine": {"block_size": BLOCK, "num_gpu_blocks": blocks, "speedup_ratio": SPEEDUP}
        },
        num_workers=workers,
        router_mode=mode,
        arrival_speedup_ratio=1.0,
        trace_block_size=BLOCK,
        trace_format="mooncake",
        **kwargs,
    )
    seconds = time.perf_counter() - start
    summary = report.summary
    ttft = (summary["median_ttft_ms"], summary["p99_ttft_ms"])
    return summary["prefix_cache_reused_ratio"], seconds, summary["wall_time_ms"] / 1e3, ttft


def kvreuse_runs(binary, trace, workers, blocks, reps):
    """The grid in one `kvreuse fleet` process: (rows by (workers, blocks, router), times)."""
    cmd = [
        binary, "fleet", trace, "--json",
        "--workers", ",".join(map(str, workers)),
        "--worker-capacity", ",".join(map(str, blocks)),
        "--router", "round-robin,kv",
        "--block-size", str(BLOCK), "--timing", "mocker", "--speedup", str(SPEEDUP),
        "--history", "inf",
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    rows = {(r["workers"], r["worker_capacity"], r["router"]): r for r in json.loads(out)["rows"]}
    return rows, times, " ".join(cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kvreuse", required=True)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--workers", default="4,8")
    ap.add_argument("--capacities", default="2000,10000")
    ap.add_argument("--kv-runs", type=int, default=3, help="Dynamo runs per KV-router row")
    ap.add_argument("--reps", type=int, default=5, help="timed kvreuse runs (median)")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    blocks = [int(c) for c in args.capacities.split(",")]

    rows, kv_times, cmd = kvreuse_runs(args.kvreuse, args.trace, workers, blocks, args.reps)
    print(f"machine: {machine()}")
    print(f"kvreuse: {cmd}")
    print("dynamo:  dynamo.replay.run_trace_replay(trace, engine block_size 512, num_gpu_blocks C,"
          " speedup_ratio 1000, trace_block_size 512, router_mode round_robin | kv_router)\n")

    failures, dynamo_seconds, native_seconds, dynamo_calls = [], 0.0, 0.0, 0
    print(f"{'':28} {'reuse (F5/F0)':^39} {'TTFT p50 / p99 (ms)':^35}")
    print(f"{'workers':>7} {'blocks':>7} {'router':<12} {'Dynamo':>22} {'kvreuse':>8} {'diff':>6}"
          f"   {'Dynamo':>16} {'kvreuse':>16}")
    by_shape = {}
    for n in workers:
        for c in blocks:
            for mode, router, runs, bound in (
                ("round_robin", "round-robin", 1, 0.3),
                ("kv_router", "kv", args.kv_runs, 2.0),
            ):
                results = [dynamo_run(args.trace, n, c, mode) for _ in range(runs)]
                dynamo_seconds += sum(r[1] for r in results)
                native_seconds += sum(r[2] for r in results)
                dynamo_calls += runs
                d50 = statistics.mean(r[3][0] for r in results)
                d99 = statistics.mean(r[3][1] for r in results)
                ratios = [r[0] for r in results]
                theirs = statistics.mean(ratios)
                row = rows[(n, c, router)]
                ours = row["f5_tokens"] / row["f0_tokens"]
                diff = 100 * (ours - theirs)
                by_shape[(n, c, router)] = (theirs, ours)
                shown = ", ".join(f"{r:.4f}" for r in ratios)
                ok = abs(diff) <= bound
                k50, k99 = row["ttft_ms_p50"], row["ttft_ms_p99"]
                print(f"{n:>7} {c:>7} {router:<12} {shown:>22} {ours:>8.4f} {diff:>+6.2f}"
                      f"   {d50:>7.3f} / {d99:>6.3f} {k50:>7.3f} / {k99:>6.3f}"
                      + ("" if ok else f"  <- beyond {bound} points"))
                if not ok:
                    failures.append(f"{n}x{c} {router}: {diff:+.2f} points")
    for n in workers:
        for c in blocks:
            (d_rr, k_rr), (d_kv, k_kv) = by_shape[(n, c, "round-robin")], by_shape[(n, c, "kv")]
            if d_kv > d_rr and not k_kv > k_rr:
                failures.append(f"{n}x{c}: Dynamo's KV router beats round-robin, kvreuse's does not")

    median = statistics.median(kv_times)
    print(f"\nDynamo: {dynamo_calls} runs, {dynamo_seconds:.2f} s in all "
          f"({dynamo_seconds / dynamo_calls:.3f} s per call; {native_seconds:.2f} s of it in "
          f"the native simulator by its own wall_time_ms)")
    print(f"kvreuse: the whole grid in one process, median {median:.3f} s of {len(kv_times)} "
          f"(range {min(kv_times):.3f}-{max(kv_times):.3f} s)")
    print(f"speed ratio (Dynamo's sum / kvreuse's median): {dynamo_seconds / median:.1f}x "
          f"(range {dynamo_seconds / max(kv_times):.1f}-{dynamo_seconds / min(kv_times):.1f}x)")
    if failures:
        print("\nNOT within the bounds:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("\nevery row within its bound; the KV router ahead wherever Dynamo's is")


if __name__ == "__main__":
    main()
