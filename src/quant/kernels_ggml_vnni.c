/* AVX-512 VNNI row kernels of ggml k-quant weights (Q4_K, Q6_K; quant/ggml.h)
 * against integer activations (quant/kernels.h, k_prep_qk).
 *
 * Activations are quantized per 256 columns, the k-quants' super-block, so
 * one activation scale meets one weight block: d = amax / 127,
 * n = rint(x * (1 / d) * 256^(P-1)) as P = 1 or 2 signed base-256 digits
 * q1 q2 (~8 or ~16 bits; x ~ dl n with dl = d / 256^(P-1)), each plane in
 * natural column order; per 16 columns the sum of the quantized x,
 * xks = dl * (sum n).
 *
 * Weights are used as their unsigned codes u (Q4_K 0..15; Q6_K 0..63, its
 * -32 offset left out), 64 columns per vector in natural order, and the
 * sub-block scales as int16 (Q4_K 6-bit sc per 32 columns, Q6_K int8 per
 * 16). vpmaddubsw forms u_c q_c + u_{c+1} q_{c+1} (|.| <= 2 * 63 * 128, no
 * saturation); vpdpwssd multiplies that by the pair's sub-block scale and
 * adds pairs into int32 lanes. The mins (Q4_K: dmin m_s) and the offset
 * (Q6_K: 32 d sc_s) meet the sums of the quantized x per 16 columns, in
 * float, once per super-block.
 *
 * Summation order, per (row, token), super-blocks b in order, tot = 0:
 *   I_p = vpdpwssd chain over the block's vectors j = 0..3 (from 0), plane p
 *   f   = float(I_1)                           (P = 1)
 *       = fma(float(I_1), 256, float(I_2))     (P = 2)
 *   tot = fma(f, d_b * dl_b, tot)              (d_b: the block's f16 d)
 *   tot = fnmadd(m_b, xks_b, tot)              (m_b per 16 columns: Q4_K
 *                                              dmin m_s, Q6_K 32 d sc_s)
 *   y = reduce_add(tot)
 * Every int32 lane sum is exact and below 2^24 (Q6_K: 4 vectors x 2 pairs x
 * 16128 x 128 = 16.5M), so float(I_p) is exact too: the only roundings
 * after the activations' are those of the float steps above. A tile of R
 * rows x TT tokens shares weight decoding and activation loads; the order
 * above is the same in every tile, for every T and thread split.
 */
#include "quant/ggml.h"
#include "quant/kernels.h"

#include "util/num.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define TGTV   __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define INLV   static inline __attribute__((always_inline)) TGTV
#define UNROLL _Pragma("GCC unroll 16")

/* Rows per block of the row loop: their weights stay in L1 / L2 while
 * every token tile passes over them. */
#define QK_RB 16

/* An f16 field, exactly. */
INLV float qk_half(const uint8_t *b, size_t off) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(e0_ld16(b + off, 0))));
}

/* What a tile needs of one weight block: the integer scales S (int16, by
 * sub-block), d, and the per-16-column mins / offsets m. */
typedef struct {
    __m512i S;
    __m512 d, m;
} qk_blk;

INLV void qk_begin(const int type, const uint8_t *b, qk_blk *k) {
    if (type == GGML_Q4_K) {
        /* The 12 scale bytes, as 32-bit words w0 w1 w2, into sc0..3, sc4..7,
         * m0..3, m4..7 (6 bits each):
         *   w0 & 0x3f.., (w2 & 0x0f..) | (w0 >> 6 & 3..) << 4,
         *   w1 & 0x3f.., (w2 >> 4 & 0x0f..) | (w1 >> 6 & 3..) << 4
         * in registers (the 16-byte load reads 4 bytes of qs, unused). */
        const __m128i raw = _mm_loadu_si128(
            (const __m128i *)(const void *)(b + offsetof(ggml_block_q4_K, scales)));
        const __m128i A = _mm_srlv_epi32(_mm_shuffle_epi32(raw, _MM_SHUFFLE(2, 1, 2, 0)),
                                         _mm_setr_epi32(0, 0, 0, 4));
        const __m128i B = _mm_srli_epi32(_mm_shuffle_epi32(raw, _MM_SHUFFLE(1, 1, 0, 0)), 2);
        const __m128i lo = _mm_and_si128(
            A, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
        const __m128i v = _mm_ternarylogic_epi32(lo, B, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030),
                                                 0xF8); /* lo | (B & mask) */
        k->S = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(v));
        k->d = _mm512_set1_ps(qk_half(b, offsetof(ggml_block_q4_K, d)));
        /* dmin m_s for the 16-column chunks 2s, 2s + 1 */
        const __m512 mf = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
        k->m = _mm512_mul_ps(
            _mm512_set1_ps(qk_half(b, offsetof(ggml_block_q4_K, dmin))),
            _mm512_permutexvar_ps(
                _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15), mf));
    } else { /* Q6_K */
        const __m128i sc = _mm_loadu_si128(
            (const __m128i *)(const void *)(b + offsetof(ggml_block_q6_K, scales)));
        const float d = qk_half(b, offsetof(ggml_block_q6_K, d));
        k->S = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(sc));
        k->d = _mm512_set1_ps(d);
        k->m = _mm512_mul_ps(_mm512_set1_ps(32.0f * d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
    }
}

