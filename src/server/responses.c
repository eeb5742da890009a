/* Responses API answers: the whole response and the event stream
 * (responses.h). The job is the one the other fronts fill (engine.h):
 * reasoning, content, and tool calls that remember where in the content
 * they began; this file only writes them in the Responses shape.
 *
 * Output items come in the order they were generated: the reasoning, then
 * messages and function calls as the content and the calls interleave
 * (content before a call is one message, content after it another). An
 * item's id depends only on the response's id and its output_index (a
 * call's on the call's id), so the stream's items and the final response's
 * agree. A message cut off (max_output_tokens, a failure) is "incomplete",
 * every other item "completed" (a cut-off call is reported as far as it
 * got, docs/design.md §8.6). A stream sends exactly
 *   response.created, response.in_progress,
 *   (output_item.added, <the item's events>, output_item.done)*,
 *   response.completed | response.incomplete
 * or, when the job fails, the open item closed "incomplete", then error and
 * response.failed (whose output is what was generated). */
#include "server/responses.h"

#include "server/anthropic.h"
#include "server/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The job ended by max_output_tokens or the end of the context. */
static bool incomplete(const srv_job *j) {
    return j->status == 200 && j->res.finish != E0_FINISH_STOP && j->res.finish != E0_FINISH_CANCELLED;
}

/* The answer stopped before its end: by max_output_tokens, or a failure. */
static bool cut_short(const srv_job *j) { return j->status != 200 || incomplete(j); }

