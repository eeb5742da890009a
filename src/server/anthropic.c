/* Messages API answers: the whole message, the event stream, errors
 * (anthropic.h). The job is the one the OpenAI front fills (engine.h):
 * reasoning, content, and tool calls that remember where in the content
 * they began; this file only writes them in Anthropic's shape.
 *
 * Content blocks come in the order they were generated: thinking (the
 * reasoning), then text and tool_use as the content and the calls
 * interleave. A stream sends exactly
 *   message_start, ping, (content_block_start, content_block_delta*,
 *   content_block_stop)*, message_delta, message_stop
 * or, when the job fails, an error event after what was sent. */
#include "server/anthropic.h"

#include "server/json.h"
#include "util/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *srv_anthropic_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status < 500 ? "invalid_request_error" : "api_error";
    }
}

int srv_anthropic_status(int status) { return status == 503 ? 529 : status; }

static void error_obj(srv_buf *b, int status, const char *message) {
    srv_put(b, "{\"type\":\"error\",\"error\":{\"type\":");
    srv_json_cstr(b, srv_anthropic_error_type(status));
    srv_put(b, ",\"message\":");
    srv_json_cstr(b, message);
    srv_put(b, "}}");
}

char *srv_anthropic_error_json(const srv_error *e, size_t *len) {
    srv_buf b = {0};
    error_obj(&b, e->status, e->message);
    *len = b.len;
    return b.p;
}

void srv_anthropic_id(char *out, size_t n, const char *prefix, uint64_t seed) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    size_t k = (size_t)snprintf(out, n, "%s", prefix);
    for (int i = 0; i < 24 && k + 1 < n; i++, k++) {
        out[k] = A[splitmix64(&seed) % 62];
        out[k + 1] = 0;
    }
}

/* stop_reason, and the stop sequence that ended the answer (or NULL). */
static const char *stop_reason(const srv_job *j, const char **seq) {
    *seq = NULL;
    if (j->res.finish != E0_FINISH_STOP && j->res.finish != E0_FINISH_CANCELLED) return "max_tokens";
    if (j->n_calls) return "tool_use";
    if (j->res.stop) {
        *seq = j->res.stop;
        return "stop_sequence";
    }
    return "end_turn";
}

static void stop_json(srv_buf *b, const srv_job *j) {
    const char *seq, *why = stop_reason(j, &seq);
    srv_putf(b, "\"stop_reason\":\"%s\",\"stop_sequence\":", why);
    if (seq) srv_json_cstr(b, seq);
    else srv_put(b, "null");
}

static void usage_json(srv_buf *b, int input, int output) {
    srv_putf(b, "\"usage\":{\"input_tokens\":%d,\"output_tokens\":%d}", input, output);
}

/* A tool_use block's id: "toolu_" and the call's 24 characters. */
static void tool_id(srv_buf *b, const srv_call *c) {
    char id[40];
    snprintf(id, sizeof id, "toolu_%s", c->id + 5);
    srv_json_cstr(b, id);
}

/* A call's arguments as the input object: the parser's JSON object text,
 * checked once more so a bad one can never break the answer. */
static void input_json(srv_buf *b, const srv_call *c) {
    cJSON *v = cJSON_ParseWithLength(c->args.p ? c->args.p : "", c->args.len);
    if (cJSON_IsObject(v)) srv_buf_put(b, c->args.p, c->args.len);
    else srv_put(b, "{}");
    cJSON_Delete(v);
}

static void text_block(srv_buf *b, bool *first, const char *s, size_t n) {
    if (!n) return;
    srv_put(b, *first ? "{\"type\":\"text\",\"text\":" : ",{\"type\":\"text\",\"text\":");
    srv_json_str(b, s, n);
    srv_put(b, "}");
    *first = false;
}

