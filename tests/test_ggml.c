/* ggml block weight types (quant/ggml.h, E0_W_GGML matrices).
 *  - the scalar reference dequantizers equal gguf-py's numpy ones bit for
 *    bit on random blocks of every type (tests/data/ggml_ref.bin, written by
 *    tests/data/gen_ggml_ref.py from llama.cpp's gguf-py), and so do
 *    mat_dequant over any column range and the AVX-512 kernels' own block
 *    decoder;
 *  - the matrix accessors (row bytes, views, total bytes) follow the block
 *    layout;
 *  - every kernel set's mat_matmul on every type matches mat_matmul_ref on
 *    random shapes (rows not a multiple of a tile, rows only byte-aligned,
 *    T = 1, 2, 3, 5, 17, 64, rows wider than the prefill buffer) within an
 *    NMSE bound (f32 activations: summation order only; the
 *    integer-activation kernels: their activations' rounding as well, and
 *    under avx512-q8 that rounding must show: those kernels ran);
 *  - their activation quantizer (AVX-512) is bit-identical to the scalar
 *    k_prep_qk;
 *  - in every set, one (row, token) result does not depend on T, the other
 *    tokens, the rows of the view or the number of threads (bitwise), and
 *    mat_matmul_decode gives the small calls' arithmetic at any T; for
 *    the types with integer kernels (all but Q2_K, Q3_K) under the integer
 *    sets, whose calls of fewer than K_PANEL_MIN_T tokens take the row
 *    kernels (activations per 256 columns, or 32 for the 32-column types,
 *    float steps per block) and larger ones the 16-row panels
 *    (per 32 columns, float steps per sub-block: the panels' sums run down
 *    the rows, so they cannot share the row kernels' order), within each of
 *    those two classes of calls, as test_kernels states for the mlx q4
 *    kernels. */
#include "testutil.h"

#include "edge0.h"
#include "quant/ggml.h"
#include "quant/kernels.h"
#include "quant/mat.h"
#include "util/num.h"
#include "util/pool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x2545f4914f6cdd1dull;
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

/* The block types edge0 computes with. */
static const uint32_t TYPES[] = {GGML_Q4_0, GGML_Q4_1, GGML_Q5_0, GGML_Q5_1,  GGML_Q8_0,  GGML_Q2_K,
                                 GGML_Q3_K, GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_IQ4_NL, GGML_IQ4_XS};
#define NTYPES (sizeof TYPES / sizeof *TYPES)

/* ---- bit-exact dequantization against gguf-py ------------------------------ */

typedef struct {
    uint32_t type, nb, size, blck;
    const uint8_t *raw;
    const float *vals;
} ref_rec;

static uint8_t *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (run the tests from the repository root)", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*len);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, *len, f), *len);
    fclose(f);
    return p;
}

/* Splits the file into records (at most nmax); returns their count. */
static size_t parse_ref(const uint8_t *p, size_t len, ref_rec *rec, size_t nmax) {
    assert_true(len >= 8 && !memcmp(p, "E0GGREF1", 8));
    size_t off = 8, n = 0;
    while (off < len) {
        assert_true(n < nmax && off + 16 <= len);
        ref_rec r;
        r.type = e0_ld32(p + off, 0);
        r.nb = e0_ld32(p + off, 1);
        r.size = e0_ld32(p + off, 2);
        r.blck = e0_ld32(p + off, 3);
        off += 16;
        const size_t need = (size_t)r.nb * r.size + (size_t)r.nb * r.blck * 4;
        assert_true(off + need <= len);
        r.raw = p + off;
        r.vals = (const float *)(const void *)(p + off + (size_t)r.nb * r.size);
        off += need;
        rec[n++] = r;
    }
    return n;
}

