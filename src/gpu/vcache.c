/* The VRAM expert cache (gpu/gmodel.h): the routed experts of every layer
 * in one pool of slots, evicted by the CPU cache's policy, filled from the
 * checkpoint's pages when a MoE call routes to an expert not in it.
 *
 * A slot holds one expert's gate, up and down, each as its layer's format
 * lays it out (weights, then mlx scales and biases, 256-byte aligned), so a
 * layer's xg / xu / xd are stacked matrices over the pool whose "expert"
 * stride is the slot: the expert kernels, given slots for experts, read a
 * cached expert exactly as they read the all-resident stack, and the
 * logits are bit-identical.
 *
 * The device decides the routing; the host decides what the pool holds. A
 * MoE call therefore reads its active experts back (one wait a layer: the
 * price of a budget below the model), copies in the missing ones in stream
 * order (the driver stages pageable pages), and writes the slots back. A
 * call may need every expert of its layer at once (prefill), so the pool
 * has at least E slots and a slot the current call uses is never the one
 * given up: the call's slots are stamped with it before any miss is
 * served, and a victim is never a stamped slot (fewer than n_slots experts
 * are ever looked up in one call). Which unstamped slot goes is the
 * policy's (vcache_set_policy): the least recently used, or the lowest
 * score of the CPU cache's LFU, router or recent policies among the
 * least recently used few.
 */
#include "gpu/gmodel.h"

#include "util/clock.h"
#include "util/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Slots a scoring policy looks at for each victim, from the least
 * recently used on: a miss costs a copy of ~30 us, so the scan must cost
 * far less (64 scores: ~1 us). */
enum { VICTIM_WINDOW = 64 };

/* Lays the three matrices of layer li's experts out in a slot from offset
 * 0: their device form in *xg / *xu / *xd (w, s, b as offsets), and the
 * slot bytes they take. */
static int slot_layout(const e0_layer *ly, gpu_mat *xg, gpu_mat *xu, gpu_mat *xd, uint64_t *bytes,
                       char *err) {
    const e0_expert *x = &ly->experts[0];
    const e0_mat *ms[3] = {&x->gate, &x->up, &x->down};
    gpu_mat *gs[3] = {xg, xu, xd};
    uint64_t at = 0;
    for (int i = 0; i < 3; i++) {
        uint64_t wb, sb;
        int rc = gpu_mat_shape(ms[i], gs[i], &wb, &sb, err);
        if (rc) return rc;
        gs[i]->w = at;
        at += wb;
        if (sb) {
            gs[i]->s = at;
            gs[i]->b = at + sb;
            at += 2 * sb;
        }
    }
    *bytes = at;
    return 0;
}

