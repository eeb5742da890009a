/* The model on a GPU: every weight in device memory, and sessions whose KV
 * caches, DeltaNet states and activations live there too. A forward pass
 * is a sequence of kernel launches on the device's stream with no host
 * round trip between layers (routing included: the experts' pairs are
 * grouped on the device, model/moe.c's arithmetic per token); the host
 * copies in the embedded ids' rows and copies out the logits.
 *
 * Two tiers (gpu_model_sizes says how much each takes). All resident:
 * dense weights, every routed expert and the lm_head in device memory.
 * The VRAM expert cache: the dense weights resident and the routed
 * experts in n_slots slots of one pool shared by all layers (gpu/vcache.c),
 * filled from the checkpoint's pages on demand; a MoE layer then reads its
 * active experts back to the host once (one wait a layer), copies in the
 * missing ones and runs the same kernels on the slots: the logits are
 * bit-identical to the all-resident tier's (docs/design.md §9).
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
#include "gpu/replica.h"
#include "stream/xpolicy.h"
#include "util/tune.h"
#include "weights/weights.h"

typedef struct {
    gpu_mat q, k, v, o;
    gpu_mat qkvz, ba, qkv, z, b, a, out;
    gpu_mat router, sh_gate, sh_up, sh_down, sh_router;
    gpu_mat mlp_gate, mlp_up, mlp_down;
    gpu_mat xg, xu, xd; /* the routed experts, stacked: gate, up, down */
    CUdeviceptr in_norm, post_norm, q_norm, k_norm, conv_w, A, dt_bias, lin_norm;
} gpu_layer;

/* The host's share of a decode step's misses (gpu/hostmiss.c). */
typedef struct gpu_hostmiss {
    int max;             /* a MoE call's misses the host takes, at most */
    int H, I, k;         /* hidden, expert width, top-k */
    float *x;            /* [H] the call's input row, then ridx: pinned, read back in one round trip */
    int32_t *ridx;       /* [k] its pairs' experts */
    int n;               /* the call's experts the host computes */
    int32_t *pair;       /* [k] each one's pair (its output row) */
    bool down;           /* hostmiss_run's pool job: the down rows, else the SwiGLU rows */
    rmat *m;             /* [3k] each one's gate, up and down in host memory */
    float *mid;          /* [k * I] their SwiGLU rows */
    float *out;          /* [k * H] their output rows, pinned, copied to the card */
    uint64_t experts;    /* experts the host computed */
    double s;            /* host time computing them */
    bool tuning;         /* max chosen by timing decode steps under each of 0 .. top (util/tune.h) */
    tune tune;
    int first;           /* the first MoE layer: its calls mark the steps */
    double t_last;       /* when the last step's first call came */
} gpu_hostmiss;

/* The VRAM expert cache: n_slots slots of slot_bytes in one pool, each
 * holding one expert's gate, up and down (at the offsets of its layer's
 * xg / xu / xd), in LRU order. */
