#include "model/synth.h"

#include "io/safetensors.h"
#include "quant/quantize.h"
#include "util/err.h"
#include "util/file.h"
#include "util/num.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const synth_shape SHAPES[] = {
    /* A Qwen3.5/3.6-style hybrid small enough to build in a second, with the
     * Qwen3 tokenizer's vocabulary so it can run real text. */
    {.name = "tiny", .hidden = 256, .n_layers = 4, .vocab = 151936, .n_heads = 4, .n_kv_heads = 2,
     .head_dim = 64, .partial_rotary = 0.25, .rope_theta = 1e7, .lin_k_heads = 2, .lin_v_heads = 4,
     .lin_k_dim = 64, .lin_v_dim = 64, .conv_kernel = 4, .full_attention_interval = 4,
     .n_experts = 32, .top_k = 4, .moe_inter = 128, .shared_inter = 128},
};

const synth_shape *synth_find(const char *name) {
    for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++)
        if (strcmp(SHAPES[i].name, name) == 0) return &SHAPES[i];
    return NULL;
}

const char *synth_names(void) { return "tiny"; }

/* ---- deterministic random numbers (splitmix64 + Box-Muller) ------------ */

typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float rng_uniform(rng *r) { return (float)((rng_next(r) >> 11) * (1.0 / 9007199254740992.0)); }

static float rng_normal(rng *r) {
    float u = rng_uniform(r), v = rng_uniform(r);
    return sqrtf(-2.0f * logf(u + 1e-12f)) * cosf(6.2831853f * v);
}

/* ---- tensor list ------------------------------------------------------- */

typedef struct {
    st_wtensor *t;
    void **owned;
    size_t n, cap;
    rng r;
    char prefix[64];
    char *qkeys; /* JSON text of the per-module quantization overrides */
    size_t qlen, qcap;
} builder;

static int add(builder *b, const char *name, st_dtype dt, int ndim, const uint64_t *shape, void *data) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        st_wtensor *t = realloc(b->t, cap * sizeof *t);
        if (!t) return -1;
        b->t = t;
        void **o = realloc(b->owned, cap * sizeof *o);
        if (!o) return -1;
        b->owned = o;
        b->cap = cap;
    }
    char *nm = strdup(name);
    if (!nm || !data) {
        free(nm);
        free(data);
        return -1;
    }
    st_wtensor *t = &b->t[b->n];
    *t = (st_wtensor){.name = nm, .dtype = dt, .ndim = ndim, .data = data};
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    b->owned[b->n++] = data;
    return 0;
}

/* A quantized matrix [lead x rows, cols] of N(0, std^2) values. */
static int add_qmat(builder *b, const char *base, int64_t lead, int64_t rows, int64_t cols, float std, int bits) {
    const int group = 64;
    int64_t R = (lead ? lead : 1) * rows, W = cols * bits / 32, G = cols / group;
    uint32_t *w = malloc((size_t)(R * W) * sizeof *w);
    uint16_t *s = malloc((size_t)(R * G) * sizeof *s), *bi = malloc((size_t)(R * G) * sizeof *bi);
    float *row = malloc((size_t)cols * sizeof *row);
    if (!w || !s || !bi || !row) {
        free(w), free(s), free(bi), free(row);
        return -1;
    }
    for (int64_t r = 0; r < R; r++) {
        for (int64_t c = 0; c < cols; c++) row[c] = std * rng_normal(&b->r);
        quant_row(row, cols, bits, group, w + r * W, s + r * G, bi + r * G);
    }
    free(row);
    char nm[256];
    uint64_t sh[3], *p = sh;
    int nd = lead ? 3 : 2;
    if (lead) *p++ = (uint64_t)lead;
    p[0] = (uint64_t)rows;
    p[1] = (uint64_t)W;
    snprintf(nm, sizeof nm, "%s.weight", base);
    int rc = add(b, nm, ST_U32, nd, sh, w);
    p[1] = (uint64_t)G;
    snprintf(nm, sizeof nm, "%s.scales", base);
    rc |= add(b, nm, ST_BF16, nd, sh, s);
    snprintf(nm, sizeof nm, "%s.biases", base);
    rc |= add(b, nm, ST_BF16, nd, sh, bi);
    if (bits != 4) {
        char entry[320];
        int n = snprintf(entry, sizeof entry, ",\n    \"%s\": {\"group_size\": %d, \"bits\": %d}", base, group, bits);
        if (b->qlen + (size_t)n + 1 > b->qcap) {
            size_t cap = b->qcap ? 2 * b->qcap : 4096;
            char *q = realloc(b->qkeys, cap);
            if (!q) return -1;
            b->qkeys = q;
            b->qcap = cap;
        }
        memcpy(b->qkeys + b->qlen, entry, (size_t)n + 1);
        b->qlen += (size_t)n;
    }
    return rc;
}

