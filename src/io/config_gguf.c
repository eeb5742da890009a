/* A model's hyper-parameters from GGUF metadata (the `ARCH.*` keys that
 * llama.cpp's converter writes), into the same e0_config config.json gives.
 *
 * Architectures: qwen3moe (Qwen3-MoE), qwen3next (Qwen3-Next), qwen35moe
 * (Qwen3.5 / 3.6 MoE). Keys read, with the config.json field each replaces:
 *   ARCH.block_count                      num_hidden_layers + mtp_num_hidden_layers
 *   ARCH.nextn_predict_layers             mtp_num_hidden_layers (absent: 0); the
 *                                         main layers are block_count less these
 *   ARCH.embedding_length                 hidden_size
 *   ARCH.attention.head_count / _kv       num_attention_heads / num_key_value_heads
 *   ARCH.attention.key_length             head_dim (value_length must equal it)
 *   ARCH.attention.layer_norm_rms_epsilon rms_norm_eps
 *   ARCH.rope.freq_base                   rope_theta
 *   ARCH.rope.dimension_count             head_dim x partial_rotary_factor
 *   ARCH.expert_count / expert_used_count num_experts / num_experts_per_tok
 *   ARCH.expert_feed_forward_length       moe_intermediate_size
 *   ARCH.feed_forward_length              intermediate_size (a dense MLP's width:
 *                                         range-checked; no layer of these
 *                                         families has one)
 *   ARCH.context_length                   max_position_embeddings
 *   hybrids (qwen3next, qwen35moe) also:
 *   ARCH.expert_shared_feed_forward_length shared_expert_intermediate_size
 *   ARCH.ssm.group_count / time_step_rank linear_num_key_heads / linear_num_value_heads
 *   ARCH.ssm.state_size                   linear_key_head_dim
 *   ARCH.ssm.inner_size                   linear_num_value_heads x linear_value_head_dim
 *   ARCH.ssm.conv_kernel                  linear_conv_kernel_dim
 *   ARCH.full_attention_interval          full_attention_interval (over the main
 *                                         layers; the MTP layers are attention)
 *   tokenizer.ggml.eos_token_id, eot_token_id   eos_token_id
 *   edge0.route_stickiness, edge0.route_profile, route_popularity, ...
 *                                         edge0_synth's route keys of synthetic
 *                                         checkpoints (io/config_route.c)
 * The vocabulary size is the token embedding's row count (the caller
 * passes it). Routing weights are renormalised in every family, as
 * llama.cpp does for these architectures (Qwen3-MoE releases set
 * norm_topk_prob too).
 *
 * Every other ARCH.* key is refused with its name: it may carry arithmetic
 * edge0 would silently leave out. Accepted without being read:
 *   ARCH.rope.dimension_sections  Qwen3.5's MRoPE sections: text positions
 *                                 rotate exactly as plain RoPE over
 *                                 dimension_count dims
 *   ARCH.rope.scaling.type        only "none"; then the other rope.scaling.*
 *                                 keys are inert and accepted (any other type,
 *                                 or a scaling key without a type, which
 *                                 llama.cpp reads as linear scaling, is refused
 *                                 as config.json's rope_type is)
 *   ARCH.attention.causal         only true
 *   ARCH.expert_gating_func       only 1 (softmax)
 * The keys of the other namespaces are not this file's: general.architecture
 * is read here, general.alignment and split.* by io/gguf.c, tokenizer.ggml.*
 * and tokenizer.chat_template by text/generate.c; the rest are descriptions
 * that do not change the arithmetic and are ignored: general.name, type,
 * size_label, basename, finetune, version, license, tags, languages,
 * base_model.*, ... (the converter's metadata), general.file_type and
 * general.quantization_version (each tensor carries its own type),
 * quantize.imatrix.* (llama-quantize's record of the calibration),
 * tokenizer.ggml.add_eos_token, unk_token_id and the like (not used by the
 * chat paths).
 *
 * What llama.cpp's converter (convert_hf_to_gguf.py, 2026-07-23) writes for
 * each family from the shared fixtures (scripts/make_mtp_gguf.py runs it):
 *   qwen3moe: block_count context_length embedding_length
 *     feed_forward_length attention.head_count attention.head_count_kv
 *     rope.freq_base attention.layer_norm_rms_epsilon expert_count
 *     expert_used_count attention.key_length attention.value_length
 *     expert_feed_forward_length;
 *   qwen3next: those, and expert_shared_feed_forward_length ssm.conv_kernel
 *     ssm.state_size ssm.group_count ssm.time_step_rank ssm.inner_size
 *     full_attention_interval rope.dimension_count;
 *   qwen35moe: those of qwen3next, and rope.dimension_sections and (unless
 *     --no-mtp, when the checkpoint has an MTP block) nextn_predict_layers.
 * Depending on the checkpoint's config.json it may add rope.scaling.*,
 * attention.causal, expert_gating_func, expert_group_count /
 * expert_group_used_count; the last two (grouped routing) are refused. */
