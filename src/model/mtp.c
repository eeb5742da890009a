/* The multi-token-prediction (MTP) block of Qwen3.5 / 3.6 as a draft model
 * for speculative decoding (model.h, e0_mtp_state; weights.h, e0_mtp).
 *
 * MTP position t reads the main model's hidden state at t after the final
 * norm, h_t, and the embedding of the id at t + 1, and predicts the id at
 * t + 2:
 *   x = eh_proj([enorm(embed(id[t+1])) | hnorm(h_t)])
 *   x = layer(x)          a full-attention decoder layer with its MoE,
 *                         causal over the MTP positions, RoPE position t
 *   logits = head(head_norm(x))
 * (tools/train/qwen35.py's docstring: the convention is vLLM's.) The layer
 * is e0_model.layers[n_layers]: the same attention and MoE code as the main
 * layers, its KV cache kc / vc[n_layers] of the session, its experts an
 * extra layer of the expert stream (cache, I/O, paths).
 *
 * Details that are easy to get wrong:
 *  - the attention runs at the block's own positions (pos .. pos + n - 1),
 *    not the session's: s->pos is set to them for the layer and restored;
 *  - a draft runs position pos - 1 of the session with the id about to be
 *    evaluated there; if another id is evaluated instead (mtp_before), that
 *    position is run again;
 *  - a verify pass's second id may be rejected, so its rows are only held
 *    (npend 2) and the next draft runs them with the ids then known;
 *  - the state after the verify pass's first position (DeltaNet conv and
 *    recurrent states, deltanet.c) is kept while the pass runs, and a
 *    rejection swaps it in: attention rolls back by position alone.
 */
#include "model/forward.h"
#include "model/model.h"

#include "stream/budget.h"
#include "stream/switchglu.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mtp_session_new(e0_session *s, char *err) {
    const e0_model *m = s->m;
    const e0_config *c = &m->cfg;
    const int L = c->n_layers;
    const size_t H = (size_t)c->hidden, B = (size_t)s->n_batch;
    e0_mtp_state *t = calloc(1, sizeof *t);
    if (!t) return e0_fail(err, E0_ENOMEM, "out of memory");
    s->mtp = t;
    t->hid = malloc((B + 2) * H * sizeof *t->hid);
    t->cat = malloc(B * 2 * H * sizeof *t->cat);
    t->conv1 = calloc((size_t)L, sizeof *t->conv1);
    t->rec1 = calloc((size_t)L, sizeof *t->rec1);
    bool bad = !t->hid || !t->cat || !t->conv1 || !t->rec1;
    for (int i = 0; !bad && i < L; i++)
        if (m->layers[i].linear) {
            t->conv1[i] = malloc(budget_conv_bytes(c));
            t->rec1[i] = malloc(budget_rec_bytes(c));
            bad = !t->conv1[i] || !t->rec1[i];
        }
    if (bad) return e0_fail(err, E0_ENOMEM, "out of memory for the MTP block's state");
    mtp_reset(s);
    return 0;
}

void mtp_session_free(e0_session *s) {
    e0_mtp_state *t = s->mtp;
    if (!t) return;
    for (int i = 0; i < s->m->cfg.n_layers; i++) {
        if (t->conv1) free(t->conv1[i]);
        if (t->rec1) free(t->rec1[i]);
    }
    free(t->conv1);
    free(t->rec1);
    free(t->hid);
    free(t->cat);
    free(t);
    s->mtp = NULL;
}

void mtp_reset(e0_session *s) {
    e0_mtp_state *t = s->mtp;
    if (!t) return;
    t->pos = t->npend = 0;
    t->sync = true;
    t->keep = t->verified = false;
    t->drafted = -1;
}

void mtp_desync(e0_session *s) {
    if (!s->mtp) return;
    s->mtp->sync = false;
    s->mtp->verified = false;
}

void mtp_before(e0_session *s, int32_t first) {
    e0_mtp_state *t = s->mtp;
    if (!t) return;
    t->verified = false;
    if (t->drafted >= 0 && t->drafted != first) { /* hid[0] still holds that position's row */
        t->pos--;
        t->npend = 1;
    }
    t->drafted = -1;
}

