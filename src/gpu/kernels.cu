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
    /* the VRAM cache: the experts in pinned host memory (moe_stage's source) */
    const uint8_t *hw, *hs, *hb;
    long long hestride, hsstride;
};


__device__ __forceinline__ float bf16f(uint16_t v) { return __uint_as_float((uint32_t)v << 16); }
__device__ __forceinline__ float f16f(uint16_t v) { return __half2float(__ushort_as_half(v)); }
__device__ __forceinline__ uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
__device__ __forceinline__ float sval(const uint8_t *p, int i, int stype) {
    if (stype == 2) return ((const float *)p)[i];
    const uint16_t v = ld16(p + 2 * i);
    return stype == 0 ? bf16f(v) : f16f(v);
}
/* exp(x) in explicit round-to-nearest operations that the driver's compiler
 * may not fuse or approximate (expf compiles to the hardware's ex2.approx,
 * whose bits no other processor gives): range reduction by ln 2 in two
 * parts (Cody and Waite), a degree-5 minimax polynomial (Cephes' expf
 * coefficients), the power of two put in the exponent. Within 2 ulp of exp
 * on [-87, 88] (the argument is clamped there). The host's replica of the
 * expert products (gpu/replica.c) computes the same operations in the same
 * order, so an expert it computes is the bits the card's would be. */
__device__ __forceinline__ float exp_ieee(float x) {
    x = fminf(fmaxf(x, -87.0f), 88.0f);
    const float n = rintf(__fmul_rn(x, 1.44269504088896341f));
    float r = __fmaf_rn(n, -0.693359375f, x);
    r = __fmaf_rn(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = __fmaf_rn(p, r, 1.3981999507e-3f);
    p = __fmaf_rn(p, r, 8.3334519073e-3f);
    p = __fmaf_rn(p, r, 4.1665795894e-2f);
    p = __fmaf_rn(p, r, 1.6666665459e-1f);
    p = __fmaf_rn(p, r, 5.0000001201e-1f);
    const float y = __fadd_rn(__fmaf_rn(p, __fmul_rn(r, r), r), 1.0f);
    return __fmul_rn(y, __int_as_float(((int)n + 127) << 23));
}
/* silu in the same explicit operations (the experts' SwiGLU: gpu/replica.c) */
__device__ __forceinline__ float silu(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, exp_ieee(-x))); }
__device__ __forceinline__ float sigm(float x) { return 1.0f / (1.0f + expf(-x)); }

__constant__ int8_t k_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                   1,    13,   25,  38,  53,  69,  89,  113};

#include "kernels_mm.cuh"

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

/* The residual add and the norm after it: x[t] += r[t] when r is not
 * null, then y[t] = w * x[t] / rms(x[t]) over n values. The sum is the
 * one add_inplace makes, so the bits are those of the two kernels apart.
 * grid T, block 512. */
extern "C" __global__ void rmsnorm(float *x, const float *r, const float *w, float *y, int n,
                                   float eps) {
    float *xt = x + (size_t)blockIdx.x * n;
    float *yt = y + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    if (r) {
        const float *rt = r + (size_t)blockIdx.x * n;
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const float v = xt[i] + rt[i];
            xt[i] = v;
            ss += v * v;
        }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) ss += xt[i] * xt[i];
    }
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
    if (i < n) g[i] = __fmul_rn(silu(g[i]), u[i]);
}

/* ---- full attention ---------------------------------------------------- */

/* Per token t and head: RMSNorm of the head's hd values (q: heads [0, nh)
 * at q + t * qrows + h * per; k: heads nh.. at k + t * kvd + h * hd), then
 * rotate-half RoPE on the first 2 * half dims at position *posp + t, the
 * angle formed in f32 and its cos / sin in double as the CPU does.
 * grid (T, nh + nkv), block hd (<= 1024). */
