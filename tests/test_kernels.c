/* SIMD kernels against their scalar reference, the compute pool, and the
 * default kernels on every fixture.
 *  - every kernel set this CPU runs matches mat_matmul_ref on random shapes,
 *    weight types, bit widths, groups, scale dtypes and token counts, within
 *    an NMSE bound per kernel (f32 activations: summation order only);
 *  - one (row, token) result does not depend on T, on the other tokens, or
 *    on the number of threads (bitwise);
 *  - pool_for covers every item once, nested and concurrent calls included;
 *  - the default kernels (avx512-mixed with VNNI), and avx512-q16, route
 *    every fixture token exactly as the reference (router_logits.L) and
 *    keep logits within 5e-3;
 *  - the 16-row panel layout (E0_L_P16) gives the file layout's results;
 *  - the DeltaNet step and the int8 activation quantizer match their scalar
 *    references (NMSE; bitwise for the quantizer). */
#include "testutil.h"

#include "edge0.h"
#include "model/forward.h"
#include "model/model.h"
#include "quant/kernels.h"
#include "quant/mat.h"
#include "quant/quantize.h"
#include "util/num.h"
#include "util/pool.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
static float frand(void) {
    return (float)((rnd() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}
static int64_t irand(int64_t lo, int64_t hi) {
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

/* A random matrix and the buffers it points into. */
typedef struct {
    e0_mat m;
    void *w, *s, *b;
} tmat;

static void tmat_free(tmat *t) {
    free(t->w);
    free(t->s);
    free(t->b);
}

static uint16_t to_f16(float f) { /* round to nearest; only normal values occur here */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    if (e <= 0) return (uint16_t)sign;
    uint32_t man = (u & 0x7fffffu) + 0x1000u;
    if (man & 0x800000u) man = 0, e++;
    return (uint16_t)(sign | ((uint32_t)e << 10) | (man >> 13));
}

/* Scales / biases of quant_row (bf16) converted to the dtype st. */
static void *conv_s(const uint16_t *bf, size_t n, e0_stype st) {
    if (st == E0_S_BF16) {
        void *p = malloc(n * 2);
        memcpy(p, bf, n * 2);
        return p;
    }
    if (st == E0_S_F16) {
        uint16_t *p = malloc(n * 2);
        for (size_t i = 0; i < n; i++)
            p[i] = to_f16(e0_bf16_to_f32(bf[i]));
        return p;
    }
    float *p = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        p[i] = e0_bf16_to_f32(bf[i]);
    return p;
}

static tmat make_mat(e0_wtype type, int64_t rows, int64_t cols, int bits, int group, e0_stype st) {
    tmat t = {
        .m = {.type = type, .rows = rows, .cols = cols, .bits = bits, .group = group, .stype = st}};
    const size_t n = (size_t)(rows * cols);
    switch (type) {
    case E0_W_F32: {
        float *w = malloc(n * 4);
        for (size_t i = 0; i < n; i++)
            w[i] = frand();
        t.w = w;
        break;
    }
    case E0_W_BF16:
    case E0_W_F16: {
        uint16_t *w = malloc(n * 2);
        for (size_t i = 0; i < n; i++)
            w[i] = type == E0_W_BF16 ? e0_f32_to_bf16(frand()) : to_f16(frand());
        t.w = w;
        break;
    }
    case E0_W_QAFF: {
        const int64_t W = cols * bits / 32, G = cols / group;
        uint32_t *q = malloc((size_t)(rows * W) * 4);
        uint16_t *s = malloc((size_t)(rows * G) * 2), *b = malloc((size_t)(rows * G) * 2);
        float *row = malloc((size_t)cols * sizeof *row);
        for (int64_t r = 0; r < rows; r++) {
            /* rows of different amplitude and offset, as real weights have */
            const float amp = 0.01f + 0.1f * fabsf(frand()), off = 0.02f * frand();
            for (int64_t c = 0; c < cols; c++)
                row[c] = off + amp * frand();
            quant_row(row, cols, bits, group, q + r * W, s + r * G, b + r * G);
        }
        t.w = q;
        t.s = conv_s(s, (size_t)(rows * G), st);
        t.b = conv_s(b, (size_t)(rows * G), st);
        free(s);
        free(b);
        free(row);
        break;
    }
    case E0_W_GGML: /* tests/test_ggml.c covers the ggml block types */
        break;
    }
    t.m.w = t.w;
    t.m.scales = t.s;
    t.m.biases = t.b;
    return t;
}

static const char *set_name(e0_kernels k) {
    return k == E0_KERNELS_AVX512_MIXED ? "avx512-mixed"
           : k == E0_KERNELS_AVX512_Q24 ? "avx512-q24"
           : k == E0_KERNELS_AVX512_Q16 ? "avx512-q16"
           : k == E0_KERNELS_AVX512_Q8  ? "avx512-q8"
           : k == E0_KERNELS_AVX512     ? "avx512"
           : k == E0_KERNELS_AVX2       ? "avx2"
                                        : "ref";
}

static const char *kind_name(const e0_mat *m) {
    static char buf[32];
    switch (m->type) {
    case E0_W_F32:
        return "f32";
    case E0_W_BF16:
        return "bf16";
    case E0_W_F16:
        return "f16";
    case E0_W_QAFF:
        snprintf(buf, sizeof buf, "q%d", m->bits);
        return buf;
    case E0_W_GGML:
        return "ggml";
    }
    return "?";
}

/* One random case: mat_matmul under set k vs mat_matmul_ref; returns the
 * NMSE and checks that padding columns of y are untouched. */
static double one_case(e0_kernels k, const e0_mat *m, int64_t T) {
    assert_int_equal(e0_set_kernels(k), 0);
    const int64_t ldx = m->cols + irand(0, 5), ldy = m->rows + irand(0, 3);
    return tu_matmul_nmse(m, T, ldx, ldy, frand);
}

/* NMSE bounds. f32 activations differ from the reference only in the order
 * of f32 sums (and, quantized, in the factored scale / bias form); int8
 * activations (per 32 values) add their rounding, ~1e-5 on uniform data. */
#define NMSE_F32 1e-11
#define NMSE_Q8  1e-4
#define NMSE_Q16 1e-8
#define NMSE_Q24 1e-11

/* The bound of set k for matrix m. */
static double bound(e0_kernels k, const e0_mat *m) {
    const bool q4 = m->type == E0_W_QAFF && m->bits == 4;
    return q4 && k == E0_KERNELS_AVX512_Q8      ? NMSE_Q8
           : q4 && k == E0_KERNELS_AVX512_Q16   ? NMSE_Q16
           : q4 && k == E0_KERNELS_AVX512_MIXED ? NMSE_Q16
           : q4 && k == E0_KERNELS_AVX512_Q24   ? NMSE_Q24
                                                : NMSE_F32;
}

static void test_kernels_vs_ref(void **state) {
    (void)state;
    const e0_kernels sets[] = {E0_KERNELS_AVX2,       E0_KERNELS_AVX512,
                               E0_KERNELS_AVX512_Q8,  E0_KERNELS_AVX512_Q16,
                               E0_KERNELS_AVX512_Q24, E0_KERNELS_AVX512_MIXED};
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        const e0_kernels k = sets[si];
        if (!e0_kernels_supported(k)) {
            printf("  %s: not supported by this CPU, skipped\n", set_name(k));
            continue;
        }
        /* worst NMSE per weight kind: f32 bf16 f16 q4 q8 other-bits */
        double worst[6] = {0};
        int cases[6] = {0};
        for (int it = 0; it < 600; it++) {
            const int kind = (int)irand(0, 5);
            const int64_t rows = irand(1, 90), T = irand(0, 3) ? irand(1, 9) : irand(10, 21);
            const e0_stype st = (e0_stype)irand(0, 2);
            const int groups[] = {32, 64, 128}, obits[] = {2, 3, 5, 6};
            const int group = groups[irand(0, 2)];
            tmat t;
            if (kind < 3) {
                const e0_wtype wt = kind == 0 ? E0_W_F32 : kind == 1 ? E0_W_BF16 : E0_W_F16;
                t = make_mat(wt, rows, irand(1, 600), 0, 0, st);
            } else {
                const int bits = kind == 3 ? 4 : kind == 4 ? 8 : obits[irand(0, 3)];
                t = make_mat(E0_W_QAFF, rows, group * irand(1, 12), bits, group, st);
            }
            double e = one_case(k, &t.m, T);
            if (!(e <= bound(k, &t.m)))
                fail_msg("%s %s rows %lld cols %lld group %d stype %d T %lld: NMSE %.3g > %.0e",
                         set_name(k), kind_name(&t.m), (long long)rows, (long long)t.m.cols,
                         t.m.group, (int)st, (long long)T, e, bound(k, &t.m));
            if (e > worst[kind]) worst[kind] = e;
            cases[kind]++;
            tmat_free(&t);
        }
        const char *names[] = {"f32", "bf16", "f16", "q4", "q8", "q2/3/5/6 (reference)"};
        for (int i = 0; i < 6; i++)
            printf("  %s %-22s %3d cases, worst NMSE %.3g\n", set_name(k), names[i], cases[i],
                   worst[i]);
    }
    e0_set_kernels(E0_KERNELS_AUTO);
}

/* Every set on the model's shapes at group 64 / 32 / 128, bf16 scales. */
static void test_kernels_model_shapes(void **state) {
    (void)state;
    const e0_kernels sets[] = {E0_KERNELS_AVX2,       E0_KERNELS_AVX512,
                               E0_KERNELS_AVX512_Q8,  E0_KERNELS_AVX512_Q16,
                               E0_KERNELS_AVX512_Q24, E0_KERNELS_AVX512_MIXED};
    const struct {
        int64_t rows, cols;
        int bits, group;
    } shapes[] = {{512, 2048, 4, 64}, {2048, 512, 4, 64},  {256, 2048, 8, 64}, {8, 2048, 8, 64},
                  {300, 1024, 4, 32}, {200, 1024, 4, 128}, {96, 2048, 8, 128}};
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        if (!e0_kernels_supported(sets[si])) continue;
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            tmat t = make_mat(E0_W_QAFF, shapes[i].rows, shapes[i].cols, shapes[i].bits,
                              shapes[i].group, E0_S_BF16);
            const int64_t Ts[] = {1, 16};
            for (int j = 0; j < 2; j++) {
                double e = one_case(sets[si], &t.m, Ts[j]);
                printf("  %s q%d [%lld x %lld] g%d T=%lld: NMSE %.3g\n", set_name(sets[si]),
                       shapes[i].bits, (long long)shapes[i].rows, (long long)shapes[i].cols,
                       shapes[i].group, (long long)Ts[j], e);
                if (!(e <= bound(sets[si], &t.m)))
                    fail_msg("NMSE %.3g > %.0e", e, bound(sets[si], &t.m));
            }
            tmat_free(&t);
        }
    }
    e0_set_kernels(E0_KERNELS_AUTO);
}

