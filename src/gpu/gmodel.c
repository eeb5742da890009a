/* The all-resident GPU model and its forward pass (gpu/gmodel.h). */
#include "gpu/gmodel.h"

#include "util/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- weights ------------------------------------------------------------ */

/* Calls fn on every matrix of the model that a forward pass reads (the
 * experts of layer li as three stacks, separately), with a name for
 * messages. fn returns 0 to go on. */
typedef int (*mat_fn)(void *ctx, const e0_mat *m, const char *name, char *err);
typedef int (*stack_fn)(void *ctx, const e0_mat *const *ms, int n, const char *name, char *err);

static bool present(const e0_mat *m) { return m->w != NULL && m->rows > 0; }

/* The layer's matrices in one fixed order: its slots in gpu_layer. */
static int layer_mats(const e0_layer *ly, const e0_mat **mats, gpu_mat **slots, gpu_layer *gl) {
    int n = 0;
#define M(field)                                 \
    do {                                         \
        if (present(&ly->field)) {               \
            mats[n] = &ly->field;                \
            slots[n] = gl ? &gl->field : NULL;   \
            n++;                                 \
        }                                        \
    } while (0)
    M(q); M(k); M(v); M(o);
    M(qkvz); M(ba); M(qkv); M(z); M(b); M(a); M(out);
    M(router); M(sh_gate); M(sh_up); M(sh_down); M(sh_router);
    M(mlp_gate); M(mlp_up); M(mlp_down);
#undef M
    return n;
}

/* Layer ly's vectors (norms; DeltaNet's conv weights, A, dt_bias and
 * norm), as layer_mats lists its matrices: src[i] of n[i] floats, uploaded
 * to *dst[i] (gl's field; gl NULL: dst is not written). Returns how many. */
static int layer_vecs(const e0_config *c, const e0_layer *ly, gpu_layer *gl, const float **src, size_t *n,
                      CUdeviceptr **dst) {
    int k = 0;
#define V(f, count) (src[k] = ly->f, n[k] = (size_t)(count), gl ? (void)(dst[k] = &gl->f) : (void)0, k++)
    V(in_norm, c->hidden);
    V(post_norm, c->hidden);
    if (!ly->linear) {
        V(q_norm, c->head_dim);
        V(k_norm, c->head_dim);
    } else {
        const int64_t C = 2 * (int64_t)c->lin_k_heads * c->lin_k_dim + (int64_t)c->lin_v_heads * c->lin_v_dim;
        V(conv_w, C * c->conv_kernel);
        V(A, c->lin_v_heads);
        V(dt_bias, c->lin_v_heads);
        V(lin_norm, c->lin_v_dim);
    }
#undef V
    return k;
}

/* n floats on the device, as gpu_alloc takes them */
static uint64_t f32s(size_t n) { return gpu_up256((uint64_t)n * 4); }

int gpu_model_sizes(const e0_model *m, gpu_sizes *z, char *err) {
    const e0_config *c = &m->cfg;
    memset(z, 0, sizeof *z);
    z->dense = gpu_mat_bytes(&m->lm_head);
    gpu_fmt f;
    int rc = gpu_fmt_of(&m->lm_head, &f, err);
    if (rc) return e0_wrap(err, rc, "lm_head");
    for (int li = 0; li < c->n_layers; li++) {
        const e0_layer *ly = &m->layers[li];
        if (!ly->linear && c->head_dim > 256) /* attend_warps' lanes hold 8 dimensions each */
            return e0_fail(err, E0_EUNSUPPORTED, "layer %d: attention heads of %d dimensions (the GPU kernels take "
                           "256 at most)", li, c->head_dim);
        const e0_mat *mats[32];
        const int n = layer_mats(ly, mats, (gpu_mat *[32]){0}, NULL);
        for (int i = 0; i < n; i++) {
            if ((rc = gpu_fmt_of(mats[i], &f, err))) return e0_wrap(err, rc, "layer %d", li);
            z->dense += gpu_mat_bytes(mats[i]);
        }
        if (ly->moe && ly->experts) {
            const e0_expert *x = &ly->experts[0];
            if ((rc = gpu_fmt_of(&x->gate, &f, err)) || (rc = gpu_fmt_of(&x->up, &f, err)) ||
                (rc = gpu_fmt_of(&x->down, &f, err)))
                return e0_wrap(err, rc, "layer %d experts", li);
            const uint64_t one = gpu_mat_bytes(&x->gate) + gpu_mat_bytes(&x->up) + gpu_mat_bytes(&x->down);
            z->experts += (uint64_t)c->n_experts * one;
            if (one > z->slot) z->slot = one;
            z->min_slots = c->n_experts;
        }
        const float *src[8];
        size_t nv[8];
        const int k = layer_vecs(c, ly, NULL, src, nv, NULL);
        for (int i = 0; i < k; i++)
            if (src[i]) z->dense += f32s(nv[i]);
    }
    z->dense += f32s((size_t)c->hidden) + f32s((size_t)c->rotary_dim / 2); /* the final norm, RoPE's frequencies */
    if (config_route_on(c) && c->route.bias) z->dense += f32s((size_t)c->n_layers * (size_t)c->n_experts);
    return 0;
}

static int put_floats(gpu_dev *d, CUdeviceptr *p, const float *v, size_t n, const char *what,
                      char *err) {
    *p = 0;
    if (!v || !n) return 0;
    int rc = gpu_alloc(d, p, n * sizeof *v, what, err);
    if (!rc) rc = gpu_put(d, *p, v, n * sizeof *v, err);
    return rc;
}

static int upload_layer(gpu_model *g, int li, char *err) {
    const e0_model *m = g->m;
    const e0_config *c = &m->cfg;
    const e0_layer *ly = &m->layers[li];
    gpu_layer *gl = &g->L[li];
    gpu_dev *d = g->d;
    char what[64];
    snprintf(what, sizeof what, "layer %d", li);
    const e0_mat *mats[32];
    gpu_mat *slots[32];
    const int n = layer_mats(ly, mats, slots, gl);
    int rc = 0;
    for (int i = 0; !rc && i < n; i++) rc = gpu_mat_upload(d, mats[i], slots[i], what, err);
    const float *src[8];
    size_t nv[8];
    CUdeviceptr *dst[8];
    const int k = layer_vecs(c, ly, gl, src, nv, dst);
    for (int i = 0; !rc && i < k; i++) rc = put_floats(d, dst[i], src[i], nv[i], what, err);
    if (!rc && ly->moe && ly->experts && !g->vc) {
        const int E = c->n_experts;
        const e0_mat **gs = malloc(3 * (size_t)E * sizeof *gs);
        if (!gs) return e0_fail(err, E0_ENOMEM, "out of memory");
        for (int e = 0; e < E; e++) {
            gs[e] = &ly->experts[e].gate;
            gs[E + e] = &ly->experts[e].up;
            gs[2 * E + e] = &ly->experts[e].down;
        }
        snprintf(what, sizeof what, "layer %d experts", li);
        rc = gpu_mat_upload_stack(d, gs, E, &gl->xg, what, err);
        if (!rc) rc = gpu_mat_upload_stack(d, gs + E, E, &gl->xu, what, err);
        if (!rc) rc = gpu_mat_upload_stack(d, gs + 2 * E, E, &gl->xd, what, err);
        free(gs);
    }
    return rc;
}

