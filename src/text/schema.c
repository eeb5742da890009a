/* JSON schema and tool calls to grammars (schema.h).
 *
 * One recursive pass over the schema makes one grammar rule per schema node;
 * the JSON pieces every schema shares (whitespace, string, number, any
 * value) are made once, on first use. Sets of literal strings (enum values,
 * the keys an extra key must not repeat) become a trie of rules, so a huge
 * enum costs the matcher one stack per distinct prefix, not one per value.
 *
 * Details that are easy to get wrong:
 *  - "required" may name keys "properties" does not list: they must still
 *    be written (any value), and with additionalProperties false no value
 *    can satisfy the schema;
 *  - an extra key equal to a listed one makes duplicate keys, which
 *    JSON.parse resolves to the last value: extra keys exclude the listed
 *    ones, and are written without escapes so "\u0061" cannot spell "a";
 *  - the XML tool-call parser types a parameter by its schema's "type"
 *    alone (text/toolcall.c param_type): the grammar writes each value the
 *    way that parser will read it, and refuses a schema it would misread;
 *  - $ref may be recursive: a ref is a rule made before its target is
 *    compiled, and gram_compile refuses recursion that consumes nothing.
 */
#include "text/schema_int.h"

#include "text/schema_regex.h"

#include "util/arr.h"
#include "util/err.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- schemas -------------------------------------------------------------------- */

static const char *const TYPE_NAMES[] = {"null", "boolean", "integer", "number", "string", "array", "object"};

int sc_types_of(sc *c, const cJSON *s, int *out) {
    const cJSON *t = sc_kw(s, "type");
    *out = 0;
    if (!t) {
        *out = T_ALL;
        return 0;
    }
    const cJSON *it = cJSON_IsArray(t) ? t->child : t;
    for (; it; it = cJSON_IsArray(t) ? it->next : NULL) {
        if (!cJSON_IsString(it)) return sc_fail(c, E0_EINVAL, "'type' must be a type name or an array of them");
        int k = 0;
        while (k < 7 && strcmp(it->valuestring, TYPE_NAMES[k]))
            k++;
        if (k == 7) return sc_fail(c, E0_EINVAL, "'type': unknown type \"%.32s\"", it->valuestring);
        *out |= 1 << k;
    }
    if (!*out) return sc_fail(c, E0_EINVAL, "'type' is an empty array");
    if (cJSON_IsTrue(sc_kw(s, "nullable"))) *out |= T_NULL;
    return 0;
}

static int get_count(sc *c, const cJSON *s, const char *name, int32_t *out) {
    const cJSON *v = sc_kw(s, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return sc_fail(c, E0_EINVAL, "'%s' must be a non-negative integer", name);
    if (v->valuedouble > GRAM_MAX_REP)
        return sc_fail(c, E0_ERANGE, "'%s' above %d is not supported", name, GRAM_MAX_REP);
    *out = (int32_t)v->valuedouble;
    return 0;
}

int32_t sc_value(sc *c, const cJSON *s, int depth);

/* The type of a value, as a T_ bit. */
static int type_of(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsNumber(v)) return v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e15 ? T_INT | T_NUM : T_NUM;
    if (cJSON_IsString(v)) return T_STR;
    if (cJSON_IsArray(v)) return T_ARR;
    return T_OBJ;
}

/* enum / const: the values (of the allowed types) as literal JSON texts;
 * raw: strings without their quotes (XML parameter values). */