/* The codes of columns 64j .. 64j + 63 of the block, as bytes. */
INLV __m512i qk_codes(const int type, const uint8_t *b, const int j) {
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    if (type == GGML_Q4_K) {
        /* qs[32j ..]: low nibbles columns 64j.., high nibbles 64j + 32.. */
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(
            (const __m256i *)(const void *)(b + offsetof(ggml_block_q4_K, qs) + 32 * j)));
        return _mm512_and_si512(_mm512_mask_srli_epi16(q, (__mmask32)0xFFFF0000u, q, 4), lo4);
    }
    /* Q6_K, half h: ql[64h ..] low nibbles are its columns 0..63, high
     * nibbles 64..127; qh[32h + l] bits 2k, 2k + 1 are the high bits of
     * column 32k + l. */
    const int h = j / 2, hi = j % 2;
    const __m512i ql = _mm512_loadu_si512(b + offsetof(ggml_block_q6_K, ql) + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(
        (const __m256i *)(const void *)(b + offsetof(ggml_block_q6_K, qh) + 32 * h)));
    /* the two high bits moved to bits 4-5 of each byte (16-bit shifts: what
     * crosses into the next byte lands outside bits 4-5) */
    const __m512i nib = hi ? _mm512_and_si512(_mm512_srli_epi16(ql, 4), lo4)
                           : _mm512_and_si512(ql, lo4);
    const __m512i cnt = _mm512_inserti64x4(_mm512_set1_epi16(hi ? 0 : 4), _mm256_set1_epi16(2), 1);
    const __m512i hb = hi ? _mm512_srlv_epi16(qh, cnt) : _mm512_sllv_epi16(qh, cnt);
    return _mm512_ternarylogic_epi32(nib, hb, _mm512_set1_epi8(0x30), 0xF8); /* nib | (hb & 0x30) */
}

/* vpermw index of vector j: the sub-block of each pair of columns. */
INLV __m512i qk_sidx(const int type, const int j) {
    int16_t ix[32];
    for (int e = 0; e < 32; e++)
        ix[e] = (int16_t)(type == GGML_Q4_K ? 2 * j + e / 16 : 4 * j + e / 8);
    return _mm512_loadu_si512(ix);
}