/* Bit for bit, for every set: row t of a T-token call equals the same token
 * in any other call of the same class (fewer than K_PANEL_MIN_T tokens: the
 * row kernels, 1-token calls; at least: the panel kernels, another batch),
 * and 1 thread equals 2 threads. */
static void test_determinism(void **state) {
    (void)state;
    const e0_kernels sets[] = {E0_KERNELS_REF,         E0_KERNELS_AVX2,       E0_KERNELS_AVX512,
                               E0_KERNELS_AVX512_Q8,   E0_KERNELS_AVX512_Q16, E0_KERNELS_AVX512_Q24,
                               E0_KERNELS_AVX512_MIXED};
    tmat mats[4] = {make_mat(E0_W_QAFF, 384, 1024, 4, 64, E0_S_BF16),
                    make_mat(E0_W_QAFF, 160, 512, 8, 32, E0_S_F16),
                    make_mat(E0_W_BF16, 200, 520, 0, 0, E0_S_BF16),
                    make_mat(E0_W_QAFF, 130, 384, 4, 128, E0_S_F32)};
    const int64_t T = 11;
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        if (!e0_kernels_supported(sets[si])) continue;
        assert_int_equal(e0_set_kernels(sets[si]), 0);
        for (int mi = 0; mi < 4; mi++) {
            const e0_mat *m = &mats[mi].m;
            float *x = malloc((size_t)(T * m->cols) * sizeof *x);
            float *y = malloc((size_t)(T * m->rows) * sizeof *y),
                  *y1 = malloc((size_t)m->rows * sizeof *y1);
            float *y2 = malloc((size_t)(T * m->rows) * sizeof *y2);
            for (int64_t i = 0; i < T * m->cols; i++)
                x[i] = frand();
            pool_init(2);
            /* single tokens against a batch of K_PANEL_MIN_T - 1 */
            mat_matmul(m, x, m->cols, K_PANEL_MIN_T - 1, y, m->rows);
            for (int64_t t = 0; t < K_PANEL_MIN_T - 1; t++) {
                mat_matmul(m, x + t * m->cols, m->cols, 1, y1, m->rows);
                assert_memory_equal(y1, y + t * m->rows, (size_t)m->rows * sizeof *y1);
            }
            /* tokens 3..7 alone, as a different batch of the panel class */
            mat_matmul(m, x, m->cols, T, y, m->rows);
            mat_matmul(m, x + 3 * m->cols, m->cols, 5, y2, m->rows);
            assert_memory_equal(y2, y + 3 * m->rows, (size_t)(5 * m->rows) * sizeof *y2);
            pool_init(1);
            mat_matmul(m, x, m->cols, T, y2, m->rows);
            assert_memory_equal(y2, y, (size_t)(T * m->rows) * sizeof *y2);
            free(x);
            free(y);
            free(y1);
            free(y2);
        }
        printf("  %s: T-, batch- and thread-independent\n", set_name(sets[si]));
    }
    for (int mi = 0; mi < 4; mi++)
        tmat_free(&mats[mi]);
    pool_init(0);
    e0_set_kernels(E0_KERNELS_AUTO);
}

