/* edge0 synth: random-weight checkpoints of real shapes, streamed to disk.
 * The header (synth.h) explains the formats and the scaling; this file is
 * in four parts: shapes, the plan (every tensor's name, shape, offset),
 * the generators (one chunk of rows at a time) and the writer (threads,
 * progress, atomic directory). */
#include "model/synth.h"

#include "io/safetensors.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/file.h"
#include "util/num.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "synth.c stores packed codes and bf16 values in host byte order, which must be little-endian"
#endif

/* ======================================================================
 * Shapes. Numbers from the released config.json files (text model).
 * ====================================================================== */

/* clang-format off */
static const synth_shape SHAPES[] = {
    {.name = "qwen3.6-35b-a3b", .released = "Qwen/Qwen3.6-35B-A3B", .family = SYNTH_QWEN3_5_MOE,
     .hidden = 2048, .n_layers = 40, .vocab = 248320,
     .n_heads = 16, .n_kv_heads = 2, .head_dim = 256, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 16, .lin_v_heads = 32, .lin_k_dim = 128, .lin_v_dim = 128, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 256, .top_k = 8, .moe_inter = 512, .shared_inter = 512,
     .max_pos = 262144, .bos = -1, .eos = 248046},
    {.name = "qwen3-30b-a3b", .released = "Qwen/Qwen3-30B-A3B", .family = SYNTH_QWEN3_MOE,
     .hidden = 2048, .n_layers = 48, .vocab = 151936,
     .n_heads = 32, .n_kv_heads = 4, .head_dim = 128, .partial_rotary = 1.0, .rope_theta = 1e6,
     .n_experts = 128, .top_k = 8, .moe_inter = 768, .dense_inter = 6144,
     .max_pos = 40960, .bos = 151643, .eos = 151645},
    {.name = "qwen3-next-80b-a3b", .released = "Qwen/Qwen3-Next-80B-A3B-Instruct",
     .family = SYNTH_QWEN3_NEXT,
     .hidden = 2048, .n_layers = 48, .vocab = 151936,
     .n_heads = 16, .n_kv_heads = 2, .head_dim = 256, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 16, .lin_v_heads = 32, .lin_k_dim = 128, .lin_v_dim = 128, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 512, .top_k = 10, .moe_inter = 512, .shared_inter = 512, .dense_inter = 5120,
     .max_pos = 262144, .bos = 151643, .eos = 151645},
    {.name = "qwen3.5-122b-a10b", .released = "Qwen/Qwen3.5-122B-A10B", .family = SYNTH_QWEN3_5_MOE,
     .hidden = 3072, .n_layers = 48, .vocab = 248320,
     .n_heads = 32, .n_kv_heads = 2, .head_dim = 256, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 16, .lin_v_heads = 64, .lin_k_dim = 128, .lin_v_dim = 128, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 256, .top_k = 8, .moe_inter = 1024, .shared_inter = 1024,
     .max_pos = 262144, .bos = -1, .eos = 248046},
    /* A Qwen3.5/3.6-style hybrid small enough to build in a second, with the
     * Qwen3 tokenizer's vocabulary so it can run real text (edge0 demo). */
    {.name = "tiny", .released = "", .family = SYNTH_QWEN3_5_MOE,
     .hidden = 256, .n_layers = 4, .vocab = 151936,
     .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 2, .lin_v_heads = 4, .lin_k_dim = 64, .lin_v_dim = 64, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 32, .top_k = 4, .moe_inter = 128, .shared_inter = 128,
     .max_pos = 262144, .bos = -1, .eos = 151645},
    /* The same for the other two families (tests). */
    {.name = "tiny-qwen3moe", .released = "", .family = SYNTH_QWEN3_MOE,
     .hidden = 256, .n_layers = 4, .vocab = 151936,
     .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .partial_rotary = 1.0, .rope_theta = 1e6,
     .n_experts = 32, .top_k = 4, .moe_inter = 128, .dense_inter = 512,
     .max_pos = 40960, .bos = 151643, .eos = 151645},
    {.name = "tiny-qwen3next", .released = "", .family = SYNTH_QWEN3_NEXT,
     .hidden = 256, .n_layers = 4, .vocab = 151936,
     .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 2, .lin_v_heads = 4, .lin_k_dim = 64, .lin_v_dim = 64, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 32, .top_k = 4, .moe_inter = 128, .shared_inter = 128, .dense_inter = 512,
     .max_pos = 262144, .bos = 151643, .eos = 151645},
};
/* clang-format on */

#define N_SHAPES (sizeof SHAPES / sizeof *SHAPES)

const synth_shape *synth_find(const char *name) {
    for (size_t i = 0; name && i < N_SHAPES; i++)
        if (strcmp(SHAPES[i].name, name) == 0) return &SHAPES[i];
    return NULL;
}

const char *synth_names(void) {
    return "qwen3.6-35b-a3b, qwen3-30b-a3b, qwen3-next-80b-a3b, qwen3.5-122b-a10b, tiny, "
           "tiny-qwen3moe, "
           "tiny-qwen3next";
}

size_t synth_count(void) {
    return N_SHAPES;
}

const synth_shape *synth_at(size_t i) {
    return i < N_SHAPES ? &SHAPES[i] : NULL;
}

void synth_opts_default(synth_opts *o) {
    memset(o, 0, sizeof *o);
    o->format = SYNTH_MLX;
    o->seed = 1;
}

/* ======================================================================
 * Random numbers: splitmix64 to seed, xoshiro256** to draw.
 * ====================================================================== */

