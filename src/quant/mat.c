#include "quant/mat.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "edge0.h"
#include "quant/ggml.h"
#include "quant/kernels.h"
#include "util/num.h"
#include "util/pool.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static size_t stype_size(e0_stype s) {
    return s == E0_S_F32 ? 4 : 2;
}

size_t mat_row_bytes(const e0_mat *m) {
    switch (m->type) {
    case E0_W_F32:
        return (size_t)m->cols * 4;
    case E0_W_BF16:
    case E0_W_F16:
        return (size_t)m->cols * 2;
    case E0_W_QAFF:
        return (size_t)m->cols * (size_t)m->bits / 8 +
               (m->layout == E0_L_P16 ? 2 * (size_t)(m->cols / m->group) * stype_size(m->stype) : 0);
    case E0_W_GGML:
        return (size_t)ggml_row_bytes(m->gtype, (uint64_t)m->cols);
    }
    return 0;
}

size_t mat_srow_bytes(const e0_mat *m) {
    return m->type == E0_W_QAFF && m->layout == E0_L_ROWS
               ? (size_t)(m->cols / m->group) * stype_size(m->stype)
               : 0;
}

uint64_t mat_bytes(const e0_mat *m) {
    return (uint64_t)m->rows * (mat_row_bytes(m) + 2 * mat_srow_bytes(m));
}

e0_mat mat_rows(const e0_mat *m, int64_t r0, int64_t n) {
    e0_mat v = *m;
    v.rows = n;
    v.w = (const uint8_t *)m->w + (size_t)r0 * mat_row_bytes(m);
    if (m->type == E0_W_QAFF && m->layout == E0_L_P16) {
        assert(r0 % 16 == 0); /* views start on a panel */
    } else if (m->type == E0_W_QAFF) {
        v.scales = (const uint8_t *)m->scales + (size_t)r0 * mat_srow_bytes(m);
        v.biases = (const uint8_t *)m->biases + (size_t)r0 * mat_srow_bytes(m);
    }
    return v;
}

static float sval(e0_stype t, const void *p, size_t i) {
    switch (t) {
    case E0_S_BF16:
        return e0_bf16_to_f32(e0_ld16(p, i));
    case E0_S_F16:
        return e0_f16_to_f32(e0_ld16(p, i));
    case E0_S_F32:
        return e0_ldf32(p, i);
    }
    return 0;
}

/* ---- the 16-row panel layout (mat.h) --------------------------------------- */

bool mat_p16_ok(const e0_mat *m) {
    return m->type == E0_W_QAFF && m->layout == E0_L_ROWS && m->bits == 4 &&
           (m->group == 32 || m->group == 64 || m->group == 128) && m->cols % m->group == 0 &&
           m->cols <= K_PANEL_MAX_COLS && m->rows > 0 && m->rows % 16 == 0 && (m->stype == E0_S_BF16 || m->stype == E0_S_F16);
}

/* Bytes of one group of a panel: its words, then 16 scales and 16 biases. */
static size_t p16_group_bytes(const e0_mat *m) {
    return (size_t)(m->group / 8) * 64 + 64;
}

static void p16_dequant(const e0_mat *m, int64_t r, int64_t c0, int64_t n, float *out) {
    const uint8_t *pan = (const uint8_t *)m->w + (size_t)(r / 16) * 16 * mat_row_bytes(m);
    const size_t gb = p16_group_bytes(m), wpg = (size_t)(m->group / 8);
    const size_t i = (size_t)(r % 16);
    for (int64_t k = 0; k < n; k++) {
        const size_t c = (size_t)(c0 + k), g = c / (size_t)m->group;
        const uint8_t *gp = pan + g * gb;
        const uint32_t word = e0_ld32(gp, (c % (size_t)m->group) / 8 * 16 + i);
        const uint32_t q = (word >> (4 * (c % 8))) & 15u;
        out[k] = (float)q * sval(m->stype, gp + wpg * 64, i) + sval(m->stype, gp + wpg * 64 + 32, i);
    }
}

typedef struct {
    const e0_mat *m; /* the file layout, its parts in tmp */
    uint8_t *dst;
} p16_job;

