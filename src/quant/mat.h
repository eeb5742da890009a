/* A weight matrix as the kernels see it: [rows = out, cols = in], in any of
 * the dtypes the layouts use, read in place from the mapping (or from a
 * cache buffer). Sub-matrices (one expert of a stacked tensor, the gate half
 * of a fused gate_up) are views made with mat_rows().
 *
 * mlx affine quantization (DESIGN.md §2): `w` is uint32 [rows, cols*bits/32];
 * value k of a word sits at bits [k*bits, (k+1)*bits), least significant
 * first; scales and biases are [rows, cols/group] (bf16, f16 or f32);
 * w = q * scale + bias.
 */
#ifndef E0_QUANT_MAT_H
#define E0_QUANT_MAT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { E0_W_F32, E0_W_BF16, E0_W_F16, E0_W_QAFF } e0_wtype;
typedef enum { E0_S_BF16, E0_S_F16, E0_S_F32 } e0_stype;

typedef struct {
    e0_wtype type;
    int64_t rows, cols;
    int bits, group;       /* E0_W_QAFF */
    e0_stype stype;        /* dtype of scales / biases */
    const void *w;         /* F32/BF16/F16: [rows, cols]; QAFF: u32 [rows, cols*bits/32] */
    const void *scales;    /* [rows, cols/group] */
    const void *biases;    /* [rows, cols/group] */
} e0_mat;

/* Bytes of one row of each part (QAFF: weight words; scales; biases). */
size_t mat_row_bytes(const e0_mat *m);
size_t mat_srow_bytes(const e0_mat *m);
/* Bytes the whole matrix occupies (weights + scales + biases). */
uint64_t mat_bytes(const e0_mat *m);

/* View of rows [r0, r0 + n). */
e0_mat mat_rows(const e0_mat *m, int64_t r0, int64_t n);

/* out[0..n) = row r, columns [c0, c0 + n), dequantized to f32. */
void mat_dequant(const e0_mat *m, int64_t r, int64_t c0, int64_t n, float *out);

/* y[t, r] = sum_c W[r, c] * x[t, c] for t < T.
 * x: [T, cols] (row stride ldx), y: [T, rows] (row stride ldy). f32 accumulation.
 * Scalar reference: each row is dequantized once per column chunk and
 * reused for every token. */
void mat_matmul_ref(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy);

/* The dispatching entry point the model calls. */
void mat_matmul(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy);

#endif