int vcache_new(gpu_model *g, int n_slots, char *err) {
    const e0_model *m = g->m;
    const e0_config *c = &m->cfg;
    const int E = c->n_experts;
    if (n_slots < E)
        return e0_fail(err, E0_EINVAL, "a VRAM expert cache of %d slots (a MoE call may need all %d experts)",
                       n_slots, E);
    gpu_vcache *x = calloc(1, sizeof *x);
    if (!x) return e0_fail(err, E0_ENOMEM, "out of memory");
    g->vc = x;
    x->n_slots = n_slots;
    x->E = E;
    x->n_layers = c->n_layers;
    int rc = 0;
    for (int li = 0; !rc && li < c->n_layers; li++) {
        const e0_layer *ly = &m->layers[li];
        if (!ly->moe || !ly->experts) continue;
        uint64_t b = 0;
        gpu_layer *gl = &g->L[li];
        rc = slot_layout(ly, &gl->xg, &gl->xu, &gl->xd, &b, err);
        if (rc) rc = e0_wrap(err, rc, "layer %d experts", li);
        if (b > x->slot_bytes) x->slot_bytes = b;
    }
    const size_t keys = (size_t)c->n_layers * (size_t)E;
    x->key_of = malloc((size_t)n_slots * sizeof *x->key_of);
    x->slot_of = malloc(keys * sizeof *x->slot_of);
    x->prev = malloc((size_t)n_slots * sizeof *x->prev);
    x->next = malloc((size_t)n_slots * sizeof *x->next);
    x->hx = malloc(5 * (size_t)E * sizeof *x->hx); /* active experts, their slots; misses (miss_scratch) */
    x->views = malloc((size_t)E * sizeof *x->views);
    x->guess = calloc((size_t)(g->top_k > 0 ? g->top_k : 1), sizeof *x->guess);
    x->fetched = calloc((size_t)n_slots, sizeof *x->fetched);
    x->lhits = calloc((size_t)c->n_layers, sizeof *x->lhits);
    x->lmisses = calloc((size_t)c->n_layers, sizeof *x->lmisses);
    x->stamp = calloc((size_t)n_slots, sizeof *x->stamp);
    x->guess_layer = -1;
    /* on by default: the 35B shape at 8 GiB decoded 64.9 tok/s with it, 56.5 without (session 36,
     * H100); $E0_GPU_PREFETCH=0 turns it off for experiments */
    const char *pv = getenv("E0_GPU_PREFETCH");
    x->prefetch = !(pv && *pv == '0');
    if (!rc && (!x->key_of || !x->slot_of || !x->prev || !x->next || !x->hx || !x->views || !x->guess ||
                !x->fetched || !x->lhits || !x->lmisses || !x->stamp))
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
    /* without pinned memory each readback waits by itself: slower, the same results */
    if (!rc && gpu_host_alloc(g->d, (void **)&x->rb, (3 * (size_t)E + 1 + (size_t)g->top_k) * sizeof *x->rb,
                              "the routing read back", err))
        x->rb = NULL, err[0] = 0;
    if (!rc) rc = gpu_alloc(g->d, &x->pool, x->slot_bytes * (uint64_t)n_slots, "the VRAM expert cache", err);
    if (!rc) rc = gpu_alloc(g->d, &x->dslots, (size_t)E * sizeof(int32_t), "the VRAM expert cache", err);
    if (!rc) rc = gpu_alloc(g->d, &x->dtab, keys * sizeof(int32_t), "the VRAM cache's slot table", err);
    if (rc) return rc; /* gpu_model_free frees the rest */
    for (size_t k = 0; k < keys; k++) x->slot_of[k] = -1;
    for (int i = 0; i < n_slots; i++) {
        x->key_of[i] = -1;
        x->prev[i] = i - 1;
        x->next[i] = i + 1 < n_slots ? i + 1 : -1;
    }
    x->head = 0;
    x->tail = n_slots - 1;
    for (int li = 0; li < c->n_layers; li++) { /* offsets become addresses in the pool */
        gpu_layer *gl = &g->L[li];
        if (!m->layers[li].moe || !m->layers[li].experts) continue;
        gpu_mat *gs[3] = {&gl->xg, &gl->xu, &gl->xd};
        for (int i = 0; i < 3; i++) {
            gs[i]->w += x->pool;
            if (gs[i]->srow_bytes) gs[i]->s += x->pool, gs[i]->b += x->pool;
            gs[i]->estride = gs[i]->sstride = (int64_t)x->slot_bytes;
        }
    }
    return 0;
}

static size_t keys_bytes(const gpu_vcache *x) { return (size_t)x->n_layers * (size_t)x->E * sizeof(int32_t); }
static size_t stage_bytes(const gpu_vcache *x) { return (size_t)x->n_layers * (size_t)x->k * sizeof(int32_t); }

static void unpin(gpu_model *g) {
    gpu_vcache *x = g->vc;
    for (int i = 0; i < x->n_pin; i++) g->d->cu->MemHostUnregister(x->pin[i]);
    free(x->pin), free(x->pin_len);
    x->pin = NULL, x->pin_len = NULL, x->n_pin = 0, x->pinned = 0;
}

