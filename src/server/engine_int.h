/* The scheduler's own state (engine.c), shared with the files that take
 * parts of its work (echo.c). Nothing outside src/server includes this. */
#ifndef E0_SERVER_ENGINE_INT_H
#define E0_SERVER_ENGINE_INT_H

#include "server/engine.h"
#include "server/prefix.h"
#include "server/think.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct srv_slot srv_slot;

/* A request's answer being built (the callbacks' user data). */
typedef struct {
    srv_engine *E;
    srv_job *j;
    srv_think think;
    e0_tc_parser *tc; /* tool calls out of the content, when the request has tools */
    srv_buf raw;   /* every piece, as generated */
    bool oom;
    double t_tok;  /* when its last token came (0: none yet) */
} gen_ctx;

/* One slot: a session and the request it runs. */
struct srv_slot {
    e0_session *s;
    /* the request running here */
    srv_job *j;        /* NULL when the slot is free (written under srv_engine.mu) */
    gen_ctx gc;
    e0_gen *g;         /* its generation (NULL with a scripted generate function) */
    int32_t *ids;      /* the ids it runs (the job's, or owned) */
    size_t n;
    bool owned;
    const char *how;   /* how they were built (engine.h, "Prompt reuse") */
    double echo_s;     /* the echo's own evaluation of the prompt */
    int32_t next;      /* the id to evaluate in the next decode pass */
    bool decoding;     /* the prefill is done: `next` waits for a pass */
    uint64_t admitted; /* admission order: the oldest prefill goes first */
    /* What the session holds (see "Prompt reuse"). */
    cJSON *conv;      /* the last chat conversation, our answer last; NULL if none */
    char *conv_tools; /* its tools JSON, or NULL */
    size_t conv_n;    /* history length it belongs to */
    char *hist_text;  /* the decoded history (special tokens kept), or NULL */
    size_t hist_len, hist_n;
};

struct srv_engine {
    e0_engine *eng;
    const e0_text *text;
    int32_t n_ctx, vocab;
    srv_metrics *m;
    pthread_t th;

    pthread_mutex_t mu; /* guards the queue, active, the slots' j, stopping, draining, avg_s */
    pthread_cond_t cv;
    srv_job *head, *tail;
    int depth, capacity;
    int active;    /* slots running a request, and jobs taken for one */
    bool stopping;
    bool draining; /* srv_engine_drain: nothing new starts */
    double avg_s;  /* moving average of request time */

    /* The scheduler thread's own. */
    srv_slot *slots;
    int n_slots, prefill_chunk;
    bool recurrent;           /* the model has DeltaNet layers: a history is reused whole or not at all */
    float *logits;            /* [2 n_slots, vocab]: one decode pass's rows */
    e0_session **pass_s;      /* [n_slots] the sessions of a pass */
    int32_t *pass_ids;        /* [2 n_slots]: each session's id, and its draft when it drafts */
    int32_t *pass_cnt;        /* [n_slots]: 1, or 2 with a draft */
    int *pass_slot;           /* [n_slots] */
    uint64_t clock;           /* admissions so far */
    /* Pacing a prefill against running streams: moving averages of a decode
     * pass's time (any batch, and one sequence alone) and, per half layer
     * (pass_step_halves), of a prefill pass's time per id (seconds; they
     * differ: attention against DeltaNet, dense against MoE). */
    double decode_pass_s, solo_pass_s, *half_id_s;
    int prefill_layers, n_layers;
    int gather; /* srv_engine_opts.gather until it is reached, then 0 (mu) */
    /* The prefill pass in progress: the next chunk of each of pass_n slots
     * in one forward pass (pass_begin), possibly paused between layers;
     * pass_n 0 when none. */
    e0_pass *pass;
    int pass_n;
    srv_slot *pass_sl[E0_PASS_MAX];
    size_t pass_m[E0_PASS_MAX];
    bool pass_last[E0_PASS_MAX]; /* the chunk ends the slot's prompt: its logits are wanted */
    double stats_t;           /* last metrics snapshot */
    uint64_t id_state;        /* tool-call ids */
    srv_generate_fn generate; /* a test's stand-in, or NULL: the step-able generator */
    prefix_cache *pc;         /* snapshots at prompt and answer ends (--cache-ram), or NULL */
};

/* echo.c: a generated token's log-probabilities kept for the answer (j->mu
 * held); echo's prompt log-probabilities, from a reset session. */
int srv_add_logprob(srv_job *j, const e0_token_info *tok);
int srv_prompt_logprobs(srv_engine *E, srv_slot *sl, srv_job *j, double *seconds, char *err);

/* job.c: the job's one log line (at its end). */
void srv_log_job(const srv_job *j);

#endif
