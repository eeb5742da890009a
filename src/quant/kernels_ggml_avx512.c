/* AVX-512 row kernels of ggml block weights (E0_W_GGML, quant/ggml.h)
 * against f32 activations (quant/kernels.h).
 *
 * Each block is dequantized in registers by gq_dq, which forms every value
 * with the same f32 operations, in the same order, as the scalar reference
 * (ggml_quants.c): the kernel's weights are bit-identical to
 * mat_dequant's, and results differ from mat_matmul_ref only by summation
 * order. Blocks of 32 values are two vectors, k-quant super-blocks of 256
 * sixteen; every vector of 16 values lies in one sub-block, so the scale
 * and min of a vector are a broadcast.
 *
 * Summation order, per (row, token), the same in every path and tile:
 *   vector j of the row (columns 16j .. 16j + 15, in column order):
 *       a_{j % 2} = fma(w_j, x_j, a_{j % 2})      (a_0 = a_1 = 0 at the start)
 *   y = reduce_add(a_0 + a_1)
 * Two paths produce it:
 *  - T < 4 (decode): blocks are dequantized as the row is streamed, R rows
 *    at a time (4 for one token, 2 for two or three), and used at once: the
 *    weights are read once, with no horizontal sum per block; the rows
 *    after the tile's are prefetched.
 *  - T >= 4 (prefill): two rows are dequantized into a per-thread buffer
 *    once, then tiles of 2 rows x 4 tokens (then single tokens) run over
 *    it, so each weight is dequantized once per call, not once per token.
 *    Rows wider than GQ_MAXC take the decode path, 3 tokens at a time.
 * Block decoding (gq_pre / gq_vec) is described above gq_ctx.
 */
#include "quant/ggml.h"
#include "quant/kernels.h"

#include "util/num.h"

#include <stddef.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define TGT    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define INL    static inline __attribute__((always_inline)) TGT
#define UNROLL _Pragma("GCC unroll 16")

/* Widest row of the prefill path: two rows of f32 in the per-thread buffer. */
#define GQ_MAXC 8192

static _Thread_local float gq_buf[2 * GQ_MAXC] __attribute__((aligned(64)));

/* An f16 field through F16C: exact, as e0_f16_to_f32, without its branches. */
INL float half_at(const uint8_t *b, size_t off) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(e0_ld16(b + off, 0))));
}