typedef struct {
    uintptr_t lo, hi;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The bytes of expert matrix m (weights, scales, biases) as page spans. */
static int mat_spans(const e0_mat *m, span *v, uintptr_t pg) {
    const void *p[3] = {m->w, m->type == E0_W_QAFF ? m->scales : NULL, m->type == E0_W_QAFF ? m->biases : NULL};
    const uint64_t n[3] = {(uint64_t)mat_row_bytes(m) * (uint64_t)m->rows,
                           (uint64_t)mat_srow_bytes(m) * (uint64_t)m->rows, (uint64_t)mat_srow_bytes(m) * (uint64_t)m->rows};
    int k = 0;
    for (int i = 0; i < 3; i++)
        if (p[i] && n[i]) {
            v[k].lo = (uintptr_t)p[i] & ~(pg - 1);
            v[k].hi = ((uintptr_t)p[i] + n[i] + pg - 1) & ~(pg - 1);
            k++;
        }
    return k;
}

int vcache_pin_host(gpu_model *g, char *err) {
    gpu_vcache *x = g->vc;
    const e0_model *m = g->m;
    const e0_config *c = &m->cfg;
    if (!x || x->n_pin) return 0;
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const size_t cap = (size_t)c->n_layers * (size_t)x->E * 9;
    span *v = malloc(cap * sizeof *v);
    if (!v) return e0_fail(err, E0_ENOMEM, "out of memory");
    size_t n = 0;
    for (int li = 0; li < c->n_layers; li++) {
        const e0_layer *ly = &m->layers[li];
        if (!ly->moe || !ly->experts) continue;
        for (int e = 0; e < x->E; e++) {
            n += (size_t)mat_spans(&ly->experts[e].gate, v + n, pg);
            n += (size_t)mat_spans(&ly->experts[e].up, v + n, pg);
            n += (size_t)mat_spans(&ly->experts[e].down, v + n, pg);
        }
    }
    qsort(v, n, sizeof *v, span_cmp);
    size_t k = 0; /* merged in place: spans that touch or overlap are one */
    for (size_t i = 0; i < n; i++) {
        if (k && v[i].lo <= v[k - 1].hi) {
            if (v[i].hi > v[k - 1].hi) v[k - 1].hi = v[i].hi;
        } else {
            v[k++] = v[i];
        }
    }
    x->pin = calloc(k ? k : 1, sizeof *x->pin);
    x->pin_len = calloc(k ? k : 1, sizeof *x->pin_len);
    int rc = x->pin && x->pin_len ? 0 : e0_fail(err, E0_ENOMEM, "out of memory");
    for (size_t i = 0; !rc && i < k; i++) {
        void *p = (void *)v[i].lo;
        const size_t len = (size_t)(v[i].hi - v[i].lo);
        const CUresult r = g->d->cu->MemHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_READ_ONLY |
                                                           CU_MEMHOSTREGISTER_DEVICEMAP);
        if (r != CU_SUCCESS) {
            char why[128];
            rc = e0_fail(err, E0_EIO, "pinning %.1f MiB of the checkpoint's experts for the GPU: %s",
                         (double)len / 1048576.0, cu_errstr(r, why, sizeof why));
            break;
        }
        x->pin[x->n_pin] = p;
        x->pin_len[x->n_pin++] = len;
        x->pinned += len;
    }
    free(v);
    if (rc) unpin(g);
    return rc;
}

void vcache_free(gpu_model *g) {
    gpu_vcache *x = g->vc;
    if (!x) return;
    if (x->guess_pending) g->d->cu->StreamSynchronize(g->d->cs); /* a guess's copies into the pool */
    hcache_free(g);
    hostmiss_free(g);
    unpin(g);
    gpu_free(g->d, x->pool, x->slot_bytes * (uint64_t)x->n_slots);
    gpu_free(g->d, x->dslots, (size_t)x->E * sizeof(int32_t));
    if (x->dtab) gpu_free(g->d, x->dtab, keys_bytes(x));
    if (x->dused) gpu_free(g->d, x->dused, keys_bytes(x));
    if (x->dstage) gpu_free(g->d, x->dstage, stage_bytes(x));
    if (x->dlog) gpu_free(g->d, x->dlog, stage_bytes(x));
    gpu_host_free(g->d, x->rb);
    xpolicy_free(&x->pol);
    free(x->rl), free(x->stamp);
    free(x->key_of), free(x->slot_of), free(x->prev), free(x->next), free(x->hx), free(x->views);
    free(x->hused), free(x->stage), free(x->hlog), free(x->guess), free(x->fetched), free(x->lhits), free(x->lmisses);
    free(x);
    g->vc = NULL;
}

/* Slot i to the head of the list (the latest used). */
static void touch(gpu_vcache *x, int i) {
    if (x->head == i) return;
    const int p = x->prev[i], n = x->next[i];
    x->next[p] = n; /* i is not the head: p >= 0 */
    if (n >= 0) x->prev[n] = p;
    else x->tail = p;
    x->prev[i] = -1;
    x->next[i] = x->head;
    x->prev[x->head] = i;
    x->head = i;
}

/* Device bytes of layer li's expert: a slot's worth, what a miss brings in (every expert of a layer alike). */
static uint64_t expert_bytes(const gpu_model *g, int li) {
    const e0_expert *x = &g->m->layers[li].experts[0];
    return gpu_mat_bytes(&x->gate) + gpu_mat_bytes(&x->up) + gpu_mat_bytes(&x->down);
}

