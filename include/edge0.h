/* edge0 — Mixture-of-Experts inference that streams experts from the SSD.
 *
 * This is the only header the CLI and the server include. Keep it narrow:
 * nothing here exposes tensors, kernels or cache internals.
 *
 * Usage:
 *
 *     e0_engine_opts eo;
 *     e0_engine_opts_default(&eo);
 *     char err[E0_ERR_MAX];
 *     e0_engine *eng;
 *     if (e0_engine_open(&eng, "/models/Qwen3.6-35B-A3B-4bit", &eo, err) != E0_OK)
 *         die(err);
 *     e0_session_opts so;
 *     e0_session_opts_default(&so);
 *     e0_session *s;
 *     e0_session_new(eng, &so, &s, err);
 *     e0_session_eval(s, prompt_ids, n, E0_LOGITS_LAST, logits, err);   // prefill
 *     e0_session_eval(s, &next_id, 1, E0_LOGITS_LAST, logits, err);     // decode
 *     e0_session_free(s);
 *     e0_engine_free(eng);
 *
 * Ownership: the engine owns the mapped checkpoint and the resident weights;
 * a session owns its KV cache, recurrent states and scratch buffers and must
 * be freed before its engine.
 *
 * Threads: an engine may be shared by sessions on different threads only for
 * read-only calls (e0_engine_info). One session must be used by one thread at
 * a time. Every call returns E0_OK (0) or a negative E0_E* status and, on
 * error, writes a message of at most E0_ERR_MAX bytes into `err` (which may be
 * NULL) naming the file, tensor or field at fault.
 */
#ifndef EDGE0_H
#define EDGE0_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define E0_ERR_MAX 512

enum {
    E0_OK = 0,
    E0_EIO = -1,          /* a file could not be opened, read or mapped */
    E0_EFORMAT = -2,      /* a checkpoint, config or request is malformed */
    E0_ENOMEM = -3,       /* an allocation failed */
    E0_EINVAL = -4,       /* an argument is invalid */
    E0_ENOTFOUND = -5,    /* a file or tensor is missing */
    E0_EUNSUPPORTED = -6, /* valid input this build does not handle */
    E0_ERANGE = -7,       /* a value is outside its domain (token id, context) */
};

/* A short name for a status code ("malformed input", ...). */
const char *e0_status_str(int code);

typedef struct e0_engine e0_engine;
typedef struct e0_session e0_session;

/* How the streaming MoE layer gets expert weights (docs/design.md §4.4). Every
 * path changes only where the expert bytes come from, never the arithmetic:
 * all give logits bit-identical to E0_PATH_EXACT. */
typedef enum {
    E0_PATH_AUTO,   /* choose per call from the options below */
    E0_PATH_EXACT,  /* each routed expert from the LRU or the checkpoint */
    E0_PATH_STAGED, /* fixed slots filled ahead of need from a predicted set */
    E0_PATH_HOT,    /* per-layer resident stacks of the most used experts */
    E0_PATH_FULL,   /* whole-layer expert reads, tokens sorted by expert */
} e0_path;

/* Where bundles are read from: pread into cache buffers, or the mapping
 * itself (the page cache is the cache; prefetch is madvise(WILLNEED)).
 * AUTO picks the mapping when the checkpoint fits in 80% of the available
 * memory and no budget is set, pread otherwise (docs/experiments.md). */
/* How expert (and resident) bytes are reached: PREAD into the bounded LRU;
 * MMAP through the page cache's mapping; LOAD the whole checkpoint read into
 * memory on huge pages at open (when it fits; no page faults or 4 KiB TLB
 * misses afterwards). AUTO: PREAD under a memory budget, else LOAD when the
 * checkpoint fits in 80% of available memory, else PREAD. */
typedef enum { E0_IO_AUTO, E0_IO_PREAD, E0_IO_MMAP, E0_IO_LOAD } e0_io_mode;
#define E0_IO_MODES 4
/* The mode's name as `--io` spells it ("auto", "pread", "mmap", "load"). */
const char *e0_io_name(e0_io_mode io);

/* The element type of the KV cache (`--kv-type`). F32, the default, keeps
 * attention exact; F16 (llama.cpp's default cache type) halves the cache's
 * memory and the bytes a decode step reads from it, each cached value
 * rounded to f16 once (relative error <= 2^-11; on the fixtures the logits
 * move by up to 7.4e-3 relative L2, the argmax nowhere). */
typedef enum { E0_KV_F32, E0_KV_F16 } e0_kv_type;
/* The type's name as `--kv-type` spells it ("f32", "f16"). */
const char *e0_kv_name(e0_kv_type t);

/* Speculative decoding with the checkpoint's multi-token-prediction (MTP)
 * block, the draft head Qwen3.5 / 3.6 ship (`--mtp`; e0_session_draft). */
typedef enum {
    E0_MTP_OFF = 0, /* the block is not loaded (the library's default) */
    E0_MTP_ON,      /* loaded and computed: open fails when the checkpoint has no block or
                       the engine computes on a GPU (MTP is CPU-only for now) */
    E0_MTP_AUTO,    /* on where drafting pays; none measured so far pays, so off (the CLI's
                       default; session.c resolve_mtp) */
} e0_mtp_mode;
/* The mode's name as `--mtp` spells it ("off", "on", "auto"). */
const char *e0_mtp_name(e0_mtp_mode m);

/* LayerOptions of docs/design.md §4.6, with its defaults (e0_engine_opts_default). */
typedef struct {
    int32_t staged;              /* fixed-slot decode (false) */
    int32_t staged_n;            /* slot count (8) */
    int32_t staged_trigger;      /* top-k that triggers staged decode (8) */
    int32_t staged_replace;      /* staged set replaces routing: lossy, counted (false) */
    int32_t staged_sync;         /* fill slots at the step boundary (true) */
    int32_t asm_cache;           /* reuse the assembled slot table of an unchanged set (true) */
    int32_t incr_stack;          /* rewrite only the slots that changed (false) */
    int32_t incr_writeback;      /* evicted slot bundles go back to the LRU (false) */
    int32_t hot_per_layer;       /* resident hot experts per layer (0) */
    int32_t hot_update_interval; /* calls between hot-set refreshes (4) */
    float hot_decay;             /* usage count decay per refresh (0.75) */
    float pin_bonus;             /* usage bonus of predicted experts (2.0) */
    int32_t cache_slots;         /* LRU capacity in bundles, whole model (64) */
    int32_t prefetch_cap;        /* prefetches in flight (48) */
    int32_t load_threads;        /* on-demand I/O threads (8) */
    int32_t prefetch_threads;    /* prefetch I/O threads (4) */
    int32_t prefetch_k;          /* next-layer experts a decode token loads on a guess: N = the next
                                    router's first N, 0 = its first k/2, and the rest of its top-k
                                    while at least half of those are routed to (0) */
    int32_t full_layer_prefill;  /* whole-layer prefill (false) */
    int32_t prefill_full_layers; /* leading layers that use it, 0 = all (0) */
    int32_t hot_window;          /* layers whose hot stacks stay resident, 0 = all (0) */
    int32_t prefill_hot;         /* hot stack size during prefill (0) */
    int32_t warm_willneed;       /* madvise(WILLNEED) over ranges about to be read (false) */
    int32_t top_k;               /* routing top-k override, 0 = the model's (changes the model) */
    int32_t cache_policy;        /* shared cache eviction: E0_CACHE_LRU, _LFU, _ROUTER or _RECENT (RECENT) */
    float cache_half_life;       /* LFU: counts halve every this x cache_slots demand requests (1) */
    float router_half_life;      /* ROUTER, RECENT: summed probabilities halve every this many steps (256) */
} e0_layer_opts;

/* e0_engine_opts.budget_mode */
enum { E0_BUDGET_AUTO = 0, E0_BUDGET_OFF = 1 };

/* Eviction policies of the shared expert cache (stream/xcache.h). */
enum { E0_CACHE_LRU = 0, E0_CACHE_LFU = 1, E0_CACHE_ROUTER = 2, E0_CACHE_RECENT = 3 };