static void test_dequant_matches_ggufpy(void **state) {
    (void)state;
    size_t len;
    uint8_t *file = read_file("tests/data/ggml_ref.bin", &len);
    ref_rec rec[32];
    const size_t nrec = parse_ref(file, len, rec, 32);
    const int simd = e0_kernels_supported(E0_KERNELS_AVX512);
    for (size_t k = 0; k < NTYPES; k++) {
        const ref_rec *r = NULL;
        for (size_t i = 0; i < nrec; i++)
            if (rec[i].type == TYPES[k]) r = &rec[i];
        const ggml_type_info *ti = ggml_info(TYPES[k]);
        if (!r) fail_msg("%s: no reference blocks in ggml_ref.bin", ti->name);
        assert_true(ti->supported);
        assert_int_equal(r->size, ti->size);
        assert_int_equal(r->blck, ti->blck);
        const size_t n = (size_t)r->nb * r->blck;
        float *ref = malloc(n * 4), *y = malloc(n * 4);
        memcpy(ref, r->vals, n * 4); /* the file's floats need not be aligned */
        /* copied to an odd address: rows in a mapping are only byte-aligned */
        uint8_t *raw = malloc((size_t)r->nb * r->size + 1);
        memcpy(raw + 1, r->raw, (size_t)r->nb * r->size);

        memset(y, 0xff, n * 4);
        assert_int_equal(ggml_dequant(r->type, raw + 1, y, r->nb), 0);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += memcmp(&y[i], &ref[i], 4) != 0;

        /* the same blocks as a matrix of 1..nb blocks per row, any column range */
        size_t bad_mat = 0;
        for (uint32_t bpr = 1; bpr <= r->nb; bpr *= 2) {
            const e0_mat m = {.type = E0_W_GGML,
                              .gtype = r->type,
                              .rows = r->nb / bpr,
                              .cols = (int64_t)bpr * r->blck,
                              .w = raw + 1};
            for (int it = 0; it < 20; it++) {
                const int64_t row = irand(0, m.rows - 1), c0 = irand(0, m.cols - 1);
                const int64_t cnt = irand(1, m.cols - c0);
                mat_dequant(&m, row, c0, cnt, y);
                bad_mat += memcmp(y, ref + row * m.cols + c0, (size_t)cnt * 4) != 0;
            }
        }

        size_t bad_simd = 0;
        if (simd) {
            memset(y, 0xff, n * 4);
            k_avx512_ggml_dequant(r->type, raw + 1, y, r->nb);
            for (size_t i = 0; i < n; i++)
                bad_simd += memcmp(&y[i], &ref[i], 4) != 0;
        }
        printf("  %-7s %2u blocks: %zu values differ from gguf-py, %zu mat_dequant ranges, %zu "
               "(avx512 decoder%s)\n",
               ti->name, r->nb, bad, bad_mat, bad_simd, simd ? "" : ": not run");
        assert_int_equal(bad, 0);
        assert_int_equal(bad_mat, 0);
        assert_int_equal(bad_simd, 0);
        free(ref);
        free(y);
        free(raw);
    }
    assert_int_equal(ggml_dequant(GGML_Q8_K, file, NULL, 0), E0_EUNSUPPORTED);
    free(file);
}

/* ---- matrices ---------------------------------------------------------------- */

/* f16 bits of f (normal range, round to nearest). */
static uint16_t to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    if (e <= 0) return (uint16_t)sign;
    uint32_t man = (u & 0x7fffffu) + 0x1000u;
    if (man & 0x800000u) man = 0, e++;
    return (uint16_t)(sign | ((uint32_t)e << 10) | (man >> 13));
}

/* Offsets of the f16 fields of a block (ggml.h's structs). */
static int halves(uint32_t type, size_t off[2]) {
    switch (type) {
    case GGML_Q4_1:
    case GGML_Q5_1:
    case GGML_Q4_K:
    case GGML_Q5_K:
        off[0] = 0, off[1] = 2;
        return 2;
    case GGML_Q2_K:
        off[0] = offsetof(ggml_block_q2_K, d), off[1] = offsetof(ggml_block_q2_K, dmin);
        return 2;
    case GGML_Q3_K:
        off[0] = offsetof(ggml_block_q3_K, d);
        return 1;
    case GGML_Q6_K:
        off[0] = offsetof(ggml_block_q6_K, d);
        return 1;
    default:
        off[0] = 0;
        return 1;
    }
}

/* A random matrix of `type`, its rows starting `skew` bytes into the
 * returned buffer (*buf: free it). Random bytes, with scale fields of
 * random sign and magnitude 0.002 .. 0.02. */
static e0_mat make_mat(uint32_t type, int64_t rows, int64_t cols, size_t skew, uint8_t **buf) {
    e0_mat m = {.type = E0_W_GGML, .gtype = type, .rows = rows, .cols = cols};
    const ggml_type_info *ti = ggml_info(type);
    const size_t bytes = (size_t)rows * mat_row_bytes(&m);
    *buf = malloc(bytes + skew);
    uint8_t *p = *buf + skew;
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)rnd();
    size_t off[2];
    const int nh = halves(type, off);
    for (size_t b = 0; b < bytes / (size_t)ti->size; b++)
        for (int h = 0; h < nh; h++) {
            const uint16_t v = to_f16((0.002f + 0.018f * fabsf(frand())) * (frand() < 0 ? -1 : 1));
            memcpy(p + b * (size_t)ti->size + off[h], &v, 2);
        }
    m.w = p;
    return m;
}

