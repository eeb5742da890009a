/* The MoE block (docs/design.md §3) and the dense MLP.
 *
 *   y = sum_k w_k * down_e(silu(gate_e(x)) * up_e(x))  [+ sigmoid(sg(x)) * shared(x)]
 *
 * Router logits, softmax, top-k and renormalisation are f32. The routed
 * experts run in the streaming layer (stream/switchglu.c), each once over
 * the tokens routed to it; their outputs land in a per-(token, slot) buffer
 * and are summed per token in slot order, so the result does not depend on
 * the order experts are visited in or where their bytes came from. In a
 * batch of several sequences (model.h) an expert runs once over the tokens
 * of every sequence routed to it, and each token's sum is the one it gets
 * alone.
 */
#include "model/forward.h"
#include "model/model.h"
#include "stream/switchglu.h"
#include "util/pool.h"

#include <math.h>
#include <string.h>

/* h = silu(g) * u over n values */
static void swiglu(const float *g, const float *u, size_t n, float *h) {
    for (size_t i = 0; i < n; i++) h[i] = e0_silu(g[i]) * u[i];
}

/* Softmax over all E logits, then the k largest probabilities (lower index
 * first on ties), renormalised to sum 1 when `renorm`. */
static void route(const float *logits, int E, int k, bool renorm, int32_t *idx, float *w) {
    float mx = -INFINITY, sum = 0.0f;
    for (int e = 0; e < E; e++) mx = logits[e] > mx ? logits[e] : mx;
    for (int e = 0; e < E; e++) sum += expf(logits[e] - mx);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= idx[i] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        idx[j] = best;
        w[j] = expf(logits[best] - mx) / sum;
    }
    if (renorm) {
        float s = 0.0f;
        for (int j = 0; j < k; j++) s += w[j];
        for (int j = 0; j < k; j++) w[j] /= s;
    }
}

/* w = the token's own probabilities (softmax over all E logits, computed
 * as route() does) of the experts idx, renormalised to sum 1 when `renorm`:
 * the router's weights for experts chosen otherwise (stickiness, replay). */
static void reweigh(const float *logits, int E, int k, bool renorm, const int32_t *idx, float *w) {
    float mx = -INFINITY, sum = 0.0f;
    for (int e = 0; e < E; e++)
        mx = logits[e] > mx ? logits[e] : mx;
    for (int e = 0; e < E; e++)
        sum += expf(logits[e] - mx);
    for (int j = 0; j < k; j++)
        w[j] = expf(logits[idx[j]] - mx) / sum;
    if (renorm) {
        float s = 0.0f;
        for (int j = 0; j < k; j++)
            s += w[j];
        for (int j = 0; j < k; j++)
            w[j] /= s;
    }
}

/* Route stickiness (synth/synth.h; synthetic checkpoints whose config.json
 * sets edge0_synth.route_stickiness): make the token share at least n of
 * its k experts with the previous position's, `prev` (that position's final
 * experts, highest weight first). route() leaves idx in falling probability,
 * so the lowest-weighted unshared picks are replaced from the end, by the
 * previous position's best experts not yet picked; then every weight is the
 * token's own probability again (computed as route() does), renormalised.
 * Nothing changes, bit for bit, when n are already shared. */
static void sticky_apply(const float *logits, int E, int k, int n, bool renorm,
                         const uint16_t *prev, int32_t *idx, float *w) {
    int shared = 0;
    for (int j = 0; j < k; j++)
        for (int i = 0; i < k; i++)
            shared += idx[j] == prev[i];
    if (shared >= n) return;
    int c = 0;
    for (int j = k - 1; j >= 0 && shared < n; j--) {
        bool in_prev = false;
        for (int i = 0; i < k; i++)
            in_prev |= idx[j] == prev[i];
        if (in_prev) continue;
        for (;; c++) { /* k - shared >= n - shared candidates exist: never runs past prev */
            bool picked = false;
            for (int i = 0; i < k; i++)
                picked |= idx[i] == prev[c];
            if (!picked) break;
        }
        idx[j] = prev[c++];
        shared++;
    }
    reweigh(logits, E, k, renorm, idx, w);
}

/* The token's final experts, highest weight first (lower id on ties), as
 * the next position's `prev`. */
