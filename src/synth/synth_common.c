/* What the synth writers share (synth_int.h): the per-tensor stds and
 * the generators of values. Both writers (synth.c, synth_gguf.c) call in;
 * nothing here calls out to them. */
#include "synth/synth_int.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* ======================================================================
 * Scaling (see synth.h): target stds of every kind of tensor.
 * ====================================================================== */

#define SILU2 0.35578 /* E[silu(z)^2], z ~ N(0, 1) */
#define SIG2  0.29338 /* E[sigmoid(z)^2] */

typedef synth_gains gains;

synth_gains synth_gains_of(const e0_synth_shape *s) {
    const double H = s->hidden, gamma = 1.0 / sqrt((double)s->n_layers);
    const bool hybrid = s->family != E0_SYNTH_QWEN3_MOE;
    gains g = {.gamma = gamma, .embed = 1.0f};
    g.in = (float)(1.0 / sqrt(H));
    g.router = (float)(1.0 / sqrt(H)); /* logits ~ N(0, 1) per token */
    g.lm_head = (float)(3.0 / sqrt(H));
    /* attention output: values of RMS ~1 (times the sigmoid gate when gated) */
    g.o_proj =
        (float)(gamma / ((hybrid ? sqrt(SIG2) : 1.0) * sqrt((double)s->n_heads * s->head_dim)));
    /* DeltaNet: RMS-normed heads times silu(z) */
    g.out_proj =
        (float)(gamma / (sqrt(SILU2) * sqrt((double)s->lin_v_heads * s->lin_v_dim + 1e-9)));
    /* MoE: top-k experts with near-equal weights (sum of k independent outputs
     * scaled by ~1/k); the hybrids split the block's output with the shared
     * expert, whose sigmoid gate averages sqrt(SIG2). */
    const double routed = hybrid ? gamma / sqrt(2.0) : gamma;
    g.down = (float)(routed * sqrt((double)s->top_k) / (sqrt(SILU2) * sqrt((double)s->moe_inter)));
    g.sh_down = hybrid ? (float)(gamma / sqrt(2.0) /
                                 (sqrt(SIG2) * sqrt(SILU2) * sqrt((double)s->shared_inter)))
                       : 0;
    return g;
}

/* ======================================================================
 * Generators of values.
 * ====================================================================== */

float synth_group_uniform(xrng *r, float std, float v[SYNTH_GROUP]) {
    const float k = std * 1.7320508f / 32768.0f; /* uniform on [-sqrt(3) std, sqrt(3) std] */
    float sum = 0;
    for (int i = 0; i < SYNTH_GROUP; i += 4) {
        uint64_t x = xr_next(r);
        for (int j = 0; j < 4; j++) {
            v[i + j] = ((float)(uint16_t)(x >> (16 * j)) - 32767.5f) * k;
            sum += v[i + j];
        }
    }
    return sum;
}

float synth_vec_value(xrng *r, synth_vkind kind, float base, int64_t fan) {
    switch (kind) {
    case SYNTH_V_NORM:
        return base + (float)((int)(xr_next(r) % 5) - 2) / 128.0f;
    case SYNTH_V_ALOG:
        return logf(1.0f + 15.0f * (float)xr_unif(r));
    case SYNTH_V_DTBIAS: { /* softplus(dt_bias) = dt */
        double dt = exp(log(1e-3) + xr_unif(r) * (log(1e-1) - log(1e-3)));
        return (float)(dt + log(-expm1(-dt)));
    }
    case SYNTH_V_CONV:
        return (float)((xr_unif(r) * 2.0 - 1.0) * 1.7320508 / sqrt((double)fan));
    }
    return 0;
}