void mtp_take(e0_session *s, const float *x, int T) {
    e0_mtp_state *t = s->mtp;
    if (!t || !t->sync) return;
    if (s->eng->mtp_auto_on && s->eng->mtp_auto.state == MTP_AUTO_OFF) { /* the block is done with */
        mtp_desync(s);
        return;
    }
    const e0_config *c = &s->m->cfg;
    const int H = c->hidden;
    rmsnorm(x, s->m->final_norm, H, T, c->rms_eps, t->hid + (size_t)t->npend * H);
    t->npend += T;
}

/* MTP positions t->pos .. + n - 1 from the held rows hid[0..n) and the ids
 * after them (next[0..n)), n <= n_batch, in s's scratch; logits (may be
 * NULL): [vocab] of the last. */
static int mtp_rows(e0_session *s, const float *hid, const int32_t *next, int n, float *logits,
                    char *err) {
    const e0_model *m = s->m;
    const e0_config *c = &m->cfg;
    const e0_mtp *x = &m->mtp;
    e0_mtp_state *t = s->mtp;
    e0_scratch *S = &s->s;
    const int H = c->hidden, L = c->n_layers;
    for (int i = 0; i < n; i++) {
        float *row = t->cat + (size_t)i * 2 * H;
        mat_dequant(model_mtp_embed(m), next[i], 0, H, row);
        rmsnorm(row, x->enorm, H, 1, c->rms_eps, row);
        rmsnorm(hid + (size_t)i * H, x->hnorm, H, 1, c->rms_eps, row + H);
    }
    /* a few positions (a draft) take the decode paths and row arithmetic,
     * as decode steps do; a prompt's catch-up the prefill ones */
    e0_run run = {s, 0, n};
    const bool few = n < K_PANEL_MIN_T;
    const e0_batch b = {.S = S, .run = &run, .nrun = 1, .T = n, .Tp = few ? 0 : n, .decode = few};
    batch_matmul(&b, &x->eh_proj, t->cat, 2 * H, S->x, H);
    const int32_t pos = s->pos;
    s->pos = t->pos; /* the layer attends at the block's positions */
    int rc = forward_half(&b, L, 0, err);
    if (!rc) rc = forward_half(&b, L, 1, err);
    s->pos = pos;
    if (rc) return rc;
    t->pos += n;
    if (logits) {
        rmsnorm(S->x + (size_t)(n - 1) * H, x->head_norm ? x->head_norm : m->final_norm, H, 1,
                c->rms_eps, S->h);
        /* the first draft_vocab ids (e0_engine_opts.mtp_vocab); the others are never drafted */
        const int64_t dv = x->draft_vocab > 0 && x->draft_vocab < c->vocab ? x->draft_vocab : c->vocab;
        const e0_mat head = mat_rows(model_mtp_head(m), 0, dv);
        mat_matmul_decode(&head, S->h, H, 1, logits, dv);
        for (int64_t i = dv; i < c->vocab; i++)
            logits[i] = -INFINITY;
    }
    return 0;
}

/* The held rows [0, n) with their next ids (the history's, then `last` when
 * n reaches past it), in passes of at most n_batch; the rows after them
 * move to the front. logits: of the last row, or NULL. */
static int mtp_run(e0_session *s, int n, int32_t last, float *logits, char *err) {
    e0_mtp_state *t = s->mtp;
    const int H = s->m->cfg.hidden;
    const double t0 = now_s();
    int rc = 0;
    for (int done = 0; !rc && done < n;) {
        int32_t next[E0_MTP_ROWS];
        int k = n - done < s->n_batch ? n - done : s->n_batch;
        const int32_t *ids = s->hist + t->pos + 1; /* the id after each position */
        if (t->pos + k == s->pos) { /* the last row's id is `last`, not yet in the history */
            if (k > E0_MTP_ROWS) {
                k--; /* the others first, from the history; that row alone next */
            } else {
                for (int i = 0; i < k; i++)
                    next[i] = i + 1 < k ? ids[i] : last;
                ids = next;
            }
        }
        rc = mtp_rows(s, t->hid + (size_t)done * H, ids, k, done + k == n ? logits : NULL, err);
        done += k;
    }
    if (rc) {
        mtp_desync(s);
        s->eng->mtp_s += now_s() - t0;
        return e0_wrap(err, rc, "the MTP block");
    }
    memmove(t->hid, t->hid + (size_t)n * H, (size_t)(t->npend - n) * H * sizeof *t->hid);
    t->npend -= n;
    s->eng->mtp_s += now_s() - t0;
    return 0;
}

