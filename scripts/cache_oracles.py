#!/usr/bin/env python3
"""Oracle replays of an `edge0 bench --trace FILE` request trace, for
docs/experiments.md section 16 (the online policies and Belady are in C:
build/bench/bench_cachesim). Slow (pure Python, minutes per trace).

  scripts/cache_oracles.py TRACE [SHARE...]     (default 0.1 0.3)

Prints, for each capacity (share of all layers x experts), hit rates of the
decode's requests (the prefill's warm the cache) for:
  belady          offline optimum, forced insertion (as bench_cachesim)
  belady_bypass   offline optimum that may decline to insert
  lookahead_W     evict, among keys not requested in the next W requests,
                  the one with the fewest requests so far (else the
                  furthest): an online LFU given a W-request oracle
  static          rank keys by their request count over the whole trace
                  (future included, no timing); evict and bypass by it
"""
import heapq
import sys
from collections import Counter, defaultdict


def load(path):
    lines = open(path).read().split("\n")
    h = lines[0].split()
    L, E, fr = int(h[2]), int(h[4]), int(h[6])
    keys = [int(a) * E + int(b) for a, b in (l.split() for l in lines[1:] if l)]
    return keys, fr, L, E


def next_uses(ks):
    nxt, last = [0] * len(ks), {}
    for i in range(len(ks) - 1, -1, -1):
        nxt[i] = last.get(ks[i], 1 << 60)
        last[ks[i]] = i
    return nxt


def belady(ks, fr, cap, bypass):
    nxt, cache, heap, hits = next_uses(ks), {}, [], 0
    for i, k in enumerate(ks):
        if k in cache:
            hits += i >= fr
        elif len(cache) >= cap:
            while True:  # lazy deletion: the entry must match the cached next use
                nu, v = heapq.heappop(heap)
                if v in cache and cache[v] == -nu:
                    break
            if bypass and nxt[i] >= -nu:
                heapq.heappush(heap, (nu, v))
                continue
            del cache[v]
        cache[k] = nxt[i]
        heapq.heappush(heap, (-nxt[i], k))
    return hits


def lookahead(ks, fr, cap, W):
    nxt = next_uses(ks)
    nu, cnt, last, cache, hits = {}, defaultdict(int), {}, set(), 0
    for i, k in enumerate(ks):
        nu[k], last[k] = nxt[i], i
        cnt[k] += 1
        if k in cache:
            hits += i >= fr
            continue
        if len(cache) >= cap:
            far = [c for c in cache if nu[c] > i + W]
            v = min(far, key=lambda c: (cnt[c], last[c])) if far else max(cache, key=nu.get)
            cache.discard(v)
        cache.add(k)
    return hits


def static(ks, fr, cap):
    tot, cache, last, hits = Counter(ks), set(), {}, 0
    for i, k in enumerate(ks):
        last[k] = i
        if k in cache:
            hits += i >= fr
            continue
        if len(cache) >= cap:
            v = min(cache, key=lambda c: (tot[c], last[c]))
            if tot[k] < tot[v]:
                continue
            cache.discard(v)
        cache.add(k)
    return hits


def main():
    ks, fr, L, E = load(sys.argv[1])
    shares = [float(a) for a in sys.argv[2:]] or [0.1, 0.3]
    n = len(ks) - fr
    for sh in shares:
        cap = int(sh * L * E + 0.5)
        r = {"belady": belady(ks, fr, cap, False), "belady_bypass": belady(ks, fr, cap, True)}
        for W in (8, 320, 1280):
            r["lookahead_%d" % W] = lookahead(ks, fr, cap, W)
        r["static"] = static(ks, fr, cap)
        print("%s %4.0f%% (%d slots): " % (sys.argv[1], 100 * sh, cap)
              + " ".join("%s %.1f%%" % (a, 100.0 * b / n) for a, b in r.items()), flush=True)


if __name__ == "__main__":
    main()
