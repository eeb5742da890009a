/* Random ggml blocks for edge0 synth --format gguf (synth_gguf.c): codes
 * uniform, scales sized to a tensor's std, and every block's (Q4_K: every
 * sub-block's) codes adjusted to a fixed sum so its dequantized mean is
 * exactly 0 (synth_gguf.c says why). Layouts: quant/ggml.h. */
#include "synth/synth_int.h"

#include "quant/ggml.h"
#include "util/num.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "synth_blocks.c stores blocks in host byte order, which must be little-endian"
#endif

#define QK_K GGML_QK_K

/* Moves codes q[0..n) (each in [0, max]) until they add up to `target`,
 * starting at a position that varies from block to block, so that few
 * codes change and none systematically. */
static void fix_sum(uint8_t *q, int n, int max, int target, unsigned start) {
    int s = -target;
    for (int i = 0; i < n; i++)
        s += q[i];
    for (int k = 0; k < n && s; k++) {
        uint8_t *x = &q[(start + (unsigned)k) % (unsigned)n];
        const int d = s > 0 ? (s < *x ? s : *x) : (-s < max - *x ? s : *x - max);
        *x = (uint8_t)(*x - d);
        s -= d;
    }
}

/* Sum of the low nibbles of the 8 bytes of x. */
static inline unsigned lo_nib_sum(uint64_t x) {
    x &= 0x0f0f0f0f0f0f0f0full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
}

/* Q4_K: v = d sc q - dmin m with sc = 8, m = 60, dmin = d for every
 * sub-block, so v = 4 d (2q - 15); each sub-block's 32 codes are moved to
 * add up to 240, which makes its mean exactly 0. std = 36.88 d. */
static void gen_q4_K(xrng *r, uint8_t *b, int64_t nb, uint16_t d) {
    static const uint8_t sc[12] = {8, 8, 8, 8, 0xfc, 0xfc, 0xfc, 0xfc, 0xc8, 0xc8, 0xc8, 0xc8};
    for (int64_t i = 0; i < nb; i++, b += sizeof(ggml_block_q4_K)) {
        memcpy(b + offsetof(ggml_block_q4_K, d), &d, 2);
        memcpy(b + offsetof(ggml_block_q4_K, dmin), &d, 2);
        memcpy(b + offsetof(ggml_block_q4_K, scales), sc, 12);
        uint8_t *qs = b + offsetof(ggml_block_q4_K, qs);
        uint64_t w[16];
        for (int k = 0; k < 16; k++)
            w[k] = xr_next(r);
        memcpy(qs, w, sizeof w);
        for (int c = 0; c < 4; c++) /* sub-blocks 2c (low nibbles), 2c + 1 (high) */
            for (int h = 0; h < 2; h++) {
                unsigned sum = 0;
                for (int k = 0; k < 4; k++)
                    sum += lo_nib_sum(w[4 * c + k] >> (4 * h));
                if (sum == 240) continue;
                uint8_t q[32];
                for (int l = 0; l < 32; l++)
                    q[l] = (qs[32 * c + l] >> (4 * h)) & 15;
                fix_sum(q, 32, 15, 240, sum);
                for (int l = 0; l < 32; l++)
                    qs[32 * c + l] =
                        (uint8_t)((qs[32 * c + l] & (0xf0 >> (4 * h))) | (q[l] << (4 * h)));
            }
    }
}

/* Q6_K: v = d 16 (q - 32), 16 codes per scale moved to add up to 512.
 * std = 16 x 18.47 d. */
static void gen_q6_K(xrng *r, uint8_t *b, int64_t nb, uint16_t d) {
    for (int64_t i = 0; i < nb; i++, b += sizeof(ggml_block_q6_K)) {
        uint8_t q[QK_K];
        uint64_t w[QK_K / 8];
        for (int k = 0; k < QK_K / 8; k++)
            w[k] = xr_next(r) & 0x3f3f3f3f3f3f3f3full;
        memcpy(q, w, sizeof q);
        for (int s = 0; s < 16; s++)
            fix_sum(q + 16 * s, 16, 63, 512, q[16 * s]);
        uint8_t *ql = b + offsetof(ggml_block_q6_K, ql), *qh = b + offsetof(ggml_block_q6_K, qh);
        memset(ql, 0, 128);
        memset(qh, 0, 64);
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++)
                for (int l = 0; l < 32; l++) {
                    const int v = q[128 * h + 32 * k + l];
                    ql[64 * h + 32 * (k % 2) + l] |= (uint8_t)((v & 15) << (4 * (k / 2)));
                    qh[32 * h + l] |= (uint8_t)((v >> 4) << (2 * k));
                }
        memset(b + offsetof(ggml_block_q6_K, scales), 16, 16);
        memcpy(b + offsetof(ggml_block_q6_K, d), &d, 2);
    }
}

