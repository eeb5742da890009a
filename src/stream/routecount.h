/* The expert cache's "router" policy scores (docs/experiments.md, sections
 * 72, 73 and 86): every MoE layer's router gives each token a softmax
 * probability for all E experts, not only the k it routes to, which is E/k
 * times more evidence of an expert's popularity per token than its hits.
 *
 * A key (layer, expert) is either
 *  - held: requested (on demand, or by a prefetch that loads it) in its
 *    layer's latest step, or, while that layer's requests are under way
 *    (it is the last layer observed), in the step before: the experts the
 *    next token of a sequence may keep (routers repeat a share of the
 *    previous token's experts; section 86 measured what a wider window
 *    costs), and the next layer's prefetched loads before their demand; or
 *  - ranked by pop: its probabilities summed over every token observed,
 *    halving every `pop_half_life` steps (popularity, kept whether the key
 *    is cached or not).
 * The cache evicts the lowest score: a ranked key before any held one, the
 * least popular first; among held keys (a cache smaller than one step's
 * experts) the least popular too. A step begins when a layer at or below
 * the last observed one is observed (the next token's first MoE layer).
 *
 * pop is held in a unit that grows by 2^(1/H) per step, so a step costs
 * nothing per key: a value added at step t weighs 2^(t/H) units, the score
 * divides by the current unit, and when the unit passes 2^256 it is folded
 * back into the values.
 *
 * Not thread-safe: the owner (xcache, under its mutex; cachesim) serialises.
 */
#ifndef E0_STREAM_ROUTECOUNT_H
#define E0_STREAM_ROUTECOUNT_H

#include <stdint.h>

typedef struct {
    int32_t n_layers, n_experts;
    double *pop;         /* [n_layers * n_experts], in unit up */
    double up, inv_up;   /* the unit now, and 1 / up */
    double pop_grow;     /* 2^(1 / pop_half_life) */
    int64_t step;        /* steps begun */
    int64_t *last_req;   /* [n_layers * n_experts]: the step of the key's last request */
    int64_t *layer_step; /* [n_layers]: the step of the layer's last observation */
    int32_t last_layer;  /* of the last observation; a step starts at or below it */
    float *prob;         /* [n_experts] scratch */
    /* the recent policy's counts (routecount_track_use; NULL: off) */
    double *use;         /* [keys]: decayed requests as of step use_at[key] */
    int64_t *use_at;     /* [keys] */
    double *tokens;      /* [n_layers]: tokens observed */
    double use_half_life;
    double use_decay[64]; /* 2^(-d / use_half_life), d steps; older uses count 0 */
} routecount;

/* pop_half_life in steps (> 0; INFINITY: no decay). */
int routecount_init(routecount *r, int32_t n_layers, int32_t n_experts, double pop_half_life,
                    char *err);
void routecount_free(routecount *r);
/* T tokens' router logits of `layer`, [T, n_experts] (f32, as moe.c routes them). */
void routecount_observe(routecount *r, int32_t layer, const float *logits, int32_t T);
/* One request of key layer * n_experts + expert: a demand, or a prefetch
 * that loads it (xcache_acquire). */
void routecount_request(routecount *r, uint32_t key);

/* Also keep each key's requests decayed by 2^(-1/half_life) per step of its
 * layer (a step's repeats count once) and each layer's tokens, for
 * routecount_recent_score. Call after init, before any observation. */
int routecount_track_use(routecount *r, double half_life, char *err);

/* The recent policy's score (stream/cachesim.h): use + pop_weight x E x
 * pop / tokens of the key's layer (E x that is 1 for an expert of average
 * popularity). Needs routecount_track_use. */
double routecount_recent_score(const routecount *r, uint32_t key, double pop_weight);

/* Whether the key is held (above). */
static inline int routecount_held(const routecount *r, uint32_t key) {
    const int32_t layer = (int32_t)(key / (uint32_t)r->n_experts);
    const int64_t since = r->layer_step[layer] - (layer == r->last_layer ? 1 : 0);
    return r->last_req[key] >= since;
}

/* The key's summed probabilities, in probability-tokens (decayed). */
static inline double routecount_pop(const routecount *r, uint32_t key) {
    return r->pop[key] * r->inv_up;
}

/* Held keys score 2^512 x (1 + pop), above any ranked one (pop is at most
 * the number of tokens observed); the popularity orders each group (among
 * held keys to the precision of 1 + pop). */
static inline double routecount_score(const routecount *r, uint32_t key) {
    const double p = r->pop[key] * r->inv_up;
    return routecount_held(r, key) ? 0x1p512 + p * 0x1p512 : p;
}

#endif
