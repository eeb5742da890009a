/* The kernel sets (which ones the CPU runs, which one is in force) and
 * the dispatch of mat_matmul, mat_delta_step and mat_attend_heads to the
 * SIMD kernels (kernels_*.c) or the scalar references (ref.c). */
#include "quant/mat.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "edge0.h"
#include "quant/ggml.h"
#include "quant/kernels.h"
#include "util/pool.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- dispatch --------------------------------------------------------------
 * mat_matmul picks the row kernel of the set in force for the matrix (the
 * reference where a set does not handle a shape), prepares the activations
 * once per call in a per-thread scratch buffer that grows to the largest
 * call and then stays (no allocation per token), and splits the output rows
 * across the compute pool. */

static atomic_int g_kernels = E0_KERNELS_AUTO;

#if defined(__x86_64__)
/* F16C from CPUID leaf 1, ECX bit 29: clang does not accept "f16c" in
 * __builtin_cpu_supports, and the fuzz targets build with clang. */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

int e0_kernels_supported(e0_kernels k) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    switch (k) {
    case E0_KERNELS_AUTO:
    case E0_KERNELS_REF:
        return 1;
    case E0_KERNELS_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case E0_KERNELS_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               e0_kernels_supported(E0_KERNELS_AVX2);
    case E0_KERNELS_AVX512_Q8:
    case E0_KERNELS_AVX512_Q16:
    case E0_KERNELS_AVX512_Q24:
    case E0_KERNELS_AVX512_MIXED:
        return __builtin_cpu_supports("avx512vnni") && e0_kernels_supported(E0_KERNELS_AVX512);
    case E0_KERNELS_F32:
    case E0_KERNELS_EXACT:
        return 1;
    }
    return 0;
#else
    return k == E0_KERNELS_AUTO || k == E0_KERNELS_REF || k == E0_KERNELS_F32 ||
           k == E0_KERNELS_EXACT;
#endif
}

static e0_kernels resolve(e0_kernels k) {
    if (k != E0_KERNELS_AUTO && k != E0_KERNELS_EXACT && k != E0_KERNELS_F32) return k;
    if (k == E0_KERNELS_AUTO && e0_kernels_supported(E0_KERNELS_AVX512_MIXED))
        return E0_KERNELS_AVX512_MIXED;
    if (k == E0_KERNELS_EXACT && e0_kernels_supported(E0_KERNELS_AVX512_Q24))
        return E0_KERNELS_AVX512_Q24;
    if (e0_kernels_supported(E0_KERNELS_AVX512)) return E0_KERNELS_AVX512;
    if (e0_kernels_supported(E0_KERNELS_AVX2)) return E0_KERNELS_AVX2;
    return E0_KERNELS_REF;
}

/* The f32-activation set behind k. */
static e0_kernels f32_of(e0_kernels k) {
    return k == E0_KERNELS_AVX512_Q8 || k == E0_KERNELS_AVX512_Q16 || k == E0_KERNELS_AVX512_Q24 ||
                   k == E0_KERNELS_AVX512_MIXED
               ? E0_KERNELS_AVX512
               : k;
}

int e0_set_kernels(e0_kernels k) {
    if (!e0_kernels_supported(k)) return E0_EUNSUPPORTED;
    /* AUTO stays unresolved: the next call resolves it, $E0_KERNELS included */
    atomic_store_explicit(&g_kernels, (int)(k == E0_KERNELS_AUTO ? k : resolve(k)),
                          memory_order_relaxed);
    return 0;
}

int e0_kernels_parse(const char *name, e0_kernels *out) {
    static const struct {
        const char *name;
        e0_kernels k;
    } sets[] = {{"auto", E0_KERNELS_AUTO},
                {"exact", E0_KERNELS_EXACT},
                {"ref", E0_KERNELS_REF},
                {"avx2", E0_KERNELS_AVX2},
                {"avx512", E0_KERNELS_AVX512},
                {"avx512-q8", E0_KERNELS_AVX512_Q8},
                {"avx512-q16", E0_KERNELS_AVX512_Q16},
                {"avx512-q24", E0_KERNELS_AVX512_Q24},
                {"avx512-mixed", E0_KERNELS_AVX512_MIXED},
                {"f32", E0_KERNELS_F32}};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++)
        if (!strcmp(name, sets[i].name)) {
            *out = sets[i].k;
            return 0;
        }
    return E0_EINVAL;
}

