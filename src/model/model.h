/* The resident model: configuration, weight views into the mapping, and the
 * per-session state (KV cache, DeltaNet conv/recurrent states, scratch).
 *
 * Math traps this code handles (docs/design.md §1.4, each has caused bugs):
 *  - Hybrid norms are (1 + w) * x/rms(x) in HF checkpoints; mlx checkpoints
 *    already store 1 + w. The DeltaNet output norm is never shifted.
 *    Loading folds the shift in, so kernels always multiply by `*_norm`.
 *  - Gated attention: q_proj yields [q | gate] per head, not [all q | all gates].
 *  - Partial RoPE rotates only the first rotary_dim dims, rotate-half within them.
 *  - DeltaNet: value head h uses key head h / (Hv/Hk) (repeat_interleave);
 *    qwen3_next packs q|k|v|z and b|a per key head. llama.cpp's converter
 *    reorders qwen35moe's value heads to tiled order (head h uses key head
 *    h % Hk), splits qwen3_next's qkvz into flat qkv and z (b|a stays
 *    packed), and stores -exp(A_log).
 *  - conv1d is [C,1,K] (HF) or [C,K,1] (mlx): the same bytes, C-major.
 *  - Router softmax, top-k and renormalisation stay in f32.
 */
#ifndef E0_MODEL_MODEL_H
#define E0_MODEL_MODEL_H

#include "edge0.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "quant/kernels.h"
#include "quant/mat.h"

#include <math.h>
#include <stdbool.h>

/* Query heads of one KV head that attention takes together (mat_attend_heads). */
#define E0_ATTN_GROUP 8

typedef struct {
    e0_mat gate, up; /* [I, H] */
    e0_mat down;     /* [H, I] */
} e0_expert;

typedef struct {
    bool linear;                /* Gated DeltaNet (else full attention) */
    bool moe;                   /* MoE block (else dense MLP) */
    float *in_norm, *post_norm; /* [H], shift folded in */

    /* full attention */
    e0_mat q, k, v, o;      /* q: [nh*hd*(gated ? 2 : 1), H], k/v: [nkv*hd, H], o: [H, nh*hd] */
    float *q_norm, *k_norm; /* [hd] */

    /* Gated DeltaNet */
    bool packed;            /* qwen3_next: in_proj_qkvz / in_proj_ba */
    bool ba_packed;         /* qwen3_next GGUF: flat qkv and z, packed ba */
    bool vtiled;            /* qwen35moe GGUF: value head h uses key head h % Hk */
    e0_mat qkvz, ba;        /* packed: [2Kd + 2Vd, H], [2Hv, H] */
    e0_mat qkv, z, b, a;    /* flat: [2Kd + Vd, H], [Vd, H], [Hv, H], [Hv, H] */
    float *conv_w;          /* [conv_dim, K] */
    float *A, *dt_bias;     /* [Hv]: A = -exp(A_log) (GGUF's ssm_a) */
    float *lin_norm;        /* [Dv] */
    e0_mat out;             /* [H, Vd] */

    /* MoE */
    bool fused;         /* experts stored as gate_up (gate rows on top) + down */
    e0_mat router;      /* [E, H] */
    e0_expert *experts; /* [E] views */
    e0_expert *xfile;   /* [E] the file layout's views when model_repack changed experts, else NULL:
                           expert reads from the file (stream/bundle.c) follow these */
    bool has_shared;
    e0_mat sh_gate, sh_up, sh_down; /* [Is, H], [Is, H], [H, Is] */
    e0_mat sh_router;               /* shared_expert_gate: [1, H] */

    /* dense MLP */
    e0_mat mlp_gate, mlp_up, mlp_down;
} e0_layer;

/* One multi-token-prediction (MTP) block of a Qwen3.5 / 3.6 GGUF file, as
 * llama.cpp's converter stores it after the main layers (blk.N, N >=
 * cfg.n_layers): a full-attention decoder layer with its MoE and shared
 * expert, and the nextn.* tensors that feed it the next token's embedding
 * beside the main model's last hidden state. Every tensor is found and
 * checked at load (shape against the config, a type edge0 computes with),
 * and none of their bytes is read: they stay out of the resident set,
 * --io load, the expert cache and the memory plan (e0_model.unused).
 * Nothing computes with the block yet; speculative decoding will. NULL:
 * absent (only the last three may be). */
