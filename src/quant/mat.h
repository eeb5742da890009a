/* A weight matrix as the kernels see it: [rows = out, cols = in], in any of
 * the dtypes the layouts use, read in place from the mapping (or from a
 * cache buffer). Sub-matrices (one expert of a stacked tensor, the gate half
 * of a fused gate_up) are views made with mat_rows().
 *
 * mlx affine quantization (docs/design.md §2.4): `w` is uint32 [rows, cols*bits/32];
 * value k of a word sits at bits [k*bits, (k+1)*bits), least significant
 * first; scales and biases are [rows, cols/group] (bf16, f16 or f32);
 * w = q * scale + bias.
 *
 * ggml block types (E0_W_GGML, GGUF checkpoints; layouts in quant/ggml.h):
 * `gtype` is the ggml_type id of a block type that ggml_info marks
 * supported (the loader checks; GGUF's F32 / F16 / BF16
 * tensors use E0_W_F32 / F16 / BF16). `w` points at row 0's first block;
 * rows are consecutive, ggml_row_bytes(gtype, cols) bytes each (cols a
 * multiple of the block size), only byte-aligned; no scales / biases.
 *
 * Three files implement this header, one way: mat.c the formats (sizes,
 * views, dequantization, the panel layout), ref.c the scalar references,
 * dispatch.c the kernel sets and the dispatch to the SIMD kernels
 * (kernels.h) or the references.
 */
#ifndef E0_QUANT_MAT_H
#define E0_QUANT_MAT_H

#include "edge0.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { E0_W_F32, E0_W_BF16, E0_W_F16, E0_W_QAFF, E0_W_GGML } e0_wtype;
typedef enum { E0_S_BF16, E0_S_F16, E0_S_F32 } e0_stype;
/* How a QAFF matrix's bytes are laid out: as in the file (rows of words,
 * separate scales and biases), or in 16-row panels (mat_repack_p16). */
typedef enum { E0_L_ROWS, E0_L_P16 } e0_layout;

typedef struct {
    e0_wtype type;
    int64_t rows, cols;
    int bits, group;    /* E0_W_QAFF */
    e0_stype stype;     /* dtype of scales / biases */
    uint32_t gtype;     /* E0_W_GGML: the block type (ggml_type) */
    const void *w;      /* F32/BF16/F16: [rows, cols]; QAFF: u32 [rows, cols*bits/32];
                           GGML: [rows, cols / blck] blocks */
    const void *scales; /* [rows, cols/group] */
    const void *biases; /* [rows, cols/group] */
    e0_layout layout;   /* E0_W_QAFF; E0_L_P16: scales and biases inline, both NULL */
} e0_mat;

/* The 16-row panel layout (E0_L_P16) of 4-bit weights, for the int8 panel
 * kernels (quant/kernels.h), made once at load (model_repack). Panel p
 * (rows 16p..16p+15) is 16 * mat_row_bytes(m) bytes at w + p * that; in it,
 * group g (ng = cols / group groups, wpg = group / 8 words per row) is
 * wpg * 64 + 64 bytes:
 *     u32 [wpg][16]   word k of the group of each row (row i in lane i)
 *     stype [16]      the 16 rows' scales of group g
 *     stype [16]      their biases
 * The same bytes as the file layout, one stream per panel; a vector load
 * gives 8 columns of 16 rows. Only 4-bit, group 32 / 64 / 128, BF16 or F16
 * scales, rows a multiple of 16 (mat_p16_ok). Views (mat_rows) start on a
 * panel. Every kernel set computes the same results on both layouts
 * (kernels.h), so the layout is invisible outside the kernels. */
bool mat_p16_ok(const e0_mat *m);
/* Rewrites m, whose weights, scales and biases fill one contiguous range
 * (in any order) of mat_bytes(m) bytes, into E0_L_P16 in that range, and
 * makes m the packed view. tmp: mat_bytes(m) bytes of scratch. Splits the
 * panels across the compute pool. 0, or E0_EINVAL (m unchanged) when m is
 * not mat_p16_ok or its parts are not contiguous. */
int mat_repack_p16(e0_mat *m, void *tmp);
/* Whether the kernel set in force computes 4-bit matrices of fewer than
 * K_PANEL_MIN_T tokens with the panel arithmetic too, so that E0_L_P16 is
 * faster for it (AVX512_MIXED, the default). */
bool mat_p16_wanted(void);

/* Bytes of one row of each part (QAFF: weight words; scales; biases;
 * E0_L_P16: a row's share of its panel, words, scales and biases, and 0;
 * GGML: the row's blocks, and 0). */
size_t mat_row_bytes(const e0_mat *m);
size_t mat_srow_bytes(const e0_mat *m);
/* Bytes the whole matrix occupies (weights + scales + biases). */
uint64_t mat_bytes(const e0_mat *m);

