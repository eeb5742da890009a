#include "io/config.h"

#include "util/err.h"
#include "util/file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUIRED INT32_MIN

typedef struct {
    const char *path;
    char *err;
} ctx;

/* Integer field in [lo, hi]; missing or null gives `def` (REQUIRED: error). */
static int get_int(ctx *x, const cJSON *o, const char *key, int def, int lo, int hi, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        if (def == REQUIRED) return e0_fail(x->err, E0_EFORMAT, "%s: missing field \"%s\"", x->path, key);
        *out = def;
        return 0;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || d != floor(d))
        return e0_fail(x->err, E0_EFORMAT, "%s: field \"%s\" must be an integer in [%d, %d]", x->path,
                       key, lo, hi);
    *out = (int)d;
    return 0;
}

static int get_num(ctx *x, const cJSON *o, const char *key, double def, double lo, double hi,
                   double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= lo && d <= hi))
        return e0_fail(x->err, E0_EFORMAT, "%s: field \"%s\" must be a number in [%g, %g]", x->path,
                       key, lo, hi);
    *out = d;
    return 0;
}

static int get_bool(ctx *x, const cJSON *o, const char *key, bool def, bool *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return e0_fail(x->err, E0_EFORMAT, "%s: field \"%s\" must be true or false", x->path, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* eos_token_id: an id or a list of ids; appended without duplicates. */
static int add_eos(ctx *x, e0_config *c, const cJSON *o) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "eos_token_id");
    if (!v || cJSON_IsNull(v)) return 0;
    const cJSON *one = v;
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : 1;
    for (int i = 0; i < n; i++) {
        if (cJSON_IsArray(v)) one = cJSON_GetArrayItem(v, i);
        double d = cJSON_IsNumber(one) ? one->valuedouble : -1;
        if (!(d >= 0 && d < c->vocab) || d != floor(d))
            return e0_fail(x->err, E0_EFORMAT, "%s: eos_token_id must be ids below vocab_size %d",
                           x->path, c->vocab);
        bool dup = false;
        for (int k = 0; k < c->n_eos; k++) dup |= c->eos[k] == (int32_t)d;
        if (!dup && c->n_eos < E0_MAX_EOS) c->eos[c->n_eos++] = (int32_t)d;
    }
    return 0;
}

static int parse_quant(ctx *x, e0_config *c, const cJSON *q) {
    if (!cJSON_IsObject(q)) return e0_fail(x->err, E0_EFORMAT, "%s: \"quantization\" is not an object", x->path);
    int rc;
    if ((rc = get_int(x, q, "bits", REQUIRED, 1, 8, &c->q_bits)) ||
        (rc = get_int(x, q, "group_size", REQUIRED, 1, 1 << 16, &c->q_group)))
        return e0_wrap(x->err, rc, "in \"quantization\"");
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(q, "mode");
    if (mode && !(cJSON_IsString(mode) && strcmp(mode->valuestring, "affine") == 0))
        return e0_fail(x->err, E0_EUNSUPPORTED, "%s: quantization mode %s is not supported (affine only)",
                       x->path, cJSON_IsString(mode) ? mode->valuestring : "(not a string)");
    c->quantized = true;
    int n = cJSON_GetArraySize(q);
    c->q_over = calloc((size_t)n + 1, sizeof *c->q_over);
    if (!c->q_over) return e0_fail(x->err, E0_ENOMEM, "out of memory");
    const cJSON *v;
    cJSON_ArrayForEach(v, q) {
        if (!strcmp(v->string, "bits") || !strcmp(v->string, "group_size") || !strcmp(v->string, "mode"))
            continue;
        e0_qoverride *o = &c->q_over[c->n_q_over];
        if (cJSON_IsFalse(v)) {
            o->off = true;
        } else if (cJSON_IsObject(v)) {
            if ((rc = get_int(x, v, "bits", c->q_bits, 1, 8, &o->bits)) ||
                (rc = get_int(x, v, "group_size", c->q_group, 1, 1 << 16, &o->group)))
                return e0_wrap(x->err, rc, "in quantization override \"%s\"", v->string);
        } else if (cJSON_IsTrue(v)) {
            o->bits = c->q_bits;
            o->group = c->q_group;
        } else {
            continue; /* other settings mlx may add: ignore */
        }
        if (!(o->module = strdup(v->string))) return e0_fail(x->err, E0_ENOMEM, "out of memory");
        c->n_q_over++;
    }
    return 0;
}