static void sticky_record(const int32_t *idx, const float *w, int k, uint16_t *out) {
    int32_t ord[E0_STICKY_MAX_K];
    for (int j = 0; j < k; j++) {
        int i = j;
        for (; i > 0; i--) {
            const int32_t a = ord[i - 1];
            if (w[a] > w[j] || (w[a] == w[j] && idx[a] < idx[j])) break;
            ord[i] = a;
        }
        ord[i] = j;
    }
    for (int j = 0; j < k; j++)
        out[j] = (uint16_t)idx[ord[j]];
}

/* A routing profile (io/config.h e0_route_cfg) on one token's logits, in
 * place: + its spread x (the layer's popularity offsets + the bonus of the
 * experts chosen at positions p - 1, ..., p - window_len, the nearest
 * counting); `hist` is the session's route history, `stride` values per
 * position. The logits then route as the router's own (route()), and the
 * router policy's predictions see the same ones. */
static void profile_apply(const e0_route_cfg *r, int layer, float *lg, int E, int k,
                          const uint16_t *hist, size_t p, size_t stride) {
    double m = 0, v = 0;
    for (int e = 0; e < E; e++)
        m += lg[e];
    m /= E;
    for (int e = 0; e < E; e++)
        v += (lg[e] - m) * (lg[e] - m);
    const float sd = (float)sqrt(v / E);
    if (!(sd > 0)) return; /* constant logits (a sparse checkpoint): nothing to scale */
    if (r->bias)
        for (int e = 0; e < E; e++)
            lg[e] += sd * r->bias[(size_t)layer * E + e];
    const size_t W = r->window_len > 1 ? (size_t)r->window_len : 1;
    uint64_t seen[1024]; /* experts already given a bonus (E <= 65536: session.c) */
    memset(seen, 0, ((size_t)E + 63) / 64 * sizeof *seen);
    double bonus = r->recent;
    for (size_t d = 1; d <= W && d <= p; d++) {
        if (d == 2) bonus = r->window;
        else if (d > 2) bonus *= r->decay;
        const uint16_t *row = hist + (p - d) * stride;
        for (int j = 0; j < k; j++) {
            const int e = row[j];
            if (seen[e >> 6] >> (e & 63) & 1) continue; /* its nearest use counts */
            seen[e >> 6] |= 1ull << (e & 63);
            lg[e] += sd * (float)bonus;
        }
    }
}

/* Routing profile, stickiness and replay over a batch, run by run in
 * position order: a run's token i follows its token i - 1, the first one
 * the session's previous position. A replayed session's token takes the
 * trace's experts (model/replay.c) with the router's weights for them
 * (reweigh); the route history records what was used. */
static void route_overrides(const e0_batch *b, int layer, int E, int k, bool renorm) {
    const e0_config *c = &b->run[0].s->m->cfg;
    const bool prof = config_route_on(c);
    const int n = (int)lround(c->route_stickiness * k);
    const size_t L = (size_t)c->n_layers;
    e0_scratch *S = b->S;
    for (int r = 0; r < b->nrun; r++) {
        const e0_session *s = b->run[r].s;
        if (!s->route_hist && !s->replay) continue;
        for (int i = 0; i < b->run[r].n; i++) {
            const size_t t = (size_t)(b->run[r].t0 + i), p = (size_t)s->pos + (size_t)i;
            int32_t *idx = S->ridx + t * k;
            float *w = S->rw + t * k;
            if (prof && s->route_hist) {
                float *lg = S->rlogits + t * E;
                profile_apply(&c->route, layer, lg, E, k, s->route_hist + (size_t)layer * k, p, L * k);
                route(lg, E, k, renorm, idx, w);
            }
            if (p > 0 && n > 0 && s->route_hist)
                sticky_apply(S->rlogits + t * E, E, k, n, renorm,
                             s->route_hist + ((p - 1) * L + (size_t)layer) * (size_t)k, idx, w);
            const int32_t *rep = replay_experts(s, layer, (int64_t)p);
            if (rep) {
                memcpy(idx, rep, (size_t)k * sizeof *idx);
                reweigh(S->rlogits + t * E, E, k, renorm, idx, w);
            }
            if (s->route_hist)
                sticky_record(idx, w, k, s->route_hist + (p * L + (size_t)layer) * (size_t)k);
        }
    }
}

typedef struct {
    e0_scratch *S;
    int E, k;
    bool renorm;
} route_job;

