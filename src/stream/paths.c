/* The seed's paths of the streaming SwitchGLU (switchglu.h): staged slots
 * filled ahead of need, per-layer hot stacks, whole-layer reads. Each
 * decides only where an expert's bytes come from (stream_int.h). */
#include "stream/stream_int.h"

#include "util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>

#include "util/bigbuf.h"
#include "util/meminfo.h"

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

void bg_wait(bg_job *j) {
    while (atomic_load_explicit(&j->busy, memory_order_acquire)) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

/* Assigns the predicted set of `layer` to its slots and starts the fill. */
void stage(e0_stream *s, int layer) {
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
void predict(e0_stream *s, int layer, const float *x) {
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

int hot_refresh(e0_stream *s, int layer, int n_hot, char *err) {
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
void layer_views(const e0_stream *s, int layer, int e, const uint8_t *buf, e0_expert *v) {
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

bool full_applies(const e0_stream *s, int layer) {
    const int n = s->o.layer.prefill_full_layers;
    return s->o.path == E0_PATH_FULL || (s->o.layer.full_layer_prefill && (n == 0 || layer < n));
}

/* The buffer holding `layer`, reading it now unless a prefetch has it; then,
 * in prefill, starts reading the next MoE layer that will load whole into
 * the other one. */
int layer_buffer(e0_stream *s, int layer, bool prefill, uint8_t **out, char *err) {
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
    for (int l = layer + 1; l < s->n_main && next < 0; l++)
        if (s->m->layers[l].moe && full_applies(s, l)) next = l;
    if (next >= 0 && prefill) {
        fl_wait(s, 1 - b);
        fl_start(s, 1 - b, next);
    }
    return 0;
}

/* The staged path's part of a call: each of the n routed experts from its
 * staged slot when there (else through exact, or dropped with
 * staged_replace). */
void staged_experts(e0_stream *s, int layer, const float *x, float *w, int k, int n, float *eo,
                    e0_scratch *ws, exact_rest *r) {
    const e0_layer_opts *lo = &s->o.layer;
    layer_state *L = &s->ls[layer];
    int32_t *order = ws->order, *exps = ws->exps, *start = ws->start;
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
            to_exact(r, ws, i);
            s->c.exact_fallbacks += np;
        }
    }
}

/* The hot path's part of a call: usage counted, the stack refreshed every
 * hot_update_interval calls, each routed expert from it when there (else
 * through exact). */
int hot_experts(e0_stream *s, int layer, const float *x, bool decode, int k, int n, float *eo,
                e0_scratch *ws, exact_rest *r, char *err) {
    const e0_layer_opts *lo = &s->o.layer;
    layer_state *L = &s->ls[layer];
    int32_t *order = ws->order, *exps = ws->exps, *start = ws->start;
    int rc;
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
            to_exact(r, ws, i);
            s->c.hot_misses += (uint64_t)(start[i + 1] - start[i]);
        }
    }
    return 0;
}
