/* HTTP side of edge0 serve: libmicrohttpd glue, routing, authentication,
 * request bodies, JSON responses and server-sent event streams (server.h).
 *
 * A request goes through on_request several times (libmicrohttpd's access
 * handler protocol): once with the headers, where routing, method, API key
 * and Content-Length are checked and an early error is answered; then once
 * per piece of body; then once more with no data, where the body is parsed,
 * rendered, tokenized and queued. A plain request then waits on the job in
 * that same call (its connection thread has nothing else to do); a streamed
 * one returns a callback response whose reader turns the job's growing text
 * into events. Both watch the client's socket while they wait, so a client
 * that leaves cancels its job, queued or running.
 *
 * Keep-alive: libmicrohttpd closes a connection whose response was queued
 * before the request was read whole, so only errors are answered in the
 * headers call; GETs and preflights wait for the last call like POSTs.
 *
 * Details that have caused bugs elsewhere:
 *  - libmicrohttpd only accepts a response in the headers call or after the
 *    whole body; a body that grows past the limit without a Content-Length
 *    (chunked) is drained and answered 413 at the end, or the connection is
 *    dropped once it passes 16x the limit.
 *  - the request-completed callback runs before libmicrohttpd closes the
 *    socket: it is where the job forgets the socket, so the engine thread
 *    never polls a descriptor that was closed and reused.
 *  - generated text may hold any bytes: every string goes through
 *    srv_json_str (json.h), which escapes control characters and replaces
 *    invalid UTF-8 with U+FFFD.
 */
#include "server/server.h"
#include "util/clock.h"
#include "server/http_int.h"
#include "server/openai.h"

#include "server/anthropic.h"
#include "server/responses.h"
#include "server/engine.h"
#include "server/json.h"
#include "server/metrics.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>


void srv_opts_default(srv_opts *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_queue = 64;
    o->n_ctx = 4096;
    o->parallel = 1;
    o->prefill_chunk = SRV_PREFILL_CHUNK;
    o->body_limit = 1 << 20;
    o->shutdown_grace = 10;
    srv_defaults_init(&o->defaults);
}

int srv_port(const srv *s) { return s->port; }

/* ---- responses ---------------------------------------------------------------- */

enum {
    EP_CHAT,
    EP_COMPLETIONS,
    EP_MESSAGES,
    EP_RESPONSES,
    EP_COUNT_TOKENS,
    EP_MODELS,
    EP_HEALTH,
    EP_ROOT,
    EP_METRICS,
    EP_TOKENIZE,
    EP_DETOKENIZE,
    EP_MODEL,
    EP_NONE
};

static const struct {
    const char *path, *alias, *method, *name;
} ROUTES[] = {
    [EP_CHAT] = {"/v1/chat/completions", "/chat/completions", "POST", "chat_completions"},
    [EP_COMPLETIONS] = {"/v1/completions", "/completions", "POST", "completions"},
    [EP_MESSAGES] = {"/v1/messages", "/messages", "POST", "messages"},
    [EP_RESPONSES] = {"/v1/responses", "/responses", "POST", "responses"},
    [EP_COUNT_TOKENS] = {"/v1/messages/count_tokens", "/messages/count_tokens", "POST", "count_tokens"},
    [EP_MODELS] = {"/v1/models", "/models", "GET", "models"},
    [EP_HEALTH] = {"/health", "/v1/health", "GET", "health"},
    [EP_ROOT] = {"/", "/", "GET", "root"}, /* clients probe it (Claude Code: HEAD /) */
    [EP_METRICS] = {"/metrics", "/v1/metrics", "GET", "metrics"},
    [EP_TOKENIZE] = {"/tokenize", "/v1/tokenize", "POST", "tokenize"},
    [EP_DETOKENIZE] = {"/detokenize", "/v1/detokenize", "POST", "detokenize"},
    [EP_MODEL] = {"/v1/models/", "/models/", "GET", "models"}, /* a prefix: the id follows */
    [EP_NONE] = {"", "", "", "other"},
};

/* Per request (libmicrohttpd's con_cls). */
typedef struct {
    int ep;
    char method[16];
    char url[128];
    double t0;
    srv_buf body;
    size_t received;
    bool too_big;
    bool answered; /* a response is queued */
    int status;
    const char *code; /* error code, for the log */
    srv_job *job;     /* a reference, while the request lives */
    bool streamed;
    bool preflight; /* a CORS OPTIONS request */
    bool anthropic; /* a Messages API path: errors in Anthropic's shape */
    const srv *S;
} req_ctx;

/* Headers every response carries: CORS when --cors is on. */
static void common_headers(const srv *S, struct MHD_Response *r) {
    const char *origin = S->o.cors;
    if (!origin) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Edge0-Ignored-Tools"); /* responses.h */
    if (strcmp(origin, "*")) MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result send_body(struct MHD_Connection *c, req_ctx *cx, int status, char *body, size_t len,
                                 const char *type, const char *hname, const char *hval) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    common_headers(cx->S, r);
    if (type) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (hname) MHD_add_response_header(r, hname, hval);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    cx->answered = true;
    cx->status = status;
    return ok;
}

static enum MHD_Result send_error(struct MHD_Connection *c, req_ctx *cx, const srv_error *e, const char *hname,
                                  const char *hval) {
    size_t len;
    char *body = cx->anthropic ? srv_anthropic_error_json(e, &len) : srv_openai_error_json(e, &len);
    if (!body) return MHD_NO;
    cx->code = e->code;
    return send_body(c, cx, cx->anthropic ? srv_anthropic_status(e->status) : e->status, body, len,
                     "application/json", hname, hval);
}

