/* Full attention: GQA with per-head QK-norm, (partial) RoPE, optional
 * sigmoid output gate (Qwen3-Next / 3.5), over the session's KV cache. */
#include "model/forward.h"
#include "model/model.h"
#include "quant/mat.h"
#include "stream/budget.h"
#include "util/num.h"
#include "util/pool.h"

#include <string.h>

/* Rotate-half RoPE on the first 2*half dims of one head vector, with the
 * position's cos and sin table (rope_table). */
static void rope(float *v, int half, const float *cs) {
    for (int i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

/* cos and sin of every rotary pair at pos. The angle is formed in f32 as
 * transformers does (position * inv_freq); one table serves every head. */
static void rope_table(float *cs, int half, const float *inv_freq, int pos) {
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * inv_freq[i];
        cs[2 * i] = (float)cos((double)ang);
        cs[2 * i + 1] = (float)sin((double)ang);
    }
}

/* Row at element `at` of a cache: n floats copied, or rounded to f16. */
static void kv_store(void *c, size_t at, const float *x, int n, bool f16) {
    if (!f16) {
        memcpy((float *)c + at, x, (size_t)n * sizeof *x);
        return;
    }
    uint16_t *h = (uint16_t *)c + at;
    for (int i = 0; i < n; i++)
        h[i] = e0_f32_to_f16(x[i]);
}

typedef struct {
    const e0_batch *b;
    int layer;
} attn_job;

/* Query heads [h0, h1) of every token of the batch, as thread tid (its own
 * rows of each session's scores), in runs of at most E0_ATTN_GROUP heads of
 * one KV head; each token against its own session's cache. */
static void attn_heads(void *arg, int64_t h0, int64_t h1, int tid) {
    const attn_job *j = arg;
    const e0_batch *b = j->b;
    const e0_session *s0 = b->run[0].s;
    const e0_config *c = &s0->m->cfg;
    const e0_scratch *S = b->S;
    const int nh = c->n_heads, hd = c->head_dim, kvd = c->n_kv_heads * hd,
              group = nh / c->n_kv_heads;
    const int qrows = (int)s0->m->layers[j->layer].q.rows, per = c->attn_gated ? 2 * hd : hd;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int r = 0; r < b->nrun; r++) {
        const e0_session *s = b->run[r].s;
        const void *kc = s->kc[j->layer], *vc = s->vc[j->layer];
        const bool f16 = s->eng->opts.kv_type == E0_KV_F16;
        const size_t es = budget_kv_elem_bytes(s->eng->opts.kv_type);
        float *scores = s->s.scores + (size_t)tid * E0_ATTN_GROUP * (size_t)s->n_ctx;
        for (int i = 0; i < b->run[r].n; i++) {
            const int t = b->run[r].t0 + i, n = s->pos + i + 1; /* causal: positions 0..pos+i */
            for (int h = (int)h0; h < (int)h1;) {
                const int kv = h / group;
                int g = (kv + 1) * group - h; /* the rest of this KV head's run */
                if (g > (int)h1 - h) g = (int)h1 - h;
                if (g > E0_ATTN_GROUP) g = E0_ATTN_GROUP;
                const float *q = S->q + (size_t)t * qrows + (size_t)h * per;
                const size_t kh = (size_t)kv * (size_t)hd;
                float *o = S->att + (size_t)t * nh * hd + (size_t)h * hd;
                mat_attend_heads(q, (size_t)per, g, (const char *)kc + kh * es,
                                 (const char *)vc + kh * es, f16, (size_t)kvd, n, hd, scale,
                                 scores, o, (size_t)hd);
                if (c->attn_gated)
                    for (int x = 0; x < g * hd; x++) /* each head's gate half */
                        o[x] *= e0_sigmoid(q[(size_t)(x / hd) * per + hd + x % hd]);
                h += g;
            }
        }
    }
}

void attn_forward_batch(const e0_batch *b, int layer, const float *in, float *out) {
    const e0_model *m = b->run[0].s->m;
    const e0_config *c = &m->cfg;
    const e0_layer *ly = &m->layers[layer];
    e0_scratch *S = b->S;
    const int nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim, H = c->hidden;
    const int qrows = (int)ly->q.rows, kvd = nkv * hd, half = c->rotary_dim / 2;
    const int per = c->attn_gated ? 2 * hd : hd; /* q row stride per head */
    batch_matmul(b, &ly->q, in, H, S->q, qrows);
    batch_matmul(b, &ly->k, in, H, S->k, kvd);
    batch_matmul(b, &ly->v, in, H, S->v, kvd);
    int nscores = S->nscores; /* score rows per session: the fewest threads any was made for */
    for (int r = 0; r < b->nrun; r++) {
        const e0_run *ru = &b->run[r];
        void *kc = ru->s->kc[layer], *vc = ru->s->vc[layer];
        const bool f16 = ru->s->eng->opts.kv_type == E0_KV_F16;
        if (ru->s->s.nscores < nscores) nscores = ru->s->s.nscores;
        for (int i = 0; i < ru->n; i++) {
            const int t = ru->t0 + i, pos = ru->s->pos + i;
            rope_table(S->rope_cs, half, m->rope_inv_freq, pos);
            for (int h = 0; h < nh; h++) {
                float *q = S->q + (size_t)t * qrows + (size_t)h * per;
                rmsnorm(q, ly->q_norm, hd, 1, c->rms_eps, q);
                rope(q, half, S->rope_cs);
            }
            for (int h = 0; h < nkv; h++) {
                float *k = S->k + (size_t)t * kvd + (size_t)h * hd;
                rmsnorm(k, ly->k_norm, hd, 1, c->rms_eps, k);
                rope(k, half, S->rope_cs);
            }
            kv_store(kc, (size_t)pos * kvd, S->k + (size_t)t * kvd, kvd, f16);
            kv_store(vc, (size_t)pos * kvd, S->v + (size_t)t * kvd, kvd, f16);
        }
    }
    attn_job job = {b, layer};
    if (pool_threads() <= nscores)
        pool_for(nh, 1, attn_heads, &job);
    else /* the pool grew after a session was made: its score rows cover one thread */
        attn_heads(&job, 0, nh, 0);
    batch_matmul(b, &ly->o, S->att, nh * hd, out, H);
}

void attn_forward(e0_session *s, int layer, const float *in, int T, float *out) {
    e0_run run;
    const e0_batch b = batch_one(s, T, &run);
    attn_forward_batch(&b, layer, in, out);
}
