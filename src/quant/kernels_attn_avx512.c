/* AVX-512 attention of the query heads that share one KV head (GQA):
 * mat_attend_heads (quant/mat.h) for head sizes that are a multiple of 16.
 *
 * Decode spends its attention time on one query against every cached
 * position, once per head. The kernel takes the g heads of a KV group
 * together so that each key and value row is loaded once for all of them,
 * and it reduces 16 positions' dot products at once (hsum16) instead of
 * one horizontal sum per position.
 *
 * Arithmetic per head, the same whatever g, n or the thread split:
 *   s_j: one accumulator per position, a_j = fma(q_b, k_jb, a_j) over the
 *        head's 16-column blocks b in order; the 16 lanes summed by the
 *        tree of hsum16 (lanes i and i + 8, then i and i + 4, ...); times
 *        scale.
 *   p_j = e_j / sum, e_j = exp_ps(s_j - max), sum over lanes j % 16 then
 *        reduced; exp_ps is within 2 ulp of expf (its comment says how).
 *   o   = sum_j p_j v_j in order of j, one accumulator per 16 columns
 *        (two heads share each load of v_j, each with its own accumulators).
 * An f16 cache (`--kv-type f16`) is widened to f32 as it is loaded
 * (vcvtph2ps, exact); the arithmetic after the loads is the same.
 */
#include "quant/kernels.h"

#include <math.h>
#include <stdint.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define TGT    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define INL    static inline __attribute__((always_inline)) TGT
#define UNROLL _Pragma("GCC unroll 16")
/* Positions per block of the value pass. */
/* Positions per block of the value pass: their rows stay in L1 across the group. */
#define VB 64



/* Lane i of the result: the sum of the 16 lanes of a[i]. Four levels; at
 * each a vector holds 16 / P sources of P partial sums, and two vectors
 * become one with twice the sources and half the partials: lane L takes
 * partials k and k + P/2 of source L / (P/2), k = L % (P/2). */
INL __m512 hsum16(__m512 a[16]) {
    static const int32_t lo_idx[4][16] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
        {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27},
        {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29},
        {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}};
    int n = 16;
    UNROLL
    for (int lv = 0; lv < 4; lv++) {
        const __m512i lo = _mm512_loadu_si512(lo_idx[lv]);
        const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8 >> lv));
        UNROLL
        for (int i = 0; i < n / 2; i++)
            a[i] = _mm512_add_ps(_mm512_permutex2var_ps(a[2 * i], lo, a[2 * i + 1]),
                                 _mm512_permutex2var_ps(a[2 * i], hi, a[2 * i + 1]));
        n /= 2;
    }
    return a[0];
}

/* e^x for x <= 0 (softmax arguments), within 2 ulp of expf: x = n ln2 + r
 * with |r| <= ln2 / 2 (ln2 in two parts, so r is exact to f32 rounding),
 * e^r by its Taylor polynomial of degree 7 (truncation < 1e-9 relative),
 * times 2^n by vscalefps. Arguments below -104 give 0, as expf. */
INL __m512 exp_ps(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* 16 cached values from element i of c: floats, or f16 widened exactly. */
INL __m512 ld16(const void *c, size_t i, const bool f16) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)c + i)));
    return _mm512_loadu_ps((const float *)c + i);
}

/* Rows j0 .. j1 - 1 of a cache (hd values each, `stride` apart) towards L1:
 * the rows are 1 KiB or more apart, which the hardware prefetchers follow
 * too slowly for the one pass decode makes over them. */
INL void prefetch_rows(const void *c, size_t stride, int j0, int j1, int hd, const bool f16) {
    const size_t es = f16 ? 2 : 4;
    for (int j = j0; j < j1; j++)
        for (size_t i = 0; i < (size_t)hd * es; i += 64)
            _mm_prefetch((const char *)c + ((size_t)j * stride) * es + i, _MM_HINT_T0);
}

INL __mmask16 first(int m) {
    return m >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << m) - 1);
}

