#!/usr/bin/env python3
"""Published routing captures -> edge0's routing trace, for `edge0 bench --replay`
(issue 40). Standard library only.

  scripts/route_convert.py SOURCE -o OUT --layers L --experts E [--top-k K]
                           [--expert-map mod|perm] [--seed S] [--reuse-shift N]
                           [--prompt NAME] [--with-prefill]

SOURCE is one of
  - a route capture, JSON lines {"layer": "...layers.8.mlp.experts", "call": C,
    "num_tokens": N, "topk_ids": [[...k ids...], ...], "num_experts": E}: one
    line per (MoE layer, forward call); lines of several tokens (a prefill)
    are skipped unless --with-prefill. Tokens follow the order of the lines
    per layer (bench/routes/real/qwen36-routecapture5-rank0.jsonl);
  - an expert trace JSON {"num_layers", "num_experts", "top_k", "prompts":
    {NAME: {"prefill": [token][layer][k], "decode": [token][layer][k]}}}
    (bench/routes/real/granite-3.0-1b-a400m-moe_expert_trace.json): the
    decode tokens of every prompt in file order, or of --prompt NAME only;
    --with-prefill puts each prompt's prefill tokens before its decode's.

OUT gets edge0's trace (src/io/routes.h): '# layers L experts E decode_from 0
top_k K', comment lines saying the source and the mapping, then each token's
'# token T' line and one 'layer expert' line per expert, layers in order.

The target shape is the replaying model's: L layers, E experts, top-K (K
defaults to the source's and may only be smaller: a token keeps its first K
ids, the capture's order, highest router weight first). The mapping, also
printed:
  layers   target layer j takes source layer number floor(j * S / L) of the
           S source layers in depth order (S > L: every (S/L)-th one, depth
           spread kept; S < L: each source layer drives a block of about L/S
           consecutive target layers). A source layer driving several
           target layers gives each the same expert sequence: the copies are
           perfectly correlated across layers, which overstates cross-layer
           correlation (every per-layer statistic is exact; what the shared
           cache sees at once is not). --reuse-shift N makes the c-th copy of
           a source layer take the source's token t + c * N instead (mod the
           trace length): same per-layer statistics, decorrelated copies.
  experts  source E_s <= E: ids kept (experts E_s..E-1 are never asked for);
           E_s > E: id mod E (--expert-map mod, the default) or perm(id) mod E
           with perm a fixed random permutation of the E_s ids (--expert-map
           perm, --seed S, default 40); an id that collides with one the token
           already has in that layer takes the next free id (+1 mod E).
"""
import json
import random
import re
import sys


def die(msg):
    sys.stderr.write("route_convert: " + msg + "\n")
    sys.exit(2)


def layer_number(v, where):
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        m = re.search(r"layers\.(\d+)\.", v) or re.search(r"(\d+)", v)
        if m:
            return int(m.group(1))
    die("%s: no layer number in %r" % (where, v))


def read_capture(text, name, with_prefill):
    """JSON lines of a route capture: {layer: [token's ids, ...]}, E, k."""
    per, E = {}, 0
    for i, line in enumerate(text.split("\n")):
        if not line.strip():
            continue
        try:
            o = json.loads(line)
        except ValueError:
            die("%s:%d: not JSON" % (name, i + 1))
        if not isinstance(o, dict) or "topk_ids" not in o:
            die("%s:%d: no topk_ids" % (name, i + 1))
        la = layer_number(o.get("layer"), "%s:%d" % (name, i + 1))
        E = max(E, int(o.get("num_experts", 0)))
        rows = o["topk_ids"]
        if len(rows) > 1 and not with_prefill:
            continue
        per.setdefault(la, []).extend([int(x) for x in r] for r in rows)
    return per, E


def read_expert_trace(o, name, prompt, with_prefill):
    """{"prompts": {NAME: {"prefill"/"decode": [token][layer][k]}}}."""
    prompts = o.get("prompts")
    if not isinstance(prompts, dict) or not prompts:
        die("%s: no prompts" % name)
    if prompt and prompt not in prompts:
        die("%s: no prompt %r (there are: %s)" % (name, prompt, ", ".join(prompts)))
    per = {}
    for pn, p in prompts.items():
        if prompt and pn != prompt:
            continue
        toks = (p.get("prefill", []) if with_prefill else []) + p.get("decode", [])
        for t in toks:
            for la, ids in enumerate(t):
                per.setdefault(la, []).append([int(x) for x in ids])
    return per, int(o.get("num_experts", 0))