int config_quant_for(const e0_config *c, const char *module, int *bits, int *group) {
    for (int i = 0; i < c->n_q_over; i++)
        if (strcmp(c->q_over[i].module, module) == 0) {
            if (c->q_over[i].off) return E0_ENOTFOUND;
            *bits = c->q_over[i].bits;
            *group = c->q_over[i].group;
            return 0;
        }
    if (!c->quantized) return E0_ENOTFOUND;
    *bits = c->q_bits;
    *group = c->q_group;
    return 0;
}

static int parse_text(ctx *x, e0_config *c, const cJSON *t) {
    int rc;
    const int BIG = 1 << 20;
    if ((rc = get_int(x, t, "hidden_size", REQUIRED, 1, 1 << 16, &c->hidden)) ||
        (rc = get_int(x, t, "num_hidden_layers", REQUIRED, 1, 1024, &c->n_layers)) ||
        (rc = get_int(x, t, "vocab_size", REQUIRED, 1, 1 << 24, &c->vocab)) ||
        (rc = get_int(x, t, "num_attention_heads", REQUIRED, 1, 1024, &c->n_heads)) ||
        (rc = get_int(x, t, "num_key_value_heads", c->n_heads, 1, c->n_heads, &c->n_kv_heads)) ||
        (rc = get_int(x, t, "head_dim", c->hidden / c->n_heads, 1, 4096, &c->head_dim)) ||
        (rc = get_int(x, t, "moe_intermediate_size", REQUIRED, 1, BIG, &c->moe_inter)) ||
        (rc = get_int(x, t, "intermediate_size", 0, 0, BIG, &c->dense_inter)) ||
        (rc = get_int(x, t, "num_experts_per_tok", REQUIRED, 1, 1024, &c->top_k)) ||
        (rc = get_int(x, t, "max_position_embeddings", 1 << 18, 1, 1 << 26, &c->max_pos)) ||
        (rc = get_bool(x, t, "norm_topk_prob", true, &c->norm_topk)))
        return rc;
    int ne = -1;
    if ((rc = get_int(x, t, "num_experts", -1, 1, 1 << 16, &ne))) return rc;
    if (ne < 0 && (rc = get_int(x, t, "num_local_experts", REQUIRED, 1, 1 << 16, &ne))) return rc;
    c->n_experts = ne;
    if (c->top_k > c->n_experts)
        return e0_fail(x->err, E0_EFORMAT, "%s: num_experts_per_tok %d exceeds the %d experts", x->path,
                       c->top_k, c->n_experts);
    if (c->n_heads % c->n_kv_heads)
        return e0_fail(x->err, E0_EFORMAT,
                       "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                       x->path, c->n_heads, c->n_kv_heads);
    double eps;
    if ((rc = get_num(x, t, "rms_norm_eps", 1e-6, 0, 1, &eps))) return rc;
    c->rms_eps = (float)eps;

    /* RoPE: rope_parameters (new) or rope_theta / partial_rotary_factor /
     * rope_scaling (old). Only the default rotation is implemented. */
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(t, "rope_parameters");
    if (rp && !cJSON_IsNull(rp) && !cJSON_IsObject(rp))
        return e0_fail(x->err, E0_EFORMAT, "%s: \"rope_parameters\" is not an object", x->path);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(t, "rope_scaling");
    const cJSON *rsrc = cJSON_IsObject(rp) ? rp : cJSON_IsObject(rs) ? rs : NULL;
    const cJSON *rtype = rsrc ? cJSON_GetObjectItemCaseSensitive(rsrc, "rope_type") : NULL;
    if (!rtype && rsrc) rtype = cJSON_GetObjectItemCaseSensitive(rsrc, "type");
    if (rtype && !(cJSON_IsString(rtype) && strcmp(rtype->valuestring, "default") == 0))
        return e0_fail(x->err, E0_EUNSUPPORTED, "%s: rope_type %s is not supported (default only)",
                       x->path, cJSON_IsString(rtype) ? rtype->valuestring : "(not a string)");
    double partial;
    if ((rc = get_num(x, t, "rope_theta", 10000.0, 1e-3, 1e12, &c->rope_theta)) ||
        (rc = get_num(x, t, "partial_rotary_factor", 1.0, 0.0, 1.0, &partial)))
        return rc;
    if (cJSON_IsObject(rp) && ((rc = get_num(x, rp, "rope_theta", c->rope_theta, 1e-3, 1e12, &c->rope_theta)) ||
                               (rc = get_num(x, rp, "partial_rotary_factor", partial, 0.0, 1.0, &partial))))
        return e0_wrap(x->err, rc, "in \"rope_parameters\"");
    c->rotary_dim = (int)(c->head_dim * partial);
    c->rotary_dim &= ~1;
    if (c->rotary_dim < 2)
        return e0_fail(x->err, E0_EFORMAT, "%s: partial_rotary_factor leaves no dims to rotate", x->path);

    if ((rc = get_bool(x, t, "tie_word_embeddings", c->tie_embeddings, &c->tie_embeddings)))
        return rc;

    /* Layer kinds: "layer_types", else every full_attention_interval-th layer
     * is full attention (hybrids only). */
    c->layer_linear = calloc((size_t)c->n_layers, 1);
    c->layer_moe = calloc((size_t)c->n_layers, 1);
    if (!c->layer_linear || !c->layer_moe) return e0_fail(x->err, E0_ENOMEM, "out of memory");
    bool hybrid = c->family != E0_FAM_QWEN3_MOE;
    if (hybrid) {
        const cJSON *lt = cJSON_GetObjectItemCaseSensitive(t, "layer_types");
        int interval;
        if ((rc = get_int(x, t, "full_attention_interval", 4, 1, 1024, &interval))) return rc;
        if (lt && !cJSON_IsNull(lt)) {
            if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != c->n_layers)
                return e0_fail(x->err, E0_EFORMAT, "%s: \"layer_types\" must list %d layers", x->path,
                               c->n_layers);
            for (int i = 0; i < c->n_layers; i++) {
                const cJSON *e = cJSON_GetArrayItem(lt, i);
                const char *s = cJSON_IsString(e) ? e->valuestring : "";
                if (strcmp(s, "linear_attention") == 0) c->layer_linear[i] = 1;
                else if (strcmp(s, "full_attention") != 0)
                    return e0_fail(x->err, E0_EFORMAT, "%s: layer_types[%d] is not linear_attention or full_attention",
                                   x->path, i);
            }
        } else {
            for (int i = 0; i < c->n_layers; i++) c->layer_linear[i] = (i + 1) % interval != 0;
        }
        if ((rc = get_int(x, t, "linear_num_key_heads", REQUIRED, 1, 1024, &c->lin_k_heads)) ||
            (rc = get_int(x, t, "linear_num_value_heads", REQUIRED, 1, 1024, &c->lin_v_heads)) ||
            (rc = get_int(x, t, "linear_key_head_dim", REQUIRED, 1, 4096, &c->lin_k_dim)) ||
            (rc = get_int(x, t, "linear_value_head_dim", REQUIRED, 1, 4096, &c->lin_v_dim)) ||
            (rc = get_int(x, t, "linear_conv_kernel_dim", 4, 1, 64, &c->conv_kernel)) ||
            (rc = get_int(x, t, "shared_expert_intermediate_size", REQUIRED, 1, BIG, &c->shared_inter)))
            return rc;
        if (c->lin_v_heads % c->lin_k_heads)
            return e0_fail(x->err, E0_EFORMAT,
                           "%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
                           x->path, c->lin_v_heads, c->lin_k_heads);
    }
    /* MoE layers: all but mlp_only_layers, every decoder_sparse_step-th. */
    int step;
    if ((rc = get_int(x, t, "decoder_sparse_step", 1, 1, 1024, &step))) return rc;
    for (int i = 0; i < c->n_layers; i++) c->layer_moe[i] = (i + 1) % step == 0;
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(t, "mlp_only_layers");
    if (mo && !cJSON_IsNull(mo)) {
        if (!cJSON_IsArray(mo)) return e0_fail(x->err, E0_EFORMAT, "%s: \"mlp_only_layers\" is not a list", x->path);
        const cJSON *e;
        cJSON_ArrayForEach(e, mo) {
            double d = cJSON_IsNumber(e) ? e->valuedouble : -1;
            if (!(d >= 0 && d < c->n_layers) || d != floor(d))
                return e0_fail(x->err, E0_EFORMAT, "%s: mlp_only_layers entry is not a layer index", x->path);
            c->layer_moe[(int)d] = 0;
        }
    }
    for (int i = 0; i < c->n_layers; i++)
        if (!c->layer_moe[i] && c->dense_inter <= 0)
            return e0_fail(x->err, E0_EFORMAT, "%s: layer %d is a dense MLP but intermediate_size is missing",
                           x->path, i);
    return add_eos(x, c, t);
}