static void p16_pack(void *ctx, int64_t p0, int64_t p1, int tid) {
    (void)tid;
    const p16_job *j = ctx;
    const e0_mat *m = j->m;
    const int64_t ng = m->cols / m->group, wpg = m->group / 8, wpr = m->cols / 8;
    const size_t ss = stype_size(m->stype), gb = p16_group_bytes(m);
    for (int64_t p = p0; p < p1; p++) {
        uint8_t *o = j->dst + (size_t)p * (size_t)ng * gb; /* 16 * mat_row_bytes of the packed m */
        for (int64_t g = 0; g < ng; g++, o += gb) {
            for (int64_t k = 0; k < wpg; k++)
                for (int64_t i = 0; i < 16; i++)
                    memcpy(o + (k * 16 + i) * 4,
                           (const uint32_t *)m->w + (p * 16 + i) * wpr + g * wpg + k, 4);
            for (int64_t i = 0; i < 16; i++) {
                const size_t at = (size_t)((p * 16 + i) * ng + g) * ss;
                memcpy(o + (size_t)wpg * 64 + (size_t)i * ss, (const uint8_t *)m->scales + at, ss);
                memcpy(o + (size_t)wpg * 64 + 32 + (size_t)i * ss, (const uint8_t *)m->biases + at,
                       ss);
            }
        }
    }
}

int mat_repack_p16(e0_mat *m, void *tmp) {
    if (!mat_p16_ok(m)) return E0_EINVAL;
    const size_t wb = (size_t)m->rows * mat_row_bytes(m), sb = (size_t)m->rows * mat_srow_bytes(m);
    /* the three parts sorted by address must abut */
    const uint8_t *at[3] = {m->w, m->scales, m->biases};
    size_t len[3] = {wb, sb, sb};
    for (int a = 0; a < 3; a++)
        for (int b = a + 1; b < 3; b++)
            if (at[b] < at[a]) {
                const uint8_t *t = at[a];
                const size_t l = len[a];
                at[a] = at[b], len[a] = len[b];
                at[b] = t, len[b] = l;
            }
    if (at[0] + len[0] != at[1] || at[1] + len[1] != at[2]) return E0_EINVAL;
    uint8_t *base = (uint8_t *)at[0];
    memcpy(tmp, base, wb + 2 * sb);
    e0_mat src = *m;
    src.w = (uint8_t *)tmp + ((const uint8_t *)m->w - base);
    src.scales = (uint8_t *)tmp + ((const uint8_t *)m->scales - base);
    src.biases = (uint8_t *)tmp + ((const uint8_t *)m->biases - base);
    p16_job j = {&src, base};
    pool_for(m->rows / 16, 1, p16_pack, &j);
    m->w = base;
    m->scales = m->biases = NULL;
    m->layout = E0_L_P16;
    return 0;
}

void mat_dequant(const e0_mat *m, int64_t r, int64_t c0, int64_t n, float *out) {
    const uint8_t *row = (const uint8_t *)m->w + (size_t)r * mat_row_bytes(m);
    switch (m->type) {
    case E0_W_F32:
        memcpy(out, row + (size_t)c0 * 4, (size_t)n * 4);
        return;
    case E0_W_BF16:
        for (int64_t i = 0; i < n; i++)
            out[i] = e0_bf16_to_f32(e0_ld16(row, (size_t)(c0 + i)));
        return;
    case E0_W_F16:
        for (int64_t i = 0; i < n; i++)
            out[i] = e0_f16_to_f32(e0_ld16(row, (size_t)(c0 + i)));
        return;
    case E0_W_QAFF: {
        if (m->layout == E0_L_P16) {
            p16_dequant(m, r, c0, n, out);
            return;
        }
        const size_t gpr = (size_t)(m->cols / m->group);
        const unsigned bits = (unsigned)m->bits, mask = (1u << bits) - 1;
        for (int64_t i = 0; i < n; i++) {
            uint64_t c = (uint64_t)(c0 + i), bit = c * bits;
            /* a value may straddle two words when 32 % bits != 0 (3, 5, 6 bits) */
            uint64_t lo = e0_ld32(row, bit / 32);
            if (bit % 32 + bits > 32) lo |= (uint64_t)e0_ld32(row, bit / 32 + 1) << 32;
            uint32_t q = (uint32_t)(lo >> (bit % 32)) & mask;
            size_t g = (size_t)r * gpr + c / (uint64_t)m->group;
            out[i] = (float)q * sval(m->stype, m->scales, g) + sval(m->stype, m->biases, g);
        }
        return;
    }
    case E0_W_GGML: {
        /* block by block through a buffer of one block (256 values at most) */
        const ggml_type_info *ti = ggml_info(m->gtype);
        const int64_t bk = ti->blck;
        float tmp[GGML_QK_K];
        for (int64_t c = c0; c < c0 + n;) {
            const int64_t b = c / bk, off = c - b * bk;
            const int64_t k = bk - off < c0 + n - c ? bk - off : c0 + n - c;
            ggml_dequant(m->gtype, row + (size_t)b * (size_t)ti->size, tmp, 1);
            memcpy(out + (c - c0), tmp + off, (size_t)k * sizeof *tmp);
            c += k;
        }
        return;
    }
    }
}

