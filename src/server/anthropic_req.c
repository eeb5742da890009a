/* Messages API requests: validation and translation into the OpenAI chat
 * request they mean (anthropic.h). Nothing here touches a model or HTTP,
 * so fuzz/fuzz_anthropic.c runs it alone.
 *
 * The body is checked against Anthropic's shapes first, with errors that
 * name Anthropic's fields ("messages[1].content[0].tool_use_id"); the
 * translated body then goes through srv_request_parse, which applies the
 * same ranges and refusals as the OpenAI front. Details that are easy to
 * get wrong:
 *  - a user message's tool_result blocks become tool messages and its text
 *    a user message, in the order the blocks come, so the template's
 *    grouping of consecutive tool results holds;
 *  - an assistant's text blocks are joined with nothing between them: the
 *    answer edge0 gave (text, calls, more text) comes back as several
 *    blocks and must read as the one content the session recorded, or the
 *    next turn cannot continue the session (engine.h, prompt reuse);
 *  - tool_use input stays a JSON object: the template renders it with
 *    json.dumps as it does OpenAI arguments given as an object.
 */
#include "server/anthropic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD "invalid_request_error"
#define OOM(e) srv_fail(e, 500, "api_error", "out_of_memory", NULL, "out of memory")

/* Every member of o is one of `known` (a NULL-terminated list); else a 400 naming it. */
static int only_known(const cJSON *o, const char *const *known, const char *path, srv_error *e) {
    const cJSON *m;
    cJSON_ArrayForEach(m, o) {
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++) ok = !strcmp(m->string, *k);
        if (ok) continue;
        if (*path)
            return srv_fail(e, 400, BAD, "unsupported_field", path, "'%s.%.64s' is not supported by edge0", path,
                            m->string);
        return srv_fail(e, 400, BAD, "unsupported_field", m->string, "'%.64s' is not supported by edge0", m->string);
    }
    return 0;
}

/* cache_control: accepted where Anthropic allows it, and ignored. */
static int check_cache_control(const cJSON *o, const char *path, srv_error *e) {
    const cJSON *c = srv_member(o, "cache_control");
    if (c && !cJSON_IsObject(c))
        return srv_fail(e, 400, BAD, "invalid_type", path, "'%s.cache_control' must be an object", path);
    return 0;
}

static int want_string(const cJSON *o, const char *name, const char *path, bool required, const cJSON **out,
                       srv_error *e) {
    const cJSON *v = srv_member(o, name);
    *out = v;
    if (!v && !required) return 0;
    if (!v) return srv_fail(e, 400, BAD, "missing_field", path, "'%s.%s' is required", path, name);
    if (!cJSON_IsString(v)) return srv_fail(e, 400, BAD, "invalid_type", path, "'%s.%s' must be a string", path, name);
    return 0;
}

/* A block's "type", and the block checked to be an object. */
static const char *block_type(const cJSON *b, const char *path, srv_error *e) {
    if (!cJSON_IsObject(b)) {
        srv_fail(e, 400, BAD, "invalid_type", path, "'%s' must be an object", path);
        return NULL;
    }
    const cJSON *t;
    if (want_string(b, "type", path, true, &t, e)) return NULL;
    return t->valuestring;
}

static int unknown_block(const char *type, const char *path, srv_error *e) {
    static const char *const MEDIA[] = {"image", "document", "search_result", "container_upload"};
    for (size_t i = 0; i < sizeof MEDIA / sizeof *MEDIA; i++)
        if (!strcmp(type, MEDIA[i]))
            return srv_fail(e, 400, BAD, "unsupported_value", path,
                            "'%s': \"%s\" blocks are not supported (the model reads text only)", path, type);
    return srv_fail(e, 400, BAD, "unsupported_value", path, "'%s': a block of type \"%.64s\" is not supported here",
                    path, type);
}

/* A text block {type: "text", text, cache_control?, citations?}: its text appended to parts as an OpenAI part. */
static int text_block(const cJSON *b, const char *path, cJSON *parts, srv_error *e) {
    static const char *const KNOWN[] = {"type", "text", "cache_control", "citations", NULL};
    const cJSON *t, *cit = srv_member(b, "citations");
    if (only_known(b, KNOWN, path, e) || check_cache_control(b, path, e) || want_string(b, "text", path, true, &t, e))
        return -1;
    if (cit && !(cJSON_IsArray(cit) && !cJSON_GetArraySize(cit)))
        return srv_fail(e, 400, BAD, "unsupported_value", path, "'%s.citations' is not supported", path);
    if (!parts) return 0;
    cJSON *p = cJSON_CreateObject();
    if (!p) return OOM(e);
    if (!cJSON_AddItemToArray(parts, p)) {
        cJSON_Delete(p);
        return OOM(e);
    }
    return cJSON_AddStringToObject(p, "type", "text") && cJSON_AddStringToObject(p, "text", t->valuestring) ? 0 : OOM(e);
}