static void test_mat_layout(void **state) {
    (void)state;
    for (size_t k = 0; k < NTYPES; k++) {
        const ggml_type_info *ti = ggml_info(TYPES[k]);
        const e0_mat m = {.type = E0_W_GGML, .gtype = TYPES[k], .rows = 7, .cols = 3 * 256,
                          .w = (const void *)0x1000};
        const size_t rb = (size_t)(3 * 256 / ti->blck) * (size_t)ti->size;
        assert_int_equal(mat_row_bytes(&m), rb);
        assert_int_equal(mat_srow_bytes(&m), 0);
        assert_int_equal(mat_bytes(&m), 7 * rb);
        const e0_mat v = mat_rows(&m, 2, 3);
        assert_int_equal(v.rows, 3);
        assert_int_equal(v.gtype, TYPES[k]);
        assert_ptr_equal(v.w, (const uint8_t *)m.w + 2 * rb);
    }
}

/* ---- kernels against the reference --------------------------------------------- */

/* NMSE bounds. f32 activations differ from the reference only in summation
 * order (~1e-13 seen). The integer-activation kernels (every type but Q2_K
 * and Q3_K, under
 * avx512-q8, -q16 and -mixed: kernels_ggml_vnni.c) add the rounding of the
 * activations, quantized per 256 (row kernels) or 32 columns (panels) to
 * steps of amax / 127 / 256^(P-1): on uniform x in [-1, 1], an error
 * uniform within half a step against a signal of variance 1/3 gives NMSE ~
 * (1 / (254 * 256^(P-1)))^2 per value, 1.5e-5 (P = 1, q8) and 2.4e-10
 * (P = 2, q16), and about the same for a dot of independent terms (the
 * mins / offsets of the weights make it up to ~2x: 2.9e-5 and 5.1e-10 seen):
 * bounds a few times above that, as test_kernels' for the mlx int8
 * kernels. Mixed runs them with P = 3 (3.7e-15 per value, under the f32
 * kernels' own rounding): the f32 bound. */
#define NMSE_F32 1e-10
#define NMSE_Q8  1e-4
#define NMSE_Q16 1e-8

/* The ggml types with integer-activation kernels (all but Q2_K, Q3_K). */
static int int_type(uint32_t type) {
    return type != GGML_Q2_K && type != GGML_Q3_K;
}

/* The bound of set k on type. */
static double bound(e0_kernels k, uint32_t type) {
    if (!int_type(type)) return NMSE_F32;
    switch (k) {
    case E0_KERNELS_AVX512_Q8:
        return NMSE_Q8;
    case E0_KERNELS_AVX512_Q16:
        return NMSE_Q16;
    default: /* MIXED: 24 bits; Q24 (= exact) keeps the f32-activation kernels */
        return NMSE_F32;
    }
}

static const e0_kernels SETS[] = {E0_KERNELS_AVX2,       E0_KERNELS_AVX512,     E0_KERNELS_AVX512_Q8,
                                  E0_KERNELS_AVX512_Q16, E0_KERNELS_AVX512_Q24, E0_KERNELS_AVX512_MIXED};
static const char *const SET_NAMES[] = {"avx2",       "avx512",     "avx512-q8",
                                        "avx512-q16", "avx512-q24", "avx512-mixed"};
#define NSETS (sizeof SETS / sizeof *SETS)

/* mat_matmul under the set in force vs mat_matmul_ref: the NMSE; padding
 * columns of y stay untouched. */
static double one_case(const e0_mat *m, int64_t T) {
    const int64_t ldx = m->cols + irand(0, 5), ldy = m->rows + irand(0, 3);
    return tu_matmul_nmse(m, T, ldx, ldy, frand);
}

