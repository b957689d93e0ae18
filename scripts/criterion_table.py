"""Prints the medians of criterion's last run (target/criterion/*/*/new/estimates.json) as a
table, with each benchmark group's ratio against its baseline when it has one."""
import json
import sys
from pathlib import Path

# A bench function with one of these names is its group's baseline.
BASELINES = {"dynamo-tokens", "hash-set histories, one pass each"}


def fmt(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def main(root):
    groups = {}
    for estimates in sorted(Path(root).glob("**/new/estimates.json")):
        bench = json.loads((estimates.parent / "benchmark.json").read_text())
        median = json.loads(estimates.read_text())["median"]["point_estimate"]
        groups.setdefault(bench["group_id"], {})[bench["function_id"]] = median
    print("| group | benchmark | median | vs baseline |")
    print("|---|---|---:|---:|")
    for group, functions in groups.items():
        base = next((v for k, v in functions.items() if k in BASELINES), None)
        for function, median in functions.items():
            ratio = "" if base is None or function in BASELINES else f"{base / median:.2f}x faster"
            print(f"| {group} | {function} | {fmt(median)} | {ratio} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
