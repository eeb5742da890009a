#include "stream/bundle.h"

#include "util/err.h"

#include <string.h>
#include <sys/mman.h>

static int add_ranges(const st_set *st, const e0_mat *m, xb_plan *p, char *err) {
    const void *ptr[3] = {m->w, m->scales, m->biases};
    const size_t len[3] = {(size_t)m->rows * mat_row_bytes(m), (size_t)m->rows * mat_srow_bytes(m),
                           (size_t)m->rows * mat_srow_bytes(m)};
    const int n = m->type == E0_W_QAFF ? 3 : 1;
    for (int i = 0; i < n; i++) {
        if (p->nr == XB_MAX_RANGES) return e0_fail(err, E0_EINVAL, "bundle has too many ranges");
        xb_range *r = &p->r[p->nr++];
        if (st_locate(st, ptr[i], &r->file, &r->off) != 0)
            return e0_fail(err, E0_EINVAL, "expert weights are not inside the checkpoint mapping");
        r->len = len[i];
        const size_t head = (size_t)(r->off % XB_ALIGN); /* span start to range start */
        r->at = p->bytes + head;
        p->bytes += (head + len[i] + XB_ALIGN - 1) & ~(size_t)(XB_ALIGN - 1);
        p->data += len[i];
    }
    return 0;
}

int xb_plan_expert(const e0_model *m, int layer, int e, xb_order order, xb_plan *out, char *err) {
    const e0_layer *ly = &m->layers[layer];
    const e0_expert *x = ly->xfile ? &ly->xfile[e] : &ly->experts[e]; /* the file's layout */
    memset(out, 0, sizeof *out);
    if (ly->fused) {
        /* gate and up are the two halves of one contiguous [2I, H] slice */
        e0_mat gu = x->gate;
        gu.rows = 2 * x->gate.rows;
        out->nparts = 2;
        out->tmpl[0] = gu;
        out->tmpl[1] = x->down;
    } else {
        out->nparts = 3;
        out->tmpl[0] = order == XB_ORDER_MATH ? x->up : x->gate;
        out->tmpl[1] = order == XB_ORDER_MATH ? x->gate : x->up;
        out->tmpl[2] = x->down;
    }
    for (int i = 0; i < out->nparts; i++) {
        int rc = add_ranges(m->st, &out->tmpl[i], out, err);
        if (rc) return rc;
    }
    return 0;
}

int xb_read(const st_set *st, const xb_plan *p, uint8_t *buf, char *err) {
    for (int i = 0; i < p->nr; i++) {
        int rc = st_pread(st, p->r[i].file, p->r[i].off, p->r[i].len, buf + p->r[i].at, err);
        if (rc) return rc;
    }
    return 0;
}

int xb_read_direct(const st_set *st, const xb_plan *p, uint8_t *buf, bool *all_direct, char *err) {
    st_read rd[XB_MAX_RANGES];
    for (int i = 0; i < p->nr; i++)
        rd[i] = (st_read){p->r[i].file, p->r[i].off, p->r[i].len, buf + p->r[i].at};
    return st_pread_direct_many(st, rd, p->nr, all_direct, err);
}

static e0_mat view(const e0_mat *t, const uint8_t *buf, const xb_range *r) {
    e0_mat v = *t;
    v.w = buf + r[0].at;
    if (t->type == E0_W_QAFF) {
        v.scales = buf + r[1].at;
        v.biases = buf + r[2].at;
    }
    return v;
}

void xb_views(const xb_plan *p, const uint8_t *buf, e0_expert *out) {
    const xb_range *r = p->r;
    e0_mat parts[3];
    for (int i = 0; i < p->nparts; i++) {
        parts[i] = view(&p->tmpl[i], buf, r);
        r += p->tmpl[i].type == E0_W_QAFF ? 3 : 1;
    }
    if (p->nparts == 2) {
        const int64_t I = parts[0].rows / 2;
        out->gate = mat_rows(&parts[0], 0, I);
        out->up = mat_rows(&parts[0], I, I);
        out->down = parts[1];
    } else {
        out->up = parts[0];
        out->gate = parts[1];
        out->down = parts[2];
    }
}

void xb_willneed(const st_set *st, const xb_plan *p) {
    for (int i = 0; i < p->nr; i++)
        st_advise(st, p->r[i].file, p->r[i].off, p->r[i].len, MADV_WILLNEED);
}
