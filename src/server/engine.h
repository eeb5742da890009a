/* The one owner of the inference state: a FIFO of jobs and the scheduler
 * thread that runs them in N slots (--parallel), each slot one e0_session.
 *
 * Continuous batching: the scheduler loops over steps. Between steps it
 * admits queued jobs into free slots; a step is at most one prefill chunk
 * (prefill_chunk prompt ids of the request admitted first among those still
 * prefilling; its first token when the prompt is done) and then one decode
 * pass in which every decoding slot's next id goes through ONE
 * e0_session_eval_batch call. Each slot's request is a step-able generation
 * (edge0.h: e0_gen_*) with its own sampler, grammar, stop strings and logprobs;
 * the batch gives each row bit-identical to decoding alone, and a prompt is
 * always prefilled in the same chunks, so a greedy answer does not depend
 * on what else runs. A long prompt costs the running streams one chunk per
 * token at most (bounded inter-token latency). A failed pass (expert bytes
 * that cannot be read) resets the sessions in it: each of its requests gets
 * a 500 naming the error and the server goes on. With a scripted generate
 * function (tests) there is one slot and a request runs whole at admission.
 *
 * Connection threads build a job (a validated request, its rendered prompt
 * and prompt ids), submit it, and then read the answer as it grows: the
 * scheduler thread appends reasoning and content text to the job under the
 * job's mutex and signals its condition variable; a streaming connection
 * turns new text into server-sent events, a plain one waits for `done`.
 * The engine never waits for a client, so a slow reader costs memory (its
 * answer so far), never engine time.
 *
 * Tool calls and logprobs: for a chat request with tools (tool_choice not
 * "none") the content goes through a tool-call parser (text/toolcall.h)
 * after the reasoning splitter, so calls land in `calls` and never in
 * `content`; with parallel_tool_calls false generation stops after the
 * first call. With logprobs, every generated token's e0_token_info is kept
 * in `lp` (reasoning and call markup included, in order). A completion
 * with echo starts its content with the prompt; with logprobs too, the
 * engine first evaluates the prompt itself for the logits of every
 * position, and the prompt's tokens lead `lp` (engine.c, "echo").
 *
 * Cancellation: a job is cancelled when its client leaves. Connection
 * threads notice it while waiting (a hang-up on the socket, or MHD's
 * completion callback); the scheduler also polls the client's socket
 * after every token and before every prefill chunk, so a generation stops
 * and frees its slot within one step of the disconnect. A cancelled job
 * still in the queue is skipped.
 *
 * Prompt reuse, per slot: each slot's session keeps the last conversation
 * it ran, tokens, prompt and answer; a job goes to the free slot whose
 * history is the longest prefix of its prompt (as built below for that
 * slot), else to the least recently used one. A new prompt is turned into ids
 * in the first of these ways that applies:
 *  1. continuation: a chat request whose messages are the last chat
 *     request's messages, then an assistant message with the answer the
 *     server gave (content, reasoning_content if sent back, its tool calls
 *     with the same names and arguments), then only user/tool messages (an
 *     agent's tool results): the ids are the session's own tokens plus
 *     "<|im_end|>\n" and the rendering of the new messages, as `edge0 chat`
 *     does. Nothing of the history is evaluated again, even on models with
 *     recurrent layers, which cannot rewind. (The history then keeps the
 *     answer's reasoning and the model's own tokenization of it, where a
 *     fresh rendering would drop the reasoning.)
 *  2. text prefix: the prompt text starts with the decoded session history
 *     (a completion that continues the previous prompt and answer): the
 *     history's ids plus the ids of the rest.
 *  3. otherwise the prompt's own ids; e0_generate still reuses the longest
 *     common prefix where the model allows it.
 *
 * Locks: srv_engine.mu guards the queue, the active count, each slot's job
 * pointer (written by the scheduler, read by srv_engine_stop) and
 * `stopping`; everything else of the slots is the scheduler thread's own.
 * Each job's mu guards the fields marked so. Never hold a job's mu while taking
 * the engine's. */
#ifndef E0_SERVER_ENGINE_H
#define E0_SERVER_ENGINE_H

#include "edge0.h"
#include "server/metrics.h"
#include "server/request.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    char *p;
    size_t len, cap;
} srv_buf;

/* Appends n bytes (keeps a NUL after them). 0, or -1 out of memory. */
int srv_buf_put(srv_buf *b, const char *s, size_t n);

/* One tool call of an answer (text/toolcall.h), complete when it is added. */
typedef struct {
    char id[40];        /* "call_" + 24 random letters and digits */
    srv_buf name, args; /* args: a JSON object text */
    size_t *cuts;       /* args[cuts[k-1]..cuts[k]) is piece k, as the parser handed it on */
    int n_cuts;
    size_t content_at;  /* the content's length when the call began: what streams before it */
} srv_call;