typedef struct {
    CUdeviceptr pool;
    uint64_t slot_bytes;
    int32_t n_slots, E;
    int32_t *key_of;       /* [n_slots]: layer * E + expert held, or -1 */
    int32_t *slot_of;      /* [n_layers * E]: its slot, or -1 */
    int32_t *prev, *next;  /* the LRU list over slots, head the latest used */
    int32_t head, tail;
    int32_t *hx;           /* host: [E] active experts, then their slots, then a call's misses */
    int32_t *rb;           /* pinned host memory, or NULL: a decode call's routing read back in one round
                              trip ([1] active count, [E] experts, [top_k] the guess), then [E] the slots
                              it sends, then [E] floats: its router logits (vcache_map) */
    e0_expert *views;      /* [E] the host cache's views of a call's misses (put) */
    CUdeviceptr dslots;    /* [E] the slots of a call's active experts */
    uint64_t hits, misses; /* expert lookups of MoE calls */
    uint64_t *lhits, *lmisses; /* [n_layers]: the same per layer */
    uint64_t bytes_in;     /* copied in from the host */
    void **pin;            /* vcache_pin_host's ranges of the checkpoint's mapping */
    size_t *pin_len;
    int n_pin;
    uint64_t pinned;       /* their bytes */
    double wait_s, copy_s; /* host time waiting for the routing / copying misses */
    /* Device-staged decode (vcache_stage_on): a decode step's misses are
     * copied in by the device into staging slots (k a layer, outside the
     * LRU list), routing never leaves the device, and between steps the
     * host makes each staged expert a cache slot in place of the least
     * recently used one, which becomes the staging slot (vcache_step). */
    bool staged;
    bool tab_dirty;        /* slot_of or stage changed since the device's copies were written */
    int32_t n_layers, k;
    int32_t *stage;        /* [n_layers * k] the staging slots of each layer */
    int32_t *hlog;         /* [n_layers * k] the host's copy of dlog */
    int32_t *hused;        /* [n_layers * E] the host's copy of dused */
    CUdeviceptr dtab;      /* [n_layers * E] slot_of on the device */
    CUdeviceptr dused;     /* [n_layers * E] pairs each expert served since the last step */
    CUdeviceptr dstage;    /* [n_layers * k] stage on the device */
    CUdeviceptr dlog;      /* [n_layers * k] the expert staged in each staging slot, or -1 */
    uint64_t bytes_staged; /* expert bytes the device staged over the link */
    uint64_t whole_layers; /* layers a prefill brought in whole (vcache_layer_in) */
    struct gpu_hcache *hc; /* the host's expert cache that misses come from, or NULL (gpu/hcache.c) */
    bool prefetch;         /* decode guesses the next MoE layer's experts (vcache_prefetch) */
    int32_t guess_layer;   /* the layer of the guess read back last, or -1 */
    int32_t *guess;        /* [k] its experts */
    int32_t *fetched;      /* [n_slots] the slot was brought in by a guess and not yet used: 1 */
    bool guess_pending;    /* copies on the copy stream the next call must wait for */
    uint64_t prefetched, prefetch_used; /* experts the guesses brought in; of them, routed to */
    uint32_t win_fetched, win_used; /* the same over the current window (vcache_guess_now) */
    uint32_t calls;        /* MoE calls asked vcache_guess_now */
    bool sparse;           /* the last window's guesses were mostly wrong: guess one call in 32 */
    gpu_hostmiss *hm;      /* the host computes some misses (hostmiss_new), or NULL */
    /* The eviction policy (vcache_set_policy), the CPU cache's (stream/xcache.h): which slot a
     * miss or a guess takes, among those this call does not use */
    xpolicy pol;           /* its scores (stream/xpolicy.h); LRU until set */
    float *rl;             /* ROUTER, RECENT: a prefill call's router logits [rl_rows, E], read back */
    int32_t rl_rows;
    int32_t *stamp;        /* [n_slots] the MoE call that last used the slot */
    int32_t call;          /* MoE calls mapped so far */
} gpu_vcache;

typedef struct gpu_model {
    gpu_dev *d;
    const e0_model *m;
    int top_k;
    gpu_layer *L;
    gpu_mat lm_head;
    CUdeviceptr final_norm, inv_freq;
    CUdeviceptr rbias; /* a routing profile's popularity offsets [n_layers x E] (io/config.h), or 0 */
    uint64_t bytes;  /* device memory the weights take (the cache's pool included) */
    bool arena;      /* the weights are cut from the device's arena, opened by gpu_model_new */
    gpu_vcache *vc;  /* the VRAM expert cache, or NULL: every expert resident */
} gpu_model;

/* What the driver's context and the kernels' module take of the card
 * beside edge0's allocations (an H100: 733 MiB): a --vram-budget, which
 * counts the process's whole use of the card, keeps this much for them. */
#define GPU_CTX_ALLOWANCE (768ull << 20)

/* What the weights of m take on the GPU, and whether every matrix has a
 * GPU kernel (0, or E0_EUNSUPPORTED naming the first that does not). */
typedef struct {
    uint64_t dense;   /* every weight but the routed experts (lm_head, norms included) */
    uint64_t experts; /* every routed expert */
    uint64_t slot;    /* one expert of the largest layer: a slot of the VRAM cache */
    int32_t min_slots; /* the experts one MoE call may need at once: the cache's least */
} gpu_sizes;
int gpu_model_sizes(const e0_model *m, gpu_sizes *z, char *err);
/* Copies m's weights to the device: all of them (n_slots 0), or the dense
 * ones and a VRAM expert cache of n_slots slots (at least min_slots). m
 * must outlive the result; top_k is the routing top-k in force. */