#include "io/config.h"

#include "io/gguf.h"
#include "util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const gguf_file *g;
    const char *arch;
    char *err;
} gctx;

/* ARCH.`key` as an int in [lo, hi]; absent: `def`, or an error when def < lo. */
static int get_int(gctx *x, const char *key, int def, int lo, int hi, int *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", x->arch, key);
    int64_t v;
    int rc = gguf_get_i64(x->g, full, &v, x->err);
    if (rc == E0_ENOTFOUND) {
        if (def < lo)
            return e0_fail(x->err, E0_EFORMAT, "%s: metadata key %s is missing", gguf_fname(x->g),
                           full);
        *out = def;
        return 0;
    }
    if (rc) return rc;
    if (v < lo || v > hi)
        return e0_fail(x->err, E0_EFORMAT, "%s: metadata key %s = %lld is outside [%d, %d]",
                       gguf_fname(x->g), full, (long long)v, lo, hi);
    *out = (int)v;
    return 0;
}

static int get_float(gctx *x, const char *key, float def, float lo, float hi, float *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", x->arch, key);
    int rc = gguf_get_f32(x->g, full, out, x->err);
    if (rc == E0_ENOTFOUND) {
        if (!(def >= lo))
            return e0_fail(x->err, E0_EFORMAT, "%s: metadata key %s is missing", gguf_fname(x->g),
                           full);
        *out = def;
        return 0;
    }
    if (rc) return rc;
    if (!(*out >= lo && *out <= hi))
        return e0_fail(x->err, E0_EFORMAT, "%s: metadata key %s = %g is outside [%g, %g]",
                       gguf_fname(x->g), full, (double)*out, (double)lo, (double)hi);
    return 0;
}

static int add_eos_key(gctx *x, e0_config *c, const char *key) {
    uint32_t id;
    int rc = gguf_get_u32(x->g, key, &id, x->err);
    if (rc == E0_ENOTFOUND) return 0;
    if (rc) return rc;
    if (id >= (uint32_t)c->vocab)
        return e0_fail(x->err, E0_EFORMAT, "%s: %s = %u is outside the vocabulary of %d",
                       gguf_fname(x->g), key, id, c->vocab);
    for (int k = 0; k < c->n_eos; k++)
        if (c->eos[k] == (int32_t)id) return 0;
    if (c->n_eos < E0_MAX_EOS) c->eos[c->n_eos++] = (int32_t)id;
    return 0;
}

enum { BIG = 1 << 20, NONE = -1 };

/* The ARCH.* keys edge0 knows for a family (bit 1 << e0_family). */
enum { F_Q3 = 1 << E0_FAM_QWEN3_MOE, F_HYB = 1 << E0_FAM_QWEN3_NEXT | 1 << E0_FAM_QWEN3_5_MOE };
enum { F_ALL = F_Q3 | F_HYB };
static const struct {
    const char *key;
    int fam;
} KNOWN[] = {
    {"block_count", F_ALL},
    {"nextn_predict_layers", F_ALL},
    {"context_length", F_ALL},
    {"embedding_length", F_ALL},
    {"feed_forward_length", F_ALL},
    {"attention.head_count", F_ALL},
    {"attention.head_count_kv", F_ALL},
    {"attention.key_length", F_ALL},
    {"attention.value_length", F_ALL},
    {"attention.layer_norm_rms_epsilon", F_ALL},
    {"attention.causal", F_ALL},
    {"rope.freq_base", F_ALL},
    {"rope.dimension_count", F_ALL},
    {"rope.dimension_sections", F_ALL},
    {"expert_count", F_ALL},
    {"expert_used_count", F_ALL},
    {"expert_feed_forward_length", F_ALL},
    {"expert_gating_func", F_ALL},
    {"expert_shared_feed_forward_length", F_HYB},
    {"ssm.conv_kernel", F_HYB},
    {"ssm.state_size", F_HYB},
    {"ssm.group_count", F_HYB},
    {"ssm.time_step_rank", F_HYB},
    {"ssm.inner_size", F_HYB},
    {"full_attention_interval", F_HYB},
};

/* Every ARCH.* key is one edge0 reads or knows to be inert (the list at
 * the top); rope scaling, non-causal attention and other gating are
 * refused. */
