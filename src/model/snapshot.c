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
 *    earlier row, so all p rows are kept.
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
    size_t ids, route, data, total;
} snap_layout;

static snap_layout layout_of(const e0_engine *e, size_t pos) {
    snap_layout l;
    l.ids = align16(sizeof(struct e0_snapshot));
    l.route = align16(l.ids + pos * sizeof(int32_t));
    l.data = align16(l.route + pos * route_per_pos(e) * sizeof(uint16_t));
    size_t bytes = 0;
    for (int li = 0; li < e->model.cfg.n_layers; li++)
        bytes += layer_bytes(e, li, pos);
    l.total = l.data + bytes;
    return l;
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
    mtp_desync(s); /* the MTP block's state is not in snapshots: no drafts until a reset */
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