/* The 16-row panel layout (E0_L_P16, mat_repack_p16): it dequantizes to
 * the file layout's values, and the results of a matrix do not depend on
 * its layout (bitwise) where the arithmetic is the panel kernels' on both:
 * avx512-mixed at every T (the set the loader repacks for), the other
 * int8 sets from K_PANEL_MIN_T tokens, and the reference. Elsewhere (the
 * f32 sets compute a packed matrix with the reference; the int8 sets its
 * calls of fewer tokens with the panel arithmetic) each stays within its
 * set's NMSE bound. Parts not contiguous are refused. */
static void test_p16(void **state) {
    (void)state;
    const e0_kernels sets[] = {E0_KERNELS_REF,        E0_KERNELS_AVX2,       E0_KERNELS_AVX512,
                               E0_KERNELS_AVX512_Q8,  E0_KERNELS_AVX512_Q16, E0_KERNELS_AVX512_Q24,
                               E0_KERNELS_AVX512_MIXED};
    const int groups[] = {32, 64, 128};
    int checked = 0;
    for (int it = 0; it < 40; it++) {
        const int group = groups[irand(0, 2)];
        const int64_t rows = it == 0 ? 512 : 16 * irand(1, 6), cols = group * irand(1, 12);
        const e0_stype st = irand(0, 1) ? E0_S_BF16 : E0_S_F16;
        tmat t = make_mat(E0_W_QAFF, rows, cols, 4, group, st);
        /* the three parts back to back, in one of two orders, as in a checkpoint */
        const size_t wb = (size_t)rows * mat_row_bytes(&t.m), sb = (size_t)rows * mat_srow_bytes(&t.m);
        uint8_t *buf = malloc(wb + 2 * sb), *tmp = malloc(wb + 2 * sb);
        e0_mat f = t.m, p;
        const bool wfirst = it & 1;
        f.w = buf + (wfirst ? 0 : 2 * sb);
        f.scales = buf + (wfirst ? wb : sb);
        f.biases = buf + (wfirst ? wb + sb : 0);
        memcpy((void *)f.w, t.w, wb);
        memcpy((void *)f.scales, t.s, sb);
        memcpy((void *)f.biases, t.b, sb);
        p = t.m; /* separate allocations: refused */
        assert_int_equal(mat_repack_p16(&p, tmp), E0_EINVAL);
        assert_int_equal(p.layout, E0_L_ROWS);
        uint8_t *fbuf = malloc(wb + 2 * sb); /* the file layout, kept */
        memcpy(fbuf, buf, wb + 2 * sb);
        p = f;
        assert_int_equal(mat_repack_p16(&p, tmp), 0);
        assert_int_equal(p.layout, E0_L_P16);
        assert_null(p.scales);
        assert_int_equal(mat_bytes(&p), mat_bytes(&f));
        f.w = fbuf + ((const uint8_t *)f.w - buf);
        f.scales = fbuf + ((const uint8_t *)f.scales - buf);
        f.biases = fbuf + ((const uint8_t *)f.biases - buf);
        float *d0 = malloc((size_t)cols * sizeof *d0), *d1 = malloc((size_t)cols * sizeof *d1);
        for (int64_t r = 0; r < rows; r++) {
            mat_dequant(&f, r, 0, cols, d0);
            mat_dequant(&p, r, 0, cols, d1);
            assert_memory_equal(d0, d1, (size_t)cols * sizeof *d0);
        }
        /* a view of the last panels */
        const e0_mat pv = mat_rows(&p, rows - 16, 16), fv = mat_rows(&f, rows - 16, 16);
        mat_dequant(&fv, 15, 0, cols, d0);
        mat_dequant(&pv, 15, 0, cols, d1);
        assert_memory_equal(d0, d1, (size_t)cols * sizeof *d0);
        free(d0);
        free(d1);
        const int64_t T = it < 8 ? it % 4 + 1 : irand(1, 13);
        float *x = malloc((size_t)(T * cols) * sizeof *x);
        float *y0 = malloc((size_t)(T * rows) * sizeof *y0), *y1 = malloc((size_t)(T * rows) * sizeof *y1);
        for (int64_t i = 0; i < T * cols; i++)
            x[i] = frand();
        for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
            const e0_kernels k = sets[si];
            if (!e0_kernels_supported(k)) continue;
            assert_int_equal(e0_set_kernels(k), 0);
            const bool same = k == E0_KERNELS_REF || k == E0_KERNELS_AVX512_MIXED ||
                              (k != E0_KERNELS_AVX2 && k != E0_KERNELS_AVX512 && T >= K_PANEL_MIN_T);
            if (same) {
                mat_matmul(&f, x, cols, T, y0, rows);
                mat_matmul(&p, x, cols, T, y1, rows);
                if (memcmp(y0, y1, (size_t)(T * rows) * sizeof *y0))
                    fail_msg("%s [%lld x %lld] g%d stype %d T %lld: the layouts differ", set_name(k),
                             (long long)rows, (long long)cols, group, (int)st, (long long)T);
                checked++;
            } else {
                const double e = tu_matmul_nmse(&p, T, cols, rows, frand);
                if (!(e <= bound(k, &p)))
                    fail_msg("%s packed [%lld x %lld] T %lld: NMSE %.3g", set_name(k),
                             (long long)rows, (long long)cols, (long long)T, e);
            }
        }
        free(x);
        free(y0);
        free(y1);
        free(buf);
        free(tmp);
        free(fbuf);
        tmat_free(&t);
    }
    printf("  %d (matrix, set, T) cases bit-identical across the two layouts\n", checked);
    e0_set_kernels(E0_KERNELS_AUTO);
}