/* 16 bytes as 16 int32 lanes (zero- / sign-extended). */
INL __m512i u8x16(const uint8_t *p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
}
INL __m512i s8x16(const uint8_t *p) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* ggml_iq4nl_values as floats. */
INL __m512 kvalues(void) {
    return _mm512_setr_ps(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
}

/* Values per block of the types gq_dq decodes. */
INL int gq_blck(const int type) {
    return type == GGML_Q2_K || type == GGML_Q3_K || type == GGML_Q4_K || type == GGML_Q5_K ||
                   type == GGML_Q6_K || type == GGML_IQ4_XS
               ? 256
               : 32;
}

/* ---- block decoding ----------------------------------------------------------
 * gq_pre reads a block's scales into a context (vectors that stay in
 * registers); gq_vec then forms vector j (values 16j .. 16j + 15) of the
 * block. Types with at most 32 distinct values per sub-block (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q4_K, Q5_K, IQ4_NL, IQ4_XS) build the sub-block's value table
 * with the reference's own operations (e.g. Q4_K: (d sc) q - (dmin m) for q
 * = 0..15) and look codes up with vpermps / vpermt2ps, which read only the
 * low 4 / 5 bits of each index: no mask, convert, multiply or subtract per
 * value. The others compute each value as the reference does. */
typedef struct {
    __m512 a, b;     /* per-type scale vectors */
    float sa[16], sb[16]; /* the same, as floats: a broadcast from memory uses a load port, not
                             the shuffle port that the table lookups need */
    __m512 tlo, thi; /* the current sub-block's table (16 or 32 values) */
    __m512i raw[2];  /* code bytes shared by two vectors (low and high nibbles) */
    uint32_t qh;
} gq_ctx;

INL __m512 iota16(void) {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

INL void gq_pre(const int type, const uint8_t *b, gq_ctx *c) {
    const __m512 io = iota16(), i16 = _mm512_add_ps(io, _mm512_set1_ps(16.0f));
    switch (type) {
    case GGML_Q4_0: { /* (q - 8) d */
        const __m512 d = _mm512_set1_ps(half_at(b, offsetof(ggml_block_q4_0, d)));
        c->tlo = _mm512_mul_ps(_mm512_sub_ps(io, _mm512_set1_ps(8.0f)), d);
        return;
    }
    case GGML_Q4_1: { /* q d + m */
        const __m512 d = _mm512_set1_ps(half_at(b, offsetof(ggml_block_q4_1, d)));
        const __m512 mn = _mm512_set1_ps(half_at(b, offsetof(ggml_block_q4_1, m)));
        c->tlo = _mm512_add_ps(_mm512_mul_ps(io, d), mn);
        return;
    }
    case GGML_Q5_0: { /* (q - 16) d, q < 32 */
        const __m512 d = _mm512_set1_ps(half_at(b, offsetof(ggml_block_q5_0, d)));
        c->tlo = _mm512_mul_ps(_mm512_sub_ps(io, _mm512_set1_ps(16.0f)), d);
        c->thi = _mm512_mul_ps(io, d);
        c->qh = e0_ld32(b + offsetof(ggml_block_q5_0, qh), 0);
        return;
    }
    case GGML_Q5_1: {
        const __m512 d = _mm512_set1_ps(half_at(b, offsetof(ggml_block_q5_1, d)));
        const __m512 mn = _mm512_set1_ps(half_at(b, offsetof(ggml_block_q5_1, m)));
        c->tlo = _mm512_add_ps(_mm512_mul_ps(io, d), mn);
        c->thi = _mm512_add_ps(_mm512_mul_ps(i16, d), mn);
        c->qh = e0_ld32(b + offsetof(ggml_block_q5_1, qh), 0);
        return;
    }
    case GGML_Q8_0:
        c->a = _mm512_set1_ps(half_at(b, offsetof(ggml_block_q8_0, d)));
        return;
    case GGML_IQ4_NL:
        c->tlo = _mm512_mul_ps(_mm512_set1_ps(half_at(b, offsetof(ggml_block_iq4_nl, d))), kvalues());
        return;
    case GGML_Q2_K: { /* a: d * lo(sc), b: dmin * hi(sc) per sub-block of 16 */
        const __m512 d = _mm512_set1_ps(half_at(b, offsetof(ggml_block_q2_K, d)));
        const __m512 dm = _mm512_set1_ps(half_at(b, offsetof(ggml_block_q2_K, dmin)));
        const __m512i sc = u8x16(b + offsetof(ggml_block_q2_K, scales));
        c->a = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(15))));
        c->b = _mm512_mul_ps(dm, _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4)));
        return;
    }
    case GGML_Q3_K: { /* a: d (sc - 32) per sub-block of 16 */
        const uint8_t *sc = b + offsetof(ggml_block_q3_K, scales);
        int32_t sv[16];
        for (int s = 0; s < 16; s++) {
            const int lo = (s < 8 ? sc[s] : sc[s - 8] >> 4) & 0x0f;
            const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
            sv[s] = (lo | hi << 4) - 32;
        }
        c->a = _mm512_mul_ps(_mm512_set1_ps(half_at(b, offsetof(ggml_block_q3_K, d))),
                             _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)sv)));
        return;
    }
    case GGML_Q4_K:
    case GGML_Q5_K: {
        /* a: lanes 0-7 d * sc_j, lanes 8-15 dmin * m_j. The 12 scale bytes
         * rearranged as 32-bit words into sc0..7, m0..7. */
        uint32_t u[4];
        memcpy(u, b + offsetof(ggml_block_q4_K, scales), 12);
        const uint32_t k1 = 0x3f3f3f3fu, k2 = 0x0f0f0f0fu, k3 = 0x03030303u;
        u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
        const uint32_t m03 = u[1] & k1;
        u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
        u[2] = m03;
        u[0] &= k1;
        /* d in lanes 0-7, dmin in 8-15 */
        const __m512 dd = _mm512_permutexvar_ps(
            _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
            _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)e0_ld32(b, 0)))));
        c->a = _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                     _mm_loadu_si128((const __m128i *)(const void *)u))));
        if (type == GGML_Q5_K) c->qh = 0;
        return;
    }
    case GGML_Q6_K: { /* a: d * sc per sub-block of 16 */
        const __m512 d = _mm512_set1_ps(half_at(b, offsetof(ggml_block_q6_K, d)));
        c->a = _mm512_mul_ps(d, _mm512_cvtepi32_ps(s8x16(b + offsetof(ggml_block_q6_K, scales))));
        return;
    }
    case GGML_IQ4_XS: { /* a: d (ls - 32) per sub-block of 32 (lanes 0-7) */
        const uint16_t sh = e0_ld16(b + offsetof(ggml_block_iq4_xs, scales_h), 0);
        const uint8_t *sl = b + offsetof(ggml_block_iq4_xs, scales_l);
        int32_t ls[16] = {0};
        for (int j = 0; j < 8; j++)
            ls[j] = (((sl[j / 2] >> (4 * (j % 2))) & 0x0f) | ((sh >> (2 * j)) & 3) << 4) - 32;
        c->a = _mm512_mul_ps(_mm512_set1_ps(half_at(b, offsetof(ggml_block_iq4_xs, d))),
                             _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)ls)));
        return;
    }
    }
}