typedef struct {
    int blk;                                          /* its blk index */
    const st_tensor *attn_norm, *post_norm;           /* [H] */
    const st_tensor *q, *k, *v, *o, *q_norm, *k_norm; /* as a full-attention layer's */
    const st_tensor *router;                          /* [E, H] */
    const st_tensor *gate, *up, *gate_up, *down; /* [E, I, H] x2 or gate_up [E, 2I, H]; [E, H, I] */
    const st_tensor *sh_gate, *sh_up, *sh_down, *sh_router; /* when cfg.shared_inter > 0 */
    const st_tensor *eh_proj;        /* nextn.eh_proj [H, 2H]: [embedding | hidden] -> H */
    const st_tensor *enorm, *hnorm;  /* nextn.enorm / hnorm [H]: the two inputs' norms */
    const st_tensor *head_norm;      /* nextn.shared_head_norm [H] (NULL: output_norm) */
    const st_tensor *embed, *head;   /* nextn.embed_tokens / shared_head_head [V, H] (NULL:
                                        token_embd / output) */
} e0_mtp_layer;

typedef struct {
    int n_layers;          /* cfg.mtp_layers */
    e0_mtp_layer *layers;  /* [n_layers] */
    int n_tensors;
    uint64_t bytes;        /* all their tensors */
} e0_mtp;

typedef struct {
    e0_config cfg;
    st_set *st;
    const char *layout; /* "hf", "hf-fused", "mlx", "mlx-fused" */
    e0_mat embed;       /* [V, H] */
    e0_mat lm_head;     /* [V, H] */
    float *final_norm;  /* [H] */
    e0_layer *layers;
    float *rope_inv_freq; /* [rotary_dim / 2] */
    uint64_t weight_bytes, expert_bytes; /* the tensors the model computes with; the routed experts */
    e0_mtp mtp;                          /* a GGUF file's MTP blocks (none: n_layers 0) */
    /* [st_count]: 1 for every tensor the model computes with. The others
     * (the MTP blocks; in HF and mlx folders mtp.*, vision and any tensor
     * no loader looks up) are never pinned, loaded or counted */
    uint8_t *used;
} e0_model;

int model_load(e0_model *m, const char *dir, char *err);
/* After st_set_load: rewrites the loaded copy's 4-bit matrices that the
 * compute paths read with mat_matmul (not routers, not the embedding) into
 * the 16-row panel layout (mat.h), in place, and points their views at it.
 * Matrices that do not qualify (mat_p16_ok; parts not contiguous) keep the
 * file layout: the kernels compute the same results on both. Extra memory
 * while it runs: one tensor's bytes. Returns the number of matrices
 * repacked (stacked experts count once); never fails (without memory for
 * the scratch, nothing is repacked). `progress` (may be NULL) is told the
 * bytes repacked so far and the total after each matrix. */
int model_repack(e0_model *m, st_load_fn progress, void *ctx);
/* --io load: st_set_load of the checkpoint less the tensors the model does
 * not compute with (e0_model.used). */
int model_load_weights(e0_model *m, st_load_fn progress, void *ctx, char *err);
void model_free(e0_model *m);
/* Everything but the routed experts (and the tensors the model does not
 * compute with) copied out of the file mappings
 * (st_set_pin): with pread I/O, a checkpoint truncated while running then
 * fails expert reads with an error instead of killing the process. */
int model_pin_resident(e0_model *m, uint64_t *pinned, char *err);
/* Starts reading layer `layer`'s resident (non-expert) weights into the page
 * cache (MADV_WILLNEED), or the lm_head for layer == n_layers: a prefill
 * calls it one layer ahead, so that a cold start or pages the kernel
 * dropped under memory pressure do not stall the compute threads on page
 * faults. Costs a page-cache lookup when the pages are there: ~4 ms for
 * all 41 calls of the 35B shape, so only batches of MODEL_ADVISE_MIN_T
 * tokens or more (hundreds of ms of compute) ask for it. */
enum { MODEL_ADVISE_MIN_T = 16 };
void model_advise_layer(const e0_model *m, int layer);

struct e0_stream;
struct gpu_dev;
struct gpu_model;
struct gpu_sess;

/* Route stickiness keeps a position's experts as uint16 and sorts at most
 * this many picks on the stack (moe.c). */
enum { E0_STICKY_MAX_K = 64 };