/* An output item's id: prefix and 24 characters from the response id and the index. */
static void item_id(char *out, size_t n, const srv_job *j, const char *prefix, int index) {
    uint64_t h = 1469598103934665603ull;
    for (const char *s = j->id; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    srv_anthropic_id(out, n, prefix, h + (uint64_t)index * 0x632be59bd9b4e019ull);
}

/* The name and namespace a call is answered with: a namespaced function's
 * flat name split back (responses.h). */
static void call_name(srv_buf *b, const srv_job *j, const srv_call *c) {
    const cJSON *n;
    const cJSON *names = j->resp ? j->resp->names : NULL;
    cJSON_ArrayForEach(n, names) {
        const cJSON *flat = cJSON_GetObjectItemCaseSensitive(n, "flat");
        if (strlen(flat->valuestring) != c->name.len || memcmp(flat->valuestring, c->name.p, c->name.len)) continue;
        srv_put(b, "\"name\":");
        srv_json_cstr(b, cJSON_GetObjectItemCaseSensitive(n, "name")->valuestring);
        srv_put(b, ",\"namespace\":");
        srv_json_cstr(b, cJSON_GetObjectItemCaseSensitive(n, "namespace")->valuestring);
        return;
    }
    srv_put(b, "\"name\":");
    srv_json_str(b, c->name.p, c->name.len);
}

/* A function_call item; args: its arguments so far (NULL: all of them). */
static void call_item(srv_buf *b, const srv_job *j, const srv_call *c, const char *status, bool args) {
    srv_putf(b, "{\"id\":\"fc_%s\",\"type\":\"function_call\",\"status\":\"%s\",\"arguments\":", c->id + 5, status);
    if (args) srv_json_str(b, c->args.p ? c->args.p : "", c->args.len);
    else srv_put(b, "\"\"");
    srv_put(b, ",\"call_id\":");
    srv_json_cstr(b, c->id);
    srv_put(b, ",");
    call_name(b, j, c);
    srv_put(b, "}");
}

/* A message item holding s[0..n) (an empty content while in progress: s NULL). */
static void message_item(srv_buf *b, const srv_job *j, int index, const char *status, const char *s, size_t n) {
    char id[48];
    item_id(id, sizeof id, j, "msg_", index);
    srv_putf(b, "{\"id\":\"%s\",\"type\":\"message\",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[", id, status);
    if (s) {
        srv_put(b, "{\"type\":\"output_text\",\"text\":");
        srv_json_str(b, s, n);
        srv_put(b, ",\"annotations\":[],\"logprobs\":[]}");
    }
    srv_put(b, "]}");
}

/* A reasoning item whose summary is s[0..n) (none while in progress: s NULL). */
static void reasoning_item(srv_buf *b, const srv_job *j, int index, const char *s, size_t n) {
    char id[48];
    item_id(id, sizeof id, j, "rs_", index);
    srv_putf(b, "{\"id\":\"%s\",\"type\":\"reasoning\",\"summary\":[", id);
    if (s) {
        srv_put(b, "{\"type\":\"summary_text\",\"text\":");
        srv_json_str(b, s, n);
        srv_put(b, "}");
    }
    srv_put(b, "]}");
}

/* The output items of a done job. */
static void output_json(srv_buf *b, const srv_job *j) {
    const char *content = j->content.p ? j->content.p : "";
    int index = 0;
    size_t at = 0;
    srv_put(b, "[");
    if (j->reasoning.len) reasoning_item(b, j, index++, j->reasoning.p, j->reasoning.len);
    for (int i = 0; i <= j->n_calls; i++) {
        size_t end = i < j->n_calls ? j->calls[i].content_at : j->content.len;
        if (end > at) {
            bool last = i == j->n_calls;
            srv_put(b, index ? "," : "");
            message_item(b, j, index++, last && cut_short(j) ? "incomplete" : "completed", content + at, end - at);
            at = end;
        }
        if (i == j->n_calls) break;
        srv_put(b, index++ ? "," : "");
        call_item(b, j, &j->calls[i], "completed", true);
    }
    srv_put(b, "]");
}

/* The response object; status "in_progress" (no output yet), or the done job's. */
static void response_json(srv_buf *b, const srv_job *j, const char *model, bool done) {
    const char *status = !done ? "in_progress" : j->status != 200 ? "failed" : incomplete(j) ? "incomplete" : "completed";
    srv_put(b, "{\"id\":");
    srv_json_cstr(b, j->id);
    srv_putf(b, ",\"object\":\"response\",\"created_at\":%lld,\"status\":\"%s\",\"background\":false,\"error\":",
             (long long)j->created, status);
    if (done && j->status != 200) {
        srv_put(b, "{\"code\":");
        srv_json_cstr(b, j->status == 503 ? "server_is_overloaded" : j->status < 500 ? "invalid_prompt" : "server_error");
        srv_put(b, ",\"message\":");
        srv_json_cstr(b, j->err);
        srv_put(b, "}");
    } else {
        srv_put(b, "null");
    }
    srv_put(b, done && incomplete(j) ? ",\"incomplete_details\":{\"reason\":\"max_output_tokens\"}" : ",\"incomplete_details\":null");
    srv_put(b, ",\"model\":");
    srv_json_cstr(b, model);
    srv_put(b, ",\"output\":");
    if (done) output_json(b, j); /* a failed job's: what was generated */
    else srv_put(b, "[]");
    if (j->resp && j->resp->echo && *j->resp->echo) {
        srv_put(b, ",");
        srv_put(b, j->resp->echo);
    }
    srv_put(b, ",\"usage\":");
    if (done && j->status == 200) {
        const e0_gen_result *r = &j->res;
        int32_t think = j->reasoning_tokens < r->completion_tokens ? j->reasoning_tokens : r->completion_tokens;
        srv_putf(b,
                 "{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%d},\"output_tokens\":%d,"
                 "\"output_tokens_details\":{\"reasoning_tokens\":%d},\"total_tokens\":%d}",
                 r->prompt_tokens, r->reused_tokens, r->completion_tokens, think, r->prompt_tokens + r->completion_tokens);
    } else {
        srv_put(b, "null");
    }
    srv_put(b, "}");
}

char *srv_responses_json(const srv_job *j, const char *model, size_t *len) {
    srv_buf b = {0};
    response_json(&b, j, model, true);
    *len = b.len;
    return b.p;
}

/* ---- the event stream ------------------------------------------------------ */

/* event: NAME / data: {"type":NAME,"sequence_number":N, ... (the caller ends it with "}\n\n"). */
static void event(srv_resp_stream *st, srv_buf *b, const char *name) {
    srv_putf(b, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d", name, name, st->seq++);
}

/* ,"item_id":ID,"output_index":I for the open item. */
static void item_ref(srv_buf *b, const srv_job *j, const srv_resp_stream *st, const char *prefix) {
    char id[48];
    item_id(id, sizeof id, j, prefix, st->index);
    srv_putf(b, ",\"item_id\":\"%s\",\"output_index\":%d", id, st->index);
}

/* Closes the open reasoning or message item: its done events with the whole text. */
static void item_close(srv_resp_stream *st, srv_buf *b, const srv_job *j, const char *status) {
    if (st->open == SRV_RESP_NONE) return;
    if (st->open == SRV_RESP_REASONING) {
        const char *s = j->reasoning.p + st->open_from;
        size_t n = j->reasoning.len - st->open_from;
        event(st, b, "response.reasoning_summary_text.done");
        item_ref(b, j, st, "rs_");
        srv_put(b, ",\"summary_index\":0,\"text\":");
        srv_json_str(b, s, n);
        srv_put(b, "}\n\n");
        event(st, b, "response.reasoning_summary_part.done");
        item_ref(b, j, st, "rs_");
        srv_put(b, ",\"summary_index\":0,\"part\":{\"type\":\"summary_text\",\"text\":");
        srv_json_str(b, s, n);
        srv_put(b, "}}\n\n");
        event(st, b, "response.output_item.done");
        srv_putf(b, ",\"output_index\":%d,\"item\":", st->index);
        reasoning_item(b, j, st->index, s, n);
    } else {
        const char *s = j->content.p + st->open_from;
        size_t n = st->c_sent - st->open_from;
        event(st, b, "response.output_text.done");
        item_ref(b, j, st, "msg_");
        srv_put(b, ",\"content_index\":0,\"text\":");
        srv_json_str(b, s, n);
        srv_put(b, ",\"logprobs\":[]}\n\n");
        event(st, b, "response.content_part.done");
        item_ref(b, j, st, "msg_");
        srv_put(b, ",\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":");
        srv_json_str(b, s, n);
        srv_put(b, ",\"annotations\":[],\"logprobs\":[]}}\n\n");
        event(st, b, "response.output_item.done");
        srv_putf(b, ",\"output_index\":%d,\"item\":", st->index);
        message_item(b, j, st->index, status, s, n);
    }
    srv_put(b, "}\n\n");
    st->index++;
    st->open = SRV_RESP_NONE;
}

/* A delta of reasoning or text (s[0..n) at `from` in its buffer), opening its item first when needed. */
static void item_delta(srv_resp_stream *st, srv_buf *b, const srv_job *j, int kind, size_t from, const char *s, size_t n) {
    if (!n) return;
    const bool r = kind == SRV_RESP_REASONING;
    if (st->open != kind) {
        item_close(st, b, j, "completed");
        event(st, b, "response.output_item.added");
        srv_putf(b, ",\"output_index\":%d,\"item\":", st->index);
        if (r) reasoning_item(b, j, st->index, NULL, 0);
        else message_item(b, j, st->index, "in_progress", NULL, 0);
        srv_put(b, "}\n\n");
        event(st, b, r ? "response.reasoning_summary_part.added" : "response.content_part.added");
        item_ref(b, j, st, r ? "rs_" : "msg_");
        srv_put(b, r ? ",\"summary_index\":0,\"part\":{\"type\":\"summary_text\",\"text\":\"\"}}\n\n"
                     : ",\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[],"
                       "\"logprobs\":[]}}\n\n");
        st->open = kind;
        st->open_from = from;
    }
    event(st, b, r ? "response.reasoning_summary_text.delta" : "response.output_text.delta");
    item_ref(b, j, st, r ? "rs_" : "msg_");
    srv_put(b, r ? ",\"summary_index\":0,\"delta\":" : ",\"content_index\":0,\"delta\":");
    srv_json_str(b, s, n);
    srv_put(b, r ? "}\n\n" : ",\"logprobs\":[]}\n\n");
}

/* A function_call item: added (no arguments), one arguments delta per piece
 * as the parser handed them on, the arguments done, the item done. */
static void item_call(srv_resp_stream *st, srv_buf *b, const srv_job *j, const srv_call *c) {
    item_close(st, b, j, "completed");
    event(st, b, "response.output_item.added");
    srv_putf(b, ",\"output_index\":%d,\"item\":", st->index);
    call_item(b, j, c, "in_progress", false);
    srv_put(b, "}\n\n");
    for (int k = 0; k < c->n_cuts; k++) {
        size_t from = k ? c->cuts[k - 1] : 0;
        event(st, b, "response.function_call_arguments.delta");
        srv_putf(b, ",\"item_id\":\"fc_%s\",\"output_index\":%d,\"delta\":", c->id + 5, st->index);
        srv_json_str(b, c->args.p + from, c->cuts[k] - from);
        srv_put(b, "}\n\n");
    }
    event(st, b, "response.function_call_arguments.done");
    srv_putf(b, ",\"item_id\":\"fc_%s\",\"output_index\":%d,", c->id + 5, st->index);
    call_name(b, j, c);
    srv_put(b, ",\"arguments\":");
    srv_json_str(b, c->args.p ? c->args.p : "", c->args.len);
    srv_put(b, "}\n\n");
    event(st, b, "response.output_item.done");
    srv_putf(b, ",\"output_index\":%d,\"item\":", st->index);
    call_item(b, j, c, "completed", true);
    srv_put(b, "}\n\n");
    st->index++;
}

bool srv_resp_stream_news(const srv_resp_stream *st, const srv_job *j) {
    return st->phase == 0 || j->done || j->reasoning.len != st->r_sent || j->content.len != st->c_sent ||
           j->n_calls != st->calls_sent;
}

/* The end: the open item closed, then the whole response; or the error. */
static void stream_end(srv_resp_stream *st, srv_buf *b, const srv_job *j, const char *model) {
    item_close(st, b, j, cut_short(j) ? "incomplete" : "completed");
    if (j->status != 200) {
        event(st, b, "error");
        srv_put(b, ",\"code\":");
        srv_json_cstr(b, j->status == 503 ? "server_is_overloaded" : j->status < 500 ? "invalid_prompt" : "server_error");
        srv_put(b, ",\"message\":");
        srv_json_cstr(b, j->err);
        srv_put(b, ",\"param\":null}\n\n");
        event(st, b, "response.failed");
    } else {
        event(st, b, incomplete(j) ? "response.incomplete" : "response.completed");
    }
    srv_put(b, ",\"response\":");
    response_json(b, j, model, true);
    srv_put(b, "}\n\n");
    st->phase = 2;
}

void srv_resp_stream_events(srv_resp_stream *st, srv_buf *b, const srv_job *j, const char *model) {
    if (st->phase == 2) return;
    if (st->phase == 0) {
        event(st, b, "response.created");
        srv_put(b, ",\"response\":");
        response_json(b, j, model, false);
        srv_put(b, "}\n\n");
        event(st, b, "response.in_progress");
        srv_put(b, ",\"response\":");
        response_json(b, j, model, false);
        srv_put(b, "}\n\n");
        st->phase = 1;
    }
    const char *content = j->content.p ? j->content.p : "";
    if (j->reasoning.len > st->r_sent)
        item_delta(st, b, j, SRV_RESP_REASONING, st->r_sent, j->reasoning.p + st->r_sent, j->reasoning.len - st->r_sent);
    st->r_sent = j->reasoning.len;
    for (; st->calls_sent < j->n_calls; st->calls_sent++) {
        const srv_call *c = &j->calls[st->calls_sent];
        if (c->content_at > st->c_sent) {
            item_delta(st, b, j, SRV_RESP_TEXT, st->c_sent, content + st->c_sent, c->content_at - st->c_sent);
            st->c_sent = c->content_at;
        }
        item_call(st, b, j, c);
    }
    if (j->content.len > st->c_sent)
        item_delta(st, b, j, SRV_RESP_TEXT, st->c_sent, content + st->c_sent, j->content.len - st->c_sent);
    st->c_sent = j->content.len;
    if (j->done) stream_end(st, b, j, model);
}
