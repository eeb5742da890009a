/* edge0's GPU kernels: every operation of a forward pass of the three
 * families, on the weight formats the checkpoints hold.
 *
 * Built into PTX by scripts/gpu_ptx.sh (nvcc -ptx for compute_75, so the
 * driver JIT-compiles it for any card from Turing on) and committed as
 * kernels.ptx; the binary embeds that text (gpu/ptx.S) and never needs
 * nvcc. Every kernel is extern "C" so the host finds it by its name.
 *
 * The arithmetic follows the CPU's scalar references (quant/ggml_quants.c,
 * quant/mat.c, model/*.c) operation for operation where the order is
 * cheap to keep (dequantization products, routing, norms); sums run in
 * another order (warp trees), so logits agree with the CPU's to rounding,
 * not bit for bit. Every kernel is deterministic: no atomics in sums, the
 * same launch gives the same bits.
 *
 * Layout conventions (host: gpu/gpu.h):
 *   activations are f32 rows: x [T, ldx], y [T, ldy];
 *   a matrix (gmat) is `rows` rows of row_bytes bytes from w (and, mlx
 *   affine, rows of srow_bytes of scales and biases); stacked experts are
 *   expert e at w + e * estride (s + e * sstride).
 */
#include <cuda_fp16.h>
#include <stdint.h>

/* Weight formats: keep in step with gpu_fmt in gpu/gpu.h. */
enum {
    F_F32, F_BF16, F_F16, F_QA4, F_QA8,
    F_Q4_0, F_Q4_1, F_Q5_0, F_Q5_1, F_Q8_0,
    F_Q2_K, F_Q3_K, F_Q4_K, F_Q5_K, F_Q6_K, F_IQ4_NL, F_IQ4_XS,
};

/* Mirrors gpu_mat (gpu/gpu.h) field for field. */
struct gmat {
    const uint8_t *w;  /* row 0 of expert 0 */
    const uint8_t *s;  /* mlx affine: scales, [rows, cols / group] */
    const uint8_t *b;  /* mlx affine: biases */
    long long row_bytes, srow_bytes;
    long long estride, sstride; /* bytes from one expert to the next */
    int rows, cols;
    int fmt, group, stype; /* stype: 0 bf16, 1 f16, 2 f32 */
    int pad;
};

__device__ __forceinline__ float bf16f(uint16_t v) { return __uint_as_float((uint32_t)v << 16); }
__device__ __forceinline__ float f16f(uint16_t v) { return __half2float(__ushort_as_half(v)); }
__device__ __forceinline__ uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
__device__ __forceinline__ float sval(const uint8_t *p, int i, int stype) {
    if (stype == 2) return ((const float *)p)[i];
    const uint16_t v = ld16(p + 2 * i);
    return stype == 0 ? bf16f(v) : f16f(v);
}
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

__constant__ int8_t k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

