/* edge0 synth: random-weight checkpoints of real shapes, streamed to disk.
 * The header (synth.h) explains the formats and the scaling; this file is
 * in four parts: shapes, the plan (every tensor's name, shape, dtype), the
 * generators (one job of rows at a time) and config.json; io/stwriter.c
 * lays out and writes the shards (threads, progress, atomic directory). */
#include "synth/synth.h"
#include "synth/synth_int.h"

#include "io/safetensors.h"
#include "io/stwriter.h"
#include "util/arr.h"
#include "util/err.h"
#include "util/sbuf.h"
#include "util/file.h"
#include "util/num.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "synth.c stores packed codes and bf16 values in host byte order, which must be little-endian"
#endif

/* ======================================================================
 * Shapes. Numbers from the released config.json files (text model).
 * ====================================================================== */

/* clang-format off */
static const e0_synth_shape SHAPES[] = {
    {.name = "qwen3.6-35b-a3b", .released = "Qwen/Qwen3.6-35B-A3B", .family = E0_SYNTH_QWEN3_5_MOE,
     .hidden = 2048, .n_layers = 40, .vocab = 248320,
     .n_heads = 16, .n_kv_heads = 2, .head_dim = 256, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 16, .lin_v_heads = 32, .lin_k_dim = 128, .lin_v_dim = 128, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 256, .top_k = 8, .moe_inter = 512, .shared_inter = 512,
     .max_pos = 262144, .bos = -1, .eos = 248046},
    {.name = "qwen3-30b-a3b", .released = "Qwen/Qwen3-30B-A3B", .family = E0_SYNTH_QWEN3_MOE,
     .hidden = 2048, .n_layers = 48, .vocab = 151936,
     .n_heads = 32, .n_kv_heads = 4, .head_dim = 128, .partial_rotary = 1.0, .rope_theta = 1e6,
     .n_experts = 128, .top_k = 8, .moe_inter = 768, .dense_inter = 6144,
     .max_pos = 40960, .bos = 151643, .eos = 151645},
    {.name = "qwen3-next-80b-a3b", .released = "Qwen/Qwen3-Next-80B-A3B-Instruct",
     .family = E0_SYNTH_QWEN3_NEXT,
     .hidden = 2048, .n_layers = 48, .vocab = 151936,
     .n_heads = 16, .n_kv_heads = 2, .head_dim = 256, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 16, .lin_v_heads = 32, .lin_k_dim = 128, .lin_v_dim = 128, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 512, .top_k = 10, .moe_inter = 512, .shared_inter = 512, .dense_inter = 5120,
     .max_pos = 262144, .bos = 151643, .eos = 151645},
    {.name = "qwen3.5-122b-a10b", .released = "Qwen/Qwen3.5-122B-A10B", .family = E0_SYNTH_QWEN3_5_MOE,
     .hidden = 3072, .n_layers = 48, .vocab = 248320,
     .n_heads = 32, .n_kv_heads = 2, .head_dim = 256, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 16, .lin_v_heads = 64, .lin_k_dim = 128, .lin_v_dim = 128, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 256, .top_k = 8, .moe_inter = 1024, .shared_inter = 1024,
     .max_pos = 262144, .bos = -1, .eos = 248046},
    /* A Qwen3.5/3.6-style hybrid small enough to build in a second, with the
     * Qwen3 tokenizer's vocabulary so it can run real text (edge0 demo). */
    {.name = "tiny", .released = "", .family = E0_SYNTH_QWEN3_5_MOE,
     .hidden = 256, .n_layers = 4, .vocab = 151936,
     .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 2, .lin_v_heads = 4, .lin_k_dim = 64, .lin_v_dim = 64, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 32, .top_k = 4, .moe_inter = 128, .shared_inter = 128,
     .max_pos = 262144, .bos = -1, .eos = 151645},
    /* Qwen3.6-35B-A3B's layers and experts at full width, 4 of its 40
     * layers (3 DeltaNet + 1 attention, its mix) and the vocabulary cut to
     * 32768: per token about a tenth of the real shape's dense and routed
     * bytes, in the same proportions, in ~1.9 GB (benchmarks of decode and
     * batching on machines that cannot hold the real shape). */
    {.name = "mid", .released = "", .family = E0_SYNTH_QWEN3_5_MOE,
     .hidden = 2048, .n_layers = 4, .vocab = 32768,
     .n_heads = 16, .n_kv_heads = 2, .head_dim = 256, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 16, .lin_v_heads = 32, .lin_k_dim = 128, .lin_v_dim = 128, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 256, .top_k = 8, .moe_inter = 512, .shared_inter = 512,
     .max_pos = 262144, .bos = -1, .eos = 32767},
    /* tiny's width with a released model's expert count and top-k, for
     * routing studies (synth --route-profile) that need E and k right. */
    {.name = "tiny-e256", .released = "", .family = E0_SYNTH_QWEN3_5_MOE,
     .hidden = 256, .n_layers = 4, .vocab = 151936,
     .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 2, .lin_v_heads = 4, .lin_k_dim = 64, .lin_v_dim = 64, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 256, .top_k = 8, .moe_inter = 64, .shared_inter = 128,
     .max_pos = 262144, .bos = -1, .eos = 151645},
    {.name = "tiny-e128", .released = "", .family = E0_SYNTH_QWEN3_MOE,
     .hidden = 256, .n_layers = 4, .vocab = 151936,
     .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .partial_rotary = 1.0, .rope_theta = 1e6,
     .n_experts = 128, .top_k = 8, .moe_inter = 64, .dense_inter = 512,
     .max_pos = 40960, .bos = 151643, .eos = 151645},
    /* The same for the other two families (tests). */
    {.name = "tiny-qwen3moe", .released = "", .family = E0_SYNTH_QWEN3_MOE,
     .hidden = 256, .n_layers = 4, .vocab = 151936,
     .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .partial_rotary = 1.0, .rope_theta = 1e6,
     .n_experts = 32, .top_k = 4, .moe_inter = 128, .dense_inter = 512,
     .max_pos = 40960, .bos = 151643, .eos = 151645},
    {.name = "tiny-qwen3next", .released = "", .family = E0_SYNTH_QWEN3_NEXT,
     .hidden = 256, .n_layers = 4, .vocab = 151936,
     .n_heads = 4, .n_kv_heads = 2, .head_dim = 64, .partial_rotary = 0.25, .rope_theta = 1e7,
     .lin_k_heads = 2, .lin_v_heads = 4, .lin_k_dim = 64, .lin_v_dim = 64, .conv_kernel = 4,
     .full_attention_interval = 4,
     .n_experts = 32, .top_k = 4, .moe_inter = 128, .shared_inter = 128, .dense_inter = 512,
     .max_pos = 262144, .bos = 151643, .eos = 151645},
};
/* clang-format on */

