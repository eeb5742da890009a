/* Helpers the layer files (attention.c, deltanet.c, moe.c) share with the
 * session's passes (session.c): making a one-session batch, the RMS norm.
 * Their own file, so that the layer files and the session do not call
 * into each other; inline, as the layer files' calls were before (the
 * per-head QK norm among them). */
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

#endif