typedef struct {
    int n_threads;       /* compute threads; 0 = one per core */
    e0_layer_opts layer; /* streaming options */
    e0_path path;        /* force one path (E0_PATH_AUTO: per options) */
    e0_io_mode io;       /* E0_IO_AUTO */
    e0_kv_type kv_type;  /* E0_KV_F32 */
    uint64_t mem_budget; /* bytes; when set, sizes cache_slots and friends at open */
    /* with no mem_budget and io E0_IO_AUTO, E0_BUDGET_AUTO sets one from the
     * cgroup's limit and MemAvailable when the checkpoint does not fit in
     * memory (experts read on demand); E0_BUDGET_OFF, or an I/O mode given,
     * leaves cache_slots as given */
    int32_t budget_mode;
    /* E0_IO_LOAD: called as the checkpoint is read (bytes so far, total); may be NULL */
    void (*load_progress)(void *ctx, uint64_t done, uint64_t total);
    /* E0_IO_LOAD, after the read: called as the loaded weights are rearranged
     * into the kernels' layout (bytes so far, total); may be NULL */
    void (*repack_progress)(void *ctx, uint64_t done, uint64_t total);
    void *load_ctx; /* passed to both */
    /* Sequences a server runs at once (edge0 serve --parallel), each a
     * session of n_ctx positions (0: 4096): a memory budget keeps room for
     * all their KV caches and states. 0: one; E0_SEQS_AUTO: as many as fit,
     * at most E0_AUTO_SEQS (under a budget: while the expert cache keeps
     * two tokens' working set; without one: while they take at most half
     * the memory the checkpoint leaves). e0_engine_seqs says the choice. */
    int32_t n_seqs;
    int32_t n_ctx;
    /* Bytes the caller keeps in memory beside the engine (a server's prefix
     * cache, --cache-ram): a memory budget leaves room for them. */
    uint64_t reserve_bytes;
    /* The NVIDIA GPU to compute on (`--gpu`): E0_GPU_OFF (the library's
     * default), E0_GPU_AUTO (the first GPU when the driver finds one and
     * the model fits its VRAM budget, else the CPU, saying why in
     * e0_engine_gpu_note; the CLI's default), or a device ordinal (that
     * GPU or an error). The GPU holds every weight (the VRAM expert cache
     * that streams experts into a budget is not built yet); sessions on it
     * evaluate with e0_session_eval, e0_session_eval_batch (one session
     * after another) and not with passes or snapshots (E0_EUNSUPPORTED). */
    int32_t gpu;
    /* Device memory the GPU may hold (`--vram-budget`); 0: what the driver
     * reports free, less max(512 MiB, 5%). */
    uint64_t vram_budget;
    /* The MTP block (E0_MTP_OFF): when on, its weights are the model's
     * (resident, --io load, the expert cache, the memory plan) and every
     * session (e0_session_opts.mtp) keeps its state and can draft. */
    e0_mtp_mode mtp;
    /* The ids a draft's head scores (`--mtp-vocab`): the first N of the
     * vocabulary, in the tokenizer's BPE order (its most frequent pieces
     * first); the others are never drafted. Exact either way (the verify
     * pass decides; sampled drafts use the same q for the acceptance
     * test), only the draft's cost and acceptance change. 0: auto, 32768
     * for vocabularies over 65536 (the draft head over Qwen3.5's 248k ids
     * was most of the block's time), else all; -1: all. */
    int32_t mtp_vocab;
} e0_engine_opts;

#define E0_GPU_OFF (-1)
#define E0_GPU_AUTO (-2)

#define E0_SEQS_AUTO (-1)
#define E0_AUTO_SEQS 4 /* llama-server's default slot count */
#define E0_MAX_SEQS 64

void e0_engine_opts_default(e0_engine_opts *o);

/* Applies a preset ("staged_k4", "prod_k8", "staged_k8") on top of the defaults. */
int e0_opts_preset(e0_engine_opts *o, const char *name, char *err);
/* Sets one LayerOptions field from text, as `--opt field=value` does. */
int e0_opts_set(e0_engine_opts *o, const char *field, const char *value, char *err);
/* Writes "field=value" for every LayerOptions field, one per line. */
int e0_opts_format(const e0_engine_opts *o, char *buf, size_t len);
/* The preset names, comma-separated. */
const char *e0_opts_presets(void);
/* An E0_CACHE_* policy's name as `--opt cache_policy=` takes it ("lru" for an unknown one). */
const char *e0_cache_policy_name(int policy);

/* Opens a model directory (config.json + safetensors, any layout). */
int e0_engine_open(e0_engine **out, const char *model_dir, const e0_engine_opts *o, char *err);
void e0_engine_free(e0_engine *e);

typedef struct {
    const char *family; /* "qwen3_moe", "qwen3_next", "qwen3_5_moe" */
    const char *layout; /* "hf", "hf-fused", "mlx", "mlx-fused" */
    int32_t vocab_size;
    int32_t n_layers;
    int32_t hidden_size;
    int32_t n_experts;
    int32_t top_k;
    uint64_t weight_bytes; /* all tensors the model uses */
    uint64_t expert_bytes; /* the routed experts among them */
    int32_t mtp_layers;    /* the checkpoint's multi-token-prediction (MTP) draft head: its */
    uint64_t mtp_bytes;    /* blocks and bytes (checked; loaded only when mtp_on) */
    int32_t mtp_on;        /* 1: the engine computes the block (e0_engine_opts.mtp) */
} e0_model_info;

void e0_engine_info(const e0_engine *e, e0_model_info *info);
/* Where the engine computes: "GPU 0 (NVIDIA H100 80GB HBM3): 1.9 GiB of
 * weights ..." or why the CPU ("" when the GPU was not asked for). */
const char *e0_engine_gpu_note(const e0_engine *e);
/* Under --mtp auto with the block loaded: whether drafting was found to
 * pay and the rates measured ("" otherwise). Valid until the next call. */
const char *e0_engine_mtp_note(e0_engine *e);
/* The GPU the engine computes on (a device ordinal), or E0_GPU_OFF. */
int32_t e0_engine_gpu(const e0_engine *e);

/* What e0_engine_open would choose for a model and options, without
 * reading the weights (`edge0 info`). */
typedef struct {
    e0_model_info info;
    uint64_t params, active_params; /* all parameters; those one token uses (top-k experts) */
    uint64_t kv_bytes_per_1k;       /* K and V (kv_type) of the full-attention layers, 1000 positions */
    uint64_t state_bytes;           /* DeltaNet conv and recurrent states, per sequence */
    int32_t moe_layers;
    uint64_t n_bundles;    /* routed experts in all layers */
    uint64_t bundle_bytes; /* one expert's bytes (the largest), what a cache miss reads */
    uint64_t slot_bytes;   /* a cache slot: the bundle in spans aligned for direct reads */
    e0_io_mode io;         /* the I/O mode open resolves to */
    uint64_t mem_budget;   /* the budget in force (0: none) */
    bool auto_budget;      /* it came from --mem-budget auto */
    int32_t cache_slots;   /* expert cache capacity in bundles (0: the checkpoint is in memory) */
    int32_t n_seqs;        /* sequences room is kept for (e0_engine_opts.n_seqs resolved) */
    uint64_t session_bytes; /* one sequence's session: KV cache, states, scratch at n_ctx */
    char io_note[512], budget_note[512];
    int32_t gpu;               /* the GPU open will compute on, or E0_GPU_OFF */
    uint64_t gpu_weight_bytes; /* device memory the weights take there (the expert cache included) */
    int32_t gpu_slots;         /* its VRAM expert cache's slots (0: every expert resident) */
    uint64_t gpu_slot_bytes;   /* one slot: an expert of the largest layer in device form */
    uint64_t gpu_session_bytes; /* one session's KV cache, states and scratch there */
    uint64_t vram_budget;      /* the budget they were held against (auto resolved) */
    char gpu_note[1024];       /* the GPU chosen, or why none ("" when E0_GPU_OFF) */
} e0_plan;
int e0_engine_plan(const char *model_dir, const e0_engine_opts *o, e0_plan *p, char *err);