/* A lookup of layer li's counted as a hit or a miss, in all and for the
 * layer (--stats' per-layer figures). */
static void count(gpu_vcache *x, int li, bool hit) {
    if (hit) x->hits++, x->lhits[li]++;
    else x->misses++, x->lmisses[li]++;
}

/* A call's misses in x->hx past its active experts and their slots: the
 * experts, the slots they get, and what those slots held. */
static void miss_scratch(gpu_vcache *x, int32_t **es, int32_t **slot, int32_t **old) {
    *es = x->hx + 2 * x->E, *slot = x->hx + 3 * x->E, *old = x->hx + 4 * x->E;
}

/* The slot a miss or a guess of this call takes: one the call has not
 * stamped, from the least recently used on; LRU the first, a scoring
 * policy the lowest score of the first VICTIM_WINDOW (an empty slot at
 * once; the least recently used on ties). Some slot is always unstamped:
 * a call stamps fewer than n_slots. */
static int victim(const gpu_vcache *x) {
    const int window = x->pol.policy == E0_CACHE_LRU ? 1 : VICTIM_WINDOW;
    int best = -1, seen = 0;
    double low = INFINITY;
    for (int i = x->tail; i >= 0 && seen < window; i = x->prev[i]) {
        if (x->stamp[i] == x->call) continue;
        if (x->key_of[i] < 0 || window == 1) return i;
        seen++;
        const double sc = xpolicy_score(&x->pol, (size_t)x->key_of[i]);
        if (best < 0 || sc < low) low = sc, best = i;
    }
    return best;
}

/* Slot i given up by whatever it held, for an expert that put copies in
 * (until then it holds nothing); what it held, or -1. */
static int claim(gpu_vcache *x, int i) {
    const int old = x->key_of[i];
    x->fetched[i] = 0;
    if (old >= 0) x->slot_of[old] = -1;
    x->key_of[i] = -1;
    x->tab_dirty = true; /* the device's table changes whether the copy fails or not */
    return old;
}

/* Experts es[0..n) of layer li copied into slots sl[0..n) (claimed; they
 * held keys old[0..n), or -1), on the stream or on the copy stream: from
 * the host's expert cache where there is one (the slots' old experts go
 * back into it, as a prefill's rule says where `whole`: vcache_layer_in),
 * else from the checkpoint's mapping. */
static int put(gpu_model *g, int li, const int32_t *es, const int32_t *sl, const int32_t *old, int n,
               bool copy_stream, bool whole, char *err) {
    gpu_vcache *x = g->vc;
    if (!n) return 0;
    e0_expert *view = x->hc ? x->views : NULL;
    int rc = 0;
    if (view) {
        rc = hcache_begin(g, n, err);
        for (int j = 0; !rc && j < n; j++)
            if (old[j] >= 0) rc = hcache_keep(g, old[j] / x->E, old[j] % x->E, sl[j], copy_stream, whole, err);
        if (!rc) rc = hcache_get(g, li, es, old, n, whole, view, err);
    }
    const gpu_layer *gl = &g->L[li];
    for (int j = 0; !rc && j < n; j++) {
        const e0_expert *ex = view ? &view[j] : &g->m->layers[li].experts[es[j]];
        rc = gpu_mat_put(g->d, &gl->xg, sl[j], &ex->gate, copy_stream, err);
        if (!rc) rc = gpu_mat_put(g->d, &gl->xu, sl[j], &ex->up, copy_stream, err);
        if (!rc) rc = gpu_mat_put(g->d, &gl->xd, sl[j], &ex->down, copy_stream, err);
        if (rc) break;
        const int key = li * x->E + es[j];
        x->key_of[sl[j]] = key;
        x->slot_of[key] = sl[j];
        x->bytes_in += expert_bytes(g, li);
    }
    if (!rc && view) rc = hcache_mark(g, copy_stream, err);
    return rc;
}

