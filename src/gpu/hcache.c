/* The host's expert cache for the GPU (gpu/gmodel.h): where the host's
 * memory cannot hold every expert pinned (vcache_pin_host), the VRAM
 * cache's misses are read from the checkpoint by direct reads into a cache
 * of bundles in pinned host memory (least recently used out first), and
 * the device copies them from there by DMA.
 *
 * Why: without it a miss is copied from the checkpoint's mapping, and the
 * driver, staging pageable memory, faults its pages in a few at a time:
 * the 35B shape with 8 GiB of VRAM in a 12 GiB cgroup decoded 0.82 tok/s
 * (docs/experiments.md, session 33), a disk that reads GB/s kept waiting
 * on one fault after another. Here a layer's misses are read at once,
 * every bundle's ranges in flight together (io_uring, st_pread_direct_many)
 * from the compute pool's threads, which have nothing else to do while the
 * device computes, and direct reads leave nothing in the page cache to
 * count against the cgroup.
 *
 * The cache is the streaming layer's (stream/xcache.h), its slots one
 * registered block of host memory; bundles are the streaming layer's too
 * (stream/bundle.h), so a bundle's parts are views into its slot and
 * gpu_mat_put copies them as it copies the mapping's. An entry stays pinned
 * until the copies from it have run: each call's entries are a set, and a
 * set is released two calls later, after the event recorded behind its
 * copies (a MoE call of decode reads its routing back and waits for the
 * device anyway; a whole-layer prefill's copies run on the copy stream
 * while the host reads the next layer).
 */
#include "gpu/gmodel.h"

#include "stream/bundle.h"
#include "stream/xcache.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/pool.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RING = 32 }; /* ranges one io_uring submission takes (io/uring.c): a group's at most */

typedef struct {
    xentry **ent; /* the entries a call holds */
    bool *cold;   /* ent[i] goes back first in line for eviction (exclusive caching) */
    int n;
    CUevent ev;   /* recorded behind the copies from them */
    bool marked;
} hset;

struct gpu_hcache {
    xcache *xc;
    uint8_t *mem;   /* the slots, registered with the driver */
    size_t mem_bytes;
    xb_plan *plan;  /* [n_layers * E]: every MoE layer's experts */
    int E;
    int experts;    /* planned: every MoE layer's */
    hset set[2];
    int cur;        /* the set of the latest call */
    bool exclusive; /* hcache_keep; $E0_GPU_HCACHE_EXCL=0 turns it off (experiments) */
    enum { PF_KEEP, PF_NOKEEP, PF_HOLD } prefill; /* a whole-layer prefill's rule (hcache_new) */
    int hold, hold_max; /* PF_HOLD: entries this pass held, at most */
    int held;       /* entries the two sets hold */
    int reserve;    /* gets this call will make (hcache_begin) */
    uint64_t kept;  /* bundles the VRAM gave up, copied back */
    uint64_t hits, misses, bytes_read;
    double read_s;
    const xb_plan **want; /* [E] a call's bundles to read, their slots' buffers and entries */
    uint8_t **buf;
    xentry **loading;
};

void hcache_free(gpu_model *g) {
    gpu_hcache *h = g->vc ? g->vc->hc : NULL;
    if (!h) return;
    const cu_api *cu = g->d->cu;
    for (int j = 0; j < 2; j++) {
        if (h->set[j].marked) cu->EventSynchronize(h->set[j].ev);
        if (!h->set[j].ent) continue;
        for (int i = 0; i < h->set[j].n; i++) xcache_release(h->xc, h->set[j].ent[i]);
        if (h->set[j].ev) cu->EventDestroy(h->set[j].ev);
        free(h->set[j].ent), free(h->set[j].cold);
    }
    if (h->mem) cu->MemHostUnregister(h->mem);
    xcache_free(h->xc);
    free(h->plan);
    free(h->want), free(h->buf), free(h->loading);
    free(h);
    g->vc->hc = NULL;
}

