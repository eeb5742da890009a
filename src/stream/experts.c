/* Reading a bundle (direct or buffered, from the LRU or the file) and
 * computing an expert: what every path of the streaming SwitchGLU uses
 * (stream_int.h). */
#include "stream/stream_int.h"

#include "util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>

#include "util/pool.h"

void note_io_error(e0_stream *s, const char *msg) {
    pthread_mutex_lock(&s->err_mu);
    if (!s->io_err[0]) snprintf(s->io_err, sizeof s->io_err, "%s", msg);
    pthread_mutex_unlock(&s->err_mu);
}

/* Reads a bundle. Under a memory budget the page cache must not grow with
 * every expert read: the read is direct (O_DIRECT: no copy out of the page
 * cache, nothing to drop), and ranges that still went through the page
 * cache (a filesystem without O_DIRECT) are dropped behind. Without a
 * budget, buffered reads keep what they read cached, for the next process
 * too. Counts the expert bytes (p->data), not the alignment slack. */
int read_bundle(e0_stream *s, const xb_plan *p, uint8_t *buf, char *err) {
    bool direct = false;
    int rc =
        s->direct ? xb_read_direct(s->m->st, p, buf, &direct, err) : xb_read(s->m->st, p, buf, err);
    if (rc) return rc;
    atomic_fetch_add(&s->bytes_read, p->data);
    if (s->o.mem_budget && !direct)
        for (int i = 0; i < p->nr; i++)
            posix_fadvise(st_file_fd(s->m->st, p->r[i].file), (off_t)p->r[i].off,
                          (off_t)p->r[i].len, POSIX_FADV_DONTNEED);
    return 0;
}

/* A bundle into buf: copied from the LRU when present, else read. */
int fetch_bundle(e0_stream *s, int layer, int e, uint8_t *buf, char *err) {
    if (s->xc) {
        xentry *x = xcache_lookup(s->xc, layer, e);
        if (x) {
            memcpy(buf, xentry_buf(x), plan_of(s, layer, e)->bytes);
            xcache_release(s->xc, x);
            return 0;
        }
    }
    return read_bundle(s, plan_of(s, layer, e), buf, err);
}

/* ---- the one compute routine every path uses ---------------------------- */

/* Expert x over the tokens of `pairs` (token * k + slot): gather, gate/up,
 * SwiGLU, down, scatter into eo. Each output row depends only on its own
 * token and the expert's bytes, never on which other tokens share the call:
 * the kernels' arithmetic depends only on whether a call reaches
 * K_PANEL_MIN_T tokens (mat.h). The first np pairs are those whose run
 * (model.h) routes K_PANEL_MIN_T tokens or more to this expert, as their
 * pass alone would call it (every pair of a run of K_PANEL_MIN_T tokens or
 * more where mat_matmul_t_free): one mat_matmul over them; the rest (decode
 * tokens, runs with fewer tokens here) one mat_matmul_decode, each token as
 * its run's call of fewer than K_PANEL_MIN_T tokens computes it. */
static void mm_split(const e0_mat *m, const float *x, int64_t ldx, int n, int np, float *y,
                     int64_t ldy) {
    if (np > 0) mat_matmul(m, x, ldx, np, y, ldy);
    if (n > np)
        mat_matmul_decode(m, x + (size_t)np * (size_t)ldx, ldx, n - np, y + (size_t)np * (size_t)ldy,
                          ldy);
}

static void expert_compute(const e0_expert *x, int H, const float *in, const int32_t *pairs, int n,
                           int k, int np, float *eo, float *xs, float *g, float *u, float *ys) {
    const int64_t I = x->gate.rows;
    for (int j = 0; j < n; j++)
        memcpy(xs + (size_t)j * H, in + (size_t)(pairs[j] / k) * H, (size_t)H * sizeof(float));
    mm_split(&x->gate, xs, H, n, np, g, I);
    mm_split(&x->up, xs, H, n, np, u, I);
    for (int64_t i = 0; i < (int64_t)n * I; i++)
        g[i] = e0_silu(g[i]) * u[i];
    mm_split(&x->down, g, I, n, np, ys, H);
    for (int j = 0; j < n; j++)
        memcpy(eo + (size_t)pairs[j] * H, ys + (size_t)j * H, (size_t)H * sizeof(float));
}

static uint64_t expert_bytes(const e0_expert *x) {
    return mat_bytes(&x->gate) + mat_bytes(&x->up) + mat_bytes(&x->down);
}

void run_expert(e0_stream *s, const e0_expert *x, const float *in, const int32_t *pairs,
                       int n, int k, int np, float *eo, e0_scratch *ws) {
    double t0 = now_s();
    expert_compute(x, s->H, in, pairs, n, k, np, eo, ws->xs, ws->g, ws->u, ws->ys);
    s->c.compute_s += now_s() - t0;
    s->c.expert_calls++;
    s->c.bytes_touched += expert_bytes(x);
}

