/* Merged prefill passes: the pass_* of model.h (one forward pass over the
 * next ids of several sessions, cut between layers or halves of a layer),
 * and their public face (edge0.h: e0_pass_*, e0_session_prepare) for
 * schedulers outside the library (src/server/engine.c). */
#include "gpu/gmodel.h"
#include "model/forward.h"
#include "model/model.h"
#include "util/clock.h"
#include "util/err.h"

#include <stdlib.h>
#include <string.h>

/* A pass that failed: its states are partly updated, so every session of
 * it starts over and the pass ends; rc with the message saying so. */
static int pass_failed(e0_pass *p, int rc, char *err) {
    for (int r = 0; r < p->ns; r++)
        e0_session_reset(p->run[r].s);
    p->layer = -1;
    p->half = 0;
    p->gpu = false;
    return p->ns == 1 ? e0_wrap(err, rc, "evaluation failed; the session was reset")
                      : e0_wrap(err, rc, "evaluation failed; the %d sessions were reset", p->ns);
}


/* A pass over GPU sessions (pass_begin has checked them): the ids kept,
 * nothing evaluated yet. The device runs a prefill of hundreds of ids in
 * well under a second, so the pass is not cut between layers: its first
 * step evaluates every run (gpu_pass_step). */
static int gpu_pass_begin(e0_pass *p, e0_session *const *ss, const int32_t *const *ids, const size_t *n,
                          int ns, size_t T, char *err) {
    if (T > p->gcap) {
        int32_t *g = realloc(p->gids, T * sizeof *g);
        if (!g) return e0_fail(err, E0_ENOMEM, "out of memory");
        p->gids = g;
        p->gcap = T;
    }
    int t = 0;
    for (int i = 0; i < ns; i++) {
        memcpy(p->gids + t, ids[i], n[i] * sizeof *ids[i]);
        p->run[i] = (e0_run){ss[i], t, (int)n[i]};
        p->at[i] = i;
        t += (int)n[i];
        ss[i]->pass = p;
    }
    p->b = (e0_batch){.S = &ss[0]->s, .run = p->run, .nrun = ns, .T = t, .decode = false};
    p->ns = ns;
    p->layer = 0;
    p->half = 0;
    p->gpu = true;
    return 0;
}

static int gpu_pass_step(e0_pass *p, float *const *logits, bool *done, char *err) {
    e0_engine *e = p->run[0].s->eng;
    const double t0 = now_s();
    for (int r = 0; r < p->ns; r++) /* a pass in progress is not evaluated again: e0_session_eval's check */
        p->run[r].s->pass = NULL;
    int rc = 0;
    for (int r = 0; !rc && r < p->ns; r++) {
        const e0_run *ru = &p->run[r];
        float *lg = logits ? logits[r] : NULL;
        rc = session_gpu_eval(ru->s, p->gids + ru->t0, (size_t)ru->n, lg ? E0_LOGITS_LAST : E0_LOGITS_NONE, lg,
                              err);
    }
    e->prefill_s += now_s() - t0;
    if (rc) return pass_failed(p, rc, err);
    p->layer = -1;
    p->half = 0;
    p->gpu = false;
    e->prefill_tokens += (uint64_t)p->b.T;
    *done = true;
    return 0;
}

