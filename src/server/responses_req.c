/* Responses API requests: validation and translation into the OpenAI chat
 * request they mean (responses.h). Nothing here touches a model or HTTP,
 * so fuzz/fuzz_responses.c runs it alone (with request.c).
 *
 * The body is checked against the Responses shapes first, with errors that
 * name its fields ("input[2].call_id"); the translated body then goes
 * through srv_request_parse, which applies the same ranges and refusals as
 * the OpenAI front. Details that are easy to get wrong:
 *  - items are a flat list: an assistant turn is every reasoning, assistant
 *    message and function_call item until the next user message or
 *    function_call_output, and its texts are joined with nothing between
 *    (the content edge0 recorded, for the session's continuation);
 *  - a namespaced function's flat name is Codex's: the namespace without
 *    trailing '_', "__", the name without leading '_';
 *  - the echoed temperature and top_p are the ones the request runs with
 *    (the server's defaults where it gives none), read after parsing.
 */
#include "server/responses.h"

#include "util/sbuf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD "invalid_request_error"
#define OOM(e) srv_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory")

static bool str_eq(const cJSON *v, const char *s) { return cJSON_IsString(v) && !strcmp(v->valuestring, s); }

/* o.name as a string: required or not; *out NULL when absent. */
static int want_string(const cJSON *o, const char *name, const char *path, bool required, const cJSON **out,
                       srv_error *e) {
    const cJSON *v = srv_member(o, name);
    *out = v;
    if (!v && !required) return 0;
    char p[128];
    snprintf(p, sizeof p, "%s%s%s", path, *path ? "." : "", name);
    if (!v) return srv_fail(e, 400, BAD, "missing_field", p, "'%s' is required", p);
    if (!cJSON_IsString(v)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be a string", p);
    return 0;
}

void srv_resp_info_free(srv_resp_info *info) {
    if (!info) return;
    free(info->echo);
    free(info->ignored);
    cJSON_Delete(info->names);
    free(info);
}

/* ---- input ------------------------------------------------------------------ */

typedef struct {
    cJSON *msgs;   /* the chat messages (after the system message, added last) */
    sbuf sys;      /* the system prompt: instructions, then system and developer messages */
    cJSON *asst;   /* the assistant turn being gathered, or NULL */
} tr_input;

/* The text of a content: a string, or parts input_text / output_text
 * (text) and refusal (refusal), joined with `sep`. Media parts are a 400. */
static int content_text(const cJSON *c, const char *path, const char *sep, sbuf *out, srv_error *e) {
    if (cJSON_IsString(c)) {
        sb_puts(out, c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c))
        return srv_fail(e, 400, BAD, "invalid_type", path, "'%s' must be a string or an array of content parts", path);
    const cJSON *part;
    int i = 0;
    cJSON_ArrayForEach(part, c) {
        char p[96];
        snprintf(p, sizeof p, "%s[%d]", path, i);
        const cJSON *type, *t;
        if (!cJSON_IsObject(part)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be an object", p);
        if (want_string(part, "type", p, true, &type, e)) return -1;
        const char *ty = type->valuestring;
        if (!strcmp(ty, "input_text") || !strcmp(ty, "output_text") || !strcmp(ty, "text")) {
            if (want_string(part, "text", p, true, &t, e)) return -1;
        } else if (!strcmp(ty, "refusal")) {
            if (want_string(part, "refusal", p, true, &t, e)) return -1;
        } else if (!strncmp(ty, "input_", 6)) {
            return srv_fail(e, 400, BAD, "unsupported_value", p,
                            "'%s': \"%.64s\" parts are not supported (the model reads text only)", p, ty);
        } else {
            return srv_fail(e, 400, BAD, "unsupported_value", p, "'%s': a part of type \"%.64s\" is not supported", p, ty);
        }
        if (i++) sb_puts(out, sep);
        sb_puts(out, t->valuestring);
    }
    return 0;
}

/* The assistant turn being gathered, opened (content "") when there is none. */
static cJSON *assistant(tr_input *t) {
    if (!t->asst && (t->asst = srv_add_message(t->msgs, "assistant")) && !cJSON_AddStringToObject(t->asst, "content", ""))
        t->asst = NULL;
    return t->asst;
}

/* Appends s to the string member `name` of m (created empty). */
static int append_str(cJSON *m, const char *name, const char *s, srv_error *e) {
    return srv_append_str(m, name, s) ? 0 : OOM(e);
}

/* Codex's flat name of a namespaced function (malloc'd). */
static char *flat_name(const char *ns, const char *name) {
    size_t a = strlen(ns), b;
    while (a && ns[a - 1] == '_') a--;
    while (*name == '_') name++;
    b = strlen(name);
    char *f = malloc(a + b + 3);
    if (f) sprintf(f, "%.*s__%s", (int)a, ns, name);
    return f;
}

static int message_item(tr_input *t, const cJSON *it, const char *p, srv_error *e) {
    const cJSON *role, *c = srv_member(it, "content");
    char cp[96];
    snprintf(cp, sizeof cp, "%s.content", p);
    if (want_string(it, "role", p, true, &role, e)) return -1;
    if (!c) return srv_fail(e, 400, BAD, "missing_field", cp, "'%s' is required", cp);
    const char *r = role->valuestring;
    sbuf text = {0};
    int rc = 0;
    if (!strcmp(r, "system") || !strcmp(r, "developer")) {
        if (t->sys.n) sb_puts(&t->sys, "\n\n");
        rc = content_text(c, cp, "\n", &t->sys, e);
    } else if (!strcmp(r, "user")) {
        t->asst = NULL;
        cJSON *m = srv_add_message(t->msgs, "user");
        rc = content_text(c, cp, "\n", &text, e);
        if (!rc && (text.oom || !m || !cJSON_AddStringToObject(m, "content", text.p ? text.p : ""))) rc = OOM(e);
    } else if (!strcmp(r, "assistant")) {
        cJSON *m = assistant(t);
        rc = content_text(c, cp, "", &text, e);
        if (!rc) rc = text.oom || !m ? OOM(e) : append_str(m, "content", text.p ? text.p : "", e);
    } else {
        char rp[96];
        snprintf(rp, sizeof rp, "%s.role", p);
        rc = srv_fail(e, 400, BAD, "invalid_role", rp,
                      "'%s' must be \"user\", \"assistant\", \"system\" or \"developer\", not \"%.64s\"", rp, r);
    }
    sb_free(&text);
    return rc;
}

static int function_call_item(tr_input *t, const cJSON *it, const char *p, srv_error *e) {
    const cJSON *id, *name, *args, *ns;
    if (want_string(it, "call_id", p, true, &id, e) || want_string(it, "name", p, true, &name, e) ||
        want_string(it, "arguments", p, true, &args, e) || want_string(it, "namespace", p, false, &ns, e))
        return -1;
    cJSON *m = assistant(t), *calls = m ? cJSON_GetObjectItemCaseSensitive(m, "tool_calls") : NULL, *f = NULL;
    if (!m || (!calls && !(calls = cJSON_AddArrayToObject(m, "tool_calls")))) return OOM(e);
    char *flat = ns && *ns->valuestring ? flat_name(ns->valuestring, name->valuestring) : strdup(name->valuestring);
    cJSON *call = flat ? cJSON_CreateObject() : NULL;
    bool ok = call && cJSON_AddItemToArray(calls, call);
    if (!ok) cJSON_Delete(call);
    ok = ok && cJSON_AddStringToObject(call, "id", id->valuestring) && cJSON_AddStringToObject(call, "type", "function") &&
         (f = cJSON_AddObjectToObject(call, "function")) && cJSON_AddStringToObject(f, "name", flat) &&
         cJSON_AddStringToObject(f, "arguments", args->valuestring);
    free(flat);
    return ok ? 0 : OOM(e);
}

static int function_output_item(tr_input *t, const cJSON *it, const char *p, srv_error *e) {
    const cJSON *id, *out = srv_member(it, "output");
    char op[96];
    snprintf(op, sizeof op, "%s.output", p);
    if (want_string(it, "call_id", p, true, &id, e)) return -1;
    if (!out) return srv_fail(e, 400, BAD, "missing_field", op, "'%s' is required", op);
    sbuf text = {0};
    int rc = content_text(out, op, "\n", &text, e);
    t->asst = NULL;
    cJSON *m = rc ? NULL : srv_add_message(t->msgs, "tool");
    if (!rc && (text.oom || !m || !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring) ||
                !cJSON_AddStringToObject(m, "content", text.p ? text.p : "")))
        rc = OOM(e);
    sb_free(&text);
    return rc;
}

/* A reasoning item's text: its content's reasoning_text parts if any (the
 * whole thinking), else its summary_text parts, joined with a blank line. */
static int reasoning_item(tr_input *t, const cJSON *it, const char *p, srv_error *e) {
    static const char *const KEYS[][2] = {{"content", "reasoning_text"}, {"summary", "summary_text"}};
    sbuf text = {0};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        const cJSON *arr = srv_member(it, KEYS[k][0]), *part;
        char ap[96];
        snprintf(ap, sizeof ap, "%s.%s", p, KEYS[k][0]);
        if (arr && !cJSON_IsArray(arr)) rc = srv_fail(e, 400, BAD, "invalid_type", ap, "'%s' must be an array", ap);
        if (rc || text.n) continue; /* content, when it has text, is the reasoning */
        int i = 0;
        cJSON_ArrayForEach(part, arr) {
            char pp[112];
            snprintf(pp, sizeof pp, "%s[%d]", ap, i++);
            const cJSON *type, *tx;
            if (!cJSON_IsObject(part)) rc = srv_fail(e, 400, BAD, "invalid_type", pp, "'%s' must be an object", pp);
            else if (want_string(part, "type", pp, true, &type, e) || want_string(part, "text", pp, true, &tx, e)) rc = -1;
            else if (strcmp(type->valuestring, KEYS[k][1]) && strcmp(type->valuestring, "text"))
                rc = srv_fail(e, 400, BAD, "invalid_value", pp, "'%s.type' must be \"%s\"", pp, KEYS[k][1]);
            if (rc) break;
            if (text.n) sb_puts(&text, "\n\n");
            sb_puts(&text, tx->valuestring);
        }
    }
    const cJSON *enc;
    if (!rc && want_string(it, "encrypted_content", p, false, &enc, e)) rc = -1;
    /* no text (encrypted only, or an empty summary): nothing of the turn, not even an empty one */
    cJSON *m = rc || !text.n ? NULL : assistant(t);
    if (!rc && text.n) rc = !m || text.oom ? OOM(e) : append_str(m, "reasoning_content", text.p, e);
    sb_free(&text);
    return rc;
}

