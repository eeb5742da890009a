/* The matrix formats (mat.h): row sizes, views, dequantization and the
 * 16-row panel layout. The scalar references are ref.c's, the kernel sets
 * and the dispatch to them dispatch.c's. */
#include "quant/mat.h"

#include "edge0.h"
#include "quant/ggml.h"
#include "quant/kernels.h"
#include "util/num.h"
#include "util/pool.h"

#include <assert.h>
#include <string.h>

static size_t stype_size(e0_stype s) {
    return s == E0_S_F32 ? 4 : 2;
}

size_t mat_row_bytes(const e0_mat *m) {
    switch (m->type) {
    case E0_W_F32:
        return (size_t)m->cols * 4;
    case E0_W_BF16:
    case E0_W_F16:
        return (size_t)m->cols * 2;
    case E0_W_QAFF:
        return (size_t)m->cols * (size_t)m->bits / 8 +
               (m->layout == E0_L_P16 ? 2 * (size_t)(m->cols / m->group) * stype_size(m->stype) : 0);
    case E0_W_GGML:
        return (size_t)ggml_row_bytes(m->gtype, (uint64_t)m->cols);
    }
    return 0;
}

size_t mat_srow_bytes(const e0_mat *m) {
    return m->type == E0_W_QAFF && m->layout == E0_L_ROWS
               ? (size_t)(m->cols / m->group) * stype_size(m->stype)
               : 0;
}

uint64_t mat_bytes(const e0_mat *m) {
    return (uint64_t)m->rows * (mat_row_bytes(m) + 2 * mat_srow_bytes(m));
}

e0_mat mat_rows(const e0_mat *m, int64_t r0, int64_t n) {
    e0_mat v = *m;
    v.rows = n;
    v.w = (const uint8_t *)m->w + (size_t)r0 * mat_row_bytes(m);
    if (m->type == E0_W_QAFF && m->layout == E0_L_P16) {
        assert(r0 % 16 == 0); /* views start on a panel */
    } else if (m->type == E0_W_QAFF) {
        v.scales = (const uint8_t *)m->scales + (size_t)r0 * mat_srow_bytes(m);
        v.biases = (const uint8_t *)m->biases + (size_t)r0 * mat_srow_bytes(m);
    }
    return v;
}

static float sval(e0_stype t, const void *p, size_t i) {
    switch (t) {
    case E0_S_BF16:
        return e0_bf16_to_f32(e0_ld16(p, i));
    case E0_S_F16:
        return e0_f16_to_f32(e0_ld16(p, i));
    case E0_S_F32:
        return e0_ldf32(p, i);
    }
    return 0;
}

/* ---- the 16-row panel layout (mat.h) --------------------------------------- */

bool mat_p16_ok(const e0_mat *m) {
    return m->type == E0_W_QAFF && m->layout == E0_L_ROWS && m->bits == 4 &&
           (m->group == 32 || m->group == 64 || m->group == 128) && m->cols % m->group == 0 &&
           m->cols <= K_PANEL_MAX_COLS && m->rows > 0 && m->rows % 16 == 0 && (m->stype == E0_S_BF16 || m->stype == E0_S_F16);
}

/* Bytes of one group of a panel: its words, then 16 scales and 16 biases. */
static size_t p16_group_bytes(const e0_mat *m) {
    return (size_t)(m->group / 8) * 64 + 64;
}

static void p16_dequant(const e0_mat *m, int64_t r, int64_t c0, int64_t n, float *out) {
    const uint8_t *pan = (const uint8_t *)m->w + (size_t)(r / 16) * 16 * mat_row_bytes(m);
    const size_t gb = p16_group_bytes(m), wpg = (size_t)(m->group / 8);
    const size_t i = (size_t)(r % 16);
    for (int64_t k = 0; k < n; k++) {
        const size_t c = (size_t)(c0 + k), g = c / (size_t)m->group;
        const uint8_t *gp = pan + g * gb;
        const uint32_t word = e0_ld32(gp, (c % (size_t)m->group) / 8 * 16 + i);
        const uint32_t q = (word >> (4 * (c % 8))) & 15u;
        out[k] = (float)q * sval(m->stype, gp + wpg * 64, i) + sval(m->stype, gp + wpg * 64 + 32, i);
    }
}

typedef struct {
    const e0_mat *m; /* the file layout, its parts in tmp */
    uint8_t *dst;
} p16_job;

