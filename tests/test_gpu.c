/* The GPU backend (src/gpu) against the CPU.
 *  - every weight format's matmul kernel, plain and in the experts' pair
 *    form, against mat_matmul_ref on random data: relative L2 under 1e-5;
 *  - every fixture family and layout and every GGUF fixture file, all
 *    weights resident on the GPU: prefill then decode, logits within 5e-3
 *    relative L2 of the CPU under --kernels exact at every position, the
 *    same argmax at every position; the GPU run repeated kernel by kernel
 *    (no CUDA graph) with the fused products off gives the same bits; the same model with a VRAM expert cache of the least slots (and
 *    a few more) gives the all-resident run's bits while copying misses;
 *  - through the engine (e0_engine_open with a VRAM budget): a budget
 *    that leaves the experts to the cache decodes 64 greedy tokens with
 *    logits bit-identical to the all-resident engine's; a budget under the
 *    least the model needs fails open with that figure.
 * Without an NVIDIA driver or GPU (CI) every test is skipped and says why;
 * E0_REQUIRE_GPU=1 (make test-gpu) turns that into a failure. */
#include "testutil.h"
#include "srvutil.h"

#include "gpu/gmodel.h"
#include "gpu/gpu.h"
#include "gpu/replica.h"
#include "model/model.h"
#include "quant/ggml.h"
#include "quant/mat.h"
#include "stream/bundle.h"
#include "util/file.h"
#include "util/num.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static gpu_dev *g_dev;
static char g_why[E0_ERR_MAX];

static int setup(void **state) {
    (void)state;
    int n;
    if (gpu_count(&n, g_why) == 0 && gpu_open(&g_dev, 0, g_why) == 0) {
        printf("GPU 0: %s, compute capability %d.%d, %d SMs, %.1f GiB, kernels loaded in %.2f s\n",
               g_dev->name, g_dev->cc_major, g_dev->cc_minor, g_dev->sms,
               (double)g_dev->total / 1073741824.0, g_dev->jit_s);
        return 0;
    }
    printf("GPU tests skipped: %s\n", g_why);
    const char *req = getenv("E0_REQUIRE_GPU");
    return req && *req == '1' ? -1 : 0;
}

static int teardown(void **state) {
    (void)state;
    gpu_close(g_dev);
    return 0;
}

#define NEED_GPU()                                        \
    do {                                                  \
        if (!g_dev) {                                     \
            printf("skipped: no GPU (%s)\n", g_why);      \
            skip();                                       \
        }                                                 \
    } while (0)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float rnd_f(void) { return (float)(rnd_u32() % 20001) / 10000.0f - 1.0f; }

/* A random matrix of one format; its bytes in *buf (freed by the caller). */
typedef struct {
    const char *name;
    e0_wtype type;
    uint32_t gtype;
    int bits, group;
} fmt_case;

static const fmt_case CASES[] = {
    {"f32", E0_W_F32, 0, 0, 0},          {"bf16", E0_W_BF16, 0, 0, 0},
    {"f16", E0_W_F16, 0, 0, 0},          {"mlx4 g64", E0_W_QAFF, 0, 4, 64},
    {"mlx4 g32", E0_W_QAFF, 0, 4, 32},   {"mlx8 g64", E0_W_QAFF, 0, 8, 64},
    {"mlx4 g128", E0_W_QAFF, 0, 4, 128}, {"Q4_0", E0_W_GGML, GGML_Q4_0, 0, 0},
    {"Q4_1", E0_W_GGML, GGML_Q4_1, 0, 0}, {"Q5_0", E0_W_GGML, GGML_Q5_0, 0, 0},
    {"Q5_1", E0_W_GGML, GGML_Q5_1, 0, 0}, {"Q8_0", E0_W_GGML, GGML_Q8_0, 0, 0},
    {"Q2_K", E0_W_GGML, GGML_Q2_K, 0, 0}, {"Q3_K", E0_W_GGML, GGML_Q3_K, 0, 0},
    {"Q4_K", E0_W_GGML, GGML_Q4_K, 0, 0}, {"Q5_K", E0_W_GGML, GGML_Q5_K, 0, 0},
    {"Q6_K", E0_W_GGML, GGML_Q6_K, 0, 0}, {"IQ4_NL", E0_W_GGML, GGML_IQ4_NL, 0, 0},
    {"IQ4_XS", E0_W_GGML, GGML_IQ4_XS, 0, 0},
};
enum { NCASES = sizeof CASES / sizeof *CASES };

/* Offsets of a block type's f16 fields (ggml.h's structs): random bytes
 * there could be Inf or NaN, so they get small random values. */
static int half_fields(uint32_t t, int off[2]) {
    switch (t) {
    case GGML_Q4_0: case GGML_Q5_0: case GGML_Q8_0: case GGML_IQ4_NL: case GGML_IQ4_XS:
        off[0] = 0; return 1;
    case GGML_Q4_1: case GGML_Q5_1: case GGML_Q4_K: case GGML_Q5_K:
        off[0] = 0, off[1] = 2; return 2;
    case GGML_Q2_K: off[0] = 80, off[1] = 82; return 2;
    case GGML_Q3_K: off[0] = 108; return 1;
    case GGML_Q6_K: off[0] = 208; return 1;
    default: return 0;
    }
}

static e0_mat make_mat(const fmt_case *c, int64_t rows, int64_t cols, void **buf) {
    e0_mat m = {.type = c->type, .rows = rows, .cols = cols, .bits = c->bits, .group = c->group,
                .gtype = c->gtype, .stype = E0_S_BF16, .layout = E0_L_ROWS};
    size_t wb;
    if (c->type == E0_W_F32) wb = (size_t)(rows * cols) * 4;
    else if (c->type == E0_W_BF16 || c->type == E0_W_F16) wb = (size_t)(rows * cols) * 2;
    else if (c->type == E0_W_QAFF) wb = (size_t)rows * (size_t)(cols * c->bits / 8);
    else wb = (size_t)ggml_row_bytes(c->gtype, (uint64_t)cols) * (size_t)rows;
    const size_t sb = c->type == E0_W_QAFF ? (size_t)(rows * (cols / c->group)) * 2 : 0;
    uint8_t *p = malloc(wb + 2 * sb + 16);
    assert_non_null(p);
    if (c->type == E0_W_F32)
        for (size_t i = 0; i < wb / 4; i++) ((float *)p)[i] = rnd_f();
    else if (c->type == E0_W_BF16)
        for (size_t i = 0; i < wb / 2; i++) ((uint16_t *)p)[i] = e0_f32_to_bf16(rnd_f());
    else if (c->type == E0_W_F16)
        for (size_t i = 0; i < wb / 2; i++) ((uint16_t *)p)[i] = e0_f32_to_f16(rnd_f());
    else
        for (size_t i = 0; i < wb; i++) p[i] = (uint8_t)rnd_u32();
    if (c->type == E0_W_GGML) {
        const ggml_type_info *ti = ggml_info(c->gtype);
        int off[2];
        const int nf = half_fields(c->gtype, off);
        for (size_t b = 0; b < wb / (size_t)ti->size; b++)
            for (int f = 0; f < nf; f++) {
                const uint16_t h = e0_f32_to_f16(rnd_f() * 0.05f);
                memcpy(p + b * (size_t)ti->size + (size_t)off[f], &h, 2);
            }
    }
    if (sb) {
        uint16_t *s = (uint16_t *)(p + wb);
        for (size_t i = 0; i < sb; i++) s[i] = e0_f32_to_bf16(rnd_f() * 0.1f); /* scales, biases */
        m.scales = p + wb;
        m.biases = p + wb + sb;
    }
    m.w = p;
    *buf = p;
    return m;
}

static CUdeviceptr dev_floats(const float *v, size_t n) {
    char err[E0_ERR_MAX];
    CUdeviceptr p;
    if (gpu_alloc(g_dev, &p, n * 4, "test", err) || gpu_put(g_dev, p, v, n * 4, err)) fail_msg("%s", err);
    return p;
}

