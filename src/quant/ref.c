/* The scalar references of every kernel (mat_matmul_ref, mat_delta_step_ref,
 * mat_attend_ref) and the scalar preparation of activations (k_prep_*):
 * what the SIMD kernels are tested against and fall back to, kept apart
 * from them and from the dispatch (dispatch.c), as ggml's CPU backend keeps
 * its _generic versions. Nothing here calls a kernel. */
#include "quant/mat.h"

#include "quant/kernels.h"
#include "util/num.h"

#include <math.h>
#include <string.h>

#define CHUNK 512

void mat_matmul_ref(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y,
                    int64_t ldy) {
    float w[CHUNK];
    for (int64_t r = 0; r < m->rows; r++) {
        for (int64_t t = 0; t < T; t++)
            y[t * ldy + r] = 0.0f;
        for (int64_t c0 = 0; c0 < m->cols; c0 += CHUNK) {
            int64_t n = m->cols - c0 < CHUNK ? m->cols - c0 : CHUNK;
            mat_dequant(m, r, c0, n, w);
            for (int64_t t = 0; t < T; t++) {
                const float *xt = x + t * ldx + c0;
                float acc = 0.0f;
                for (int64_t i = 0; i < n; i++)
                    acc += w[i] * xt[i];
                y[t * ldy + r] += acc;
            }
        }
    }
}

/* ---- preparation of activations (kernels.h) -------------------------------- */

void k_prep_q4(const float *x, int64_t cols, int lanes, float *xp, int64_t nblk) {
    const int64_t bv = 8 * (int64_t)lanes; /* values per block */
    for (int64_t b = 0; b < nblk; b++)
        for (int k = 0; k < 8; k++)
            for (int j = 0; j < lanes; j++) {
                const int64_t c = b * bv + 8 * j + k;
                xp[b * bv + k * lanes + j] = c < cols ? x[c] : 0.0f;
            }
}

void k_prep_xs(const float *x, int64_t cols, int group, float *xs, int64_t ldxs) {
    const int64_t ng = cols / group;
    for (int64_t g = 0; g < ng; g++) {
        float s = 0.0f;
        for (int i = 0; i < group; i++)
            s += x[g * group + i];
        xs[g] = s;
    }
    for (int64_t g = ng; g < ldxs; g++)
        xs[g] = 0.0f;
}

/* n = rint(x / d * 256^(planes-1)) as signed base-256 digits q[0..planes)
 * in [-128, 127], the last plane lowest: q_last is the sign-extended low
 * byte of n, and so on; the first digit takes what is left, clamped. */
static void split_digits(int32_t n, int planes, int8_t q[3]) {
    int32_t rest = n;
    for (int p = planes - 1; p >= 0; p--) {
        int32_t v = p ? ((rest + 128) & 255) - 128 : rest;
        if (!p) v = v < -128 ? -128 : v > 127 ? 127 : v;
        q[p] = (int8_t)v;
        rest = (rest - v) / 256;
    }
}

/* 256^(planes - 1): the planes' integer n = rint(x / d * plane_scale). */
static float plane_scale(int planes) {
    return planes == 3 ? 65536.0f : planes == 2 ? 256.0f : 1.0f;
}

/* The largest |v[i]| of n values. */
static float amax_of(const float *v, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++)
        amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
    return amax;
}

void k_prep_q8(const float *x, int64_t cols, int planes, int8_t *xq, float *xdl, float *xb,
               int64_t nblk) {
    for (int64_t b = 0; b < nblk; b++)
        for (int m4 = 0; m4 < 4; m4++) {
            const int64_t c0 = b * 128 + m4 * 32;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) {
                const float v = c0 + i < cols ? fabsf(x[c0 + i]) : 0.0f;
                amax = v > amax ? v : amax;
            }
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            const float scale = plane_scale(planes);
            int32_t sum = 0;
            for (int i = 0; i < 32; i++) {
                /* n = rint(x / d * 256^(planes-1)), |n| <= 127 * 256^(planes-1): exact in f32 and
                 * int32 */
                const int32_t n = (int32_t)lrintf((c0 + i < cols ? x[c0 + i] : 0.0f) * id * scale);
                const int j = m4 * 32 + i; /* column within the block */
                int8_t q[3];
                split_digits(n, planes, q);
                for (int p = 0; p < planes; p++)
                    xq[(b * planes + p) * 128 + (j & 1) * 64 + j / 2] = q[p];
                sum += n;
            }
            const float dl = planes == 3 ? d / 65536.0f : planes == 2 ? d / 256.0f : d;
            for (int l = 0; l < 4; l++)
                xdl[b * 16 + m4 * 4 + l] = dl;
            xb[b * 4 + m4] = dl * (float)sum;
        }
}