int vcache_map(gpu_model *g, int li, CUdeviceptr nact, CUdeviceptr exps, CUdeviceptr guess, int guess_layer,
               CUdeviceptr in, CUdeviceptr ridx, CUdeviceptr rl, int T, char *err) {
    gpu_vcache *x = g->vc;
    const double t0 = now_s();
    int32_t n = 0;
    x->guess_layer = -1;
    /* the router logits, for the router and recent policies' counts: a decode call's into the pinned
     * readback, a prefill's into host memory of their own */
    const bool obs = xpolicy_wants_logits(&x->pol) && rl && T > 0;
    float *rlh = obs && T == 1 && x->rb ? (float *)(x->rb + 2 * x->E + 1 + g->top_k) : x->rl;
    if (obs && rlh == x->rl && T > x->rl_rows) {
        float *r = realloc(x->rl, (size_t)T * (size_t)x->E * sizeof *r);
        if (!r) return e0_fail(err, E0_ENOMEM, "out of memory for the router logits");
        x->rl = rlh = r, x->rl_rows = T;
    }
    /* the count, all E entries (those past it unread), the guess and, where the policy reads them, the
     * router logits: into the pinned buffer, one round trip; else straight where they go, one wait
     * each (gpu_get_n) */
    int32_t *rb = x->rb;
    void *dst[4] = {rb ? rb : &n, rb ? rb + 1 : x->hx, rb ? rb + 1 + x->E : x->guess, rlh};
    const CUdeviceptr src[4] = {nact, exps, guess, rl};
    const size_t bytes[4] = {sizeof n, (size_t)x->E * sizeof *x->hx, guess ? (size_t)g->top_k * sizeof *x->guess : 0,
                             obs ? (size_t)T * (size_t)x->E * sizeof(float) : 0};
    int rc = gpu_get_n(g->d, 4, dst, src, bytes, err);
    if (!rc && rb) n = rb[0];
    if (!rc && (n < 0 || n > x->E)) rc = e0_fail(err, E0_EIO, "layer %d: %d active experts read back", li, n);
    if (!rc && rb) memcpy(x->hx, rb + 1, (size_t)n * sizeof *x->hx);
    if (!rc && rb && guess) memcpy(x->guess, rb + 1 + x->E, (size_t)g->top_k * sizeof *x->guess);
    if (!rc && obs) xpolicy_observe(&x->pol, li, rlh, T);
    if (!rc && guess) x->guess_layer = guess_layer;
    const bool host = x->hm && in;
    if (!rc && host) rc = hostmiss_read(g, li, in, ridx, err);
    if (!rc && x->guess_pending) { /* the last guess's copies, before this call's kernels read its slots */
        rc = gpu_wait_copy_mark(g->d, 0, err);
        x->guess_pending = false;
    }
    const double t1 = now_s();
    x->wait_s += t1 - t0;
    int32_t *slots = x->hx + x->E, *mexp, *mslot, *mold;
    miss_scratch(x, &mexp, &mslot, &mold);
    int nm = 0;
    x->call++; /* this call's slots first, so that no miss takes one */
    for (int a = 0; !rc && a < n; a++) {
        const int e = x->hx[a];
        if (e < 0 || e >= x->E) {
            rc = e0_fail(err, E0_EIO, "layer %d: expert %d read back", li, e);
            break;
        }
        if (x->slot_of[li * x->E + e] >= 0) x->stamp[x->slot_of[li * x->E + e]] = x->call;
    }
    for (int a = 0; !rc && a < n; a++) {
        const int e = x->hx[a];
        xpolicy_request(&x->pol, (size_t)li * (size_t)x->E + (size_t)e, true);
        int i = x->slot_of[li * x->E + e];
        if (i >= 0) {
            count(x, li, true);
            if (x->fetched[i]) x->prefetch_used++, x->win_used++, x->fetched[i] = 0;
        } else {
            count(x, li, false);
            if (host && hostmiss_take(g, li, e, err, &rc)) { /* not admitted: the host computes it */
                slots[a] = -1;
                continue;
            }
            if (rc) break;
            if ((i = victim(x)) < 0) { /* a call stamps fewer than n_slots: not reached */
                rc = e0_fail(err, E0_EIO, "layer %d: no slot of the VRAM cache for expert %d", li, e);
                break;
            }
            mold[nm] = claim(x, i);
            mexp[nm] = e, mslot[nm++] = i;
            x->stamp[i] = x->call;
        }
        touch(x, i);
        slots[a] = i;
    }
    if (!rc) rc = put(g, li, mexp, mslot, mold, nm, false, false, err);
    if (!rc && x->rb) { /* from pinned memory the copy is queued, not staged; the next call writes
                           * there only after its readback, which the stream orders after this copy */
        int32_t *ps = x->rb + 1 + x->E + g->top_k; /* the logits lie past its E */
        memcpy(ps, slots, (size_t)n * sizeof *slots);
        slots = ps;
    }
    if (!rc) rc = gpu_put(g->d, x->dslots, slots, (size_t)n * sizeof *slots, err);
    x->copy_s += now_s() - t1;
    return rc;
}

