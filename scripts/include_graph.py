#!/usr/bin/env python3
"""The shape of the tree, checked: which room includes which, and how big
things grow.

Every #include "..." in src/ and include/edge0.h is an edge. Each folder of
src/ is a room on a floor (FLOORS below, bottom to top); a file may include
its own room, a room on a lower floor, or (with no cycle) a room on its own
floor. The script fails (exit 1, one line per offence) on

  - an upward include: a room including a room on a higher floor;
  - a cycle between rooms (two rooms on one floor including each other);
  - a cycle between files, a file being a module: a .c with the .h of the
    same name (a.c or a.h includes b.h while b.c or b.h includes a.h); a
    header with no .c of its own (model.h, kernels.h) is seen through;
  - a front (server/, cli/) including a library header other than edge0.h
    and util/'s (FRONT_ALLOWED lists the exceptions, each with its reason);
  - with --objects DIR (a build directory, e.g. build): a cycle between
    modules in what their objects call (nm: module a's object uses a symbol
    that b's object defines, and b's uses one of a's). A header shared by
    several .c files (model.h, kernels.h) hides such circles from the
    include graph; the symbols do not;
  - a file in src/ over MAX_FILE_LINES lines, or a function over
    MAX_FUNC_LINES lines (from its opening line to its closing brace)
    outside the SIMD kernels (src/quant/kernels_*.c; their files still
    count).

  scripts/include_graph.py                   check; print "ok" and a summary
  scripts/include_graph.py --objects build   also check the call graph
  scripts/include_graph.py --graph           print the room graph
  scripts/include_graph.py --dot FILE        write the room graph as DOT

Standard library only (python3 >= 3.6); nm from binutils for --objects.
"""
import collections
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Bottom to top. Rooms on one floor may include each other one way only.
FLOORS = [
    ["util"],                 # allocation, files, errors, clocks, pools
    ["io", "quant"],          # file formats; number formats and kernels
    ["weights"],              # the weights' views: e0_model, e0_layer, e0_expert
    ["stream", "gpu"],        # the expert cache and the streaming MoE layer; the CUDA backend
    ["model"],                # the forward pass and sessions
    ["synth", "convert"],     # checkpoint writers
    ["text"],                 # tokenizer, chat template, sampler, grammar
    ["server"],               # the HTTP front
    ["cli"],                  # the edge0 command
]
FLOOR = {room: i for i, rooms in enumerate(FLOORS) for room in rooms}
PUBLIC = "include/edge0.h"
FRONTS = ("server", "cli")
# What a front may include besides edge0.h and its own room, and why.
# util/ (the ground floor: buffers, errors, clocks, files, thread counts)
# knows nothing of models; the fronts use its helpers rather than a copy of
# their own (one helper per job) or a public API widened with them.
FRONT_ROOMS = {"util"}
FRONT_ALLOWED = {
    # `edge0 serve` starts the server: the server's one entry header, which
    # itself includes only edge0.h.
    "cli": {"src/server/server.h"},
}
GENERATED = {"version.h"}  # written by the Makefile into build/

MAX_FILE_LINES = 1000
MAX_FUNC_LINES = 120
FUNC_EXEMPT = re.compile(r"^src/quant/kernels_[^/]*\.c$")

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources():
    out = []
    src = os.path.join(ROOT, "src")
    for room in sorted(os.listdir(src)):
        d = os.path.join(src, room)
        if not os.path.isdir(d):
            continue
        for f in sorted(os.listdir(d)):
            if f.endswith((".c", ".h")):
                out.append("src/%s/%s" % (room, f))
    if os.path.exists(os.path.join(ROOT, PUBLIC)):
        out.append(PUBLIC)
    return out


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        return f.read()


def room_of(path):
    return "include" if path == PUBLIC else path.split("/")[1]


def module_of(path):
    return path.rsplit(".", 1)[0]


def resolve(path, inc, known):
    """The repository path an include names, or None (system/generated)."""
    for cand in (os.path.normpath(os.path.join(os.path.dirname(path), inc)),
                 "src/" + inc, "include/" + inc):
        if cand in known:
            return cand
    return None


def sccs(graph):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            pushed = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    pushed = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if pushed:
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


def cycle_path(graph, comp):
    """One cycle through the component, as 'a -> b -> a'."""
    comp_set = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w not in comp_set:
                continue
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return " -> ".join(reversed(path)) + " -> " + start
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return " <-> ".join(comp)


