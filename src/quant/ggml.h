/* ggml's weight types, as GGUF files store them (ggml-common.h is the
 * reference for every layout; this is our own statement of it).
 *
 * A tensor of a block type is stored row by row; a row of `cols` values is
 * cols / blck consecutive blocks of `size` bytes (cols must be a multiple of
 * blck). The type ids are GGUF's on-disk numbers: they never change.
 */
#ifndef E0_QUANT_GGML_H
#define E0_QUANT_GGML_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    GGML_F32 = 0,
    GGML_F16 = 1,
    GGML_Q4_0 = 2,
    GGML_Q4_1 = 3,
    /* 4 and 5 (Q4_2, Q4_3) were removed from ggml */
    GGML_Q5_0 = 6,
    GGML_Q5_1 = 7,
    GGML_Q8_0 = 8,
    GGML_Q8_1 = 9,
    GGML_Q2_K = 10,
    GGML_Q3_K = 11,
    GGML_Q4_K = 12,
    GGML_Q5_K = 13,
    GGML_Q6_K = 14,
    GGML_Q8_K = 15,
    GGML_IQ2_XXS = 16,
    GGML_IQ2_XS = 17,
    GGML_IQ3_XXS = 18,
    GGML_IQ1_S = 19,
    GGML_IQ4_NL = 20,
    GGML_IQ3_S = 21,
    GGML_IQ2_S = 22,
    GGML_IQ4_XS = 23,
    GGML_I8 = 24,
    GGML_I16 = 25,
    GGML_I32 = 26,
    GGML_I64 = 27,
    GGML_F64 = 28,
    GGML_IQ1_M = 29,
    GGML_BF16 = 30,
    /* 31-33 (Q4_0_4_4, Q4_0_4_8, Q4_0_8_8) were removed from the file format */
    GGML_TQ1_0 = 34,
    GGML_TQ2_0 = 35,
    /* 36-38 (IQ4_NL_4_4, ...) were removed */
    GGML_MXFP4 = 39,
    GGML_NTYPES = 40
} ggml_type;

/* Super-block size of the k-quants. */
#define GGML_QK_K 256

/* Layout facts of one type: values per block and bytes per block (0 / 0
 * for ids that name no type), its name as llama.cpp prints it, and whether
 * edge0 computes with it (its weights can be dequantized and multiplied). */
typedef struct {
    const char *name;
    int32_t blck;
    int32_t size;
    int supported;
} ggml_type_info;

/* NULL for an id outside the table or one that names no type. */
const ggml_type_info *ggml_info(uint32_t type);

/* Bytes of a row of `cols` values, or 0 when cols is not a multiple of the
 * block size (or the type is unknown). */
uint64_t ggml_row_bytes(uint32_t type, uint64_t cols);

/* ---- block layouts (ggml-common.h's structs, restated) --------------------
 * Rows in a file mapping are only byte-aligned: code reads these fields
 * through offsetof and memcpy (util/num.h), never through a struct pointer.
 * Half-precision fields are IEEE f16 bit patterns. Value order within a
 * block is written above each struct. */

/* Q4_0: v[j] = d (lo(qs[j]) - 8), v[j + 16] = d (hi(qs[j]) - 8), j < 16. */
typedef struct {
    uint16_t d;
    uint8_t qs[16];
} ggml_block_q4_0;
/* Q4_1: as Q4_0 with v = d q + m (q unsigned). */
typedef struct {
    uint16_t d, m;
    uint8_t qs[16];
} ggml_block_q4_1;
/* Q5_0: q = nibble as Q4_0 | bit j of qh (u32 LE) << 4 for v[j], j < 32;
 * v = d (q - 16). */
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
} ggml_block_q5_0;
/* Q5_1: as Q5_0 with v = d q + m. */
typedef struct {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} ggml_block_q5_1;
/* Q8_0: v[j] = qs[j] d. */
typedef struct {
    uint16_t d;
    int8_t qs[32];
} ggml_block_q8_0;
/* Q2_K: 16 sub-blocks of 16; halves h < 2 of 128 values, each four runs of
 * 32 (shift 2k of qs[32h + l]); sub-block s = v / 16 has scale
 * d * lo(scales[s]) and min dmin * hi(scales[s]): v = dl q - ml. */
