#!/usr/bin/env python3
"""Fail on an import cycle between the modules of one crate, and on a crate dependency
that runs upward.

Modules: each `.rs` file of a crate's `src/` is one module (`a/mod.rs` and `a.rs` are
`a`). An edge `m -> n` is a path in `m`'s code (a `use` tree or an inline path) that names
an item of `n` through `crate::`, `super::` or `self::`. Code under `#[cfg(test)]` (a test
module inline or in its own file) is left out: tests may reach anywhere. An edge between
a module and its own parent (`engine/mod.rs` declaring and using `engine/lease.rs`, which
names `super::Engine`) is how Rust nests modules and is not counted; every other pair,
siblings included, must point one way.

Crates: `LAYERS` lists the workspace's crates from the bottom up; a crate may depend
only on crates on a lower layer (or its own). Cargo already refuses a cycle between
crates; this keeps the layering itself from eroding (storage reaching for the engine,
say) and names the crates it does not know.

Usage: `.ci/cycles.py` from the repository root; exit 1 with every cycle and upward
edge printed.
"""

import json
import os
import re
import subprocess
import sys

# Bottom to top. Crates on one line share a layer and may not depend on each other.
LAYERS = [
    ["hookd-core", "hookd-proto"],
    ["hookd-metrics", "hookd-client"],
    ["hookd-storage"],
    ["hookd-delivery"],
    ["hookd-engine", "hookd-ctl"],
    ["hookd"],
    ["hookd-testkit"],
    ["hookd-loadtest"],
    ["hookd-bench", "hookd-tests"],
]

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(src):
    """Blank out comments and string/char literals, keeping line structure."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 70]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i + 12]):
            m = re.match(r"'(\\[^']*|[^\\'])'", src[i:])
            i += len(m.group(0)) if m else 1
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(src, open_at):
    depth = 0
    for j in range(open_at, len(src)):
        if src[j] == "{":
            depth += 1
        elif src[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(src) - 1


CFG_TEST = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*([;{])")


def without_tests(src):
    """The code with inline `#[cfg(test)] mod x { .. }` removed, and the names of
    `#[cfg(test)] mod x;` declared here (their files are test-only)."""
    test_files = set()
    while True:
        m = CFG_TEST.search(src)
        if not m:
            return src, test_files
        if m.group(2) == ";":
            test_files.add(m.group(1))
            src = src[: m.start()] + src[m.end():]
        else:
            end = matching_brace(src, m.end() - 1)
            src = src[: m.start()] + "\n" * src.count("\n", m.start(), end) + src[end + 1:]


def use_paths(tree, prefix):
    """Expand a `use` tree (text after `use`) into full paths of segments."""
    tree = tree.strip()
    if not tree:
        return []
    # Split the top level at `::{`.
    brace = tree.find("{")
    if brace < 0:
        segs = [s.strip() for s in tree.split(" as ")[0].split("::") if s.strip()]
        return [prefix + segs]
    head = [s.strip() for s in tree[:brace].split("::") if s.strip()]
    close = matching_brace(tree, brace)
    inner = tree[brace + 1: close]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    paths = []
    for p in parts:
        if p.strip() == "self":
            paths.append(prefix + head)
        else:
            paths.extend(use_paths(p, prefix + head))
    return paths


def crate_modules(src_dir):
    """Map module path (tuple) -> file, for every .rs file under src_dir."""
    mods = {}
    for root, _dirs, files in os.walk(src_dir):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(root, f), src_dir)
            parts = rel[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]):
                parts = []
            if parts and parts[0] == "bin":
                continue
            mods[tuple(parts)] = os.path.join(root, f)
    return mods


def resolve(path, here, mods):
    """The module a path in module `here` names, or None when it leaves the crate."""
    if not path:
        return None
    first = path[0]
    if first == "crate":
        base, rest = (), path[1:]
    elif first in ("super", "self"):
        base, rest = here, path
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    else:
        return None
    best = base if base in mods else None
    cur = base
    for seg in rest:
        cur = cur + (seg,)
        if cur in mods:
            best = cur
        else:
            break
    return best


def module_edges(src_dir):
    mods = crate_modules(src_dir)
    test_only = set()
    edges = {}
    texts = {}
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as fh:
            code, tests = without_tests(strip_comments_and_strings(fh.read()))
        texts[mod] = code
        for t in tests:
            test_only.add(mod + (t,))
    for mod, code in texts.items():
        if any(mod[: len(t)] == t for t in test_only):
            continue
        targets = set()
        for m in re.finditer(r"\buse\s+((?:crate|super|self)\b[^;]*);", code):
            for p in use_paths(m.group(1), []):
                targets.add(resolve(p, mod, mods))
        for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:crate|super|self)(?:::" + IDENT + r")+)", code):
            targets.add(resolve(m.group(1).split("::"), mod, mods))
        for t in targets:
            if t is None or t == mod or any(t[: len(x)] == x for x in test_only):
                continue
            # A module and its own parent: nesting, not layering.
            if t == mod[:-1] or mod == t[:-1]:
                continue
            edges.setdefault(mod, set()).add(t)
    return mods, edges


def cycles(nodes, edges):
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def name(mod):
    return "::".join(mod) if mod else "(root)"


def main():
    meta = json.loads(subprocess.check_output(["cargo", "metadata", "--format-version", "1", "--no-deps"]))
    layer_of = {c: i for i, layer in enumerate(LAYERS) for c in layer}
    failed = False
    for pkg in meta["packages"]:
        crate = pkg["name"]
        if crate not in layer_of:
            print(f"crate {crate} is in no layer of .ci/cycles.py: place it")
            failed = True
            continue
        for dep in pkg["dependencies"]:
            if dep["kind"] == "dev" or dep["name"] not in layer_of:
                continue
            if layer_of[dep["name"]] >= layer_of[crate] and dep["name"] != crate:
                print(f"crate {crate} (layer {layer_of[crate]}) depends on {dep['name']} (layer {layer_of[dep['name']]}): upward or sideways")
                failed = True
        src_dirs = {os.path.dirname(t["src_path"]) for t in pkg["targets"] if "lib" in t["kind"] or "bin" in t["kind"]}
        for src_dir in sorted(src_dirs):
            if not src_dir.endswith("src"):
                continue
            mods, edges = module_edges(src_dir)
            for comp in cycles(mods.keys(), edges):
                failed = True
                print(f"import cycle in {crate} ({os.path.relpath(src_dir)}):")
                for m in comp:
                    inside = sorted(name(t) for t in edges.get(m, ()) if t in comp)
                    print(f"  {name(m)} -> {', '.join(inside)}")
            # The top-level modules must point one way as well (a loop through several
            # files is a cycle however it is nested).
            top = {}
            for m, ts in edges.items():
                for t in ts:
                    if m[:1] != t[:1] and m and t:
                        top.setdefault(m[:1], set()).add(t[:1])
            for comp in cycles({m[:1] for m in mods if m}, top):
                failed = True
                print(f"top-level module cycle in {crate}: {' <-> '.join(name(m) for m in comp)}")
    if failed:
        sys.exit(1)
    print("no import cycle; every crate dependency points down")


if __name__ == "__main__":
    main()
