/* edge0's GPU kernels, part two: the weight formats' dequantization and
 * the matrix products (vector, grouped, gate-up, experts' pairs, tiles).
 * Included once, by kernels.cu (its conventions and types hold here);
 * scripts/gpu_ptx.sh builds the two as one unit. */
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

/* Small non-negative integers as floats without the int-to-float unit
 * (16 conversions a clock on an SM against 128 additions): 2^23 + q as a
 * float's bits, less 2^23 (less `bias` too), exact for q < 2^23 and
 * |q - bias| < 2^24, so the same bits as (float)(q - bias). */
__device__ __forceinline__ float u2f(uint32_t q, float bias = 0.0f) {
    return __fsub_rn(__uint_as_float(0x4B000000u | q), 8388608.0f + bias);
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
                v[i * per + j] = __fmaf_rn(u2f((word >> (bits * j)) & mask), sc, bi);
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
                v[j] = __fmul_rn(u2f(lo, 8.0f), d);
                v[j + 16] = __fmul_rn(u2f(hi, 8.0f), d);
            } else if (F == F_Q4_1) {
                v[j] = __fmaf_rn(u2f(lo), d, m);
                v[j + 16] = __fmaf_rn(u2f(hi), d, m);
            } else {
                v[j] = __fmul_rn(d, (float)k_iq4nl[lo]);
                v[j + 16] = __fmul_rn(d, (float)k_iq4nl[hi]);
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
                v[j] = __fmul_rn(u2f(lo, 16.0f), d);
                v[j + 16] = __fmul_rn(u2f(hi, 16.0f), d);
            } else {
                v[j] = __fmaf_rn(u2f(lo), d, m);
                v[j + 16] = __fmaf_rn(u2f(hi), d, m);
            }
        }
    } else if (F == F_Q8_0) {
        const uint8_t *b = row + (size_t)c * 34;
        const float d = f16f(ld16(b));
        const uint8_t *qs = b + 2; /* int8: q ^ 0x80 is q + 128 */
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = __fmul_rn(u2f(qs[j] ^ 0x80u, 128.0f), d);
    } else if (F == F_Q2_K) {
        const uint8_t *b = row + (size_t)(c / 8) * 84;
        const int cc = c % 8, h = cc / 4, k = cc % 4;
        const uint8_t *sc = b, *qs = b + 16;
        const float d = f16f(ld16(b + 80)), dmin = f16f(ld16(b + 82));
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int s = 8 * h + 2 * k + half;
            const float dl = __fmul_rn(d, (float)(sc[s] & 0x0f)), ml = __fmul_rn(dmin, (float)(sc[s] >> 4));
#pragma unroll
            for (int l = 0; l < 16; l++) {
                const int q = (qs[32 * h + 16 * half + l] >> (2 * k)) & 3;
                v[16 * half + l] = __fmaf_rn(dl, (float)q, -ml);
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
            const float dl = __fmul_rn(d, (float)((lo | hi << 4) - 32));
#pragma unroll
            for (int l2 = 0; l2 < 16; l2++) {
                const int l = 16 * half + l2;
                const int q = ((qs[32 * h + l] >> (2 * k)) & 3) - ((hm[l] >> (4 * h + k)) & 1 ? 0 : 4);
                v[l] = __fmul_rn(dl, (float)q);
            }
        }
    } else if (F == F_Q4_K || F == F_Q5_K) {
        const int bsz = F == F_Q4_K ? 144 : 176;
        const uint8_t *b = row + (size_t)(c / 8) * bsz;
        const int s = c % 8;
        const float d = f16f(ld16(b)), dmin = f16f(ld16(b + 2));
        int sc, m;
        k4_sm(b + 4, s, sc, m);
        const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)m);
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
                uint32_t q = (q4 >> (8 * j + sh)) & 0x0f;
                if (F == F_Q5_K) q |= ((h4 >> (8 * j + s)) & 1) << 4;
                v[4 * l4 + j] = __fmaf_rn(d1, u2f(q), -m1);
            }
        }
    } else if (F == F_Q6_K) {
        const uint8_t *b = row + (size_t)(c / 8) * 210;
        const int cc = c % 8, h = cc / 4, k = cc % 4;
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = f16f(ld16(b + 208));
        /* the chunk's two sub-blocks of 16 share a scale each */
        const float ds0 = __fmul_rn(d, (float)sc[(128 * h + 32 * k) / 16]),
                    ds1 = __fmul_rn(d, (float)sc[(128 * h + 32 * k + 16) / 16]);
        /* A block is 210 bytes, so only 2-byte alignment holds: the chunk's 32 bytes of low
         * and of high bits each as nine aligned words (eight when the block is 4-aligned),
         * shifted by half a word where it is not (a funnel shift by 0 is the word itself),
         * instead of sixteen 16-bit loads each */
        const uint8_t *qlp = ql + 64 * h + 32 * (k % 2), *qhp = qh + 32 * h;
        const int odd = (int)((unsigned long long)qlp & 2); /* qhp's is the same: both lie 4k from b */
        const uint32_t *la = (const uint32_t *)(qlp - odd), *ha = (const uint32_t *)(qhp - odd);
        uint32_t lws[9], hws[9];
#pragma unroll
        for (int i = 0; i < 8; i++) lws[i] = la[i], hws[i] = ha[i];
        lws[8] = odd ? la[8] : 0u; /* within the block: the segments end 17 or more bytes before it */
        hws[8] = odd ? ha[8] : 0u;
        const unsigned fs = 8u * (unsigned)odd;
#pragma unroll
        for (int l2 = 0; l2 < 16; l2++) {
            const int wi = l2 / 2, sh = 16 * (l2 % 2);
            const uint32_t lw = (__funnelshift_r(lws[wi], lws[wi + 1], fs) >> sh) & 0xffffu;
            const uint32_t hw = (__funnelshift_r(hws[wi], hws[wi + 1], fs) >> sh) & 0xffffu;
#pragma unroll
            for (int o = 0; o < 2; o++) {
                const int l = 2 * l2 + o;
                const uint32_t q = ((lw >> (8 * o + 4 * (k / 2))) & 0x0f) | ((hw >> (8 * o + 2 * k)) & 3) << 4;
                v[l] = __fmul_rn(l < 16 ? ds0 : ds1, u2f(q, 32.0f));
            }
        }
    } else if (F == F_IQ4_XS) {
        const uint8_t *b = row + (size_t)(c / 8) * 136;
        const int s = c % 8;
        const float d = f16f(ld16(b));
        const uint16_t sh = ld16(b + 2);
        const uint8_t *sl = b + 4, *qs = b + 8 + 16 * s;
        const int ls = ((sl[s / 2] >> (4 * (s % 2))) & 0x0f) | ((sh >> (2 * s)) & 3) << 4;
        const float dl = __fmul_rn(d, (float)(ls - 32));
#pragma unroll
        for (int j = 0; j < 16; j++) {
            v[j] = __fmul_rn(dl, (float)k_iq4nl[qs[j] & 0x0f]);
            v[j + 16] = __fmul_rn(dl, (float)k_iq4nl[qs[j] >> 4]);
        }
    }
}

