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

/* Rotate-half RoPE on the first 2*half dims of one head vector. The angle is
 * formed in f32 as transformers does (position * inv_freq). */
static void rope(float *v, int half, const float *inv_freq, int pos) {
    for (int i = 0; i < half; i++) {
        float ang = (float)pos * inv_freq[i];
        float c = (float)cos((double)ang), s = (float)sin((double)ang);
        float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

typedef struct {
    e0_session *s;
    int layer, T;
} attn_job;

/* Query heads [h0, h1) of every token of the batch, as thread tid (its own
 * row of scores). */
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
    float *scores = S->scores + (size_t)tid * (size_t)s->n_ctx;
    for (int t = 0; t < j->T; t++) {
        const int n = s->pos + t + 1; /* causal: positions 0..pos+t */
        for (int h = (int)h0; h < (int)h1; h++) {
            const float *q = S->q + (size_t)t * qrows + (size_t)h * per;
            const size_t kh = (size_t)(h / group) * (size_t)hd;
            float *o = S->att + (size_t)t * nh * hd + (size_t)h * hd;
            mat_attend(q, kc + kh, vc + kh, (size_t)kvd, n, hd, scale, scores, o);
            if (c->attn_gated) {
                const float *g = q + hd; /* the head's gate half */
                for (int i = 0; i < hd; i++)
                    o[i] *= e0_sigmoid(g[i]);
            }
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
        for (int h = 0; h < nh; h++) {
            float *q = S->q + (size_t)t * qrows + (size_t)h * per;
            rmsnorm(q, ly->q_norm, hd, 1, c->rms_eps, q);
            rope(q, half, m->rope_inv_freq, pos);
        }
        for (int h = 0; h < nkv; h++) {
            float *k = S->k + (size_t)t * kvd + (size_t)h * hd;
            rmsnorm(k, ly->k_norm, hd, 1, c->rms_eps, k);
            rope(k, half, m->rope_inv_freq, pos);
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
