/* AVX-512 kernels (quant/kernels.h): f32 activations against f32 / bf16 /
 * f16 weights and mlx affine q4 / q8 weights; q4 weights against int8
 * activation planes with VNNI; the Gated DeltaNet step. Compiled with
 * target attributes, so the file builds with the project's flags everywhere
 * and runs only where mat.c found the ISA at run time.
 *
 * Tiles: R rows x TT tokens share their weight decode and activation loads;
 * the arithmetic of each (row, token) dot product is the same in every tile
 * shape (the order is written above each kernel), so results do not depend
 * on T or on how rows are split across threads.
 */
#include "quant/kernels_avx512.h"

#if defined(__x86_64__)

/* ---- q4 -------------------------------------------------------------------
 * A block is 16 words = 128 values; lane j holds word j, nibble k of it is
 * column 8j + k, matched by xp. Per (row, token), with s_b the per-lane
 * group scale of block b:
 *   for each block b: a0 = fma chain over k = 0,2,4,6 of q_k * xp_k (from 0),
 *                     a1 = the same over k = 1,3,5,7,
 *                     tot = fma(a0 + a1, s_b, tot)
 *   y = reduce_add(tot + bt)            (bt: bias_terms)
 * A nibble becomes a float through a 16-entry table (vpermps reads only the
 * low 4 bits of each index), so no mask or convert is needed. */
INL void q4_tile(const e0_mat *m, const k_act *a, __m512i gpat, int64_t r, const int R, int64_t t0,
                 const int TT, float *y, int64_t ldy) {
    const int64_t wpr = m->cols / 8;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const float *xp[8];
    UNROLL
    for (int t = 0; t < TT; t++)
        xp[t] = a->xp + (t0 + t) * a->ldxp;
    __m512 tot[4][8], sc[4] = {0};
    int64_t sbase = -16;
    tile_zero(R, TT, tot);
    for (int64_t b = 0; b * 16 < wpr; b++) {
        __m512i d[4];
        __m512 sv[4], a0[4][8], a1[4][8];
        q4_block(m, r, R, gpat, b, sc, &sbase, d, sv);
        UNROLL
        for (int i = 0; i < R; i++)
            UNROLL
        for (int t = 0; t < TT; t++)
            a0[i][t] = a1[i][t] = _mm512_setzero_ps();
        UNROLL
        for (int k = 0; k < 8; k++) {
            __m512 q[4];
            UNROLL
            for (int i = 0; i < R; i++) {
                q[i] = _mm512_permutexvar_ps(d[i], iota);
                d[i] = _mm512_srli_epi32(d[i], 4);
            }
            UNROLL
            for (int t = 0; t < TT; t++) {
                const __m512 xv = _mm512_loadu_ps(xp[t] + b * 128 + k * 16);
                UNROLL
                for (int i = 0; i < R; i++) {
                    if (k & 1)
                        a1[i][t] = _mm512_fmadd_ps(q[i], xv, a1[i][t]);
                    else
                        a0[i][t] = _mm512_fmadd_ps(q[i], xv, a0[i][t]);
                }
            }
        }
        UNROLL
        for (int i = 0; i < R; i++)
            UNROLL
        for (int t = 0; t < TT; t++)
            tot[i][t] = _mm512_fmadd_ps(_mm512_add_ps(a0[i][t], a1[i][t]), sv[i], tot[i][t]);
    }
    tile_end(m, a, r, R, t0, TT, tot, y, ldy);
}


/* One instance per tile shape keeps each loop nest fully unrolled. */
#define Q4_TILE(R, TT)                                                                             \
    TGT static void q4_tile_##R##x##TT(const e0_mat *m, const k_act *a, __m512i gp, int64_t r,     \
                                       int64_t t0, float *y, int64_t ldy) {                        \
        q4_tile(m, a, gp, r, R, t0, TT, y, ldy);                                                   \
    }
Q4_TILE(4, 1)
Q4_TILE(1, 1)
Q4_TILE(2, 2)
Q4_TILE(1, 2)
Q4_TILE(2, 4)
Q4_TILE(1, 4)

