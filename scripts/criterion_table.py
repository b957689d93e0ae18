"""Prints the medians of criterion's last run (target/criterion/*/*/new/estimates.json) as a
table, with each benchmark group's ratio against its baseline when it has one."""
import json
import sys
from pathlib import Path

# A bench function with one of these names is its group's baseline.
BASELINES = {"dynamo-tokens", "hash-set histories, one pass each", "serde_json, every line"}


def fmt(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def machine():
    """The CPU model and cache sizes, which every table names (ratios differ by machine)."""
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    try:
        import subprocess
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        caches = [f"{n.strip()[:-6]} {v.strip()}" for n, v in (l.split(":", 1) for l in lscpu.splitlines() if ":" in l) if n.strip().endswith("cache")]
    except OSError:
        caches = []
    return f"machine: {model}; caches: {', '.join(caches)}"


def main(root):
    groups = {}
    for estimates in sorted(Path(root).glob("**/new/estimates.json")):
        bench = json.loads((estimates.parent / "benchmark.json").read_text())
        median = json.loads(estimates.read_text())["median"]["point_estimate"]
        throughput = (bench.get("throughput") or {}).get("Bytes")
        groups.setdefault(bench["group_id"], {})[bench["function_id"]] = (median, throughput)
    print(machine())
    print()
    print("| group | benchmark | median | MB/s | vs baseline |")
    print("|---|---|---:|---:|---:|")
    for group, functions in groups.items():
        base = next((v[0] for k, v in functions.items() if k in BASELINES), None)
        for function, (median, throughput) in functions.items():
            ratio = "" if base is None or function in BASELINES else f"{base / median:.2f}x faster"
            rate = f"{throughput / median * 1e3:.0f}" if throughput else ""
            print(f"| {group} | {function} | {fmt(median)} | {rate} | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
