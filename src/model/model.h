/* The forward pass and its sessions: the engine (weights, options, the
 * expert stream), the per-session state (KV cache, DeltaNet conv/recurrent
 * states, scratch), merged prefill passes and the layer pieces. The
 * weights' views are weights/weights.h (with the math traps of loading),
 * the batch and scratch types weights/batch.h, the helpers the layer files
 * share with the session model/forward.h. */
#ifndef E0_MODEL_MODEL_H
#define E0_MODEL_MODEL_H

#include "edge0.h"
#include "weights/batch.h"
#include "weights/weights.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

struct e0_stream;
struct gpu_dev;
struct gpu_model;
struct gpu_sess;

/* Route stickiness keeps a position's experts as uint16 and sorts at most
 * this many picks on the stack (moe.c). */
enum { E0_STICKY_MAX_K = 64 };

/* --mtp auto (model/mtp.c mtp_auto_*): whether drafting pays on this
 * machine and model, measured on the engine's own single-sequence decode
 * passes, one-id passes (the block's catch-up left out, which OFF drops)
 * and verify passes (their drafts included, the tokens they keep counted)
 * in alternating blocks of 4, so that a cache warming or a disk slowing
 * weighs on both alike while a block of one-id passes mostly sees a cache
 * as decoding without drafts leaves it; each kind's median pass time, so
 * that a stall does not decide. MEASURE takes 8 of each, then ON when
 * drafting gives MTP_AUTO_MARGIN more tokens a second, else OFF, for good
 * (the block stops: no catch-up, no drafts). ON runs 4 one-id passes after
 * each 16 verify passes and re-decides every 32, turning OFF when drafting
 * falls below the plain rate. */
typedef enum { MTP_AUTO_MEASURE, MTP_AUTO_ON, MTP_AUTO_OFF } mtp_auto_state;
enum { MTP_AUTO_MAX = 32 };
typedef struct {
    mtp_auto_state state;
    int np, nd;       /* one-id and verify passes measured in the current window */
    int tokens;       /* tokens the verify passes kept */
    double tp[MTP_AUTO_MAX], td[MTP_AUTO_MAX]; /* their seconds */
    double plain_tps; /* the last window's one-id tokens a second */
    double draft_tps; /* and its verify passes' kept tokens a second */
} e0_mtp_auto;

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
    int32_t gpu_slots;        /* VRAM expert cache slots (0: every expert resident) */
    int32_t gpu_seqs;         /* the sessions the VRAM plan keeps room for */
    uint64_t gpu_weight_bytes, gpu_slot_bytes, gpu_session_bytes, gpu_budget; /* the plan's figures */
    uint64_t gpu_token_bytes; /* weights a decoded token reads there: dense and top-k experts a layer */
    /* where the VRAM cache's misses come from (gpu_glue.c host_plan): the experts pinned for DMA,
     * a host expert cache of gpu_host_cache bytes, or the mapping through the driver's staging */
    enum { GPU_HOST_PIN, GPU_HOST_CACHE, GPU_HOST_MAP } gpu_host;
    uint64_t gpu_host_cache;
    /* speculative decoding with the MTP block (model/mtp.c; e0_stats) */
    uint64_t mtp_drafts, mtp_rejected;
    double mtp_s; /* time in the block (drafts and the catch-up of its positions) */
    bool mtp_auto_on; /* --mtp auto with the block loaded: mtp_auto decides when to draft */
    e0_mtp_auto mtp_auto;
    char mtp_note[256]; /* e0_engine_mtp_note's */
    uint64_t decode_bytes_read; /* expert bytes read by decode steps (e0_stats) */
    struct gpu_dev *gpu;
    struct gpu_model *gmodel;
    char gpu_note[1024];
};