/* Statistics since open or the last e0_engine_stats_reset (docs/design.md §4.7). */
typedef struct {
    uint64_t prefill_tokens, decode_tokens;
    double prefill_s, decode_s;    /* wall time in e0_session_eval */
    uint64_t bytes_read;           /* expert bytes read from the checkpoint */
    uint64_t bytes_touched;        /* expert bytes the kernels read, from any source */
    uint64_t expert_calls;         /* (layer, expert) products computed */
    uint64_t lru_hits, lru_misses; /* demand lookups of the shared LRU */
    int32_t cache_slots;           /* LRU capacity in bundles */
    int32_t cache_limit;           /* of those, usable now (memory pressure gives slots back) */
    uint64_t pressure_shrinks, pressure_grows; /* times the monitor lowered / raised the limit */
    uint64_t bundle_bytes;         /* bytes of one expert bundle */
    int32_t working_set;           /* bundles one token touches: MoE layers x top-k */
    uint64_t staged_hits, exact_fallbacks, drops; /* per routed (token, expert) pair */
    uint64_t predicted_routed,
        routed_staged; /* prediction accuracy = predicted_routed / routed_staged */
    uint64_t hot_hits, hot_misses, full_layers, overflow_reads;
    uint64_t spec_loads, spec_used; /* next-layer experts loaded on a guess; of those, routed to */
    double io_wait_s, compute_s;    /* time the expert layer waited for bytes / computed experts */
    uint64_t peak_rss;              /* bytes */
    /* the GPU (all 0 without one): its VRAM expert cache (slots 0: every
     * expert resident) and the bytes it copied in over PCIe */
    int32_t vram_slots;
    uint64_t vram_hits, vram_misses; /* expert lookups of MoE calls */
    uint64_t pcie_bytes;             /* expert bytes over PCIe: copied into slots by the host or staged by the device */
    uint64_t pcie_staged_bytes;        /* of them, staged by the device (a decode step's misses) */
    double pcie_gbs;                 /* host-to-device bandwidth measured at open (pinned), GB/s */
    double hbm_gbs;                  /* device memory copy bandwidth measured at open (read + write) */
    uint64_t gpu_token_bytes;        /* weight bytes a decoded token reads on the GPU (dense + top-k experts) */
    uint64_t host_pinned;            /* checkpoint bytes pinned in host memory for the GPU's DMA */
    double vram_wait_s, vram_copy_s; /* host time reading the routing back / copying misses in */
    uint64_t vram_prefetched, vram_prefetch_used; /* experts a decode step's guess of the next layer brought in; of them, routed to */
    uint64_t vram_host_experts;      /* misses the host computed itself (the card's bits), not copied in */
    double vram_host_s;              /* host time computing them */
    int32_t vram_host_max;           /* a MoE call's misses the host takes, at most (now) */
    bool vram_host_timed;            /* that number chosen by timing decode steps ($E0_GPU_HOST_MISS=auto) */
    int32_t host_cache_slots;        /* the GPU's host expert cache (pinned), where the experts are not all pinned */
    uint64_t host_cache_hits, host_cache_misses; /* its lookups for VRAM misses */
    uint64_t host_cache_kept;        /* experts the VRAM gave up, copied back into it (exclusive caching) */
    uint64_t disk_bytes;             /* expert bytes it read from the checkpoint */
    double disk_read_s;              /* host time those reads took */
    /* speculative decoding with the MTP block (e0_session_verify): drafts
     * verified (one a pass) and of them rejected; decode_tokens counts the
     * positions the decode passes kept (1 a one-id evaluation, 2 a verify
     * pass less 1 for a rejection), so the passes were decode_tokens -
     * mtp_drafts + mtp_rejected, each giving decode_tokens / that. mtp_s: time
     * in the block (drafts and the catch-up of its positions), part of
     * decode_s and prefill_s. */
    uint64_t mtp_drafts, mtp_rejected;
    double mtp_s;
    uint64_t decode_bytes_read; /* of bytes_read, those of decode steps (one-id evaluations, drafts
                                   and verify passes) */
} e0_stats;

void e0_engine_stats(e0_engine *e, e0_stats *st);

/* Expert cache policy study (docs/experiments.md, "Expert cache policy
 * against the offline optimum"). e0_engine_trace_start records every
 * demand request of the shared expert cache, (layer, expert) in order, up
 * to `cap` requests (0 stops); it needs the cache (pread I/O, cache_slots
 * > 0), and the router logits of up to `tokens` tokens through every layer
 * (the router policy's replay needs them). e0_engine_cache_study replays the trace through each policy with
 * `slots` slots: requests before `from` only warm the caches (e.g. the
 * prefill before a decode), the rest are counted. */
typedef enum {
    E0_POLICY_LRU,    /* least recently used */
    E0_POLICY_LFU,    /* decayed request counts, half-life cache_half_life x slots requests */
    E0_POLICY_ARC,    /* adaptive replacement (recency + frequency lists) */
    E0_POLICY_ROUTER, /* last step's experts held, the rest by router probabilities */
    E0_POLICY_RECENT, /* decayed per-step request counts + router popularity (default) */
    E0_POLICY_BELADY, /* offline optimum: evict the one needed furthest ahead */
    E0_POLICIES
} e0_policy;
typedef struct {
    int32_t slots;
    uint64_t requests;              /* counted requests */
    uint64_t hits[E0_POLICIES];     /* of them, hits per policy */
    uint64_t dropped;               /* requests past the trace's cap (not replayed) */
    bool router_replayed;           /* false: too many router logits to keep (hits[ROUTER] 0) */
} e0_cache_study;
const char *e0_policy_name(e0_policy p);
/* The shared cache's own eviction policy in force (E0_CACHE_LRU / _LFU / _ROUTER / _RECENT). */
int e0_engine_cache_policy(const e0_engine *e);
int e0_engine_trace_start(e0_engine *e, size_t cap, size_t tokens, char *err);
/* Requests recorded so far; *keys (may be NULL) gets them as
 * layer * n_experts + expert, valid until the next trace_start or free. */
size_t e0_engine_trace(e0_engine *e, const uint32_t **keys);
int e0_engine_cache_study(e0_engine *e, int32_t slots, size_t from, e0_cache_study *out,
                          char *err);
/* Demand hits and misses of one layer in the shared LRU, and the distinct
 * experts routed to in it (a collapsed routing shows as few). */
void e0_engine_layer_stats(e0_engine *e, int32_t layer, uint64_t *hits, uint64_t *misses);
int32_t e0_engine_distinct_experts(const e0_engine *e, int32_t layer);
/* Drops the checkpoint's pages from the page cache (posix_fadvise
 * DONTNEED; pages this process has mapped and touched may stay). */
void e0_engine_drop_cache(e0_engine *e);
/* Reads every checkpoint file once so it sits in the page cache. Returns bytes read. */
uint64_t e0_engine_warm_cache(e0_engine *e);
/* The checkpoint's files: count, and the path of file i. */
int32_t e0_engine_files(const e0_engine *e);
const char *e0_engine_file(const e0_engine *e, int32_t i);
void e0_engine_stats_reset(e0_engine *e);
/* Sequences the engine keeps room for (e0_engine_opts.n_seqs, resolved). */
int32_t e0_engine_seqs(const e0_engine *e);
/* What the memory budget chose (empty without one). */
const char *e0_engine_budget_note(const e0_engine *e);
/* How expert bytes are read ("pread: ..." or "mmap: ..."), and why. */
const char *e0_engine_io_note(const e0_engine *e);

typedef struct {
    int32_t n_ctx;   /* positions the KV cache holds; 0 = 4096 */
    int32_t n_batch; /* largest prefill batch run at once; longer prompts are split; 0 = 512 */
    int32_t mtp;     /* 1 (default): keep the MTP block's state to draft with, when the engine
                        computes the block (every evaluation then runs it over its positions);
                        0: this session does not draft */
} e0_session_opts;

void e0_session_opts_default(e0_session_opts *o);

int e0_session_new(e0_engine *e, const e0_session_opts *o, e0_session **out, char *err);
void e0_session_free(e0_session *s);

/* Forgets every position: the next eval starts a new sequence. */
void e0_session_reset(e0_session *s);

/* Number of positions evaluated so far. */
int32_t e0_session_pos(const e0_session *s);

typedef enum {
    E0_LOGITS_NONE, /* logits may be NULL */
    E0_LOGITS_LAST, /* logits: [vocab] for the last id */
    E0_LOGITS_ALL,  /* logits: [n, vocab], one row per id */
} e0_logits_mode;

/* Runs `n` ids at the next positions: as one causal batch (prefill) when
 * n > 1, one decode step when n == 1. Fails with E0_ERANGE for an id outside
 * the vocabulary or a context overflow, leaving the session unchanged. */
int e0_session_eval(e0_session *s, const int32_t *ids, size_t n, e0_logits_mode mode, float *logits,
                    char *err);

/* Batched decode: one id for each of n distinct sessions of one engine
 * (ids[i] for sessions[i]) in one forward pass, as a server steps every
 * active request at once. The dense weights (attention and DeltaNet
 * projections, shared experts, lm_head) are read once for all n tokens and
 * each routed expert once for every token routed to it, while attention
 * and the DeltaNet recurrences run per session against its own KV cache
 * and states. Sessions may sit at any positions and join or leave between
 * calls. Each session's logits and state are bit-identical to
 * e0_session_eval(sessions[i], &ids[i], 1, ...), whatever n and whichever
 * other sessions share the pass. logits: [n, vocab] (row i for
 * sessions[i]), or NULL. The pass uses sessions[0]'s scratch: more than its
 * n_batch sessions run in several passes. Fails with E0_EINVAL (a NULL or
 * repeated session, another engine's) or E0_ERANGE (an id outside the
 * vocabulary, a full context) leaving every session unchanged; when expert
 * bytes cannot be read, every one of the n sessions is reset. */
int e0_session_eval_batch(e0_session *const *sessions, const int32_t *ids, size_t n,
                          float *logits, char *err);

