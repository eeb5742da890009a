/* What the ggml integer-activation kernel files share (kernels_ggml_vnni.c:
 * row kernels and the choice of kernel; kernels_ggml_vnni_panel.c: 16-row
 * panels): the target attributes and the always-inline block decoders (a
 * copy in each file, as before the split). */
#ifndef E0_QUANT_KERNELS_GGML_VNNI_H
#define E0_QUANT_KERNELS_GGML_VNNI_H

#include "quant/ggml.h"
#include "quant/kernels.h"
#include "quant/kernels_x86.h"

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

/* Q4_K and Q5_K share their d, dmin and packed scales (same offsets). */
/* Types of 32-column blocks with one scale each (weights as unsigned
 * bytes u per block; q32_codes). */
#define QK_IS32(type)                                                                              \
    ((type) == GGML_Q8_0 || (type) == GGML_Q4_0 || (type) == GGML_Q4_1 || (type) == GGML_Q5_0 ||   \
     (type) == GGML_Q5_1 || (type) == GGML_IQ4_NL)
#define QK_IS45(type) ((type) == GGML_Q4_K || (type) == GGML_Q5_K)

/* Bytes of a block of type. */
INLV int qk_bsize(const int type) {
    return type == GGML_Q4_K   ? (int)sizeof(ggml_block_q4_K)
           : type == GGML_Q5_K ? (int)sizeof(ggml_block_q5_K)
           : type == GGML_Q6_K   ? (int)sizeof(ggml_block_q6_K)
           : type == GGML_IQ4_XS ? (int)sizeof(ggml_block_iq4_xs)
                                 : (int)sizeof(ggml_block_q8_0);
}

/* ggml_iq4nl_values + 128 (1..241), the unsigned codes of IQ4_NL / IQ4_XS,
 * in every 128-bit lane (vpshufb's table). */
INLV __m512i iq4_table(void) {
    return _mm512_broadcast_i32x4(_mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129,
                                                (char)141, (char)153, (char)166, (char)181,
                                                (char)197, (char)217, (char)241));
}

/* An f16 field, exactly. */
INLV float qk_half(const uint8_t *b, size_t off) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(e0_ld16(b + off, 0))));
}

/* What a tile needs of one weight block: the integer scales S (int16, by
 * sub-block), d, and the per-16-column mins / offsets m. */
typedef struct {
    __m512i S;  /* Q6_K: sc0..15 as int16; IQ4_XS: ls0..7 - 32 as int32 */
    __m512 sm;  /* Q4_K / Q5_K: sc0..7 then m0..7 as float */
    __m512 d, dmin, m;
} qk_blk;

INLV void qk_begin(const int type, const uint8_t *b, qk_blk *k) {
    _Static_assert(offsetof(ggml_block_q4_K, scales) == offsetof(ggml_block_q5_K, scales) &&
                       offsetof(ggml_block_q4_K, dmin) == offsetof(ggml_block_q5_K, dmin),
                   "q4_K / q5_K heads");
    if (QK_IS45(type)) {
        /* The 12 scale bytes, as 32-bit words w0 w1 w2, into sc0..3, sc4..7,
         * m0..3, m4..7 (6 bits each):
         *   w0 & 0x3f.., (w2 & 0x0f..) | (w0 >> 6 & 3..) << 4,
         *   w1 & 0x3f.., (w2 >> 4 & 0x0f..) | (w1 >> 6 & 3..) << 4
         * in registers (the 16-byte load reads 4 bytes of qs, unused). */
        const __m128i raw =
            _mm_loadu_si128((const __m128i *)(const void *)(b + offsetof(ggml_block_q4_K, scales)));
        const __m128i A = _mm_srlv_epi32(_mm_shuffle_epi32(raw, _MM_SHUFFLE(2, 1, 2, 0)),
                                         _mm_setr_epi32(0, 0, 0, 4));
        const __m128i B = _mm_srli_epi32(_mm_shuffle_epi32(raw, _MM_SHUFFLE(1, 1, 0, 0)), 2);
        const __m128i lo =
            _mm_and_si128(A, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
        const __m128i v = _mm_ternarylogic_epi32(
            lo, B, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030), 0xF8); /* lo | (B & mask) */
        k->d = _mm512_set1_ps(qk_half(b, offsetof(ggml_block_q4_K, d)));
        k->dmin = _mm512_set1_ps(qk_half(b, offsetof(ggml_block_q4_K, dmin)));
        /* dmin m_s for the 16-column chunks 2s, 2s + 1 */
        k->sm = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
        k->m = _mm512_mul_ps(
            k->dmin,
            _mm512_permutexvar_ps(
                _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15), k->sm));
    } else if (type == GGML_IQ4_XS) {
        /* ls_s = (scales_l as u32 >> 4s) & 15 | ((scales_h >> 2s) & 3) << 4 */
        const __m256i lo = _mm256_and_si256(
            _mm256_srlv_epi32(
                _mm256_set1_epi32((int)e0_ld32(b + offsetof(ggml_block_iq4_xs, scales_l), 0)),
                _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
            _mm256_set1_epi32(15));
        const __m256i hi = _mm256_and_si256(
            _mm256_srlv_epi32(
                _mm256_set1_epi32((int)e0_ld16(b + offsetof(ggml_block_iq4_xs, scales_h), 0)),
                _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
            _mm256_set1_epi32(3));
        const __m256i sc =
            _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
        const float d = qk_half(b, offsetof(ggml_block_iq4_xs, d));
        k->S = _mm512_zextsi256_si512(sc);
        k->d = _mm512_set1_ps(d);
        /* 128 d sc_s for the 16-column chunks 2s, 2s + 1 (the codes' +128) */
        k->m = _mm512_mul_ps(
            _mm512_set1_ps(128.0f * d),
            _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(
                _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7), k->S)));
    } else { /* Q6_K */
        const __m128i sc =
            _mm_loadu_si128((const __m128i *)(const void *)(b + offsetof(ggml_block_q6_K, scales)));
        const float d = qk_half(b, offsetof(ggml_block_q6_K, d));
        k->S = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(sc));
        k->d = _mm512_set1_ps(d);
        k->m =
            _mm512_mul_ps(_mm512_set1_ps(32.0f * d), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
    }
}