int gpu_model_new(gpu_model **out, gpu_dev *d, const e0_model *m, int top_k, int n_slots, char *err) {
    *out = NULL;
    const e0_config *c = &m->cfg;
    if (c->route_stickiness > 0)
        return e0_fail(err, E0_EUNSUPPORTED,
                       "this synthetic checkpoint's route stickiness is computed on the CPU only");
    if (c->n_experts > 1024)
        return e0_fail(err, E0_EUNSUPPORTED, "%d experts (the GPU's routing takes up to 1024)", c->n_experts);
    if (c->conv_kernel > 8)
        return e0_fail(err, E0_EUNSUPPORTED, "a DeltaNet conv kernel of %d (the GPU takes up to 8)",
                       c->conv_kernel);
    for (int li = 0; li < c->n_layers; li++)
        if (m->layers[li].xfile)
            return e0_fail(err, E0_EUNSUPPORTED,
                           "the experts were rearranged for the CPU kernels before the GPU was opened");
    gpu_model *g = calloc(1, sizeof *g);
    if (!g) return e0_fail(err, E0_ENOMEM, "out of memory");
    g->d = d;
    g->m = m;
    g->top_k = top_k;
    g->L = calloc((size_t)c->n_layers, sizeof *g->L);
    const uint64_t held0 = d->held;
    gpu_sizes z;
    int rc = g->L ? 0 : e0_fail(err, E0_ENOMEM, "out of memory");
    if (!rc && n_slots > 0) rc = vcache_new(g, n_slots, err);
    /* the weights that follow in one allocation, the VRAM cache's slots beside it (gpu_arena_open) */
    if (!rc) rc = gpu_model_sizes(m, &z, err);
    if (!rc) rc = gpu_arena_open(d, z.dense + (g->vc ? 0 : z.experts), &g->arena, err);
    for (int li = 0; !rc && li < c->n_layers; li++) rc = upload_layer(g, li, err);
    if (!rc) rc = gpu_mat_upload(d, &m->lm_head, &g->lm_head, "lm_head", err);
    if (!rc) rc = put_floats(d, &g->final_norm, m->final_norm, (size_t)c->hidden, "final norm", err);
    if (!rc) rc = put_floats(d, &g->inv_freq, m->rope_inv_freq, (size_t)(c->rotary_dim / 2), "rope", err);
    if (!rc && config_route_on(c) && c->route.bias)
        rc = put_floats(d, &g->rbias, c->route.bias, (size_t)c->n_layers * (size_t)c->n_experts,
                        "the routing profile", err);
    if (g->arena) gpu_arena_stop(d);
    if (!rc) rc = gpu_sync(d, err);
    g->bytes = d->held - held0;
    if (rc) {
        gpu_model_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

void gpu_model_free(gpu_model *g) {
    if (!g) return;
    gpu_dev *d = g->d;
    const e0_config *c = &g->m->cfg;
    for (int li = 0; g->L && li < c->n_layers; li++) {
        gpu_layer *gl = &g->L[li];
        const e0_mat *mats[32];
        gpu_mat *slots[32];
        const int n = layer_mats(&g->m->layers[li], mats, slots, gl);
        for (int i = 0; i < n; i++) gpu_mat_free(d, slots[i], 1);
        if (!g->vc) {
            gpu_mat_free(d, &gl->xg, c->n_experts);
            gpu_mat_free(d, &gl->xu, c->n_experts);
            gpu_mat_free(d, &gl->xd, c->n_experts);
        }
        const float *src[8];
        size_t nv[8];
        CUdeviceptr *dst[8];
        const int k = layer_vecs(c, &g->m->layers[li], gl, src, nv, dst);
        for (int i = 0; i < k; i++) gpu_free(d, *dst[i], nv[i] * 4);
    }
    vcache_free(g);
    gpu_mat_free(d, &g->lm_head, 1);
    gpu_free(d, g->final_norm, (size_t)c->hidden * 4);
    gpu_free(d, g->inv_freq, (size_t)(c->rotary_dim / 2) * 4);
    if (g->rbias) gpu_free(d, g->rbias, (size_t)c->n_layers * (size_t)c->n_experts * 4);
    if (g->arena) gpu_arena_free(d);
    free(g->L);
    free(g);
}

/* ---- sessions ----------------------------------------------------------- */

/* Device buffers of a session, in one table so that sizing, allocation and
 * freeing walk the same list. */
enum {
    B_X, B_H, B_Y, B_Q, B_K, B_V, B_ATT, B_PART,
    B_PROJ, B_BA, B_MIX, B_MIXO, B_ZZ, B_BB, B_AA, B_O,
    B_RL, B_RIDX, B_RW, B_COUNT, B_NACT, B_EXPS, B_START, B_ORDER,
    B_G, B_U, B_EO, B_SHG, B_YS, B_LOGITS, B_POS, B_RHIST, B_GRL, B_GIDX, B_GW,
    B_N
};

enum { LOGIT_ROWS = 16 }; /* lm_head rows computed at once for all-logits calls */

struct gpu_sess {
    gpu_model *g;
    int n_ctx, n_batch;
    bool f16;
    CUdeviceptr buf[B_N];
    size_t size[B_N];
    CUdeviceptr mem; /* the one allocation that buf and the per-layer states lie in (sess_layout) */
    uint64_t mem_bytes;
    CUdeviceptr *kc, *vc, *conv, *rec; /* per layer; 0 where the layer has none */
    size_t kv_bytes, conv_bytes, rec_bytes;
    float *xh; /* host: [n_batch, H] embedded rows */
    int32_t posh; /* host: the position B_POS gets */
    CUgraphExec step; /* the decode step (one id, its logits) as a graph, or NULL */
    int step_tile;    /* gpu_tile_min_t() when it was captured */
    bool whole;       /* this pass brings its MoE layers in whole (vcache_whole_ok) */
    /* a batched decode step (gpu_sess_eval_batch) in this session's scratch:
     * token t is the next id of session bs[t]; NULL otherwise */
    gpu_sess *const *bs;
    int wait_mark;    /* then: the copy stream's mark the current MoE layer waits for */
    /* a decode step over the VRAM cache in segments (seg_plan): the launches between two MoE
     * layers' routing readbacks as one graph each, captured at the first such step */
    CUgraphExec *seg; /* [n_layers + 1] */
    int n_seg;        /* segments captured (0: none yet) */
    int seg_at;       /* the segment this step is in */
    int seg_mode;     /* SEG_OFF, SEG_CAPTURE, SEG_REPLAY */
    bool seg_guess;   /* the captured graphs guess each next MoE layer's experts */
    int seg_tile;     /* gpu_tile_min_t() when they were captured */
};

enum { SEG_OFF, SEG_CAPTURE, SEG_REPLAY };

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static void sess_sizes(const e0_model *m, int k, int n_ctx, int B, size_t *sz, size_t *kv, size_t *cv,
                       size_t *rec, bool f16) {
    const e0_config *c = &m->cfg;
    const size_t H = (size_t)c->hidden, hd = (size_t)c->head_dim, nh = (size_t)c->n_heads;
    const size_t kvd = (size_t)c->n_kv_heads * hd, E = (size_t)(c->n_experts > 0 ? c->n_experts : 1);
    size_t qrows = nh * hd * (c->attn_gated ? 2 : 1);
    const size_t Kd = (size_t)c->lin_k_heads * c->lin_k_dim, Vd = (size_t)c->lin_v_heads * c->lin_v_dim;
    const size_t C = 2 * Kd + Vd, Hv = (size_t)c->lin_v_heads;
    size_t P = 2 * Kd + 2 * Vd;
    const size_t I = max_sz(max_sz((size_t)c->moe_inter, (size_t)c->shared_inter), (size_t)c->dense_inter);
    const size_t Bz = (size_t)B, pairs = Bz * (size_t)(k > 0 ? k : 1);
    for (int li = 0; li < c->n_layers; li++) {
        const e0_layer *ly = &m->layers[li];
        if (!ly->linear && ly->q.rows > 0) qrows = max_sz(qrows, (size_t)ly->q.rows);
        if (ly->linear && ly->packed) P = max_sz(P, (size_t)ly->qkvz.rows);
    }
    const size_t f = sizeof(float), i4 = sizeof(int32_t);
    sz[B_X] = sz[B_H] = sz[B_Y] = Bz * H * f;
    sz[B_Q] = Bz * qrows * f;
    sz[B_K] = sz[B_V] = Bz * kvd * f;
    sz[B_ATT] = Bz * nh * hd * f;
    sz[B_PART] = nh * GPU_ATT_SPLIT_MAX * (hd + 2) * f; /* attend_split's parts of one token */
    sz[B_PROJ] = Bz * P * f;
    sz[B_BA] = Bz * 2 * Hv * f;
    sz[B_MIX] = sz[B_MIXO] = Bz * C * f;
    sz[B_ZZ] = sz[B_O] = Bz * Vd * f;
    sz[B_BB] = sz[B_AA] = Bz * Hv * f;
    sz[B_RL] = Bz * E * f;
    sz[B_GRL] = E * f; /* a decode step's guess of the next MoE layer's experts (moe) */
    sz[B_GIDX] = (size_t)(k > 0 ? k : 1) * i4;
    sz[B_GW] = (size_t)(k > 0 ? k : 1) * f;
    sz[B_RIDX] = pairs * i4;
    sz[B_RW] = pairs * f;
    sz[B_COUNT] = E * i4;
    sz[B_NACT] = i4;
    sz[B_EXPS] = E * i4;
    sz[B_START] = (E + 1) * i4;
    sz[B_ORDER] = pairs * i4;
    sz[B_G] = sz[B_U] = max_sz(pairs, Bz) * I * f;
    sz[B_EO] = pairs * H * f;
    sz[B_SHG] = Bz * f;
    sz[B_YS] = Bz * H * f;
    sz[B_LOGITS] = (size_t)(B < LOGIT_ROWS ? B : LOGIT_ROWS) * (size_t)c->vocab * f;
    sz[B_POS] = i4;
    /* a routing profile's history: each position's experts of each layer */
    sz[B_RHIST] = config_route_on(c) ? (size_t)n_ctx * (size_t)c->n_layers * (size_t)k * i4 : i4;
    *kv = (size_t)n_ctx * kvd * (f16 ? 2 : 4);
    *cv = (size_t)(c->conv_kernel > 1 ? c->conv_kernel - 1 : 0) * C * f;
    *rec = Hv * (size_t)c->lin_k_dim * (size_t)c->lin_v_dim * f;
}

/* A session's buffers, then each layer's KV cache or DeltaNet states, at
 * 256-byte offsets in one allocation: the driver gives an allocation of a
 * MiB or more whole 2 MiB pages, so the 96 KV caches of a 48-layer model
 * (1.1 MiB each at 577 positions) took 80 MiB more as separate allocations
 * than the plan counted (Qwen3-30B-A3B's shape went 43 MiB over a 16 GiB
 * budget, session 36). With base 0 it only sizes; the total is returned. */
static uint64_t sess_layout(const e0_model *m, CUdeviceptr base, const size_t *sz, size_t kv, size_t cv,
                            size_t rec, CUdeviceptr *buf, CUdeviceptr *kc, CUdeviceptr *vc, CUdeviceptr *conv,
                            CUdeviceptr *recs) {
    uint64_t at = 0;
#define TAKE(dst, n)                                                                                         \
    do {                                                                                                     \
        if (base) (dst) = base + at;                                                                         \
        at += ((uint64_t)(n) + 255u) & ~(uint64_t)255u;                                                      \
    } while (0)
    for (int i = 0; i < B_N; i++) TAKE(buf[i], sz[i]);
    for (int li = 0; li < m->cfg.n_layers; li++) {
        if (m->layers[li].linear) {
            TAKE(conv[li], cv);
            TAKE(recs[li], rec);
        } else {
            TAKE(kc[li], kv);
            TAKE(vc[li], kv);
        }
    }
#undef TAKE
    return at;
}

uint64_t gpu_sess_bytes(const e0_model *m, int top_k, int n_ctx, int n_batch, bool kv_f16) {
    size_t sz[B_N], kv, cv, rec;
    sess_sizes(m, top_k, n_ctx, n_batch, sz, &kv, &cv, &rec, kv_f16);
    return sess_layout(m, 0, sz, kv, cv, rec, NULL, NULL, NULL, NULL, NULL);
}

void gpu_sess_free(gpu_sess *s) {
    if (!s) return;
    gpu_dev *d = s->g->d;
    gpu_graph_free(d, s->step);
    for (int i = 0; s->seg && i < s->n_seg; i++) gpu_graph_free(d, s->seg[i]);
    free(s->seg);
    gpu_free(d, s->mem, s->mem_bytes);
    free(s->kc);
    free(s->vc);
    free(s->conv);
    free(s->rec);
    free(s->xh);
    free(s);
}

int gpu_sess_reset(gpu_sess *s, char *err) {
    int rc = 0;
    for (int li = 0; !rc && li < s->g->m->cfg.n_layers; li++) {
        if (s->conv[li]) rc = gpu_zero(s->g->d, s->conv[li], s->conv_bytes, err);
        if (!rc && s->rec[li]) rc = gpu_zero(s->g->d, s->rec[li], s->rec_bytes, err);
    }
    return rc;
}

int gpu_sess_new(gpu_sess **out, gpu_model *g, int n_ctx, int n_batch, bool kv_f16, char *err) {
    *out = NULL;
    const e0_model *m = g->m;
    const int nl = m->cfg.n_layers;
    gpu_sess *s = calloc(1, sizeof *s);
    if (!s) return e0_fail(err, E0_ENOMEM, "out of memory");
    s->g = g;
    s->n_ctx = n_ctx;
    s->n_batch = n_batch;
    s->f16 = kv_f16;
    sess_sizes(m, g->top_k, n_ctx, n_batch, s->size, &s->kv_bytes, &s->conv_bytes, &s->rec_bytes, kv_f16);
    s->kc = calloc((size_t)nl, sizeof *s->kc);
    s->vc = calloc((size_t)nl, sizeof *s->vc);
    s->conv = calloc((size_t)nl, sizeof *s->conv);
    s->rec = calloc((size_t)nl, sizeof *s->rec);
    s->xh = malloc((size_t)n_batch * (size_t)m->cfg.hidden * sizeof *s->xh);
    s->seg = calloc((size_t)nl + 1, sizeof *s->seg);
    int rc = s->kc && s->vc && s->conv && s->rec && s->xh && s->seg ? 0 : e0_fail(err, E0_ENOMEM, "out of memory");
    s->mem_bytes = sess_layout(m, 0, s->size, s->kv_bytes, s->conv_bytes, s->rec_bytes, NULL, NULL, NULL, NULL,
                               NULL);
    if (!rc) rc = gpu_alloc(g->d, &s->mem, s->mem_bytes, "a session's buffers, KV cache and DeltaNet states", err);
    if (!rc)
        sess_layout(m, s->mem, s->size, s->kv_bytes, s->conv_bytes, s->rec_bytes, s->buf, s->kc, s->vc, s->conv,
                    s->rec);
    if (!rc) rc = gpu_sess_reset(s, err);
    if (!rc) rc = gpu_sync(g->d, err);
    if (rc) {
        gpu_sess_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- the forward pass ----------------------------------------------------- */

static unsigned up32(int n) { return (unsigned)((n + 31) / 32 * 32); }
static unsigned blocks(long long n, int per) { return (unsigned)((n + per - 1) / per); }

/* x += r (r not 0), then y = the norm of x with w: rows of n, T of them. */
static int rmsnorm_rows(gpu_sess *s, CUdeviceptr x, CUdeviceptr r, CUdeviceptr w, CUdeviceptr y, int n,
                        int T, char *err) {
    float eps = s->g->m->cfg.rms_eps;
    void *args[] = {&x, &r, &w, &y, &n, &eps};
    return gpu_launch(s->g->d, s->g->d->k.rmsnorm, (unsigned)T, 1, 1, 512, 0, args, "rmsnorm", err);
}

static int add_rows(gpu_sess *s, CUdeviceptr x, CUdeviceptr y, long long n, char *err) {
    void *args[] = {&x, &y, &n};
    return gpu_launch(s->g->d, s->g->d->k.add_inplace, blocks(n, 256), 1, 1, 256, 0, args, "add", err);
}

/* Row i of an activation buffer of rows of n floats. */
static CUdeviceptr row(CUdeviceptr p, int i, int n) { return p + (CUdeviceptr)i * (CUdeviceptr)n * sizeof(float); }

/* The session whose states token i of a pass uses: its own, or in a
 * batched step (s->bs) sequence i's. */
static const gpu_sess *seq(const gpu_sess *s, int i) { return s->bs ? s->bs[i] : s; }

static int attention(gpu_sess *s, int li, int T, char *err) {
    const e0_config *c = &s->g->m->cfg;
    const e0_layer *ly = &s->g->m->layers[li];
    const gpu_layer *gl = &s->g->L[li];
    gpu_dev *d = s->g->d;
    int nh = c->n_heads, nkv = c->n_kv_heads, hd = c->head_dim, H = c->hidden;
    int qrows = (int)ly->q.rows, kvd = nkv * hd, half = c->rotary_dim / 2;
    int per = c->attn_gated ? 2 * hd : hd, gated = c->attn_gated, f16 = s->f16;
    float eps = c->rms_eps, scale = 1.0f / sqrtf((float)hd);
    CUdeviceptr h = s->buf[B_H], q = s->buf[B_Q], k = s->buf[B_K], v = s->buf[B_V];
    const gpu_mat *W[3] = {&gl->q, &gl->k, &gl->v};
    const CUdeviceptr ys[3] = {q, k, v};
    const int64_t ld[3] = {qrows, kvd, kvd};
    int rc = gpu_mm_multi(d, 3, W, h, H, ys, ld, T, err);
    CUdeviceptr part = s->buf[B_PART], att = s->buf[B_ATT];
    /* a decode token's heads split over blocks so that the card is busy (flash decoding): about one
     * block an SM in all (docs/experiments.md, session 33) */
    int S = d->attn_split > 0 ? d->attn_split : (d->sms + nh - 1) / nh;
    if (S > GPU_ATT_SPLIT_MAX) S = GPU_ATT_SPLIT_MAX;
    /* a batched step: the position-dependent kernels once per sequence, on its token's rows, with its
     * own position and KV cache (each as that sequence's step alone) */
    const int nseq = s->bs ? T : 1, Tq = s->bs ? 1 : T;
    for (int i = 0; !rc && i < nseq; i++) {
        const gpu_sess *si = seq(s, i);
        CUdeviceptr qi = row(q, i, qrows), ki = row(k, i, kvd), vi = row(v, i, kvd), atti = row(att, i, nh * hd);
        CUdeviceptr pi = si->buf[B_POS], kc = si->kc[li], vc = si->vc[li];
        CUdeviceptr qn = gl->q_norm, kn = gl->k_norm, inv = s->g->inv_freq;
        void *a1[] = {&qi, &ki, &qn, &kn, &inv, &nh, &hd, &per, &qrows, &kvd, &half, &pi, &eps};
        rc = gpu_launch(d, d->k.qk_norm_rope, (unsigned)Tq, (unsigned)(nh + nkv), 1, up32(hd), (unsigned)hd * 4, a1,
                        "qk norm / rope", err);
        void *a2[] = {&kc, &vc, &ki, &vi, &kvd, &pi, &f16};
        if (!rc) rc = gpu_launch(d, d->k.kv_store, (unsigned)Tq, 1, 1, 256, 0, a2, "kv store", err);
        if (Tq == 1 && S > 1) { /* kernels.cu attend_split, then attend_merge */
            void *a3[] = {&qi, &kc, &vc, &part, &nh, &nkv, &hd, &per, &pi, &scale, &f16};
            if (!rc) rc = gpu_launch(d, d->k.attend_split, (unsigned)nh, 1, (unsigned)S, 512, 0, a3, "attention", err);
            void *a4[] = {&part, &qi, &atti, &hd, &per, &S, &gated};
            if (!rc) rc = gpu_launch(d, d->k.attend_merge, (unsigned)nh, 1, 1, 128, 0, a4, "attention merge", err);
        } else { /* a running softmax, one block a head (kernels.cu attend_warps) */
            void *a3[] = {&qi, &kc, &vc, &atti, &nh, &nkv, &hd, &per, &qrows, &pi, &scale, &gated, &f16};
            if (!rc) rc = gpu_launch(d, d->k.attend_warps, (unsigned)nh, (unsigned)Tq, 1, 512, 0, a3, "attention", err);
        }
    }
    if (!rc) rc = gpu_mm(d, &gl->o, att, nh * hd, s->buf[B_Y], H, T, err);
    return rc;
}

static int deltanet(gpu_sess *s, int li, int T, char *err) {
    const e0_config *c = &s->g->m->cfg;
    const e0_layer *ly = &s->g->m->layers[li];
    const gpu_layer *gl = &s->g->L[li];
    gpu_dev *d = s->g->d;
    int H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads, Dk = c->lin_k_dim, Dv = c->lin_v_dim;
    int K = c->conv_kernel, r = Hv / Hk, Kd = Hk * Dk, Vd = Hv * Dv, C = 2 * Kd + Vd;
    int vtiled = ly->vtiled;
    float eps = c->rms_eps;
    CUdeviceptr h = s->buf[B_H], mix = s->buf[B_MIX], mixo = s->buf[B_MIXO], zz = s->buf[B_ZZ];
    CUdeviceptr bb = s->buf[B_BB], aa = s->buf[B_AA], proj = s->buf[B_PROJ], ba = s->buf[B_BA];
    int rc = 0;
    if (ly->packed || ly->ba_packed) {
        int P = ly->packed ? (int)ly->qkvz.rows : 0, ba_only = !ly->packed;
        if (ly->packed) {
            const gpu_mat *W[2] = {&gl->qkvz, &gl->ba};
            const CUdeviceptr ys[2] = {proj, ba};
            const int64_t ld[2] = {P, 2 * Hv};
            rc = gpu_mm_multi(d, 2, W, h, H, ys, ld, T, err);
        } else {
            const gpu_mat *W[3] = {&gl->qkv, &gl->z, &gl->ba};
            const CUdeviceptr ys[3] = {mix, zz, ba};
            const int64_t ld[3] = {C, Vd, 2 * Hv};
            rc = gpu_mm_multi(d, 3, W, h, H, ys, ld, T, err);
        }
        void *a[] = {&proj, &ba, &mix, &zz, &bb, &aa, &Hk, &Dk, &r, &Dv, &P, &ba_only};
        if (!rc) rc = gpu_launch(d, d->k.dn_unpack, (unsigned)T, 1, 1, 256, 0, a, "DeltaNet unpack", err);
    } else {
        const gpu_mat *W[4] = {&gl->qkv, &gl->z, &gl->b, &gl->a};
        const CUdeviceptr ys[4] = {mix, zz, bb, aa};
        const int64_t ld[4] = {C, Vd, Hv, Hv};
        rc = gpu_mm_multi(d, 4, W, h, H, ys, ld, T, err);
    }
    /* the convolution and the recurrence carry a sequence's state: in a batched step, once per
     * sequence on its token's rows (the q/k norm between them is per token) */
    const int nseq = s->bs ? T : 1;
    int Tq = s->bs ? 1 : T;
    CUdeviceptr w = gl->conv_w;
    for (int i = 0; !rc && i < nseq; i++) {
        CUdeviceptr mi = row(mix, i, C), moi = row(mixo, i, C), st = seq(s, i)->conv[li];
        void *a1[] = {&mi, &moi, &st, &w, &Tq, &C, &K};
        rc = gpu_launch(d, d->k.dn_conv, blocks(C, 256), 1, 1, 256, 0, a1, "DeltaNet conv", err);
    }
    void *a2[] = {&mixo, &C, &Hk, &Dk};
    if (!rc) rc = gpu_launch(d, d->k.dn_qknorm, (unsigned)T, (unsigned)(2 * Hk), 1, 128, 0, a2,
                             "DeltaNet q/k norm", err);
    CUdeviceptr A = gl->A, dtb = gl->dt_bias, nw = gl->lin_norm, o = s->buf[B_O];
    CUfunction rec_f = Dk == 128 ? d->k.dn_rec128 : Dk == 64 ? d->k.dn_rec64 : Dk == 32 ? d->k.dn_rec32 : d->k.dn_rec;
    for (int i = 0; !rc && i < nseq; i++) {
        CUdeviceptr moi = row(mixo, i, C), zi = row(zz, i, Vd), bi = row(bb, i, Hv), ai = row(aa, i, Hv);
        CUdeviceptr oi = row(o, i, Vd), rec = seq(s, i)->rec[li];
        void *a3[] = {&moi, &zi, &bi, &ai, &A, &dtb, &nw, &rec, &oi, &Tq, &Hk, &Hv, &Dk, &Dv, &vtiled, &eps};
        rc = gpu_launch(d, rec_f, (unsigned)Hv, 1, 1, up32(Dv), (unsigned)(2 * Dk * 4), a3, "DeltaNet recurrence", err);
    }
    if (!rc) rc = gpu_mm(d, &gl->out, o, Vd, s->buf[B_Y], H, T, err);
    return rc;
}

/* ---- a decode step over the VRAM cache in segments --------------------------
 * The host reads each MoE layer's routing back (vcache_map), so such a step
 * cannot be one graph. Its launches between two readbacks are: each
 * segment is captured as a graph at the first step and replayed at the
 * next ones, where gpu_launch does nothing (d->launch_off) and the host
 * walks the same code for its own part (the readback, the copies, the
 * guesses). A segment is launched as soon as the one before has been read
 * back, so the card has its next ~15 kernels in one call instead of the
 * host issuing them one by one behind the readback (d->segments). */

/* The start of a segment: the pass's start, and after each MoE layer's map. */
static int seg_start(gpu_sess *s, char *err) {
    gpu_dev *d = s->g->d;
    if (s->seg_mode == SEG_CAPTURE) return gpu_capture_begin(d, err);
    if (s->seg_mode != SEG_REPLAY) return 0;
    if (s->seg_at >= s->n_seg)
        return e0_fail(err, E0_EIO, "a decode step's segment %d of the %d captured", s->seg_at + 1, s->n_seg);
    return gpu_graph_launch(d, s->seg[s->seg_at], err);
}

/* The end of a segment: before each MoE layer's map, and after the logits. */
static int seg_end(gpu_sess *s, char *err) {
    gpu_dev *d = s->g->d;
    if (s->seg_mode == SEG_REPLAY) s->seg_at++;
    if (s->seg_mode != SEG_CAPTURE) return 0;
    CUgraphExec ge = NULL;
    int rc = gpu_capture_end(d, true, &ge, err);
    if (rc) return rc;
    s->seg[s->seg_at++] = ge;
    s->n_seg = s->seg_at;
    return gpu_graph_launch(d, ge, err);
}

static void seg_drop(gpu_sess *s) {
    for (int i = 0; i < s->n_seg; i++) gpu_graph_free(s->g->d, s->seg[i]), s->seg[i] = NULL;
    s->n_seg = 0;
}

/* Whether a decode step of this session goes in segments, and how: the
 * graphs captured again where the step's launches changed. */
static void seg_plan(gpu_sess *s, int T, bool logits) {
    gpu_model *g = s->g;
    gpu_dev *d = g->d;
    const gpu_vcache *vc = g->vc;
    s->seg_mode = SEG_OFF;
    s->seg_at = 0;
    /* the host's part must stay out of the captured stream: no host cache (its guesses go after the
     * layer's launches), no host misses (their rows go in before the sum), no trace; and a
     * guessing policy that is the same at every step */
    if (!d->segments || T != 1 || !logits || !vc || vc->staged || vc->hc || vc->hm || d->trace || !gpu_graphs_on(d) ||
        (vc->prefetch && vc->sparse))
        return;
    const bool guess = vc->prefetch && !config_route_on(&g->m->cfg);
    if (s->n_seg && (s->seg_guess != guess || s->seg_tile != gpu_tile_min_t())) seg_drop(s);
    s->seg_mode = s->n_seg ? SEG_REPLAY : SEG_CAPTURE;
    d->launch_off = s->seg_mode == SEG_REPLAY;
    s->seg_guess = guess;
    s->seg_tile = gpu_tile_min_t();
}

/* The step's end, or its failure: a capture in progress discarded (and
 * what was captured with it), launches on again. */
static int seg_finish(gpu_sess *s, int rc, char *err) {
    gpu_dev *d = s->g->d;
    if (s->seg_mode == SEG_OFF) return rc;
    if (!rc) rc = seg_end(s, err);
    if (rc && s->seg_mode == SEG_CAPTURE) {
        CUgraphExec ge = NULL;
        char e2[E0_ERR_MAX];
        gpu_capture_end(d, false, &ge, e2); /* the stream out of capture mode, if it still was */
    }
    if (rc) seg_drop(s);
    d->launch_off = false;
    s->seg_mode = SEG_OFF;
    return rc;
}

/* The first MoE layer from li on, or -1. */
static int next_moe(const e0_model *m, int li) {
    for (; li < m->cfg.n_layers; li++)
        if (m->layers[li].moe && m->layers[li].experts) return li;
    return -1;
}

/* The MoE block of layer li on h, its output added onto x. */
static int moe(gpu_sess *s, int li, int T, char *err) {
    const e0_config *c = &s->g->m->cfg;
    const e0_layer *ly = &s->g->m->layers[li];
    const gpu_layer *gl = &s->g->L[li];
    gpu_dev *d = s->g->d;
    int H = c->hidden, E = c->n_experts, k = s->g->top_k, I = c->moe_inter;
    int renorm = c->norm_topk, P = T * k, shared = ly->has_shared;
    CUdeviceptr h = s->buf[B_H], rl = s->buf[B_RL], ridx = s->buf[B_RIDX], rw = s->buf[B_RW];
    CUdeviceptr cnt = s->buf[B_COUNT], nact = s->buf[B_NACT], exps = s->buf[B_EXPS];
    CUdeviceptr start = s->buf[B_START], order = s->buf[B_ORDER];
    CUdeviceptr gg = s->buf[B_G], u = s->buf[B_U], eo = s->buf[B_EO];
    CUdeviceptr shg = s->buf[B_SHG], ys = s->buf[B_YS], x = s->buf[B_X];
    /* the router and the shared expert's gate read the same rows */
    const gpu_mat *W[2] = {&gl->router, &gl->sh_router};
    const CUdeviceptr yr[2] = {rl, shg};
    const int64_t ld[2] = {E, 1};
    int rc = gpu_mm_multi(d, shared ? 2 : 1, W, h, H, yr, ld, T, err);
    if (config_route_on(c)) { /* a synthetic checkpoint's routing profile: token after token */
        const e0_route_cfg *r = &c->route;
        CUdeviceptr posp = s->buf[B_POS], hist = s->buf[B_RHIST], bias = s->g->rbias;
        int L = c->n_layers, wl = r->window_len > 1 ? r->window_len : 1; /* as profile_apply's W */
        double recent = r->recent, window = r->window, decay = r->decay;
        void *a1[] = {&rl, &ridx, &rw, &T, &E, &k, &renorm, &posp, &li, &L, &bias, &hist, &recent, &window, &decay, &wl};
        if (!rc) rc = gpu_launch(d, d->k.route_profile, 1, 1, 1, 32, 0, a1, "routing (profile)", err);
    }
    /* a device-staged decode step: slots from the device's table, misses staged by moe_stage */
    const gpu_vcache *vc = s->g->vc;
    const bool staged = vc && vc->staged && T == 1;
    const size_t at = (size_t)li * (size_t)E * sizeof(int32_t), ak = (size_t)li * (size_t)k * sizeof(int32_t);
    CUdeviceptr tab = staged ? vc->dtab + at : 0, used = staged ? vc->dused + at : 0;
    CUdeviceptr stage = staged ? vc->dstage + ak : 0, slog = staged ? vc->dlog + ak : 0;
    /* a whole-layer prefill: every expert of the layer has a slot once its copies are done, and
     * the grouping takes the slots from the device's table */
    if (s->whole) {
        rc = rc ? rc : gpu_wait_copy_mark(d, s->wait_mark, err);
        tab = vc->dtab + at;
    }
    if (!config_route_on(c)) {
        void *a1[] = {&rl, &ridx, &rw, &T, &E, &k, &renorm};
        if (!rc) rc = gpu_launch(d, d->k.route, blocks(T, 4), 1, 1, 128, 0, a1, "routing", err);
    }
    void *a2[] = {&ridx, &P, &E, &cnt, &nact, &exps, &start, &order, &tab, &used, &stage, &slog};
    if (!rc) rc = gpu_launch(d, d->k.moe_sort, 1, 1, 1, 1024, 0, a2, "expert grouping", err);
    if (!rc && staged) {
        void *a4[] = {&nact, &exps, &slog, (void *)&gl->xg, (void *)&gl->xu, (void *)&gl->xd};
        rc = gpu_launch(d, d->k.moe_stage, 32, (unsigned)k, 1, 256, 0, a4, "staging misses", err);
    }
    /* a decode step over the VRAM cache: the next MoE layer's router on this layer's input guesses
     * its experts, read back with this layer's, so that the missing ones are copied in while this
     * layer computes (vcache_prefetch) */
    bool guess = vc && !staged && !s->whole && T == 1 && !config_route_on(c) && vcache_guess_now(s->g);
    if (s->seg_mode != SEG_OFF) guess = s->seg_guess; /* as the captured graphs do */
    const int nl = guess ? next_moe(s->g->m, li + 1) : -1;
    CUdeviceptr gidx = 0;
    if (!rc && nl >= 0) {
        CUdeviceptr grl = s->buf[B_GRL], gw = s->buf[B_GW];
        int one = 1;
        gidx = s->buf[B_GIDX];
        rc = gpu_mm(d, &s->g->L[nl].router, h, H, grl, E, 1, err);
        void *ag[] = {&grl, &gidx, &gw, &one, &E, &k, &renorm};
        if (!rc) rc = gpu_launch(d, d->k.route, 1, 1, 1, 128, 0, ag, "routing (the next layer's guess)", err);
    }
    gpu_trace(d, false, "routed", li);
    if (!rc && vc && !staged && !s->whole) { /* the experts in the cache's slots: the kernels take slots for experts */
        const bool hm = vc->hm && T == 1; /* decode: the host may compute some misses */
        if (!rc) rc = seg_end(s, err);
        if (!rc) rc = vcache_map(s->g, li, nact, exps, gidx, nl, hm ? h : 0, hm ? ridx : 0, rl, T, err);
        exps = vc->dslots;
        /* from pinned pages the guessed copies start now, beside this layer's kernels and the
         * next layer's mixer (vcache_map has moved this layer's slots out of the victims' way);
         * through the host cache they may wait for the disk, so after this layer's launches */
        if (!rc && nl >= 0 && !vc->hc) rc = vcache_prefetch(s->g, err);
        if (!rc) rc = seg_start(s, err);
        gpu_trace(d, false, "misses in", li);
        if (nl >= 0) gpu_trace(d, true, "guesses in", nl);
    }
    const int max_act = P < E ? P : E;
    if (!rc) rc = gpu_mmx_glu(d, &gl->xg, &gl->xu, max_act, nact, exps, start, order, k, h, H, gg, u, T, err);
    if (!rc) rc = gpu_mmx(d, &gl->xd, max_act, nact, exps, start, order, k, true, gg, I, eo, H, T, err);
    gpu_trace(d, false, "experts", li);
    if (!rc && shared) { /* the routed experts' hidden rows are done with: reuse g and u */
        rc = gpu_mm_glu(d, &gl->sh_gate, &gl->sh_up, h, H, gg, u, T, err);
        if (!rc) rc = gpu_mm(d, &gl->sh_down, gg, c->shared_inter, ys, H, T, err);
    }
    if (!rc && vc && vc->hm) rc = hostmiss_run(s->g, eo, err); /* while the card computes the rest */
    void *a3[] = {&eo, &rw, &shg, &ys, &x, &H, &k, &shared};
    if (!rc) rc = gpu_launch(d, d->k.moe_combine, blocks(H, 256), (unsigned)T, 1, 256, 0, a3, "expert sum", err);
    if (!rc && nl >= 0 && vc->hc) rc = vcache_prefetch(s->g, err); /* while the device computes this layer */
    return rc;
}

static int dense_mlp(gpu_sess *s, int li, int T, char *err) {
    const e0_config *c = &s->g->m->cfg;
    const gpu_layer *gl = &s->g->L[li];
    gpu_dev *d = s->g->d;
    CUdeviceptr h = s->buf[B_H], gg = s->buf[B_G], u = s->buf[B_U];
    int rc = gpu_mm_glu(d, &gl->mlp_gate, &gl->mlp_up, h, c->hidden, gg, u, T, err);
    if (!rc) rc = gpu_mm(d, &gl->mlp_down, gg, c->dense_inter, s->buf[B_Y], c->hidden, T, err);
    return rc;
}

/* Whole-layer prefill: layer li's experts brought in on the copy stream
 * once the stream's work so far is done (the layers before have finished
 * with the slots it takes; spare, if not -1, is one of them), the copies
 * marked with mark. */
static int bring_in(gpu_sess *s, int li, int spare, int mark, char *err) {
    int rc = gpu_copy_after(s->g->d, err);
    if (!rc) rc = vcache_layer_in(s->g, li, spare, err);
    if (!rc) rc = gpu_copy_mark(s->g->d, mark, err);
    return rc;
}

/* Every layer over the T rows of x (positions from B_POS). Each residual
 * add happens in the norm after it (rmsnorm's r), the MoE block's in its
 * sum; what is left of the last layer's is added at the end. In a
 * whole-layer prefill, the next MoE layer's experts are brought in as a
 * MoE layer starts, so that their copies overlap its compute. */
static int layers(gpu_sess *s, int T, char *err) {
    const e0_model *m = s->g->m;
    const int H = m->cfg.hidden;
    CUdeviceptr x = s->buf[B_X], h = s->buf[B_H], y = s->buf[B_Y], r = 0;
    int rc = 0, mark = 0;
    s->whole = vcache_whole_ok(s->g, T);
    int ahead = s->whole ? next_moe(m, 0) : -1; /* the MoE layer brought in last */
    int done = -1;                              /* the MoE layer finished last, as the next is brought in */
    if (ahead >= 0) rc = bring_in(s, ahead, -1, mark, err);
    for (int li = 0; !rc && li < m->cfg.n_layers; li++) {
        gpu_trace(s->g->d, false, "layer", li);
        const e0_layer *ly = &m->layers[li];
        const gpu_layer *gl = &s->g->L[li];
        if (s->whole && li == ahead) { /* its copies are under `mark`: the next layer's under the other */
            s->wait_mark = mark;
            ahead = next_moe(m, li + 1);
            mark ^= 1;
            if (ahead >= 0) rc = bring_in(s, ahead, done, mark, err);
            if (rc) break;
            done = li; /* by the next layer's bring_in, the stream has finished with it */
        }
        rc = rmsnorm_rows(s, x, r, gl->in_norm, h, H, T, err);
        if (!rc) rc = ly->linear ? deltanet(s, li, T, err) : attention(s, li, T, err);
        if (!rc) rc = rmsnorm_rows(s, x, y, gl->post_norm, h, H, T, err);
        if (!rc) rc = ly->moe ? moe(s, li, T, err) : dense_mlp(s, li, T, err);
        r = ly->moe ? 0 : y;
    }
    if (!rc && r) rc = add_rows(s, x, r, (long long)T * H, err);
    return rc;
}

/* The logits of rows first .. first + n - 1 (n <= LOGIT_ROWS) into B_LOGITS. */
static int head(gpu_sess *s, int first, int n, char *err) {
    const int H = s->g->m->cfg.hidden;
    int rc = rmsnorm_rows(s, row(s->buf[B_X], first, H), 0, s->g->final_norm, s->buf[B_H], H, n, err);
    if (!rc) rc = gpu_mm(s->g->d, &s->g->lm_head, s->buf[B_H], H, s->buf[B_LOGITS], s->g->m->cfg.vocab, n, err);
    return rc;
}

/* One decode step (one id, its logits) by the session's graph, captured at
 * the first step and again when the kernels' choice of form changes. */
static int decode_graph(gpu_sess *s, char *err) {
    gpu_dev *d = s->g->d;
    if (s->step && s->step_tile != gpu_tile_min_t()) {
        gpu_graph_free(d, s->step);
        s->step = NULL;
    }
    int rc = 0;
    if (!s->step) {
        rc = gpu_capture_begin(d, err);
        if (rc) return rc;
        rc = layers(s, 1, err);
        if (!rc) rc = head(s, 0, 1, err);
        const int rc2 = gpu_capture_end(d, rc == 0, &s->step, err);
        if (rc) return rc;
        if (rc2) return rc2;
        s->step_tile = gpu_tile_min_t();
    }
    return gpu_graph_launch(d, s->step, err);
}

/* The T ids embedded into the session's x (in stream order). */
static int put_ids(gpu_sess *s, const int32_t *ids, int T, char *err) {
    const e0_model *m = s->g->m;
    const int H = m->cfg.hidden;
    for (int t = 0; t < T; t++) mat_dequant(&m->embed, ids[t], 0, H, s->xh + (size_t)t * H);
    return gpu_put(s->g->d, s->buf[B_X], s->xh, (size_t)T * H * sizeof(float), err);
}

/* The session's position pos where its kernels read it (B_POS). */
static int put_pos(gpu_sess *s, int pos, char *err) {
    s->posh = pos;
    return gpu_put(s->g->d, s->buf[B_POS], &s->posh, sizeof s->posh, err);
}

int gpu_sess_eval_batch(gpu_sess *const *ss, int n, const int32_t *pos, const int32_t *ids, float *logits,
                        char *err) {
    gpu_sess *s = ss[0];
    const e0_config *c = &s->g->m->cfg;
    gpu_dev *d = s->g->d;
    const int V = c->vocab;
    if (n < 1 || n > s->n_batch || n > GPU_BATCH_MAX)
        return e0_fail(err, E0_EINVAL, "a batched GPU step of %d sequences (1 to %d, and the first session's "
                       "batch %d)", n, GPU_BATCH_MAX, s->n_batch);
    if (config_route_on(c)) /* its routing reads each sequence's history token after token */
        return e0_fail(err, E0_EUNSUPPORTED, "a batched GPU step of a checkpoint with a routing profile");
    for (int i = 0; i < n; i++) {
        if (ss[i]->g != s->g)
            return e0_fail(err, E0_EINVAL, "sequence %d of a batched GPU step is of another model", i);
        for (int j = 0; j < i; j++)
            if (ss[j] == ss[i]) return e0_fail(err, E0_EINVAL, "sequences %d and %d are the same session", j, i);
        if (pos[i] < 0 || pos[i] + 1 > ss[i]->n_ctx)
            return e0_fail(err, E0_EINVAL, "sequence %d: position %d (context %d)", i, pos[i], ss[i]->n_ctx);
        if (ss[i]->n_ctx > s->n_ctx) /* the attention's scores go to the first session's scratch */
            return e0_fail(err, E0_EINVAL, "sequence %d's context (%d) is longer than the first's (%d)", i,
                           ss[i]->n_ctx, s->n_ctx);
    }
    d->cu->CtxSetCurrent(d->ctx);
    int rc = put_ids(s, ids, n, err);
    for (int i = 0; !rc && i < n; i++) rc = put_pos(ss[i], pos[i], err); /* where each sequence's kernels read it */
    s->bs = ss;
    if (!rc) rc = layers(s, n, err);
    s->bs = NULL;
    if (!rc && logits) {
        rc = head(s, 0, n, err);
        if (!rc) rc = gpu_get(d, logits, s->buf[B_LOGITS], (size_t)n * V * sizeof(float), err);
    }
    if (!rc) rc = gpu_sync(d, err);
    return rc;
}

int gpu_sess_eval(gpu_sess *s, int pos, const int32_t *ids, int T, bool all, float *logits,
                  char *err) {
    gpu_dev *d = s->g->d;
    const int V = s->g->m->cfg.vocab;
    if (T < 1 || T > s->n_batch || pos < 0 || pos + T > s->n_ctx)
        return e0_fail(err, E0_EINVAL, "GPU pass of %d ids at position %d (batch %d, context %d)", T, pos,
                       s->n_batch, s->n_ctx);
    d->cu->CtxSetCurrent(d->ctx);
    int rc = put_ids(s, ids, T, err);
    if (!rc) rc = put_pos(s, pos, err);
    /* a device-staged decode step: the cache's tables as the host left them, its uses read after */
    const bool staged = s->g->vc && s->g->vc->staged && T == 1;
    if (!rc && staged) rc = vcache_prepare(s->g, err);
    /* a step whose launches never change: where the host decides nothing between layers */
    const bool graph = T == 1 && logits && (!s->g->vc || staged) && gpu_graphs_on(d);
    if (!rc && !graph) gpu_trace_begin(d, T); /* $E0_GPU_TRACE: a pass with the host between layers */
    if (!rc && !graph) seg_plan(s, T, logits != NULL);
    if (!rc) rc = seg_start(s, err);
    if (!rc && graph) {
        rc = decode_graph(s, err);
        if (!rc) rc = gpu_get(d, logits, s->buf[B_LOGITS], (size_t)V * sizeof(float), err);
        if (!rc && staged) rc = vcache_step(s->g, err);
        return rc;
    }
    if (!rc) rc = layers(s, T, err);
    if (!rc && logits) {
        const int first = all ? 0 : T - 1;
        for (int t0 = first; !rc && t0 < T; t0 += LOGIT_ROWS) {
            const int n = T - t0 < LOGIT_ROWS ? T - t0 : LOGIT_ROWS;
            rc = head(s, t0, n, err);
            rc = seg_finish(s, rc, err); /* in segments (one row): the last one ends here */
            float *dst = logits + (size_t)(t0 - first) * V;
            if (!rc) rc = gpu_get(d, dst, s->buf[B_LOGITS], (size_t)n * V * sizeof(float), err);
        }
    }
    rc = seg_finish(s, rc, err); /* a failure before the head's */
    gpu_trace(d, false, "logits", -1);
    if (!rc) rc = gpu_sync(d, err);
    gpu_trace_end(d);
    if (!rc && staged) rc = vcache_step(s->g, err);
    return rc;
}
