/* The GPU's expert products on the host, bit for bit (gpu/replica.h).
 *
 * Written by hand because it is a copy of edge0's own kernels' arithmetic:
 * every line below has its twin in kernels_mm.cuh (dq32, chunk_dot,
 * row_dot, warp_sum) or kernels.cu (exp_ieee, silu), and a change to one
 * is a change to the other (test_gpu's test_replica compares the two on
 * the card). fmaf is a fused multiply-add (glibc's is exact; -std=c11
 * contracts nothing by itself), so each operation rounds as the card's
 * __fmaf_rn / __fmul_rn / __fadd_rn does.
 */
#include "gpu/replica.h"

#include "gpu/gpu.h"
#include "util/err.h"
#include "util/num.h"

#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool g_scalar;

void replica_force_scalar(bool on) { g_scalar = on; }

int rmat_of(const e0_mat *m, rmat *out, char *err) {
    gpu_mat g;
    uint64_t wb, sb;
    int rc = gpu_mat_shape(m, &g, &wb, &sb, err);
    if (rc) return rc;
    *out = (rmat){.w = m->w, .s = m->scales, .b = m->biases, .row_bytes = g.row_bytes,
                  .srow_bytes = g.srow_bytes, .rows = g.rows, .cols = g.cols, .fmt = g.fmt,
                  .group = g.group, .stype = g.stype};
    return 0;
}

static const int8_t k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

static inline uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline float f16f(uint16_t v) { return e0_f16_to_f32(v); }
static inline float sval(const uint8_t *p, int i, int stype) {
    if (stype == E0_S_F32) return e0_ldf32(p, (size_t)i);
    const uint16_t v = ld16(p + 2 * i);
    return stype == E0_S_BF16 ? e0_bf16_to_f32(v) : f16f(v);
}
/* kernels_mm.cuh's u2f: q - bias, exact for the small integers it takes */
static inline float u2f(uint32_t q, float bias) { return (float)q - bias; }

