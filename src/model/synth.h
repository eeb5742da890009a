/* Random-weight checkpoints with a real model's tensor names, shapes and
 * layout (mlx affine 4-bit g64, routers and shared-expert gates 8-bit), for
 * tests, the built-in demo and benchmarks. */
#ifndef E0_MODEL_SYNTH_H
#define E0_MODEL_SYNTH_H

#include <stdint.h>

typedef struct {
    const char *name;
    int hidden, n_layers, vocab;
    int n_heads, n_kv_heads, head_dim;
    double partial_rotary, rope_theta;
    int lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, conv_kernel, full_attention_interval;
    int n_experts, top_k, moe_inter, shared_inter;
} synth_shape;

/* The shape called `name`, or NULL. */
const synth_shape *synth_find(const char *name);
/* Comma-separated list of known shape names (static string). */
const char *synth_names(void);

/* Writes a qwen3_5_moe checkpoint of `shape` into directory `dst` (created;
 * it must not exist). Weights come from a PRNG seeded with `seed`, scaled so
 * activations stay O(1) through every layer. The directory appears
 * atomically: it is written as DST.tmp-XXXXXX and renamed at the end. */
int synth_write(const synth_shape *shape, const char *dst, uint64_t seed, char *err);

#endif