/* Six-bit scale and min of sub-block j of a Q4_K / Q5_K block. */
__device__ __forceinline__ void k4_sm(const uint8_t *s, int j, int &sc, int &m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
        m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Values [32c, 32c + 32) of one row into v, in the CPU reference's
 * arithmetic (quant/ggml_quants.c, mat_dequant). row: the row's weights;
 * srow / brow: its scales and biases (mlx affine). */
template <int F>
__device__ __forceinline__ void dq32(const gmat &W, const uint8_t *row, const uint8_t *srow,
                                     const uint8_t *brow, int c, float v[32]) {
    if (F == F_F32) {
        const float4 *p = (const float4 *)(row + (size_t)c * 128);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float4 q = p[i];
            v[4 * i] = q.x, v[4 * i + 1] = q.y, v[4 * i + 2] = q.z, v[4 * i + 3] = q.w;
        }
    } else if (F == F_BF16 || F == F_F16) {
        const uint4 *p = (const uint4 *)(row + (size_t)c * 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint4 q = p[i];
            uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint16_t lo = (uint16_t)(u[j] & 0xffff), hi = (uint16_t)(u[j] >> 16);
                v[8 * i + 2 * j] = F == F_BF16 ? bf16f(lo) : f16f(lo);
                v[8 * i + 2 * j + 1] = F == F_BF16 ? bf16f(hi) : f16f(hi);
            }
        }
    } else if (F == F_QA4 || F == F_QA8) {
        /* w = q * scale + bias; one group covers the chunk (group >= 32) */
        const int g = (32 * c) / W.group;
        const float sc = sval(srow, g, W.stype), bi = sval(brow, g, W.stype);
        const int bits = F == F_QA4 ? 4 : 8, per = 32 / bits, mask = (1 << bits) - 1;
        const uint32_t *p = (const uint32_t *)row + (size_t)c * (32 / per);
#pragma unroll
        for (int i = 0; i < 32 / per; i++) {
            const uint32_t word = p[i];
#pragma unroll
            for (int j = 0; j < per; j++)
                v[i * per + j] = (float)((word >> (bits * j)) & mask) * sc + bi;
        }
    } else if (F == F_Q4_0 || F == F_Q4_1 || F == F_IQ4_NL) {
        const int bsz = F == F_Q4_1 ? 20 : 18;
        const uint8_t *b = row + (size_t)c * bsz;
        const float d = f16f(ld16(b));
        const float m = F == F_Q4_1 ? f16f(ld16(b + 2)) : 0.0f;
        const uint8_t *qs = b + (F == F_Q4_1 ? 4 : 2);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int lo = qs[j] & 0x0f, hi = qs[j] >> 4;
            if (F == F_Q4_0) {
                v[j] = (float)(lo - 8) * d;
                v[j + 16] = (float)(hi - 8) * d;
            } else if (F == F_Q4_1) {
                v[j] = (float)lo * d + m;
                v[j + 16] = (float)hi * d + m;
            } else {
                v[j] = d * (float)k_iq4nl[lo];
                v[j + 16] = d * (float)k_iq4nl[hi];
            }
        }
    } else if (F == F_Q5_0 || F == F_Q5_1) {
        const int bsz = F == F_Q5_1 ? 24 : 22;
        const uint8_t *b = row + (size_t)c * bsz;
        const float d = f16f(ld16(b));
        const float m = F == F_Q5_1 ? f16f(ld16(b + 2)) : 0.0f;
        const uint8_t *qhp = b + (F == F_Q5_1 ? 4 : 2);
        const uint32_t qh = (uint32_t)qhp[0] | (uint32_t)qhp[1] << 8 | (uint32_t)qhp[2] << 16 |
                            (uint32_t)qhp[3] << 24;
        const uint8_t *qs = qhp + 4;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
            const int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            if (F == F_Q5_0) {
                v[j] = (float)(lo - 16) * d;
                v[j + 16] = (float)(hi - 16) * d;
            } else {
                v[j] = (float)lo * d + m;
                v[j + 16] = (float)hi * d + m;
            }
        }
    } else if (F == F_Q8_0) {
        const uint8_t *b = row + (size_t)c * 34;
        const float d = f16f(ld16(b));
        const int8_t *qs = (const int8_t *)(b + 2);
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = (float)qs[j] * d;
    } else if (F == F_Q2_K) {
        const uint8_t *b = row + (size_t)(c / 8) * 84;
        const int cc = c % 8, h = cc / 4, k = cc % 4;
        const uint8_t *sc = b, *qs = b + 16;
        const float d = f16f(ld16(b + 80)), dmin = f16f(ld16(b + 82));
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int s = 8 * h + 2 * k + half;
            const float dl = d * (float)(sc[s] & 0x0f), ml = dmin * (float)(sc[s] >> 4);
#pragma unroll
            for (int l = 0; l < 16; l++) {
                const int q = (qs[32 * h + 16 * half + l] >> (2 * k)) & 3;
                v[16 * half + l] = dl * (float)q - ml;
            }
        }
    } else if (F == F_Q3_K) {
        const uint8_t *b = row + (size_t)(c / 8) * 110;
        const int cc = c % 8, h = cc / 4, k = cc % 4;
        const uint8_t *hm = b, *qs = b + 32, *scs = b + 96;
        const float d = f16f(ld16(b + 108));
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int s = 8 * h + 2 * k + half;
            const int lo = (s < 8 ? scs[s] : scs[s - 8] >> 4) & 0x0f;
            const int hi = (scs[8 + s % 4] >> (2 * (s / 4))) & 3;
            const float dl = d * (float)((lo | hi << 4) - 32);
#pragma unroll
            for (int l2 = 0; l2 < 16; l2++) {
                const int l = 16 * half + l2;
                const int q = ((qs[32 * h + l] >> (2 * k)) & 3) - ((hm[l] >> (4 * h + k)) & 1 ? 0 : 4);
                v[l] = dl * (float)q;
            }
        }
    } else if (F == F_Q4_K || F == F_Q5_K) {
        const int bsz = F == F_Q4_K ? 144 : 176;
        const uint8_t *b = row + (size_t)(c / 8) * bsz;
        const int s = c % 8;
        const float d = f16f(ld16(b)), dmin = f16f(ld16(b + 2));
        int sc, m;
        k4_sm(b + 4, s, sc, m);
        const float d1 = d * (float)sc, m1 = dmin * (float)m;
        const uint8_t *qs = b + (F == F_Q4_K ? 16 : 48) + 32 * (s / 2);
        const uint8_t *qh = b + 16;
        const int sh = 4 * (s % 2);
#pragma unroll
        for (int l4 = 0; l4 < 8; l4++) {
            const uint32_t q4 = *(const uint32_t *)(qs + 4 * l4);
            uint32_t h4 = 0;
            if (F == F_Q5_K) h4 = *(const uint32_t *)(qh + 4 * l4);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int q = (int)((q4 >> (8 * j + sh)) & 0x0f);
                if (F == F_Q5_K) q |= (int)((h4 >> (8 * j + s)) & 1) << 4;
                v[4 * l4 + j] = d1 * (float)q - m1;
            }
        }
    } else if (F == F_Q6_K) {
        const uint8_t *b = row + (size_t)(c / 8) * 210;
        const int cc = c % 8, h = cc / 4, k = cc % 4;
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = f16f(ld16(b + 208));
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const int vi = 32 * k + l; /* index within the half */
            const int q = ((ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0f) |
                          ((qh[32 * h + l] >> (2 * k)) & 3) << 4;
            v[l] = d * (float)sc[(128 * h + vi) / 16] * (float)(q - 32);
        }
    } else if (F == F_IQ4_XS) {
        const uint8_t *b = row + (size_t)(c / 8) * 136;
        const int s = c % 8;
        const float d = f16f(ld16(b));
        const uint16_t sh = ld16(b + 2);
        const uint8_t *sl = b + 4, *qs = b + 8 + 16 * s;
        const int ls = ((sl[s / 2] >> (4 * (s % 2))) & 0x0f) | ((sh >> (2 * s)) & 3) << 4;
        const float dl = d * (float)(ls - 32);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = dl * (float)k_iq4nl[qs[j] & 0x0f];
            v[j + 16] = dl * (float)k_iq4nl[qs[j] >> 4];
        }
    }
}