/* ---- Speculative decoding with the MTP block ---------------------------- *
 * A session of an engine that computes the checkpoint's MTP block
 * (e0_engine_opts.mtp, e0_model_info.mtp_on; e0_session_opts.mtp) keeps
 * the block's state: a KV cache of its attention layer at the main model's
 * positions and the main model's hidden rows it reads. MTP position t
 * reads the main model's hidden state at t and the id at t + 1 and
 * predicts the id at t + 2. Every evaluation runs the block over the
 * positions whose next id it has seen, so that a draft after any mix of
 * evaluations attends over the whole history. One step with one draft:
 *
 *     // x: the next id (chosen from the last logits, not evaluated yet)
 *     e0_session_draft(s, x, q, err);                   // q [vocab]: the id after x
 *     d = the id q gives (greedy: its argmax);
 *     e0_session_verify(s, (int32_t[2]){x, d}, lg, err); // lg [2, vocab]
 *     a = the id lg[0] gives;                           // the main model's after x
 *     if (a == d) the next id comes from lg[1];         // two ids this pass
 *     else e0_session_rollback(s, true, err), the next id is a; // one
 *
 * The verify pass gives each of its two positions the bits two one-token
 * e0_session_eval steps give (the row kernels, the decode expert paths,
 * the recurrent DeltaNet), and a rollback leaves the session as if only x
 * had been evaluated (the DeltaNet states after x were kept by the pass,
 * attention drops a position): greedy decoding with drafts emits exactly
 * what it emits without. text/generate.c runs this loop (e0_generate,
 * e0_gen_advance), with speculative sampling for temperatures above 0.
 * CPU sessions only; a session evaluated through e0_session_eval_batch or
 * a merged pass keeps its MTP state too, and so does a snapshot; one
 * restored from a snapshot of a session without it, or truncated by
 * e0_session_prepare, cannot draft until reset. */

/* Whether e0_session_draft can run now: the session has the MTP state, in
 * sync, at least one position evaluated and room for two more. */
bool e0_session_can_draft(const e0_session *s);
/* The MTP block's logits ([vocab]) for the id after `id`, the id that is
 * to be evaluated next (at the session's position). E0_EINVAL when it
 * cannot draft (e0_session_can_draft), E0_ERANGE for an id outside the
 * vocabulary, E0_EIO when expert bytes cannot be read (drafting then stays
 * off until the session is reset). */
int e0_session_draft(e0_session *s, int32_t id, float *logits, char *err);
/* Evaluates ids[0] and ids[1] at the next two positions in one pass;
 * logits: [2, vocab], row i the logits after ids[i], each bit-identical to
 * a one-token e0_session_eval of it. Errors as e0_session_eval's. */
int e0_session_verify(e0_session *s, const int32_t *ids, float *logits, char *err);
/* Right after e0_session_verify: forgets its second position, leaving the
 * session as one e0_session_eval of ids[0] leaves it. rejected: the draft
 * was rejected (counted in e0_stats.mtp_rejected); false: it was accepted
 * but the generation ends before it is needed. E0_EINVAL otherwise. */
int e0_session_rollback(e0_session *s, bool rejected, char *err);
/* e0_session_eval_batch with verify passes in it: session i evaluates
 * n_ids[i] ids (1, or 2 as e0_session_verify does; taken from ids in
 * order), logits one row per id ([sum of n_ids, vocab]), each session's
 * rows and state those of e0_session_eval / e0_session_verify alone; after
 * it, e0_session_rollback on a session that verified. A server's sessions
 * draft one by one (e0_session_draft) and verify in one pass. Errors as
 * e0_session_eval_batch's, and E0_EINVAL for a count other than 1 or 2 or a
 * session without the MTP state given 2. */
int e0_session_verify_batch(e0_session *const *sessions, const int32_t *ids, const int32_t *n_ids, size_t n,
                            float *logits, char *err);

/* The ids the session holds, in order (what e0_session_eval and
 * e0_generate have evaluated since the last reset); *n gets their count. */
const int32_t *e0_session_history(const e0_session *s, size_t *n);

/* The positions of s that continuing it with prompt[0..n) can keep, as
 * e0_generate does (changes nothing): for attention-only models the common
 * prefix of its history and the prompt; for models with recurrent layers
 * its whole history when that is a prefix of the prompt, else 0 (their
 * states cannot be rewound). Always less than n: the last id must run. */
int32_t e0_session_reusable(const e0_session *s, const int32_t *prompt, size_t n);

/* ---- Snapshots: a session's state at a prompt boundary ----------------- *
 * Models with recurrent (DeltaNet) layers cannot rewind a session to an
 * earlier position: the recurrent and conv states summarise the whole
 * past. A snapshot copies everything the next evaluation reads at the
 * session's current position p (K and V rows [0, p) of every attention
 * layer, every DeltaNet recurrent and conv state, the ids [0, p)) into one
 * malloc'd block; restoring it into any session of the same engine puts
 * that session at position p with those ids, and evaluating more ids then
 * gives logits bit-identical to the snapshotted session continuing itself.
 * A prefix cache (server/prefix.h) keeps them to resume conversations.
 *
 * Size: e0_snapshot_size(e, p) = fixed (the DeltaNet states, e0_plan's
 * state_bytes) + p x (f32 K and V of the attention layers, kv_bytes_per_1k
 * / 1000, and the id); for the Qwen3.6-35B-A3B shape 65.9 MB + 41.0 MB per
 * 1000 positions: 107 MB at 1k, 230 MB at 4k (README, "Memory"). An
 * engine that computes the MTP block adds its attention layer's K and V
 * and a few hidden rows: a restored session drafts as the snapshotted one
 * would (a session without the block's state restores without it).
 *
 * Ownership and threads: a snapshot is immutable once taken; any number of
 * threads may restore from it at once (each into its own session). It
 * belongs to the engine it was taken from (restore refuses another's) and
 * may be freed before or after its session. */
typedef struct e0_snapshot e0_snapshot;

/* Copies the session's state at its current position into *out (freed with
 * e0_snapshot_free); an empty session gives a snapshot of 0 positions,
 * whose restore is a reset. E0_ENOMEM if the block cannot be allocated. */
int e0_session_snapshot(const e0_session *s, e0_snapshot **out, char *err);
/* Puts s at the snapshot's position with its ids and states (what s held
 * before is forgotten). Fails, leaving s unchanged, with E0_EINVAL for a
 * snapshot of another engine and E0_ERANGE when its positions do not fit
 * in s's n_ctx. */
int e0_session_restore(e0_session *s, const e0_snapshot *snap, char *err);
/* The bytes the snapshot holds (its whole block), what a cache budgets. */
size_t e0_snapshot_bytes(const e0_snapshot *snap);
/* What a snapshot of n_pos positions of this engine's model takes. */
size_t e0_snapshot_size(const e0_engine *e, int32_t n_pos);
/* The ids the snapshot holds, in order; *n gets their count (its position). */
const int32_t *e0_snapshot_ids(const e0_snapshot *snap, size_t *n);
void e0_snapshot_free(e0_snapshot *snap);

/* ---- Routing replay (edge0 bench --replay) ----------------------------- *
 * A recorded routing trace (io/routes.h: `edge0 bench --trace`'s text, or
 * scripts/route_convert.py's from a published capture) drives a session's
 * MoE layers instead of their routers, so that the expert cache, the I/O
 * and the timing run as under that routing. The model still computes: the
 * trace's experts, each weighted with the router's own probability for it,
 * renormalised over the k as the model renormalises its top-k. A trace is
 * immutable once loaded and may drive any number of sessions of engines of
 * its shape at once; free it after them. CPU sessions only. */
typedef struct e0_routes e0_routes;

/* Reads the trace at path for e's model (its layers, experts and top-k):
 * E0_EFORMAT naming file:line for a malformed trace, E0_EINVAL naming the
 * shape to convert to for another model's. */
int e0_routes_load(const e0_engine *e, const char *path, e0_routes **out, char *err);
void e0_routes_free(e0_routes *r);
/* The decode tokens the trace holds. */
int32_t e0_routes_tokens(const e0_routes *r);
/* From now on position p of s (p0 its position now) routes as the trace's
 * token (offset + p - p0) mod its tokens, in every MoE layer the token
 * names (the others by the router); r NULL routes by the router again.
 * E0_EINVAL for another shape's trace, E0_EUNSUPPORTED on the GPU. */
int e0_session_replay(e0_session *s, const e0_routes *r, int32_t offset, char *err);

/* ---- Text in, text out ------------------------------------------------- *
 * A model's tokenizer (tokenizer.json, byte-level BPE), its chat format
 * (ChatML as the Qwen templates render it) and sampling. An e0_text is
 * immutable after open: any number of threads may use it at once. */

typedef struct e0_text e0_text;

/* `path`: a model directory holding tokenizer.json, or a tokenizer.json. */
int e0_text_open(e0_text **out, const char *path, char *err);
void e0_text_free(e0_text *t);
/* ids of s[0..len): special tokens written in the text are matched as
 * special tokens. *ids is malloc'd. */
int e0_text_encode(const e0_text *t, const char *s, size_t len, int32_t **ids, size_t *n,
                   char *err);
/* Text of ids, special tokens kept; *out is malloc'd and NUL-terminated. */
int e0_text_decode(const e0_text *t, const int32_t *ids, size_t n, char **out, size_t *len,
                   char *err);
/* The id of a token written as text (e.g. "<|im_end|>"), or -1. */
int32_t e0_text_token_id(const e0_text *t, const char *token);

/* Which chat template a model's prompts are rendered with. */
typedef enum {
    E0_CHAT_QWEN3 = 0, /* Qwen3's (and other ChatML); tool calls as JSON in <tool_call> */
    E0_CHAT_QWEN35,    /* Qwen3.5 / 3.6's; tool calls as <function=...> XML */
} e0_chat_format;