/* Every format: y = W x for T tokens, and the pair form over 3 experts. */
static void test_mm_formats(void **state) {
    (void)state;
    NEED_GPU();
    char err[E0_ERR_MAX];
    const int64_t rows = 72, cols = 512;
    /* T 1, 3, 9 in the vector form, 70 in the tiled one, then 3 and 9 tiled */
    const int Ts[] = {1, 3, 9, 70, 3, 9};
    for (int ci = 0; ci < NCASES; ci++) {
        const fmt_case *c = &CASES[ci];
        void *bufs[3];
        e0_mat ms[3];
        for (int e = 0; e < 3; e++) ms[e] = make_mat(c, rows, cols, &bufs[e]);
        gpu_mat one, stack;
        const e0_mat *parts[3] = {&ms[0], &ms[1], &ms[2]};
        if (gpu_mat_upload(g_dev, &ms[1], &one, "test", err)) fail_msg("%s: %s", c->name, err);
        if (gpu_mat_upload_stack(g_dev, parts, 3, &stack, "test", err)) fail_msg("%s: %s", c->name, err);
        double worst = 0;
        for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
            const int T = Ts[ti];
            gpu_set_tile_min_t(ti >= 4 ? 0 : 16);
            float *x = malloc((size_t)(T * cols) * 4), *ref = malloc((size_t)(T * rows) * 4),
                  *got = malloc((size_t)(T * rows) * 4);
            for (int64_t i = 0; i < T * cols; i++) x[i] = rnd_f();
            mat_matmul_ref(&ms[1], x, cols, T, ref, rows);
            CUdeviceptr dx = dev_floats(x, (size_t)(T * cols)), dy;
            if (gpu_alloc(g_dev, &dy, (size_t)(T * rows) * 4, "test", err)) fail_msg("%s", err);
            if (gpu_mm(g_dev, &one, dx, cols, dy, rows, T, err) ||
                gpu_get(g_dev, got, dy, (size_t)(T * rows) * 4, err))
                fail_msg("%s: %s", c->name, err);
            const double e1 = tu_rel_l2(got, ref, (size_t)(T * rows));
            worst = e1 > worst ? e1 : worst;
            /* pairs: token t routes to experts t % 3 and 2 - t % 3 (k = 2),
             * grouped by expert as moe_sort does */
            const int k = 2, P = T * k;
            int idx[160], exps[3], start[4], order[160], nact = 0, at = 0;
            for (int t = 0; t < T; t++) idx[t * k] = t % 3, idx[t * k + 1] = 2 - t % 3;
            for (int e = 0; e < 3; e++) {
                int cnt = 0;
                for (int p = 0; p < P; p++) cnt += idx[p] == e;
                if (!cnt) continue;
                exps[nact] = e, start[nact] = at;
                for (int p = 0; p < P; p++)
                    if (idx[p] == e) order[at++] = p;
                nact++;
            }
            start[nact] = at;
            CUdeviceptr dn, de, ds, dor, dp;
            int ints[1] = {nact};
            if (gpu_alloc(g_dev, &dn, 4, "t", err) || gpu_alloc(g_dev, &de, 12, "t", err) ||
                gpu_alloc(g_dev, &ds, 16, "t", err) || gpu_alloc(g_dev, &dor, (size_t)P * 4, "t", err) ||
                gpu_alloc(g_dev, &dp, (size_t)(P * rows) * 4, "t", err) ||
                gpu_put(g_dev, dn, ints, 4, err) || gpu_put(g_dev, de, exps, (size_t)nact * 4, err) ||
                gpu_put(g_dev, ds, start, (size_t)(nact + 1) * 4, err) ||
                gpu_put(g_dev, dor, order, (size_t)P * 4, err))
                fail_msg("%s", err);
            float *pg = malloc((size_t)(P * rows) * 4), *pr = malloc((size_t)rows * 4);
            if (gpu_mmx(g_dev, &stack, 3, dn, de, ds, dor, k, false, dx, cols, dp, rows, T, err) ||
                gpu_get(g_dev, pg, dp, (size_t)(P * rows) * 4, err))
                fail_msg("%s: %s", c->name, err);
            for (int p = 0; p < P; p++) {
                mat_matmul_ref(&ms[idx[p]], x + (size_t)(p / k) * cols, cols, 1, pr, rows);
                const double e2 = tu_rel_l2(pg + (size_t)p * rows, pr, (size_t)rows);
                worst = e2 > worst ? e2 : worst;
            }
            gpu_free(g_dev, dn, 4), gpu_free(g_dev, de, 12), gpu_free(g_dev, ds, 16);
            gpu_free(g_dev, dor, (size_t)P * 4), gpu_free(g_dev, dp, (size_t)(P * rows) * 4);
            gpu_free(g_dev, dx, (size_t)(T * cols) * 4), gpu_free(g_dev, dy, (size_t)(T * rows) * 4);
            free(x), free(ref), free(got), free(pg), free(pr);
        }
        gpu_set_tile_min_t(-1);
        printf("  %-10s worst relative L2 %.2e\n", c->name, worst);
        assert_true(worst < 1e-5);
        gpu_mat_free(g_dev, &one, 1);
        gpu_mat_free(g_dev, &stack, 3);
        for (int e = 0; e < 3; e++) free(bufs[e]);
    }
}

/* The fused forms give the separate kernels' bits: up to four matrices in
 * one launch (gpu_mm_multi), gate and up with the SwiGLU (gpu_mm_glu, and
 * over a MoE call's pairs gpu_mmx_glu), each against the same call with
 * fusion off. */
static void fetch_eq(CUdeviceptr a, CUdeviceptr b, size_t n, const char *what, const char *fmt) {
    char err[E0_ERR_MAX];
    float *x = malloc(n * 4), *y = malloc(n * 4);
    if (gpu_get(g_dev, x, a, n * 4, err) || gpu_get(g_dev, y, b, n * 4, err)) fail_msg("%s", err);
    if (memcmp(x, y, n * 4)) fail_msg("%s %s: the fused form differs from the separate kernels", fmt, what);
    free(x), free(y);
}