static void test_kernels_vs_ref(void **state) {
    (void)state;
    static const int64_t Ts[] = {1, 2, 3, 5, 17, 64};
    pool_init(2);
    int ran = 0;
    for (size_t s = 0; s < NSETS; s++) {
        if (e0_set_kernels(SETS[s])) {
            printf("  %s: not supported by this CPU\n", SET_NAMES[s]);
            continue;
        }
        for (size_t k = 0; k < NTYPES; k++) {
            const ggml_type_info *ti = ggml_info(TYPES[k]);
            double worst = 0;
            for (size_t it = 0; it < sizeof Ts / sizeof *Ts; it++) {
                const int64_t T = Ts[it];
                /* rows not a multiple of any tile; wide rows for T >= 4 take
                 * the path without the prefill buffer */
                const int64_t rows = irand(1, 41);
                int64_t cols = ti->blck * irand(1, ti->blck == 32 ? 40 : 5);
                if (it == 3) cols = (8192 / ti->blck + 1) * ti->blck;
                uint8_t *buf;
                const e0_mat m = make_mat(TYPES[k], rows, cols, (size_t)irand(0, 3), &buf);
                const double e = one_case(&m, T);
                if (e > worst) worst = e;
                if (!(e < bound(SETS[s], TYPES[k])))
                    fail_msg("%s %s rows %lld cols %lld T %lld: NMSE %.3g > %.0e", SET_NAMES[s],
                             ti->name, (long long)rows, (long long)cols, (long long)T, e,
                             bound(SETS[s], TYPES[k]));
                free(buf);
            }
            printf("  %-12s %-7s worst NMSE %.2e\n", SET_NAMES[s], ti->name, worst);
            /* 8-bit activations leave their mark: the integer kernels ran */
            if (SETS[s] == E0_KERNELS_AVX512_Q8 && int_type(TYPES[k]) && !(worst > NMSE_Q16))
                fail_msg("avx512-q8 %s: NMSE %.3g, the f32 kernels' (no integer kernel?)",
                         ti->name, worst);
            ran++;
        }
    }
    /* a set without an AVX-512 kernel for these types (REF) still runs */
    assert_int_equal(e0_set_kernels(E0_KERNELS_REF), 0);
    uint8_t *buf;
    const e0_mat m = make_mat(GGML_Q4_K, 9, 512, 1, &buf);
    assert_true(one_case(&m, 3) == 0.0);
    free(buf);
    printf("  %d set x type combinations\n", ran);
    e0_set_kernels(E0_KERNELS_AUTO);
    pool_init(0);
}

/* ---- the integer kernels' activations ------------------------------------------------ */

static void test_prep_qk(void **state) {
    (void)state;
    if (!e0_kernels_supported(E0_KERNELS_AVX512_Q16)) {
        printf("  avx512 vnni: not supported by this CPU\n");
        return;
    }
    enum { NB = 5, C = NB * GGML_QK_K };
    float x[C], d1[C / 32], d2[C / 32], s1[C / 16], s2[C / 16];
    int8_t q1[3 * C], q2[3 * C];
    for (int planes = 1; planes <= 3; planes++)
        for (int it = 0; it < 40; it++) {
            const int blk = it % 2 ? 32 : GGML_QK_K;
            const int v = it / 2; /* each variant with both block sizes */
            const float mag = v % 4 == 0 ? 1e-30f : v % 4 == 1 ? 1e4f : 1.0f;
            for (int i = 0; i < C; i++)
                x[i] = frand() * mag;
            if (v == 3) memset(x + GGML_QK_K, 0, GGML_QK_K * sizeof *x); /* all-zero blocks */
            if (v == 7) x[5] = 127.0f * 1e3f;                            /* one outlier */
            memset(q1, 0x55, sizeof q1);
            memset(q2, 0x55, sizeof q2);
            k_prep_qk(x, C, blk, planes, q1, d1, s1);
            k_avx512_prep_qk(x, C, blk, planes, q2, d2, s2);
            assert_memory_equal(q1, q2, (size_t)(planes * C));
            assert_memory_equal(d1, d2, (size_t)(C / blk) * sizeof *d1);
            assert_memory_equal(s1, s2, sizeof s1);
            /* the digits give back x within half a step */
            for (int i = 0; i < C; i++) {
                const int b = i / blk, c = i % blk;
                double n = 0;
                for (int p = 0; p < planes; p++)
                    n = n * 256 + q1[(b * planes + p) * blk + c];
                if (!(fabs(n * d1[b] - x[i]) <= 0.5001 * d1[b] + 2e-7 * fabs(x[i]) + 1e-30))
                    fail_msg("planes %d column %d: %g -> %g", planes, i, (double)x[i], n * d1[b]);
            }
        }
}