/* The vectorized int8 activation quantizer equals its scalar reference,
 * byte for byte, on random lengths (tails included), zero blocks and
 * values far apart in size. */
static void test_prep_q8(void **state) {
    (void)state;
    if (!e0_kernels_supported(E0_KERNELS_AVX512_Q8)) {
        skip();
        return;
    }
    for (int it = 0; it < 600; it++) {
        const int planes = 1 + it % 3;
        const int64_t cols = irand(1, 700), nblk = (cols + 127) / 128;
        float *x = malloc((size_t)cols * sizeof *x);
        const float amp = (float)pow(10.0, (double)irand(-6, 4));
        for (int64_t i = 0; i < cols; i++)
            x[i] = amp * frand();
        if (it % 5 == 0) /* a block of zeros */
            for (int64_t i = 0; i < cols && i < 40; i++)
                x[i] = 0.0f;
        if (it % 7 == 0) x[irand(0, cols - 1)] = 1e6f; /* one outlier */
        const size_t nq = (size_t)(nblk * 128 * planes);
        int8_t *q1 = malloc(nq), *q2 = malloc(nq);
        float *d1 = malloc((size_t)nblk * 16 * sizeof *d1),
              *d2 = malloc((size_t)nblk * 16 * sizeof *d2);
        float *s1 = malloc((size_t)nblk * 4 * sizeof *s1),
              *s2 = malloc((size_t)nblk * 4 * sizeof *s2);
        memset(q2, 0x55, nq);
        k_prep_q8(x, cols, planes, q1, d1, s1, nblk);
        k_avx512_prep_q8(x, cols, planes, q2, d2, s2, nblk);
        assert_memory_equal(q1, q2, nq);
        assert_memory_equal(d1, d2, (size_t)nblk * 16 * sizeof *d1);
        assert_memory_equal(s1, s2, (size_t)nblk * 4 * sizeof *s1);
        /* the codes dequantize to within half a step of the last plane (plus
         * the f32 rounding of x / d) */
        for (int64_t c = 0; c < cols; c++) {
            const int64_t b = c / 128, j = c % 128, at = b * 128 * planes + (j & 1) * 64 + j / 2;
            const float d = d1[b * 16 + j / 8];
            double code = 0;
            for (int p = 0; p < planes; p++)
                code = code * 256 + q1[at + 128 * p];
            const double v = d * code;
            if (!(fabs(v - x[c]) <= 0.5001 * d + 2e-7 * fabs(x[c]) + 1e-30))
                fail_msg("planes %d cols %lld col %lld: x %.9g dequantized %.9g (step %.3g) codes "
                         "%d %d %d",
                         planes, (long long)cols, (long long)c, x[c], v, d, q1[at],
                         planes > 1 ? q1[at + 128] : 0, planes > 2 ? q1[at + 256] : 0);
        }
        free(x);
        free(q1);
        free(q2);
        free(d1);
        free(d2);
        free(s1);
        free(s2);
    }
}