/* Six-bit scale and min of sub-block j of a Q4_K / Q5_K block. */
static inline void k4_sm(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* dq32 for the formats of 32-value blocks (Q4_0, Q4_1, IQ4_NL, Q5_0, Q5_1, Q8_0). */
static inline void dq32_b32(const rmat *W, const uint8_t *row, int c, float v[32]) {
    switch (W->fmt) {
    case GPU_F_Q4_0:
    case GPU_F_Q4_1:
    case GPU_F_IQ4_NL: {
        const int f = W->fmt, bsz = f == GPU_F_Q4_1 ? 20 : 18;
        const uint8_t *b = row + (size_t)c * (size_t)bsz;
        const float d = f16f(ld16(b)), m = f == GPU_F_Q4_1 ? f16f(ld16(b + 2)) : 0.0f;
        const uint8_t *qs = b + (f == GPU_F_Q4_1 ? 4 : 2);
        for (int j = 0; j < 16; j++) {
            const uint32_t lo = qs[j] & 0x0f, hi = qs[j] >> 4;
            if (f == GPU_F_Q4_0) {
                v[j] = u2f(lo, 8.0f) * d;
                v[j + 16] = u2f(hi, 8.0f) * d;
            } else if (f == GPU_F_Q4_1) {
                v[j] = fmaf(u2f(lo, 0), d, m);
                v[j + 16] = fmaf(u2f(hi, 0), d, m);
            } else {
                v[j] = d * (float)k_iq4nl[lo];
                v[j + 16] = d * (float)k_iq4nl[hi];
            }
        }
        return;
    }
    case GPU_F_Q5_0:
    case GPU_F_Q5_1: {
        const int f = W->fmt, bsz = f == GPU_F_Q5_1 ? 24 : 22;
        const uint8_t *b = row + (size_t)c * (size_t)bsz;
        const float d = f16f(ld16(b)), m = f == GPU_F_Q5_1 ? f16f(ld16(b + 2)) : 0.0f;
        const uint8_t *qhp = b + (f == GPU_F_Q5_1 ? 4 : 2);
        const uint32_t qh = ld32(qhp);
        const uint8_t *qs = qhp + 4;
        for (int j = 0; j < 16; j++) {
            const uint32_t lo = (qs[j] & 0x0fu) | ((qh >> j) & 1) << 4;
            const uint32_t hi = (uint32_t)(qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
            if (f == GPU_F_Q5_0) {
                v[j] = u2f(lo, 16.0f) * d;
                v[j + 16] = u2f(hi, 16.0f) * d;
            } else {
                v[j] = fmaf(u2f(lo, 0), d, m);
                v[j + 16] = fmaf(u2f(hi, 0), d, m);
            }
        }
        return;
    }
    case GPU_F_Q8_0: {
        const uint8_t *b = row + (size_t)c * 34;
        const float d = f16f(ld16(b));
        for (int j = 0; j < 32; j++) v[j] = u2f(b[2 + j] ^ 0x80u, 128.0f) * d;
        return;
    }
    }
}

/* dq32 for the formats of 256-value super-blocks (the K-quants, IQ4_XS). */
static inline void dq32_k(const rmat *W, const uint8_t *row, int c, float v[32]) {
    switch (W->fmt) {
    case GPU_F_Q2_K: {
        const uint8_t *b = row + (size_t)(c / 8) * 84;
        const int cc = c % 8, h = cc / 4, k = cc % 4;
        const uint8_t *sc = b, *qs = b + 16;
        const float d = f16f(ld16(b + 80)), dmin = f16f(ld16(b + 82));
        for (int half = 0; half < 2; half++) {
            const int s = 8 * h + 2 * k + half;
            const float dl = d * (float)(sc[s] & 0x0f), ml = dmin * (float)(sc[s] >> 4);
            for (int l = 0; l < 16; l++) {
                const int q = (qs[32 * h + 16 * half + l] >> (2 * k)) & 3;
                v[16 * half + l] = fmaf(dl, (float)q, -ml);
            }
        }
        return;
    }
    case GPU_F_Q3_K: {
        const uint8_t *b = row + (size_t)(c / 8) * 110;
        const int cc = c % 8, h = cc / 4, k = cc % 4;
        const uint8_t *hm = b, *qs = b + 32, *scs = b + 96;
        const float d = f16f(ld16(b + 108));
        for (int half = 0; half < 2; half++) {
            const int s = 8 * h + 2 * k + half;
            const int lo = (s < 8 ? scs[s] : scs[s - 8] >> 4) & 0x0f;
            const int hi = (scs[8 + s % 4] >> (2 * (s / 4))) & 3;
            const float dl = d * (float)((lo | hi << 4) - 32);
            for (int l2 = 0; l2 < 16; l2++) {
                const int l = 16 * half + l2;
                const int q = ((qs[32 * h + l] >> (2 * k)) & 3) - ((hm[l] >> (4 * h + k)) & 1 ? 0 : 4);
                v[l] = dl * (float)q;
            }
        }
        return;
    }
    case GPU_F_Q4_K:
    case GPU_F_Q5_K: {
        const bool q5 = W->fmt == GPU_F_Q5_K;
        const uint8_t *b = row + (size_t)(c / 8) * (q5 ? 176 : 144);
        const int s = c % 8;
        const float d = f16f(ld16(b)), dmin = f16f(ld16(b + 2));
        int sc, m;
        k4_sm(b + 4, s, &sc, &m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        const uint8_t *qs = b + (q5 ? 48 : 16) + 32 * (s / 2), *qh = b + 16;
        const int sh = 4 * (s % 2);
        for (int l4 = 0; l4 < 8; l4++) {
            const uint32_t q4 = ld32(qs + 4 * l4), h4 = q5 ? ld32(qh + 4 * l4) : 0;
            for (int j = 0; j < 4; j++) {
                uint32_t q = (q4 >> (8 * j + sh)) & 0x0f;
                if (q5) q |= ((h4 >> (8 * j + s)) & 1) << 4;
                v[4 * l4 + j] = fmaf(d1, u2f(q, 0), -m1);
            }
        }
        return;
    }
    case GPU_F_Q6_K: {
        const uint8_t *b = row + (size_t)(c / 8) * 210;
        const int cc = c % 8, h = cc / 4, k = cc % 4;
        const uint8_t *ql = b + 64 * h + 32 * (k % 2), *qh = b + 128 + 32 * h;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = f16f(ld16(b + 208));
        const float ds0 = d * (float)sc[(128 * h + 32 * k) / 16], ds1 = d * (float)sc[(128 * h + 32 * k + 16) / 16];
        for (int l = 0; l < 32; l++) {
            const uint32_t q = (uint32_t)((ql[l] >> (4 * (k / 2))) & 0x0f) | (uint32_t)((qh[l] >> (2 * k)) & 3) << 4;
            v[l] = (l < 16 ? ds0 : ds1) * u2f(q, 32.0f);
        }
        return;
    }
    case GPU_F_IQ4_XS: {
        const uint8_t *b = row + (size_t)(c / 8) * 136;
        const int s = c % 8;
        const float d = f16f(ld16(b));
        const uint16_t sh = ld16(b + 2);
        const uint8_t *sl = b + 4, *qs = b + 8 + 16 * s;
        const int ls = ((sl[s / 2] >> (4 * (s % 2))) & 0x0f) | ((sh >> (2 * s)) & 3) << 4;
        const float dl = d * (float)(ls - 32);
        for (int j = 0; j < 16; j++) {
            v[j] = dl * (float)k_iq4nl[qs[j] & 0x0f];
            v[j + 16] = dl * (float)k_iq4nl[qs[j] >> 4];
        }
        return;
    }
    }
}

/* Values [32c, 32c + 32) of row r: dq32. */
static inline void dq32(const rmat *W, int32_t r, int c, float v[32]) {
    const uint8_t *row = W->w + (size_t)r * (size_t)W->row_bytes;
    switch (W->fmt) {
    case GPU_F_F32:
        for (int i = 0; i < 32; i++) v[i] = e0_ldf32(row, (size_t)(32 * c + i));
        return;
    case GPU_F_BF16:
        for (int i = 0; i < 32; i++) v[i] = e0_bf16_to_f32(ld16(row + 2 * (32 * c + i)));
        return;
    case GPU_F_F16:
        for (int i = 0; i < 32; i++) v[i] = f16f(ld16(row + 2 * (32 * c + i)));
        return;
    case GPU_F_QA4:
    case GPU_F_QA8: {
        const uint8_t *srow = W->s + (size_t)r * (size_t)W->srow_bytes;
        const uint8_t *brow = W->b + (size_t)r * (size_t)W->srow_bytes;
        const int g = (32 * c) / W->group;
        const float sc = sval(srow, g, W->stype), bi = sval(brow, g, W->stype);
        const int bits = W->fmt == GPU_F_QA4 ? 4 : 8, per = 32 / bits;
        const uint32_t mask = (1u << bits) - 1;
        for (int i = 0; i < 32 / per; i++) {
            const uint32_t word = ld32(row + 4 * ((size_t)c * (size_t)(32 / per) + (size_t)i));
            for (int j = 0; j < per; j++) v[i * per + j] = fmaf(u2f((word >> (bits * j)) & mask, 0), sc, bi);
        }
        return;
    }
    case GPU_F_Q4_0: case GPU_F_Q4_1: case GPU_F_IQ4_NL: case GPU_F_Q5_0: case GPU_F_Q5_1: case GPU_F_Q8_0:
        dq32_b32(W, row, c, v);
        return;
    default:
        dq32_k(W, row, c, v);
        return;
    }
}

/* chunk_dot: eight groups of four (v1 x1, then v0 x0, v2 x2, v3 x3 fused
 * in), summed in turn from 0. */
static float chunk_dot(const float v[32], const float *x) {
    float a = 0.0f;
    for (int j = 0; j < 8; j++) {
        float t = v[4 * j + 1] * x[4 * j + 1];
        t = fmaf(v[4 * j], x[4 * j], t);
        t = fmaf(v[4 * j + 2], x[4 * j + 2], t);
        t = fmaf(v[4 * j + 3], x[4 * j + 3], t);
        a = a + t;
    }
    return a;
}

/* row_dot: lane l sums chunks l, l + 32, ... in turn; warp_sum folds the
 * lanes by halves (lane l + lane l ^ o is the same sum either way round). */
static float dot_scalar(const rmat *m, int32_t r, const float *x) {
    float lane[32] = {0};
    const int nc = m->cols / 32;
    for (int c = 0; c < nc; c++) {
        float v[32];
        dq32(m, r, c, v);
        lane[c % 32] = lane[c % 32] + chunk_dot(v, x + 32 * c);
    }
    for (int h = 16; h > 0; h >>= 1)
        for (int l = 0; l < h; l++) lane[l] = lane[l] + lane[l + h];
    return lane[0];
}

float replica_exp(float x) {
    x = fminf(fmaxf(x, -87.0f), 88.0f);
    const float n = rintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693359375f, x);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    const float y = fmaf(p, r * r, r) + 1.0f;
    const uint32_t bits = (uint32_t)((int)n + 127) << 23;
    float s;
    memcpy(&s, &bits, 4);
    return y * s;
}

float replica_silu(float x) { return x / (1.0f + replica_exp(-x)); }

/* The same sums with AVX-512 (dot_fmt below): the lanes' sums folded by
 * halves as warp_sum folds them (256-bit halves, then 128, 64, 32). dq32 is
 * inlined here and compiled for this target, its fmaf a single
 * instruction. */
#define TGT __attribute__((target("avx512f,avx512dq,fma,f16c")))
TGT static inline float fold16(__m512 p) {
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(p), _mm512_extractf32x8_ps(p, 1));
    const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

/* f16 to f32 by the F16C instruction (exact, as f16f) */
TGT static inline float h16f(uint16_t v) { return _cvtsh_ss(v); }

/* IQ4_NL's and IQ4_XS's 16 bytes of nibbles as the table's values times dl:
 * low nibbles values 0-15, high ones 16-31 (dq32's). */
TGT static inline void iq4_v(const uint8_t *qs, float dl, __m512 *lo, __m512 *hi) {
    const __m128i tab = _mm_loadu_si128((const __m128i *)k_iq4nl);
    const __m128i q = _mm_loadu_si128((const __m128i *)qs), f = _mm_set1_epi8(0x0f);
    const __m128i a = _mm_shuffle_epi8(tab, _mm_and_si128(q, f));
    const __m128i b = _mm_shuffle_epi8(tab, _mm_and_si128(_mm_srli_epi16(q, 4), f));
    const __m512 d = _mm512_set1_ps(dl);
    *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(a)));
    *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)));
}