/* Scores of heads [0, g) for positions j0 .. j0 + m - 1 (m <= 16). */
INL void scores16(const float *q, size_t qstride, int g, const void *kc, size_t stride, int j0,
                  int m, int nb, float scale, float *scores, int n, const bool f16) {
    for (int h = 0; h < g; h++) {
        const float *qh = q + (size_t)h * qstride;
        __m512 acc[16];
        UNROLL
        for (int i = 0; i < 16; i++)
            acc[i] = _mm512_setzero_ps();
        if (m == 16 && nb % 8 == 0) { /* whole blocks: q's 8 vectors stay in registers */
            for (int b0 = 0; b0 < nb; b0 += 8) {
                __m512 qv[8];
                UNROLL
                for (int u = 0; u < 8; u++)
                    qv[u] = _mm512_loadu_ps(qh + 16 * (b0 + u));
                UNROLL
                for (int i = 0; i < 16; i++) {
                    const size_t k = (size_t)(j0 + i) * stride + 16 * (size_t)b0;
                    UNROLL
                    for (int u = 0; u < 8; u++)
                        acc[i] = _mm512_fmadd_ps(qv[u], ld16(kc, k + 16 * (size_t)u, f16), acc[i]);
                }
            }
        } else {
            for (int i = 0; i < m; i++) {
                const size_t k = (size_t)(j0 + i) * stride;
                for (int b = 0; b < nb; b++)
                    acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(qh + 16 * b),
                                             ld16(kc, k + 16 * (size_t)b, f16), acc[i]);
            }
        }
        const __m512 s = _mm512_mul_ps(hsum16(acc), _mm512_set1_ps(scale));
        _mm512_mask_storeu_ps(scores + (size_t)h * (size_t)n + j0, first(m), s);
    }
}

/* p = softmax(s) in place over n scores. */
INL void softmax(float *s, int n) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int j = 0; j < n; j += 16)
        mx = _mm512_mask_max_ps(mx, first(n - j), mx, _mm512_maskz_loadu_ps(first(n - j), s + j));
    const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        const __mmask16 k = first(n - j);
        const __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + j), m));
        sum = _mm512_mask_add_ps(sum, k, sum, e);
        _mm512_mask_storeu_ps(s + j, k, e);
    }
    const __m512 tot = _mm512_set1_ps(_mm512_reduce_add_ps(sum));
    for (int j = 0; j < n; j += 16) {
        const __mmask16 k = first(n - j);
        _mm512_mask_storeu_ps(s + j, k, _mm512_div_ps(_mm512_maskz_loadu_ps(k, s + j), tot));
    }
}