static enum MHD_Result fail(struct MHD_Connection *c, req_ctx *cx, int status, const char *type, const char *code,
                            const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static enum MHD_Result fail(struct MHD_Connection *c, req_ctx *cx, int status, const char *type, const char *code,
                            const char *fmt, ...) {
    srv_error e;
    srv_fail(&e, status, type, code, NULL, "%s", "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return send_error(c, cx, &e, NULL, NULL);
}

static int client_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

/* Waits up to 50 ms for the job to change; true when its client has left
 * (the job is then cancelled). Called with j->mu held. */
static bool wait_job(srv_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    if (!j->done && srv_client_gone(j->fd)) {
        j->cancel = true;
        j->fd = -1;
        pthread_cond_broadcast(&j->cv);
        return true;
    }
    return false;
}

/* ---- server-sent events ------------------------------------------------------- */

typedef struct {
    srv *S;
    srv_job *j;         /* a reference */
    size_t r_sent, c_sent; /* bytes of reasoning and content already sent */
    int calls_sent;        /* tool calls already sent */
    size_t lp_sent;        /* tokens whose logprobs were sent */
    size_t lp_chars;       /* completions: the text offset of the next token */
    int phase;          /* 0: first chunk not sent, 1: streaming, 2: all sent */
    srv_buf out;        /* formatted, not yet handed to libmicrohttpd */
    size_t out_pos;
    srv_anth_stream an; /* a Messages API stream's progress */
    srv_resp_stream rs; /* a Responses API stream's progress */
} stream_ctx;

static void chunk_open(stream_ctx *sc) {
    bool chat = sc->j->req.kind == SRV_CHAT;
    srv_put(&sc->out, "data: ");
    srv_openai_head_json(&sc->out, sc->S, sc->j, chat ? "chat.completion.chunk" : "text_completion");
}

/* A chunk's "logprobs": the tokens generated since the last chunk that had any. */
static void chunk_logprobs(stream_ctx *sc) {
    const srv_job *j = sc->j;
    srv_openai_logprobs_json(&sc->out, sc->S, j, sc->lp_sent, j->n_lp);
    sc->lp_sent = j->n_lp;
}

static void chunk_text(stream_ctx *sc, const char *key, const char *s, size_t n) {
    chunk_open(sc);
    if (sc->j->req.kind == SRV_CHAT) {
        srv_putf(&sc->out, ",\"choices\":[{\"index\":0,\"delta\":{%s\"%s\":", sc->phase ? "" : "\"role\":\"assistant\",",
                key);
        srv_json_str(&sc->out, s, n);
        srv_put(&sc->out, "},\"logprobs\":");
        chunk_logprobs(sc);
        srv_put(&sc->out, ",\"finish_reason\":null}]}\n\n");
    } else {
        srv_put(&sc->out, ",\"choices\":[{\"index\":0,\"text\":");
        srv_json_str(&sc->out, s, n);
        srv_put(&sc->out, ",\"logprobs\":");
        srv_openai_comp_logprobs_json(&sc->out, sc->S, sc->j, sc->lp_sent, sc->j->n_lp, &sc->lp_chars);
        sc->lp_sent = sc->j->n_lp;
        srv_put(&sc->out, ",\"finish_reason\":null}]}\n\n");
    }
    sc->phase = 1;
}

/* A tool call: its head (id, name, empty arguments), then one chunk per
 * piece of arguments as the parser handed them on. */
static void chunk_call(stream_ctx *sc, const srv_call *c, int index) {
    for (int k = -1; k < c->n_cuts; k++) {
        size_t a = k <= 0 ? 0 : c->cuts[k - 1], z = k < 0 ? 0 : c->cuts[k];
        chunk_open(sc);
        srv_putf(&sc->out, ",\"choices\":[{\"index\":0,\"delta\":{%s\"tool_calls\":[",
                sc->phase ? "" : "\"role\":\"assistant\",\"content\":null,");
        srv_openai_call_json(&sc->out, c, index, k < 0, true, c->args.p + a, z - a);
        srv_put(&sc->out, "]},\"logprobs\":");
        chunk_logprobs(sc);
        srv_put(&sc->out, ",\"finish_reason\":null}]}\n\n");
        sc->phase = 1;
    }
}

/* The OpenAI error code of a failed job: the engine answers 400 for a prompt
 * that does not fit the context and for an id outside the vocabulary (both
 * E0_ERANGE), told apart by the message. */
static const char *job_error_code(const srv_job *j) {
    if (j->status == 503) return "unavailable";
    if (j->status != 400) return "internal_error";
    return strstr(j->err, "context") ? "context_length_exceeded" : "invalid_value";
}

/* The end of a stream: the finish chunk (with usage), the usage chunk when
 * asked for (stream_options.include_usage), [DONE]; or an error event. */
static void chunk_end(stream_ctx *sc) {
    const srv_job *j = sc->j;
    if (j->status != 200) {
        srv_error e;
        srv_fail(&e, j->status, j->status == 503 ? "server_error" : j->status == 400 ? "invalid_request_error" : "server_error",
                 job_error_code(j), NULL,
                 "%s", j->err);
        size_t len;
        char *body = srv_openai_error_json(&e, &len);
        srv_put(&sc->out, "data: ");
        if (body) srv_buf_put(&sc->out, body, len);
        srv_put(&sc->out, "\n\n");
        free(body);
    } else {
        chunk_open(sc);
        if (j->req.kind == SRV_CHAT) {
            srv_put(&sc->out, ",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":");
            chunk_logprobs(sc);
        } else {
            srv_put(&sc->out, ",\"choices\":[{\"index\":0,\"text\":\"\",\"logprobs\":");
            srv_openai_comp_logprobs_json(&sc->out, sc->S, j, sc->lp_sent, j->n_lp, &sc->lp_chars);
            sc->lp_sent = j->n_lp;
        }
        srv_putf(&sc->out, ",\"finish_reason\":\"%s\"}],\"usage\":", srv_openai_finish(j));
        srv_openai_usage_json(&sc->out, &j->res);
        srv_put(&sc->out, ",\"timings\":");
        srv_openai_timings_json(&sc->out, j);
        srv_put(&sc->out, "}\n\n");
        if (j->req.include_usage) {
            chunk_open(sc);
            srv_put(&sc->out, ",\"choices\":[],\"usage\":");
            srv_openai_usage_json(&sc->out, &j->res);
            srv_put(&sc->out, "}\n\n");
        }
    }
    srv_put(&sc->out, "data: [DONE]\n\n");
    sc->phase = 2;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ctx *sc = cls;
    srv_job *j = sc->j;
    while (sc->out_pos == sc->out.len) {
        sc->out.len = sc->out_pos = 0;
        if (sc->phase == 2) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&j->mu);
        if (j->responses) { /* response.created at once, then events as the answer grows */
            while (!srv_resp_stream_news(&sc->rs, j))
                if (wait_job(j)) {
                    pthread_mutex_unlock(&j->mu);
                    return MHD_CONTENT_READER_END_WITH_ERROR;
                }
            srv_resp_stream_events(&sc->rs, &sc->out, j, sc->S->model_name);
            if (sc->rs.phase == 2) sc->phase = 2;
            pthread_mutex_unlock(&j->mu);
            if (!sc->out.p) return MHD_CONTENT_READER_END_WITH_ERROR; /* out of memory */
            continue;
        }
        if (j->anthropic) { /* message_start at once, then events as the answer grows */
            while (!srv_anth_stream_news(&sc->an, j))
                if (wait_job(j)) {
                    pthread_mutex_unlock(&j->mu);
                    return MHD_CONTENT_READER_END_WITH_ERROR;
                }
            srv_anth_stream_events(&sc->an, &sc->out, j, sc->S->model_name);
            if (sc->an.phase == 2) sc->phase = 2;
            pthread_mutex_unlock(&j->mu);
            if (!sc->out.p) return MHD_CONTENT_READER_END_WITH_ERROR; /* out of memory */
            continue;
        }
        while (!j->done && j->reasoning.len == sc->r_sent && j->content.len == sc->c_sent &&
               j->n_calls == sc->calls_sent)
            if (wait_job(j)) {
                pthread_mutex_unlock(&j->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        /* Format the new text under the lock (the engine may grow the buffers):
         * reasoning, then content and calls in the order they were generated. */
        if (j->reasoning.len > sc->r_sent) chunk_text(sc, "reasoning_content", j->reasoning.p + sc->r_sent,
                                                     j->reasoning.len - sc->r_sent);
        sc->r_sent = j->reasoning.len;
        for (; sc->calls_sent < j->n_calls; sc->calls_sent++) {
            const srv_call *c = &j->calls[sc->calls_sent];
            if (c->content_at > sc->c_sent) chunk_text(sc, "content", j->content.p + sc->c_sent, c->content_at - sc->c_sent);
            if (c->content_at > sc->c_sent) sc->c_sent = c->content_at;
            chunk_call(sc, c, sc->calls_sent);
        }
        if (j->content.len > sc->c_sent) chunk_text(sc, "content", j->content.p + sc->c_sent, j->content.len - sc->c_sent);
        sc->c_sent = j->content.len;
        bool done = j->done;
        pthread_mutex_unlock(&j->mu);
        if (done) chunk_end(sc);
        if (!sc->out.p) return MHD_CONTENT_READER_END_WITH_ERROR; /* out of memory */
    }
    size_t n = sc->out.len - sc->out_pos < max ? sc->out.len - sc->out_pos : max;
    memcpy(buf, sc->out.p + sc->out_pos, n);
    sc->out_pos += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    srv_job_cancel(sc->j); /* a no-op when it is done */
    srv_job_unref(sc->j);
    free(sc->out.p);
    free(sc);
}

/* ---- endpoints ------------------------------------------------------------------ */

#define SCHEMA_RETRIES 2 /* generations again after a failed check after generation (docs/design.md §8.6) */

/* The same request generated again (another seed) after j's answer failed
 * the check after generation; j is logged and handed over. The new job, or
 * NULL (then j stays the answer). Not streamed: a stream has sent its text. */
static srv_job *retry_job(srv *S, struct MHD_Connection *c, req_ctx *cx, srv_job *j, int attempt) {
    srv_error e;
    srv_job *n = srv_job_new();
    if (!n) return NULL;
    bool ok = !srv_request_parse(&n->req, j->req.kind, cx->body.p ? cx->body.p : "", cx->body.len, &S->o.defaults, &e) &&
              (n->prompt = malloc(j->prompt_len + 1)) && (n->ids = malloc(j->n_ids * sizeof *n->ids + 1));
    if (ok) {
        memcpy(n->prompt, j->prompt, j->prompt_len + 1);
        n->prompt_len = j->prompt_len;
        memcpy(n->ids, j->ids, j->n_ids * sizeof *n->ids);
        n->n_ids = j->n_ids;
        if (n->req.sample.seed) n->req.sample.seed += (uint64_t)attempt + 1;
        memcpy(n->id, j->id, sizeof n->id);
        n->created = j->created;
        n->t0 = j->t0;
        n->fd = client_fd(c);
        ok = !srv_engine_submit(S->E, n);
    }
    if (!ok) {
        n->id[0] = 0;
        srv_job_unref(n);
        return NULL;
    }
    pthread_mutex_lock(&n->mu);
    while (!n->done)
        if (wait_job(n)) break;
    bool done = n->done;
    pthread_mutex_unlock(&n->mu);
    snprintf(j->method, sizeof j->method, "%s", cx->method); /* the first answer's log line */
    snprintf(j->url, sizeof j->url, "%s", cx->url);
    srv_job_connection_over(j, 200, false);
    srv_job_unref(j);
    cx->job = n;
    return done && n->status == 200 ? n : NULL;
}

static enum MHD_Result do_generate(srv *S, struct MHD_Connection *c, req_ctx *cx) {
    srv_kind kind = cx->ep == EP_COMPLETIONS ? SRV_COMPLETION : SRV_CHAT;
    srv_error e;
    srv_job *j = srv_job_new();
    if (!j) return fail(c, cx, 500, "server_error", "out_of_memory", "%s", "out of memory");
    cx->job = j;
    const char *body = cx->body.p ? cx->body.p : "";
    j->anthropic = cx->ep == EP_MESSAGES;
    j->responses = cx->ep == EP_RESPONSES;
    if (j->responses ? srv_responses_request(&j->req, &j->resp, body, cx->body.len, &S->o.defaults, &j->prompt,
                                             &j->prompt_len, &e)
        : j->anthropic ? srv_anthropic_request(&j->req, false, body, cx->body.len, &S->o.defaults, &j->prompt,
                                               &j->prompt_len, &j->prefilled, &e)
                       : srv_request_parse(&j->req, kind, body, cx->body.len, &S->o.defaults, &e) ||
                             srv_request_render(&j->req, &j->prompt, &j->prompt_len, &e))
        return send_error(c, cx, &e, NULL, NULL);
    /* hosted tools edge0 cannot run: left out of the prompt, said in a header and the log */
    const char *ignored = j->resp ? j->resp->ignored : NULL;
    if (ignored) fprintf(stderr, "edge0: %s %s: tools left out (edge0 cannot run them): %s\n", cx->method, cx->url, ignored);
    char err[E0_ERR_MAX];
    int rc = e0_text_encode(S->o.text, j->prompt, j->prompt_len, &j->ids, &j->n_ids, err);
    if (rc == E0_ENOMEM) return fail(c, cx, 500, "server_error", "out_of_memory", "%s", err);
    if (rc) return fail(c, cx, 400, "invalid_request_error", "invalid_prompt", "the prompt cannot be tokenized: %s", err);
    if (j->n_ids >= (size_t)S->o.n_ctx) {
        srv_fail(&e, 400, "invalid_request_error", "context_length_exceeded",
                 j->responses ? "input" : kind == SRV_CHAT ? "messages" : "prompt",
                 "the prompt has %zu tokens but the context holds %d: shorten it, or start the server with a larger --ctx",
                 j->n_ids, (int)S->o.n_ctx);
        return send_error(c, cx, &e, NULL, NULL);
    }
    uint64_t seq = __atomic_add_fetch(&S->seq, 1, __ATOMIC_RELAXED);
    if (j->anthropic) srv_anthropic_id(j->id, sizeof j->id, "msg_", seq ^ (uint64_t)S->started << 20);
    else if (j->responses) srv_anthropic_id(j->id, sizeof j->id, "resp_", seq ^ (uint64_t)S->started << 20);
    else snprintf(j->id, sizeof j->id, "%s-%llu", kind == SRV_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)seq);
    j->created = (int64_t)time(NULL);
    j->t0 = cx->t0;
    j->fd = client_fd(c);
    rc = srv_engine_submit(S->E, j);
    if (rc) {
        j->id[0] = 0; /* never submitted: logged as a plain error */
        char ra[16];
        snprintf(ra, sizeof ra, "%d", srv_engine_retry_after(S->E));
        srv_fail(&e, 503, "server_error", rc == -1 ? "queue_full" : "unavailable", NULL,
                 rc == -1 ? "the server is busy: %d requests are waiting; retry later" : "the server is shutting down",
                 S->o.max_queue);
        return send_error(c, cx, &e, rc == -1 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL, rc == -1 ? ra : NULL);
    }
    if (j->req.stream) {
        stream_ctx *sc = calloc(1, sizeof *sc);
        if (!sc) {
            srv_job_cancel(j);
            return MHD_NO;
        }
        sc->S = S;
        sc->j = j;
        srv_job_ref(j);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, sc,
                                                                   stream_free);
        if (!r) {
            stream_free(sc);
            return MHD_NO;
        }
        common_headers(S, r);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        if (ignored) MHD_add_response_header(r, "X-Edge0-Ignored-Tools", ignored);
        enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        cx->answered = true;
        cx->streamed = true;
        cx->status = 200;
        return ok;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done)
        if (wait_job(j)) {
            pthread_mutex_unlock(&j->mu);
            cx->status = 499;
            return MHD_NO;
        }
    pthread_mutex_unlock(&j->mu);
    for (int k = 0; k < SCHEMA_RETRIES && !j->anthropic && j->status == 200 && j->schema_violation[0] &&
                    j->req.sample.temperature > 0;
         k++)
        if (!(j = retry_job(S, c, cx, j, k))) {
            if (!(j = cx->job)->done) { /* the client left during the retry */
                cx->status = 499;
                return MHD_NO;
            }
        }
    if (j->status != 200) {
        srv_fail(&e, j->status, j->status < 500 ? "invalid_request_error" : "server_error",
                 job_error_code(j), NULL,
                 "%s", j->err);
        return send_error(c, cx, &e, NULL, NULL);
    }
    size_t len;
    char *answer = j->responses   ? srv_responses_json(j, S->model_name, &len)
                   : j->anthropic ? srv_anthropic_message_json(j, S->model_name, &len)
                                  : srv_openai_answer_json(S, j, &len);
    if (!answer) return MHD_NO;
    return send_body(c, cx, 200, answer, len, "application/json", ignored ? "X-Edge0-Ignored-Tools" : NULL, ignored);
}

/* POST /v1/messages/count_tokens: the prompt's token count, as the
 * Messages API would render it ({"input_tokens": N}). */
static enum MHD_Result do_count_tokens(srv *S, struct MHD_Connection *c, req_ctx *cx) {
    srv_request r;
    srv_error e;
    char *prompt, err[E0_ERR_MAX];
    size_t len, n = 0;
    int32_t *ids = NULL;
    if (srv_anthropic_request(&r, true, cx->body.p ? cx->body.p : "", cx->body.len, &S->o.defaults, &prompt, &len, NULL, &e))
        return send_error(c, cx, &e, NULL, NULL);
    int rc = e0_text_encode(S->o.text, prompt, len, &ids, &n, err);
    srv_request_free(&r);
    free(prompt);
    free(ids);
    if (rc) return fail(c, cx, rc == E0_ENOMEM ? 500 : 400, "invalid_request_error", "invalid_prompt",
                        "the prompt cannot be tokenized: %s", err);
    srv_buf b = {0};
    srv_putf(&b, "{\"input_tokens\":%zu}", n);
    if (!b.p) return MHD_NO;
    return send_body(c, cx, 200, b.p, b.len, "application/json", NULL, NULL);
}

/* POST /tokenize {"content": STRING} -> {"tokens": [ids]};
 * POST /detokenize {"tokens": [ids]} -> {"content": STRING}, as llama-server.
 * Special tokens written in the text are read as special tokens (its
 * parse_special default); no BOS is added, as the Qwen tokenizers add none. */
static enum MHD_Result do_tokenize(srv *S, struct MHD_Connection *c, req_ctx *cx) {
    srv_error e;
    cJSON *j = cJSON_ParseWithLength(cx->body.p ? cx->body.p : "", cx->body.len);
    const char *BAD = "invalid_request_error";
    srv_buf b = {0};
    char err[E0_ERR_MAX];
    int rc = 0;
    if (!cJSON_IsObject(j)) {
        rc = srv_fail(&e, 400, BAD, "invalid_json", NULL, "the request body must be a JSON object");
    } else if (cx->ep == EP_TOKENIZE) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "content"), *v;
        if (!cJSON_IsString(t)) rc = srv_fail(&e, 400, BAD, "invalid_type", "content", "'content' must be a string");
        else if ((v = cJSON_GetObjectItemCaseSensitive(j, "with_pieces")) && !cJSON_IsNull(v) && !cJSON_IsFalse(v))
            rc = srv_fail(&e, 400, BAD, "unsupported_value", "with_pieces", "'with_pieces' is not supported");
        else if ((v = cJSON_GetObjectItemCaseSensitive(j, "parse_special")) && !cJSON_IsNull(v) && !cJSON_IsTrue(v))
            rc = srv_fail(&e, 400, BAD, "unsupported_value", "parse_special",
                          "'parse_special': special tokens in the text are always read as special tokens");
        int32_t *ids = NULL;
        size_t n = 0;
        if (!rc && e0_text_encode(S->o.text, t->valuestring, strlen(t->valuestring), &ids, &n, err))
            rc = srv_fail(&e, 400, BAD, "invalid_value", "content", "'content' cannot be tokenized: %s", err);
        if (!rc) {
            srv_put(&b, "{\"tokens\":[");
            for (size_t i = 0; i < n; i++) srv_putf(&b, "%s%d", i ? "," : "", ids[i]);
            srv_put(&b, "]}");
        }
        free(ids);
    } else {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens"), *v;
        int n = cJSON_IsArray(t) ? cJSON_GetArraySize(t) : -1, i = 0;
        int32_t *ids = n > 0 ? malloc((size_t)n * sizeof *ids) : NULL;
        if (n < 0) rc = srv_fail(&e, 400, BAD, "invalid_type", "tokens", "'tokens' must be an array of token ids");
        else if (n > 0 && !ids) rc = srv_fail(&e, 500, "server_error", "out_of_memory", NULL, "out of memory");
        const cJSON *arr = rc ? NULL : t;
        cJSON_ArrayForEach(v, arr) {
            char p[32];
            snprintf(p, sizeof p, "tokens[%d]", i);
            if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int32_t)v->valuedouble || v->valuedouble < 0 ||
                v->valuedouble >= S->info.vocab_size) {
                rc = srv_fail(&e, 400, BAD, "invalid_value", p, "'%s' must be a token id in [0, %d)", p,
                              (int)S->info.vocab_size);
                break;
            }
            ids[i++] = (int32_t)v->valuedouble;
        }
        char *text = NULL;
        size_t len = 0;
        if (!rc && e0_text_decode(S->o.text, ids, (size_t)n, &text, &len, err))
            rc = srv_fail(&e, 400, BAD, "invalid_value", "tokens", "'tokens' cannot be decoded: %s", err);
        if (!rc) {
            srv_put(&b, "{\"content\":");
            srv_json_str(&b, text ? text : "", len);
            srv_put(&b, "}");
        }
        free(text);
        free(ids);
    }
    cJSON_Delete(j);
    if (rc) {
        free(b.p);
        return send_error(c, cx, &e, NULL, NULL);
    }
    if (!b.p) return MHD_NO;
    return send_body(c, cx, 200, b.p, b.len, "application/json", NULL, NULL);
}