/* A chunk's 32 values as two registers (values 0-15, 16-31): the common
 * formats dequantized in the registers, each value by dq32's operation;
 * the rest through dq32 itself. */
TGT static inline __attribute__((always_inline)) void dq32_v(const rmat *W, const int fmt, int32_t r, int c,
                                                            __m512 *lo, __m512 *hi) {
    const uint8_t *row = W->w + (size_t)r * (size_t)W->row_bytes;
    switch (fmt) {
    case GPU_F_Q6_K: {
        const uint8_t *b = row + (size_t)(c / 8) * 210;
        const int cc = c % 8, h = cc / 4, k = cc % 4;
        const int8_t *scs = (const int8_t *)(b + 192);
        const float d = h16f(ld16(b + 208));
        const float ds0 = d * (float)scs[(128 * h + 32 * k) / 16], ds1 = d * (float)scs[(128 * h + 32 * k + 16) / 16];
        const __m256i ql = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * (k % 2)));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
        const __m256i q = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16(ql, 4 * (k / 2)), _mm256_set1_epi8(0x0f)),
            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(3)), 4));
        const __m512i c32 = _mm512_set1_epi32(32);
        *lo = _mm512_mul_ps(_mm512_set1_ps(ds0),
                            _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)), c32)));
        *hi = _mm512_mul_ps(_mm512_set1_ps(ds1),
                            _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1)), c32)));
        return;
    }
    case GPU_F_IQ4_NL: {
        const uint8_t *b = row + (size_t)c * 18;
        iq4_v(b + 2, h16f(ld16(b)), lo, hi);
        return;
    }
    case GPU_F_IQ4_XS: {
        const uint8_t *b = row + (size_t)(c / 8) * 136;
        const int s = c % 8;
        const uint16_t sh = ld16(b + 2);
        const int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0x0f) | ((sh >> (2 * s)) & 3) << 4;
        iq4_v(b + 8 + 16 * s, h16f(ld16(b)) * (float)(ls - 32), lo, hi);
        return;
    }
    case GPU_F_Q8_0: {
        const uint8_t *b = row + (size_t)c * 34;
        const __m512 d = _mm512_set1_ps(h16f(ld16(b)));
        *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)))), d);
        *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 18)))), d);
        return;
    }
    case GPU_F_Q4_0: {
        const uint8_t *b = row + (size_t)c * 18;
        const __m512 d = _mm512_set1_ps(h16f(ld16(b)));
        const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)));
        const __m512i f = _mm512_set1_epi32(0x0f), c8 = _mm512_set1_epi32(8);
        *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(q, f), c8)), d);
        *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), c8)), d);
        return;
    }
    case GPU_F_QA4:
    case GPU_F_QA8: {
        const uint8_t *srow = W->s + (size_t)r * (size_t)W->srow_bytes;
        const uint8_t *brow = W->b + (size_t)r * (size_t)W->srow_bytes;
        const int g = (32 * c) / W->group;
        const __m512 sc = _mm512_set1_ps(sval(srow, g, W->stype)), bi = _mm512_set1_ps(sval(brow, g, W->stype));
        __m512i q0, q1;
        if (fmt == GPU_F_QA8) {
            q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + 32 * (size_t)c)));
            q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + 32 * (size_t)c + 16)));
        } else { /* value 2i is byte i's low nibble, 2i + 1 its high one */
            const __m128i bytes = _mm_loadu_si128((const __m128i *)(row + 16 * (size_t)c));
            const __m512i sh = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
            const __m512i f = _mm512_set1_epi32(0x0f);
            const __m128i i0 = _mm_set_epi8(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
            const __m128i i1 = _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
            q0 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, i0)), sh), f);
            q1 = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, i1)), sh), f);
        }
        *lo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q0), sc, bi);
        *hi = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q1), sc, bi);
        return;
    }
    default: {
        float v[32];
        dq32(W, r, c, v);
        *lo = _mm512_loadu_ps(v);
        *hi = _mm512_loadu_ps(v + 16);
        return;
    }
    }
}

