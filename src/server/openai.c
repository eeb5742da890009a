/* The OpenAI protocol's bodies (openai.h). */
#include "server/openai.h"

#include "server/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- JSON output ------------------------------------------------------------ */

char *srv_openai_error_json(const srv_error *e, size_t *len) {
    srv_buf b = {0};
    srv_put(&b, "{\"error\":{\"message\":");
    srv_json_cstr(&b, e->message);
    srv_put(&b, ",\"type\":");
    srv_json_cstr(&b, e->type);
    srv_put(&b, ",\"code\":");
    srv_json_cstr(&b, e->code);
    srv_put(&b, ",\"param\":");
    if (e->param[0]) srv_json_cstr(&b, e->param);
    else srv_put(&b, "null");
    srv_put(&b, "}}");
    *len = b.len;
    return b.p;
}

const char *srv_openai_finish(const srv_job *j) {
    if (j->finish_reason) return j->finish_reason;
    e0_finish f = j->res.finish;
    return f == E0_FINISH_STOP ? "stop" : f == E0_FINISH_CANCELLED ? "cancelled" : "length";
}

/* One entry of "tool_calls"; with_head: id, type and name (a whole call, or
 * the first delta of a streamed one), then arguments a[0..n). */
void srv_openai_call_json(srv_buf *b, const srv_call *c, int index, bool with_head, bool stream, const char *a, size_t n) {
    srv_put(b, "{");
    if (stream) srv_putf(b, "\"index\":%d,", index);
    if (with_head) {
        srv_put(b, "\"id\":");
        srv_json_cstr(b, c->id);
        srv_put(b, ",\"type\":\"function\",\"function\":{\"name\":");
        srv_json_str(b, c->name.p, c->name.len);
        srv_put(b, ",");
    } else {
        srv_put(b, "\"function\":{");
    }
    srv_put(b, "\"arguments\":");
    srv_json_str(b, a, n);
    srv_put(b, "}}");
}

void srv_openai_usage_json(srv_buf *b, const e0_gen_result *r) {
    srv_putf(b,
            "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
            "\"prompt_tokens_details\":{\"cached_tokens\":%d}}",
            r->prompt_tokens, r->completion_tokens, r->prompt_tokens + r->completion_tokens, r->reused_tokens);
}

/* With a grammar: the time spent constraining, inside predicted_ms. */
static void grammar_timings(srv_buf *b, const srv_job *j) {
    const e0_gen_result *r = &j->res;
    if (!j->req.grammar) return;
    srv_putf(b, ",\"grammar_ms\":%.3f,\"grammar_per_token_ms\":%.4f,\"grammar_masks\":%d,\"grammar_compile_ms\":%.3f",
             r->mask_s * 1e3, r->completion_tokens ? r->mask_s * 1e3 / r->completion_tokens : 0.0, r->masks,
             j->req.grammar_compile_s * 1e3);
}

/* llama.cpp's "timings" object: what was evaluated and how fast (and, with
 * a grammar, what constraining cost). */
void srv_openai_timings_json(srv_buf *b, const srv_job *j) {
    const e0_gen_result *r = &j->res;
    int pn = r->prompt_tokens - r->reused_tokens;
    srv_putf(b,
            "{\"cache_n\":%d,\"prompt_n\":%d,\"prompt_ms\":%.3f,\"prompt_per_second\":%.2f,"
            "\"predicted_n\":%d,\"predicted_ms\":%.3f,\"predicted_per_second\":%.2f",
            r->reused_tokens, pn, r->prefill_s * 1e3, r->prefill_s > 0 ? pn / r->prefill_s : 0.0,
            r->completion_tokens, r->decode_s * 1e3, r->decode_s > 0 ? r->completion_tokens / r->decode_s : 0.0);
    grammar_timings(b, j);
    srv_put(b, "}");
}

