/* AVX-512 helpers shared by the kernel files (x86-64 only; each file
 * compiles them under its own target attributes). */
#ifndef E0_QUANT_KERNELS_X86_H
#define E0_QUANT_KERNELS_X86_H

#if defined(__x86_64__)
#include <immintrin.h>

#define K_TR_UNROLL _Pragma("GCC unroll 16")

/* 16 x 16 words: v[i] = word i of 16 rows in, word c of rows 0..15 out. */
static inline __attribute__((always_inline, target("avx512f"))) void k_tr16(__m512i v[16]) {
    __m512i t[16];
    K_TR_UNROLL
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]);
    }
    __m512i u[16];
    K_TR_UNROLL
    for (int a = 0; a < 4; a++) { /* u[4a + b]: rows 4a..4a+3 of columns b, b+4, b+8, b+12 */
        u[4 * a] = _mm512_unpacklo_epi64(t[4 * a], t[4 * a + 2]);
        u[4 * a + 1] = _mm512_unpackhi_epi64(t[4 * a], t[4 * a + 2]);
        u[4 * a + 2] = _mm512_unpacklo_epi64(t[4 * a + 1], t[4 * a + 3]);
        u[4 * a + 3] = _mm512_unpackhi_epi64(t[4 * a + 1], t[4 * a + 3]);
    }
    K_TR_UNROLL
    for (int b = 0; b < 4; b++) {
        const __m512i v0 = _mm512_shuffle_i32x4(u[b], u[4 + b], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512i v1 = _mm512_shuffle_i32x4(u[b], u[4 + b], _MM_SHUFFLE(3, 1, 3, 1));
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + b], u[12 + b], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512i v3 = _mm512_shuffle_i32x4(u[8 + b], u[12 + b], _MM_SHUFFLE(3, 1, 3, 1));
        v[b] = _mm512_shuffle_i32x4(v0, v2, _MM_SHUFFLE(2, 0, 2, 0));
        v[8 + b] = _mm512_shuffle_i32x4(v0, v2, _MM_SHUFFLE(3, 1, 3, 1));
        v[4 + b] = _mm512_shuffle_i32x4(v1, v3, _MM_SHUFFLE(2, 0, 2, 0));
        v[12 + b] = _mm512_shuffle_i32x4(v1, v3, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

#undef K_TR_UNROLL

#endif

#endif
