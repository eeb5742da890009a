/* Decode attention alone: one query token against n cached positions in
 * every full-attention layer of a shape, one thread, the kernel set in
 * force ($E0_KERNELS), KV caches larger than the last-level cache like a
 * real model's. Prints the thread's CPU time per token (not wall time: the
 * machine is shared) and the KV bytes it read per second of it.
 *
 *   build/bench/bench_attend [N_POS] [HEAD_DIM] [KV_HEADS] [HEADS_PER_KV] [LAYERS]
 *   defaults: 576 128 4 8 48 (Qwen3-30B-A3B at the end of a 512 + 64 run) */
#include "quant/mat.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 576, hd = argc > 2 ? atoi(argv[2]) : 128,
              nkv = argc > 3 ? atoi(argv[3]) : 4, g = argc > 4 ? atoi(argv[4]) : 8,
              layers = argc > 5 ? atoi(argv[5]) : 48;
    if (n < 1 || hd < 1 || nkv < 1 || g < 1 || layers < 1) {
        fprintf(stderr, "usage: bench_attend [N_POS] [HEAD_DIM] [KV_HEADS] [HEADS_PER_KV] [LAYERS]\n");
        return 2;
    }
    const size_t stride = (size_t)nkv * (size_t)hd, cache = (size_t)n * stride;
    float **kc = malloc((size_t)layers * sizeof *kc), **vc = malloc((size_t)layers * sizeof *vc);
    float *q = malloc((size_t)g * 2 * (size_t)hd * sizeof *q),
          *o = malloc((size_t)g * (size_t)hd * sizeof *o),
          *sc = malloc((size_t)g * (size_t)n * sizeof *sc);
    if (!kc || !vc || !q || !o || !sc) return 1;
    unsigned r = 1;
    for (int l = 0; l < layers; l++) {
        kc[l] = malloc(cache * sizeof(float));
        vc[l] = malloc(cache * sizeof(float));
        if (!kc[l] || !vc[l]) return 1;
        for (size_t i = 0; i < cache; i++) {
            r = r * 1103515245u + 12345u;
            kc[l][i] = (float)((r >> 16) & 1023) / 1024.0f - 0.5f;
            vc[l][i] = (float)((r >> 6) & 1023) / 1024.0f;
        }
    }
    for (int i = 0; i < g * 2 * hd; i++)
        q[i] = (float)(i % 17) / 8.0f - 1.0f;
    printf("attention, %d positions, head %d, %d KV heads x %d query heads, %d layers, kernels %s\n", n,
           hd, nkv, g, layers, e0_kernels_name());
    for (int rep = 0; rep < 3; rep++) {
        const int it = 10;
        const double t0 = cpu_s();
        for (int k = 0; k < it; k++)
            for (int l = 0; l < layers; l++)
                for (int h = 0; h < nkv; h++)
                    mat_attend_heads(q, (size_t)2 * hd, g, kc[l] + (size_t)h * hd,
                                     vc[l] + (size_t)h * hd, false, stride, n, hd, 0.0883883f, sc,
                                     o, (size_t)hd);
        const double dt = (cpu_s() - t0) / it;
        printf("  %.2f ms of CPU per token, %.2f GB/s of K and V\n", dt * 1e3,
               (double)layers * (double)cache * 8.0 / dt / 1e9);
    }
    return 0;
}