static void model_json(srv_buf *b, const srv *S) {
    srv_put(b, "{\"id\":");
    srv_json_cstr(b, S->model_name);
    srv_putf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"edge0\",\"meta\":{\"family\":",
            (long long)S->started);
    srv_json_cstr(b, S->info.family);
    srv_putf(b, ",\"n_ctx\":%d,\"n_vocab\":%d,\"n_layers\":%d,\"n_experts\":%d,\"top_k\":%d}}", (int)S->o.n_ctx,
            S->info.vocab_size, S->info.n_layers, S->info.n_experts, S->info.top_k);
}

/* GET /v1/models/{id}: the model, or OpenAI's 404 for any other id. */
static enum MHD_Result do_model(srv *S, struct MHD_Connection *c, req_ctx *cx, const char *url) {
    const char *id = url + strlen(strncmp(url, "/v1/", 4) ? ROUTES[EP_MODEL].alias : ROUTES[EP_MODEL].path);
    if (strcmp(id, S->model_name)) {
        srv_error e;
        srv_fail(&e, 404, "invalid_request_error", "model_not_found", "model",
                 "The model '%.200s' does not exist (this server serves '%.200s')", id, S->model_name);
        return send_error(c, cx, &e, NULL, NULL);
    }
    srv_buf b = {0};
    model_json(&b, S);
    if (!b.p) return MHD_NO;
    return send_body(c, cx, 200, b.p, b.len, "application/json", NULL, NULL);
}

