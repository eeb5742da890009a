/* The expert cache's "router" policy scores (docs/experiments.md, sections
 * 72 and 73): every MoE layer's router gives each token a softmax
 * probability for all E experts, not only the k it routes to, which is E/k
 * times more evidence of an expert's popularity per token than its hits.
 *
 * A key's (layer, expert) score is pop + rec:
 *  - pop: its probabilities summed over every token observed, halving every
 *    `pop_half_life` steps (popularity, kept whether the key is cached or not);
 *  - rec: one per request (a step that fetches the expert, for one token or
 *    many), halving every step, so an expert the last step or two used
 *    outranks a somewhat more popular one: LRU's recency, which sticky
 *    routing needs (section 72: popularity alone loses 20-31 points there).
 * The cache evicts the lowest score. A step begins when a layer at or below
 * the last observed one is observed (the next token's first MoE layer).
 *
 * Values are held in units that grow by 2^(1/H) per step, so a step costs
 * nothing per key: a value added at step t weighs 2^(t/H) units, the
 * score divides by the current unit, and when a unit passes 2^256 it is
 * folded back into the values (once every 256 steps for rec).
 *
 * Not thread-safe: the owner (xcache, under its mutex; cachesim) serialises.
 */
#ifndef E0_STREAM_ROUTECOUNT_H
#define E0_STREAM_ROUTECOUNT_H

#include <stdint.h>

typedef struct {
    int32_t n_layers, n_experts;
    double *pop, *rec;     /* [n_layers * n_experts], in units up, ur */
    double up, ur;         /* the units now */
    double inv_up, inv_ur; /* 1 / up, 1 / ur */
    double pop_grow;       /* 2^(1 / pop_half_life) */
    int32_t last_layer;    /* of the last observation; a step starts at or below it */
    float *prob; /* [n_experts] scratch */
} routecount;

/* pop_half_life in steps (> 0; INFINITY: no decay). */
int routecount_init(routecount *r, int32_t n_layers, int32_t n_experts, double pop_half_life,
                    char *err);
void routecount_free(routecount *r);
/* T tokens' router logits of `layer`, [T, n_experts] (f32, as moe.c routes them). */
void routecount_observe(routecount *r, int32_t layer, const float *logits, int32_t T);
/* One request of key layer * n_experts + expert. */
void routecount_request(routecount *r, uint32_t key);

static inline double routecount_score(const routecount *r, uint32_t key) {
    return r->pop[key] * r->inv_up + r->rec[key] * r->inv_ur;
}

#endif