typedef struct srv_job srv_job;
struct srv_job {
    /* Set before srv_engine_submit, then read-only. */
    char id[48];       /* "chatcmpl-7", "cmpl-8" */
    int64_t created;   /* unix time */
    double t0;         /* arrival, monotonic seconds */
    srv_request req;
    char *prompt;      /* rendered prompt text */
    size_t prompt_len;
    int32_t *ids;      /* its ids */
    size_t n_ids;
    bool anthropic;    /* answered in the Messages API's shape (anthropic.h) */
    bool prefilled;    /* the prompt ends with a prefill: no conversation to continue */
    bool responses;    /* answered in the Responses API's shape (responses.h) */
    struct srv_resp_info *resp; /* what that answer repeats of the request (owned), or NULL */

    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cv;  /* signalled when text is added, and when done */
    int refs;
    int fd;            /* the client's socket while it may be polled, else -1 */
    bool cancel;       /* the client left, or the server stops */
    bool done;
    srv_buf reasoning, content; /* the answer so far (chat: split; completions: all content) */
    int32_t reasoning_tokens;   /* chat: generated tokens inside the think block, its tags included */
    srv_call *calls;            /* tool calls so far (chat with tools) */
    int n_calls;
    size_t cap_calls;
    e0_token_info *lp;          /* every generated token, when the request asked for logprobs */
    size_t n_lp, cap_lp;
    size_t n_prompt_lp;         /* completions with echo: lp[0..n_prompt_lp) are the prompt's tokens (lp[0] has no logprob) */
    /* Valid once done: */
    e0_gen_result res;
    const char *finish_reason; /* "stop", "length", "tool_calls", "cancelled" (static) */
    char schema_violation[160]; /* response_format json_schema: what the check after generation found, or "" */
    int status;        /* 200, or the HTTP status of the failure */
    char err[E0_ERR_MAX];
    double seconds;    /* arrival to done */
    const char *reuse; /* how the prompt was built: "continuation", "prefix", "prompt" (static) */
    /* The request's log line, printed by whichever of the connection and
     * the engine is done last (srv_job_connection_over). */
    char method[16], url[128];
    int http_status;
    bool streamed, conn_over;

    srv_job *next;     /* queue link (srv_engine.mu) */
};

/* A job with one reference (the caller's), fd -1. NULL when out of memory. */
srv_job *srv_job_new(void);
void srv_job_ref(srv_job *j);
/* Drops a reference; the last one frees the job. */
void srv_job_unref(srv_job *j);
/* Marks the job cancelled and forgets its socket (call before the socket may close). */
void srv_job_cancel(srv_job *j);
/* The connection of a submitted job has ended with `http_status` (499: the
 * client left; the job is then cancelled). Prints the request's log line
 * now if the job is done, else the engine prints it when it is. */
void srv_job_connection_over(srv_job *j, int http_status, bool left);
/* True when the peer of `fd` has closed or reset the connection. */
bool srv_client_gone(int fd);

typedef struct srv_engine srv_engine;

/* A closed-loop generation function with e0_generate_tokens's contract:
 * a stand-in a test gives to script the model's output (a random tiny
 * model never writes a tool call). */
typedef int (*srv_generate_fn)(e0_session *s, const e0_text *t, const int32_t *prompt, size_t n,
                               const e0_sample_opts *o, e0_token_fn fn, void *user, e0_gen_result *r, char *err);

/* Slots the scheduler runs at most (each one e0_session). */
#define E0_BATCH_MAX_SLOTS E0_MAX_SEQS
/* Prompt ids one step prefills by default (--prefill-chunk). A batch's
 * arithmetic may depend on its length (mat.h), so answers are comparable at
 * one chunk size; on the fixtures, chunks of 128 give the logits of one
 * whole prefill (docs/experiments.md 29), so one slot answers as before. */
#define SRV_PREFILL_CHUNK 128

typedef struct {
    e0_engine *engine;       /* borrowed, as text; both outlive srv_engine_free */
    const e0_text *text;
    int32_t n_ctx;           /* positions of each slot's session */
    int max_queue;           /* waiting requests before 503 */
    int parallel;            /* slots (sessions) stepped together; < 1: 1 */
    int prefill_chunk;       /* prompt ids per step; 0: SRV_PREFILL_CHUNK */
    srv_generate_fn generate; /* NULL: the step-able generator (edge0.h: e0_gen_*); else this, one slot */
    uint64_t cache_ram;       /* bytes of session snapshots the prefix cache keeps (prefix.h); 0: none */
    int prefill_layers;       /* layers of a prefill chunk per step while others decode; 0: as many as
                                 take about one decode pass (measured); -1: never pause */
    int gather;               /* > 0: the first time, nothing is admitted until this many requests
                                 wait, so that requests sent together meet in one batch by
                                 construction, not by the timing of their connections (tests) */
} srv_engine_opts;

/* Creates the slots' sessions and starts the scheduler thread. */
int srv_engine_start(srv_engine **out, const srv_engine_opts *o, srv_metrics *m, char *err);
/* The slots it runs. */
int srv_engine_slots(const srv_engine *e);
/* Queues the job (taking a reference): 0, -1 when the queue is full, -2
 * when the engine is stopping. */
int srv_engine_submit(srv_engine *e, srv_job *j);
void srv_engine_queue_info(srv_engine *e, int *depth, int *running, int *capacity);
/* Seconds a client should wait before trying again, from recent request times. */
int srv_engine_retry_after(srv_engine *e);
/* Shutting down: new and queued requests get 503; waits up to grace_s
 * seconds for the running ones to finish by themselves. */
void srv_engine_drain(srv_engine *E, double grace_s);
/* Cancels the running jobs, fails the queued ones (503), joins the thread.
 * Jobs stay readable until their last reference is dropped. */
void srv_engine_stop(srv_engine *e);
/* After srv_engine_stop: frees the session and the engine's state. */
void srv_engine_free(srv_engine *e);

#endif