int mtp_catch_up(e0_session *s, char *err) {
    e0_mtp_state *t = s->mtp;
    if (!t || !t->sync || t->npend < 2) return 0;
    return mtp_run(s, t->npend - 1, -1, NULL, err);
}

int mtp_catch_up_with(e0_session *s, int32_t next, char *err) {
    e0_mtp_state *t = s->mtp;
    if (!t || !t->sync || !t->npend) return 0;
    return mtp_run(s, t->npend, next, NULL, err);
}

/* ---- --mtp auto ------------------------------------------------------------ */

enum {
    MTP_AUTO_PASSES = 8,  /* passes of each kind MEASURE times */
    MTP_AUTO_BLOCK = 4,   /* in blocks of this many */
    MTP_AUTO_WINDOW = 32, /* verify passes between ON's decisions */
    MTP_AUTO_EVERY = 16,  /* ON: a block of one-id passes after this many verify passes */
};
/* Drafting must beat the plain rate by this much to be turned on: the
 * windows are short and a wrong ON costs more than a wrong OFF. */
#define MTP_AUTO_MARGIN 1.05

/* Whether the next pass should be a one-id pass, to be measured. */
static bool auto_wants_plain(const e0_mtp_auto *a) {
    if (a->state == MTP_AUTO_MEASURE) return ((a->np + a->nd) / MTP_AUTO_BLOCK) % 2 == 0 && a->np < MTP_AUTO_PASSES;
    return a->state == MTP_AUTO_ON && a->np < MTP_AUTO_BLOCK * (a->nd / MTP_AUTO_EVERY);
}

bool mtp_auto_drafts(e0_engine *e) {
    e0_mtp_auto *a = &e->mtp_auto;
    if (!e->mtp_auto_on) return true;
    const bool measured = a->state == MTP_AUTO_MEASURE
                              ? a->np >= MTP_AUTO_PASSES && a->nd >= MTP_AUTO_PASSES
                              : a->state == MTP_AUTO_ON && a->nd >= MTP_AUTO_WINDOW &&
                                    a->np >= MTP_AUTO_BLOCK * (MTP_AUTO_WINDOW / MTP_AUTO_EVERY);
    if (measured) {
        const double p = tune_median(a->tp, a->np), d = tune_median(a->td, a->nd);
        a->plain_tps = p > 0 ? 1.0 / p : 0;
        a->draft_tps = d > 0 ? (double)a->tokens / a->nd / d : 0;
        const double need = a->state == MTP_AUTO_MEASURE ? MTP_AUTO_MARGIN * a->plain_tps : a->plain_tps;
        a->state = a->draft_tps > need ? MTP_AUTO_ON : MTP_AUTO_OFF;
        a->np = a->nd = a->tokens = 0;
    }
    return a->state != MTP_AUTO_OFF && !auto_wants_plain(a);
}

void mtp_auto_plain(e0_engine *e, double s) {
    e0_mtp_auto *a = &e->mtp_auto;
    if (!e->mtp_auto_on || !auto_wants_plain(a) || a->np >= MTP_AUTO_MAX) return;
    a->tp[a->np++] = s;
}

void mtp_auto_verify(e0_engine *e, double s) {
    e0_mtp_auto *a = &e->mtp_auto;
    if (!e->mtp_auto_on || a->state == MTP_AUTO_OFF || a->nd >= MTP_AUTO_MAX) return;
    a->td[a->nd++] = s;
    a->tokens += 2;
}

