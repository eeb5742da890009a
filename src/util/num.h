/* Scalar number formats: bf16 / f16 <-> f32. */
#ifndef E0_UTIL_NUM_H
#define E0_UTIL_NUM_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Unaligned little-endian loads from mapped tensor data (safetensors does
 * not promise alignment); each compiles to one plain load on x86-64. */
static inline uint16_t e0_ld16(const void *p, size_t i) {
    uint16_t v;
    memcpy(&v, (const uint8_t *)p + 2 * i, sizeof v);
    return v;
}
static inline uint32_t e0_ld32(const void *p, size_t i) {
    uint32_t v;
    memcpy(&v, (const uint8_t *)p + 4 * i, sizeof v);
    return v;
}
static inline uint64_t e0_ld64(const void *p, size_t i) {
    uint64_t v;
    memcpy(&v, (const uint8_t *)p + 8 * i, sizeof v);
    return v;
}
static inline float e0_ldf32(const void *p, size_t i) {
    float v;
    memcpy(&v, (const uint8_t *)p + 4 * i, sizeof v);
    return v;
}

static inline float e0_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest even; NaN stays NaN. */
static inline uint16_t e0_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* f32 -> f16, round to nearest even; NaN stays NaN, overflow is inf. */
static inline uint16_t e0_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u; /* rounds past 65504: inf */
    if (a < 0x38800000u) {                       /* below 2^-14: subnormal */
        float v;
        memcpy(&v, &a, sizeof v);
        return sign | (uint16_t)rintf(v * 16777216.0f); /* exact scaling by 2^24 */
    }
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
    return sign | (uint16_t)(r >> 13);
}

static inline float e0_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400u)) { man <<= 1; exp--; }
            u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
