/* Building and freeing a stream, its counters and traces, and the
 * memory-pressure monitor (switchglu.h, stream_int.h). */
#include "stream/stream_int.h"

#include "util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util/bigbuf.h"
#include "util/meminfo.h"
#include "util/pool.h"

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
    s->n_layers = model_layers(m); /* the MTP block's experts are an extra layer's */
    s->n_main = c->n_layers;
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
                                 lo->cache_policy == E0_CACHE_ROUTER ||
                                         lo->cache_policy == E0_CACHE_RECENT
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

uint64_t stream_bytes_read(e0_stream *s) {
    return atomic_load(&s->bytes_read);
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