/* Lane l of the scale vectors, broadcast. */
#define SA(l) bcast_mem(&c->sa[l])
#define SB(l) bcast_mem(&c->sb[l])

/* vbroadcastss from memory, in asm: the compiler would turn it back into a
 * shuffle of the vector the floats came from. */
INL __m512 bcast_mem(const float *p) {
    __m512 r;
    __asm__("vbroadcastss %1, %0" : "=v"(r) : "m"(*p));
    return r;
}

INL void gq_begin(const int type, const uint8_t *b, gq_ctx *c) {
    gq_pre(type, b, c);
    if (type == GGML_Q2_K || type == GGML_Q3_K || type == GGML_Q4_K || type == GGML_Q5_K ||
        type == GGML_Q6_K || type == GGML_IQ4_XS)
        _mm512_storeu_ps(c->sa, c->a);
    if (type == GGML_Q2_K) _mm512_storeu_ps(c->sb, c->b);
}

/* Vector j of the block (j a constant after unrolling). */
INL __m512 gq_vec(const int type, const uint8_t *b, gq_ctx *c, const int j) {
    const __m512 io = iota16();
    switch (type) {
    case GGML_Q4_0:
    case GGML_Q4_1:
    case GGML_IQ4_NL: {
        if (!j)
            c->raw[0] = u8x16(b + (type == GGML_Q4_1 ? offsetof(ggml_block_q4_1, qs)
                                                     : offsetof(ggml_block_q4_0, qs)));
        return _mm512_permutexvar_ps(j ? _mm512_srli_epi32(c->raw[0], 4) : c->raw[0], c->tlo);
    }
    case GGML_Q5_0:
    case GGML_Q5_1: {
        const size_t oqs =
            type == GGML_Q5_1 ? offsetof(ggml_block_q5_1, qs) : offsetof(ggml_block_q5_0, qs);
        if (!j) c->raw[0] = u8x16(b + oqs);
        __m512i q = j ? _mm512_srli_epi32(c->raw[0], 4)
                      : _mm512_and_si512(c->raw[0], _mm512_set1_epi32(15));
        q = _mm512_mask_or_epi32(q, (__mmask16)(j ? c->qh >> 16 : c->qh & 0xffff), q,
                                 _mm512_set1_epi32(16));
        return _mm512_permutex2var_ps(c->tlo, q, c->thi);
    }
    case GGML_Q8_0:
        return _mm512_mul_ps(
            _mm512_cvtepi32_ps(s8x16(b + offsetof(ggml_block_q8_0, qs) + 16 * j)), c->a);
    case GGML_Q2_K: {
        const int h = j / 8, k = (j / 2) % 4, hf = j % 2;
        const __m512i q = _mm512_and_si512(
            _mm512_srli_epi32(u8x16(b + offsetof(ggml_block_q2_K, qs) + 32 * h + 16 * hf), 2 * k),
            _mm512_set1_epi32(3));
        return _mm512_sub_ps(_mm512_mul_ps(SA(j), _mm512_cvtepi32_ps(q)), SB(j));
    }
    case GGML_Q3_K: {
        const int h = j / 8, k = (j / 2) % 4, hf = j % 2;
        const __m512i four = _mm512_set1_epi32(4);
        const __m512i ql = _mm512_and_si512(
            _mm512_srli_epi32(u8x16(b + offsetof(ggml_block_q3_K, qs) + 32 * h + 16 * hf), 2 * k),
            _mm512_set1_epi32(3));
        const __m512i hv = u8x16(b + offsetof(ggml_block_q3_K, hmask) + 16 * hf);
        const int sh = 4 * h + k; /* the bit, moved to bit 2 (value 4) */
        const __m512i hb = _mm512_and_si512(
            sh >= 2 ? _mm512_srli_epi32(hv, sh - 2) : _mm512_slli_epi32(hv, 2 - sh), four);
        /* q = ql - 4 where the high bit is clear: (ql | 4 hb) - 4 */
        const __m512i q = _mm512_sub_epi32(_mm512_or_si512(ql, hb), four);
        return _mm512_mul_ps(SA(j), _mm512_cvtepi32_ps(q));
    }
    case GGML_Q4_K:
    case GGML_Q5_K: {
        const int s = j / 2, hf = j % 2; /* sub-block s of 32 */
        if (!hf) {
            const __m512 d1 = SA(s), m1 = SA(8 + s);
            c->tlo = _mm512_sub_ps(_mm512_mul_ps(io, d1), m1);
            if (type == GGML_Q5_K)
                c->thi = _mm512_sub_ps(
                    _mm512_mul_ps(_mm512_add_ps(io, _mm512_set1_ps(16.0f)), d1), m1);
        }
        const size_t oqs =
            type == GGML_Q5_K ? offsetof(ggml_block_q5_K, qs) : offsetof(ggml_block_q4_K, qs);
        if (s % 2 == 0) c->raw[hf] = u8x16(b + oqs + 32 * (s / 2) + 16 * hf);
        __m512i q = s % 2 ? _mm512_srli_epi32(c->raw[hf], 4) : c->raw[hf];
        if (type == GGML_Q4_K) return _mm512_permutexvar_ps(q, c->tlo);
        const __m512i hv = u8x16(b + offsetof(ggml_block_q5_K, qh) + 16 * hf);
        q = _mm512_and_si512(q, _mm512_set1_epi32(15));
        q = _mm512_or_si512(q, _mm512_and_si512(s <= 4 ? _mm512_slli_epi32(hv, 4 - s)
                                                       : _mm512_srli_epi32(hv, s - 4),
                                                _mm512_set1_epi32(16)));
        return _mm512_permutex2var_ps(c->tlo, q, c->thi);
    }
    case GGML_Q6_K: {
        const int h = j / 8, k = (j / 2) % 4, hf = j % 2;
        const __m512i lo = _mm512_and_si512(
            _mm512_srli_epi32(
                u8x16(b + offsetof(ggml_block_q6_K, ql) + 64 * h + 32 * (k % 2) + 16 * hf),
                4 * (k / 2)),
            _mm512_set1_epi32(15));
        const __m512i hv = u8x16(b + offsetof(ggml_block_q6_K, qh) + 32 * h + 16 * hf);
        const __m512i hi =
            _mm512_and_si512(2 * k <= 4 ? _mm512_slli_epi32(hv, 4 - 2 * k)
                                        : _mm512_srli_epi32(hv, 2 * k - 4),
                             _mm512_set1_epi32(48));
        const __m512i q = _mm512_sub_epi32(_mm512_or_si512(lo, hi), _mm512_set1_epi32(32));
        return _mm512_mul_ps(SA(j), _mm512_cvtepi32_ps(q));
    }
    case GGML_IQ4_XS: {
        const int s = j / 2, hf = j % 2;
        if (!hf) c->tlo = _mm512_mul_ps(SA(s), kvalues());
        if (!hf) c->raw[0] = u8x16(b + offsetof(ggml_block_iq4_xs, qs) + 16 * s);
        return _mm512_permutexvar_ps(hf ? _mm512_srli_epi32(c->raw[0], 4) : c->raw[0], c->tlo);
    }
    }
    return _mm512_setzero_ps();
}