static void test_mm_fused(void **state) {
    (void)state;
    NEED_GPU();
    char err[E0_ERR_MAX];
    const int64_t rows = 72, cols = 512, T = 3, k = 2, P = T * k;
    for (int ci = 0; ci < NCASES; ci++) {
        const fmt_case *c = &CASES[ci];
        void *bufs[3];
        e0_mat ms[3];
        gpu_mat one[3], st[2];
        for (int e = 0; e < 3; e++) ms[e] = make_mat(c, rows, cols, &bufs[e]);
        for (int e = 0; e < 3; e++)
            if (gpu_mat_upload(g_dev, &ms[e], &one[e], "test", err)) fail_msg("%s: %s", c->name, err);
        const e0_mat *pa[3] = {&ms[0], &ms[1], &ms[2]}, *pb[3] = {&ms[2], &ms[0], &ms[1]};
        if (gpu_mat_upload_stack(g_dev, pa, 3, &st[0], "test", err) ||
            gpu_mat_upload_stack(g_dev, pb, 3, &st[1], "test", err))
            fail_msg("%s: %s", c->name, err);
        float x[3 * 512];
        for (int i = 0; i < T * cols; i++) x[i] = rnd_f();
        CUdeviceptr dx = dev_floats(x, (size_t)(T * cols)), out[2][4];
        const size_t n = (size_t)(P * rows);
        for (int f = 0; f < 2; f++)
            for (int i = 0; i < 4; i++)
                if (gpu_alloc(g_dev, &out[f][i], n * 4, "test", err)) fail_msg("%s", err);
        /* pairs: token t to experts t % 3 and 2 - t % 3, grouped by expert */
        int exps[3] = {0, 1, 2}, start[4] = {0, 2, 4, 6}, order[6] = {0, 5, 2, 3, 1, 4}, na = 3;
        CUdeviceptr dn = dev_floats((const float *)&na, 1), de = dev_floats((const float *)exps, 3);
        CUdeviceptr ds = dev_floats((const float *)start, 4), dor = dev_floats((const float *)order, 6);
        for (int f = 0; f < 2; f++) {
            g_dev->fuse = f == 0;
            const gpu_mat *W[3] = {&one[0], &one[1], &one[2]};
            const CUdeviceptr ys[3] = {out[f][0], out[f][1], out[f][2]};
            const int64_t ld[3] = {rows, rows, rows};
            if (gpu_mm_multi(g_dev, 3, W, dx, cols, ys, ld, (int)T, err)) fail_msg("%s: %s", c->name, err);
            if (gpu_mm_glu(g_dev, &one[0], &one[1], dx, cols, out[f][3], out[f][2], (int)T, err))
                fail_msg("%s: %s", c->name, err);
        }
        fetch_eq(out[0][0], out[1][0], (size_t)(T * rows), "grouped q", c->name);
        fetch_eq(out[0][1], out[1][1], (size_t)(T * rows), "grouped k", c->name);
        fetch_eq(out[0][3], out[1][3], (size_t)(T * rows), "gate-up", c->name);
        for (int f = 0; f < 2; f++) {
            g_dev->fuse = f == 0;
            if (gpu_mmx_glu(g_dev, &st[0], &st[1], 3, dn, de, ds, dor, (int)k, dx, cols, out[f][0], out[f][1],
                            (int)T, err))
                fail_msg("%s: %s", c->name, err);
        }
        fetch_eq(out[0][0], out[1][0], n, "experts' gate-up", c->name);
        g_dev->fuse = true;
        for (int f = 0; f < 2; f++)
            for (int i = 0; i < 4; i++) gpu_free(g_dev, out[f][i], n * 4);
        gpu_free(g_dev, dx, (size_t)(T * cols) * 4), gpu_free(g_dev, dn, 4), gpu_free(g_dev, de, 12);
        gpu_free(g_dev, ds, 16), gpu_free(g_dev, dor, 24);
        for (int e = 0; e < 3; e++) gpu_mat_free(g_dev, &one[e], 1), free(bufs[e]);
        gpu_mat_free(g_dev, &st[0], 3), gpu_mat_free(g_dev, &st[1], 3);
    }
    printf("  %d formats: grouped, gate-up and experts' gate-up products bit-identical to the separate kernels\n",
           NCASES);
}

/* The replica on the host alone (no card needed; runs in CI): its exp
 * within 2 ulp of exp over the range the SwiGLU sees, silu beside it; every
 * format's products within 1e-5 relative L2 of mat_matmul_ref (the sums'
 * order differs, nothing else), and its fast form the scalar form's bits. */
static float ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4), memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return fabsf((float)((int64_t)ia - (int64_t)ib));
}

static void test_replica_host(void **state) {
    (void)state;
    float worst_ulp = 0;
    for (int i = 0; i <= 200000; i++) {
        const float x = -87.0f + 175.0f * (float)i / 200000.0f;
        const float u = ulps(replica_exp(x), (float)exp((double)x));
        worst_ulp = u > worst_ulp ? u : worst_ulp;
    }
    printf("  exp: worst %.0f ulp over [-87, 88]\n", worst_ulp);
    assert_true(worst_ulp <= 2);
    assert_true(fabsf(replica_silu(3.0f) - 3.0f / (1.0f + expf(-3.0f))) < 1e-6f);
    assert_true(replica_silu(-200.0f) <= 0 && replica_silu(-200.0f) > -1e-30f);
    assert_true(isnan(replica_silu(NAN)));
    char err[E0_ERR_MAX];
    const int64_t rows = 24, cols = 2560;
    float *x = malloc((size_t)cols * 4), ref[24], a[24], b[24];
    for (int64_t i = 0; i < cols; i++) x[i] = rnd_f();
    for (int ci = 0; ci < NCASES; ci++) {
        const fmt_case *c = &CASES[ci];
        void *buf;
        const e0_mat m = make_mat(c, rows, cols, &buf);
        rmat r;
        if (rmat_of(&m, &r, err)) fail_msg("%s: %s", c->name, err);
        mat_matmul_ref(&m, x, cols, 1, ref, rows);
        replica_force_scalar(true);
        replica_mv(&r, x, 0, (int32_t)rows, a);
        replica_force_scalar(false);
        replica_mv(&r, x, 0, (int32_t)rows, b);
        const double e = tu_rel_l2(a, ref, (size_t)rows);
        printf("  %-10s relative L2 %.2e against mat_matmul_ref\n", c->name, e);
        assert_true(e < 1e-5);
        assert_memory_equal(a, b, sizeof a);
        /* the SwiGLU rows (this matrix as gate and up): the two forms agree, each row silu(g) * u */
        replica_force_scalar(true);
        replica_glu(&r, &r, x, 0, (int32_t)rows, a);
        replica_force_scalar(false);
        replica_glu(&r, &r, x, 0, (int32_t)rows, b);
        assert_memory_equal(a, b, sizeof a);
        for (int64_t i = 0; i < rows; i++) {
            const float want = replica_silu(ref[i]) * ref[i];
            assert_true(fabsf(a[i] - want) <= 1e-4f * (1.0f + fabsf(want)));
        }
        free(buf);
    }
    free(x);
}

/* The host's replica of the expert products (gpu/replica.h) gives the
 * card's bits: every format, the experts' down product over a MoE call's
 * pairs (gpu_mmx, by pair) and their gate-up with the SwiGLU
 * (gpu_mmx_glu), at a width whose lanes take 2 and 3 chunks each. */