INLV void qk_tile(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0,
                  const int TT, const int type, const int P, float *y, int64_t ldy) {
    const int bsize = type == GGML_Q4_K ? (int)sizeof(ggml_block_q4_K) : (int)sizeof(ggml_block_q6_K);
    const int64_t nb = m->cols / GGML_QK_K, rb = nb * bsize;
    const uint8_t *w[4];
    const int8_t *xq[4];
    const float *xd[4], *xs[4];
    UNROLL
    for (int i = 0; i < R; i++)
        w[i] = (const uint8_t *)m->w + (r + i) * rb;
    UNROLL
    for (int t = 0; t < TT; t++) {
        xq[t] = a->xk + (t0 + t) * a->ldxk;
        xd[t] = a->xkd + (t0 + t) * a->ldxkd;
        xs[t] = a->xks + (t0 + t) * a->ldxkd * 16;
    }
    __m512i sidx[4];
    UNROLL
    for (int j = 0; j < 4; j++)
        sidx[j] = qk_sidx(type, j);
    __m512 tot[4][4];
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
    for (int t = 0; t < TT; t++)
        tot[i][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        qk_blk k[4];
        const uint8_t *blk[4];
        UNROLL
        for (int i = 0; i < R; i++) {
            blk[i] = w[i] + b * bsize;
            const char *pf = (const char *)(blk[i] + R * rb);
            _mm_prefetch(pf, _MM_HINT_T0);
            _mm_prefetch(pf + 64, _MM_HINT_T0);
            _mm_prefetch(pf + 128, _MM_HINT_T0);
            if (bsize > 192) _mm_prefetch(pf + 192, _MM_HINT_T0);
            qk_begin(type, blk[i], &k[i]);
        }
        __m512i I[4][4][3];
        UNROLL
        for (int j = 0; j < 4; j++) {
            UNROLL
            for (int i = 0; i < R; i++) {
                const __m512i u = qk_codes(type, blk[i], j);
                const __m512i s = _mm512_permutexvar_epi16(sidx[j], k[i].S);
                UNROLL
                for (int t = 0; t < TT; t++)
                    UNROLL
                for (int p = 0; p < P; p++) {
                    const __m512i x = _mm512_loadu_si512(xq[t] + (b * P + p) * GGML_QK_K + 64 * j);
                    const __m512i pr = _mm512_maddubs_epi16(u, x);
                    I[i][t][p] = _mm512_dpwssd_epi32(j ? I[i][t][p] : _mm512_setzero_si512(), pr, s);
                }
            }
        }
        UNROLL
        for (int t = 0; t < TT; t++) {
            const __m512 dl = _mm512_set1_ps(xd[t][b]);
            const __m512 xsv = _mm512_loadu_ps(xs[t] + 16 * b);
            UNROLL
            for (int i = 0; i < R; i++) {
                __m512 f = _mm512_cvtepi32_ps(I[i][t][P - 1]);
                if (P == 3)
                    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[i][t][1]), _mm512_set1_ps(256.0f), f);
                if (P >= 2)
                    f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[i][t][0]),
                                        _mm512_set1_ps(P == 3 ? 65536.0f : 256.0f), f);
                tot[i][t] = _mm512_fmadd_ps(f, _mm512_mul_ps(k[i].d, dl), tot[i][t]);
                tot[i][t] = _mm512_fnmadd_ps(k[i].m, xsv, tot[i][t]);
            }
        }
    }
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
    for (int t = 0; t < TT; t++)
        y[(t0 + t) * ldy + r + i] = _mm512_reduce_add_ps(tot[i][t]);
}

typedef void (*qk_tile_fn)(const e0_mat *, const k_act *, int64_t, int64_t, float *, int64_t);

/* Tiles per type and plane count: 4 rows x 1 token, 2 rows x 2, 3 or 4
 * tokens, and single rows of each. */
#define QK_TILE(NAME, TYPE, P, R, TT)                                                              \
    TGTV static void qk_##NAME##_##P##_##R##x##TT(const e0_mat *m, const k_act *a, int64_t r,      \
                                                  int64_t t0, float *y, int64_t ldy) {             \
        qk_tile(m, a, r, R, t0, TT, TYPE, P, y, ldy);                                              \
    }
#define QK_KERNEL(NAME, TYPE, P)                                                                   \
    QK_TILE(NAME, TYPE, P, 4, 1)                                                                   \
    QK_TILE(NAME, TYPE, P, 2, 2)                                                                   \
    QK_TILE(NAME, TYPE, P, 2, 3)                                                                   \
    QK_TILE(NAME, TYPE, P, 2, 4)                                                                   \
    QK_TILE(NAME, TYPE, P, 1, 1)                                                                   \
    QK_TILE(NAME, TYPE, P, 1, 2)                                                                   \
    QK_TILE(NAME, TYPE, P, 1, 3)                                                                   \
    QK_TILE(NAME, TYPE, P, 1, 4)                                                                   \
    TGTV static void qk_##NAME##_##P##_rows(const e0_mat *m, const k_act *a, int64_t r0,           \
                                            int64_t r1, float *y, int64_t ldy) {                   \
        static const qk_tile_fn t[8] = {                                                           \
            qk_##NAME##_##P##_4x1, qk_##NAME##_##P##_2x2, qk_##NAME##_##P##_2x3,                   \
            qk_##NAME##_##P##_2x4, qk_##NAME##_##P##_1x1, qk_##NAME##_##P##_1x2,                   \
            qk_##NAME##_##P##_1x3, qk_##NAME##_##P##_1x4};                                         \
        qk_rows(m, a, r0, r1, y, ldy, t);                                                          \
    }

/* tiles: [TT - 1] the multi-row tile for TT tokens (4 rows for TT = 1, else
 * 2), [4 + TT - 1] its single-row twin. */
INLV void qk_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y, int64_t ldy,
                  const qk_tile_fn tiles[8]) {
    for (int64_t rb = r0; rb < r1; rb += QK_RB) {
        const int64_t re = rb + QK_RB < r1 ? rb + QK_RB : r1;
        for (int64_t t0 = 0; t0 < a->T;) {
            const int64_t left = a->T - t0;
            const int TT = left >= 4 ? 4 : (int)left;
            const int R = TT == 1 ? 4 : 2;
            int64_t r = rb;
            for (; r + R <= re; r += R)
                tiles[TT - 1](m, a, r, t0, y, ldy);
            for (; r < re; r++)
                tiles[4 + TT - 1](m, a, r, t0, y, ldy);
            t0 += TT;
        }
    }
}