/* Q5_0: v = d (q - 16), codes moved to add up to 512. std = 9.23 d. */
static void gen_q5_0(xrng *r, uint8_t *b, int64_t nb, uint16_t d) {
    for (int64_t i = 0; i < nb; i++, b += sizeof(ggml_block_q5_0)) {
        uint8_t q[32];
        uint64_t w[4];
        for (int k = 0; k < 4; k++)
            w[k] = xr_next(r) & 0x1f1f1f1f1f1f1f1full;
        memcpy(q, w, sizeof q);
        fix_sum(q, 32, 31, 512, q[0]);
        uint32_t qh = 0;
        uint8_t *qs = b + offsetof(ggml_block_q5_0, qs);
        for (int j = 0; j < 32; j++)
            qh |= (uint32_t)(q[j] >> 4) << j;
        for (int j = 0; j < 16; j++)
            qs[j] = (uint8_t)((q[j] & 15) | ((q[j + 16] & 15) << 4));
        memcpy(b + offsetof(ggml_block_q5_0, d), &d, 2);
        memcpy(b + offsetof(ggml_block_q5_0, qh), &qh, 4);
    }
}

/* Q8_0: v = d (q - 127), q in [0, 254] moved to add up to 32 x 127.
 * std = 73.3 d. */
static void gen_q8_0(xrng *r, uint8_t *b, int64_t nb, uint16_t d) {
    for (int64_t i = 0; i < nb; i++, b += sizeof(ggml_block_q8_0)) {
        uint8_t q[32];
        for (int k = 0; k < 4; k++) {
            const uint64_t x = xr_next(r);
            for (int j = 0; j < 8; j++)
                q[8 * k + j] = (uint8_t)((x >> (8 * j) & 0xff) % 255);
        }
        fix_sum(q, 32, 254, 32 * 127, q[0]);
        memcpy(b + offsetof(ggml_block_q8_0, d), &d, 2);
        for (int j = 0; j < 32; j++)
            b[offsetof(ggml_block_q8_0, qs) + (size_t)j] = (uint8_t)(int8_t)(q[j] - 127);
    }
}

/* Q5_K: v = d sc q - dmin m with sc = 4, m = 62, dmin = d for every
 * sub-block, so v = 2 d (2q - 31); each sub-block's 32 codes are moved to
 * add up to 496 (mean exactly 0). std = 36.95 d. */
static void gen_q5_K(xrng *r, uint8_t *b, int64_t nb, uint16_t d) {
    static const uint8_t sc[12] = {4, 4, 4, 4, 0xfe, 0xfe, 0xfe, 0xfe, 0xe4, 0xe4, 0xe4, 0xe4};
    for (int64_t i = 0; i < nb; i++, b += sizeof(ggml_block_q5_K)) {
        memcpy(b + offsetof(ggml_block_q5_K, d), &d, 2);
        memcpy(b + offsetof(ggml_block_q5_K, dmin), &d, 2);
        memcpy(b + offsetof(ggml_block_q5_K, scales), sc, 12);
        uint8_t *qs = b + offsetof(ggml_block_q5_K, qs), *qh = b + offsetof(ggml_block_q5_K, qh);
        memset(qs, 0, 128);
        memset(qh, 0, 32);
        for (int s = 0; s < 8; s++) { /* sub-block s: nibble s % 2 of qs[32 (s / 2) + l], bit s of qh[l] */
            uint8_t q[32];
            uint64_t w[4];
            for (int k = 0; k < 4; k++)
                w[k] = xr_next(r) & 0x1f1f1f1f1f1f1f1full;
            memcpy(q, w, sizeof q);
            fix_sum(q, 32, 31, 496, q[0]);
            for (int l = 0; l < 32; l++) {
                qs[32 * (s / 2) + l] |= (uint8_t)((q[l] & 15) << (4 * (s % 2)));
                qh[l] |= (uint8_t)((q[l] >> 4) << s);
            }
        }
    }
}

/* Q4_0: v = d (q - 8), codes moved to add up to 256. std = 4.61 d. */
static void gen_q4_0(xrng *r, uint8_t *b, int64_t nb, uint16_t d) {
    for (int64_t i = 0; i < nb; i++, b += sizeof(ggml_block_q4_0)) {
        uint8_t q[32];
        uint64_t w[4];
        for (int k = 0; k < 4; k++)
            w[k] = xr_next(r) & 0x0f0f0f0f0f0f0f0full;
        memcpy(q, w, sizeof q);
        fix_sum(q, 32, 15, 256, q[0]);
        uint8_t *qs = b + offsetof(ggml_block_q4_0, qs);
        for (int j = 0; j < 16; j++)
            qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
        memcpy(b + offsetof(ggml_block_q4_0, d), &d, 2);
    }
}

/* 32 random IQ4 codes (table indices) whose values add up to within half
 * the table's widest step (12) of 0: codes are stepped towards the sign
 * that brings the sum back, one at a time, while a step shrinks |sum|. */
