/* The host's replica of the GPU's expert products (gpu/replica.h): GB/s of
 * weights it computes, one thread and all of them, against the host's
 * DRAM read bandwidth measured in the same run (not a test). The GPU's
 * host-miss path (gpu/hostmiss.c) is worth it only where this beats the
 * link's share of PCIe that a call's copies reach.
 *   make bench && ./build/bench/bench_replica [THREADS]
 * Shapes: the 35B shape's expert gate / up [512 x 2048], cycling over
 * ~512 MiB of distinct experts so every call reads DRAM; formats Q4_K,
 * Q6_K, Q5_K, Q8_0, IQ4_XS (the Q4_K_M and IQ4_XS mixes) and mlx 4-bit. */
#include "gpu/replica.h"
#include "quant/ggml.h"
#include "quant/mat.h"
#include "util/pool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { ROWS = 512, COLS = 2048 };

typedef struct {
    rmat *m;     /* the experts */
    int n;
    int at;      /* the expert of this pass */
    const float *x;
    float *y;
} job;

static void rows_job(void *ctx, int64_t i0, int64_t i1, int tid) {
    (void)tid;
    job *j = ctx;
    replica_mv(&j->m[j->at], j->x, (int32_t)i0, (int32_t)i1, j->y);
}

static void sum_job(void *ctx, int64_t i0, int64_t i1, int tid) {
    const uint64_t *p = ctx;
    uint64_t s = 0;
    for (int64_t i = i0; i < i1; i++) s += p[i];
    ((volatile uint64_t *)p)[i0] = s; /* keeps the reads */
    (void)tid;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 0;
    pool_init(threads);
    const size_t total = 512ull << 20;
    uint8_t *mem = malloc(total);
    float *x = malloc(COLS * sizeof *x), *y = malloc(ROWS * sizeof *y);
    if (!mem || !x || !y) return fprintf(stderr, "bench_replica: out of memory\n"), 1;
    for (size_t i = 0; i < total; i++) mem[i] = (uint8_t)(i * 2654435761u >> 13);
    for (int i = 0; i < COLS; i++) x[i] = (float)(i % 17) / 17.0f - 0.5f;
    /* DRAM: the block summed by every thread, twice (the second timed) */
    double dram = 0;
    for (int r = 0; r < 2; r++) {
        const double t0 = now_s();
        pool_for((int64_t)(total / 8), 4096, sum_job, mem);
        dram = (double)total / (now_s() - t0) / 1e9;
    }
    printf("host: %d threads; DRAM read %.1f GB/s (all threads, measured now)\n", pool_threads(), dram);
    static const struct {
        const char *name;
        uint32_t gtype;
        int bits;
    } F[] = {{"Q4_K", GGML_Q4_K, 0}, {"Q6_K", GGML_Q6_K, 0}, {"Q5_K", GGML_Q5_K, 0},
             {"Q8_0", GGML_Q8_0, 0}, {"IQ4_XS", GGML_IQ4_XS, 0}, {"mlx4 g64", 0, 4}};
    for (size_t fi = 0; fi < sizeof F / sizeof *F; fi++) {
        e0_mat m0 = {.rows = ROWS, .cols = COLS, .layout = E0_L_ROWS, .stype = E0_S_BF16};
        size_t wb, sb = 0;
        if (F[fi].bits) {
            m0.type = E0_W_QAFF, m0.bits = 4, m0.group = 64;
            wb = (size_t)ROWS * COLS / 2, sb = (size_t)ROWS * (COLS / 64) * 2;
        } else {
            m0.type = E0_W_GGML, m0.gtype = F[fi].gtype;
            wb = (size_t)ggml_row_bytes(F[fi].gtype, COLS) * ROWS;
        }
        const size_t eb = wb + 2 * sb;
        const int n = (int)(total / eb);
        rmat *ms = malloc((size_t)n * sizeof *ms);
        char err[256];
        for (int e = 0; e < n; e++) {
            e0_mat m = m0;
            m.w = mem + (size_t)e * eb;
            if (sb) m.scales = mem + (size_t)e * eb + wb, m.biases = mem + (size_t)e * eb + wb + sb;
            if (rmat_of(&m, &ms[e], err)) return fprintf(stderr, "bench_replica: %s\n", err), 1;
        }
        /* scales in range: the random bytes make any f16 finite enough for timing */
        job j = {.m = ms, .n = n, .x = x, .y = y};
        double rate[2];
        for (int all = 0; all < 2; all++) {
            const double t0 = now_s();
            int passes = 0;
            while (now_s() - t0 < 1.0) {
                j.at = passes++ % n;
                if (all) pool_for(ROWS, 16, rows_job, &j);
                else replica_mv(&ms[j.at], x, 0, ROWS, y);
            }
            rate[all] = (double)passes * (double)eb / (now_s() - t0) / 1e9;
        }
        printf("%-9s one thread %5.2f GB/s; %2d threads %6.2f GB/s = %3.0f%% of DRAM\n", F[fi].name, rate[0],
               pool_threads(), rate[1], 100 * rate[1] / dram);
        free(ms);
    }
    free(mem), free(x), free(y);
    return 0;
}
