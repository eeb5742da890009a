/* The scheduler thread, its slots and its queue (engine.h). */
#include "server/engine.h"
#include "server/engine_int.h"

#include "server/prefix.h"
#include "server/think.h"
#include "util/arr.h"
#include "util/err.h"
#include "util/clock.h"
#include "util/sbuf.h"
#include "util/rng.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int srv_buf_put(srv_buf *b, const char *s, size_t n) {
    return buf_append(&b->p, &b->len, &b->cap, s, n);
}

/* ---- the engine ----------------------------------------------------------- */

static void forget_history(srv_slot *sl) {
    cJSON_Delete(sl->conv);
    sl->conv = NULL;
    free(sl->conv_tools);
    sl->conv_tools = NULL;
    free(sl->hist_text);
    sl->hist_text = NULL;
    sl->hist_len = sl->hist_n = sl->conv_n = 0;
}

static bool str_eq(const cJSON *v, const char *s) { return v && cJSON_IsString(v) && !strcmp(v->valuestring, s); }

static const cJSON *nonnull(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* The client's tool_calls (b) are the ones we answered (a): same names, and
 * arguments equal as JSON (a client may send them back as a string or an
 * object); the ids are the client's business. Both may be absent or empty. */
static bool same_calls(const cJSON *a, const cJSON *b) {
    int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0, m = cJSON_IsArray(b) ? cJSON_GetArraySize(b) : 0;
    if (b && !cJSON_IsArray(b)) return false;
    if (n != m) return false;
    const cJSON *x = n ? a->child : NULL, *y = m ? b->child : NULL;
    for (; x && y; x = x->next, y = y->next) {
        const cJSON *fx = nonnull(x, "function"), *fy = nonnull(y, "function");
        if (!fy || !str_eq(nonnull(fy, "name"), nonnull(fx, "name")->valuestring)) return false;
        const cJSON *ax = nonnull(fx, "arguments"), *ay = nonnull(fy, "arguments");
        cJSON *px = cJSON_Parse(ax->valuestring), *py = cJSON_IsString(ay) ? cJSON_Parse(ay->valuestring) : NULL;
        bool eq = cJSON_Compare(px, py ? py : ay, 1);
        cJSON_Delete(px);
        cJSON_Delete(py);
        if (!eq) return false;
    }
    return true;
}

/* Way 1: the request continues the recorded conversation. *tail gets the
 * text to append to the history: "<|im_end|>\n" and the new messages as the
 * template renders them after an assistant turn. They are rendered behind a
 * stand-in user and assistant turn that is cut off again: a template may
 * render a message differently at the start of a list (Qwen3.5's tool
 * results open no user turn there, and it wants a user query). */
static int continuation(const srv_slot *sl, const srv_job *j, char **tail, size_t *tail_len) {
    const cJSON *m2 = j->req.messages;
    int k = cJSON_GetArraySize(sl->conv), n = cJSON_GetArraySize(m2);
    if (!sl->conv || n <= k) return -1;
    if ((sl->conv_tools == NULL) != (j->req.tools_json == NULL) ||
        (sl->conv_tools && strcmp(sl->conv_tools, j->req.tools_json)))
        return -1;
    const cJSON *a = sl->conv->child, *b = m2->child;
    for (int i = 0; i < k - 1; i++, a = a->next, b = b->next)
        if (!cJSON_Compare(a, b, 1)) return -1;
    /* b: the assistant message that should be our answer (a); null content is "" */
    const cJSON *rc = nonnull(b, "reasoning_content"), *cb = nonnull(b, "content");
    if (!str_eq(nonnull(b, "role"), "assistant") ||
        (cb ? !str_eq(cb, nonnull(a, "content")->valuestring) : *nonnull(a, "content")->valuestring) ||
        !same_calls(nonnull(a, "tool_calls"), nonnull(b, "tool_calls")))
        return -1;
    const cJSON *ra = nonnull(a, "reasoning_content");
    if (rc && !(ra ? str_eq(rc, ra->valuestring) : str_eq(rc, ""))) return -1;
    /* the rest: user and tool messages only */
    static const char STANDIN[] = "[{\"role\":\"user\",\"content\":\".\"},{\"role\":\"assistant\",\"content\":\".\"}";
    srv_buf rest = {0};
    int ok = srv_buf_put(&rest, STANDIN, strlen(STANDIN)) == 0;
    for (b = b->next; b && ok; b = b->next) {
        const cJSON *role = nonnull(b, "role");
        if (!str_eq(role, "user") && !str_eq(role, "tool")) ok = 0;
        char *t = ok ? cJSON_PrintUnformatted(b) : NULL;
        ok = t && srv_buf_put(&rest, ",", 1) == 0 && srv_buf_put(&rest, t, strlen(t)) == 0;
        free(t);
    }
    ok = ok && srv_buf_put(&rest, "]", 1) == 0;
    char *r = NULL, err[E0_ERR_MAX];
    size_t rl = 0;
    e0_chat_opts co;
    e0_chat_opts_default(&co);
    co.enable_thinking = j->req.enable_thinking;
    co.format = j->req.chat_format;
    if (ok) ok = e0_chat_render(rest.p, rest.len, &co, &r, &rl, err) == 0;
    free(rest.p);
    /* the stand-in turns end at the second "<|im_end|>\n"; keep that one */
    static const char END[] = "<|im_end|>\n";
    const char *cut = ok ? strstr(r, END) : NULL;
    cut = cut ? strstr(cut + strlen(END), END) : NULL;
    if (cut && (*tail = strdup(cut))) {
        *tail_len = rl - (size_t)(cut - r);
    } else {
        ok = 0;
    }
    free(r);
    return ok ? 0 : -1;
}

/* The ids to run for job j: *ids is j->ids or a malloc'd array (*owned). */
static void choose_prompt(srv_engine *E, const srv_slot *sl, const srv_job *j, int32_t **ids, size_t *n, bool *owned, const char **how) {
    *ids = j->ids;
    *n = j->n_ids;
    *owned = false;
    *how = "prompt";
    size_t hn;
    const int32_t *h = e0_session_history(sl->s, &hn);
    char *tail = NULL;
    size_t tail_len = 0;
    const char *way = NULL;
    if (j->req.kind == SRV_CHAT && sl->conv && hn == sl->conv_n && continuation(sl, j, &tail, &tail_len) == 0) {
        way = "continuation";
    } else if (sl->hist_text && hn == sl->hist_n && hn && j->prompt_len > sl->hist_len &&
               !memcmp(j->prompt, sl->hist_text, sl->hist_len)) {
        tail_len = j->prompt_len - sl->hist_len;
        if ((tail = malloc(tail_len + 1))) memcpy(tail, j->prompt + sl->hist_len, tail_len + 1);
        way = "prefix";
    }
    if (!tail) return;
    int32_t *t = NULL;
    size_t tn = 0;
    char err[E0_ERR_MAX];
    if (e0_text_encode(E->text, tail, tail_len, &t, &tn, err) == 0 && hn + tn < (size_t)E->n_ctx) {
        int32_t *all = malloc((hn + tn) * sizeof *all);
        if (all) {
            if (hn) memcpy(all, h, hn * sizeof *all);
            if (tn) memcpy(all + hn, t, tn * sizeof *all);
            *ids = all;
            *n = hn + tn;
            *owned = true;
            *how = way;
        }
    }
    free(t);
    free(tail);
}

/* Called with j->mu held. */
static int add_text(void *user, int reasoning, const char *s, size_t n) {
    srv_job *j = user;
    return srv_buf_put(reasoning ? &j->reasoning : &j->content, s, n);
}

/* The tool-call parser's sink: the job's content and calls (j->mu held). */
static int tc_content(void *user, const char *s, size_t n) {
    return add_text(((gen_ctx *)user)->j, 0, s, n);
}

static int tc_call(void *user, int index, const char *name, size_t n) {
    gen_ctx *g = user;
    srv_job *j = g->j;
    if (arr_reserve((void **)&j->calls, &j->cap_calls, (size_t)j->n_calls + 1, sizeof *j->calls))
        return -1;
    srv_call *c = &j->calls[j->n_calls];
    memset(c, 0, sizeof *c);
    if (srv_buf_put(&c->name, name, n) || srv_buf_put(&c->args, "", 0)) {
        free(c->name.p);
        free(c->args.p);
        return -1;
    }
    /* ids unique enough to key a conversation by: 24 characters of splitmix64 */
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    memcpy(c->id, "call_", 5);
    for (int i = 0; i < 24; i++) {
        c->id[5 + i] = A[splitmix64(&g->E->id_state) % 62];
    }
    c->id[29] = 0;
    c->content_at = j->content.len;
    j->n_calls++;
    (void)index;
    return 0;
}

static int tc_args(void *user, int index, const char *s, size_t n) {
    srv_job *j = ((gen_ctx *)user)->j;
    srv_call *c = &j->calls[index];
    size_t *cuts = realloc(c->cuts, (size_t)(c->n_cuts + 1) * sizeof *cuts);
    if (!cuts) return -1;
    c->cuts = cuts;
    if (srv_buf_put(&c->args, s, n)) return -1;
    c->cuts[c->n_cuts++] = c->args.len;
    return 0;
}

static const e0_tc_sink TC_SINK = {tc_content, tc_call, tc_args};

/* What the reasoning splitter decides (j->mu held): reasoning to the job,
 * content through the tool-call parser when there is one. */
static int think_out(void *user, int reasoning, const char *s, size_t n) {
    gen_ctx *g = user;
    if (reasoning || !g->tc) return add_text(g->j, reasoning, s, n);
    return e0_tc_feed(g->tc, s, n, &TC_SINK, g);
}

static void snapshot_stats(srv_engine *E) {
    e0_stats st;
    e0_engine_stats(E->eng, &st);
    srv_metrics_engine(E->m, &st);
    if (E->pc) {
        prefix_counters pk;
        prefix_counters_get(E->pc, &pk);
        srv_metrics_prefix(E->m, pk.hits, pk.misses, pk.tokens_reused, pk.entries, pk.bytes, pk.budget,
                           pk.evictions);
    }
    E->stats_t = now_s();
}


static int on_piece(void *user, const e0_token_info *tok, const char *s, size_t n) {
    gen_ctx *g = user;
    srv_job *j = g->j;
    if (tok) { /* a token: the time to the first, then between tokens */
        const double t = now_s();
        srv_metrics_token(g->E->m, g->t_tok == 0, g->t_tok ? t - g->t_tok : t - j->t0);
        g->t_tok = t;
    }
    if (srv_buf_put(&g->raw, s, n)) g->oom = true;
    pthread_mutex_lock(&j->mu);
    if (tok && j->req.sample.logprobs && srv_add_logprob(j, tok)) g->oom = true;
    if (srv_client_gone(j->fd)) {
        j->cancel = true;
        j->fd = -1;
    }
    bool stop = j->cancel || g->oom;
    if (!stop) {
        const bool in_think = srv_think_in_reasoning(&g->think);
        int rc = j->req.kind == SRV_CHAT ? srv_think_feed(&g->think, s, n, think_out, g) : add_text(j, 0, s, n);
        if (rc) stop = g->oom = true;
        /* a token of the thinking: inside the block before or after it (its tags count) */
        if (tok && j->req.kind == SRV_CHAT && (in_think || srv_think_in_reasoning(&g->think))) j->reasoning_tokens++;
        if (g->tc && e0_tc_full(g->tc)) stop = true; /* parallel_tool_calls false: one call, then done */
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    if (now_s() - g->E->stats_t > 1.0) snapshot_stats(g->E);
    return stop;
}

/* After a generation: remember what the session holds for the next request. */
static void record_history(srv_engine *E, srv_slot *sl, const srv_job *j, size_t n_prompt, const gen_ctx *g, int rc) {
    forget_history(sl);
    if (rc) {
        e0_session_reset(sl->s); /* a failed evaluation leaves no usable history */
        return;
    }
    size_t hn, len;
    const int32_t *h = e0_session_history(sl->s, &hn);
    char err[E0_ERR_MAX], *text = NULL;
    if (!hn || e0_text_decode(E->text, h, hn, &text, &len, err)) return;
    sl->hist_text = text;
    sl->hist_len = len;
    sl->hist_n = hn;
    /* A conversation continues only from an answer the client saw whole:
     * the generated ids must decode to exactly the text that was sent. */
    if (j->req.kind != SRV_CHAT || j->prefilled || j->res.finish == E0_FINISH_CANCELLED || g->oom || hn < n_prompt)
        return;
    char *gen = NULL;
    size_t gl = 0;
    bool clean = e0_text_decode(E->text, h + n_prompt, hn - n_prompt, &gen, &gl, err) == 0 && gl == g->raw.len &&
                 (!gl || !memcmp(gen, g->raw.p, gl));
    free(gen);
    if (!clean) return;
    cJSON *conv = cJSON_Duplicate(j->req.messages, 1), *a = cJSON_CreateObject();
    bool ok = conv && a && cJSON_AddStringToObject(a, "role", "assistant") &&
              cJSON_AddStringToObject(a, "content", j->content.p ? j->content.p : "") &&
              (!g->think.has_reasoning ||
               cJSON_AddStringToObject(a, "reasoning_content", j->reasoning.p ? j->reasoning.p : ""));
    /* the calls as the client got them: {"function": {"name", "arguments"}} */
    cJSON *calls = NULL;
    if (ok && j->n_calls) ok = (calls = cJSON_AddArrayToObject(a, "tool_calls")) != NULL;
    for (int i = 0; ok && i < j->n_calls; i++) {
        cJSON *c = cJSON_CreateObject();
        if (!c || !cJSON_AddItemToArray(calls, c)) {
            cJSON_Delete(c);
            ok = false;
            break;
        }
        cJSON *f = cJSON_AddObjectToObject(c, "function");
        ok = f && cJSON_AddStringToObject(f, "name", j->calls[i].name.p) &&
             cJSON_AddStringToObject(f, "arguments", j->calls[i].args.p);
    }
    ok = ok && cJSON_AddItemToArray(conv, a);
    if (!ok) {
        cJSON_Delete(a);
        cJSON_Delete(conv);
        return;
    }
    if (j->req.tools_json && !(sl->conv_tools = strdup(j->req.tools_json))) {
        cJSON_Delete(conv);
        return;
    }
    sl->conv = conv;
    sl->conv_n = hn;
}

static void finish_job(srv_engine *E, srv_job *j, int status, const char *msg) {
    pthread_mutex_lock(&j->mu);
    j->status = status;
    if (msg) snprintf(j->err, sizeof j->err, "%s", msg);
    j->seconds = now_s() - j->t0;
    j->done = true;
    j->fd = -1;
    bool over = j->conn_over;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (over) srv_log_job(j);
    pthread_mutex_lock(&E->mu);
    E->avg_s = E->avg_s ? 0.8 * E->avg_s + 0.2 * j->seconds : j->seconds;
    pthread_mutex_unlock(&E->mu);
}

/* ---- the prefix cache (prefix.h) ------------------------------------------- */

/* Offers the slot's session as it stands (the end of a prompt, or of an
 * answer) to the prefix cache. A copy of its KV rows and states: tens of
 * milliseconds on the 35B shape, against the seconds of prefill a later
 * request resuming here saves. */
static void cache_put(srv_engine *E, srv_slot *sl) {
    if (!E->pc || e0_session_pos(sl->s) < PREFIX_MIN_TOKENS) return;
    e0_snapshot *snap;
    char err[E0_ERR_MAX];
    if (e0_session_snapshot(sl->s, &snap, err) == 0) prefix_put(E->pc, snap);
}

/* Before the slot's prompt is evaluated: the longest cached prefix of it,
 * restored into the slot's session when longer than what the session
 * holds itself. The slot's conversation record then no longer describes
 * its session. */
static void cache_restore(srv_engine *E, srv_slot *sl) {
    if (!E->pc) return;
    char err[E0_ERR_MAX];
    if (prefix_restore(E->pc, sl->s, sl->ids, sl->n, err) > 0) {
        forget_history(sl);
        sl->how = "cache";
    }
}

/* ---- slots and the scheduler ---------------------------------------------- */

/* Gives the slot back (its session keeps its history for the next request). */
static void slot_release(srv_engine *E, srv_slot *sl) {
    srv_job *j = sl->j;
    sl->g = NULL;
    sl->ids = NULL;
    sl->n = 0;
    sl->owned = false;
    sl->decoding = false;
    memset(&sl->gc, 0, sizeof sl->gc);
    pthread_mutex_lock(&E->mu);
    sl->j = NULL;
    E->active--;
    pthread_cond_broadcast(&E->cv); /* srv_engine_drain waits for this */
    pthread_mutex_unlock(&E->mu);
    srv_job_unref(j);
}

/* The check after generation (docs/design.md §8.6.1): a json_schema
 * answer, or forced tool calls' arguments against their tools' parameters;
 * what fails goes to j->schema_violation (j->mu held). */
static void check_answer(srv_job *j) {
    char *why = j->schema_violation;
    size_t n = sizeof j->schema_violation;
    if (j->req.check_schema) {
        cJSON *v = cJSON_ParseWithLength(j->content.p ? j->content.p : "", j->content.len);
        if (!v) snprintf(why, n, "the answer is not JSON");
        else e0_schema_check(j->req.check_schema, v, why, n);
        cJSON_Delete(v);
    }
    for (int i = 0; j->req.force_tools && i < j->n_calls && !*why; i++) {
        const srv_call *c = &j->calls[i];
        const cJSON *t, *params = NULL;
        cJSON_ArrayForEach(t, j->req.tools) {
            const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function"), *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
            if (cJSON_IsString(nm) && c->name.p && !strcmp(nm->valuestring, c->name.p))
                params = cJSON_GetObjectItemCaseSensitive(f, "parameters");
        }
        cJSON *v = params ? cJSON_ParseWithLength(c->args.p ? c->args.p : "", c->args.len) : NULL;
        char w[128];
        if (v && e0_schema_check(params, v, w, sizeof w)) snprintf(why, n, "tool call %d (%.40s): %.80s", i, c->name.p, w);
        cJSON_Delete(v);
    }
}

/* The end of the slot's request: its answer's last state, what the session
 * now holds, the metrics; then the slot is free. */
static void slot_end(srv_engine *E, srv_slot *sl, int rc, const char *err, const e0_gen_result *gres) {
    srv_job *j = sl->j;
    gen_ctx *g = &sl->gc;
    e0_gen_result res = *gres;
    pthread_mutex_lock(&j->mu);
    if (!rc && j->req.kind == SRV_CHAT && (srv_think_finish(&g->think, think_out, g) ||
                                           (g->tc && e0_tc_finish(g->tc, &TC_SINK, g))))
        g->oom = true;
    /* the one call parallel_tool_calls=false allows is complete: a normal end */
    if (!rc && g->tc && e0_tc_full(g->tc) && res.finish == E0_FINISH_CANCELLED && !j->cancel) res.finish = E0_FINISH_STOP;
    if (j->n_prompt_lp) { /* the prompt was evaluated here, not reused */
        res.reused_tokens = 0;
        res.prefill_s += sl->echo_s;
    }
    j->res = res;
    j->finish_reason = res.finish == E0_FINISH_STOP      ? (j->n_calls ? "tool_calls" : "stop")
                       : res.finish == E0_FINISH_CANCELLED ? "cancelled"
                                                           : "length";
    if (!rc && res.finish == E0_FINISH_STOP) check_answer(j);
    pthread_mutex_unlock(&j->mu);
    e0_tc_parser_free(g->tc);
    /* the answer's end: the conversation's next turn resumes here */
    if (!rc && res.finish != E0_FINISH_CANCELLED && !g->oom) cache_put(E, sl);
    record_history(E, sl, j, sl->n, g, rc);
    if (sl->owned) free(sl->ids);
    e0_gen_free(sl->g);
    srv_think_free(&g->think);
    free(g->raw.p);
    snapshot_stats(E);
    pthread_mutex_lock(&E->mu);
    bool stopping = E->stopping;
    pthread_mutex_unlock(&E->mu);
    j->reuse = sl->how;
    if (stopping && res.finish == E0_FINISH_CANCELLED) finish_job(E, j, 503, "the server is shutting down");
    else if (rc == E0_ERANGE) finish_job(E, j, 400, err);
    else if (rc) finish_job(E, j, 500, err);
    else if (g->oom) finish_job(E, j, 500, "out of memory while collecting the answer");
    else finish_job(E, j, 200, NULL);
    srv_metrics_generation(E->m, res.prompt_tokens, res.reused_tokens, res.completion_tokens,
                           res.finish == E0_FINISH_CANCELLED, j->seconds);
    if (j->req.grammar) srv_metrics_grammar(E->m, &res, j->req.grammar_compile_s);
    slot_release(E, sl);
}

/* Starts the slot's new request: its prompt (sl->ids, chosen by
 * pick_slot, or the echo's own evaluation), the splitters, the generation.
 * A scripted generate function runs the whole request here; the
 * step-able generator leaves it prefilling for the scheduler. */
static void slot_start(srv_engine *E, srv_slot *sl) {
    srv_job *j = sl->j;
    pthread_mutex_lock(&E->mu);
    bool stopping = E->stopping; /* srv_engine_stop may have missed a job not yet in a slot */
    pthread_mutex_unlock(&E->mu);
    pthread_mutex_lock(&j->mu);
    if (stopping) j->cancel = true;
    bool cancelled = j->cancel;
    pthread_mutex_unlock(&j->mu);
    if (cancelled) {
        j->res.finish = E0_FINISH_CANCELLED;
        j->finish_reason = "cancelled";
        finish_job(E, j, stopping ? 503 : 200, stopping ? "the server is shutting down" : NULL);
        srv_metrics_generation(E->m, 0, 0, 0, 1, now_s() - j->t0);
        if (sl->owned) free(sl->ids);
        slot_release(E, sl);
        return;
    }
    char err[E0_ERR_MAX] = "";
    int rc = 0;
    sl->echo_s = 0;
    bool echo = j->req.kind == SRV_COMPLETION && j->req.echo;
    if (echo && j->req.sample.logprobs) rc = srv_prompt_logprobs(E, sl, j, &sl->echo_s, err); /* the prompt's own ids */
    if (echo) { /* the text starts with the prompt */
        pthread_mutex_lock(&j->mu);
        if (srv_buf_put(&j->content, j->prompt, j->prompt_len) && !rc) {
            rc = E0_ENOMEM;
            snprintf(err, sizeof err, "out of memory");
        }
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
    }
    gen_ctx *g = &sl->gc;
    *g = (gen_ctx){.E = E, .j = j};
    /* a prompt that opened the think block (Qwen3.5's): the answer starts as reasoning */
    static const char OPENED[] = "<think>\n";
    bool opened = j->req.kind == SRV_CHAT && j->prompt_len >= strlen(OPENED) &&
                  !memcmp(j->prompt + j->prompt_len - strlen(OPENED), OPENED, strlen(OPENED));
    if (opened)
        srv_think_init_opened(&g->think);
    else
        srv_think_init(&g->think);
    /* A grammar constrains the answer, not the reasoning: it starts after
     * the think block the prompt opened, or one the model may open itself
     * (Qwen3 with thinking on); the block is closed after a budget. */
    j->req.sample.grammar_root = opened ? E0_GRAMMAR_THINK_OPEN
                                 : j->req.kind == SRV_CHAT && j->req.enable_thinking &&
                                         j->req.chat_format == E0_CHAT_QWEN3
                                     ? E0_GRAMMAR_THINK_MAY
                                     : E0_GRAMMAR_PLAIN;
    if (!rc && j->req.kind == SRV_CHAT && j->req.parse_tools)
        rc = e0_tc_parser_new(&g->tc, j->req.tools, j->req.parallel_tool_calls ? 1 << 20 : 1, err);
    e0_gen_result res = {0};
    if (!rc && E->generate) { /* a test's stand-in: the whole request, here */
        rc = E->generate(sl->s, E->text, sl->ids, sl->n, &j->req.sample, on_piece, g, &res, err);
        slot_end(E, sl, rc, err, &res);
        return;
    }
    if (!rc && !(echo && j->req.sample.logprobs)) cache_restore(E, sl);
    if (!rc) rc = e0_gen_begin(&sl->g, sl->s, E->text, sl->ids, sl->n, &j->req.sample, on_piece, g, err);
    if (rc) {
        res.prompt_tokens = (int32_t)sl->n;
        slot_end(E, sl, rc, err, &res);
    }
    /* else: prefilling, in the scheduler's steps */
}

/* After the slot's logits are in: its next token, or its end. */
static void slot_advance(srv_engine *E, srv_slot *sl) {
    char err[E0_ERR_MAX] = "";
    int rc = e0_gen_step(sl->g, &sl->next, err);
    if (rc == E0_GEN_EVAL) {
        sl->decoding = true;
        return;
    }
    slot_end(E, sl, rc < 0 ? rc : 0, err, e0_gen_get_result(sl->g));
}

/* A client that left, or a request cancelled: whether the slot's job is to end. */
static bool slot_cancelled(srv_slot *sl) {
    srv_job *j = sl->j;
    pthread_mutex_lock(&j->mu);
    if (srv_client_gone(j->fd)) {
        j->cancel = true;
        j->fd = -1;
    }
    bool cancel = j->cancel;
    pthread_mutex_unlock(&j->mu);
    return cancel;
}

/* Starts a prefill pass over the next chunk (E->prefill_chunk ids) of every
 * slot still prefilling, oldest admitted first, as many as the first one's
 * scratch takes (n_batch ids in all, E0_PASS_MAX slots): one read of the
 * weights (and of each routed expert) for all of them. Each chunk's
 * arithmetic is that of its pass alone (model.h), so answers do not depend
 * on which chunks share a pass. A cancelled request ends here, before its
 * next chunk; one cancelled while its pass is paused is ended after that
 * pass, when the next one is formed. Returns whether a pass started. */
static bool prefill_begin(srv_engine *E, size_t cap) {
    srv_slot *cand[E0_BATCH_MAX_SLOTS];
    int nc = 0;
    for (int i = 0; i < E->n_slots; i++) {
        srv_slot *c = &E->slots[i];
        if (!c->j || !c->g || c->decoding) continue;
        if (slot_cancelled(c)) {
            e0_gen_result res = *e0_gen_get_result(c->g);
            res.finish = E0_FINISH_CANCELLED;
            slot_end(E, c, 0, NULL, &res);
            continue;
        }
        int k = nc++;
        for (; k > 0 && cand[k - 1]->admitted > c->admitted; k--) /* admission order */
            cand[k] = cand[k - 1];
        cand[k] = c;
    }
    if (!nc) return false;
    e0_session *ss[E0_PASS_MAX];
    const int32_t *ids[E0_PASS_MAX];
    int n = 0;
    size_t total = 0;
    for (int i = 0; i < nc && n < E0_PASS_MAX; i++) {
        const int32_t *id;
        bool last;
        const size_t m = e0_gen_prefill_next(cand[i]->g, (size_t)E->prefill_chunk, &id, &last);
        if (!m) continue;
        if (n && (total + m > (size_t)e0_session_n_batch(ss[0]) || total + m > cap)) break;
        ss[n] = cand[i]->s;
        ids[n] = id;
        E->pass_sl[n] = cand[i];
        E->pass_m[n] = m;
        E->pass_last[n++] = last;
        total += m;
    }
    if (!n) return false;
    char err[E0_ERR_MAX] = "";
    int rc = e0_pass_begin(E->pass, ss, ids, E->pass_m, n, err);
    if (rc && n > 1) /* e0_gen_begin checked each prompt: should a check still fail, the first alone says which */
        rc = e0_pass_begin(E->pass, ss, ids, E->pass_m, n = 1, err);
    if (rc) {
        slot_end(E, E->pass_sl[0], rc, err, e0_gen_get_result(E->pass_sl[0]->g));
        return false;
    }
    E->pass_n = n;
    srv_metrics_prefill_pass(E->m, n);
    return true;
}

/* The pacing's moving average: the first sample, then 30% of each new one. */
static void ema(double *avg, double sample) { *avg = *avg ? 0.7 * *avg + 0.3 * sample : sample; }

/* The ids a prefill pass may hold while streams decode: as many as keep its
 * slowest half layer within `budget` seconds (whole chunks, at least one). */
static size_t pass_cap(const srv_engine *E, double budget) {
    double worst = 0;
    for (int h = 0; h < 2 * E->n_layers; h++)
        if (E->half_id_s[h] > worst) worst = E->half_id_s[h];
    return worst > 0 ? (size_t)(budget / worst) : SIZE_MAX;
}

/* The prefill pass (a new one over the next chunks of the slots
 * prefilling, or the one paused); each slot whose prompt it finished takes
 * its first token. */
static void prefill_step(srv_engine *E) {
    bool decoding = false;
    for (int i = 0; i < E->n_slots; i++) {
        srv_slot *c = &E->slots[i];
        if (c->j && c->g && c->decoding) decoding = true;
    }
    /* With streams decoding, the pass runs half layer by half layer for
     * about the time of one sequence's decode pass (each next half's cost
     * predicted from the times measured per half and id; one at least), then
     * the decode pass runs: while prompts prefill, a running stream's token
     * takes its batch's pass plus about one single-sequence pass. Only the
     * pauses and which chunks share a pass depend on the timing, never the
     * arithmetic (pass_step, pass_begin). */
    const bool paced = decoding && E->prefill_layers == 0 && E->decode_pass_s > 0;
    const double budget = E->solo_pass_s > 0 ? E->solo_pass_s : E->decode_pass_s;
    if (!E->pass_n && !prefill_begin(E, paced ? pass_cap(E, budget) : SIZE_MAX)) return;
    int halves = 0; /* the most to run now; 0: all that are left */
    if (decoding && E->prefill_layers > 0) halves = e0_pass_layer_halves(E->pass, E->prefill_layers);
    else if (paced) halves = 2 * E->n_layers;
    char err[E0_ERR_MAX] = "";
    float *lg[E0_PASS_MAX];
    for (int i = 0; i < E->pass_n; i++)
        lg[i] = E->pass_last[i] ? e0_gen_logits(E->pass_sl[i]->g) : NULL;
    const int T = e0_pass_tokens(E->pass);
    const double t0 = now_s();
    bool done = false;
    int rc = 0;
    for (int ran = 0; !rc && !done && (!halves || ran < halves); ran++) {
        const int h = e0_pass_next_half(E->pass);
        if (paced && ran && now_s() - t0 + E->half_id_s[h] * T > budget) break;
        const double th = now_s();
        rc = e0_pass_step_halves(E->pass, 1, lg, &done, err);
        if (rc) break;
        const double per = (now_s() - th) / T;
        ema(&E->half_id_s[h], per);
    }
    if (!rc && !done) return;
    const int n = E->pass_n;
    E->pass_n = 0;
    for (int i = 0; i < n; i++) {
        srv_slot *sl = E->pass_sl[i];
        if (rc) { /* the pass reset every session in it */
            slot_end(E, sl, rc, err, e0_gen_get_result(sl->g));
            continue;
        }
        e0_gen_prefill_done(sl->g, E->pass_m[i]);
        if (!e0_gen_prefill_left(sl->g)) {
            cache_put(E, sl); /* the prompt's end: a retry or a branch resumes here */
            slot_advance(E, sl);
        }
    }
}

/* One decode pass: the next id of every decoding slot, with the MTP
 * block's draft after it where the slot's session drafts (e0_gen_pass_ids:
 * each draft runs first, one session after another), through
 * e0_session_verify_batch; then each slot's next token, or two, from its
 * rows (e0_gen_pass_done). A failed pass (expert bytes that cannot be read)
 * has reset every session in it: each of its requests ends with the error. */
static void decode_step(srv_engine *E) {
    int n = 0, ids = 0;
    char err[E0_ERR_MAX] = "";
    const double t0 = now_s();
    for (int i = 0; i < E->n_slots; i++) {
        srv_slot *sl = &E->slots[i];
        if (!sl->j || !sl->g || !sl->decoding) continue;
        const int k = e0_gen_pass_ids(sl->g, E->pass_ids + ids, err);
        if (k < 0) {
            slot_end(E, sl, k, err, e0_gen_get_result(sl->g));
            continue;
        }
        E->pass_s[n] = sl->s;
        E->pass_cnt[n] = k;
        E->pass_slot[n++] = i;
        ids += k;
    }
    if (!n) return;
    int rc = e0_session_verify_batch(E->pass_s, E->pass_ids, E->pass_cnt, (size_t)n, E->logits, err);
    const double dt = now_s() - t0;
    srv_metrics_batch(E->m, n, dt);
    ema(&E->decode_pass_s, dt);
    if (n == 1) ema(&E->solo_pass_s, dt);
    for (int k = 0, row = 0; k < n; row += E->pass_cnt[k++]) {
        srv_slot *sl = &E->slots[E->pass_slot[k]];
        if (rc) {
            slot_end(E, sl, rc, err, e0_gen_get_result(sl->g));
            continue;
        }
        char serr[E0_ERR_MAX] = "";
        const int r = e0_gen_pass_done(sl->g, E->logits + (size_t)row * (size_t)E->vocab, &sl->next, serr);
        if (r != E0_GEN_EVAL) slot_end(E, sl, r < 0 ? r : 0, serr, e0_gen_get_result(sl->g));
    }
}

/* How much of the slot's history a prompt for job j would reuse, and the
 * ids to run there (*ids owned when *owned). Models with recurrent layers
 * reuse the whole history or nothing (session_prepare). */
static size_t slot_reuse(srv_engine *E, srv_slot *sl, const srv_job *j, int32_t **ids, size_t *n, bool *owned,
                         const char **how) {
    choose_prompt(E, sl, j, ids, n, owned, how);
    size_t hn, common = 0;
    const int32_t *h = e0_session_history(sl->s, &hn);
    while (common < hn && common < *n && h[common] == (*ids)[common]) common++;
    return E->recurrent && common < hn ? 0 : common;
}

/* The free slot for job j: the one whose history is the longest prefix of
 * its prompt (continuation and prefix reuse keep working per slot), else
 * the least recently used one. Sets the slot's ids (and j's place in it). */
static srv_slot *pick_slot(srv_engine *E, srv_job *j) {
    srv_slot *best = NULL;
    size_t best_reuse = 0;
    bool echo_lp = j->req.kind == SRV_COMPLETION && j->req.echo && j->req.sample.logprobs;
    for (int i = 0; i < E->n_slots; i++) {
        srv_slot *sl = &E->slots[i];
        if (sl->j) continue;
        int32_t *ids = j->ids;
        size_t n = j->n_ids, reuse = 0;
        bool owned = false;
        const char *how = "prompt";
        if (!echo_lp) reuse = slot_reuse(E, sl, j, &ids, &n, &owned, &how);
        bool better = !best || reuse > best_reuse || (reuse == best_reuse && sl->admitted < best->admitted);
        if (!better) {
            if (owned) free(ids);
            continue;
        }
        if (best) { /* no longer the choice */
            if (best->owned) free(best->ids);
            best->ids = NULL;
            best->owned = false;
        }
        best = sl;
        best_reuse = reuse;
        sl->ids = ids;
        sl->n = n;
        sl->owned = owned;
        sl->how = how;
    }
    return best;
}

static void *engine_main(void *arg) {
    srv_engine *E = arg;
    for (;;) {
        srv_job *take[E0_BATCH_MAX_SLOTS], *refuse = NULL;
        int n_take = 0;
        pthread_mutex_lock(&E->mu);
        /* idle, or gathering: the first E->gather requests are admitted together */
        while (!E->stopping && ((!E->active && !E->head) || (E->gather && E->depth < E->gather)))
            pthread_cond_wait(&E->cv, &E->mu);
        E->gather = 0;
        if (E->stopping && !E->active && !E->head) {
            pthread_mutex_unlock(&E->mu);
            break;
        }
        /* admit queued jobs into free slots between steps; while stopping, refuse them */
        while (E->head && (E->stopping || E->draining || E->active < E->n_slots)) {
            srv_job *j = E->head;
            E->head = j->next;
            if (!E->head) E->tail = NULL;
            E->depth--;
            if (E->stopping || E->draining) {
                j->next = refuse;
                refuse = j;
            } else {
                E->active++;
                take[n_take++] = j;
            }
        }
        pthread_mutex_unlock(&E->mu);
        while (refuse) {
            srv_job *j = refuse;
            refuse = j->next;
            finish_job(E, j, 503, "the server is shutting down");
            srv_job_unref(j);
        }
        for (int t = 0; t < n_take; t++) {
            srv_slot *sl = pick_slot(E, take[t]);
            pthread_mutex_lock(&E->mu);
            sl->j = take[t];
            pthread_mutex_unlock(&E->mu);
            sl->admitted = ++E->clock;
            slot_start(E, sl);
        }
        prefill_step(E);
        decode_step(E);
    }
    return NULL;
}

int srv_engine_start(srv_engine **out, const srv_engine_opts *o, srv_metrics *m, char *err) {
    *out = NULL;
    srv_engine *E = calloc(1, sizeof *E);
    if (!E) {
        snprintf(err, E0_ERR_MAX, "out of memory");
        return E0_ENOMEM;
    }
    E->eng = o->engine;
    E->text = o->text;
    E->n_ctx = o->n_ctx;
    E->m = m;
    E->generate = o->generate;
    /* a scripted stand-in runs a whole request at once: one slot */
    E->n_slots = o->generate || o->parallel < 1 ? 1 : o->parallel > E0_BATCH_MAX_SLOTS ? E0_BATCH_MAX_SLOTS : o->parallel;
    E->prefill_chunk = o->prefill_chunk > 0 ? o->prefill_chunk : SRV_PREFILL_CHUNK;
    prefix_opts po;
    prefix_opts_default(&po);
    po.budget = o->cache_ram;
    int prc = o->cache_ram && !o->generate ? prefix_new(&E->pc, &po, err) : 0;
    if (prc) {
        free(E);
        return prc;
    }
    e0_model_info mi;
    e0_engine_info(E->eng, &mi);
    E->vocab = mi.vocab_size;
    E->prefill_layers = o->prefill_layers;
    E->gather = o->gather > 0 ? o->gather : 0;
    E->n_layers = mi.n_layers;
    E->half_id_s = calloc(2 * (size_t)mi.n_layers, sizeof *E->half_id_s);
    E->recurrent = strcmp(mi.family, "qwen3_moe") != 0; /* the hybrids' DeltaNet layers cannot rewind */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    E->id_state = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 32);
    E->capacity = o->max_queue;
    const size_t N = (size_t)E->n_slots;
    E->slots = calloc(N, sizeof *E->slots);
    E->logits = malloc(2 * N * (size_t)E->vocab * sizeof *E->logits);
    E->pass_s = calloc(N, sizeof *E->pass_s);
    E->pass_ids = calloc(2 * N, sizeof *E->pass_ids);
    E->pass_cnt = calloc(N, sizeof *E->pass_cnt);
    E->pass_slot = calloc(N, sizeof *E->pass_slot);
    int rc = !E->slots || !E->logits || !E->pass_s || !E->pass_ids || !E->pass_cnt || !E->pass_slot ||
                     !E->half_id_s
                 ? E0_ENOMEM
                 : 0;
    if (rc) snprintf(err, E0_ERR_MAX, "out of memory for %d slots", E->n_slots);
    if (!rc) rc = e0_pass_new(&E->pass, err);
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = o->n_ctx;
    /* so.mtp (default 1): each slot's session drafts when the engine computes the MTP block */
    for (int i = 0; !rc && i < E->n_slots; i++) {
        if ((rc = e0_session_new(E->eng, &so, &E->slots[i].s, err)))
            e0_wrap(err, rc, "slot %d of %d (each a session of %d positions; try a smaller --parallel or --ctx)", i + 1,
                    E->n_slots, (int)o->n_ctx);
    }
    pthread_mutex_init(&E->mu, NULL);
    pthread_cond_init(&E->cv, NULL);
    if (!rc) {
        srv_metrics_slots(m, E->n_slots);
        snapshot_stats(E);
        if ((rc = pthread_create(&E->th, NULL, engine_main, E))) {
            snprintf(err, E0_ERR_MAX, "cannot start the engine thread: %s", strerror(rc));
            rc = E0_ENOMEM;
        }
    }
    if (rc) {
        srv_engine_free(E);
        return rc;
    }
    *out = E;
    return 0;
}

int srv_engine_slots(const srv_engine *E) { return E->n_slots; }

int srv_engine_submit(srv_engine *E, srv_job *j) {
    pthread_mutex_lock(&E->mu);
    int rc = E->stopping || E->draining ? -2 : E->depth >= E->capacity ? -1 : 0;
    if (!rc) {
        srv_job_ref(j);
        j->next = NULL;
        if (E->tail) E->tail->next = j;
        else E->head = j;
        E->tail = j;
        E->depth++;
        pthread_cond_signal(&E->cv);
    }
    pthread_mutex_unlock(&E->mu);
    return rc;
}

void srv_engine_queue_info(srv_engine *E, int *depth, int *running, int *capacity) {
    pthread_mutex_lock(&E->mu);
    *depth = E->depth;
    *running = E->active;
    *capacity = E->capacity;
    pthread_mutex_unlock(&E->mu);
}

int srv_engine_retry_after(srv_engine *E) {
    pthread_mutex_lock(&E->mu);
    /* the queue drains n_slots requests at a time */
    double s = E->avg_s * (E->depth + 1) / 2 / E->n_slots;
    pthread_mutex_unlock(&E->mu);
    return s < 1 ? 1 : s > 600 ? 600 : (int)(s + 0.5);
}

void srv_engine_drain(srv_engine *E, double grace_s) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    const double end = (double)until.tv_sec + (double)until.tv_nsec * 1e-9 + (grace_s > 0 ? grace_s : 0);
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    pthread_mutex_lock(&E->mu);
    E->draining = true;
    pthread_cond_broadcast(&E->cv);
    while ((E->active || E->head) && !E->stopping)
        if (pthread_cond_timedwait(&E->cv, &E->mu, &until) == ETIMEDOUT) break;
    pthread_mutex_unlock(&E->mu);
}

void srv_engine_stop(srv_engine *E) {
    pthread_mutex_lock(&E->mu);
    if (E->stopping) {
        pthread_mutex_unlock(&E->mu);
        return;
    }
    E->stopping = true;
    for (int i = 0; i < E->n_slots; i++)
        if (E->slots[i].j) srv_job_cancel(E->slots[i].j);
    pthread_cond_broadcast(&E->cv);
    pthread_mutex_unlock(&E->mu);
    pthread_join(E->th, NULL);
}

void srv_engine_free(srv_engine *E) {
    if (!E) return;
    for (int i = 0; E->slots && i < E->n_slots; i++) {
        forget_history(&E->slots[i]);
        e0_session_free(E->slots[i].s);
    }
    free(E->slots);
    free(E->logits);
    free(E->pass_s);
    free(E->pass_ids);
    free(E->pass_cnt);
    free(E->pass_slot);
    free(E->half_id_s);
    e0_pass_free(E->pass);
    prefix_free(E->pc);
    pthread_cond_destroy(&E->cv);
    pthread_mutex_destroy(&E->mu);
    free(E);
}