int pass_begin(e0_pass *p, e0_session *const *ss, const int32_t *const *ids, const size_t *n, int ns,
               char *err) {
    if (!p || !ss || !ids || !n) return e0_fail(err, E0_EINVAL, "pass, sessions, ids or counts are NULL");
    if (ns < 1 || ns > E0_PASS_MAX)
        return e0_fail(err, E0_EINVAL, "%d sessions: a pass takes 1 to %d", ns, E0_PASS_MAX);
    size_t T = 0;
    for (int i = 0; i < ns; i++) {
        if (!ss[i] || !ids[i]) return e0_fail(err, E0_EINVAL, "session %d or its ids are NULL", i);
        int rc = session_check_distinct(ss, (size_t)i, err);
        if (rc) return rc;
        rc = session_check_ids(ss[i], ids[i], n[i], err);
        if (rc) return e0_wrap(err, rc, "session %d", i);
        if (n[i] > (size_t)ss[i]->n_batch)
            return e0_fail(err, E0_EINVAL, "session %d: %zu ids are more than one pass of %d", i,
                           n[i], ss[i]->n_batch);
        T += n[i];
    }
    if (T > (size_t)ss[0]->n_batch)
        return e0_fail(err, E0_EINVAL,
                       "the pass's %zu ids are more than session 0's scratch takes (n_batch %d)", T,
                       ss[0]->n_batch);
    if (ss[0]->gs) return gpu_pass_begin(p, ss, ids, n, ns, T, err);
    /* runs of K_PANEL_MIN_T ids or more first (panel arithmetic), then the
     * shorter ones, each class in the caller's order */
    int r = 0, t = 0, Tp = 0;
    for (int cls = 0; cls < 2; cls++)
        for (int i = 0; i < ns; i++) {
            if ((n[i] >= K_PANEL_MIN_T) != (cls == 0)) continue;
            p->run[r] = (e0_run){ss[i], t, (int)n[i]};
            p->at[i] = r++;
            t += (int)n[i];
            if (cls == 0) Tp = t;
        }
    bool ones = true; /* runs of one id each: a decode batch's expert paths, as alone */
    for (int i = 0; i < ns; i++)
        ones &= n[i] == 1;
    p->b = (e0_batch){.S = &ss[0]->s, .run = p->run, .nrun = ns, .T = t, .Tp = Tp, .decode = ones};
    p->ns = ns;
    p->gpu = false;
    p->layer = 0;
    p->half = 0;
    for (int i = 0; i < ns; i++) {
        mtp_before(ss[i], ids[i][0]);
        embed_run(&p->b, p->at[i], ids[i]);
        ss[i]->pass = p;
    }
    return 0;
}

/* After a CPU pass over runs[0..nrun) (their final residual rows in S->x):
 * each session's MTP block takes its rows, then runs the positions whose
 * next id is known, each in its own scratch (after every take: S may be
 * one of theirs). */
static int pass_mtp(const e0_batch *b, char *err) {
    const int H = b->run[0].s->m->cfg.hidden;
    int rc = 0;
    for (int r = 0; r < b->nrun; r++)
        mtp_take(b->run[r].s, b->S->x + (size_t)b->run[r].t0 * H, b->run[r].n);
    for (int r = 0; !rc && r < b->nrun; r++)
        rc = mtp_catch_up(b->run[r].s, err);
    return rc;
}

/* The logits of the pass's sessions' last ids: their final rows gathered
 * into S->h and run as independent tokens (mat_matmul_decode: each gets the
 * one-token arithmetic of e0_session_eval's last row); one read of lm_head
 * for all of them. */
static void pass_logits(const e0_pass *p, float *const *logits) {
    const e0_model *m = p->run[0].s->m;
    const e0_config *c = &m->cfg;
    e0_scratch *S = p->b.S;
    const int H = c->hidden, V = c->vocab;
    int who[E0_PASS_MAX], nw = 0;
    for (int i = 0; i < p->ns; i++) {
        if (!logits[i]) continue;
        const e0_run *ru = &p->run[p->at[i]];
        /* S->h's rows are free now, and row nw <= the last row of run at[i] is not read again */
        rmsnorm(S->x + (size_t)(ru->t0 + ru->n - 1) * H, m->final_norm, H, 1, c->rms_eps,
                S->h + (size_t)nw * H);
        who[nw++] = i;
    }
    if (!nw) return;
    float *y = nw == 1 ? logits[who[0]] : malloc((size_t)nw * (size_t)V * sizeof *y);
    if (!y) { /* out of memory: one call per session */
        for (int w = 0; w < nw; w++)
            mat_matmul_decode(&m->lm_head, S->h + (size_t)w * H, H, 1, logits[who[w]], V);
        return;
    }
    mat_matmul_decode(&m->lm_head, S->h, H, nw, y, V);
    if (nw == 1) return;
    for (int w = 0; w < nw; w++)
        memcpy(logits[who[w]], y + (size_t)w * V, (size_t)V * sizeof *y);
    free(y);
}