#define N_SHAPES (sizeof SHAPES / sizeof *SHAPES)

const e0_synth_shape *e0_synth_find(const char *name) {
    for (size_t i = 0; name && i < N_SHAPES; i++)
        if (strcmp(SHAPES[i].name, name) == 0) return &SHAPES[i];
    return NULL;
}

const char *e0_synth_names(void) {
    return "qwen3.6-35b-a3b, qwen3-30b-a3b, qwen3-next-80b-a3b, qwen3.5-122b-a10b, tiny, mid, "
           "tiny-qwen3moe, "
           "tiny-qwen3next, tiny-e256, tiny-e128";
}

size_t e0_synth_count(void) {
    return N_SHAPES;
}

const e0_synth_shape *e0_synth_at(size_t i) {
    return i < N_SHAPES ? &SHAPES[i] : NULL;
}

void e0_synth_opts_default(e0_synth_opts *o) {
    memset(o, 0, sizeof *o);
    o->format = E0_SYNTH_MLX;
    o->seed = 1;
}

/* ======================================================================
 * Scaling: the stds are synth_common.c's (synth_gains_of).
 * ====================================================================== */

#define SKEW_AMP 0.5f /* per-element amplitude of the planted direction in the embedding */

typedef synth_gains gains;

/* ======================================================================
 * The plan: every tensor, its shard and offset, before any byte is written.
 * ====================================================================== */

#define NAME_LEN    112
#define GROUP       SYNTH_GROUP
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
} item;

typedef struct {
    const e0_synth_shape *s;
    e0_synth_opts o;
    gains g;
    item *it;
    size_t n, cap;
    bool oom;
    stw w; /* the output's shards, headers and jobs */
    uint64_t params;
    int8_t *sign; /* [hidden / GROUP]: planted direction, +-1 per group */
    float skew_amp;
} plan;

