/* The weights' views: the model's configuration and, per layer, matrices
 * and vectors that point into the checkpoint's mapping (or the copy loaded
 * into memory), read by every floor above (the expert cache, the forward
 * pass, a second backend). Loading (weights.c) reads the four safetensors
 * layouts and GGUF into these views and folds the format's quirks in.
 *
 * Math traps the loading handles (docs/design.md §1.4, each has caused bugs):
 *  - Hybrid norms are (1 + w) * x/rms(x) in HF checkpoints; mlx checkpoints
 *    already store 1 + w. The DeltaNet output norm is never shifted.
 *    Loading folds the shift in, so kernels always multiply by `*_norm`.
 *  - Gated attention: q_proj yields [q | gate] per head, not [all q | all gates].
 *  - Partial RoPE rotates only the first rotary_dim dims, rotate-half within them.
 *  - DeltaNet: value head h uses key head h / (Hv/Hk) (repeat_interleave);
 *    qwen3_next packs q|k|v|z and b|a per key head. llama.cpp's converter
 *    reorders qwen35moe's value heads to tiled order (head h uses key head
 *    h % Hk), splits qwen3_next's qkvz into flat qkv and z (b|a stays
 *    packed), and stores -exp(A_log).
 *  - conv1d is [C,1,K] (HF) or [C,K,1] (mlx): the same bytes, C-major.
 *  - Router softmax, top-k and renormalisation stay in f32.
 */
#ifndef E0_WEIGHTS_WEIGHTS_H
#define E0_WEIGHTS_WEIGHTS_H

#include "edge0.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "quant/mat.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    e0_mat gate, up; /* [I, H] */
    e0_mat down;     /* [H, I] */
} e0_expert;

typedef struct {
    bool linear;                /* Gated DeltaNet (else full attention) */
    bool moe;                   /* MoE block (else dense MLP) */
    float *in_norm, *post_norm; /* [H], shift folded in */

    /* full attention */
    e0_mat q, k, v, o;      /* q: [nh*hd*(gated ? 2 : 1), H], k/v: [nkv*hd, H], o: [H, nh*hd] */
    float *q_norm, *k_norm; /* [hd] */

    /* Gated DeltaNet */
    bool packed;            /* qwen3_next: in_proj_qkvz / in_proj_ba */
    bool ba_packed;         /* qwen3_next GGUF: flat qkv and z, packed ba */
    bool vtiled;            /* qwen35moe GGUF: value head h uses key head h % Hk */
    e0_mat qkvz, ba;        /* packed: [2Kd + 2Vd, H], [2Hv, H] */
    e0_mat qkv, z, b, a;    /* flat: [2Kd + Vd, H], [Vd, H], [Hv, H], [Hv, H] */
    float *conv_w;          /* [conv_dim, K] */
    float *A, *dt_bias;     /* [Hv]: A = -exp(A_log) (GGUF's ssm_a) */
    float *lin_norm;        /* [Dv] */
    e0_mat out;             /* [H, Vd] */

    /* MoE */
    bool fused;         /* experts stored as gate_up (gate rows on top) + down */
    e0_mat router;      /* [E, H] */
    e0_expert *experts; /* [E] views */
    e0_expert *xfile;   /* [E] the file layout's views when model_repack changed experts, else NULL:
                           expert reads from the file (stream/bundle.c) follow these */
    bool has_shared;
    e0_mat sh_gate, sh_up, sh_down; /* [Is, H], [Is, H], [H, Is] */
    e0_mat sh_router;               /* shared_expert_gate: [1, H] */

    /* dense MLP */
    e0_mat mlp_gate, mlp_up, mlp_down;
} e0_layer;

/* One multi-token-prediction (MTP) block of a Qwen3.5 / 3.6 GGUF file, as
 * llama.cpp's converter stores it after the main layers (blk.N, N >=
 * cfg.n_layers): a full-attention decoder layer with its MoE and shared
 * expert, and the nextn.* tensors that feed it the next token's embedding
 * beside the main model's last hidden state. Every tensor is found and
 * checked at load (shape against the config, a type edge0 computes with),
 * and none of their bytes is read unless the model computes the block
 * (model_mtp_load, e0_mtp.on: speculative decoding): until then they stay
 * out of the resident set, --io load, the expert cache and the memory plan
 * (e0_model.used). NULL: absent (only the last three may be). */
typedef struct {
    int blk;                                          /* its blk index */
    const st_tensor *attn_norm, *post_norm;           /* [H] */
    const st_tensor *q, *k, *v, *o, *q_norm, *k_norm; /* as a full-attention layer's */
    const st_tensor *router;                          /* [E, H] */
    const st_tensor *gate, *up, *gate_up, *down; /* [E, I, H] x2 or gate_up [E, 2I, H]; [E, H, I] */
    const st_tensor *sh_gate, *sh_up, *sh_down, *sh_router; /* when cfg.shared_inter > 0 */
    const st_tensor *eh_proj;        /* nextn.eh_proj [H, 2H]: [embedding | hidden] -> H */
    const st_tensor *enorm, *hnorm;  /* nextn.enorm / hnorm [H]: the two inputs' norms */
    const st_tensor *head_norm;      /* nextn.shared_head_norm [H] (NULL: output_norm) */
    const st_tensor *embed, *head;   /* nextn.embed_tokens / shared_head_head [V, H] (NULL:
                                        token_embd / output) */
} e0_mtp_layer;