/* q4_tile_fn and RB: kernels_avx512.h */

TGT static void q4_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y,
                        int64_t ldy) {
    const __m512i gp = q4_gpat(m->group);
    for (int64_t rb = r0; rb < r1; rb += RB) {
        const int64_t re = rb + RB < r1 ? rb + RB : r1;
        for (int64_t t0 = 0; t0 < a->T;) {
            const int64_t left = a->T - t0;
            const int TT = left >= 4 ? 4 : left >= 2 ? 2 : 1;
            q4_tile_fn big = TT == 4 ? q4_tile_2x4 : TT == 2 ? q4_tile_2x2 : q4_tile_4x1;
            q4_tile_fn one = TT == 4 ? q4_tile_1x4 : TT == 2 ? q4_tile_1x2 : q4_tile_1x1;
            const int R = TT == 1 ? 4 : 2;
            int64_t r = rb;
            for (; r + R <= re; r += R)
                big(m, a, gp, r, t0, y, ldy);
            for (; r < re; r++)
                one(m, a, gp, r, t0, y, ldy);
            t0 += TT;
        }
    }
}

/* ---- q8 -------------------------------------------------------------------
 * Per (row, token), per group g: a0 = fma chain over the group's even
 * 16-value chunks of w * x (from 0), a1 over the odd ones;
 * tot = fma(a0 + a1, s_g, tot); y = reduce_add(tot + bt). */
INL void q8_tile(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0, const int TT,
                 float *y, int64_t ldy) {
    const int64_t G = m->group, ng = m->cols / G, cols = m->cols;
    const uint8_t *w[4];
    const float *x[8];
    UNROLL
    for (int i = 0; i < R; i++)
        w[i] = (const uint8_t *)m->w + (r + i) * cols;
    UNROLL
    for (int t = 0; t < TT; t++)
        x[t] = a->x + (t0 + t) * a->ldx;
    __m512 tot[4][8];
    tile_zero(R, TT, tot);
    for (int64_t g = 0; g < ng; g++) {
        __m512 sv[4], a0[4][8], a1[4][8];
        UNROLL
        for (int i = 0; i < R; i++) {
            sv[i] = _mm512_set1_ps(ld_s1(m->stype, m->scales, (r + i) * ng + g));
            UNROLL
            for (int t = 0; t < TT; t++)
                a0[i][t] = a1[i][t] = _mm512_setzero_ps();
        }
        for (int64_t c = 0; c < G; c += 32) {
            UNROLL
            for (int h = 0; h < 2; h++) {
                __m512 wv[4];
                UNROLL
                for (int i = 0; i < R; i++)
                    wv[i] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                        _mm_loadu_si128((const __m128i *)(w[i] + g * G + c + 16 * h))));
                UNROLL
                for (int t = 0; t < TT; t++) {
                    const __m512 xv = _mm512_loadu_ps(x[t] + g * G + c + 16 * h);
                    UNROLL
                    for (int i = 0; i < R; i++) {
                        if (h)
                            a1[i][t] = _mm512_fmadd_ps(wv[i], xv, a1[i][t]);
                        else
                            a0[i][t] = _mm512_fmadd_ps(wv[i], xv, a0[i][t]);
                    }
                }
            }
        }
        UNROLL
        for (int i = 0; i < R; i++)
            UNROLL
        for (int t = 0; t < TT; t++)
            tot[i][t] = _mm512_fmadd_ps(_mm512_add_ps(a0[i][t], a1[i][t]), sv[i], tot[i][t]);
    }
    tile_end(m, a, r, R, t0, TT, tot, y, ldy);
}

#define Q8_TILE(R, TT)                                                                             \
    TGT static void q8_tile_##R##x##TT(const e0_mat *m, const k_act *a, int64_t r, int64_t t0,     \
                                       float *y, int64_t ldy) {                                    \
        q8_tile(m, a, r, R, t0, TT, y, ldy);                                                       \
    }
Q8_TILE(4, 1)
Q8_TILE(1, 1)
Q8_TILE(2, 4)
Q8_TILE(1, 4)