static int convert_input(const cJSON *body, tr_input *t, srv_error *e) {
    const cJSON *in = srv_member(body, "input"), *it;
    if (!in) return srv_fail(e, 400, BAD, "missing_field", "input", "'input' is required");
    if (cJSON_IsString(in)) {
        cJSON *m = srv_add_message(t->msgs, "user");
        return m && cJSON_AddStringToObject(m, "content", in->valuestring) ? 0 : OOM(e);
    }
    if (!cJSON_IsArray(in)) return srv_fail(e, 400, BAD, "invalid_type", "input", "'input' must be a string or an array of items");
    if (!cJSON_GetArraySize(in)) return srv_fail(e, 400, BAD, "invalid_value", "input", "'input' must not be empty");
    int i = 0;
    cJSON_ArrayForEach(it, in) {
        char p[64];
        snprintf(p, sizeof p, "input[%d]", i++);
        const cJSON *type;
        if (!cJSON_IsObject(it)) return srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be an object", p);
        if (want_string(it, "type", p, false, &type, e)) return -1;
        const char *ty = type ? type->valuestring : "message"; /* {role, content}: an easy input message */
        int rc;
        if (!strcmp(ty, "message")) rc = message_item(t, it, p, e);
        else if (!strcmp(ty, "function_call")) rc = function_call_item(t, it, p, e);
        else if (!strcmp(ty, "function_call_output")) rc = function_output_item(t, it, p, e);
        else if (!strcmp(ty, "reasoning")) rc = reasoning_item(t, it, p, e);
        else if (!strcmp(ty, "item_reference"))
            rc = srv_fail(e, 400, BAD, "unsupported_value", p,
                          "'%s': item_reference is not supported: edge0 keeps no responses or items; send the items "
                          "themselves",
                          p);
        else
            rc = srv_fail(e, 400, BAD, "unsupported_value", p,
                          "'%s': an item of type \"%.64s\" is not supported (message, reasoning, function_call and "
                          "function_call_output are)",
                          p, ty);
        if (rc) return -1;
    }
    return 0;
}

