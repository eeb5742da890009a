/* Session snapshots (edge0.h, e0_session_snapshot): a copy of everything a
 * session's next evaluation reads, taken at its current position.
 *
 * What the state of a session at position p is (model.h, e0_session):
 *  - per full-attention layer, K and V rows [0, p) of the cache ([n_ctx,
 *    nkv*hd] each, row-major, so the rows are the first p * nkv*hd floats);
 *  - per DeltaNet layer, the conv state [K-1, conv_dim] and the recurrent
 *    state [Hv, Dk, Dv]: these summarise the whole past and cannot be
 *    rewound, which is why a hybrid model needs a snapshot at every point a
 *    later request may branch from;
 *  - the ids [0, p) (the history e0_generate compares prompts against);
 *  - with route stickiness (synthetic models), each position's experts
 *    [p, n_layers, top_k]: the router of position p reads row p - 1, and an
 *    attention-only session truncated later (session_prepare) reads an
 *    earlier row, so all p rows are kept;
 *  - with the MTP block (model/mtp.c), its K and V rows [0, q) and the main
 *    model's hidden rows it holds for positions q .. p - 1 (q: its
 *    positions; a draft not yet verified counts as undone, its row held):
 *    a restored session drafts as the snapshotted one would.
 * Scratch buffers are not state: every pass overwrites what it reads.
 *
 * A snapshot is one allocation: the header, then the arrays above at the
 * offsets the header records. Restoring copies them back and sets pos, so
 * the restored session's next evaluation reads exactly the bytes the
 * snapshotted one would have read: logits bit-identical to the session
 * that was snapshotted continuing itself. */
#include "model/model.h"

#include "stream/budget.h"
#include "util/err.h"

#include <stdlib.h>
#include <string.h>

struct e0_snapshot {
    const e0_engine *eng; /* the engine it was taken from; restores only there */
    int32_t pos;          /* positions held */
    int32_t n_ctx;        /* the source session's context (informative) */
    size_t bytes;         /* the whole allocation */
    int32_t *ids;         /* [pos] */
    uint16_t *route;      /* [pos, n_layers, top_k] or NULL (no route stickiness) */
    char *data;           /* per layer in order: attention K [pos, kvd], V [pos, kvd] (the
                             cache's type); DeltaNet conv [K-1, C], rec [Hv, Dk, Dv] (floats) */
    /* the MTP block's state (an engine that computes it): K, V [mtp_pos, kvd], then the held
     * hidden rows [mtp_npend, H]; mtp_ok false: the session had none (or not in sync) */
    char *mtp;
    bool mtp_ok;
    int32_t mtp_pos, mtp_npend;
};

/* Bytes of one layer's state in a snapshot of `pos` positions. */
static size_t layer_bytes(const e0_engine *e, int li, size_t pos) {
    const e0_config *c = &e->model.cfg;
    if (e->model.layers[li].linear) return budget_conv_bytes(c) + budget_rec_bytes(c);
    return budget_kv_layer_bytes(c, pos, e->opts.kv_type);
}

/* uint16 route entries per position (0 without route stickiness). */
static size_t route_per_pos(const e0_engine *e) {
    return config_route_kept(&e->model.cfg) ? (size_t)e->model.cfg.n_layers * (size_t)e->top_k : 0;
}

static size_t align16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

/* Offsets of the arrays in one allocation for `pos` positions. */
typedef struct {
    size_t ids, route, data, mtp, total;
} snap_layout;

/* The MTP block's share: its KV rows of pos positions and E0_MTP_ROWS hidden rows. */
static size_t mtp_bytes(const e0_engine *e, size_t pos) {
    if (!e->model.mtp.on) return 0;
    return budget_kv_layer_bytes(&e->model.cfg, pos, e->opts.kv_type) +
           (size_t)E0_MTP_ROWS * (size_t)e->model.cfg.hidden * sizeof(float);
}

static snap_layout layout_of(const e0_engine *e, size_t pos) {
    snap_layout l;
    l.ids = align16(sizeof(struct e0_snapshot));
    l.route = align16(l.ids + pos * sizeof(int32_t));
    l.data = align16(l.route + pos * route_per_pos(e) * sizeof(uint16_t));
    size_t bytes = 0;
    for (int li = 0; li < e->model.cfg.n_layers; li++)
        bytes += layer_bytes(e, li, pos);
    l.mtp = align16(l.data + bytes);
    l.total = l.mtp + mtp_bytes(e, pos);
    return l;
}

/* The session's MTP state into the snapshot (a draft not verified yet
 * undone: its position is run again after a restore). */
static void mtp_save(const e0_session *s, e0_snapshot *snap) {
    const e0_mtp_state *t = s->mtp;
    snap->mtp_ok = t && t->sync && t->npend + (t->drafted >= 0) <= E0_MTP_ROWS;
    if (!snap->mtp_ok) return;
    const e0_config *c = &s->m->cfg;
    const size_t H = (size_t)c->hidden, kv = budget_kv_layer_bytes(c, (size_t)snap->pos, s->eng->opts.kv_type) / 2;
    snap->mtp_pos = t->pos - (t->drafted >= 0);
    snap->mtp_npend = t->npend + (t->drafted >= 0); /* a draft leaves its row at hid[0] */
    const size_t row = kv / (size_t)(snap->pos ? snap->pos : 1);
    memcpy(snap->mtp, s->kc[c->n_layers], row * (size_t)snap->mtp_pos);
    memcpy(snap->mtp + kv, s->vc[c->n_layers], row * (size_t)snap->mtp_pos);
    memcpy(snap->mtp + 2 * kv, t->hid, (size_t)snap->mtp_npend * H * sizeof(float));
}

