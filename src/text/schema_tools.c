/* The roots of schema grammars (schema.h): the reasoning prefixes,
 * response_format, and the tool calls in Qwen3's JSON and Qwen3.5's XML
 * forms. */
#include "text/schema_int.h"

#include "util/arr.h"
#include "util/err.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- roots ----------------------------------------------------------------------- */

static void sc_init(sc *c, gram_builder *b, const cJSON *doc, char *err) {
    memset(c, 0, sizeof *c);
    c->b = b;
    c->err = err;
    c->doc = doc;
    c->ws = c->chr = c->str = c->num = c->any = c->key_free_json = c->key_free_xml = c->think_ws = -1;
}

/* The three roots of schema.h around `body`, compiled. */
static int finish(sc *c, int32_t body, gram **out) {
    gram_builder *b = c->b;
    if (!c->rc) {
        int32_t tws = gb_rep(b, gb_set_rule(b, &(gram_set){{(1ull << ' ') | (1ull << '\n')}}), 0, 4);
        int32_t open = gb_rule(b), a = gb_alt(b, open);
        gb_ref(b, a, gb_until(b, "</think>"));
        gb_ref(b, a, tws);
        gb_ref(b, a, body);
        int32_t may = gb_rule(b);
        a = gb_alt(b, may);
        gb_str(b, a, "<think>");
        gb_ref(b, a, open);
        gb_ref(b, gb_alt(b, may), body);
        int32_t roots[3] = {body, sc_chk(c, open), sc_chk(c, may)};
        if (!c->rc) {
            char e[E0_ERR_MAX];
            int rc = gram_compile(b, roots, 3, out, e);
            if (rc == E0_EINVAL)
                sc_fail(c, E0_EUNSUPPORTED, "the schema recurses without consuming text (%s)", e);
            else if (rc == E0_ERANGE)
                sc_fail(c, E0_ERANGE, "the schema is too large for a grammar (%s)", e);
            else if (rc)
                sc_fail(c, rc, "%s", e);
        }
    }
    gb_free(b);
    cJSON_Delete(c->owned);
    c->owned = NULL;
    return c->rc;
}

int schema_value_grammar(const cJSON *schema, gram **out, char *err) {
    *out = NULL;
    gram_builder *b = gb_new();
    if (!b) return e0_fail(err, E0_ENOMEM, "out of memory");
    sc c;
    sc_init(&c, b, schema, err);
    return finish(&c, sc_value(&c, schema, 0), out);
}

int e0_grammar_response_format(const cJSON *rf, gram **out, char *err) {
    *out = NULL;
    const cJSON *t = cJSON_IsObject(rf) ? sc_kw(rf, "type") : NULL;
    if (!cJSON_IsString(t)) return e0_fail(err, E0_EINVAL, "response_format: 'type' must be a string");
    gram_builder *b = gb_new();
    if (!b) return e0_fail(err, E0_ENOMEM, "out of memory");
    sc c;
    sc_init(&c, b, NULL, err);
    int32_t body = -1;
    if (!strcmp(t->valuestring, "json_object")) {
        snprintf(c.path, sizeof c.path, "response_format");
        int32_t any = sc_any(&c), member = gb_rule(b), a = gb_alt(b, member), ws = sc_ws(&c);
        gb_ref(b, a, sc_string(&c, 0, -1));
        gb_ref(b, a, ws);
        gb_str(b, a, ":");
        gb_ref(b, a, ws);
        gb_ref(b, a, any);
        body = sc_chk(&c, sc_list(&c, "{", "}", member, 0, -1));
    } else if (!strcmp(t->valuestring, "json_schema")) {
        const cJSON *js = sc_kw(rf, "json_schema"), *name = js ? sc_kw(js, "name") : NULL, *schema = js ? sc_kw(js, "schema") : NULL;
        snprintf(c.path, sizeof c.path, "response_format.json_schema");
        if (!cJSON_IsObject(js)) sc_fail(&c, E0_EINVAL, "must be an object");
        else if (!cJSON_IsString(name) || !*name->valuestring) sc_fail(&c, E0_EINVAL, "'name' must be a non-empty string");
        else if (sc_kw(js, "strict") && !cJSON_IsBool(sc_kw(js, "strict"))) sc_fail(&c, E0_EINVAL, "'strict' must be a boolean");
        else if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
            sc_fail(&c, E0_EINVAL, "'schema' must be a JSON schema object");
        if (!c.rc) {
            snprintf(c.path, sizeof c.path, "response_format.json_schema.schema");
            c.doc = schema;
            body = schema ? sc_value(&c, schema, 0) : sc_any(&c);
        }
    } else {
        snprintf(c.path, sizeof c.path, "response_format");
        sc_fail(&c, E0_EINVAL, "'type' must be \"text\", \"json_object\" or \"json_schema\", not \"%.32s\"", t->valuestring);
    }
    return finish(&c, body, out);
}