static item *add_item(plan *p, const char *name, item_kind kind, int ndim, const uint64_t *shape) {
    if (arr_reserve((void **)&p->it, &p->cap, p->n + 1, sizeof *p->it)) {
        p->oom = true;
        return NULL;
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
    const bool mlx = p->o.format == E0_SYNTH_MLX;
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
    if (mlx)
        t->bits = (uint8_t)bits;
    else
        t->dtype = ST_BF16;
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
    p->params += (uint64_t)(rows * cols);
}

static void add_norm(plan *p, const char *name, int64_t n, float base) {
    uint64_t sh[1] = {(uint64_t)n};
    add_vec(p, name, K_NORM, 1, sh, ST_BF16, 1, n, base);
}

#define NM(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)

static void plan_deltanet(plan *p, const char *b, bool mlx) {
    const e0_synth_shape *s = p->s;
    const gains *g = &p->g;
    const int64_t H = s->hidden, Kd = (int64_t)s->lin_k_heads * s->lin_k_dim;
    const int64_t Vd = (int64_t)s->lin_v_heads * s->lin_v_dim, Hv = s->lin_v_heads, C = 2 * Kd + Vd;
    char nm[NAME_LEN];
    if (s->family == E0_SYNTH_QWEN3_NEXT) {
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
    const e0_synth_shape *s = p->s;
    const gains *g = &p->g;
    const int64_t H = s->hidden, hd = s->head_dim, gated = s->family != E0_SYNTH_QWEN3_MOE ? 2 : 1;
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
    const e0_synth_shape *s = p->s;
    const gains *g = &p->g;
    const int64_t H = s->hidden, I = s->moe_inter, E = s->n_experts, Is = s->shared_inter;
    char nm[NAME_LEN];
    add_mat(p, NM("%smlp.gate", b), 0, E, H, g->router, 8, p->skew_amp > 0 ? DIR_ROUTER : DIR_NONE,
            layer, false);
    if (mlx) {
        add_mat(p, NM("%smlp.switch_mlp.gate_proj", b), E, I, H, g->in, 4, DIR_NONE, -1, false);
        add_mat(p, NM("%smlp.switch_mlp.up_proj", b), E, I, H, g->in, 4, DIR_NONE, -1, false);
        add_mat(p, NM("%smlp.switch_mlp.down_proj", b), E, H, I, g->down, 4, DIR_NONE, -1, false);
    } else if (s->family == E0_SYNTH_QWEN3_5_MOE) {
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
    if (s->family == E0_SYNTH_QWEN3_MOE) return;
    add_mat(p, NM("%smlp.shared_expert.gate_proj", b), 0, Is, H, g->in, 4, DIR_NONE, -1, false);
    add_mat(p, NM("%smlp.shared_expert.up_proj", b), 0, Is, H, g->in, 4, DIR_NONE, -1, false);
    add_mat(p, NM("%smlp.shared_expert.down_proj", b), 0, H, Is, g->sh_down, 4, DIR_NONE, -1,
            false);
    add_mat(p, NM("%smlp.shared_expert_gate", b), 0, 1, H, g->in, 8, DIR_NONE, -1, false);
}

static void plan_tensors(plan *p) {
    const e0_synth_shape *s = p->s;
    const bool mlx = p->o.format == E0_SYNTH_MLX, q35 = s->family == E0_SYNTH_QWEN3_5_MOE;
    const bool hybrid = s->family != E0_SYNTH_QWEN3_MOE;
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

/* The plan as the writer's items: shards of at most shard_bytes, jobs of
 * about CHUNK_BYTES; a vector is one row, so one job (gen_vec draws it
 * whole from one stream). */
static int plan_layout(plan *p, char *err) {
    stw_item *d = stw_items(&p->w, p->n);
    if (!d) return e0_fail(err, E0_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->n; i++) {
        const item *t = &p->it[i];
        const bool mat = t->kind == K_QMAT || t->kind == K_BMAT;
        d[i] = (stw_item){.name = t->name,
                          .bits = t->kind == K_QMAT ? t->bits : 0,
                          .group = GROUP,
                          .dtype = (st_dtype)t->dtype,
                          .ndim = t->ndim,
                          .rows = mat ? t->rows : 1,
                          .cols = mat ? t->cols : t->rows * t->cols};
        memcpy(d[i].shape, t->shape, sizeof t->shape);
    }
    const stw_layout_opts lo = {.shard_bytes = p->o.shard_bytes,
                                .job_bytes = CHUNK_BYTES,
                                .format = p->o.format == E0_SYNTH_MLX ? "mlx" : "pt"};
    return stw_layout(&p->w, &lo, err);
}

static void plan_free(plan *p) {
    stw_free(&p->w);
    free(p->it);
    free(p->sign);
    memset(p, 0, sizeof *p);
}

static int plan_build(plan *p, const e0_synth_shape *s, const e0_synth_opts *o, char *err) {
    memset(p, 0, sizeof *p);
    if (!s) return e0_fail(err, E0_EINVAL, "no shape given");
    if (o->format != E0_SYNTH_MLX && o->format != E0_SYNTH_HF)
        return e0_fail(err, E0_EINVAL, "unknown format");
    if (!(o->route_skew >= 0 && o->route_skew <= 8))
        return e0_fail(err, E0_EINVAL, "route skew %g is outside [0, 8]", o->route_skew);
    if (!(o->route_stickiness >= 0 && o->route_stickiness <= 1))
        return e0_fail(err, E0_EINVAL, "route stickiness %g is outside [0, 1]",
                       o->route_stickiness);
    const synth_route *rt;
    int rc = synth_route_of(o, &rt, err);
    if (rc) return rc;
    if (s->hidden % GROUP || s->moe_inter % GROUP || (s->shared_inter && s->shared_inter % GROUP) ||
        (s->head_dim * s->n_heads) % GROUP || (s->lin_v_dim * s->lin_v_heads) % GROUP)
        return e0_fail(err, E0_EINVAL, "shape %s: dimensions must be multiples of %d", s->name,
                       GROUP);
    p->s = s;
    p->o = *o;
    p->g = synth_gains_of(s);
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

int e0_synth_plan_info(const e0_synth_shape *shape, const e0_synth_opts *o, e0_synth_info *info, char *err) {
    e0_synth_opts d;
    e0_synth_opts_default(&d);
    if (o && o->format == E0_SYNTH_GGUF) return synth_gguf_plan_info(shape, o, info, err);
    memset(info, 0, sizeof *info);
    plan p;
    int rc = plan_build(&p, shape, o ? o : &d, err);
    if (!rc) {
        info->bytes = p.w.total_bytes;
        info->params = p.params;
        info->n_shards = p.w.nshards;
        info->n_tensors = p.w.n_tensors;
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
 * direction itself; DIR_ROUTER: the expert's logit offset), malloc'd:
 * `coef[r]` is the amplitude of row r0 + r; the group pattern is p->sign.
 * NULL when out of memory. */
static float *row_coefs(const plan *p, const item *t, int64_t r0, int64_t n) {
    float *coef = malloc((size_t)n * sizeof *coef);
    if (!coef || t->dir == DIR_EMBED) {
        for (int64_t r = 0; coef && r < n; r++)
            coef[r] = p->skew_amp;
        return coef;
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
        free(coef);
        return NULL;
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
    return coef;
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
    for (int64_t row = 0; row < n; row++)
        for (int64_t g = 0; g < G; g++) {
            float v[GROUP];
            float add = -synth_group_uniform(r, t->std, v) / (float)GROUP;
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
    static const synth_vkind vk[] = {[K_NORM] = SYNTH_V_NORM, [K_ALOG] = SYNTH_V_ALOG,
                                     [K_DTBIAS] = SYNTH_V_DTBIAS, [K_CONV] = SYNTH_V_CONV};
    const int64_t n = t->rows * t->cols;
    for (int64_t i = 0; i < n; i++)
        put_val(t->dtype, out, i, synth_vec_value(r, vk[t->kind], t->base, t->cols));
}

/* Rows [r0, r0 + n) of one item, from the stream of (seed, item, r0):
 * the same bytes whatever the thread count. */
static void produce(void *ctx, stw_run *r, const stw_job *j, const stw_out *out) {
    const plan *p = ctx;
    const item *t = &p->it[j->item];
    xrng rng;
    xr_seed(&rng, p->o.seed, j->item, (uint64_t)j->r0);
    float *coef = NULL;
    if (t->dir != DIR_NONE && !(coef = row_coefs(p, t, j->r0, j->n))) {
        stw_fail(r, E0_ENOMEM, "out of memory");
        return;
    }
    if (t->kind == K_QMAT)
        gen_qmat(p, t, &rng, j->n, coef, out->w, out->scales, out->biases);
    else if (t->kind == K_BMAT)
        gen_bmat(p, t, &rng, j->n, coef, (uint16_t *)(void *)out->w);
    else
        gen_vec(t, &rng, out->w);
    free(coef);
}

/* ---- config.json -------------------------------------------------------- */

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
    const e0_synth_shape *s = p->s;
    const bool hybrid = s->family != E0_SYNTH_QWEN3_MOE, q35 = s->family == E0_SYNTH_QWEN3_5_MOE;
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
    const e0_synth_shape *s = p->s;
    const bool mlx = p->o.format == E0_SYNTH_MLX, q35 = s->family == E0_SYNTH_QWEN3_5_MOE;
    const char *arch = q35                             ? "Qwen3_5MoeForConditionalGeneration"
                       : s->family == E0_SYNTH_QWEN3_NEXT ? "Qwen3NextForCausalLM"
                                                       : "Qwen3MoeForCausalLM";
    sbuf b = {0};
    sb_printf(&b, "{\n  \"architectures\": [\"%s\"],\n", arch);
    const synth_route *rt = NULL;
    char dummy[E0_ERR_MAX];
    synth_route_of(&p->o, &rt, dummy); /* checked by plan_build */
    sb_printf(&b,
              "  \"edge0_synth\": {\"shape\": \"%s\", \"released\": \"%s\", \"format\": \"%s\", "
              "\"seed\": %llu, "
              "\"route_skew\": %g, \"route_stickiness\": %g, \"routing\": \"%s\", ",
              s->name, s->released, mlx ? "mlx" : "hf", (unsigned long long)p->o.seed,
              p->o.route_skew, p->o.route_stickiness,
              rt ? "profile" : p->o.route_skew > 0 ? "zipf" : "near-uniform");
    if (rt)
        sb_printf(&b,
                  "\"route_profile\": \"%s\", \"route_popularity\": %g, \"route_recent\": %g, "
                  "\"route_window\": %g, \"route_decay\": %g, \"route_window_len\": %d, "
                  "\"route_seed\": %llu, ",
                  rt->name, rt->popularity, rt->recent, rt->window, rt->decay, rt->window_len,
                  (unsigned long long)(p->o.seed & ((1ull << 53) - 1)));
    sb_printf(&b, "\"writer\": \"edge0 synth\"},\n");
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

/* config.json, next to the shards. */
static int finish(void *ctx, const char *dir, bool sync, char *err) {
    char *cfg = config_json(ctx), *path = e0_path_join(dir, "config.json");
    int rc = cfg && path ? stw_write_text(path, cfg, sync, err)
                         : e0_fail(err, E0_ENOMEM, "out of memory");
    free(cfg);
    free(path);
    return rc;
}

/* The progress of the writer as synth reports it: data bytes written. */
static void on_progress(void *ctx, const stw_progress *sp) {
    const plan *p = ctx;
    _Static_assert((int)STW_SYNCING == (int)E0_SYNTH_SYNCING && (int)STW_DONE == (int)E0_SYNTH_DONE,
                   "phases map one to one");
    const e0_synth_progress pr = {.phase = (e0_synth_phase)sp->phase,
                               .done = sp->written,
                               .total = p->w.total_data,
                               .seconds = sp->seconds};
    p->o.progress(p->o.progress_ctx, &pr);
}

int e0_synth_write_opts(const e0_synth_shape *shape, const char *dst, const e0_synth_opts *o, char *err) {
    e0_synth_opts d;
    e0_synth_opts_default(&d);
    if (!o) o = &d;
    if (!dst || !*dst) return e0_fail(err, E0_EINVAL, "no destination directory given");
    if (o->format == E0_SYNTH_GGUF) return synth_gguf_write(shape, dst, o, err);
    struct stat st;
    if (lstat(dst, &st) == 0)
        return e0_fail(err, E0_EINVAL, "%s already exists; remove it or choose another path", dst);
    const double t0 = stw_now();
    plan p;
    int rc = plan_build(&p, shape, o, err);
    if (!rc) {
        const stw_write_opts wo = {.n_threads = o->n_threads,
                                   .sync = !o->no_sync,
                                   .sparse = o->sparse,
                                   .t0 = t0,
                                   .cancel = o->cancel,
                                   .ctx = &p,
                                   .produce = produce,
                                   .finish = finish,
                                   .progress = o->progress ? on_progress : NULL};
        rc = stw_write(&p.w, dst, &wo, err);
    }
    plan_free(&p);
    return rc;
}

int e0_synth_write(const e0_synth_shape *shape, const char *dst, uint64_t seed, char *err) {
    e0_synth_opts o;
    e0_synth_opts_default(&o);
    o.seed = seed;
    return e0_synth_write_opts(shape, dst, &o, err);
}
