/* A model's hyper-parameters from GGUF metadata (the `ARCH.*` keys that
 * llama.cpp's converter writes), into the same e0_config config.json gives.
 *
 * Architectures: qwen3moe (Qwen3-MoE), qwen3next (Qwen3-Next), qwen35moe
 * (Qwen3.5 / 3.6 MoE). Keys, with the config.json field each replaces:
 *   ARCH.block_count                      num_hidden_layers
 *   ARCH.embedding_length                 hidden_size
 *   ARCH.attention.head_count / _kv       num_attention_heads / num_key_value_heads
 *   ARCH.attention.key_length             head_dim (value_length must equal it)
 *   ARCH.attention.layer_norm_rms_epsilon rms_norm_eps
 *   ARCH.rope.freq_base                   rope_theta
 *   ARCH.rope.dimension_count             head_dim x partial_rotary_factor
 *   ARCH.expert_count / expert_used_count num_experts / num_experts_per_tok
 *   ARCH.expert_feed_forward_length       moe_intermediate_size
 *   ARCH.expert_shared_feed_forward_length shared_expert_intermediate_size
 *   ARCH.ssm.group_count / time_step_rank linear_num_key_heads / linear_num_value_heads
 *   ARCH.ssm.state_size                   linear_key_head_dim
 *   ARCH.ssm.inner_size                   linear_num_value_heads x linear_value_head_dim
 *   ARCH.ssm.conv_kernel                  linear_conv_kernel_dim
 *   ARCH.full_attention_interval          full_attention_interval
 *   ARCH.context_length                   max_position_embeddings
 *   tokenizer.ggml.eos_token_id, eot_token_id   eos_token_id
 * The vocabulary size is the token embedding's row count (the caller
 * passes it). Qwen3.5's rope.dimension_sections (MRoPE) rotate text
 * positions exactly as plain RoPE over dimension_count dims, so they are
 * not needed. Routing weights are renormalised in every family, as
 * llama.cpp does for these architectures (Qwen3-MoE releases set
 * norm_topk_prob too).
 */
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

static int parse(gctx *x, e0_config *c) {
    int rc, kl, vl, rot;
    float eps, theta;
    if ((rc = get_int(x, "block_count", NONE, 1, 1024, &c->n_layers)) ||
        (rc = get_int(x, "embedding_length", NONE, 1, 1 << 16, &c->hidden)) ||
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
        (rc = get_int(x, "context_length", 40960, 1, 1 << 30, &c->max_pos)))
        return rc;
    const char *fn = gguf_fname(x->g);
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
    if (rc) config_free(c);
    return rc;
}