/* One block at b into v[0 .. blck / 16): the reference's values, bit for bit. */
INL void gq_dq(const int type, const uint8_t *b, __m512 *v) {
    gq_ctx c;
    gq_begin(type, b, &c);
    const int nv = gq_blck(type) / 16;
    UNROLL
    for (int j = 0; j < nv; j++)
        v[j] = gq_vec(type, b, &c, j);
}



/* Decode path: rows r..r+R, tokens t0..t0+TT; blocks dequantized and used
 * at once. The next R rows are prefetched at the same column. */
INL void gq_tile(const e0_mat *m, const k_act *a, int64_t r, const int R, int64_t t0, const int TT,
                 const int type, const int bsize, float *y, int64_t ldy) {
    const int blck = gq_blck(type), NV = blck / 16;
    const int64_t nb = m->cols / blck, rb = nb * bsize;
    const uint8_t *w[4];
    const float *x[4];
    UNROLL
    for (int i = 0; i < R; i++)
        w[i] = (const uint8_t *)m->w + (r + i) * rb;
    UNROLL
    for (int t = 0; t < TT; t++)
        x[t] = a->x + (t0 + t) * a->ldx;
    __m512 a0[4][4], a1[4][4];
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
    for (int t = 0; t < TT; t++)
        a0[i][t] = a1[i][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        UNROLL
        for (int i = 0; i < R; i++) {
            const uint8_t *blk = w[i] + b * bsize;
            _mm_prefetch((const char *)(blk + R * rb), _MM_HINT_T0);
            if (bsize > 64) _mm_prefetch((const char *)(blk + R * rb + 64), _MM_HINT_T0);
            if (bsize > 128) _mm_prefetch((const char *)(blk + R * rb + 128), _MM_HINT_T0);
            gq_ctx c;
            gq_begin(type, blk, &c);
            UNROLL
            for (int j = 0; j < NV; j++) {
                const __m512 v = gq_vec(type, blk, &c, j);
                UNROLL
                for (int t = 0; t < TT; t++) {
                    const __m512 xv = _mm512_loadu_ps(x[t] + b * blck + 16 * j);
                    if (j & 1)
                        a1[i][t] = _mm512_fmadd_ps(v, xv, a1[i][t]);
                    else
                        a0[i][t] = _mm512_fmadd_ps(v, xv, a0[i][t]);
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

/* Rows r..r+n (n <= 2) dequantized into gq_buf. */
INL void gq_fill(const e0_mat *m, int64_t r, int n, const int type, const int bsize) {
    const int blck = gq_blck(type), NV = blck / 16;
    const int64_t nb = m->cols / blck, rb = nb * bsize;
    for (int i = 0; i < n; i++) {
        const uint8_t *w = (const uint8_t *)m->w + (r + i) * rb;
        float *o = gq_buf + i * m->cols;
        for (int64_t b = 0; b < nb; b++) {
            __m512 v[16];
            gq_dq(type, w + b * bsize, v);
            UNROLL
            for (int j = 0; j < NV; j++)
                _mm512_store_ps(o + b * blck + 16 * j, v[j]);
        }
    }
}

/* One kernel per type: the tile shapes of both paths, then the row loop. */
#define GQ_KERNEL(NAME, TYPE, BSIZE)                                                              \
    TGT static void gq_##NAME##_4x1(const e0_mat *m, const k_act *a, int64_t r, int64_t t0,       \
                                    float *y, int64_t ldy) {                                      \
        gq_tile(m, a, r, 4, t0, 1, TYPE, BSIZE, y, ldy);                                          \
    }                                                                                             \
    TGT static void gq_##NAME##_1x1(const e0_mat *m, const k_act *a, int64_t r, int64_t t0,       \
                                    float *y, int64_t ldy) {                                      \
        gq_tile(m, a, r, 1, t0, 1, TYPE, BSIZE, y, ldy);                                          \
    }                                                                                             \
    TGT static void gq_##NAME##_2x3(const e0_mat *m, const k_act *a, int64_t r, int64_t t0,       \
                                    float *y, int64_t ldy) {                                      \
        gq_tile(m, a, r, 2, t0, 3, TYPE, BSIZE, y, ldy);                                          \
    }                                                                                             \
    TGT static void gq_##NAME##_1x3(const e0_mat *m, const k_act *a, int64_t r, int64_t t0,       \
                                    float *y, int64_t ldy) {                                      \
        gq_tile(m, a, r, 1, t0, 3, TYPE, BSIZE, y, ldy);                                          \
    }                                                                                             \
    TGT static void gq_##NAME##_2x2(const e0_mat *m, const k_act *a, int64_t r, int64_t t0,       \
                                    float *y, int64_t ldy) {                                      \
        gq_tile(m, a, r, 2, t0, 2, TYPE, BSIZE, y, ldy);                                          \
    }                                                                                             \
    TGT static void gq_##NAME##_1x2(const e0_mat *m, const k_act *a, int64_t r, int64_t t0,       \
                                    float *y, int64_t ldy) {                                      \
        gq_tile(m, a, r, 1, t0, 2, TYPE, BSIZE, y, ldy);                                          \
    }                                                                                             \
    TGT static void gq_##NAME##_fill(const e0_mat *m, int64_t r, int n) {                         \
        gq_fill(m, r, n, TYPE, BSIZE);                                                            \
    }                                                                                             \
    TGT static void gq_##NAME##_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1,     \
                                     float *y, int64_t ldy) {                                     \
        static const gq_tiles tl = {gq_##NAME##_4x1, gq_##NAME##_1x1, gq_##NAME##_2x2,            \
                                    gq_##NAME##_1x2, gq_##NAME##_2x3, gq_##NAME##_1x3,            \
                                    gq_##NAME##_fill};                                            \
        gq_rows(m, a, r0, r1, y, ldy, &tl);                                                       \
    }

typedef void (*gq_tile_fn)(const e0_mat *, const k_act *, int64_t, int64_t, float *, int64_t);
typedef struct {
    gq_tile_fn t4x1, t1x1, t2x2, t1x2, t2x3, t1x3;
    void (*fill)(const e0_mat *, int64_t, int);
} gq_tiles;

/* Decode path over rows [r0, r1) for tokens [t0, t0 + TT), TT <= 3. */
TGT static void gq_rows_decode(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1,
                               int64_t t0, int TT, float *y, int64_t ldy, const gq_tiles *tl) {
    gq_tile_fn big = TT == 1 ? tl->t4x1 : TT == 2 ? tl->t2x2 : tl->t2x3;
    gq_tile_fn one = TT == 1 ? tl->t1x1 : TT == 2 ? tl->t1x2 : tl->t1x3;
    const int R = TT == 1 ? 4 : 2;
    int64_t r = r0;
    for (; r + R <= r1; r += R)
        big(m, a, r, t0, y, ldy);
    for (; r < r1; r++)
        one(m, a, r, t0, y, ldy);
}

TGT static void gq_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y,
                        int64_t ldy, const gq_tiles *tl) {
    if (a->T < 4 || m->cols > GQ_MAXC) {
        for (int64_t t0 = 0; t0 < a->T; t0 += 3)
            gq_rows_decode(m, a, r0, r1, t0, a->T - t0 >= 3 ? 3 : (int)(a->T - t0), y, ldy, tl);
        return;
    }
    /* two rows dequantized, then the f32 weights' kernel over them: its
     * summation order is this file's (even / odd 16-value vectors) */
    for (int64_t r = r0; r < r1; r += 2) {
        const int n = r1 - r >= 2 ? 2 : 1;
        tl->fill(m, r, n);
        const e0_mat v = {.type = E0_W_F32, .rows = n, .cols = m->cols, .w = gq_buf};
        k_avx512_f32_rows(&v, a, 0, n, y + r, ldy);
    }
}