/* $E0_KERNELS (a e0_kernels_parse name) picks the set while it is AUTO, to
 * run a whole test suite, benchmark or CLI process under one set; unknown or
 * unsupported names leave AUTO. */
static e0_kernels env_kernels(void) {
    const char *v = getenv("E0_KERNELS");
    e0_kernels k = E0_KERNELS_AUTO;
    if (!v || e0_kernels_parse(v, &k)) return E0_KERNELS_AUTO;
    return e0_kernels_supported(k) ? k : E0_KERNELS_AUTO;
}

e0_kernels mat_kernels(void) {
    e0_kernels k = (e0_kernels)atomic_load_explicit(&g_kernels, memory_order_relaxed);
    if (k == E0_KERNELS_AUTO) {
        k = resolve(env_kernels());
        atomic_store_explicit(&g_kernels, (int)k, memory_order_relaxed);
    }
    return k;
}

const char *e0_kernels_name(void) {
    switch (mat_kernels()) {
    case E0_KERNELS_AUTO:
    case E0_KERNELS_F32:
    case E0_KERNELS_EXACT:
        break;
    case E0_KERNELS_REF:
        return "ref";
    case E0_KERNELS_AVX2:
        return "avx2";
    case E0_KERNELS_AVX512:
        return "avx512";
    case E0_KERNELS_AVX512_Q8:
        return "avx512-q8";
    case E0_KERNELS_AVX512_Q16:
        return "avx512-q16";
    case E0_KERNELS_AVX512_Q24:
        return "avx512-q24";
    case E0_KERNELS_AVX512_MIXED:
        return "avx512-mixed";
    }
    return "?";
}

/* Per-thread scratch: a header holding the capacity, then the buffer. The
 * key's destructor frees it when the thread exits. */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static void scratch_key_make(void) {
    pthread_key_create(&scratch_key, free);
}

#define SCRATCH_HDR 64

static void *scratch(size_t bytes) {
    pthread_once(&scratch_once, scratch_key_make);
    uint8_t *p = pthread_getspecific(scratch_key);
    if (p && *(size_t *)p >= bytes) return p + SCRATCH_HDR;
    uint8_t *n = aligned_alloc(64, (bytes + SCRATCH_HDR + 63) / 64 * 64);
    if (!n) return NULL;
    *(size_t *)n = bytes;
    free(p);
    pthread_setspecific(scratch_key, n);
    return n + SCRATCH_HDR;
}

typedef struct {
    k_rows_fn fn; /* NULL: the reference */
    const e0_mat *m;
    const k_act *a;
    float *y;
    int64_t ldy;
} mm_job;

static void mm_rows(void *ctx, int64_t r0, int64_t r1, int tid) {
    (void)tid;
    const mm_job *j = ctx;
    if (j->fn) {
        j->fn(j->m, j->a, r0, r1, j->y, j->ldy);
    } else {
        e0_mat v = mat_rows(j->m, r0, r1 - r0);
        mat_matmul_ref(&v, j->a->x, j->a->ldx, j->a->T, j->y + r0, j->ldy);
    }
}

/* Below this many multiply-adds a call stays in the caller's thread. */
#define PAR_MIN_MACS (1 << 18)
#define ROW_ALIGN    16

/* Panel activations (k_avx512_prep_qg) of tokens [t0, t1). */
typedef struct {
    const float *x;
    int64_t ldx, cols;
    int group, planes;
    int8_t *xg;
    int64_t ldxg;
    float *xgd, *xgs;
    int64_t ng;
} prep_job;

static void prep_rows(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const prep_job *j = ctx;
    for (int64_t t = t0; t < t1; t++)
        k_avx512_prep_qg(j->x + t * j->ldx, j->cols, j->group, j->planes, j->xg + t * j->ldxg,
                         j->xgd + t * j->ng, j->xgs + t * j->ng);
}

/* Below this many activations a call prepares them in the caller's thread. */
#define PAR_MIN_PREP (1 << 15)

/* Activations of the ggml integer kernels (k_avx512_prep_qk) of tokens [t0, t1). */
typedef struct {
    const float *x;
    int64_t ldx, cols;
    int blk, planes;
    bool order45; /* K_NEED_XK45 */
    k_act *a;
} prep_qk_job;

