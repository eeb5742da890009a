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

typedef struct {
    int n_threads; /* compute threads; 0 = one per core */
} e0_engine_opts;

void e0_engine_opts_default(e0_engine_opts *o);

/* Opens a model directory (config.json + safetensors, any layout). */
int e0_engine_open(e0_engine **out, const char *model_dir, const e0_engine_opts *o, char *err);
void e0_engine_free(e0_engine *e);

typedef struct {
    const char *family;    /* "qwen3_moe", "qwen3_next", "qwen3_5_moe" */
    const char *layout;    /* "hf", "hf-fused", "mlx", "mlx-fused" */
    int32_t vocab_size;
    int32_t n_layers;
    int32_t hidden_size;
    int32_t n_experts;
    int32_t top_k;
    uint64_t weight_bytes; /* all tensors the model uses */
    uint64_t expert_bytes; /* the routed experts among them */
} e0_model_info;

void e0_engine_info(const e0_engine *e, e0_model_info *info);

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
int e0_session_eval(e0_session *s, const int32_t *ids, size_t n, e0_logits_mode mode,
                    float *logits, char *err);

#ifdef __cplusplus
}
#endif

#endif