static enum MHD_Result do_models(srv *S, struct MHD_Connection *c, req_ctx *cx) {
    srv_buf b = {0};
    srv_put(&b, "{\"object\":\"list\",\"data\":[");
    model_json(&b, S);
    srv_put(&b, "]}");
    if (!b.p) return MHD_NO;
    return send_body(c, cx, 200, b.p, b.len, "application/json", NULL, NULL);
}

static enum MHD_Result do_metrics(srv *S, struct MHD_Connection *c, req_ctx *cx) {
    int depth, running, cap;
    srv_engine_queue_info(S->E, &depth, &running, &cap);
    size_t len;
    char *t = srv_metrics_text(&S->m, depth, running, cap, &len);
    if (!t) return MHD_NO;
    return send_body(c, cx, 200, t, len, "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
}

/* h is the key, up to trailing blanks; compared in constant time. */
static bool key_is(const srv *S, const char *h) {
    size_t n = strlen(S->api_key), m = strlen(h);
    while (m && (h[m - 1] == ' ' || h[m - 1] == '\t')) m--;
    unsigned diff = n != m;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)S->api_key[i] ^ (unsigned char)(i < m ? h[i] : 0);
    return diff == 0;
}

/* The Authorization header "Bearer KEY" (the scheme in any case, RFC 7235)
 * or X-Api-Key: KEY (Anthropic's clients), either one right. */
