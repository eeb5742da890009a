/* The resident weights after loading: readahead of a layer's bytes into
 * the page cache, pinning them out of the file mappings, --io load of the
 * tensors the model computes with, and the 16-row panel repack
 * (weights/weights.h). */
#include "weights/weights.h"

#include "quant/mat.h"
#include "util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- readahead of resident weights ---------------------------------------- */

/* len bytes at p, where p lies in the checkpoint's mapping (weights the
 * loader converted into memory of their own are skipped). */
static void advise_bytes(const st_set *st, const void *p, uint64_t len) {
    uint32_t file;
    uint64_t off;
    if (p && len && st_locate(st, p, &file, &off) == 0)
        st_advise(st, file, off, len, MADV_WILLNEED);
}

static void advise_mat(const st_set *st, const e0_mat *x) {
    if (x->rows <= 0) return;
    advise_bytes(st, x->w, (uint64_t)x->rows * mat_row_bytes(x));
    if (x->type == E0_W_QAFF) {
        advise_bytes(st, x->scales, (uint64_t)x->rows * mat_srow_bytes(x));
        advise_bytes(st, x->biases, (uint64_t)x->rows * mat_srow_bytes(x));
    }
}

void model_advise_layer(const e0_model *m, int layer) {
    if (layer >= m->cfg.n_layers) {
        advise_mat(m->st, &m->lm_head);
        return;
    }
    const e0_layer *l = &m->layers[layer];
    const e0_mat *mats[] = {&l->q,         &l->k,        &l->v,       &l->o,       &l->qkvz,
                            &l->ba,        &l->qkv,      &l->z,       &l->b,       &l->a,
                            &l->out,       &l->router,   &l->sh_gate, &l->sh_up,   &l->sh_down,
                            &l->sh_router, &l->mlp_gate, &l->mlp_up,  &l->mlp_down};
    for (size_t i = 0; i < sizeof mats / sizeof *mats; i++)
        advise_mat(m->st, mats[i]);
}

/* The bytes of one matrix view: its rows of codes, scales and biases. */
static size_t mat_spans(const e0_mat *x, st_span *out) {
    size_t n = 0;
    if (!x->rows) return 0;
    out[n++] = (st_span){x->w, (uint64_t)x->rows * mat_row_bytes(x)};
    if (x->scales) out[n++] = (st_span){x->scales, (uint64_t)x->rows * mat_srow_bytes(x)};
    if (x->biases) out[n++] = (st_span){x->biases, (uint64_t)x->rows * mat_srow_bytes(x)};
    return n;
}

/* The tensors the model does not compute with (e0_model.used), as spans
 * appended to v; returns how many. */
static size_t unused_spans(const e0_model *m, st_span *v) {
    size_t n = 0;
    for (size_t k = 0; k < st_count(m->st); k++)
        if (m->used[k] != 1 && st_at(m->st, k)->nbytes)
            v[n++] = (st_span){st_at(m->st, k)->data, st_at(m->st, k)->nbytes};
    return n;
}

int model_pin_resident(e0_model *m, uint64_t *pinned, char *err) {
    size_t cap = st_count(m->st), n = 0;
    for (int li = 0; li < model_layers(m); li++) /* the MTP block's experts are streamed too */
        if (m->layers[li].moe && m->layers[li].experts) cap += 9 * (size_t)m->cfg.n_experts;
    st_span *v = malloc((cap ? cap : 1) * sizeof *v);
    if (!v) return e0_fail(err, E0_ENOMEM, "out of memory");
    for (int li = 0; li < model_layers(m); li++) {
        const e0_layer *ly = &m->layers[li];
        if (!ly->moe || !ly->experts) continue;
        for (int e = 0; e < m->cfg.n_experts; e++) {
            n += mat_spans(&ly->experts[e].gate, v + n);
            n += mat_spans(&ly->experts[e].up, v + n);
            n += mat_spans(&ly->experts[e].down, v + n);
        }
    }
    n += unused_spans(m, v + n);
    int rc = st_set_pin(m->st, v, n, pinned, err);
    free(v);
    return rc;
}

int model_load_weights(e0_model *m, st_load_fn progress, void *ctx, char *err) {
    st_span *v = malloc((st_count(m->st) + 1) * sizeof *v);
    if (!v) return e0_fail(err, E0_ENOMEM, "out of memory");
    const size_t n = unused_spans(m, v);
    int rc = st_set_load(m->st, v, n, progress, ctx, err);
    free(v);
    return rc;
}

/* ---- the 16-row panel layout, made once at load (mat.h) ------------------- */

typedef struct {
    uint8_t *tmp; /* scratch of the largest matrix so far */
    size_t cap;
    bool oom;
    int n;        /* matrices repacked */
    bool dry;     /* only count the bytes that would be repacked */
    uint64_t done, total;
    st_load_fn progress;
    void *ctx;
} repacker;

/* x repacked in place when it qualifies; true if it now is E0_L_P16. */
static bool repack_mat(repacker *R, e0_mat *x) {
    if (R->oom || !mat_p16_ok(x)) return false;
    const size_t need = (size_t)mat_bytes(x);
    if (R->dry) {
        R->total += need;
        return false;
    }
    if (need > R->cap) {
        free(R->tmp);
        R->cap = 0;
        if (!(R->tmp = malloc(need))) {
            R->oom = true;
            return false;
        }
        R->cap = need;
    }
    if (mat_repack_p16(x, R->tmp) != 0) return false;
    R->n++;
    R->done += need;
    if (R->progress) R->progress(R->ctx, R->done, R->total);
    return true;
}