int vcache_set_policy(gpu_model *g, int policy, double cache_half_life, double router_half_life, char *err) {
    gpu_vcache *x = g->vc;
    /* as stream/setup.c gives the CPU cache its half-life: LFU's in requests, the others' in steps */
    const double h = policy == E0_CACHE_LFU ? cache_half_life * x->n_slots : router_half_life;
    return xpolicy_set(&x->pol, policy, h, x->n_layers, x->E, "the VRAM cache", err);
}

bool vcache_guess_now(gpu_model *g) {
    gpu_vcache *x = g->vc;
    if (!x->prefetch) return false;
    if (x->win_fetched >= 128) { /* a window's verdict: the uses lag a call behind, near enough */
        x->sparse = 4 * x->win_used < x->win_fetched;
        x->win_fetched = x->win_used = 0;
    }
    return !x->sparse || x->calls++ % 32 == 0;
}

int vcache_prefetch(gpu_model *g, char *err) {
    gpu_vcache *x = g->vc;
    const int gl = x->guess_layer;
    x->guess_layer = -1;
    if (gl < 0) return 0;
    int32_t *mexp, *mslot, *mold; /* the call's scratch: vcache_map is done with it */
    miss_scratch(x, &mexp, &mslot, &mold);
    int nm = 0;
    for (int j = 0; j < g->top_k; j++) {
        const int e = x->guess[j];
        if (e < 0 || e >= x->E) continue; /* read back from the device: checked */
        int i = x->slot_of[gl * x->E + e];
        if (i >= 0) { /* held: kept out of the victims' way until its layer comes */
            touch(x, i);
            continue;
        }
        /* the victim is no slot of the layer in flight (vcache_map stamped those), and the work
         * before it is done (vcache_map waited for the routing): the copy may start now */
        if ((i = victim(x)) < 0) break;
        mold[nm] = claim(x, i);
        touch(x, i);
        x->stamp[i] = x->call;
        xpolicy_request(&x->pol, (size_t)gl * (size_t)x->E + (size_t)e, false); /* a prefetch that loads */
        mexp[nm] = e, mslot[nm++] = i;
    }
    if (!nm) return 0;
    int rc = put(g, gl, mexp, mslot, mold, nm, true, false, err);
    if (!rc) rc = gpu_copy_mark(g->d, 0, err);
    if (rc) return rc;
    for (int j = 0; j < nm; j++) x->fetched[mslot[j]] = 1;
    x->prefetched += (uint64_t)nm;
    x->win_fetched += (uint32_t)nm;
    x->guess_pending = true;
    return 0;
}

/* ---- whole-layer prefill ----------------------------------------------------
 * A prefill's batch routes to nearly every expert of each layer (T * k
 * pairs over E experts: at 2E pairs 86% of them under uniform routing), so
 * instead of reading each MoE call's routing back and copying its misses
 * while the device waits, the host brings a layer's every expert in on the
 * copy stream while the device computes the layers before (gmodel.c,
 * layers), and the grouping kernel takes each expert's slot from the
 * device's table. A layer's slots are the list's latest once it is brought
 * in; the next layer's victims are then never the slots of the layer being
 * computed, as long as the list holds 2E slots (vcache_whole_ok), and the
 * copy stream waits for the layers before to finish with theirs. */

static int listed(const gpu_vcache *x) { return x->n_slots - (x->staged ? x->n_layers * x->k : 0); }

bool vcache_whole_ok(const gpu_model *g, int T) {
    const gpu_vcache *x = g->vc;
    return x && g->d->whole && T > 1 && (int64_t)T * g->top_k >= 2 * (int64_t)x->E && listed(x) >= 2 * x->E;
}

