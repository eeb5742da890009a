/* The GPU's expert products on the host, bit for bit (docs/design.md,
 * §9.3 "Misses beside the link").
 *
 * A budget below the model leaves some of a decode step's experts outside
 * VRAM. Copying them over PCIe costs more than reading them from host
 * memory where they already are, so the host may compute those experts
 * itself while the card computes the rest. The issue asks every budget to
 * give the all-resident run's bits; so the host here computes what the
 * card's vector kernels compute (kernels_mm.cuh: dq32, chunk_dot, row_dot,
 * the SwiGLU) in the same IEEE operations and the same order: a lane's
 * chunks in turn, a chunk's 32 products as eight groups of four summed in
 * turn, the warp's 32 lanes folded by halves, exp by the same polynomial. An expert
 * computed here is the bits the card's would be.
 *
 * Every weight format the card reads (gpu_fmt); the scalar form is the
 * reference, the AVX-512 form (when the processor has it) the fast one,
 * and the two agree bit for bit (test_replica).
 */
#ifndef E0_GPU_REPLICA_H
#define E0_GPU_REPLICA_H

#include "quant/mat.h"

#include <stdbool.h>
#include <stdint.h>

/* One matrix's rows in host memory, as the card reads them. */
typedef struct {
    const uint8_t *w, *s, *b; /* weights; mlx affine scales and biases */
    int64_t row_bytes, srow_bytes;
    int32_t rows, cols;
    int32_t fmt, group, stype; /* gpu_fmt; mlx group; scales' e0_stype */
} rmat;

/* m's host pointers in the card's terms; fails (naming why) for a matrix
 * the card has no kernel for. */
int rmat_of(const e0_mat *m, rmat *out, char *err);

/* The card's exp and silu (kernels.cu exp_ieee, silu). */
float replica_exp(float x);
float replica_silu(float x);

/* Rows [r0, r1) of silu(G x) * (U x), as the gate-up kernels (mm_glu,
 * mmx_glu) form them, into h[r0 .. r1). */
void replica_glu(const rmat *G, const rmat *U, const float *x, int32_t r0, int32_t r1, float *h);
/* Rows [r0, r1) of W x into y[r0 .. r1), each as row_dot sums it. */
void replica_mv(const rmat *W, const float *x, int32_t r0, int32_t r1, float *y);

/* Tests: the scalar reference even where AVX-512 is there. */
void replica_force_scalar(bool on);

#endif