/* ---- determinism -------------------------------------------------------------------
 * T = 17 against batches of 1, 2, 3 and 5, row views and one thread. */

/* One type, set and width (determinism below). */
static void determinism_case(e0_kernels set, uint32_t type, int64_t cols) {
    const int64_t rows = 37, T = 17;
    uint8_t *buf;
    const e0_mat m = make_mat(type, rows, cols, 3, &buf);
    float *x = malloc((size_t)(T * cols) * sizeof *x);
    float *y = malloc((size_t)(T * rows) * sizeof *y);
    float *y2 = malloc((size_t)(T * rows) * sizeof *y2);
    for (int64_t i = 0; i < T * cols; i++)
        x[i] = frand();
    pool_init(2);
    mat_matmul(&m, x, cols, T, y, rows);
    /* the k-quants' integer kernels are row kernels below
     * K_PANEL_MIN_T tokens and panels above: two classes of calls,
     * each with one arithmetic; ys holds the small class */
    const int split = int_type(type) && (set == E0_KERNELS_AVX512_Q8 ||
                                         set == E0_KERNELS_AVX512_Q16 ||
                                         set == E0_KERNELS_AVX512_MIXED);
    float *ys = malloc((size_t)(T * rows) * sizeof *ys);
    for (int64_t t0 = 0; t0 < T; t0 += K_PANEL_MIN_T - 1) {
        const int64_t n = T - t0 < K_PANEL_MIN_T - 1 ? T - t0 : K_PANEL_MIN_T - 1;
        mat_matmul(&m, x + t0 * cols, cols, n, ys + t0 * rows, rows);
    }
    if (!split) assert_memory_equal(ys, y, (size_t)(T * rows) * sizeof *y);
    /* mat_matmul_decode: the small class's arithmetic at any T */
    mat_matmul_decode(&m, x, cols, T, y2, rows);
    assert_memory_equal(y2, ys, (size_t)(T * rows) * sizeof *y);
    /* each token alone, and in batches of 2, 3 and 5 */
    static const int64_t bs[] = {1, 2, 3, 5};
    for (size_t b = 0; b < 4; b++)
        for (int64_t t0 = 0; t0 < T; t0 += bs[b]) {
            const int64_t n = T - t0 < bs[b] ? T - t0 : bs[b];
            mat_matmul(&m, x + t0 * cols, cols, n, y2 + t0 * rows, rows);
            const float *want = (n < K_PANEL_MIN_T ? ys : y) + t0 * rows;
            assert_memory_equal(y2 + t0 * rows, want, (size_t)(n * rows) * sizeof *y);
        }
    free(ys);
    /* row views of odd sizes */
    for (int64_t r0 = 0; r0 < rows;) {
        int64_t n = irand(1, 7);
        if (n > rows - r0) n = rows - r0;
        const e0_mat v = mat_rows(&m, r0, n);
        mat_matmul(&v, x, cols, T, y2 + r0, rows);
        r0 += n;
    }
    assert_memory_equal(y2, y, (size_t)(T * rows) * sizeof *y);
    /* one thread */
    pool_init(1);
    mat_matmul(&m, x, cols, T, y2, rows);
    assert_memory_equal(y2, y, (size_t)(T * rows) * sizeof *y);
    free(x);
    free(y);
    free(y2);
    free(buf);
}

static void test_determinism(void **state) {
    (void)state;
    int ran = 0;
    for (size_t s = 0; s < NSETS; s++) {
        if (e0_set_kernels(SETS[s])) continue;
        for (size_t k = 0; k < NTYPES; k++) {
            /* 21 blocks of 32: Q8_0's row kernels and panels end on a lone
             * block; 3 and 5 blocks of 256: the k-quants' decode rows in
             * 4-row tiles and in single-row ones (QK_SEQ_NB) */
            if (ggml_info(TYPES[k])->blck == 32) {
                determinism_case(SETS[s], TYPES[k], 672);
            } else {
                determinism_case(SETS[s], TYPES[k], 768);
                determinism_case(SETS[s], TYPES[k], 1280);
            }
            ran++;
        }
    }
    printf("  %d set x type combinations bitwise stable\n", ran);
    pool_init(0);
    e0_set_kernels(E0_KERNELS_AUTO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dequant_matches_ggufpy),
        cmocka_unit_test(test_mat_layout),
        cmocka_unit_test(test_kernels_vs_ref),
        cmocka_unit_test(test_prep_qk),
        cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests_name("ggml", tests, NULL, NULL);
}
