/* Gated DeltaNet (linear attention) of Qwen3-Next / Qwen3.5, recurrent form.
 *
 * Per value head h (key head h / (Hv/Hk)), state S [Dk, Dv] in f32:
 *   causal depthwise conv (kernel K, history in the conv state) + SiLU over
 *   q|k|v; q, k L2-normalised (eps 1e-6), q scaled by Dk^-1/2;
 *   beta = sigmoid(b); g = A * softplus(a + dt_bias), A = -exp(A_log);
 *   S = exp(g) S; d = beta (v - S^T k); S += k d^T; o = S^T q;
 *   out = w * rmsnorm(o) * silu(z)   (the gated norm, never shifted).
 */
#include "model/forward.h"
#include "model/model.h"
#include "util/pool.h"

#include <string.h>

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static void l2norm(float *v, int n) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += v[i] * v[i];
    float inv = 1.0f / sqrtf(ss + 1e-6f);
    for (int i = 0; i < n; i++) v[i] *= inv;
}

/* qwen3_next packs per key head g: [q Dk | k Dk | v r*Dv | z r*Dv] and
 * [b r | a r]; unpack into the flat q|k|v (conv order), z, b, a. */
static void unpack(const e0_config *c, const float *qkvz, const float *ba, float *mix, float *z,
                   float *b, float *a) {
    const int Hk = c->lin_k_heads, Dk = c->lin_k_dim, r = c->lin_v_heads / Hk, Dv = c->lin_v_dim;
    const int Kd = Hk * Dk, per = 2 * Dk + 2 * r * Dv;
    for (int g = 0; g < Hk; g++) {
        const float *p = qkvz + (size_t)g * per;
        memcpy(mix + g * Dk, p, (size_t)Dk * sizeof *mix);
        memcpy(mix + Kd + g * Dk, p + Dk, (size_t)Dk * sizeof *mix);
        memcpy(mix + 2 * Kd + g * r * Dv, p + 2 * Dk, (size_t)(r * Dv) * sizeof *mix);
        memcpy(z + g * r * Dv, p + 2 * Dk + r * Dv, (size_t)(r * Dv) * sizeof *z);
        memcpy(b + g * r, ba + g * 2 * r, (size_t)r * sizeof *b);
        memcpy(a + g * r, ba + g * 2 * r + r, (size_t)r * sizeof *a);
    }
}

typedef struct {
    const e0_batch *b;
    const e0_layer *ly;
    int layer;
} dn_job;

/* Tokens [t0, t1): the causal conv from their session's S->hist (its run's
 * conv history, then the run's rows of mix) into the batch's S->mix, SiLU,
 * then q and k L2-normalised per key head and q scaled by Dk^-1/2. */
static void dn_conv(void *arg, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const dn_job *j = arg;
    const e0_batch *b = j->b;
    const e0_config *c = &b->run[0].s->m->cfg;
    const e0_layer *ly = j->ly;
    const int Hk = c->lin_k_heads, Dk = c->lin_k_dim, K = c->conv_kernel;
    const int Kd = Hk * Dk, C = 2 * Kd + c->lin_v_heads * c->lin_v_dim;
    const float qscale = 1.0f / sqrtf((float)Dk);
    for (int64_t t = t0; t < t1; t++) {
        const e0_run *ru = &b->run[batch_run_of(b, (int)t)];
        const float *hist = ru->s->s.hist + (size_t)(t - ru->t0) * C;
        float *row = b->S->mix + (size_t)t * C;
        for (int ch = 0; ch < C; ch++) {
            float acc = 0.0f;
            for (int i = 0; i < K; i++)
                acc += ly->conv_w[(size_t)ch * K + i] * hist[(size_t)i * C + ch];
            row[ch] = e0_silu(acc);
        }
        for (int g = 0; g < Hk; g++) {
            float *q = row + g * Dk, *k = row + Kd + g * Dk;
            l2norm(q, Dk);
            l2norm(k, Dk);
            for (int i = 0; i < Dk; i++)
                q[i] *= qscale;
        }
    }
}

/* The recurrence of value heads [h0, h1): each run's tokens in order
 * against its session's state. A verify pass (its session's mtp->keep)
 * also keeps the state after its first token (mtp->rec1): a rejected
 * draft then costs no recomputation (e0_session_rollback). */