GQ_KERNEL(q4_0, GGML_Q4_0, 18)
GQ_KERNEL(q4_1, GGML_Q4_1, 20)
GQ_KERNEL(q5_0, GGML_Q5_0, 22)
GQ_KERNEL(q5_1, GGML_Q5_1, 24)
GQ_KERNEL(q8_0, GGML_Q8_0, 34)
GQ_KERNEL(q2_K, GGML_Q2_K, 84)
GQ_KERNEL(q3_K, GGML_Q3_K, 110)
GQ_KERNEL(q4_K, GGML_Q4_K, 144)
GQ_KERNEL(q5_K, GGML_Q5_K, 176)
GQ_KERNEL(q6_K, GGML_Q6_K, 210)
GQ_KERNEL(iq4_nl, GGML_IQ4_NL, 18)
GQ_KERNEL(iq4_xs, GGML_IQ4_XS, 136)

/* The block dequantizer alone (tests: bit-identical to ggml_dequant). */
TGT void k_avx512_ggml_dequant(uint32_t type, const void *src, float *y, int64_t nb) {
    const uint8_t *p = src;
    const ggml_type_info *ti = ggml_info(type);
    for (int64_t b = 0; b < nb; b++) {
        __m512 v[16];
        const uint8_t *blk = p + b * ti->size;
        switch (type) {
#define DQ(T)                                                                                     \
    case T:                                                                                       \
        gq_dq(T, blk, v);                                                                         \
        break;
            DQ(GGML_Q4_0)
            DQ(GGML_Q4_1)
            DQ(GGML_Q5_0)
            DQ(GGML_Q5_1)
            DQ(GGML_Q8_0)
            DQ(GGML_Q2_K)
            DQ(GGML_Q3_K)
            DQ(GGML_Q4_K)
            DQ(GGML_Q5_K)
            DQ(GGML_Q6_K)
            DQ(GGML_IQ4_NL)
            DQ(GGML_IQ4_XS)
#undef DQ
        default:
            return;
        }
        for (int j = 0; j < ti->blck / 16; j++)
            _mm512_storeu_ps(y + b * ti->blck + 16 * j, v[j]);
    }
}

