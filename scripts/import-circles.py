#!/usr/bin/env python3
"""Import circles between the modules (files) of a Rust crate.

Usage: scripts/import-circles.py CRATE/src [CRATE/src ...]

Every file is a module (src/a/b.rs and src/a/b/mod.rs are both `a::b`); an
edge runs from a file to each module it names through a `crate::` path (a
`use` line or an inline path; test modules count too). A path is credited to
the longest module prefix that exists, so `crate::a::b::Item` is an edge to
`a::b`. Prints every strongly connected component of more than one module
and exits 1 if there is one.
"""
import os
import re
import sys

PATH = re.compile(r"crate((?:::[A-Za-z_][A-Za-z0-9_]*)+)(::\{)?")


def modules(src):
    found = {}
    for folder, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            file = os.path.join(folder, name)
            parts = os.path.relpath(file, src)[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            found[tuple(parts)] = file
    return found


def group_items(text, start):
    """The comma-separated items of the `{...}` opening at `start`, nested groups flattened."""
    depth, i, item, items, prefix = 1, start, "", [], [[]]
    while i < len(text) and depth:
        ch = text[i]
        if ch == "{":
            prefix.append(prefix[-1] + [p for p in item.strip().split("::") if p])
            item, depth = "", depth + 1
        elif ch == "}":
            if item.strip():
                items.append(prefix[-1] + item.strip().split(" as ")[0].split("::"))
            item, depth = "", depth - 1
            prefix.pop()
        elif ch == ",":
            if item.strip():
                items.append(prefix[-1] + item.strip().split(" as ")[0].split("::"))
            item = ""
        else:
            item += ch
        i += 1
    return [[p for p in it if p and p != "self"] for it in items]


def edges(mods):
    out = {m: set() for m in mods}
    for mod, file in mods.items():
        text = re.sub(r"//[^\n]*", "", open(file, encoding="utf-8").read())
        for m in PATH.finditer(text):
            base = [p for p in m.group(1).split("::") if p]
            targets = [base]
            if m.group(2):
                targets = [base + item for item in group_items(text, m.end())]
            for path in targets:
                for k in range(len(path), 0, -1):
                    if tuple(path[:k]) in mods:
                        if tuple(path[:k]) != mod:
                            out[mod].add(tuple(path[:k]))
                        break
    return out


def circles(graph):
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(100000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted("::".join(c) or "crate" for c in comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    bad = False
    for src in sys.argv[1:]:
        found = circles(edges(modules(src)))
        for comp in found:
            print(f"{src}: circle of {len(comp)} modules: {', '.join(comp)}")
        print(f"{src}: {len(found)} import circle(s)")
        bad |= bool(found)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
