/* edge0 serve: an OpenAI-compatible HTTP server over one engine, with the
 * Anthropic Messages API as a second front (anthropic.h).
 *
 *     srv_opts o;
 *     srv_opts_default(&o);
 *     o.engine = eng; o.text = text; o.model_name = "Qwen3.6-35B-A3B-4bit";
 *     srv *s;
 *     if (srv_start(&s, &o, err)) die(err);     // listening when it returns
 *     ... wait for a signal ...
 *     srv_stop(s);                              // graceful: the running request may finish
 *
 * Endpoints: POST /v1/chat/completions (tool calls, logprobs), POST
 * /v1/completions (logprobs, echo), POST /v1/messages and
 * /v1/messages/count_tokens (Anthropic's shapes, errors included), GET
 * /v1/models and /v1/models/{id}, POST /tokenize and
 * /detokenize (llama-server's shapes), GET /health, GET /metrics (also
 * without the /v1 prefix; with it for tokenize). Connections are kept alive;
 * --cors adds Access-Control-Allow-Origin and answers OPTIONS preflights. Responses and
 * errors are JSON ({"error": {"message", "type", "code", "param"}}),
 * streams are server-sent events ending with "data: [DONE]". An API key
 * comes as "Authorization: Bearer KEY" or "x-api-key: KEY".
 *
 * Threads: libmicrohttpd runs one thread per connection; those threads
 * parse, validate, render and tokenize, then queue the request for the one
 * scheduler thread (engine.h), which owns the sessions of its slots. One log line per request
 * goes to stderr. */
#ifndef E0_SERVER_SERVER_H
#define E0_SERVER_SERVER_H

#include "edge0.h"
#include "server/request.h"

#include <stddef.h>

typedef struct {
    e0_engine *engine;      /* borrowed; outlives the server */
    const e0_text *text;    /* borrowed */
    const char *model_name; /* the id /v1/models reports and responses carry */
    const char *host;       /* "127.0.0.1" */
    int port;               /* 8080; 0 picks a free port (see srv_port) */
    const char *api_key;    /* NULL: no authentication */
    int max_queue;          /* waiting requests before 503 (64) */
    int32_t n_ctx;          /* context of each slot's session (4096) */
    int parallel;           /* slots: requests decoded together in one batch (1; engine.h) */
    int prefill_chunk;      /* prompt ids prefilled per scheduler step (SRV_PREFILL_CHUNK, 128) */
    uint64_t cache_ram;     /* the prefix cache's bytes (prefix.h; 0: off, the default here) */
    int prefill_layers;     /* layers of a prefill chunk per step while others decode (0: paced by time) */
    int gather;             /* the first requests admitted together, once all this many wait (0: off; tests) */
    size_t body_limit;      /* largest request body in bytes (1 MiB) */
    srv_defaults defaults;  /* sampling and thinking for fields a request leaves out */
    const char *cors;       /* Access-Control-Allow-Origin for browsers, or NULL (off) */
    double shutdown_grace;  /* seconds srv_stop lets the running request finish (10) */
    /* the step-able generator unless set: tests script the model's output with
     * a closed-loop stand-in (e0_generate_tokens's contract; one slot) */
    int (*generate)(e0_session *s, const e0_text *t, const int32_t *prompt, size_t n, const e0_sample_opts *o,
                    e0_token_fn fn, void *user, e0_gen_result *r, char *err);
} srv_opts;

void srv_opts_default(srv_opts *o);

typedef struct srv srv;

int srv_start(srv **out, const srv_opts *o, char *err);
/* The port the server listens on. */
int srv_port(const srv *s);
/* Stops accepting, answers the queued requests with 503, lets the running
 * one finish for up to shutdown_grace seconds (its stream ends with its
 * final chunk), then cancels it (a stream ends with an error event),
 * waits for every connection to end, frees. */
void srv_stop(srv *s);

#endif
