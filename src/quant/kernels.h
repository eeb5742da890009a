/* The SIMD kernels behind mat_matmul and mat_delta_step (quant/mat.c
 * dispatches; kernels_avx2.c, kernels_avx512.c implement).
 *
 * Every kernel computes y[t, r] = sum_c W[r, c] x[t, c] for rows [r0, r1)
 * of one matrix, from activations the dispatcher prepared once per call
 * (k_act). The arithmetic of one (row, token) dot product is fixed per
 * kernel: it does not depend on T, on which rows or tokens share a tile, or
 * on how rows are split across threads. Each kernel documents its order.
 *
 * Quantized weights use the factored form of mlx affine dequantization
 * (w = q * s_g + b_g):
 *     sum_c w_c x_c = sum_g s_g * (sum_{c in g} q_c x_c) + sum_g b_g * xsum_g
 * with xsum_g the group sums of x, prepared once per call.
 *
 * f32-activation kernels: results differ from mat_matmul_ref only by
 * summation order (NMSE ~1e-13 per dot).
 * int8-activation kernels (E0_KERNELS_AVX512_Q8 / _Q16 / _Q24, q4
 * weights): activations quantized per 32 values to one, two or three int8
 * planes (NMSE per dot ~1e-5, ~1e-10, ~1e-14: Q24 is as close to the
 * reference as the f32 kernels), products summed exactly in int32 by VNNI.
 * The ggml k-quants (Q4_K, Q5_K, Q6_K) and Q8_0 have their own
 * (kernels_ggml_vnni.c, activations per 256 or 32 values) under Q8, Q16
 * and MIXED (24-bit for those).
 * Router logits never use reduced-precision activations (mat_matmul_f32).
 */
#ifndef E0_QUANT_KERNELS_H
#define E0_QUANT_KERNELS_H

#include "quant/mat.h"

#include <stdbool.h>
#include <stdint.h>

/* The q4 layout of SIMD kernels with L lanes: a block is L words (8L values);
 * lane j of nibble position k holds column 8j + k of the block. Activations
 * are permuted to match: xp[b*8L + k*L + j] = x[b*8L + 8j + k], zero-padded
 * to whole blocks (k_prep_q4). */

/* Activations of one call, prepared by the dispatcher. */
typedef struct {
    int64_t T;
    const float *x; /* [T, cols], row stride ldx: natural order */
    int64_t ldx;
    const float *xp; /* [T, ldxp]: q4 order for the kernel's lane count, zero-padded */
    int64_t ldxp;
    const float *xs; /* [T, ldxs]: group sums (QAFF), zero-padded to a multiple of 16 */
    int64_t ldxs;
    /* int8-activation kernels (k_prep_q8): */
    const int8_t *xq; /* [T, ldxq]: per block of 128 columns, the even columns then the odd ones */
    int64_t ldxq;
    const float *xd; /* [T, ldxd]: per block, the scale of each lane's 8 columns (16 floats) */
    int64_t ldxd;
    /* int8 activations per weight group (k_prep_qg, panel kernels): */
    const int8_t *xg; /* [T, ldxg] */
    int64_t ldxg;
    const float *xgd, *xgs; /* [T, ldxgd]: per group, the scale dl and the sum of the quantized x */
    int64_t ldxgd;
    /* int8 activations per block of 256 or 32 columns (k_prep_qk, ggml
     * k-quant kernels): */
    const int8_t *xk; /* [T, ldxk]: per block, each plane in natural order */
    int64_t ldxk;
    const float *xkd; /* [T, ldxkd]: per block, dl */
    int64_t ldxkd;
    const float *xks; /* [T, ldxks]: per 16 columns, dl * (the sum of n) */
    int64_t ldxks;
} k_act;

typedef void (*k_rows_fn)(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y,
                          int64_t ldy);

/* What a kernel needs prepared. */
enum {
    K_NEED_X = 0,
    K_NEED_XP = 1,
    K_NEED_XS = 2,
    K_NEED_XQ = 4,
    K_NEED_XQ2 = 8,
    K_NEED_XQ3 = 16,
    K_NEED_XG = 32,
    K_NEED_XG2 = 64,
    K_NEED_XG3 = 128,
    K_NEED_XK = 256,
    K_NEED_XK2 = 512,
    K_NEED_XK3 = 1024,
    K_NEED_XK32 = 2048, /* with XK*: blocks of 32 columns, not 256 */
    K_NEED_XK45 = 4096  /* with XK*: each plane in the Q4_K / Q5_K rows' order (k_order_qk45) */
};

/* Calls with at least this many tokens use the int8 panel kernels (one
 * arithmetic for every such T; fewer tokens use the row kernels). */
#define K_PANEL_MIN_T 4
/* The widest rows the panel kernels take (columns); wider ones use the row
 * kernels at every T. */
#define K_PANEL_MAX_COLS 16384

/* Picks the row kernel of one ISA for m (NULL: not handled, use the
 * reference; ggml block types: k_avx512_ggml_pick's, which the dispatcher
 * asks); *need says which activations to prepare, *lanes the q4 lane
 * count. */
k_rows_fn k_avx2_pick(const e0_mat *m, int *need, int *lanes);
k_rows_fn k_avx512_pick(const e0_mat *m, int *need, int *lanes);
/* ggml block weights (E0_W_GGML, kernels_ggml_avx512.c): the row kernel of
 * m's block type with f32 activations (K_NEED_X), or NULL. */
k_rows_fn k_avx512_ggml_pick(const e0_mat *m);
/* nb blocks of a type k_avx512_ggml_pick handles, dequantized by the
 * kernels' own code (bit-identical to ggml_dequant; for tests). */