void mtp_auto_dropped(e0_engine *e) {
    e0_mtp_auto *a = &e->mtp_auto;
    if (e->mtp_auto_on && a->state != MTP_AUTO_OFF && a->tokens > 0) a->tokens--;
}

const char *mtp_auto_note(const e0_engine *e, char *buf, size_t n) {
    const e0_mtp_auto *a = &e->mtp_auto;
    if (!e->mtp_auto_on) {
        snprintf(buf, n, "%s", "");
    } else if (a->state == MTP_AUTO_MEASURE) {
        snprintf(buf, n, "--mtp auto: still measuring (%d one-token and %d drafting passes so far)", a->np, a->nd);
    } else {
        snprintf(buf, n, "--mtp auto: %s (with drafts %.2f tok/s, without %.2f, measured on this machine)",
                 a->state == MTP_AUTO_ON ? "drafting" : "not drafting", a->draft_tps, a->plain_tps);
    }
    return buf;
}

const char *e0_engine_mtp_note(e0_engine *e) { return mtp_auto_note(e, e->mtp_note, sizeof e->mtp_note); }

bool e0_session_can_draft(const e0_session *s) {
    const e0_mtp_state *t = s ? s->mtp : NULL;
    return t && mtp_auto_drafts(s->eng) && t->sync && (t->npend > 0 || t->drafted >= 0) && t->pos + t->npend == s->pos &&
           s->pos + 2 <= s->n_ctx && session_part_layer(s) < 0;
}

int e0_session_draft(e0_session *s, int32_t id, float *logits, char *err) {
    if (!s || !logits) return e0_fail(err, E0_EINVAL, "draft: the session or logits buffer is NULL");
    if (!s->mtp)
        return e0_fail(err, E0_EINVAL, "draft: the session has no MTP block to draft with (the engine's "
                                       "mtp option, e0_session_opts.mtp)");
    if (id < 0 || id >= s->m->cfg.vocab)
        return e0_fail(err, E0_ERANGE, "draft: token id %d is outside the vocabulary [0, %d)", id,
                       s->m->cfg.vocab);
    if (!e0_session_can_draft(s))
        return e0_fail(err, E0_EINVAL,
                       "draft: nothing to draft from at position %d (an empty session, a full context, or "
                       "one evaluated in a batch, a merged pass or restored from a snapshot since its "
                       "last reset)",
                       s->pos);
    e0_mtp_state *t = s->mtp;
    mtp_before(s, -1); /* a draft again at the same position: the last one undone */
    const int n = t->npend, H = s->m->cfg.hidden;
    e0_engine *e = s->eng;
    const uint64_t read0 = stream_bytes_read(e->stream);
    const double t0 = now_s();
    int rc = mtp_run(s, n, id, logits, err);
    e->decode_bytes_read += stream_bytes_read(e->stream) - read0;
    t->draft_s = now_s() - t0;
    e->decode_s += t->draft_s; /* a draft is part of decoding */
    if (rc) return rc;
    /* the row of position pos - 1 to hid[0]: mtp_before runs it again
     * should another id than `id` be evaluated there */
    memmove(t->hid, t->hid + (size_t)(n - 1) * H, (size_t)H * sizeof *t->hid);
    t->drafted = id;
    return 0;
}

int e0_session_rollback(e0_session *s, bool rejected, char *err) {
    e0_mtp_state *t = s ? s->mtp : NULL;
    if (!t || !t->verified)
        return e0_fail(err, E0_EINVAL, "rollback: the session's last evaluation was not a verify pass");
    const e0_model *m = s->m;
    for (int i = 0; i < m->cfg.n_layers; i++)
        if (m->layers[i].linear) { /* the states after the first position, kept by the pass */
            float *c = s->conv[i], *r = s->rec[i];
            s->conv[i] = t->conv1[i], s->rec[i] = t->rec1[i];
            t->conv1[i] = c, t->rec1[i] = r;
        }
    s->pos--; /* attention: the KV rows past pos are never read */
    t->npend--;
    t->verified = false;
    s->eng->mtp_rejected += rejected;
    s->eng->decode_tokens--;
    mtp_auto_dropped(s->eng);
    return 0;
}