/* Bytes of a 32-column block, its unsigned codes' offset (u = w + off) and
 * whether it has a min (Q4_1 / Q5_1: v = d q + m). */
INLV int q32_bsize(const int type) {
    return type == GGML_Q4_0   ? (int)sizeof(ggml_block_q4_0)
           : type == GGML_Q4_1 ? (int)sizeof(ggml_block_q4_1)
           : type == GGML_Q5_0 ? (int)sizeof(ggml_block_q5_0)
           : type == GGML_Q5_1 ? (int)sizeof(ggml_block_q5_1)
           : type == GGML_IQ4_NL ? (int)sizeof(ggml_block_iq4_nl)
                                 : (int)sizeof(ggml_block_q8_0);
}
INLV float q32_off(const int type) {
    return type == GGML_Q4_0 ? 8.0f : type == GGML_Q5_0 ? 16.0f : type == GGML_Q4_1 || type == GGML_Q5_1 ? 0.0f : 128.0f;
}
#define Q32_MIN(type) ((type) == GGML_Q4_1 || (type) == GGML_Q5_1)

/* The unsigned codes u of the block at b, columns 0..31 in order: Q8_0 w
 * ^ 0x80; Q4_0 / Q4_1 the nibbles (qs[j] low: column j, high: j + 16);
 * Q5_0 / Q5_1 plus 16 where bit j of qh is set; IQ4_NL the table + 128. */
INLV __m256i q32_codes(const int type, const uint8_t *b) {
    _Static_assert(offsetof(ggml_block_q4_0, d) == 0 && offsetof(ggml_block_q4_1, d) == 0 &&
                       offsetof(ggml_block_q5_0, d) == 0 && offsetof(ggml_block_q5_1, d) == 0 &&
                       offsetof(ggml_block_q8_0, d) == 0 && offsetof(ggml_block_iq4_nl, d) == 0 &&
                       offsetof(ggml_block_q4_1, m) == 2 && offsetof(ggml_block_q5_1, m) == 2,
                   "32-column heads");
    if (type == GGML_Q8_0)
        return _mm256_xor_si256(
            _mm256_loadu_si256((const __m256i *)(const void *)(b + offsetof(ggml_block_q8_0, qs))),
            _mm256_set1_epi8((char)0x80));
    const size_t qs = type == GGML_Q4_0   ? offsetof(ggml_block_q4_0, qs)
                      : type == GGML_Q4_1 ? offsetof(ggml_block_q4_1, qs)
                      : type == GGML_Q5_0 ? offsetof(ggml_block_q5_0, qs)
                      : type == GGML_Q5_1 ? offsetof(ggml_block_q5_1, qs)
                                          : offsetof(ggml_block_iq4_nl, qs);
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)(b + qs));
    __m256i n = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1),
        _mm256_set1_epi8(0x0f));
    if (type == GGML_IQ4_NL) return _mm256_shuffle_epi8(_mm512_castsi512_si256(iq4_table()), n);
    if (type == GGML_Q5_0 || type == GGML_Q5_1) {
        const size_t qh = type == GGML_Q5_0 ? offsetof(ggml_block_q5_0, qh)
                                            : offsetof(ggml_block_q5_1, qh);
        n = _mm256_mask_add_epi8(n, (__mmask32)e0_ld32(b + qh, 0), n, _mm256_set1_epi8(16));
    }
    return n;
}

#define QKP_MAXC 16384 /* widest row */

/* The panel kernels (kernels_ggml_vnni_panel.c) of each type and plane count. */
#define QKP_DECL(NAME, P) \
    void qkp_##NAME##_##P##_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y, int64_t ldy);
QKP_DECL(q4_K, 1)
QKP_DECL(q4_K, 2)
QKP_DECL(q4_K, 3)
QKP_DECL(q6_K, 1)
QKP_DECL(q6_K, 2)
QKP_DECL(q6_K, 3)
QKP_DECL(q5_K, 1)
QKP_DECL(q5_K, 2)
QKP_DECL(q5_K, 3)
QKP_DECL(q8_0, 1)
QKP_DECL(q8_0, 2)
QKP_DECL(q8_0, 3)
QKP_DECL(iq4_xs, 1)
QKP_DECL(iq4_xs, 2)
QKP_DECL(iq4_xs, 3)
QKP_DECL(iq4_nl, 1)
QKP_DECL(iq4_nl, 2)
QKP_DECL(iq4_nl, 3)
QKP_DECL(q4_0, 1)
QKP_DECL(q4_0, 2)
QKP_DECL(q4_0, 3)
QKP_DECL(q4_1, 1)
QKP_DECL(q4_1, 2)
QKP_DECL(q4_1, 3)
QKP_DECL(q5_0, 1)
QKP_DECL(q5_0, 2)
QKP_DECL(q5_0, 3)
QKP_DECL(q5_1, 1)
QKP_DECL(q5_1, 2)
QKP_DECL(q5_1, 3)

#endif
#endif