static void prep_qk_rows(void *ctx, int64_t t0, int64_t t1, int tid) {
    (void)tid;
    const prep_qk_job *j = ctx;
    const k_act *a = j->a;
    for (int64_t t = t0; t < t1; t++) {
        k_avx512_prep_qk(j->x + t * j->ldx, j->cols, j->blk, j->planes,
                         (int8_t *)a->xk + t * a->ldxk, (float *)a->xkd + t * a->ldxkd,
                         (float *)a->xks + t * a->ldxks);
        if (j->order45) k_order_qk45((int8_t *)a->xk + t * a->ldxk, j->cols, j->planes);
    }
}

/* The kernel of set k for m and a call of T tokens. `decode`: the kernel
 * of a decode token's arithmetic, whatever T (mat_matmul_decode): the row
 * kernels of the Q sets and of the ggml integer kernels (their panels
 * quantize activations differently); MIXED's 16-bit panels; the f32 kernels
 * do not depend on T. MIXED computes every other call with 16-bit panels,
 * whatever T (the panel kernels at T >= K_PANEL_MIN_T and the file-layout
 * ones below it compute alike, kernels_avx512.c), but on ggml types. */
static k_rows_fn pick(e0_kernels k, const e0_mat *m, int64_t T, bool decode, int *need,
                      int *lanes) {
    const int64_t panel_t = decode ? INT64_MAX : K_PANEL_MIN_T;
    /* ggml types but Q2_K / Q3_K: integer activations in Q8 (8-bit), Q16
     * (16-bit) and MIXED (24-bit: 16-bit panels flipped a route of
     * the tiny-qwen35moe Q4_K_M test fixture, docs/experiments.md section
     * 23); row kernels below K_PANEL_MIN_T tokens, panels above (MIXED's
     * Q8_0, Q4_1 and IQ4_NL rows: the f32 kernels, as fast as 24-bit ones
     * there, sections 30 and 32). Q24, which EXACT resolves to, keeps their
     * f32 kernels. */
    if (m->type == E0_W_GGML &&
        (k == E0_KERNELS_AVX512_Q8 || k == E0_KERNELS_AVX512_Q16 || k == E0_KERNELS_AVX512_MIXED)) {
        const int planes = k == E0_KERNELS_AVX512_Q8 ? 1 : k == E0_KERNELS_AVX512_Q16 ? 2 : 3;
        const k_rows_fn fn = k_avx512_ggml_int_pick(m, planes, T, panel_t, need);
        if (fn) return fn;
    }
    /* else ggml block types: f32 activations through kernels_ggml_avx512.c, in
     * every AVX-512 set, and in AVX2's where the CPU runs them */
    if (m->type == E0_W_GGML) {
        switch (k) {
        case E0_KERNELS_AVX512_Q8:
        case E0_KERNELS_AVX512_Q16:
        case E0_KERNELS_AVX512_Q24:
        case E0_KERNELS_AVX512_MIXED:
        case E0_KERNELS_AVX512:
            break;
        case E0_KERNELS_AVX2:
            if (!e0_kernels_supported(E0_KERNELS_AVX512)) return NULL;
            break;
        case E0_KERNELS_AUTO:
        case E0_KERNELS_F32:
        case E0_KERNELS_EXACT:
        case E0_KERNELS_REF:
            return NULL;
        }
        *need = K_NEED_X;
        *lanes = 16;
        return k_avx512_ggml_pick(m);
    }
    switch (k) {
    case E0_KERNELS_AVX512_Q8:
        return k_avx512_q8_pick(m, 1, T, panel_t, need, lanes);
    case E0_KERNELS_AVX512_Q16:
        return k_avx512_q8_pick(m, 2, T, panel_t, need, lanes);
    case E0_KERNELS_AVX512_Q24:
        return k_avx512_q8_pick(m, 3, T, panel_t, need, lanes);
    case E0_KERNELS_AVX512_MIXED: /* the 16-bit panel arithmetic at every T, decode included
                                     (mat_p16_wanted; docs/experiments.md section 61) */
        return k_avx512_q8_pick(m, 2, T, 1, need, lanes);
    case E0_KERNELS_AVX512:
        if (m->layout == E0_L_P16) return NULL; /* the f32 kernels read rows: the reference */
        return k_avx512_pick(m, need, lanes);
    case E0_KERNELS_AVX2:
        if (m->layout == E0_L_P16) return NULL;
        return k_avx2_pick(m, need, lanes);
    case E0_KERNELS_AUTO:
    case E0_KERNELS_F32:
    case E0_KERNELS_EXACT:
    case E0_KERNELS_REF:
        break;
    }
    return NULL;
}