/* {"id":..,"object":..,"created":..,"model":.., — the head every response and chunk shares. */
void srv_openai_head_json(srv_buf *b, const srv *S, const srv_job *j, const char *object) {
    srv_put(b, "{\"id\":");
    srv_json_cstr(b, j->id);
    srv_putf(b, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object, (long long)j->created);
    srv_json_cstr(b, S->model_name);
}

/* One entry of "logprobs.content" or of its "top_logprobs": the token's
 * text (decoded alone; bytes gives the exact bytes where a token holds part
 * of a character) and its log-probability. */
static void token_json(srv_buf *b, const srv *S, int32_t id, float lp) {
    char *t = NULL, err[E0_ERR_MAX];
    size_t n = 0;
    if (e0_text_decode(S->o.text, &id, 1, &t, &n, err)) n = 0;
    srv_put(b, "{\"token\":");
    srv_json_str(b, t ? t : "", n);
    srv_putf(b, ",\"logprob\":%.9g,\"bytes\":[", (double)lp);
    for (size_t i = 0; i < n; i++) srv_putf(b, "%s%u", i ? "," : "", (unsigned char)t[i]);
    srv_put(b, "]");
    free(t);
}

/* "logprobs" of a choice: null, or {"content": [tokens from..to), "refusal": null}. */
void srv_openai_logprobs_json(srv_buf *b, const srv *S, const srv_job *j, size_t from, size_t to) {
    if (!j->req.sample.logprobs || from >= to) {
        srv_put(b, "null");
        return;
    }
    srv_put(b, "{\"content\":[");
    for (size_t i = from; i < to; i++) {
        const e0_token_info *t = &j->lp[i];
        if (i > from) srv_put(b, ",");
        token_json(b, S, t->id, t->logprob);
        srv_put(b, ",\"top_logprobs\":[");
        for (int k = 0; k < t->n_top; k++) {
            if (k) srv_put(b, ",");
            token_json(b, S, t->top_ids[k], t->top_logprobs[k]);
            srv_put(b, "}");
        }
        srv_put(b, "]}");
    }
    srv_put(b, "],\"refusal\":null}");
}

/* Characters (code points) in s[0..n): its bytes that do not continue a
 * UTF-8 sequence, so a token holding part of a character counts where the
 * character begins. */
static size_t chars_of(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xc0) != 0x80;
    return c;
}

/* "logprobs" of a completion, OpenAI's legacy form, for tokens from..to:
 * {"tokens", "token_logprobs", "top_logprobs" (per token a dict text ->
 * logprob of the most likely alternatives, plus the token itself when it
 * is not among them), "text_offset" (in characters of the choice's text)}.
 * The echoed prompt's first token has null for both. *chars: the offset of
 * lp[from], advanced past lp[to - 1]. null when there are none. */