/* View of rows [r0, r0 + n). */
e0_mat mat_rows(const e0_mat *m, int64_t r0, int64_t n);

/* out[0..n) = row r, columns [c0, c0 + n), dequantized to f32 (GGML: the
 * enclosing blocks are dequantized, bit-exact to ggml / gguf-py). */
void mat_dequant(const e0_mat *m, int64_t r, int64_t c0, int64_t n, float *out);

/* y[t, r] = sum_c W[r, c] * x[t, c] for t < T.
 * x: [T, cols] (row stride ldx), y: [T, rows] (row stride ldy). f32 accumulation.
 * Scalar reference: each row is dequantized once per column chunk and
 * reused for every token. */
void mat_matmul_ref(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy);

/* The dispatching entry point the model calls: the kernel set in force
 * (e0_set_kernels), rows split across the compute pool (util/pool.h).
 * For each (row, token) the result depends only on the kernel set, the row,
 * that token's activations and whether T reaches K_PANEL_MIN_T (the sets
 * that quantize activations change arithmetic there, see below, unless
 * mat_matmul_t_free): not on the other tokens or the number of threads. */
void mat_matmul(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy);

/* As mat_matmul for T independent decode tokens (the sequences of a batched
 * decode step): every token's result is bit-identical to the one this
 * call of that token alone (T = 1) gets, whatever T. The kernel sets whose
 * arithmetic changes with T (the Q sets and the ggml integer kernels:
 * panels from K_PANEL_MIN_T) keep their one-token arithmetic, still run over several
 * tokens per pass over the weights: the weight bytes are read once per
 * call, not once per token. */
void mat_matmul_decode(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y,
                       int64_t ldy);

/* Whether mat_matmul computes m with one arithmetic at every T (MIXED on
 * all but ggml types: 16-bit panels), so that a caller may give a token of
 * a prefill run the panel arithmetic in a call of fewer than K_PANEL_MIN_T
 * tokens (switchglu.c: an expert few tokens of a long run route to). */
bool mat_matmul_t_free(const e0_mat *m);

/* As mat_matmul, but never with quantized activations: the f32 kernel of
 * the set in force. For router logits, whose near-ties decide routing. */
void mat_matmul_f32(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy);

/* The kernel sets (e0_kernels, e0_set_kernels, e0_kernels_name, ...) are
 * public: edge0.h. */
/* The set in force, resolved (never AUTO). */
e0_kernels mat_kernels(void);

/* One Gated DeltaNet step of one value head (docs/design.md §1.4), in the
 * kernel set in force (REF: the scalar reference, mat_delta_step_ref):
 *   St *= decay; u = St^T k; d = beta (v - u); St += k d^T; o = St^T q
 * St: [Dk, Dv] (row i belongs to key dim i), k, q: [Dk], v, o: [Dv]. */
void mat_delta_step(float *St, const float *k, const float *q, const float *v, float beta,
                    float decay, int Dk, int Dv, float *o);
void mat_delta_step_ref(float *St, const float *k, const float *q, const float *v, float beta,
                        float decay, int Dk, int Dv, float *o);

/* Attention of one query head over n cached positions (docs/design.md §1.4):
 *   s_j = scale (q . k_j); p = softmax(s); o = sum_j p_j v_j
 * with k_j = kc + j * stride and v_j = vc + j * stride (hd floats each);
 * scores: n floats of scratch. In the kernel set in force (REF and sets
 * without a version: mat_attend_ref, whose order the kernels document
 * against). */
void mat_attend(const float *q, const float *kc, const float *vc, size_t stride, int n, int hd,
                float scale, float *scores, float *o);
void mat_attend_ref(const float *q, const float *kc, const float *vc, size_t stride, int n, int hd,
                    float scale, float *scores, float *o);
/* mat_attend of g query heads that share the KV head (GQA): head h's query
 * at q + h * qstride, its output at o + h * ostride; scores: g * n floats.
 * Each head's result is the one mat_attend gives it, whatever g. f16: the
 * cache holds f16 values (uint16_t, `stride` elements apart), each widened
 * to f32 exactly as it is read; else floats. */
void mat_attend_heads(const float *q, size_t qstride, int g, const void *kc, const void *vc,
                      bool f16, size_t stride, int n, int hd, float scale, float *scores,
                      float *o, size_t ostride);
/* mat_attend_ref on an f16 cache. */
void mat_attend_ref_f16(const float *q, const uint16_t *kc, const uint16_t *vc, size_t stride,
                        int n, int hd, float scale, float *scores, float *o);
/* Either: kc and vc f16 (uint16_t) when f16, else f32. */
void mat_attend_ref_kv(const float *q, const void *kc, const void *vc, bool f16, size_t stride,
                       int n, int hd, float scale, float *scores, float *o);

#endif