#define CHUNK 512

void mat_matmul_ref(const e0_mat *m, const float *x, int64_t ldx, int64_t T, float *y,
                    int64_t ldy) {
    float w[CHUNK];
    for (int64_t r = 0; r < m->rows; r++) {
        for (int64_t t = 0; t < T; t++)
            y[t * ldy + r] = 0.0f;
        for (int64_t c0 = 0; c0 < m->cols; c0 += CHUNK) {
            int64_t n = m->cols - c0 < CHUNK ? m->cols - c0 : CHUNK;
            mat_dequant(m, r, c0, n, w);
            for (int64_t t = 0; t < T; t++) {
                const float *xt = x + t * ldx + c0;
                float acc = 0.0f;
                for (int64_t i = 0; i < n; i++)
                    acc += w[i] * xt[i];
                y[t * ldy + r] += acc;
            }
        }
    }
}

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

int mat_kernels_supported(e0_kernels k) {
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
               mat_kernels_supported(E0_KERNELS_AVX2);
    case E0_KERNELS_AVX512_Q8:
    case E0_KERNELS_AVX512_Q16:
    case E0_KERNELS_AVX512_Q24:
    case E0_KERNELS_AVX512_MIXED:
        return __builtin_cpu_supports("avx512vnni") && mat_kernels_supported(E0_KERNELS_AVX512);
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
    if (k == E0_KERNELS_AUTO && mat_kernels_supported(E0_KERNELS_AVX512_MIXED))
        return E0_KERNELS_AVX512_MIXED;
    if (k == E0_KERNELS_EXACT && mat_kernels_supported(E0_KERNELS_AVX512_Q24))
        return E0_KERNELS_AVX512_Q24;
    if (mat_kernels_supported(E0_KERNELS_AVX512)) return E0_KERNELS_AVX512;
    if (mat_kernels_supported(E0_KERNELS_AVX2)) return E0_KERNELS_AVX2;
    return E0_KERNELS_REF;
}

/* The f32-activation set behind k. */
static e0_kernels f32_of(e0_kernels k) {
    return k == E0_KERNELS_AVX512_Q8 || k == E0_KERNELS_AVX512_Q16 || k == E0_KERNELS_AVX512_Q24 ||
                   k == E0_KERNELS_AVX512_MIXED
               ? E0_KERNELS_AVX512
               : k;
}

int mat_set_kernels(e0_kernels k) {
    if (!mat_kernels_supported(k)) return E0_EUNSUPPORTED;
    /* AUTO stays unresolved: the next call resolves it, $E0_KERNELS included */
    atomic_store_explicit(&g_kernels, (int)(k == E0_KERNELS_AUTO ? k : resolve(k)),
                          memory_order_relaxed);
    return 0;
}