def read_source(path, prompt, with_prefill):
    try:
        text = open(path).read()
    except OSError as e:
        die("%s: %s" % (path, e.strerror))
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n{" not in stripped.strip():
        try:
            o = json.loads(text)
        except ValueError:
            o = None
        if isinstance(o, dict) and "prompts" in o:
            per, E = read_expert_trace(o, path, prompt, with_prefill)
            return per, E, "expert trace (%s)" % (prompt or "all prompts: " + ", ".join(o["prompts"]))
    if prompt:
        die("--prompt is for expert traces with prompts")
    per, E = read_capture(text, path, with_prefill)
    return per, E, "route capture"


def map_experts(ids, Es, E, how, perm):
    """One token's ids of one layer onto E experts, distinct."""
    out = []
    for x in ids:
        if not 0 <= x < Es:
            die("expert id %d outside [0, %d)" % (x, Es))
        y = x if Es <= E else (perm[x] if how == "perm" else x) % E
        while y in out:  # a collision takes the next free id
            y = (y + 1) % E
        out.append(y)
    return out


def convert(per, Es, L, E, K, how, seed, shift):
    src = sorted(per)
    S = len(src)
    n = min(len(per[la]) for la in src)
    if n == 0:
        die("no tokens")
    if max(len(per[la]) for la in src) != n:
        sys.stderr.write("route_convert: layers have %s tokens; using the first %d of each\n" %
                         (sorted(set(len(per[la]) for la in src)), n))
    ks = {len(t) for la in src for t in per[la][:n]}
    if len(ks) != 1:
        die("tokens have %s experts; want one top-k" % sorted(ks))
    k = ks.pop()
    K = K or k
    if K > k:
        die("--top-k %d: the source routes top-%d" % (K, k))
    if K > E:
        die("--top-k %d is more than --experts %d" % (K, E))
    perm = list(range(Es))
    random.Random(seed).shuffle(perm)
    lmap = [src[j * S // L] for j in range(L)]
    copy = [lmap[:j].count(lmap[j]) for j in range(L)]
    toks = []
    for t in range(n):
        tok = []
        for j in range(L):
            row = per[lmap[j]][(t + copy[j] * shift) % n][:K]
            tok.append(map_experts(row, Es, E, how, perm))
        toks.append(tok)
    notes = ["source: %d layers %s, %d experts, top-%d, %d tokens" % (S, src, Es, k, n)]
    blocks = {}
    for j, la in enumerate(lmap):
        blocks.setdefault(la, []).append(j)
    notes.append("layers: target layer j <- source layer number floor(j * %d / %d): %s" %
                 (S, L, "; ".join("%s <- %d" % (",".join(map(str, js)), la) for la, js in blocks.items())))
    if any(len(js) > 1 for js in blocks.values()):
        notes.append("  reused source layers drive several target layers with %s: this overstates "
                     "cross-layer correlation" % ("the same expert sequence" if not shift else
                                                  "the sequence shifted by %d tokens per copy" % shift))
    if Es <= E:
        notes.append("experts: ids kept (%d of %d target experts used)" % (Es, E))
    else:
        notes.append("experts: %s mod %d, a collision in a token takes the next free id" %
                     ("id" if how == "mod" else "perm(id) (a fixed random permutation, seed %d)" % seed, E))
    if K < k:
        notes.append("top-k: each token keeps its first %d of %d ids" % (K, k))
    return toks, notes, K


def main(argv):
    a = {"-o": None, "--layers": None, "--experts": None, "--top-k": "0", "--expert-map": "mod",
         "--seed": "40", "--reuse-shift": "0", "--prompt": None}
    src, with_prefill, i = None, False, 0
    while i < len(argv):
        x = argv[i]
        if x in ("-h", "--help"):
            print(__doc__)
            return 0
        if x in a:
            if i + 1 >= len(argv):
                die(x + " needs a value")
            a[x] = argv[i + 1]
            i += 2
            continue
        if x == "--with-prefill":
            with_prefill = True
        elif x.startswith("-"):
            die("unknown option " + x)
        elif src:
            die("one SOURCE only")
        else:
            src = x
        i += 1
    if not src or not a["-o"] or not a["--layers"] or not a["--experts"]:
        die("usage: route_convert.py SOURCE -o OUT --layers L --experts E [options] (--help)")
    if a["--expert-map"] not in ("mod", "perm"):
        die("--expert-map is mod or perm")
    try:
        L, E, K = int(a["--layers"]), int(a["--experts"]), int(a["--top-k"])
        seed, shift = int(a["--seed"]), int(a["--reuse-shift"])
    except ValueError:
        die("--layers, --experts, --top-k, --seed and --reuse-shift take integers")
    if L < 1 or E < 1 or K < 0 or shift < 0:
        die("--layers and --experts must be positive")
    per, Es, kind = read_source(src, a["--prompt"], with_prefill)
    if not per:
        die("%s: no routing records" % src)
    Es = max(Es, 1 + max(x for v in per.values() for t in v for x in t))
    toks, notes, K = convert(per, Es, L, E, K, a["--expert-map"], seed, shift)
    with open(a["-o"], "w") as f:
        f.write("# layers %d experts %d decode_from 0 top_k %d\n" % (L, E, K))
        f.write("# converted by scripts/route_convert.py from %s (%s)\n" % (src, kind))
        for n in notes:
            f.write("# " + n + "\n")
        for t, tok in enumerate(toks):
            f.write("# token %d\n" % t)
            for j, ids in enumerate(tok):
                f.write("".join("%d %d\n" % (j, x) for x in ids))
    print("%s -> %s: %d tokens, %d layers x %d experts, top-%d" % (src, a["-o"], len(toks), L, E, K))
    for n in notes:
        print("  " + n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