static void test_replica(void **state) {
    (void)state;
    NEED_GPU();
    char err[E0_ERR_MAX];
    const int64_t rows = 40, cols = 2560, T = 3, k = 2, P = T * k;
    int mismatched = 0;
    for (int ci = 0; ci < NCASES; ci++) {
        const fmt_case *c = &CASES[ci];
        void *bufs[6];
        e0_mat ms[6];
        for (int e = 0; e < 6; e++) ms[e] = make_mat(c, rows, cols, &bufs[e]);
        gpu_mat st[2];
        const e0_mat *pg[3] = {&ms[0], &ms[1], &ms[2]}, *pu[3] = {&ms[3], &ms[4], &ms[5]};
        if (gpu_mat_upload_stack(g_dev, pg, 3, &st[0], "test", err) ||
            gpu_mat_upload_stack(g_dev, pu, 3, &st[1], "test", err))
            fail_msg("%s: %s", c->name, err);
        float *x = malloc((size_t)(P * cols) * 4), *got = malloc((size_t)(P * rows) * 4),
              *want = malloc((size_t)rows * 4);
        /* wide inputs: the SwiGLU's exp sees large and small arguments */
        for (int64_t i = 0; i < P * cols; i++) x[i] = rnd_f() * (i % 7 == 0 ? 8.0f : 1.0f);
        CUdeviceptr dx = dev_floats(x, (size_t)(P * cols)), dg, du;
        /* pairs: token t to experts t % 3 and 2 - t % 3, grouped by expert */
        int exps[3] = {0, 1, 2}, start[4] = {0, 2, 4, 6}, order[6] = {0, 5, 2, 3, 1, 4}, na = 3;
        CUdeviceptr dn = dev_floats((const float *)&na, 1), de = dev_floats((const float *)exps, 3);
        CUdeviceptr ds = dev_floats((const float *)start, 4), dor = dev_floats((const float *)order, 6);
        if (gpu_alloc(g_dev, &dg, (size_t)(P * rows) * 4, "test", err) ||
            gpu_alloc(g_dev, &du, (size_t)(P * rows) * 4, "test", err))
            fail_msg("%s", err);
        for (int glu = 0; glu < 2; glu++) {
            if (glu ? gpu_mmx_glu(g_dev, &st[0], &st[1], 3, dn, de, ds, dor, (int)k, dx, cols, dg, du, (int)T, err)
                    : gpu_mmx(g_dev, &st[0], 3, dn, de, ds, dor, (int)k, true, dx, cols, dg, rows, (int)T, err))
                fail_msg("%s: %s", c->name, err);
            if (gpu_get(g_dev, got, dg, (size_t)(P * rows) * 4, err)) fail_msg("%s", err);
            for (int scalar = 0; scalar < 2; scalar++) {
                replica_force_scalar(scalar);
                for (int p = 0; p < P; p++) {
                    int ex = 0; /* the expert pair p went to */
                    for (int a = 0; a < 3; a++)
                        for (int q = start[a]; q < start[a + 1]; q++)
                            if (order[q] == p) ex = exps[a];
                    rmat G, U;
                    if (rmat_of(&ms[ex], &G, err) || rmat_of(&ms[3 + ex], &U, err)) fail_msg("%s", err);
                    const float *xp = x + (size_t)(glu ? p / k : p) * (size_t)cols;
                    if (glu) replica_glu(&G, &U, xp, 0, (int32_t)rows, want);
                    else replica_mv(&G, xp, 0, (int32_t)rows, want);
                    if (memcmp(want, got + (size_t)p * (size_t)rows, (size_t)rows * 4)) {
                        int r = 0;
                        while (want[r] == got[(size_t)p * (size_t)rows + (size_t)r]) r++;
                        printf("  %-10s %s %s: pair %d row %d: host %.9g, card %.9g\n", c->name,
                               glu ? "gate-up" : "down", scalar ? "scalar" : "fast", p, r, want[r],
                               got[(size_t)p * (size_t)rows + (size_t)r]);
                        mismatched++;
                        break;
                    }
                }
            }
            replica_force_scalar(false);
        }
        gpu_free(g_dev, dx, (size_t)(P * cols) * 4), gpu_free(g_dev, dg, (size_t)(P * rows) * 4);
        gpu_free(g_dev, du, (size_t)(P * rows) * 4), gpu_free(g_dev, dn, 4), gpu_free(g_dev, de, 12);
        gpu_free(g_dev, ds, 16), gpu_free(g_dev, dor, 24);
        gpu_mat_free(g_dev, &st[0], 3), gpu_mat_free(g_dev, &st[1], 3);
        for (int e = 0; e < 6; e++) free(bufs[e]);
        free(x), free(got), free(want);
    }
    if (!mismatched)
        printf("  %d formats: the host's replica of the expert products bit-identical to the card's\n", NCASES);
    assert_int_equal(mismatched, 0);
}

/* ---- whole models ------------------------------------------------------- */

static const char *const MODELS[][2] = {
    {"qwen3moe", "hf"},        {"qwen3moe", "hf-fused"},  {"qwen3moe", "mlx"},
    {"qwen3next", "hf"},       {"qwen3next", "hf-fused"}, {"qwen3next", "mlx"},
    {"qwen35moe", "hf"},       {"qwen35moe", "hf-fused"}, {"qwen35moe", "mlx"},
    {"qwen35moe", "mlx-fused"},
    {"gguf/qwen3moe", "model-Q8_0.gguf"},       {"gguf/qwen3moe", "model-Q4_0.gguf"},
    {"gguf/qwen3next", "model-Q8_0.gguf"},      {"gguf/qwen3next", "model-Q4_0.gguf"},
    {"gguf/qwen35moe", "model-Q8_0.gguf"},      {"gguf/qwen35moe", "model-Q4_0.gguf"},
    {"gguf/tiny-qwen35moe", "model-Q4_K_M.gguf"}, {"gguf/tiny-qwen35moe", "model-Q6_K.gguf"},
    {"gguf/tiny-qwen35moe", "model-IQ4_XS.gguf"}, {"gguf/tiny-qwen3moe", "model-Q4_K_M.gguf"},
};
enum { NMODELS = sizeof MODELS / sizeof *MODELS, NIDS = 40, NPRE = 24 };

/* Prefill NPRE ids, decode the rest one at a time: every position's logits. */
static float *cpu_logits(e0_engine *e, const int32_t *ids, int V) {
    char err[E0_ERR_MAX];
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = NIDS;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    float *lg = malloc((size_t)NIDS * (size_t)V * 4);
    if (e0_session_eval(s, ids, NPRE, E0_LOGITS_ALL, lg, err)) fail_msg("%s", err);
    for (int i = NPRE; i < NIDS; i++)
        if (e0_session_eval(s, ids + i, 1, E0_LOGITS_ALL, lg + (size_t)i * V, err)) fail_msg("%s", err);
    e0_session_free(s);
    return lg;
}

static float *gpu_logits(gpu_model *g, const int32_t *ids, int V) {
    char err[E0_ERR_MAX];
    gpu_sess *s;
    if (gpu_sess_new(&s, g, NIDS, NPRE, false, err)) fail_msg("%s", err);
    float *lg = malloc((size_t)NIDS * (size_t)V * 4);
    if (gpu_sess_eval(s, 0, ids, NPRE, true, lg, err)) fail_msg("%s", err);
    for (int i = NPRE; i < NIDS; i++)
        if (gpu_sess_eval(s, i, ids + i, 1, true, lg + (size_t)i * V, err)) fail_msg("%s", err);
    gpu_sess_free(s);
    return lg;
}

/* The fixture's path, or NULL after saying it is not here (a device
 * machine gets the fixtures in parts). */
static const char *fixture_here(const char *dir, const char *file) {
    const char *path = tu_checkpoint(dir, file);
    if (!access(path, R_OK)) return path;
    printf("  %-20s %-18s not here (%s), not run\n", dir, file, path);
    return NULL;
}

/* The worst relative L2 of NIDS positions' logits got against ref, and in
 * *bad the positions whose argmax differs. */
static double against(const float *got, const float *ref, int V, int *bad) {
    double worst = 0;
    *bad = 0;
    for (int i = 0; i < NIDS; i++) {
        const double r = tu_rel_l2(got + (size_t)i * V, ref + (size_t)i * V, (size_t)V);
        worst = r > worst ? r : worst;
        *bad += tu_argmax(got + (size_t)i * V, (size_t)V) != tu_argmax(ref + (size_t)i * V, (size_t)V);
    }
    return worst;
}

/* Bytes of a host expert cache that holds three layers' experts and n
 * more (hcache_new's least and a few: the fixtures' four layers do not
 * fit, so that it evicts). */
static uint64_t host_cache_bytes(const e0_model *m, int n) {
    char err[E0_ERR_MAX];
    size_t bb = 0;
    for (int li = 0; li < m->cfg.n_layers; li++) /* a bundle's size varies with where its ranges fall */
        for (int e = 0; m->layers[li].moe && m->layers[li].experts && e < m->cfg.n_experts; e++) {
            xb_plan p;
            if (xb_plan_expert(m, li, e, XB_ORDER_MATH, &p, err)) fail_msg("%s", err);
            if (p.bytes > bb) bb = p.bytes;
        }
    return (uint64_t)bb * (uint64_t)(3 * m->cfg.n_experts + n);
}

/* The model again with a VRAM expert cache of the least slots and of a few
 * more: the all-resident run's logits (want) bit for bit, misses copied
 * (from the mapping, from pinned pages, staged by the device, or read into
 * the host's expert cache: its least and a few bundles, so that it evicts). */