/* Back into a session that drafts; without it in the snapshot, no drafts. */
static void mtp_load(e0_session *s, const e0_snapshot *snap) {
    e0_mtp_state *t = s->mtp;
    if (!t) return;
    if (!snap->mtp_ok) {
        mtp_desync(s);
        return;
    }
    const e0_config *c = &s->m->cfg;
    const size_t H = (size_t)c->hidden, kv = budget_kv_layer_bytes(c, (size_t)snap->pos, s->eng->opts.kv_type) / 2;
    const size_t row = kv / (size_t)(snap->pos ? snap->pos : 1);
    memcpy(s->kc[c->n_layers], snap->mtp, row * (size_t)snap->mtp_pos);
    memcpy(s->vc[c->n_layers], snap->mtp + kv, row * (size_t)snap->mtp_pos);
    memcpy(t->hid, snap->mtp + 2 * kv, (size_t)snap->mtp_npend * H * sizeof(float));
    mtp_reset(s);
    t->pos = snap->mtp_pos;
    t->npend = snap->mtp_npend;
}

size_t e0_snapshot_size(const e0_engine *e, int32_t n_pos) {
    return layout_of(e, n_pos > 0 ? (size_t)n_pos : 0).total;
}

int e0_session_snapshot(const e0_session *s, e0_snapshot **out, char *err) {
    if (!out) return e0_fail(err, E0_EINVAL, "snapshot: the output pointer is NULL");
    *out = NULL;
    if (!s) return e0_fail(err, E0_EINVAL, "snapshot: the session is NULL");
    if (s->gs) return e0_fail(err, E0_EUNSUPPORTED, "snapshot: the session's states are on the GPU");
    if (session_part_layer(s) >= 0)
        return e0_fail(err, E0_EINVAL, "snapshot: a prefill pass is paused between layers");
    const e0_engine *e = s->eng;
    const e0_model *m = s->m;
    const size_t pos = (size_t)s->pos;
    const snap_layout l = layout_of(e, pos);
    char *blk = malloc(l.total);
    if (!blk)
        return e0_fail(err, E0_ENOMEM, "snapshot: out of memory for %zu bytes (%zu positions)",
                       l.total, pos);
    e0_snapshot *snap = (e0_snapshot *)blk;
    *snap = (e0_snapshot){.eng = e, .pos = s->pos, .n_ctx = s->n_ctx, .bytes = l.total};
    snap->ids = (int32_t *)(blk + l.ids);
    snap->route = route_per_pos(e) ? (uint16_t *)(blk + l.route) : NULL;
    snap->data = blk + l.data;
    snap->mtp = blk + l.mtp;
    if (pos) memcpy(snap->ids, s->hist, pos * sizeof *snap->ids);
    if (snap->route && pos)
        memcpy(snap->route, s->route_hist, pos * route_per_pos(e) * sizeof *snap->route);
    char *d = snap->data;
    for (int li = 0; li < m->cfg.n_layers; li++) {
        const size_t n = layer_bytes(e, li, pos);
        if (m->layers[li].linear) {
            const size_t nconv = budget_conv_bytes(&m->cfg);
            memcpy(d, s->conv[li], nconv);
            memcpy(d + nconv, s->rec[li], n - nconv);
        } else if (n) {
            memcpy(d, s->kc[li], n / 2);
            memcpy(d + n / 2, s->vc[li], n / 2);
        }
        d += n;
    }
    if (e->model.mtp.on) mtp_save(s, snap);
    *out = snap;
    return 0;
}

int e0_session_restore(e0_session *s, const e0_snapshot *snap, char *err) {
    if (!s || !snap) return e0_fail(err, E0_EINVAL, "restore: the session or snapshot is NULL");
    if (s->gs) return e0_fail(err, E0_EUNSUPPORTED, "restore: the session's states are on the GPU");
    if (session_part_layer(s) >= 0)
        return e0_fail(err, E0_EINVAL, "restore: a prefill pass is paused between layers");
    if (snap->eng != s->eng)
        return e0_fail(err, E0_EINVAL,
                       "restore: the snapshot was taken from another engine than the session's");
    if (snap->pos > s->n_ctx)
        return e0_fail(err, E0_ERANGE,
                       "restore: the snapshot holds %d positions but the session's n_ctx is %d "
                       "(the snapshot came from a session of n_ctx %d)",
                       snap->pos, s->n_ctx, snap->n_ctx);
    const e0_model *m = s->m;
    const size_t pos = (size_t)snap->pos;
    if (pos) memcpy(s->hist, snap->ids, pos * sizeof *snap->ids);
    if (snap->route && pos)
        memcpy(s->route_hist, snap->route, pos * route_per_pos(s->eng) * sizeof *snap->route);
    const char *d = snap->data;
    for (int li = 0; li < m->cfg.n_layers; li++) {
        const size_t n = layer_bytes(s->eng, li, pos);
        if (m->layers[li].linear) {
            const size_t nconv = budget_conv_bytes(&m->cfg);
            memcpy(s->conv[li], d, nconv);
            memcpy(s->rec[li], d + nconv, n - nconv);
        } else if (n) {
            memcpy(s->kc[li], d, n / 2);
            memcpy(s->vc[li], d + n / 2, n / 2);
        }
        d += n;
    }
    s->pos = snap->pos;
    mtp_load(s, snap);
    return 0;
}

size_t e0_snapshot_bytes(const e0_snapshot *snap) {
    return snap ? snap->bytes : 0;
}

const int32_t *e0_snapshot_ids(const e0_snapshot *snap, size_t *n) {
    *n = snap ? (size_t)snap->pos : 0;
    return snap ? snap->ids : NULL;
}

void e0_snapshot_free(e0_snapshot *snap) {
    free(snap);
}
