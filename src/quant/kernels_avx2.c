/* AVX2 + FMA + F16C kernels (quant/kernels.h): the same kernels as
 * kernels_avx512.c at 8 lanes, for machines without AVX-512. Compiled with
 * target attributes; mat.c calls them only where the CPU has the ISA.
 * The arithmetic of each (row, token) dot product is fixed per kernel
 * (written above each) and independent of the tile shape. */
#include "quant/kernels.h"

#include "util/num.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT
/* Loops over the rows and tokens of a tile must unroll fully, so that the
 * accumulator arrays live in registers. */
#define UNROLL _Pragma("GCC unroll 8")

static inline float ld_s1(e0_stype st, const void *p, int64_t i) {
    switch (st) {
    case E0_S_BF16: return e0_bf16_to_f32(e0_ld16(p, (size_t)i));
    case E0_S_F16: return e0_f16_to_f32(e0_ld16(p, (size_t)i));
    case E0_S_F32: return e0_ldf32(p, (size_t)i);
    }
    return 0;
}

/* n (>= 1) scales or biases from element i on, as 8 f32 lanes (lanes >= n: 0). */
INL __m256 ld_s8(e0_stype st, const void *p, int64_t i, int64_t n) {
    if (n >= 8) {
        if (st == E0_S_F32) return _mm256_loadu_ps((const float *)p + i);
        const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
        if (st == E0_S_F16) return _mm256_cvtph_ps(h);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    float v[8] = {0};
    for (int64_t j = 0; j < n; j++) v[j] = ld_s1(st, p, i + j);
    return _mm256_loadu_ps(v);
}

/* Horizontal sum in a fixed order: (lo + hi) halves, then pairs. */
INL float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Bias term: bt = fma chain over 8-group chunks of b_g * xsum_g. */
INL void bias_terms(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0, const int TT,
                    __m256 bt[2][4]) {
    const int64_t ng = m->cols / m->group;
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) bt[i][t] = _mm256_setzero_ps();
    for (int64_t c = 0; c < ng; c += 8) {
        __m256 bv[2];
        UNROLL
        for (int i = 0; i < R; i++) bv[i] = ld_s8(m->stype, m->biases, (r + i) * ng + c, ng - c);
        UNROLL
        for (int t = 0; t < TT; t++) {
            const __m256 xs = _mm256_loadu_ps(a->xs + (t0 + t) * a->ldxs + c);
            UNROLL
            for (int i = 0; i < R; i++) bt[i][t] = _mm256_fmadd_ps(bv[i], xs, bt[i][t]);
        }
    }
}

/* ---- q4 -------------------------------------------------------------------
 * A block is 8 words = 64 values; lane j holds word j, nibble k of it is
 * column 8j + k (xp matches). Per (row, token):
 *   for each block b: a0 = fma chain over k = 0,2,4,6 of q_k * xp_k (from 0),
 *                     a1 = the same over k = 1,3,5,7, tot = fma(a0 + a1, s_b, tot)
 *   y = hsum8(tot + bt)
 * s_b: the group scale per lane (group 32: lanes 0-3 and 4-7 differ). */
INL void q4_tile(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0, const int TT, float *y,
                 int64_t ldy) {
    const int64_t G = m->group, ng = m->cols / G, wpr = m->cols / 8;
    const __m256i lo4 = _mm256_set1_epi32(15);
    const uint32_t *w[2];
    const float *xp[4];
    UNROLL
    for (int i = 0; i < R; i++) w[i] = (const uint32_t *)m->w + (r + i) * wpr;
    UNROLL
    for (int t = 0; t < TT; t++) xp[t] = a->xp + (t0 + t) * a->ldxp;
    __m256 tot[2][4];
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) tot[i][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b * 8 < wpr; b++) {
        const int64_t wrem = wpr - b * 8, gb = b * 64 / G;
        __m256i d[2];
        __m256 sv[2], a0[2][4], a1[2][4];
        UNROLL
        for (int i = 0; i < R; i++) {
            if (wrem >= 8) {
                d[i] = _mm256_loadu_si256((const __m256i *)(w[i] + b * 8));
            } else {
                const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                const __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)wrem), lane);
                d[i] = _mm256_maskload_epi32((const int *)(w[i] + b * 8), mk);
            }
            const float s0 = ld_s1(m->stype, m->scales, (r + i) * ng + gb);
            const float s1 = G == 32 ? (gb + 1 < ng ? ld_s1(m->stype, m->scales, (r + i) * ng + gb + 1) : 0.0f) : s0;
            sv[i] = _mm256_set_m128(_mm_set1_ps(s1), _mm_set1_ps(s0));
            UNROLL
            for (int t = 0; t < TT; t++) a0[i][t] = a1[i][t] = _mm256_setzero_ps();
        }
