/* Random-weight checkpoints with a released model's tensor names, shapes,
 * dtypes and layout, for tests, the built-in demo and benchmarks.
 *
 * Formats:
 *  - mlx (default): mlx affine 4-bit, group 64; routers (mlp.gate) and
 *    shared-expert gates 8-bit, listed per module in config.json
 *    "quantization"; experts stacked as switch_mlp.{gate,up,down}_proj
 *    [E, out, in*bits/32]; hybrid norms stored as 1 + w; conv1d [C, K, 1].
 *  - hf: bf16 in the released Hugging Face layout: per-expert tensors
 *    (qwen3_moe, qwen3_next), fused 3-D experts under "model.language_model."
 *    (qwen3_5_moe); hybrid norms zero-centred; conv1d [C, 1, K].
 * Text model only: no vision tower, no MTP head.
 *
 * The writer streams: every tensor's name, dtype, shape and offset is
 * planned first, the safetensors headers are written, then worker threads
 * generate each tensor in chunks of a few MiB and pwrite them in place.
 * Quantized codes are drawn directly (xoshiro256**, 16 4-bit codes per draw),
 * never quantized from floats, so memory stays at threads x chunk and speed
 * near the disk's. Output is the same for any thread count.
 *
 * Scaling (why random activations stay O(1) and routing does not collapse):
 *  - every group of 64 weights along a matrix's input dimension has mean
 *    exactly 0 (the group's bias is -scale * mean(codes)), so no matrix maps
 *    a shared offset of its inputs into a shared output direction; random
 *    checkpoints without this pile a common component onto every token's
 *    hidden state and the router then picks the same experts for all tokens;
 *  - input projections have std 1/sqrt(in), block outputs (o_proj, out_proj,
 *    down_proj) are scaled so each block adds RMS ~1/sqrt(layers) to a
 *    residual stream that starts at RMS 1;
 *  - routers give logits of std 1 for every token, so routing is close to
 *    uniform over experts.
 * Route skew (--route-skew S > 0) plants a direction that is constant over
 * each group of 64 hidden dims into every embedding row; all other matrices
 * are blind to it (zero-mean groups) except the routers, whose rows get a
 * per-expert component along it. That adds a fixed per-expert logit offset
 * -S * 1.6 ln(rank + 1) / sqrt(2 ln E) (in units of the logit noise), with a
 * random expert ranking per layer, so the share of routed tokens an expert
 * gets falls off like (rank + 1)^-S.
 *
 * Route stickiness (--route-stickiness P in [0, 1]) is not in the weights:
 * it is written to config.json as "edge0_synth": {"route_stickiness": P}
 * and applied by the router (model/moe.c, sticky_apply) of any model whose
 * config carries it. Real routers repeat experts from one token to the next
 * (published: consecutive tokens share 10-30% of their experts); random
 * weights do not (k^2/E by chance), so caching, staging and prediction
 * would only ever be studied on the worst case. With n = round(P * k): after
 * the router's top-k of the token at position p, if fewer than n of its
 * picks are among the experts of position p - 1 in the same layer, its
 * lowest-weighted picks that are not shared are replaced by position
 * p - 1's highest-weighted experts that are not picked, until n are shared;
 * every weight is then the token's own softmax probability of its expert,
 * renormalised as usual. Consecutive tokens thus share at least n experts
 * per layer (exactly n unless the router already repeats more). P = 0 and
 * no key route identically. A sticky variant of a checkpoint is its
 * directory with the safetensors symlinked and config.json edited.
 */
#ifndef E0_SYNTH_SYNTH_H
#define E0_SYNTH_SYNTH_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { SYNTH_QWEN3_MOE, SYNTH_QWEN3_NEXT, SYNTH_QWEN3_5_MOE } synth_family;

typedef struct {
    const char *name;
    const char *released; /* the released model whose shape this is; "" for test shapes */
    synth_family family;
    int hidden, n_layers, vocab;
    int n_heads, n_kv_heads, head_dim;
    double partial_rotary, rope_theta;
    int lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, conv_kernel, full_attention_interval;
    int n_experts, top_k, moe_inter, shared_inter;
    int dense_inter;       /* config "intermediate_size" (no dense layers; 0: omitted) */
    int max_pos, bos, eos; /* bos < 0: null */
} synth_shape;