#define TT 4          /* tokens a warp carries through one pass over a row */
/* The vector forms' blocks: one row a warp, blockDim.x / 32 warps (the host
 * chooses: 8, or fewer where a matrix has too few rows to fill the card). */
__device__ __forceinline__ int mm_warps() { return (int)(blockDim.x >> 5); }
#define XS 36         /* floats per 32-value chunk of x in shared memory: 4 of padding, so
                         that the 8 lanes of a quarter-warp reading their chunks' float4s at
                         once hit different banks */

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* n <= TT input rows xs[i] (cols floats each) into shared memory, chunk c
 * of row i at sx + (i * nc + c) * XS. The whole block takes part: four
 * floats a load where the row is 16-byte aligned (a chunk's XS floats keep
 * each four in one float4 of shared memory). */
__device__ __forceinline__ void stage_x(float *sx, const float *const *xs, int n, int cols) {
    const int nc = cols / 32;
    for (int i = 0; i < n; i++) {
        if (((unsigned long long)xs[i] & 15) == 0) {
            const float4 *x4 = (const float4 *)xs[i];
            for (int v = threadIdx.x; v < cols / 4; v += blockDim.x)
                *(float4 *)(sx + ((size_t)i * nc + v / 8) * XS + 4 * (v % 8)) = x4[v];
        } else {
            for (int v = threadIdx.x; v < cols; v += blockDim.x)
                sx[((size_t)i * nc + v / 32) * XS + v % 32] = xs[i][v];
        }
    }
}