static bool authorized(const srv *S, struct MHD_Connection *c) {
    if (!S->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h) {
        while (*h == ' ' || *h == '\t') h++;
        if (!strncasecmp(h, "Bearer", 6) && (h[6] == ' ' || h[6] == '\t')) {
            for (h += 6; *h == ' ' || *h == '\t';) h++;
            if (key_is(S, h)) return true;
        }
    }
    h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    return h && key_is(S, h);
}

/* The headers call: route, method, key and declared size. */
/* The headers call: route, method, key and declared size. Only errors are
 * answered here: libmicrohttpd closes the connection after a response
 * queued before the request was read whole, so everything else is answered
 * in the last call (keep-alive). */
static enum MHD_Result on_headers(srv *S, struct MHD_Connection *c, req_ctx *cx, const char *url, const char *method) {
    for (int i = 0; i < EP_NONE; i++)
        if (i == EP_MODEL ? (!strncmp(url, ROUTES[i].path, strlen(ROUTES[i].path)) ||
                             !strncmp(url, ROUTES[i].alias, strlen(ROUTES[i].alias)))
                          : (!strcmp(url, ROUTES[i].path) || !strcmp(url, ROUTES[i].alias)))
            cx->ep = i;
    cx->anthropic = !strncmp(url, "/v1/messages", 12) || !strncmp(url, "/messages", 9);
    if (cx->ep == EP_NONE)
        return fail(c, cx, 404, "not_found_error", "not_found", "unknown endpoint %s", url);
    bool get = !strcmp(ROUTES[cx->ep].method, "GET");
    /* a browser's CORS preflight: no credentials, answered in the last call */
    if (S->o.cors && !strcmp(method, "OPTIONS")) {
        cx->preflight = true;
        return MHD_YES;
    }
    if (strcmp(method, ROUTES[cx->ep].method) && !(get && !strcmp(method, "HEAD"))) {
        srv_error e;
        srv_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL, "%s %s is not allowed; use %s", method,
                 url, ROUTES[cx->ep].method);
        return send_error(c, cx, &e, MHD_HTTP_HEADER_ALLOW, get ? "GET, HEAD" : ROUTES[cx->ep].method);
    }
    if (cx->ep != EP_HEALTH && cx->ep != EP_ROOT && !authorized(S, c)) {
        srv_error e;
        srv_fail(&e, 401, "authentication_error", "invalid_api_key", NULL, "%s",
                 cx->anthropic ? "invalid x-api-key: a valid API key is required in the header 'x-api-key: KEY'"
                               : "a valid API key is required: send the header 'Authorization: Bearer KEY'");
        return send_error(c, cx, &e, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    }
    if (get) return MHD_YES;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (!errno && end != cl && n > S->o.body_limit) cx->too_big = true;
    }
    if (cx->too_big) {
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", S->o.body_limit);
        return fail(c, cx, 413, "invalid_request_error", "body_too_large", "the request body is larger than %s bytes",
                    lim);
    }
    return MHD_YES;
}