UNROLL
        for (int k = 0; k < 8; k++) {
            __m256 q[2];
            UNROLL
            for (int i = 0; i < R; i++) {
                q[i] = _mm256_cvtepi32_ps(_mm256_and_si256(d[i], lo4));
                d[i] = _mm256_srli_epi32(d[i], 4);
            }
            UNROLL
            for (int t = 0; t < TT; t++) {
                const __m256 xv = _mm256_loadu_ps(xp[t] + b * 64 + k * 8);
                UNROLL
                for (int i = 0; i < R; i++) {
                    if (k & 1) a1[i][t] = _mm256_fmadd_ps(q[i], xv, a1[i][t]);
                    else a0[i][t] = _mm256_fmadd_ps(q[i], xv, a0[i][t]);
                }
            }
        }
        UNROLL
        for (int i = 0; i < R; i++)
            UNROLL
            for (int t = 0; t < TT; t++)
                tot[i][t] = _mm256_fmadd_ps(_mm256_add_ps(a0[i][t], a1[i][t]), sv[i], tot[i][t]);
    }
    __m256 bt[2][4];
    bias_terms(m, a, r, R, t0, TT, bt);
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) y[(t0 + t) * ldy + r + i] = hsum8(_mm256_add_ps(tot[i][t], bt[i][t]));
}

/* ---- q8 -------------------------------------------------------------------
 * Per (row, token), per group g: a0 = fma chain over the group's even
 * 8-value chunks of w * x (from 0), a1 over the odd ones;
 * tot = fma(a0 + a1, s_g, tot); y = hsum8(tot + bt). */
INL void q8_tile(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0, const int TT, float *y,
                 int64_t ldy) {
    const int64_t G = m->group, ng = m->cols / G, cols = m->cols;
    const uint8_t *w[2];
    const float *x[4];
    UNROLL
    for (int i = 0; i < R; i++) w[i] = (const uint8_t *)m->w + (r + i) * cols;
    UNROLL
    for (int t = 0; t < TT; t++) x[t] = a->x + (t0 + t) * a->ldx;
    __m256 tot[2][4];
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) tot[i][t] = _mm256_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        __m256 sv[2], a0[2][4], a1[2][4];
        UNROLL
        for (int i = 0; i < R; i++) {
            sv[i] = _mm256_set1_ps(ld_s1(m->stype, m->scales, (r + i) * ng + g));
            UNROLL
            for (int t = 0; t < TT; t++) a0[i][t] = a1[i][t] = _mm256_setzero_ps();
        }
        for (int64_t c = 0; c < G; c += 16) {
UNROLL
            for (int h = 0; h < 2; h++) {
                __m256 wv[2];
                UNROLL
                for (int i = 0; i < R; i++)
                    wv[i] = _mm256_cvtepi32_ps(
                        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(w[i] + g * G + c + 8 * h))));
                UNROLL
                for (int t = 0; t < TT; t++) {
                    const __m256 xv = _mm256_loadu_ps(x[t] + g * G + c + 8 * h);
                    UNROLL
                    for (int i = 0; i < R; i++) {
                        if (h) a1[i][t] = _mm256_fmadd_ps(wv[i], xv, a1[i][t]);
                        else a0[i][t] = _mm256_fmadd_ps(wv[i], xv, a0[i][t]);
                    }
                }
            }
        }
        UNROLL
        for (int i = 0; i < R; i++)
            UNROLL
            for (int t = 0; t < TT; t++)
                tot[i][t] = _mm256_fmadd_ps(_mm256_add_ps(a0[i][t], a1[i][t]), sv[i], tot[i][t]);
    }
    __m256 bt[2][4];
    bias_terms(m, a, r, R, t0, TT, bt);
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) y[(t0 + t) * ldy + r + i] = hsum8(_mm256_add_ps(tot[i][t], bt[i][t]));
}

