#!/usr/bin/env python3
"""Import cycles among the files of a Rust crate (text only, no build).

Reads every `crate::` and `super::` path, follows it through the re-exports (`pub use`,
`pub(crate) use`) of folder index files (`actors.rs` re-exports what `actors/shard.rs`
defines), and reports each strongly connected set of files. Following re-exports matters:
with private modules, a file names its neighbour through the folder's index, and a check
that stopped at the index would not see the edge.

Usage: module_cycles.py CRATE_SRC_DIR [ALLOWED_PAIR ...]
  ALLOWED_PAIR = a.rs:b.rs, a supervisor and an actor it supervises.
Exit status 0 iff no cycle but the allowed pairs."""
import os, re, sys
src = os.path.abspath(sys.argv[1])
allowed = {tuple(sorted(p.split(":"))) for p in sys.argv[2:]}
files = {}
for d, _, fs in os.walk(src):
    for f in fs:
        if f.endswith(".rs"):
            rel = os.path.relpath(os.path.join(d, f), src)[:-3].split(os.sep)
            mod = () if rel[-1] in ("lib", "main") else (tuple(rel[:-1]) if rel[-1] == "mod" else tuple(rel))
            files[mod] = os.path.relpath(os.path.join(d, f), src)
strip = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"", re.S)
texts = {m: strip.sub("", open(os.path.join(src, p)).read()).split("#[cfg(test)]")[0] for m, p in files.items()}
# re-exports: index module -> name -> child module path
reexp = {}
for m, t in texts.items():
    for mm in re.finditer(r"pub(?:\(crate\))?\s+use\s+([^;]+);", t):
        body = mm.group(1).replace("\n", " ")
        def expand(prefix, s):
            s = s.strip()
            if "{" in s:
                head, rest = s.split("{", 1); rest = rest.rsplit("}", 1)[0]
                parts, depth, cur = [], 0, ""
                for ch in rest:
                    if ch == "{" : depth += 1
                    if ch == "}" : depth -= 1
                    if ch == "," and depth == 0: parts.append(cur); cur = ""
                    else: cur += ch
                parts.append(cur)
                out = []
                for p in parts:
                    if p.strip(): out += expand(prefix + [x for x in head.strip().strip(":").split("::") if x], p)
                return out
            segs = [x for x in s.split(" as ")[0].split("::") if x]
            return [prefix + segs]
        for path in expand([], body):
            if path and path[0] not in ("crate", "super", "self", "std", "serde"):
                reexp.setdefault(m, {})[path[-1]] = list(m) + path[:-1]
def resolve(path, depth=0):
    for n in range(len(path), -1, -1):
        t = tuple(path[:n])
        if t in files:
            rest = path[n:]
            if rest and t in reexp and rest[0] in reexp[t] and depth < 5:
                return resolve(reexp[t][rest[0]] + rest[1:], depth + 1) or t
            return t
    return None
edges = {m: set() for m in files}
for m, t in texts.items():
    for mm in re.finditer(r"\b(crate|super)((?:::\w+)+)", t):
        segs = mm.group(2).strip(":").split("::")
        if mm.group(1) == "super":
            isdir = files[m].endswith(("mod.rs", "lib.rs"))
            base = list(m) if isdir else list(m[:-1])
        else:
            base = []
        tgt = resolve(base + segs)
        if tgt is not None and tgt != m and tgt != ():
            edges[m].add(tgt)
    for mm in re.finditer(r"^\s*use\s+crate::\{([^;]*)\};", t, re.M):
        for part in re.split(r",\s*(?![^{]*\})", mm.group(1)):
            segs = [s for s in re.split(r"::|\{|\}", part.strip()) if s and s != "self"]
            tgt = resolve(segs)
            if tgt and tgt != m and tgt != (): edges[m].add(tgt)
index, low, stack, on, out, i = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def sc(v):
    index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index: sc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = stack.pop(); on.discard(w); comp.append(w)
            if w == v: break
        if len(comp) > 1: out.append(comp)
for v in edges:
    if v not in index: sc(v)
n_edges = sum(len(e) for e in edges.values())
bad = []
for comp in out:
    names = sorted(files[c] for c in comp)
    if len(names) == 2 and tuple(sorted(os.path.basename(n) for n in names)) in allowed: 
        print("allowed:", ", ".join(names)); continue
    bad.append(names)
for b in bad: print("cycle:", ", ".join(b))
print(f"files: {len(files)}, edges: {n_edges}; cycles: {sum(len(b) for b in bad)} files in {len(bad)} cycles")
sys.exit(1 if bad else 0)
