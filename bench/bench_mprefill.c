/* Merged prefill passes (pass_begin, issue 16): the expert bytes read from
 * the checkpoint when N prompts of P ids are prefilled one after another
 * (one pass each, as the server did before) and in one merged pass.
 *
 *   build/bench/bench_mprefill MODEL [--seqs N] [--prompt P] [--threads T]
 *                              [--mem-budget SIZE] [--io pread|mmap|load]
 *                              [--paused]
 *
 * Each way runs on a fresh engine after the checkpoint's pages are dropped
 * from the page cache (so nothing is served from an earlier run), with
 * --mem-budget (default 256M) sizing the expert LRU small enough that
 * experts come from the disk. Reports bytes_read (expert bytes read from
 * the checkpoint), expert products computed, whole-layer loads and the
 * wall time; checks that both ways give every sequence the same logits
 * (memcmp). N * P must fit one pass (n_batch 512). --paused: the merged
 * pass pauses after every layer. */
#include "edge0.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t lcg(uint32_t *st) {
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

static int parse_size(const char *s, uint64_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    uint64_t mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1ull << 10;
    else if (*end == 'M' || *end == 'm') mul = 1ull << 20;
    else if (*end == 'G' || *end == 'g') mul = 1ull << 30;
    else if (*end) return -1;
    *out = (uint64_t)(v * (double)mul);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [--seqs N] [--prompt P] [--threads T] [--mem-budget SIZE] "
                        "[--io pread|mmap|load] [--paused]\n",
                argv[0]);
        return 2;
    }
    int N = 4, P = 128, threads = 2;
    bool paused = false;
    uint64_t budget = 256ull << 20;
    e0_io_mode io = E0_IO_PREAD;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--paused")) {
            paused = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "%s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--seqs")) N = atoi(v);
        else if (!strcmp(a, "--prompt")) P = atoi(v);
        else if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--mem-budget")) {
            if (parse_size(v, &budget)) {
                fprintf(stderr, "--mem-budget: '%s' is not a size (e.g. 256M)\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--io")) {
            io = !strcmp(v, "pread") ? E0_IO_PREAD : !strcmp(v, "mmap") ? E0_IO_MMAP
                                                 : !strcmp(v, "load") ? E0_IO_LOAD
                                                                      : E0_IO_AUTO;
            if (io == E0_IO_AUTO) {
                fprintf(stderr, "--io: '%s' is not pread, mmap or load\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    if (N < 1 || N > E0_PASS_MAX || P < 1 || N * P > 512 || threads < 1) {
        fprintf(stderr, "--seqs 1..%d, --prompt >= 1, seqs * prompt <= 512, --threads >= 1\n",
                E0_PASS_MAX);
        return 2;
    }
    char err[E0_ERR_MAX];
    float *lg[2] = {NULL, NULL};
    int32_t *ids = malloc((size_t)N * (size_t)P * sizeof *ids);
    if (!ids) return 1;
    for (int way = 0; way < 2; way++) {
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.n_threads = threads;
        o.io = io;
        if (io == E0_IO_PREAD) o.mem_budget = budget;
        e0_engine *e;
        if (e0_engine_open(&e, argv[1], &o, err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        e0_model_info info;
        e0_engine_info(e, &info);
        const size_t V = (size_t)info.vocab_size;
        if (way == 0) {
            uint32_t st = 42;
            for (int i = 0; i < N * P; i++)
                ids[i] = (int32_t)(lcg(&st) % (uint32_t)info.vocab_size);
            printf("%s: %d layers; %d prompts of %d ids; io %s, mem budget %.0f MiB, %d threads\n",
                   argv[1], info.n_layers, N, P, e0_io_name(io), (double)budget / (1 << 20), threads);
        }
        lg[way] = malloc((size_t)N * V * sizeof(float));
        e0_session *ss[E0_PASS_MAX];
        for (int i = 0; i < N; i++)
            if (e0_session_new(e, NULL, &ss[i], err)) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
        e0_engine_drop_cache(e);
        e0_engine_stats_reset(e);
        const double t0 = now();
        int rc = 0;
        if (way == 0) {
            for (int i = 0; i < N && !rc; i++)
                rc = e0_session_eval(ss[i], ids + (size_t)i * P, (size_t)P, E0_LOGITS_LAST,
                                     lg[0] + (size_t)i * V, err);
        } else {
            e0_pass p;
            const int32_t *pi[E0_PASS_MAX];
            size_t n[E0_PASS_MAX];
            float *rows[E0_PASS_MAX];
            for (int i = 0; i < N; i++) {
                pi[i] = ids + (size_t)i * P;
                n[i] = (size_t)P;
                rows[i] = lg[1] + (size_t)i * V;
            }
            rc = pass_begin(&p, ss, pi, n, N, err);
            bool done = false;
            while (!rc && !done)
                rc = pass_step(&p, paused ? 1 : 0, rows, &done, err);
        }
        const double dt = now() - t0;
        if (rc) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        e0_stats st;
        e0_engine_stats(e, &st);
        printf("%-10s expert bytes read %8.1f MiB  expert products %6llu  whole-layer loads %3llu  "
               "%.2f s\n",
               way ? "merged" : "one by one", (double)st.bytes_read / (1 << 20),
               (unsigned long long)st.expert_calls, (unsigned long long)st.full_layers, dt);
        for (int i = 0; i < N; i++)
            e0_session_free(ss[i]);
        e0_engine_free(e);
        if (way == 1)
            printf("logits: %s\n",
                   memcmp(lg[0], lg[1], (size_t)N * V * sizeof(float)) ? "DIFFER" : "identical");
    }
    free(lg[0]);
    free(lg[1]);
    free(ids);
    return 0;
}
