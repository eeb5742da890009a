/* The VRAM expert cache (gpu/gmodel.h): the routed experts of every layer
 * in one pool of slots, least recently used out first, filled from the
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
 * given up: the call's slots move to the head of the list as they are
 * looked up, the victim comes from the tail, and fewer than n_slots
 * experts are ever looked up in one call.
 */
#include "gpu/gmodel.h"

#include "util/clock.h"
#include "util/err.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    x->hx = malloc(2 * (size_t)E * sizeof *x->hx);
    if (!rc && (!x->key_of || !x->slot_of || !x->prev || !x->next || !x->hx))
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
    if (!rc) rc = gpu_alloc(g->d, &x->pool, x->slot_bytes * (uint64_t)n_slots, "the VRAM expert cache", err);
    if (!rc) rc = gpu_alloc(g->d, &x->dslots, (size_t)E * sizeof(int32_t), "the VRAM expert cache", err);
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
        const CUresult r = g->d->cu->MemHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_READ_ONLY);
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
    unpin(g);
    gpu_free(g->d, x->pool, x->slot_bytes * (uint64_t)x->n_slots);
    gpu_free(g->d, x->dslots, (size_t)x->E * sizeof(int32_t));
    free(x->key_of), free(x->slot_of), free(x->prev), free(x->next), free(x->hx);
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

/* Expert e of layer li copied into slot i (given up by whatever it held). */
static int fill(gpu_model *g, int li, int e, int i, char *err) {
    gpu_vcache *x = g->vc;
    const int old = x->key_of[i];
    if (old >= 0) x->slot_of[old] = -1;
    x->key_of[i] = -1;
    const e0_expert *ex = &g->m->layers[li].experts[e];
    const gpu_layer *gl = &g->L[li];
    int rc = gpu_mat_put(g->d, &gl->xg, i, &ex->gate, err);
    if (!rc) rc = gpu_mat_put(g->d, &gl->xu, i, &ex->up, err);
    if (!rc) rc = gpu_mat_put(g->d, &gl->xd, i, &ex->down, err);
    if (rc) return rc;
    const int key = li * x->E + e;
    x->key_of[i] = key;
    x->slot_of[key] = i;
    x->bytes_in += gpu_mat_bytes(&ex->gate) + gpu_mat_bytes(&ex->up) + gpu_mat_bytes(&ex->down);
    return 0;
}

int vcache_map(gpu_model *g, int li, CUdeviceptr nact, CUdeviceptr exps, char *err) {
    gpu_vcache *x = g->vc;
    const double t0 = now_s();
    int32_t n = 0;
    int rc = gpu_get(g->d, &n, nact, sizeof n, err);
    if (!rc && (n < 0 || n > x->E)) rc = e0_fail(err, E0_EIO, "layer %d: %d active experts read back", li, n);
    if (!rc) rc = gpu_get(g->d, x->hx, exps, (size_t)n * sizeof *x->hx, err);
    const double t1 = now_s();
    x->wait_s += t1 - t0;
    int32_t *slots = x->hx + x->E;
    for (int a = 0; !rc && a < n; a++) {
        const int e = x->hx[a];
        if (e < 0 || e >= x->E) {
            rc = e0_fail(err, E0_EIO, "layer %d: expert %d read back", li, e);
            break;
        }
        int i = x->slot_of[li * x->E + e];
        if (i >= 0) {
            x->hits++;
        } else {
            x->misses++;
            i = x->tail;
            rc = fill(g, li, e, i, err);
        }
        touch(x, i);
        slots[a] = i;
    }
    if (!rc) rc = gpu_put(g->d, x->dslots, slots, (size_t)n * sizeof *slots, err);
    x->copy_s += now_s() - t1;
    return rc;
}