/* The format of the model's own chat template (chat_template.jinja or
 * tokenizer_config.json's chat_template beside tokenizer.json, or a GGUF
 * file's tokenizer.chat_template): E0_CHAT_QWEN35 for Qwen3.5's, else
 * E0_CHAT_QWEN3, also when there is no template or one edge0 does not know. */
e0_chat_format e0_text_chat_format(const e0_text *t);

typedef struct {
    e0_chat_format format;     /* the template (E0_CHAT_QWEN3) */
    int add_generation_prompt; /* append "<|im_start|>assistant\n" (1) */
    int enable_thinking;       /* 0 appends the empty think block, as the template does (1) */
    const char *tools_json;    /* a JSON array of tool definitions, or NULL */
} e0_chat_opts;

void e0_chat_opts_default(e0_chat_opts *o);
/* Renders an OpenAI-style messages array given as JSON text
 * ([{"role": "user", "content": "..."}, ...]); *out is malloc'd. */
int e0_chat_render(const char *messages_json, size_t len, const e0_chat_opts *o, char **out,
                   size_t *out_len, char *err);

/* A compiled output grammar (constrained decoding; src/text/schema.h makes
 * them from JSON schemas and tool definitions). Immutable: shareable. */
typedef struct e0_grammar e0_grammar;

/* e0_sample_opts.grammar_root: where the grammar starts. */
enum {
    E0_GRAMMAR_PLAIN = 0,      /* at the first generated token */
    E0_GRAMMAR_THINK_OPEN = 1, /* after "</think>": the prompt opened a think block */
    E0_GRAMMAR_THINK_MAY = 2,  /* the model may open a think block first */
};

/* Sampling, in llama.cpp's order: penalties, top-k, top-p, min-p,
 * temperature (0 = greedy), draw. Reproducible for a given seed. With a
 * grammar, the draw is restricted to the tokens that keep the output a
 * prefix of the grammar's language: the filters first, then the grammar
 * (text/sampler.h sampler_resample), end of turn only once it is complete. */
typedef struct {
    float temperature;       /* 0.8 */
    int32_t top_k;           /* 40; 0 = off */
    float top_p;             /* 0.95; 1 = off */
    float min_p;             /* 0.05; 0 = off */
    float repeat_penalty;    /* 1 = off */
    float presence_penalty;  /* 0 = off */
    float frequency_penalty; /* 0 = off */
    uint64_t seed;           /* 0: a fresh random seed */
    int32_t max_tokens;      /* 0: until EOS, a stop string or the end of the context */
    const char *const *stop; /* stop strings (not emitted) */
    size_t n_stop;
    int logprobs;            /* 0; 1: e0_generate_tokens reports each token's log-probability */
    int32_t top_logprobs;    /* 0; with logprobs, the n (<= E0_MAX_TOP_LOGPROBS) most likely alternatives too */
    const e0_grammar *grammar; /* NULL: unconstrained; borrowed for the call */
    int32_t grammar_root;      /* E0_GRAMMAR_PLAIN; in a think block the reasoning is free text, closed
                                  with "</think>" after max_tokens / 2 tokens (4096 without max_tokens) */
} e0_sample_opts;

#define E0_MAX_TOP_LOGPROBS 20

void e0_sample_opts_default(e0_sample_opts *o);

/* Receives generated text as it becomes complete (never half a UTF-8
 * character, never a prefix of a stop string that may still complete).
 * Called after every generated token, with len 0 when no text is ready yet.
 * Return non-zero to cancel: generation stops before the next token. */
typedef int (*e0_piece_fn)(void *user, const char *text, size_t len);

typedef enum {
    E0_FINISH_STOP,      /* an end-of-turn token or a stop string */
    E0_FINISH_LENGTH,    /* max_tokens reached */
    E0_FINISH_CONTEXT,   /* the context is full */
    E0_FINISH_CANCELLED, /* the callback asked to stop */
} e0_finish;

typedef struct {
    int32_t prompt_tokens;     /* ids of the prompt */
    int32_t reused_tokens;     /* of those, already in the session (not evaluated again) */
    int32_t completion_tokens; /* generated, the end-of-turn token not counted */
    e0_finish finish;
    const char *stop;          /* E0_FINISH_STOP by a stop string: that string (one of o->stop), else NULL */
    double prefill_s, decode_s;
    double mask_s;     /* with a grammar: time spent checking tokens and computing masks (in decode_s) */
    int32_t masks;     /* full masks computed (the sampled token was not allowed) */
} e0_gen_result;

/* Continues `s` with `prompt` and generates. When the session already holds
 * a prefix of the prompt, only the rest is evaluated (for models with
 * recurrent layers the whole history must be that prefix, else the session
 * is reset first). Generated ids are appended to the session's history; the
 * end-of-turn token that stops generation is not evaluated. E0_ERANGE if the
 * prompt does not fit in the context. */
int e0_generate(e0_session *s, const e0_text *t, const int32_t *prompt, size_t n,
                const e0_sample_opts *o, e0_piece_fn fn, void *user, e0_gen_result *r, char *err);

/* One generated token, as e0_generate_tokens reports it. Log-probabilities
 * (when o->logprobs) are those of the distribution the token was drawn from,
 * after the sampling filters: softmax(logit / temperature) over the tokens
 * top-k, top-p and min-p kept, -9999 for the others; with temperature 0
 * (greedy) the softmax of the (penalised) logits. */
typedef struct {
    int32_t id;
    float logprob;
    int32_t n_top; /* alternatives, most likely first */
    int32_t top_ids[E0_MAX_TOP_LOGPROBS];
    float top_logprobs[E0_MAX_TOP_LOGPROBS];
} e0_token_info;

/* As e0_piece_fn, with the token just generated (NULL for the text handed
 * out at the end, which no new token produced). */
typedef int (*e0_token_fn)(void *user, const e0_token_info *tok, const char *text, size_t len);

/* e0_generate with a callback that also sees each token and, when
 * o->logprobs, its log-probabilities. */
int e0_generate_tokens(e0_session *s, const e0_text *t, const int32_t *prompt, size_t n,
                       const e0_sample_opts *o, e0_token_fn fn, void *user, e0_gen_result *r, char *err);

/* ---- The matmul kernels ---------------------------------------------------
 * Which SIMD kernel set the process computes with. */
/* Kernel sets (docs/experiments.md has their accuracy and speed). AUTO,
 * the default, is AVX512_MIXED where the CPU has VNNI, else the fastest
 * f32-activation set (AVX512, else AVX2, else REF). EXACT is AVX512_Q24
 * where the CPU has VNNI, else the same f32 set: as close to the Hugging
 * Face fixtures as the scalar reference (NMSE ~1e-12 per dot, logits within
 * 5e-5 at every position). The lossy sets keep every fixture's routing:
 * MIXED keeps logits within 1.7e-3 over 160 positions, Q16 within 3e-3.
 * Q8 changes routing on the mlx fixtures. MIXED computes 4-bit matrices
 * with the 16-bit panel kernels' arithmetic (activations quantized per
 * weight group) at every T, decode tokens included, so that the loaded copy
 * can be repacked for them (E0_L_P16) and a batched decode step's tokens
 * cost two multiplies per 4 columns, not three (24-bit decode until
 * docs/experiments.md section 61: 9e-4); the Q sets use it from
 * K_PANEL_MIN_T tokens (the row kernels' per-32 quantization below).
 * GGUF k-quants (Q4_K, Q6_K) have integer kernels under Q8, Q16 and MIXED,
 * which runs them with 24-bit activations for every T (16-bit batches
 * changed a route of a GGUF fixture); Q24, and so EXACT, keeps their f32
 * kernels. */
typedef enum {
    E0_KERNELS_AUTO,         /* the default (see above) */
    E0_KERNELS_REF,          /* the scalar reference (still split across the pool) */
    E0_KERNELS_AVX2,         /* AVX2 + FMA + F16C, f32 activations */
    E0_KERNELS_AVX512,       /* AVX-512 F/BW/VL/DQ, f32 activations */
    E0_KERNELS_AVX512_Q8,    /* + VNNI: q4 weights x int8 activations (lossy); else as AVX512 */
    E0_KERNELS_AVX512_Q16,   /* as Q8 with two int8 planes (~16-bit activations) */
    E0_KERNELS_AVX512_Q24,   /* as Q8 with three int8 planes (~24-bit activations: f32-grade) */
    E0_KERNELS_AVX512_MIXED, /* 16-bit panel arithmetic; GGUF k-quants 24-bit */
    E0_KERNELS_F32,          /* the fastest f32-activation set this CPU runs */
    E0_KERNELS_EXACT,        /* AVX512_Q24 with VNNI, else F32 */
} e0_kernels;

/* Process-wide; set it while no matmul runs (tests, startup). While the
 * set is AUTO, $E0_KERNELS (an e0_kernels_parse name) may name another, read at the first call. 0,
 * or E0_EUNSUPPORTED when this CPU lacks the set's ISA (nothing changes). */
