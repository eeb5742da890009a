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

/* A routing profile (synth --route-profile, synth/synth.h): config.json
 * "edge0_synth" keys route_profile, route_popularity, route_recent,
 * route_window, route_decay, route_window_len, route_seed, or the GGUF keys
 * edge0.route_* of the same names (config_route.c). The router (model/moe.c)
 * adds to each token's logits, in units of their standard deviation over
 * the experts: a per-layer popularity -popularity x ln(rank + 1) /
 * (sqrt(2 ln E) / 1.6), rank a permutation of the experts drawn from
 * route_seed and the layer (Zipf(popularity)-like shares); `recent` for the
 * experts the same layer chose for the previous position; window x
 * decay^(d - 2) for those it last chose d positions back, 2 <= d <=
 * window_len. The top-k and the weights then come from those logits. */
typedef struct {
    char name[24];                        /* "": none given */
    double popularity, recent, window, decay;
    int window_len;                       /* 0: no window term */
    uint64_t seed;
    float *bias; /* [n_layers x n_experts] popularity offsets (config_route_init), or NULL */
} e0_route_cfg;

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
    /* A routing profile of synthetic checkpoints (e0_route_cfg below) */
    e0_route_cfg route;
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

/* Routing profiles (io/config_route.c). config_route_json reads the
 * route_* keys of config.json's "edge0_synth" object `syn`, config_route_gguf
 * the edge0.route_* keys (and edge0.route_stickiness) of a GGUF file; both
 * range-check every value (naming the key) and then config_route_init. A
 * checkpoint without the keys routes as before. */
struct cJSON;
int config_route_json(e0_config *c, const struct cJSON *syn, const char *path, char *err);
int config_route_gguf(e0_config *c, const struct gguf_file *g, char *err);
/* Builds c->route.bias from popularity, seed, n_layers and n_experts. */
int config_route_init(e0_config *c, char *err);
/* The router applies a profile / needs each position's experts kept
 * (a profile or route stickiness). */
static inline bool config_route_on(const e0_config *c) {
    return c->route.popularity > 0 || c->route.recent > 0 || (c->route.window > 0 && c->route.window_len > 1);
}
static inline bool config_route_kept(const e0_config *c) {
    return c->route_stickiness > 0 || config_route_on(c);
}

/* Quantization settings of one module: 0 with bits and group filled, or
 * E0_ENOTFOUND when the config says the module is unquantized. */
int config_quant_for(const e0_config *c, const char *module, int *bits, int *group);

#endif