#define TT 4          /* tokens a warp carries through one pass over a row */
#define MM_WARPS 8    /* rows (one a warp) a block of 256 threads computes */
#define XS 36         /* floats per 32-value chunk of x in shared memory: 4 of padding, so
                         that the 8 lanes of a quarter-warp reading their chunks' float4s at
                         once hit different banks */

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* n <= TT input rows xs[i] (cols floats each) into shared memory, chunk c
 * of row i at sx + (i * nc + c) * XS. The whole block takes part. */
__device__ __forceinline__ void stage_x(float *sx, const float *const *xs, int n, int cols) {
    const int nc = cols / 32;
    for (int i = 0; i < n; i++)
        for (int v = threadIdx.x; v < cols; v += blockDim.x)
            sx[((size_t)i * nc + v / 32) * XS + v % 32] = xs[i][v];
}

/* One row r of W against the n <= TT staged input rows: acc[i] = W[r] .
 * x_i, summed across the warp; every lane gets it. */
template <int F>
__device__ __forceinline__ void row_dot(const gmat &W, const uint8_t *wbase, const uint8_t *sbase,
                                        const uint8_t *bbase, int r, const float *sx, int n,
                                        float acc[TT]) {
    const int lane = threadIdx.x & 31;
    const uint8_t *row = wbase + (size_t)r * W.row_bytes;
    const uint8_t *srow = sbase ? sbase + (size_t)r * W.srow_bytes : nullptr;
    const uint8_t *brow = bbase ? bbase + (size_t)r * W.srow_bytes : nullptr;
#pragma unroll
    for (int i = 0; i < TT; i++) acc[i] = 0.0f;
    const int nc = W.cols / 32;
    for (int c = lane; c < nc; c += 32) {
        float v[32];
        dq32<F>(W, row, srow, brow, c, v);
#pragma unroll
        for (int i = 0; i < TT; i++) {
            if (i >= n) break;
            const float4 *x4 = (const float4 *)(sx + ((size_t)i * nc + c) * XS);
            float a = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float4 q = x4[j];
                a += v[4 * j] * q.x + v[4 * j + 1] * q.y + v[4 * j + 2] * q.z + v[4 * j + 3] * q.w;
            }
            acc[i] += a;
        }
    }
#pragma unroll
    for (int i = 0; i < TT; i++) acc[i] = warp_sum(acc[i]);
}

/* The value acc[lane] for lanes below TT (a register array indexed by a
 * constant only). */
__device__ __forceinline__ float pick(const float acc[TT], int lane) {
    float a = acc[0];
#pragma unroll
    for (int i = 1; i < TT; i++)
        if (lane == i) a = acc[i];
    return a;
}

/* y[t, r] = W[r] . x[t] for t < T: grid (ceil(rows / MM_WARPS)), block 256,
 * dynamic shared memory g * (cols / 32) * XS floats, g <= TT the tokens
 * staged at once (the host sizes it). */
template <int F>
__device__ void mm_body(const gmat W, const float *x, long long ldx, float *y, long long ldy, int T,
                        int g) {
    extern __shared__ float4 smem4[];
    float *sx = (float *)smem4;
    const int r = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    const bool live = r < W.rows;
    const int lane = threadIdx.x & 31;
    for (int t0 = 0; t0 < T; t0 += g) {
        const int n = T - t0 < g ? T - t0 : g;
        const float *xs[TT];
#pragma unroll
        for (int i = 0; i < TT; i++) xs[i] = x + (size_t)(t0 + (i < n ? i : 0)) * ldx;
        __syncthreads();
        stage_x(sx, xs, n, W.cols);
        __syncthreads();
        if (!live) continue;
        float acc[TT];
        row_dot<F>(W, W.w, W.s, W.b, r, sx, n, acc);
        const float a = pick(acc, lane);
        if (lane < n) y[(size_t)(t0 + lane) * ldy + r] = a;
    }
}

/* The MoE form: blockIdx.z = active expert a < *nact (expert exps[a]);
 * its pairs are order[start[a] .. start[a + 1]) (pair p = token p / k,
 * slot p % k); input row of pair p: x[p / k] (by_pair 0) or x[p]
 * (by_pair 1); output row: y[p]. */