int32_t sc_enum(sc *c, const cJSON *s, int types, bool raw) {
    const cJSON *e = sc_kw(s, "enum"), *k = sc_kw(s, "const");
    if (e && !cJSON_IsArray(e)) return sc_fail(c, E0_EINVAL, "'enum' must be an array");
    if (cJSON_GetArraySize(e) > SCHEMA_MAX_ENUM)
        return sc_fail(c, E0_ERANGE, "'enum' has %d values; at most %d are supported", cJSON_GetArraySize(e),
                       SCHEMA_MAX_ENUM);
    trie t = {0};
    int n = 0;
    const cJSON *v = k ? k : e ? e->child : NULL;
    for (; v; v = k ? NULL : v->next) {
        if (!(type_of(v) & types)) continue;
        if (raw && !cJSON_IsString(v))
            return free(t.n), sc_fail(c, E0_EUNSUPPORTED,
                                      "a parameter the XML tool-call form reads as a string cannot have the "
                                      "non-string value of 'enum'/'const' %s",
                                      cJSON_IsNumber(v) ? "(a number)" : "");
        char *txt = raw ? v->valuestring : cJSON_PrintUnformatted(v);
        int rc = !txt || sc_trie_add(&t, txt, strlen(txt));
        if (!raw) free(txt);
        if (rc) return free(t.n), sc_fail(c, E0_ENOMEM, "out of memory");
        if (++n, k && e) break;
    }
    if (k && e) return free(t.n), sc_fail(c, E0_EUNSUPPORTED, "'enum' together with 'const' is not supported");
    if (!n) return free(t.n), sc_fail(c, E0_EINVAL, "no value of 'enum'/'const' has an allowed type");
    int32_t r = sc_trie_exact(c, &t, 0);
    free(t.n);
    return r;
}

static int32_t key_free(sc *c, bool xml) {
    int32_t *slot = xml ? &c->key_free_xml : &c->key_free_json;
    if (*slot >= 0) return *slot;
    gram_set cs = sc_range_set(0x20, 0x7e);
    const char *term = xml ? ">" : "\"";
    for (const char *x = xml ? "<>" : "\"\\"; *x; x++)
        cs.w[(unsigned char)*x >> 6] &= ~(1ull << (*x & 63));
    int32_t r = gb_rule(c->b), a = gb_alt(c->b, r);
    gb_ref(c->b, a, gb_star(c->b, gb_set_rule(c->b, &cs)));
    gb_str(c->b, a, term);
    return *slot = sc_chk(c, r);
}

/* An extra key: not one of the listed ones. */
int32_t sc_extra_key(sc *c, const char *const *keys, int n, bool xml) {
    gram_set cs = sc_range_set(0x20, 0x7e);
    for (const char *x = xml ? "<>" : "\"\\"; *x; x++)
        cs.w[(unsigned char)*x >> 6] &= ~(1ull << (*x & 63));
    trie t = {0};
    for (int i = 0; i < n; i++)
        if (sc_trie_add(&t, keys[i], strlen(keys[i]))) return free(t.n), sc_fail(c, E0_ENOMEM, "out of memory");
    int32_t r = sc_trie_except(c, &t, 0, &cs, xml ? ">" : "\"", key_free(c, xml), 0);
    free(t.n);
    return r;
}

void sc_members_free(members *m) {
    free(m->key);
    free(m->schema);
    free(m->req);
}

