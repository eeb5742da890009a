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
 *
 * Route profiles (--route-profile NAME; synth_common.c's table) are not in
 * the weights either: "edge0_synth" gets route_profile, route_popularity,
 * route_recent, route_window, route_decay, route_window_len and route_seed
 * (GGUF: edge0.route_* keys), and the router adds a per-layer popularity
 * and a recency bonus to each token's logits (io/config.h e0_route_cfg,
 * model/moe.c profile_apply). Each profile's parameters were fitted with
 * scripts/route_stats.py on bench traces (docs/experiments.md, session 29
 * routing profiles; bench/routes/).
 */
#ifndef E0_SYNTH_SYNTH_H
#define E0_SYNTH_SYNTH_H

#include "edge0.h"

/* The writer's API (e0_synth_*) is public: edge0.h. */

#endif
