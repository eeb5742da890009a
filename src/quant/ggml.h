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

#endif