int config_parse(e0_config *c, const char *text, size_t len, const char *path, char *err) {
    memset(c, 0, sizeof *c);
    ctx x = {path, err};
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) return e0_fail(err, E0_EFORMAT, "%s: not valid JSON", path);
    int rc = 0;
    if (!cJSON_IsObject(root)) {
        rc = e0_fail(err, E0_EFORMAT, "%s: not a JSON object", path);
        goto done;
    }
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    const cJSON *text_cfg = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (!cJSON_IsString(mt)) {
        rc = e0_fail(err, E0_EFORMAT, "%s: missing \"model_type\"", path);
        goto done;
    }
    const char *m = mt->valuestring;
    if (strcmp(m, "qwen3_moe") == 0) {
        c->family = E0_FAM_QWEN3_MOE;
        c->family_name = "qwen3_moe";
    } else if (strcmp(m, "qwen3_next") == 0) {
        c->family = E0_FAM_QWEN3_NEXT;
        c->family_name = "qwen3_next";
    } else if (strcmp(m, "qwen3_5_moe") == 0 || strcmp(m, "qwen3_5_moe_text") == 0) {
        c->family = E0_FAM_QWEN3_5_MOE;
        c->family_name = "qwen3_5_moe";
    } else {
        rc = e0_fail(err, E0_EUNSUPPORTED,
                     "%s: model_type \"%s\" is not supported (qwen3_moe, qwen3_next, qwen3_5_moe)",
                     path, m);
        goto done;
    }
    c->attn_gated = c->family != E0_FAM_QWEN3_MOE;
    c->norm_zero_centred = c->family != E0_FAM_QWEN3_MOE;
    /* The wrapper's tie flag applies unless text_config overrides it. */
    if ((rc = get_bool(&x, root, "tie_word_embeddings", false, &c->tie_embeddings))) goto done;
    const cJSON *t = root;
    if (text_cfg && !cJSON_IsNull(text_cfg)) {
        if (!cJSON_IsObject(text_cfg)) {
            rc = e0_fail(err, E0_EFORMAT, "%s: \"text_config\" is not an object", path);
            goto done;
        }
        t = text_cfg;
    }
    if ((rc = parse_text(&x, c, t))) goto done;
    if (t != root && (rc = add_eos(&x, c, root))) goto done;
    if (c->family == E0_FAM_QWEN3_5_MOE) c->norm_topk = true; /* always renormalised */
    const cJSON *syn = cJSON_GetObjectItemCaseSensitive(root, "edge0_synth");
    if (cJSON_IsObject(syn) &&
        (rc = get_num(&x, syn, "route_stickiness", 0.0, 0.0, 1.0, &c->route_stickiness))) {
        e0_wrap(err, rc, "in \"edge0_synth\"");
        goto done;
    }
    if (cJSON_IsObject(syn) && (rc = config_route_json(c, syn, path, err))) goto done;
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization");
    if (!q) q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    if (q && !cJSON_IsNull(q)) rc = parse_quant(&x, c, q);