template <int F>
__device__ void mm_moe_body(const gmat W, const int *nact, const int *exps, const int *start,
                            const int *order, int k, int by_pair, const float *x, long long ldx,
                            float *y, long long ldy, int g) {
    extern __shared__ float4 smem4[];
    float *sx = (float *)smem4;
    const int a = blockIdx.z;
    if (a >= *nact) return; /* the whole block */
    const int r = blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    const bool live = r < W.rows;
    const int lane = threadIdx.x & 31;
    const int e = exps[a], p0 = start[a], p1 = start[a + 1];
    const uint8_t *wb = W.w + (size_t)e * W.estride;
    const uint8_t *sb = W.s ? W.s + (size_t)e * W.sstride : nullptr;
    const uint8_t *bb = W.b ? W.b + (size_t)e * W.sstride : nullptr;
    for (int i0 = p0; i0 < p1; i0 += g) {
        const int n = p1 - i0 < g ? p1 - i0 : g;
        const float *xs[TT];
#pragma unroll
        for (int i = 0; i < TT; i++) {
            const int p = order[i0 + (i < n ? i : 0)];
            xs[i] = x + (size_t)(by_pair ? p : p / k) * ldx;
        }
        __syncthreads();
        stage_x(sx, xs, n, W.cols);
        __syncthreads();
        if (!live) continue;
        float acc[TT];
        row_dot<F>(W, wb, sb, bb, r, sx, n, acc);
        const float v = pick(acc, lane);
        if (lane < n) y[(size_t)order[i0 + lane] * ldy + r] = v;
    }
}

/* ---- the tiled form, for batches (prefill) ---------------------------------
 * A block computes a tile of 64 rows x 64 tokens in 32-column steps: 64
 * threads dequantize the step's 64 row chunks into shared memory (k-major),
 * all 256 load the tokens' 32 columns, then each thread accumulates 4 rows
 * x 4 tokens. The weights are read once per 64 tokens instead of once per
 * 4. Sums run in another order than the vector form's (per token, the same
 * order whatever the batch). */
#define BM 64
#define BN 64
#define BP 4 /* padding of a shared row */

template <int F>
__device__ __forceinline__ void tile_steps(const gmat &W, const uint8_t *wb, const uint8_t *sb,
                                           const uint8_t *bb, int r0, const float *const *xr,
                                           float acc[4][4], float (*Ws)[BM + BP],
                                           float (*Xs)[BN + BP]) {
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int nc = W.cols / 32;
    for (int c = 0; c < nc; c++) {
        __syncthreads();
        if (tid < BM) {
            float v[32];
            const int r = r0 + tid;
            if (r < W.rows) {
                dq32<F>(W, wb + (size_t)r * W.row_bytes, sb ? sb + (size_t)r * W.srow_bytes : nullptr,
                        bb ? bb + (size_t)r * W.srow_bytes : nullptr, c, v);
            } else {
#pragma unroll
                for (int j = 0; j < 32; j++) v[j] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 32; j++) Ws[j][tid] = v[j];
        }
        for (int i = tid; i < BN * 32; i += blockDim.x) {
            const int t = i / 32, j = i % 32;
            Xs[j][t] = xr[t] ? xr[t][(size_t)c * 32 + j] : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int j = 0; j < 32; j++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = Ws[j][ty * 4 + i], b[i] = Xs[j][tx * 4 + i];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int q = 0; q < 4; q++) acc[i][q] += a[i] * b[q];
        }
    }
}

/* y[t, r] = W[r] . x[t]: grid (ceil(rows / 64), ceil(T / 64)), block 256. */
template <int F>
__device__ void mmt_body(const gmat W, const float *x, long long ldx, float *y, long long ldy, int T) {
    __shared__ float Ws[32][BM + BP];
    __shared__ float Xs[32][BN + BP];
    __shared__ const float *xr[BN];
    const int r0 = blockIdx.x * BM, t0 = blockIdx.y * BN;
    if (threadIdx.x < BN) {
        const int t = t0 + threadIdx.x;
        xr[threadIdx.x] = t < T ? x + (size_t)t * ldx : nullptr;
    }
    float acc[4][4] = {};
    tile_steps<F>(W, W.w, W.s, W.b, r0, xr, acc, Ws, Xs);
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int r = r0 + ty * 4 + i, t = t0 + tx * 4 + q;
            if (r < W.rows && t < T) y[(size_t)t * ldy + r] = acc[i][q];
        }
}

/* The experts' tiled form: blockIdx.z = active expert a (as mm_moe_body),
 * blockIdx.x a tile of 64 rows; the block walks the expert's pairs 64 at a
 * time. */
