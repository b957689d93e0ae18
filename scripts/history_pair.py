"""Compares two builds of the history bench: kvreuse's rate in one against its rate in the
other, row by row, from invocations run in pairs.

Run by scripts/bench-compare, or alone on saved outputs:

    python3 scripts/history_pair.py BASE_OUTPUT... -- CHANGED_OUTPUT...

The i-th output of each side form a pair (scripts/bench-compare runs a pair's two invocations
back to back, alternating which goes first). For each row the table gives the median and range
over the pairs of the changed build's figure divided by the base build's: kvreuse's, which is
what the change is about, and the two references', whose code the builds share. A reference's
ratio is not about the change: it shows how far a rate moves between invocations by chance
on this VM, which is how to read kvreuse's.
"""

import statistics
import sys

from history_set import fail, number, parse_alike


def ratio_cell(values):
    """The median and range of a row's per-pair ratios, as "x1.107 (1.10-1.12)"."""
    return f"x{statistics.median(values):.3f} ({min(values):.2f}-{max(values):.2f})"


def compare(base_paths, changed_paths):
    if len(base_paths) != len(changed_paths):
        fail(f"{len(base_paths)} base outputs but {len(changed_paths)} changed ones: "
             "outputs compare in pairs")
    paths = base_paths + changed_paths
    outputs = parse_alike(paths)
    machine = outputs[0][0]
    capacities = list(outputs[0][2])
    pairs = list(zip(outputs[: len(base_paths)], outputs[len(base_paths):], base_paths,
                     changed_paths))
    count = f"{len(pairs)} pair" + ("" if len(pairs) == 1 else "s")
    out = [machine, f"{count}: the changed build's figure divided by the base build's, median "
           "(range)."]
    for capacity in capacities:
        out += ["", f"At {capacity:,} ids:", ""]
        out.append("| measure | kvreuse | reference (std) | proposal (parking_lot) |")
        out.append("|---|---:|---:|---:|")
        rows = outputs[0][2][capacity]
        for i, (measure, _, _) in enumerate(rows):
            ratios = [[], [], []]
            for (_, _, base), (_, _, changed), base_path, changed_path in pairs:
                before_cells, after_cells = base[capacity][i][2], changed[capacity][i][2]
                for k in range(3):
                    before = number(before_cells[k], base_path, measure)
                    after = number(after_cells[k], changed_path, measure)
                    if before <= 0:
                        fail(f"{base_path}: {measure!r} has {before}, which nothing divides by")
                    ratios[k].append(after / before)
            # The bench's columns are the std replica, the proposal, kvreuse; kvreuse first
            # here. A reference's ratio only tells the noise between invocations, except in the
            # heap row (the same bytes every time) and the flood row (each contender against
            # itself).
            columns = (ratios[2], ratios[0], ratios[1])
            out.append(f"| {measure} | {' | '.join(ratio_cell(r) for r in columns)} |")
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    if "--" not in args:
        fail("usage: history_pair.py BASE_OUTPUT... -- CHANGED_OUTPUT...")
    split = args.index("--")
    base, changed = args[:split], args[split + 1:]
    if not base:
        fail("no outputs to compare (usage: history_pair.py BASE_OUTPUT... -- CHANGED_OUTPUT...)")
    print(compare(base, changed))


if __name__ == "__main__":
    main()