/* The vectorized per-group quantizer equals its scalar reference, byte for
 * byte, for every group size and plane count, with zero groups and
 * outliers; the digits dequantize to within half a step of the last plane. */
static void test_prep_qg(void **state) {
    (void)state;
    if (!e0_kernels_supported(E0_KERNELS_AVX512_Q8)) {
        skip();
        return;
    }
    for (int it = 0; it < 600; it++) {
        const int planes = 1 + it % 3, group = 32 << (it / 3 % 3);
        const int64_t ng = irand(1, 12), cols = ng * group;
        float *x = malloc((size_t)cols * sizeof *x);
        const float amp = (float)pow(10.0, (double)irand(-6, 4));
        for (int64_t i = 0; i < cols; i++)
            x[i] = amp * frand();
        if (it % 5 == 0)
            for (int64_t i = 0; i < cols && i < group; i++)
                x[i] = 0.0f;
        if (it % 7 == 0) x[irand(0, (int)cols - 1)] = 1e6f;
        const size_t nq = (size_t)(cols * planes);
        int8_t *q1 = malloc(nq), *q2 = malloc(nq);
        float *d1 = malloc((size_t)ng * sizeof *d1), *d2 = malloc((size_t)ng * sizeof *d2);
        float *s1 = malloc((size_t)ng * sizeof *s1), *s2 = malloc((size_t)ng * sizeof *s2);
        memset(q2, 0x55, nq);
        k_prep_qg(x, cols, group, planes, q1, d1, s1);
        k_avx512_prep_qg(x, cols, group, planes, q2, d2, s2);
        assert_memory_equal(q1, q2, nq);
        assert_memory_equal(d1, d2, (size_t)ng * sizeof *d1);
        assert_memory_equal(s1, s2, (size_t)ng * sizeof *s1);
        for (int64_t c = 0; c < cols; c++) {
            const int64_t g = c / group, j = c % group;
            const int64_t at = g * group * planes + (j & 1) * (group / 2) + j / 2;
            double code = 0;
            for (int p = 0; p < planes; p++)
                code = code * 256 + q1[at + group * p];
            const double v = d1[g] * code;
            if (!(fabs(v - x[c]) <= 0.5001 * d1[g] + 2e-7 * fabs(x[c]) + 1e-30))
                fail_msg("planes %d group %d col %lld: x %.9g dequantized %.9g", planes, group,
                         (long long)c, x[c], v);
        }
        free(x), free(q1), free(q2), free(d1), free(d2), free(s1), free(s2);
    }
}

/* mat_delta_step under every set against mat_delta_step_ref: several steps
 * on one state (so errors would compound), NMSE of the state and of o. */
static void test_delta_step(void **state) {
    (void)state;
    const e0_kernels sets[] = {E0_KERNELS_AVX2, E0_KERNELS_AVX512};
    const int shapes[][2] = {{128, 128}, {64, 32}, {16, 48}, {32, 24}, {8, 12}};
    for (size_t si = 0; si < 2; si++) {
        if (!e0_kernels_supported(sets[si])) continue;
        assert_int_equal(e0_set_kernels(sets[si]), 0);
        double worst = 0;
        for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++) {
            const int Dk = shapes[sh][0], Dv = shapes[sh][1];
            float *S1 = malloc((size_t)Dk * Dv * sizeof *S1),
                  *S2 = malloc((size_t)Dk * Dv * sizeof *S2);
            float *k = malloc((size_t)Dk * sizeof *k), *q = malloc((size_t)Dk * sizeof *q);
            float *v = malloc((size_t)Dv * sizeof *v), *o1 = malloc((size_t)Dv * sizeof *o1);
            float *o2 = malloc((size_t)Dv * sizeof *o2);
            for (int i = 0; i < Dk * Dv; i++)
                S1[i] = S2[i] = 0.1f * frand();
            double num = 0, den = 0;
            for (int step = 0; step < 8; step++) {
                for (int i = 0; i < Dk; i++)
                    k[i] = frand() / sqrtf((float)Dk), q[i] = frand() / sqrtf((float)Dk);
                for (int j = 0; j < Dv; j++)
                    v[j] = frand();
                const float beta = 0.5f + 0.5f * frand(), decay = 0.9f + 0.1f * fabsf(frand());
                mat_delta_step(S1, k, q, v, beta, decay, Dk, Dv, o1);
                mat_delta_step_ref(S2, k, q, v, beta, decay, Dk, Dv, o2);
                for (int j = 0; j < Dv; j++)
                    num += (o1[j] - o2[j]) * (o1[j] - o2[j]), den += o2[j] * o2[j];
            }
            for (int i = 0; i < Dk * Dv; i++)
                num += (S1[i] - S2[i]) * (S1[i] - S2[i]), den += S2[i] * S2[i];
            const double e = num / den;
            if (!(e <= NMSE_F32))
                fail_msg("%s delta step Dk %d Dv %d: NMSE %.3g", set_name(sets[si]), Dk, Dv, e);
            worst = e > worst ? e : worst;
            free(S1), free(S2), free(k), free(q), free(v), free(o1), free(o2);
        }
        printf("  %s delta step: worst NMSE %.3g\n", set_name(sets[si]), worst);
    }
    e0_set_kernels(E0_KERNELS_AUTO);
}

