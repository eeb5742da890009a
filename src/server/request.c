/* Request parsing and validation for /v1/chat/completions and /v1/completions.
 *
 * Every check happens here, on the connection thread, before a request is
 * queued: the engine thread only ever sees requests that are well-formed.
 * Details that are easy to get wrong:
 *  - cJSON keeps numbers as doubles: an "integer" field must be finite and
 *    integral, and in range before it is cast.
 *  - null means "absent" (clients send "stop": null, "tools": null).
 *  - seed 0 is a real seed to a client but "random" to e0_sample_opts, so it
 *    maps to a fixed non-zero value.
 *  - empty stop strings are dropped (the stop matcher rejects them), not errors.
 */
#include "server/request.h"

#include "util/clock.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_fail(srv_error *e, int status, const char *type, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

#define BAD "invalid_request_error"

void srv_defaults_init(srv_defaults *d) {
    e0_sample_opts_default(&d->sample);
    d->enable_thinking = true;
    d->chat_format = E0_CHAT_QWEN3;
}

/* The member `name` of `o` unless it is absent or null. */
static const cJSON *field(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int want_number(const cJSON *o, const char *name, double lo, double hi, bool lo_open, double *out,
                       srv_error *e) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v)) return srv_fail(e, 400, BAD, "invalid_type", name, "'%s' must be a number", name);
    double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo))
        return srv_fail(e, 400, BAD, "invalid_value", name, "'%s' must be in %c%g, %g]", name, lo_open ? '(' : '[',
                        lo, hi);
    *out = x;
    return 1;
}

static int want_int(const cJSON *o, const char *name, double lo, double hi, double *out, srv_error *e) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble)
        return srv_fail(e, 400, BAD, "invalid_type", name, "'%s' must be an integer", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return srv_fail(e, 400, BAD, "invalid_value", name, "'%s' must be an integer in [%.0f, %.0f]", name, lo, hi);
    *out = v->valuedouble;
    return 1;
}

