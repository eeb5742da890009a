/* The streaming SwitchGLU: see switchglu.h for the contract. */
#include "stream/switchglu.h"

#include "util/bigbuf.h"
#include "util/meminfo.h"
#include "util/pool.h"

#include "stream/iopool.h"
#include "stream/xcache.h"
#include "util/err.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef struct e0_stream e0_stream;

enum { SPEC_MAX = 256 }; /* speculative loads in flight, at most */
/* Reads in flight per whole-layer load, each over its own part of every
 * tensor: the disk gives more to several streams than to one
 * (docs/experiments.md section 12). */
enum { FL_PARTS = 4 };

/* A staged slot fill or a whole-layer read running on the prefetch pool. */
typedef struct {
    e0_stream *s;
    int layer;
    atomic_int busy;
    iopool_job node;
} bg_job;

typedef struct {
    /* staged decode: staged_n slots */
    int32_t *slot_exp;    /* expert held (valid when ready), written by the fill job */
    int32_t *slot_target; /* expert the pending fill writes */
    atomic_int *slot_ready;
    uint8_t *slot_buf;        /* [staged_n, bundle_bytes] */
    int32_t *pred, npred;     /* predicted set for the next call */
    int32_t *prev, nprev;     /* experts the last token routed to */
    int32_t *asm_set, nasm;   /* set the slots were last assembled for */
    int32_t *forced, nforced; /* tests: a prediction that overrides predict(), or -1 */
    bg_job fill;
    /* hot: decayed usage and a resident stack */
    float *usage;
    int64_t calls;
    int32_t *hot_exp;   /* [hot_cap], -1 empty */
    uint8_t *hot_buf;   /* NULL when not resident */
    uint64_t hot_stamp; /* last use, for the hot_window */
    /* full layer: where each expert's bytes sit in a layer buffer */
    bool contiguous; /* each range index is one span over all experts */
    size_t *reg;     /* [nr] region of range index i in the layer buffer */
    uint64_t *base;  /* [nr] file offset of expert 0's range i */
    size_t layer_bytes;
} layer_state;

/* The memory-pressure monitor (pressure_fn): a thread that watches the
 * memory left under the machine's and the cgroup's limits while a budget
 * sizes the cache, and gives cache slots back when it runs short. */
typedef struct {
    pthread_t th;
    bool running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    _Atomic uint64_t shrinks, grows; /* limit changes down / up */
} pressure_mon;

struct e0_stream {
    const e0_model *m;
    e0_engine_opts o;
    pressure_mon pm;
    int n_layers, E, H;
    xcache *xc;
    iopool *load, *pre;
    size_t bundle_bytes;  /* buffer stride of one bundle (XB_ALIGN multiple) */
    uint64_t bundle_data; /* expert bytes of the largest bundle */
    bool direct;          /* O_DIRECT reads: under a memory budget */
    xb_plan *plans;       /* [n_layers * E], MoE layers only */
    xb_order order;
    uint8_t *overflow; /* one bundle read outside the LRU */
    layer_state *ls;
    int hot_cap, hot_resident;
    uint64_t hot_clock;
    int last_moe, first_moe;
    /* whole-layer double buffer */
    uint8_t *fl_buf[2];
    int fl_layer[2]; /* layer held or being read, -1 none */
    bg_job fl_job[2][FL_PARTS];
    atomic_int fl_bad[2]; /* a part of the read into buffer b failed */
    e0_expert *fl_views;  /* [E]: the routed experts' views into a layer buffer */
    int32_t *npanel;      /* [E]: of the current call's pairs of each expert, how many (listed
                             first) take the panel arithmetic (stream_experts) */
    size_t fl_bytes;
    /* on-demand load jobs of the current layer */
    struct load_job {
        e0_stream *s;
        const xb_plan *plan;
        xentry *e;
        iopool_job node;
    } * ld;
    /* speculative loads on the prefetch pool (see spec_next) */
    struct spec_job {
        e0_stream *s;
        const xb_plan *plan;
        xentry *e;
        atomic_int busy; /* set by the engine thread, cleared by the job when done */
        iopool_job node;
    } spec[SPEC_MAX];
    uint8_t *spec_pending; /* [n_layers * E]: loaded speculatively for this layer's next step:
                              SPEC_LO, or SPEC_HI for a guess past the first k/2 that prefetch_k
                              0 made; engine thread */
    /* prefetch_k 0: whether the guesses past the first k/2 are made, from
     * how many of the last window's were routed to (spec_next) */
    bool spec_hi;
    uint32_t spec_hi_loads, spec_hi_used, spec_calls;
    uint8_t *touched;      /* [n_layers * E]: experts routed to since the last reset */
    /* counters: atomics, as I/O threads add bytes */
    atomic_uint_fast64_t bytes_read;
    stream_counters c;      /* the rest, engine thread only */
    float *tw;              /* parallel_experts: per-thread buffers */
    size_t tw_cap;          /* floats */
    pthread_mutex_t err_mu; /* guards io_err */
    char io_err[E0_ERR_MAX];
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const xb_plan *plan_of(const e0_stream *s, int layer, int e) {
    return &s->plans[(size_t)layer * (size_t)s->E + (size_t)e];
}

static bool in_set(const int32_t *set, int n, int32_t e) {
    for (int i = 0; i < n; i++)
        if (set[i] == e) return true;
    return false;
}

/* out[0..n): the n experts (n <= E <= 4096) with the largest logits, best
 * first, the lower id among equals. */
static void best_of(const float *logits, int E, int n, int32_t *out) {
    bool taken[4096] = {false};
    for (int c = 0; c < n; c++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || logits[e] > logits[best])) best = e;
        taken[best] = true;
        out[c] = best;
    }
}