template <int F>
__device__ void mmtx_body(const gmat W, const int *nact, const int *exps, const int *start,
                          const int *order, int k, int by_pair, const float *x, long long ldx,
                          float *y, long long ldy) {
    __shared__ float Ws[32][BM + BP];
    __shared__ float Xs[32][BN + BP];
    __shared__ const float *xr[BN];
    const int a = blockIdx.z;
    if (a >= *nact) return;
    const int e = exps[a], p0 = start[a], p1 = start[a + 1], r0 = blockIdx.x * BM;
    const uint8_t *wb = W.w + (size_t)e * W.estride;
    const uint8_t *sb = W.s ? W.s + (size_t)e * W.sstride : nullptr;
    const uint8_t *bb = W.b ? W.b + (size_t)e * W.sstride : nullptr;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    for (int i0 = p0; i0 < p1; i0 += BN) {
        __syncthreads();
        if (threadIdx.x < BN) {
            const int i = i0 + threadIdx.x;
            const int p = i < p1 ? order[i] : -1;
            xr[threadIdx.x] = p >= 0 ? x + (size_t)(by_pair ? p : p / k) * ldx : nullptr;
        }
        float acc[4][4] = {};
        tile_steps<F>(W, wb, sb, bb, r0, xr, acc, Ws, Xs);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int i = i0 + tx * 4 + q;
            if (i >= p1) continue;
            const int p = order[i];
#pragma unroll
            for (int ii = 0; ii < 4; ii++) {
                const int r = r0 + ty * 4 + ii;
                if (r < W.rows) y[(size_t)p * ldy + r] = acc[ii][q];
            }
        }
    }
}

#define MM_KERNELS(NAME, F)                                                                      \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        mm_##NAME(const gmat W, const float *x, long long ldx, float *y, long long ldy, int T,   \
                  int g) {                                                                       \
        mm_body<F>(W, x, ldx, y, ldy, T, g);                                                     \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256) mmx_##NAME(                                \
        const gmat W, const int *nact, const int *exps, const int *start, const int *order,      \
        int k, int by_pair, const float *x, long long ldx, float *y, long long ldy, int g) {      \
        mm_moe_body<F>(W, nact, exps, start, order, k, by_pair, x, ldx, y, ldy, g);              \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        mmt_##NAME(const gmat W, const float *x, long long ldx, float *y, long long ldy, int T) { \
        mmt_body<F>(W, x, ldx, y, ldy, T);                                                       \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256) mmtx_##NAME(                               \
        const gmat W, const int *nact, const int *exps, const int *start, const int *order,      \
        int k, int by_pair, const float *x, long long ldx, float *y, long long ldy) {             \
        mmtx_body<F>(W, nact, exps, start, order, k, by_pair, x, ldx, y, ldy);                   \
    }

MM_KERNELS(f32, F_F32)
MM_KERNELS(bf16, F_BF16)
MM_KERNELS(f16, F_F16)
MM_KERNELS(qa4, F_QA4)
MM_KERNELS(qa8, F_QA8)
MM_KERNELS(q4_0, F_Q4_0)
MM_KERNELS(q4_1, F_Q4_1)
MM_KERNELS(q5_0, F_Q5_0)
MM_KERNELS(q5_1, F_Q5_1)
MM_KERNELS(q8_0, F_Q8_0)
MM_KERNELS(q2_k, F_Q2_K)
MM_KERNELS(q3_k, F_Q3_K)
MM_KERNELS(q4_k, F_Q4_K)
MM_KERNELS(q5_k, F_Q5_K)
MM_KERNELS(q6_k, F_Q6_K)
MM_KERNELS(iq4_nl, F_IQ4_NL)
MM_KERNELS(iq4_xs, F_IQ4_XS)

/* ---- element-wise and per-row operations ---------------------------------- */

/* A block-wide sum of one value per thread (blockDim.x a multiple of 32,
 * at most 1024); every thread gets it. */
__device__ float block_sum(float v) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) part[w] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; i++) s += part[i];
    return s;
}

__device__ float block_max(float v) {
    __shared__ float part[32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) part[w] = v;
    __syncthreads();
    float m = part[0];
    for (int i = 1; i < nw; i++) m = fmaxf(m, part[i]);
    return m;
}

/* y[t] = w * x[t] / rms(x[t]) over n values: grid T, block 256. */
extern "C" __global__ void rmsnorm(const float *x, const float *w, float *y, int n, float eps) {
    const float *xt = x + (size_t)blockIdx.x * n;
    float *yt = y + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xt[i] * xt[i];
    ss = block_sum(ss);
    const float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) yt[i] = w[i] * (xt[i] * inv);
}

/* x += y over n values. */
extern "C" __global__ void add_inplace(float *x, const float *y, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

/* g = silu(g) * u over n values. */
extern "C" __global__ void swiglu(float *g, const float *u, long long n) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = silu(g[i]) * u[i];
}

/* ---- full attention ---------------------------------------------------- */

/* Per token t and head: RMSNorm of the head's hd values (q: heads [0, nh)
 * at q + t * qrows + h * per; k: heads nh.. at k + t * kvd + h * hd), then
 * rotate-half RoPE on the first 2 * half dims at position pos0 + t, the
 * angle formed in f32 and its cos / sin in double as the CPU does.
 * grid (T, nh + nkv), block hd (<= 1024). */