/* A string, or an array of text blocks: the OpenAI content (a string or parts). */
static int text_content(const cJSON *c, const char *path, cJSON **out, srv_error *e) {
    *out = NULL;
    if (cJSON_IsString(c)) return (*out = cJSON_CreateString(c->valuestring)) ? 0 : OOM(e);
    if (!cJSON_IsArray(c))
        return srv_fail(e, 400, BAD, "invalid_type", path, "'%s' must be a string or an array of text blocks", path);
    cJSON *parts = cJSON_CreateArray();
    if (!parts) return OOM(e);
    const cJSON *b;
    int i = 0;
    cJSON_ArrayForEach(b, c) {
        char p[96];
        snprintf(p, sizeof p, "%s[%d]", path, i++);
        const char *type = block_type(b, p, e);
        if (!type || (strcmp(type, "text") ? unknown_block(type, p, e) : text_block(b, p, parts, e))) {
            cJSON_Delete(parts);
            return -1;
        }
    }
    *out = parts;
    return 0;
}

/* is_error: the template has no error flag, so the model reads "Error: "
 * before the result (before its first text part, or alone for none). */
static int prefix_error(cJSON **oc) {
    cJSON *first = cJSON_IsArray(*oc) ? cJSON_GetObjectItemCaseSensitive((*oc)->child, "text") : *oc;
    const char *was = first ? first->valuestring : NULL;
    char *t = malloc((was ? strlen(was) : 0) + 8);
    if (!t) return -1;
    if (was && *was) sprintf(t, "Error: %s", was);
    else strcpy(t, "Error");
    int rc = 0;
    if (first) {
        rc = cJSON_SetValuestring(first, t) ? 0 : -1;
    } else {
        cJSON *s = cJSON_CreateString(t);
        if (s) {
            cJSON_Delete(*oc);
            *oc = s;
        }
        rc = s ? 0 : -1;
    }
    free(t);
    return rc;
}

/* One user message: text blocks gather into user messages, each tool_result is a tool message. */
static int user_message(const cJSON *c, const char *path, cJSON *msgs, srv_error *e) {
    if (cJSON_IsString(c)) {
        cJSON *m = srv_add_message(msgs, "user");
        return m && cJSON_AddStringToObject(m, "content", c->valuestring) ? 0 : OOM(e);
    }
    if (!cJSON_IsArray(c))
        return srv_fail(e, 400, BAD, "invalid_type", path, "'%s' must be a string or an array of content blocks", path);
    cJSON *parts = NULL; /* the text of the user message being gathered */
    const cJSON *b;
    int i = 0;
    cJSON_ArrayForEach(b, c) {
        char p[96];
        snprintf(p, sizeof p, "%s[%d]", path, i++);
        const char *type = block_type(b, p, e);
        if (!type) return -1;
        if (!strcmp(type, "text")) {
            if (!parts) {
                cJSON *m = srv_add_message(msgs, "user");
                if (!m || !(parts = cJSON_AddArrayToObject(m, "content"))) return OOM(e);
            }
            if (text_block(b, p, parts, e)) return -1;
            continue;
        }
        if (strcmp(type, "tool_result")) return unknown_block(type, p, e);
        static const char *const KNOWN[] = {"type", "tool_use_id", "content", "is_error", "cache_control", NULL};
        const cJSON *id, *content = srv_member(b, "content"), *err = srv_member(b, "is_error");
        if (only_known(b, KNOWN, p, e) || check_cache_control(b, p, e) || want_string(b, "tool_use_id", p, true, &id, e))
            return -1;
        if (err && !cJSON_IsBool(err))
            return srv_fail(e, 400, BAD, "invalid_type", p, "'%s.is_error' must be true or false", p);
        char cp[112];
        snprintf(cp, sizeof cp, "%s.content", p);
        cJSON *oc = NULL;
        if (content && text_content(content, cp, &oc, e)) return -1;
        if (!oc && !(oc = cJSON_CreateString(""))) return OOM(e);
        if (cJSON_IsTrue(err) && prefix_error(&oc)) {
            cJSON_Delete(oc);
            return OOM(e);
        }
        cJSON *m = srv_add_message(msgs, "tool");
        if (!m || !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring)) {
            cJSON_Delete(oc);
            return OOM(e);
        }
        if (!cJSON_AddItemToObject(m, "content", oc)) {
            cJSON_Delete(oc);
            return OOM(e);
        }
        parts = NULL; /* text after a result is a new user message */
    }
    if (!i) {
        cJSON *m = srv_add_message(msgs, "user");
        return m && cJSON_AddStringToObject(m, "content", "") ? 0 : OOM(e);
    }
    return 0;
}

/* Appends s to the string member `name` of m (created empty). */
static int append_str(cJSON *m, const char *name, const char *s, srv_error *e) {
    return srv_append_str(m, name, s) ? 0 : OOM(e);
}