struct e0_engine {
    e0_model model;
    e0_engine_opts opts;
    struct e0_stream *stream;
    int top_k;             /* routing top-k in force (the model's unless overridden) */
    char budget_note[512]; /* how mem_budget sized the cache */
    char io_note[512];     /* how expert bytes are read, and why */
    bool auto_budget;      /* mem_budget came from --mem-budget auto */
    int32_t n_seqs;        /* sequences room is kept for (opts.n_seqs resolved) */
    uint64_t prefill_tokens, decode_tokens;
    double prefill_s, decode_s;
    /* the GPU (model/gpu_glue.c): in use when gmodel is set */
    int32_t gpu_ordinal;      /* the one chosen at prepare, or E0_GPU_OFF */
    struct gpu_dev *gpu;
    struct gpu_model *gmodel;
    char gpu_note[512];
};

/* Scratch for a batch of up to n_batch tokens; sized once per session. */
typedef struct {
    float *x, *h, *y;       /* [B, H] residual, normed input, block output */
    float *q, *k, *v, *att; /* attention: [B, q rows], [B, nkv*hd] x2, [B, nh*hd] */
    float *scores;          /* [nscores, E0_ATTN_GROUP, n_ctx]: rows per compute thread */
    float *rope_cs;         /* [rotary_dim]: cos, sin of each rotary pair at one position */
    int nscores;
    float *proj, *mix, *hist; /* DeltaNet: [B, packed rows], [B, conv_dim], [K-1+B, conv_dim] */
    float *zz, *bb, *aa, *o;  /* [B, Vd], [B, Hv], [B, Hv], [B, Vd] */
    float *rlogits, *rw;      /* MoE: [B, E], [B, k] */
    int32_t *ridx, *count, *order;   /* [B, k], [E], [B*k] */
    int32_t *exps, *start;           /* routed experts of a call, their runs in order[]: [E + 1] */
    int32_t *rest, *rstart, *rpairs; /* the part that goes through exact: [E + 1], [E + 1], [B*k] */
    void **xent;                     /* [E] LRU entries pinned by one call */
    float *xs, *g, *u, *ys;          /* gathered: [B, H], [B, I'], [B, I'], [B, H] */
    float *eo;                       /* [B*k, H] per (token, slot) expert output */
    float *shg;                      /* [B] */
} e0_scratch;

struct e0_session {
    e0_engine *eng;
    const e0_model *m;
    int32_t n_ctx, n_batch, pos;
    void **kc, **vc;  /* per attention layer: [n_ctx, nkv*hd] of the engine's kv_type */
    float **conv;     /* per DeltaNet layer: [K-1, conv_dim] */
    float **rec;      /* per DeltaNet layer: [Hv, Dk, Dv] */
    int32_t *hist;    /* [n_ctx]: the ids at positions 0..pos */
    /* [n_ctx, n_layers, top_k]: each position's final experts per layer,
     * highest weight first; only for models with route stickiness (moe.c) */
    uint16_t *route_hist;
    e0_scratch s;
    /* the prefill pass paused between layers (session_eval_part, pass_begin):
     * NULL when none is in progress, &own (session_eval_part's) or a
     * caller's merged pass; session_part_layer gives its next layer */
    struct e0_pass *pass;
    struct e0_pass *own;  /* session_eval_part's pass, allocated on first use */
    struct gpu_sess *gs;  /* the session's states on the GPU (engine's gmodel), else NULL */
};

/* ---- The GPU (model/gpu_glue.c) ------------------------------------------
 * engine_gpu_plan (at prepare) picks the device and checks the VRAM budget
 * against the weights and one session; with a GPU it reads the checkpoint
 * through the mapping (no load, no panels: the device takes the file's
 * formats). engine_gpu_open uploads the weights. With E0_GPU_AUTO every
 * failure leaves the engine on the CPU with the reason in gpu_note; a
 * named device fails open instead. */
int engine_gpu_plan(e0_engine *e, int32_t n_ctx, char *err);
int engine_gpu_open(e0_engine *e, char *err);
void engine_gpu_close(e0_engine *e);
int session_gpu_new(e0_session *s, char *err);
void session_gpu_free(e0_session *s);
int session_gpu_eval(e0_session *s, const int32_t *ids, size_t n, e0_logits_mode mode, float *logits,
                     char *err);