extern "C" __global__ void qk_norm_rope(float *q, float *k, const float *qn, const float *kn,
                                        const float *inv_freq, int nh, int hd, int per, int qrows,
                                        int kvd, int half, const int *posp, float eps) {
    extern __shared__ float sh[];
    const int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x, pos0 = *posp;
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

/* kc[pos0 + t] = k[t], vc[pos0 + t] = v[t] (kvd floats each, pos0 = *posp),
 * f32 or f16 cache. grid T, block 256. */
extern "C" __global__ void kv_store(void *kc, void *vc, const float *k, const float *v, int kvd,
                                    const int *posp, int f16) {
    const int t = blockIdx.x, pos0 = *posp;
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

/* Causal attention of query head h of token t (position pos0 + t, pos0 =
 * *posp) over the cache's positions 0..pos0 + t: s_j = scale q.k_j,
 * softmax, o = sum p_j v_j; gated: o *= sigmoid(the head's gate half).
 * ATT_WARPS warps a block, each over positions with a running softmax (its
 * max m, sum l and output acc; lane i holds dimensions i, i + 32, ...), so
 * that the positions' loads overlap and no scores are stored; the warps'
 * (m, l, acc) then merged in warp order. hd <= 32 * ATT_DMAX (the host
 * checks). att_chunk is the block's part over positions [lo, hi): its
 * warps' (m, l) in sm, sl and acc in so; *M gets their max and *L the sum
 * of l weighted to it. */
#define ATT_WARPS 16
#define ATT_DMAX 8
__device__ __forceinline__ void att_chunk(const float *qh, const void *kc, const void *vc, int kvd, int kvh, int hd,
                                          int lo, int hi, float scale, int f16, float *sm, float *sl,
                                          float (*so)[32 * ATT_DMAX], float *M, float *L) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float qv[ATT_DMAX], acc[ATT_DMAX];
#pragma unroll
    for (int d = 0; d < ATT_DMAX; d++) {
        const int i = lane + 32 * d;
        qv[d] = i < hd ? qh[i] : 0.0f;
        acc[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = lo + w; j < hi; j += ATT_WARPS) {
        const size_t base = (size_t)j * kvd + (size_t)kvh * hd;
        float a = 0.0f;
#pragma unroll
        for (int d = 0; d < ATT_DMAX; d++) {
            const int i = lane + 32 * d;
            if (i < hd) a += qv[d] * kvload(kc, base + i, f16);
        }
        a = scale * warp_sum(a);
        const float mn = fmaxf(m, a), c = expf(m - mn), p = expf(a - mn);
        l = l * c + p;
#pragma unroll
        for (int d = 0; d < ATT_DMAX; d++) {
            const int i = lane + 32 * d;
            if (i < hd) acc[d] = acc[d] * c + p * kvload(vc, base + i, f16);
        }
        m = mn;
    }
    if (lane == 0) sm[w] = m, sl[w] = l;
#pragma unroll
    for (int d = 0; d < ATT_DMAX; d++) so[w][lane + 32 * d] = acc[d];
    __syncthreads();
    float mx = -INFINITY; /* a warp with no position has m = -inf, l = 0, acc = 0: it adds 0 */
    for (int k = 0; k < ATT_WARPS; k++) mx = fmaxf(mx, sm[k]);
    float sum = 0.0f;
    for (int k = 0; k < ATT_WARPS; k++) sum += sl[k] * (sm[k] == -INFINITY ? 0.0f : expf(sm[k] - mx));
    *M = mx;
    *L = sum;
}

/* The whole of each (head, token) in one block. grid (nh, T), block 32 * ATT_WARPS. */
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)
    attend_warps(const float *q, const void *kc, const void *vc, float *att, int nh, int nkv, int hd,
                 int per, int qrows, const int *posp, float scale, int gated, int f16) {
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS];
    __shared__ float so[ATT_WARPS][32 * ATT_DMAX];
    const int h = blockIdx.x, t = blockIdx.y, n = *posp + t + 1;
    const int kvh = h / (nh / nkv), kvd = nkv * hd;
    const float *qh = q + (size_t)t * qrows + (size_t)h * per;
    float M, L;
    att_chunk(qh, kc, vc, kvd, kvh, hd, 0, n, scale, f16, sm, sl, so, &M, &L);
    float *o = att + (size_t)t * nh * hd + (size_t)h * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
        for (int k = 0; k < ATT_WARPS; k++) a += so[k][i] * (sm[k] == -INFINITY ? 0.0f : expf(sm[k] - M));
        a /= L;
        if (gated) a *= sigm(qh[hd + i]);
        o[i] = a;
    }
}