/* The groups' sums of sixteen chunks, t[i] = [chunk 2i's 8 groups | chunk
 * 2i + 1's], transposed to one register a group (chunk c in element c),
 * then summed in chunk_dot's order: 0 + group 0, + group 1, ... + group 7.
 * Three steps of two-source permutes (4, then 2, then 1 groups a register). */
TGT static inline __m512 groups16(const __m512 t[8]) {
    const __m512i s1[2] = {_mm512_set_epi32(27, 26, 25, 24, 19, 18, 17, 16, 11, 10, 9, 8, 3, 2, 1, 0),
                           _mm512_set_epi32(31, 30, 29, 28, 23, 22, 21, 20, 15, 14, 13, 12, 7, 6, 5, 4)};
    const __m512i s2[2] = {_mm512_set_epi32(29, 28, 25, 24, 21, 20, 17, 16, 13, 12, 9, 8, 5, 4, 1, 0),
                           _mm512_set_epi32(31, 30, 27, 26, 23, 22, 19, 18, 15, 14, 11, 10, 7, 6, 3, 2)};
    const __m512i s3[2] = {_mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0),
                           _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1)};
    __m512 u[4][2], v[2][2][2];
    for (int k = 0; k < 4; k++) /* chunks 4k .. 4k + 3, groups 4h .. 4h + 3 */
        for (int h = 0; h < 2; h++) u[k][h] = _mm512_permutex2var_ps(t[2 * k], s1[h], t[2 * k + 1]);
    for (int m = 0; m < 2; m++) /* chunks 8m .. 8m + 7, groups 4h + 2q, + 1 */
        for (int h = 0; h < 2; h++)
            for (int q = 0; q < 2; q++) v[m][h][q] = _mm512_permutex2var_ps(u[2 * m][h], s2[q], u[2 * m + 1][h]);
    __m512 a = _mm512_setzero_ps();
    for (int j = 0; j < 8; j++) {
        const int h = j / 4, q = (j / 2) % 2, r = j % 2;
        a = _mm512_add_ps(a, _mm512_permutex2var_ps(v[0][h][q], s3[r], v[1][h][q]));
    }
    return a;
}