/* A bf16 (or f32) vector: base + std * N(0, 1). */
static int add_vec(builder *b, const char *name, int64_t n, float base, float std, bool f32) {
    uint64_t sh[1] = {(uint64_t)n};
    if (f32) {
        float *v = malloc((size_t)n * sizeof *v);
        for (int64_t i = 0; v && i < n; i++) v[i] = base + std * rng_normal(&b->r);
        return add(b, name, ST_F32, 1, sh, v);
    }
    uint16_t *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; v && i < n; i++) v[i] = e0_f32_to_bf16(base + std * rng_normal(&b->r));
    return add(b, name, ST_BF16, 1, sh, v);
}

static int build(builder *b, const synth_shape *s) {
    const int64_t H = s->hidden, hd = s->head_dim, I = s->moe_inter, E = s->n_experts;
    const int64_t Kd = (int64_t)s->lin_k_heads * s->lin_k_dim, Vd = (int64_t)s->lin_v_heads * s->lin_v_dim;
    const int64_t C = 2 * Kd + Vd, Hv = s->lin_v_heads;
    const float sH = 1.0f / sqrtf((float)H);
    char nm[256];
    int rc = 0;
#define P(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)
    rc |= add_qmat(b, P("%sembed_tokens", b->prefix), 0, s->vocab, H, 1.0f, 4);
    rc |= add_qmat(b, "language_model.lm_head", 0, s->vocab, H, sH, 4);
    rc |= add_vec(b, P("%snorm.weight", b->prefix), H, 1.0f, 0.02f, false);
    for (int L = 0; L < s->n_layers && !rc; L++) {
        char base[128];
        snprintf(base, sizeof base, "%slayers.%d.", b->prefix, L);
        bool linear = (L + 1) % s->full_attention_interval != 0;
        rc |= add_vec(b, P("%sinput_layernorm.weight", base), H, 1.0f, 0.02f, false);
        rc |= add_vec(b, P("%spost_attention_layernorm.weight", base), H, 1.0f, 0.02f, false);
        if (linear) {
            rc |= add_qmat(b, P("%slinear_attn.in_proj_qkv", base), 0, C, H, sH, 4);
            rc |= add_qmat(b, P("%slinear_attn.in_proj_z", base), 0, Vd, H, sH, 4);
            rc |= add_qmat(b, P("%slinear_attn.in_proj_b", base), 0, Hv, H, sH, 4);
            rc |= add_qmat(b, P("%slinear_attn.in_proj_a", base), 0, Hv, H, sH, 4);
            rc |= add_qmat(b, P("%slinear_attn.out_proj", base), 0, H, Vd, 1.0f / sqrtf((float)Vd), 4);
            uint64_t cs[3] = {(uint64_t)C, (uint64_t)s->conv_kernel, 1};
            uint16_t *cw = malloc((size_t)(C * s->conv_kernel) * sizeof *cw);
            for (int64_t i = 0; cw && i < C * s->conv_kernel; i++)
                cw[i] = e0_f32_to_bf16(rng_normal(&b->r) / sqrtf((float)s->conv_kernel));
            rc |= add(b, P("%slinear_attn.conv1d.weight", base), ST_BF16, 3, cs, cw);
            /* A in [1, 16) as the released models initialise it; dt_bias 1 */
            uint64_t hs[1] = {(uint64_t)Hv};
            float *al = malloc((size_t)Hv * sizeof *al);
            for (int64_t i = 0; al && i < Hv; i++) al[i] = logf(1.0f + 15.0f * rng_uniform(&b->r));
            rc |= add(b, P("%slinear_attn.A_log", base), ST_F32, 1, hs, al);
            rc |= add_vec(b, P("%slinear_attn.dt_bias", base), Hv, 1.0f, 0.0f, false);
            rc |= add_vec(b, P("%slinear_attn.norm.weight", base), s->lin_v_dim, 1.0f, 0.02f, false);
        } else {
            rc |= add_qmat(b, P("%sself_attn.q_proj", base), 0, (int64_t)s->n_heads * hd * 2, H, sH, 4);
            rc |= add_qmat(b, P("%sself_attn.k_proj", base), 0, (int64_t)s->n_kv_heads * hd, H, sH, 4);
            rc |= add_qmat(b, P("%sself_attn.v_proj", base), 0, (int64_t)s->n_kv_heads * hd, H, sH, 4);
            rc |= add_qmat(b, P("%sself_attn.o_proj", base), 0, H, (int64_t)s->n_heads * hd,
                           1.0f / sqrtf((float)(s->n_heads * hd)), 4);
            rc |= add_vec(b, P("%sself_attn.q_norm.weight", base), hd, 1.0f, 0.02f, false);
            rc |= add_vec(b, P("%sself_attn.k_norm.weight", base), hd, 1.0f, 0.02f, false);
        }
        rc |= add_qmat(b, P("%smlp.gate", base), 0, E, H, sH, 8);
        rc |= add_qmat(b, P("%smlp.switch_mlp.gate_proj", base), E, I, H, sH, 4);
        rc |= add_qmat(b, P("%smlp.switch_mlp.up_proj", base), E, I, H, sH, 4);
        rc |= add_qmat(b, P("%smlp.switch_mlp.down_proj", base), E, H, I, 1.0f / sqrtf((float)I), 4);
        rc |= add_qmat(b, P("%smlp.shared_expert.gate_proj", base), 0, s->shared_inter, H, sH, 4);
        rc |= add_qmat(b, P("%smlp.shared_expert.up_proj", base), 0, s->shared_inter, H, sH, 4);
        rc |= add_qmat(b, P("%smlp.shared_expert.down_proj", base), 0, H, s->shared_inter,
                       1.0f / sqrtf((float)s->shared_inter), 4);
        rc |= add_qmat(b, P("%smlp.shared_expert_gate", base), 0, 1, H, sH, 8);
    }
#undef P
    return rc;
}