struct e0_session {
    e0_engine *eng;
    const e0_model *m;
    int32_t n_ctx, n_batch, pos;
    void **kc, **vc;  /* per attention layer (and the MTP block's, index n_layers): [n_ctx, nkv*hd]
                         of the engine's kv_type */
    float **conv;     /* per DeltaNet layer: [K-1, conv_dim] */
    float **rec;      /* per DeltaNet layer: [Hv, Dk, Dv] */
    int32_t *hist;    /* [n_ctx]: the ids at positions 0..pos */
    /* [n_ctx, n_layers, top_k]: each position's final experts per layer,
     * highest weight first; only for models with route stickiness (moe.c) */
    uint16_t *route_hist;
    /* routing replay (e0_session_replay, model/replay.c): position p takes
     * token (replay_off + p - replay_p0) mod its tokens of the trace; NULL: the router */
    const struct e0_routes *replay;
    int64_t replay_off, replay_p0;
    e0_scratch s;
    /* the prefill pass paused between layers (session_eval_part, pass_begin):
     * NULL when none is in progress, &own (session_eval_part's) or a
     * caller's merged pass; session_part_layer gives its next layer */
    struct e0_pass *pass;
    struct e0_pass *own;  /* session_eval_part's pass, allocated on first use */
    struct gpu_sess *gs;  /* the session's states on the GPU (engine's gmodel), else NULL */
    struct e0_mtp_state *mtp; /* the MTP block's state (model/mtp.c), NULL when it does not draft */
};

/* ---- The MTP block (model/mtp.c) -------------------------------------------
 * A session that drafts with the MTP block (e0_session_opts.mtp, the
 * engine's e0_mtp.on) keeps the block's own KV cache at the main model's
 * positions (kc / vc[n_layers]) and the main model's hidden rows (after
 * the final norm) of the positions whose next id it has not seen yet:
 * MTP position t reads the hidden row of t and the id at t + 1. Every
 * evaluation that knows that id runs the block over those positions
 * (mtp_catch_up), except a verify pass, whose second id may be rejected:
 * its two rows wait for the next draft, which runs them with the id it
 * drafts from. So while in sync, pos (the block's) + npend == the
 * session's pos. */
typedef struct e0_mtp_state {
    int32_t pos;     /* MTP positions computed: [0, pos) of its KV cache */
    int32_t npend;   /* hidden rows held, of positions pos .. pos + npend - 1 */
    bool sync;       /* false after an evaluation that kept no hidden rows (a snapshot restored,
                        a history truncated): nothing to draft from until the next reset */
    float *hid;      /* [n_batch + 2, H]: the held rows, then a pass's rows being taken */
    float *cat;      /* [n_batch, 2H]: the block's input rows [normed embedding | normed hidden] */
    float **conv1, **rec1; /* per DeltaNet layer: the states after the first position of the last
                              verify pass (deltanet.c writes them while keep is set) */
    bool keep;
    bool verified;   /* the last evaluation was a verify pass: e0_session_rollback may drop its
                        second position */
    int32_t drafted; /* the id the last draft ran position pos - 1 with, -1: none since */
    double draft_s;  /* the last draft's seconds (mtp_auto counts them with the verify pass) */
} e0_mtp_state;

/* Rows a draft runs at most (held rows: 1 after an evaluation, 2 after a
 * verify pass). */
enum { E0_MTP_ROWS = 4 };

/* The session's MTP state when e0_session_new makes one (0, E0_ENOMEM). */
int mtp_session_new(e0_session *s, char *err);
void mtp_session_free(e0_session *s);
/* At e0_session_reset: nothing held, in sync. */
void mtp_reset(e0_session *s);
/* After an evaluation that moved the session without its hidden rows. */
void mtp_desync(e0_session *s);
/* Before evaluating ids at the session's position, ids[0] first: a draft
 * that ran its last position with another id is undone (its row held again). */
void mtp_before(e0_session *s, int32_t first);
/* After a pass that evaluated T ids of s (now at positions pos - T ..
 * pos - 1): their final residual rows x ([T, H], row stride H) normed and
 * held. */