extern "C" __global__ void qk_norm_rope(float *q, float *k, const float *qn, const float *kn,
                                        const float *inv_freq, int nh, int hd, int per, int qrows,
                                        int kvd, int half, int pos0, float eps) {
    extern __shared__ float sh[];
    const int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x;
    const bool isq = h < nh;
    float *v = isq ? q + (size_t)t * qrows + (size_t)h * per : k + (size_t)t * kvd + (size_t)(h - nh) * hd;
    const float *w = isq ? qn : kn;
    const float x = i < hd ? v[i] : 0.0f;
    const float ss = block_sum(x * x);
    const float inv = 1.0f / sqrtf(ss / (float)hd + eps);
    if (i < hd) sh[i] = w[i] * (x * inv);
    __syncthreads();
    if (i >= hd) return;
    float o = sh[i];
    if (i < 2 * half) {
        const int j = i < half ? i : i - half;
        const float ang = (float)(pos0 + t) * inv_freq[j];
        const float c = (float)cos((double)ang), s = (float)sin((double)ang);
        if (i < half)
            o = sh[i] * c - sh[i + half] * s;
        else
            o = sh[i] * c + sh[i - half] * s;
    }
    v[i] = o;
}

/* kc[pos0 + t] = k[t], vc[pos0 + t] = v[t] (kvd floats each), f32 or f16
 * cache. grid T, block 256. */
extern "C" __global__ void kv_store(void *kc, void *vc, const float *k, const float *v, int kvd,
                                    int pos0, int f16) {
    const int t = blockIdx.x;
    const size_t at = (size_t)(pos0 + t) * kvd;
    for (int i = threadIdx.x; i < kvd; i += blockDim.x) {
        const float a = k[(size_t)t * kvd + i], b = v[(size_t)t * kvd + i];
        if (f16) {
            ((__half *)kc)[at + i] = __float2half_rn(a);
            ((__half *)vc)[at + i] = __float2half_rn(b);
        } else {
            ((float *)kc)[at + i] = a;
            ((float *)vc)[at + i] = b;
        }
    }
}

__device__ __forceinline__ float kvload(const void *c, size_t i, int f16) {
    return f16 ? __half2float(((const __half *)c)[i]) : ((const float *)c)[i];
}

/* Causal attention of query head h of token t (position pos0 + t) over the
 * cache's positions 0..pos0 + t: s_j = scale q.k_j, softmax, o = sum p_j v_j;
 * gated: o *= sigmoid(the head's gate half). scores: [T, nh, n_ctx] scratch.
 * grid (nh, T), block 128. */
extern "C" __global__ void attend(const float *q, const void *kc, const void *vc, float *scores,
                                  float *att, int nh, int nkv, int hd, int per, int qrows, int pos0,
                                  int n_ctx, float scale, int gated, int f16) {
    const int h = blockIdx.x, t = blockIdx.y, n = pos0 + t + 1;
    const int kvh = h / (nh / nkv), kvd = nkv * hd;
    const float *qh = q + (size_t)t * qrows + (size_t)h * per;
    float *sc = scores + ((size_t)t * nh + h) * (size_t)n_ctx;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int j = w; j < n; j += nw) {
        const size_t base = (size_t)j * kvd + (size_t)kvh * hd;
        float a = 0.0f;
        for (int i = lane; i < hd; i += 32) a += qh[i] * kvload(kc, base + i, f16);
        a = warp_sum(a);
        if (lane == 0) sc[j] = scale * a;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += blockDim.x) mx = fmaxf(mx, sc[j]);
    mx = block_max(mx);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        const float e = expf(sc[j] - mx);
        sc[j] = e;
        sum += e;
    }
    sum = block_sum(sum);
    const float inv = 1.0f / sum;
    float *o = att + (size_t)t * nh * hd + (size_t)h * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
        for (int j = 0; j < n; j++) a += sc[j] * kvload(vc, (size_t)j * kvd + (size_t)kvh * hd + i, f16);
        a *= inv;
        if (gated) a *= sigm(qh[hd + i]);
        o[i] = a;
    }
}

/* ---- Gated DeltaNet ---------------------------------------------------- */

/* qwen3_next's packed projections into the flat q|k|v (mix), z, b, a
 * (model/deltanet.c unpack): qkvz [T, P], ba [T, 2 Hv]. packed: also qkvz;
 * ba_only: only ba is packed (GGUF qwen3next). grid T, block 256. */
extern "C" __global__ void dn_unpack(const float *qkvz, const float *ba, float *mix, float *z,
                                     float *b, float *a, int Hk, int Dk, int r, int Dv, int P,
                                     int ba_only) {
    const int t = blockIdx.x, Kd = Hk * Dk, C = 2 * Kd + Hk * r * Dv, per = 2 * Dk + 2 * r * Dv;
    const int Hv = Hk * r;
    if (!ba_only) {
        const float *src = qkvz + (size_t)t * P;
        float *mx = mix + (size_t)t * C, *zz = z + (size_t)t * Hv * Dv;
        for (int i = threadIdx.x; i < Hk * per; i += blockDim.x) {
            const int g = i / per, o = i % per;
            const float v = src[i];
            if (o < Dk)
                mx[g * Dk + o] = v;
            else if (o < 2 * Dk)
                mx[Kd + g * Dk + o - Dk] = v;
            else if (o < 2 * Dk + r * Dv)
                mx[2 * Kd + g * r * Dv + o - 2 * Dk] = v;
            else
                zz[g * r * Dv + o - 2 * Dk - r * Dv] = v;
        }
    }
    for (int i = threadIdx.x; i < 2 * Hv; i += blockDim.x) {
        const int g = i / (2 * r), o = i % (2 * r);
        const float v = ba[(size_t)t * 2 * Hv + i];
        if (o < r)
            b[(size_t)t * Hv + g * r + o] = v;
        else
            a[(size_t)t * Hv + g * r + o - r] = v;
    }
}