static int check_keys(gctx *x, const e0_config *c) {
    const char *fn = gguf_fname(x->g);
    const size_t al = strlen(x->arch);
    const char *scaling = NULL;
    char full[128];
    snprintf(full, sizeof full, "%s.rope.scaling.type", x->arch);
    int rc = gguf_get_str(x->g, full, &scaling, x->err);
    if (rc && rc != E0_ENOTFOUND) return rc;
    if (scaling && strcmp(scaling, "none") != 0)
        return e0_fail(x->err, E0_EUNSUPPORTED,
                       "%s: %s = \"%s\": RoPE scaling is not supported (edge0 rotates with plain "
                       "RoPE, as config.json's rope_type \"default\")",
                       fn, full, scaling);
    for (size_t i = 0; i < gguf_n_kv(x->g); i++) {
        const char *k = gguf_key_at(x->g, i);
        if (strncmp(k, x->arch, al) != 0 || k[al] != '.') continue;
        const char *sub = k + al + 1;
        if (strncmp(sub, "rope.scaling.", 13) == 0) {
            if (scaling) continue; /* type "none": the rest is inert */
            return e0_fail(x->err, E0_EUNSUPPORTED,
                           "%s: metadata key %s without %s.rope.scaling.type = \"none\": llama.cpp "
                           "reads it as RoPE scaling, which edge0 does not support",
                           fn, k, x->arch);
        }
        size_t j = 0;
        while (j < sizeof KNOWN / sizeof *KNOWN && strcmp(KNOWN[j].key, sub) != 0) j++;
        if (j == sizeof KNOWN / sizeof *KNOWN || !(KNOWN[j].fam & 1 << c->family))
            return e0_fail(x->err, E0_EUNSUPPORTED,
                           "%s: metadata key %s is not one edge0 knows for %s; it may change the "
                           "model's arithmetic, so the file is refused (the keys edge0 reads or "
                           "ignores are listed in src/io/config_gguf.c)",
                           fn, k, x->arch);
    }
    bool causal = true;
    snprintf(full, sizeof full, "%s.attention.causal", x->arch);
    if ((rc = gguf_get_bool(x->g, full, &causal, x->err)) && rc != E0_ENOTFOUND) return rc;
    if (!causal)
        return e0_fail(x->err, E0_EUNSUPPORTED,
                       "%s: %s is false: edge0 runs causal language models only", fn, full);
    uint32_t gating = 1;
    snprintf(full, sizeof full, "%s.expert_gating_func", x->arch);
    if ((rc = gguf_get_u32(x->g, full, &gating, x->err)) && rc != E0_ENOTFOUND) return rc;
    if (gating != 1)
        return e0_fail(x->err, E0_EUNSUPPORTED,
                       "%s: %s = %u: only 1 (softmax routing, these families' own) is supported",
                       fn, full, gating);
    return 0;
}