/* mat_attend under every set against mat_attend_ref: head sizes 16..256,
 * 1..300 positions with a stride wider than the head (GQA rows), scores
 * spread enough that the softmax is neither flat nor one-hot; and
 * mat_attend_heads, several query heads at once, against mat_attend, on an
 * f32 and on an f16 cache. */
static void test_attend(void **state) {
    (void)state;
    const e0_kernels sets[] = {E0_KERNELS_AVX2, E0_KERNELS_AVX512, E0_KERNELS_AVX512_Q24};
    const int hds[] = {16, 48, 64, 128, 256}, ns[] = {1, 2, 7, 64, 300};
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        if (!e0_kernels_supported(sets[si])) continue;
        assert_int_equal(e0_set_kernels(sets[si]), 0);
        double worst = 0;
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
            for (size_t b = 0; b < sizeof ns / sizeof *ns; b++) {
                const int hd = hds[a], n = ns[b];
                const size_t stride = (size_t)hd * 3;
                float *kc = malloc((size_t)n * stride * sizeof *kc),
                      *vc = malloc((size_t)n * stride * sizeof *vc);
                float *q = malloc((size_t)hd * sizeof *q), *sc = malloc((size_t)n * sizeof *sc);
                float *o1 = malloc((size_t)hd * sizeof *o1), *o2 = malloc((size_t)hd * sizeof *o2);
                for (size_t i = 0; i < (size_t)n * stride; i++)
                    kc[i] = frand(), vc[i] = frand();
                for (int i = 0; i < hd; i++)
                    q[i] = 2.0f * frand();
                const float scale = 1.0f / sqrtf((float)hd);
                mat_attend(q, kc, vc, stride, n, hd, scale, sc, o1);
                mat_attend_ref(q, kc, vc, stride, n, hd, scale, sc, o2);
                double num = 0, den = 0;
                for (int i = 0; i < hd; i++)
                    num += (o1[i] - o2[i]) * (o1[i] - o2[i]), den += o2[i] * o2[i];
                const double e = num / den;
                if (!(e <= NMSE_F32))
                    fail_msg("%s attend hd %d n %d: NMSE %.3g", set_name(sets[si]), hd, n, e);
                worst = e > worst ? e : worst;
                /* g heads of one KV head at a query stride of two heads
                 * (the gated layout): each head's output is bit for bit
                 * the one mat_attend gives it alone */
                enum { G = 5 };
                float *qg = malloc((size_t)G * 2 * hd * sizeof *qg),
                      *og = malloc((size_t)G * hd * sizeof *og),
                      *sg = malloc((size_t)G * n * sizeof *sg);
                for (int i = 0; i < G * 2 * hd; i++)
                    qg[i] = 2.0f * frand();
                mat_attend_heads(qg, (size_t)2 * hd, G, kc, vc, false, stride, n, hd, scale, sg,
                                 og, (size_t)hd);
                for (int h = 0; h < G; h++) {
                    mat_attend(qg + (size_t)h * 2 * hd, kc, vc, stride, n, hd, scale, sc, o1);
                    if (memcmp(o1, og + (size_t)h * hd, (size_t)hd * sizeof *o1))
                        fail_msg("%s attend hd %d n %d: head %d of %d differs from one head alone",
                                 set_name(sets[si]), hd, n, h, G);
                }
                /* an f16 cache (--kv-type f16): bit for bit the f32 kernel on
                 * the widened values, and within the f32 bound of the
                 * reference on the same cache */
                uint16_t *kh = malloc((size_t)n * stride * sizeof *kh),
                         *vh = malloc((size_t)n * stride * sizeof *vh);
                for (size_t i = 0; i < (size_t)n * stride; i++) {
                    kh[i] = e0_f32_to_f16(kc[i]), vh[i] = e0_f32_to_f16(vc[i]);
                    kc[i] = e0_f16_to_f32(kh[i]), vc[i] = e0_f16_to_f32(vh[i]);
                }
                mat_attend_heads(qg, (size_t)2 * hd, G, kh, vh, true, stride, n, hd, scale, sg, og,
                                 (size_t)hd);
                for (int h = 0; h < G; h++) {
                    const float *qh = qg + (size_t)h * 2 * hd, *oh = og + (size_t)h * hd;
                    mat_attend(qh, kc, vc, stride, n, hd, scale, sc, o1);
                    if (memcmp(o1, oh, (size_t)hd * sizeof *o1))
                        fail_msg("%s attend hd %d n %d: head %d on the f16 cache differs from the "
                                 "f32 kernel on its values",
                                 set_name(sets[si]), hd, n, h);
                    mat_attend_ref_f16(qh, kh, vh, stride, n, hd, scale, sc, o2);
                    double nf = 0, df = 0;
                    for (int i = 0; i < hd; i++)
                        nf += (oh[i] - o2[i]) * (oh[i] - o2[i]), df += o2[i] * o2[i];
                    if (!(nf / df <= NMSE_F32))
                        fail_msg("%s attend f16 hd %d n %d: NMSE %.3g", set_name(sets[si]), hd, n,
                                 nf / df);
                }
                free(kh), free(vh);
                free(qg), free(og), free(sg);
                free(kc), free(vc), free(q), free(sc), free(o1), free(o2);
            }
        printf("  %s attend: worst NMSE %.3g\n", set_name(sets[si]), worst);
    }
    e0_set_kernels(E0_KERNELS_AUTO);
}