/* The dot product of a chunk's 32 values with its 32 inputs, in the order
 * the host's replica (gpu/replica.c) keeps: eight groups of four, each
 * (v1 x1, then v0 x0, v2 x2, v3 x3 fused in), summed in turn from 0.
 * Explicit round-to-nearest operations, which the driver may not fuse.
 * (Session 35: 16 pairs folded by halves instead cost 25% of a resident
 * decode step; this is the order nvcc gave the plain expression before.) */
__device__ __forceinline__ float chunk_dot(const float v[32], const float *xc) {
    const float4 *x4 = (const float4 *)xc;
    float a = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float4 q = x4[j];
        float t = __fmul_rn(v[4 * j + 1], q.y);
        t = __fmaf_rn(v[4 * j], q.x, t);
        t = __fmaf_rn(v[4 * j + 2], q.z, t);
        t = __fmaf_rn(v[4 * j + 3], q.w, t);
        a = __fadd_rn(a, t);
    }
    return a;
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
            const float *xc = sx + ((size_t)i * nc + c) * XS;
            acc[i] = __fadd_rn(acc[i], chunk_dot(v, xc));
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

/* Rows r0, r0 + rstep, ... of y[t] = W x[t] for t < T, each computed by
 * one warp of a block of 256 (every thread of the block calls it: it
 * stages x, once for all the warp's rows); GLU: those rows of
 * silu(W x[t]) * (U x[t]) instead, each product summed exactly as the
 * plain form sums it and the product formed as the swiglu kernel forms it,
 * so the fused form gives the bits of the separate kernels. Dynamic shared
 * memory: g * (cols / 32) * XS floats, g <= TT the tokens staged at once
 * (the host sizes it). */
template <int F, bool GLU>
__device__ __forceinline__ void mm_rows(const gmat &W, const gmat &U, int r0, int rstep, const float *x,
                                        long long ldx, float *y, long long ldy, int T, int g) {
    extern __shared__ float4 smem4[];
    float *sx = (float *)smem4;
    const int lane = threadIdx.x & 31;
    for (int t0 = 0; t0 < T; t0 += g) {
        const int n = T - t0 < g ? T - t0 : g;
        const float *xs[TT];
#pragma unroll
        for (int i = 0; i < TT; i++) xs[i] = x + (size_t)(t0 + (i < n ? i : 0)) * ldx;
        __syncthreads();
        stage_x(sx, xs, n, W.cols);
        __syncthreads();
        for (int r = r0; r < W.rows; r += rstep) {
            float acc[TT];
            row_dot<F>(W, W.w, W.s, W.b, r, sx, n, acc);
            float a = pick(acc, lane);
            if (GLU) {
                row_dot<F>(U, U.w, U.s, U.b, r, sx, n, acc);
                a = __fmul_rn(silu(a), pick(acc, lane));
            }
            if (lane < n) y[(size_t)(t0 + lane) * ldy + r] = a;
        }
    }
}

/* y[t, r] = W[r] . x[t] (GLU: silu(W[r] . x[t]) * (U[r] . x[t])):
 * grid (up to ceil(rows / warps)), block 32 * warps (mm_warps); a grid with fewer blocks
 * walks the rows in steps of the grid (the lm_head's 248k rows: x staged
 * once a block, not once every 8 rows). */
template <int F, bool GLU>
__device__ void mm_body(const gmat &W, const gmat &U, const float *x, long long ldx, float *y,
                        long long ldy, int T, int g) {
    mm_rows<F, GLU>(W, U, blockIdx.x * mm_warps() + (threadIdx.x >> 5), gridDim.x * mm_warps(), x, ldx, y,
                    ldy, T, g);
}

/* Up to four matrices of one format and width that take the same input,
 * in one launch (q, k and v; a DeltaNet's input projections; the router
 * and the shared expert's gate): blocks first[i] .. first[i + 1] compute
 * matrix i into y[i], each row summed as mm_body sums it. Mirrors
 * gpu_multi (gpu/gpu.h). */
struct gmulti {
    gmat W[4];
    float *y[4];
    long long ldy[4];
    int first[5];
    int n;
};

