/* The shared expert cache: one LRU across all layers, keyed by
 * (layer, expert), holding at most `n_slots` bundles of `bundle_bytes` each.
 *
 * Ownership: the cache owns every slot buffer for its whole life. Slot i
 * starts at i * bundle_bytes from a 4096-aligned base, so slots are
 * aligned for direct reads when bundle_bytes is a multiple of 4096 (as
 * bundle plans make it, stream/bundle.h). A
 * successful xcache_acquire() pins one entry for the caller, and the caller
 * makes exactly one xcache_release() for it; while pinned, an entry is never
 * evicted and its buffer never changes. Only unpinned READY entries are
 * evictable: least recently released first (LRU, the default), or with
 * xcache_set_policy(E0_CACHE_LFU) the one with the lowest decayed count of
 * demand requests (least recently released on ties); the counts are kept
 * per (layer, expert) whether cached or not, so a bundle that comes back
 * is judged by its history (docs/experiments.md, cache policy study). With
 * E0_CACHE_ROUTER each layer's last-step keys held and the rest ranked by
 * the router's probabilities (stream/routecount.h), fed by xcache_observe();
 * with E0_CACHE_RECENT (the engine's default) the lowest of decayed
 * per-step request counts plus router popularity (routecount.h).
 *
 * Loading: acquiring a key that is absent takes a free or evictable slot,
 * marks it LOADING and sets *need_load; that caller (or an I/O thread it
 * hands the entry to) fills the buffer and calls xcache_loaded(). Others who
 * acquire the same key meanwhile get the same entry and block in
 * xcache_wait() until it is READY (or dropped on a failed load).
 *
 * Locking: one mutex `mu` guards the key table, the LRU list, every entry's
 * state, pin count and key, and the counters; `cv` signals state changes.
 * A LOADING entry's buffer is written only by its loader, outside the lock;
 * a READY entry's buffer is read only by pin holders. No call blocks while
 * holding `mu` except on `cv`.
 */
#ifndef E0_STREAM_XCACHE_H
#define E0_STREAM_XCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stream/cachesim.h"

typedef struct xcache xcache;
typedef struct xentry xentry;

int xcache_new(xcache **out, int32_t n_slots, size_t bundle_bytes, int32_t n_layers,
               int32_t n_experts, char *err);
void xcache_free(xcache *c);
/* Eviction policy (E0_CACHE_LRU / _LFU / _ROUTER / _RECENT); LFU counts halve every
 * `half_life` demand requests, ROUTER's popularity every `half_life` steps
 * (routecount.h). Call before the first acquire. */
int xcache_set_policy(xcache *c, int policy, double half_life, char *err);

/* Pins the entry for (layer, expert), creating it (LOADING, *need_load = 1)
 * if absent. Returns NULL when absent and every slot is pinned (the caller
 * reads the bundle into a buffer of its own). `demand` counts the access as
 * a hit or a miss of `layer`; prefetches pass false. */
xentry *xcache_acquire(xcache *c, int32_t layer, int32_t expert, bool demand, bool *need_load);
/* Pins the entry only if it is present and READY; counts nothing. */
xentry *xcache_lookup(xcache *c, int32_t layer, int32_t expert);
/* The loader's verdict on a LOADING entry: ok -> READY, else it is dropped. */
void xcache_loaded(xcache *c, xentry *e, bool ok);
/* Blocks until the entry is READY (0) or its load failed (-1). */
int xcache_wait(xcache *c, xentry *e);
void xcache_release(xcache *c, xentry *e);
/* The same, but the entry, when READY and unpinned, goes first in line
 * for eviction instead of last (a GPU's host cache: a bundle now in VRAM). */
void xcache_release_first(xcache *c, xentry *e);

/* Memory pressure: at most n slots in use from now on. Unpinned entries
 * past the limit are evicted at once, pinned ones on their last release;
 * their memory goes back to the kernel (MADV_DONTNEED). Raising the limit
 * again (up to the slots made at start) makes them free slots, whose
 * memory comes back as they are filled. */
void xcache_set_limit(xcache *c, int32_t n);
int32_t xcache_limit(xcache *c);

uint8_t *xentry_buf(xentry *e);
/* The slots' memory: one block of *bytes (a GPU's host cache registers it
 * with the driver: gpu/hcache.c). */
uint8_t *xcache_mem(const xcache *c, size_t *bytes);

int32_t xcache_slots(const xcache *c);
/* Entries in use (LOADING or READY) and pinned entries, now. */
void xcache_usage(xcache *c, int32_t *used, int32_t *pinned);
void xcache_layer_stats(xcache *c, int32_t layer, uint64_t *hits, uint64_t *misses);
void xcache_reset_stats(xcache *c);

/* Request trace, for replaying policies offline (stream/cachesim.h): from
 * now on every demand acquire appends layer * n_experts + expert, in the
 * order the cache saw them, until `cap` are recorded (later ones are
 * counted as dropped), and every xcache_observe() its router logits, up to
 * `obs_floats` of them (the router policy's replay needs them all: a
 * stream with drops replays as none). The buffers are allocated here,
 * never on the decode path; cap 0 stops recording and frees them.
 * Guarded by `mu`. */
int xcache_trace_start(xcache *c, size_t cap, size_t obs_floats, char *err);
/* The requests so far (valid until the next xcache_trace_start or free). */
const uint32_t *xcache_trace(xcache *c, size_t *n, uint64_t *dropped);
/* The router logits so far, as cachesim_run's observations (valid as long). */
void xcache_trace_obs(xcache *c, cachesim_obs *out);

/* One MoE layer call's router logits, [T, n_experts], before its acquires:
 * the router policy's counts (routecount.h) and a trace recording logits
 * take them; nothing else does. */
void xcache_observe(xcache *c, int32_t layer, const float *logits, int32_t T);

#endif
