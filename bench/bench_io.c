/* Expert I/O microbenchmark: how fast do bundles of a real-shape checkpoint
 * reach the kernels through pread (into cache buffers) versus the mapping
 * itself, cold (pages dropped with posix_fadvise(DONTNEED)) and warm?
 *
 *   build/bench/bench_io MODEL [N_BUNDLES] [THREADS] [pread|mmap|willneed]
 *
 * With a mode, only that mode runs (cold, then warm) in this process.
 * Both modes read every byte of each bundle once (pread: copy then sum;
 * mmap: sum in place), for the same random (layer, expert) sequence. */
#include "edge0.h"
#include "model/model.h"
#include "stream/bundle.h"
#include "stream/iopool.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    const e0_model *m;
    const xb_plan *plans;
    int n, threads, id;
    int mmap_mode; /* 0 pread, 1 mmap, 2 mmap with madvise(WILLNEED) 8 bundles ahead */
    uint8_t *buf;
    uint64_t sum;
} work;

static uint64_t sum_bytes(const uint8_t *p, uint64_t n) {
    uint64_t s = 0;
    for (uint64_t i = 0; i < n; i += 64) s += p[i]; /* one read per cache line */
    return s;
}

static void *run(void *arg) {
    work *w = arg;
    char err[E0_ERR_MAX];
    for (int i = w->id; i < w->n; i += w->threads) {
        const xb_plan *p = &w->plans[i];
        if (w->mmap_mode == 2 && i + 8 * w->threads < w->n) xb_willneed(w->m->st, &w->plans[i + 8 * w->threads]);
        if (w->mmap_mode == 2 && i == w->id)
            for (int a = i; a < i + 8 * w->threads && a < w->n; a += w->threads) xb_willneed(w->m->st, &w->plans[a]);
        if (w->mmap_mode) {
            for (int r = 0; r < p->nr; r++) {
                uint32_t f = p->r[r].file;
                /* address of the range inside the mapping */
                const uint8_t *base = NULL;
                for (size_t k = 0; k < st_count(w->m->st) && !base; k++) {
                    const st_tensor *t = st_at(w->m->st, k);
                    if (t->file == f) base = t->data - t->off;
                }
                w->sum += sum_bytes(base + p->r[r].off, p->r[r].len);
            }
        } else {
            if (xb_read(w->m->st, p, w->buf, err) != 0) {
                fprintf(stderr, "%s\n", err);
                exit(1);
            }
            w->sum += sum_bytes(w->buf, p->bytes);
        }
    }
    return NULL;
}

static void drop(const e0_model *m) {
    for (uint32_t f = 0;; f++) {
        int fd = st_file_fd(m->st, f);
        if (fd < 0) break;
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    }
}

static double pass(const e0_model *m, const xb_plan *plans, int n, int threads, int mmap_mode) {
    pthread_t th[64];
    work w[64];
    double t0 = now_s();
    for (int i = 0; i < threads; i++) {
        w[i] = (work){m, plans, n, threads, i, mmap_mode, aligned_alloc(64, plans[0].bytes + 4096), 0};
        pthread_create(&th[i], NULL, run, &w[i]);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        free(w[i].buf);
    }
    return now_s() - t0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [N_BUNDLES] [THREADS]\n", argv[0]);
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 512, threads = argc > 3 ? atoi(argv[3]) : 1;
    char err[E0_ERR_MAX];
    e0_model m;
    if (model_load(&m, argv[1], err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    xb_plan *plans = calloc((size_t)n, sizeof *plans);
    uint64_t r = 42, bytes = 0;
    int moe[1024], nm = 0;
    for (int l = 0; l < m.cfg.n_layers; l++)
        if (m.layers[l].moe) moe[nm++] = l;
    for (int i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int l = moe[(r >> 33) % (uint64_t)nm], e = (int)((r >> 17) % (uint64_t)m.cfg.n_experts);
        if (xb_plan_expert(&m, l, e, XB_ORDER_MATH, &plans[i], err) != 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        bytes += plans[i].bytes;
    }
    printf("%d random bundles of %.2f MiB (%.1f MiB), %d thread(s)\n", n, (double)plans[0].bytes / (1 << 20),
           (double)bytes / (1 << 20), threads);
    const char *names[3] = {"pread         ", "mmap          ", "mmap+willneed "};
    /* Each mode in its own process: pages the mmap modes touch stay mapped,
     * and posix_fadvise(DONTNEED) cannot drop mapped pages, so a later
     * "cold" pass in the same process would be warm. */
    const char *only = argc > 4 ? argv[4] : NULL;
    static const char *keys[3] = {"pread", "mmap", "willneed"};
    for (int mode = 0; mode < 3; mode++) {
        if (only && strcmp(only, keys[mode]) != 0) continue;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            drop(&m);
            double cold = pass(&m, plans, n, threads, mode);
            double warm = pass(&m, plans, n, threads, mode);
            printf("%s cold %7.1f MB/s (%.2f ms/bundle)  warm %7.1f MB/s (%.3f ms/bundle)\n", names[mode],
                   bytes / cold / 1e6, cold * 1e3 / n, bytes / warm / 1e6, warm * 1e3 / n);
            fflush(stdout);
            _exit(0);
        }
        waitpid(pid, NULL, 0);
    }
    drop(&m);
    free(plans);
    model_free(&m);
    return 0;
}