static void iq4_codes(xrng *r, uint8_t q[32]) {
    const int8_t *k = ggml_iq4nl_values;
    int s = 0;
    for (int k4 = 0; k4 < 4; k4++) {
        const uint64_t x = xr_next(r);
        for (int j = 0; j < 8; j++)
            q[8 * k4 + j] = (uint8_t)(x >> (8 * j) & 15);
    }
    for (int j = 0; j < 32; j++)
        s += k[q[j]];
    for (int it = 0, j = q[0] % 32; it < 32 * 16 && s; it++, j = (j + 1) % 32) {
        const int up = s < 0; /* raise a code when the sum is negative */
        if (up ? q[j] == 15 : q[j] == 0) continue;
        const int ns = s + (up ? k[q[j] + 1] - k[q[j]] : k[q[j] - 1] - k[q[j]]);
        if (abs(ns) >= abs(s)) break;
        q[j] = (uint8_t)(q[j] + (up ? 1 : -1));
        s = ns;
    }
}

/* IQ4_NL: v = d k[q] (near-zero mean per block, iq4_codes). */
static void gen_iq4_nl(xrng *r, uint8_t *b, int64_t nb, uint16_t d) {
    for (int64_t i = 0; i < nb; i++, b += sizeof(ggml_block_iq4_nl)) {
        uint8_t q[32];
        iq4_codes(r, q);
        uint8_t *qs = b + offsetof(ggml_block_iq4_nl, qs);
        for (int j = 0; j < 16; j++)
            qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
        memcpy(b + offsetof(ggml_block_iq4_nl, d), &d, 2);
    }
}

/* IQ4_XS: every sub-block scale ls = 48 (scales_l 0, scales_h all 3s:
 * ls - 32 = 16), so v = 16 d k[q]; codes as IQ4_NL's per sub-block. */
static void gen_iq4_xs(xrng *r, uint8_t *b, int64_t nb, uint16_t d) {
    for (int64_t i = 0; i < nb; i++, b += sizeof(ggml_block_iq4_xs)) {
        const uint16_t sh = 0xffff;
        memcpy(b + offsetof(ggml_block_iq4_xs, d), &d, 2);
        memcpy(b + offsetof(ggml_block_iq4_xs, scales_h), &sh, 2);
        memset(b + offsetof(ggml_block_iq4_xs, scales_l), 0, 4);
        uint8_t *qs = b + offsetof(ggml_block_iq4_xs, qs);
        for (int s = 0; s < 8; s++) {
            uint8_t q[32];
            iq4_codes(r, q);
            for (int j = 0; j < 16; j++)
                qs[16 * s + j] = (uint8_t)(q[j] | q[j + 16] << 4);
        }
    }
}

/* The std of ggml_iq4nl_values over uniform codes. */
static double iq4_std(void) {
    double s = 0, s2 = 0;
    for (int i = 0; i < 16; i++)
        s += ggml_iq4nl_values[i], s2 += (double)ggml_iq4nl_values[i] * ggml_iq4nl_values[i];
    return sqrt(s2 / 16 - (s / 16) * (s / 16));
}

/* The std of a type's dequantized values per unit of d. */
static double type_unit_std(uint32_t type) {
    switch (type) {
    case GGML_Q4_K:
        return 4.0 * sqrt(255.0 / 3.0); /* 4 (2q - 15), q uniform in [0, 15] */
    case GGML_Q6_K:
        return 16.0 * sqrt(4095.0 / 12.0);
    case GGML_Q5_0:
        return sqrt(1023.0 / 12.0);
    case GGML_Q8_0:
        return sqrt((255.0 * 255.0 - 1.0) / 12.0);
    case GGML_Q5_K:
        return 4.0 * sqrt(1023.0 / 12.0); /* 2 (2q - 31), q uniform in [0, 31] */
    case GGML_Q4_0:
        return sqrt(255.0 / 12.0);
    case GGML_IQ4_NL:
        return iq4_std();
    case GGML_IQ4_XS:
        return 16.0 * iq4_std();
    default:
        return 1.0;
    }
}

void synth_gen_blocks(uint32_t type, double std, xrng *r, int64_t nb, uint8_t *out) {
    const uint16_t d = e0_f32_to_f16((float)(std / type_unit_std(type)));
    switch (type) {
    case GGML_Q4_K:
        gen_q4_K(r, out, nb, d);
        break;
    case GGML_Q6_K:
        gen_q6_K(r, out, nb, d);
        break;
    case GGML_Q5_0:
        gen_q5_0(r, out, nb, d);
        break;
    case GGML_Q8_0:
        gen_q8_0(r, out, nb, d);
        break;
    case GGML_Q5_K:
        gen_q5_K(r, out, nb, d);
        break;
    case GGML_Q4_0:
        gen_q4_0(r, out, nb, d);
        break;
    case GGML_IQ4_NL:
        gen_iq4_nl(r, out, nb, d);
        break;
    case GGML_IQ4_XS:
        gen_iq4_xs(r, out, nb, d);
        break;
    default:
        break; /* F16 fallbacks need rows not a multiple of 32: no shape has them */
    }
}