/* One decode token's attention split over gridDim.z blocks a head (flash
 * decoding: a head's blocks alone leave most of the card idle): block z
 * takes positions [z C, (z + 1) C), C = ceil(n / gridDim.z), and writes its
 * (M, L, o[hd]) (o weighted to M, not divided) to part[(h * gridDim.z + z)
 * * (hd + 2)]; attend_merge combines them. An empty chunk writes M = -inf,
 * L = 0. grid (nh, 1, S), block 32 * ATT_WARPS. */
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)
    attend_split(const float *q, const void *kc, const void *vc, float *part, int nh, int nkv, int hd,
                 int per, const int *posp, float scale, int f16) {
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS];
    __shared__ float so[ATT_WARPS][32 * ATT_DMAX];
    const int h = blockIdx.x, z = blockIdx.z, S = gridDim.z, n = *posp + 1;
    const int kvh = h / (nh / nkv), kvd = nkv * hd, C = (n + S - 1) / S;
    const int lo = z * C, hi = min(n, lo + C);
    const float *qh = q + (size_t)h * per;
    float M, L;
    att_chunk(qh, kc, vc, kvd, kvh, hd, lo, hi, scale, f16, sm, sl, so, &M, &L);
    float *pz = part + ((size_t)h * S + z) * (size_t)(hd + 2);
    if (threadIdx.x == 0) pz[0] = M, pz[1] = L;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
        for (int k = 0; k < ATT_WARPS; k++) a += so[k][i] * (sm[k] == -INFINITY ? 0.0f : expf(sm[k] - M));
        pz[2 + i] = a;
    }
}

/* attend_split's S parts of each head merged in z order, then divided and
 * gated. grid nh, block 128. */
extern "C" __global__ void attend_merge(const float *part, const float *q, float *att, int hd, int per, int S,
                                        int gated) {
    const int h = blockIdx.x;
    const float *ph = part + (size_t)h * S * (size_t)(hd + 2);
    float M = -INFINITY;
    for (int z = 0; z < S; z++) M = fmaxf(M, ph[(size_t)z * (hd + 2)]);
    float L = 0.0f;
    for (int z = 0; z < S; z++) {
        const float mz = ph[(size_t)z * (hd + 2)];
        L += ph[(size_t)z * (hd + 2) + 1] * (mz == -INFINITY ? 0.0f : expf(mz - M));
    }
    const float *qh = q + (size_t)h * per;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
        for (int z = 0; z < S; z++) {
            const float mz = ph[(size_t)z * (hd + 2)];
            if (mz != -INFINITY) a += ph[(size_t)z * (hd + 2) + 2 + i] * expf(mz - M);
        }
        a /= L;
        if (gated) a *= sigm(qh[hd + i]);
        att[(size_t)h * hd + i] = a;
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
/* One token's top-k of E logits l, by one warp (every lane calls it):
 * ids into id, weights into wt (renormalised over the k when renorm).
 * N > 0: E <= 32 N, each lane's logits held in registers, read once
 * (a decode step's top-8 of 256 re-read them from memory for each pick);
 * N = 0: any E <= 1024, read from memory each time. The same operations in
 * the same order either way, so the same bits. */
template <int N>
__device__ __forceinline__ void route_warp_n(const float *l, int *id, float *wt, int E, int k, int renorm) {
    constexpr int Q = N > 0 ? N : 32; /* a lane's experts lane + 32 q, q < Q, while below E */
    const int lane = threadIdx.x & 31;
    float r[N > 0 ? N : 1];
#pragma unroll
    for (int q = 0; q < N; q++) r[q] = lane + 32 * q < E ? l[lane + 32 * q] : -INFINITY;
#define LOGIT(q) (N > 0 ? r[(q) < N ? (q) : 0] : l[lane + 32 * (q)])
    float mx = -INFINITY;
#pragma unroll
    for (int q = 0; q < Q && lane + 32 * q < E; q++) mx = fmaxf(mx, LOGIT(q));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < Q && lane + 32 * q < E; q++) sum += expf(LOGIT(q) - mx);
    sum = warp_sum(sum);
    unsigned taken = 0; /* bit q: this lane's expert lane + 32 q is picked (E <= 1024) */
    float tot = 0.0f;
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int be = 0x7fffffff;
#pragma unroll
        for (int q = 0; q < Q && lane + 32 * q < E; q++) {
            const int e = lane + 32 * q;
            const float v = LOGIT(q);
            if (!(taken >> q & 1) && (v > bv || (v == bv && e < be))) bv = v, be = e;
        }
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
#undef LOGIT
    if (renorm && lane == 0)
        for (int j = 0; j < k; j++) wt[j] /= tot;
}

__device__ void route_warp(const float *l, int *id, float *wt, int E, int k, int renorm) {
    if (E <= 256) route_warp_n<8>(l, id, wt, E, k, renorm);
    else route_warp_n<0>(l, id, wt, E, k, renorm);
}

extern "C" __global__ void route(const float *logits, int *idx, float *w, int T, int E, int k,
                                 int renorm) {
    const int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (t >= T) return;
    route_warp(logits + (size_t)t * E, idx + (size_t)t * k, w + (size_t)t * k, E, k, renorm);
}

