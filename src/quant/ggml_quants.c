/* Scalar reference dequantizers of ggml's block types (quant/ggml.h).
 *
 * Exactness: GGUF fixtures' golden logits were computed on weights that
 * gguf-py dequantized in f32, so each value here must be the same float,
 * bit for bit. The traps, per type:
 *  - every f16 field goes through e0_f16_to_f32 first (exact), and products
 *    are formed in f32 in ggml's order: the sub-block scale (d * sc, dmin *
 *    m) is rounded once, then multiplied by the integer code (a second
 *    rounding), then the min is subtracted (a third). Fusing any two of
 *    these changes the last bit; this file is C11 (-std=c11 implies
 *    -ffp-contract=off) and x86-64 scalar code has no FMA without -mfma.
 *  - Q4_1 / Q5_1 add the min (d q + m); the K types subtract it.
 *  - Q3_K: six-bit scales biased by 32; the high bit of a code *clear*
 *    means "minus 4".
 *  - Q6_K: six-bit codes minus 32, int8 scales.
 *  - IQ4_NL / IQ4_XS: codes index ggml_iq4nl_values; IQ4_XS scales are
 *    biased by 32.
 */
#include "quant/ggml.h"

#include "edge0.h"
#include "util/num.h"

#include <stddef.h>
#include <string.h>

const int8_t ggml_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

/* An f16 field of the block at b. */
#define HALF(b, type, field) e0_f16_to_f32(e0_ld16((b) + offsetof(type, field), 0))

void ggml_dequant_q4_0(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_q4_0);
        const float d = HALF(b, ggml_block_q4_0, d);
        const uint8_t *qs = b + offsetof(ggml_block_q4_0, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((qs[j] & 0x0f) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

void ggml_dequant_q4_1(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_q4_1);
        const float d = HALF(b, ggml_block_q4_1, d), m = HALF(b, ggml_block_q4_1, m);
        const uint8_t *qs = b + offsetof(ggml_block_q4_1, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(qs[j] & 0x0f) * d + m;
            y[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

void ggml_dequant_q5_0(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_q5_0);
        const float d = HALF(b, ggml_block_q5_0, d);
        const uint32_t qh = e0_ld32(b + offsetof(ggml_block_q5_0, qh), 0);
        const uint8_t *qs = b + offsetof(ggml_block_q5_0, qs);
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            const int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

void ggml_dequant_q5_1(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_q5_1);
        const float d = HALF(b, ggml_block_q5_1, d), m = HALF(b, ggml_block_q5_1, m);
        const uint32_t qh = e0_ld32(b + offsetof(ggml_block_q5_1, qh), 0);
        const uint8_t *qs = b + offsetof(ggml_block_q5_1, qs);
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            const int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            y[j] = (float)lo * d + m;
            y[j + 16] = (float)hi * d + m;
        }
    }
}

void ggml_dequant_q8_0(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_q8_0);
        const float d = HALF(b, ggml_block_q8_0, d);
        const int8_t *qs = (const int8_t *)(b + offsetof(ggml_block_q8_0, qs));
        for (int j = 0; j < 32; j++)
            y[j] = (float)qs[j] * d;
    }
}

void ggml_dequant_q2_K(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_q2_K);
        const float d = HALF(b, ggml_block_q2_K, d), dmin = HALF(b, ggml_block_q2_K, dmin);
        const uint8_t *sc = b + offsetof(ggml_block_q2_K, scales);
        const uint8_t *qs = b + offsetof(ggml_block_q2_K, qs);
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int half = 0; half < 2; half++) {
                    const int s = 8 * h + 2 * k + half; /* sub-block of 16 */
                    const float dl = d * (float)(sc[s] & 0x0f), ml = dmin * (float)(sc[s] >> 4);
                    for (int l = 0; l < 16; l++) {
                        const int q = (qs[32 * h + 16 * half + l] >> (2 * k)) & 3;
                        *y++ = dl * (float)q - ml;
                    }
                }
    }
}

/* The 16 six-bit scales of a Q3_K block, biased by 32 (signed). */
static void q3k_scales(const uint8_t *sc, int sv[16]) {
    for (int s = 0; s < 16; s++) {
        const int lo = (s < 8 ? sc[s] : sc[s - 8] >> 4) & 0x0f;
        const int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        sv[s] = (lo | hi << 4) - 32;
    }
}

void ggml_dequant_q3_K(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_q3_K);
        const float d = HALF(b, ggml_block_q3_K, d);
        const uint8_t *hm = b + offsetof(ggml_block_q3_K, hmask);
        const uint8_t *qs = b + offsetof(ggml_block_q3_K, qs);
        int sv[16];
        q3k_scales(b + offsetof(ggml_block_q3_K, scales), sv);
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) {
                    const float dl = d * (float)sv[8 * h + 2 * k + l / 16];
                    const int q = ((qs[32 * h + l] >> (2 * k)) & 3) -
                                  ((hm[l] >> (4 * h + k)) & 1 ? 0 : 4);
                    *y++ = dl * (float)q;
                }
    }
}

/* Six-bit scale and min of sub-block j < 8 of a Q4_K / Q5_K block. */
static void k4_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