int e0_set_kernels(e0_kernels k);
/* The name of the set in force, resolved ("ref", "avx2", ...). */
const char *e0_kernels_name(void);
/* The set named `name` (auto, exact, ref, avx2, avx512, avx512-q8,
 * avx512-q16, avx512-q24, avx512-mixed, f32): 0, or E0_EINVAL for another name. */
int e0_kernels_parse(const char *name, e0_kernels *out);
/* Whether this CPU runs set k. */
int e0_kernels_supported(e0_kernels k);

/* ---- Small tools for the commands --------------------------------------- */

/* The index of the largest of n logits (the first of equals; 0 when every
 * one is -inf or NaN): greedy decoding's choice. */
size_t e0_argmax(const float *logits, size_t n);
/* Whether this thread's expert reads go through io_uring (else pread). */
bool e0_uring_on(void);
/* Writes a [rows, cols] f32 matrix as the one tensor `name` of a
 * safetensors file at `path` (atomically: PATH.tmp, then renamed). */
int e0_save_f32(const char *path, const char *name, int64_t rows, int64_t cols, const float *data,
                char *err);

/* ---- Tokenizers alone ----------------------------------------------------
 * A tokenizer.json without a model (the `tokenize` command; e0_text opens
 * one with a model's chat format). Immutable after load: shareable. */
typedef struct e0_tokenizer e0_tokenizer;

/* A growable id array. Zero-initialise; e0_tokenizer_encode appends to it. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} e0_ids;
void e0_ids_free(e0_ids *ids);

/* Reads and validates `path` (a tokenizer.json). */
int e0_tokenizer_load(e0_tokenizer **out, const char *path, char *err);
void e0_tokenizer_free(e0_tokenizer *t);

enum {
    /* Added tokens marked "special" are not matched in the text: they are
     * encoded as ordinary text (for user content that must not inject
     * control tokens). Non-special added tokens are still matched. */
    E0_ENCODE_SPECIAL_AS_TEXT = 1u << 0,
};
/* Appends the ids of text[0..len) (any bytes: invalid UTF-8 is encoded
 * byte by byte) to `out`. On error `out` keeps only what it held before. */
int e0_tokenizer_encode(const e0_tokenizer *t, const char *text, size_t len, unsigned flags,
                        e0_ids *out, char *err);

enum {
    E0_DECODE_SKIP_SPECIAL = 1u << 0, /* drop added tokens marked "special" */
};
/* The text of ids[0..n): a malloc'd, NUL-terminated, valid UTF-8 string of
 * *out_len bytes. E0_ERANGE names the first id that is not a token. */
int e0_tokenizer_decode(const e0_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                        char **out, size_t *out_len, char *err);
/* 1 + the largest id of the vocabulary and the added tokens. A model's
 * config.json vocab_size may be larger (padded): ids in between are not
 * tokens, and decoding them fails with E0_ERANGE. */
int32_t e0_tokenizer_vocab_size(const e0_tokenizer *t);

/* ---- Writing checkpoints: random weights of a real model's shape --------
 * (the `synth` command; src/synth/synth.h explains the scaling that keeps
 * activations O(1) and the routing skew and stickiness). */
typedef enum { E0_SYNTH_QWEN3_MOE, E0_SYNTH_QWEN3_NEXT, E0_SYNTH_QWEN3_5_MOE } e0_synth_family;

typedef struct {
    const char *name;
    const char *released; /* the released model whose shape this is; "" for test shapes */
    e0_synth_family family;
    int hidden, n_layers, vocab;
    int n_heads, n_kv_heads, head_dim;
    double partial_rotary, rope_theta;
    int lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim, conv_kernel, full_attention_interval;
    int n_experts, top_k, moe_inter, shared_inter;
    int dense_inter;       /* config "intermediate_size" (no dense layers; 0: omitted) */
    int max_pos, bos, eos; /* bos < 0: null */
} e0_synth_shape;

/* The shape called `name`, or NULL. */
const e0_synth_shape *e0_synth_find(const char *name);
/* Comma-separated list of known shape names (static string). */
const char *e0_synth_names(void);
/* Shapes by index, i < e0_synth_count(). */
size_t e0_synth_count(void);
const e0_synth_shape *e0_synth_at(size_t i);

/* E0_SYNTH_GGUF: one .gguf file (or a split set), llama.cpp's names and
 * metadata for the architecture and llama-quantize's Q4_K_M type mix with
 * random blocks (synth_gguf.c explains the mix and the block scaling). */
typedef enum { E0_SYNTH_MLX, E0_SYNTH_HF, E0_SYNTH_GGUF } e0_synth_format;

/* E0_SYNTH_GGUF's type mix, as llama-quantize's ftype of that name gives it
 * (approximately: synth_gguf.c). */
typedef enum { E0_SYNTH_MIX_Q4_K_M, E0_SYNTH_MIX_Q8_0, E0_SYNTH_MIX_IQ4_XS, E0_SYNTH_MIX_Q4_0 } e0_synth_gguf_mix;

typedef enum { E0_SYNTH_WRITING, E0_SYNTH_SYNCING, E0_SYNTH_DONE } e0_synth_phase;

typedef struct {
    e0_synth_phase phase;
    uint64_t done, total; /* bytes of tensor data handed to the OS / planned */
    double seconds;       /* since the start */
} e0_synth_progress;

typedef struct {
    e0_synth_format format;
    uint64_t seed;
    double route_skew;    /* 0: near-uniform routing; S > 0: Zipf(S)-like expert popularity */
    double route_stickiness; /* [0, 1]: share of experts kept from the previous token (above) */
    const char *route_profile; /* NULL, or a routing profile fitted to a released model's
                                  measured routing (e0_synth_route_profiles(); synth/synth.h):
                                  recorded in config.json / GGUF metadata and applied by the
                                  router; excludes route_skew and route_stickiness */
    int n_threads;        /* generator threads; 0: one per core, at most 8 */
    uint64_t shard_bytes; /* largest shard; 0: 5 GiB (as mlx-lm and transformers); gguf: 0 is
                             one file, else a split set NAME-0000K-of-0000N.gguf */
    e0_synth_gguf_mix gguf_mix; /* gguf: the type mix (0: Q4_K_M) */
    int mtp;                    /* gguf, qwen3_5_moe shapes: one multi-token-prediction block
                                   (blk.N with nextn.*, as llama.cpp's converter writes
                                   Qwen3.5's), random like the rest: its speed, not its drafts */
    const char *tokenizer; /* gguf: the tokenizer.json whose vocabulary, merges (and chat
                              template, from tokenizer_config.json beside it) are embedded */
    int no_sync;          /* skip the fsync before the rename (faster, not durable) */
    int sparse;           /* mlx / hf: headers and config only, every weight a hole that reads
                             as zero: the layout of a shape larger than the disk, for plans */
    /* Called on the calling thread about every 100 ms and once per phase. */
    void (*progress)(void *ctx, const e0_synth_progress *p);
    void *progress_ctx;
    /* When *cancel becomes non-zero (e.g. from a SIGINT handler) the write
     * stops, leaves nothing behind and fails with E0_EINVAL. May be NULL. */
    const volatile sig_atomic_t *cancel;
} e0_synth_opts;

void e0_synth_opts_default(e0_synth_opts *o);

#define E0_SYNTH_GTYPES 40 /* ggml type ids (GGML_NTYPES; e0_ggml_type_name) */

typedef struct {
    uint64_t bytes;  /* all safetensors files, headers included (gguf: all parts) */
    uint64_t params; /* logical parameters (quantized weights count once) */
    size_t n_tensors;
    int n_shards;
    /* gguf: tensors and data bytes of each ggml type */
    uint32_t type_tensors[E0_SYNTH_GTYPES];
    uint64_t type_bytes[E0_SYNTH_GTYPES];
} e0_synth_info;

/* What e0_synth_write_opts would write, without writing anything. */
int e0_synth_plan_info(const e0_synth_shape *shape, const e0_synth_opts *o, e0_synth_info *info, char *err);

/* Writes a checkpoint of `shape` into directory `dst` (gguf: the file
 * `dst`, or its split parts; created, it must not exist). The directory appears atomically: it is written as
 * DST.tmp-XXXXXX, synced, and renamed without replacing anything; on any
 * failure nothing is left behind. */
int e0_synth_write_opts(const e0_synth_shape *shape, const char *dst, const e0_synth_opts *o, char *err);

/* The routing profiles' names, ", "-separated ("qwen36, qwen3-30b"), and
 * one line about profile i (NULL past the last). */
const char *e0_synth_route_profiles(void);
const char *e0_synth_route_about(size_t i);

/* e0_synth_write_opts with the defaults (mlx, no skew) and `seed`. */
int e0_synth_write(const e0_synth_shape *shape, const char *dst, uint64_t seed, char *err);

/* The name of a ggml type id ("Q4_K", ...), or NULL for an unknown one. */
const char *e0_ggml_type_name(uint32_t type);