typedef struct {
    uint64_t s[4];
} xrng;

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A stream for (seed, a, b): independent of thread count and job order. */
static void xr_seed(xrng *r, uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t x = seed ^ 0x5eed5eed5eed5eedull;
    x = splitmix(&x) ^ a;
    x = splitmix(&x) ^ b;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&x);
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t xr_next(xrng *r) {
    uint64_t *s = r->s;
    const uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* uniform in [0, 1) */
static double xr_unif(xrng *r) {
    return (double)(xr_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ======================================================================
 * Scaling (see synth.h): target stds of every kind of tensor.
 * ====================================================================== */

#define SILU2    0.35578 /* E[silu(z)^2], z ~ N(0, 1) */
#define SIG2     0.29338 /* E[sigmoid(z)^2] */
#define SKEW_AMP 0.5f    /* per-element amplitude of the planted direction in the embedding */

typedef struct {
    double gamma;                     /* RMS each block adds to the residual stream */
    float embed, in, router, lm_head; /* stds */
    float o_proj, out_proj, down, sh_down;
} gains;

static gains make_gains(const synth_shape *s) {
    const double H = s->hidden, gamma = 1.0 / sqrt((double)s->n_layers);
    const bool hybrid = s->family != SYNTH_QWEN3_MOE;
    gains g = {.gamma = gamma, .embed = 1.0f};
    g.in = (float)(1.0 / sqrt(H));
    g.router = (float)(1.0 / sqrt(H)); /* logits ~ N(0, 1) per token */
    g.lm_head = (float)(3.0 / sqrt(H));
    /* attention output: values of RMS ~1 (times the sigmoid gate when gated) */
    g.o_proj =
        (float)(gamma / ((hybrid ? sqrt(SIG2) : 1.0) * sqrt((double)s->n_heads * s->head_dim)));
    /* DeltaNet: RMS-normed heads times silu(z) */
    g.out_proj =
        (float)(gamma / (sqrt(SILU2) * sqrt((double)s->lin_v_heads * s->lin_v_dim + 1e-9)));
    /* MoE: top-k experts with near-equal weights (sum of k independent outputs
     * scaled by ~1/k); the hybrids split the block's output with the shared
     * expert, whose sigmoid gate averages sqrt(SIG2). */
    const double routed = hybrid ? gamma / sqrt(2.0) : gamma;
    g.down = (float)(routed * sqrt((double)s->top_k) / (sqrt(SILU2) * sqrt((double)s->moe_inter)));
    g.sh_down = hybrid ? (float)(gamma / sqrt(2.0) /
                                 (sqrt(SIG2) * sqrt(SILU2) * sqrt((double)s->shared_inter)))
                       : 0;
    return g;
}

/* ======================================================================
 * The plan: every tensor, its shard and offset, before any byte is written.
 * ====================================================================== */

#define NAME_LEN    112
#define GROUP       64
#define CHUNK_BYTES (8u << 20) /* per job: bounded memory is threads x this */

typedef enum { K_QMAT, K_BMAT, K_NORM, K_ALOG, K_DTBIAS, K_CONV } item_kind;
typedef enum { DIR_NONE, DIR_EMBED, DIR_ROUTER } item_dir;

/* One logical weight. A quantized matrix (K_QMAT) is three tensors laid out
 * back to back: NAME.weight (u32 codes), NAME.scales, NAME.biases (bf16). */
typedef struct {
    char name[NAME_LEN];
    uint8_t kind, dir, bits, dtype; /* dtype: st_dtype of K_BMAT and the vectors */
    int32_t layer;                  /* DIR_ROUTER: whose expert ranking */
    int ndim;
    uint64_t shape[3];  /* as written; K_QMAT: [lead,] out, in (unpacked) */
    int64_t rows, cols; /* matrix view: rows = lead x out; vectors: 1 x n */
    float std, base;
    uint32_t shard;
    uint64_t off;            /* in the shard's data section */
    uint64_t wbytes, sbytes; /* K_QMAT: codes, and each of scales / biases; else wbytes = all */
} item;

typedef struct {
    const synth_shape *s;
    synth_opts o;
    gains g;
    item *it;
    size_t n, cap;
    bool oom;
    int nshards;
    uint64_t *data_bytes; /* [nshards] data section size */
    char **hdr;           /* [nshards] header: u64 length + padded JSON */
    size_t *hdr_len;
    uint64_t total_data, total_bytes, params;
    int8_t *sign; /* [hidden / GROUP]: planted direction, +-1 per group */
    float skew_amp;
} plan;

static item *add_item(plan *p, const char *name, item_kind kind, int ndim, const uint64_t *shape) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 1024;
        item *it = realloc(p->it, cap * sizeof *it);
        if (!it) {
            p->oom = true;
            return NULL;
        }
        p->it = it;
        p->cap = cap;
    }
    item *t = &p->it[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = (uint8_t)kind;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->layer = -1;
    return t;
}

/* A weight matrix [lead x] rows x cols named `base` (mlx: quantized with
 * `bits`, HF: bf16 `base`.weight, or `base` itself when `bare`). */
static void add_mat(plan *p, const char *base, int64_t lead, int64_t rows, int64_t cols, float std,
                    int bits, item_dir dir, int layer, bool bare) {
    const bool mlx = p->o.format == SYNTH_MLX;
    uint64_t sh[3], *q = sh;
    if (lead) *q++ = (uint64_t)lead;
    q[0] = (uint64_t)rows;
    q[1] = (uint64_t)cols;
    char nm[NAME_LEN + 8];
    snprintf(nm, sizeof nm, "%s%s", base, mlx || bare ? "" : ".weight");
    item *t = add_item(p, nm, mlx ? K_QMAT : K_BMAT, lead ? 3 : 2, sh);
    if (!t) return;
    t->rows = (lead ? lead : 1) * rows;
    t->cols = cols;
    t->std = std;
    t->dir = (uint8_t)dir;
    t->layer = layer;
    if (mlx) {
        t->bits = (uint8_t)bits;
        t->wbytes = (uint64_t)t->rows * (uint64_t)cols * (uint64_t)bits / 8;
        t->sbytes = (uint64_t)t->rows * (uint64_t)(cols / GROUP) * 2;
    } else {
        t->dtype = ST_BF16;
        t->wbytes = (uint64_t)t->rows * (uint64_t)cols * 2;
    }
    p->params += (uint64_t)t->rows * (uint64_t)cols;
}

static void add_vec(plan *p, const char *name, item_kind kind, int ndim, const uint64_t *shape,
                    st_dtype dt, int64_t rows, int64_t cols, float base) {
    item *t = add_item(p, name, kind, ndim, shape);
    if (!t) return;
    t->dtype = (uint8_t)dt;
    t->rows = rows;
    t->cols = cols;
    t->base = base;
    t->wbytes = (uint64_t)(rows * cols) * st_dtype_size(dt);
    p->params += (uint64_t)(rows * cols);
}

static void add_norm(plan *p, const char *name, int64_t n, float base) {
    uint64_t sh[1] = {(uint64_t)n};
    add_vec(p, name, K_NORM, 1, sh, ST_BF16, 1, n, base);
}

#define NM(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)

static void plan_deltanet(plan *p, const char *b, bool mlx) {
    const synth_shape *s = p->s;
    const gains *g = &p->g;
    const int64_t H = s->hidden, Kd = (int64_t)s->lin_k_heads * s->lin_k_dim;
    const int64_t Vd = (int64_t)s->lin_v_heads * s->lin_v_dim, Hv = s->lin_v_heads, C = 2 * Kd + Vd;
    char nm[NAME_LEN];
    if (s->family == SYNTH_QWEN3_NEXT) {
        add_mat(p, NM("%slinear_attn.in_proj_qkvz", b), 0, 2 * Kd + 2 * Vd, H, g->in, 4, DIR_NONE,
                -1, false);
        add_mat(p, NM("%slinear_attn.in_proj_ba", b), 0, 2 * Hv, H, g->in, 4, DIR_NONE, -1, false);
    } else {
        add_mat(p, NM("%slinear_attn.in_proj_qkv", b), 0, C, H, g->in, 4, DIR_NONE, -1, false);
        add_mat(p, NM("%slinear_attn.in_proj_z", b), 0, Vd, H, g->in, 4, DIR_NONE, -1, false);
        add_mat(p, NM("%slinear_attn.in_proj_b", b), 0, Hv, H, g->in, 4, DIR_NONE, -1, false);
        add_mat(p, NM("%slinear_attn.in_proj_a", b), 0, Hv, H, g->in, 4, DIR_NONE, -1, false);
    }
    const uint64_t K = (uint64_t)s->conv_kernel;
    uint64_t cs[3] = {(uint64_t)C, mlx ? K : 1, mlx ? 1 : K}, hs[1] = {(uint64_t)Hv};
    add_vec(p, NM("%slinear_attn.conv1d.weight", b), K_CONV, 3, cs, ST_BF16, C, (int64_t)K, 0);
    /* A_log: f32 in mlx checkpoints (mlx-lm keeps it), bf16 as transformers saves it */
    add_vec(p, NM("%slinear_attn.A_log", b), K_ALOG, 1, hs, mlx ? ST_F32 : ST_BF16, 1, Hv, 0);
    add_vec(p, NM("%slinear_attn.dt_bias", b), K_DTBIAS, 1, hs, ST_BF16, 1, Hv, 0);
    add_norm(p, NM("%slinear_attn.norm.weight", b), s->lin_v_dim, 1.0f); /* never shifted */
    add_mat(p, NM("%slinear_attn.out_proj", b), 0, H, Vd, g->out_proj, 4, DIR_NONE, -1, false);
}

static void plan_attention(plan *p, const char *b, float nb) {
    const synth_shape *s = p->s;
    const gains *g = &p->g;
    const int64_t H = s->hidden, hd = s->head_dim, gated = s->family != SYNTH_QWEN3_MOE ? 2 : 1;
    char nm[NAME_LEN];
    add_mat(p, NM("%sself_attn.q_proj", b), 0, s->n_heads * hd * gated, H, g->in, 4, DIR_NONE, -1,
            false);
    add_mat(p, NM("%sself_attn.k_proj", b), 0, s->n_kv_heads * hd, H, g->in, 4, DIR_NONE, -1,
            false);
    add_mat(p, NM("%sself_attn.v_proj", b), 0, s->n_kv_heads * hd, H, g->in, 4, DIR_NONE, -1,
            false);
    add_mat(p, NM("%sself_attn.o_proj", b), 0, H, s->n_heads * hd, g->o_proj, 4, DIR_NONE, -1,
            false);
    add_norm(p, NM("%sself_attn.q_norm.weight", b), hd, nb);
    add_norm(p, NM("%sself_attn.k_norm.weight", b), hd, nb);
}

static void plan_moe(plan *p, const char *b, int layer, bool mlx) {
    const synth_shape *s = p->s;
    const gains *g = &p->g;
    const int64_t H = s->hidden, I = s->moe_inter, E = s->n_experts, Is = s->shared_inter;
    char nm[NAME_LEN];
    add_mat(p, NM("%smlp.gate", b), 0, E, H, g->router, 8, p->skew_amp > 0 ? DIR_ROUTER : DIR_NONE,
            layer, false);
    if (mlx) {
        add_mat(p, NM("%smlp.switch_mlp.gate_proj", b), E, I, H, g->in, 4, DIR_NONE, -1, false);
        add_mat(p, NM("%smlp.switch_mlp.up_proj", b), E, I, H, g->in, 4, DIR_NONE, -1, false);
        add_mat(p, NM("%smlp.switch_mlp.down_proj", b), E, H, I, g->down, 4, DIR_NONE, -1, false);
    } else if (s->family == SYNTH_QWEN3_5_MOE) {
        /* fused 3-D, no .weight suffix: gate rows on top, up rows below */
        add_mat(p, NM("%smlp.experts.gate_up_proj", b), E, 2 * I, H, g->in, 4, DIR_NONE, -1, true);
        add_mat(p, NM("%smlp.experts.down_proj", b), E, H, I, g->down, 4, DIR_NONE, -1, true);
    } else {
        for (int64_t e = 0; e < E && !p->oom; e++) {
            long long ee = (long long)e;
            add_mat(p, NM("%smlp.experts.%lld.gate_proj", b, ee), 0, I, H, g->in, 4, DIR_NONE, -1,
                    false);
            add_mat(p, NM("%smlp.experts.%lld.up_proj", b, ee), 0, I, H, g->in, 4, DIR_NONE, -1,
                    false);
            add_mat(p, NM("%smlp.experts.%lld.down_proj", b, ee), 0, H, I, g->down, 4, DIR_NONE, -1,
                    false);
        }
    }
    if (s->family == SYNTH_QWEN3_MOE) return;
    add_mat(p, NM("%smlp.shared_expert.gate_proj", b), 0, Is, H, g->in, 4, DIR_NONE, -1, false);
    add_mat(p, NM("%smlp.shared_expert.up_proj", b), 0, Is, H, g->in, 4, DIR_NONE, -1, false);
    add_mat(p, NM("%smlp.shared_expert.down_proj", b), 0, H, Is, g->sh_down, 4, DIR_NONE, -1,
            false);
    add_mat(p, NM("%smlp.shared_expert_gate", b), 0, 1, H, g->in, 8, DIR_NONE, -1, false);
}

static void plan_tensors(plan *p) {
    const synth_shape *s = p->s;
    const bool mlx = p->o.format == SYNTH_MLX, q35 = s->family == SYNTH_QWEN3_5_MOE;
    const bool hybrid = s->family != SYNTH_QWEN3_MOE;
    const char *pre = q35 ? (mlx ? "language_model.model." : "model.language_model.") : "model.";
    const char *lm = q35 && mlx ? "language_model.lm_head" : "lm_head";
    /* hybrid norms: mlx stores 1 + w, HF stores w (zero-centred) */
    const float nb = hybrid && !mlx ? 0.0f : 1.0f;
    char nm[NAME_LEN];
    add_mat(p, NM("%sembed_tokens", pre), 0, s->vocab, s->hidden, p->g.embed, 4,
            p->skew_amp > 0 ? DIR_EMBED : DIR_NONE, -1, false);
    for (int L = 0; L < s->n_layers && !p->oom; L++) {
        char b[64];
        snprintf(b, sizeof b, "%slayers.%d.", pre, L);
        add_norm(p, NM("%sinput_layernorm.weight", b), s->hidden, nb);
        add_norm(p, NM("%spost_attention_layernorm.weight", b), s->hidden, nb);
        if (hybrid && (L + 1) % s->full_attention_interval != 0)
            plan_deltanet(p, b, mlx);
        else
            plan_attention(p, b, nb);
        plan_moe(p, b, L, mlx);
    }
    add_norm(p, NM("%snorm.weight", pre), s->hidden, nb);
    add_mat(p, lm, 0, s->vocab, s->hidden, p->g.lm_head, 4, DIR_NONE, -1, false);
}

/* ---- sharding and headers ---------------------------------------------- */

static const char *st_name(uint8_t dt) {
    return st_dtype_name((st_dtype)dt);
}

static uint64_t item_bytes(const item *t) {
    return t->wbytes + 2 * t->sbytes;
}

/* Assigns shards (a new one when the next weight would pass shard_bytes),
 * offsets (contiguous, as the safetensors format requires) and headers. */
static int plan_layout(plan *p, char *err) {
    const uint64_t max = p->o.shard_bytes ? p->o.shard_bytes : (5ull << 30);
    uint64_t used = 0;
    int cur = 0;
    for (size_t i = 0; i < p->n; i++) {
        item *t = &p->it[i];
        if (used > 0 && used + item_bytes(t) > max) {
            cur++;
            used = 0;
        }
        t->shard = (uint32_t)cur;
        t->off = used;
        used += item_bytes(t);
    }
    p->nshards = cur + 1;
    p->data_bytes = calloc((size_t)p->nshards, sizeof *p->data_bytes);
    p->hdr = calloc((size_t)p->nshards, sizeof *p->hdr);
    p->hdr_len = calloc((size_t)p->nshards, sizeof *p->hdr_len);
    if (!p->data_bytes || !p->hdr || !p->hdr_len) return e0_fail(err, E0_ENOMEM, "out of memory");
    size_t i = 0;
    for (int sh = 0; sh < p->nshards; sh++) {
        sbuf b = {0};
        sb_printf(&b, "{\"__metadata__\":{\"format\":\"%s\"}",
                  p->o.format == SYNTH_MLX ? "mlx" : "pt");
        for (; i < p->n && p->it[i].shard == (uint32_t)sh; i++) {
            const item *t = &p->it[i];
            p->data_bytes[sh] = t->off + item_bytes(t);
            if (t->kind != K_QMAT) {
                st_header_entry(&b, t->name, "", st_name(t->dtype), t->ndim, t->shape, t->off,
                          t->off + t->wbytes);
                continue;
            }
            uint64_t shp[3];
            memcpy(shp, t->shape, sizeof shp);
            shp[t->ndim - 1] = (uint64_t)t->cols * t->bits / 32;
            st_header_entry(&b, t->name, ".weight", "U32", t->ndim, shp, t->off, t->off + t->wbytes);
            shp[t->ndim - 1] = (uint64_t)(t->cols / GROUP);
            uint64_t o = t->off + t->wbytes;
            st_header_entry(&b, t->name, ".scales", "BF16", t->ndim, shp, o, o + t->sbytes);
            st_header_entry(&b, t->name, ".biases", "BF16", t->ndim, shp, o + t->sbytes,
                      o + 2 * t->sbytes);
        }
        sb_printf(&b, "}");
        if (b.oom) {
            sb_free(&b);
            return e0_fail(err, E0_ENOMEM, "out of memory");
        }
        char *h;
        size_t hlen;
        if (st_header_pack(b.p, b.n, &h, &hlen) != 0) {
            sb_free(&b);
            return e0_fail(err, E0_ENOMEM, "out of memory");
        }
        sb_free(&b);
        p->hdr[sh] = h;
        p->hdr_len[sh] = hlen;
        p->total_data += p->data_bytes[sh];
        p->total_bytes += hlen + p->data_bytes[sh];
    }
    return 0;
}

static void plan_free(plan *p) {
    for (int i = 0; p->hdr && i < p->nshards; i++)
        free(p->hdr[i]);
    free(p->hdr);
    free(p->hdr_len);
    free(p->data_bytes);
    free(p->it);
    free(p->sign);
    memset(p, 0, sizeof *p);
}

static int plan_build(plan *p, const synth_shape *s, const synth_opts *o, char *err) {
    memset(p, 0, sizeof *p);
    if (!s) return e0_fail(err, E0_EINVAL, "no shape given");
    if (o->format != SYNTH_MLX && o->format != SYNTH_HF)
        return e0_fail(err, E0_EINVAL, "unknown format");
    if (!(o->route_skew >= 0 && o->route_skew <= 8))
        return e0_fail(err, E0_EINVAL, "route skew %g is outside [0, 8]", o->route_skew);
    if (s->hidden % GROUP || s->moe_inter % GROUP || (s->shared_inter && s->shared_inter % GROUP) ||
        (s->head_dim * s->n_heads) % GROUP || (s->lin_v_dim * s->lin_v_heads) % GROUP)
        return e0_fail(err, E0_EINVAL, "shape %s: dimensions must be multiples of %d", s->name,
                       GROUP);
    p->s = s;
    p->o = *o;
    p->g = make_gains(s);
    p->skew_amp = o->route_skew > 0 ? SKEW_AMP : 0.0f;
    const int ng = s->hidden / GROUP;
    if (!(p->sign = malloc((size_t)ng))) return e0_fail(err, E0_ENOMEM, "out of memory");
    xrng r;
    xr_seed(&r, o->seed, 0x7369676eull, 0);
    for (int i = 0; i < ng; i++)
        p->sign[i] = (xr_next(&r) >> 63) ? 1 : -1;
    plan_tensors(p);
    if (p->oom) return e0_fail(err, E0_ENOMEM, "out of memory planning shape %s", s->name);
    return plan_layout(p, err);
}

int synth_plan_info(const synth_shape *shape, const synth_opts *o, synth_info *info, char *err) {
    synth_opts d;
    synth_opts_default(&d);
    plan p;
    int rc = plan_build(&p, shape, o ? o : &d, err);
    if (!rc) {
        info->bytes = p.total_bytes;
        info->params = p.params;
        info->n_shards = p.nshards;
        info->n_tensors = 0;
        for (size_t i = 0; i < p.n; i++)
            info->n_tensors += p.it[i].kind == K_QMAT ? 3 : 1;
    }
    plan_free(&p);
    return rc;
}

/* ======================================================================
 * Generators: rows [r0, r0 + n) of one item into a buffer.
 * ====================================================================== */

/* Sum of the 16 nibbles / 8 bytes of a word. */
static inline unsigned nib_sum(uint64_t x) {
    uint64_t y = (x & 0x0f0f0f0f0f0f0f0full) + ((x >> 4) & 0x0f0f0f0f0f0f0f0full); /* bytes <= 30 */
    return (unsigned)((y * 0x0101010101010101ull) >> 56);                          /* <= 240 */
}
static inline unsigned byte_sum(uint64_t x) {
    uint64_t y =
        (x & 0x00ff00ff00ff00ffull) + ((x >> 8) & 0x00ff00ff00ff00ffull); /* lanes <= 510 */
    return (unsigned)((y * 0x0001000100010001ull) >> 48);                 /* <= 2040 */
}

/* Estimated RMS of the residual stream's random part at layer L's router:
 * 1 from the embedding plus gamma^2 per block before it. */
static double rest_rms(const plan *p, int layer) {
    return sqrt(1.0 + (2.0 * layer + 1.0) * p->g.gamma * p->g.gamma);
}

/* Per-row group offsets along the planted direction (DIR_EMBED: the
 * direction itself; DIR_ROUTER: the expert's logit offset). `coef[r]` is
 * the amplitude of row r0 + r; the group pattern is p->sign. */
static int row_coefs(const plan *p, const item *t, int64_t r0, int64_t n, float *coef) {
    if (t->dir == DIR_EMBED) {
        for (int64_t r = 0; r < n; r++)
            coef[r] = p->skew_amp;
        return 0;
    }
    /* A random expert ranking per layer; offset -S c ln(rank + 1) in units
     * of the logit noise (centred), converted to a weight along the planted
     * direction: offset * rest_rms / (amp * H). With Gumbel noise of scale
     * 1/c the first choice would follow Zipf(S) exactly; for Gaussian noise
     * and top-k selection, c = 1.6 / sqrt(2 ln E) makes the fitted log-log
     * slope of selection counts against rank -S (simulated for E/k = 32/4,
     * 128/8, 256/8, 512/10 and S = 0.5..1.5, within ~10%). */
    const int64_t E = t->rows;
    int32_t *rank = malloc((size_t)E * sizeof *rank), *perm = malloc((size_t)E * sizeof *perm);
    if (!rank || !perm) {
        free(rank);
        free(perm);
        return -1;
    }
    xrng r;
    xr_seed(&r, p->o.seed, 0x72616e6bull, (uint64_t)t->layer);
    for (int64_t e = 0; e < E; e++)
        perm[e] = (int32_t)e;
    for (int64_t e = E - 1; e > 0; e--) {
        int64_t j = (int64_t)(xr_next(&r) % (uint64_t)(e + 1));
        int32_t tmp = perm[e];
        perm[e] = perm[j];
        perm[j] = tmp;
    }
    for (int64_t k = 0; k < E; k++)
        rank[perm[k]] = (int32_t)k;
    const double S = p->o.route_skew, norm = sqrt(2.0 * log((double)E)) / 1.6;
    double mean = 0;
    for (int64_t k = 0; k < E; k++)
        mean += -S * log((double)k + 1.0) / norm;
    mean /= (double)E;
    const double conv = rest_rms(p, t->layer) / (p->skew_amp * (double)p->s->hidden);
    for (int64_t i = 0; i < n; i++) {
        double off = -S * log((double)rank[r0 + i] + 1.0) / norm - mean;
        coef[i] = (float)(off * conv);
    }
    free(rank);
    free(perm);
    return 0;
}

/* mlx affine codes: uniform codes, one scale per item so values have the
 * item's std, and per group bias = -scale * mean(codes) (+ the planted
 * direction), so each group of 64 dequantized weights has mean 0. */
static void gen_qmat(const plan *p, const item *t, xrng *r, int64_t n, const float *coef,
                     uint8_t *w, uint16_t *sc, uint16_t *bi) {
    const int64_t G = t->cols / GROUP;
    const double levels = (double)(1u << t->bits);
    const float s =
        e0_bf16_to_f32(e0_f32_to_bf16(t->std / (float)sqrt((levels * levels - 1.0) / 12.0)));
    const uint16_t sb = e0_f32_to_bf16(s);
    const size_t gbytes = (size_t)GROUP * t->bits / 8; /* 32 or 64 */
    for (int64_t row = 0; row < n; row++) {
        for (int64_t g = 0; g < G; g++) {
            uint64_t words[8];
            unsigned sum = 0;
            if (t->bits == 4) {
                for (int k = 0; k < 4; k++)
                    sum += nib_sum(words[k] = xr_next(r));
            } else {
                for (int k = 0; k < 8; k++)
                    sum += byte_sum(words[k] = xr_next(r));
            }
            memcpy(w, words, gbytes); /* little-endian: code k at bits [k*bits, (k+1)*bits) */
            w += gbytes;
            float bias = -s * (float)sum / (float)GROUP;
            if (coef) bias += coef[row] * (float)p->sign[g];
            *sc++ = sb;
            *bi++ = e0_f32_to_bf16(bias);
        }
    }
}

/* bf16 weights: uniform with the item's std, each group of 64 shifted to
 * mean 0 (+ the planted direction). */
static void gen_bmat(const plan *p, const item *t, xrng *r, int64_t n, const float *coef,
                     uint16_t *out) {
    const int64_t G = t->cols / GROUP;
    const float k = t->std * 1.7320508f / 32768.0f; /* uniform on [-sqrt(3) std, sqrt(3) std] */
    for (int64_t row = 0; row < n; row++)
        for (int64_t g = 0; g < G; g++) {
            float v[GROUP], sum = 0;
            for (int i = 0; i < GROUP; i += 4) {
                uint64_t x = xr_next(r);
                for (int j = 0; j < 4; j++) {
                    v[i + j] = ((float)(uint16_t)(x >> (16 * j)) - 32767.5f) * k;
                    sum += v[i + j];
                }
            }
            float add = -sum / (float)GROUP;
            if (coef) add += coef[row] * (float)p->sign[g];
            for (int i = 0; i < GROUP; i++)
                *out++ = e0_f32_to_bf16(v[i] + add);
        }
}

static void put_val(uint8_t dt, void *out, int64_t i, float v) {
    if (dt == ST_F32)
        memcpy((uint8_t *)out + 4 * i, &v, 4);
    else {
        uint16_t h = e0_f32_to_bf16(v);
        memcpy((uint8_t *)out + 2 * i, &h, 2);
    }
}

/* Small tensors, generated whole. */
static void gen_vec(const item *t, xrng *r, void *out) {
    const int64_t n = t->rows * t->cols;
    for (int64_t i = 0; i < n; i++) {
        float v = 0;
        switch (t->kind) {
        case K_NORM: /* base + k/128, k in [-2, 2]: exact in bf16 */
            v = t->base + (float)((int)(xr_next(r) % 5) - 2) / 128.0f;
            break;
        case K_ALOG: /* A uniform in [1, 16) as the released models initialise it */
            v = logf(1.0f + 15.0f * (float)xr_unif(r));
            break;
        case K_DTBIAS: { /* softplus(dt_bias) = dt, dt log-uniform in [1e-3, 1e-1] */
            double dt = exp(log(1e-3) + xr_unif(r) * (log(1e-1) - log(1e-3)));
            v = (float)(dt + log(-expm1(-dt)));
            break;
        }
        case K_CONV: /* uniform, std 1/sqrt(K) */
            v = (float)((xr_unif(r) * 2.0 - 1.0) * 1.7320508 / sqrt((double)t->cols));
            break;
        default:
            break;
        }
        put_val(t->dtype, out, i, v);
    }
}

/* ======================================================================
 * The writer.
 * ====================================================================== */

typedef struct {
    uint32_t item;
    int64_t r0, n;
} job;

typedef struct {
    const plan *p;
    job *jobs;
    size_t njobs, buf_bytes, max_rows;
    int *fds;
    atomic_size_t next;
    atomic_uint_fast64_t done;
    atomic_int failed, running;
    pthread_mutex_t mu; /* guards err, err_code and turn */
    pthread_cond_t cv;  /* turn advanced or failed */
    size_t turn;        /* the job whose pieces are written next */
    char err[E0_ERR_MAX];
    int err_code;
    char **paths;
    const volatile sig_atomic_t *cancel;
} writer;

static void w_fail(writer *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void w_fail(writer *w, int code, const char *fmt, ...) {
    pthread_mutex_lock(&w->mu);
    if (!atomic_load(&w->failed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err, sizeof w->err, fmt, ap);
        va_end(ap);
        w->err_code = code;
        atomic_store(&w->failed, 1);
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Workers look only at `failed`; the calling thread polls *cancel (a
 * signal handler's flag, not meant to be shared between threads) and turns
 * it into a failure. */
static bool w_stop(writer *w) {
    return atomic_load(&w->failed);
}

static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off) {
    const uint8_t *b = buf;
    while (len) {
        ssize_t k = pwrite(fd, b, len, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k;
        len -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

typedef struct {
    const void *b;
    size_t len;
    uint64_t off;
} wpiece;

static void run_job(writer *w, const job *j, uint8_t *buf, float *coef) {
    const plan *p = w->p;
    const item *t = &p->it[j->item];
    xrng r;
    xr_seed(&r, p->o.seed, j->item, (uint64_t)j->r0);
    const uint32_t sh = t->shard;
    const uint64_t base = p->hdr_len[sh] + t->off;
    if (t->dir != DIR_NONE && row_coefs(p, t, j->r0, j->n, coef) != 0) {
        w_fail(w, E0_ENOMEM, "out of memory");
        return;
    }
    const float *cf = t->dir != DIR_NONE ? coef : NULL;
    wpiece piece[3];
    int np = 0;
    if (t->kind == K_QMAT) {
        const size_t rw = (size_t)t->cols * t->bits / 8, rs = (size_t)(t->cols / GROUP) * 2;
        uint8_t *wb = buf, *sb = buf + (size_t)j->n * rw, *bb = sb + (size_t)j->n * rs;
        gen_qmat(p, t, &r, j->n, cf, wb, (uint16_t *)(void *)sb, (uint16_t *)(void *)bb);
        piece[np++] = (wpiece){wb, (size_t)j->n * rw, base + (uint64_t)j->r0 * rw};
        piece[np++] = (wpiece){sb, (size_t)j->n * rs, base + t->wbytes + (uint64_t)j->r0 * rs};
        piece[np++] =
            (wpiece){bb, (size_t)j->n * rs, base + t->wbytes + t->sbytes + (uint64_t)j->r0 * rs};
    } else if (t->kind == K_BMAT) {
        const size_t rw = (size_t)t->cols * 2;
        gen_bmat(p, t, &r, j->n, cf, (uint16_t *)(void *)buf);
        piece[np++] = (wpiece){buf, (size_t)j->n * rw, base + (uint64_t)j->r0 * rw};
    } else {
        gen_vec(t, &r, buf);
        piece[np++] = (wpiece){buf, (size_t)t->wbytes, base};
    }
    /* Writes go out in job order (= file order): generation overlaps, the
     * page cache sees sequential streams, and threads never contend for
     * the file's lock. */
    const size_t me = (size_t)(j - w->jobs);
    pthread_mutex_lock(&w->mu);
    while (w->turn != me && !w_stop(w))
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    for (int k = 0; k < np && !w_stop(w); k++) {
        if (pwrite_all(w->fds[sh], piece[k].b, piece[k].len, piece[k].off) != 0) {
            w_fail(w, E0_EIO, "%s: write failed: %s", w->paths[sh], strerror(errno ? errno : EIO));
            return;
        }
        atomic_fetch_add(&w->done, piece[k].len);
    }
    pthread_mutex_lock(&w->mu);
    w->turn = me + 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void *worker(void *arg) {
    writer *w = arg;
    uint8_t *buf = malloc(w->buf_bytes);
    float *coef = malloc(w->max_rows * sizeof *coef);
    if (!buf || !coef)
        w_fail(w, E0_ENOMEM, "out of memory allocating a %zu-byte write buffer", w->buf_bytes);
    while (buf && coef && !w_stop(w)) {
        size_t i = atomic_fetch_add(&w->next, 1);
        if (i >= w->njobs) break;
        run_job(w, &w->jobs[i], buf, coef);
    }
    free(buf);
    free(coef);
    atomic_fetch_sub(&w->running, 1);
    return NULL;
}

/* Jobs of about CHUNK_BYTES: whole rows, each item's rows in order. */
static int make_jobs(writer *w, char *err) {
    const plan *p = w->p;
    size_t n = 0, cap = p->n + 64;
    job *jobs = malloc(cap * sizeof *jobs);
    if (!jobs) return e0_fail(err, E0_ENOMEM, "out of memory");
    w->buf_bytes = 4096;
    for (size_t i = 0; i < p->n; i++) {
        const item *t = &p->it[i];
        int64_t per = t->rows;
        const uint64_t row = item_bytes(t) / (uint64_t)t->rows;
        if (t->kind == K_QMAT || t->kind == K_BMAT) {
            per = (int64_t)(CHUNK_BYTES / row);
            if (per < 1) per = 1;
        }
        for (int64_t r0 = 0; r0 < t->rows; r0 += per) {
            if (n == cap) {
                cap *= 2;
                job *nj = realloc(jobs, cap * sizeof *nj);
                if (!nj) {
                    free(jobs);
                    return e0_fail(err, E0_ENOMEM, "out of memory");
                }
                jobs = nj;
            }
            int64_t k = t->rows - r0 < per ? t->rows - r0 : per;
            jobs[n++] = (job){(uint32_t)i, r0, k};
            if ((size_t)k * row > w->buf_bytes) w->buf_bytes = (size_t)k * row;
            if ((size_t)k > w->max_rows) w->max_rows = (size_t)k;
        }
    }
    w->jobs = jobs;
    w->njobs = n;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void report(const synth_opts *o, synth_phase ph, uint64_t done, uint64_t total, double t0) {
    if (!o->progress) return;
    synth_progress pr = {.phase = ph, .done = done, .total = total, .seconds = now_s() - t0};
    o->progress(o->progress_ctx, &pr);
}

/* ---- config.json and the index ----------------------------------------- */

static void cfg_quant(sbuf *b, const plan *p, const char *key, const char *ind) {
    sb_printf(b, "%s\"%s\": {\n%s  \"group_size\": %d,\n%s  \"bits\": 4,\n%s  \"mode\": \"affine\"",
              ind, key, ind, GROUP, ind, ind);
    for (size_t i = 0; i < p->n; i++)
        if (p->it[i].kind == K_QMAT && p->it[i].bits != 4)
            sb_printf(b, ",\n%s  \"%s\": {\"group_size\": %d, \"bits\": %d}", ind, p->it[i].name,
                      GROUP, p->it[i].bits);
    sb_printf(b, "\n%s}", ind);
}

/* The text model's settings, as the released config.json spells them. */
static void cfg_text(sbuf *b, const plan *p, const char *in) {
    const synth_shape *s = p->s;
    const bool hybrid = s->family != SYNTH_QWEN3_MOE, q35 = s->family == SYNTH_QWEN3_5_MOE;
    sb_printf(b, "%s\"attention_bias\": false,\n%s\"attention_dropout\": 0.0,\n", in, in);
    if (s->bos >= 0)
        sb_printf(b, "%s\"bos_token_id\": %d,\n", in, s->bos);
    else
        sb_printf(b, "%s\"bos_token_id\": null,\n", in);
    sb_printf(b, "%s\"decoder_sparse_step\": 1,\n%s\"eos_token_id\": %d,\n", in, in, s->eos);
    if (hybrid)
        sb_printf(b, "%s\"full_attention_interval\": %d,\n", in, s->full_attention_interval);
    sb_printf(b, "%s\"head_dim\": %d,\n%s\"hidden_act\": \"silu\",\n%s\"hidden_size\": %d,\n", in,
              s->head_dim, in, in, s->hidden);
    sb_printf(b, "%s\"initializer_range\": 0.02,\n", in);
    if (s->dense_inter) sb_printf(b, "%s\"intermediate_size\": %d,\n", in, s->dense_inter);
    if (hybrid) {
        sb_printf(b, "%s\"layer_types\": [", in);
        for (int L = 0; L < s->n_layers; L++)
            sb_printf(b, "%s\"%s\"", L ? ", " : "",
                      (L + 1) % s->full_attention_interval ? "linear_attention" : "full_attention");
        sb_printf(b, "],\n%s\"linear_conv_kernel_dim\": %d,\n%s\"linear_key_head_dim\": %d,\n", in,
                  s->conv_kernel, in, s->lin_k_dim);
        sb_printf(b, "%s\"linear_num_key_heads\": %d,\n%s\"linear_num_value_heads\": %d,\n", in,
                  s->lin_k_heads, in, s->lin_v_heads);
        sb_printf(b, "%s\"linear_value_head_dim\": %d,\n", in, s->lin_v_dim);
    }
    sb_printf(b, "%s\"max_position_embeddings\": %d,\n%s\"mlp_only_layers\": [],\n", in, s->max_pos,
              in);
    sb_printf(b, "%s\"model_type\": \"%s\",\n", in,
              q35      ? "qwen3_5_moe_text"
              : hybrid ? "qwen3_next"
                       : "qwen3_moe");
    sb_printf(b, "%s\"moe_intermediate_size\": %d,\n%s\"norm_topk_prob\": true,\n", in,
              s->moe_inter, in);
    sb_printf(
        b,
        "%s\"num_attention_heads\": %d,\n%s\"num_experts\": %d,\n%s\"num_experts_per_tok\": %d,\n",
        in, s->n_heads, in, s->n_experts, in, s->top_k);
    sb_printf(b, "%s\"num_hidden_layers\": %d,\n%s\"num_key_value_heads\": %d,\n", in, s->n_layers,
              in, s->n_kv_heads);
    sb_printf(b, "%s\"output_router_logits\": false,\n%s\"rms_norm_eps\": 1e-06,\n", in, in);
    if (q35) {
        /* multimodal RoPE sections (text positions make it plain RoPE) */
        int half = (int)(s->head_dim * s->partial_rotary) / 2, a = (half + 2) / 3;
        sb_printf(
            b,
            "%s\"rope_parameters\": {\"mrope_interleaved\": true, \"mrope_section\": [%d, %d, %d], "
            "\"partial_rotary_factor\": %g, \"rope_theta\": %.1f, \"rope_type\": \"default\"},\n",
            in, a, a, half - 2 * a, s->partial_rotary, s->rope_theta);
    } else {
        if (hybrid) sb_printf(b, "%s\"partial_rotary_factor\": %g,\n", in, s->partial_rotary);
        sb_printf(b, "%s\"rope_scaling\": null,\n%s\"rope_theta\": %.1f,\n", in, in, s->rope_theta);
    }
    sb_printf(b, "%s\"router_aux_loss_coef\": 0.001,\n", in);
    if (hybrid) sb_printf(b, "%s\"shared_expert_intermediate_size\": %d,\n", in, s->shared_inter);
    if (!hybrid)
        sb_printf(b, "%s\"sliding_window\": null,\n%s\"use_sliding_window\": false,\n", in, in);
    sb_printf(
        b,
        "%s\"tie_word_embeddings\": false,\n%s\"dtype\": \"bfloat16\",\n%s\"use_cache\": true,\n",
        in, in, in);
    sb_printf(b, "%s\"vocab_size\": %d", in, s->vocab);
}

static char *config_json(const plan *p) {
    const synth_shape *s = p->s;
    const bool mlx = p->o.format == SYNTH_MLX, q35 = s->family == SYNTH_QWEN3_5_MOE;
    const char *arch = q35                             ? "Qwen3_5MoeForConditionalGeneration"
                       : s->family == SYNTH_QWEN3_NEXT ? "Qwen3NextForCausalLM"
                                                       : "Qwen3MoeForCausalLM";
    sbuf b = {0};
    sb_printf(&b, "{\n  \"architectures\": [\"%s\"],\n", arch);
    sb_printf(&b,
              "  \"edge0_synth\": {\"shape\": \"%s\", \"released\": \"%s\", \"format\": \"%s\", "
              "\"seed\": %llu, "
              "\"route_skew\": %g, \"routing\": \"%s\", \"writer\": \"edge0 synth\"},\n",
              s->name, s->released, mlx ? "mlx" : "hf", (unsigned long long)p->o.seed,
              p->o.route_skew, p->o.route_skew > 0 ? "zipf" : "near-uniform");
    if (q35) {
        sb_printf(&b, "  \"model_type\": \"qwen3_5_moe\",\n  \"tie_word_embeddings\": false,\n  "
                      "\"text_config\": {\n");
        cfg_text(&b, p, "    ");
        sb_printf(&b,
                  "\n  },\n  \"vision_config\": {\"model_type\": \"qwen3_5_moe\", \"depth\": 0}");
    } else {
        cfg_text(&b, p, "  ");
    }
    if (mlx) {
        sb_printf(&b, ",\n");
        cfg_quant(&b, p, "quantization", "  ");
        sb_printf(&b, ",\n");
        cfg_quant(&b, p, "quantization_config", "  ");
    }
    sb_printf(&b, "\n}\n");
    if (b.oom) {
        sb_free(&b);
        return NULL;
    }
    return b.p;
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* model.safetensors.index.json: {"metadata": {"total_size"}, "weight_map"}, names sorted. */
static char *index_json(const plan *p, char **files) {
    size_t n = 0;
    for (size_t i = 0; i < p->n; i++)
        n += p->it[i].kind == K_QMAT ? 3 : 1;
    char **lines = calloc(n, sizeof *lines);
    if (!lines) return NULL;
    size_t k = 0;
    bool oom = false;
    for (size_t i = 0; i < p->n && !oom; i++) {
        const item *t = &p->it[i];
        static const char *const sfx[] = {".biases", ".scales", ".weight"};
        int m = t->kind == K_QMAT ? 3 : 1;
        for (int j = 0; j < m; j++) {
            const char *f = strrchr(files[t->shard], '/') + 1;
            size_t len = strlen(t->name) + strlen(f) + 16;
            if (!(lines[k] = malloc(len))) {
                oom = true;
                break;
            }
            snprintf(lines[k++], len, "\"%s%s\": \"%s\"", t->name, m == 3 ? sfx[j] : "", f);
        }
    }
    sbuf b = {0};
    if (!oom) {
        qsort(lines, k, sizeof *lines, cmp_entry);
        sb_printf(&b, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {\n",
                  (unsigned long long)p->total_data);
        for (size_t i = 0; i < k; i++)
            sb_printf(&b, "    %s%s\n", lines[i], i + 1 < k ? "," : "");
        sb_printf(&b, "  }\n}\n");
    }
    for (size_t i = 0; i < k; i++)
        free(lines[i]);
    free(lines);
    if (oom || b.oom) {
        sb_free(&b);
        return NULL;
    }
    return b.p;
}

static int write_text(const char *path, const char *text, bool sync, char *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return e0_fail(err, E0_EIO, "%s: cannot create: %s", path, strerror(errno));
    int rc = pwrite_all(fd, text, strlen(text), 0) != 0 || (sync && fsync(fd) != 0);
    int e = errno;
    if (close(fd) != 0) rc = 1;
    return rc ? e0_fail(err, E0_EIO, "%s: write failed: %s", path, strerror(e)) : 0;
}

/* ---- the atomic directory ----------------------------------------------- */

static char *parent_dir(const char *path) {
    const char *sl = strrchr(path, '/');
    if (!sl) return strdup(".");
    if (sl == path) return strdup("/");
    return strndup(path, (size_t)(sl - path));
}

static int check_space(const char *dst, uint64_t need, char *err) {
    char *par = parent_dir(dst);
    if (!par) return e0_fail(err, E0_ENOMEM, "out of memory");
    struct statvfs v;
    int rc = 0;
    if (statvfs(par, &v) != 0) {
        rc = e0_fail(err, errno == ENOENT ? E0_ENOTFOUND : E0_EIO, "%s: %s", par, strerror(errno));
    } else {
        uint64_t avail = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
        if (avail < need + (64u << 20))
            rc = e0_fail(err, E0_EIO, "%s: the checkpoint needs %.2f GB but only %.2f GB are free",
                         par, (double)need / 1e9, (double)avail / 1e9);
    }
    free(par);
    return rc;
}

/* rename that never replaces an existing DST (rename(2) would replace an
 * empty directory). */
static int rename_noreplace(const char *from, const char *to) {
#ifdef RENAME_NOREPLACE
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -1;
#endif
    struct stat st;
    if (lstat(to, &st) == 0) {
        errno = EEXIST;
        return -1;
    }
    return rename(from, to);
}

static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

static int run_workers(writer *w, const synth_opts *o, double t0) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = o->n_threads > 0 ? o->n_threads : (int)(ncpu > 0 ? (ncpu < 8 ? ncpu : 8) : 2);
    if ((size_t)nt > w->njobs) nt = (int)w->njobs;
    if (nt < 1) nt = 1;
    pthread_t *th = calloc((size_t)nt, sizeof *th);
    if (!th) {
        w_fail(w, E0_ENOMEM, "out of memory");
        return -1;
    }
    int started = 0;
    atomic_store(&w->running, nt);
    for (; started < nt; started++)
        if (pthread_create(&th[started], NULL, worker, w) != 0) {
            atomic_fetch_sub(&w->running, nt - started);
            w_fail(w, E0_EIO, "cannot start a writer thread");
            break;
        }
    const uint64_t total = w->p->total_data;
    double last = 0;
    while (atomic_load(&w->running) > 0) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        if (w->cancel && *w->cancel) w_fail(w, E0_EINVAL, "interrupted");
        double t = now_s();
        if (t - last >= 0.1) {
            report(o, SYNTH_WRITING, atomic_load(&w->done), total, t0);
            last = t;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    if (!atomic_load(&w->failed) && atomic_load(&w->done) != total)
        w_fail(w, E0_EIO, "internal error: wrote %llu of %llu bytes",
               (unsigned long long)atomic_load(&w->done), (unsigned long long)total);
    if (!atomic_load(&w->failed)) report(o, SYNTH_WRITING, total, total, t0);
    return atomic_load(&w->failed) ? -1 : 0;
}

int synth_write_opts(const synth_shape *shape, const char *dst, const synth_opts *o, char *err) {
    synth_opts d;
    synth_opts_default(&d);
    if (!o) o = &d;
    if (!dst || !*dst) return e0_fail(err, E0_EINVAL, "no destination directory given");
    struct stat st;
    if (lstat(dst, &st) == 0)
        return e0_fail(err, E0_EINVAL, "%s already exists; remove it or choose another path", dst);
    const double t0 = now_s();
    plan p;
    int rc = plan_build(&p, shape, o, err);
    if (!rc) rc = check_space(dst, p.total_bytes, err);
    if (rc) {
        plan_free(&p);
        return rc;
    }
    writer w = {.p = &p, .cancel = o->cancel};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    size_t tl = strlen(dst) + 16;
    char *tmp = malloc(tl), *cfg = NULL, *idx = NULL, *cfg_path = NULL, *idx_path = NULL;
    w.fds = malloc((size_t)p.nshards * sizeof *w.fds);
    w.paths = calloc((size_t)p.nshards, sizeof *w.paths);
    int nopen = 0;
    bool made_dir = false;
    if (!tmp || !w.fds || !w.paths) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
        goto done;
    }
    snprintf(tmp, tl, "%s.tmp-XXXXXX", dst);
    if (!mkdtemp(tmp)) {
        rc = e0_fail(err, E0_EIO, "%s: cannot create a directory next to it: %s", dst,
                     strerror(errno));
        goto done;
    }
    made_dir = true;
    chmod(tmp, 0755); /* mkdtemp makes it 0700; a model directory is shared */
    if ((rc = make_jobs(&w, err))) goto done;
    /* Shards: created, space reserved up front (ENOSPC now, not at 90%), headers written. */
    for (int sh = 0; sh < p.nshards; sh++) {
        char name[64];
        if (p.nshards == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else
            snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", sh + 1, p.nshards);
        if (!(w.paths[sh] = e0_path_join(tmp, name))) {
            rc = e0_fail(err, E0_ENOMEM, "out of memory");
            goto done;
        }
        w.fds[sh] = open(w.paths[sh], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (w.fds[sh] < 0) {
            rc = e0_fail(err, E0_EIO, "%s: cannot create: %s", w.paths[sh], strerror(errno));
            goto done;
        }
        nopen++;
        const uint64_t size = p.hdr_len[sh] + p.data_bytes[sh];
        int e = posix_fallocate(w.fds[sh], 0, (off_t)size);
        if (e && e != EOPNOTSUPP && e != EINVAL) {
            rc = e0_fail(err, E0_EIO, "%s: cannot reserve %.2f GB: %s", w.paths[sh],
                         (double)size / 1e9, strerror(e));
            goto done;
        }
        if (e && ftruncate(w.fds[sh], (off_t)size) != 0) {
            rc = e0_fail(err, E0_EIO, "%s: cannot size: %s", w.paths[sh], strerror(errno));
            goto done;
        }
        if (pwrite_all(w.fds[sh], p.hdr[sh], p.hdr_len[sh], 0) != 0) {
            rc = e0_fail(err, E0_EIO, "%s: write failed: %s", w.paths[sh], strerror(errno));
            goto done;
        }
    }
    if (run_workers(&w, o, t0) != 0) {
        rc = e0_fail(err, w.err_code ? w.err_code : E0_EIO, "%s", w.err);
        goto done;
    }
    if (!o->no_sync) {
        report(o, SYNTH_SYNCING, p.total_data, p.total_data, t0);
        for (int sh = 0; sh < p.nshards; sh++)
            if (fsync(w.fds[sh]) != 0) {
                rc = e0_fail(err, E0_EIO, "%s: fsync failed: %s", w.paths[sh], strerror(errno));
                goto done;
            }
    }
    if (!(cfg = config_json(&p)) || !(cfg_path = e0_path_join(tmp, "config.json"))) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = write_text(cfg_path, cfg, !o->no_sync, err))) goto done;
    if (p.nshards > 1) {
        if (!(idx = index_json(&p, w.paths)) ||
            !(idx_path = e0_path_join(tmp, "model.safetensors.index.json"))) {
            rc = e0_fail(err, E0_ENOMEM, "out of memory");
            goto done;
        }
        if ((rc = write_text(idx_path, idx, !o->no_sync, err))) goto done;
    }
    if (o->cancel && *o->cancel) {
        rc = e0_fail(err, E0_EINVAL, "interrupted");
        goto done;
    }
    if (!o->no_sync) sync_dir(tmp);
    for (int sh = 0; sh < nopen; sh++)
        if (close(w.fds[sh]) != 0 && !rc)
            rc = e0_fail(err, E0_EIO, "%s: close failed: %s", w.paths[sh], strerror(errno));
    nopen = 0;
    if (rc) goto done;
    if (rename_noreplace(tmp, dst) != 0) {
        rc = e0_fail(err, errno == EEXIST || errno == ENOTEMPTY ? E0_EINVAL : E0_EIO,
                     "rename %s -> %s: %s", tmp, dst, strerror(errno));
        goto done;
    }
    made_dir = false;
    if (!o->no_sync) {
        char *par = parent_dir(dst);
        if (par) sync_dir(par);
        free(par);
    }
    report(o, SYNTH_DONE, p.total_data, p.total_data, t0);
done:
    for (int sh = 0; sh < nopen; sh++)
        close(w.fds[sh]);
    if (made_dir) { /* leave nothing that looks finished */
        for (int sh = 0; sh < p.nshards && w.paths; sh++)
            if (w.paths[sh]) unlink(w.paths[sh]);
        if (cfg_path) unlink(cfg_path);
        if (idx_path) unlink(idx_path);
        rmdir(tmp);
    }
    for (int sh = 0; w.paths && sh < p.nshards; sh++)
        free(w.paths[sh]);
    free(w.paths);
    free(w.fds);
    free(w.jobs);
    free(tmp);
    free(cfg);
    free(idx);
    free(cfg_path);
    free(idx_path);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    plan_free(&p);
    return rc;
}

int synth_write(const synth_shape *shape, const char *dst, uint64_t seed, char *err) {
    synth_opts o;
    synth_opts_default(&o);
    o.seed = seed;
    return synth_write_opts(shape, dst, &o, err);
}