void ggml_dequant_q4_K(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_q4_K);
        const float d = HALF(b, ggml_block_q4_K, d), dmin = HALF(b, ggml_block_q4_K, dmin);
        const uint8_t *scs = b + offsetof(ggml_block_q4_K, scales);
        const uint8_t *qs = b + offsetof(ggml_block_q4_K, qs);
        for (int s = 0; s < 8; s++) {
            int sc, m;
            k4_scale_min(scs, s, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                const int q = (qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0f;
                *y++ = d1 * (float)q - m1;
            }
        }
    }
}

void ggml_dequant_q5_K(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_q5_K);
        const float d = HALF(b, ggml_block_q5_K, d), dmin = HALF(b, ggml_block_q5_K, dmin);
        const uint8_t *scs = b + offsetof(ggml_block_q5_K, scales);
        const uint8_t *qh = b + offsetof(ggml_block_q5_K, qh);
        const uint8_t *qs = b + offsetof(ggml_block_q5_K, qs);
        for (int s = 0; s < 8; s++) {
            int sc, m;
            k4_scale_min(scs, s, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                const int q = ((qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 0x0f) |
                              ((qh[l] >> s) & 1) << 4;
                *y++ = d1 * (float)q - m1;
            }
        }
    }
}

void ggml_dequant_q6_K(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_q6_K);
        const float d = HALF(b, ggml_block_q6_K, d);
        const uint8_t *ql = b + offsetof(ggml_block_q6_K, ql);
        const uint8_t *qh = b + offsetof(ggml_block_q6_K, qh);
        const int8_t *sc = (const int8_t *)(b + offsetof(ggml_block_q6_K, scales));
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) {
                    const int v = 128 * h + 32 * k + l;
                    const int q = ((ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0f) |
                                  ((qh[32 * h + l] >> (2 * k)) & 3) << 4;
                    y[v] = d * (float)sc[v / 16] * (float)(q - 32);
                }
        y += 256;
    }
}

void ggml_dequant_iq4_nl(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_iq4_nl);
        const float d = HALF(b, ggml_block_iq4_nl, d);
        const uint8_t *qs = b + offsetof(ggml_block_iq4_nl, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)ggml_iq4nl_values[qs[j] & 0x0f];
            y[j + 16] = d * (float)ggml_iq4nl_values[qs[j] >> 4];
        }
    }
}

void ggml_dequant_iq4_xs(const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = (const uint8_t *)src + i * (int64_t)sizeof(ggml_block_iq4_xs);
        const float d = HALF(b, ggml_block_iq4_xs, d);
        const uint16_t sh = e0_ld16(b + offsetof(ggml_block_iq4_xs, scales_h), 0);
        const uint8_t *sl = b + offsetof(ggml_block_iq4_xs, scales_l);
        const uint8_t *qs = b + offsetof(ggml_block_iq4_xs, qs);
        for (int s = 0; s < 8; s++, y += 32) {
            const int ls = ((sl[s / 2] >> (4 * (s % 2))) & 0x0f) | ((sh >> (2 * s)) & 3) << 4;
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)ggml_iq4nl_values[qs[16 * s + j] & 0x0f];
                y[j + 16] = dl * (float)ggml_iq4nl_values[qs[16 * s + j] >> 4];
            }
        }
    }
}

int ggml_dequant(uint32_t type, const void *src, float *y, int64_t nb) {
    switch (type) {
    case GGML_F32:
        memcpy(y, src, (size_t)nb * 4);
        return 0;
    case GGML_F16:
        for (int64_t i = 0; i < nb; i++)
            y[i] = e0_f16_to_f32(e0_ld16(src, (size_t)i));
        return 0;
    case GGML_BF16:
        for (int64_t i = 0; i < nb; i++)
            y[i] = e0_bf16_to_f32(e0_ld16(src, (size_t)i));
        return 0;
    case GGML_Q4_0:
        ggml_dequant_q4_0(src, y, nb);
        return 0;
    case GGML_Q4_1:
        ggml_dequant_q4_1(src, y, nb);
        return 0;
    case GGML_Q5_0:
        ggml_dequant_q5_0(src, y, nb);
        return 0;
    case GGML_Q5_1:
        ggml_dequant_q5_1(src, y, nb);
        return 0;
    case GGML_Q8_0:
        ggml_dequant_q8_0(src, y, nb);
        return 0;
    case GGML_Q2_K:
        ggml_dequant_q2_K(src, y, nb);
        return 0;
    case GGML_Q3_K:
        ggml_dequant_q3_K(src, y, nb);
        return 0;
    case GGML_Q4_K:
        ggml_dequant_q4_K(src, y, nb);
        return 0;
    case GGML_Q5_K:
        ggml_dequant_q5_K(src, y, nb);
        return 0;
    case GGML_Q6_K:
        ggml_dequant_q6_K(src, y, nb);
        return 0;
    case GGML_IQ4_NL:
        ggml_dequant_iq4_nl(src, y, nb);
        return 0;
    case GGML_IQ4_XS:
        ggml_dequant_iq4_xs(src, y, nb);
        return 0;
    default:
        return E0_EUNSUPPORTED;
    }
}