static void check_cached(e0_engine *e, const int32_t *ids, int V, const float *want, const char *name) {
    char err[E0_ERR_MAX];
    gpu_sizes z;
    if (gpu_model_sizes(&e->model, &z, err)) fail_msg("%s", err);
    if (!z.min_slots) return; /* no MoE layer */
    /* the least slots and a few more, copied in; then staged by the device; then room for two
     * layers' experts, so that the prefill brings layers in whole on the copy stream (from
     * pageable pages, then from pinned ones with the decode staged); then both through the host's
     * expert cache */
    enum { RUNS = 8 };
    const int ns = e->model.cfg.n_layers * e->top_k; /* staging slots */
    const int slots[RUNS] = {z.min_slots, z.min_slots + 5, z.min_slots + ns + 5, 2 * z.min_slots + 5,
                             2 * z.min_slots + ns + 5, z.min_slots + 5, 2 * z.min_slots + 5, z.min_slots + 5};
    const bool whole = (int64_t)NPRE * e->top_k >= 2 * (int64_t)e->model.cfg.n_experts;
    const bool whole_was = g_dev->whole;
    g_dev->whole = true;
    for (int run = 0; run < RUNS; run++) {
        gpu_model *gc;
        const uint64_t held0 = g_dev->held;
        if (run == 0) setenv("E0_GPU_PREFETCH", "0", 1); /* the first without the next layer's guesses */
        if (gpu_model_new(&gc, g_dev, &e->model, e->top_k, slots[run], err)) fail_msg("%s: %s", name, err);
        unsetenv("E0_GPU_PREFETCH");
        bool staged = false;
        char why[E0_ERR_MAX] = "";
        if (run == 2 || run == 4) {
            if (vcache_pin_host(gc, err) || vcache_stage_on(gc, e->top_k, &staged, why, err)) fail_msg("%s: %s", name, err);
            if (!staged) printf("  %-39s (misses not staged by the device: %s)\n", "", why);
        }
        const bool host = run >= 5; /* the last without exclusive caching */
        if (run == 7) setenv("E0_GPU_HCACHE_EXCL", "0", 1);
        if (host && hcache_new(gc, host_cache_bytes(&e->model, 3), err)) fail_msg("%s: %s", name, err);
        unsetenv("E0_GPU_HCACHE_EXCL");
        float *got = gpu_logits(gc, ids, V);
        const bool same = memcmp(got, want, (size_t)NIDS * (size_t)V * 4) == 0;
        gpu_hstats h;
        hcache_stats(gc, &h);
        printf("  %-39s VRAM cache of %d slots%s: %llu hits, %llu misses, %.1f MiB copied in, %.1f MiB staged by the "
               "device, %llu layers brought in whole, %s\n", "", gc->vc->n_slots,
               staged ? ", misses staged by the device" : "", (unsigned long long)gc->vc->hits,
               (unsigned long long)gc->vc->misses, (double)gc->vc->bytes_in / 1048576.0,
               (double)gc->vc->bytes_staged / 1048576.0, (unsigned long long)gc->vc->whole_layers,
               same ? "bit-identical" : "DIFFERS");
        if (gc->vc->prefetched)
            printf("  %-39s   the next layer's guesses: %llu copied ahead, %llu of them routed to\n", "",
                   (unsigned long long)gc->vc->prefetched, (unsigned long long)gc->vc->prefetch_used);
        if (host)
            printf("  %-39s   through a host expert cache of %d bundles%s: %llu hits, %llu misses, %.1f MiB read, %llu "
                   "given up by the VRAM kept\n", "", h.slots, h.exclusive ? " (exclusive)" : "", (unsigned long long)h.hits,
                   (unsigned long long)h.misses, (double)h.bytes_read / 1048576.0, (unsigned long long)h.kept);
        assert_true(same);
        assert_true(gc->vc->misses > 0);
        if (staged) assert_true(gc->vc->bytes_staged > 0);
        /* decode steps off the device-staged path guess the next layer's experts, except run 0's */
        assert_int_equal(gc->vc->prefetch, run != 0);
        if (run == 0 || staged) assert_int_equal(gc->vc->prefetched, 0);
        /* every VRAM miss and every guessed expert copied ahead went through the host's cache, and it
         * read what it lacked */
        if (host) assert_true(h.hits + h.misses == gc->vc->misses + gc->vc->prefetched && h.misses > 0 && h.bytes_read > 0);
        if (host) assert_int_equal(h.exclusive, run != 7);
        if (host && run != 7) assert_true(h.kept > 0); /* slots the VRAM gave up went back */
        /* the prefill's layers come in whole exactly where the LRU list (the slots but the staging
         * ones) holds two layers' experts */
        const int listed = gc->vc->n_slots - (staged ? ns : 0);
        const bool expect = whole && listed >= 2 * e->model.cfg.n_experts;
        assert_int_equal(gc->vc->whole_layers > 0, expect);
        gpu_model_free(gc);
        assert_int_equal(g_dev->held, held0);
        free(got);
    }
    g_dev->whole = whole_was;
}

static void test_models(void **state) {
    (void)state;
    NEED_GPU();
    assert_int_equal(e0_set_kernels(E0_KERNELS_EXACT), 0);
    int ran = 0;
    for (int mi = 0; mi < NMODELS; mi++) {
        char err[E0_ERR_MAX];
        const char *path = fixture_here(MODELS[mi][0], MODELS[mi][1]);
        if (!path) continue;
        ran++;
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.io = E0_IO_MMAP; /* the file layout (no panels): what the GPU reads */
        o.n_threads = 2;
        e0_engine *e;
        if (e0_engine_open(&e, path, &o, err)) fail_msg("%s: %s", path, err);
        const int V = e->model.cfg.vocab;
        int32_t ids[NIDS];
        for (int i = 0; i < NIDS; i++) ids[i] = (int32_t)(rnd_u32() % (uint32_t)V);
        float *ref = cpu_logits(e, ids, V);
        gpu_model *g;
        const uint64_t held0 = g_dev->held;
        if (gpu_model_new(&g, g_dev, &e->model, e->top_k, 0, err)) fail_msg("%s: %s", path, err);
        /* the rerun launches kernel by kernel, unfused: the same bits */
        const bool graphs = gpu_graphs_on(g_dev), fuse = g_dev->fuse;
        float *got = gpu_logits(g, ids, V);
        gpu_set_graphs(g_dev, false);
        g_dev->fuse = false;
        float *again = gpu_logits(g, ids, V);
        gpu_set_graphs(g_dev, graphs);
        g_dev->fuse = fuse;
        int bad_argmax;
        const double worst = against(got, ref, V, &bad_argmax);
        const bool same = memcmp(got, again, (size_t)NIDS * (size_t)V * 4) == 0;
        printf("  %-20s %-18s worst relative L2 %.2e, argmax differs at %d of %d, rerun (no graph, unfused) %s, %.1f MiB on the GPU\n",
               MODELS[mi][0], MODELS[mi][1], worst, bad_argmax, NIDS, same ? "bit-identical" : "DIFFERS",
               (double)g->bytes / 1048576.0);
        assert_true(worst < 5e-3);
        assert_int_equal(bad_argmax, 0);
        assert_true(same);
        /* decode attention in one block a head (attend_warps; the default splits a head over about
         * one block an SM, attend_split and attend_merge): against the CPU, and graph against kernel
         * by kernel */
        const int aw = g_dev->attn_split;
        g_dev->attn_split = 1;
        float *w1 = gpu_logits(g, ids, V);
        gpu_set_graphs(g_dev, false);
        float *w2 = gpu_logits(g, ids, V);
        gpu_set_graphs(g_dev, graphs);
        g_dev->attn_split = aw;
        int wbad;
        const double wworst = against(w1, ref, V, &wbad);
        const bool wsame = memcmp(w1, w2, (size_t)NIDS * (size_t)V * 4) == 0;
        printf("  %-39s one block a head: worst relative L2 %.2e, argmax differs at %d of %d, no graph %s\n", "", wworst,
               wbad, NIDS, wsame ? "bit-identical" : "DIFFERS");
        assert_true(wworst < 5e-3);
        assert_int_equal(wbad, 0);
        assert_true(wsame);
        free(w1), free(w2);
        check_cached(e, ids, V, got, MODELS[mi][1]);
        gpu_model_free(g);
        assert_int_equal(g_dev->held, held0);
        free(ref), free(got), free(again);
        e0_engine_free(e);
    }
    e0_set_kernels(E0_KERNELS_AUTO);
    assert_true(ran > 0);
}