/* The causal depthwise conv (kernel K) of T tokens of one sequence over
 * [state (K-1 rows) ; mix rows], then SiLU, into out [T, C]; the state
 * becomes the last K-1 input rows. One thread a channel: grid ceil(C/256). */
extern "C" __global__ void dn_conv(const float *mix, float *out, float *state, const float *w,
                                   int T, int C, int K) {
    const int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    float win[8]; /* K <= 8 (the host checks) */
    for (int i = 0; i < K - 1; i++) win[i] = state[(size_t)i * C + ch];
    for (int t = 0; t < T; t++) {
        win[K - 1] = mix[(size_t)t * C + ch];
        float acc = 0.0f;
        for (int i = 0; i < K; i++) acc += w[(size_t)ch * K + i] * win[i];
        out[(size_t)t * C + ch] = silu(acc);
        for (int i = 0; i < K - 1; i++) win[i] = win[i + 1];
    }
    for (int i = 0; i < K - 1; i++) state[(size_t)i * C + ch] = win[i];
}

/* q and k of key head g of token t L2-normalised (eps 1e-6), q scaled by
 * Dk^-1/2, in place in out [T, C]. grid (T, 2 Hk), block 128. */
extern "C" __global__ void dn_qknorm(float *mix, int C, int Hk, int Dk) {
    const int t = blockIdx.x, y = blockIdx.y, g = y % Hk, isk = y / Hk;
    float *v = mix + (size_t)t * C + (size_t)isk * Hk * Dk + (size_t)g * Dk;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < Dk; i += blockDim.x) ss += v[i] * v[i];
    ss = block_sum(ss);
    const float inv = 1.0f / sqrtf(ss + 1e-6f);
    const float qs = isk ? 1.0f : 1.0f / sqrtf((float)Dk);
    __syncthreads();
    for (int i = threadIdx.x; i < Dk; i += blockDim.x) {
        float x = v[i] * inv;
        if (!isk) x *= qs;
        v[i] = x;
    }
}

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* The recurrence of value head h over T tokens of one sequence, then the
 * gated RMSNorm: state [Hv, Dk, Dv] (row i: key dim i); thread j owns
 * column j, held in registers for the call when Dk is DK (> 0), else read
 * and written in place. grid Hv, block Dv rounded up to 32 (<= 1024). */
template <int DK>
__device__ void dn_rec_body(const float *mix, const float *z, const float *bb, const float *aa,
                            const float *A, const float *dt_bias, const float *norm, float *state,
                            float *o, int T, int Hk, int Hv, int Dk, int Dv, int vtiled, float eps) {
    extern __shared__ float shr[]; /* q [Dk], k [Dk] */
    float *sq = shr, *sk = shr + Dk;
    const int h = blockIdx.x, j = threadIdx.x, r = Hv / Hk;
    const int g = vtiled ? h % Hk : h / r;
    const int Kd = Hk * Dk, Vd = Hv * Dv, C = 2 * Kd + Vd;
    const bool live = j < Dv;
    float *S = state + (size_t)h * Dk * Dv;
    float reg[DK > 0 ? DK : 1];
    if (DK > 0 && live) {
#pragma unroll
        for (int i = 0; i < DK; i++) reg[i] = S[(size_t)i * Dv + j];
    }
    for (int t = 0; t < T; t++) {
        const float *row = mix + (size_t)t * C;
        __syncthreads();
        for (int i = j; i < Dk; i += blockDim.x) {
            sq[i] = row[g * Dk + i];
            sk[i] = row[Kd + g * Dk + i];
        }
        __syncthreads();
        const float beta = sigm(bb[(size_t)t * Hv + h]);
        const float decay = expf(A[h] * softplus(aa[(size_t)t * Hv + h] + dt_bias[h]));
        float out = 0.0f;
        if (live) {
            const float vj = row[2 * Kd + h * Dv + j];
            float u = 0.0f;
            if (DK > 0) {
#pragma unroll
                for (int i = 0; i < DK; i++) {
                    reg[i] *= decay;
                    u += reg[i] * sk[i];
                }
                const float d = beta * (vj - u);
#pragma unroll
                for (int i = 0; i < DK; i++) {
                    reg[i] += sk[i] * d;
                    out += reg[i] * sq[i];
                }
            } else {
                for (int i = 0; i < Dk; i++) {
                    const float sv = S[(size_t)i * Dv + j] * decay;
                    S[(size_t)i * Dv + j] = sv;
                    u += sv * sk[i];
                }
                const float d = beta * (vj - u);
                for (int i = 0; i < Dk; i++) {
                    const float sv = S[(size_t)i * Dv + j] + sk[i] * d;
                    S[(size_t)i * Dv + j] = sv;
                    out += sv * sq[i];
                }
            }
        }
        const float ss = block_sum(live ? out * out : 0.0f);
        if (live) {
            const float inv = 1.0f / sqrtf(ss / (float)Dv + eps);
            const float zj = z[(size_t)t * Vd + (size_t)h * Dv + j];
            o[(size_t)t * Vd + (size_t)h * Dv + j] = norm[j] * (out * inv) * silu(zj);
        }
    }
    if (DK > 0 && live) {
#pragma unroll
        for (int i = 0; i < DK; i++) S[(size_t)i * Dv + j] = reg[i];
    }
}

