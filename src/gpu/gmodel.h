/* The model on a GPU: every weight in device memory, and sessions whose KV
 * caches, DeltaNet states and activations live there too. A forward pass
 * is a sequence of kernel launches on the device's stream with no host
 * round trip between layers (routing included: the experts' pairs are
 * grouped on the device, model/moe.c's arithmetic per token); the host
 * copies in the embedded ids' rows and copies out the logits.
 *
 * This is the all-resident tier: dense weights, every routed expert and
 * the lm_head in device memory (gpu_model_bytes says how much). The VRAM
 * expert cache that streams experts into a budget builds on it
 * (docs/design.md, backends).
 *
 * Arithmetic: f32 throughout, weights dequantized from their checkpoint
 * format as the CPU's scalar references do; sums in another order than
 * the CPU's, so logits agree with `--kernels exact` to rounding (tests:
 * relative L2 under 5e-3, the same argmax), and with themselves bit for
 * bit run after run.
 */
#ifndef E0_GPU_GMODEL_H
#define E0_GPU_GMODEL_H

#include "gpu/gpu.h"
#include "weights/weights.h"

typedef struct {
    gpu_mat q, k, v, o;
    gpu_mat qkvz, ba, qkv, z, b, a, out;
    gpu_mat router, sh_gate, sh_up, sh_down, sh_router;
    gpu_mat mlp_gate, mlp_up, mlp_down;
    gpu_mat xg, xu, xd; /* the routed experts, stacked: gate, up, down */
    CUdeviceptr in_norm, post_norm, q_norm, k_norm, conv_w, A, dt_bias, lin_norm;
} gpu_layer;

typedef struct gpu_model {
    gpu_dev *d;
    const e0_model *m;
    int top_k;
    gpu_layer *L;
    gpu_mat lm_head;
    CUdeviceptr final_norm, inv_freq;
    uint64_t bytes; /* device memory the weights take */
} gpu_model;

/* Device bytes the weights of m take on the GPU (what gpu_model_new
 * allocates for them), and whether every matrix has a GPU kernel (0, or
 * E0_EUNSUPPORTED naming the first that does not). */
int gpu_model_bytes(const e0_model *m, uint64_t *bytes, char *err);
/* Copies every weight of m to the device. m must outlive the result;
 * top_k is the routing top-k in force. */
int gpu_model_new(gpu_model **out, gpu_dev *d, const e0_model *m, int top_k, char *err);
void gpu_model_free(gpu_model *g);

typedef struct gpu_sess gpu_sess;

/* Device bytes a session of n_ctx positions and batches of n_batch ids
 * takes (states, caches, scratch). */
uint64_t gpu_sess_bytes(const e0_model *m, int top_k, int n_ctx, int n_batch, bool kv_f16);
int gpu_sess_new(gpu_sess **out, gpu_model *g, int n_ctx, int n_batch, bool kv_f16, char *err);
void gpu_sess_free(gpu_sess *s);
/* Clears the states: the next evaluation starts at position 0. */
int gpu_sess_reset(gpu_sess *s, char *err);
/* Evaluates ids at positions pos .. pos + T - 1 (T <= n_batch, pos + T <=
 * n_ctx; the caller checks): every layer on the device, then the logits of
 * the last id (last) or of every id (logits: [T, vocab]); logits may be
 * NULL for none. On failure the states are partly updated: reset. */
int gpu_sess_eval(gpu_sess *s, int pos, const int32_t *ids, int T, bool all, float *logits,
                  char *err);

#endif