QK_KERNEL(q4_K, GGML_Q4_K, 1)
QK_KERNEL(q4_K, GGML_Q4_K, 2)
QK_KERNEL(q6_K, GGML_Q6_K, 1)
QK_KERNEL(q6_K, GGML_Q6_K, 2)
QK_KERNEL(q4_K, GGML_Q4_K, 3)
QK_KERNEL(q6_K, GGML_Q6_K, 3)

/* k_prep_qk (mat.c) vectorized; bit-identical to it. */
TGTV void k_avx512_prep_qk(const float *x, int64_t cols, int planes, int8_t *xk, float *xkd,
                           float *xks) {
    const int64_t nb = cols / GGML_QK_K;
    const float scale = planes == 3 ? 65536.0f : planes == 2 ? 256.0f : 1.0f;
    for (int64_t b = 0; b < nb; b++) {
        const float *xv = x + b * GGML_QK_K;
        __m512 am = _mm512_setzero_ps();
        for (int v = 0; v < 16; v++)
            am = _mm512_max_ps(am, _mm512_abs_ps(_mm512_loadu_ps(xv + 16 * v)));
        const float d = _mm512_reduce_max_ps(am) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        const float dl = d / scale;
        const __m512 vid = _mm512_set1_ps(id), vscale = _mm512_set1_ps(scale);
        const __m512i lo = _mm512_set1_epi32(-128), hi = _mm512_set1_epi32(127);
        for (int v = 0; v < 16; v++) {
            const __m512i n = _mm512_cvtps_epi32(
                _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(xv + 16 * v), vid), vscale));
            __m512i q1 = n;
            for (int p = planes - 1; p > 0; p--) { /* the sign-extended low byte, then the rest / 256 */
                const __m512i q = _mm512_srai_epi32(_mm512_slli_epi32(q1, 24), 24);
                q1 = _mm512_srai_epi32(_mm512_sub_epi32(q1, q), 8);
                _mm_storeu_si128((__m128i *)(void *)(xk + (b * planes + p) * GGML_QK_K + 16 * v),
                                 _mm512_cvtepi32_epi8(q));
            }
            q1 = _mm512_max_epi32(_mm512_min_epi32(q1, hi), lo);
            _mm_storeu_si128((__m128i *)(void *)(xk + b * planes * GGML_QK_K + 16 * v),
                             _mm512_cvtepi32_epi8(q1));
            xks[b * 16 + v] = dl * (float)_mm512_reduce_add_epi32(n);
        }
        xkd[b] = dl;
    }
}

k_rows_fn k_avx512_ggml_int_pick(const e0_mat *m, int planes, int *need) {
    if (m->type != E0_W_GGML || m->cols % GGML_QK_K || planes < 1 || planes > 3) return NULL;
    *need = planes == 3 ? K_NEED_XK3 : planes == 2 ? K_NEED_XK2 : K_NEED_XK;
    switch (m->gtype) {
    case GGML_Q4_K:
        return planes == 3 ? qk_q4_K_3_rows : planes == 2 ? qk_q4_K_2_rows : qk_q4_K_1_rows;
    case GGML_Q6_K:
        return planes == 3 ? qk_q6_K_3_rows : planes == 2 ? qk_q6_K_2_rows : qk_q6_K_1_rows;
    default:
        return NULL;
    }
}

#else

void k_avx512_prep_qk(const float *x, int64_t cols, int planes, int8_t *xk, float *xkd,
                      float *xks) {
    k_prep_qk(x, cols, planes, xk, xkd, xks);
}

k_rows_fn k_avx512_ggml_int_pick(const e0_mat *m, int planes, int *need) {
    (void)m, (void)planes, (void)need;
    return NULL;
}

#endif