int hcache_new(gpu_model *g, uint64_t bytes, char *err) {
    gpu_vcache *x = g->vc;
    const e0_model *m = g->m;
    const int L = m->cfg.n_layers, E = x->E;
    gpu_hcache *h = calloc(1, sizeof *h);
    if (!h) return e0_fail(err, E0_ENOMEM, "out of memory");
    x->hc = h;
    h->E = E;
    const char *xv = getenv("E0_GPU_HCACHE_EXCL");
    h->exclusive = !(xv && *xv == '0');
    h->plan = calloc((size_t)L * (size_t)E, sizeof *h->plan);
    h->want = calloc((size_t)E, sizeof *h->want);
    h->buf = calloc((size_t)E, sizeof *h->buf);
    h->loading = calloc((size_t)E, sizeof *h->loading);
    int rc = h->plan && h->want && h->buf && h->loading ? 0 : e0_fail(err, E0_ENOMEM, "out of memory");
    size_t bb = 0;
    for (int li = 0; !rc && li < L; li++) {
        if (!m->layers[li].moe || !m->layers[li].experts) continue;
        for (int e = 0; !rc && e < E; e++) {
            xb_plan *p = &h->plan[(size_t)li * (size_t)E + (size_t)e];
            rc = xb_plan_expert(m, li, e, XB_ORDER_MATH, p, err);
            if (p->bytes > bb) bb = p->bytes;
            h->experts++;
        }
    }
    /* the last call's set (up to a layer's every expert and as many kept from the VRAM) and
     * this call's gets; hcache_keep keeps only what leaves room for them */
    const int64_t n = bb ? (int64_t)(bytes / bb) : 0;
    if (!rc && n < 3 * (int64_t)E)
        rc = e0_fail(err, E0_ENOMEM, "a host expert cache of %.1f MiB holds %lld bundles of %.2f MiB; it needs %d",
                     (double)bytes / 1048576.0, (long long)n, (double)bb / 1048576.0, 3 * E);
    if (!rc) rc = xcache_new(&h->xc, (int32_t)(n < INT32_MAX ? n : INT32_MAX), bb, L, E, err);
    /* A whole-layer prefill passes over the layers in order; the VRAM keeps its first layers (a
     * layer's missing experts take the slots of the layer finished last). Copying each layer it
     * gives up back into this cache (keep) makes the host an LRU over a cyclic scan: where the
     * two caches cannot hold every expert it evicts exactly what the next pass needs first (a
     * model of the two caches, bench/gpu/hcache_sim.py: 0% host hits on the 35B shape with 8 GiB
     * of VRAM in a 12 GiB cgroup; the card read 65% of the experts from disk in a warmed pass).
     * hold: no copies back, and an expert entering a VRAM slot taken from another expert (which
     * the VRAM gives up again soon) stays here while the pass has held fewer than slots - 3E,
     * the rest first in line (model: disk 26% of the experts). $E0_GPU_HCACHE_PREFILL=keep (the
     * default until measured on a card) | nokeep | hold. */
    const char *pv = getenv("E0_GPU_HCACHE_PREFILL");
    h->prefill = pv && !strcmp(pv, "hold") ? PF_HOLD : pv && !strcmp(pv, "nokeep") ? PF_NOKEEP : PF_KEEP;
    h->hold_max = (int)(n - 3 * (int64_t)E);
    for (int j = 0; !rc && j < 2; j++) {
        h->set[j].ent = calloc(2 * (size_t)E, sizeof *h->set[j].ent);
        h->set[j].cold = calloc(2 * (size_t)E, sizeof *h->set[j].cold);
        if (!h->set[j].ent || !h->set[j].cold) rc = e0_fail(err, E0_ENOMEM, "out of memory");
        else if (g->d->cu->EventCreate(&h->set[j].ev, 2 /* CU_EVENT_DISABLE_TIMING */) != CU_SUCCESS)
            rc = e0_fail(err, E0_EIO, "creating an event for the host expert cache");
    }
    if (!rc) {
        uint8_t *mem = xcache_mem(h->xc, &h->mem_bytes);
        const CUresult r = g->d->cu->MemHostRegister(mem, h->mem_bytes, CU_MEMHOSTREGISTER_PORTABLE);
        if (r != CU_SUCCESS) {
            char why[128];
            rc = e0_fail(err, E0_EIO, "pinning a host expert cache of %.2f GiB for the GPU: %s",
                         (double)h->mem_bytes / 1073741824.0, cu_errstr(r, why, sizeof why));
        } else {
            h->mem = mem;
        }
    }
    if (rc) hcache_free(g);
    return rc;
}

/* ---- reading a call's missing bundles -------------------------------------- */

typedef struct {
    const st_set *st;
    const xb_plan **p;
    uint8_t **buf;
    int n;
    int *first;   /* [groups + 1]: group i is bundles first[i] .. first[i + 1] */
    int *rc;      /* [groups] */
    char (*err)[E0_ERR_MAX];
    bool *direct; /* [groups] */
} reads;