int sc_members_get(sc *c, const cJSON *s, members *m) {
    memset(m, 0, sizeof *m);
    const cJSON *props = sc_kw(s, "properties"), *req = sc_kw(s, "required"), *ap = sc_kw(s, "additionalProperties"), *p;
    if (props && !cJSON_IsObject(props)) return sc_fail(c, E0_EINVAL, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return sc_fail(c, E0_EINVAL, "'required' must be an array of strings");
    if (ap && !cJSON_IsBool(ap) && !cJSON_IsObject(ap))
        return sc_fail(c, E0_EINVAL, "'additionalProperties' must be a boolean or a schema");
    int cap = cJSON_GetArraySize(props) + cJSON_GetArraySize(req) + 1;
    m->key = calloc((size_t)cap, sizeof *m->key);
    m->schema = calloc((size_t)cap, sizeof *m->schema);
    m->req = calloc((size_t)cap, sizeof *m->req);
    if (!m->key || !m->schema || !m->req) return sc_fail(c, E0_ENOMEM, "out of memory");
    m->extra = !cJSON_IsFalse(ap);
    m->extra_schema = cJSON_IsObject(ap) ? ap : NULL;
    cJSON_ArrayForEach(p, props) {
        for (int i = 0; i < m->n; i++)
            if (!strcmp(m->key[i], p->string)) return sc_fail(c, E0_EINVAL, "'properties' lists \"%.64s\" twice", p->string);
        m->key[m->n] = p->string;
        m->schema[m->n++] = p;
    }
    cJSON_ArrayForEach(p, req) {
        if (!cJSON_IsString(p)) return sc_fail(c, E0_EINVAL, "'required' must be an array of strings");
        int i = 0;
        while (i < m->n && strcmp(m->key[i], p->valuestring))
            i++;
        if (i == m->n) {
            if (!m->extra)
                return sc_fail(c, E0_EINVAL, "'required' names \"%.64s\", which 'properties' does not list and "
                                             "additionalProperties false forbids", p->valuestring);
            m->key[m->n] = p->valuestring;
            m->schema[m->n++] = m->extra_schema;
        }
        m->req[i] = true;
    }
    return 0;
}

/* The object grammar: "{" ws first(0) "}" with
 *   first(i) = member_i ws after(i+1) [| first(i+1) when optional]
 *   after(i) = "," ws member_i ws after(i+1) [| after(i+1) when optional]
 * and at the end the extra members, if allowed. */
/* A map (no listed properties): keys by propertyNames, counts by
 * minProperties / maxProperties (a repeated key, which JSON.parse folds,
 * is left to the check after generation). */
static int32_t map_rule(sc *c, const cJSON *s, const members *m, int depth) {
    gram_builder *b = c->b;
    int32_t lo = 0, hi = -1, key;
    if (get_count(c, s, "minProperties", &lo) || get_count(c, s, "maxProperties", &hi)) return -1;
    if (hi >= 0 && hi < lo) return sc_fail(c, E0_EINVAL, "'maxProperties' is below 'minProperties'");
    const cJSON *pn = sc_kw(s, "propertyNames");
    size_t at = sc_path_push(c, "/propertyNames");
    if (pn && !cJSON_IsObject(pn) && !cJSON_IsTrue(pn))
        key = sc_fail(c, E0_EINVAL, "'propertyNames' must be a schema object");
    else if (cJSON_IsObject(pn) && (sc_kw(pn, "enum") || sc_kw(pn, "const")))
        key = sc_enum(c, pn, T_STR, false);
    else
        key = cJSON_IsObject(pn) ? sc_string_schema(c, pn, false) : sc_string(c, 0, -1);
    sc_path_pop(c, at);
    at = sc_path_push(c, "/additionalProperties");
    int32_t v = m->extra_schema ? sc_value(c, m->extra_schema, depth + 1) : sc_any(c), ws = sc_ws(c);
    sc_path_pop(c, at);
    int32_t mem = gb_rule(b), a = gb_alt(b, mem);
    gb_ref(b, a, key);
    gb_ref(b, a, ws);
    gb_str(b, a, ":");
    gb_ref(b, a, ws);
    gb_ref(b, a, v);
    return c->rc ? -1 : sc_list(c, "{", "}", sc_chk(c, mem), lo, hi);
}

int32_t sc_object(sc *c, const cJSON *s, int depth) {
    gram_builder *b = c->b;
    members m;
    if (sc_members_get(c, s, &m)) return sc_members_free(&m), -1;
    if (!m.n && m.extra) {
        int32_t r = map_rule(c, s, &m, depth);
        sc_members_free(&m);
        return r;
    }
    int32_t ws = sc_ws(c), *mem = calloc((size_t)m.n + 1, sizeof *mem);
    if (!mem) return sc_members_free(&m), sc_fail(c, E0_ENOMEM, "out of memory");
    for (int i = 0; i < m.n && !c->rc; i++) {
        size_t at = sc_path_push(c, "/properties/%.40s", m.key[i]);
        cJSON *ks = cJSON_CreateString(m.key[i]);
        char *lit = ks ? cJSON_PrintUnformatted(ks) : NULL;
        cJSON_Delete(ks);
        int32_t v = m.schema[i] ? sc_value(c, m.schema[i], depth + 1) : sc_any(c);
        if (!lit) sc_fail(c, E0_ENOMEM, "out of memory");
        int32_t r = mem[i] = gb_rule(b), a = gb_alt(b, r);
        if (lit) gb_str(b, a, lit);
        gb_ref(b, a, ws);
        gb_str(b, a, ":");
        gb_ref(b, a, ws);
        gb_ref(b, a, v);
        free(lit);
        sc_path_pop(c, at);
    }
    int32_t xm = -1, after_end = gb_rule(b), first_end = gb_rule(b);
    if (m.extra && !c->rc) {
        size_t at = sc_path_push(c, "/additionalProperties");
        int32_t v = m.extra_schema ? sc_value(c, m.extra_schema, depth + 1) : sc_any(c);
        sc_path_pop(c, at);
        xm = gb_rule(b);
        int32_t a = gb_alt(b, xm);
        gb_str(b, a, "\"");
        gb_ref(b, a, sc_extra_key(c, m.key, m.n, false));
        gb_ref(b, a, ws);
        gb_str(b, a, ":");
        gb_ref(b, a, ws);
        gb_ref(b, a, v);
        int32_t more = gb_rule(b);
        a = gb_alt(b, more);
        gb_str(b, a, ",");
        gb_ref(b, a, ws);
        gb_ref(b, a, xm);
        gb_ref(b, a, ws);
        int32_t tail = gb_star(b, more);
        gb_ref(b, gb_alt(b, after_end), tail);
        a = gb_alt(b, first_end);
        gb_ref(b, a, xm);
        gb_ref(b, a, ws);
        gb_ref(b, a, tail);
        gb_alt(b, first_end);
    } else {
        gb_alt(b, after_end);
        gb_alt(b, first_end);
    }
    int32_t after = after_end, first = first_end;
    for (int i = m.n; i-- > 0 && !c->rc;) {
        int32_t na = gb_rule(b), nf = gb_rule(b), a = gb_alt(b, na);
        gb_str(b, a, ",");
        gb_ref(b, a, ws);
        gb_ref(b, a, mem[i]);
        gb_ref(b, a, ws);
        gb_ref(b, a, after);
        a = gb_alt(b, nf);
        gb_ref(b, a, mem[i]);
        gb_ref(b, a, ws);
        gb_ref(b, a, after);
        if (!m.req[i]) {
            gb_ref(b, gb_alt(b, na), after);
            gb_ref(b, gb_alt(b, nf), first);
        }
        after = na, first = nf;
    }
    int32_t r = gb_rule(b), a = gb_alt(b, r);
    gb_str(b, a, "{");
    gb_ref(b, a, ws);
    gb_ref(b, a, first);
    gb_str(b, a, "}");
    free(mem);
    sc_members_free(&m);
    return c->rc ? -1 : sc_chk(c, r);
}

/* The fixed patterns of "format" (docs/design.md §8.6): every string they
 * make is valid for ajv-formats' full mode; other formats are annotations. */
static const char *format_pattern(const char *f) {
#define DATE_RX                                                                                                        \
    "((\\d\\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29|\\d{4}-((0[13578]|1[02])-(0[1-9]|" \
    "[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|02-(0[1-9]|1\\d|2[0-8])))"
#define TIME_RX "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
#define LABEL_RX(n) "[a-z0-9]([a-z0-9-]{0," #n "}[a-z0-9])?"
#define OCTET_RX "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"
    static const char *const F[][2] = {
        {"date", "^" DATE_RX "$"},
        {"time", "^" TIME_RX "$"},
        {"date-time", "^" DATE_RX "T" TIME_RX "$"},
        {"email", "^[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+){0,3}@(" LABEL_RX(20) "\\.){1,3}[a-z]{2,10}$"},
        {"uri", "^https?://" LABEL_RX(20) "(\\." LABEL_RX(20) "){0,3}(/[A-Za-z0-9._~-]{0,20}){0,5}$"},
        {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
        {"ipv4", "^" OCTET_RX "(\\." OCTET_RX "){3}$"},
        {"ipv6", "^[0-9a-f]{1,4}(:[0-9a-f]{1,4}){7}$"},
        {"hostname", "^" LABEL_RX(61) "(\\." LABEL_RX(61) "){0,2}$"},
    };
    for (size_t i = 0; i < sizeof F / sizeof *F; i++)
        if (!strcmp(f, F[i][0])) return F[i][1];
    return NULL;
}

/* A string by minLength / maxLength, pattern or format (a pattern wins
 * over a format; a length beside either is checked after generation). raw:
 * the XML form's value without quotes. */
int32_t sc_string_schema(sc *c, const cJSON *s, bool raw) {
    gram_builder *b = c->b;
    int32_t lo = 0, hi = -1, body = -1;
    if (get_count(c, s, "minLength", &lo) || get_count(c, s, "maxLength", &hi)) return -1;
    if (hi >= 0 && hi < lo) return sc_fail(c, E0_EINVAL, "'maxLength' is below 'minLength'");
    const cJSON *pat = sc_kw(s, "pattern"), *fmt = sc_kw(s, "format");
    if (pat && !cJSON_IsString(pat)) return sc_fail(c, E0_EINVAL, "'pattern' must be a string");
    if (fmt && !cJSON_IsString(fmt)) return sc_fail(c, E0_EINVAL, "'format' must be a string");
    const char *rx = pat ? pat->valuestring : fmt ? format_pattern(fmt->valuestring) : NULL;
    if (rx) {
        char e[E0_ERR_MAX];
        int rc = rx_rule(b, rx, raw ? RX_FORM_RAW : RX_FORM_JSON, &body, e);
        if (rc)
            return sc_fail(c, rc, "'%s' \"%.80s\" %s: %s", pat ? "pattern" : "format", pat ? rx : fmt->valuestring,
                           rc == E0_EUNSUPPORTED ? "is not supported" : "is refused", e);
    } else if (raw) {
        body = gb_rep(b, rx_any_char(b, RX_FORM_RAW), lo, hi);
    } else {
        return sc_string(c, lo, hi);
    }
    if (raw) return sc_chk(c, body);
    int32_t r = gb_rule(b), a = gb_alt(b, r);
    gb_str(b, a, "\"");
    gb_ref(b, a, body);
    gb_str(b, a, "\"");
    return sc_chk(c, r);
}

/* A tuple: prefixItems (or draft 7's items as an array), then the rest by
 * items (additionalItems): "[" ws first(0) "]" with
 *   first(i) = p_i ws after(i+1) [| "" when i >= min]
 *   after(i) = "," ws p_i ws after(i+1) [| "" when i >= min], after(n) = the rest. */
static int32_t tuple_rule(sc *c, const cJSON *prefix, const cJSON *rest, int32_t min, int32_t max, int depth) {
    gram_builder *b = c->b;
    int n = cJSON_GetArraySize(prefix), i = 0;
    if (max >= 0 && n > max) n = max;
    if (n > SCHEMA_MAX_ENUM) return sc_fail(c, E0_ERANGE, "more than %d tuple items", SCHEMA_MAX_ENUM);
    int32_t ws = sc_ws(c), item = -1, tail = gb_rule(b), *p = calloc((size_t)n + 1, sizeof *p);
    if (!p) return sc_fail(c, E0_ENOMEM, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, prefix) {
        if (i == n || c->rc) break;
        size_t at = sc_path_push(c, "/prefixItems/%d", i);
        p[i++] = sc_value(c, it, depth + 1);
        sc_path_pop(c, at);
    }
    if (!cJSON_IsFalse(rest) && (max < 0 || max > n)) { /* the rest: ("," ws item ws){min - n, max - n} */
        size_t at = sc_path_push(c, "/items");
        item = cJSON_IsObject(rest) ? sc_value(c, rest, depth + 1) : sc_any(c);
        sc_path_pop(c, at);
        int32_t more = gb_rule(b), a = gb_alt(b, more);
        gb_str(b, a, ",");
        gb_ref(b, a, ws);
        gb_ref(b, a, item);
        gb_ref(b, a, ws);
        gb_ref(b, gb_alt(b, tail), gb_rep(b, more, min > n ? min - n : 0, max < 0 ? -1 : max - n));
    } else if (min > n) {
        free(p);
        return sc_fail(c, E0_EINVAL, "'minItems' asks for more items than the tuple allows");
    } else {
        gb_alt(b, tail);
    }
    int32_t after = tail, first = -1;
    for (int k = n; k-- > 0 && !c->rc;) {
        int32_t na = gb_rule(b), nf = gb_rule(b), a = gb_alt(b, na);
        gb_str(b, a, ",");
        gb_ref(b, a, ws), gb_ref(b, a, p[k]), gb_ref(b, a, ws), gb_ref(b, a, after);
        a = gb_alt(b, nf);
        gb_ref(b, a, p[k]), gb_ref(b, a, ws), gb_ref(b, a, after);
        if (k >= min) gb_alt(b, na), gb_alt(b, nf);
        after = na, first = nf;
    }
    free(p);
    if (first < 0) return c->rc ? -1 : sc_list(c, "[", "]", item >= 0 ? item : sc_any(c), min, max < 0 || item >= 0 ? max : 0);
    int32_t r = gb_rule(b), a = gb_alt(b, r);
    gb_str(b, a, "[");
    gb_ref(b, a, ws);
    gb_ref(b, a, first);
    gb_str(b, a, "]");
    return c->rc ? -1 : sc_chk(c, r);
}

static int32_t array_rule(sc *c, const cJSON *s, int depth) {
    const cJSON *items = sc_kw(s, "items"), *prefix = sc_kw(s, "prefixItems");
    int32_t min = 0, max = -1;
    if (get_count(c, s, "minItems", &min) || get_count(c, s, "maxItems", &max)) return -1;
    if (max >= 0 && max < min) return sc_fail(c, E0_EINVAL, "'maxItems' is below 'minItems'");
    if (cJSON_IsArray(items) && !prefix) prefix = items, items = sc_kw(s, "additionalItems"); /* draft 7 */
    if (prefix && !cJSON_IsArray(prefix)) return sc_fail(c, E0_EINVAL, "'prefixItems' must be an array of schemas");
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items))
        return sc_fail(c, E0_EINVAL, "'items' must be a schema (or, before 'prefixItems', an array of schemas)");
    if (prefix) return tuple_rule(c, prefix, items, min, max, depth);
    if (cJSON_IsFalse(items) && min > 0) return sc_fail(c, E0_EINVAL, "'items': false with 'minItems' above 0");
    size_t at = sc_path_push(c, "/items");
    int32_t item = cJSON_IsObject(items) ? sc_value(c, items, depth + 1) : sc_any(c);
    sc_path_pop(c, at);
    if (cJSON_IsFalse(items)) max = 0;
    return c->rc ? -1 : sc_list(c, "[", "]", item, min, max);
}