/* ---- tools ----------------------------------------------------------------------- */

/* Adds a type to the comma-separated list of ignored tool types (once). */
static int ignore_type(srv_resp_info *info, const char *type, const char *path, srv_error *e) {
    /* it goes into a header: letters, digits, '_', '.', '-' only */
    size_t k = 0;
    while (k < 64 && ((type[k] >= 'a' && type[k] <= 'z') || (type[k] >= 'A' && type[k] <= 'Z') ||
                      (type[k] >= '0' && type[k] <= '9') || type[k] == '_' || type[k] == '.' || type[k] == '-'))
        k++;
    if (!k || type[k])
        return srv_fail(e, 400, BAD, "invalid_value", path,
                        "'%s.type' is not a tool type (up to 64 letters, digits, '_', '.' or '-')", path);
    const char *l = info->ignored;
    size_t n = strlen(type);
    for (const char *at = l; at && (at = strstr(at, type)); at += n)
        if ((at == l || at[-1] == ',') && (at[n] == ',' || !at[n])) return 0;
    size_t m = l ? strlen(l) : 0;
    char *x = realloc(info->ignored, m + n + 2);
    if (!x) return OOM(e);
    if (m) x[m++] = ',';
    memcpy(x + m, type, n + 1);
    info->ignored = x;
    return 0;
}

/* One function tool {type, name, description?, parameters?, strict?} as a
 * chat tool named `name` (the flat name of a namespaced one). */