/* Group gi: its bundles with all their ranges in flight. */
static void read_group(void *ctx, int64_t g0, int64_t g1, int tid) {
    (void)tid;
    reads *r = ctx;
    for (int64_t gi = g0; gi < g1; gi++) {
        st_read rd[RING > XB_MAX_RANGES ? RING : XB_MAX_RANGES];
        int nr = 0;
        for (int b = r->first[gi]; b < r->first[gi + 1]; b++)
            for (int i = 0; i < r->p[b]->nr; i++) {
                const xb_range *x = &r->p[b]->r[i];
                rd[nr++] = (st_read){x->file, x->off, x->len, r->buf[b] + x->at};
            }
        bool direct = false;
        r->rc[gi] = st_pread_direct_many(r->st, rd, nr, &direct, r->err[gi]);
        r->direct[gi] = direct;
        if (!r->rc[gi] && !direct) /* went through the page cache: it must not stay there */
            for (int i = 0; i < nr; i++)
                posix_fadvise(st_file_fd(r->st, rd[i].file), (off_t)rd[i].off, (off_t)rd[i].len,
                              POSIX_FADV_DONTNEED);
    }
}

static int read_all(const gpu_model *g, const xb_plan **p, uint8_t **buf, int n, char *err) {
    int *first = malloc(((size_t)n + 1) * sizeof *first), ng = 0;
    if (!first) return e0_fail(err, E0_ENOMEM, "out of memory");
    /* groups of whole bundles, each within one submission's ranges (3 a GGUF bundle, up to 9 mlx) */
    for (int b = 0, nr = RING; b < n; nr += p[b]->nr, b++)
        if (nr + p[b]->nr > RING) first[ng++] = b, nr = 0;
    first[ng] = n;
    int *rcs = calloc((size_t)ng + 1, sizeof *rcs);
    bool *direct = calloc((size_t)ng + 1, sizeof *direct);
    char (*errs)[E0_ERR_MAX] = calloc((size_t)ng + 1, sizeof *errs);
    if (!rcs || !direct || !errs) {
        free(first), free(rcs), free(direct), free(errs);
        return e0_fail(err, E0_ENOMEM, "out of memory");
    }
    reads r = {g->m->st, p, buf, n, first, rcs, errs, direct};
    if (ng > 1) pool_for_each(ng, read_group, &r);
    else read_group(&r, 0, ng, 0);
    int rc = 0;
    for (int i = 0; i < ng && !rc; i++)
        if (rcs[i]) rc = e0_fail(err, rcs[i], "reading experts for the GPU's cache: %s", errs[i]);
    free(first), free(rcs), free(direct), free(errs);
    return rc;
}

int hcache_begin(gpu_model *g, int n, char *err) {
    gpu_hcache *h = g->vc->hc;
    h->reserve = n;
    /* the set two calls back: its copies have run once its event has */
    h->cur ^= 1;
    hset *s = &h->set[h->cur];
    if (s->marked && g->d->cu->EventSynchronize(s->ev) != CU_SUCCESS)
        return e0_fail(err, E0_EIO, "waiting for the device's copies from the host expert cache");
    s->marked = false;
    for (int i = 0; i < s->n; i++) {
        if (s->cold[i]) xcache_release_first(h->xc, s->ent[i]);
        else xcache_release(h->xc, s->ent[i]);
    }
    h->held -= s->n;
    s->n = 0;
    return 0;
}

/* Exclusive caching: the host cache holds what the VRAM gave up. A bundle
 * read for a VRAM miss goes back first in line for eviction (the VRAM has
 * it now), and a slot the VRAM gives up is copied back into the host cache
 * (device to host: the link's other direction) unless it is there. Without
 * it both would hold the same recent experts, and the two together no
 * more than the larger. */
int hcache_keep(gpu_model *g, int li, int e, int slot, bool copy_stream, bool whole, char *err) {
    gpu_hcache *h = g->vc->hc;
    if (!h->exclusive || (whole && h->prefill != PF_KEEP)) return 0;
    hset *s = &h->set[h->cur];
    if (h->held + h->reserve >= xcache_slots(h->xc)) return 0; /* the gets to come need the room */
    bool load = false;
    xentry *x = xcache_acquire(h->xc, li, e, false, &load);
    if (!x) return 0; /* every slot held: nothing kept */
    s->cold[s->n] = false; /* an entry present is released to the list's recent end */
    s->ent[s->n++] = x;
    h->held++;
    if (!load) return 0;
    e0_expert v;
    xb_views(&h->plan[(size_t)li * (size_t)h->E + (size_t)e], xentry_buf(x), &v);
    const gpu_layer *gl = &g->L[li];
    int rc = gpu_mat_get(g->d, &gl->xg, slot, &v.gate, copy_stream, err);
    if (!rc) rc = gpu_mat_get(g->d, &gl->xu, slot, &v.up, copy_stream, err);
    if (!rc) rc = gpu_mat_get(g->d, &gl->xd, slot, &v.down, copy_stream, err);
    /* READY now: the copies from it that may follow come after these in stream order, and the
     * host never reads it; held in the set until this call's copies have run */
    xcache_loaded(h->xc, x, !rc);
    if (!rc) h->kept++;
    return rc;
}