int32_t sc_value(sc *c, const cJSON *s, int depth) {
    if (c->rc) return -1;
    gram_builder *b = c->b;
    if (depth > SCHEMA_MAX_DEPTH)
        return sc_fail(c, E0_ERANGE, "the schema is nested deeper than %d levels", SCHEMA_MAX_DEPTH);
    if (cJSON_IsTrue(s)) return sc_any(c);
    if (cJSON_IsFalse(s)) return sc_fail(c, E0_EINVAL, "the schema false allows no value");
    if (!cJSON_IsObject(s)) return sc_fail(c, E0_EINVAL, "a schema must be an object or a boolean");
    if (sc_check_keywords(c, s)) return -1;
    const cJSON *ref = sc_kw(s, "$ref"), *all = sc_kw(s, "allOf");
    static const char *const ONE_REF[] = {"$ref"}, *const BRANCHES[] = {"anyOf", "oneOf"}, *const ALL[] = {"allOf"};
    if (all ? !cJSON_IsArray(all) || (all->child && all->child->next) || sc_other_keyword(s, ALL, 1)
        : ref ? sc_other_keyword(s, ONE_REF, 1) != NULL
              : (sc_kw(s, "anyOf") || sc_kw(s, "oneOf")) && sc_other_keyword(s, BRANCHES, 2)) {
        const cJSON *m = sc_merge(c, s); /* keywords side by side: one schema */
        return m ? sc_value(c, m, depth + 1) : -1;
    }
    if (ref) {
        static const char *const ONLY[] = {"$ref"};
        const char *o = sc_other_keyword(s, ONLY, 1);
        if (o) return sc_fail(c, E0_EUNSUPPORTED, "'$ref' beside '%.64s' is not supported", o);
        const cJSON *t = sc_resolve_ref(c, ref);
        if (!t) return -1;
        for (int i = 0; i < c->n_refs; i++)
            if (c->refs[i].target == t) return c->refs[i].rule;
        if (c->n_refs == SC_MAX_REFS) return sc_fail(c, E0_ERANGE, "more than %d distinct '$ref' targets", SC_MAX_REFS);
        int32_t r = gb_rule(b);
        c->refs[c->n_refs].target = t;
        c->refs[c->n_refs++].rule = r;
        size_t at = sc_path_push(c, "(%.64s)", ref->valuestring);
        int32_t v = sc_value(c, t, depth + 1);
        sc_path_pop(c, at);
        gb_ref(b, gb_alt(b, r), v);
        return c->rc ? -1 : sc_chk(c, r);
    }
    static const char *const COMB[] = {"anyOf", "oneOf", "allOf"};
    for (int k = 0; k < 3; k++) {
        const cJSON *l = sc_kw(s, COMB[k]), *it;
        if (!l) continue;
        const char *o = sc_other_keyword(s, COMB + k, 1);
        if (o) return sc_fail(c, E0_EUNSUPPORTED, "'%s' beside '%.64s' is not supported", COMB[k], o);
        if (!cJSON_IsArray(l) || !l->child) return sc_fail(c, E0_EINVAL, "'%s' must be a non-empty array", COMB[k]);
        int32_t r = gb_rule(b), i = 0;
        cJSON_ArrayForEach(it, l) {
            size_t at = sc_path_push(c, "/%s/%d", COMB[k], i++);
            int32_t v = sc_value(c, it, depth + 1);
            sc_path_pop(c, at);
            gb_ref(b, gb_alt(b, r), v);
        }
        return c->rc ? -1 : sc_chk(c, r);
    }
    int types;
    if (sc_types_of(c, s, &types)) return -1;
    if (sc_kw(s, "enum") || sc_kw(s, "const")) return sc_enum(c, s, types, false);
    bool bounded = sc_has_bounds(s);
    int32_t r = gb_rule(b);
    if (types & T_NULL) gb_str(b, gb_alt(b, r), "null");
    if (types & T_BOOL) gb_str(b, gb_alt(b, r), "true"), gb_str(b, gb_alt(b, r), "false");
    if (types & T_NUM) gb_ref(b, gb_alt(b, r), bounded ? sc_number_bounded(c, s) : sc_number(c, true));
    else if (types & T_INT) gb_ref(b, gb_alt(b, r), bounded ? sc_int_bounded(c, s) : sc_int(c, true, true));
    if (types & T_STR) gb_ref(b, gb_alt(b, r), sc_string_schema(c, s, false));
    if (types & T_ARR) gb_ref(b, gb_alt(b, r), array_rule(c, s, depth));
    if (types & T_OBJ) gb_ref(b, gb_alt(b, r), sc_object(c, s, depth));
    return c->rc ? -1 : sc_chk(c, r);
}