static void matmul_with(e0_kernels k, const e0_mat *m, const float *x, int64_t ldx, int64_t T,
                        bool decode, float *y, int64_t ldy) {
    if (m->rows <= 0 || T <= 0) return;
    k_act a = {.T = T, .x = x, .ldx = ldx};
    int need = 0, lanes = 16;
    k_rows_fn fn = pick(k, m, T, decode, &need, &lanes);
    const int gplanes = need & K_NEED_XG3 ? 3 : need & K_NEED_XG2 ? 2 : need & K_NEED_XG ? 1 : 0;
    if (fn && gplanes) { /* panel kernels: int8 digits per group, then scales and sums */
        const int64_t ng = m->cols / m->group, ldxg = m->cols * gplanes;
        float *buf = scratch((size_t)(T * 2 * ng) * sizeof(float) + (size_t)(T * ldxg));
        if (!buf) {
            fn = NULL;
        } else {
            a.xgd = buf;
            a.xgs = buf + T * ng;
            a.ldxgd = ng;
            a.xg = (const int8_t *)(buf + 2 * T * ng);
            a.ldxg = ldxg;
            prep_job pj = {.x = x,
                           .ldx = ldx,
                           .cols = m->cols,
                           .group = (int)m->group,
                           .planes = gplanes,
                           .xg = (int8_t *)(buf + 2 * T * ng),
                           .ldxg = ldxg,
                           .xgd = buf,
                           .xgs = buf + T * ng,
                           .ng = ng};
            if ((double)T * (double)m->cols < PAR_MIN_PREP)
                prep_rows(&pj, 0, T, 0);
            else /* the caller's scratch, filled by the pool */
                pool_for(T, 1, prep_rows, &pj);
        }
    } else if (fn && (need & (K_NEED_XK | K_NEED_XK2 | K_NEED_XK3))) {
        /* ggml integer kernels: int8 planes per block of 256 or 32 columns;
         * scratch: xkd | xks, then xk */
        const int planes = need & K_NEED_XK3 ? 3 : need & K_NEED_XK2 ? 2 : 1;
        const int blk = need & K_NEED_XK32 ? 32 : GGML_QK_K;
        const int64_t nb = m->cols / blk, ns = m->cols / 16;
        float *buf =
            scratch((size_t)(T * (nb + ns)) * sizeof(float) + (size_t)(T * m->cols * planes));
        if (!buf) {
            fn = NULL;
        } else {
            a.xkd = buf;
            a.ldxkd = nb;
            a.xks = buf + T * nb;
            a.ldxks = ns;
            a.xk = (const int8_t *)(buf + T * (nb + ns));
            a.ldxk = m->cols * planes;
            prep_qk_job pj = {.x = x,
                              .ldx = ldx,
                              .cols = m->cols,
                              .blk = blk,
                              .planes = planes,
                              .order45 = need & K_NEED_XK45,
                              .a = &a};
            if ((double)T * (double)m->cols < PAR_MIN_PREP)
                prep_qk_rows(&pj, 0, T, 0);
            else
                pool_for(T, 1, prep_qk_rows, &pj);
        }
    } else if (fn && need != K_NEED_X) {
        /* scratch: xp | xs | xd (floats), then xq (bytes) */
        const int64_t bv = 8 * (int64_t)lanes, nblk = (m->cols + bv - 1) / bv;
        const int64_t ldxp = need & K_NEED_XP ? nblk * bv : 0;
        const int64_t ldxs = need & K_NEED_XS ? (m->cols / m->group + 15) / 16 * 16 : 0;
        const int planes = need & K_NEED_XQ3 ? 3 : need & K_NEED_XQ2 ? 2 : need & K_NEED_XQ ? 1 : 0;
        const int64_t nq = (m->cols + 127) / 128, ldxd = planes ? nq * 16 : 0;
        const int64_t ldxq = nq * 128 * planes, nxb = planes ? nq * 4 : 0;
        const size_t nf = (size_t)(T * (ldxp + ldxs + ldxd) + nxb);
        float *buf = scratch(nf * sizeof(float) + (size_t)(T * ldxq));
        if (!buf) {
            fn = NULL; /* out of memory: the reference needs no scratch */
        } else {
            a.xp = buf;
            a.ldxp = ldxp;
            a.xs = buf + T * ldxp;
            a.ldxs = ldxs;
            a.xd = buf + T * (ldxp + ldxs);
            a.ldxd = ldxd;
            a.xq = (const int8_t *)(buf + nf);
            a.ldxq = ldxq;
            for (int64_t t = 0; t < T; t++) {
                const float *xt = x + t * ldx;
                float *xs = buf + T * ldxp + t * ldxs;
                if (ldxp) k_prep_q4(xt, m->cols, lanes, buf + t * ldxp, nblk);
                if (ldxq) { /* the group sums are those of the quantized x (kernels.h) */
                    float *xb = buf + nf - nxb;
                    k_avx512_prep_q8(xt, m->cols, planes, (int8_t *)(buf + nf) + t * ldxq,
                                     buf + T * (ldxp + ldxs) + t * ldxd, xb, nq);
                    const int64_t ng = m->cols / m->group, per = m->group / 32;
                    for (int64_t g = 0; g < ng; g++) {
                        float sum = 0.0f;
                        for (int64_t i = 0; i < per; i++)
                            sum += xb[g * per + i];
                        xs[g] = sum;
                    }
                    for (int64_t g = ng; g < ldxs; g++)
                        xs[g] = 0.0f;
                } else if (ldxs) {
                    k_prep_xs(xt, m->cols, m->group, xs, ldxs);
                }
            }
        }
    }
    mm_job j = {fn, m, &a, y, ldy};
    if ((double)m->rows * (double)m->cols * (double)T < PAR_MIN_MACS || m->rows < 2 * ROW_ALIGN)
        mm_rows(&j, 0, m->rows, 0);
    else
        pool_for(m->rows, ROW_ALIGN, mm_rows, &j);
}

