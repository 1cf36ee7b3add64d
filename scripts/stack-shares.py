#!/usr/bin/env python3
"""Shares of profile samples, by what their stacks pass through.

Usage: scripts/stack-shares.py STACKS ROOT NAME=PATTERN [NAME=PATTERN ...]

STACKS is `perf script -F ip,sym` output of a `perf record --call-graph
dwarf` run (one frame a line, a blank line between samples). Of the samples
whose stack has a frame containing ROOT, prints for each NAME the share whose
stack has a frame containing PATTERN (inclusive time, as a flame graph's
width). How docs/BENCHMARKS.md splits the witness pass between gadgets:

    perf record --call-graph dwarf,16384 -F 150 -o perf.data \\
        witness_cost OUT_DIR 1 4
    perf script -i perf.data -F ip,sym > stacks.txt
    scripts/stack-shares.py stacks.txt compiled::witness::assign \\
        sha256=gadgets::sha256::sha256 labels=create_label_circuit ...
"""
import sys


def samples(path):
    stack = []
    with open(path, errors="replace") as f:
        for line in f:
            frame = line.strip()
            if not frame:
                if stack:
                    yield stack
                stack = []
                continue
            # "ADDRESS SYMBOL": the symbol is what the patterns match.
            stack.append(frame.split(" ", 1)[-1])
    if stack:
        yield stack


def main(args):
    if len(args) < 3 or any("=" not in a for a in args[2:]):
        sys.exit(__doc__.strip().splitlines()[2])
    path, root = args[0], args[1]
    patterns = [a.split("=", 1) for a in args[2:]]
    total = 0
    under_root = []
    for stack in samples(path):
        total += 1
        if any(root in f for f in stack):
            under_root.append(stack)
    print(f"{len(under_root)} of {total} samples under {root}")
    for name, pattern in patterns:
        hits = sum(1 for s in under_root if any(pattern in f for f in s))
        share = 100.0 * hits / max(1, len(under_root))
        print(f"  {name:30s} {share:5.1f}%")


if __name__ == "__main__":
    main(sys.argv[1:])
