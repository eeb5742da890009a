/* The host computes some of a decode step's misses (docs/design.md §9.3,
 * "Misses beside the link").
 *
 * Why: a miss copied over PCIe moves the expert's bytes at the link's
 * speed (55 GB/s measured on an H100 host, of which a layer's few-MiB
 * copies reach 35-45%), while the host's cores read the same bytes from
 * RAM at DRAM speed (~98 GB/s there). With the experts in host memory
 * (vcache_pin_host), the host can compute up to `max` of a MoE call's
 * misses itself while the card computes the hits and the shared expert,
 * and the rest still come in over the link: both paths at once.
 *
 * Bits: the host computes each expert with gpu/replica.c, the card's own
 * arithmetic in the same order, so the result rows are the ones the card
 * would have written, and every budget still gives the all-resident run's
 * bits (test_gpu's test_budgets).
 *
 * The flow of one decode MoE call (gmodel.c moe, T = 1):
 *   vcache_map reads the routing back (as it must anyway), and with it the
 *   call's input row and its pairs' experts; a miss the host takes gets
 *   slot -1 (the expert kernels skip it) and is not admitted to the cache;
 *   the card's kernels for the hits are launched; hostmiss_run computes
 *   the host's experts on the compute pool (gate and up with the SwiGLU,
 *   then down), and copies each result row into its pair's row of the
 *   experts' output in stream order, before the combine that reads it.
 */
#include "gpu/gmodel.h"

#include "gpu/replica.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/pool.h"

#include <stdlib.h>
#include <string.h>

int hostmiss_new(gpu_model *g, int max, char *err) {
    const e0_config *c = &g->m->cfg;
    gpu_vcache *x = g->vc;
    if (!x || !max) return 0;
    gpu_hostmiss *h = calloc(1, sizeof *h);
    if (!h) return e0_fail(err, E0_ENOMEM, "out of memory");
    const int k = g->top_k;
    h->tuning = max < 0;
    if (h->tuning) max = -max;
    h->max = max < k ? max : k;
    if (h->tuning) { /* settings 0 .. max, from 0 */
        tune_init(&h->tune, h->max + 1 < TUNE_MAX_ARMS ? h->max + 1 : TUNE_MAX_ARMS);
        h->max = tune_arm(&h->tune);
    }
    for (h->first = 0; h->first < c->n_layers; h->first++)
        if (g->m->layers[h->first].moe && g->m->layers[h->first].experts) break;
    h->H = c->hidden, h->I = c->moe_inter, h->k = k;
    h->pair = malloc((size_t)k * sizeof *h->pair);
    h->mid = malloc((size_t)k * (size_t)h->I * sizeof *h->mid);
    h->m = malloc((size_t)k * 3 * sizeof *h->m);
    int rc = 0;
    if (!h->pair || !h->mid || !h->m) rc = e0_fail(err, E0_ENOMEM, "out of memory");
    /* the rows copied to the card, and the call's input row with its routing
     * read back in one round trip: pinned, so the copies are DMA in stream order */
    if (!rc)
        rc = gpu_host_alloc(g->d, (void **)&h->out, (size_t)k * (size_t)h->H * sizeof *h->out,
                            "the host's expert rows", err);
    if (!rc)
        rc = gpu_host_alloc(g->d, (void **)&h->x, (size_t)h->H * sizeof *h->x + (size_t)k * sizeof *h->ridx,
                            "the host's expert inputs", err);
    if (!rc) h->ridx = (int32_t *)(h->x + h->H);
    x->hm = h;
    if (rc) hostmiss_free(g);
    return rc;
}

void hostmiss_free(gpu_model *g) {
    gpu_hostmiss *h = g->vc ? g->vc->hm : NULL;
    if (!h) return;
    gpu_host_free(g->d, h->out);
    gpu_host_free(g->d, h->x); /* ridx lies in it */
    free(h->pair), free(h->mid), free(h->m);
    free(h);
    g->vc->hm = NULL;
}

int hostmiss_read(gpu_model *g, int li, CUdeviceptr in, CUdeviceptr ridx, char *err) {
    gpu_hostmiss *h = g->vc->hm;
    h->n = 0;
    if (h->tuning && li == h->first) { /* a decode step begins: time the last one under its setting */
        const double t = now_s();
        if (h->t_last > 0) tune_step(&h->tune, t - h->t_last);
        h->t_last = t;
        h->max = tune_arm(&h->tune);
    }
    void *const dst[2] = {h->x, h->ridx};
    const CUdeviceptr src[2] = {in, ridx};
    const size_t bytes[2] = {(size_t)h->H * sizeof *h->x, (size_t)h->k * sizeof *h->ridx};
    return gpu_get_n(g->d, 2, dst, src, bytes, err);
}

bool hostmiss_take(gpu_model *g, int li, int e, char *err, int *rc) {
    gpu_hostmiss *h = g->vc->hm;
    *rc = 0;
    if (h->n >= h->max) return false;
    int p = -1;
    for (int j = 0; j < h->k; j++)
        if (h->ridx[j] == e) p = j;
    if (p < 0) return false; /* not this call's routing (cannot happen: moe_sort's) */
    const e0_expert *ex = &g->m->layers[li].experts[e];
    rmat *m = h->m + 3 * h->n;
    if ((*rc = rmat_of(&ex->gate, &m[0], err)) || (*rc = rmat_of(&ex->up, &m[1], err)) ||
        (*rc = rmat_of(&ex->down, &m[2], err)))
        return false;
    h->pair[h->n++] = p;
    return true;
}

/* A pool job over the taken experts' rows, item j * rows + r for expert j's
 * row r: their SwiGLU rows (h->down false, rows I), then their output rows
 * (h->down, rows H). */
static void rows_job(void *ctx, int64_t i0, int64_t i1, int tid) {
    const gpu_hostmiss *h = ctx;
    const int rows = h->down ? h->H : h->I;
    for (int64_t i = i0; i < i1;) {
        const int j = (int)(i / rows), r0 = (int)(i % rows);
        const int r1 = i1 - (int64_t)j * rows < rows ? (int)(i1 - (int64_t)j * rows) : rows;
        const rmat *m = h->m + 3 * j;
        float *mid = h->mid + (size_t)j * (size_t)h->I;
        if (h->down) replica_mv(&m[2], mid, r0, r1, h->out + (size_t)j * (size_t)h->H);
        else replica_glu(&m[0], &m[1], h->x, r0, r1, mid);
        i += r1 - r0;
    }
}

int hostmiss_run(gpu_model *g, CUdeviceptr eo, char *err) {
    gpu_hostmiss *h = g->vc->hm;
    if (!h || !h->n) return 0;
    const double t0 = now_s();
    h->down = false;
    pool_for((int64_t)h->n * h->I, 16, rows_job, h);
    h->down = true;
    pool_for((int64_t)h->n * h->H, 16, rows_job, h);
    int rc = 0;
    for (int j = 0; !rc && j < h->n; j++)
        rc = gpu_put(g->d, eo + (CUdeviceptr)((size_t)h->pair[j] * (size_t)h->H * sizeof(float)),
                     h->out + (size_t)j * (size_t)h->H, (size_t)h->H * sizeof(float), err);
    h->experts += (uint64_t)h->n;
    h->s += now_s() - t0;
    h->n = 0;
    return rc;
}
