#include "quant/quantize.h"

#include "util/num.h"

#include <math.h>
#include <string.h>

/* Per group, in f32: scale = max((max - min) / n_bins, 1e-7); if |min| >
 * |max| keep the scale positive and edge = min, else negate the scale and
 * edge = max; q0 = rint(edge / scale); if q0 != 0 then scale = edge / q0,
 * bias = edge, else bias = 0; q = clip(rint((w - bias) / scale), 0, n_bins).
 * Scale and bias are then stored as bf16; q uses the f32 values. */
void quant_row_ref(const float *w, int64_t cols, int bits, int group, uint32_t *words,
                   uint16_t *scales, uint16_t *biases) {
    const float n_bins = (float)((1u << bits) - 1);
    memset(words, 0, (size_t)(cols * bits / 32) * sizeof *words);
    for (int64_t g0 = 0; g0 < cols; g0 += group) {
        const float *x = w + g0;
        float mx = x[0], mn = x[0];
        for (int i = 1; i < group; i++) {
            mx = x[i] > mx ? x[i] : mx;
            mn = x[i] < mn ? x[i] : mn;
        }
        float scale = fmaxf((mx - mn) / n_bins, 1e-7f), edge;
        if (fabsf(mn) > fabsf(mx)) {
            edge = mn;
        } else {
            scale = -scale;
            edge = mx;
        }
        const float q0 = rintf(edge / scale);
        float bias = 0.0f;
        if (q0 != 0.0f) {
            scale = edge / q0;
            bias = edge;
        }
        for (int i = 0; i < group; i++) {
            float q = rintf((x[i] - bias) / scale);
            q = q >= 0.0f ? q : 0.0f; /* NaN -> 0 */
            q = q > n_bins ? n_bins : q;
            uint64_t bit = (uint64_t)(g0 + i) * (uint64_t)bits, v = (uint64_t)q << (bit % 32);
            words[bit / 32] |= (uint32_t)v;
            if (bit % 32 + (uint64_t)bits > 32) words[bit / 32 + 1] |= (uint32_t)(v >> 32);
        }
        scales[g0 / group] = e0_f32_to_bf16(scale);
        biases[g0 / group] = e0_f32_to_bf16(bias);
    }
}

/* quant_row_ref's arithmetic step for step, for 4 and 8 bits: the same f32 min/max, scale, edge,
 * q0 and bias; per element (w - bias) / scale clamped to [0, n_bins] and
 * rounded to nearest even by the 1.5 * 2^23 trick (exact for |x| < 2^22,
 * and the clamp keeps x in [0, 255]). Clamping before rounding equals
 * rounding before clamping because 0 and n_bins are integers. */
void quant_row(const float *w, int64_t cols, int bits, int group, uint32_t *words, uint16_t *scales,
               uint16_t *biases) {
    if ((bits != 4 && bits != 8) || group > 128 || group % 8) {
        quant_row_ref(w, cols, bits, group, words, scales, biases);
        return;
    }
    const float n_bins = (float)((1u << bits) - 1), magic = 12582912.0f; /* 1.5 * 2^23 */
    uint8_t codes[128];
    for (int64_t g0 = 0; g0 < cols; g0 += group) {
        const float *x = w + g0;
        float mx = x[0], mn = x[0];
        for (int i = 1; i < group; i++) {
            mx = x[i] > mx ? x[i] : mx;
            mn = x[i] < mn ? x[i] : mn;
        }
        float scale = fmaxf((mx - mn) / n_bins, 1e-7f), edge;
        if (fabsf(mn) > fabsf(mx)) {
            edge = mn;
        } else {
            scale = -scale;
            edge = mx;
        }
        const float q0 = rintf(edge / scale);
        float bias = 0.0f;
        if (q0 != 0.0f) {
            scale = edge / q0;
            bias = edge;
        }
        for (int i = 0; i < group; i++) {
            float q = (x[i] - bias) / scale;
            q = q > 0.0f ? q : 0.0f; /* NaN -> 0 */
            q = q < n_bins ? q : n_bins;
            q = (q + magic) - magic;
            codes[i] = (uint8_t)(int)q;
        }
        if (bits == 4) {
            uint32_t *o = words + g0 / 8;
            for (int k = 0; k < group / 8; k++) {
                const uint8_t *c = codes + 8 * k;
                o[k] = (uint32_t)c[0] | (uint32_t)c[1] << 4 | (uint32_t)c[2] << 8 | (uint32_t)c[3] << 12 |
                       (uint32_t)c[4] << 16 | (uint32_t)c[5] << 20 | (uint32_t)c[6] << 24 | (uint32_t)c[7] << 28;
            }
        } else {
            uint32_t *o = words + g0 / 4;
            for (int k = 0; k < group / 4; k++) {
                const uint8_t *c = codes + 4 * k;
                o[k] = (uint32_t)c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 | (uint32_t)c[3] << 24;
            }
        }
        scales[g0 / group] = e0_f32_to_bf16(scale);
        biases[g0 / group] = e0_f32_to_bf16(bias);
    }
}
