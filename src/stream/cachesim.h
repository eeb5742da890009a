/* Expert-cache policies replayed on a recorded request trace, to put the
 * shared cache's policy beside the offline optimum (docs/experiments.md,
 * "Expert cache policy against the offline optimum").
 *
 * A trace is the sequence of demand requests the cache saw, one key per
 * request: layer * n_experts + expert (xcache_trace_start records it). Each
 * simulated cache holds `cap` keys, starts empty, inserts every missed key
 * (demand paging, as the xcache does) and knows nothing of pins: with
 * hundreds of slots against one layer call's <= top-k pinned bundles the
 * difference is negligible. Requests before `from` fill the cache without
 * being counted, so a decode can be scored with the prefill's contents.
 *
 * Policies:
 *  - LRU: evict the least recently requested key (what xcache does).
 *  - LFU (decayed counts): every request adds 1 to its key's count, and all
 *    counts halve every `half_life` requests; evict the cached key with the
 *    lowest count (least recent on ties). Counts survive eviction, so a
 *    key that comes back is judged by its whole (decayed) history.
 *  - ARC (Megiddo & Modha, FAST 2003): recency list T1 and frequency list
 *    T2 with ghost lists B1/B2 steering the split between them.
 *  - Router (stream/routecount.h, the xcache's E0_CACHE_ROUTER): evict the
 *    cached key with the lowest score: the keys of each layer's last step
 *    held, the rest by summed router probabilities (least recent on ties);
 *    needs the trace's router logits (`obs`), replayed before the request
 *    they preceded.
 *  - Recent (docs/experiments.md, "Session 29: cache policy on realistic
 *    routing"): evict the cached key of lowest
 *      use + CACHESIM_RECENT_POP_WEIGHT x E x pop / tokens
 *    where use is the key's requests, each weighing 2^(-s / h) after s
 *    steps of its layer (h = CACHESIM_RECENT_HALF_LIFE; a step's repeated
 *    requests count once), and pop / tokens the router policy's summed
 *    probabilities (half-life `half_life` steps) over the tokens its layer
 *    saw: E x that is 1 for an expert of average popularity. Real routers
 *    repeat recent experts (a bonus that fades over a few tokens) and favour
 *    some experts for good: the first term follows the one, the second the
 *    other. Needs `obs` as the router policy does.
 *  - Belady (offline optimal for demand paging): on a miss with a full
 *    cache, evict the cached key whose next request is furthest ahead
 *    (never requested again counts as infinitely far).
 */
#ifndef E0_STREAM_CACHESIM_H
#define E0_STREAM_CACHESIM_H

#include <stddef.h>
#include <stdint.h>

/* The recent policy's constants (fitted on the qwen36 / qwen3-30b routing
 * profiles, checked on other seeds and contexts: docs/experiments.md). */
#define CACHESIM_RECENT_HALF_LIFE 2.0  /* steps */
#define CACHESIM_RECENT_POP_WEIGHT 0.5

typedef enum {
    CACHESIM_LRU,
    CACHESIM_LFU,
    CACHESIM_ARC,
    CACHESIM_ROUTER,
    CACHESIM_RECENT,
    CACHESIM_BELADY,
    CACHESIM_N,
} cachesim_policy;

/* The router logits seen with a trace: n MoE layer calls, call i before
 * request at[i] (nondecreasing), of tokens[i] tokens of layer[i], whose
 * [tokens, n_experts] logits follow the previous call's in `logits`. */
typedef struct {
    size_t n;
    const size_t *at;
    const int32_t *layer, *tokens;
    const float *logits;
    int32_t n_layers, n_experts;
} cachesim_obs;

/* log2(2^a + 2^b), a or b may be -INFINITY. Decayed counts are kept as
 * log2(sum over requests of 2^(t / half_life)): a request at time t adds
 * 2^(t / half_life), so older ones weigh less without ever rescaling. */
double cachesim_log2_add(double a, double b);

/* "lru", "lfu", "arc", "router", "recent", "belady" */
const char *cachesim_name(cachesim_policy p);

/* Hits of policy `p` with `cap` slots over keys[from..n), after keys[0..from)
 * warmed it. Keys must be < n_keys. half_life: LFU's decay, in requests
 * (<= 0: no decay), and the router policy's popularity half-life, in steps
 * (<= 0: none); ignored by the others. obs: the router policy's
 * observations (others ignore it; NULL or none: E0_EINVAL for router and
 * recent).
 * Returns 0, or E0_EINVAL / E0_ENOMEM with a message in err. */
int cachesim_run(cachesim_policy p, const uint32_t *keys, size_t n, size_t from, uint32_t n_keys,
                 int32_t cap, double half_life, const cachesim_obs *obs, uint64_t *hits,
                 char *err);

#endif