int gpu_model_new(gpu_model **out, gpu_dev *d, const e0_model *m, int top_k, int n_slots, char *err);
void gpu_model_free(gpu_model *g);

/* The cache (gpu/vcache.c). vcache_new lays out the slots (the layers'
 * xg / xu / xd point into the pool) and allocates them. */
int vcache_new(gpu_model *g, int n_slots, char *err);
void vcache_free(gpu_model *g);
/* For a MoE call of layer li whose active experts the device holds (nact,
 * exps: moe_sort's), in stream order: waits for them, copies the missing
 * experts into slots (the policy's victims, never one this call uses),
 * and writes the slots in exps' order to x->dslots, which the
 * expert kernels then take as their experts. */
int vcache_map(gpu_model *g, int li, CUdeviceptr nact, CUdeviceptr exps, CUdeviceptr guess, int guess_layer,
               CUdeviceptr in, CUdeviceptr ridx, CUdeviceptr rl, int T, char *err);
/* The slots a miss or a guess takes: policy E0_CACHE_LRU (the default
 * until this is called) the least recently used that the call does not
 * use; _LFU, _ROUTER and _RECENT the lowest score, the CPU cache's
 * scores (stream/xpolicy.h; LFU's counts halve every cache_half_life x
 * slots requests, the router's popularity every router_half_life steps),
 * among the
 * VICTIM_WINDOW least recently used (a miss costs a copy of ~30 us, not a
 * disk read: a scan of every slot would cost more than it saves). Those
 * two read the call's router logits back with its routing (rl: [T, E]).
 * A whole-layer prefill and the device-staged decode keep the list's
 * order. */
int vcache_set_policy(gpu_model *g, int policy, double cache_half_life, double router_half_life, char *err);
/* The host's share of the misses (gpu/hostmiss.c): hostmiss_new sets up
 * the host to compute up to max misses of each decode MoE call (the
 * experts must be in host memory: after vcache_pin_host); vcache_map, given
 * the call's input row `in` and its pairs' experts `ridx` (decode, T = 1),
 * reads them back (hostmiss_read) and offers each miss to hostmiss_take,
 * which takes it (slot -1: the expert kernels skip it) while the host has
 * room; hostmiss_run, once the card's expert kernels are launched,
 * computes the taken experts (the card's bits: gpu/replica.h) and copies
 * their rows into the experts' output eo in stream order. */
/* max < 0: chosen while decoding, the fastest of 0 .. min(top_k, -max). */
int hostmiss_new(gpu_model *g, int max, char *err);
void hostmiss_free(gpu_model *g);
int hostmiss_read(gpu_model *g, int li, CUdeviceptr in, CUdeviceptr ridx, char *err);
bool hostmiss_take(gpu_model *g, int li, int e, char *err, int *rc);
int hostmiss_run(gpu_model *g, CUdeviceptr eo, char *err);
/* Decode over the cache: vcache_map also reads back, where guess is not
 * 0, top_k experts of MoE layer guess_layer that the device guessed (that
 * layer's router on this layer's input); vcache_prefetch, called right
 * after vcache_map (from pinned pages) or once this layer's kernels are
 * launched (through the host cache, whose reads may wait for the disk),
 * copies the guessed experts the cache lacks
 * into slots on the copy stream, and the next vcache_map makes the stream
 * wait for those copies. A wrong guess costs a copy and a slot, never a
 * result: the slots a call uses are its routing's. On by default
 * (g->vc->prefetch); $E0_GPU_PREFETCH=0 turns it off. */
int vcache_prefetch(gpu_model *g, char *err);
/* Whether this decode MoE call should guess (g->vc->prefetch on): as the
 * CPU path does with its guesses (stream/switchglu.c), a window of 128
 * guessed experts of which fewer than a quarter were routed to makes the
 * next window guess in one call of 32 only, to keep measuring (a real
 * model's routing may follow its routers less closely than the synthetic
 * checkpoints', where ~99% are). */
bool vcache_guess_now(gpu_model *g);
/* Pins the routed experts' pages of the checkpoint's mapping for the
 * device (read-only host registration): misses are then copied by DMA at
 * the link's speed, asynchronously, instead of through the driver's
 * staging of pageable memory. Holds every expert byte in RAM until the
 * model is freed: only where the memory budget has room for them. On
 * failure nothing stays pinned and the cache works as before. */