/* The last call of a request that was read whole. */
static enum MHD_Result dispatch(srv *S, struct MHD_Connection *c, req_ctx *cx, const char *url) {
    if (cx->preflight) {
        char *none = strdup("");
        struct MHD_Response *r = none ? MHD_create_response_from_buffer(0, none, MHD_RESPMEM_MUST_FREE) : NULL;
        if (!r) {
            free(none);
            return MHD_NO;
        }
        common_headers(S, r);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta, "
                                "Anthropic-Dangerous-Direct-Browser-Access, X-Stainless-Lang, X-Stainless-Package-Version, "
                                "X-Stainless-OS, X-Stainless-Arch, X-Stainless-Runtime, X-Stainless-Runtime-Version, "
                                "X-Stainless-Retry-Count, X-Stainless-Timeout, OpenAI-Organization, OpenAI-Project");
        MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
        enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, r);
        MHD_destroy_response(r);
        cx->answered = true;
        cx->status = 204;
        return ok;
    }
    switch (cx->ep) {
    case EP_MODELS:
        return do_models(S, c, cx);
    case EP_MODEL:
        return do_model(S, c, cx, url);
    case EP_METRICS:
        return do_metrics(S, c, cx);
    case EP_HEALTH: {
        char *ok = strdup("{\"status\":\"ok\"}");
        return ok ? send_body(c, cx, 200, ok, strlen(ok), "application/json", NULL, NULL) : MHD_NO;
    }
    case EP_ROOT: {
        char *ok = strdup("edge0 is running\n");
        return ok ? send_body(c, cx, 200, ok, strlen(ok), "text/plain; charset=utf-8", NULL, NULL) : MHD_NO;
    }
    case EP_TOKENIZE:
    case EP_DETOKENIZE:
        return do_tokenize(S, c, cx);
    case EP_COUNT_TOKENS:
        return do_count_tokens(S, c, cx);
    default:
        return do_generate(S, c, cx);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *S = cls;
    req_ctx *cx = *con_cls;
    if (!cx) {
        if (!(cx = calloc(1, sizeof *cx))) return MHD_NO;
        atomic_fetch_add(&S->live, 1);
        *con_cls = cx;
        cx->S = S;
        cx->t0 = now_s();
        cx->ep = EP_NONE;
        snprintf(cx->method, sizeof cx->method, "%s", method);
        snprintf(cx->url, sizeof cx->url, "%s", url);
        return on_headers(S, c, cx, url, method);
    }
    if (cx->answered) { /* an early answer: the body is not read */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        cx->received += *upload_size;
        if (cx->received > S->o.body_limit) cx->too_big = true;
        else if (srv_buf_put(&cx->body, upload, *upload_size)) return MHD_NO;
        *upload_size = 0;
        return cx->received > 16 * S->o.body_limit ? MHD_NO : MHD_YES;
    }
    if (cx->too_big) {
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", S->o.body_limit);
        return fail(c, cx, 413, "invalid_request_error", "body_too_large", "the request body is larger than %s bytes",
                    lim);
    }
    return dispatch(S, c, cx, url);
}

