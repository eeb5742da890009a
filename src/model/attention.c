/* Full attention: GQA with per-head QK-norm, (partial) RoPE, optional
 * sigmoid output gate (Qwen3-Next / 3.5), over the session's KV cache. */
#include "model/model.h"

#include <string.h>

void rmsnorm(const float *x, const float *w, int n, int T, float eps, float *y) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * n;
        float ss = 0.0f;
        for (int i = 0; i < n; i++) ss += xt[i] * xt[i];
        float inv = 1.0f / sqrtf(ss / (float)n + eps);
        for (int i = 0; i < n; i++) y[(size_t)t * n + i] = w[i] * (xt[i] * inv);
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
    const float scale = 1.0f / sqrtf((float)hd);
    const int group = nh / nkv;
    for (int t = 0; t < T; t++) {
        int n = s->pos + t + 1; /* causal: positions 0..pos+t */
        for (int h = 0; h < nh; h++) {
            const float *q = S->q + (size_t)t * qrows + (size_t)h * per;
            const int kh = h / group;
            float mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                const float *k = kc + (size_t)j * kvd + (size_t)kh * hd;
                float d = 0.0f;
                for (int i = 0; i < hd; i++) d += q[i] * k[i];
                S->scores[j] = d * scale;
                if (S->scores[j] > mx) mx = S->scores[j];
            }
            float sum = 0.0f;
            for (int j = 0; j < n; j++) sum += S->scores[j] = expf(S->scores[j] - mx);
            float *o = S->att + (size_t)t * nh * hd + (size_t)h * hd;
            memset(o, 0, (size_t)hd * sizeof *o);
            for (int j = 0; j < n; j++) {
                const float p = S->scores[j] / sum;
                const float *v = vc + (size_t)j * kvd + (size_t)kh * hd;
                for (int i = 0; i < hd; i++) o[i] += p * v[i];
            }
            if (c->attn_gated) {
                const float *g = q + hd; /* the head's gate half */
                for (int i = 0; i < hd; i++) o[i] *= e0_sigmoid(g[i]);
            }
        }
    }
    mat_matmul(&ly->o, S->att, nh * hd, T, out, H);
}