static int parse(gctx *x, e0_config *c) {
    int rc, kl, vl, rot, blocks;
    float eps, theta;
    const char *fn = gguf_fname(x->g);
    if ((rc = get_int(x, "block_count", NONE, 1, 1024, &blocks)) ||
        (rc = get_int(x, "nextn_predict_layers", 0, 0, 1024, &c->mtp_layers)))
        return rc;
    if (c->mtp_layers >= blocks)
        return e0_fail(x->err, E0_EFORMAT,
                       "%s: %s.nextn_predict_layers = %d is not less than %s.block_count = %d: "
                       "block_count counts the main layers and the MTP layers after them, so no "
                       "main layer would be left",
                       fn, x->arch, c->mtp_layers, x->arch, blocks);
    c->n_layers = blocks - c->mtp_layers;
    if ((rc = get_int(x, "embedding_length", NONE, 1, 1 << 16, &c->hidden)) ||
        (rc = get_int(x, "attention.head_count", NONE, 1, 1024, &c->n_heads)) ||
        (rc = get_int(x, "attention.head_count_kv", c->n_heads, 1, 1024, &c->n_kv_heads)) ||
        (rc = get_int(x, "attention.key_length", c->hidden / c->n_heads, 1, 4096, &kl)) ||
        (rc = get_int(x, "attention.value_length", kl, 1, 4096, &vl)) ||
        (rc = get_float(x, "attention.layer_norm_rms_epsilon", 1e-6f, 0.0f, 1.0f, &eps)) ||
        (rc = get_float(x, "rope.freq_base", 10000.0f, 1e-3f, 1e12f, &theta)) ||
        (rc = get_int(x, "rope.dimension_count", kl, 2, kl, &rot)) ||
        (rc = get_int(x, "expert_count", NONE, 1, 1 << 16, &c->n_experts)) ||
        (rc = get_int(x, "expert_used_count", NONE, 1, 1 << 16, &c->top_k)) ||
        (rc = get_int(x, "expert_feed_forward_length", NONE, 1, BIG, &c->moe_inter)) ||
        (rc = get_int(x, "feed_forward_length", 0, 0, BIG, &c->dense_inter)) ||
        (rc = get_int(x, "context_length", 40960, 1, 1 << 30, &c->max_pos)) ||
        (rc = check_keys(x, c)))
        return rc;
    if (vl != kl)
        return e0_fail(x->err, E0_EUNSUPPORTED,
                       "%s: %s.attention.value_length %d differs from key_length %d", fn, x->arch, vl,
                       kl);
    if (c->n_heads % c->n_kv_heads)
        return e0_fail(x->err, E0_EFORMAT,
                       "%s: %s.attention.head_count %d is not a multiple of head_count_kv %d", fn,
                       x->arch, c->n_heads, c->n_kv_heads);
    if (c->top_k > c->n_experts)
        return e0_fail(x->err, E0_EFORMAT, "%s: %s.expert_used_count %d exceeds the %d experts", fn,
                       x->arch, c->top_k, c->n_experts);
    c->head_dim = kl;
    c->rms_eps = eps;
    c->rope_theta = theta;
    c->rotary_dim = rot & ~1;
    c->norm_topk = true;
    c->layer_linear = calloc((size_t)c->n_layers, 1);
    c->layer_moe = calloc((size_t)c->n_layers, 1);
    if (!c->layer_linear || !c->layer_moe) return e0_fail(x->err, E0_ENOMEM, "out of memory");
    memset(c->layer_moe, 1, (size_t)c->n_layers);
    if (c->family == E0_FAM_QWEN3_MOE) return 0;
    int interval, inner;
    if ((rc = get_int(x, "full_attention_interval", 4, 1, 1024, &interval)) ||
        (rc = get_int(x, "ssm.group_count", NONE, 1, 1024, &c->lin_k_heads)) ||
        (rc = get_int(x, "ssm.time_step_rank", NONE, 1, 1024, &c->lin_v_heads)) ||
        (rc = get_int(x, "ssm.state_size", NONE, 1, 4096, &c->lin_k_dim)) ||
        (rc = get_int(x, "ssm.inner_size", NONE, 1, BIG, &inner)) ||
        (rc = get_int(x, "ssm.conv_kernel", 4, 1, 64, &c->conv_kernel)) ||
        (rc = get_int(x, "expert_shared_feed_forward_length", NONE, 1, BIG, &c->shared_inter)))
        return rc;
    if (c->lin_v_heads % c->lin_k_heads || inner % c->lin_v_heads)
        return e0_fail(x->err, E0_EFORMAT,
                       "%s: %s.ssm.time_step_rank %d must be a multiple of ssm.group_count %d and "
                       "divide ssm.inner_size %d",
                       fn, x->arch, c->lin_v_heads, c->lin_k_heads, inner);
    c->lin_v_dim = inner / c->lin_v_heads;
    for (int i = 0; i < c->n_layers; i++)
        c->layer_linear[i] = (i + 1) % interval != 0;
    return 0;
}

int config_from_gguf(e0_config *c, const gguf_file *g, int32_t vocab, char *err) {
    memset(c, 0, sizeof *c);
    const char *arch;
    int rc = gguf_get_str(g, "general.architecture", &arch, err);
    if (rc == E0_ENOTFOUND)
        return e0_fail(err, E0_EFORMAT, "%s: metadata key general.architecture is missing",
                       gguf_fname(g));
    if (rc) return rc;
    if (strcmp(arch, "qwen3moe") == 0) {
        c->family = E0_FAM_QWEN3_MOE;
        c->family_name = "qwen3_moe";
    } else if (strcmp(arch, "qwen3next") == 0) {
        c->family = E0_FAM_QWEN3_NEXT;
        c->family_name = "qwen3_next";
    } else if (strcmp(arch, "qwen35moe") == 0) {
        c->family = E0_FAM_QWEN3_5_MOE;
        c->family_name = "qwen3_5_moe";
    } else {
        return e0_fail(err, E0_EUNSUPPORTED,
                       "%s: general.architecture \"%s\" is not supported (qwen3moe, qwen3next, "
                       "qwen35moe)",
                       gguf_fname(g), arch);
    }
    c->attn_gated = c->family != E0_FAM_QWEN3_MOE;
    c->norm_zero_centred = false; /* the converter stores hybrid norms as 1 + w */
    c->vocab = vocab;
    gctx x = {g, arch, err};
    if (!rc) rc = parse(&x, c);
    if (!rc) rc = add_eos_key(&x, c, "tokenizer.ggml.eos_token_id");
    if (!rc) rc = add_eos_key(&x, c, "tokenizer.ggml.eot_token_id");
    if (!rc) rc = config_route_gguf(c, g, err); /* synthetic checkpoints' edge0.route_* */
    if (rc) config_free(c);
    return rc;
}