/* n greedy tokens after the prompt ids through the engine's session (on
 * its GPU): the tokens, and every step's logits in lg. */
static void greedy(e0_engine *e, const int32_t *prompt, int np, int n, int32_t *toks, float *lg, int V) {
    char err[E0_ERR_MAX];
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = 128;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    if (e0_session_eval(s, prompt, (size_t)np, E0_LOGITS_LAST, lg, err)) fail_msg("%s", err);
    for (int i = 0; i < n; i++) {
        toks[i] = (int32_t)tu_argmax(lg + (size_t)i * V, (size_t)V);
        if (i + 1 < n && e0_session_eval(s, toks + i, 1, E0_LOGITS_LAST, lg + (size_t)(i + 1) * V, err))
            fail_msg("%s", err);
    }
    e0_session_free(s);
}

static void test_budgets(void **state) {
    (void)state;
    NEED_GPU();
    static const char *const files[][2] = {{"qwen35moe", "mlx"}, {"gguf/tiny-qwen35moe", "model-Q4_K_M.gguf"},
                                           {"qwen3next", "hf-fused"}, {"gguf/qwen3moe", "model-Q4_0.gguf"}};
    enum { NP = 8, NG = 64 };
    int ran = 0;
    for (size_t fi = 0; fi < sizeof files / sizeof *files; fi++) {
        char err[E0_ERR_MAX];
        const char *path = fixture_here(files[fi][0], files[fi][1]);
        if (!path) continue;
        ran++;
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.gpu = 0;
        o.n_ctx = 128;
        o.n_threads = 2;
        e0_engine *all;
        if (e0_engine_open(&all, path, &o, err)) fail_msg("%s: %s", path, err);
        e0_plan p;
        if (e0_engine_plan(path, &o, &p, err)) fail_msg("%s: %s", path, err);
        assert_int_equal(p.gpu_slots, 0);
        gpu_sizes z;
        if (gpu_model_sizes(&all->model, &z, err)) fail_msg("%s", err);
        const int V = all->model.cfg.vocab;
        int32_t prompt[NP], ta[NG], tc[NG];
        for (int i = 0; i < NP; i++) prompt[i] = (int32_t)(rnd_u32() % (uint32_t)V);
        float *la = malloc((size_t)NG * V * 4), *lc = malloc((size_t)NG * V * 4);
        greedy(all, prompt, NP, NG, ta, la, V);
        const int ns = all->model.cfg.n_layers * all->top_k; /* staging slots */
        e0_engine_free(all);

        const uint64_t least = z.dense + p.gpu_session_bytes + (uint64_t)z.min_slots * z.slot;
        /* misses staged by the device where they can be, then copied in, then read into the host's
         * expert cache, then copied in with up to 3 a MoE call computed by the host, then with that
         * number timed while decoding (it changes every few tokens while measuring) */
        for (int copied = 0; copied < 5; copied++) {
            /* the staged run: room for a staging slot per layer and routed expert beside */
            const int extra = copied ? 3 : ns + 3;
            o.vram_budget = GPU_CTX_ALLOWANCE + least + (uint64_t)extra * z.slot;
            setenv("E0_GPU_STAGE", copied ? "0" : "1", 1);
            if (copied == 2) setenv("E0_GPU_PIN", "0", 1), setenv("E0_GPU_HCACHE", "1000000000", 1);
            if (copied == 3) unsetenv("E0_GPU_PIN"), unsetenv("E0_GPU_HCACHE"), setenv("E0_GPU_HOST_MISS", "3", 1);
            if (copied == 4) setenv("E0_GPU_HOST_MISS", "auto", 1);
            /* each eviction policy of the VRAM cache in one of the runs (test_models': LRU too) */
            static const int policy[5] = {E0_CACHE_RECENT, E0_CACHE_LRU, E0_CACHE_RECENT, E0_CACHE_ROUTER,
                                          E0_CACHE_LFU};
            o.layer.cache_policy = policy[copied];
            e0_engine *cached;
            if (e0_engine_open(&cached, path, &o, err)) fail_msg("%s: %s", path, err);
            e0_plan pc;
            if (e0_engine_plan(path, &o, &pc, err)) fail_msg("%s: %s", path, err);
            assert_int_equal(pc.gpu_slots, z.min_slots + extra);
            greedy(cached, prompt, NP, NG, tc, lc, V);
            e0_stats st;
            e0_engine_stats(cached, &st);
            const bool same = memcmp(ta, tc, sizeof ta) == 0 && memcmp(la, lc, (size_t)NG * V * 4) == 0;
            const char *note = e0_engine_gpu_note(cached);
            printf("  %-20s %-18s %d greedy tokens, VRAM cache of %d slots (%s), misses %s (%llu hits, %llu "
                   "misses, %.1f MiB over PCIe): %s\n", files[fi][0], files[fi][1], NG, st.vram_slots,
                   e0_cache_policy_name(o.layer.cache_policy),
                   strstr(note, "misses staged by the device") ? "staged by the device"
                   : copied == 2                        ? "read into the host expert cache"
                   : copied >= 3                        ? "computed by the host or copied in"
                                                        : "copied in", (unsigned long long)st.vram_hits,
                   (unsigned long long)st.vram_misses, (double)st.pcie_bytes / 1048576.0,
                   same ? "tokens and logits bit-identical to all resident" : "DIFFER");
            assert_true(same);
            assert_int_equal(st.vram_slots, z.min_slots + extra);
            /* GGUF stacks lie evenly strided: their decode steps are staged by the device */
            if (!copied && strstr(files[fi][1], ".gguf")) assert_non_null(strstr(note, "misses staged by the device"));
            assert_true(st.vram_misses > 0);
            uint64_t lh = 0, lm = 0; /* --stats' per-layer figures are the VRAM cache's */
            for (int l = 0; l < cached->model.cfg.n_layers; l++) {
                uint64_t h, m;
                e0_engine_layer_stats(cached, l, &h, &m);
                lh += h, lm += m;
            }
            assert_int_equal(lh, st.vram_hits);
            assert_int_equal(lm, st.vram_misses);
            if (copied == 2) {
                if (!strstr(note, "host expert cache")) fail_msg("%s: %s", path, note);
                assert_true(st.host_cache_slots > 0 && st.host_cache_misses > 0 && st.disk_bytes > 0);
                /* the host cache also serves the next layer's guesses copied ahead */
                assert_true(st.host_cache_hits + st.host_cache_misses == st.vram_misses + st.vram_prefetched);
            }
            if (copied >= 3) {
                if (!strstr(note, "computed by the host")) fail_msg("%s: %s", path, note);
                assert_int_equal(st.vram_host_timed, copied == 4);
                printf("  %-20s %-18s of the misses, %llu computed by the host\n", "", "",
                       (unsigned long long)st.vram_host_experts);
                assert_true(st.vram_host_experts > 0 && st.vram_host_experts <= st.vram_misses);
            }
            e0_engine_free(cached);
        }
        unsetenv("E0_GPU_STAGE"), unsetenv("E0_GPU_PIN"), unsetenv("E0_GPU_HCACHE"), unsetenv("E0_GPU_HOST_MISS");

        o.vram_budget = GPU_CTX_ALLOWANCE + least - 1; /* one byte short: a named GPU fails open and says what it needs */
        e0_engine *none = NULL;
        const int rc = e0_engine_open(&none, path, &o, err);
        printf("  %-20s %-18s one byte under: %s\n", "", "", err);
        assert_int_not_equal(rc, 0);
        assert_null(none);
        assert_non_null(strstr(err, "needs at least"));
        free(la), free(lc);
    }
    assert_true(ran > 0);
}

