/* The GPU matmul kernels' speed against the card's memory bandwidth,
 * measured in the same run (a device-to-device copy, bytes read plus
 * written). For each weight format: one decode token (T = 1) and a batch
 * (T = 4, 16) over a matrix of the 35B shape's expert-stack size, each as
 * weight bytes per second and as a fraction of the copy bandwidth.
 *
 *   build/bench/bench_gpu [rows cols]
 */
#include "edge0.h"
#include "gpu/gpu.h"
#include "quant/ggml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float time_ms(gpu_dev *d, CUevent a, CUevent b) {
    float ms = 0;
    d->cu->EventSynchronize(b);
    d->cu->EventElapsedTime(&ms, a, b);
    return ms;
}

int main(int argc, char **argv) {
    char err[E0_ERR_MAX];
    const int64_t rows = argc > 2 ? atoll(argv[1]) : 65536, cols = argc > 2 ? atoll(argv[2]) : 2048;
    gpu_dev *d;
    if (gpu_open(&d, 0, err)) {
        fprintf(stderr, "bench_gpu: %s\n", err);
        return 1;
    }
    printf("GPU 0: %s (cc %d.%d, %d SMs, %.1f GiB); kernels loaded in %.2f s; host-to-device %.1f GB/s\n",
           d->name, d->cc_major, d->cc_minor, d->sms, (double)d->total / 1073741824.0, d->jit_s, d->h2d_gbs);
    CUevent a, b;
    d->cu->EventCreate(&a, CU_EVENT_DEFAULT);
    d->cu->EventCreate(&b, CU_EVENT_DEFAULT);
    /* the limit: a 1 GiB device-to-device copy */
    const size_t cb = (size_t)1 << 30;
    CUdeviceptr s0, s1;
    if (gpu_alloc(d, &s0, cb, "copy", err) || gpu_alloc(d, &s1, cb, "copy", err)) {
        fprintf(stderr, "bench_gpu: %s\n", err);
        return 1;
    }
    gpu_zero(d, s0, cb, err);
    d->cu->MemcpyDtoD(s1, s0, cb); /* warm up; synchronous copies, timed by the host clock */
    d->cu->CtxSynchronize();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 10; i++) d->cu->MemcpyDtoD(s1, s0, cb);
    d->cu->CtxSynchronize();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double copy_s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    const double bw = 2.0 * 10.0 * (double)cb / copy_s;
    printf("device copy: %.0f GB/s (read + write)\n", bw / 1e9);
    gpu_free(d, s0, cb);
    gpu_free(d, s1, cb);

    struct {
        const char *name;
        e0_wtype type;
        uint32_t gtype;
        int bits;
    } fm[] = {{"bf16", E0_W_BF16, 0, 0},         {"mlx4 g64", E0_W_QAFF, 0, 4},
              {"mlx8 g64", E0_W_QAFF, 0, 8},     {"Q8_0", E0_W_GGML, GGML_Q8_0, 0},
              {"Q4_0", E0_W_GGML, GGML_Q4_0, 0}, {"Q4_K", E0_W_GGML, GGML_Q4_K, 0},
              {"Q5_K", E0_W_GGML, GGML_Q5_K, 0}, {"Q6_K", E0_W_GGML, GGML_Q6_K, 0},
              {"IQ4_XS", E0_W_GGML, GGML_IQ4_XS, 0}};
    printf("%-10s %10s %5s %-6s %10s %10s %11s %10s\n", "format", "MiB", "T", "form", "us", "GB/s",
           "of copy", "TFLOP/s");
    for (size_t f = 0; f < sizeof fm / sizeof *fm; f++) {
        e0_mat m = {.type = fm[f].type, .rows = rows, .cols = cols, .bits = fm[f].bits, .group = 64,
                    .gtype = fm[f].gtype, .stype = E0_S_BF16, .layout = E0_L_ROWS};
        const size_t wb = mat_row_bytes(&m) * (size_t)rows;
        const size_t sb = fm[f].type == E0_W_QAFF ? mat_srow_bytes(&m) * (size_t)rows : 0;
        uint8_t *host = malloc(wb + 2 * sb);
        for (size_t i = 0; i < wb + 2 * sb; i++) host[i] = (uint8_t)(i * 2654435761u >> 13) & 0x3b;
        m.w = host;
        if (sb) m.scales = host + wb, m.biases = host + wb + sb;
        gpu_mat g;
        if (gpu_mat_upload(d, &m, &g, "bench", err)) {
            fprintf(stderr, "bench_gpu: %s\n", err);
            return 1;
        }
        const int Ts[] = {1, 4, 16, 16, 64, 512};
        for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
            const int T = Ts[ti];
            gpu_set_tile_min_t(ti < 3 ? 1 << 30 : 0); /* the vector form, then the tiled one */
            CUdeviceptr x, y;
            gpu_alloc(d, &x, (size_t)(T * cols) * 4, "x", err);
            gpu_alloc(d, &y, (size_t)(T * rows) * 4, "y", err);
            gpu_zero(d, x, (size_t)(T * cols) * 4, err);
            for (int i = 0; i < 3; i++) gpu_mm(d, &g, x, cols, y, rows, T, err);
            const int reps = 50;
            d->cu->EventRecord(a, d->st);
            for (int i = 0; i < reps; i++) gpu_mm(d, &g, x, cols, y, rows, T, err);
            d->cu->EventRecord(b, d->st);
            const double us = 1000.0 * time_ms(d, a, b) / reps;
            const double gbs = (double)(wb + 2 * sb) / (us * 1e-6);
            printf("%-10s %10.1f %5d %-6s %10.1f %10.0f %10.0f%% %10.1f\n", fm[f].name,
                   (double)(wb + 2 * sb) / 1048576.0, T, ti < 3 ? "vector" : "tiles", us, gbs / 1e9,
                   100.0 * gbs / bw, 2.0 * (double)rows * (double)cols * T / (us * 1e-6) / 1e12);
            gpu_free(d, x, (size_t)(T * cols) * 4);
            gpu_free(d, y, (size_t)(T * rows) * 4);
        }
        gpu_mat_free(d, &g, 1);
        free(host);
    }
    if (gpu_sync(d, err)) {
        fprintf(stderr, "bench_gpu: %s\n", err);
        return 1;
    }
    gpu_close(d);
    return 0;
}