/* A synthetic checkpoint's routing profile (model/moe.c profile_apply, in
 * its order and precision), then the top-k: token after token (each sees
 * the experts the ones before it chose), by one warp. Each token's logits,
 * in units of their standard deviation over the experts, get the layer's
 * popularity bias and, for an expert last chosen d tokens back (its
 * nearest use), recent (d = 1) or window * decay^(d - 2) (d <= W); its
 * choice goes into hist [position][layer][k] (n_layers L). Positions from
 * *posp. grid 1, block 32.
 * An expert gets one bonus, its nearest use's: the warp keeps each
 * expert's last position (the window before the call read at once, each
 * lane a share of its W x k entries, by atomicMax; then each token's k
 * choices), so a token costs a pass over the experts instead of W
 * dependent loads (~60 us a layer at W = 128: session 38). The bonus of
 * each distance is profile_apply's running product, made once. */
#define ROUTE_WINDOW_MAX 4096 /* io/config_route.c WINDOW_MAX */
extern "C" __global__ void route_profile(float *logits, int *idx, float *w, int T, int E, int k, int renorm,
                                         const int *posp, int layer, int L, const float *bias, int *hist,
                                         double recent, double window, double decay, int W) {
    __shared__ int last[1024]; /* E <= 1024: each expert's last position at this layer */
    __shared__ double bon[ROUTE_WINDOW_MAX + 1];
    const int lane = threadIdx.x & 31;
    if (W > ROUTE_WINDOW_MAX) W = ROUTE_WINDOW_MAX;
    if (lane == 0) {
        double b = recent;
        for (int d = 1; d <= W; d++) {
            if (d == 2) b = window;
            else if (d > 2) b *= decay;
            bon[d] = b;
        }
    }
    const int p0 = *posp, D0 = W < p0 ? W : p0;
    for (int e = lane; e < E; e += 32) last[e] = -(1 << 30); /* none within any window */
    __syncwarp();
    for (int i = lane; i < D0 * k; i += 32) {
        const int d = i / k + 1;
        atomicMax(&last[hist[((size_t)(p0 - d) * L + layer) * k + i % k]], p0 - d);
    }
    __syncwarp();
    for (int t = 0; t < T; t++) {
        float *l = logits + (size_t)t * E;
        const int p = p0 + t;
        double m = 0.0, v = 0.0;
        for (int e = lane; e < E; e += 32) m += l[e];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m += __shfl_xor_sync(0xffffffffu, m, o);
        m /= E;
        for (int e = lane; e < E; e += 32) v += ((double)l[e] - m) * ((double)l[e] - m);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        const float sd = (float)sqrt(v / E);
        if (sd > 0.0f) {
            if (bias)
                for (int e = lane; e < E; e += 32) l[e] += sd * bias[(size_t)layer * E + e];
            for (int e = lane; e < E; e += 32) {
                const int d = p - last[e]; /* >= 1: every use recorded is before p */
                if (d <= W) l[e] += sd * (float)bon[d];
            }
        }
        __syncwarp();
        route_warp(l, idx + (size_t)t * k, w + (size_t)t * k, E, k, renorm);
        __syncwarp();
        if (lane < k) {
            const int e = idx[(size_t)t * k + lane];
            hist[((size_t)p * L + layer) * k + lane] = e;
            last[e] = p; /* a row's k experts are distinct: one lane an expert */
        }
        __syncwarp();
    }
}

/* The T * k (token, slot) pairs grouped by expert, in expert order and pair
 * order within one: nact experts exps[a] with pairs order[start[a] ..
 * start[a + 1]); count[e]: expert e's pairs. One block of 1024 threads,
 * thread e owning expert e (E <= 1024): the counts in shared memory (the
 * integer atomics give the same counts in any order), one block-wide scan
 * places the experts, and each expert's thread writes its pairs in order.
 * With tab (a decode step's P = k pairs over the VRAM cache: each expert
 * of the layer's slot, or -1), exps[a] is the expert's slot, or where no
 * slot holds it staging slot stage[a] with slog[a] = e (else -1) for
 * moe_stage to fill, and used[e] counts the pairs each expert served (the
 * host's statistics). With tab and no stage (a whole-layer prefill: every
 * expert of the layer has a slot), exps[a] is the slot and used is
 * counted where given. */
__device__ __forceinline__ int warp_scan_incl(int v) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += u;
    }
    return v;
}