void srv_openai_comp_logprobs_json(srv_buf *b, const srv *S, const srv_job *j, size_t from, size_t to, size_t *chars) {
    if (!j->req.sample.logprobs || from >= to) {
        srv_put(b, "null");
        return;
    }
    srv_buf tok = {0}, lps = {0}, top = {0}, off = {0};
    char err[E0_ERR_MAX];
    for (size_t i = from; i < to; i++) {
        const e0_token_info *t = &j->lp[i];
        const char *sep = i > from ? "," : "";
        char *text = NULL, *keys[E0_MAX_TOP_LOGPROBS + 1];
        size_t n = 0, lens[E0_MAX_TOP_LOGPROBS + 1];
        if (e0_text_decode(S->o.text, &t->id, 1, &text, &n, err)) n = 0;
        srv_put(&tok, sep);
        srv_json_str(&tok, text ? text : "", n);
        srv_putf(&off, "%s%zu", sep, *chars);
        *chars += chars_of(text, n);
        if (i == 0 && j->n_prompt_lp) { /* nothing comes before the prompt's first token */
            srv_putf(&lps, "%snull", sep);
            srv_putf(&top, "%snull", sep);
            free(text);
            continue;
        }
        srv_putf(&lps, "%s%.9g", sep, (double)t->logprob);
        srv_putf(&top, "%s{", sep);
        int nk = 0;
        bool self = false;
        for (int k = 0; k <= t->n_top; k++) { /* the alternatives, then the token itself */
            if (k == t->n_top && self) break;
            int32_t id = k < t->n_top ? t->top_ids[k] : t->id;
            float lp = k < t->n_top ? t->top_logprobs[k] : t->logprob;
            self |= id == t->id;
            char *kt = NULL;
            size_t kn = 0;
            if (e0_text_decode(S->o.text, &id, 1, &kt, &kn, err)) kn = 0;
            bool dup = false; /* two tokens may read the same: the likelier one keeps the key */
            for (int q = 0; q < nk && !dup; q++) dup = lens[q] == kn && !memcmp(keys[q], kt ? kt : "", kn);
            if (dup) {
                free(kt);
                continue;
            }
            srv_put(&top, nk ? "," : "");
            srv_json_str(&top, kt ? kt : "", kn);
            srv_putf(&top, ":%.9g", (double)lp);
            keys[nk] = kt;
            lens[nk++] = kn;
        }
        srv_put(&top, "}");
        for (int q = 0; q < nk; q++) free(keys[q]);
        free(text);
    }
    srv_put(b, "{\"tokens\":[");
    if (tok.p) srv_buf_put(b, tok.p, tok.len);
    srv_put(b, "],\"token_logprobs\":[");
    if (lps.p) srv_buf_put(b, lps.p, lps.len);
    srv_put(b, "],\"top_logprobs\":[");
    if (top.p) srv_buf_put(b, top.p, top.len);
    srv_put(b, "],\"text_offset\":[");
    if (off.p) srv_buf_put(b, off.p, off.len);
    srv_put(b, "]}");
    free(tok.p);
    free(lps.p);
    free(top.p);
    free(off.p);
}

/* The whole (non-streamed) answer; call with the job done. */
char *srv_openai_answer_json(const srv *S, const srv_job *j, size_t *len) {
    srv_buf b = {0};
    bool chat = j->req.kind == SRV_CHAT;
    srv_openai_head_json(&b, S, j, chat ? "chat.completion" : "text_completion");
    if (chat) {
        srv_put(&b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
        if (j->n_calls && !j->content.len) srv_put(&b, "null"); /* as OpenAI answers a call without text */
        else srv_json_str(&b, j->content.p ? j->content.p : "", j->content.len);
        if (j->n_calls) {
            srv_put(&b, ",\"tool_calls\":[");
            for (int i = 0; i < j->n_calls; i++) {
                if (i) srv_put(&b, ",");
                srv_openai_call_json(&b, &j->calls[i], i, true, false, j->calls[i].args.p, j->calls[i].args.len);
            }
            srv_put(&b, "]");
        }
        if (j->reasoning.p) {
            srv_put(&b, ",\"reasoning_content\":");
            srv_json_str(&b, j->reasoning.p, j->reasoning.len);
        }
        srv_put(&b, "}");
    } else {
        srv_put(&b, ",\"choices\":[{\"index\":0,\"text\":");
        srv_json_str(&b, j->content.p ? j->content.p : "", j->content.len);
    }
    srv_put(&b, ",\"logprobs\":");
    size_t chars = 0;
    if (chat) srv_openai_logprobs_json(&b, S, j, 0, j->n_lp);
    else srv_openai_comp_logprobs_json(&b, S, j, 0, j->n_lp, &chars);
    srv_putf(&b, ",\"finish_reason\":\"%s\"}]", srv_openai_finish(j));
    if (*j->schema_violation) { /* the check after generation failed (docs/design.md §8.6) */
        srv_put(&b, ",\"x_edge0_schema_violation\":");
        srv_json_str(&b, j->schema_violation, strlen(j->schema_violation));
    }
    srv_put(&b, ",\"usage\":");
    srv_openai_usage_json(&b, &j->res);
    srv_put(&b, ",\"timings\":");
    srv_openai_timings_json(&b, j);
    srv_put(&b, "}");
    *len = b.len;
    return b.p;
}
