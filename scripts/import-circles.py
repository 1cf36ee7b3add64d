#!/usr/bin/env python3
"""Import circles between the modules (files) of a Rust crate.

Usage: scripts/import-circles.py [--known FILE] CRATE/src [CRATE/src ...]

Every file is a module (src/a/b.rs and src/a/b/mod.rs are both `a::b`). An
edge runs from a file to each module it names by any path form: `crate::`,
`super::` (any number of them), `self::`, and a child module's own name
(`child::Item` in the file that declares `mod child;`), in a `use` line, a
`{...}` group or an inline path; test modules count too. `super` and `self` are resolved
from the module they are written in, inline `mod name { ... }` blocks
included, so `use super::*` in a file's `mod tests` names the file itself.
Visibility (`pub(super)`, `pub(in crate::a)`) is no import, nor is a plain
`mod child;` declaration. A path is credited to the longest module prefix
that exists, so `crate::a::b::Item` is an edge to `a::b`. Prints every
strongly connected component of more than one module, with the arrows inside
it, and exits 1 if there is one.

With `--known FILE`, a circle listed there (one a line: `CRATE/src: a, b, c`,
its modules sorted, `#` comments) is reported as known debt and does not
fail the run; a listed circle that no longer exists does, so the list can
only shrink.
"""
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH = re.compile(r"\b(crate|super|self)\b((?:\s*::\s*(?:" + IDENT + r"))*)(\s*::\s*\{)?")
INLINE_MOD = re.compile(r"\bmod\s+(" + IDENT + r")\s*\{")
CHILD_MOD = re.compile(r"\bmod\s+(" + IDENT + r")\s*;")


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


def strip(text):
    """Source without comments, string and char literals, and visibility paths.

    One pass, so that `//` inside a string and a quote inside a comment are
    both read as what they are."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif ch == "r" and re.match(r'r#*"', text[i:]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
        elif ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif ch == "'":
            # A char literal ('x', '\n', '\u{1F}'), else a lifetime ('a).
            m = re.match(r"'(?:\\(?:u\{[0-9a-fA-F]+\}|.)|[^'\\])'", text[i:])
            if m:
                i += m.end()
                out.append("' '")
            else:
                out.append(ch)
                i += 1
        else:
            out.append(ch)
            i += 1
    text = "".join(out)
    return re.sub(r"\bpub\s*\(\s*(?:crate|super|self|in\s+[^)]*)\s*\)", "pub", text)


def inline_scopes(text):
    """(start, end, names) of every inline `mod name { ... }` block, names nested outside-in."""
    opens = {m.end() - 1: m.group(1) for m in INLINE_MOD.finditer(text)}
    stack, scopes = [], []
    for i, ch in enumerate(text):
        if ch == "{":
            stack.append((i, opens.get(i)))
        elif ch == "}" and stack:
            start, name = stack.pop()
            if name is not None:
                outer = [n for _, n in stack if n is not None]
                scopes.append((start, i, tuple(outer + [name])))
    return scopes


def scope_at(scopes, pos):
    best = ()
    for start, end, names in scopes:
        if start < pos < end and len(names) > len(best):
            best = names
    return best


def group_items(text, start):
    """The comma-separated paths of the `{...}` opening at `start`, nested groups flattened."""
    depth, i, item, items, prefix = 1, start, "", [], [[]]
    while i < len(text) and depth:
        ch = text[i]
        if ch == "{":
            prefix.append(prefix[-1] + [p.strip() for p in item.strip().split("::") if p.strip()])
            item, depth = "", depth + 1
        elif ch in "},":
            if item.strip():
                items.append(prefix[-1] + [p.strip() for p in item.strip().split(" as ")[0].split("::")])
            item = ""
            if ch == "}":
                depth -= 1
                prefix.pop()
        else:
            item += ch
        i += 1
    return [[p for p in it if p] for it in items]


def absolute(here, head, rest):
    """The crate-absolute path of `head::rest` written in module `here`, or None."""
    if head == "crate":
        base = []
    else:
        base = list(here)
        if head == "super":
            if not base:
                return None
            base.pop()
    while rest and rest[0] in ("super", "self"):
        if rest[0] == "super":
            if not base:
                return None
            base.pop()
        rest = rest[1:]
    return base + rest


def resolve(mods, path):
    for k in range(len(path), -1, -1):
        if tuple(path[:k]) in mods:
            return tuple(path[:k])
    return None


def edges(mods):
    out = {m: set() for m in mods}
    for mod, file in mods.items():
        with open(file, encoding="utf-8", errors="replace") as f:
            text = strip(f.read())
        scopes = inline_scopes(text)
        children = sorted(set(CHILD_MOD.findall(text)))
        if children:
            # `child::x` is relative to the declaring module; a path that is
            # itself the tail of a longer one (`a::child::x`) is not.
            # The `\b` after the names: without it `record` would match the
            # head of `record_split::x` and hide that path.
            rel = re.compile(r"(?<![A-Za-z0-9_:])\s*\b(" + "|".join(children) + r")\b((?:\s*::\s*" + IDENT + r")*)(\s*::\s*\{)?")
            for m in rel.finditer(text):
                if not m.group(2) and not m.group(3):
                    continue
                rest = [m.group(1)] + [p.strip() for p in m.group(2).split("::") if p.strip()]
                tails = [rest]
                if m.group(3):
                    tails = [rest + item for item in group_items(text, m.end())]
                for tail in tails:
                    target = resolve(mods, list(mod) + tail)
                    if target is not None and target != mod:
                        out[mod].add(target)
        for m in PATH.finditer(text):
            here = list(mod) + list(scope_at(scopes, m.start()))
            rest = [p.strip() for p in m.group(2).split("::") if p.strip()]
            tails = [rest]
            if m.group(3):
                tails = [rest + item for item in group_items(text, m.end())]
            for tail in tails:
                path = absolute(here, m.group(1), tail)
                target = resolve(mods, path) if path is not None else None
                if target is not None and target != mod:
                    out[mod].add(target)
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
        for w in sorted(graph[v]):
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
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def name(m):
    return "::".join(m) or "crate"


def read_known(path):
    known = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                src, mods = line.split(":", 1)
                known.add((src.strip(), tuple(m.strip() for m in mods.split(","))))
    return known


def main():
    args = sys.argv[1:]
    known = set()
    if args[:1] == ["--known"]:
        if len(args) < 2:
            sys.exit(__doc__)
        known, args = read_known(args[1]), args[2:]
    if not args:
        sys.exit(__doc__)
    bad = False
    seen = set()
    for src in args:
        graph = edges(modules(src))
        found = circles(graph)
        for comp in found:
            members = set(comp)
            key = (src.rstrip("/"), tuple(name(c) for c in comp))
            listed = key in known
            seen.add(key)
            tag = " (known, listed in --known)" if listed else ""
            print(f"{src}: circle of {len(comp)} modules{tag}: {', '.join(name(c) for c in comp)}")
            for a in comp:
                for b in sorted(graph[a] & members):
                    print(f"    {name(a)} -> {name(b)}")
            bad |= not listed
        print(f"{src}: {len(found)} import circle(s)")
    for src, mods in sorted(known - seen):
        if src in (a.rstrip("/") for a in args):
            print(f"{src}: the known circle {', '.join(mods)} is gone: remove it from the --known list")
            bad = True
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
