#include "quant/mat.h"

#include "util/num.h"

#include <string.h>

static size_t stype_size(e0_stype s) { return s == E0_S_F32 ? 4 : 2; }

size_t mat_row_bytes(const e0_mat *m) {
    switch (m->type) {
    case E0_W_F32: return (size_t)m->cols * 4;
    case E0_W_BF16:
    case E0_W_F16: return (size_t)m->cols * 2;
    case E0_W_QAFF: return (size_t)m->cols * (size_t)m->bits / 8;
    }
    return 0;
}

size_t mat_srow_bytes(const e0_mat *m) {
    return m->type == E0_W_QAFF ? (size_t)(m->cols / m->group) * stype_size(m->stype) : 0;
}

uint64_t mat_bytes(const e0_mat *m) {
    return (uint64_t)m->rows * (mat_row_bytes(m) + 2 * mat_srow_bytes(m));
}

e0_mat mat_rows(const e0_mat *m, int64_t r0, int64_t n) {
    e0_mat v = *m;
    v.rows = n;
    v.w = (const uint8_t *)m->w + (size_t)r0 * mat_row_bytes(m);
    if (m->type == E0_W_QAFF) {
        v.scales = (const uint8_t *)m->scales + (size_t)r0 * mat_srow_bytes(m);
        v.biases = (const uint8_t *)m->biases + (size_t)r0 * mat_srow_bytes(m);
    }
    return v;
}

static float sval(e0_stype t, const void *p, size_t i) {
    switch (t) {
    case E0_S_BF16: return e0_bf16_to_f32(e0_ld16(p, i));
    case E0_S_F16: return e0_f16_to_f32(e0_ld16(p, i));
    case E0_S_F32: return e0_ldf32(p, i);
    }
    return 0;
}

void mat_dequant(const e0_mat *m, int64_t r, int64_t c0, int64_t n, float *out) {
    const uint8_t *row = (const uint8_t *)m->w + (size_t)r * mat_row_bytes(m);
    switch (m->type) {
    case E0_W_F32: memcpy(out, row + (size_t)c0 * 4, (size_t)n * 4); return;
    case E0_W_BF16:
        for (int64_t i = 0; i < n; i++) out[i] = e0_bf16_to_f32(e0_ld16(row, (size_t)(c0 + i)));
        return;
    case E0_W_F16:
        for (int64_t i = 0; i < n; i++) out[i] = e0_f16_to_f32(e0_ld16(row, (size_t)(c0 + i)));
        return;
    case E0_W_QAFF: {
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
    }
}

#define CHUNK 512

void mat_matmul_ref(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy) {
    float w[CHUNK];
    for (int64_t r = 0; r < m->rows; r++) {
        for (int64_t t = 0; t < T; t++) y[t * ldy + r] = 0.0f;
        for (int64_t c0 = 0; c0 < m->cols; c0 += CHUNK) {
            int64_t n = m->cols - c0 < CHUNK ? m->cols - c0 : CHUNK;
            mat_dequant(m, r, c0, n, w);
            for (int64_t t = 0; t < T; t++) {
                const float *xt = x + t * ldx + c0;
                float acc = 0.0f;
                for (int64_t i = 0; i < n; i++) acc += w[i] * xt[i];
                y[t * ldy + r] += acc;
            }
        }
    }
}

void mat_matmul(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy) {
    mat_matmul_ref(m, x, ldx, T, y, ldy);
}