/* route() for tokens [t0, t1) of a batch. */
static void route_tokens(void *arg, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const route_job *j = arg;
    for (int64_t t = t0; t < t1; t++)
        route(j->S->rlogits + (size_t)t * j->E, j->E, j->k, j->renorm,
              j->S->ridx + (size_t)t * j->k, j->S->rw + (size_t)t * j->k);
}

typedef struct {
    const e0_scratch *S;
    float *out;
    int H, k;
    bool shared;
} combine_job;

/* Tokens [t0, t1): out = the routed experts' outputs weighted by their
 * routing weights, in slot order, then + sigmoid(gate) x the shared expert's. */
static void combine_tokens(void *arg, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const combine_job *j = arg;
    const e0_scratch *S = j->S;
    const int H = j->H, k = j->k;
    for (int64_t t = t0; t < t1; t++) {
        float *o = j->out + (size_t)t * H;
        memset(o, 0, (size_t)H * sizeof *o);
        for (int slot = 0; slot < k; slot++) {
            const float w = S->rw[(size_t)t * k + slot];
            const float *y = S->eo + ((size_t)t * k + slot) * H;
            for (int i = 0; i < H; i++)
                o[i] += w * y[i];
        }
        if (!j->shared) continue;
        const float g = e0_sigmoid(S->shg[t]);
        for (int i = 0; i < H; i++)
            o[i] += g * S->ys[(size_t)t * H + i];
    }
}

int moe_forward_batch(const e0_batch *b, int layer, const float *in, float *out, char *err) {
    const e0_session *s0 = b->run[0].s;
    const e0_model *m = s0->m;
    const e0_config *c = &m->cfg;
    const e0_layer *ly = &m->layers[layer];
    e0_scratch *S = b->S;
    const int T = b->T, H = c->hidden, E = c->n_experts, k = s0->eng->top_k;

    mat_matmul_f32(&ly->router, in, H, T, S->rlogits, E); /* f32 activations: near-ties decide routing */
    route_job rj = {S, E, k, c->norm_topk};
    pool_for(T, 1, route_tokens, &rj);
    bool over = false;
    for (int r = 0; r < b->nrun; r++)
        over |= b->run[r].s->route_hist || b->run[r].s->replay;
    if (over && layer < c->n_layers) /* the MTP block (layer n_layers) routes by its router */
        route_overrides(b, layer, E, k, c->norm_topk);
    stream_observe(s0->eng->stream, layer, S->rlogits, T);
    int rc = stream_experts(s0->eng->stream, layer, in, b, S->ridx, S->rw, k, S->eo, S, err);
    if (rc) return rc;
    const int Is = c->shared_inter;
    if (ly->has_shared) {
        mat_matmul_f32(&ly->sh_router, in, H, T, S->shg, 1);
        batch_matmul(b, &ly->sh_gate, in, H, S->g, Is);
        batch_matmul(b, &ly->sh_up, in, H, S->u, Is);
        swiglu(S->g, S->u, (size_t)T * Is, S->g);
        batch_matmul(b, &ly->sh_down, S->g, Is, S->ys, H);
    }
    combine_job cj = {S, out, H, k, ly->has_shared};
    pool_for(T, 1, combine_tokens, &cj);
    return 0;
}

void mlp_forward_batch(const e0_batch *b, int layer, const float *in, float *out) {
    const e0_model *m = b->run[0].s->m;
    const e0_layer *ly = &m->layers[layer];
    const int H = m->cfg.hidden, I = m->cfg.dense_inter;
    e0_scratch *S = b->S;
    batch_matmul(b, &ly->mlp_gate, in, H, S->g, I);
    batch_matmul(b, &ly->mlp_up, in, H, S->u, I);
    swiglu(S->g, S->u, (size_t)b->T * I, S->g);
    batch_matmul(b, &ly->mlp_down, S->g, I, out, H);
}

int moe_forward(e0_session *s, int layer, const float *in, int T, float *out, char *err) {
    e0_run run;
    const e0_batch b = batch_one(s, T, &run);
    return moe_forward_batch(&b, layer, in, out, err);
}

void mlp_forward(e0_session *s, int layer, const float *in, int T, float *out) {
    e0_run run;
    const e0_batch b = batch_one(s, T, &run);
    mlp_forward_batch(&b, layer, in, out);
}