int vcache_pin_host(gpu_model *g, char *err);
/* After vcache_pin_host: lets the device bring a decode step's misses in
 * itself from the pinned pages (no host wait between layers; the cache is
 * updated between steps). 0 with *on set, or 0 with *on false and why (at
 * least E0_ERR_MAX bytes) saying what stands in the way (the device cannot
 * use host pointers, a layer's experts not evenly strided or aligned, too
 * few slots for E and a staging slot per layer and routed expert);
 * nonzero only for a device error. */
int vcache_stage_on(gpu_model *g, int top_k, bool *on, char *why, char *err);
/* Whole-layer prefill (vcache.c says why): whether a pass of T ids brings
 * its MoE layers' experts in whole, and vcache_layer_in, which does it for
 * layer li on the copy stream (after gpu_copy_after) and writes the
 * layer's row of the device's slot table (dtab) there too. Where the cache
 * is full, the victims are the slots of layer `spare` (a layer the device
 * has finished with in this pass; -1: none) before the least recently
 * used. */
bool vcache_whole_ok(const gpu_model *g, int T);
int vcache_layer_in(gpu_model *g, int li, int spare, char *err);
/* Around a device-staged decode step (gpu_sess_eval, T = 1):
 * vcache_prepare writes the slot and staging tables where they changed
 * (in stream order); vcache_step, after the step, reads which experts it
 * used and staged (a wait), counts hits and misses, and makes every staged
 * expert a cache slot in place of the least recently used. */
int vcache_prepare(gpu_model *g, char *err);
int vcache_step(gpu_model *g, char *err);

/* The host's expert cache (gpu/hcache.c says why): where the experts
 * cannot all be pinned, the VRAM cache's misses come from bundles read by
 * direct reads into a cache of `bytes` of pinned host memory (at least three
 * layers' experts, else E0_ENOMEM) instead of from the mapping, and the
 * slots the VRAM gives up go back into it. A call that copies n experts
 * in: hcache_begin; hcache_keep for each slot it gives up (expert e of layer
 * li in slot `slot`, copied back where the host lacks it); hcache_get for
 * views of experts es[0..n) of layer li (n <= E; read where absent), valid
 * until the call after next, old[i] the expert whose VRAM slot es[i] takes
 * (layer * E + expert, or -1 for a free slot); the copies
 * from them; then hcache_mark on the stream that copies. `whole`: the
 * call brings a layer in whole for a prefill (vcache_layer_in), whose
 * rule the host cache follows (hcache_new); each of the prefill's passes
 * starts with hcache_pass. */
typedef struct gpu_hcache gpu_hcache;
typedef struct {
    int32_t slots, experts; /* bundles it holds; routed experts of the model */
    uint64_t bytes, hits, misses, bytes_read, kept;
    double read_s;
    bool exclusive;
} gpu_hstats;
int hcache_new(gpu_model *g, uint64_t bytes, char *err);
void hcache_free(gpu_model *g);
int hcache_begin(gpu_model *g, int n, char *err);
int hcache_keep(gpu_model *g, int li, int e, int slot, bool copy_stream, bool whole, char *err);
int hcache_get(gpu_model *g, int li, const int32_t *es, const int32_t *old, int n, bool whole,
               e0_expert *views, char *err);
void hcache_pass(gpu_model *g);
int hcache_mark(gpu_model *g, bool copy_stream, char *err);
void hcache_stats(const gpu_model *g, gpu_hstats *out);
void hcache_reset_stats(gpu_model *g);

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
/* One decode step of n sessions of one model (n <= GPU_BATCH_MAX), id i
 * at position pos[i] of session ss[i], in one pass over the weights: the
 * products take the n rows together, the kernels that carry a sequence's
 * state (RoPE, the KV cache, attention, the DeltaNet convolution and
 * recurrence) run once per sequence on its own, and each row's
 * arithmetic is its step alone's (the vector forms below the tiled
 * forms' batch), so the logits (logits: [n, vocab], or NULL) are the bits
 * of n single steps. The pass runs in ss[0]'s scratch. Not for a
 * checkpoint with a routing profile (E0_EUNSUPPORTED). On failure the
 * sessions' states are partly updated: reset them. */
enum { GPU_BATCH_MAX = 8 };
int gpu_sess_eval_batch(gpu_sess *const *ss, int n, const int32_t *pos, const int32_t *ids, float *logits,
                        char *err);

#endif
