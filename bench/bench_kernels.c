/* Kernel throughput in GB/s of weights processed (not a test; not in
 * `make test`). Build and run:
 *     make bench && ./build/bench/bench_kernels [SECONDS]
 * Shapes (Qwen3.6-35B-A3B, mlx 4-bit group 64, bf16 scales):
 *  - expert matvec: gate/up [512 x 2048] and down [2048 x 512], cycling over
 *    ~1 GiB of distinct experts so every call reads DRAM ("cold"), and one
 *    expert called again and again (L2-resident, "hot": the compute bound);
 *  - lm_head [248320 x 2048] (286 MB);
 * each at T = 1 and T = 16, 1 and 2 threads, for every kernel set the CPU
 * runs (E0_BENCH_SETS=avx512,avx512-q16 picks some; lm_head of the
 * reference prints 0: it would take minutes).
 * Then ggml block types (GGUF, E0_W_GGML: Q4_K, Q5_K, Q6_K, Q5_0, Q8_0,
 * Q4_0, IQ4_XS, IQ4_NL)
 * in the same expert shapes, cold (~0.5 GiB of experts) and hot, under
 * avx512 (f32 activations: every set's kernels but ref and the integer
 * ones), avx512-q16 and avx512-mixed (every one of these types with 16- and
 * 24-bit integer activations).
 * E0_BENCH_GGML=only skips the mlx q4 table, =0 the ggml one.
 * E0_BENCH_GGML=ab: one thread, A/B rounds (E0_BENCH_ROUNDS, default 5)
 * of avx512 (f32 activations) then avx512-mixed on E0_BENCH_TYPES (a comma
 * list of Q8_0, Q5_K, Q4_K, Q6_K, IQ4_XS, IQ4_NL, Q4_0, Q4_1, Q5_0, Q5_1;
 * default "Q8_0,Q5_K"), T = 1 and 64 (E0_BENCH_TS: a comma list of up to 8
 * token counts of 1..64 instead), shapes up [512 x 2048] and down [2048 x 512]
 * cold (~256 MiB of experts) and hot, and [2048 x 4096] (cycling over ~256
 * MiB); one line per cell and round, then the medians and their ratio.
 * E0_BENCH_B=SET: B is that set (a --kernels name) instead. */
#include "quant/ggml.h"
#include "quant/mat.h"
#include "util/num.h"
#include "util/pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rs = 0x243f6a8885a308d3ull;
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

/* n matrices [rows x cols] q4 g64 laid out back to back. */
typedef struct {
    int64_t rows, cols, n;
    uint32_t *w;
    uint16_t *s, *b;
} qset;

static qset qset_new(int64_t rows, int64_t cols, int64_t n) {
    qset q = {rows, cols, n, NULL, NULL, NULL};
    const size_t words = (size_t)(n * rows * cols / 8), groups = (size_t)(n * rows * cols / 64);
    q.w = aligned_alloc(64, (words * 4 + 63) / 64 * 64);
    q.s = aligned_alloc(64, (groups * 2 + 63) / 64 * 64);
    q.b = aligned_alloc(64, (groups * 2 + 63) / 64 * 64);
    if (!q.w || !q.s || !q.b) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < words / 2; i++) ((uint64_t *)q.w)[i] = rnd();
    for (size_t i = 0; i < groups; i++) {
        q.s[i] = e0_f32_to_bf16(0.001f + (float)(rnd() % 1000) * 1e-5f);
        q.b[i] = e0_f32_to_bf16(-8.0f * e0_bf16_to_f32(q.s[i]));
    }
    return q;
}

static e0_mat qset_mat(const qset *q, int64_t i) {
    const size_t wr = (size_t)(q->rows * q->cols / 8), gr = (size_t)(q->rows * q->cols / 64);
    return (e0_mat){.type = E0_W_QAFF, .rows = q->rows, .cols = q->cols, .bits = 4, .group = 64,
                    .stype = E0_S_BF16, .w = q->w + (size_t)i * wr, .scales = q->s + (size_t)i * gr,
                    .biases = q->b + (size_t)i * gr};
}

/* GB/s of weights over calls cycling through q's matrices (or only the first). */
static double run(const qset *q, bool cycle, int64_t T, double secs, const float *x, float *y) {
    e0_mat m0 = qset_mat(q, 0);
    const double bytes = (double)mat_bytes(&m0);
    double t0 = now_s(), t;
    int64_t calls = 0;
    do {
        e0_mat m = qset_mat(q, cycle ? calls % q->n : 0);
        mat_matmul(&m, x, q->cols, T, y, q->rows);
        calls++;
        t = now_s() - t0;
    } while (t < secs);
    return bytes * (double)calls / t / 1e9;
}