/* ---- f32 / bf16 / f16 weights ----------------------------------------------
 * Per (row, token): a0 = fma chain over the even 8-value chunks of w * x
 * (from 0), a1 over the odd ones, y = hsum8(a0 + a1) + the columns past the
 * last whole chunk, added one by one in order (scalar). */
INL __m256 ld_w8(e0_wtype wt, const uint8_t *p, int64_t i) {
    if (wt == E0_W_F32) return _mm256_loadu_ps((const float *)p + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (wt == E0_W_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float ld_w1(e0_wtype wt, const uint8_t *p, int64_t i) {
    if (wt == E0_W_F32) return e0_ldf32(p, (size_t)i);
    if (wt == E0_W_F16) return e0_f16_to_f32(e0_ld16(p, (size_t)i));
    return e0_bf16_to_f32(e0_ld16(p, (size_t)i));
}

INL void fw_tile(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0, const int TT, float *y,
                 int64_t ldy) {
    const int64_t cols = m->cols, full = cols / 16 * 16;
    const size_t esz = m->type == E0_W_F32 ? 4 : 2;
    const uint8_t *w[2];
    const float *x[4];
    UNROLL
    for (int i = 0; i < R; i++) w[i] = (const uint8_t *)m->w + (size_t)(r + i) * (size_t)cols * esz;
    UNROLL
    for (int t = 0; t < TT; t++) x[t] = a->x + (t0 + t) * a->ldx;
    __m256 a0[2][4], a1[2][4];
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) a0[i][t] = a1[i][t] = _mm256_setzero_ps();
    for (int64_t c = 0; c < full; c += 16) {
UNROLL
        for (int h = 0; h < 2; h++) {
            __m256 wv[2];
            UNROLL
            for (int i = 0; i < R; i++) wv[i] = ld_w8(m->type, w[i], c + 8 * h);
            UNROLL
            for (int t = 0; t < TT; t++) {
                const __m256 xv = _mm256_loadu_ps(x[t] + c + 8 * h);
                UNROLL
                for (int i = 0; i < R; i++) {
                    if (h) a1[i][t] = _mm256_fmadd_ps(wv[i], xv, a1[i][t]);
                    else a0[i][t] = _mm256_fmadd_ps(wv[i], xv, a0[i][t]);
                }
            }
        }
    }
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < TT; t++) {
            float s = hsum8(_mm256_add_ps(a0[i][t], a1[i][t]));
            for (int64_t c = full; c < cols; c++) s += ld_w1(m->type, w[i], c) * x[t][c];
            y[(t0 + t) * ldy + r + i] = s;
        }
}

#define TILE(K, R, TT)                                                                                          \
    TGT static void K##_tile_##R##x##TT(const e0_mat *m, const k_act *a, int64_t r, int64_t t0, float *y,       \
                                         int64_t ldy) {                                                         \
        K##_tile(m, a, r, R, t0, TT, y, ldy);                                                                    \
    }
TILE(q4, 2, 1)
TILE(q4, 1, 1)
TILE(q4, 1, 4)
TILE(q8, 2, 1)
TILE(q8, 1, 1)
TILE(q8, 1, 4)
TILE(fw, 2, 1)
TILE(fw, 1, 1)
TILE(fw, 1, 4)

typedef void (*tile_fn)(const e0_mat *, const k_act *, int64_t, int64_t, float *, int64_t);

#define RB 16

/* Rows in blocks of RB (their weights stay cached while each token tile
 * passes); within a block, 2-row tiles for single tokens, 4-token tiles. */
TGT static void run_rows(tile_fn t2x1, tile_fn t1x1, tile_fn t1x4, const e0_mat *m, const k_act *a, int64_t r0,
                         int64_t r1, float *y, int64_t ldy) {
    for (int64_t rb = r0; rb < r1; rb += RB) {
        const int64_t re = rb + RB < r1 ? rb + RB : r1;
        int64_t t0 = 0;
        for (; t0 + 4 <= a->T; t0 += 4)
            for (int64_t r = rb; r < re; r++) t1x4(m, a, r, t0, y, ldy);
        for (; t0 < a->T; t0++) {
            int64_t r = rb;
            for (; r + 2 <= re; r += 2) t2x1(m, a, r, t0, y, ldy);
            for (; r < re; r++) t1x1(m, a, r, t0, y, ldy);
        }
    }
}

