#!/usr/bin/env python3
"""The generator-aware reference for the cache policy study (docs/experiments.md,
"Session 29: cache policy on realistic routing").

Usage: oracle.py CHECKPOINT TRACE   (TRACE from `edge0 bench ... --trace`)

Replays TRACE's requests (the ones before decode_from warm the cache) through
Belady and through an "oracle" that knows the routing profile the checkpoint
was written with (config.json edge0_synth.route_*: the per-layer popularity
ranks, recomputed as io/config_route.c does, and the recency bonus): on a miss
with a full cache it evicts the key whose logit offset at its layer's next
step (popularity + bonus of its last use) is lowest, i.e. the key least
likely to be routed to next. No online policy that ranks keys by their next
step's probability can do better on average; Belady knows the future draws.
"""
import json, math, sys

M = (1 << 64) - 1

def splitmix(s):
    s = (s + 0x9e3779b97f4a7c15) & M
    z = s
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
    return s, z ^ (z >> 31)

def bias(L, E, pop, seed):
    norm = math.sqrt(2 * math.log(E)) / 1.6
    b = [[0.0] * E for _ in range(L)]
    for l in range(L):
        s = (seed * 0x100000001b3 + l * 0x9e3779b97f4a7c15 + 0x726f757465) & M
        perm = list(range(E))
        for e in range(E - 1, 0, -1):
            s, z = splitmix(s)
            j = z % (e + 1)
            perm[e], perm[j] = perm[j], perm[e]
        for r in range(E):
            b[l][perm[r]] = -pop * math.log(r + 1) / norm
    return b

def load(path):
    with open(path) as f:
        h = f.readline().split()
        L, E, fr = int(h[2]), int(h[4]), int(h[6])
        keys = [tuple(map(int, line.split())) for line in f]
    return L, E, fr, keys

def belady(keys, fr, cap):
    n, nxt, last = len(keys), [0] * len(keys), {}
    for i in range(n - 1, -1, -1):
        nxt[i] = last.get(keys[i], 1 << 60)
        last[keys[i]] = i
    c, hits = {}, 0
    for i, k in enumerate(keys):
        if k in c:
            hits += i >= fr
        elif len(c) >= cap:
            del c[max(c, key=lambda x: c[x])]
        c[k] = nxt[i]
    return hits / (n - fr)

def oracle(keys, fr, cap, L, E, cfg):
    B = bias(L, E, cfg['route_popularity'], cfg['route_seed'])
    B1, B2 = cfg['route_recent'], cfg['route_window']
    dec, W = cfg['route_decay'], cfg['route_window_len']
    lstep, last, lastreq, c, hits = [-1] * L, {}, {}, set(), 0
    def score(k):
        d = lstep[k[0]] - last[k] + 1
        b = B1 if d <= 1 else (B2 * dec ** (d - 2) if d <= W else 0.0)
        return (B[k[0]][k[1]] + b, lastreq[k])
    for i, k in enumerate(keys):
        if i == 0 or keys[i - 1][0] != k[0]:
            lstep[k[0]] += 1  # a run of one layer's requests is one step
        last[k], lastreq[k] = lstep[k[0]], i
        if k in c:
            hits += i >= fr
            continue
        if len(c) >= cap:
            c.discard(min(c, key=score))
        c.add(k)
    return hits / (len(keys) - fr)

if __name__ == '__main__':
    cfg = json.load(open(sys.argv[1] + '/config.json'))['edge0_synth']
    L, E, fr, keys = load(sys.argv[2])
    for share in (0.1, 0.3):
        cap = int(share * L * E + 0.5)
        print('%d%% of experts (%d slots): oracle %.1f%% belady %.1f%%' %
              (100 * share, cap, 100 * oracle(keys, fr, cap, L, E, cfg),
               100 * belady(keys, fr, cap)))