static int function_tool(const cJSON *t, const char *p, const char *name, cJSON *out, srv_error *e) {
    const cJSON *desc, *params = srv_member(t, "parameters"), *strict = srv_member(t, "strict");
    char pp[128];
    if (want_string(t, "description", p, false, &desc, e)) return -1;
    snprintf(pp, sizeof pp, "%s.parameters", p);
    if (params && !cJSON_IsObject(params))
        return srv_fail(e, 400, BAD, "invalid_type", pp, "'%s' must be a JSON schema object", pp);
    snprintf(pp, sizeof pp, "%s.strict", p);
    if (strict && !cJSON_IsBool(strict)) return srv_fail(e, 400, BAD, "invalid_type", pp, "'%s' must be true or false", pp);
    if (!*name) return srv_fail(e, 400, BAD, "invalid_value", p, "'%s.name' must not be empty", p);
    cJSON *ot = cJSON_CreateObject(), *f = NULL, *pa = params ? cJSON_Duplicate(params, 1) : NULL;
    bool ok = ot && (!params || pa) && cJSON_AddItemToArray(out, ot);
    if (!ok) cJSON_Delete(ot);
    ok = ok && cJSON_AddStringToObject(ot, "type", "function") && (f = cJSON_AddObjectToObject(ot, "function")) &&
         cJSON_AddStringToObject(f, "name", name) && (!desc || cJSON_AddStringToObject(f, "description", desc->valuestring));
    if (!ok || (pa && !cJSON_AddItemToObject(f, "parameters", pa))) {
        cJSON_Delete(pa);
        return OOM(e);
    }
    return 0;
}

/* A namespace {type, name, description?, tools: [function...]}: its functions, flat-named and remembered. */
static int namespace_tool(const cJSON *t, const char *p, cJSON *out, srv_resp_info *info, srv_error *e) {
    const cJSON *ns, *desc, *tools = srv_member(t, "tools"), *f;
    char tp[96];
    snprintf(tp, sizeof tp, "%s.tools", p);
    if (want_string(t, "name", p, true, &ns, e) || want_string(t, "description", p, false, &desc, e)) return -1;
    if (!*ns->valuestring) return srv_fail(e, 400, BAD, "invalid_value", p, "'%s.name' must not be empty", p);
    if (!cJSON_IsArray(tools)) return srv_fail(e, 400, BAD, "invalid_type", tp, "'%s' must be an array of tools", tp);
    int i = 0;
    cJSON_ArrayForEach(f, tools) {
        char fp[112];
        snprintf(fp, sizeof fp, "%s[%d]", tp, i++);
        const cJSON *type, *name;
        if (!cJSON_IsObject(f)) return srv_fail(e, 400, BAD, "invalid_type", fp, "'%s' must be an object", fp);
        if (want_string(f, "type", fp, true, &type, e)) return -1;
        if (strcmp(type->valuestring, "function")) {
            if (ignore_type(info, type->valuestring, fp, e)) return -1;
            continue;
        }
        if (want_string(f, "name", fp, true, &name, e)) return -1;
        char *flat = flat_name(ns->valuestring, name->valuestring);
        if (!flat) return OOM(e);
        int rc = function_tool(f, fp, flat, out, e);
        cJSON *n = rc ? NULL : cJSON_CreateObject();
        if (!rc && (!n || (!info->names && !(info->names = cJSON_CreateArray())) || !cJSON_AddItemToArray(info->names, n))) {
            cJSON_Delete(n);
            rc = OOM(e);
        } else if (!rc && (!cJSON_AddStringToObject(n, "flat", flat) ||
                           !cJSON_AddStringToObject(n, "namespace", ns->valuestring) ||
                           !cJSON_AddStringToObject(n, "name", name->valuestring))) {
            rc = OOM(e);
        }
        free(flat);
        if (rc) return -1;
    }
    return 0;
}

static int convert_tools(const cJSON *body, cJSON *o, srv_resp_info *info, srv_error *e) {
    const cJSON *ts = srv_member(body, "tools"), *t;
    if (!ts) return 0;
    if (!cJSON_IsArray(ts)) return srv_fail(e, 400, BAD, "invalid_type", "tools", "'tools' must be an array");
    cJSON *out = cJSON_CreateArray();
    if (!out) return OOM(e);
    int i = 0, rc = 0;
    cJSON_ArrayForEach(t, ts) {
        char p[64];
        snprintf(p, sizeof p, "tools[%d]", i++);
        const cJSON *type, *name;
        if (!cJSON_IsObject(t)) rc = srv_fail(e, 400, BAD, "invalid_type", p, "'%s' must be an object", p);
        else if (want_string(t, "type", p, true, &type, e)) rc = -1;
        else if (!strcmp(type->valuestring, "function"))
            rc = want_string(t, "name", p, true, &name, e) ? -1 : function_tool(t, p, name->valuestring, out, e);
        else if (!strcmp(type->valuestring, "namespace")) rc = namespace_tool(t, p, out, info, e);
        else rc = ignore_type(info, type->valuestring, p, e); /* a hosted tool edge0 cannot run */
        if (rc) break;
    }
    if (!rc && cJSON_GetArraySize(out) && !cJSON_AddItemToObject(o, "tools", out)) rc = OOM(e);
    else if (rc || !cJSON_GetArraySize(out)) cJSON_Delete(out);
    return rc;
}