int mat_kernels_parse(const char *name, e0_kernels *out) {
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

/* $E0_KERNELS (a mat_kernels_parse name) picks the set while it is AUTO, to
 * run a whole test suite, benchmark or CLI process under one set; unknown or
 * unsupported names leave AUTO. */
static e0_kernels env_kernels(void) {
    const char *v = getenv("E0_KERNELS");
    e0_kernels k = E0_KERNELS_AUTO;
    if (!v || mat_kernels_parse(v, &k)) return E0_KERNELS_AUTO;
    return mat_kernels_supported(k) ? k : E0_KERNELS_AUTO;
}

e0_kernels mat_kernels(void) {
    e0_kernels k = (e0_kernels)atomic_load_explicit(&g_kernels, memory_order_relaxed);
    if (k == E0_KERNELS_AUTO) {
        k = resolve(env_kernels());
        atomic_store_explicit(&g_kernels, (int)k, memory_order_relaxed);
    }
    return k;
}

const char *mat_kernels_name(void) {
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

void k_prep_q4(const float *x, int64_t cols, int lanes, float *xp, int64_t nblk) {
    const int64_t bv = 8 * (int64_t)lanes; /* values per block */
    for (int64_t b = 0; b < nblk; b++)
        for (int k = 0; k < 8; k++)
            for (int j = 0; j < lanes; j++) {
                const int64_t c = b * bv + 8 * j + k;
                xp[b * bv + k * lanes + j] = c < cols ? x[c] : 0.0f;
            }
}

void k_prep_xs(const float *x, int64_t cols, int group, float *xs, int64_t ldxs) {
    const int64_t ng = cols / group;
    for (int64_t g = 0; g < ng; g++) {
        float s = 0.0f;
        for (int i = 0; i < group; i++)
            s += x[g * group + i];
        xs[g] = s;
    }
    for (int64_t g = ng; g < ldxs; g++)
        xs[g] = 0.0f;
}

/* n = rint(x / d * 256^(planes-1)) as signed base-256 digits q[0..planes)
 * in [-128, 127], the last plane lowest: q_last is the sign-extended low
 * byte of n, and so on; the first digit takes what is left, clamped. */
static void split_digits(int32_t n, int planes, int8_t q[3]) {
    int32_t rest = n;
    for (int p = planes - 1; p >= 0; p--) {
        int32_t v = p ? ((rest + 128) & 255) - 128 : rest;
        if (!p) v = v < -128 ? -128 : v > 127 ? 127 : v;
        q[p] = (int8_t)v;
        rest = (rest - v) / 256;
    }
}

/* 256^(planes - 1): the planes' integer n = rint(x / d * plane_scale). */
static float plane_scale(int planes) {
    return planes == 3 ? 65536.0f : planes == 2 ? 256.0f : 1.0f;
}

/* The largest |v[i]| of n values. */
static float amax_of(const float *v, int n) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++)
        amax = fabsf(v[i]) > amax ? fabsf(v[i]) : amax;
    return amax;
}

void k_prep_q8(const float *x, int64_t cols, int planes, int8_t *xq, float *xdl, float *xb,
               int64_t nblk) {
    for (int64_t b = 0; b < nblk; b++)
        for (int m4 = 0; m4 < 4; m4++) {
            const int64_t c0 = b * 128 + m4 * 32;
            float amax = 0.0f;
            for (int i = 0; i < 32; i++) {
                const float v = c0 + i < cols ? fabsf(x[c0 + i]) : 0.0f;
                amax = v > amax ? v : amax;
            }
            const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            const float scale = plane_scale(planes);
            int32_t sum = 0;
            for (int i = 0; i < 32; i++) {
                /* n = rint(x / d * 256^(planes-1)), |n| <= 127 * 256^(planes-1): exact in f32 and
                 * int32 */
                const int32_t n = (int32_t)lrintf((c0 + i < cols ? x[c0 + i] : 0.0f) * id * scale);
                const int j = m4 * 32 + i; /* column within the block */
                int8_t q[3];
                split_digits(n, planes, q);
                for (int p = 0; p < planes; p++)
                    xq[(b * planes + p) * 128 + (j & 1) * 64 + j / 2] = q[p];
                sum += n;
            }
            const float dl = planes == 3 ? d / 65536.0f : planes == 2 ? d / 256.0f : d;
            for (int l = 0; l < 4; l++)
                xdl[b * 16 + m4 * 4 + l] = dl;
            xb[b * 4 + m4] = dl * (float)sum;
        }
}