/* n matrices [rows x cols] of ggml type `type`, back to back, random
 * codes with every f16 scale field 0.01 (no NaN / inf from random bits). */
typedef struct {
    uint32_t type;
    int64_t rows, cols, n;
    uint8_t *w;
    size_t bytes; /* of one matrix */
} gset;

static gset gset_new(uint32_t type, int64_t rows, int64_t cols, int64_t n) {
    const ggml_type_info *ti = ggml_info(type);
    gset g = {type, rows, cols, n, NULL, (size_t)rows * ggml_row_bytes(type, (uint64_t)cols)};
    const size_t total = g.bytes * (size_t)n;
    g.w = aligned_alloc(64, (total + 63) / 64 * 64);
    if (!g.w) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i + 8 <= total; i += 8) {
        const uint64_t r = rnd();
        memcpy(g.w + i, &r, 8);
    }
    /* the f16 fields: d (and dmin, Q4_1 / Q5_1 m) at the start of the block, Q6_K's d at its end */
    const uint16_t h = 0x211f; /* f16 0.01 */
    for (size_t b = 0; b < total / (size_t)ti->size; b++) {
        uint8_t *blk = g.w + b * (size_t)ti->size;
        if (type == GGML_Q6_K) {
            memcpy(blk + offsetof(ggml_block_q6_K, d), &h, 2);
        } else {
            memcpy(blk, &h, 2);
            if (type == GGML_Q4_K || type == GGML_Q5_K || type == GGML_Q4_1 || type == GGML_Q5_1)
                memcpy(blk + 2, &h, 2);
        }
    }
    return g;
}

/* E0_BENCH_ROWS=1: the ggml cells call mat_matmul_decode (the row kernels
 * at every T) instead of mat_matmul (panels from K_PANEL_MIN_T tokens). */
static bool g_rows;

static double run_g(const gset *g, bool cycle, int64_t T, double secs, const float *x, float *y) {
    double t0 = now_s(), t;
    int64_t calls = 0;
    do {
        const e0_mat m = {.type = E0_W_GGML, .gtype = g->type, .rows = g->rows, .cols = g->cols,
                          .w = g->w + (size_t)(cycle ? calls % g->n : 0) * g->bytes};
        if (g_rows)
            mat_matmul_decode(&m, x, g->cols, T, y, g->rows);
        else
            mat_matmul(&m, x, g->cols, T, y, g->rows);
        calls++;
        t = now_s() - t0;
    } while (t < secs);
    return (double)g->bytes * (double)calls / t / 1e9;
}

