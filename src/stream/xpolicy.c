/* The scoring eviction policies' state (stream/xpolicy.h). */
#include "stream/xpolicy.h"

#include "edge0.h"
#include "stream/cachesim.h"
#include "util/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int xpolicy_set(xpolicy *p, int policy, double half_life, int32_t n_layers, int32_t n_experts, const char *what,
                char *err) {
    if (policy != E0_CACHE_LRU && policy != E0_CACHE_LFU && policy != E0_CACHE_ROUTER &&
        policy != E0_CACHE_RECENT)
        return e0_fail(err, E0_EINVAL, "unknown cache policy %d", policy);
    if (policy != E0_CACHE_LRU && !(half_life > 0))
        return e0_fail(err, E0_EINVAL, "cache half-life %g must be positive", half_life);
    xpolicy_free(p);
    const size_t n = (size_t)n_layers * (size_t)n_experts;
    if (policy == E0_CACHE_ROUTER || policy == E0_CACHE_RECENT) {
        int rc = routecount_init(&p->rc, n_layers, n_experts, half_life, err);
        if (!rc && policy == E0_CACHE_RECENT) rc = routecount_track_use(&p->rc, CACHESIM_RECENT_HALF_LIFE, err);
        if (rc) {
            xpolicy_free(p);
            return rc;
        }
    } else if (policy == E0_CACHE_LFU) {
        if (!(p->score = malloc((n ? n : 1) * sizeof *p->score)))
            return e0_fail(err, E0_ENOMEM, "out of memory for %s's request counts", what);
        for (size_t i = 0; i < n; i++) p->score[i] = -INFINITY;
    }
    p->policy = policy;
    p->half_life = half_life;
    return 0;
}

void xpolicy_free(xpolicy *p) {
    free(p->score);
    routecount_free(&p->rc);
    memset(p, 0, sizeof *p);
}

double xpolicy_score(const xpolicy *p, size_t key) {
    if (p->score) return p->score[key];
    return p->rc.use ? routecount_recent_score(&p->rc, (uint32_t)key, CACHESIM_RECENT_POP_WEIGHT)
                     : routecount_score(&p->rc, (uint32_t)key);
}

void xpolicy_request(xpolicy *p, size_t key, bool demand) {
    if (p->score) p->score[key] = cachesim_log2_add(p->score[key], (double)(demand ? p->clock++ : p->clock) / p->half_life);
    if (p->rc.pop) routecount_request(&p->rc, (uint32_t)key);
}

void xpolicy_observe(xpolicy *p, int32_t layer, const float *logits, int32_t T) {
    if (p->rc.pop) routecount_observe(&p->rc, layer, logits, T);
}
