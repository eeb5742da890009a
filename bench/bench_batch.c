/* Batched decode (e0_session_eval_batch): aggregate decode speed of N
 * sequences stepped together, and the bytes one step touches, against the
 * bandwidth model of issue 16.
 *
 *   build/bench/bench_batch MODEL [--batch 1,2,4,8] [--prompt P] [--decode D]
 *                           [--threads T] [--io mmap|pread|load] [--slots S]
 *
 * For each N: N sessions, each prefilled alone with its own random prompt
 * of P ids (P, P+1, ...), two untimed batched steps, then D timed batched
 * steps, every sequence continuing greedily from its own logits. Per step:
 *   dense   the bytes of every matrix but the routed experts (attention and
 *           DeltaNet projections, routers, shared experts, lm_head): read
 *           once per step whatever N;
 *   experts the routed experts' bytes the kernels read (e0_stats
 *           bytes_touched): the union of the N sequences' experts;
 * and the bandwidth model's speed: N=1's time per byte applied to the
 * bytes of the step, N tokens per step. KV-cache and state reads (a few MB
 * at these lengths) are left out of both. Wall time of a shared machine:
 * read the ratios, not the absolute numbers; tok/cpu-s (tokens per second
 * of the process's CPU time, pool spinning included) moves less with other
 * programs' load, most of all at --threads 1. */
#include "edge0.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes of every matrix a decode step reads once, whatever the batch:
 * all but the routed experts and the embedding (one row per token). */
static uint64_t dense_bytes(const e0_model *m) {
    uint64_t b = mat_bytes(&m->lm_head);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const e0_layer *ly = &m->layers[l];
        const e0_mat *mats[] = {&ly->q,      &ly->k,        &ly->v,        &ly->o,
                                &ly->out,    &ly->router,   &ly->sh_gate,  &ly->sh_up,
                                &ly->sh_down, &ly->sh_router, &ly->mlp_gate, &ly->mlp_up,
                                &ly->mlp_down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++)
            if (mats[i]->w) b += mat_bytes(mats[i]);
        /* the linear attention's input projections: packed, or flat views (as e0_engine_plan) */
        b += ly->qkvz.rows ? mat_bytes(&ly->qkvz) : ly->qkv.w ? mat_bytes(&ly->qkv) + mat_bytes(&ly->z) : 0;
        b += ly->ba.rows ? mat_bytes(&ly->ba) : ly->b.w ? mat_bytes(&ly->b) + mat_bytes(&ly->a) : 0;
    }
    return b;
}