void k_avx512_ggml_dequant(uint32_t type, const void *src, float *y, int64_t nb);
/* The f32 / bf16 / f16 weights' row kernel (K_NEED_X); the ggml kernels
 * run it over rows they dequantized. */
void k_avx512_f32_rows(const e0_mat *m, const k_act *a, int64_t r0, int64_t r1, float *y,
                       int64_t ldy);
/* Integer-activation kernels of ggml weights (kernels_ggml_vnni.c: Q4_K,
 * Q5_K, Q6_K, IQ4_XS with rows a multiple of 256; Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, IQ4_NL, a multiple of 32) with 1..3 activation planes (K_NEED_XK /
 * _XK2 / _XK3), or NULL: the row kernels for T < panel_t, else the 16-row
 * panel kernels (K_NEED_XK32), whose activations are quantized per 32
 * columns (the 32-column types' row kernels too; with 3 planes Q8_0, Q4_1
 * and IQ4_NL have panels only: NULL below panel_t). */
k_rows_fn k_avx512_ggml_int_pick(const e0_mat *m, int planes, int64_t T, int64_t panel_t,
                                 int *need);
/* int8-activation kernels of q4 weights, with 1..3 activation planes (else
 * the f32-activation kernel of k_avx512_pick): the panel kernels for calls
 * of at least panel_t tokens (and always for E0_L_P16 matrices), the row
 * kernels below it. */
k_rows_fn k_avx512_q8_pick(const e0_mat *m, int planes, int64_t T, int64_t panel_t, int *need,
                           int *lanes);

/* mat_delta_step per ISA (Dv a multiple of 16 / 8). */
void k_avx512_delta_step(float *St, const float *k, const float *q, const float *v, float beta,
                         float decay, int Dk, int Dv, float *o);
void k_avx2_delta_step(float *St, const float *k, const float *q, const float *v, float beta,
                       float decay, int Dk, int Dv, float *o);

/* mat_attend_heads with AVX-512 (hd a multiple of 16; kernels_attn_avx512.c). */
void k_avx512_attend_heads(const float *q, size_t qstride, int g, const void *kc, const void *vc,
                           bool f16, size_t stride, int n, int hd, float scale, float *scores,
                           float *o, size_t ostride);

/* Preparation of f32 activations (scalar; a few percent of a call). */
void k_prep_q4(const float *x, int64_t cols, int lanes, float *xp, int64_t nblk);
/* xs[g] = sum of x over group g in column order; zero up to ldxs. */
void k_prep_xs(const float *x, int64_t cols, int group, float *xs, int64_t ldxs);
/* int8 activations per 32 columns in 1..3 planes: d = amax / 127,
 * n = rint(x * (1 / d) * 256^(planes-1)) (|n| <= 127 * 256^(planes-1)),
 * written as signed base-256 digits q1 q2 q3 in [-128, 127] (q_last = the
 * sign-extended low byte of n, and so on), so x ~ d (q1 + q2 / 256 + q3 / 65536)
 * within d / 2 / 256^(planes-1).
 * xq: nblk * planes * 128 bytes (per block: plane 1, 2, 3; each the even
 * columns, then the odd ones), xdl: nblk * 16 floats (d / 256^(planes-1)
 * per lane of 8 columns), xb: nblk * 4 floats, the sum of the dequantized x
 * over each 32 columns (zero-padded past cols).
 * The bias term uses these sums of the quantized x, not of x: then the
 * error is sum_c w_c (x^_c - x_c), not sum_c s q_c (x^_c - x_c), which is
 * several times larger where the weights are offset from zero. */
void k_prep_q8(const float *x, int64_t cols, int planes, int8_t *xq, float *xdl, float *xb,
               int64_t nblk);
/* int8 activations per weight group (32, 64 or 128 columns; cols a multiple
 * of it) for the panel kernels: the digits of k_prep_q8 with d_g = amax_g /
 * 127 over the group. xg: per group and plane, `group` bytes (the even
 * columns, then the odd ones); xgd[g] = d_g / 256^(planes-1); xgs[g] =
 * xgd[g] * (the sum of n over the group). */
void k_prep_qg(const float *x, int64_t cols, int group, int planes, int8_t *xg, float *xgd,
               float *xgs);
void k_avx512_prep_qg(const float *x, int64_t cols, int group, int planes, int8_t *xg, float *xgd,
                      float *xgs);
/* int8 activations per block of blk = 256 or 32 columns (cols a multiple
 * of blk) in 1..3 planes, for the ggml k-quant kernels: per block b,
 * d = amax / 127, n = rint(x * (1 / d) * 256^(planes-1)) as the digits of
 * k_prep_q8. xk: per block, `planes` x blk bytes (plane 1, 2, 3; natural
 * order); xkd[b] = dl = d / 256^(planes-1); xks[c / 16] = dl * (the sum of
 * n over columns c .. c + 15, c a multiple of 16). */
void k_prep_qk(const float *x, int64_t cols, int blk, int planes, int8_t *xk, float *xkd,
               float *xks);
/* k_prep_qk's planes (blocks of 256) reordered in place for the Q4_K /
 * Q5_K row kernels (kernels_ggml_vnni.c): in each 256-byte plane, the 8
 * bytes at 64j + 8q come from 64q + 8j (q < 4) or 64(q - 4) + 32 + 8j. */
void k_order_qk45(int8_t *xk, int64_t cols, int planes);
/* The same, vectorized (AVX-512 VNNI), bit-identical. */
void k_avx512_prep_qk(const float *x, int64_t cols, int blk, int planes, int8_t *xk, float *xkd,
                      float *xks);
/* The same, vectorized (AVX-512), bit-identical. */
void k_avx512_prep_q8(const float *x, int64_t cols, int planes, int8_t *xq, float *xdl, float *xb,
                      int64_t nblk);

#endif