typedef struct {
    int n_layers;          /* cfg.mtp_layers (HF / mlx folders: the mtp.layers.N present) */
    e0_mtp_layer *layers;  /* [n_layers] (GGUF; NULL for folders) */
    int n_tensors;
    uint64_t bytes;        /* all their tensors */
    /* The block the model computes (model_mtp_load): the first one, whose
     * decoder layer is e0_model.layers[cfg.n_layers]; the rest here. For
     * position t it reads the main model's hidden state at t after the
     * final norm (hidden) and the embedding of the id at t + 1 (emb):
     *   x = eh_proj([enorm(emb) | hnorm(hidden)]); x = layer(x);
     *   logits = head(head_norm(x))   (predicting the id at t + 2)
     * (tools/train/qwen35.py's docstring has where this convention comes
     * from: vLLM's Qwen3.5 MTP module). */
    bool on;
    e0_mat eh_proj;               /* [H, 2H]: [normed embedding | normed hidden] -> H */
    float *enorm, *hnorm;         /* [H], shift folded in */
    float *head_norm;             /* [H]: the block's own, else NULL (final_norm) */
    e0_mat embed, head;           /* [V, H]: the block's own; rows 0: the main model's
                                     (read through model_mtp_embed / _head: a repack
                                     rewrites the main ones' views) */
    int64_t draft_vocab;          /* the head rows a draft scores (e0_engine_opts.mtp_vocab) */
} e0_mtp;

typedef struct {
    e0_config cfg;
    st_set *st;
    const char *layout; /* "hf", "hf-fused", "mlx", "mlx-fused" */
    e0_mat embed;       /* [V, H] */
    e0_mat lm_head;     /* [V, H] */
    float *final_norm;  /* [H] */
    e0_layer *layers;     /* [model_layers(m)]: the main layers, then the MTP block's when on */
    float *rope_inv_freq; /* [rotary_dim / 2] */
    uint64_t weight_bytes, expert_bytes; /* the tensors the model computes with; the routed experts */
    e0_mtp mtp;                          /* the MTP blocks (none: n_layers 0) */
    /* [st_count]: 1 for every tensor the model computes with. The others
     * (the MTP blocks unless computed (2 in GGUF files); in HF and mlx
     * folders vision and any tensor no loader looks up) are never pinned,
     * loaded or counted */
    uint8_t *used;
} e0_model;

int model_load(e0_model *m, const char *dir, char *err);
/* After model_load: the first MTP block made part of the model (e0_mtp.on):
 * its views built, its tensors counted in weight_bytes (and its experts in
 * expert_bytes) and marked used, so that pinning, --io load and the memory
 * plan take it like a layer. E0_ENOTFOUND naming the file when it has no
 * block; E0_EUNSUPPORTED for more than one (edge0 drafts one token). */
int model_mtp_load(e0_model *m, char *err);
/* The MTP block's embedding and head: its own, else the main model's. */
static inline const e0_mat *model_mtp_embed(const e0_model *m) {
    return m->mtp.embed.rows ? &m->mtp.embed : &m->embed;
}
static inline const e0_mat *model_mtp_head(const e0_model *m) {
    return m->mtp.head.rows ? &m->mtp.head : &m->lm_head;
}
/* The layers the model computes: the main ones, and the MTP block's. */
static inline int model_layers(const e0_model *m) { return m->cfg.n_layers + (m->mtp.on ? 1 : 0); }
/* After st_set_load: rewrites the loaded copy's 4-bit matrices that the
 * compute paths read with mat_matmul (not routers, not the embedding) into
 * the 16-row panel layout (mat.h), in place, and points their views at it.
 * Matrices that do not qualify (mat_p16_ok; parts not contiguous) keep the
 * file layout: the kernels compute the same results on both. Extra memory
 * while it runs: one tensor's bytes. Returns the number of matrices
 * repacked (stacked experts count once); never fails (without memory for
 * the scratch, nothing is repacked). `progress` (may be NULL) is told the
 * bytes repacked so far and the total after each matrix. */
int model_repack(e0_model *m, st_load_fn progress, void *ctx);
/* --io load: st_set_load of the checkpoint less the tensors the model does
 * not compute with (e0_model.used). */
int model_load_weights(e0_model *m, st_load_fn progress, void *ctx, char *err);
void model_free(e0_model *m);
/* Everything but the routed experts (and the tensors the model does not
 * compute with) copied out of the file mappings
 * (st_set_pin): with pread I/O, a checkpoint truncated while running then
 * fails expert reads with an error instead of killing the process. */
int model_pin_resident(e0_model *m, uint64_t *pinned, char *err);
/* Starts reading layer `layer`'s resident (non-expert) weights into the page
 * cache (MADV_WILLNEED), or the lm_head for layer == n_layers: a prefill
 * calls it one layer ahead, so that a cold start or pages the kernel
 * dropped under memory pressure do not stall the compute threads on page
 * faults. Costs a page-cache lookup when the pages are there: ~4 ms for
 * all 41 calls of the 35B shape, so only batches of MODEL_ADVISE_MIN_T
 * tokens or more (hundreds of ms of compute) ask for it. */
enum { MODEL_ADVISE_MIN_T = 16 };
void model_advise_layer(const e0_model *m, int layer);

#endif