static uint32_t lcg(uint32_t *st) {
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

typedef struct {
    int n;
    double tok_s, step_ms, cpu_tok_s;
    double dense, experts, read; /* bytes per step */
    double distinct;             /* routed experts computed per MoE layer per step */
} result;

static int run(e0_engine *e, int n, int prompt, int decode, result *r) {
    char err[E0_ERR_MAX];
    e0_model_info info;
    e0_engine_info(e, &info);
    const size_t V = (size_t)info.vocab_size;
    e0_session **s = calloc((size_t)n, sizeof *s);
    int32_t *ids = malloc((size_t)(prompt + n) * sizeof *ids);
    float *lg = malloc((size_t)n * V * sizeof *lg);
    if (!s || !ids || !lg) return -1;
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = prompt + n + decode + 8;
    so.n_batch = 512;
    uint32_t st = 7;
    for (int i = 0; i < n; i++) {
        if (e0_session_new(e, &so, &s[i], err)) goto fail;
        for (int j = 0; j < prompt + i; j++)
            ids[j] = (int32_t)(lcg(&st) % (uint32_t)V);
        if (e0_session_eval(s[i], ids, (size_t)(prompt + i), E0_LOGITS_LAST, lg + (size_t)i * V,
                            err))
            goto fail;
    }
    int moe_layers = 0;
    for (int l = 0; l < e->model.cfg.n_layers; l++)
        moe_layers += e->model.layers[l].moe;
    double dt = 0, dc = 0; /* wall and CPU time in the batched steps, not the argmax */
    for (int step = 0; step < decode + 2; step++) {
        if (step == 2) e0_engine_stats_reset(e);
        for (int i = 0; i < n; i++) { /* greedy, each from its own logits */
            const float *l = lg + (size_t)i * V;
            int32_t best = 0;
            for (size_t v = 1; v < V; v++)
                if (l[v] > l[best]) best = (int32_t)v;
            ids[i] = best;
        }
        const double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        if (e0_session_eval_batch(s, ids, (size_t)n, lg, err)) goto fail;
        if (step >= 2) {
            dt += clock_s(CLOCK_MONOTONIC) - t0;
            dc += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        }
    }
    e0_stats sts;
    e0_engine_stats(e, &sts);
    r->n = n;
    r->tok_s = (double)n * decode / dt;
    r->step_ms = dt / decode * 1e3;
    r->cpu_tok_s = (double)n * decode / dc;
    r->dense = (double)dense_bytes(&e->model);
    r->experts = (double)sts.bytes_touched / decode;
    r->read = (double)sts.bytes_read / decode;
    r->distinct = moe_layers ? (double)sts.expert_calls / decode / moe_layers : 0;
    for (int i = 0; i < n; i++)
        e0_session_free(s[i]);
    free(s);
    free(ids);
    free(lg);
    return 0;
fail:
    fprintf(stderr, "bench_batch: %s\n", err);
    return -1;
}

int main(int argc, char **argv) {
    const char *model = NULL, *batches = "1,2,4,8";
    int prompt = 32, decode = 16;
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    o.n_threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--batch") && v)
            batches = argv[++i];
        else if (!strcmp(a, "--prompt") && v)
            prompt = atoi(argv[++i]);
        else if (!strcmp(a, "--decode") && v)
            decode = atoi(argv[++i]);
        else if (!strcmp(a, "--threads") && v)
            o.n_threads = atoi(argv[++i]);
        else if (!strcmp(a, "--slots") && v)
            o.layer.cache_slots = atoi(argv[++i]);
        else if (!strcmp(a, "--io") && v) {
            const char *m = argv[++i];
            o.io = !strcmp(m, "mmap") ? E0_IO_MMAP : !strcmp(m, "pread") ? E0_IO_PREAD
                   : !strcmp(m, "load")                                  ? E0_IO_LOAD
                                                                         : E0_IO_AUTO;
        } else if (a[0] != '-' && !model)
            model = a;
        else {
            fprintf(stderr, "usage: bench_batch MODEL [--batch 1,2,4,8] [--prompt P] [--decode D] "
                            "[--threads T] [--io mmap|pread|load] [--slots S]\n");
            return 2;
        }
    }
    if (!model || prompt < 1 || decode < 1) {
        fprintf(stderr, "bench_batch: MODEL, --prompt >= 1 and --decode >= 1 are needed\n");
        return 2;
    }
    char err[E0_ERR_MAX];
    e0_engine *e;
    if (e0_engine_open(&e, model, &o, err)) {
        fprintf(stderr, "bench_batch: %s\n", err);
        return 1;
    }
    printf("%s\n%d threads, prompt %d+i ids, %d timed steps\n", e0_engine_io_note(e), o.n_threads,
           prompt, decode);
    printf("%3s %9s %8s %10s %11s %9s %10s %10s %9s %8s %10s %8s\n", "N", "tok/s", "step ms",
           "dense MB", "experts MB", "exp/layer", "MB/token", "read MB", "model", "speedup",
           "tok/cpu-s", "speedup");
    result base = {0};
    char list[256];
    snprintf(list, sizeof list, "%s", batches);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        const int n = atoi(tok);
        if (n < 1) continue;
        result r;
        if (run(e, n, prompt, decode, &r)) return 1;
        if (!base.n) base = r;
        /* N=1's seconds per byte, this step's bytes, N tokens a step */
        const double spb = base.step_ms / (base.dense + base.experts);
        const double model_tok_s = n / (spb * (r.dense + r.experts)) * 1e3;
        printf("%3d %9.2f %8.1f %10.1f %11.1f %9.1f %10.1f %10.1f %9.2f %7.2fx %10.2f %7.2fx\n", n,
               r.tok_s, r.step_ms, r.dense / 1e6, r.experts / 1e6, r.distinct,
               (r.dense + r.experts) / n / 1e6, r.read / 1e6, model_tok_s, r.tok_s / base.tok_s,
               r.cpu_tok_s, r.cpu_tok_s / base.cpu_tok_s);
    }
    e0_engine_free(e);
    return 0;
}