INL void attend_heads(const float *q, size_t qstride, int g, const void *kc, const void *vc,
                      size_t stride, int n, int hd, float scale, float *scores, float *o,
                      size_t ostride, const bool f16) {
    const int nb = hd / 16;
    prefetch_rows(kc, stride, 0, n < 16 ? n : 16, hd, f16);
    for (int j0 = 0; j0 < n; j0 += 16) {
        prefetch_rows(kc, stride, j0 + 16, n - j0 < 32 ? n : j0 + 32, hd, f16);
        scores16(q, qstride, g, kc, stride, j0, n - j0 < 16 ? n - j0 : 16, nb, scale, scores, n,
                 f16);
    }
    for (int h = 0; h < g; h++)
        softmax(scores + (size_t)h * (size_t)n, n);
    /* o: positions in blocks of VB, each block's value rows read by every
     * head of the group while they are in L1, two heads at a time (one load
     * of a value vector, two products); each head's accumulators go through
     * o between blocks, which leaves the order of j unchanged. */
    prefetch_rows(vc, stride, 0, n < VB ? n : VB, hd, f16);
    for (int j0 = 0; j0 < n; j0 += VB) {
        const int j1 = n - j0 < VB ? n : j0 + VB;
        prefetch_rows(vc, stride, j1, n - j1 < VB ? n : j1 + VB, hd, f16);
        for (int h = 0; h < g; h += 2) {
            const bool two = h + 1 < g;
            const float *p0 = scores + (size_t)h * (size_t)n, *p1 = p0 + (two ? n : 0);
            float *o0 = o + (size_t)h * ostride, *o1 = o0 + (two ? ostride : 0);
            for (int c = 0; c < nb; c += 8) {
                const int nv = nb - c < 8 ? nb - c : 8;
                __m512 a0[8], a1[8];
                for (int u = 0; u < nv; u++) {
                    a0[u] = j0 ? _mm512_loadu_ps(o0 + 16 * (c + u)) : _mm512_setzero_ps();
                    a1[u] = j0 ? _mm512_loadu_ps(o1 + 16 * (c + u)) : _mm512_setzero_ps();
                }
                if (nv == 8) {
                    for (int j = j0; j < j1; j++) {
                        const size_t v = (size_t)j * stride + 16 * (size_t)c;
                        const __m512 q0 = _mm512_set1_ps(p0[j]), q1 = _mm512_set1_ps(p1[j]);
                        UNROLL
                        for (int u = 0; u < 8; u++) {
                            const __m512 x = ld16(vc, v + 16 * (size_t)u, f16);
                            a0[u] = _mm512_fmadd_ps(q0, x, a0[u]);
                            a1[u] = _mm512_fmadd_ps(q1, x, a1[u]);
                        }
                    }
                } else {
                    for (int j = j0; j < j1; j++) {
                        const size_t v = (size_t)j * stride + 16 * (size_t)c;
                        const __m512 q0 = _mm512_set1_ps(p0[j]), q1 = _mm512_set1_ps(p1[j]);
                        for (int u = 0; u < nv; u++) {
                            const __m512 x = ld16(vc, v + 16 * (size_t)u, f16);
                            a0[u] = _mm512_fmadd_ps(q0, x, a0[u]);
                            a1[u] = _mm512_fmadd_ps(q1, x, a1[u]);
                        }
                    }
                }
                for (int u = 0; u < nv; u++) {
                    if (two) _mm512_storeu_ps(o1 + 16 * (c + u), a1[u]);
                    _mm512_storeu_ps(o0 + 16 * (c + u), a0[u]); /* a lone head: o1 is o0 */
                }
            }
        }
    }
}

/* One instance per cache type: the loads are the only difference. */
TGT static void attend_heads_f32(const float *q, size_t qstride, int g, const void *kc,
                                 const void *vc, size_t stride, int n, int hd, float scale,
                                 float *scores, float *o, size_t ostride) {
    attend_heads(q, qstride, g, kc, vc, stride, n, hd, scale, scores, o, ostride, false);
}

TGT static void attend_heads_f16(const float *q, size_t qstride, int g, const void *kc,
                                 const void *vc, size_t stride, int n, int hd, float scale,
                                 float *scores, float *o, size_t ostride) {
    attend_heads(q, qstride, g, kc, vc, stride, n, hd, scale, scores, o, ostride, true);
}

void k_avx512_attend_heads(const float *q, size_t qstride, int g, const void *kc, const void *vc,
                           bool f16, size_t stride, int n, int hd, float scale, float *scores,
                           float *o, size_t ostride) {
    (f16 ? attend_heads_f16 : attend_heads_f32)(q, qstride, g, kc, vc, stride, n, hd, scale,
                                                scores, o, ostride);
}

#else

void k_avx512_attend_heads(const float *q, size_t qstride, int g, const void *kc, const void *vc,
                           bool f16, size_t stride, int n, int hd, float scale, float *scores,
                           float *o, size_t ostride) {
    for (int h = 0; h < g; h++) {
        if (f16)
            mat_attend_ref_f16(q + (size_t)h * qstride, kc, vc, stride, n, hd, scale, scores,
                               o + (size_t)h * ostride);
        else
            mat_attend_ref(q + (size_t)h * qstride, kc, vc, stride, n, hd, scale, scores,
                           o + (size_t)h * ostride);
    }
}

#endif