static void note_io_error(e0_stream *s, const char *msg) {
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
static int read_bundle(e0_stream *s, const xb_plan *p, uint8_t *buf, char *err) {
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
static int fetch_bundle(e0_stream *s, int layer, int e, uint8_t *buf, char *err) {
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

static void run_expert(e0_stream *s, const e0_expert *x, const float *in, const int32_t *pairs,
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

static bool parallel_experts(e0_stream *s, const e0_expert *experts, xentry *const *ent,
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
static void resident_experts(e0_stream *s, const e0_expert *experts, const int32_t *exps,
                             const int32_t *start, int n, const int32_t *pairs, const float *in,
                             int k, float *eo, e0_scratch *ws) {
    int rc;
    if (parallel_experts(s, experts, NULL, -1, exps, start, n, pairs, in, k, eo, &rc)) return;
    for (int i = 0; i < n; i++)
        run_expert(s, &experts[exps[i]], in, pairs + start[i], start[i + 1] - start[i], k,
                   s->npanel[exps[i]], eo, ws);
}

/* ---- exact --------------------------------------------------------------- */

static void load_job_fn(void *arg) {
    struct load_job *j = arg;
    char err[E0_ERR_MAX];
    int rc = read_bundle(j->s, j->plan, xentry_buf(j->e), err);
    if (rc) note_io_error(j->s, err);
    xcache_loaded(j->s->xc, j->e, rc == 0);
}

/* ---- speculative loads ------------------------------------------------------ */

/* In decode the disk would idle while the dense part of each layer
 * (attention or DeltaNet, shared expert, router) computes: the next layer's
 * experts are known only after its router runs. The next MoE layer's router
 * applied to this layer's MoE input ranks them well ahead of time (the
 * residual stream changes little in one layer): its first experts start
 * loading into the LRU, on the prefetch pool, as soon as this layer's own
 * loads are queued, so that the disk has both layers' reads in flight (it
 * gives more to a deeper queue). How many: prefetch_k, or by default the
 * first k/2 always (98% of them routed on the Qwen3.6-35B-A3B shape,
 * docs/experiments.md, issue 4) and the rest of the top-k while at least
 * half of those turn out routed over a window of SPEC_WINDOW guesses (one
 * call in SPEC_PROBE makes them anyway, to keep measuring); section 51. A
 * wrong guess costs one bundle of disk time and an LRU slot, never the
 * result: routing is untouched and the bytes are the same whoever loads
 * them. */
enum { SPEC_WINDOW = 128, SPEC_PROBE = 8, SPEC_LO = 1, SPEC_HI = 2 };

static void spec_job_fn(void *arg) {
    struct spec_job *j = arg;
    char err[E0_ERR_MAX];
    int rc = read_bundle(j->s, j->plan, xentry_buf(j->e), err);
    if (rc) note_io_error(j->s, err); /* for a demand read waiting on this entry */
    xcache_loaded(j->s->xc, j->e, rc == 0);
    xcache_release(j->s->xc, j->e);
    atomic_store_explicit(&j->busy, 0, memory_order_release);
}

/* The next MoE layer after `layer`, or -1. */
static int next_moe(const e0_stream *s, int layer) {
    for (int l = layer + 1; l < s->n_layers; l++)
        if (s->m->layers[l].moe) return l;
    return -1;
}

/* Starts loading expert e of `next` into the LRU on the prefetch pool
 * unless it is there or loading, with at most `cap` speculative loads in
 * flight: 1 started, 0 there or loading already, -1 stopped by that cap or
 * by a cache with every slot pinned. */
static int spec_load(e0_stream *s, int next, int32_t e, int cap, uint8_t mark) {
    int busy = 0, j = -1; /* jobs in flight, and a free one */
    for (int i = 0; i < SPEC_MAX; i++) {
        if (atomic_load_explicit(&s->spec[i].busy, memory_order_acquire))
            busy++;
        else if (j < 0)
            j = i;
    }
    if (busy >= cap || j < 0) return -1;
    bool need;
    xentry *x = xcache_acquire(s->xc, next, e, false, &need);
    if (!x) return -1; /* every slot pinned */
    if (!need) {       /* present or loading already */
        xcache_release(s->xc, x);
        return 0;
    }
    struct spec_job *sj = &s->spec[j];
    sj->s = s;
    sj->plan = plan_of(s, next, e);
    sj->e = x;
    atomic_store_explicit(&sj->busy, 1, memory_order_relaxed);
    s->spec_pending[(size_t)next * (size_t)s->E + (size_t)e] = mark;
    s->c.spec_loads++;
    iopool_submit(s->pre, &sj->node, spec_job_fn, sj);
    return 1;
}

/* Starts loading the experts the next MoE layer's router ranks first on x
 * ([H], a token's MoE input of `layer`), at most prefetch_cap in flight. */
static void spec_next(e0_stream *s, int layer, const float *x, int k) {
    const int next = next_moe(s, layer);
    const e0_mat *r = next >= 0 ? &s->m->layers[next].router : NULL;
    if (!r || r->rows > 4096) return;
    float logits[4096];
    mat_matmul_f32(r, x, s->H, 1, logits, r->rows); /* as routing itself: f32 */
    const int cap = s->o.layer.prefetch_cap < SPEC_MAX ? s->o.layer.prefetch_cap : SPEC_MAX;
    const int pk = s->o.layer.prefetch_k;
    const int want = pk > 0                                            ? (pk < k ? pk : k)
                     : s->spec_hi || s->spec_calls++ % SPEC_PROBE == 0 ? k
                                                                       : k / 2;
    int32_t chosen[SPEC_MAX / 2];
    int n = want < s->E ? want : s->E;
    if (n > SPEC_MAX / 2) n = SPEC_MAX / 2;
    best_of(logits, s->E, n, chosen);
    for (int c = 0; c < n; c++) {
        const bool hi = pk == 0 && c >= k / 2;
        const int started = spec_load(s, next, chosen[c], cap, hi ? SPEC_HI : SPEC_LO);
        if (started < 0) return;
        s->spec_hi_loads += hi && started;
    }
}

/* A prefill pass: the experts of the next MoE layer that its router ranks
 * in the top k of any of the pass's T tokens (x: their MoE inputs of
 * `layer`), most tokens first, start loading as soon as this layer's own
 * loads are queued. A pass of a few hundred ids routes to nearly every
 * expert of every layer, so without these the disk would wait on the dense
 * part of each layer and each layer's first experts on a queue of only
 * load_threads reads (docs/experiments.md section 54). Only while the LRU
 * holds four layers' experts: a guess evicted before its layer runs is a
 * read wasted. */
static void spec_prefill(e0_stream *s, int layer, const float *x, int T, int k) {
    const int next = next_moe(s, layer);
    const e0_mat *r = next >= 0 ? &s->m->layers[next].router : NULL;
    if (!r || r->rows > 4096 || r->rows != s->E || k <= 0 || k > s->E ||
        xcache_limit(s->xc) < 4 * s->E)
        return;
    float *lg = malloc((size_t)T * (size_t)s->E * sizeof *lg);
    if (!lg) return; /* a guess only */
    mat_matmul_f32(r, x, s->H, T, lg, s->E); /* as routing itself: f32 */
    int32_t cnt[4096] = {0}, top[4096], order[4096];
    for (int t = 0; t < T; t++) {
        best_of(lg + (size_t)t * (size_t)s->E, s->E, k, top);
        for (int c = 0; c < k; c++)
            cnt[top[c]]++;
    }
    free(lg);
    int n = 0;
    for (int e = 0; e < s->E; e++)
        if (cnt[e]) order[n++] = e;
    for (int i = 1; i < n; i++) { /* most tokens first (insertion sort: n <= E) */
        const int32_t v = order[i];
        int j = i;
        for (; j > 0 && cnt[order[j - 1]] < cnt[v]; j--)
            order[j] = order[j - 1];
        order[j] = v;
    }
    for (int i = 0; i < n; i++)
        if (spec_load(s, next, order[i], SPEC_MAX, SPEC_LO) < 0) return;
}

/* Experts exps[0..n) (pair lists at pairs + start[i] .. start[i+1]) through
 * the LRU or, when every slot is pinned, the overflow buffer, for a pass
 * of T tokens (in: their MoE inputs). spec: guesses at the next layer's
 * experts start loading once this layer's loads are queued, each token's
 * in decode (spec_next), their union in prefill (spec_prefill). In prefill
 * the experts run one whole expert per thread as their loads complete
 * (parallel_experts), in decode each split by rows, in order. */
static int exact_experts(e0_stream *s, int layer, const int32_t *exps, const int32_t *start, int n,
                         const int32_t *pairs, const float *in, int k, float *eo, e0_scratch *ws,
                         int T, bool decode, bool spec, char *err) {
    const e0_layer *ly = &s->m->layers[layer];
    if (s->o.io == E0_IO_MMAP || s->o.io == E0_IO_LOAD) { /* the mapping (or the loaded copy) is the cache */
        if (s->o.layer.warm_willneed)
            for (int i = 0; i < n; i++)
                xb_willneed(s->m->st, plan_of(s, layer, exps[i]));
        resident_experts(s, ly->experts, exps, start, n, pairs, in, k, eo, ws);
        return 0;
    }
    xentry **ent = (xentry **)ws->xent;
    int submitted = 0;
    for (int i = 0; i < n; i++) {
        ent[i] = NULL;
        if (!s->xc) continue;
        bool need;
        ent[i] = xcache_acquire(s->xc, layer, exps[i], true, &need);
        uint8_t *pending = &s->spec_pending[(size_t)layer * (size_t)s->E + (size_t)exps[i]];
        if (*pending) { /* a speculative load: still present (a hit), or evicted since */
            const bool used = ent[i] && !need;
            s->c.spec_used += used;
            s->spec_hi_used += used && *pending == SPEC_HI;
            *pending = 0;
        }
        if (ent[i] && need) {
            s->ld[submitted] = (struct load_job){s, plan_of(s, layer, exps[i]), ent[i], {0}};
            iopool_submit(s->load, &s->ld[submitted].node, load_job_fn, &s->ld[submitted]);
            submitted++;
        }
    }
    if (s->xc) { /* the guesses at this layer that were not routed to were wrong */
        memset(s->spec_pending + (size_t)layer * (size_t)s->E, 0, (size_t)s->E);
        if (s->spec_hi_loads >= SPEC_WINDOW) {
            s->spec_hi = 2 * s->spec_hi_used >= s->spec_hi_loads;
            s->spec_hi_loads = s->spec_hi_used = 0;
        }
    }
    if (spec && decode)
        for (int t = 0; t < T; t++)
            spec_next(s, layer, in + (size_t)t * s->H, k);
    if (spec && !decode) spec_prefill(s, layer, in, T, k);
    int rc = 0;
    const bool par = !decode && s->xc &&
                     parallel_experts(s, NULL, ent, layer, exps, start, n, pairs, in, k, eo, &rc);
    if (rc) {
        pthread_mutex_lock(&s->err_mu);
        rc = e0_fail(err, E0_EIO, "layer %d: %s", layer, s->io_err);
        pthread_mutex_unlock(&s->err_mu);
    }
    for (int i = 0; i < n; i++) {
        if (par && ent[i]) continue; /* computed and released there */
        const xb_plan *p = plan_of(s, layer, exps[i]);
        e0_expert v;
        double t0 = now_s();
        if (ent[i]) {
            if (rc == 0 && xcache_wait(s->xc, ent[i]) != 0) {
                pthread_mutex_lock(&s->err_mu);
                rc = e0_fail(err, E0_EIO, "layer %d expert %d: %s", layer, exps[i], s->io_err);
                pthread_mutex_unlock(&s->err_mu);
            }
            s->c.io_wait_s += now_s() - t0;
            if (rc == 0) {
                xb_views(p, xentry_buf(ent[i]), &v);
                run_expert(s, &v, in, pairs + start[i], start[i + 1] - start[i], k,
                           s->npanel[exps[i]], eo, ws);
            }
            xcache_wait(s->xc, ent[i]); /* never release an entry its loader still writes */
            xcache_release(s->xc, ent[i]);
            continue;
        }
        if (rc) continue;
        rc = read_bundle(s, p, s->overflow, err);
        s->c.io_wait_s += now_s() - t0;
        s->c.overflow_reads++;
        if (rc) {
            e0_wrap(err, rc, "layer %d expert %d", layer, exps[i]);
            continue;
        }
        xb_views(p, s->overflow, &v);
        run_expert(s, &v, in, pairs + start[i], start[i + 1] - start[i], k, s->npanel[exps[i]], eo,
                   ws);
    }
    return rc;
}

/* ---- staged ---------------------------------------------------------------- */

static void fill_job_fn(void *arg) {
    bg_job *j = arg;
    e0_stream *s = j->s;
    layer_state *L = &s->ls[j->layer];
    char err[E0_ERR_MAX];
    for (int i = 0; i < s->o.layer.staged_n; i++) {
        if (atomic_load_explicit(&L->slot_ready[i], memory_order_acquire)) continue;
        int32_t e = L->slot_target[i];
        if (e < 0) continue;
        uint8_t *buf = L->slot_buf + (size_t)i * s->bundle_bytes;
        if (s->o.layer.incr_writeback && s->xc && L->slot_exp[i] >= 0 && L->slot_exp[i] != e) {
            /* hand the bundle being evicted back to the LRU */
            bool need;
            xentry *x = xcache_acquire(s->xc, j->layer, L->slot_exp[i], false, &need);
            if (x && need) {
                memcpy(xentry_buf(x), buf, plan_of(s, j->layer, L->slot_exp[i])->bytes);
                xcache_loaded(s->xc, x, true);
            }
            if (x) xcache_release(s->xc, x);
        }
        if (s->o.layer.warm_willneed) xb_willneed(s->m->st, plan_of(s, j->layer, e));
        if (fetch_bundle(s, j->layer, e, buf, err) != 0) {
            note_io_error(s, err);
            L->slot_exp[i] = -1;
            continue; /* stays not ready: those experts run through exact */
        }
        L->slot_exp[i] = e;
        atomic_store_explicit(&L->slot_ready[i], 1, memory_order_release);
    }
    atomic_store_explicit(&j->busy, 0, memory_order_release);
}

static void bg_wait(bg_job *j) {
    while (atomic_load_explicit(&j->busy, memory_order_acquire)) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

/* Assigns the predicted set of `layer` to its slots and starts the fill. */
static void stage(e0_stream *s, int layer) {
    layer_state *L = &s->ls[layer];
    const int n = s->o.layer.staged_n;
    bg_wait(&L->fill); /* one fill per layer in flight */
    if (s->o.layer.asm_cache && L->npred == L->nasm &&
        memcmp(L->pred, L->asm_set, (size_t)L->npred * 4) == 0)
        return; /* the slot table of this set is already assembled */
    bool keep[256] = {0};
    for (int i = 0; i < n; i++)
        L->slot_target[i] = -1;
    if (s->o.layer.incr_stack) /* experts already staged keep their slot */
        for (int i = 0; i < n; i++)
            if (atomic_load(&L->slot_ready[i]) && in_set(L->pred, L->npred, L->slot_exp[i])) {
                keep[i] = true;
                L->slot_target[i] = L->slot_exp[i];
            }
    for (int p = 0, i = 0; p < L->npred; p++) {
        if (in_set(L->slot_target, n, L->pred[p])) continue;
        while (i < n && keep[i])
            i++;
        if (i == n) break;
        L->slot_target[i++] = L->pred[p];
    }
    for (int i = 0; i < n; i++)
        if (!keep[i]) atomic_store_explicit(&L->slot_ready[i], 0, memory_order_release);
    memcpy(L->asm_set, L->pred, (size_t)L->npred * 4);
    L->nasm = L->npred;
    atomic_store(&L->fill.busy, 1);
    iopool_submit(s->pre, &L->fill.node, fill_job_fn, &L->fill);
}

/* The predicted set of `layer`: its router applied to x (the MoE input of
 * the layer before), best first, then the experts the last token routed to. */
static void predict(e0_stream *s, int layer, const float *x) {
    layer_state *L = &s->ls[layer];
    const int n = s->o.layer.staged_n;
    if (L->nforced >= 0) {
        L->npred = L->nforced;
        memcpy(L->pred, L->forced, (size_t)L->nforced * sizeof *L->pred);
        return;
    }
    L->npred = 0;
    if (x) {
        float logits[4096];
        const e0_mat *r = &s->m->layers[layer].router;
        if (r->rows <= 4096) {
            mat_matmul_f32(r, x, s->H, 1, logits, r->rows); /* as routing itself: f32 */
            L->npred = n < s->E ? n : s->E;
            best_of(logits, s->E, L->npred, L->pred);
        }
    }
    for (int i = 0; i < L->nprev && L->npred < n; i++)
        if (!in_set(L->pred, L->npred, L->prev[i])) L->pred[L->npred++] = L->prev[i];
}

/* ---- hot ----------------------------------------------------------------- */

static int hot_refresh(e0_stream *s, int layer, int n_hot, char *err) {
    layer_state *L = &s->ls[layer];
    if (!L->hot_buf) { /* take a stack, evicting the least recently used layer's past hot_window */
        int window = s->o.layer.hot_window;
        if (window > 0 && s->hot_resident >= window) {
            int victim = -1;
            for (int l = 0; l < s->n_layers; l++)
                if (s->ls[l].hot_buf &&
                    (victim < 0 || s->ls[l].hot_stamp < s->ls[victim].hot_stamp))
                    victim = l;
            L->hot_buf = s->ls[victim].hot_buf;
            s->ls[victim].hot_buf = NULL;
            for (int i = 0; i < s->hot_cap; i++)
                s->ls[victim].hot_exp[i] = -1;
        } else {
            L->hot_buf = e0_big_alloc((size_t)s->hot_cap * s->bundle_bytes);
            if (!L->hot_buf)
                return e0_fail(err, E0_ENOMEM, "out of memory for a hot stack of %d experts",
                               s->hot_cap);
            s->hot_resident++;
        }
        for (int i = 0; i < s->hot_cap; i++)
            L->hot_exp[i] = -1;
    }
    /* choose the top n_hot by usage (+ pin_bonus for predicted experts) */
    int32_t chosen[256];
    int nc = 0;
    while (nc < n_hot && nc < s->E && nc < 256) {
        int best = -1;
        float bs = 0;
        for (int e = 0; e < s->E; e++) {
            if (in_set(chosen, nc, e)) continue;
            float sc = L->usage[e] + (in_set(L->pred, L->npred, e) ? s->o.layer.pin_bonus : 0.0f);
            if (best < 0 || sc > bs) best = e, bs = sc;
        }
        if (bs <= 0) break; /* never used: not worth a slot */
        chosen[nc++] = best;
    }
    for (int e = 0; e < s->E; e++)
        L->usage[e] *= s->o.layer.hot_decay;
    /* load what is new into slots whose expert left the set */
    for (int c = 0; c < nc; c++) {
        if (in_set(L->hot_exp, s->hot_cap, chosen[c])) continue;
        int slot = -1;
        for (int i = 0; i < s->hot_cap && slot < 0; i++)
            if (L->hot_exp[i] < 0 || !in_set(chosen, nc, L->hot_exp[i])) slot = i;
        if (slot < 0) break;
        L->hot_exp[slot] = -1;
        double t0 = now_s();
        int rc =
            fetch_bundle(s, layer, chosen[c], L->hot_buf + (size_t)slot * s->bundle_bytes, err);
        s->c.io_wait_s += now_s() - t0;
        if (rc) return rc;
        L->hot_exp[slot] = chosen[c];
    }
    return 0;
}

/* ---- full layer ------------------------------------------------------------ */

/* Where part p of FL_PARTS of the span [off, end) starts: off, end, or the
 * ST_DIRECT_ALIGN multiple at or below the even split, kept inside the span
 * (so a direct read of an inner part needs no slack outside it). */
static uint64_t layer_cut(uint64_t off, uint64_t end, int p) {
    if (p <= 0) return off;
    if (p >= FL_PARTS) return end;
    const uint64_t c =
        (off + (end - off) * (uint64_t)p / FL_PARTS) & ~(uint64_t)(ST_DIRECT_ALIGN - 1);
    return c < off ? off : c;
}

/* Part `part` of FL_PARTS of the whole-layer read of `layer` into buf: every
 * FL_PARTS-th expert, or, when each stacked tensor is one span, that part of
 * every span (layer_cut). */
static int read_layer(e0_stream *s, int layer, uint8_t *buf, int part, char *err) {
    const layer_state *L = &s->ls[layer];
    const xb_plan *p0 = plan_of(s, layer, 0), *pl = plan_of(s, layer, s->E - 1);
    if (!L->contiguous) {
        for (int e = part; e < s->E; e += FL_PARTS) {
            int rc = read_bundle(s, plan_of(s, layer, e), buf + (size_t)e * s->bundle_bytes, err);
            if (rc) return rc;
        }
        return 0;
    }
    for (int i = 0; i < p0->nr; i++) { /* a part of each stacked tensor */
        const uint64_t off = p0->r[i].off, end = pl->r[i].off + pl->r[i].len;
        const uint64_t from = layer_cut(off, end, part), to = layer_cut(off, end, part + 1);
        if (to <= from) continue;
        const uint64_t len = to - from;
        uint8_t *dst = buf + L->reg[i] + (from - off);
        bool direct = false;
        int rc = s->direct ? st_pread_direct(s->m->st, p0->r[i].file, from, len, dst, &direct, err)
                           : st_pread(s->m->st, p0->r[i].file, from, len, dst, err);
        if (rc) return rc;
        atomic_fetch_add(&s->bytes_read, len);
        if (s->o.mem_budget && !direct)
            posix_fadvise(st_file_fd(s->m->st, p0->r[i].file), (off_t)from, (off_t)len,
                          POSIX_FADV_DONTNEED);
    }
    return 0;
}

/* Views of expert e inside a whole-layer buffer: the per-expert plan with its
 * ranges relocated, so gate/up split exactly as a per-expert bundle does. */
static void layer_views(const e0_stream *s, int layer, int e, const uint8_t *buf, e0_expert *v) {
    const layer_state *L = &s->ls[layer];
    xb_plan p = *plan_of(s, layer, e);
    for (int i = 0; i < p.nr; i++)
        p.r[i].at = L->contiguous ? L->reg[i] + (size_t)(p.r[i].off - L->base[i])
                                  : (size_t)e * s->bundle_bytes + p.r[i].at;
    xb_views(&p, buf, v);
}

static void fl_job_fn(void *arg) {
    bg_job *j = arg;
    e0_stream *s = j->s;
    const int idx = (int)(j - &s->fl_job[0][0]), b = idx / FL_PARTS;
    char err[E0_ERR_MAX];
    if (read_layer(s, j->layer, s->fl_buf[b], idx % FL_PARTS, err) != 0) {
        note_io_error(s, err);
        atomic_store(&s->fl_bad[b], 1);
    }
    atomic_store_explicit(&j->busy, 0, memory_order_release);
}

/* Waits for buffer b's read; a failed one leaves it holding no layer. */
static void fl_wait(e0_stream *s, int b) {
    for (int p = 0; p < FL_PARTS; p++)
        bg_wait(&s->fl_job[b][p]);
    if (atomic_exchange(&s->fl_bad[b], 0)) s->fl_layer[b] = -1;
}

/* Starts reading `layer` into buffer b (idle), all parts at once. */
static void fl_start(e0_stream *s, int b, int layer) {
    s->fl_layer[b] = layer;
    for (int p = 0; p < FL_PARTS; p++) {
        bg_job *j = &s->fl_job[b][p];
        atomic_store(&j->busy, 1);
        j->layer = layer;
        iopool_submit(s->pre, &j->node, fl_job_fn, j);
    }
}

static bool full_applies(const e0_stream *s, int layer) {
    const int n = s->o.layer.prefill_full_layers;
    return s->o.path == E0_PATH_FULL || (s->o.layer.full_layer_prefill && (n == 0 || layer < n));
}

/* The buffer holding `layer`, reading it now unless a prefetch has it; then,
 * in prefill, starts reading the next MoE layer that will load whole into
 * the other one. */
static int layer_buffer(e0_stream *s, int layer, bool prefill, uint8_t **out, char *err) {
    int b = s->fl_layer[0] == layer ? 0 : s->fl_layer[1] == layer ? 1 : -1;
    double t0 = now_s();
    if (b >= 0) {
        fl_wait(s, b);
        if (s->fl_layer[b] != layer) b = -1; /* its read failed: read again to get the error */
    }
    if (b < 0) {
        b = s->fl_layer[0] == -1 || s->fl_layer[1] == layer ? 0 : 1;
        fl_wait(s, b);
        fl_start(s, b, layer);
        fl_wait(s, b);
        for (int p = 0; p < FL_PARTS && s->fl_layer[b] != layer; p++) { /* one failed */
            int rc = read_layer(s, layer, s->fl_buf[b], p, err);
            if (rc) {
                s->fl_layer[b] = -1;
                return e0_wrap(err, rc, "layer %d (whole-layer read)", layer);
            }
        }
        s->fl_layer[b] = layer;
    }
    s->c.io_wait_s += now_s() - t0;
    s->c.full_layers++;
    *out = s->fl_buf[b];
    int next = -1;
    for (int l = layer + 1; l < s->n_layers && next < 0; l++)
        if (s->m->layers[l].moe && full_applies(s, l)) next = l;
    if (next >= 0 && prefill) {
        fl_wait(s, 1 - b);
        fl_start(s, 1 - b, next);
    }
    return 0;
}

/* ---- dispatch ---------------------------------------------------------------- */

int stream_experts(e0_stream *s, int layer, const float *x, const e0_batch *b, const int32_t *idx,
                   float *w, int k, float *eo, e0_scratch *ws, char *err) {
    const int T = b->T;
    const bool decode = b->decode;
    const e0_layer_opts *lo = &s->o.layer;
    layer_state *L = &s->ls[layer];
    const int E = s->E, P = T * k;
    /* group (token, slot) pairs by expert: exps[i] owns pairs order[start[i] .. start[i+1]) */
    int32_t *count = ws->count, *order = ws->order, *exps = ws->exps, *start = ws->start;
    memset(count, 0, (size_t)E * sizeof *count);
    for (int p = 0; p < P; p++)
        count[idx[p]]++;
    int n = 0, off = 0;
    for (int e = 0; e < E; e++)
        if (count[e]) {
            exps[n] = e;
            start[n++] = off;
            off += count[e];
            count[e] = off - count[e]; /* becomes the fill cursor */
        }
    start[n] = off;
    for (int p = 0; p < P; p++)
        order[count[idx[p]]++] = p;
    /* Each expert's pairs are in token order, so those of one run are
     * consecutive: a run with K_PANEL_MIN_T pairs or more here is a call its
     * pass alone makes with the panel arithmetic. Those go first (npanel),
     * through ws->rpairs (free until the exact path's list below). Where
     * the experts' arithmetic does not depend on T (mat_matmul_t_free),
     * every pair of a run of K_PANEL_MIN_T tokens or more takes it: the
     * tokens [0, Tp), a prefix of each expert's list. */
    const e0_expert *x0 = &s->m->layers[layer].experts[0];
    const bool t_free = !decode && mat_matmul_t_free(&x0->gate) && mat_matmul_t_free(&x0->up) &&
                        mat_matmul_t_free(&x0->down);
    for (int i = 0; i < n; i++) {
        const int e = exps[i], a = start[i], z = start[i + 1];
        int np = 0;
        if (t_free) {
            while (a + np < z && order[a + np] / k < b->Tp)
                np++;
        } else if (!decode && z - a >= K_PANEL_MIN_T) {
            int *tmp = ws->rpairs, nt = 0;
            for (int q = a; q < z;) {
                const int r = batch_run_of(b, order[q] / k);
                const int end_t = b->run[r].t0 + b->run[r].n;
                int q1 = q;
                while (q1 < z && order[q1] / k < end_t)
                    q1++;
                if (q1 - q >= K_PANEL_MIN_T) {
                    for (int x2 = q; x2 < q1; x2++)
                        order[a + np++] = order[x2]; /* a + np <= x2: never overwrites unread */
                } else {
                    for (int x2 = q; x2 < q1; x2++)
                        tmp[nt++] = order[x2];
                }
                q = q1;
            }
            memcpy(order + a + np, tmp, (size_t)nt * sizeof *order);
        }
        s->npanel[e] = np;
    }

    for (int i = 0; i < n; i++)
        s->touched[(size_t)layer * (size_t)E + (size_t)exps[i]] = 1;
    e0_path path = s->o.path;
    if (path == E0_PATH_AUTO) {
        if (!decode)
            path = full_applies(s, layer) ? E0_PATH_FULL
                   : lo->prefill_hot > 0  ? E0_PATH_HOT
                                          : E0_PATH_EXACT;
        else
            path = lo->staged && k == lo->staged_trigger ? E0_PATH_STAGED
                   : lo->hot_per_layer > 0               ? E0_PATH_HOT
                                                         : E0_PATH_EXACT;
    }
    int rc = 0;
    /* experts no path serves go through exact: rest[0..nr) */
    int32_t *rest = ws->rest, *rstart = ws->rstart, *rpairs = ws->rpairs;
    int nrest = 0, rp = 0;
#define TO_EXACT(i)                                                                                \
    do {                                                                                           \
        rest[nrest] = exps[i];                                                                     \
        rstart[nrest++] = rp;                                                                      \
        for (int q = start[i]; q < start[(i) + 1]; q++)                                            \
            rpairs[rp++] = order[q];                                                               \
    } while (0)

    if (path == E0_PATH_FULL) {
        uint8_t *buf = NULL;
        if ((rc = layer_buffer(s, layer, !decode, &buf, err)) != 0) return rc;
        e0_expert *v = s->fl_views;
        for (int i = 0; i < n; i++)
            layer_views(s, layer, exps[i], buf, &v[exps[i]]);
        resident_experts(s, v, exps, start, n, order, x, k, eo, ws);
    } else if (path == E0_PATH_STAGED) {
        if (lo->staged_sync) {
            double t0 = now_s();
            bg_wait(&L->fill);
            s->c.io_wait_s += now_s() - t0;
        }
        for (int i = 0; i < n; i++) {
            int slot = -1;
            for (int j = 0; j < lo->staged_n && slot < 0; j++)
                if (atomic_load_explicit(&L->slot_ready[j], memory_order_acquire) &&
                    L->slot_exp[j] == exps[i])
                    slot = j;
            /* counted per routed (token, expert) pair */
            const uint64_t np = (uint64_t)(start[i + 1] - start[i]);
            s->c.routed_staged += np;
            if (in_set(L->asm_set, L->nasm, exps[i])) s->c.predicted_routed += np;
            if (slot >= 0) {
                e0_expert v;
                xb_views(plan_of(s, layer, exps[i]), L->slot_buf + (size_t)slot * s->bundle_bytes,
                         &v);
                run_expert(s, &v, x, order + start[i], start[i + 1] - start[i], k, s->npanel[exps[i]],
                           eo, ws);
                s->c.staged_hits += np;
            } else if (lo->staged_replace) { /* lossy, by request: the expert does not run */
                for (int q = start[i]; q < start[i + 1]; q++) {
                    w[order[q]] = 0.0f;
                    memset(eo + (size_t)order[q] * s->H, 0, (size_t)s->H * sizeof(float));
                }
                s->c.drops += np;
            } else {
                TO_EXACT(i);
                s->c.exact_fallbacks += np;
            }
        }
    } else if (path == E0_PATH_HOT) {
        int n_hot = !decode && lo->prefill_hot > 0 ? lo->prefill_hot
                    : lo->hot_per_layer > 0      ? lo->hot_per_layer
                                                 : 8;
        if (n_hot > s->hot_cap) n_hot = s->hot_cap;
        for (int i = 0; i < n; i++)
            L->usage[exps[i]] += (float)(start[i + 1] - start[i]);
        L->hot_stamp = ++s->hot_clock;
        if (!L->hot_buf || L->calls % lo->hot_update_interval == 0)
            if ((rc = hot_refresh(s, layer, n_hot, err)) != 0) return rc;
        L->calls++;
        for (int i = 0; i < n; i++) {
            int slot = -1;
            for (int j = 0; j < s->hot_cap && slot < 0; j++)
                if (L->hot_exp[j] == exps[i]) slot = j;
            if (slot >= 0) {
                e0_expert v;
                xb_views(plan_of(s, layer, exps[i]), L->hot_buf + (size_t)slot * s->bundle_bytes,
                         &v);
                run_expert(s, &v, x, order + start[i], start[i + 1] - start[i], k, s->npanel[exps[i]],
                           eo, ws);
                s->c.hot_hits += (uint64_t)(start[i + 1] - start[i]);
            } else {
                TO_EXACT(i);
                s->c.hot_misses += (uint64_t)(start[i + 1] - start[i]);
            }
        }
    } else {
        for (int i = 0; i < n; i++)
            TO_EXACT(i);
    }
#undef TO_EXACT
    rstart[nrest] = rp;
    /* guesses at the next layer's experts (decode: each sequence's; prefill:
     * the pass's union), while prefetch_cap allows (on the exact path every
     * routed expert is in rest, so exact_experts runs) */
    const bool spec = path == E0_PATH_EXACT && s->xc && lo->prefetch_cap > 0 &&
                      lo->prefetch_threads > 0;
    if (nrest)
        rc = exact_experts(s, layer, rest, rstart, nrest, rpairs, x, k, eo, ws, T, decode, spec,
                           err);
    if (rc) return rc;

    /* remember what each run's last token routed to (their union, in run
     * order: in decode every sequence's token), and stage ahead */
    L->nprev = 0;
    for (int r = 0; r < b->nrun; r++) {
        const int t = b->run[r].t0 + b->run[r].n - 1;
        for (int p = t * k; p < (t + 1) * k && L->nprev < 256; p++)
            if (!in_set(L->prev, L->nprev, idx[p])) L->prev[L->nprev++] = idx[p];
    }
    bool staging = s->o.path == E0_PATH_STAGED ||
                   (s->o.path == E0_PATH_AUTO && lo->staged && k == lo->staged_trigger);
    if (staging) {
        int next = -1;
        for (int l = layer + 1; l < s->n_layers && next < 0; l++)
            if (s->m->layers[l].moe) next = l;
        if (next >= 0) {
            predict(s, next, x + (size_t)(T - 1) * s->H);
            stage(s, next);
        } else if (s->first_moe >= 0) { /* step boundary: the first layer, from its last set */
            predict(s, s->first_moe, NULL);
            stage(s, s->first_moe);
        }
    }
    return 0;
}

/* ---- memory pressure ------------------------------------------------------------
 * Every 100 ms: when less than `low` (256 MiB or 1/32 of the budget) can
 * still be allocated without the kernel taking memory from someone
 * (mem_headroom: MemAvailable, and the limiting cgroup's limit less what it
 * holds other than file pages), enough cache slots go back to restore
 * 2 x low; when more than 4 x low is free and has been for 5 s, slots come
 * back up to the budget's. Another program taking memory mid-run then
 * shrinks the cache instead of driving the cgroup into the OOM killer. */
enum { PRESSURE_POLL_MS = 100, PRESSURE_GROW_AFTER_MS = 5000 };

static void *pressure_fn(void *arg) {
    e0_stream *s = arg;
    pressure_mon *pm = &s->pm;
    const int32_t full = xcache_slots(s->xc);
    const uint64_t B = s->bundle_bytes;
    uint64_t low = s->o.mem_budget / 32;
    if (low < (256ull << 20)) low = 256ull << 20;
    int calm_ms = 0;
    pthread_mutex_lock(&pm->mu);
    while (!pm->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += PRESSURE_POLL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&pm->cv, &pm->mu, &ts);
        if (pm->stop) break;
        pthread_mutex_unlock(&pm->mu);
        const uint64_t room = mem_headroom();
        const int32_t lim = xcache_limit(s->xc);
        if (room && room < low) {
            const int64_t give = (int64_t)((2 * low - room + B - 1) / B);
            xcache_set_limit(s->xc, lim - give > 0 ? (int32_t)(lim - give) : 0);
            atomic_fetch_add(&pm->shrinks, 1);
            calm_ms = 0;
        } else if (room > 4 * low && lim < full) {
            if ((calm_ms += PRESSURE_POLL_MS) >= PRESSURE_GROW_AFTER_MS) {
                const int64_t take = (int64_t)((room - 3 * low) / B);
                xcache_set_limit(s->xc, lim + take < full ? (int32_t)(lim + take) : full);
                atomic_fetch_add(&pm->grows, 1);
                calm_ms = 0;
            }
        } else {
            calm_ms = 0;
        }
        pthread_mutex_lock(&pm->mu);
    }
    pthread_mutex_unlock(&pm->mu);
    return NULL;
}

static void pressure_start(e0_stream *s) {
    pressure_mon *pm = &s->pm;
    pthread_mutex_init(&pm->mu, NULL);
    pthread_cond_init(&pm->cv, NULL);
    pm->running = pthread_create(&pm->th, NULL, pressure_fn, s) == 0; /* none: no shrinking */
}

static void pressure_stop(e0_stream *s) {
    pressure_mon *pm = &s->pm;
    if (!pm->running) return;
    pthread_mutex_lock(&pm->mu);
    pm->stop = true;
    pthread_cond_signal(&pm->cv);
    pthread_mutex_unlock(&pm->mu);
    pthread_join(pm->th, NULL);
    pthread_mutex_destroy(&pm->mu);
    pthread_cond_destroy(&pm->cv);
    pm->running = false;
}

void stream_pressure(const e0_stream *s, int32_t *limit, uint64_t *shrinks, uint64_t *grows) {
    *limit = s->xc ? xcache_limit(s->xc) : 0;
    *shrinks = atomic_load(&((e0_stream *)s)->pm.shrinks);
    *grows = atomic_load(&((e0_stream *)s)->pm.grows);
}

/* ---- setup ------------------------------------------------------------------ */

static int build_plans(e0_stream *s, char *err) {
    const e0_model *m = s->m;
    s->bundle_bytes = 0;
    s->bundle_data = 0;
    for (int l = 0; l < s->n_layers; l++) {
        if (!m->layers[l].moe) continue;
        for (int e = 0; e < s->E; e++) {
            xb_plan *p = &s->plans[(size_t)l * (size_t)s->E + (size_t)e];
            int rc = xb_plan_expert(m, l, e, s->order, p, err);
            if (rc) return e0_wrap(err, rc, "layer %d expert %d", l, e);
            if (p->bytes > s->bundle_bytes) s->bundle_bytes = p->bytes;
            if (p->data > s->bundle_data) s->bundle_data = p->data;
        }
        /* whole-layer layout: contiguous iff every range index is a stride over experts */
        layer_state *L = &s->ls[l];
        const xb_plan *p0 = plan_of(s, l, 0);
        L->contiguous = true;
        for (int i = 0; i < p0->nr && L->contiguous; i++)
            for (int e = 1; e < s->E && L->contiguous; e++) {
                const xb_range *a = &plan_of(s, l, e - 1)->r[i], *b = &plan_of(s, l, e)->r[i];
                L->contiguous = b->file == a->file && b->off == a->off + a->len;
            }
        size_t at = 0; /* regions laid out as bundle ranges are: aligned spans */
        for (int i = 0; i < p0->nr; i++) {
            const size_t head = (size_t)(p0->r[i].off % XB_ALIGN);
            L->reg[i] = at + head;
            L->base[i] = p0->r[i].off;
            at += (head + (size_t)p0->r[i].len * (size_t)s->E + XB_ALIGN - 1) &
                  ~(size_t)(XB_ALIGN - 1);
        }
        L->layer_bytes = L->contiguous ? at : 0; /* non-contiguous: E bundles, sized below */
    }
    for (int l = 0; l < s->n_layers; l++)
        if (m->layers[l].moe && !s->ls[l].contiguous)
            s->ls[l].layer_bytes = (size_t)s->E * s->bundle_bytes;
    return 0;
}

void stream_debug_order(e0_stream *s, xb_order order) {
    s->order = order;
    char err[E0_ERR_MAX];
    build_plans(s, err);
}

int stream_new(e0_stream **out, const e0_model *m, const e0_engine_opts *o, char *err) {
    *out = NULL;
    e0_stream *s = calloc(1, sizeof *s);
    if (!s) return e0_fail(err, E0_ENOMEM, "out of memory");
    const e0_config *c = &m->cfg;
    const e0_layer_opts *lo = &o->layer;
    s->m = m;
    s->o = *o;
    s->n_layers = c->n_layers;
    s->E = c->n_experts;
    s->H = c->hidden;
    s->first_moe = s->last_moe = -1;
    s->direct = o->mem_budget > 0;

    s->fl_layer[0] = s->fl_layer[1] = -1;
    pthread_mutex_init(&s->err_mu, NULL);
    int rc = 0;
    if (lo->staged_n > 256) return e0_fail(err, E0_EINVAL, "staged_n %d exceeds 256", lo->staged_n);
    s->plans = calloc((size_t)s->n_layers * (size_t)s->E, sizeof *s->plans);
    s->ls = calloc((size_t)s->n_layers, sizeof *s->ls);
    s->ld = calloc((size_t)s->E, sizeof *s->ld);
    s->touched = calloc((size_t)s->n_layers * (size_t)s->E, 1);
    s->spec_pending = calloc((size_t)s->n_layers * (size_t)s->E, 1);
    s->spec_hi = true; /* until a window says otherwise */
    s->npanel = calloc((size_t)s->E, sizeof *s->npanel);
    if (!s->plans || !s->ls || !s->ld || !s->touched || !s->spec_pending || !s->npanel) goto oom;
    s->hot_cap = lo->hot_per_layer > lo->prefill_hot ? lo->hot_per_layer : lo->prefill_hot;
    if (s->hot_cap == 0 && o->path == E0_PATH_HOT) s->hot_cap = 8;
    if (s->hot_cap > s->E) s->hot_cap = s->E;
    if (s->hot_cap > 256) s->hot_cap = 256;
    for (int l = 0; l < s->n_layers; l++) {
        if (!m->layers[l].moe) continue;
        if (s->first_moe < 0) s->first_moe = l;
        s->last_moe = l;
        layer_state *L = &s->ls[l];
        int sn = lo->staged_n;
        L->slot_exp = malloc((size_t)sn * sizeof *L->slot_exp);
        L->slot_target = malloc((size_t)sn * sizeof *L->slot_target);
        L->slot_ready = calloc((size_t)sn, sizeof *L->slot_ready);
        L->pred = calloc(256, sizeof *L->pred);
        L->prev = calloc(256, sizeof *L->prev);
        L->asm_set = calloc(256, sizeof *L->asm_set);
        L->forced = calloc(256, sizeof *L->forced);
        L->nforced = -1;
        L->usage = calloc((size_t)s->E, sizeof *L->usage);
        L->hot_exp = malloc((size_t)(s->hot_cap ? s->hot_cap : 1) * sizeof *L->hot_exp);
        L->reg = calloc(XB_MAX_RANGES, sizeof *L->reg);
        L->base = calloc(XB_MAX_RANGES, sizeof *L->base);
        if (!L->slot_exp || !L->slot_target || !L->slot_ready || !L->pred || !L->prev ||
            !L->asm_set || !L->forced || !L->usage || !L->hot_exp || !L->reg || !L->base)
            goto oom;
        for (int i = 0; i < sn; i++)
            L->slot_exp[i] = L->slot_target[i] = -1;
        for (int i = 0; i < s->hot_cap; i++)
            L->hot_exp[i] = -1;
        L->nasm = -1;
        L->fill.s = s;
        L->fill.layer = l;
    }
    if (s->first_moe < 0) {
        *out = s;
        return 0;
    }
    if ((rc = build_plans(s, err)) != 0) goto fail;
    s->overflow = aligned_alloc(XB_ALIGN, s->bundle_bytes);
    if (!s->overflow) goto oom;
    bool staged_on = lo->staged || o->path == E0_PATH_STAGED;
    for (int l = 0; staged_on && l < s->n_layers; l++)
        if (m->layers[l].moe &&
            !(s->ls[l].slot_buf = e0_big_alloc((size_t)lo->staged_n * s->bundle_bytes)))
            goto oom;
    if (lo->full_layer_prefill || o->path == E0_PATH_FULL) {
        for (int l = 0; l < s->n_layers; l++)
            if (s->ls[l].layer_bytes > s->fl_bytes) s->fl_bytes = s->ls[l].layer_bytes;
        for (int b = 0; b < 2; b++) {
            for (int p = 0; p < FL_PARTS; p++)
                s->fl_job[b][p].s = s;
            if (!(s->fl_buf[b] = e0_big_alloc(s->fl_bytes))) goto oom;
        }
        if (!(s->fl_views = calloc((size_t)s->E, sizeof *s->fl_views))) goto oom;
    }
    if (o->io == E0_IO_PREAD && lo->cache_slots > 0 &&
        ((rc = xcache_new(&s->xc, lo->cache_slots, s->bundle_bytes, s->n_layers, s->E, err)) != 0 ||
         (rc = xcache_set_policy(s->xc, lo->cache_policy,
                                 lo->cache_policy == E0_CACHE_ROUTER
                                     ? (double)lo->router_half_life
                                     : (double)lo->cache_half_life * lo->cache_slots,
                                 err)) != 0))
        goto fail;
    if ((rc = iopool_new(&s->load, lo->load_threads, err)) != 0 ||
        (rc = iopool_new(&s->pre, lo->prefetch_threads, err)) != 0)
        goto fail;
    if (s->xc && o->mem_budget) pressure_start(s);
    *out = s;
    return 0;
oom:
    rc = e0_fail(err, E0_ENOMEM, "out of memory setting up the expert stream");
fail:
    stream_free(s);
    return rc;
}

void stream_free(e0_stream *s) {
    if (!s) return;
    pressure_stop(s);
    if (s->pre) iopool_free(s->pre); /* finishes fills and layer reads first */
    if (s->load) iopool_free(s->load);
    xcache_free(s->xc);
    if (s->ls)
        for (int l = 0; l < s->n_layers; l++) {
            layer_state *L = &s->ls[l];
            free(L->slot_exp);
            free(L->slot_target);
            free(L->slot_ready);
            free(L->slot_buf);
            free(L->pred);
            free(L->prev);
            free(L->asm_set);
            free(L->forced);
            free(L->usage);
            free(L->hot_exp);
            free(L->hot_buf);
            free(L->reg);
            free(L->base);
        }
    free(s->ls);
    free(s->plans);
    free(s->overflow);
    free(s->tw);
    free(s->fl_buf[0]);
    free(s->fl_buf[1]);
    free(s->fl_views);
    free(s->npanel);
    free(s->ld);
    free(s->touched);
    free(s->spec_pending);
    pthread_mutex_destroy(&s->err_mu);
    free(s);
}

void stream_counters_get(e0_stream *s, stream_counters *c) {
    *c = s->c;
    c->bytes_read = atomic_load(&s->bytes_read);
}

void stream_counters_reset(e0_stream *s) {
    memset(&s->c, 0, sizeof s->c);
    memset(s->touched, 0, (size_t)s->n_layers * (size_t)s->E);
    atomic_store(&s->bytes_read, 0);
    if (s->xc) xcache_reset_stats(s->xc);
}

int stream_distinct_experts(const e0_stream *s, int layer) {
    int n = 0;
    for (int e = 0; e < s->E; e++)
        n += s->touched[(size_t)layer * (size_t)s->E + (size_t)e];
    return n;
}

void stream_layer_stats(e0_stream *s, int layer, uint64_t *hits, uint64_t *misses) {
    *hits = *misses = 0;
    if (s->xc) xcache_layer_stats(s->xc, layer, hits, misses);
}

int32_t stream_cache_slots(const e0_stream *s) {
    return s->xc ? xcache_slots(s->xc) : 0;
}
int stream_trace_start(e0_stream *s, size_t cap, size_t obs_floats, char *err) {
    if (!s->xc)
        return e0_fail(err, E0_EUNSUPPORTED,
                       "no expert cache to trace: it needs pread I/O (--io pread or --mem-budget) "
                       "and cache_slots > 0");
    return xcache_trace_start(s->xc, cap, obs_floats, err);
}

void stream_trace_obs(e0_stream *s, cachesim_obs *out) {
    memset(out, 0, sizeof *out);
    if (s->xc) xcache_trace_obs(s->xc, out);
}

void stream_observe(e0_stream *s, int layer, const float *logits, int T) {
    if (s->xc) xcache_observe(s->xc, layer, logits, T);
}

const uint32_t *stream_trace(e0_stream *s, size_t *n, uint64_t *dropped) {
    *n = 0;
    if (dropped) *dropped = 0;
    return s->xc ? xcache_trace(s->xc, n, dropped) : NULL;
}

size_t stream_bundle_bytes(const e0_stream *s) {
    return (size_t)s->bundle_data;
}

void stream_debug_predict(e0_stream *s, int layer, const int32_t *experts, int n) {
    layer_state *L = &s->ls[layer];
    L->nforced = n < s->o.layer.staged_n ? n : s->o.layer.staged_n;
    memcpy(L->forced, experts, (size_t)L->nforced * sizeof *experts);
    predict(s, layer, NULL);
    stage(s, layer);
    bg_wait(&L->fill);
}