/* ---- Forward passes over one or several sequences ----------------------
 * A forward pass runs T tokens in runs: run r is tokens [t0, t0 + n) of the
 * batch, the next n positions of session s (s->pos .. s->pos + n - 1). One
 * session's prefill or decode step is one run; a batched decode step
 * (e0_session_eval_batch) is one run of one token per session; a merged
 * prefill pass (pass_begin) is one run per session, of any lengths. The
 * dense matmuls (projections, shared expert, lm_head) run once over all T
 * tokens, so each weight is read once per pass; attention, the DeltaNet
 * conv and recurrence run per run against that session's KV cache and
 * states; the MoE layer computes each routed expert once over every token
 * routed to it (stream/switchglu.h).
 *
 * Per token, the arithmetic is the one a pass of that run alone gives it.
 * The matmul kernels compute every (row, token) alike whatever the other
 * tokens (mat.h), except that some kernel sets change arithmetic when a
 * call reaches K_PANEL_MIN_T tokens ("panel" arithmetic; below it "row"
 * arithmetic, which mat_matmul_decode gives at any T). So the tokens of
 * runs of K_PANEL_MIN_T or more come first in a pass (tokens [0, Tp)) and
 * the dense matmuls run them in one mat_matmul call, the tokens of shorter
 * runs (decode tokens among them) in one mat_matmul_decode call; in the
 * MoE, each expert's tokens split the same way by how many tokens of their
 * own run route to that expert (switchglu.c). A sequence batched with
 * others therefore gets logits bit-identical to its pass alone. */
typedef struct {
    e0_session *s;
    int t0, n;
} e0_run;

/* Sessions one pass of e0_session_eval_batch takes (more run in several). */
enum { E0_BATCH_MAX = 256 };

typedef struct {
    e0_scratch *S;     /* buffers for the T tokens (a session's scratch, n_batch >= T) */
    const e0_run *run; /* [nrun], in token order, each session at most once; runs of
                          K_PANEL_MIN_T tokens or more first */
    int nrun, T;
    int Tp;      /* tokens [0, Tp) are those of runs of K_PANEL_MIN_T or more (panel arithmetic) */
    bool decode; /* every run is one decode token: the decode expert paths (switchglu.h) */
} e0_batch;

/* The batch of one session's T tokens at its next positions (run: its one
 * run); decode when T == 1. */
e0_batch batch_one(e0_session *s, int T, e0_run *run);

