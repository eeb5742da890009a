/* The scoring eviction policies' state, one piece for both expert caches
 * that evict by them: the CPU's shared cache (stream/xcache.c) and the
 * GPU's VRAM cache (gpu/vcache.c). Which entry goes stays each cache's
 * own business (which entries are evictable and how many are looked at);
 * what a key scores and how requests and router logits move the scores is
 * here, so that the two caches' policies are the same policies.
 *
 * LFU: log2 of a key's demand requests, each decayed by 2^(-clock /
 * half_life) (half_life in requests). ROUTER and RECENT: routecount.h's
 * scores (half_life in steps). LRU keeps no state. Not thread-safe: the
 * owner serialises. */
#ifndef E0_STREAM_XPOLICY_H
#define E0_STREAM_XPOLICY_H

#include "stream/routecount.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int policy;       /* E0_CACHE_LRU (all zero) / _LFU / _ROUTER / _RECENT */
    double half_life;
    double *score;    /* LFU: [n_layers * n_experts] */
    uint64_t clock;   /* LFU: demand requests so far */
    routecount rc;    /* ROUTER, RECENT (rc.pop NULL otherwise) */
} xpolicy;

/* Validates the policy and half-life (E0_EINVAL, p unchanged), then starts
 * its state over; what names the cache in an out-of-memory message. */
int xpolicy_set(xpolicy *p, int policy, double half_life, int32_t n_layers, int32_t n_experts, const char *what,
                char *err);
void xpolicy_free(xpolicy *p);
/* Key layer * n_experts + expert's score: the lowest is evicted first. */
double xpolicy_score(const xpolicy *p, size_t key);
/* A request of key: a demand, or a prefetch that loads it (counted as a
 * request now, else its fresh entry would score lowest and be the next
 * victim before its demand arrives; LFU's clock does not advance). */
void xpolicy_request(xpolicy *p, size_t key, bool demand);
/* Whether the policy reads router logits (xpolicy_observe). */
static inline bool xpolicy_wants_logits(const xpolicy *p) { return p->rc.pop != NULL; }
/* One MoE call's router logits of `layer`, [T, n_experts]. */
void xpolicy_observe(xpolicy *p, int32_t layer, const float *logits, int32_t T);

#endif