void k_prep_qg(const float *x, int64_t cols, int group, int planes, int8_t *xg, float *xgd,
               float *xgs) {
    const float scale = plane_scale(planes);
    for (int64_t g = 0; g < cols / group; g++) {
        const float *xv = x + g * group;
        const float d = amax_of(xv, group) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < group; i++) {
            const int32_t n = (int32_t)lrintf(xv[i] * id * scale);
            int8_t q[3];
            split_digits(n, planes, q);
            for (int p = 0; p < planes; p++)
                xg[(g * planes + p) * group + (i & 1) * (group / 2) + i / 2] = q[p];
            sum += n;
        }
        xgd[g] = d / scale;
        xgs[g] = xgd[g] * (float)sum;
    }
}

void k_prep_qk(const float *x, int64_t cols, int blk, int planes, int8_t *xk, float *xkd,
               float *xks) {
    const float scale = plane_scale(planes);
    for (int64_t b = 0; b < cols / blk; b++) {
        const float *xv = x + b * blk;
        const float d = amax_of(xv, blk) / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f, dl = d / scale;
        for (int k = 0; k < blk / 16; k++) {
            int32_t sum = 0;
            for (int i = 16 * k; i < 16 * k + 16; i++) {
                const int32_t n = (int32_t)lrintf(xv[i] * id * scale);
                int8_t q[3];
                split_digits(n, planes, q);
                for (int p = 0; p < planes; p++)
                    xk[(b * planes + p) * blk + i] = q[p];
                sum += n;
            }
            xks[b * (blk / 16) + k] = dl * (float)sum;
        }
        xkd[b] = dl;
    }
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
        /* ggml block types have AVX-512 kernels only: those where the CPU runs them */
        if (m->type == E0_W_GGML)
            return mat_kernels_supported(E0_KERNELS_AVX512) ? k_avx512_pick(m, need, lanes) : NULL;
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

void mat_delta_step_ref(float *St, const float *k, const float *q, const float *v, float beta,
                        float decay, int Dk, int Dv, float *o) {
    for (int i = 0; i < Dk * Dv; i++)
        St[i] *= decay;
    /* o temporarily holds S^T k, then the delta d */
    for (int j = 0; j < Dv; j++)
        o[j] = 0.0f;
    for (int i = 0; i < Dk; i++)
        for (int j = 0; j < Dv; j++)
            o[j] += St[(size_t)i * Dv + j] * k[i];
    for (int j = 0; j < Dv; j++)
        o[j] = beta * (v[j] - o[j]);
    for (int i = 0; i < Dk; i++)
        for (int j = 0; j < Dv; j++)
            St[(size_t)i * Dv + j] += k[i] * o[j];
    for (int j = 0; j < Dv; j++)
        o[j] = 0.0f;
    for (int i = 0; i < Dk; i++)
        for (int j = 0; j < Dv; j++)
            o[j] += St[(size_t)i * Dv + j] * q[i];
}

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

/* Element i of a cache of f32 or f16 values. */
static inline float kv_at(const void *c, size_t i, bool f16) {
    return f16 ? e0_f16_to_f32(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

static void attend_ref(const float *q, const void *kc, const void *vc, bool f16, size_t stride,
                       int n, int hd, float scale, float *scores, float *o) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) {
        float d = 0.0f;
        for (int i = 0; i < hd; i++)
            d += q[i] * kv_at(kc, (size_t)j * stride + (size_t)i, f16);
        scores[j] = d * scale;
        if (scores[j] > mx) mx = scores[j];
    }
    float sum = 0.0f;
    for (int j = 0; j < n; j++)
        sum += scores[j] = expf(scores[j] - mx);
    memset(o, 0, (size_t)hd * sizeof *o);
    for (int j = 0; j < n; j++) {
        const float p = scores[j] / sum;
        for (int i = 0; i < hd; i++)
            o[i] += p * kv_at(vc, (size_t)j * stride + (size_t)i, f16);
    }
}

void mat_attend_ref(const float *q, const float *kc, const float *vc, size_t stride, int n, int hd,
                    float scale, float *scores, float *o) {
    attend_ref(q, kc, vc, false, stride, n, hd, scale, scores, o);
}

void mat_attend_ref_f16(const float *q, const uint16_t *kc, const uint16_t *vc, size_t stride,
                        int n, int hd, float scale, float *scores, float *o) {
    attend_ref(q, kc, vc, true, stride, n, hd, scale, scores, o);
}

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
        attend_ref(q + (size_t)h * qstride, kc, vc, f16, stride, n, hd, scale, scores,
                   o + (size_t)h * ostride);
}
