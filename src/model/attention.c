/* Full attention: GQA with per-head QK-norm, (partial) RoPE, optional
 * sigmoid output gate (Qwen3-Next / 3.5), over the session's KV cache. */
#include "model/model.h"
#include "quant/mat.h"
#include "util/pool.h"

#include <string.h>

void rmsnorm(const float *x, const float *w, int n, int T, float eps, float *y) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * n;
        float ss = 0.0f;
        for (int i = 0; i < n; i++)
            ss += xt[i] * xt[i];
        float inv = 1.0f / sqrtf(ss / (float)n + eps);
        for (int i = 0; i < n; i++)
            y[(size_t)t * n + i] = w[i] * (xt[i] * inv);
    }
}

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

typedef struct {
    e0_session *s;
    int layer, T;
} attn_job;

/* Query heads [h0, h1) of every token of the batch, as thread tid (its own
 * rows of scores), in runs of at most E0_ATTN_GROUP heads of one KV head. */
static void attn_heads(void *arg, int64_t h0, int64_t h1, int tid) {
    const attn_job *j = arg;
    e0_session *s = j->s;
    const e0_config *c = &s->m->cfg;
    e0_scratch *S = &s->s;
    const int nh = c->n_heads, hd = c->head_dim, kvd = c->n_kv_heads * hd,
              group = nh / c->n_kv_heads;
    const int qrows = (int)s->m->layers[j->layer].q.rows, per = c->attn_gated ? 2 * hd : hd;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *kc = s->kc[j->layer], *vc = s->vc[j->layer];
    float *scores = S->scores + (size_t)tid * E0_ATTN_GROUP * (size_t)s->n_ctx;
    for (int t = 0; t < j->T; t++) {
        const int n = s->pos + t + 1; /* causal: positions 0..pos+t */
        for (int h = (int)h0; h < (int)h1;) {
            const int kv = h / group;
            int g = (kv + 1) * group - h; /* the rest of this KV head's run */
            if (g > (int)h1 - h) g = (int)h1 - h;
            if (g > E0_ATTN_GROUP) g = E0_ATTN_GROUP;
            const float *q = S->q + (size_t)t * qrows + (size_t)h * per;
            const size_t kh = (size_t)kv * (size_t)hd;
            float *o = S->att + (size_t)t * nh * hd + (size_t)h * hd;
            mat_attend_heads(q, (size_t)per, g, kc + kh, vc + kh, (size_t)kvd, n, hd, scale, scores,
                             o, (size_t)hd);
            if (c->attn_gated)
                for (int i = 0; i < g * hd; i++) /* each head's gate half */
                    o[i] *= e0_sigmoid(q[(size_t)(i / hd) * per + hd + i % hd]);
            h += g;
        }
    }
}

void attn_forward(e0_session *s, int layer, const float *in, int T, float *out) {
    const e0_model *m = s->m;
    const e0_config *c = &m->cfg;
    const e0_layer *ly = &m->layers[layer];
    e0_scratch *S = &s->s;
    const int nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim, H = c->hidden;
    const int qrows = (int)ly->q.rows, kvd = nkv * hd, half = c->rotary_dim / 2;
    const int per = c->attn_gated ? 2 * hd : hd; /* q row stride per head */
    mat_matmul(&ly->q, in, H, T, S->q, qrows);
    mat_matmul(&ly->k, in, H, T, S->k, kvd);
    mat_matmul(&ly->v, in, H, T, S->v, kvd);
    float *kc = s->kc[layer], *vc = s->vc[layer];
    for (int t = 0; t < T; t++) {
        int pos = s->pos + t;
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
        memcpy(kc + (size_t)pos * kvd, S->k + (size_t)t * kvd, (size_t)kvd * sizeof(float));
        memcpy(vc + (size_t)pos * kvd, S->v + (size_t)t * kvd, (size_t)kvd * sizeof(float));
    }
    attn_job job = {s, layer, T};
    if (pool_threads() <= S->nscores)
        pool_for(nh, 1, attn_heads, &job);
    else /* the pool grew after this session was made: its score rows cover one thread */
        attn_heads(&job, 0, nh, 0);
    mat_matmul(&ly->o, S->att, nh * hd, T, out, H);
}
