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

#include "edge0.h"

/* The converter's API (e0_convert_*) is public: edge0.h. */

#endif
