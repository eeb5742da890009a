/* What the synth writers share (synth_int.h): the per-tensor stds and
 * the generators of values. Both writers (synth.c, synth_gguf.c) call in;
 * nothing here calls out to them. */
#include "synth/synth_int.h"
#include "io/gguf.h"
#include "util/err.h"

#include <math.h>
#include <stddef.h>
#include <string.h>
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

/* ======================================================================
 * Routing profiles (synth.h): parameters of the router's profile (io/
 * config.h e0_route_cfg), fitted so that scripts/route_stats.py shows a
 * 128-token greedy decode within 5 points / 10% of the published figures
 * (docs/experiments.md, session 29).
 * ====================================================================== */

static const synth_route ROUTES[] = {
    {"qwen36", "Qwen3.6-35B-A3B's measured decode routing (E=256, k=8): 37% kept from the "
               "previous token, LRU 16/32/64 hits 50/70/83%, top-16/32 experts 42/60%",
     0.43, 1.79, 1.31, 0.904, 128},
    {"qwen3-30b", "Qwen3-30B-A3B's measured decode routing (E=128, k=8): 45% kept from the "
                  "previous token, 80% within 8 tokens, an LRU of 40% of the experts hits 90-95%",
     1.02, 1.22, 0.95, 0.889, 64},
};

#define N_ROUTES (sizeof ROUTES / sizeof *ROUTES)

const char *e0_synth_route_profiles(void) {
    return "qwen36, qwen3-30b";
}

const char *e0_synth_route_about(size_t i) {
    return i < N_ROUTES ? ROUTES[i].about : NULL;
}

int synth_route_of(const e0_synth_opts *o, const synth_route **out, char *err) {
    *out = NULL;
    if (!(o->route_stickiness >= 0 && o->route_stickiness <= 1))
        return e0_fail(err, E0_EINVAL, "route stickiness %g is outside [0, 1]", o->route_stickiness);
    if (!o->route_profile) return 0;
    for (size_t i = 0; i < N_ROUTES; i++)
        if (!strcmp(ROUTES[i].name, o->route_profile)) *out = &ROUTES[i];
    if (!*out)
        return e0_fail(err, E0_EINVAL, "unknown route profile '%s' (known: %s)", o->route_profile,
                       e0_synth_route_profiles());
    if (o->route_skew > 0 || o->route_stickiness > 0)
        return e0_fail(err, E0_EINVAL, "route profile '%s' sets the routing itself: give it without "
                       "route skew or stickiness", o->route_profile);
    return 0;
}

int synth_route_gguf(gguf_writer *w, const e0_synth_opts *o, char *err) {
    const synth_route *rt;
    int rc = synth_route_of(o, &rt, err);
    if (!rc && o->route_stickiness > 0)
        rc = gguf_writer_add_f32(w, "edge0.route_stickiness", (float)o->route_stickiness, err);
    if (rc || !rt) return rc;
    const uint64_t seed = o->seed & ((1ull << 53) - 1); /* as config.json's */
    if (!rc) rc = gguf_writer_add_str(w, "edge0.route_profile", rt->name, err);
    if (!rc) rc = gguf_writer_add_f32(w, "edge0.route_popularity", (float)rt->popularity, err);
    if (!rc) rc = gguf_writer_add_f32(w, "edge0.route_recent", (float)rt->recent, err);
    if (!rc) rc = gguf_writer_add_f32(w, "edge0.route_window", (float)rt->window, err);
    if (!rc) rc = gguf_writer_add_f32(w, "edge0.route_decay", (float)rt->decay, err);
    if (!rc) rc = gguf_writer_add_u32(w, "edge0.route_window_len", (uint32_t)rt->window_len, err);
    if (!rc) rc = gguf_writer_add_u64(w, "edge0.route_seed", seed, err);
    return rc;
}