k_rows_fn k_avx512_ggml_pick(const e0_mat *m) {
    const ggml_type_info *ti = ggml_info(m->gtype);
    if (!ti || m->cols % ti->blck) return NULL;
    switch (m->gtype) {
    case GGML_Q4_0:
        return gq_q4_0_rows;
    case GGML_Q4_1:
        return gq_q4_1_rows;
    case GGML_Q5_0:
        return gq_q5_0_rows;
    case GGML_Q5_1:
        return gq_q5_1_rows;
    case GGML_Q8_0:
        return gq_q8_0_rows;
    case GGML_Q2_K:
        return gq_q2_K_rows;
    case GGML_Q3_K:
        return gq_q3_K_rows;
    case GGML_Q4_K:
        return gq_q4_K_rows;
    case GGML_Q5_K:
        return gq_q5_K_rows;
    case GGML_Q6_K:
        return gq_q6_K_rows;
    case GGML_IQ4_NL:
        return gq_iq4_nl_rows;
    case GGML_IQ4_XS:
        return gq_iq4_xs_rows;
    default:
        return NULL;
    }
}

#else

void k_avx512_ggml_dequant(uint32_t type, const void *src, float *y, int64_t nb) {
    ggml_dequant(type, src, y, nb);
}

k_rows_fn k_avx512_ggml_pick(const e0_mat *m) {
    (void)m;
    return NULL;
}

#endif