/* A parameter the XML form reads as a string (toolcall.c param_type 's'). */
static bool xml_reads_string(const cJSON *p) {
    const cJSON *ty = sc_kw(p, "type"), *it;
    if (cJSON_IsString(ty)) return !strcmp(ty->valuestring, "string");
    if (cJSON_IsArray(ty)) {
        cJSON_ArrayForEach(it, ty) if (cJSON_IsString(it) && !strcmp(it->valuestring, "string")) return true;
        return false;
    }
    return !(cJSON_IsObject(p) && (sc_kw(p, "anyOf") || sc_kw(p, "oneOf")));
}

/* <parameter=KEY>\n VALUE \n</parameter>\n */
static int32_t xml_param(sc *c, const char *key, const cJSON *p, int32_t raw_text) {
    gram_builder *b = c->b;
    for (const char *k = key; *k; k++)
        if (*k == '<' || *k == '>' || *k == '\n')
            return sc_fail(c, E0_EUNSUPPORTED, "the XML tool-call form cannot write a parameter named \"%.64s\"", key);
    if (!*key) return sc_fail(c, E0_EUNSUPPORTED, "the XML tool-call form cannot write an empty parameter name");
    int32_t r = gb_rule(b), a = gb_alt(b, r);
    gb_str(b, a, "<parameter=");
    gb_str(b, a, key);
    gb_str(b, a, ">\n");
    if (!p || (cJSON_IsObject(p) && xml_reads_string(p))) {
        static const char *const STR_KW[] = {"type", "enum", "const", "nullable", "pattern", "format", "minLength",
                                             "maxLength"};
        if (p) {
            const char *o = sc_other_keyword(p, STR_KW, sizeof STR_KW / sizeof *STR_KW);
            if (o)
                return sc_fail(c, E0_EUNSUPPORTED,
                               "'%.64s' is not supported on a parameter the XML tool-call form writes as raw text", o);
            if (sc_check_keywords(c, p)) return -1;
        }
        if (p && (sc_kw(p, "enum") || sc_kw(p, "const"))) {
            int types;
            if (sc_types_of(c, p, &types)) return -1;
            gb_ref(b, a, sc_enum(c, p, T_STR, true));
            gb_str(b, a, "\n</parameter>\n");
        } else if (p && (sc_kw(p, "pattern") || sc_kw(p, "format") || sc_kw(p, "minLength") || sc_kw(p, "maxLength"))) {
            gb_ref(b, a, sc_string_schema(c, p, true));
            gb_str(b, a, "\n</parameter>\n");
        } else {
            gb_ref(b, a, raw_text);
            gb_str(b, a, "\n");
        }
    } else {
        gb_ref(b, a, sc_value(c, p, 1));
        gb_str(b, a, "\n</parameter>\n");
    }
    return c->rc ? -1 : sc_chk(c, r);
}

