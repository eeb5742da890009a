/* edge0 convert: a Hugging Face checkpoint to the mlx layout (docs/design.md §2).
 *
 * Source: any HF layout of the three families — per-expert experts
 * (`mlp.experts.E.{gate,up,down}_proj.weight`) or fused 3-D experts
 * (`mlp.experts.gate_up_proj` [E, 2I, H], gate rows first, and
 * `mlp.experts.down_proj` [E, H, I]); one model.safetensors or shards with
 * model.safetensors.index.json; weights in BF16, F16 or F32.
 *
 * Output, as mlx-lm's convert writes it:
 *  - names: "model." (qwen3_moe, qwen3_next); "language_model.model." and
 *    "language_model.lm_head" for qwen3_5_moe, whatever the source prefix
 *    (mlx-lm's sanitize); config.json is the source's, nesting kept, with a
 *    "quantization" and an identical "quantization_config" block;
 *  - every linear layer and the embedding quantized (mlx affine, bits and
 *    group from the options; a layer whose input width does not divide into
 *    groups stays in its source dtype); routers (mlp.gate) and shared-expert
 *    gates 8-bit group 64, listed per module;
 *  - experts stacked as switch_mlp.{gate,up,down}_proj [E, out, in*bits/32],
 *    or with fused_gate_up one switch_mlp.gate_up_proj [E, 2I, ...] whose
 *    rows per expert are gate on top, up below;
 *  - hybrid families: input/post-attention/final/q/k norms stored as 1 + w
 *    (not linear_attn.norm); conv1d [C, 1, K] -> [C, K, 1] (same bytes);
 *    A_log as F32; dt_bias and other vectors in their source dtype;
 *  - mtp.*, vision tower and rotary inv_freq tensors dropped; any other
 *    tensor the config has no place for is an error. With keep_mtp the
 *    mtp.* (model.mtp.*) tensors are copied as the source has them (names,
 *    dtype, shape, values: not quantized, not stacked) for a later MTP
 *    draft; edge0's loader leaves them alone;
 *  - safetensors shards of at most shard_bytes, __metadata__ {"format":
 *    "mlx"}, model.safetensors.index.json, and the tokenizer and generation
 *    files copied.
 *
 * Streaming, bounded memory: every output tensor's name, shape, shard and
 * offset is planned (and every source tensor's dtype and shape checked
 * against config.json) before anything is written; then worker threads take
 * jobs of a few MiB of source rows in file order, pread them (the source is
 * never touched through its mapping, so it never counts in RSS), quantize
 * in f32 and pwrite the words, scales and biases in place. Memory is
 * threads x a few MiB, whatever the model's size.
 *
 * Atomic: the output is written to DST.tmp-XXXXXX next to DST, synced and
 * renamed at the end; on any failure or cancel nothing is left behind. An
 * existing DST is refused unless `force` (then it must look like a model
 * directory, and is replaced only once the new one is complete).
 */
#ifndef E0_CONVERT_CONVERT_H
#define E0_CONVERT_CONVERT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { CONVERT_WRITING, CONVERT_SYNCING, CONVERT_DONE } convert_phase;

typedef struct {
    convert_phase phase;
    uint64_t done, total; /* source tensor bytes converted / to convert */
    uint64_t written;     /* output bytes handed to the OS */
    double seconds;       /* since the start */
} convert_progress;

typedef struct {
    int bits;             /* 4 or 8 (2, 3, 5, 6 also accepted); default 4 */
    int group;            /* 32, 64 or 128; default 64 */
    int fused_gate_up;    /* write switch_mlp.gate_up_proj instead of gate_proj + up_proj */
    int force;            /* replace an existing DST */
    int n_threads;        /* worker threads; 0: one per core, at most 8 */
    uint64_t shard_bytes; /* largest shard; 0: 5 GiB (as mlx-lm) */
    int no_sync;          /* skip the fsyncs before the rename (faster, not durable) */
    int keep_mtp;         /* copy mtp.* as they are instead of dropping them */
    /* Called on the calling thread about every 100 ms and once per phase. */
    void (*progress)(void *ctx, const convert_progress *p);
    void *progress_ctx;
    /* When *cancel becomes non-zero the conversion stops, leaves nothing
     * behind and fails with E0_EINVAL. May be NULL. */
    const volatile sig_atomic_t *cancel;
} convert_opts;

void convert_opts_default(convert_opts *o);

typedef struct {
    char family[16];       /* "qwen3_moe", "qwen3_next", "qwen3_5_moe" */
    char src_layout[16];   /* "hf" (per-expert) or "hf-fused" */
    size_t src_tensors;    /* tensors in the source */
    size_t dropped;        /* source tensors left out (MTP, vision, inv_freq, tied lm_head) */
    size_t kept_mtp;       /* mtp.* tensors copied as they are (keep_mtp) */
    char dropped_example[128];
    size_t out_tensors;    /* tensors written */
    size_t quantized;      /* modules quantized */
    int n_shards;
    uint64_t src_bytes;    /* source tensor bytes read */
    uint64_t out_bytes;    /* safetensors bytes written, headers included */
    size_t copied_files;   /* tokenizer / generation files copied */
} convert_info;

/* Checks SRC and plans the output without writing anything. */
int convert_plan(const char *src, const convert_opts *o, convert_info *info, char *err);

/* Converts SRC into the new directory DST. info may be NULL. */
int convert_run(const char *src, const char *dst, const convert_opts *o, convert_info *info, char *err);


#endif
