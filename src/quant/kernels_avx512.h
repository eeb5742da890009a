/* What the AVX-512 kernel files share (kernels_avx512.c, kernels_avx512_q8.c):
 * the target attributes, and the always-inline loads and tile scaffolding
 * their tiles are built of (a copy in each file, as before the split). */
#ifndef E0_QUANT_KERNELS_AVX512_H
#define E0_QUANT_KERNELS_AVX512_H

#include "quant/kernels.h"

#include "quant/kernels_x86.h"
#include "util/num.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT
/* Loops over the rows and tokens of a tile must unroll fully, so that the
 * accumulator arrays live in registers. */
#define UNROLL _Pragma("GCC unroll 8")

/* Decode reads each weight once, from DRAM: the q4 kernels prefetch the
 * rows PF_ROWS ahead of the ones they compute (two 4-row tiles; the row
 * after a tile's last is the next tile's first, so this follows the
 * matrix's bytes in order). A prefetch past the matrix never faults. */
#ifndef PF_ROWS
#define PF_ROWS 8
#endif

/* n (1..16) scales or biases from element i on, as f32; lanes >= n are 0. */
INL __m512 ld_s16(e0_stype st, const void *p, int64_t i, int64_t n) {
    const __mmask16 k = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
    if (st == E0_S_F32) return _mm512_maskz_loadu_ps(k, (const float *)p + i);
    const __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i);
    if (st == E0_S_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline float ld_s1(e0_stype st, const void *p, int64_t i) {
    switch (st) {
    case E0_S_BF16:
        return e0_bf16_to_f32(e0_ld16(p, (size_t)i));
    case E0_S_F16:
        return e0_f16_to_f32(e0_ld16(p, (size_t)i));
    case E0_S_F32:
        return e0_ldf32(p, (size_t)i);
    }
    return 0;
}

/* n (1..16) weights of a float row from element i on, as f32. */
INL __m512 ld_w16(e0_wtype wt, const void *p, int64_t i, __mmask16 k) {
    if (wt == E0_W_F32) return _mm512_maskz_loadu_ps(k, (const float *)p + i);
    const __m256i h = _mm256_maskz_loadu_epi16(k, (const uint16_t *)p + i);
    if (wt == E0_W_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Bias term of rows r..r+R: bt[i][t] = fma chain over 16-group chunks of
 * b_g * xsum_g (chunks ascending). */
INL void bias_terms(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0,
                    const int TT, __m512 bt[4][8]) {
    const int64_t ng = m->cols / m->group;
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
    for (int t = 0; t < TT; t++)
        bt[i][t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < ng; c += 16) {
        __m512 bv[4];
        UNROLL
        for (int i = 0; i < R; i++)
            bv[i] = ld_s16(m->stype, m->biases, (r + i) * ng + c, ng - c);
        UNROLL
        for (int t = 0; t < TT; t++) {
            const __m512 xs = _mm512_loadu_ps(a->xs + (t0 + t) * a->ldxs + c);
            UNROLL
            for (int i = 0; i < R; i++)
                bt[i][t] = _mm512_fmadd_ps(bv[i], xs, bt[i][t]);
        }
    }
}

/* The scaffolding the row tiles share: tot zeroed, and at the end the
 * bias terms and lane sums into y[t0 + t, r + i]. */
INL void tile_zero(const int R, const int TT, __m512 tot[4][8]) {
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
    for (int t = 0; t < TT; t++)
        tot[i][t] = _mm512_setzero_ps();
}

INL void tile_end(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0, const int TT,
                  __m512 tot[4][8], float *y, int64_t ldy) {
    __m512 bt[4][8];
    bias_terms(m, a, r, R, t0, TT, bt);
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
    for (int t = 0; t < TT; t++)
        y[(t0 + t) * ldy + r + i] = _mm512_reduce_add_ps(_mm512_add_ps(tot[i][t], bt[i][t]));
}

/* Block b (128 columns) of 4-bit rows r..r+R (q4_tile, q4x8_tile): each
 * row's 16 words d[i] (masked at the row's end; rows PF_ROWS on are
 * prefetched) and each word's group scale sv[i], from a window sc of 16
 * group scales per row that starts at group *sbase (-16: none yet). */
INL void q4_block(const e0_mat *m, int64_t r, const int R, __m512i gpat, int64_t b, __m512 sc[4],
                  int64_t *sbase, __m512i d[4], __m512 sv[4]) {
    const int64_t G = m->group, ng = m->cols / G, wpr = m->cols / 8;
    const int64_t wrem = wpr - b * 16, gb = b * 128 / G;
    const __mmask16 km = wrem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << wrem) - 1);
    if (gb >= *sbase + 16) {
        *sbase = gb;
        UNROLL
        for (int i = 0; i < R; i++)
            sc[i] = ld_s16(m->stype, m->scales, (r + i) * ng + gb, ng - gb);
    }
    const __m512i pat = _mm512_add_epi32(gpat, _mm512_set1_epi32((int)(gb - *sbase)));
    UNROLL
    for (int i = 0; i < R; i++) {
        const uint32_t *w = (const uint32_t *)m->w + (r + i) * wpr + b * 16;
        d[i] = _mm512_maskz_loadu_epi32(km, w);
        _mm_prefetch((const char *)(w + PF_ROWS * wpr), _MM_HINT_T0);
        sv[i] = _mm512_permutexvar_ps(pat, sc[i]);
    }
}

/* Lane j of a block of 128 values: its group relative to the block's first. */
TGT static inline __m512i q4_gpat(int64_t G) {
    int32_t p[16];
    for (int j = 0; j < 16; j++)
        p[j] = G >= 128 ? 0 : (int32_t)(8 * j / G);
    return _mm512_loadu_si512(p);
}

typedef void (*q4_tile_fn)(const e0_mat *, const k_act *, __m512i, int64_t, int64_t, float *,
                           int64_t);

/* Rows are taken in blocks of RB so a block's weights stay in L1/L2 while
 * every token tile passes over them. */
#define RB 16

/* The same with VNNI (the int8-activation kernels). */
#define TGTV __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define INLV static inline __attribute__((always_inline)) TGTV

#endif
#endif