void hcache_pass(gpu_model *g) { g->vc->hc->hold = 0; }

/* Whether es[i]'s entry goes first in line for eviction once released: with exclusive caching
 * (the VRAM holds it from now on), unless a prefill's hold rule keeps it (hcache_new). */
static bool goes_first(gpu_hcache *h, bool whole, const int32_t *old, int i) {
    if (whole && h->prefill == PF_HOLD && old[i] >= 0 && h->hold < h->hold_max) {
        h->hold++;
        return false;
    }
    return h->exclusive;
}

int hcache_get(gpu_model *g, int li, const int32_t *es, const int32_t *old, int n, bool whole,
               e0_expert *views, char *err) {
    gpu_hcache *h = g->vc->hc;
    hset *s = &h->set[h->cur];
    if (n > h->E) return e0_fail(err, E0_EINVAL, "%d experts asked of a layer of %d", n, h->E);
    const int s0 = s->n;
    const xb_plan **want = h->want;
    uint8_t **buf = h->buf;
    xentry **loading = h->loading;
    int nl = 0, rc = 0;
    for (int i = 0; i < n; i++) {
        bool load = false;
        xentry *x = xcache_acquire(h->xc, li, es[i], true, &load);
        if (!x) { /* every slot held: cannot happen (3E slots; keeps leave room for the gets) */
            rc = e0_fail(err, E0_ENOMEM, "the host expert cache has no slot free");
            break;
        }
        s->cold[s->n] = goes_first(h, whole, old, i);
        s->ent[s->n++] = x;
        h->held++;
        const xb_plan *p = &h->plan[(size_t)li * (size_t)h->E + (size_t)es[i]];
        if (load) {
            want[nl] = p, buf[nl] = xentry_buf(x), loading[nl++] = x;
            h->misses++;
            h->bytes_read += p->data;
        } else {
            h->hits++;
        }
        xb_views(p, xentry_buf(x), &views[i]);
    }
    const double t0 = now_s();
    if (!rc && nl) rc = read_all(g, want, buf, nl, err);
    h->read_s += now_s() - t0;
    for (int i = 0; i < nl; i++) xcache_loaded(h->xc, loading[i], !rc);
    for (int i = s0; !rc && i < s->n; i++) /* entries another call loads (none: one caller) are ready */
        if (xcache_wait(h->xc, s->ent[i]))
            rc = e0_fail(err, E0_EIO, "layer %d: an expert's read failed", li);
    if (rc) { /* a failed load is dropped; the rest go back */
        for (int i = s0; i < s->n; i++) xcache_release(h->xc, s->ent[i]);
        h->held -= s->n - s0;
        s->n = s0;
    }
    return rc;
}

int hcache_mark(gpu_model *g, bool copy_stream, char *err) {
    gpu_hcache *h = g->vc->hc;
    hset *s = &h->set[h->cur];
    if (g->d->cu->EventRecord(s->ev, copy_stream ? g->d->cs : g->d->st) != CU_SUCCESS)
        return e0_fail(err, E0_EIO, "marking the copies from the host expert cache");
    s->marked = true;
    return 0;
}

void hcache_stats(const gpu_model *g, gpu_hstats *out) {
    memset(out, 0, sizeof *out);
    const gpu_hcache *h = g->vc ? g->vc->hc : NULL;
    if (!h) return;
    out->slots = xcache_slots(h->xc);
    out->experts = h->experts;
    out->bytes = h->mem_bytes;
    out->hits = h->hits;
    out->misses = h->misses;
    out->bytes_read = h->bytes_read;
    out->read_s = h->read_s;
    out->kept = h->kept;
    out->exclusive = h->exclusive;
}

void hcache_reset_stats(gpu_model *g) {
    gpu_hcache *h = g->vc ? g->vc->hc : NULL;
    if (h) h->hits = h->misses = h->bytes_read = h->kept = 0, h->read_s = 0;
}