typedef void (*tile_fn)(const e0_mat *, const k_act *, int64_t, int64_t, float *, int64_t);

/* Rows [r0, r1) in blocks of RB, each block through every token tile:
 * 4 rows x 1 token, or 2 rows x 4 tokens while 4 tokens are left; single
 * rows for a block's rest. tiles: 4x1, 1x1, 2x4, 1x4. */
INL void tile_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y, int64_t ldy,
                   const tile_fn tiles[4]) {
    for (int64_t rb = r0; rb < r1; rb += RB) {
        const int64_t re = rb + RB < r1 ? rb + RB : r1;
        for (int64_t t0 = 0; t0 < a->T;) {
            const int TT = a->T - t0 >= 4 ? 4 : 1;
            tile_fn big = TT == 4 ? tiles[2] : tiles[0], one = TT == 4 ? tiles[3] : tiles[1];
            const int R = TT == 4 ? 2 : 4;
            int64_t r = rb;
            for (; r + R <= re; r += R)
                big(m, a, r, t0, y, ldy);
            for (; r < re; r++)
                one(m, a, r, t0, y, ldy);
            t0 += TT;
        }
    }
}

TGT static void q8_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y,
                        int64_t ldy) {
    static const tile_fn t[4] = {q8_tile_4x1, q8_tile_1x1, q8_tile_2x4, q8_tile_1x4};
    tile_rows(m, a, r0, r1, y, ldy, t);
}

/* ---- f32 / bf16 / f16 weights ----------------------------------------------
 * Per (row, token): a0 = fma chain over the even 16-value chunks of w * x
 * (from 0; the last chunk masked), a1 over the odd ones; y = reduce_add(a0 + a1). */
INL void fw_tile(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0, const int TT,
                 float *y, int64_t ldy) {
    const int64_t cols = m->cols;
    const size_t esz = m->type == E0_W_F32 ? 4 : 2;
    const uint8_t *w[4];
    const float *x[8];
    UNROLL
    for (int i = 0; i < R; i++)
        w[i] = (const uint8_t *)m->w + (size_t)(r + i) * (size_t)cols * esz;
    UNROLL
    for (int t = 0; t < TT; t++)
        x[t] = a->x + (t0 + t) * a->ldx;
    __m512 a0[4][8], a1[4][8];
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
    for (int t = 0; t < TT; t++)
        a0[i][t] = a1[i][t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c += 32) {
        UNROLL
        for (int h = 0; h < 2; h++) {
            const int64_t cc = c + 16 * h, left = cols - cc;
            if (left <= 0) break;
            const __mmask16 k = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
            __m512 wv[4];
            UNROLL
            for (int i = 0; i < R; i++)
                wv[i] = ld_w16(m->type, w[i], cc, k);
            UNROLL
            for (int t = 0; t < TT; t++) {
                const __m512 xv = _mm512_maskz_loadu_ps(k, x[t] + cc);
                UNROLL
                for (int i = 0; i < R; i++) {
                    if (h)
                        a1[i][t] = _mm512_fmadd_ps(wv[i], xv, a1[i][t]);
                    else
                        a0[i][t] = _mm512_fmadd_ps(wv[i], xv, a0[i][t]);
                }
            }
        }
    }
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
    for (int t = 0; t < TT; t++)
        y[(t0 + t) * ldy + r + i] = _mm512_reduce_add_ps(_mm512_add_ps(a0[i][t], a1[i][t]));
}

#define FW_TILE(R, TT)                                                                             \
    TGT static void fw_tile_##R##x##TT(const e0_mat *m, const k_act *a, int64_t r, int64_t t0,     \
                                       float *y, int64_t ldy) {                                    \
        fw_tile(m, a, r, R, t0, TT, y, ldy);                                                       \
    }
FW_TILE(4, 1)
FW_TILE(1, 1)
FW_TILE(2, 4)
FW_TILE(1, 4)

TGT void k_avx512_f32_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y,
                        int64_t ldy) {
    static const tile_fn t[4] = {fw_tile_4x1, fw_tile_1x1, fw_tile_2x4, fw_tile_1x4};
    tile_rows(m, a, r0, r1, y, ldy, t);
}