#define DN_REC(NAME, DK)                                                                          \
    extern "C" __global__ void NAME(const float *mix, const float *z, const float *bb,            \
                                    const float *aa, const float *A, const float *dt_bias,        \
                                    const float *norm, float *state, float *o, int T, int Hk,     \
                                    int Hv, int Dk, int Dv, int vtiled, float eps) {              \
        dn_rec_body<DK>(mix, z, bb, aa, A, dt_bias, norm, state, o, T, Hk, Hv, Dk, Dv, vtiled, eps); \
    }
DN_REC(dn_rec, 0)
DN_REC(dn_rec32, 32)
DN_REC(dn_rec64, 64)
DN_REC(dn_rec128, 128)

/* ---- the MoE block ------------------------------------------------------ */

/* Per token: softmax over E logits, the k largest (lower index first on
 * ties), renormalised when renorm (model/moe.c route). One warp a token:
 * lanes take experts lane, lane + 32, ...; each pick is a warp-wide
 * argmax. grid ceil(T / 4), block 128. */
extern "C" __global__ void route(const float *logits, int *idx, float *w, int T, int E, int k,
                                 int renorm) {
    const int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= T) return;
    const float *l = logits + (size_t)t * E;
    int *id = idx + (size_t)t * k;
    float *wt = w + (size_t)t * k;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += expf(l[e] - mx);
    sum = warp_sum(sum);
    unsigned taken = 0; /* bit q: this lane's expert lane + 32 q is picked (E <= 1024) */
    float tot = 0.0f;
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int be = 0x7fffffff;
        for (int e = lane, q = 0; e < E; e += 32, q++)
            if (!(taken >> q & 1) && (l[e] > bv || (l[e] == bv && e < be))) bv = l[e], be = e;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (ov > bv || (ov == bv && oe < be)) bv = ov, be = oe;
        }
        if (be % 32 == lane) taken |= 1u << (be / 32);
        const float p = expf(bv - mx) / sum;
        if (lane == 0) id[j] = be, wt[j] = p;
        tot += p;
    }
    if (renorm && lane == 0)
        for (int j = 0; j < k; j++) wt[j] /= tot;
}

/* The T * k (token, slot) pairs grouped by expert, in expert order and pair
 * order within one: nact experts exps[a] with pairs order[start[a] ..
 * start[a + 1]). One block of 512 threads (E <= 512 * 8): thread e counts
 * expert e's pairs by scanning them (no atomics), a scan of the counts
 * places each expert, and each writes its pairs in order. count: [E]. */
extern "C" __global__ void moe_sort(const int *idx, int P, int E, int *count, int *nact, int *exps,
                                    int *start, int *order) {
    __shared__ int part[512];
    const int tid = threadIdx.x, nt = blockDim.x;
    int mine = 0; /* pairs of this thread's experts e = tid, tid + nt, ... */
    for (int e = tid; e < E; e += nt) {
        int c = 0;
        for (int p = 0; p < P; p++) c += idx[p] == e;
        count[e] = c;
        mine += c;
    }
    part[tid] = mine;
    __syncthreads();
    if (tid == 0) { /* exclusive scan of the threads' pairs, and of their experts present */
        int at = 0;
        for (int i = 0; i < nt; i++) {
            const int c = part[i];
            part[i] = at;
            at += c;
        }
    }
    __syncthreads();
    /* the active experts' ranks: serial over E by thread 0 (E is small) */
    if (tid == 0) {
        int a = 0, at = 0;
        for (int e = 0; e < E; e++) {
            const int c = count[e];
            if (!c) continue;
            exps[a] = e;
            start[a] = at;
            at += c;
            a++;
        }
        start[a] = at;
        *nact = a;
    }
    __syncthreads();
    /* expert e's first place is the number of pairs of experts below it */
    for (int e = tid; e < E; e += nt) {
        int at = 0;
        for (int q = 0; q < e; q++) at += count[q];
        for (int p = 0; p < P && count[e]; p++)
            if (idx[p] == e) order[at++] = p;
    }
    (void)part;
}

/* out[t] = sum over slots s (in order) of w[t, s] * eo[t k + s], then
 * + sigmoid(shg[t]) * ys[t] when shared. grid T, block 256. */
extern "C" __global__ void moe_combine(const float *eo, const float *w, const float *shg,
                                       const float *ys, float *out, int H, int k, int shared) {
    const int t = blockIdx.x;
    const float gs = shared ? sigm(shg[t]) : 0.0f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < k; s++) o += w[(size_t)t * k + s] * eo[((size_t)t * k + s) * H + i];
        if (shared) o += gs * ys[(size_t)t * H + i];
        out[(size_t)t * H + i] = o;
    }
}