static void bench_ggml(double secs, const float *x, float *y, const char *only) {
    const uint32_t types[] = {GGML_Q4_K, GGML_Q5_K, GGML_Q6_K,   GGML_Q5_0,
                              GGML_Q8_0, GGML_Q4_0, GGML_IQ4_XS, GGML_IQ4_NL};
    /* f32 activations; the k-quants' integer kernels (16- and 24-bit) */
    const e0_kernels sets[] = {E0_KERNELS_AVX512, E0_KERNELS_AVX512_Q16, E0_KERNELS_AVX512_MIXED};
    const char *names[] = {"avx512", "avx512-q16", "avx512-mixed"};
    for (size_t si = 0; si < 3; si++) {
        if (!e0_kernels_supported(sets[si]) || (only && !strstr(only, names[si]))) continue;
        e0_set_kernels(sets[si]);
        printf("GB/s of ggml weights (%s kernels, %.1f s per cell)\n", names[si], secs);
        printf("%-7s %-3s %-3s %11s %11s %11s %11s\n", "type", "thr", "T", "up cold", "down cold",
               "up hot", "down hot");
        for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
            /* ~0.5 GiB of each shape */
            const int64_t n = (512ll << 20) / (int64_t)(512 * ggml_row_bytes(types[k], 2048));
            gset up = gset_new(types[k], 512, 2048, n), down = gset_new(types[k], 2048, 512, n);
            for (int nt = 1; nt <= 2; nt++) {
                pool_init(nt);
                const int64_t Ts[] = {1, 16};
                for (int ti = 0; ti < 2; ti++) {
                    const int64_t T = Ts[ti];
                    const double a = run_g(&up, true, T, secs, x, y),
                                 b = run_g(&down, true, T, secs, x, y);
                    const double c = run_g(&up, false, T, secs, x, y),
                                 d = run_g(&down, false, T, secs, x, y);
                    printf("%-7s %-3d %-3lld %11.2f %11.2f %11.2f %11.2f\n",
                           ggml_info(types[k])->name, nt, (long long)T, a, b, c, d);
                    fflush(stdout);
                }
            }
            free(up.w);
            free(down.w);
        }
    }
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Whether type name tn is in the comma-separated list tl (whole names:
 * "Q4_0" does not select IQ4_NL's neighbours); no list: Q8_0 and Q5_K. */
static bool type_listed(const char *tl, const char *tn, uint32_t type) {
    if (!tl) return type == GGML_Q8_0 || type == GGML_Q5_K;
    const size_t n = strlen(tn);
    for (const char *p = tl; (p = strstr(p, tn)); p += n)
        if ((p == tl || p[-1] == ',') && (p[n] == '\0' || p[n] == ',')) return true;
    return false;
}

/* E0_BENCH_GGML=ab (see the top comment). */
static void bench_ggml_ab(double secs, const float *x, float *y) {
    const char *tl = getenv("E0_BENCH_TYPES");
    const char *rl = getenv("E0_BENCH_ROUNDS");
    const int rounds = rl && atoi(rl) > 0 ? (atoi(rl) > 64 ? 64 : atoi(rl)) : 5;
    const uint32_t all[] = {GGML_Q8_0, GGML_Q5_K,  GGML_Q4_K,   GGML_Q6_K, GGML_IQ4_XS,
                            GGML_IQ4_NL, GGML_Q4_0, GGML_Q4_1, GGML_Q5_0, GGML_Q5_1};
    e0_kernels sets[2] = {E0_KERNELS_AVX512, E0_KERNELS_AVX512_MIXED};
    const char *bn = getenv("E0_BENCH_B"); /* B's set instead of avx512-mixed */
    if (bn && e0_kernels_parse(bn, &sets[1])) bn = NULL;
    if (!e0_kernels_supported(sets[1])) {
        printf("%s: not supported by this CPU\n", bn ? bn : "avx512-mixed");
        return;
    }
    struct {
        const char *name;
        int64_t rows, cols;
        bool cycle;
    } const shapes[] = {{"up cold", 512, 2048, true},    {"up hot", 512, 2048, false},
                        {"down cold", 2048, 512, true},  {"down hot", 2048, 512, false},
                        {"2048x4096", 2048, 4096, true}};
    enum { NS = sizeof shapes / sizeof *shapes };
    int64_t Ts[8] = {1, 64};
    int nts = 2;
    const char *tsl = getenv("E0_BENCH_TS"); /* e.g. "1,2,3" */
    if (tsl && *tsl) {
        nts = 0;
        for (const char *p = tsl; *p && nts < 8; p = strchr(p, ',') ? strchr(p, ',') + 1 : "") {
            const long t = atol(p);
            if (t >= 1 && t <= 64) Ts[nts++] = t;
        }
        if (!nts) Ts[nts++] = 1;
    }
    pool_init(1);
    printf("GB/s of ggml weights, 1 thread, %.2f s per cell, %d rounds: avx512 (A) / "
           "%s (B)\n",
           secs, rounds, bn ? bn : "avx512-mixed");
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) {
        const char *tn = ggml_info(all[k])->name;
        if (!type_listed(tl, tn, all[k])) continue;
        gset g[NS];
        for (int si = 0; si < NS; si++) {
            const int64_t n =
                shapes[si].cycle
                    ? (256ll << 20) / (int64_t)((size_t)shapes[si].rows *
                                                ggml_row_bytes(all[k], (uint64_t)shapes[si].cols))
                    : 1;
            g[si] = gset_new(all[k], shapes[si].rows, shapes[si].cols, n < 2 ? 2 : n);
        }
        double v[NS][8][2][64];
        for (int r = 0; r < rounds; r++)
            for (int si = 0; si < NS; si++)
                for (int ti = 0; ti < nts; ti++)
                    for (int a = 0; a < 2; a++) {
                        e0_set_kernels(sets[a]);
                        v[si][ti][a][r] = run_g(&g[si], shapes[si].cycle, Ts[ti], secs, x, y);
                        printf("round %d %-5s %-10s T=%-3lld %s %8.2f\n", r, tn, shapes[si].name,
                               (long long)Ts[ti], a ? "B" : "A", v[si][ti][a][r]);
                        fflush(stdout);
                    }
        printf("%-5s %-10s %-4s %10s %10s %7s\n", "type", "shape", "T", "A median", "B median",
               "B/A");
        for (int si = 0; si < NS; si++)
            for (int ti = 0; ti < nts; ti++) {
                const double ma = median(v[si][ti][0], rounds), mb = median(v[si][ti][1], rounds);
                printf("%-5s %-10s %-4lld %10.2f %10.2f %7.2f\n", tn, shapes[si].name,
                       (long long)Ts[ti], ma, mb, mb / ma);
            }
        for (int si = 0; si < NS; si++)
            free(g[si].w);
    }
    e0_set_kernels(E0_KERNELS_AUTO);
}