typedef struct {
    uint8_t scales[16];
    uint8_t qs[64];
    uint16_t d, dmin;
} ggml_block_q2_K;
/* Q3_K: as Q2_K's low two bits, minus 4 where bit (4h + k) of hmask[l] is
 * clear; 16 six-bit scales (low nibbles in bytes 0-7, both halves; high
 * pairs in bytes 8-11), biased by 32: v = (d (sc - 32)) q. */
typedef struct {
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint16_t d;
} ggml_block_q3_K;
/* Q4_K: 8 sub-blocks of 32; sub-block 2c / 2c + 1 are the low / high
 * nibbles of qs[32c ..]; six-bit scale and min per sub-block (packed in 12
 * bytes): v = (d sc) q - (dmin m). */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
} ggml_block_q4_K;
/* Q5_K: Q4_K plus bit s of qh[l] as the fifth bit of sub-block s. */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} ggml_block_q5_K;
/* Q6_K: halves h of 128; run k < 4 of 32 values: nibble k / 2 of
 * ql[64h + 32 (k % 2) + l] | bits 2k of qh[32h + l] << 4, minus 32;
 * v = (d scales[v / 16]) q. */
typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} ggml_block_q6_K;
/* IQ4_NL: Q4_0's nibble order through the table ggml_iq4nl_values: v = d k[q]. */
typedef struct {
    uint16_t d;
    uint8_t qs[16];
} ggml_block_iq4_nl;
/* IQ4_XS: 8 sub-blocks of 32, each one IQ4_NL block's nibbles (qs[16 s ..]);
 * six-bit scale: nibble s % 2 of scales_l[s / 2] | bits 2s of scales_h << 4;
 * v = (d (ls - 32)) k[q]. */
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
} ggml_block_iq4_xs;

_Static_assert(sizeof(ggml_block_q4_0) == 18, "q4_0");
_Static_assert(sizeof(ggml_block_q4_1) == 20, "q4_1");
_Static_assert(sizeof(ggml_block_q5_0) == 22, "q5_0");
_Static_assert(sizeof(ggml_block_q5_1) == 24, "q5_1");
_Static_assert(sizeof(ggml_block_q8_0) == 34, "q8_0");
_Static_assert(sizeof(ggml_block_q2_K) == 84, "q2_K");
_Static_assert(sizeof(ggml_block_q3_K) == 110, "q3_K");
_Static_assert(sizeof(ggml_block_q4_K) == 144, "q4_K");
_Static_assert(sizeof(ggml_block_q5_K) == 176, "q5_K");
_Static_assert(sizeof(ggml_block_q6_K) == 210, "q6_K");
_Static_assert(sizeof(ggml_block_iq4_nl) == 18, "iq4_nl");
_Static_assert(sizeof(ggml_block_iq4_xs) == 136, "iq4_xs");

/* IQ4_NL / IQ4_XS code book. */
extern const int8_t ggml_iq4nl_values[16];

/* ---- scalar reference dequantization (ggml_quants.c) ----------------------
 * y[0 .. nb * blck) = the nb blocks at src, bit-exact to ggml's
 * dequantize_row_* (and gguf-py's numpy versions): the same f32 products in
 * the same order. src needs no alignment. */
void ggml_dequant_q4_0(const void *src, float *y, int64_t nb);
void ggml_dequant_q4_1(const void *src, float *y, int64_t nb);
void ggml_dequant_q5_0(const void *src, float *y, int64_t nb);
void ggml_dequant_q5_1(const void *src, float *y, int64_t nb);
void ggml_dequant_q8_0(const void *src, float *y, int64_t nb);
void ggml_dequant_q2_K(const void *src, float *y, int64_t nb);
void ggml_dequant_q3_K(const void *src, float *y, int64_t nb);
void ggml_dequant_q4_K(const void *src, float *y, int64_t nb);
void ggml_dequant_q5_K(const void *src, float *y, int64_t nb);
void ggml_dequant_q6_K(const void *src, float *y, int64_t nb);
void ggml_dequant_iq4_nl(const void *src, float *y, int64_t nb);
void ggml_dequant_iq4_xs(const void *src, float *y, int64_t nb);

/* Any type whose info says `supported` (F32 / F16 / BF16 included): nb
 * blocks from src into y. 0, or E0_EUNSUPPORTED (edge0.h) for a type edge0
 * does not compute with. */
int ggml_dequant(uint32_t type, const void *src, float *y, int64_t nb);

#endif