/* The shape called `name`, or NULL. */
const synth_shape *synth_find(const char *name);
/* Comma-separated list of known shape names (static string). */
const char *synth_names(void);
/* Shapes by index, i < synth_count(). */
size_t synth_count(void);
const synth_shape *synth_at(size_t i);

/* SYNTH_GGUF: one .gguf file (or a split set), llama.cpp's names and
 * metadata for the architecture and llama-quantize's Q4_K_M type mix with
 * random blocks (synth_gguf.c explains the mix and the block scaling). */
typedef enum { SYNTH_MLX, SYNTH_HF, SYNTH_GGUF } synth_format;

/* SYNTH_GGUF's type mix, as llama-quantize's ftype of that name gives it
 * (approximately: synth_gguf.c). */
typedef enum { SYNTH_MIX_Q4_K_M, SYNTH_MIX_Q8_0, SYNTH_MIX_IQ4_XS, SYNTH_MIX_Q4_0 } synth_gguf_mix;

typedef enum { SYNTH_WRITING, SYNTH_SYNCING, SYNTH_DONE } synth_phase;

typedef struct {
    synth_phase phase;
    uint64_t done, total; /* bytes of tensor data handed to the OS / planned */
    double seconds;       /* since the start */
} synth_progress;

typedef struct {
    synth_format format;
    uint64_t seed;
    double route_skew;    /* 0: near-uniform routing; S > 0: Zipf(S)-like expert popularity */
    double route_stickiness; /* [0, 1]: share of experts kept from the previous token (above) */
    int n_threads;        /* generator threads; 0: one per core, at most 8 */
    uint64_t shard_bytes; /* largest shard; 0: 5 GiB (as mlx-lm and transformers); gguf: 0 is
                             one file, else a split set NAME-0000K-of-0000N.gguf */
    synth_gguf_mix gguf_mix; /* gguf: the type mix (0: Q4_K_M) */
    const char *tokenizer; /* gguf: the tokenizer.json whose vocabulary, merges (and chat
                              template, from tokenizer_config.json beside it) are embedded */
    int no_sync;          /* skip the fsync before the rename (faster, not durable) */
    int sparse;           /* mlx / hf: headers and config only, every weight a hole that reads
                             as zero: the layout of a shape larger than the disk, for plans */
    /* Called on the calling thread about every 100 ms and once per phase. */
    void (*progress)(void *ctx, const synth_progress *p);
    void *progress_ctx;
    /* When *cancel becomes non-zero (e.g. from a SIGINT handler) the write
     * stops, leaves nothing behind and fails with E0_EINVAL. May be NULL. */
    const volatile sig_atomic_t *cancel;
} synth_opts;

void synth_opts_default(synth_opts *o);

#define SYNTH_GTYPES 40 /* ggml type ids (quant/ggml.h GGML_NTYPES) */

typedef struct {
    uint64_t bytes;  /* all safetensors files, headers included (gguf: all parts) */
    uint64_t params; /* logical parameters (quantized weights count once) */
    size_t n_tensors;
    int n_shards;
    /* gguf: tensors and data bytes of each ggml type */
    uint32_t type_tensors[SYNTH_GTYPES];
    uint64_t type_bytes[SYNTH_GTYPES];
} synth_info;

/* What synth_write_opts would write, without writing anything. */
int synth_plan_info(const synth_shape *shape, const synth_opts *o, synth_info *info, char *err);

/* Writes a checkpoint of `shape` into directory `dst` (gguf: the file
 * `dst`, or its split parts; created, it must not exist). The directory appears atomically: it is written as
 * DST.tmp-XXXXXX, synced, and renamed without replacing anything; on any
 * failure nothing is left behind. */
int synth_write_opts(const synth_shape *shape, const char *dst, const synth_opts *o, char *err);

/* synth_write_opts with the defaults (mlx, no skew) and `seed`. */
int synth_write(const synth_shape *shape, const char *dst, uint64_t seed, char *err);

#endif