int main(int argc, char **argv) {
    const double secs = argc > 1 ? atof(argv[1]) : 1.0;
    const char *gg = getenv("E0_BENCH_GGML");
    g_rows = getenv("E0_BENCH_ROWS") && atoi(getenv("E0_BENCH_ROWS")) == 1;
    if (gg && !strcmp(gg, "ab")) {
        float *x = malloc((size_t)64 * 4096 * sizeof *x), *y = malloc((size_t)64 * 4096 * sizeof *y);
        for (int i = 0; i < 64 * 4096; i++) x[i] = (float)(rnd() % 2001) * 1e-3f - 1.0f;
        bench_ggml_ab(secs, x, y);
        free(x);
        free(y);
        return 0;
    }
    if (gg && !strcmp(gg, "only")) {
        float *x = malloc((size_t)16 * 2048 * sizeof *x), *y = malloc((size_t)16 * 2048 * sizeof *y);
        for (int i = 0; i < 16 * 2048; i++) x[i] = (float)(rnd() % 2001) * 1e-3f - 1.0f;
        bench_ggml(secs, x, y, getenv("E0_BENCH_SETS"));
        return 0;
    }
    const e0_kernels sets[] = {E0_KERNELS_REF,       E0_KERNELS_AVX2,       E0_KERNELS_AVX512,
                               E0_KERNELS_AVX512_Q8, E0_KERNELS_AVX512_Q16, E0_KERNELS_AVX512_Q24};
    const char *names[] = {"ref", "avx2", "avx512", "avx512-q8", "avx512-q16", "avx512-q24"};
    const char *only = getenv("E0_BENCH_SETS"); /* e.g. "avx512,avx512-q8" (substring match) */
    /* ~1.1 GiB of gate/up-shaped experts, ~1.1 GiB of down-shaped ones */
    qset up = qset_new(512, 2048, 1920), down = qset_new(2048, 512, 1920), head = qset_new(248320, 2048, 1);
    float *x = malloc((size_t)16 * 2048 * sizeof *x), *y = malloc((size_t)16 * 248320 * sizeof *y);
    for (int i = 0; i < 16 * 2048; i++) x[i] = (float)(rnd() % 2001) * 1e-3f - 1.0f;
    printf("GB/s of weights (4-bit g64, %.0f s per cell)\n", secs);
    printf("%-10s %-3s %-3s %11s %11s %11s %11s %11s\n", "kernels", "thr", "T", "up cold", "down cold", "up hot",
           "down hot", "lm_head");
    for (size_t si = 0; si < 6; si++) {
        if (!e0_kernels_supported(sets[si]) || (only && !strstr(only, names[si]))) continue;
        e0_set_kernels(sets[si]);
        for (int nt = 1; nt <= 2; nt++) {
            pool_init(nt);
            const int64_t Ts[] = {1, 16};
            for (int ti = 0; ti < 2; ti++) {
                const int64_t T = Ts[ti];
                const double s = sets[si] == E0_KERNELS_REF ? secs / 2 : secs;
                double a = run(&up, true, T, s, x, y), b = run(&down, true, T, s, x, y);
                double c = run(&up, false, T, s, x, y), d = run(&down, false, T, s, x, y);
                /* the reference needs seconds per lm_head call: not measured */
                double e = sets[si] == E0_KERNELS_REF ? 0.0 : run(&head, false, T, s, x, y);
                printf("%-10s %-3d %-3lld %11.2f %11.2f %11.2f %11.2f %11.2f\n", names[si], nt, (long long)T, a, b, c,
                       d, e);
                fflush(stdout);
            }
        }
    }
    if (!gg || strcmp(gg, "0")) bench_ggml(secs, x, y, only);
    return 0;
}