def through_headers(graph, with_c):
    """The module graph with header-only modules (a .h with no .c: model.h,
    kernels.h, tokenizer_impl.h) seen through: such a header is a piece of
    the interface of the modules that include it, so a.c including it means
    a.c depends on what it includes. Edges between modules with a .c (and
    from the public header) remain."""
    def reach(m, seen):
        out = set()
        for t in graph.get(m, ()):
            if t in seen:
                continue
            seen.add(t)
            if t in with_c:
                out.add(t)
            else:
                out |= reach(t, seen)
        return out
    return {m: {t for t in reach(m, {m}) if t != m} for m in list(graph) if m in with_c}


def strip_c(text):
    """Comments, strings and character literals blanked, newlines kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j]) + c)
            i = j + 1
        elif c == "#" and (i == 0 or text[i - 1] == "\n" or text[:i].rstrip(" \t").endswith("\n")):
            # a preprocessor line (with continuations) holds no braces we count
            j = i
            while True:
                k = text.find("\n", j)
                if k < 0:
                    k = n
                    break
                if text[k - 1] != "\\":
                    break
                j = k + 1
            out.append(re.sub(r"[^\n]", " ", text[i:k]))
            i = k
        else:
            out.append(c)
            i += 1
    return "".join(out)


FUNC_HEAD_RE = re.compile(r"([A-Za-z_]\w*)\s*\([^;{}]*\)\s*$", re.S)


def functions(text):
    """(name, first line, last line) of each top-level function body."""
    s = strip_c(text)
    out = []
    depth = 0
    start = None
    head_from = 0
    for i, c in enumerate(s):
        if c == "{":
            if depth == 0:
                head = s[head_from:i]
                m = FUNC_HEAD_RE.search(head)
                if m and not re.search(r"=\s*$", head) and m.group(1) not in (
                        "if", "for", "while", "switch", "sizeof"):
                    start = (m.group(1), s.count("\n", 0, head_from + m.start()) + 1)
                else:
                    start = None
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                if start:
                    out.append((start[0], start[1], s.count("\n", 0, i) + 1))
                start = None
                head_from = i + 1
        elif c == ";" and depth == 0:
            head_from = i + 1
    return out


def main(argv):
    objects = None
    dot = None
    show = False
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--objects" and args:
            objects = args.pop(0)
        elif a == "--dot" and args:
            dot = args.pop(0)
        elif a == "--graph":
            show = True
        else:
            print(__doc__)
            return 2

    files = sources()
    known = set(files)
    problems = []
    room_edges = collections.defaultdict(collections.Counter)  # room -> room -> count
    room_graph = collections.defaultdict(set)
    mod_graph = collections.defaultdict(set)
    why = {}  # (room, room) -> one example edge
    for path in files:
        text = read(path)
        room = room_of(path)
        if room != "include" and room not in FLOOR:
            problems.append("%s: room %s/ has no floor in scripts/include_graph.py" % (path, room))
            continue
        for inc in INCLUDE_RE.findall(text):
            target = resolve(path, inc, known)
            if target is None:
                if os.path.basename(inc) not in GENERATED:
                    problems.append("%s: includes \"%s\", which is not in the tree" % (path, inc))
                continue
            troom = room_of(target)
            edge = "%s -> %s" % (path, target)
            if room == "include" and troom != "include":
                problems.append("public header includes an internal one: " + edge)
            if troom != room and troom != "include":
                if troom not in FLOOR:
                    continue
                room_edges[room][troom] += 1
                room_graph[room].add(troom)
                why.setdefault((room, troom), edge)
                if FLOOR[troom] > FLOOR[room]:
                    problems.append("upward include (%s/ floor %d -> %s/ floor %d): %s"
                                    % (room, FLOOR[room], troom, FLOOR[troom], edge))
                if (room in FRONTS and troom not in FRONT_ROOMS
                        and target not in FRONT_ALLOWED.get(room, ())):
                    problems.append("front %s/ includes a library header other than edge0.h: %s"
                                    % (room, edge))
            if module_of(target) != module_of(path):
                mod_graph[module_of(path)].add(module_of(target))

    for comp in sccs(room_graph):
        problems.append("cycle between rooms: %s (%s)" % (
            cycle_path(room_graph, comp),
            "; ".join(why[(a, b)] for a in comp for b in comp if (a, b) in why)))
    mod_graph = through_headers(mod_graph, {module_of(f) for f in files if f.endswith(".c")})
    for comp in sccs(mod_graph):
        problems.append("cycle between files (includes): " + cycle_path(mod_graph, comp))

    if objects:
        sym_graph, sym_why, err = symbol_graph(objects)
        if err:
            problems.append(err)
        for comp in sccs(sym_graph):
            path = cycle_path(sym_graph, comp)
            hops = path.split(" -> ")
            detail = ", ".join("%s uses %s" % (a, sym_why[(a, b)])
                               for a, b in zip(hops, hops[1:]))
            rest = sorted(set(comp) - set(hops))
            problems.append("cycle between files (calls): %s (%s)%s" % (
                path, detail, "; the circle also takes in " + ", ".join(rest) if rest else ""))

    nfunc = 0
    for path in files:
        if not path.startswith("src/"):
            continue
        text = read(path)
        lines = text.count("\n")
        if lines > MAX_FILE_LINES:
            problems.append("%s: %d lines (limit %d)" % (path, lines, MAX_FILE_LINES))
        if path.endswith(".c") and not FUNC_EXEMPT.match(path):
            for name, a, b in functions(text):
                nfunc += 1
                if b - a + 1 > MAX_FUNC_LINES:
                    problems.append("%s:%d: function %s is %d lines (limit %d)"
                                    % (path, a, name, b - a + 1, MAX_FUNC_LINES))

    if show:
        print_graph(room_edges)
    if dot:
        write_dot(dot, room_edges)
    for p in problems:
        print(p)
    if problems:
        print("include_graph: %d problem(s)" % len(problems))
        return 1
    print("include_graph: ok: %d files, %d rooms, %d room edges, %d functions, "
          "no upward include, no cycle%s, files <= %d lines, functions <= %d lines"
          % (len(files), len({room_of(f) for f in files}),
             sum(len(v) for v in room_edges.values()), nfunc,
             " (includes and calls)" if objects else "", MAX_FILE_LINES, MAX_FUNC_LINES))
    return 0


def symbol_graph(objdir):
    """module -> modules whose objects define what its object uses."""
    objs = []
    for dirpath, _, names in os.walk(os.path.join(ROOT, objdir, "src")):
        for nm in names:
            obj = os.path.join(dirpath, nm)
            src = os.path.relpath(obj, os.path.join(ROOT, objdir))[:-2] + ".c"
            if nm.endswith(".o") and os.path.exists(os.path.join(ROOT, src)):
                objs.append(obj)  # not objects of sources moved away
    if not objs:
        return {}, {}, "--objects %s: no objects under %s/src" % (objdir, objdir)
    prefix = os.path.join(ROOT, objdir) + os.sep
    try:
        out = subprocess.run(["nm", "-A"] + sorted(objs), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, universal_newlines=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        return {}, {}, "--objects: nm failed: %s" % e
    defs, uses = {}, collections.defaultdict(set)
    for line in out.splitlines():
        obj, _, rest = line.partition(": ")
        if not rest:
            obj, _, rest = line.partition(":")
        mod = obj[len(prefix):-2] if obj.startswith(prefix) else obj[:-2]
        p = rest.split()
        if len(p) == 3 and p[1] in "TDBRVW":
            defs[p[2]] = mod
        elif len(p) == 2 and p[0] == "U":
            uses[mod].add(p[1])
    graph, why = collections.defaultdict(set), {}
    for mod, syms in uses.items():
        for sym in sorted(syms):
            d = defs.get(sym)
            if d and d != mod:
                graph[mod].add(d)
                why.setdefault((mod, d), sym)
    return graph, why, None


def print_graph(room_edges):
    print("rooms, bottom to top (includes per edge):")
    for i, rooms in enumerate(FLOORS):
        for room in rooms:
            deps = room_edges.get(room, {})
            print("  %d %-8s -> %s" % (i, room, ", ".join(
                "%s (%d)" % (t, deps[t]) for t in sorted(deps, key=lambda r: (-FLOOR[r], r)))
                or "-"))


def write_dot(path, room_edges):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("digraph edge0 {\n  rankdir=BT;\n  node [shape=box];\n")
        for i, rooms in enumerate(FLOORS):
            f.write("  { rank=same; %s }\n" % "; ".join('"%s"' % r for r in rooms))
        for a in sorted(room_edges):
            for b in sorted(room_edges[a]):
                f.write('  "%s" -> "%s" [label="%d"];\n' % (a, b, room_edges[a][b]))
        f.write("}\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
