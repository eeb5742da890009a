#!/usr/bin/env python3
"""A model of a whole-layer prefill's two expert caches under a host cap (gpu/vcache.c
vcache_layer_in, gpu/hcache.c): the VRAM cache (a layer's missing experts take the slots of
the layer finished last, else the least recently used) over an exclusive host cache (an LRU
of pinned bundles whose entries a call holds until two calls later). Prints, pass after pass
over the layers, where each layer's experts came from.

  bench/gpu/hcache_sim.py [VRAM_SLOTS [HOST_SLOTS [keep|nokeep|hold]]]
  (default 3012 and 5350: the 35B shape with 8 GiB of VRAM in a 12 GiB cgroup; the card
  made 4970 host slots there in session 38: hold 41.0% host, 29.6% disk)

$E0_GPU_HCACHE_PREFILL's rules during a prefill:
  keep   (until session 38) a bundle read for the VRAM goes first in line for eviction, and
         each slot the VRAM gives up is copied back to the host cache's recent end;
  nokeep the same without the copies back;
  hold   no copies back; an expert that enters a VRAM slot taken from another expert (the
         VRAM gives that slot up again soon) stays in the host cache (its recent end), read or
         hit, while the pass has held fewer than HOST_SLOTS - 3E; every other goes first."""
import sys
from collections import OrderedDict

L, E = 40, 256
V = int(sys.argv[1]) if len(sys.argv) > 1 else 3012
H = int(sys.argv[2]) if len(sys.argv) > 2 else 5350
mode = sys.argv[3] if len(sys.argv) > 3 else "keep"

key_of, slot_of = [-1] * V, {}
vlru = OrderedDict((i, None) for i in range(V))  # first: least recently used
pins, hlist = {}, OrderedDict()                 # host: key -> pins; unpinned, first evicted first


def h_acquire(k):
    """(loaded from disk, ok)"""
    if k in pins:
        if pins[k] == 0:
            del hlist[k]
        pins[k] += 1
        return False, True
    if len(pins) < H:
        pins[k] = 1
        return True, True
    for v in hlist:
        del hlist[v], pins[v]
        pins[k] = 1
        return True, True
    return False, False


def h_release(k, first):
    pins[k] -= 1
    if pins[k] == 0:
        hlist[k] = None
        if first:
            hlist.move_to_end(k, last=False)


sets, cur, held, n_hold = [[], []], 0, 0, 0
stats = {}


def layer_in(li, spare):
    global cur, held, n_hold
    so = [slot_of.get(li * E + e, -1) for e in range(E)]
    for e in range(E):
        if so[e] >= 0:
            vlru.move_to_end(so[e])
            stats["vram"] += 1
    sp = [slot_of.get(spare * E + e, -1) for e in range(E)] if spare >= 0 else None
    f, miss, old = 0, [], []
    for e in range(E):
        if so[e] >= 0:
            continue
        i = next(iter(vlru))
        if key_of[i] >= 0 and sp:
            while f < E and sp[f] < 0:
                f += 1
            if f < E:
                i = sp[f]
                f += 1
        if key_of[i] >= 0:
            del slot_of[key_of[i]]
        old.append(key_of[i])
        key_of[i] = li * E + e
        slot_of[li * E + e] = i
        vlru.move_to_end(i)
        miss.append(e)
    cur ^= 1
    for k, first in sets[cur]:
        h_release(k, first)
    held -= len(sets[cur])
    sets[cur] = []
    for k in old:
        if k < 0 or mode != "keep" or held + len(miss) >= H:
            continue
        _, ok = h_acquire(k)
        if ok:
            sets[cur].append((k, False))
            held += 1
    for j, e in enumerate(miss):
        loaded, ok = h_acquire(li * E + e)
        assert ok
        stats["disk" if loaded else "host"] += 1
        first = True
        if mode == "hold" and old[j] >= 0 and n_hold < H - 3 * E:
            n_hold += 1
            first = False
        sets[cur].append((li * E + e, first))
        held += 1


for p in range(3):
    stats, n_hold = {"vram": 0, "host": 0, "disk": 0}, 0
    for li in range(L):
        layer_in(li, li - 1)
    print("pass %d: VRAM %.1f%%, host cache %.1f%%, disk %.1f%%" % (p, *(100 * stats[s] / (L * E) for s in ("vram", "host", "disk"))))