void mtp_take(e0_session *s, const float *x, int T);
/* The block over every held row whose next id the history has (all but
 * the last), in s's scratch: what an evaluation does after mtp_take.
 * Fails when expert bytes cannot be read (the MTP state is then out of
 * sync until the session is reset). */
int mtp_catch_up(e0_session *s, char *err);
/* The same for every held row, the last one's next id `next` (the id about
 * to be evaluated): a verify pass not preceded by a draft. */
int mtp_catch_up_with(e0_session *s, int32_t next, char *err);

/* --mtp auto (e0_mtp_auto): whether a session of e may draft now (and the
 * decision, once a window is measured); the measurements: a one-id decode
 * pass of `s` seconds (the block's catch-up left out), a verify pass (its
 * draft included), a verify pass's second id dropped (e0_session_rollback). */
bool mtp_auto_drafts(e0_engine *e);
void mtp_auto_plain(e0_engine *e, double s);
void mtp_auto_verify(e0_engine *e, double s);
void mtp_auto_dropped(e0_engine *e);
/* The decision as a line for --stats and info ("" when auto is not in play). */
const char *mtp_auto_note(const e0_engine *e, char *buf, size_t n);

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
/* Batched decode on the GPU (gpu_sess_eval_batch, GPU_BATCH_MAX sessions
 * a pass): whether it is on for the session's engine (off until measured
 * on a card: $E0_GPU_BATCH=1; never for a routing profile), and one id
 * for each of n sessions of one engine, with the last-id logits of each
 * ([n, vocab], or NULL). On failure the sessions' states are partly
 * updated: the caller resets them. */
bool session_gpu_batch_on(const e0_session *s);
int session_gpu_eval_batch(e0_session *const *ss, size_t n, const int32_t *ids, float *logits, char *err);

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
 * ids gives (bit for bit, weights/batch.h), however the layers are cut. The
 * pass's tokens (the sum of n) must fit the first session's n_batch (its
 * scratch carries the pass), each n its own session's n_batch, and at most
 * E0_PASS_MAX sessions. Until done, every session of the pass refuses other
 * evaluations and snapshots (E0_EINVAL); a session of a paused pass must
 * not be reset, restored or freed. A failed step resets every session of
 * the pass. session_eval_part is the one-session case. */
/* E0_PASS_MAX: edge0.h */

typedef struct e0_pass {
    e0_run run[E0_PASS_MAX]; /* in token order (runs of K_PANEL_MIN_T ids or more first) */
    int at[E0_PASS_MAX];     /* the run of the caller's session i */
    e0_batch b;
    int ns;    /* sessions */
    int layer; /* the next layer to run; -1: no pass in progress */
    int half;  /* 1: that layer's token mixer has run, its MLP is next */
    /* On the GPU the pass is not cut: pass_begin keeps the ids (each
     * session's run at run[i].t0 of gids, in the caller's order) and the
     * first step evaluates each session's run whole, one after another. */
    bool gpu;
    int32_t *gids;
    size_t gcap;
} e0_pass;

/* The next layer of the session's paused prefill pass, -1 when none. */
static inline int session_part_layer(const e0_session *s) { return s->pass ? s->pass->layer : -1; }
/* The checks of an evaluation (session.c): session ss[i] (not NULL) of a
 * pass over several is of session 0's engine and none of ss[0..i); n ids at
 * the session's next positions are in the vocabulary and fit. */
int session_check_distinct(e0_session *const *ss, size_t i, char *err);
int session_check_ids(const e0_session *s, const int32_t *ids, size_t n, char *err);
/* Frees what a pass holds beside itself (pass_free frees both). Inline:
 * session.c frees a session's own pass and calls nothing else of pass.c. */
static inline void pass_release(e0_pass *p) {
    free(p->gids);
    p->gids = NULL;
    p->gcap = 0;
}

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
/* The experts the session's replayed trace gives position p in `layer`
 * ([top_k]), NULL where the router decides (no replay, or the trace's token
 * does not name the layer). */
const int32_t *replay_experts(const e0_session *s, int layer, int64_t p);
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

#endif