static int want_bool(const cJSON *o, const char *name, bool *out, srv_error *e) {
    const cJSON *v = field(o, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return srv_fail(e, 400, BAD, "invalid_type", name, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 1;
}

static bool str_is(const cJSON *v, const char *s) {
    return v && cJSON_IsString(v) && !strcmp(v->valuestring, s);
}

/* Fields OpenAI defines that edge0 does not implement: present with anything
 * but their neutral value, they are a 400 naming them, not ignored. */
static int refuse_unsupported(const cJSON *body, srv_kind kind, srv_error *e) {
    static const char WHY[] = "is not supported by edge0";
    const cJSON *v;
    if ((v = field(body, "response_format"))) {
        const cJSON *t = cJSON_IsObject(v) ? field(v, "type") : NULL;
        if (!t || !cJSON_IsString(t))
            return srv_fail(e, 400, BAD, "invalid_type", "response_format",
                            "'response_format' must be an object with a string 'type'");
        if (strcmp(t->valuestring, "text") && strcmp(t->valuestring, "json_object") &&
            strcmp(t->valuestring, "json_schema"))
            return srv_fail(e, 400, BAD, "unsupported_value", "response_format",
                            "'response_format': type \"%.64s\" is not supported; \"text\", \"json_object\" and "
                            "\"json_schema\" are",
                            t->valuestring);
    }
    /* logprobs: parse_logprobs (chat), parse_completion_logprobs (completions, with echo) */
    if (kind == SRV_CHAT && (v = field(body, "echo")) && !cJSON_IsFalse(v))
        return srv_fail(e, 400, BAD, "unsupported_value", "echo", "'echo' belongs to /v1/completions");
    if ((v = field(body, "suffix")) && !(cJSON_IsString(v) && !*v->valuestring))
        return srv_fail(e, 400, BAD, "unsupported_value", "suffix",
                        "'suffix' (insertion after the completion) %s: the Qwen models have no fill-in-the-middle "
                        "prompt here",
                        WHY);
    if ((v = field(body, "best_of")) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
        return srv_fail(e, 400, BAD, "unsupported_value", "best_of", "'best_of' must be 1: one candidate per request");
    if ((v = field(body, "logit_bias")) && !(cJSON_IsObject(v) && !v->child))
        return srv_fail(e, 400, BAD, "unsupported_value", "logit_bias", "'logit_bias' %s yet", WHY);
    if ((v = field(body, "store")) && !cJSON_IsFalse(v))
        return srv_fail(e, 400, BAD, "unsupported_value", "store", "'store': edge0 does not store completions");
    if ((v = field(body, "modalities"))) {
        const cJSON *m;
        bool ok = cJSON_IsArray(v);
        cJSON_ArrayForEach(m, v) ok = ok && str_is(m, "text");
        if (!ok) return srv_fail(e, 400, BAD, "unsupported_value", "modalities", "'modalities': only [\"text\"] is supported");
    }
    static const char *const NEVER[] = {"functions", "function_call", "audio", "prediction", "web_search_options",
                                        "reasoning_effort"};
    for (size_t i = 0; i < sizeof NEVER / sizeof *NEVER; i++)
        if (field(body, NEVER[i])) {
            if (i < 2)
                return srv_fail(e, 400, BAD, "unsupported_value", NEVER[i],
                                "'%s' (the legacy function-calling API) %s; use 'tools' and 'tool_choice'", NEVER[i],
                                WHY);
            return srv_fail(e, 400, BAD, "unsupported_value", NEVER[i], "'%s' %s", NEVER[i], WHY);
        }
    if (kind == SRV_COMPLETION && field(body, "tools"))
        return srv_fail(e, 400, BAD, "unsupported_value", "tools", "'tools' belongs to /v1/chat/completions");
    if ((v = field(body, "metadata")) && !cJSON_IsObject(v))
        return srv_fail(e, 400, BAD, "invalid_type", "metadata", "'metadata' must be an object");
    if ((v = field(body, "user")) && !cJSON_IsString(v))
        return srv_fail(e, 400, BAD, "invalid_type", "user", "'user' must be a string");
    return 0;
}

static int parse_sampling(srv_request *r, const cJSON *body, const srv_defaults *d, srv_error *e) {
    e0_sample_opts *s = &r->sample;
    *s = d->sample;
    double x;
    int k;
    if ((k = want_number(body, "temperature", 0, 100, false, &x, e)) < 0) return -1;
    if (k) s->temperature = (float)x;
    if ((k = want_number(body, "top_p", 0, 1, true, &x, e)) < 0) return -1;
    if (k) s->top_p = (float)x;
    if ((k = want_number(body, "min_p", 0, 1, false, &x, e)) < 0) return -1;
    if (k) s->min_p = (float)x;
    if ((k = want_number(body, "presence_penalty", -2, 2, false, &x, e)) < 0) return -1;
    if (k) s->presence_penalty = (float)x;
    if ((k = want_number(body, "frequency_penalty", -2, 2, false, &x, e)) < 0) return -1;
    if (k) s->frequency_penalty = (float)x;
    if ((k = want_number(body, "repeat_penalty", 0, 10, true, &x, e)) < 0) return -1;
    if (k) s->repeat_penalty = (float)x;
    if ((k = want_int(body, "top_k", -1e9, 1e9, &x, e)) < 0) return -1;
    if (k) s->top_k = x <= 0 ? 0 : x > (1 << 24) ? (1 << 24) : (int32_t)x;
    if ((k = want_int(body, "seed", -9.2e18, 1.8e19, &x, e)) < 0) return -1;
    if (k) {
        uint64_t seed = x < 0 ? (uint64_t)(int64_t)x : (uint64_t)x;
        s->seed = seed ? seed : 0x9e3779b97f4a7c15ull; /* 0 would mean "random" */
    }
    /* max_tokens <= 0 is an error, not "unlimited": OpenAI rejects it too. */
    static const char *const MAXN[] = {"max_tokens", "max_completion_tokens"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = field(body, MAXN[i]);
        if (!v) continue;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble)
            return srv_fail(e, 400, BAD, "invalid_type", MAXN[i], "'%s' must be an integer", MAXN[i]);
        if (v->valuedouble < 1)
            return srv_fail(e, 400, BAD, "invalid_value", MAXN[i], "'%s' must be at least 1, got %.0f", MAXN[i],
                            v->valuedouble);
        s->max_tokens = v->valuedouble > (1 << 24) ? (1 << 24) : (int32_t)v->valuedouble;
    }
    const cJSON *stop = field(body, "stop");
    if (stop) {
        s->stop = (const char *const *)r->stop;
        s->n_stop = 0;
        if (cJSON_IsString(stop)) {
            if (*stop->valuestring && !(r->stop[s->n_stop++] = strdup(stop->valuestring)))
                return srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
        } else if (cJSON_IsArray(stop)) {
            if (cJSON_GetArraySize(stop) > SRV_MAX_STOP)
                return srv_fail(e, 400, BAD, "invalid_value", "stop", "'stop' holds at most %d strings", SRV_MAX_STOP);
            const cJSON *it;
            cJSON_ArrayForEach(it, stop) {
                if (!cJSON_IsString(it))
                    return srv_fail(e, 400, BAD, "invalid_type", "stop", "'stop' must be a string or an array of strings");
                if (*it->valuestring && !(r->stop[s->n_stop++] = strdup(it->valuestring)))
                    return srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
            }
        } else {
            return srv_fail(e, 400, BAD, "invalid_type", "stop", "'stop' must be a string or an array of strings");
        }
    }
    return 0;
}

static const char *const ROLES[] = {"system", "user", "assistant", "tool", "developer"};

/* content: a string, an array of text parts, or (assistant only) null/absent. */
static int check_content(const cJSON *m, int i, bool assistant, srv_error *e) {
    char p[64];
    snprintf(p, sizeof p, "messages[%d].content", i);
    const cJSON *c = field(m, "content");
    if (!c) {
        if (assistant) return 0;
        return srv_fail(e, 400, BAD, "missing_field", p, "'%s' is required", p);
    }
    if (cJSON_IsString(c)) return 0;
    if (!cJSON_IsArray(c)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be a string or an array of text parts", p);
    const cJSON *part;
    int j = 0;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_IsObject(part) ? field(part, "type") : NULL, *text = type ? field(part, "text") : NULL;
        if (!type || !cJSON_IsString(type) || strcmp(type->valuestring, "text") || !text || !cJSON_IsString(text))
            return srv_fail(e, 400, BAD, "invalid_type", p,
                            "'%s[%d]' must be {\"type\": \"text\", \"text\": STRING} (only text parts are supported)", p, j);
        j++;
    }
    return 0;
}

static int parse_messages(srv_request *r, cJSON *body, srv_error *e) {
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (!msgs || cJSON_IsNull(msgs)) return srv_fail(e, 400, BAD, "missing_field", "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs)) return srv_fail(e, 400, BAD, "invalid_type", "messages", "'messages' must be an array");
    if (!cJSON_GetArraySize(msgs)) return srv_fail(e, 400, BAD, "invalid_value", "messages", "'messages' must not be empty");
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, msgs) {
        char p[64];
        snprintf(p, sizeof p, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be an object", p);
        snprintf(p, sizeof p, "messages[%d].role", i);
        const cJSON *role = field(m, "role");
        if (!role) return srv_fail(e, 400, BAD, "missing_field", p, "'%s' is required", p);
        if (!cJSON_IsString(role)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be a string", p);
        bool known = false;
        for (size_t k = 0; k < sizeof ROLES / sizeof *ROLES; k++) known |= !strcmp(role->valuestring, ROLES[k]);
        if (!known)
            return srv_fail(e, 400, BAD, "invalid_role", p,
                            "'%s': unknown role \"%.64s\" (system, developer, user, assistant or tool)", p,
                            role->valuestring);
        /* OpenAI's newer name for the system message: the templates know only system */
        if (!strcmp(role->valuestring, "developer") && !cJSON_SetValuestring((cJSON *)role, "system"))
            return srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
        if (check_content(m, i, !strcmp(role->valuestring, "assistant"), e)) return -1;
        i++;
    }
    r->messages = cJSON_DetachItemViaPointer(body, msgs);
    return 0;
}

/* tools: [{"type": "function", "function": {"name", "description"?, "parameters"?}}] */
static int parse_tools(srv_request *r, cJSON *body, srv_error *e) {
    cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
    if (!tools || cJSON_IsNull(tools)) return 0;
    if (!cJSON_IsArray(tools)) return srv_fail(e, 400, BAD, "invalid_type", "tools", "'tools' must be an array");
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, tools) {
        char p[64];
        snprintf(p, sizeof p, "tools[%d]", i);
        if (!cJSON_IsObject(t)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be an object", p);
        const cJSON *type = field(t, "type"), *f = field(t, "function");
        snprintf(p, sizeof p, "tools[%d].type", i);
        if (!type || !cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return srv_fail(e, 400, BAD, "invalid_value", p, "'%s' must be \"function\" (the only tool type supported)",
                            p);
        snprintf(p, sizeof p, "tools[%d].function", i);
        if (!f || !cJSON_IsObject(f)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be an object", p);
        const cJSON *name = field(f, "name"), *params = field(f, "parameters"), *desc = field(f, "description");
        snprintf(p, sizeof p, "tools[%d].function.name", i);
        if (!name || !cJSON_IsString(name) || !*name->valuestring)
            return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be a non-empty string", p);
        for (const char *c = name->valuestring; *c; c++)
            if ((unsigned char)*c < 0x20 || *c == '<' || *c == '>')
                return srv_fail(e, 400, BAD, "invalid_value", p, "'%s' must not hold '<', '>' or control characters", p);
        snprintf(p, sizeof p, "tools[%d].function.parameters", i);
        if (params && !cJSON_IsObject(params))
            return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be a JSON schema object", p);
        snprintf(p, sizeof p, "tools[%d].function.description", i);
        if (desc && !cJSON_IsString(desc)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be a string", p);
        i++;
    }
    if (!i) return 0;
    if (!(r->tools_json = cJSON_PrintUnformatted(tools)))
        return srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    r->tools = cJSON_DetachItemViaPointer(body, tools);
    return 0;
}

/* tool_choice: "auto" and "none" work; "required" and a named function need
 * constrained decoding, which edge0 does not have yet: a 400, never a
 * request accepted and then not enforced. */
static int parse_tool_choice(srv_request *r, const cJSON *body, srv_error *e) {
    const cJSON *tc = field(body, "tool_choice");
    r->parse_tools = r->tools != NULL;
    r->parallel_tool_calls = true;
    if (want_bool(body, "parallel_tool_calls", &r->parallel_tool_calls, e) < 0) return -1;
    if (!tc) return 0;
    if (cJSON_IsString(tc)) {
        if (!strcmp(tc->valuestring, "auto")) return 0;
        if (!strcmp(tc->valuestring, "none")) {
            r->parse_tools = false;
            return 0;
        }
        if (!strcmp(tc->valuestring, "required")) {
            if (!r->tools)
                return srv_fail(e, 400, BAD, "invalid_value", "tool_choice", "'tool_choice': \"required\" needs 'tools'");
            r->force_tools = true;
            return 0;
        }
        return srv_fail(e, 400, BAD, "invalid_value", "tool_choice",
                        "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}, not \"%.64s\"",
                        tc->valuestring);
    }
    const cJSON *f = cJSON_IsObject(tc) ? field(tc, "function") : NULL, *name = f ? field(f, "name") : NULL;
    if (!cJSON_IsObject(tc) || !str_is(field(tc, "type"), "function") || !name || !cJSON_IsString(name))
        return srv_fail(e, 400, BAD, "invalid_type", "tool_choice",
                        "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}");
    if (!r->tools)
        return srv_fail(e, 400, BAD, "invalid_value", "tool_choice", "'tool_choice' names a function but 'tools' is absent");
    if (!(r->force_name = strdup(name->valuestring)))
        return srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    r->force_tools = true;
    return 0;
}

/* A grammar's compile error as the client sees it: the field, and a 400
 * that names the keyword (500 only for memory). */
static int grammar_fail(srv_error *e, int rc, const char *param, const char *msg) {
    if (rc == E0_ENOMEM) return srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    return srv_fail(e, 400, BAD, rc == E0_EINVAL ? "invalid_value" : "unsupported_value", param, "'%s': %s", param,
                    msg);
}

/* response_format json_object / json_schema and tool_choice "required" or a
 * named function: the grammar the output must follow (text/schema.h). */
static int parse_grammar(srv_request *r, const cJSON *body, srv_error *e);

/* parse_grammar, timed (the compile time is on /metrics). */
static int parse_grammar_timed(srv_request *r, const cJSON *body, srv_error *e) {
    double t0 = now_s();
    int rc = parse_grammar(r, body, e);
    r->grammar_compile_s = now_s() - t0;
    return rc;
}

static int parse_grammar(srv_request *r, const cJSON *body, srv_error *e) {
    const cJSON *rf = field(body, "response_format");
    bool json = rf && !str_is(field(rf, "type"), "text");
    char err[E0_ERR_MAX];
    int rc;
    if (r->force_tools) {
        if (json)
            return srv_fail(e, 400, BAD, "unsupported_value", "response_format",
                            "'response_format' %s cannot be enforced together with tool_choice \"%s\"",
                            field(rf, "type")->valuestring, r->force_name ? r->force_name : "required");
        e0_tool_form form = r->chat_format == E0_CHAT_QWEN35 ? E0_TOOL_FORM_XML : E0_TOOL_FORM_JSON;
        rc = e0_grammar_tools(r->tools, r->force_name, r->parallel_tool_calls ? E0_GRAMMAR_MAX_CALLS : 1, form,
                                  &r->grammar, err);
        return rc ? grammar_fail(e, rc, rc == E0_EINVAL && !strstr(err, "parameters") ? "tool_choice" : "tools", err) : 0;
    }
    if (!json) return 0;
    rc = e0_grammar_response_format(rf, &r->grammar, err);
    if (rc) return grammar_fail(e, rc, "response_format", err);
    const cJSON *js = field(rf, "json_schema"), *schema = js ? field(js, "schema") : NULL;
    if (schema && !(r->check_schema = cJSON_Duplicate(schema, 1)))
        return srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    return 0;
}

/* logprobs: bool; top_logprobs: 0..20, only with logprobs (as OpenAI). */
static int parse_logprobs(srv_request *r, const cJSON *body, srv_error *e) {
    bool on = false;
    double k = 0;
    int got;
    if (want_bool(body, "logprobs", &on, e) < 0) return -1;
    if ((got = want_int(body, "top_logprobs", 0, E0_MAX_TOP_LOGPROBS, &k, e)) < 0) return -1;
    if (got && !on)
        return srv_fail(e, 400, BAD, "invalid_value", "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r->sample.logprobs = on;
    r->sample.top_logprobs = (int32_t)k;
    return 0;
}

/* Completions: logprobs an integer 0..5 (the n most likely alternatives
 * of each token, OpenAI's legacy form), echo a bool. */
static int parse_completion_logprobs(srv_request *r, const cJSON *body, srv_error *e) {
    double k = 0;
    int got;
    if (cJSON_IsFalse(field(body, "logprobs"))) got = 0; /* as absent */
    else if ((got = want_int(body, "logprobs", 0, SRV_MAX_COMPLETION_LOGPROBS, &k, e)) < 0) return -1;
    if (want_bool(body, "echo", &r->echo, e) < 0) return -1;
    r->sample.logprobs = got;
    r->sample.top_logprobs = (int32_t)k;
    return 0;
}

static int parse_chat(srv_request *r, cJSON *body, const srv_defaults *d, srv_error *e) {
    if (parse_messages(r, body, e)) return -1;
    if (parse_tools(r, body, e) || parse_tool_choice(r, body, e)) return -1;
    /* Thinking on/off, in the spellings of vLLM and llama.cpp
     * (chat_template_kwargs) and the short forms some clients send. */
    r->enable_thinking = d->enable_thinking;
    r->chat_format = d->chat_format;
    const cJSON *kw = field(body, "chat_template_kwargs");
    if (kw && !cJSON_IsObject(kw))
        return srv_fail(e, 400, BAD, "invalid_type", "chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (kw && want_bool(kw, "enable_thinking", &r->enable_thinking, e) < 0) {
        snprintf(e->param, sizeof e->param, "chat_template_kwargs.enable_thinking");
        return -1;
    }
    if (want_bool(body, "enable_thinking", &r->enable_thinking, e) < 0) return -1;
    if (want_bool(body, "think", &r->enable_thinking, e) < 0) return -1;
    return parse_grammar_timed(r, body, e);
}

static int parse_completion(srv_request *r, const cJSON *body, srv_error *e) {
    const cJSON *p = field(body, "prompt");
    if (!p) return srv_fail(e, 400, BAD, "missing_field", "prompt", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1) p = cJSON_GetArrayItem(p, 0);
    if (!cJSON_IsString(p))
        return srv_fail(e, 400, BAD, "invalid_type", "prompt", "'prompt' must be a string (or an array of one string)");
    if (!*p->valuestring) return srv_fail(e, 400, BAD, "invalid_value", "prompt", "'prompt' must not be empty");
    r->prompt_len = strlen(p->valuestring);
    if (!(r->prompt = strdup(p->valuestring))) return srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    return parse_grammar_timed(r, body, e);
}

cJSON *srv_parse_object(const char *body, size_t len, srv_error *e) {
    cJSON *j = cJSON_ParseWithLength(body, len);
    if (!j) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= body && at <= body + len ? (long)(at - body) : -1;
        srv_fail(e, 400, BAD, "invalid_json", NULL, "the request body is not valid JSON (near byte %ld)", off);
    } else if (!cJSON_IsObject(j)) {
        srv_fail(e, 400, BAD, "invalid_json", NULL, "the request body must be a JSON object");
        cJSON_Delete(j);
        j = NULL;
    }
    return j;
}

int srv_request_parse(srv_request *r, srv_kind kind, const char *body, size_t len, const srv_defaults *d,
                      srv_error *e) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    cJSON *j = srv_parse_object(body, len, e);
    if (!j) return -1;
    int rc = 0;
    const cJSON *model = field(j, "model");
    if (model && !cJSON_IsString(model)) rc = srv_fail(e, 400, BAD, "invalid_type", "model", "'model' must be a string");
    double n;
    int k = 0;
    if (!rc && (k = want_int(j, "n", 1, 1, &n, e)) < 0) {
        snprintf(e->message, sizeof e->message, "'n' must be 1: one choice per request");
        rc = -1;
    }
    if (!rc) rc = want_bool(j, "stream", &r->stream, e) < 0 ? -1 : 0;
    const cJSON *so = rc ? NULL : field(j, "stream_options");
    if (so && !cJSON_IsObject(so))
        rc = srv_fail(e, 400, BAD, "invalid_type", "stream_options", "'stream_options' must be an object");
    if (!rc && so && want_bool(so, "include_usage", &r->include_usage, e) < 0) {
        snprintf(e->param, sizeof e->param, "stream_options.include_usage");
        rc = -1;
    }
    if (!rc) rc = refuse_unsupported(j, kind, e);
    if (!rc) rc = kind == SRV_CHAT ? parse_chat(r, j, d, e) : parse_completion(r, j, e);
    if (!rc) rc = parse_sampling(r, j, d, e);
    if (!rc) r->sample.grammar = r->grammar;
    if (!rc) rc = kind == SRV_CHAT ? parse_logprobs(r, j, e) : parse_completion_logprobs(r, j, e);
    cJSON_Delete(j);
    if (rc) srv_request_free(r);
    return rc;
}

int srv_request_render(const srv_request *r, char **out, size_t *len, srv_error *e) {
    *out = NULL;
    *len = 0;
    if (r->kind == SRV_COMPLETION) {
        if (!(*out = malloc(r->prompt_len + 1))) return srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
        memcpy(*out, r->prompt, r->prompt_len + 1);
        *len = r->prompt_len;
        return 0;
    }
    char *msgs = cJSON_PrintUnformatted(r->messages);
    if (!msgs) return srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    e0_chat_opts co;
    e0_chat_opts_default(&co);
    co.enable_thinking = r->enable_thinking;
    co.tools_json = r->tools_json;
    co.format = r->chat_format;
    char err[E0_ERR_MAX];
    int rc = e0_chat_render(msgs, strlen(msgs), &co, out, len, err);
    free(msgs);
    if (rc == E0_ENOMEM) return srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    if (rc) return srv_fail(e, 400, BAD, "invalid_message", "messages", "%s", err);
    return 0;
}

void srv_request_free(srv_request *r) {
    cJSON_Delete(r->check_schema);
    cJSON_Delete(r->messages);
    free(r->tools_json);
    cJSON_Delete(r->tools);
    free(r->prompt);
    free(r->force_name);
    e0_grammar_free(r->grammar);
    for (int i = 0; i < SRV_MAX_STOP; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

/* ---- helpers of the translating fronts ------------------------------------------ */

const cJSON *srv_member(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

cJSON *srv_add_message(cJSON *msgs, const char *role) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return NULL;
    if (!cJSON_AddItemToArray(msgs, m)) {
        cJSON_Delete(m);
        return NULL;
    }
    return cJSON_AddStringToObject(m, "role", role) ? m : NULL;
}

bool srv_append_str(cJSON *m, const char *name, const char *s) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(m, name);
    if (!v) return cJSON_AddStringToObject(m, name, s) != NULL;
    if (!cJSON_IsString(v)) return false;
    size_t a = strlen(v->valuestring), b = strlen(s);
    char *x = malloc(a + b + 1);
    if (!x) return false;
    memcpy(x, v->valuestring, a);
    memcpy(x + a, s, b + 1);
    const bool ok = cJSON_SetValuestring(v, x) != NULL;
    free(x);
    return ok;
}