/* tool_choice: auto | none | required | {type: "function", name, namespace?}. */
static int convert_tool_choice(const cJSON *body, cJSON *o, srv_error *e) {
    const cJSON *tc = srv_member(body, "tool_choice"), *type, *name, *ns;
    if (!tc) return 0;
    if (cJSON_IsString(tc)) {
        const char *s = tc->valuestring;
        if (strcmp(s, "auto") && strcmp(s, "none") && strcmp(s, "required"))
            return srv_fail(e, 400, BAD, "invalid_value", "tool_choice",
                            "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\"}, "
                            "not \"%.64s\"",
                            s);
        return cJSON_AddStringToObject(o, "tool_choice", s) ? 0 : OOM(e);
    }
    if (!cJSON_IsObject(tc))
        return srv_fail(e, 400, BAD, "invalid_type", "tool_choice",
                        "'tool_choice' must be a string or {\"type\": \"function\", \"name\": ...}");
    if (want_string(tc, "type", "tool_choice", true, &type, e)) return -1;
    if (strcmp(type->valuestring, "function"))
        return srv_fail(e, 400, BAD, "unsupported_value", "tool_choice",
                        "'tool_choice' {\"type\": \"%.64s\"} is not supported: edge0 can force a function "
                        "({\"type\": \"function\", \"name\"}) or any of them (\"required\"), and runs no hosted tools",
                        type->valuestring);
    if (want_string(tc, "name", "tool_choice", true, &name, e) || want_string(tc, "namespace", "tool_choice", false, &ns, e))
        return -1;
    char *flat = ns && *ns->valuestring ? flat_name(ns->valuestring, name->valuestring) : strdup(name->valuestring);
    cJSON *c = flat ? cJSON_AddObjectToObject(o, "tool_choice") : NULL, *f = NULL;
    bool ok = c && cJSON_AddStringToObject(c, "type", "function") && (f = cJSON_AddObjectToObject(c, "function")) &&
              cJSON_AddStringToObject(f, "name", flat);
    free(flat);
    return ok ? 0 : OOM(e);
}

/* ---- text, reasoning, sampling ------------------------------------------------ */

/* text: {format: {type: text | json_object | json_schema, name, schema, strict, description}, verbosity}. */
static int convert_text(const cJSON *body, cJSON *o, srv_error *e) {
    const cJSON *tx = srv_member(body, "text"), *f, *type, *verb, *name, *schema, *strict;
    if (!tx) return 0;
    if (!cJSON_IsObject(tx)) return srv_fail(e, 400, BAD, "invalid_type", "text", "'text' must be an object");
    if (want_string(tx, "verbosity", "text", false, &verb, e)) return -1;
    if (verb && strcmp(verb->valuestring, "low") && strcmp(verb->valuestring, "medium") && strcmp(verb->valuestring, "high"))
        return srv_fail(e, 400, BAD, "invalid_value", "text.verbosity",
                        "'text.verbosity' must be \"low\", \"medium\" or \"high\"");
    if (!(f = srv_member(tx, "format"))) return 0;
    if (!cJSON_IsObject(f)) return srv_fail(e, 400, BAD, "invalid_type", "text.format", "'text.format' must be an object");
    if (want_string(f, "type", "text.format", true, &type, e)) return -1;
    const char *t = type->valuestring;
    if (!strcmp(t, "text")) return 0;
    cJSON *rf = cJSON_AddObjectToObject(o, "response_format"), *js = NULL, *sc = NULL;
    if (!rf || !cJSON_AddStringToObject(rf, "type", t)) return OOM(e);
    if (!strcmp(t, "json_object")) return 0;
    if (strcmp(t, "json_schema"))
        return srv_fail(e, 400, BAD, "unsupported_value", "text.format",
                        "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\", not \"%.64s\"", t);
    if (want_string(f, "name", "text.format", true, &name, e)) return -1;
    schema = srv_member(f, "schema");
    strict = srv_member(f, "strict");
    if (!cJSON_IsObject(schema))
        return srv_fail(e, 400, BAD, schema ? "invalid_type" : "missing_field", "text.format.schema",
                        "'text.format.schema' must be a JSON schema object");
    if (strict && !cJSON_IsBool(strict))
        return srv_fail(e, 400, BAD, "invalid_type", "text.format.strict", "'text.format.strict' must be true or false");
    if (!(js = cJSON_AddObjectToObject(rf, "json_schema")) || !cJSON_AddStringToObject(js, "name", name->valuestring))
        return OOM(e);
    if (!(sc = cJSON_Duplicate(schema, 1)) || !cJSON_AddItemToObject(js, "schema", sc)) {
        cJSON_Delete(sc);
        return OOM(e);
    }
    bool ok = !strict || cJSON_AddBoolToObject(js, "strict", cJSON_IsTrue(strict));
    return ok ? 0 : OOM(e);
}

