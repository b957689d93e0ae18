"""Compares two builds of the history bench: kvreuse's rate in one against its rate in the
other, row by row, from invocations run in pairs.

Run by scripts/bench-compare, or alone on saved outputs:

    python3 scripts/history_pair.py BASE_OUTPUT... -- CHANGED_OUTPUT...

The i-th output of each side form a pair (scripts/bench-compare runs a pair's two invocations
back to back, alternating which goes first). The two builds' benches may have different rows
(a build from before a row was added): the rows both have are compared, matched by name, and
the others are named under the table. For each row the table gives the median and range
over the pairs of the changed build's figure divided by the base build's: kvreuse's, which is
what the change is about, and the two references', whose code the builds share. A reference's
ratio is not about the change: it shows how far a rate moves between invocations by chance
on this VM, which is how to read kvreuse's.
"""

import statistics
import sys

from history_set import comparable, fail, number, parse_alike


def ratio_cell(values):
    """The median and range of a row's per-pair ratios, as "x1.107 (1.10-1.12)"."""
    return f"x{statistics.median(values):.3f} ({min(values):.2f}-{max(values):.2f})"


def row_index(rows, path, capacity):
    """Where each measure's row is in a table ({measure: index}); a measure must not repeat."""
    index = {}
    for i, (measure, _, _) in enumerate(rows):
        if measure in index:
            fail(f"{path}: the table of {capacity} ids has the row {measure!r} twice")
        index[measure] = i
    return index


def compare(base_paths, changed_paths):
    if len(base_paths) != len(changed_paths):
        fail(f"{len(base_paths)} base outputs but {len(changed_paths)} changed ones: "
             "outputs compare in pairs")
    # Each side's outputs come from one bench build, so they have the same rows, in the same
    # order; the two sides need only be comparable.
    base_outputs, changed_outputs = parse_alike(base_paths), parse_alike(changed_paths)
    comparable(base_paths[0], base_outputs[0], changed_paths[0], changed_outputs[0])
    capacities = list(base_outputs[0][2])
    pairs = list(zip(base_outputs, changed_outputs, base_paths, changed_paths))
    count = f"{len(pairs)} pair" + ("" if len(pairs) == 1 else "s")
    out = [base_outputs[0][0], f"{count}: the changed build's figure divided by the base "
           "build's, median (range)."]
    for capacity in capacities:
        out += ["", f"At {capacity:,} ids:", ""]
        out.append("| measure | kvreuse | reference (std) | proposal (parking_lot) |")
        out.append("|---|---:|---:|---:|")
        base_rows = row_index(base_outputs[0][2][capacity], base_paths[0], capacity)
        changed_rows = row_index(changed_outputs[0][2][capacity], changed_paths[0], capacity)
        shared = [m for m in base_rows if m in changed_rows]
        if not shared:
            fail(f"{base_paths[0]} and {changed_paths[0]} share no row at {capacity} ids")
        for measure in shared:
            ratios = [[], [], []]
            for (_, _, base), (_, _, changed), base_path, changed_path in pairs:
                before_cells = base[capacity][base_rows[measure]][2]
                after_cells = changed[capacity][changed_rows[measure]][2]
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
        for side, rows, other in (("base", base_rows, changed_rows),
                                  ("changed", changed_rows, base_rows)):
            alone = [m for m in rows if m not in other]
            if alone:
                out += ["", f"Only the {side} build's bench has: " + "; ".join(alone) + "."]
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