/* ---- Writing checkpoints: a Hugging Face checkpoint converted -----------
 * to the streaming (mlx affine) layout (the `convert` command). */
typedef enum { E0_CONVERT_WRITING, E0_CONVERT_SYNCING, E0_CONVERT_DONE } e0_convert_phase;

typedef struct {
    e0_convert_phase phase;
    uint64_t done, total; /* source tensor bytes converted / to convert */
    uint64_t written;     /* output bytes handed to the OS */
    double seconds;       /* since the start */
} e0_convert_progress;

typedef struct {
    int bits;             /* 4 or 8 (2, 3, 5, 6 also accepted); default 4 */
    int group;            /* 32, 64 or 128; default 64 */
    int fused_gate_up;    /* write switch_mlp.gate_up_proj instead of gate_proj + up_proj */
    int force;            /* replace an existing DST */
    int n_threads;        /* worker threads; 0: one per core, at most 8 */
    uint64_t shard_bytes; /* largest shard; 0: 5 GiB (as mlx-lm) */
    int no_sync;          /* skip the fsyncs before the rename (faster, not durable) */
    int keep_mtp;         /* copy mtp.* as they are instead of dropping them */
    /* Called on the calling thread about every 100 ms and once per phase. */
    void (*progress)(void *ctx, const e0_convert_progress *p);
    void *progress_ctx;
    /* When *cancel becomes non-zero the conversion stops, leaves nothing
     * behind and fails with E0_EINVAL. May be NULL. */
    const volatile sig_atomic_t *cancel;
} e0_convert_opts;

void e0_convert_opts_default(e0_convert_opts *o);

typedef struct {
    char family[16];       /* "qwen3_moe", "qwen3_next", "qwen3_5_moe" */
    char src_layout[16];   /* "hf" (per-expert) or "hf-fused" */
    size_t src_tensors;    /* tensors in the source */
    size_t dropped;        /* source tensors left out (MTP, vision, inv_freq, tied lm_head) */
    size_t kept_mtp;       /* mtp.* tensors copied as they are (keep_mtp) */
    char dropped_example[128];
    size_t out_tensors;    /* tensors written */
    size_t quantized;      /* modules quantized */
    int n_shards;
    uint64_t src_bytes;    /* source tensor bytes read */
    uint64_t out_bytes;    /* safetensors bytes written, headers included */
    size_t copied_files;   /* tokenizer / generation files copied */
} e0_convert_info;

/* Checks SRC and plans the output without writing anything. */
int e0_convert_plan(const char *src, const e0_convert_opts *o, e0_convert_info *info, char *err);

/* Converts SRC into the new directory DST. info may be NULL. */
int e0_convert_run(const char *src, const char *dst, const e0_convert_opts *o, e0_convert_info *info, char *err);

/* ---- Serving many sequences: generation step by step ------------------- *
 * A generation cut at its forward passes: e0_generate_tokens's loop as a
 * state machine that a caller drives, so that a server can run the forward
 * passes of many requests together (e0_session_eval_batch, e0_pass_begin)
 * while each request keeps its own sampler, grammar, stop strings and text
 * stream.
 *
 *     e0_gen *g;
 *     e0_gen_begin(&g, s, t, prompt, n, &o, fn, user, err);  // prepares the session, reuses its prefix
 *     while (e0_gen_prefill_left(g))
 *         e0_gen_prefill(g, 128, err);                       // the prompt in chunks
 *     int32_t id;
 *     while (e0_gen_step(g, &id, err) == E0_GEN_EVAL)        // sample, constrain, stream, callback
 *         e0_session_eval(s, &id, 1, E0_LOGITS_LAST, e0_gen_logits(g), err);
 *     const e0_gen_result *r = e0_gen_get_result(g);
 *     e0_gen_free(g);
 *
 * e0_generate_tokens is exactly that loop (prefill in one call), so a
 * request stepped by a server in a batch takes the same decisions as one
 * generated alone: the only input of a step is the logits row of the last
 * evaluated id, and e0_session_eval_batch makes it bit-identical to the
 * row a one-token e0_session_eval gives. The prefill's chunking is part
 * of the arithmetic (a batch's arithmetic may depend on its length), so
 * the chunk size must be the same for answers to be comparable.
 *
 * Ownership: the gen borrows the session, the text, the prompt (until the
 * prefill is done), the sampling options' strings and grammar (until
 * e0_gen_free); it owns its sampler, grammar matcher and logits buffer. One
 * thread at a time. */
typedef struct e0_gen e0_gen;

/* e0_gen_step: the id in *next must be evaluated (its logits into e0_gen_logits). */
enum { E0_GEN_DONE = 0, E0_GEN_EVAL = 1 };

/* Checks the prompt, builds the sampler, stop strings and grammar matcher,
 * and keeps the part of the session's history the prompt starts with
 * (e0_session_prepare; the result's reused_tokens). Errors leave the session
 * untouched: E0_EINVAL (empty prompt), E0_ERANGE (it does not fit). */
int e0_gen_begin(e0_gen **out, e0_session *s, const e0_text *t, const int32_t *prompt, size_t n,
                 const e0_sample_opts *o, e0_token_fn fn, void *user, char *err);
void e0_gen_free(e0_gen *g);

/* Prompt ids still to evaluate (0: the prefill is done). */
size_t e0_gen_prefill_left(const e0_gen *g);
/* Evaluates the next min(max, left) prompt ids (max 0: all of them); the
 * last chunk leaves the logits of the prompt's last id in e0_gen_logits. */
int e0_gen_prefill(e0_gen *g, size_t max, char *err);

/* One token from the logits in e0_gen_logits: sample, constrain, accept,
 * stop on end of turn / stop string / max_tokens / full context / a cancel
 * from the callback (which sees the token and its text). E0_GEN_EVAL: *next
 * is to be evaluated next; E0_GEN_DONE: finished, the remaining text handed
 * out; negative: an error (a grammar's, out of memory), message in err. */
int e0_gen_step(e0_gen *g, int32_t *next, char *err);

/* The evaluation and e0_gen_step in one call, drafting with the MTP block
 * when the session can (e0_session_can_draft): evaluates the id the last
 * step chose (e0_gen_step's or this function's *next; right after the
 * prefill it steps first, on the prompt's logits) in one forward pass that
 * hands out one id, or two when the draft stands. E0_GEN_EVAL: *next (may
 * be NULL) is the id chosen now, not yet evaluated: this function or the
 * caller (e0_session_eval_batch, then e0_gen_step) evaluates it next;
 * E0_GEN_DONE: finished; negative: an error. Greedy decoding hands out
 * the ids of e0_gen_step's loop, bit for bit (the verify pass's rows are
 * one-token steps', and the first row's choice decides the draft); with a
 * temperature the draft is drawn from the block's distribution q and kept
 * with probability min(1, p/q), else an id drawn from norm(max(0, p - q))
 * (p: the main model's, after the same penalties and filters): each id
 * has p's distribution, the draws differ from e0_gen_step's. Sampling under
 * a grammar does not draft (the grammar changes p); greedy does. The
 * session ends where e0_gen_step's loop leaves it (a verified id it would
 * not have evaluated is rolled back). e0_generate_tokens is this loop; a
 * server may mix it with its batched steps, call by call. */
int e0_gen_advance(e0_gen *g, int32_t *next, char *err);

/* e0_gen_advance in halves, for a server that evaluates many generations
 * in one pass (e0_session_verify_batch): e0_gen_pass_ids puts the ids this
 * generation's pass evaluates in ids[0..2) and returns their count: 1 (the
 * id the last step chose), or 2 when it drafts (e0_gen_advance's rule; the
 * draft runs here); negative: an error. After the pass, e0_gen_pass_done
 * with its rows ([count, vocab]) does the rest of e0_gen_advance, with the
 * same results. Only after a step that returned E0_GEN_EVAL. */
int e0_gen_pass_ids(e0_gen *g, int32_t *ids, char *err);
int e0_gen_pass_done(e0_gen *g, const float *logits, int32_t *next, char *err);

/* e0_gen_prefill with the chunk's forward pass cut between layers: at most
 * max_layers layers per call (0: the whole pass), so that a scheduler can
 * run decode passes of other requests in between; the pass in progress is
 * finished before another chunk starts. *ran gets the layers this call
 * evaluated (whole passes count every layer). The logits are those of
 * e0_gen_prefill with the same chunks (only the pauses differ). */
int e0_gen_prefill_layers(e0_gen *g, size_t max, int max_layers, int *ran, char *err);

/* The next chunk as part of a pass the caller runs (e0_pass_begin, merging
 * the chunks of several requests): *ids and the returned count, at most
 * min(max, left, the session's n_batch) (max 0: no limit but those); *last
 * when it ends the prompt (then the pass's logits for this session go to
 * e0_gen_logits). 0 while an e0_gen_prefill_layers pass is paused or nothing
 * is left. After the pass is done, e0_gen_prefill_done(g, m) with that
 * count. With the same chunks, the same logits as e0_gen_prefill. */