TGT static void q4_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    run_rows(q4_tile_2x1, q4_tile_1x1, q4_tile_1x4, m, a, r0, r1, y, ldy);
}
TGT static void q8_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    run_rows(q8_tile_2x1, q8_tile_1x1, q8_tile_1x4, m, a, r0, r1, y, ldy);
}
TGT static void fw_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    run_rows(fw_tile_2x1, fw_tile_1x1, fw_tile_1x4, m, a, r0, r1, y, ldy);
}

/* ---- Gated DeltaNet step: kernels_avx512.c's order at 8 lanes, 32 columns at a time. */
TGT void k_avx2_delta_step(float *St, const float *k, const float *q, const float *v, float beta, float decay, int Dk,
                           int Dv, float *o) {
    const __m256 vdecay = _mm256_set1_ps(decay), vbeta = _mm256_set1_ps(beta);
    for (int c = 0; c < Dv; c += 32) {
        const int nv = Dv - c >= 32 ? 4 : (Dv - c) / 8;
        __m256 u0[4], u1[4], d[4];
        for (int j = 0; j < 4; j++) u0[j] = u1[j] = _mm256_setzero_ps();
        for (int i = 0; i < Dk; i++) {
            float *row = St + (size_t)i * Dv + c;
            const __m256 ki = _mm256_set1_ps(k[i]);
            for (int j = 0; j < nv; j++) {
                const __m256 sv = _mm256_mul_ps(_mm256_loadu_ps(row + 8 * j), vdecay);
                _mm256_storeu_ps(row + 8 * j, sv);
                if (i & 1) u1[j] = _mm256_fmadd_ps(sv, ki, u1[j]);
                else u0[j] = _mm256_fmadd_ps(sv, ki, u0[j]);
            }
        }
        for (int j = 0; j < nv; j++) {
            d[j] = _mm256_mul_ps(vbeta, _mm256_sub_ps(_mm256_loadu_ps(v + c + 8 * j), _mm256_add_ps(u0[j], u1[j])));
            u0[j] = u1[j] = _mm256_setzero_ps();
        }
        for (int i = 0; i < Dk; i++) {
            float *row = St + (size_t)i * Dv + c;
            const __m256 ki = _mm256_set1_ps(k[i]), qi = _mm256_set1_ps(q[i]);
            for (int j = 0; j < nv; j++) {
                const __m256 sv = _mm256_fmadd_ps(ki, d[j], _mm256_loadu_ps(row + 8 * j));
                _mm256_storeu_ps(row + 8 * j, sv);
                if (i & 1) u1[j] = _mm256_fmadd_ps(sv, qi, u1[j]);
                else u0[j] = _mm256_fmadd_ps(sv, qi, u0[j]);
            }
        }
        for (int j = 0; j < nv; j++) _mm256_storeu_ps(o + c + 8 * j, _mm256_add_ps(u0[j], u1[j]));
    }
}

k_rows_fn k_avx2_pick(const e0_mat *m, int *need, int *lanes) {
    *lanes = 8;
    switch (m->type) {
    case E0_W_F32:
    case E0_W_BF16:
    case E0_W_F16: *need = K_NEED_X; return fw_rows;
    case E0_W_QAFF:
        if (m->bits == 4 && m->cols % 8 == 0 && m->cols % m->group == 0 && (m->group == 32 || m->group % 64 == 0)) {
            *need = K_NEED_XP | K_NEED_XS;
            return q4_rows;
        }
        if (m->bits == 8 && m->group % 16 == 0 && m->cols % m->group == 0) {
            *need = K_NEED_X | K_NEED_XS;
            return q8_rows;
        }
        return NULL;
    case E0_W_GGML: /* no AVX2 kernels: mat.c uses the AVX-512 ones where the CPU has them */
        return NULL;
    }
    return NULL;
}

#else

k_rows_fn k_avx2_pick(const e0_mat *m, int *need, int *lanes) {
    (void)m, (void)need, (void)lanes;
    return NULL;
}

void k_avx2_delta_step(float *St, const float *k, const float *q, const float *v, float beta, float decay, int Dk,
                       int Dv, float *o) {
    mat_delta_step_ref(St, k, q, v, beta, decay, Dk, Dv, o);
}

#endif