extern "C" __global__ void __launch_bounds__(1024)
    moe_sort(const int *idx, int P, int E, int *count, int *nact, int *exps, int *start, int *order,
             const int *tab, int *used, const int *stage, int *slog) {
    __shared__ int cnt[1024];
    __shared__ int wpairs[32], wact[32];
    const int e = threadIdx.x, lane = e & 31, w = e >> 5;
    cnt[e] = 0;
    if (tab && stage && e < P) slog[e] = -1;
    __syncthreads();
    for (int p = e; p < P; p += blockDim.x) {
        const int x = idx[p];
        if (x >= 0 && x < E) atomicAdd(&cnt[x], 1);
    }
    __syncthreads();
    const int c = e < E ? cnt[e] : 0, on = c > 0;
    /* inclusive scans of the pairs and of the experts present, per warp, then across */
    const int sp = warp_scan_incl(c), sa = warp_scan_incl(on);
    if (lane == 31) wpairs[w] = sp, wact[w] = sa;
    __syncthreads();
    if (w == 0) {
        const int a = warp_scan_incl(wpairs[lane]), b = warp_scan_incl(wact[lane]);
        wpairs[lane] = a;
        wact[lane] = b;
    }
    __syncthreads();
    const int first = sp - c + (w ? wpairs[w - 1] : 0); /* pairs of the experts below e */
    const int rank = sa - on + (w ? wact[w - 1] : 0);   /* experts present below e */
    if (e < E) count[e] = c;
    if (on) {
        if (tab) { /* the VRAM cache's slot of e, or staging slot `rank` for moe_stage to fill */
            const int slot = tab[e];
            exps[rank] = slot >= 0 || !stage ? slot : stage[rank];
            if (slot < 0 && stage) slog[rank] = e;
            if (used) used[e] += c;
        } else {
            exps[rank] = e;
        }
        start[rank] = first;
        int at = first;
        for (int p = 0; p < P && at < first + c; p++)
            if (idx[p] == e) order[at++] = p;
    }
    if (e == 0) {
        *nact = wact[31];
        start[wact[31]] = wpairs[31];
    }
}

/* A decode step's misses brought in by the device (moe_sort's slog: slot
 * a's expert, or -1): copies each from the pinned host pages (G, U, D's
 * host views) into its staging slot exps[a], 16 bytes a thread, four loads
 * in flight, so that the link's reads overlap. grid (chunks, k), block 256. */
__device__ __forceinline__ void stage_part(uint8_t *dst, const uint8_t *src, long long n) {
    const long long n16 = n / 16, step = (long long)gridDim.x * blockDim.x;
    const uint4 *s4 = (const uint4 *)src;
    uint4 *d4 = (uint4 *)dst;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * step < n16; i += 4 * step) {
        const uint4 a = s4[i], b = s4[i + step], c = s4[i + 2 * step], d = s4[i + 3 * step];
        d4[i] = a, d4[i + step] = b, d4[i + 2 * step] = c, d4[i + 3 * step] = d;
    }
    for (; i < n16; i += step) d4[i] = s4[i];
    if (blockIdx.x == 0)
        for (long long j = n16 * 16 + threadIdx.x; j < n; j += blockDim.x) dst[j] = src[j];
}

__device__ __forceinline__ void stage_mat(const gmat &W, int slot, int e) {
    const long long wb = (long long)W.rows * W.row_bytes, sb = (long long)W.rows * W.srow_bytes;
    stage_part((uint8_t *)W.w + (size_t)slot * W.estride, W.hw + (size_t)e * W.hestride, wb);
    if (sb) {
        stage_part((uint8_t *)W.s + (size_t)slot * W.sstride, W.hs + (size_t)e * W.hsstride, sb);
        stage_part((uint8_t *)W.b + (size_t)slot * W.sstride, W.hb + (size_t)e * W.hsstride, sb);
    }
}

extern "C" __global__ void moe_stage(const int *nact, const int *exps, const int *slog, const gmat G,
                                     const gmat U, const gmat D) {
    const int a = blockIdx.y;
    if (a >= *nact) return;
    const int e = slog[a];
    if (e < 0) return;
    const int slot = exps[a];
    stage_mat(G, slot, e);
    stage_mat(U, slot, e);
    stage_mat(D, slot, e);
}

/* The MoE block's output added onto the residual: x[t] += the sum over
 * slots s (in order) of w[t, s] * eo[t k + s], then + sigmoid(shg[t]) *
 * ys[t] when shared (the block's output formed first, then added, as the
 * CPU does). grid (ceil(H / 256), T), block 256. */
extern "C" __global__ void moe_combine(const float *eo, const float *w, const float *shg,
                                       const float *ys, float *x, int H, int k, int shared) {
    const int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= H) return;
    float o = 0.0f;
    for (int s = 0; s < k; s++) o += w[(size_t)t * k + s] * eo[((size_t)t * k + s) * H + i];
    if (shared) o += sigm(shg[t]) * ys[(size_t)t * H + i];
    x[(size_t)t * H + i] += o;
}