/* ---- pool ------------------------------------------------------------------ */

typedef struct {
    atomic_int *hits;
    int64_t align;
    atomic_int bad;
    int nested;
} cover_ctx;

static void cover_fn(void *ctx, int64_t i0, int64_t i1, int tid) {
    cover_ctx *c = ctx;
    if (i0 % c->align != 0 || tid < 0 || tid >= pool_threads()) atomic_fetch_add(&c->bad, 1);
    for (int64_t i = i0; i < i1; i++)
        atomic_fetch_add(&c->hits[i], 1);
    if (c->nested) { /* runs serially in this thread: the pool is busy */
        cover_ctx inner = {.hits = c->hits, .align = 1};
        pool_for(i1 - i0, 1, cover_fn, &inner);
    }
}

static void check_cover(int64_t n, int64_t align) {
    atomic_int *hits = calloc((size_t)n + 1, sizeof *hits);
    cover_ctx c = {.hits = hits, .align = align};
    pool_for(n, align, cover_fn, &c);
    assert_int_equal(atomic_load(&c.bad), 0);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(atomic_load(&hits[i]), 1);
    free(hits);
}

static void *concurrent_caller(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++)
        check_cover(1000 + i, 16);
    return NULL;
}

static void test_pool(void **state) {
    (void)state;
    for (int nt = 1; nt <= 4; nt++) {
        assert_int_equal(pool_init(nt), 0);
        assert_int_equal(pool_threads(), nt);
        const int64_t ns[] = {1, 2, 15, 16, 17, 100, 1000, 4099};
        for (size_t i = 0; i < 8; i++) {
            check_cover(ns[i], 1);
            check_cover(ns[i], 16);
        }
    }
    /* nested: the inner call runs in the worker's thread, over its own range
     * (hits counted on the range's first items, so only coverage is checked) */
    {
        const int64_t n = 64;
        atomic_int *hits = calloc((size_t)n, sizeof *hits);
        cover_ctx c = {.hits = hits, .align = 16, .nested = 1};
        pool_for(n, 16, cover_fn, &c);
        int total = 0;
        for (int64_t i = 0; i < n; i++)
            total += atomic_load(&hits[i]);
        assert_int_equal(total, 2 * n);
        assert_int_equal(atomic_load(&c.bad), 0);
        free(hits);
    }
    /* two threads calling at once: one gets the workers, the other runs serially */
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, concurrent_caller, NULL), 0);
    concurrent_caller(NULL);
    pthread_join(th, NULL);
    pool_shutdown();
    assert_int_equal(pool_threads(), 1);
    check_cover(100, 16);
    pool_init(0);
    assert_int_equal(pool_threads(), pool_cores());
}

/* ---- fixtures with the default kernels ---------------------------------------- */

typedef struct {
    const char *family, *layout;
} fx;

static const fx FIXTURES[] = {
    {"qwen3moe", "hf"},         {"qwen3moe", "hf-fused"},  {"qwen3moe", "mlx"},
    {"qwen3next", "hf"},        {"qwen3next", "hf-fused"}, {"qwen3next", "mlx"},
    {"qwen35moe", "hf"},        {"qwen35moe", "hf-fused"}, {"qwen35moe", "mlx"},
    {"qwen35moe", "mlx-fused"},
};

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The k largest of logits[0..E) (lower index first on ties), sorted by id. */
static void topk_ids(const float *logits, int E, int k, int32_t *out) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++)
                taken |= out[i] == e;
            if (!taken && (best < 0 || logits[e] > logits[best])) best = e;
        }
        out[j] = best;
    }
    qsort(out, (size_t)k, sizeof *out, cmp_i32);
}

/* Runs the engine's layers one by one (as session.c's forward_batch does)
 * to read the routing each MoE layer chose on the engine's own hidden
 * states; compares it with the reference's router logits, then the
 * logits of a normal evaluation. */
typedef struct {
    const fx *f;
    e0_kernels k; /* AUTO: the default set */
} fx_case;