size_t e0_gen_prefill_next(const e0_gen *g, size_t max, const int32_t **ids, bool *last);
void e0_gen_prefill_done(e0_gen *g, size_t m);

/* [vocab] floats: where the logits of the next evaluated id go. */
float *e0_gen_logits(e0_gen *g);
e0_session *e0_gen_session(const e0_gen *g);
/* Counts and times so far (final after E0_GEN_DONE). */
const e0_gen_result *e0_gen_get_result(e0_gen *g);

/* Keeps the longest part of the session's history that is a prefix of
 * prompt[0..n) and still leaves one id to evaluate: attention-only models
 * truncate their KV cache to it; models with recurrent layers keep the
 * whole history or nothing (their states cannot be rewound). Returns the
 * number of positions kept. */
int32_t e0_session_prepare(e0_session *s, const int32_t *prompt, size_t n);
/* The most ids one evaluation of the session runs at once (its options'
 * n_batch, resolved): the tokens of a merged pass must fit the first one's. */
int32_t e0_session_n_batch(const e0_session *s);

/* ---- Serving many sequences: a merged prefill pass --------------------- *
 * One forward pass over the next ids of several sessions, cut between
 * layers (or halves of a layer: its token mixer, then its MLP), so that a
 * scheduler prefills the prompt chunks of many requests with one read of
 * the weights (and, under a memory cap, one read of each routed expert from
 * the disk):
 *
 *     e0_pass *p;
 *     e0_pass_new(&p, err);                                    // once; reused pass after pass
 *     e0_pass_begin(p, ss, ids, n, ns, err);                   // embeds; ids need not outlive it
 *     do e0_pass_step(p, max_layers, logits, &done, err); while (!done);
 *     e0_pass_free(p);
 *
 * Each session gets the logits, KV rows and states its own pass of the same
 * ids gives (bit for bit), however the layers are cut. The pass's tokens
 * (the sum of n) must fit the first session's n_batch (its scratch carries
 * the pass), each n its own session's n_batch, and at most E0_PASS_MAX
 * sessions. Until done, every session of the pass refuses other
 * evaluations and snapshots (E0_EINVAL); a session of a paused pass must
 * not be reset, restored or freed. A failed step resets every session of
 * the pass. One thread at a time per pass. */
typedef struct e0_pass e0_pass;
enum { E0_PASS_MAX = 64 };

/* A pass object with no pass in progress; E0_ENOMEM. */
int e0_pass_new(e0_pass **out, char *err);
void e0_pass_free(e0_pass *p);
/* Starts the pass: checks every session (same engine, distinct, no pass in
 * progress, ids in the vocabulary and the context, the limits above; an
 * error changes nothing), embeds the ids and appends them to each history.
 * ids[i]: n[i] >= 1 ids of session ss[i]. */
int e0_pass_begin(e0_pass *p, e0_session *const *ss, const int32_t *const *ids, const size_t *n,
                  int ns, char *err);
/* Runs at most max_layers more layers (0: all that are left). When the last
 * is done, *done is set, the positions move on, and logits[i] (an array of
 * ns pointers, or NULL; each NULL or [vocab]) gets the logits of session i's
 * last id. A failure resets every session of the pass (and ends it). */
int e0_pass_step(e0_pass *p, int max_layers, float *const *logits, bool *done, char *err);
/* The same in halves of a layer: at most max_halves more (0: all that are
 * left); the arithmetic does not depend on where the pass pauses. */
int e0_pass_step_halves(e0_pass *p, int max_halves, float *const *logits, bool *done, char *err);
/* The halves that `layers` more layers of the pass in progress are (a
 * layer begun counts as one of them): e0_pass_step's count in
 * e0_pass_step_halves'. */
int e0_pass_layer_halves(const e0_pass *p, int layers);
/* The pass in progress: its tokens (the sum of n), and the index of its
 * next half, 2 * layer + (1 when that layer's token mixer has run). */
int e0_pass_tokens(const e0_pass *p);
int e0_pass_next_half(const e0_pass *p);

/* ---- Tool calls and constrained output (for an API server) ------------- *
 * Requests' tools, tool choices and response formats are cJSON values
 * (<cjson/cJSON.h>), borrowed for the call.
 *
 * A tool-call parser takes tool calls out of generated text, as the Qwen
 * families write them inside "<tool_call>" ... "</tool_call>": Qwen3's JSON
 * ({"name": "f", "arguments": {...}}) and Qwen3.5 / 3.6 and Qwen3-Coder's
 * XML (<function=f><parameter=a>VALUE</parameter></function>), whatever the
 * chat template. XML parameter values are typed by the tool's JSON schema.
 *
 *     e0_tc_parser *p;
 *     e0_tc_parser_new(&p, tools, max_calls, err);  // tools: the request's array, borrowed
 *     e0_tc_feed(p, piece, n, &sink, user);         // as text is generated
 *     e0_tc_finish(p, &sink, user);                 // at the end
 *     if (e0_tc_calls(p)) finish_reason = "tool_calls";
 *     e0_tc_parser_free(p);
 *
 * A call is handed to the sink only once it is complete and valid: its name
 * (sink.call), then its arguments as a JSON object text in one or more
 * pieces (sink.args; they concatenate to the whole object). Text that is
 * not a call goes to sink.content. A "<tool_call>" that turns out
 * malformed, and every byte after it, is content (e0_tc_malformed); one cut
 * off by the end of generation (e0_tc_truncated) is handed on as far as it
 * got, at e0_tc_finish: the XML form with its complete parameters, the JSON
 * form with its name and no arguments, and nothing where the name is not
 * whole; its markup never reaches content. The
 * events do not depend on how the text is cut into pieces. After max_calls
 * calls everything else is dropped and e0_tc_full says so. One stream and
 * one thread at a time per parser (src/text/toolcall.h has the details). */
struct cJSON;

typedef struct {
    int (*content)(void *user, const char *s, size_t n);
    int (*call)(void *user, int index, const char *name, size_t n);
    int (*args)(void *user, int index, const char *s, size_t n);
} e0_tc_sink;

typedef struct e0_tc_parser e0_tc_parser;

/* tools: the request's tools array (borrowed for the parser's life) or NULL;
 * max_calls >= 1. 0, or E0_ENOMEM / E0_EINVAL. */
int e0_tc_parser_new(e0_tc_parser **out, const struct cJSON *tools, int max_calls, char *err);
void e0_tc_parser_free(e0_tc_parser *p);
/* Feeds generated text. Returns 0, E0_ENOMEM, or the first non-zero value a
 * sink function returned. */
int e0_tc_feed(e0_tc_parser *p, const char *s, size_t n, const e0_tc_sink *k, void *user);
/* End of the text: hands on what is held back (a cut-off call as content). */
int e0_tc_finish(e0_tc_parser *p, const e0_tc_sink *k, void *user);
/* Calls handed to the sink so far. */
int e0_tc_calls(const e0_tc_parser *p);
/* max_calls calls were made: what follows is dropped. */
bool e0_tc_full(const e0_tc_parser *p);
/* A "<tool_call>" did not parse (it and the rest went to content). */
bool e0_tc_malformed(const e0_tc_parser *p);
/* After e0_tc_finish: the text ended inside a call (it went to content). */
bool e0_tc_truncated(const e0_tc_parser *p);

/* Grammars for e0_sample_opts.grammar, from a request's JSON (src/text/schema.h
 * lists the JSON schema keywords supported). Free with e0_grammar_free. */
typedef enum { E0_TOOL_FORM_JSON, E0_TOOL_FORM_XML } e0_tool_form;
#define E0_GRAMMAR_MAX_CALLS 16

/* response_format {"type": "json_object"} or {"type": "json_schema",
 * "json_schema": {"name", "schema"?, "strict"?, "description"?}}. 0, or
 * E0_EINVAL (malformed), E0_EUNSUPPORTED (a keyword not supported), E0_ERANGE
 * (too deep or large), E0_ENOMEM, with err naming the field. */
int e0_grammar_response_format(const struct cJSON *response_format, e0_grammar **out, char *err);
/* Tool calls: `tools` is the request's validated tools array; name: the one
 * function to call, or NULL for any of them; max_calls >= 1 (1 when
 * parallel_tool_calls is false; capped at E0_GRAMMAR_MAX_CALLS); form: the
 * calls' form (E0_TOOL_FORM_XML for E0_CHAT_QWEN35). */
int e0_grammar_tools(const struct cJSON *tools, const char *name, int max_calls, e0_tool_form form,
                     e0_grammar **out, char *err);
void e0_grammar_free(e0_grammar *g);
/* The check after generation (docs/design.md §8.6): whether `value`
 * satisfies `schema` in the keywords a grammar does not enforce
 * (uniqueItems, not, multipleOf, minProperties, maxProperties,
 * propertyNames, lengths beside a pattern). 0: it does; 1: it does not,
 * with the path and keyword in why. */
int e0_schema_check(const struct cJSON *schema, const struct cJSON *value, char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
