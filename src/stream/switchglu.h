/* The streaming SwitchGLU (docs/design.md §4): the routed experts of every MoE
 * layer, with their bytes coming from the checkpoint through the shared LRU
 * (exact), fixed slots filled ahead of need (staged), per-layer resident
 * stacks (hot) or whole-layer reads (full). A path decides only where an
 * expert's bytes come from: each (token, expert) product runs through the
 * same gathered kernel on the same bytes, so every path is bit-identical to
 * exact. The one exception is `staged_replace`, which drops routed experts
 * that are not staged, and counts every drop.
 *
 * Threads: one engine thread calls stream_experts() layer after layer; the
 * load pool reads on-demand bundles into LRU entries, the prefetch pool
 * fills staged slots, whole layers and speculative LRU entries (the next
 * layer's likely experts, in decode) ahead of need. Staged slots publish
 * READY with release/acquire atomics; the LRU has its own lock (xcache.h).
 */
#ifndef E0_STREAM_SWITCHGLU_H
#define E0_STREAM_SWITCHGLU_H

#include "edge0.h"
#include "weights/batch.h"
#include "weights/weights.h"
#include "stream/bundle.h"
#include "stream/cachesim.h"

typedef struct e0_stream e0_stream;

/* Counters since the last reset (read while the engine is idle). */
typedef struct {
    uint64_t bytes_read;    /* expert bytes read from the checkpoint */
    uint64_t bytes_touched; /* expert bytes the kernels read (any source) */
    uint64_t expert_calls;  /* (layer, expert) products computed */
    /* counted per routed (token, expert) pair */
    uint64_t staged_hits, exact_fallbacks, drops;
    uint64_t predicted_routed,
        routed_staged; /* pairs whose expert was predicted / all pairs, staged calls */
    uint64_t hot_hits, hot_misses;
    uint64_t full_layers;    /* whole-layer loads */
    uint64_t overflow_reads; /* bundles read outside the LRU (every slot pinned or cache_slots 0) */
    uint64_t
        spec_loads; /* bundles loaded speculatively for the next layer (counted in bytes_read) */
    uint64_t spec_used; /* of those, routed to by the next step of their layer, while still in the
                           LRU (counted as LRU hits) */
    double io_wait_s, compute_s;
} stream_counters;

int stream_new(e0_stream **out, const e0_model *m, const e0_engine_opts *o, char *err);
/* The cache's slot limit now (memory pressure) and how often the pressure
 * monitor lowered and raised it. */
void stream_pressure(const e0_stream *s, int32_t *limit, uint64_t *shrinks, uint64_t *grows);
void stream_free(e0_stream *s);

/* Routed experts of MoE layer `layer` for the T tokens of batch b
 * (model.h): each routed expert is fetched once and computed once over
 * every token routed to it. x: [T, H] the MoE input; idx: [T, k] routed
 * experts; w: [T, k] their weights (a dropped expert's weight is set to 0);
 * eo: [T*k, H] receives the output of each (token, slot). The scratch `ws`
 * holds T tokens. Each token gets the arithmetic its run's pass alone gives
 * it: a run that routes K_PANEL_MIN_T tokens or more to an expert gets the
 * panel arithmetic there (mat_matmul), the others the row arithmetic
 * (mat_matmul_decode, which a one-token call and any call of fewer than
 * K_PANEL_MIN_T tokens get). b->decode (runs of one token: decode steps)
 * picks the decode paths (staged, hot, speculative loads), else the prefill
 * ones (full-layer reads, prefill_hot); the paths are bit-identical. */
int stream_experts(e0_stream *s, int layer, const float *x, const e0_batch *b, const int32_t *idx,
                   float *w, int k, float *eo, e0_scratch *ws, char *err);

void stream_counters_get(e0_stream *s, stream_counters *c);
/* counters' bytes_read alone (an atomic load: any thread) */
uint64_t stream_bytes_read(e0_stream *s);
void stream_counters_reset(e0_stream *s);
void stream_layer_stats(e0_stream *s, int layer, uint64_t *hits, uint64_t *misses);
/* Distinct experts of `layer` routed to since the last reset. */
int stream_distinct_experts(const e0_stream *s, int layer);
int32_t stream_cache_slots(const e0_stream *s);
/* The shared cache's demand-request trace (xcache_trace_start); fails with
 * E0_EUNSUPPORTED when there is no cache (mapped I/O or cache_slots 0). */
int stream_trace_start(e0_stream *s, size_t cap, size_t obs_floats, char *err);
const uint32_t *stream_trace(e0_stream *s, size_t *n, uint64_t *dropped);
/* The router logits recorded with the trace (none without a cache). */
void stream_trace_obs(e0_stream *s, cachesim_obs *out);
/* MoE layer `layer`'s router logits for the T tokens about to call
 * stream_experts(), [T, n_experts]: the cache's router policy and the
 * trace take them (xcache_observe); a no-op when neither is on. */
void stream_observe(e0_stream *s, int layer, const float *logits, int T);
size_t stream_bundle_bytes(const e0_stream *s);

/* Tests: from now on the staged prediction of `layer` is this set (staged now). */
void stream_debug_predict(e0_stream *s, int layer, const int32_t *experts, int n);
/* Tests: plan bundles in another order (XB_ORDER_GATE_FIRST shows why the order matters). */
void stream_debug_order(e0_stream *s, xb_order order);

#endif