bool mat_matmul_t_free(const e0_mat *m) {
    return mat_kernels() == E0_KERNELS_AVX512_MIXED && m->type != E0_W_GGML;
}

bool mat_p16_wanted(void) {
    return mat_kernels() == E0_KERNELS_AVX512_MIXED;
}

void mat_matmul(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y, int64_t ldy) {
    matmul_with(mat_kernels(), m, x, ldx, T, false, y, ldy);
}

void mat_matmul_decode(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y,
                       int64_t ldy) {
    matmul_with(mat_kernels(), m, x, ldx, T, true, y, ldy);
}

void mat_matmul_f32(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y,
                    int64_t ldy) {
    matmul_with(f32_of(mat_kernels()), m, x, ldx, T, false, y, ldy);
}

/* ---- Gated DeltaNet step ------------------------------------------------------ */

void mat_delta_step(float *St, const float *k, const float *q, const float *v, float beta,
                    float decay, int Dk, int Dv, float *o) {
    const e0_kernels ks = f32_of(mat_kernels()); /* f32 arithmetic in every set */
    if (ks == E0_KERNELS_AVX512 && Dv % 16 == 0)
        k_avx512_delta_step(St, k, q, v, beta, decay, Dk, Dv, o);
    else if (ks == E0_KERNELS_AVX2 && Dv % 8 == 0)
        k_avx2_delta_step(St, k, q, v, beta, decay, Dk, Dv, o);
    else
        mat_delta_step_ref(St, k, q, v, beta, decay, Dk, Dv, o);
}

/* ---- attention of one head ------------------------------------------------------ */

void mat_attend(const float *q, const float *kc, const float *vc, size_t stride, int n, int hd,
                float scale, float *scores, float *o) {
    mat_attend_heads(q, 0, 1, kc, vc, false, stride, n, hd, scale, scores, o, 0);
}

void mat_attend_heads(const float *q, size_t qstride, int g, const void *kc, const void *vc,
                      bool f16, size_t stride, int n, int hd, float scale, float *scores,
                      float *o, size_t ostride) {
    if (f32_of(mat_kernels()) == E0_KERNELS_AVX512 && hd % 16 == 0) {
        k_avx512_attend_heads(q, qstride, g, kc, vc, f16, stride, n, hd, scale, scores, o,
                              ostride);
        return;
    }
    for (int h = 0; h < g; h++)
        mat_attend_ref_kv(q + (size_t)h * qstride, kc, vc, f16, stride, n, hd, scale, scores,
                   o + (size_t)h * ostride);
}
