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
    r->rec = calloc(n, sizeof *r->rec);
    r->prob = malloc((size_t)n_experts * sizeof *r->prob);
    if (!r->pop || !r->rec || !r->prob) {
        routecount_free(r);
        return e0_fail(err, E0_ENOMEM, "out of memory for the cache's router counts");
    }
    r->n_layers = n_layers;
    r->n_experts = n_experts;
    r->up = r->ur = r->inv_up = r->inv_ur = 1.0;
    r->pop_grow = isinf(pop_half_life) ? 1.0 : exp2(1.0 / pop_half_life);
    r->last_layer = INT32_MAX; /* the first observation starts a step */
    return 0;
}

void routecount_free(routecount *r) {
    free(r->pop);
    free(r->rec);
    free(r->prob);
    memset(r, 0, sizeof *r);
}

/* Divides every value by its unit and makes the unit 1. */
static void fold(double *v, size_t n, double *unit, double *inv) {
    for (size_t i = 0; i < n; i++)
        v[i] *= *inv;
    *unit = *inv = 1.0;
}

static void step(routecount *r) {
    const size_t n = (size_t)r->n_layers * (size_t)r->n_experts;
    r->up *= r->pop_grow;
    r->ur *= 2.0;
    r->inv_up = 1.0 / r->up;
    r->inv_ur = 1.0 / r->ur;
    if (r->up > UNIT_MAX) fold(r->pop, n, &r->up, &r->inv_up);
    if (r->ur > UNIT_MAX) fold(r->rec, n, &r->ur, &r->inv_ur);
}

void routecount_observe(routecount *r, int32_t layer, const float *logits, int32_t T) {
    if (layer < 0 || layer >= r->n_layers || T < 1) return;
    if (layer <= r->last_layer) step(r);
    r->last_layer = layer;
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
    r->rec[key] += r->ur;
}