done:
    cJSON_Delete(root);
    if (rc) config_free(c);
    return rc;
}

int config_load(e0_config *c, const char *dir, char *err) {
    char *path = e0_path_join(dir, "config.json");
    if (!path) return e0_fail(err, E0_ENOMEM, "out of memory");
    char *text = NULL;
    size_t len = 0;
    int rc = e0_read_file(path, &text, &len, 16u << 20, err);
    if (rc == E0_ENOTFOUND) e0_fail(err, rc, "%s: missing (is %s a model directory?)", path, dir);
    if (!rc) rc = config_parse(c, text, len, path, err);
    free(text);
    free(path);
    if (rc) return rc;
    /* generation_config.json may add EOS ids; a broken one is an error. */
    path = e0_path_join(dir, "generation_config.json");
    if (!path) return e0_fail(err, E0_ENOMEM, "out of memory");
    rc = e0_read_file(path, &text, &len, 1u << 20, err);
    if (rc == E0_ENOTFOUND) {
        rc = 0;
    } else if (rc == 0) {
        cJSON *g = cJSON_ParseWithLength(text, len);
        ctx x = {path, err};
        if (!cJSON_IsObject(g)) rc = e0_fail(err, E0_EFORMAT, "%s: not a JSON object", path);
        else rc = add_eos(&x, c, g);
        cJSON_Delete(g);
        free(text);
    }
    free(path);
    if (rc) config_free(c);
    return rc;
}

void config_free(e0_config *c) {
    free(c->layer_linear);
    free(c->layer_moe);
    for (int i = 0; i < c->n_q_over; i++) free(c->q_over[i].module);
    free(c->q_over);
    free(c->route.bias);
    memset(c, 0, sizeof *c);
}