/* After the last byte (or the end of the connection): one log line, the
 * metrics, and the job forgets the socket. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    srv *S = cls;
    req_ctx *cx = *con_cls;
    if (!cx) return;
    *con_cls = NULL;
    bool left = toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && toe != MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN;
    int status = cx->status ? cx->status : 500;
    if (left && (status == 200 || !cx->answered)) status = 499; /* the client left before the end */
    srv_metrics_request(&S->m, ROUTES[cx->ep].name, status);
    srv_job *j = cx->job;
    if (j && j->id[0]) { /* submitted: the job logs itself */
        snprintf(j->method, sizeof j->method, "%s", cx->method);
        snprintf(j->url, sizeof j->url, "%s", cx->url);
        j->streamed = cx->streamed;
        srv_job_connection_over(j, status, left);
    } else {
        fprintf(stderr, "edge0: - %s %s %d%s%s %.3fs\n", cx->method, cx->url, status, cx->code ? " " : "",
                cx->code ? cx->code : "", now_s() - cx->t0);
    }
    srv_job_unref(j);
    free(cx->body.p);
    free(cx);
    atomic_fetch_sub(&S->live, 1);
}

/* ---- start and stop -------------------------------------------------------------- */

/* libmicrohttpd's error log: while the daemon starts, kept for the one
 * message edge0 prints if the start fails; afterwards, to stderr with our
 * prefix. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    srv *S = cls;
    if (S->starting) {
        if (!S->start_why[0]) vsnprintf(S->start_why, sizeof S->start_why, fmt, ap);
        return;
    }
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\r\n")] = 0;
    fprintf(stderr, "edge0: libmicrohttpd: %s\n", line);
}

int srv_start(srv **out, const srv_opts *o, char *err) {
    *out = NULL;
    srv *S = calloc(1, sizeof *S);
    if (!S) {
        snprintf(err, E0_ERR_MAX, "out of memory");
        return E0_ENOMEM;
    }
    S->o = *o;
    S->started = (int64_t)time(NULL);
    e0_engine_info(o->engine, &S->info);
    S->model_name = strdup(o->model_name ? o->model_name : "edge0");
    if (o->api_key && *o->api_key) S->api_key = strdup(o->api_key);
    srv_metrics_init(&S->m);
    int rc = !S->model_name || (o->api_key && *o->api_key && !S->api_key) ? E0_ENOMEM : 0;
    if (rc) snprintf(err, E0_ERR_MAX, "out of memory");
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int gai = rc ? 0 : getaddrinfo(o->host, port, &hints, &ai);
    if (!rc && gai) {
        snprintf(err, E0_ERR_MAX, "--host %s: %s", o->host, gai_strerror(gai));
        rc = E0_EINVAL;
    }
    srv_engine_opts eo = {.engine = o->engine, .text = o->text, .n_ctx = o->n_ctx, .max_queue = o->max_queue,
                          .parallel = o->parallel, .prefill_chunk = o->prefill_chunk, .generate = o->generate,
                          .cache_ram = o->cache_ram, .prefill_layers = o->prefill_layers,
                          .gather = o->gather};
    if (!rc) rc = srv_engine_start(&S->E, &eo, &S->m, err);
    S->starting = true; /* libmicrohttpd's words on a failed start go into our message */
    if (!rc) {
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                         MHD_USE_ITC | MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
        S->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, S, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, S,
                                MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                MHD_OPTION_NOTIFY_COMPLETED, on_completed, S, MHD_OPTION_CONNECTION_TIMEOUT,
                                (unsigned)300, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o->max_queue + 128),
                                MHD_OPTION_END);
        S->starting = false;
        char *why = S->start_why;
        if (!S->d) {
            why[strcspn(why, "\r\n")] = 0;
            if (strstr(why, "in use"))
                snprintf(err, E0_ERR_MAX,
                         "cannot listen on %s port %d: another program is using it (pick another "
                         "--port, or stop the other server)",
                         o->host, o->port);
            else
                snprintf(err, E0_ERR_MAX, "cannot listen on %s port %d: %s", o->host, o->port,
                         why[0] ? why : "libmicrohttpd gave no reason (not an address of this machine?)");
            rc = E0_EIO;
        }
    }
    if (ai) freeaddrinfo(ai);
    if (rc) {
        if (S->E) {
            srv_engine_stop(S->E);
            srv_engine_free(S->E);
        }
        srv_metrics_free(&S->m);
        free(S->model_name);
        free(S->api_key);
        free(S);
        return rc;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(S->d, MHD_DAEMON_INFO_BIND_PORT);
    S->port = di ? di->port : o->port;
    *out = S;
    return 0;
}