int vcache_layer_in(gpu_model *g, int li, int spare, char *err) {
    gpu_vcache *x = g->vc;
    const int E = x->E;
    int32_t *so = x->slot_of + (size_t)li * (size_t)E;
    const int32_t *sp = spare >= 0 ? x->slot_of + (size_t)spare * (size_t)E : NULL;
    /* the layer's slots first, so that no victim is one of them */
    for (int e = 0; e < E; e++)
        if (so[e] >= 0) count(x, li, true), touch(x, so[e]);
    int f = 0, nm = 0; /* f: the spare layer's next expert */
    int32_t *mexp, *mslot, *mold;
    miss_scratch(x, &mexp, &mslot, &mold);
    for (int e = 0; e < E; e++) {
        if (so[e] >= 0) continue;
        /* a free slot, else the spare layer's (a pass over more layers than the cache holds
         * gives up the layer it just finished with, not the one it will need first next time),
         * else the least recently used */
        int i = x->tail;
        if (x->key_of[i] >= 0 && sp) {
            while (f < E && sp[f] < 0) f++;
            if (f < E) i = sp[f];
        }
        count(x, li, false);
        mold[nm] = claim(x, i);
        touch(x, i);
        mexp[nm] = e, mslot[nm++] = i;
    }
    if (spare < 0 && x->hc) hcache_pass(g); /* the first layer of a prefill's pass */
    int rc = put(g, li, mexp, mslot, mold, nm, true, true, err);
    if (!rc) rc = gpu_put_copy(g->d, x->dtab + (CUdeviceptr)((size_t)li * (size_t)E * sizeof(int32_t)), so,
                               (size_t)E * sizeof(int32_t), err);
    if (!rc) x->whole_layers++;
    return rc;
}

/* ---- device-staged decode ---------------------------------------------------
 * A decode step reads each routed weight once. Its misses are copied in by
 * the device (moe_stage, 16-byte loads from the pinned pages, many in
 * flight) into staging slots that moe_sort hands the expert kernels, so the
 * step needs no host between its layers and runs as one graph, as all
 * resident. (The expert kernels reading the pinned pages themselves were
 * tried first: their few loads in flight got a quarter of the link,
 * docs/experiments.md session 29.) Between steps the host swaps each staged
 * expert into the cache for the least recently used slot, which becomes
 * that staging slot: LRU, as the copying path, with no copy. */

/* Part `which` (0 gate, 1 up, 2 down) of expert x. */
static const e0_mat *part(const e0_expert *x, int which) {
    return which == 0 ? &x->gate : which == 1 ? &x->up : &x->down;
}

/* The host's experts of one layer's matrix `which` as moe_stage's source
 * (hw, hestride, hs, hb, hsstride), where every expert lies at one stride
 * from the first, 16-byte aligned; false where they do not. */
static bool host_view(const e0_expert *xs, int E, int which, gpu_mat *gm) {
    const e0_mat *m0 = part(&xs[0], which), *m1 = part(&xs[E > 1 ? 1 : 0], which);
    const bool aff = m0->type == E0_W_QAFF;
    const uintptr_t w0 = (uintptr_t)m0->w, s0 = aff ? (uintptr_t)m0->scales : 0, b0 = aff ? (uintptr_t)m0->biases : 0;
    const uintptr_t ws = (uintptr_t)m1->w - w0, ss = aff ? (uintptr_t)m1->scales - s0 : 0;
    if (!w0 || (w0 | ws | s0 | b0 | ss) % 16) return false;
    if (aff && (!s0 || !b0 || (uintptr_t)m1->biases - b0 != ss)) return false;
    for (int e = 0; e < E; e++) {
        const e0_mat *m = part(&xs[e], which);
        if ((uintptr_t)m->w != w0 + (uintptr_t)e * ws) return false;
        if (aff && ((uintptr_t)m->scales != s0 + (uintptr_t)e * ss || (uintptr_t)m->biases != b0 + (uintptr_t)e * ss))
            return false;
    }
    gm->hw = (CUdeviceptr)w0;
    gm->hs = (CUdeviceptr)s0;
    gm->hb = (CUdeviceptr)b0;
    gm->hestride = (int64_t)ws;
    gm->hsstride = (int64_t)ss;
    return true;
}

/* Slot i out of the LRU list. */
static void unlink_slot(gpu_vcache *x, int i) {
    const int p = x->prev[i], n = x->next[i];
    if (p >= 0) x->next[p] = n;
    else x->head = n;
    if (n >= 0) x->prev[n] = p;
    else x->tail = p;
    x->prev[i] = x->next[i] = -1;
}

/* Slot i (out of the list) in at its head. */
static void link_head(gpu_vcache *x, int i) {
    x->prev[i] = -1;
    x->next[i] = x->head;
    if (x->head >= 0) x->prev[x->head] = i;
    else x->tail = i;
    x->head = i;
}