/* One assistant message. *prefill: only text blocks (or a string), and so
 * usable as a prefill when it is the last message. drop_thinking: its
 * thinking blocks are checked and left out of the prompt (a
 * context_management edit cleared them). */
static int assistant_message(const cJSON *c, const char *path, cJSON *msgs, bool drop_thinking, bool *text_only,
                             srv_error *e) {
    *text_only = true;
    cJSON *m = srv_add_message(msgs, "assistant");
    if (!m) return OOM(e);
    if (cJSON_IsString(c)) return cJSON_AddStringToObject(m, "content", c->valuestring) ? 0 : OOM(e);
    if (!cJSON_IsArray(c))
        return srv_fail(e, 400, BAD, "invalid_type", path, "'%s' must be a string or an array of content blocks", path);
    if (!cJSON_AddStringToObject(m, "content", "")) return OOM(e);
    cJSON *calls = NULL;
    const cJSON *b;
    int i = 0;
    cJSON_ArrayForEach(b, c) {
        char p[96];
        snprintf(p, sizeof p, "%s[%d]", path, i++);
        const char *type = block_type(b, p, e);
        if (!type) return -1;
        if (!strcmp(type, "text")) {
            const cJSON *t;
            if (text_block(b, p, NULL, e) || want_string(b, "text", p, true, &t, e) ||
                append_str(m, "content", t->valuestring, e))
                return -1;
        } else if (!strcmp(type, "thinking")) {
            static const char *const KNOWN[] = {"type", "thinking", "signature", "cache_control", NULL};
            const cJSON *t, *sig;
            if (only_known(b, KNOWN, p, e) || want_string(b, "thinking", p, true, &t, e) ||
                want_string(b, "signature", p, false, &sig, e) ||
                (!drop_thinking && append_str(m, "reasoning_content", t->valuestring, e)))
                return -1;
            *text_only = false;
        } else if (!strcmp(type, "redacted_thinking")) {
            static const char *const KNOWN[] = {"type", "data", NULL};
            const cJSON *d;
            if (only_known(b, KNOWN, p, e) || want_string(b, "data", p, true, &d, e)) return -1;
            *text_only = false;
        } else if (!strcmp(type, "tool_use")) {
            static const char *const KNOWN[] = {"type", "id", "name", "input", "cache_control", NULL};
            const cJSON *id, *name, *input = srv_member(b, "input");
            if (only_known(b, KNOWN, p, e) || check_cache_control(b, p, e) || want_string(b, "id", p, true, &id, e) ||
                want_string(b, "name", p, true, &name, e))
                return -1;
            if (!cJSON_IsObject(input)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s.input' must be an object", p);
            if (!calls && !(calls = cJSON_AddArrayToObject(m, "tool_calls"))) return OOM(e);
            cJSON *call = cJSON_CreateObject(), *f = NULL, *args = cJSON_Duplicate(input, 1);
            bool ok = call && args && cJSON_AddItemToArray(calls, call);
            if (!ok) cJSON_Delete(call);
            ok = ok && cJSON_AddStringToObject(call, "id", id->valuestring) &&
                 cJSON_AddStringToObject(call, "type", "function") && (f = cJSON_AddObjectToObject(call, "function")) &&
                 cJSON_AddStringToObject(f, "name", name->valuestring);
            if (!ok || !cJSON_AddItemToObject(f, "arguments", args)) {
                cJSON_Delete(args);
                return OOM(e);
            }
            *text_only = false;
        } else {
            return unknown_block(type, p, e);
        }
    }
    return 0;
}

/* Whether an assistant message holds thinking (or redacted thinking). */
static bool has_thinking(const cJSON *m) {
    const cJSON *r = srv_member(m, "role"), *c = srv_member(m, "content"), *b;
    if (!cJSON_IsString(r) || strcmp(r->valuestring, "assistant") || !cJSON_IsArray(c)) return false;
    cJSON_ArrayForEach(b, c) {
        const cJSON *t = srv_member(b, "type");
        if (cJSON_IsString(t) && (!strcmp(t->valuestring, "thinking") || !strcmp(t->valuestring, "redacted_thinking")))
            return true;
    }
    return false;
}

/* src (an OpenAI content: a string or text parts) moved onto parts. */
static bool move_parts(cJSON *parts, cJSON *src) {
    if (cJSON_IsArray(src)) {
        cJSON *x;
        while ((x = cJSON_DetachItemFromArray(src, 0)))
            if (!cJSON_AddItemToArray(parts, x)) return cJSON_Delete(x), false;
        return true;
    }
    cJSON *p = cJSON_CreateObject();
    if (!p || !cJSON_AddItemToArray(parts, p)) return cJSON_Delete(p), false;
    return cJSON_AddStringToObject(p, "type", "text") && cJSON_AddStringToObject(p, "text", src->valuestring);
}

/* A system message inside 'messages' (Claude Code sends them): its text
 * joins the system prompt, after what is there with a blank line between,
 * since the chat templates take one system message, at the start. */
static int merge_system(const cJSON *c, const char *path, cJSON *msgs, srv_error *e) {
    cJSON *add;
    if (text_content(c, path, &add, e)) return -1;
    cJSON *sys = cJSON_GetArrayItem(msgs, 0);
    const cJSON *role = sys ? cJSON_GetObjectItemCaseSensitive(sys, "role") : NULL;
    if (!cJSON_IsString(role) || strcmp(role->valuestring, "system")) { /* the first: a system message of its own */
        cJSON *m = cJSON_CreateObject();
        if (!m || !cJSON_AddStringToObject(m, "role", "system") || !cJSON_InsertItemInArray(msgs, 0, m)) {
            cJSON_Delete(m);
            cJSON_Delete(add);
            return OOM(e);
        }
        cJSON_AddItemToObject(m, "content", add);
        return 0;
    }
    cJSON *sep = cJSON_CreateString("\n\n"), *parts = cJSON_CreateArray();
    const cJSON *old = cJSON_GetObjectItemCaseSensitive(sys, "content");
    cJSON *was = old ? cJSON_Duplicate(old, 1) : NULL;
    bool ok = sep && parts && was && move_parts(parts, was) && move_parts(parts, sep) && move_parts(parts, add);
    cJSON_Delete(sep), cJSON_Delete(was), cJSON_Delete(add);
    if (!ok || !cJSON_ReplaceItemInObjectCaseSensitive(sys, "content", parts)) {
        cJSON_Delete(parts);
        return OOM(e);
    }
    return 0;
}

/* messages -> OpenAI messages (after the system message, if any). A last
 * assistant message of text only is taken off as *prefill (malloc'd).
 * keep_thinking >= 0: only the thinking of the last keep_thinking assistant
 * messages that have some reaches the prompt (context_management). */
static int convert_messages(const cJSON *body, cJSON *msgs, int keep_thinking, char **prefill, srv_error *e) {
    const cJSON *ms = srv_member(body, "messages"), *m;
    if (!ms) return srv_fail(e, 400, BAD, "missing_field", "messages", "'messages' is required");
    if (!cJSON_IsArray(ms)) return srv_fail(e, 400, BAD, "invalid_type", "messages", "'messages' must be an array");
    if (!cJSON_GetArraySize(ms)) return srv_fail(e, 400, BAD, "invalid_value", "messages", "'messages' must not be empty");
    int thinking_left = 0; /* assistant messages with thinking from here to the end */
    cJSON_ArrayForEach(m, ms) thinking_left += has_thinking(m);
    int i = 0;
    cJSON_ArrayForEach(m, ms) {
        char p[64], cp[80];
        snprintf(p, sizeof p, "messages[%d]", i);
        snprintf(cp, sizeof cp, "messages[%d].content", i);
        i++;
        if (!cJSON_IsObject(m)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be an object", p);
        static const char *const KNOWN[] = {"role", "content", NULL};
        const cJSON *role, *c = srv_member(m, "content");
        if (only_known(m, KNOWN, p, e) || want_string(m, "role", p, true, &role, e)) return -1;
        if (!c) return srv_fail(e, 400, BAD, "missing_field", cp, "'%s' is required", cp);
        if (!strcmp(role->valuestring, "user")) {
            if (user_message(c, cp, msgs, e)) return -1;
        } else if (!strcmp(role->valuestring, "system")) {
            if (merge_system(c, cp, msgs, e)) return -1;
        } else if (!strcmp(role->valuestring, "assistant")) {
            bool text_only, drop = false;
            if (has_thinking(m)) drop = keep_thinking >= 0 && thinking_left-- > keep_thinking;
            if (assistant_message(c, cp, msgs, drop, &text_only, e)) return -1;
            if (!m->next) { /* the last message: a prefill */
                if (!text_only)
                    return srv_fail(e, 400, BAD, "invalid_value", cp,
                                    "'%s': a final assistant message (a prefill) may hold text only", cp);
                cJSON *last = cJSON_DetachItemFromArray(msgs, cJSON_GetArraySize(msgs) - 1);
                const cJSON *t = cJSON_GetObjectItemCaseSensitive(last, "content");
                *prefill = strdup(t->valuestring);
                cJSON_Delete(last);
                if (!*prefill) return OOM(e);
            }
        } else {
            return srv_fail(e, 400, BAD, "invalid_role", p,
                            "'%s.role' must be \"user\", \"assistant\" or \"system\", not \"%.64s\"", p,
                            role->valuestring);
        }
    }
    return 0;
}

/* tools -> OpenAI tools: {type: "function", function: {name, description, parameters}}. */
static int convert_tools(const cJSON *body, cJSON *o, srv_error *e) {
    const cJSON *ts = srv_member(body, "tools"), *t;
    if (!ts) return 0;
    if (!cJSON_IsArray(ts)) return srv_fail(e, 400, BAD, "invalid_type", "tools", "'tools' must be an array");
    cJSON *out = cJSON_AddArrayToObject(o, "tools");
    if (!out) return OOM(e);
    int i = 0;
    cJSON_ArrayForEach(t, ts) {
        char p[64];
        snprintf(p, sizeof p, "tools[%d]", i++);
        if (!cJSON_IsObject(t)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be an object", p);
        const cJSON *type, *name, *desc, *schema = srv_member(t, "input_schema");
        if (want_string(t, "type", p, false, &type, e)) return -1;
        if (type && strcmp(type->valuestring, "custom"))
            return srv_fail(e, 400, BAD, "unsupported_value", p,
                            "'%s.type': \"%.64s\" (a server tool) is not supported; tools here are client tools "
                            "{name, description, input_schema}",
                            p, type->valuestring);
        /* defer_loading (offered from the start: edge0 has no tool search), strict (forced calls are
         * constrained whatever it says), eager_input_streaming, input_examples, allowed_callers:
         * accepted and without effect (docs/design.md §8.5) */
        static const char *const KNOWN[] = {"type", "name", "description", "input_schema", "cache_control",
                                            "defer_loading", "strict", "eager_input_streaming", "input_examples",
                                            "allowed_callers", NULL};
        if (only_known(t, KNOWN, p, e) || check_cache_control(t, p, e) || want_string(t, "name", p, true, &name, e) ||
            want_string(t, "description", p, false, &desc, e))
            return -1;
        if (!*name->valuestring) return srv_fail(e, 400, BAD, "invalid_value", p, "'%s.name' must not be empty", p);
        if (!schema) return srv_fail(e, 400, BAD, "missing_field", p, "'%s.input_schema' is required", p);
        if (!cJSON_IsObject(schema))
            return srv_fail(e, 400, BAD, "invalid_type", p, "'%s.input_schema' must be a JSON schema object", p);
        cJSON *ot = cJSON_CreateObject(), *f = NULL, *params = cJSON_Duplicate(schema, 1);
        bool ok = ot && params && cJSON_AddItemToArray(out, ot);
        if (!ok) cJSON_Delete(ot);
        ok = ok && cJSON_AddStringToObject(ot, "type", "function") && (f = cJSON_AddObjectToObject(ot, "function")) &&
             cJSON_AddStringToObject(f, "name", name->valuestring) &&
             (!desc || cJSON_AddStringToObject(f, "description", desc->valuestring));
        if (!ok || !cJSON_AddItemToObject(f, "parameters", params)) {
            cJSON_Delete(params);
            return OOM(e);
        }
    }
    return 0;
}

/* tool_choice -> OpenAI tool_choice and parallel_tool_calls. *kind gets the Anthropic type. */
static int convert_tool_choice(const cJSON *body, cJSON *o, const char **kind, srv_error *e) {
    const cJSON *tc = srv_member(body, "tool_choice"), *type, *name, *dp;
    *kind = NULL;
    if (!tc) return 0;
    if (!cJSON_IsObject(tc))
        return srv_fail(e, 400, BAD, "invalid_type", "tool_choice",
                        "'tool_choice' must be an object {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
    static const char *const KNOWN[] = {"type", "name", "disable_parallel_tool_use", NULL};
    if (only_known(tc, KNOWN, "tool_choice", e) || want_string(tc, "type", "tool_choice", true, &type, e) ||
        want_string(tc, "name", "tool_choice", false, &name, e))
        return -1;
    const char *t = type->valuestring;
    bool ok = true;
    if (!strcmp(t, "auto") || !strcmp(t, "none")) {
        ok = cJSON_AddStringToObject(o, "tool_choice", t) != NULL;
    } else if (!strcmp(t, "any")) {
        ok = cJSON_AddStringToObject(o, "tool_choice", "required") != NULL;
    } else if (!strcmp(t, "tool")) {
        if (!name) return srv_fail(e, 400, BAD, "missing_field", "tool_choice", "'tool_choice.name' is required with type \"tool\"");
        cJSON *c = cJSON_AddObjectToObject(o, "tool_choice"), *f = NULL;
        ok = c && cJSON_AddStringToObject(c, "type", "function") && (f = cJSON_AddObjectToObject(c, "function")) &&
             cJSON_AddStringToObject(f, "name", name->valuestring);
    } else {
        return srv_fail(e, 400, BAD, "invalid_value", "tool_choice",
                        "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\", not \"%.64s\"", t);
    }
    if (name && strcmp(t, "tool"))
        return srv_fail(e, 400, BAD, "invalid_value", "tool_choice", "'tool_choice.name' belongs to type \"tool\"");
    if ((dp = srv_member(tc, "disable_parallel_tool_use"))) {
        if (!cJSON_IsBool(dp))
            return srv_fail(e, 400, BAD, "invalid_type", "tool_choice",
                            "'tool_choice.disable_parallel_tool_use' must be true or false");
        ok = ok && cJSON_AddBoolToObject(o, "parallel_tool_calls", !cJSON_IsTrue(dp));
    }
    *kind = t;
    return ok ? 0 : OOM(e);
}

/* thinking.display: null or "summarized" (thinking shown) or "omitted"
 * (its blocks come back empty: *omit). */
static int check_display(const cJSON *th, bool *omit, srv_error *e) {
    const cJSON *d = srv_member(th, "display");
    *omit = false;
    if (!d || cJSON_IsNull(d)) return 0;
    if (cJSON_IsString(d) && !strcmp(d->valuestring, "summarized")) return 0;
    if (cJSON_IsString(d) && !strcmp(d->valuestring, "omitted")) return *omit = true, 0;
    return srv_fail(e, 400, BAD, "invalid_value", "thinking", "'thinking.display' must be \"summarized\" or \"omitted\"");
}

/* thinking -> enable_thinking; *on: -1 absent, 0 disabled, 1 enabled, 2
 * enabled with its text omitted from the answer (display "omitted"). */
static int convert_thinking(const cJSON *body, int *on, srv_error *e) {
    const cJSON *th = srv_member(body, "thinking"), *type, *budget, *mt = srv_member(body, "max_tokens");
    *on = -1;
    if (!th) return 0;
    if (!cJSON_IsObject(th))
        return srv_fail(e, 400, BAD, "invalid_type", "thinking",
                        "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": \"adaptive\"} or "
                        "{\"type\": \"disabled\"}");
    static const char *const KNOWN[] = {"type", "budget_tokens", "display", NULL};
    bool omit;
    if (only_known(th, KNOWN, "thinking", e) || want_string(th, "type", "thinking", true, &type, e) ||
        check_display(th, &omit, e))
        return -1;
    budget = srv_member(th, "budget_tokens");
    const bool off = !strcmp(type->valuestring, "disabled"), adaptive = !strcmp(type->valuestring, "adaptive");
    if (off || adaptive) { /* adaptive: the model decides, and Qwen's thinking models think: on */
        if (budget)
            return srv_fail(e, 400, BAD, "invalid_value", "thinking", "'thinking.budget_tokens' belongs to type \"enabled\"");
        *on = adaptive ? 1 + omit : 0;
        return 0;
    }
    if (strcmp(type->valuestring, "enabled"))
        return srv_fail(e, 400, BAD, "invalid_value", "thinking",
                        "'thinking.type' must be \"enabled\", \"adaptive\" or \"disabled\", not \"%.64s\"",
                        type->valuestring);
    if (!budget) return srv_fail(e, 400, BAD, "missing_field", "thinking", "'thinking.budget_tokens' is required");
    double b = cJSON_IsNumber(budget) ? budget->valuedouble : NAN;
    if (!isfinite(b) || floor(b) != b)
        return srv_fail(e, 400, BAD, "invalid_type", "thinking", "'thinking.budget_tokens' must be an integer");
    if (b < 1024) return srv_fail(e, 400, BAD, "invalid_value", "thinking", "'thinking.budget_tokens' must be at least 1024");
    if (cJSON_IsNumber(mt) && b >= mt->valuedouble)
        return srv_fail(e, 400, BAD, "invalid_value", "thinking", "'thinking.budget_tokens' must be less than 'max_tokens'");
    *on = 1 + omit;
    return 0;
}

/* output_config: {effort: low | medium | high | max}, checked. The effort
 * has no effect: the Qwen models' thinking is on or off (the 'thinking'
 * field), with no budget to scale; docs/design.md §8.5 says so. */
static int check_output_config(const cJSON *body, srv_error *e) {
    const cJSON *oc = srv_member(body, "output_config"), *eff;
    if (!oc) return 0;
    if (!cJSON_IsObject(oc)) return srv_fail(e, 400, BAD, "invalid_type", "output_config", "'output_config' must be an object");
    static const char *const KNOWN[] = {"effort", NULL};
    if (only_known(oc, KNOWN, "output_config", e) || want_string(oc, "effort", "output_config", false, &eff, e))
        return -1;
    static const char *const EFFORTS[] = {"low", "medium", "high", "max"};
    for (size_t i = 0; eff && i < sizeof EFFORTS / sizeof *EFFORTS; i++)
        if (!strcmp(eff->valuestring, EFFORTS[i])) return 0;
    return eff ? srv_fail(e, 400, BAD, "invalid_value", "output_config",
                          "'output_config.effort' must be \"low\", \"medium\", \"high\" or \"max\", not \"%.64s\"",
                          eff->valuestring)
               : 0;
}

/* context_management: {edits: [...]}: the edit edge0 applies is
 * clear_thinking_20251015 (keep: {type: "thinking_turns", value: N},
 * default 1, or "all"), which leaves the thinking of all but the last N
 * assistant turns that have some out of the prompt: *keep = N, or -1 (no
 * edit, or keep all). Other edits are refused by name. */
static int convert_context_management(const cJSON *body, int *keep, srv_error *e) {
    const cJSON *cm = srv_member(body, "context_management"), *edits, *ed;
    *keep = -1;
    if (!cm) return 0;
    static const char *const KNOWN[] = {"edits", NULL};
    if (!cJSON_IsObject(cm))
        return srv_fail(e, 400, BAD, "invalid_type", "context_management", "'context_management' must be an object");
    if (only_known(cm, KNOWN, "context_management", e)) return -1;
    edits = srv_member(cm, "edits");
    if (edits && !cJSON_IsArray(edits))
        return srv_fail(e, 400, BAD, "invalid_type", "context_management.edits", "'context_management.edits' must be an array");
    int i = 0;
    cJSON_ArrayForEach(ed, edits) {
        char p[64];
        snprintf(p, sizeof p, "context_management.edits[%d]", i++);
        static const char *const EK[] = {"type", "keep", NULL};
        const cJSON *type, *k;
        if (!cJSON_IsObject(ed)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be an object", p);
        if (want_string(ed, "type", p, true, &type, e)) return -1;
        if (strcmp(type->valuestring, "clear_thinking_20251015"))
            return srv_fail(e, 400, BAD, "unsupported_value", p,
                            "'%s.type': \"%.64s\" is not supported (edge0 applies clear_thinking_20251015)", p,
                            type->valuestring);
        if (only_known(ed, EK, p, e)) return -1;
        k = srv_member(ed, "keep");
        if (!k) {
            *keep = 1;
        } else if (cJSON_IsString(k) && !strcmp(k->valuestring, "all")) {
            *keep = -1;
        } else {
            static const char *const KK[] = {"type", "value", NULL};
            char kp[80];
            snprintf(kp, sizeof kp, "%s.keep", p);
            const cJSON *kt, *kv = cJSON_IsObject(k) ? srv_member(k, "value") : NULL;
            if (!cJSON_IsObject(k))
                return srv_fail(e, 400, BAD, "invalid_type", kp,
                                "'%s' must be \"all\" or {\"type\": \"thinking_turns\", \"value\": N}", kp);
            if (only_known(k, KK, kp, e) || want_string(k, "type", kp, true, &kt, e)) return -1;
            if (strcmp(kt->valuestring, "thinking_turns"))
                return srv_fail(e, 400, BAD, "invalid_value", kp, "'%s.type' must be \"thinking_turns\"", kp);
            if (!cJSON_IsNumber(kv) || kv->valuedouble < 0 || kv->valuedouble > 1e6 || floor(kv->valuedouble) != kv->valuedouble)
                return srv_fail(e, 400, BAD, "invalid_value", kp, "'%s.value' must be an integer of at least 0", kp);
            *keep = (int)kv->valuedouble;
        }
    }
    return 0;
}

/* The sampling fields, checked for Anthropic's types and ranges, copied
 * under the OpenAI names (srv_request_parse applies the rest). */
static int convert_sampling(const cJSON *body, cJSON *o, bool count_only, srv_error *e) {
    const cJSON *v;
    if (!(v = srv_member(body, "max_tokens")) && !count_only)
        return srv_fail(e, 400, BAD, "missing_field", "max_tokens", "'max_tokens' is required");
    if ((v = srv_member(body, "temperature")) &&
        (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 1)))
        return srv_fail(e, 400, BAD, "invalid_value", "temperature", "'temperature' must be a number in [0, 1]");
    if ((v = srv_member(body, "top_k")) && cJSON_IsNumber(v) && v->valuedouble < 0)
        return srv_fail(e, 400, BAD, "invalid_value", "top_k", "'top_k' must be at least 0");
    static const char *const COPY[][2] = {{"max_tokens", "max_tokens"}, {"temperature", "temperature"},
                                          {"top_p", "top_p"},           {"top_k", "top_k"},
                                          {"stream", "stream"},         {"stop_sequences", "stop"}};
    for (size_t i = 0; i < sizeof COPY / sizeof *COPY; i++) {
        if (!(v = srv_member(body, COPY[i][0]))) continue;
        if (i == 5) { /* stop_sequences: the OpenAI name would show in its errors */
            const cJSON *s;
            bool ok = cJSON_IsArray(v);
            cJSON_ArrayForEach(s, v) ok = ok && cJSON_IsString(s);
            if (!ok)
                return srv_fail(e, 400, BAD, "invalid_type", "stop_sequences", "'stop_sequences' must be an array of strings");
            if (cJSON_GetArraySize(v) > SRV_MAX_STOP)
                return srv_fail(e, 400, BAD, "invalid_value", "stop_sequences", "'stop_sequences' holds at most %d strings",
                                SRV_MAX_STOP);
        }
        cJSON *d = cJSON_Duplicate(v, 1);
        if (!d || !cJSON_AddItemToObject(o, COPY[i][1], d)) {
            cJSON_Delete(d);
            return OOM(e);
        }
    }
    const cJSON *md = srv_member(body, "metadata"), *uid;
    if (md) {
        if (!cJSON_IsObject(md)) return srv_fail(e, 400, BAD, "invalid_type", "metadata", "'metadata' must be an object");
        static const char *const KNOWN[] = {"user_id", NULL};
        if (only_known(md, KNOWN, "metadata", e) || want_string(md, "user_id", "metadata", false, &uid, e)) return -1;
    }
    return 0;
}

/* The OpenAI chat body the Messages body means; *prefill as convert_messages. */
static int translate(const cJSON *body, bool count_only, cJSON *o, char **prefill, const char **choice, int *thinking,
                     srv_error *e) {
    static const char *const TOP[] = {"model",       "messages", "max_tokens", "system",   "stop_sequences",
                                      "stream",      "temperature", "top_p",   "top_k",    "metadata",
                                      "tools",       "tool_choice", "thinking", "output_config",
                                      "context_management", NULL};
    const cJSON *model = srv_member(body, "model"), *sys = srv_member(body, "system");
    if (only_known(body, TOP, "", e)) return -1;
    if (!model) return srv_fail(e, 400, BAD, "missing_field", "model", "'model' is required");
    if (!cJSON_IsString(model)) return srv_fail(e, 400, BAD, "invalid_type", "model", "'model' must be a string");
    cJSON *msgs = cJSON_AddArrayToObject(o, "messages");
    if (!msgs) return OOM(e);
    if (sys) {
        cJSON *c, *m;
        if (text_content(sys, "system", &c, e)) return -1;
        if (!(m = srv_add_message(msgs, "system")) || !cJSON_AddItemToObject(m, "content", c)) {
            cJSON_Delete(c);
            return OOM(e);
        }
    }
    int keep = -1;
    if (convert_context_management(body, &keep, e) || check_output_config(body, e) ||
        convert_messages(body, msgs, keep, prefill, e) || convert_tools(body, o, e) || convert_tool_choice(body, o, choice, e) ||
        convert_thinking(body, thinking, e) || convert_sampling(body, o, count_only, e))
        return -1;
    if (*prefill && *thinking >= 1)
        return srv_fail(e, 400, BAD, "invalid_value", "messages",
                        "a final assistant message (a prefill) cannot be continued with thinking enabled");
    if (*prefill) *thinking = 0;
    if (*thinking >= 0 && !cJSON_AddBoolToObject(o, "enable_thinking", *thinking > 0)) return OOM(e);
    return 0;
}

int srv_anthropic_request(srv_request *r, bool count_only, const char *body, size_t len, const srv_defaults *d,
                          char **prompt, size_t *prompt_len, bool *prefilled, srv_error *e) {
    memset(r, 0, sizeof *r);
    if (prefilled) *prefilled = false;
    *prompt = NULL;
    *prompt_len = 0;
    cJSON *j = srv_parse_object(body, len, e);
    if (!j) return -1;
    cJSON *o = cJSON_CreateObject();
    char *prefill = NULL, *text = NULL;
    const char *choice = NULL;
    int thinking = -1, rc = 0;
    if (!o) rc = OOM(e);
    else rc = translate(j, count_only, o, &prefill, &choice, &thinking, e);
    if (!rc && !(text = cJSON_PrintUnformatted(o))) rc = OOM(e);
    if (!rc && srv_request_parse(r, SRV_CHAT, text, strlen(text), d, e)) {
        rc = -1;
        if (choice && !strcmp(e->param, "tool_choice")) { /* say it in the words of the request */
            char was[sizeof e->message];
            snprintf(was, sizeof was, "%s", e->message);
            snprintf(e->message, sizeof e->message, "'tool_choice' {\"type\": \"%s\"} is OpenAI's %s here: %.400s",
                     choice, strcmp(choice, "any") ? "named function" : "\"required\"", was);
        }
    }
    r->hide_thinking = thinking == 2;
    if (!rc && srv_request_render(r, prompt, prompt_len, e)) rc = -1;
    if (!rc && prefill) {
        size_t n = strlen(prefill);
        char *p = realloc(*prompt, *prompt_len + n + 1);
        if (!p) {
            rc = OOM(e);
        } else {
            memcpy(p + *prompt_len, prefill, n + 1);
            *prompt = p;
            *prompt_len += n;
            if (prefilled) *prefilled = true;
        }
    }
    if (rc) {
        if (prefilled) *prefilled = false;
        srv_request_free(r);
        free(*prompt);
        *prompt = NULL;
        *prompt_len = 0;
    }
    free(text);
    free(prefill);
    cJSON_Delete(o);
    cJSON_Delete(j);
    return rc;
}