void srv_stop(srv *S) {
    if (!S) return;
    MHD_socket ls = MHD_quiesce_daemon(S->d); /* no new connections */
    if (ls != MHD_INVALID_SOCKET) close(ls);
    srv_engine_drain(S->E, S->o.shutdown_grace); /* queued: 503; running: its grace */
    srv_engine_stop(S->E);                    /* running still: cancelled */
    /* every job has its answer now; let the connections send it before
     * MHD_stop_daemon closes them (a stream's last chunk, a 503) */
    for (int i = 0; i < 500 && atomic_load(&S->live) > 0; i++) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
    MHD_stop_daemon(S->d);                    /* waits for the connection threads */
    srv_engine_free(S->E);
    const srv_metrics *m = &S->m;
    if (m->grammar_tokens) /* the totals of constrained decoding, next to the decode time */
        fprintf(stderr,
                "edge0: constrained decoding: %llu requests, %llu tokens, grammar %.3f ms/token next to decode "
                "%.1f ms/token, %llu full masks\n",
                (unsigned long long)m->grammar_requests, (unsigned long long)m->grammar_tokens,
                m->grammar_s * 1e3 / (double)m->grammar_tokens, m->grammar_decode_s * 1e3 / (double)m->grammar_tokens,
                (unsigned long long)m->grammar_masks);
    srv_metrics_free(&S->m);
    free(S->model_name);
    free(S->api_key);
    free(S);
}