static void dn_heads(void *arg, int64_t h0, int64_t h1, int tid) {
    (void)tid;
    const dn_job *j = arg;
    const e0_batch *b = j->b;
    const e0_config *c = &b->run[0].s->m->cfg;
    const e0_layer *ly = j->ly;
    const e0_scratch *S = b->S;
    const int Hk = c->lin_k_heads, Hv = c->lin_v_heads, Dk = c->lin_k_dim, Dv = c->lin_v_dim, r = Hv / Hk;
    const int Kd = Hk * Dk, Vd = Hv * Dv, C = 2 * Kd + Vd;
    for (int ri = 0; ri < b->nrun; ri++) {
        float *state = b->run[ri].s->rec[j->layer];
        const e0_mtp_state *mt = b->run[ri].s->mtp;
        float *keep = mt && mt->keep ? mt->rec1[j->layer] : NULL;
        for (int t = b->run[ri].t0; t < b->run[ri].t0 + b->run[ri].n; t++) {
            const float *row = S->mix + (size_t)t * C;
            for (int h = (int)h0; h < (int)h1; h++) {
                const int g = ly->vtiled ? h % Hk : h / r;
                const float *q = row + g * Dk, *k = row + Kd + g * Dk, *v = row + 2 * Kd + h * Dv;
                const float beta = e0_sigmoid(S->bb[(size_t)t * Hv + h]);
                const float gg = ly->A[h] * softplus(S->aa[(size_t)t * Hv + h] + ly->dt_bias[h]);
                const float decay = expf(gg);
                float *St = state + (size_t)h * Dk * Dv; /* [Dk, Dv] */
                float *o = S->o + (size_t)t * Vd + (size_t)h * Dv;
                mat_delta_step(St, k, q, v, beta, decay, Dk, Dv, o);
                if (keep && t == b->run[ri].t0) /* in cache, just written: a copy, not a recomputation */
                    memcpy(keep + (size_t)h * Dk * Dv, St, (size_t)Dk * Dv * sizeof *St);
                /* gated RMSNorm over the head */
                float ss = 0.0f;
                for (int jj = 0; jj < Dv; jj++) ss += o[jj] * o[jj];
                const float inv = 1.0f / sqrtf(ss / (float)Dv + c->rms_eps);
                const float *z = S->zz + (size_t)t * Vd + (size_t)h * Dv;
                for (int jj = 0; jj < Dv; jj++) o[jj] = ly->lin_norm[jj] * (o[jj] * inv) * e0_silu(z[jj]);
            }
        }
    }
}

void deltanet_forward_batch(const e0_batch *b, int layer, const float *in, float *out) {
    const e0_model *m = b->run[0].s->m;
    const e0_config *c = &m->cfg;
    const e0_layer *ly = &m->layers[layer];
    e0_scratch *S = b->S;
    const int T = b->T, H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads, Dk = c->lin_k_dim;
    const int Dv = c->lin_v_dim, K = c->conv_kernel;
    const int Kd = Hk * Dk, Vd = Hv * Dv, C = 2 * Kd + Vd;
    /* projections -> mix [T, C] (q|k|v), z [T, Vd], b/a [T, Hv] */
    if (ly->packed) {
        const int P = (int)ly->qkvz.rows;
        batch_matmul(b, &ly->qkvz, in, H, S->proj, P);
        batch_matmul(b, &ly->ba, in, H, S->o, 2 * Hv); /* S->o is free until the recurrence */
        for (int t = 0; t < T; t++)
            unpack(c, S->proj + (size_t)t * P, S->o + (size_t)t * 2 * Hv, S->mix + (size_t)t * C,
                   S->zz + (size_t)t * Vd, S->bb + (size_t)t * Hv, S->aa + (size_t)t * Hv);
    } else {
        batch_matmul(b, &ly->qkv, in, H, S->mix, C);
        batch_matmul(b, &ly->z, in, H, S->zz, Vd);
        if (ly->ba_packed) { /* per key head [b r | a r] */
            const int r = Hv / Hk;
            batch_matmul(b, &ly->ba, in, H, S->o, 2 * Hv);
            for (int t = 0; t < T; t++)
                for (int g = 0; g < Hk; g++) {
                    const float *p = S->o + (size_t)t * 2 * Hv + (size_t)g * 2 * r;
                    memcpy(S->bb + (size_t)t * Hv + g * r, p, (size_t)r * sizeof(float));
                    memcpy(S->aa + (size_t)t * Hv + g * r, p + r, (size_t)r * sizeof(float));
                }
        } else {
            batch_matmul(b, &ly->b, in, H, S->bb, Hv);
            batch_matmul(b, &ly->a, in, H, S->aa, Hv);
        }
    }
    /* causal depthwise conv over [history (K-1 rows) ; the run's mix rows]
     * in each session's S->hist, then SiLU and the q / k norms, token by
     * token across the compute pool */
    for (int r = 0; r < b->nrun; r++) {
        const e0_run *ru = &b->run[r];
        float *hist = ru->s->s.hist;
        memcpy(hist, ru->s->conv[layer], (size_t)(K - 1) * C * sizeof *hist);
        memcpy(hist + (size_t)(K - 1) * C, S->mix + (size_t)ru->t0 * C,
               (size_t)ru->n * C * sizeof *hist);
    }
    dn_job job = {b, ly, layer};
    pool_for(T, 1, dn_conv, &job);
    for (int r = 0; r < b->nrun; r++) {
        const e0_run *ru = &b->run[r];
        memcpy(ru->s->conv[layer], ru->s->s.hist + (size_t)ru->n * C,
               (size_t)(K - 1) * C * sizeof(float));
        if (ru->s->mtp && ru->s->mtp->keep) /* the conv state after the first token (dn_heads) */
            memcpy(ru->s->mtp->conv1[layer], ru->s->s.hist + (size_t)C, (size_t)(K - 1) * C * sizeof(float));
    }
    /* value heads are independent: split them across the compute pool */
    pool_for(Hv, 1, dn_heads, &job);
    batch_matmul(b, &ly->out, S->o, Vd, out, H);
}

void deltanet_forward(e0_session *s, int layer, const float *in, int T, float *out) {
    e0_run run;
    const e0_batch b = batch_one(s, T, &run);
    deltanet_forward_batch(&b, layer, in, out);
}
