"""Combines several invocations of the history bench into one table per capacity.

Run by scripts/bench-history, or alone on saved outputs:

    python3 scripts/history_set.py OUTPUT...

Each OUTPUT is what one `cargo bench -p kvreuse-benches --bench history` printed. A single
invocation already reports the median of its interleaved runs; on a shared VM those medians
still move from one invocation to the next, so the README's tables combine several: for each
row, every contender's rate is the median of the invocations' medians, and each ratio of
kvreuse to a reference the median of the invocations' ratios, with their range in brackets.
The machine line comes from the first output, and the dependent-read latencies are given as
ranges over all of them (they show how much of the caches the VM held meanwhile).
"""

import os
import re
import statistics
import sys

TABLE_TITLE = re.compile(r"^history of (\d+) ids")
LATENCY = re.compile(r"(\d+) MiB (\d+) ns")


def fail(message):
    """Stops with `message`, named after the script that was run (history_pair.py uses this
    module too)."""
    sys.exit(f"{os.path.basename(sys.argv[0])}: {message}")


def parse(path):
    """The machine line, the latencies ({MiB: ns}) and the tables ({capacity: rows}) of one
    output; rows are (measure, unit, cells) in order, cells the table's remaining columns."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    except UnicodeDecodeError:
        fail(f"{path} is not text (not UTF-8): not the output of the history bench")
    machine, latency, tables, capacity, header = None, {}, {}, None, None
    for line in lines:
        if line.startswith("machine: "):
            machine = line
        elif line.startswith("one dependent random read"):
            latency = {int(m): int(ns) for m, ns in LATENCY.findall(line)}
        elif title := TABLE_TITLE.match(line):
            capacity, header = int(title.group(1)), None
            tables[capacity] = []
        elif capacity is not None and line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
                if header[:2] != ["measure", "unit"] or len(header) != 9:
                    fail(f"{path}: unexpected table header {line!r}")
            elif len(cells) != len(header):
                fail(f"{path}: a row with {len(cells)} cells, not {len(header)}: {line!r}")
            else:
                tables[capacity].append((cells[0], cells[1], cells[2:]))
    if machine is None or not tables:
        fail(f"{path} is not the output of the history bench (no machine line or no table)")
    for capacity, rows in tables.items():
        if not rows:
            fail(f"{path}: the table of {capacity} ids has no rows (cut short?)")
    return machine, latency, tables


def number(cell, path, row):
    """A rate or ratio cell as a float ("2.33x" -> 2.33)."""
    try:
        return float(cell.removesuffix("x"))
    except ValueError:
        fail(f"{path}: {row!r} has {cell!r} where a number belongs")


def rate(value):
    """At most three significant digits, trailing zeros dropped ("%.3g"), as the README's
    tables give rates: 24.0 is "24", 0.500 is "0.5"."""
    return f"{value:.3g}"


def comparable(first_path, first, path, other):
    """Stops unless two outputs (as `parse` returns them) ran on the same machine, whose ratios
    do not combine with another's (see the README on the two VMs), and measured the same
    capacities."""
    if other[0] != first[0]:
        fail(f"{path} ran on another machine than {first_path}:\n  {other[0]}\n  {first[0]}")
    if list(other[2]) != list(first[2]):
        fail(f"{path} measured capacities {list(other[2])}, {first_path} {list(first[2])}")


def parse_alike(paths):
    """Every output's `parse`, checked to be `comparable` with the first and to have the same
    rows in the same order."""
    outputs = [parse(p) for p in paths]
    capacities = list(outputs[0][2])
    for path, output in zip(paths, outputs):
        comparable(paths[0], outputs[0], path, output)
        tables = output[2]
        for capacity in capacities:
            if len(tables[capacity]) != len(outputs[0][2][capacity]):
                fail(f"{path}: the table of {capacity} ids has {len(tables[capacity])} rows, "
                     f"{paths[0]}'s {len(outputs[0][2][capacity])} (one cut short?)")
            measures = [row[0] for row in tables[capacity]]
            if measures != [row[0] for row in outputs[0][2][capacity]]:
                fail(f"{path}: the rows at {capacity} ids differ from {paths[0]}'s")
    return outputs


def combine(paths):
    outputs = parse_alike(paths)
    machine = outputs[0][0]
    capacities = list(outputs[0][2])
    out = [machine, f"{len(paths)} invocations."]
    sizes = sorted({mib for _, latency, _ in outputs for mib in latency})
    reads = []
    for mib in sizes:
        ns = [latency[mib] for _, latency, _ in outputs if mib in latency]
        low, high = min(ns), max(ns)
        reads.append(f"{low}-{high} ns at {mib} MiB" if low != high else f"{low} ns at {mib} MiB")
    if reads:
        out.append("A dependent random read took " + ", ".join(reads) + ".")
    for capacity in capacities:
        out += ["", f"At {capacity:,} ids:", ""]
        out.append(
            "| measure | unit | reference (std) | proposal (parking_lot) | kvreuse | vs std "
            "| vs parking_lot | bar |"
        )
        out.append("|---|---|---:|---:|---:|---:|---:|---|")
        rows = outputs[0][2][capacity]
        for i, (measure, unit, cells) in enumerate(rows):
            per_run = [tables[capacity][i][2] for _, _, tables in outputs]
            bar = cells[5]
            if measure == "heap bytes per entry":
                # The same in every invocation: the layout, not a timing.
                out.append(f"| {measure} | {unit} | {' | '.join(cells[:5])} | {bar} |")
                continue
            rates = [
                rate(statistics.median(number(run[k], path, measure) for run, path in zip(per_run, paths)))
                for k in range(3)
            ]
            if measure.startswith("flood"):
                # Each contender against itself: its own figure is the ratio.
                out.append(f"| {measure} | {unit} | {' | '.join(rates)} |  |  | {bar} |")
                continue
            ratios = []
            for k in (3, 4):
                values = [number(run[k], path, measure) for run, path in zip(per_run, paths)]
                ratios.append(
                    f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"
                )
            out.append(f"| {measure} | {unit} | {' | '.join(rates)} | {' | '.join(ratios)} | {bar} |")
    return "\n".join(out)


def main():
    if len(sys.argv) < 2:
        fail("usage: history_set.py OUTPUT... (the saved outputs of the history bench)")
    print(combine(sys.argv[1:]))


if __name__ == "__main__":
    main()