/* reasoning: {effort, summary, generate_summary}: effort none / minimal is thinking off, others on. */
static int convert_reasoning(const cJSON *body, cJSON *o, srv_error *e) {
    const cJSON *rs = srv_member(body, "reasoning"), *eff, *sum;
    if (!rs) return 0;
    if (!cJSON_IsObject(rs)) return srv_fail(e, 400, BAD, "invalid_type", "reasoning", "'reasoning' must be an object");
    static const char *const EFFORT[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
    static const char *const SUMMARY[] = {"auto", "concise", "detailed"};
    if (want_string(rs, "effort", "reasoning", false, &eff, e)) return -1;
    size_t k = 0;
    while (eff && k < 6 && strcmp(eff->valuestring, EFFORT[k])) k++;
    if (k == 6)
        return srv_fail(e, 400, BAD, "invalid_value", "reasoning.effort",
                        "'reasoning.effort' must be \"none\", \"minimal\", \"low\", \"medium\", \"high\" or \"xhigh\"");
    for (int s = 0; s < 2; s++) {
        const char *key = s ? "generate_summary" : "summary";
        char p[48];
        snprintf(p, sizeof p, "reasoning.%s", key);
        if (want_string(rs, key, "reasoning", false, &sum, e)) return -1;
        size_t m = 0;
        while (sum && m < 3 && strcmp(sum->valuestring, SUMMARY[m])) m++;
        if (m == 3) return srv_fail(e, 400, BAD, "invalid_value", p, "'%s' must be \"auto\", \"concise\" or \"detailed\"", p);
    }
    if (eff && !cJSON_AddBoolToObject(o, "enable_thinking", k >= 2)) return OOM(e);
    return 0;
}

/* The fields with no effect, checked for their types; those that would
 * change the answer and are not supported, refused by name. */
static int check_others(const cJSON *body, srv_error *e) {
    static const char *const STRINGS[] = {"model", "prompt_cache_key", "prompt_cache_retention", "user",
                                          "safety_identifier", "service_tier", "previous_response_id"};
    static const char *const OBJECTS[] = {"metadata", "client_metadata", "stream_options"};
    const cJSON *v;
    for (size_t i = 0; i < sizeof STRINGS / sizeof *STRINGS; i++)
        if (want_string(body, STRINGS[i], "", false, &v, e)) return -1;
    for (size_t i = 0; i < sizeof OBJECTS / sizeof *OBJECTS; i++)
        if ((v = srv_member(body, OBJECTS[i])) && !cJSON_IsObject(v))
            return srv_fail(e, 400, BAD, "invalid_type", OBJECTS[i], "'%s' must be an object", OBJECTS[i]);
    if ((v = srv_member(body, "metadata"))) {
        const cJSON *m;
        cJSON_ArrayForEach(m, v) if (!cJSON_IsString(m))
            return srv_fail(e, 400, BAD, "invalid_type", "metadata", "'metadata.%.64s' must be a string", m->string);
    }
    if ((v = srv_member(body, "store")) && !cJSON_IsBool(v))
        return srv_fail(e, 400, BAD, "invalid_type", "store", "'store' must be true or false");
    if ((v = srv_member(body, "truncation")) && !str_eq(v, "auto") && !str_eq(v, "disabled"))
        return srv_fail(e, 400, BAD, "invalid_value", "truncation", "'truncation' must be \"auto\" or \"disabled\"");
    if ((v = srv_member(body, "include"))) {
        const cJSON *s;
        if (!cJSON_IsArray(v)) return srv_fail(e, 400, BAD, "invalid_type", "include", "'include' must be an array of strings");
        cJSON_ArrayForEach(s, v) {
            if (!cJSON_IsString(s)) return srv_fail(e, 400, BAD, "invalid_type", "include", "'include' must be an array of strings");
            if (!strcmp(s->valuestring, "message.output_text.logprobs"))
                return srv_fail(e, 400, BAD, "unsupported_value", "include",
                                "'include': \"message.output_text.logprobs\" is not supported by edge0's Responses API "
                                "(chat completions report logprobs)");
        }
    }
    if (srv_member(body, "previous_response_id") || srv_member(body, "conversation")) {
        const char *f = srv_member(body, "previous_response_id") ? "previous_response_id" : "conversation";
        return srv_fail(e, 400, BAD, "unsupported_value", f,
                        "'%s' is not supported: edge0 keeps no responses or conversations (store is always false); "
                        "send the whole conversation in 'input'",
                        f);
    }
    if ((v = srv_member(body, "background")) && !cJSON_IsFalse(v))
        return srv_fail(e, 400, BAD, "unsupported_value", "background", "'background' responses are not supported by edge0");
    if (srv_member(body, "prompt"))
        return srv_fail(e, 400, BAD, "unsupported_value", "prompt",
                        "'prompt' (a stored prompt template) is not supported: edge0 keeps no prompts");
    if ((v = srv_member(body, "top_logprobs")) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return srv_fail(e, 400, BAD, "unsupported_value", "top_logprobs",
                        "'top_logprobs' is not supported by edge0's Responses API (chat completions report logprobs)");
    if ((v = srv_member(body, "max_tool_calls")) && !(cJSON_IsNumber(v) && v->valuedouble == 1))
        return srv_fail(e, 400, BAD, "unsupported_value", "max_tool_calls",
                        "'max_tool_calls' other than 1 is not supported (parallel_tool_calls false allows one call)");
    return 0;
}

/* max_output_tokens, temperature, top_p, stream, parallel_tool_calls, under the chat names. */
static int convert_sampling(const cJSON *body, cJSON *o, srv_error *e) {
    const cJSON *v;
    if ((v = srv_member(body, "max_output_tokens")) &&
        (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble || v->valuedouble < 1))
        return srv_fail(e, 400, BAD, "invalid_value", "max_output_tokens", "'max_output_tokens' must be an integer of at least 1");
    if ((v = srv_member(body, "temperature")) && (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= 2)))
        return srv_fail(e, 400, BAD, "invalid_value", "temperature", "'temperature' must be a number in [0, 2]");
    if ((v = srv_member(body, "top_p")) && (!cJSON_IsNumber(v) || !(v->valuedouble > 0 && v->valuedouble <= 1)))
        return srv_fail(e, 400, BAD, "invalid_value", "top_p", "'top_p' must be a number in (0, 1]");
    static const char *const BOOLS[] = {"stream", "parallel_tool_calls"};
    for (int i = 0; i < 2; i++)
        if ((v = srv_member(body, BOOLS[i])) && !cJSON_IsBool(v))
            return srv_fail(e, 400, BAD, "invalid_type", BOOLS[i], "'%s' must be true or false", BOOLS[i]);
    if ((v = srv_member(body, "max_tool_calls")) && !cJSON_AddBoolToObject(o, "parallel_tool_calls", false)) return OOM(e);
    static const char *const COPY[][2] = {{"max_output_tokens", "max_tokens"}, {"temperature", "temperature"},
                                          {"top_p", "top_p"}, {"stream", "stream"}, {"parallel_tool_calls",
                                          "parallel_tool_calls"}};
    for (size_t i = 0; i < sizeof COPY / sizeof *COPY; i++) {
        if (!(v = srv_member(body, COPY[i][0])) || cJSON_GetObjectItemCaseSensitive(o, COPY[i][1])) continue;
        cJSON *d = cJSON_Duplicate(v, 1);
        if (!d || !cJSON_AddItemToObject(o, COPY[i][1], d)) {
            cJSON_Delete(d);
            return OOM(e);
        }
    }
    return 0;
}

/* The OpenAI chat body the Responses body means. */
static int translate(const cJSON *body, cJSON *o, srv_resp_info *info, srv_error *e) {
    const cJSON *ins;
    tr_input t = {0};
    if (check_others(body, e) || want_string(body, "instructions", "", false, &ins, e)) return -1;
    if (!(t.msgs = cJSON_AddArrayToObject(o, "messages"))) return OOM(e);
    if (ins) sb_puts(&t.sys, ins->valuestring);
    int rc = convert_input(body, &t, e);
    if (!rc && t.sys.oom) rc = OOM(e);
    if (!rc && !cJSON_GetArraySize(t.msgs))
        rc = srv_fail(e, 400, BAD, "invalid_value", "input", "'input' holds no user or assistant message");
    if (!rc && t.sys.n) { /* the system message, first */
        cJSON *m = cJSON_CreateObject();
        if (!m || !cJSON_AddStringToObject(m, "role", "system") || !cJSON_AddStringToObject(m, "content", t.sys.p) ||
            !cJSON_InsertItemInArray(t.msgs, 0, m)) {
            cJSON_Delete(m);
            rc = OOM(e);
        }
    }
    sb_free(&t.sys);
    if (rc || convert_tools(body, o, info, e) || convert_tool_choice(body, o, e) || convert_text(body, o, e) ||
        convert_reasoning(body, o, e) || convert_sampling(body, o, e))
        return -1;
    /* A forced call is the whole output of this turn: text.format has no
     * text to shape here (the Agents SDK sends both, the format meant for
     * the turn that answers), so only the call's grammar is enforced. */
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(o, "tool_choice");
    if ((str_eq(tc, "required") || cJSON_IsObject(tc)) && cJSON_GetObjectItemCaseSensitive(o, "tools"))
        cJSON_DeleteItemFromObjectCaseSensitive(o, "response_format");
    return 0;
}

/* ---- the echo -------------------------------------------------------------------- */

/* A member of body copied into the echo under `name`, or `dflt` (JSON) when absent. */
static bool echo_copy(cJSON *echo, const cJSON *body, const char *name, const char *dflt) {
    const cJSON *v = srv_member(body, name);
    cJSON *d = v ? cJSON_Duplicate(v, 1) : cJSON_Parse(dflt);
    if (d && cJSON_AddItemToObject(echo, name, d)) return true;
    cJSON_Delete(d);
    return false;
}

/* The request's parameters as the response repeats them (OpenAI's order). */
static int make_echo(const cJSON *body, const srv_request *r, srv_resp_info *info, srv_error *e) {
    cJSON *echo = cJSON_CreateObject(), *rs = NULL, *tx = NULL;
    const cJSON *rq = srv_member(body, "reasoning"), *tq = srv_member(body, "text");
    bool ok = echo && echo_copy(echo, body, "instructions", "null") &&
              echo_copy(echo, body, "max_output_tokens", "null") && echo_copy(echo, body, "metadata", "{}") &&
              cJSON_AddBoolToObject(echo, "parallel_tool_calls", r->parallel_tool_calls) &&
              cJSON_AddNullToObject(echo, "previous_response_id") &&
              echo_copy(echo, body, "prompt_cache_key", "null") && (rs = cJSON_AddObjectToObject(echo, "reasoning")) &&
              echo_copy(rs, rq, "effort", "null") && echo_copy(rs, rq, "summary", "null") &&
              cJSON_AddStringToObject(echo, "service_tier", "default") && cJSON_AddBoolToObject(echo, "store", false) &&
              cJSON_AddNumberToObject(echo, "temperature", round(r->sample.temperature * 1e6) / 1e6) &&
              (tx = cJSON_AddObjectToObject(echo, "text")) && echo_copy(tx, tq, "format", "{\"type\":\"text\"}") &&
              echo_copy(tx, tq, "verbosity", "\"medium\"") && echo_copy(echo, body, "tool_choice", "\"auto\"") &&
              echo_copy(echo, body, "tools", "[]") && cJSON_AddNumberToObject(echo, "top_logprobs", 0) &&
              cJSON_AddNumberToObject(echo, "top_p", round(r->sample.top_p * 1e6) / 1e6) &&
              echo_copy(echo, body, "truncation", "\"disabled\"") && echo_copy(echo, body, "user", "null");
    char *s = ok ? cJSON_PrintUnformatted(echo) : NULL;
    cJSON_Delete(echo);
    if (!s) return OOM(e);
    size_t n = strlen(s); /* the members, without the braces */
    memmove(s, s + 1, n - 2);
    s[n - 2] = 0;
    info->echo = s;
    return 0;
}

/* Errors of the translated request in the words of this one. The chat
 * messages are not numbered as the input items are: their errors name
 * 'input' and keep the chat message's words. */
static void reword(srv_error *e) {
    if (!strncmp(e->param, "messages", 8)) {
        char was[sizeof e->message];
        snprintf(was, sizeof was, "%s", e->message);
        snprintf(e->param, sizeof e->param, "input");
        snprintf(e->message, sizeof e->message, "'input', as the chat messages it makes: %.440s", was);
        return;
    }
    static const char *const MAP[][2] = {{"response_format", "text.format"}, {"max_tokens", "max_output_tokens"}};
    for (size_t i = 0; i < sizeof MAP / sizeof *MAP; i++) {
        size_t n = strlen(MAP[i][0]);
        if (strncmp(e->param, MAP[i][0], n)) continue;
        char rest[sizeof e->param];
        snprintf(rest, sizeof rest, "%s", e->param + n);
        snprintf(e->param, sizeof e->param, "%s%s", MAP[i][1], rest);
        char *at = strstr(e->message, MAP[i][0]);
        if (at && at > e->message && at[-1] == '\'') {
            char msg[sizeof e->message];
            snprintf(msg, sizeof msg, "%.*s%s%s", (int)(at - e->message), e->message, MAP[i][1], at + n);
            snprintf(e->message, sizeof e->message, "%s", msg);
        }
        return;
    }
}

int srv_responses_request(srv_request *r, srv_resp_info **info, const char *body, size_t len, const srv_defaults *d,
                          char **prompt, size_t *prompt_len, srv_error *e) {
    memset(r, 0, sizeof *r);
    *info = NULL;
    *prompt = NULL;
    *prompt_len = 0;
    cJSON *j = srv_parse_object(body, len, e);
    if (!j) return -1;
    cJSON *o = cJSON_CreateObject();
    srv_resp_info *in = calloc(1, sizeof *in);
    char *text = NULL;
    int rc = 0;
    if (!o || !in) rc = OOM(e);
    else rc = translate(j, o, in, e);
    if (!rc && !(text = cJSON_PrintUnformatted(o))) rc = OOM(e);
    if (!rc && srv_request_parse(r, SRV_CHAT, text, strlen(text), d, e)) {
        reword(e);
        rc = -1;
    }
    if (!rc && make_echo(j, r, in, e)) rc = -1;
    if (!rc && srv_request_render(r, prompt, prompt_len, e)) {
        reword(e);
        rc = -1;
    }
    if (rc) {
        srv_request_free(r);
        srv_resp_info_free(in);
        in = NULL;
        free(*prompt);
        *prompt = NULL;
        *prompt_len = 0;
    }
    *info = in;
    free(text);
    cJSON_Delete(o);
    cJSON_Delete(j);
    return rc;
}