static int32_t tool_call(sc *c, const cJSON *fn, e0_tool_form form) {
    gram_builder *b = c->b;
    const char *name = sc_kw(fn, "name")->valuestring;
    const cJSON *params = sc_kw(fn, "parameters");
    c->doc = params;
    int32_t r = gb_rule(b), a = gb_alt(b, r);
    if (params) {
        int types;
        if (!cJSON_IsObject(params)) return sc_fail(c, E0_EINVAL, "must be a JSON schema object");
        if ((sc_kw(params, "allOf") || sc_kw(params, "$ref")) && !(params = sc_merge(c, params))) return -1;
        if (sc_check_keywords(c, params) || sc_types_of(c, params, &types)) return -1;
        if (!(types & T_OBJ)) return sc_fail(c, E0_EINVAL, "'type' must be \"object\"");
        static const char *const OBJ_KW[] = {"type", "properties", "required", "additionalProperties", "$defs",
                                             "definitions"};
        const char *o = sc_other_keyword(params, OBJ_KW, 6);
        if (o) return sc_fail(c, E0_EUNSUPPORTED, "'%.64s' on the parameters object is not supported", o);
    }
    if (form == E0_TOOL_FORM_JSON) {
        cJSON *ns = cJSON_CreateString(name);
        char *lit = ns ? cJSON_PrintUnformatted(ns) : NULL;
        cJSON_Delete(ns);
        if (!lit) return sc_fail(c, E0_ENOMEM, "out of memory");
        gb_str(b, a, "<tool_call>\n{\"name\": ");
        gb_str(b, a, lit);
        gb_str(b, a, ", \"arguments\": ");
        free(lit);
        if (params) gb_ref(b, a, sc_object(c, params, 1));
        else gb_str(b, a, "{}");
        gb_str(b, a, "}\n</tool_call>");
        return c->rc ? -1 : sc_chk(c, r);
    }
    gb_str(b, a, "<tool_call>\n<function=");
    gb_str(b, a, name);
    gb_str(b, a, ">\n");
    if (params) {
        members m;
        if (sc_members_get(c, params, &m)) return sc_members_free(&m), -1;
        if (m.extra_schema) {
            sc_members_free(&m);
            return sc_fail(c, E0_EUNSUPPORTED, "'additionalProperties' as a schema is not supported in the XML tool-call form");
        }
        int32_t raw = gb_until(b, "</parameter>");
        for (int i = 0; i < m.n && !c->rc; i++) {
            size_t at = sc_path_push(c, "/properties/%.40s", m.key[i]);
            int32_t p = xml_param(c, m.key[i], m.schema[i], raw);
            gb_ref(b, a, m.req[i] ? p : gb_opt(b, p));
            sc_path_pop(c, at);
        }
        if (m.extra && !c->rc) {
            int32_t x = gb_rule(b), xa = gb_alt(b, x);
            gb_str(b, xa, "<parameter=");
            gb_ref(b, xa, sc_extra_key(c, m.key, m.n, true));
            gb_str(b, xa, "\n");
            gb_ref(b, xa, raw);
            gb_str(b, xa, "\n");
            gb_ref(b, a, gb_star(b, x));
        }
        sc_members_free(&m);
    }
    gb_str(b, a, "</function>\n</tool_call>");
    return c->rc ? -1 : sc_chk(c, r);
}

int e0_grammar_tools(const cJSON *tools, const char *name, int max_calls, e0_tool_form form, gram **out,
                         char *err) {
    *out = NULL;
    gram_builder *b = gb_new();
    if (!b) return e0_fail(err, E0_ENOMEM, "out of memory");
    sc c;
    sc_init(&c, b, NULL, err);
    int32_t call = gb_rule(b), i = 0, n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = sc_kw(t, "function"), *nm = fn ? sc_kw(fn, "name") : NULL;
        if (!cJSON_IsString(nm)) {
            i++;
            continue;
        }
        if (!name || !strcmp(nm->valuestring, name)) {
            snprintf(c.path, sizeof c.path, "tools[%d].function.parameters", i);
            gb_ref(b, gb_alt(b, call), tool_call(&c, fn, form));
            n++;
        }
        i++;
    }
    c.path[0] = 0;
    if (!n && !c.rc) {
        if (name) sc_fail(&c, E0_EINVAL, "tool_choice names the function \"%.64s\", which 'tools' does not list", name);
        else sc_fail(&c, E0_EINVAL, "tool_choice \"required\" needs 'tools'");
    }
    if (max_calls < 1) max_calls = 1;
    if (max_calls > E0_GRAMMAR_MAX_CALLS) max_calls = E0_GRAMMAR_MAX_CALLS;
    int32_t more = gb_rule(b), a = gb_alt(b, more);
    gb_str(b, a, "\n");
    gb_ref(b, a, call);
    int32_t body = gb_rule(b);
    a = gb_alt(b, body);
    gb_ref(b, a, call);
    if (max_calls > 1) gb_ref(b, a, gb_rep(b, more, 0, max_calls - 1));
    return finish(&c, c.rc ? -1 : sc_chk(&c, body), out);
}