template <int F>
__device__ void mmm_body(const gmulti &M, const float *x, long long ldx, int T, int g) {
    const int b = blockIdx.x;
    int i = 0;
#pragma unroll
    for (int j = 1; j < 4; j++)
        if (j < M.n && b >= M.first[j]) i = j;
    /* constant indices only: the parameters are read where they are */
    const gmat &W = i == 0 ? M.W[0] : i == 1 ? M.W[1] : i == 2 ? M.W[2] : M.W[3];
    float *y = i == 0 ? M.y[0] : i == 1 ? M.y[1] : i == 2 ? M.y[2] : M.y[3];
    const long long ldy = i == 0 ? M.ldy[0] : i == 1 ? M.ldy[1] : i == 2 ? M.ldy[2] : M.ldy[3];
    const int first = i == 0 ? M.first[0] : i == 1 ? M.first[1] : i == 2 ? M.first[2] : M.first[3];
    mm_rows<F, false>(W, W, (b - first) * mm_warps() + (threadIdx.x >> 5), W.rows, x, ldx, y, ldy, T, g);
}

/* The MoE form: blockIdx.z = active expert a < *nact (expert exps[a]);
 * its pairs are order[start[a] .. start[a + 1]) (pair p = token p / k,
 * slot p % k); input row of pair p: x[p / k] (by_pair 0) or x[p]
 * (by_pair 1); output row: y[p]. GLU as mm_body. An expert of -1 is
 * skipped: the host computes it (gpu/hostmiss.c). */
template <int F, bool GLU>
__device__ void mm_moe_body(const gmat &W, const gmat &U, const int *nact, const int *exps,
                            const int *start, const int *order, int k, int by_pair, const float *x,
                            long long ldx, float *y, long long ldy, int g) {
    extern __shared__ float4 smem4[];
    float *sx = (float *)smem4;
    const int a = blockIdx.z;
    if (a >= *nact) return; /* the whole block */
    const int r = blockIdx.x * mm_warps() + (threadIdx.x >> 5);
    const bool live = r < W.rows;
    const int lane = threadIdx.x & 31;
    const int e = exps[a], p0 = start[a], p1 = start[a + 1];
    if (e < 0) return; /* the whole block: the host computes this expert (gpu/hostmiss.c) */
    const uint8_t *wb = W.w + (size_t)e * W.estride;
    const uint8_t *sb = W.s ? W.s + (size_t)e * W.sstride : nullptr;
    const uint8_t *bb = W.b ? W.b + (size_t)e * W.sstride : nullptr;
    const uint8_t *ub = GLU ? U.w + (size_t)e * U.estride : nullptr;
    const uint8_t *usb = GLU && U.s ? U.s + (size_t)e * U.sstride : nullptr;
    const uint8_t *ubb = GLU && U.b ? U.b + (size_t)e * U.sstride : nullptr;
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
        float v = pick(acc, lane);
        if (GLU) {
            row_dot<F>(U, ub, usb, ubb, r, sx, n, acc);
            v = __fmul_rn(silu(v), pick(acc, lane));
        }
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
    if (e < 0) return; /* the host computes this expert (gpu/hostmiss.c) */
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
        mm_body<F, false>(W, W, x, ldx, y, ldy, T, g);                                           \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        mmg_##NAME(const gmat W, const gmat U, const float *x, long long ldx, float *y,          \
                   long long ldy, int T, int g) {                                                \
        mm_body<F, true>(W, U, x, ldx, y, ldy, T, g);                                            \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                           \
        mmm_##NAME(const gmulti M, const float *x, long long ldx, int T, int g) {                \
        mmm_body<F>(M, x, ldx, T, g);                                                            \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256) mmx_##NAME(                                \
        const gmat W, const int *nact, const int *exps, const int *start, const int *order,      \
        int k, int by_pair, const float *x, long long ldx, float *y, long long ldy, int g) {      \
        mm_moe_body<F, false>(W, W, nact, exps, start, order, k, by_pair, x, ldx, y, ldy, g);    \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256) mmxg_##NAME(                               \
        const gmat W, const gmat U, const int *nact, const int *exps, const int *start,          \
        const int *order, int k, const float *x, long long ldx, float *y, long long ldy, int g) { \
        mm_moe_body<F, true>(W, U, nact, exps, start, order, k, 0, x, ldx, y, ldy, g);           \
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