static void test_fixture_kernels(void **state) {
    const fx_case *fc = *state;
    const fx *f = fc->f;
    if (!e0_kernels_supported(fc->k)) {
        skip();
        return;
    }
    e0_set_kernels(fc->k);
    const bool mlx = strncmp(f->layout, "mlx", 3) == 0;
    char rel[256], err[E0_ERR_MAX] = "";
    snprintf(rel, sizeof rel, "fixtures/%s/%s", f->family, f->layout);
    e0_engine *e = NULL;
    if (e0_engine_open(&e, tu_shared(rel), NULL, err)) fail_msg("open %s: %s", rel, err);
    snprintf(rel, sizeof rel, "fixtures/%s/golden%s.safetensors", f->family, mlx ? "_q" : "");
    st_set *g = NULL;
    if (st_set_open_file(&g, tu_shared(rel), err)) fail_msg("%s", err);
    if (mlx) /* the short golden_q files used bf16-rounded RoPE frequencies (test_fixtures.c) */
        for (int k = 0; k < e->model.cfg.rotary_dim / 2; k++)
            e->model.rope_inv_freq[k] = e0_bf16_to_f32(e0_f32_to_bf16(e->model.rope_inv_freq[k]));
    size_t n;
    const int32_t *ids = tu_i32(g, "input_ids", &n);
    const e0_model *m = &e->model;
    const e0_config *c = &m->cfg;
    const int H = c->hidden, E = c->n_experts, k = e->top_k, T = (int)n;
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = T;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    e0_scratch *S = &s->s;
    int layers_checked = 0;
    for (int t = 0; t < T; t++)
        mat_dequant(&m->embed, ids[t], 0, H, S->x + (size_t)t * H);
    for (int li = 0; li < c->n_layers; li++) {
        const e0_layer *ly = &m->layers[li];
        rmsnorm(S->x, ly->in_norm, H, T, c->rms_eps, S->h);
        if (ly->linear)
            deltanet_forward(s, li, S->h, T, S->y);
        else
            attn_forward(s, li, S->h, T, S->y);
        for (size_t i = 0; i < (size_t)T * H; i++)
            S->x[i] += S->y[i];
        rmsnorm(S->x, ly->post_norm, H, T, c->rms_eps, S->h);
        if (!ly->moe) {
            mlp_forward(s, li, S->h, T, S->y);
        } else {
            if (moe_forward(s, li, S->h, T, S->y, err)) fail_msg("%s", err);
            char name[64];
            snprintf(name, sizeof name, "router_logits.%d", li);
            const float *rl = tu_f32(g, name, (size_t)T * E);
            for (int t = 0; t < T; t++) {
                int32_t want[64], got[64];
                topk_ids(rl + (size_t)t * E, E, k, want);
                memcpy(got, S->ridx + (size_t)t * k, (size_t)k * sizeof *got);
                qsort(got, (size_t)k, sizeof *got, cmp_i32);
                if (memcmp(want, got, (size_t)k * sizeof *got) != 0)
                    fail_msg("%s/%s layer %d token %d: routing differs from the reference",
                             f->family, f->layout, li, t);
            }
            layers_checked++;
        }
        for (size_t i = 0; i < (size_t)T * H; i++)
            S->x[i] += S->y[i];
    }
    s->pos += T;
    assert_true(layers_checked > 0);
    e0_session_reset(s);
    const size_t V = (size_t)c->vocab;
    float *lg = malloc(n * V * sizeof *lg);
    assert_non_null(lg);
    if (e0_session_eval(s, ids, n, E0_LOGITS_ALL, lg, err)) fail_msg("%s", err);
    const double r = tu_rel_l2(lg, tu_f32(g, "logits", n * V), n * V);
    printf("  %s/%s kernels %s: routing identical in %d layers, logits rel L2 %.3g\n", f->family,
           f->layout, e0_kernels_name(), layers_checked, r);
    if (!(r <= 5e-3)) fail_msg("logits rel L2 %.3g > 5e-3", r);
    free(lg);
    e0_session_free(s);
    st_set_free(g);
    e0_engine_free(e);
    e0_set_kernels(E0_KERNELS_AUTO);
}

int main(void) {
    enum { NF = sizeof FIXTURES / sizeof *FIXTURES };
    struct CMUnitTest tests[9 + 2 * NF];
    static char names[2 * NF][96];
    static fx_case cases[2 * NF];
    size_t k = 0;
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_pool);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_kernels_vs_ref);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_kernels_model_shapes);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_determinism);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_p16);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_prep_q8);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_prep_qg);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_delta_step);
    tests[k++] = (struct CMUnitTest)cmocka_unit_test(test_attend);
    /* the default set (a batch: its 16-bit half with VNNI), then avx512-q16:
     * the fastest set that keeps routing */
    for (size_t i = 0; i < 2 * NF; i++, k++) {
        const fx *f = &FIXTURES[i % NF];
        cases[i] = (fx_case){f, i < NF ? E0_KERNELS_AUTO : E0_KERNELS_AVX512_Q16};
        snprintf(names[i], sizeof names[i], "%s/%s %s kernels", f->family, f->layout,
                 i < NF ? "default" : "avx512-q16");
        tests[k] = (struct CMUnitTest){names[i], test_fixture_kernels, NULL, NULL, &cases[i]};
    }
    printf("kernels: %s, %d threads\n", e0_kernels_name(), pool_threads());
    return _cmocka_run_group_tests("kernels", tests, k, NULL, NULL);
}