int pass_step_halves(e0_pass *p, int max_halves, float *const *logits, bool *done, char *err) {
    *done = false;
    if (!p || p->layer < 0) return e0_fail(err, E0_EINVAL, "no pass in progress");
    if (p->gpu) return gpu_pass_step(p, logits, done, err);
    const e0_model *m = p->run[0].s->m;
    const int L = m->cfg.n_layers;
    const double t0 = now_s();
    p->b.run = p->run;
    int at = 2 * p->layer + p->half, rc = 0; /* the next half */
    const int end = max_halves > 0 && at + max_halves < 2 * L ? at + max_halves : 2 * L;
    for (; !rc && at < end; at++)
        rc = forward_half(&p->b, at / 2, at % 2, err);
    if (!rc) rc = st_set_fault(m->st, err); /* the mapping lost data under us (SIGBUS guard) */
    e0_engine *e = p->run[0].s->eng;
    if (rc) {
        e->prefill_s += now_s() - t0;
        return pass_failed(p, rc, err);
    }
    p->layer = end / 2;
    p->half = end % 2;
    if (end == 2 * L) {
        forward_end(&p->b);
        if (logits) pass_logits(p, logits);
        if ((rc = pass_mtp(&p->b, err))) {
            e->prefill_s += now_s() - t0;
            return pass_failed(p, rc, err);
        }
        for (int r = 0; r < p->ns; r++)
            p->run[r].s->pass = NULL;
        p->layer = -1;
        p->half = 0;
        *done = true;
        e->prefill_tokens += (uint64_t)p->b.T;
    }
    e->prefill_s += now_s() - t0;
    return 0;
}

int pass_step(e0_pass *p, int max_layers, float *const *logits, bool *done, char *err) {
    const int halves = p && max_layers > 0 ? pass_layer_halves(p, max_layers) : 0;
    return pass_step_halves(p, halves, logits, done, err);
}

int session_eval_part(e0_session *s, const int32_t *ids, size_t n, int max_layers, float *logits,
                      bool *done, char *err) {
    *done = false;
    if (s->pass && s->pass != s->own)
        return e0_fail(err, E0_EINVAL, "the session is in a merged prefill pass (pass_begin)");
    if (!s->pass) { /* a new pass */
        if (!s->own && !(s->own = calloc(1, sizeof *s->own)))
            return e0_fail(err, E0_ENOMEM, "out of memory");
        int rc = pass_begin(s->own, &s, &ids, &n, 1, err);
        if (rc) return rc;
    }
    return pass_step(s->own, max_layers, &logits, done, err);
}

int e0_pass_new(e0_pass **out, char *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return e0_fail(err, E0_ENOMEM, "out of memory");
    (*out)->layer = -1; /* no pass in progress */
    return 0;
}

void e0_pass_free(e0_pass *p) {
    if (p) pass_release(p);
    free(p);
}

int e0_pass_begin(e0_pass *p, e0_session *const *ss, const int32_t *const *ids, const size_t *n,
                  int ns, char *err) {
    return pass_begin(p, ss, ids, n, ns, err);
}

int e0_pass_step(e0_pass *p, int max_layers, float *const *logits, bool *done, char *err) {
    return pass_step(p, max_layers, logits, done, err);
}

int e0_pass_step_halves(e0_pass *p, int max_halves, float *const *logits, bool *done, char *err) {
    return pass_step_halves(p, max_halves, logits, done, err);
}

int e0_pass_layer_halves(const e0_pass *p, int layers) {
    return pass_layer_halves(p, layers);
}

int e0_pass_tokens(const e0_pass *p) {
    return p->b.T;
}

int e0_pass_next_half(const e0_pass *p) {
    return 2 * p->layer + p->half;
}

int32_t e0_session_n_batch(const e0_session *s) {
    return s->n_batch;
}

int32_t e0_session_prepare(e0_session *s, const int32_t *prompt, size_t n) {
    return session_prepare(s, prompt, n);
}