static void p16_pack(void *ctx, int64_t p0, int64_t p1, int tid) {
    (void)tid;
    const p16_job *j = ctx;
    const e0_mat *m = j->m;
    const int64_t ng = m->cols / m->group, wpg = m->group / 8, wpr = m->cols / 8;
    const size_t ss = stype_size(m->stype), gb = p16_group_bytes(m);
    for (int64_t p = p0; p < p1; p++) {
        uint8_t *o = j->dst + (size_t)p * (size_t)ng * gb; /* 16 * mat_row_bytes of the packed m */
        for (int64_t g = 0; g < ng; g++, o += gb) {
            for (int64_t k = 0; k < wpg; k++)
                for (int64_t i = 0; i < 16; i++)
                    memcpy(o + (k * 16 + i) * 4,
                           (const uint32_t *)m->w + (p * 16 + i) * wpr + g * wpg + k, 4);
            for (int64_t i = 0; i < 16; i++) {
                const size_t at = (size_t)((p * 16 + i) * ng + g) * ss;
                memcpy(o + (size_t)wpg * 64 + (size_t)i * ss, (const uint8_t *)m->scales + at, ss);
                memcpy(o + (size_t)wpg * 64 + 32 + (size_t)i * ss, (const uint8_t *)m->biases + at,
                       ss);
            }
        }
    }
}

int mat_repack_p16(e0_mat *m, void *tmp) {
    if (!mat_p16_ok(m)) return E0_EINVAL;
    const size_t wb = (size_t)m->rows * mat_row_bytes(m), sb = (size_t)m->rows * mat_srow_bytes(m);
    /* the three parts sorted by address must abut */
    const uint8_t *at[3] = {m->w, m->scales, m->biases};
    size_t len[3] = {wb, sb, sb};
    for (int a = 0; a < 3; a++)
        for (int b = a + 1; b < 3; b++)
            if (at[b] < at[a]) {
                const uint8_t *t = at[a];
                const size_t l = len[a];
                at[a] = at[b], len[a] = len[b];
                at[b] = t, len[b] = l;
            }
    if (at[0] + len[0] != at[1] || at[1] + len[1] != at[2]) return E0_EINVAL;
    uint8_t *base = (uint8_t *)at[0];
    memcpy(tmp, base, wb + 2 * sb);
    e0_mat src = *m;
    src.w = (uint8_t *)tmp + ((const uint8_t *)m->w - base);
    src.scales = (uint8_t *)tmp + ((const uint8_t *)m->scales - base);
    src.biases = (uint8_t *)tmp + ((const uint8_t *)m->biases - base);
    p16_job j = {&src, base};
    pool_for(m->rows / 16, 1, p16_pack, &j);
    m->w = base;
    m->scales = m->biases = NULL;
    m->layout = E0_L_P16;
    return 0;
}

void mat_dequant(const e0_mat *m, int64_t r, int64_t c0, int64_t n, float *out) {
    const uint8_t *row = (const uint8_t *)m->w + (size_t)r * mat_row_bytes(m);
    switch (m->type) {
    case E0_W_F32:
        memcpy(out, row + (size_t)c0 * 4, (size_t)n * 4);
        return;
    case E0_W_BF16:
        for (int64_t i = 0; i < n; i++)
            out[i] = e0_bf16_to_f32(e0_ld16(row, (size_t)(c0 + i)));
        return;
    case E0_W_F16:
        for (int64_t i = 0; i < n; i++)
            out[i] = e0_f16_to_f32(e0_ld16(row, (size_t)(c0 + i)));
        return;
    case E0_W_QAFF: {
        if (m->layout == E0_L_P16) {
            p16_dequant(m, r, c0, n, out);
            return;
        }
        const size_t gpr = (size_t)(m->cols / m->group);
        const unsigned bits = (unsigned)m->bits, mask = (1u << bits) - 1;
        for (int64_t i = 0; i < n; i++) {
            uint64_t c = (uint64_t)(c0 + i), bit = c * bits;
            /* a value may straddle two words when 32 % bits != 0 (3, 5, 6 bits) */
            uint64_t lo = e0_ld32(row, bit / 32);
            if (bit % 32 + bits > 32) lo |= (uint64_t)e0_ld32(row, bit / 32 + 1) << 32;
            uint32_t q = (uint32_t)(lo >> (bit % 32)) & mask;
            size_t g = (size_t)r * gpr + c / (uint64_t)m->group;
            out[i] = (float)q * sval(m->stype, m->scales, g) + sval(m->stype, m->biases, g);
        }
        return;
    }
    case E0_W_GGML: {
        /* block by block through a buffer of one block (256 values at most) */
        const ggml_type_info *ti = ggml_info(m->gtype);
        const int64_t bk = ti->blck;
        float tmp[GGML_QK_K];
        for (int64_t c = c0; c < c0 + n;) {
            const int64_t b = c / bk, off = c - b * bk;
            const int64_t k = bk - off < c0 + n - c ? bk - off : c0 + n - c;
            ggml_dequant(m->gtype, row + (size_t)b * (size_t)ti->size, tmp, 1);
            memcpy(out + (c - c0), tmp + off, (size_t)k * sizeof *tmp);
            c += k;
        }
        return;
    }
    }
}