/* Experts exps[0..n) on the compute pool, one whole expert per thread at a
 * time (its matmuls then run serially in that thread): no synchronisation
 * per matmul, and each thread packs and prefetches whole matrices. Results
 * are those of run_expert (the kernels' arithmetic does not depend on the
 * row split). Each thread has its own gather / gate / up / output buffers
 * in s->tw. The experts are those of a resident layer (experts[], indexed
 * by expert id) or LRU entries (ent[i], waited for by whichever thread
 * takes expert i, then released; ent[i] NULL: left to the caller). Returns
 * false (nothing done) when those buffers cannot be allocated. */
/* Expert i's matrices: experts[exps[i]], or views into its LRU entry. */
static e0_expert px_expert(e0_stream *s, const e0_expert *experts, xentry *const *ent, int layer,
                           const int32_t *exps, int i) {
    e0_expert v;
    if (!ent) return experts[exps[i]];
    xb_views(plan_of(s, layer, exps[i]), xentry_buf(ent[i]), &v);
    return v;
}

typedef struct {
    e0_stream *s;
    const e0_expert *experts;
    xentry *const *ent;
    int layer;
    const int32_t *exps, *start, *pairs;
    const float *in;
    int k;
    float *eo;
    size_t per; /* floats per thread in s->tw */
    int64_t maxT, I;
    atomic_int rc;          /* ent: the first failed load's (E0_EIO), its message in s->io_err */
    atomic_llong wait_ns;   /* ent: time waited on loads, all threads */
} px_job;

static void px_fn(void *ctx, int64_t i0, int64_t i1, int tid) {
    px_job *j = ctx;
    e0_stream *s = j->s;
    const size_t H = (size_t)s->H, T = (size_t)j->maxT, I = (size_t)j->I;
    float *xs = s->tw + (size_t)tid * j->per, *g = xs + T * H, *u = g + T * I, *ys = u + T * I;
    for (int64_t i = i0; i < i1; i++) {
        if (j->ent && !j->ent[i]) continue;
        if (j->ent) {
            const double t0 = now_s();
            const int bad = xcache_wait(s->xc, j->ent[i]);
            atomic_fetch_add(&j->wait_ns, (long long)((now_s() - t0) * 1e9));
            if (bad || atomic_load(&j->rc)) {
                if (bad) atomic_store(&j->rc, E0_EIO);
                xcache_release(s->xc, j->ent[i]);
                continue;
            }
        }
        const e0_expert v = px_expert(s, j->experts, j->ent, j->layer, j->exps, (int)i);
        expert_compute(&v, s->H, j->in, j->pairs + j->start[i], j->start[i + 1] - j->start[i],
                       j->k, s->npanel[j->exps[i]], j->eo, xs, g, u, ys);
        if (j->ent) xcache_release(s->xc, j->ent[i]);
    }
}

bool parallel_experts(e0_stream *s, const e0_expert *experts, xentry *const *ent,
                             int layer, const int32_t *exps, const int32_t *start, int n,
                             const int32_t *pairs, const float *in, int k, float *eo, int *rc) {
    const int nt = pool_threads();
    if (n < 2 || nt < 2) return false;
    int64_t maxT = 0, I = 0, calls = 0;
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        const int64_t t = start[i + 1] - start[i];
        if (ent && !ent[i]) continue;
        maxT = t > maxT ? t : maxT;
        const e0_expert x = px_expert(s, experts, ent, layer, exps, i);
        I = x.gate.rows > I ? x.gate.rows : I;
        calls++;
        bytes += expert_bytes(&x);
    }
    const size_t per = (size_t)maxT * (2 * (size_t)s->H + 2 * (size_t)I);
    if (per * (size_t)nt > s->tw_cap) {
        float *tw = realloc(s->tw, per * (size_t)nt * sizeof *tw);
        if (!tw) return false;
        s->tw = tw;
        s->tw_cap = per * (size_t)nt;
    }
    const double t0 = now_s();
    px_job j = {.s = s, .experts = experts, .ent = ent, .layer = layer, .exps = exps,
                .start = start, .pairs = pairs, .in = in, .k = k, .eo = eo, .per = per,
                .maxT = maxT, .I = I};
    atomic_init(&j.rc, 0);
    atomic_init(&j.wait_ns, 0);
    pool_for_each(n, px_fn, &j);
    /* the threads wait side by side: their mean is the pass's */
    const double wait = (double)atomic_load(&j.wait_ns) * 1e-9 / nt;
    s->c.io_wait_s += wait;
    s->c.compute_s += now_s() - t0 - wait;
    s->c.expert_calls += (uint64_t)calls;
    s->c.bytes_touched += bytes;
    *rc = atomic_load(&j.rc);
    return true;
}

/* Experts exps[0..n) of a resident layer (experts[] indexed by expert id):
 * whole experts per thread, or one at a time, each split by rows, when the
 * per-thread buffers cannot be had. */
void resident_experts(e0_stream *s, const e0_expert *experts, const int32_t *exps,
                             const int32_t *start, int n, const int32_t *pairs, const float *in,
                             int k, float *eo, e0_scratch *ws) {
    int rc;
    if (parallel_experts(s, experts, NULL, -1, exps, start, n, pairs, in, k, eo, &rc)) return;
    for (int i = 0; i < n; i++)
        run_expert(s, &experts[exps[i]], in, pairs + start[i], start[i + 1] - start[i], k,
                   s->npanel[exps[i]], eo, ws);
}
