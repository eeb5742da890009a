/* config.json (+ generation_config.json) of a model directory.
 *
 * Accepts the flat Qwen3-MoE / Qwen3-Next configs and the nested Qwen3.5
 * multimodal wrapper (text settings under "text_config"); RoPE from
 * "rope_parameters" or the old top-level "rope_theta" /
 * "partial_rotary_factor"; mlx quantization from "quantization" or
 * "quantization_config" with per-module overrides and `false` entries.
 * Every field is range-checked; messages name the file and the key.
 */
#ifndef E0_IO_CONFIG_H
#define E0_IO_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
    E0_FAM_QWEN3_MOE,   /* qwen3_moe */
    E0_FAM_QWEN3_NEXT,  /* qwen3_next */
    E0_FAM_QWEN3_5_MOE, /* qwen3_5_moe, qwen3_5_moe_text */
} e0_family;

#define E0_MAX_EOS 8

typedef struct {
    char *module; /* tensor path without ".weight", as written in the checkpoint */
    int bits, group;
    bool off; /* `"module": false`: left unquantized */
} e0_qoverride;

typedef struct {
    e0_family family;
    const char *family_name;
    int hidden, n_layers, vocab; /* n_layers: the main layers (GGUF: block_count less mtp_layers) */
    /* GGUF {arch}.nextn_predict_layers: multi-token-prediction blocks stored
     * after the main layers (blk.n_layers ...; model.h e0_mtp), 0: none */
    int mtp_layers;
    int n_heads, n_kv_heads, head_dim;
    float rms_eps;
    double rope_theta;
    int rotary_dim;      /* leading dims of each head that RoPE rotates */
    bool attn_gated;     /* q_proj also yields a sigmoid output gate per head */
    bool norm_zero_centred; /* HF hybrid norms are (1 + w); mlx stores 1 + w */
    int n_experts, top_k, moe_inter, shared_inter, dense_inter;
    bool norm_topk;
    /* edge0_synth.route_stickiness of synthetic checkpoints (synth/synth.h):
     * share of the previous token's experts each token keeps; 0: none */
    double route_stickiness;
    bool tie_embeddings;
    uint8_t *layer_linear; /* [n_layers]: 1 = Gated DeltaNet, 0 = full attention */
    uint8_t *layer_moe;    /* [n_layers]: 1 = MoE block, 0 = dense MLP */
    int lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, conv_kernel;
    int max_pos;
    int32_t eos[E0_MAX_EOS];
    int n_eos;
    /* mlx affine quantization defaults, when "quantization" is present */
    bool quantized;
    int q_bits, q_group;
    e0_qoverride *q_over;
    int n_q_over;
} e0_config;

/* Parses DIR/config.json and, if present, DIR/generation_config.json. */
int config_load(e0_config *c, const char *dir, char *err);
/* Parses config text; `path` only names it in messages. */
int config_parse(e0_config *c, const char *text, size_t len, const char *path, char *err);
void config_free(e0_config *c);

/* The same from a GGUF file's metadata (io/config_gguf.c: llama.cpp's
 * `ARCH.*` keys); `vocab` is the token embedding's row count. */
struct gguf_file;
int config_from_gguf(e0_config *c, const struct gguf_file *g, int32_t vocab, char *err);

/* Quantization settings of one module: 0 with bits and group filled, or
 * E0_ENOTFOUND when the config says the module is unquantized. */
int config_quant_for(const e0_config *c, const char *module, int *bits, int *group);

#endif