/* Q4_K's and Q5_K's chunk scales d1 = d * sc and mins -(dmin * m) (dq32's),
 * for chunks c0 .. c0 + n - 1 of row r: a super-block's d and dmin read once. */
TGT static inline void k4_scales(const rmat *W, const int fmt, int32_t r, int c0, int n, float *d1, float *m1) {
    const uint8_t *row = W->w + (size_t)r * (size_t)W->row_bytes;
    for (int j = 0; j < n;) {
        const int c = c0 + j;
        const uint8_t *b = row + (size_t)(c / 8) * (fmt == GPU_F_Q5_K ? 176 : 144);
        const float d = h16f(ld16(b)), dmin = h16f(ld16(b + 2));
        for (int s = c % 8; s < 8 && j < n; s++, j++) {
            int sc, mn;
            k4_sm(b + 4, s, &sc, &mn);
            d1[j] = d * (float)sc;
            m1[j] = -(dmin * (float)mn);
        }
    }
}

/* Q4_K's or Q5_K's chunk c given its scale and negated min. */
TGT static inline __attribute__((always_inline)) void dq32_k45(const rmat *W, const int fmt, int32_t r, int c,
                                                              float d1, float nm1, __m512 *lo, __m512 *hi) {
    const bool q5 = fmt == GPU_F_Q5_K;
    const uint8_t *b = W->w + (size_t)r * (size_t)W->row_bytes + (size_t)(c / 8) * (q5 ? 176 : 144);
    const int s = c % 8;
    const __m512 vd = _mm512_set1_ps(d1), vm = _mm512_set1_ps(nm1);
    __m256i q = _mm256_loadu_si256((const __m256i *)(b + (q5 ? 48 : 16) + 32 * (s / 2)));
    q = _mm256_and_si256(_mm256_srli_epi16(q, 4 * (s % 2)), _mm256_set1_epi8(0x0f));
    if (q5) { /* bit s of each of the 32 high-bit bytes, as bit 4 */
        const __m256i h = _mm256_loadu_si256((const __m256i *)(b + 16));
        q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, s), _mm256_set1_epi8(1)), 4));
    }
    *lo = _mm512_fmadd_ps(vd, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q))), vm);
    *hi = _mm512_fmadd_ps(vd, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1))), vm);
}