static int write_config(const builder *b, const synth_shape *s, const char *dir, char *err) {
    char *path = e0_path_join(dir, "config.json");
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) {
        int rc = e0_fail(err, E0_EIO, "%s: cannot create: %s", path ? path : dir, strerror(errno));
        free(path);
        return rc;
    }
    fprintf(f, "{\n  \"architectures\": [\"Qwen3_5MoeForConditionalGeneration\"],\n"
               "  \"model_type\": \"qwen3_5_moe\",\n  \"tie_word_embeddings\": false,\n"
               "  \"edge0_synth\": {\"shape\": \"%s\"},\n  \"text_config\": {\n"
               "    \"model_type\": \"qwen3_5_moe_text\",\n    \"hidden_size\": %d,\n"
               "    \"num_hidden_layers\": %d,\n    \"vocab_size\": %d,\n"
               "    \"num_attention_heads\": %d,\n    \"num_key_value_heads\": %d,\n    \"head_dim\": %d,\n"
               "    \"linear_num_key_heads\": %d,\n    \"linear_num_value_heads\": %d,\n"
               "    \"linear_key_head_dim\": %d,\n    \"linear_value_head_dim\": %d,\n"
               "    \"linear_conv_kernel_dim\": %d,\n    \"full_attention_interval\": %d,\n"
               "    \"num_experts\": %d,\n    \"num_experts_per_tok\": %d,\n"
               "    \"moe_intermediate_size\": %d,\n    \"shared_expert_intermediate_size\": %d,\n"
               "    \"norm_topk_prob\": true,\n    \"rms_norm_eps\": 1e-06,\n"
               "    \"max_position_embeddings\": 262144,\n    \"eos_token_id\": 151645,\n"
               "    \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": %.1f, \"partial_rotary_factor\": %g}\n"
               "  },\n  \"quantization\": {\n    \"group_size\": 64,\n    \"bits\": 4,\n    \"mode\": \"affine\"%s\n  }\n}\n",
            s->name, s->hidden, s->n_layers, s->vocab, s->n_heads, s->n_kv_heads, s->head_dim, s->lin_k_heads,
            s->lin_v_heads, s->lin_k_dim, s->lin_v_dim, s->conv_kernel, s->full_attention_interval, s->n_experts,
            s->top_k, s->moe_inter, s->shared_inter, s->rope_theta, s->partial_rotary, b->qkeys ? b->qkeys : "");
    int rc = fclose(f) ? e0_fail(err, E0_EIO, "%s: write failed", path) : 0;
    free(path);
    return rc;
}

int synth_write(const synth_shape *shape, const char *dst, uint64_t seed, char *err) {
    if (e0_file_exists(dst)) return e0_fail(err, E0_EINVAL, "%s already exists; remove it or choose another path", dst);
    size_t tl = strlen(dst) + 16;
    char *tmp = malloc(tl);
    if (!tmp) return e0_fail(err, E0_ENOMEM, "out of memory");
    snprintf(tmp, tl, "%s.tmp-XXXXXX", dst);
    if (!mkdtemp(tmp)) {
        int rc = e0_fail(err, E0_EIO, "%s: cannot create a directory next to it: %s", dst, strerror(errno));
        free(tmp);
        return rc;
    }
    builder b = {.r = {seed}};
    snprintf(b.prefix, sizeof b.prefix, "language_model.model.");
    int rc = build(&b, shape) ? e0_fail(err, E0_ENOMEM, "out of memory building shape %s", shape->name) : 0;
    char *st = rc ? NULL : e0_path_join(tmp, "model.safetensors");
    if (!rc && !st) rc = e0_fail(err, E0_ENOMEM, "out of memory");
    const char *meta[] = {"format", "mlx"};
    if (!rc) rc = st_write(st, b.t, b.n, meta, 2, err);
    if (!rc) rc = write_config(&b, shape, tmp, err);
    if (!rc && rename(tmp, dst) != 0) rc = e0_fail(err, E0_EIO, "rename %s -> %s: %s", tmp, dst, strerror(errno));
    if (rc) { /* leave nothing that looks finished */
        if (st) unlink(st);
        char *cfg = e0_path_join(tmp, "config.json");
        if (cfg) unlink(cfg);
        free(cfg);
        rmdir(tmp);
    }
    for (size_t i = 0; i < b.n; i++) {
        free((void *)b.t[i].name);
        free(b.owned[i]);
    }
    free(b.t);
    free(b.owned);
    free(b.qkeys);
    free(st);
    free(tmp);
    return rc;
}
