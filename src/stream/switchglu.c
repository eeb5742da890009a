/* The streaming SwitchGLU: see switchglu.h for the contract; the exact
 * path, speculative loads and the dispatch of a call to a path here, the
 * rest beside it (stream_int.h). */
#include "stream/stream_int.h"

#include "util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/pool.h"

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
 * them. When fewer than a quarter of the first k/2 turn out routed over a
 * window, only one call in 4 SPEC_PROBE guesses, and only the first k/2:
 * where this layer's input does not rank the next layer's experts (routing
 * that depends on more than the router's logits, as a replayed trace's or a
 * routing profile's; session 32: 2.6% of the guesses routed under replay,
 * 19% on a profile), every guess is a bundle read for nothing, and capped
 * decode is bound by the reads. */
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

/* The next MoE layer of the main pass after `layer`, or -1. */
static int next_moe(const e0_stream *s, int layer) {
    for (int l = layer + 1; l < s->n_main; l++)
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
    const uint32_t call = s->spec_calls++;
    if (pk == 0 && s->spec_lo_off && call % (4 * SPEC_PROBE))
        return; /* wrong so far: probes only */
    const int want = pk > 0                                                      ? (pk < k ? pk : k)
                     : !s->spec_lo_off && (s->spec_hi || call % SPEC_PROBE == 0) ? k
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
        s->spec_lo_loads += !hi && started;
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
            s->spec_lo_used += used && *pending == SPEC_LO;
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
        if (s->spec_lo_loads >= SPEC_WINDOW) {
            s->spec_lo_off = 4 * s->spec_lo_used < s->spec_lo_loads;
            s->spec_lo_loads = s->spec_lo_used = 0;
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

/* ---- dispatch ---------------------------------------------------------------- */

/* Groups the call's (token, slot) pairs by expert: exps[i] (n of them, in
 * id order) owns pairs order[start[i] .. start[i+1]), in token order. */
static int group_pairs(const int32_t *idx, int P, int E, e0_scratch *ws) {
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
    return n;
}

/* Each expert's pairs are in token order, so those of one run are
 * consecutive: a run with K_PANEL_MIN_T pairs or more here is a call its
 * pass alone makes with the panel arithmetic. Those go first (npanel),
 * through ws->rpairs (free until the exact path's list below). Where
 * the experts' arithmetic does not depend on T (mat_matmul_t_free),
 * every pair of a run of K_PANEL_MIN_T tokens or more takes it: the
 * tokens [0, Tp), a prefix of each expert's list. */
static void panel_first(e0_stream *s, int layer, const e0_batch *b, int k, int n, e0_scratch *ws) {
    const bool decode = b->decode;
    int32_t *order = ws->order, *exps = ws->exps, *start = ws->start;
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
}

/* The path of a call: the one asked for, or AUTO's choice. */
static e0_path choose_path(e0_stream *s, int layer, bool decode, int k) {
    const e0_layer_opts *lo = &s->o.layer;
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
    return path;
}

/* Remembers what each run's last token routed to (their union, in run
 * order: in decode every sequence's token), and stages ahead. */
static void after_call(e0_stream *s, int layer, const float *x, const e0_batch *b,
                       const int32_t *idx, int k) {
    const e0_layer_opts *lo = &s->o.layer;
    layer_state *L = &s->ls[layer];
    L->nprev = 0;
    for (int r = 0; r < b->nrun; r++) {
        const int t = b->run[r].t0 + b->run[r].n - 1;
        for (int p = t * k; p < (t + 1) * k && L->nprev < 256; p++)
            if (!in_set(L->prev, L->nprev, idx[p])) L->prev[L->nprev++] = idx[p];
    }
    bool staging = s->o.path == E0_PATH_STAGED ||
                   (s->o.path == E0_PATH_AUTO && lo->staged && k == lo->staged_trigger);
    if (staging) {
        const int next = next_moe(s, layer);
        if (next >= 0) {
            predict(s, next, x + (size_t)(b->T - 1) * s->H);
            stage(s, next);
        } else if (s->first_moe >= 0) { /* step boundary: the first layer, from its last set */
            predict(s, s->first_moe, NULL);
            stage(s, s->first_moe);
        }
    }
}

int stream_experts(e0_stream *s, int layer, const float *x, const e0_batch *b, const int32_t *idx,
                   float *w, int k, float *eo, e0_scratch *ws, char *err) {
    const int T = b->T;
    const bool decode = b->decode;
    const e0_layer_opts *lo = &s->o.layer;
    const int E = s->E;
    int32_t *order = ws->order, *exps = ws->exps, *start = ws->start;
    const int n = group_pairs(idx, T * k, E, ws);
    panel_first(s, layer, b, k, n, ws);

    for (int i = 0; i < n; i++)
        s->touched[(size_t)layer * (size_t)E + (size_t)exps[i]] = 1;
    const e0_path path = choose_path(s, layer, decode, k);
    int rc = 0;
    /* experts no path serves go through exact: rest[0..nr) */
    exact_rest r = {ws->rest, ws->rstart, ws->rpairs, 0, 0};
    if (path == E0_PATH_FULL) {
        uint8_t *buf = NULL;
        if ((rc = layer_buffer(s, layer, !decode, &buf, err)) != 0) return rc;
        e0_expert *v = s->fl_views;
        for (int i = 0; i < n; i++)
            layer_views(s, layer, exps[i], buf, &v[exps[i]]);
        resident_experts(s, v, exps, start, n, order, x, k, eo, ws);
    } else if (path == E0_PATH_STAGED) {
        staged_experts(s, layer, x, w, k, n, eo, ws, &r);
    } else if (path == E0_PATH_HOT) {
        if ((rc = hot_experts(s, layer, x, decode, k, n, eo, ws, &r, err)) != 0) return rc;
    } else {
        for (int i = 0; i < n; i++)
            to_exact(&r, ws, i);
    }
    r.rstart[r.nrest] = r.rp;
    /* guesses at the next layer's experts (decode: each sequence's; prefill:
     * the pass's union), while prefetch_cap allows (on the exact path every
     * routed expert is in rest, so exact_experts runs) */
    const bool spec = path == E0_PATH_EXACT && s->xc && lo->prefetch_cap > 0 &&
                      lo->prefetch_threads > 0;
    if (r.nrest)
        rc = exact_experts(s, layer, r.rest, r.rstart, r.nrest, r.rpairs, x, k, eo, ws, T, decode,
                           spec, err);
    if (rc) return rc;
    after_call(s, layer, x, b, idx, k);
    return 0;
}