/* The stacked tensor whose rows r0 + e * stride on are expert e's view
 * (the member at byte `part` of each e0_expert), if all E views are so. */
static bool stacked_of(const e0_expert *xs, int64_t E, size_t part, int64_t r0, int64_t stride,
                       e0_mat *whole) {
    const e0_mat *v0 = (const e0_mat *)((const uint8_t *)&xs[0] + part);
    if (v0->type != E0_W_QAFF || v0->layout != E0_L_ROWS || r0 % 16 || stride % 16 ||
        v0->rows % 16)
        return false;
    /* row 0 of the stack: r0 rows before expert 0's view */
    *whole = *v0;
    whole->w = (const uint8_t *)v0->w - (size_t)r0 * mat_row_bytes(v0);
    whole->scales = (const uint8_t *)v0->scales - (size_t)r0 * mat_srow_bytes(v0);
    whole->biases = (const uint8_t *)v0->biases - (size_t)r0 * mat_srow_bytes(v0);
    whole->rows = E * stride;
    for (int64_t e = 0; e < E; e++) {
        const e0_mat *v = (const e0_mat *)((const uint8_t *)&xs[e] + part);
        const e0_mat want = mat_rows(whole, r0 + e * stride, v0->rows);
        if (v->w != want.w || v->scales != want.scales || v->biases != want.biases ||
            v->rows != want.rows)
            return false;
    }
    return true;
}

/* Experts in stacked tensors (gate / up / down, or gate_up / down) are
 * repacked a tensor at a time and their views remade; per-expert tensors
 * (the hf layout) one matrix at a time. */
static int repack_experts(repacker *R, const e0_config *c, e0_layer *ly) {
    const int64_t E = c->n_experts, I = c->moe_inter, H = c->hidden;
    const size_t parts[3] = {offsetof(e0_expert, gate), offsetof(e0_expert, up),
                             offsetof(e0_expert, down)};
    const int64_t r0[3] = {0, ly->fused ? I : 0, 0};
    const int64_t stride[3] = {ly->fused ? 2 * I : I, ly->fused ? 2 * I : I, H};
    e0_mat whole[3];
    bool stacked = true;
    for (int p = 0; p < 3 && stacked; p++)
        stacked = stacked_of(ly->experts, E, parts[p], r0[p], stride[p], &whole[p]);
    if (R->dry) {
        for (int p = ly->fused ? 1 : 0; p < 3 && stacked; p++) repack_mat(R, &whole[p]);
        for (int64_t e = 0; e < E && !stacked; e++) {
            repack_mat(R, &ly->experts[e].gate);
            repack_mat(R, &ly->experts[e].up);
            repack_mat(R, &ly->experts[e].down);
        }
        return 0;
    }
    if (!(ly->xfile = malloc((size_t)E * sizeof *ly->xfile))) return 0;
    memcpy(ly->xfile, ly->experts, (size_t)E * sizeof *ly->xfile);
    int n = 0;
    if (stacked) {
        for (int p = ly->fused ? 1 : 0; p < 3; p++) { /* fused: gate_up is whole[1] too */
            if (!repack_mat(R, &whole[p])) continue;
            n++;
            for (int64_t e = 0; e < E; e++) {
                e0_mat *v = (e0_mat *)((uint8_t *)&ly->experts[e] + parts[p]);
                *v = mat_rows(&whole[p], r0[p] + e * stride[p], v->rows);
                if (ly->fused && p == 1) ly->experts[e].gate = mat_rows(&whole[p], e * stride[p], I);
            }
        }
    } else {
        for (int64_t e = 0; e < E; e++)
            n += repack_mat(R, &ly->experts[e].gate) + repack_mat(R, &ly->experts[e].up) +
                 repack_mat(R, &ly->experts[e].down);
    }
    if (!n) {
        free(ly->xfile);
        ly->xfile = NULL;
    }
    return n;
}

/* One pass over every matrix that qualifies: counting (R->dry) or repacking. */
static void repack_all(repacker *R, e0_model *m) {
    if (m->lm_head.w != m->embed.w) repack_mat(R, &m->lm_head); /* tied: the lookup reads rows */
    if (m->mtp.on) {
        repack_mat(R, &m->mtp.eh_proj);
        if (m->mtp.head.rows && m->mtp.head.w != m->mtp.embed.w) repack_mat(R, &m->mtp.head);
    }
    for (int li = 0; li < model_layers(m); li++) { /* the MTP block's layer too */
        e0_layer *l = &m->layers[li];
        /* not the routers: mat_matmul_f32 has no panel kernel */
        e0_mat *mats[] = {&l->q,       &l->k,     &l->v,       &l->o,        &l->qkvz,
                          &l->ba,      &l->qkv,   &l->z,       &l->b,        &l->a,
                          &l->out,     &l->sh_gate, &l->sh_up, &l->sh_down, &l->mlp_gate,
                          &l->mlp_up,  &l->mlp_down};
        for (size_t i = 0; i < sizeof mats / sizeof *mats; i++)
            repack_mat(R, mats[i]);
        if (l->moe && l->experts) repack_experts(R, &m->cfg, l);
    }
}

int model_repack(e0_model *m, st_load_fn progress, void *ctx) {
    if (st_set_writable(m->st, true) != 0) {
        st_set_writable(m->st, false);
        return 0;
    }
    repacker R = {.dry = true};
    repack_all(&R, m);
    R.dry = false, R.progress = progress, R.ctx = ctx;
    repack_all(&R, m);
    free(R.tmp);
    st_set_writable(m->st, false);
    return R.n;
}