void k_prep_qg(const float *x, int64_t cols, int group, int planes, int8_t *xg, float *xgd,
               float *xgs) {
    const float scale = plane_scale(planes);
    for (int64_t g = 0; g < cols / group; g++) {
        const float *xv = x + g * group;
        const float d = amax_of(xv, group) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < group; i++) {
            const int32_t n = (int32_t)lrintf(xv[i] * id * scale);
            int8_t q[3];
            split_digits(n, planes, q);
            for (int p = 0; p < planes; p++)
                xg[(g * planes + p) * group + (i & 1) * (group / 2) + i / 2] = q[p];
            sum += n;
        }
        xgd[g] = d / scale;
        xgs[g] = xgd[g] * (float)sum;
    }
}

void k_prep_qk(const float *x, int64_t cols, int blk, int planes, int8_t *xk, float *xkd,
               float *xks) {
    const float scale = plane_scale(planes);
    for (int64_t b = 0; b < cols / blk; b++) {
        const float *xv = x + b * blk;
        const float d = amax_of(xv, blk) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f, dl = d / scale;
        for (int k = 0; k < blk / 16; k++) {
            int32_t sum = 0;
            for (int i = 16 * k; i < 16 * k + 16; i++) {
                const int32_t n = (int32_t)lrintf(xv[i] * id * scale);
                int8_t q[3];
                split_digits(n, planes, q);
                for (int p = 0; p < planes; p++)
                    xk[(b * planes + p) * blk + i] = q[p];
                sum += n;
            }
            xks[b * (blk / 16) + k] = dl * (float)sum;
        }
        xkd[b] = dl;
    }
}

/* ---- Gated DeltaNet step ------------------------------------------------------ */

void mat_delta_step_ref(float *St, const float *k, const float *q, const float *v, float beta,
                        float decay, int Dk, int Dv, float *o) {
    for (int i = 0; i < Dk * Dv; i++)
        St[i] *= decay;
    /* o temporarily holds S^T k, then the delta d */
    for (int j = 0; j < Dv; j++)
        o[j] = 0.0f;
    for (int i = 0; i < Dk; i++)
        for (int j = 0; j < Dv; j++)
            o[j] += St[(size_t)i * Dv + j] * k[i];
    for (int j = 0; j < Dv; j++)
        o[j] = beta * (v[j] - o[j]);
    for (int i = 0; i < Dk; i++)
        for (int j = 0; j < Dv; j++)
            St[(size_t)i * Dv + j] += k[i] * o[j];
    for (int j = 0; j < Dv; j++)
        o[j] = 0.0f;
    for (int i = 0; i < Dk; i++)
        for (int j = 0; j < Dv; j++)
            o[j] += St[(size_t)i * Dv + j] * q[i];
}

/* ---- attention of one head ------------------------------------------------------ */

/* Element i of a cache of f32 or f16 values. */
static inline float kv_at(const void *c, size_t i, bool f16) {
    return f16 ? e0_f16_to_f32(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

void mat_attend_ref_kv(const float *q, const void *kc, const void *vc, bool f16, size_t stride,
                       int n, int hd, float scale, float *scores, float *o) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) {
        float d = 0.0f;
        for (int i = 0; i < hd; i++)
            d += q[i] * kv_at(kc, (size_t)j * stride + (size_t)i, f16);
        scores[j] = d * scale;
        if (scores[j] > mx) mx = scores[j];
    }
    float sum = 0.0f;
    for (int j = 0; j < n; j++)
        sum += scores[j] = expf(scores[j] - mx);
    memset(o, 0, (size_t)hd * sizeof *o);
    for (int j = 0; j < n; j++) {
        const float p = scores[j] / sum;
        for (int i = 0; i < hd; i++)
            o[i] += p * kv_at(vc, (size_t)j * stride + (size_t)i, f16);
    }
}

void mat_attend_ref(const float *q, const float *kc, const float *vc, size_t stride, int n, int hd,
                    float scale, float *scores, float *o) {
    mat_attend_ref_kv(q, kc, vc, false, stride, n, hd, scale, scores, o);
}

void mat_attend_ref_f16(const float *q, const uint16_t *kc, const uint16_t *vc, size_t stride,
                        int n, int hd, float scale, float *scores, float *o) {
    mat_attend_ref_kv(q, kc, vc, true, stride, n, hd, scale, scores, o);
}
