/* What the synth writers share (synth.c: mlx / hf safetensors;
 * synth_gguf.c: GGUF): the random streams, the per-tensor stds that keep
 * activations O(1) (synth.h explains the scaling) and the generators of
 * small tensors (synth_common.c). Internal to src/synth. */
#ifndef E0_SYNTH_SYNTH_INT_H
#define E0_SYNTH_SYNTH_INT_H

#include "synth/synth.h"
#include "util/rng.h"

#include <stdint.h>

/* ---- random numbers: splitmix64 to seed, xoshiro256** to draw ---------- */

typedef struct {
    uint64_t s[4];
} xrng;

/* A stream for (seed, a, b): independent of thread count and job order. */
static inline void xr_seed(xrng *r, uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t x = seed ^ 0x5eed5eed5eed5eedull;
    x = splitmix64(&x) ^ a;
    x = splitmix64(&x) ^ b;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static inline uint64_t synth_rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t xr_next(xrng *r) {
    uint64_t *s = r->s;
    const uint64_t out = synth_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = synth_rotl(s[3], 45);
    return out;
}

/* uniform in [0, 1) */
static inline double xr_unif(xrng *r) {
    return (double)(xr_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- scaling ------------------------------------------------------------ */

typedef struct {
    double gamma;                     /* RMS each block adds to the residual stream */
    float embed, in, router, lm_head; /* stds */
    float o_proj, out_proj, down, sh_down;
} synth_gains;

synth_gains synth_gains_of(const e0_synth_shape *s);

/* ---- generators --------------------------------------------------------- */

/* nb random blocks of ggml type `type` (Q4_K, Q6_K, Q5_0, Q8_0, Q5_K, Q4_0,
 * IQ4_NL, IQ4_XS; nothing for others) whose dequantized values have std
 * `std` and, per block (Q4_K: per sub-block), mean exactly 0 (synth_blocks.c). */
void synth_gen_blocks(uint32_t type, double std, xrng *r, int64_t nb, uint8_t *out);

#define SYNTH_GROUP 64

/* Small tensors, one value at a time. */
typedef enum { SYNTH_V_NORM, SYNTH_V_ALOG, SYNTH_V_DTBIAS, SYNTH_V_CONV } synth_vkind;

/* One value of a small tensor: a norm (base + k/128, k in [-2, 2], exact
 * in bf16), A_log (log A, A uniform in [1, 16) as the released models
 * initialise it), dt_bias (softplus(dt_bias) log-uniform in [1e-3, 1e-1])
 * or a conv weight (uniform, std 1/sqrt(fan)). */
float synth_vec_value(xrng *r, synth_vkind kind, float base, int64_t fan);

/* SYNTH_GROUP values uniform with std `std` (one group of a float weight
 * row); returns their sum, which the caller subtracts (mean 0). */
float synth_group_uniform(xrng *r, float std, float v[SYNTH_GROUP]);

/* ---- routing profiles (synth_common.c) ------------------------------- */

/* The router's parameters of one profile (io/config.h e0_route_cfg). */
typedef struct {
    const char *name, *about;
    double popularity, recent, window, decay;
    int window_len;
} synth_route;

/* The profile named o->route_profile, NULL when none is asked for; fails
 * on an unknown name or with route_skew / route_stickiness also given. */
int synth_route_of(const e0_synth_opts *o, const synth_route **out, char *err);
/* The GGUF keys edge0.route_stickiness (when > 0) and edge0.route_* of
 * the profile (io/config_route.c reads them back). */
struct gguf_writer;
int synth_route_gguf(struct gguf_writer *w, const e0_synth_opts *o, char *err);

/* ---- the GGUF format (synth_gguf.c) ---------------------------------- */

int synth_gguf_plan_info(const e0_synth_shape *s, const e0_synth_opts *o, e0_synth_info *info, char *err);
int synth_gguf_write(const e0_synth_shape *s, const char *dst, const e0_synth_opts *o, char *err);

#endif