int vcache_stage_on(gpu_model *g, int top_k, bool *on, char *why, char *err) {
    gpu_vcache *x = g->vc;
    const e0_model *m = g->m;
    *on = false;
    int v = 0;
    if (!x || !x->n_pin) return snprintf(why, E0_ERR_MAX, "the experts are not pinned"), 0;
    const int ns = x->n_layers * top_k;
    if (x->n_slots < x->E + ns)
        return snprintf(why, E0_ERR_MAX, "%d slots leave no room for %d staging slots beside %d", x->n_slots, ns,
                        x->E), 0;
    if (g->d->cu->DeviceGetAttribute(&v, CU_ATTR_HOST_POINTER_FOR_REGISTERED_MEM, g->d->dev) != CU_SUCCESS || !v)
        return snprintf(why, E0_ERR_MAX, "the device cannot read pinned host memory at its address"), 0;
    for (int li = 0; li < m->cfg.n_layers; li++) {
        const e0_layer *ly = &m->layers[li];
        gpu_layer *gl = &g->L[li];
        gpu_mat *gs[3] = {&gl->xg, &gl->xu, &gl->xd};
        if (!ly->moe || !ly->experts) continue;
        for (int i = 0; i < 3; i++)
            if (!host_view(ly->experts, x->E, i, gs[i]))
                return snprintf(why, E0_ERR_MAX, "layer %d's experts are not evenly strided in memory", li), 0;
    }
    x->k = top_k;
    x->hused = calloc((size_t)x->n_layers * (size_t)x->E, sizeof *x->hused);
    x->stage = malloc(stage_bytes(x));
    x->hlog = malloc(stage_bytes(x));
    if (!x->hused || !x->stage || !x->hlog) return e0_fail(err, E0_ENOMEM, "out of memory");
    for (int j = 0; j < ns; j++) { /* the staging slots come off the list's tail */
        const int i = x->tail;
        const int old = x->key_of[i];
        if (old >= 0) x->slot_of[old] = -1, x->key_of[i] = -1;
        unlink_slot(x, i);
        x->stage[j] = i;
    }
    int rc = gpu_alloc(g->d, &x->dused, keys_bytes(x), "the VRAM cache's use counts", err);
    if (!rc) rc = gpu_alloc(g->d, &x->dstage, stage_bytes(x), "the VRAM cache's staging slots", err);
    if (!rc) rc = gpu_alloc(g->d, &x->dlog, stage_bytes(x), "the VRAM cache's staging slots", err);
    if (!rc) rc = gpu_zero(g->d, x->dused, keys_bytes(x), err);
    if (rc) return rc;
    x->tab_dirty = true;
    x->staged = *on = true;
    return 0;
}

int vcache_prepare(gpu_model *g, char *err) {
    gpu_vcache *x = g->vc;
    if (!x->tab_dirty) return 0;
    x->tab_dirty = false;
    int rc = gpu_put(g->d, x->dtab, x->slot_of, keys_bytes(x), err);
    if (!rc) rc = gpu_put(g->d, x->dstage, x->stage, stage_bytes(x), err);
    return rc;
}

int vcache_step(gpu_model *g, char *err) {
    gpu_vcache *x = g->vc;
    const int E = x->E, k = x->k;
    const double t0 = now_s();
    int rc = gpu_get(g->d, x->hused, x->dused, keys_bytes(x), err);
    if (!rc) rc = gpu_get(g->d, x->hlog, x->dlog, stage_bytes(x), err);
    if (!rc) rc = gpu_zero(g->d, x->dused, keys_bytes(x), err);
    x->wait_s += now_s() - t0;
    for (int li = 0; !rc && li < x->n_layers; li++) {
        const int32_t *u = x->hused + (size_t)li * E;
        for (int e = 0; e < E; e++) {
            if (!u[e]) continue;
            const int i = x->slot_of[li * E + e];
            if (i >= 0) count(x, li, true), touch(x, i);
        }
        for (int a = 0; a < k; a++) { /* the staged: a slot each, for the least recently used */
            const int e = x->hlog[li * k + a];
            if (e < 0) continue;
            if (e >= E || !u[e] || x->slot_of[li * E + e] >= 0)
                return e0_fail(err, E0_EIO, "layer %d: expert %d staged, not a miss of the step", li, e);
            const int s = x->stage[li * k + a], v = x->tail, old = x->key_of[v];
            count(x, li, false);
            x->bytes_staged += expert_bytes(g, li);
            unlink_slot(x, v);
            if (old >= 0) x->slot_of[old] = -1;
            x->key_of[v] = -1;
            x->stage[li * k + a] = v;
            x->key_of[s] = li * E + e;
            x->slot_of[li * E + e] = s;
            link_head(x, s);
            x->tab_dirty = true;
        }
    }
    return rc;
}