/* ---- Gated DeltaNet step -------------------------------------------------------
 * Columns j of the state never interact, so the state is taken 64 columns
 * at a time (Dk x 64 floats = 32 KiB for Dk 128, in L1 for the second pass).
 * Per column chunk: u = sum_i (St[i] *= decay) k_i (fma chains over even and
 * odd i, added at the end), d = beta (v - u), then o = sum_i (St[i] += k_i d) q_i
 * (the same two chains). */
TGT void k_avx512_delta_step(float *St, const float *k, const float *q, const float *v, float beta,
                             float decay, int Dk, int Dv, float *o) {
    const __m512 vdecay = _mm512_set1_ps(decay), vbeta = _mm512_set1_ps(beta);
    for (int c = 0; c < Dv; c += 64) {
        const int nv = Dv - c >= 64 ? 4 : (Dv - c) / 16;
        __m512 u0[4], u1[4], d[4];
        for (int j = 0; j < 4; j++)
            u0[j] = u1[j] = _mm512_setzero_ps();
        for (int i = 0; i < Dk; i++) {
            float *row = St + (size_t)i * Dv + c;
            const __m512 ki = _mm512_set1_ps(k[i]);
            for (int j = 0; j < nv; j++) {
                const __m512 sv = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * j), vdecay);
                _mm512_storeu_ps(row + 16 * j, sv);
                if (i & 1)
                    u1[j] = _mm512_fmadd_ps(sv, ki, u1[j]);
                else
                    u0[j] = _mm512_fmadd_ps(sv, ki, u0[j]);
            }
        }
        for (int j = 0; j < nv; j++) {
            d[j] = _mm512_mul_ps(
                vbeta, _mm512_sub_ps(_mm512_loadu_ps(v + c + 16 * j), _mm512_add_ps(u0[j], u1[j])));
            u0[j] = u1[j] = _mm512_setzero_ps();
        }
        for (int i = 0; i < Dk; i++) {
            float *row = St + (size_t)i * Dv + c;
            const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
            for (int j = 0; j < nv; j++) {
                const __m512 sv = _mm512_fmadd_ps(ki, d[j], _mm512_loadu_ps(row + 16 * j));
                _mm512_storeu_ps(row + 16 * j, sv);
                if (i & 1)
                    u1[j] = _mm512_fmadd_ps(sv, qi, u1[j]);
                else
                    u0[j] = _mm512_fmadd_ps(sv, qi, u0[j]);
            }
        }
        for (int j = 0; j < nv; j++)
            _mm512_storeu_ps(o + c + 16 * j, _mm512_add_ps(u0[j], u1[j]));
    }
}

k_rows_fn k_avx512_pick(const e0_mat *m, int *need, int *lanes) {
    *lanes = 16;
    switch (m->type) {
    case E0_W_F32:
    case E0_W_BF16:
    case E0_W_F16:
        *need = K_NEED_X;
        return k_avx512_f32_rows;
    case E0_W_QAFF:
        if (m->bits == 4 && m->cols % 8 == 0 && m->group % 8 == 0 && m->cols % m->group == 0 &&
            (128 % m->group == 0 || m->group % 128 == 0)) {
            *need = K_NEED_XP | K_NEED_XS;
            return q4_rows;
        }
        if (m->bits == 8 && m->group % 32 == 0 && m->cols % m->group == 0) {
            *need = K_NEED_X | K_NEED_XS;
            return q8_rows;
        }
        return NULL;
    case E0_W_GGML: /* kernels_ggml_avx512.c's: the dispatcher picks them */
        return NULL;
    }
    return NULL;
}

#else

k_rows_fn k_avx512_pick(const e0_mat *m, int *need, int *lanes) {
    (void)m, (void)need, (void)lanes;
    return NULL;
}

void k_avx512_delta_step(float *St, const float *k, const float *q, const float *v, float beta,
                         float decay, int Dk, int Dv, float *o) {
    mat_delta_step_ref(St, k, q, v, beta, decay, Dk, Dv, o);
}

#endif