/* A chunk's 32 values (lo: 0-15, hi: 16-31) in dot_fmt's order: values
 * 4g + k as [k = 0 | k = 1] (*z0) and [k = 2 | k = 3] (*z1), 8 groups g each. */
TGT static inline void by_k(__m512 lo, __m512 hi, __m512 *z0, __m512 *z1) {
    const __m512i ia = _mm512_set_epi32(29, 25, 21, 17, 13, 9, 5, 1, 28, 24, 20, 16, 12, 8, 4, 0);
    const __m512i ib = _mm512_set_epi32(31, 27, 23, 19, 15, 11, 7, 3, 30, 26, 22, 18, 14, 10, 6, 2);
    *z0 = _mm512_permutex2var_ps(lo, ia, hi);
    *z1 = _mm512_permutex2var_ps(lo, ib, hi);
}

/* dot_avx512 for one format: inlined with fmt a constant, so that each
 * format's loop is its own code, with no switch inside. */
TGT static inline __attribute__((always_inline)) float dot_fmt(const rmat *m, const int fmt, int32_t r,
                                                               const float *xp) {
    __m512 lanes[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    const int nc = m->cols / 32;
    for (int c0 = 0; c0 < nc; c0 += 16) {
        const int n = nc - c0 < 16 ? nc - c0 : 16;
        __m512 t2[8];
        float d1[16], m1[16]; /* Q4_K, Q5_K: each chunk's scale and min, dq32's d1 and -m1 */
        const bool k45 = fmt == GPU_F_Q4_K || fmt == GPU_F_Q5_K;
        if (k45) k4_scales(m, fmt, r, c0, n, d1, m1);
        for (int j = 0; j < 16; j += 2) {
            __m256 t[2];
            for (int o = 0; o < 2; o++) {
                if (j + o >= n) {
                    t[o] = _mm256_setzero_ps();
                    continue;
                }
                __m512 lo, hi;
                if (k45) dq32_k45(m, fmt, r, c0 + j + o, d1[j + o], m1[j + o], &lo, &hi);
                else dq32_v(m, fmt, r, c0 + j + o, &lo, &hi);
                __m512 z0, z1;
                by_k(lo, hi, &z0, &z1);
                const float *x = xp + 32 * (size_t)(c0 + j + o); /* x's chunk in the same order */
                __m256 s = _mm256_mul_ps(_mm512_extractf32x8_ps(z0, 1), _mm256_loadu_ps(x + 8));
                s = _mm256_fmadd_ps(_mm512_castps512_ps256(z0), _mm256_loadu_ps(x), s);
                s = _mm256_fmadd_ps(_mm512_castps512_ps256(z1), _mm256_loadu_ps(x + 16), s);
                t[o] = _mm256_fmadd_ps(_mm512_extractf32x8_ps(z1, 1), _mm256_loadu_ps(x + 24), s);
            }
            t2[j / 2] = _mm512_insertf32x8(_mm512_castps256_ps512(t[0]), t[1], 1);
        }
        /* lane l takes chunks l, l + 32, ...: these 16 go to lanes c0 % 32 .. + 15 */
        __m512 *L = &lanes[(c0 / 16) % 2];
        *L = _mm512_mask_add_ps(*L, (__mmask16)((1u << n) - 1), *L, groups16(t2));
    }
    return fold16(_mm512_add_ps(lanes[0], lanes[1]));
}

TGT static float dot_avx512(const rmat *m, int32_t r, const float *x) {
    switch (m->fmt) {
    case GPU_F_Q4_K: return dot_fmt(m, GPU_F_Q4_K, r, x);
    case GPU_F_Q5_K: return dot_fmt(m, GPU_F_Q5_K, r, x);
    case GPU_F_Q6_K: return dot_fmt(m, GPU_F_Q6_K, r, x);
    case GPU_F_IQ4_XS: return dot_fmt(m, GPU_F_IQ4_XS, r, x);
    case GPU_F_IQ4_NL: return dot_fmt(m, GPU_F_IQ4_NL, r, x);
    case GPU_F_Q8_0: return dot_fmt(m, GPU_F_Q8_0, r, x);
    case GPU_F_Q4_0: return dot_fmt(m, GPU_F_Q4_0, r, x);
    case GPU_F_QA4: return dot_fmt(m, GPU_F_QA4, r, x);
    case GPU_F_QA8: return dot_fmt(m, GPU_F_QA8, r, x);
    default: return dot_fmt(m, -1, r, x);
    }
}

/* x in dot_fmt's order: chunk c's values 4g + k at 32c + 8k + g. */
TGT static void permute_x(const float *x, int cols, float *xp) {
    for (int c = 0; c < cols / 32; c++) {
        __m512 z0, z1;
        by_k(_mm512_loadu_ps(x + 32 * c), _mm512_loadu_ps(x + 32 * c + 16), &z0, &z1);
        _mm512_storeu_ps(xp + 32 * c, z0);
        _mm512_storeu_ps(xp + 32 * c + 16, z1);
    }
}

/* Rows [r0, r1) of W against x into y[r0 .. r1): W[r] . x, or with U
 * silu(W[r] . x) * (U[r] . x) (the SwiGLU as the gate-up kernels form it).
 * x is put in the AVX-512 form's order once for all the rows. */
static void rows(const rmat *W, const rmat *U, const float *x, int32_t r0, int32_t r1, float *y) {
    /* the CPU kernels' AVX-512 check (quant/dispatch.c: F16C by cpuid, which clang's
     * __builtin_cpu_supports does not know): BW and VL beside what TGT asks, on every such CPU */
    const bool fast = !g_scalar && e0_kernels_supported(E0_KERNELS_AVX512);
    float stack[4096], *xp = !fast ? NULL : W->cols <= 4096 ? stack : malloc((size_t)W->cols * sizeof *xp);
    if (xp) permute_x(x, W->cols, xp); /* else the scalar form, which needs no memory */
    for (int32_t r = r0; r < r1; r++) {
        const float w = xp ? dot_avx512(W, r, xp) : dot_scalar(W, r, x);
        y[r] = !U ? w : replica_silu(w) * (xp ? dot_avx512(U, r, xp) : dot_scalar(U, r, x));
    }
    if (xp != stack) free(xp);
}

void replica_mv(const rmat *W, const float *x, int32_t r0, int32_t r1, float *y) { rows(W, NULL, x, r0, r1, y); }

void replica_glu(const rmat *G, const rmat *U, const float *x, int32_t r0, int32_t r1, float *h) {
    rows(G, U, x, r0, r1, h);
}
