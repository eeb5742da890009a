/* Helpers the layer files (attention.c, deltanet.c, moe.c) share with the
 * session's passes (session.c) and the MTP block (mtp.c): making a
 * one-session batch, the RMS norm (inline, as the layer files' calls were
 * before: the per-head QK norm among them), and the forward pass in parts
 * (forward.c). Their own files, so that the layer files, the session and
 * the MTP block do not call into each other. */
#ifndef E0_MODEL_FORWARD_H
#define E0_MODEL_FORWARD_H

#include "edge0.h"
#include "model/model.h"

/* The batch of one session's T tokens at its next positions (run: its one
 * run); decode when T == 1. */
static inline e0_batch batch_one(e0_session *s, int T, e0_run *run) {
    *run = (e0_run){s, 0, T};
    return (e0_batch){
        .S = &s->s, .run = run, .nrun = 1, .T = T, .Tp = T >= K_PANEL_MIN_T ? T : 0, .decode = T == 1};
}

/* y[t] = w * x[t] / rms(x[t]) over n values, T rows. */
static inline void rmsnorm(const float *x, const float *w, int n, int T, float eps, float *y) {
    for (int t = 0; t < T; t++) {
        const float *xt = x + (size_t)t * n;
        float ss = 0.0f;
        for (int i = 0; i < n; i++)
            ss += xt[i] * xt[i];
        float inv = 1.0f / sqrtf(ss / (float)n + eps);
        for (int i = 0; i < n; i++)
            y[(size_t)t * n + i] = w[i] * (xt[i] * inv);
    }
}

/* A forward pass in three parts, so that one can pause between layers
 * (session_eval_part, pass_step): the embeddings (forward_begin: every
 * run's ids, [T] in run order), layers [l0, l1) (forward_layers, or
 * forward_half one half of a layer at a time: 0 the token mixer, 1 the
 * MLP), then the positions moved on (forward_end). The pass's state
 * between the parts is the scratch's x and the layers' KV rows and states
 * already written; the arithmetic is the same however the layers are cut.
 * The halves and layers fail only when expert bytes cannot be read. */
void embed_run(const e0_batch *b, int r, const int32_t *ids);
void forward_begin(const e0_batch *b, const int32_t *ids);
int forward_half(const e0_batch *b, int li, int h, char *err);
int forward_layers(const e0_batch *b, int l0, int l1, char *err);
void forward_end(const e0_batch *b);
/* All of it over the main layers: leaves the final residual stream in
 * S->x and advances each session's position. */
int forward(const e0_batch *b, const int32_t *ids, char *err);

#endif