char *srv_anthropic_message_json(const srv_job *j, const char *model, size_t *len) {
    srv_buf b = {0};
    srv_put(&b, "{\"id\":");
    srv_json_cstr(&b, j->id);
    srv_put(&b, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    srv_json_cstr(&b, model);
    srv_put(&b, ",\"content\":[");
    bool first = true;
    if (j->reasoning.len) {
        srv_put(&b, "{\"type\":\"thinking\",\"thinking\":");
        srv_json_str(&b, j->reasoning.p, j->req.hide_thinking ? 0 : j->reasoning.len);
        srv_put(&b, ",\"signature\":\"\"}");
        first = false;
    }
    size_t at = 0;
    const char *content = j->content.p ? j->content.p : "";
    for (int i = 0; i < j->n_calls; i++) {
        const srv_call *c = &j->calls[i];
        if (c->content_at > at) text_block(&b, &first, content + at, c->content_at - at);
        if (c->content_at > at) at = c->content_at;
        srv_put(&b, first ? "{\"type\":\"tool_use\",\"id\":" : ",{\"type\":\"tool_use\",\"id\":");
        tool_id(&b, c);
        srv_put(&b, ",\"name\":");
        srv_json_str(&b, c->name.p, c->name.len);
        srv_put(&b, ",\"input\":");
        input_json(&b, c);
        srv_put(&b, "}");
        first = false;
    }
    if (j->content.len > at) text_block(&b, &first, content + at, j->content.len - at);
    srv_put(&b, "],");
    stop_json(&b, j);
    srv_put(&b, ",");
    usage_json(&b, j->res.prompt_tokens, j->res.completion_tokens);
    srv_put(&b, "}");
    *len = b.len;
    return b.p;
}

/* ---- the event stream ------------------------------------------------------ */

static void event(srv_buf *b, const char *name) {
    srv_put(b, "event: ");
    srv_put(b, name);
    srv_put(b, "\ndata: ");
}

static void block_stop(srv_anth_stream *st, srv_buf *b) {
    if (st->open == SRV_ANTH_NONE) return;
    event(b, "content_block_stop");
    srv_putf(b, "{\"type\":\"content_block_stop\",\"index\":%d}\n\n", st->index++);
    st->open = SRV_ANTH_NONE;
}

/* Opens a thinking or text block unless it is the open one. */
static void block_open(srv_anth_stream *st, srv_buf *b, int kind) {
    const char *key = kind == SRV_ANTH_THINKING ? "thinking" : "text";
    if (st->open == kind) return;
    block_stop(st, b);
    event(b, "content_block_start");
    srv_putf(b, "{\"type\":\"content_block_start\",\"index\":%d,\"content_block\":{\"type\":\"%s\",\"%s\":\"\"%s}}\n\n",
             st->index, key, key, kind == SRV_ANTH_THINKING ? ",\"signature\":\"\"" : "");
    st->open = kind;
}

/* A delta of thinking or text, opening its block first when needed. */
static void block_delta(srv_anth_stream *st, srv_buf *b, int kind, const char *s, size_t n) {
    if (!n) return;
    const char *key = kind == SRV_ANTH_THINKING ? "thinking" : "text";
    block_open(st, b, kind);
    event(b, "content_block_delta");
    srv_putf(b, "{\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"%s_delta\",\"%s\":", st->index, key,
             key);
    srv_json_str(b, s, n);
    srv_put(b, "}}\n\n");
}

/* A tool_use block: its start (id, name, empty input), one input_json_delta
 * per piece of arguments as the parser handed them on, its stop. */
static void block_call(srv_anth_stream *st, srv_buf *b, const srv_call *c) {
    block_stop(st, b);
    event(b, "content_block_start");
    srv_putf(b, "{\"type\":\"content_block_start\",\"index\":%d,\"content_block\":{\"type\":\"tool_use\",\"id\":",
             st->index);
    tool_id(b, c);
    srv_put(b, ",\"name\":");
    srv_json_str(b, c->name.p, c->name.len);
    srv_put(b, ",\"input\":{}}}\n\n");
    for (int k = 0; k < c->n_cuts; k++) {
        size_t from = k ? c->cuts[k - 1] : 0;
        event(b, "content_block_delta");
        srv_putf(b, "{\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"input_json_delta\","
                    "\"partial_json\":",
                 st->index);
        srv_json_str(b, c->args.p + from, c->cuts[k] - from);
        srv_put(b, "}}\n\n");
    }
    event(b, "content_block_stop");
    srv_putf(b, "{\"type\":\"content_block_stop\",\"index\":%d}\n\n", st->index++);
}

bool srv_anth_stream_news(const srv_anth_stream *st, const srv_job *j) {
    return st->phase == 0 || j->done || j->reasoning.len != st->r_sent || j->content.len != st->c_sent ||
           j->n_calls != st->calls_sent;
}

void srv_anth_stream_events(srv_anth_stream *st, srv_buf *b, const srv_job *j, const char *model) {
    if (st->phase == 2) return;
    if (st->phase == 0) {
        event(b, "message_start");
        srv_put(b, "{\"type\":\"message_start\",\"message\":{\"id\":");
        srv_json_cstr(b, j->id);
        srv_put(b, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
        srv_json_cstr(b, model);
        srv_put(b, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,");
        usage_json(b, (int)j->n_ids, 0);
        srv_put(b, "}}\n\n");
        event(b, "ping");
        srv_put(b, "{\"type\":\"ping\"}\n\n");
        st->phase = 1;
    }
    const char *content = j->content.p ? j->content.p : "";
    if (j->reasoning.len > st->r_sent && j->req.hide_thinking) /* display "omitted": the block, empty */
        block_open(st, b, SRV_ANTH_THINKING);
    else if (j->reasoning.len > st->r_sent)
        block_delta(st, b, SRV_ANTH_THINKING, j->reasoning.p + st->r_sent, j->reasoning.len - st->r_sent);
    st->r_sent = j->reasoning.len;
    for (; st->calls_sent < j->n_calls; st->calls_sent++) {
        const srv_call *c = &j->calls[st->calls_sent];
        if (c->content_at > st->c_sent) {
            block_delta(st, b, SRV_ANTH_TEXT, content + st->c_sent, c->content_at - st->c_sent);
            st->c_sent = c->content_at;
        }
        block_call(st, b, c);
    }
    if (j->content.len > st->c_sent) block_delta(st, b, SRV_ANTH_TEXT, content + st->c_sent, j->content.len - st->c_sent);
    st->c_sent = j->content.len;
    if (!j->done) return;
    if (j->status != 200) {
        event(b, "error");
        error_obj(b, j->status, j->err);
        srv_put(b, "\n\n");
    } else {
        block_stop(st, b);
        event(b, "message_delta");
        srv_put(b, "{\"type\":\"message_delta\",\"delta\":{");
        stop_json(b, j);
        srv_put(b, "},");
        usage_json(b, j->res.prompt_tokens, j->res.completion_tokens);
        srv_put(b, "}\n\n");
        event(b, "message_stop");
        srv_put(b, "{\"type\":\"message_stop\"}\n\n");
    }
    st->phase = 2;
}