/* The run token t of the batch belongs to. */
static inline int batch_run_of(const e0_batch *b, int t) {
    int lo = 0, hi = b->nrun - 1;
    while (lo < hi) { /* the last run starting at or before t */
        const int mid = (lo + hi + 1) / 2;
        if (b->run[mid].t0 <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* y = W x for the batch's T tokens (x: [T, ldx], y: [T, ldy]), each token
 * in its run's arithmetic: mat_matmul over tokens [0, Tp), mat_matmul_decode
 * over [Tp, T). */
static inline void batch_matmul(const e0_batch *b, const e0_mat *m, const float *x, int64_t ldx,
                                float *y, int64_t ldy) {
    if (b->Tp > 0) mat_matmul(m, x, ldx, b->Tp, y, ldy);
    if (b->T > b->Tp)
        mat_matmul_decode(m, x + (size_t)b->Tp * (size_t)ldx, ldx, b->T - b->Tp,
                          y + (size_t)b->Tp * (size_t)ldy, ldy);
}

/* ---- A merged prefill pass ------------------------------------------------
 * One forward pass over the next ids of several sessions (one run each),
 * cut between layers like session_eval_part, so that a scheduler prefills
 * the prompt chunks of many requests with one read of the weights (and,
 * under a memory cap, one read of each routed expert from the disk):
 *
 *     e0_pass p;                                       // the caller's, until done
 *     pass_begin(&p, ss, ids, n, ns, err);             // embeds; ids need not outlive it
 *     do pass_step(&p, max_layers, logits, &done, err); while (!done);
 *
 * Each session gets the logits, KV rows and states its own pass of the same
 * ids gives (bit for bit, model.h above), however the layers are cut. The
 * pass's tokens (the sum of n) must fit the first session's n_batch (its
 * scratch carries the pass), each n its own session's n_batch, and at most
 * E0_PASS_MAX sessions. Until done, every session of the pass refuses other
 * evaluations and snapshots (E0_EINVAL); a session of a paused pass must
 * not be reset, restored or freed. A failed step resets every session of
 * the pass. session_eval_part is the one-session case. */
enum { E0_PASS_MAX = 64 };

typedef struct e0_pass {
    e0_run run[E0_PASS_MAX]; /* in token order (runs of K_PANEL_MIN_T ids or more first) */
    int at[E0_PASS_MAX];     /* the run of the caller's session i */
    e0_batch b;
    int ns;    /* sessions */
    int layer; /* the next layer to run; -1: no pass in progress */
    int half;  /* 1: that layer's token mixer has run, its MLP is next */
} e0_pass;

/* The next layer of the session's paused prefill pass, -1 when none. */
static inline int session_part_layer(const e0_session *s) { return s->pass ? s->pass->layer : -1; }

/* Starts the pass: checks every session (same engine, distinct, no pass in
 * progress, ids in the vocabulary and the context, the limits above; an
 * error changes nothing), embeds the ids and appends them to each history.
 * ids[i]: n[i] >= 1 ids of session ss[i]. */
int pass_begin(e0_pass *p, e0_session *const *ss, const int32_t *const *ids, const size_t *n, int ns,
               char *err);
/* Runs at most max_layers more layers (0: all that are left). When the last
 * is done, *done is set, the positions move on, and logits[i] (an array of
 * ns pointers, or NULL; each NULL or [vocab]) gets the logits of session i's
 * last id. A failure resets every session of the pass (and ends it). */
int pass_step(e0_pass *p, int max_layers, float *const *logits, bool *done, char *err);
/* The same in halves of a layer (its token mixer, then its MLP): at most
 * max_halves more (0: all that are left), so that a pass may also pause
 * inside a layer; the arithmetic does not depend on where it pauses. */
int pass_step_halves(e0_pass *p, int max_halves, float *const *logits, bool *done, char *err);
/* The halves that `layers` more layers of a pass in progress are (a layer
 * begun counts as one of them): pass_step's count in pass_step_halves'. */
static inline int pass_layer_halves(const e0_pass *p, int layers) {
    return 2 * layers - (p->layer >= 0 ? p->half : 0);
}

/* Layer pieces over a batch. in: [T, H] normed input, out: [T, H]. */
void attn_forward_batch(const e0_batch *b, int layer, const float *in, float *out);
void deltanet_forward_batch(const e0_batch *b, int layer, const float *in, float *out);
/* Fails only when expert bytes cannot be read (E0_EIO, message in err). */
int moe_forward_batch(const e0_batch *b, int layer, const float *in, float *out, char *err);
void mlp_forward_batch(const e0_batch *b, int layer, const float *in, float *out);

/* Keeps the longest part of the session's history that is a prefix of
 * prompt[0..n) and still leaves one id to evaluate: attention-only models
 * truncate their KV cache to it; models with recurrent layers keep the
 * whole history or nothing (their states cannot be rewound). Returns the
 * number of positions kept. */
int32_t session_prepare(e0_session *s, const int32_t *prompt, size_t n);

/* One pass of n <= n_batch ids (a prefill chunk) cut between layers, so
 * that a scheduler can run other sessions' decode passes in between: the
 * first call starts the pass and every call runs at most max_layers more
 * layers (0: all that are left), the same ids passed each time. When the
 * last layer is done, *done is set, the positions move on, and the logits
 * of the last id go to `logits` (may be NULL). The arithmetic is that of
 * e0_session_eval of the same n ids however the layers are cut. Until
 * done, the session takes no other evaluation (E0_EINVAL), and a failure
 * resets it. */
int session_eval_part(e0_session *s, const int32_t *ids, size_t n, int max_layers, float *logits,
                      bool *done, char *err);

/* The same over one session's batch of T tokens at positions
 * pos..pos+T-1 (batch_one). */
void attn_forward(e0_session *s, int layer, const float *in, int T, float *out);
void deltanet_forward(e0_session *s, int layer, const float *in, int T, float *out);
/* Fails only when expert bytes cannot be read (E0_EIO, message in err). */
int moe_forward(e0_session *s, int layer, const float *in, int T, float *out, char *err);
void mlp_forward(e0_session *s, int layer, const float *in, int T, float *out);

/* y[t] = w * x[t] / rms(x[t]) over n values, T rows. */
void rmsnorm(const float *x, const float *w, int n, int T, float eps, float *y);

static inline float e0_silu(float x) {
    return x / (1.0f + expf(-x));
}
static inline float e0_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

#endif
