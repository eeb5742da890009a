#include "stream/routecount.h"

#include "edge0.h"
#include "util/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define UNIT_MAX 0x1p256

int routecount_init(routecount *r, int32_t n_layers, int32_t n_experts, double pop_half_life,
                    char *err) {
    memset(r, 0, sizeof *r);
    if (n_layers < 1 || n_experts < 1 || !(pop_half_life > 0))
        return e0_fail(err, E0_EINVAL,
                       "router counts need layers and experts and a positive half-life "
                       "(%d, %d, %g)",
                       n_layers, n_experts, pop_half_life);
    const size_t n = (size_t)n_layers * (size_t)n_experts;
    r->pop = calloc(n, sizeof *r->pop);
    r->last_req = malloc(n * sizeof *r->last_req);
    r->layer_step = calloc((size_t)n_layers, sizeof *r->layer_step);
    r->prob = malloc((size_t)n_experts * sizeof *r->prob);
    if (!r->pop || !r->last_req || !r->layer_step || !r->prob) {
        routecount_free(r);
        return e0_fail(err, E0_ENOMEM, "out of memory for the cache's router counts");
    }
    for (size_t i = 0; i < n; i++)
        r->last_req[i] = -1; /* never: below every layer's step */
    r->n_layers = n_layers;
    r->n_experts = n_experts;
    r->up = r->inv_up = 1.0;
    r->pop_grow = isinf(pop_half_life) ? 1.0 : exp2(1.0 / pop_half_life);
    r->last_layer = INT32_MAX; /* the first observation starts a step */
    return 0;
}

void routecount_free(routecount *r) {
    free(r->pop);
    free(r->last_req);
    free(r->layer_step);
    free(r->prob);
    free(r->use);
    free(r->use_at);
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

static void step(routecount *r) {
    r->step++;
    r->up *= r->pop_grow;
    r->inv_up = 1.0 / r->up;
    if (r->up > UNIT_MAX) { /* fold the unit into the values */
        const size_t n = (size_t)r->n_layers * (size_t)r->n_experts;
        for (size_t i = 0; i < n; i++)
            r->pop[i] *= r->inv_up;
        r->up = r->inv_up = 1.0;
    }
}

void routecount_observe(routecount *r, int32_t layer, const float *logits, int32_t T) {
    if (layer < 0 || layer >= r->n_layers || T < 1) return;
    if (layer <= r->last_layer) step(r);
    r->last_layer = layer;
    r->layer_step[layer] = r->step;
    if (r->tokens) r->tokens[layer] += T;
    const int32_t E = r->n_experts;
    double *pop = r->pop + (size_t)layer * (size_t)E;
    for (int32_t t = 0; t < T; t++) {
        const float *l = logits + (size_t)t * (size_t)E;
        float mx = -INFINITY, sum = 0.0f;
        for (int32_t e = 0; e < E; e++)
            mx = l[e] > mx ? l[e] : mx;
        for (int32_t e = 0; e < E; e++)
            sum += r->prob[e] = expf(l[e] - mx);
        const double w = r->up / sum;
        for (int32_t e = 0; e < E; e++)
            pop[e] += (double)r->prob[e] * w;
    }
}

void routecount_request(routecount *r, uint32_t key) {
    r->last_req[key] = r->step;
    if (!r->use) return;
    const int64_t now = r->layer_step[key / (uint32_t)r->n_experts];
    if (r->use_at[key] == now) return; /* a step's repeats count once */
    r->use[key] = r->use[key] * exp2((double)(r->use_at[key] - now) / r->use_half_life) + 1.0;
    r->use_at[key] = now;
}

int routecount_track_use(routecount *r, double half_life, char *err) {
    if (!(half_life > 0))
        return e0_fail(err, E0_EINVAL, "the recent policy's half-life %g must be positive",
                       half_life);
    const size_t n = (size_t)r->n_layers * (size_t)r->n_experts;
    free(r->use);
    free(r->use_at);
    free(r->tokens);
    r->use = calloc(n, sizeof *r->use);
    r->use_at = malloc(n * sizeof *r->use_at);
    r->tokens = calloc((size_t)r->n_layers, sizeof *r->tokens);
    if (!r->use || !r->use_at || !r->tokens) {
        routecount_free(r);
        return e0_fail(err, E0_ENOMEM, "out of memory for the recent policy's counts");
    }
    for (size_t i = 0; i < n; i++)
        r->use_at[i] = -1; /* before every step: a first request counts 1 */
    r->use_half_life = half_life;
    for (int d = 0; d < 64; d++)
        r->use_decay[d] = exp2(-d / half_life);
    return 0;
}

double routecount_recent_score(const routecount *r, uint32_t key, double pop_weight) {
    const int32_t layer = (int32_t)(key / (uint32_t)r->n_experts);
    const int64_t d = r->layer_step[layer] - r->use_at[key]; /* >= 0 */
    const double use = d >= 0 && d < 64 ? r->use[key] * r->use_decay[d] : 0.0;
    const double t = r->tokens[layer];
    return use + (t > 0 ? pop_weight * r->n_experts * r->pop[key] * r->inv_up / t : 0.0);
}