/* A routing profile (synth --route-profile; model/moe.c profile_apply) on
 * the GPU (kernels.cu route_profile): 32 greedy tokens of tiny-e256 with
 * the qwen36 profile against the CPU's exact kernels, the same tokens and
 * logits within 5e-3 relative L2 at every step. */
static void test_route_profile(void **state) {
    (void)state;
    NEED_GPU();
    enum { NP = 8, NG = 32 };
    char err[E0_ERR_MAX];
    char *root = tu_tmpdir(), *dst = e0_path_join(root, "q36");
    e0_synth_opts so;
    e0_synth_opts_default(&so);
    so.no_sync = 1;
    so.route_profile = "qwen36";
    if (e0_synth_write_opts(e0_synth_find("tiny-e256"), dst, &so, err)) fail_msg("%s: %s", dst, err);
    assert_int_equal(e0_set_kernels(E0_KERNELS_EXACT), 0);
    int32_t tok[2][NG], prompt[NP];
    float *lg[2];
    int V = 0;
    for (int g = 0; g < 2; g++) { /* the CPU, then the GPU */
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.gpu = g ? 0 : E0_GPU_OFF;
        o.n_ctx = 128;
        o.n_threads = 2;
        e0_engine *e;
        if (e0_engine_open(&e, dst, &o, err)) fail_msg("%s: %s", dst, err);
        V = e->model.cfg.vocab;
        if (!g)
            for (int i = 0; i < NP; i++) prompt[i] = (int32_t)(rnd_u32() % (uint32_t)V);
        lg[g] = malloc((size_t)NG * V * 4);
        greedy(e, prompt, NP, NG, tok[g], lg[g], V);
        e0_engine_free(e);
    }
    double worst = 0;
    for (int i = 0; i < NG; i++) {
        const double r = tu_rel_l2(lg[1] + (size_t)i * V, lg[0] + (size_t)i * V, (size_t)V);
        worst = r > worst ? r : worst;
    }
    const bool same = memcmp(tok[0], tok[1], sizeof tok[0]) == 0;
    printf("  tiny-e256 qwen36 profile: %d greedy tokens %s, worst relative L2 %.2e against the CPU\n", NG,
           same ? "the same" : "DIFFER", worst);
    assert_true(same);
    assert_true(worst < 5e-3);
    free(lg[0]), free(lg[1]);
    tu_rmtree(root);
    free(root), free(dst);
}

/* MTP drafts run on the CPU only (issue 41): on a GPU engine --mtp on is an
 * error saying so, and auto leaves the block unread. */
static void test_mtp_cpu_only(void **state) {
    (void)state;
    NEED_GPU();
    char err[E0_ERR_MAX];
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    o.gpu = 0;
    o.n_ctx = 128;
    o.mtp = E0_MTP_ON;
    e0_engine *e = NULL;
    assert_int_equal(e0_engine_open(&e, "tests/data/mtp/model-Q8_0.gguf", &o, err), E0_EUNSUPPORTED);
    printf("  --mtp on --gpu 0: %s\n", err);
    assert_non_null(strstr(err, "CPU-only"));
    o.mtp = E0_MTP_AUTO;
    if (e0_engine_open(&e, "tests/data/mtp/model-Q8_0.gguf", &o, err)) fail_msg("%s", err);
    e0_model_info info;
    e0_engine_info(e, &info);
    assert_int_equal(info.mtp_on, 0);
    assert_int_equal(e0_engine_gpu(e), 0);
    e0_engine_free(e);
}

/* The CPU's options where the engine computes on a GPU are said at open,
 * not dropped: --path, --kernels and LayerOptions other than the expert
 * cache's policy and top_k (test_cli's test_sizes_and_threads: the
 * converse). */
static void test_cpu_options_on_gpu(void **state) {
    (void)state;
    NEED_GPU();
    char *dir = tu_tmpdir();
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s logits %s --ids 1,2 --out %s/o.st --gpu 0 --path hot --kernels avx2 --opt staged_n=4 "
             "--opt cache_policy=lru > %s/out.txt 2>&1",
             tu_bin(), tu_shared("fixtures/qwen35moe/mlx"), dir, dir);
    assert_int_equal(tu_run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/out.txt", dir);
    char *out = su_slurp(cmd);
    printf("%s", out);
    const char *w = strstr(out, "warning: --path, --kernels, --opt staged_n=4 are for the CPU, and the engine computes on GPU 0");
    if (!w) fail_msg("no warning naming --path, --kernels and --opt staged_n=4 in:\n%s", out);
    const char *eol = strchr(w, '\n');
    const char *cp = strstr(w, "cache_policy");
    assert_true(!cp || (eol && cp > eol)); /* the VRAM cache reads its policy: not in the list */
    free(out);
    tu_rmtree(dir);
    free(dir);
}

/* Batched decode on the GPU (E0_GPU_BATCH=1): three sessions of different
 * lengths decoded together through e0_session_eval_batch, all resident
 * and through a VRAM cache of the least slots, give each session's logits
 * bit for bit as that session decoding alone. */
static void test_batch_decode(void **state) {
    (void)state;
    NEED_GPU();
    static const char *const files[][2] = {{"qwen35moe", "mlx"}, {"gguf/tiny-qwen35moe", "model-Q4_K_M.gguf"},
                                           {"gguf/qwen3moe", "model-Q4_0.gguf"}};
    enum { NS = 3, NG = 12 };
    static const int NP[NS] = {5, 9, 2};
    int ran = 0;
    setenv("E0_GPU_BATCH", "1", 1);
    for (size_t fi = 0; fi < sizeof files / sizeof *files; fi++) {
        char err[E0_ERR_MAX];
        const char *path = fixture_here(files[fi][0], files[fi][1]);
        if (!path) continue;
        ran++;
        for (int cached = 0; cached < 2; cached++) {
            e0_engine_opts o;
            e0_engine_opts_default(&o);
            o.gpu = 0;
            o.n_ctx = 64;
            o.n_threads = 2;
            o.n_seqs = NS;
            e0_engine *e;
            if (e0_engine_open(&e, path, &o, err)) fail_msg("%s: %s", path, err);
            if (cached) { /* the same engine's model again behind a VRAM cache of the least slots */
                gpu_sizes z;
                if (gpu_model_sizes(&e->model, &z, err)) fail_msg("%s", err);
                e0_engine_free(e);
                e0_plan p;
                if (e0_engine_plan(path, &o, &p, err)) fail_msg("%s: %s", path, err);
                o.vram_budget = GPU_CTX_ALLOWANCE + z.dense + (uint64_t)NS * p.gpu_session_bytes +
                                (uint64_t)(z.min_slots + 2) * z.slot;
                if (e0_engine_open(&e, path, &o, err)) fail_msg("%s: %s", path, err);
            }
            const int V = e->model.cfg.vocab;
            e0_session_opts so;
            e0_session_opts_default(&so);
            so.n_ctx = 64;
            e0_session *bs[NS], *one;
            int32_t prompt[NS][9], next[NS];
            float *lb = malloc((size_t)NS * V * 4), *la = malloc((size_t)V * 4);
            float *want = malloc((size_t)NS * NG * V * 4);
            /* alone: each session's prompt, then NG greedy steps, every step's logits kept */
            for (int i = 0; i < NS; i++) {
                for (int j = 0; j < NP[i]; j++) prompt[i][j] = (int32_t)(rnd_u32() % (uint32_t)V);
                if (e0_session_new(e, &so, &one, err)) fail_msg("%s", err);
                if (e0_session_eval(one, prompt[i], (size_t)NP[i], E0_LOGITS_LAST, la, err)) fail_msg("%s", err);
                for (int g = 0; g < NG; g++) {
                    int32_t id = (int32_t)tu_argmax(la, (size_t)V);
                    if (e0_session_eval(one, &id, 1, E0_LOGITS_LAST, la, err)) fail_msg("%s", err);
                    memcpy(want + ((size_t)i * NG + (size_t)g) * V, la, (size_t)V * 4);
                }
                e0_session_free(one);
            }
            /* together: the prompts one by one, then NG batched steps */
            for (int i = 0; i < NS; i++) {
                if (e0_session_new(e, &so, &bs[i], err)) fail_msg("%s", err);
                if (e0_session_eval(bs[i], prompt[i], (size_t)NP[i], E0_LOGITS_LAST, lb + (size_t)i * V, err))
                    fail_msg("%s", err);
                next[i] = (int32_t)tu_argmax(lb + (size_t)i * V, (size_t)V);
            }
            int differ = 0;
            for (int g = 0; g < NG; g++) {
                if (e0_session_eval_batch(bs, next, NS, lb, err)) fail_msg("%s: %s", path, err);
                for (int i = 0; i < NS; i++) {
                    differ += memcmp(lb + (size_t)i * V, want + ((size_t)i * NG + (size_t)g) * V, (size_t)V * 4) != 0;
                    next[i] = (int32_t)tu_argmax(lb + (size_t)i * V, (size_t)V);
                }
            }
            e0_stats st;
            e0_engine_stats(e, &st);
            printf("  %-20s %-18s %d sessions x %d batched steps%s: %s\n", files[fi][0], files[fi][1], NS, NG,
                   cached ? ", VRAM cache" : ", all resident",
                   differ ? "DIFFER from each decoding alone" : "bit-identical to each decoding alone");
            assert_int_equal(differ, 0);
            if (cached) assert_true(st.vram_slots > 0);
            for (int i = 0; i < NS; i++) e0_session_free(bs[i]);
            free(lb), free(la), free(want);
            e0_engine_free(e);
        }
    }
    unsetenv("E0_GPU_BATCH");
    assert_true(ran > 0);
}

