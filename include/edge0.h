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
    int32_t cache_policy;        /* shared cache eviction: E0_CACHE_LRU, _LFU or _ROUTER (ROUTER) */
    float cache_half_life;       /* LFU: counts halve every this x cache_slots demand requests (1) */
    float router_half_life;      /* ROUTER: summed probabilities halve every this many steps (256) */
} e0_layer_opts;

/* e0_engine_opts.budget_mode */
enum { E0_BUDGET_AUTO = 0, E0_BUDGET_OFF = 1 };

/* Eviction policies of the shared expert cache (stream/xcache.h). */
enum { E0_CACHE_LRU = 0, E0_CACHE_LFU = 1, E0_CACHE_ROUTER = 2 };

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
    int32_t mtp_layers;    /* a GGUF file's multi-token-prediction (MTP) draft head: its */
    uint64_t mtp_bytes;    /* blocks and bytes, checked but never loaded (nothing uses it yet) */
} e0_model_info;

void e0_engine_info(const e0_engine *e, e0_model_info *info);
/* Where the engine computes: "GPU 0 (NVIDIA H100 80GB HBM3): 1.9 GiB of
 * weights ..." or why the CPU ("" when the GPU was not asked for). */
const char *e0_engine_gpu_note(const e0_engine *e);

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
    uint64_t gpu_weight_bytes; /* device memory the weights take there */
    uint64_t gpu_session_bytes; /* one session's KV cache, states and scratch there */
    uint64_t vram_budget;      /* the budget they were held against */
    char gpu_note[512];        /* the GPU chosen, or why none ("" when E0_GPU_OFF) */
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
    E0_POLICY_ROUTER, /* last step's experts held, the rest by router probabilities (default) */
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
/* The shared cache's own eviction policy in force (E0_CACHE_LRU / _LFU / _ROUTER). */
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
 * 1000 positions: 107 MB at 1k, 230 MB at 4k (README, "Memory").
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

#ifdef __cplusplus
}
#endif

#endif