/* Issue 38's clean failures: a device error in the middle of an
 * evaluation ($E0_GPU_FAIL_LAUNCH's injected one, in a prefill's kernels and
 * in a decode step's graph, all resident and over the VRAM cache) fails that
 * evaluation with a message that says so; after the session's reset the
 * same ids give the bits of a session that never failed. */
static void test_device_error(void **state) {
    (void)state;
    NEED_GPU();
    const char *path = fixture_here("gguf/tiny-qwen35moe", "model-Q4_K_M.gguf");
    if (!path) path = fixture_here("qwen35moe", "mlx");
    if (!path) skip();
    enum { NP = 8, NG = 12 };
    char err[E0_ERR_MAX];
    uint64_t cached_budget = 0; /* the VRAM cache's least slots and 3 more, from the all-resident engine */
    for (int cached = 0; cached < 2; cached++) {
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.gpu = 0;
        o.n_ctx = 128;
        o.n_threads = 2;
        o.vram_budget = cached_budget;
        e0_engine *e;
        if (e0_engine_open(&e, path, &o, err)) fail_msg("%s: %s", path, err);
        if (!cached) {
            gpu_sizes z;
            if (gpu_model_sizes(&e->model, &z, err)) fail_msg("%s", err);
            cached_budget =
                GPU_CTX_ALLOWANCE + z.dense + e->gpu_session_bytes + (uint64_t)(z.min_slots + 3) * z.slot;
        } else {
            assert_true(e->gmodel->vc != NULL); /* the cached engine has a VRAM cache */
        }
        const int V = e->model.cfg.vocab;
        int32_t prompt[NP], want[NG], got[NG];
        for (int i = 0; i < NP; i++) prompt[i] = (int32_t)(rnd_u32() % (uint32_t)V);
        float *lw = malloc((size_t)NG * V * 4), *lg = malloc((size_t)NG * V * 4);
        greedy(e, prompt, NP, NG, want, lw, V);
        e0_session_opts so;
        e0_session_opts_default(&so);
        so.n_ctx = 128;
        e0_session *s;
        if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
        /* in the prefill's kernels, then in the third decode step */
        for (int where = 0; where < 2; where++) {
            e->gpu->fail_at = where ? 0 : 7;
            int rc = e0_session_eval(s, prompt, NP, E0_LOGITS_LAST, lg, err);
            for (int i = 0; !rc && i + 1 < NG; i++) {
                got[i] = (int32_t)tu_argmax(lg + (size_t)i * V, (size_t)V);
                if (where && i == 2) e->gpu->fail_at = 1;
                rc = e0_session_eval(s, got + i, 1, E0_LOGITS_LAST, lg + (size_t)(i + 1) * V, err);
            }
            printf("  %-20s %s, injected in the %s: %s\n", cached ? "VRAM cache" : "all resident", path,
                   where ? "third decode step" : "prefill", rc ? err : "NOT FAILED");
            assert_int_not_equal(rc, 0);
            assert_non_null(strstr(err, "injected device error"));
            assert_int_equal(e->gpu->fail_at, 0); /* it fired once */
            e0_session_reset(s);
            /* the same ids again: the bits of a session that never failed */
            if (e0_session_eval(s, prompt, NP, E0_LOGITS_LAST, lg, err)) fail_msg("%s", err);
            for (int i = 0; i < NG; i++) {
                got[i] = (int32_t)tu_argmax(lg + (size_t)i * V, (size_t)V);
                if (i + 1 < NG && e0_session_eval(s, got + i, 1, E0_LOGITS_LAST, lg + (size_t)(i + 1) * V, err))
                    fail_msg("%s", err);
            }
            const bool same = !memcmp(got, want, sizeof want) && !memcmp(lg, lw, (size_t)NG * V * 4);
            printf("  %-20s then reset and again: %s\n", "", same ? "bit-identical to a session that never failed" : "DIFFERS");
            assert_true(same);
            e0_session_reset(s);
        }
        e0_session_free(s);
        e0_engine_free(e);
        free(lw), free(lg);
    }
}

/* `serve` on the GPU keeps serving after a device error on one request:
 * the injected error fails the first request with a server error that
 * says so, and the next request is answered. */
static void test_serve_device_error(void **state) {
    (void)state;
    NEED_GPU();
    char *dir = tu_tmpdir();
    const char *model = su_model(dir);
    setenv("E0_GPU_FAIL_LAUNCH", "5", 1);
    su_server srv;
    su_start(&srv, dir, model, "serve", "--gpu 0 --parallel 1");
    unsetenv("E0_GPU_FAIL_LAUNCH");
    const char *body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"max_tokens\":8}";
    char *r1 = NULL, *r2 = NULL;
    const int st1 = su_http(srv.port, dir, "POST", "/v1/chat/completions", body, "", &r1);
    const int st2 = su_http(srv.port, dir, "POST", "/v1/chat/completions", body, "", &r2);
    printf("  first request: %d %.200s\n  second request: %d %.200s\n", st1, r1 ? r1 : "", st2, r2 ? r2 : "");
    assert_true(st1 >= 500);
    assert_non_null(strstr(r1, "injected device error"));
    assert_int_equal(st2, 200);
    cJSON *j = su_json(r2, "the second answer");
    assert_true(su_num(j, "usage.completion_tokens") > 0);
    cJSON_Delete(j);
    su_stop(&srv);
    free(r1), free(r2);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mm_formats),
        cmocka_unit_test(test_mm_fused),
        cmocka_unit_test(test_replica_host),
        cmocka_unit_test(test_replica),
        cmocka_unit_test(test_models),
        cmocka_unit_test(test_budgets),
        cmocka_unit_test(test_batch_decode),
        cmocka_unit_test(test_route_profile),
        cmocka_unit_test(test_mtp_cpu_only),
        cmocka_unit_test(test_cpu_options_on_gpu),
        cmocka_unit_test(test_device_error),
        cmocka_unit_test(test_serve_device_error),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
