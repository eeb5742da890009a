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
#include "text/schema.h"

#include "util/arr.h"
#include "util/err.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REFS 256

typedef struct {
    gram_builder *b;
    char *err;
    int rc;
    const cJSON *doc; /* what "#" means */
    struct {
        const cJSON *target;
        int32_t rule;
    } refs[MAX_REFS];
    int n_refs;
    int32_t ws, chr, str, num, any, key_free_json, key_free_xml, think_ws;
    char path[256];
} sc;

static int32_t sc_fail(sc *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int32_t sc_fail(sc *c, int code, const char *fmt, ...) {
    if (c->rc) return -1;
    char msg[E0_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->rc = code;
    e0_fail(c->err, code, "%s%s%s", c->path, *c->path ? ": " : "", msg);
    return -1;
}

/* The builder's own error, once the pass is over. */
static int32_t chk(sc *c, int32_t r) {
    if (r < 0 && !c->rc) {
        int e = gb_error(c->b);
        return sc_fail(c, e ? e : E0_EINVAL, e == E0_ENOMEM ? "out of memory"
                                             : e == E0_ERANGE ? "the schema makes a grammar over the size limits"
                                                              : "internal grammar error");
    }
    return r;
}

static size_t path_push(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static size_t path_push(sc *c, const char *fmt, ...) {
    size_t n = strlen(c->path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->path + n, sizeof c->path - n, fmt, ap);
    va_end(ap);
    return n;
}

static void path_pop(sc *c, size_t n) { c->path[n] = 0; }

static gram_set range_set(unsigned lo, unsigned hi) {
    gram_set s = {{0}};
    gram_set_add(&s, lo, hi);
    return s;
}

/* ---- shared JSON pieces ------------------------------------------------------- */

/* "" | " " | "\n" [ \t]{0,32} */
static int32_t ws_rule(sc *c) {
    if (c->ws >= 0) return c->ws;
    gram_builder *b = c->b;
    gram_set st = range_set(' ', ' ');
    gram_set_add(&st, '\t', '\t');
    int32_t r = gb_rule(b), indent = gb_rep(b, gb_set_rule(b, &st), 0, 32);
    gb_alt(b, r);
    gb_str(b, gb_alt(b, r), " ");
    int32_t a = gb_alt(b, r);
    gb_str(b, a, "\n");
    gb_ref(b, a, indent);
    return c->ws = chk(c, r);
}

/* One character of a JSON string: printable ASCII but '"' and '\', valid
 * UTF-8, or an escape (\u without surrogates). */
static int32_t char_rule(sc *c) {
    if (c->chr >= 0) return c->chr;
    gram_builder *b = c->b;
    int32_t r = gb_rule(b);
    gram_set ascii = range_set(0x20, 0x7f);
    ascii.w['"' >> 6] &= ~(1ull << ('"' & 63));
    ascii.w['\\' >> 6] &= ~(1ull << ('\\' & 63));
    gb_set(b, gb_alt(b, r), &ascii);
    gram_set cont = range_set(0x80, 0xbf);
    static const struct {
        unsigned lo, hi, lo2, hi2;
        int rest;
    } U8[] = {
        {0xc2, 0xdf, 0x80, 0xbf, 0}, {0xe0, 0xe0, 0xa0, 0xbf, 1}, {0xe1, 0xec, 0x80, 0xbf, 1},
        {0xed, 0xed, 0x80, 0x9f, 1}, {0xee, 0xef, 0x80, 0xbf, 1}, {0xf0, 0xf0, 0x90, 0xbf, 2},
        {0xf1, 0xf3, 0x80, 0xbf, 2}, {0xf4, 0xf4, 0x80, 0x8f, 2},
    };
    for (size_t i = 0; i < sizeof U8 / sizeof *U8; i++) {
        int32_t a = gb_alt(b, r);
        gram_set s1 = range_set(U8[i].lo, U8[i].hi), s2 = range_set(U8[i].lo2, U8[i].hi2);
        gb_set(b, a, &s1);
        gb_set(b, a, &s2);
        for (int k = 0; k < U8[i].rest; k++)
            gb_set(b, a, &cont);
    }
    gram_set esc = {{0}};
    for (const char *e = "\"\\/bfnrt"; *e; e++)
        gram_set_add(&esc, (unsigned char)*e, (unsigned char)*e);
    int32_t a = gb_alt(b, r);
    gb_str(b, a, "\\");
    gb_set(b, a, &esc);
    gram_set hex = range_set('0', '9'), hexnd = range_set('0', '9'), d07 = range_set('0', '7');
    gram_set_add(&hex, 'a', 'f'), gram_set_add(&hex, 'A', 'F');
    gram_set_add(&hexnd, 'a', 'c'), gram_set_add(&hexnd, 'A', 'C'), gram_set_add(&hexnd, 'e', 'f');
    gram_set_add(&hexnd, 'E', 'F');
    gram_set dd = range_set('d', 'd');
    gram_set_add(&dd, 'D', 'D');
    a = gb_alt(b, r); /* \u: any first hex digit but d/D */
    gb_str(b, a, "\\u");
    gb_set(b, a, &hexnd), gb_set(b, a, &hex), gb_set(b, a, &hex), gb_set(b, a, &hex);
    a = gb_alt(b, r); /* \uD0xx..\uD7xx */
    gb_str(b, a, "\\u");
    gb_set(b, a, &dd), gb_set(b, a, &d07), gb_set(b, a, &hex), gb_set(b, a, &hex);
    return c->chr = chk(c, r);
}

static int32_t string_rule(sc *c, int32_t min, int32_t max) {
    if (min == 0 && max < 0 && c->str >= 0) return c->str;
    gram_builder *b = c->b;
    int32_t body = gb_rep(b, char_rule(c), min, max), r = gb_rule(b), a = gb_alt(b, r);
    gb_str(b, a, "\"");
    gb_ref(b, a, body);
    gb_str(b, a, "\"");
    r = chk(c, r);
    if (min == 0 && max < 0) c->str = r;
    return r;
}

/* -?(0|[1-9][0-9]{0,14}); sign: may be negative; zero: may be 0. */
static int32_t int_rule(sc *c, bool sign, bool zero) {
    gram_builder *b = c->b;
    int32_t r = gb_rule(b), digits = gb_rep(b, gb_range_rule(b, '0', '9'), 0, 14), nz = gb_range_rule(b, '1', '9');
    int32_t pos = gb_rule(b), a = gb_alt(b, pos);
    gb_ref(b, a, nz);
    gb_ref(b, a, digits);
    if (zero) gb_str(b, gb_alt(b, pos), "0");
    gb_ref(b, gb_alt(b, r), pos);
    if (sign) {
        a = gb_alt(b, r);
        gb_str(b, a, "-");
        gb_ref(b, a, pos);
    }
    return chk(c, r);
}

/* int (\.[0-9]{1,15})? ([eE][+-]?[0-9]{1,2})? */
static int32_t number_rule(sc *c, bool sign) {
    if (sign && c->num >= 0) return c->num;
    gram_builder *b = c->b;
    int32_t frac = gb_rule(b), a = gb_alt(b, frac);
    gb_str(b, a, ".");
    gb_ref(b, a, gb_rep(b, gb_range_rule(b, '0', '9'), 1, 15));
    int32_t ex = gb_rule(b);
    gram_set e = range_set('e', 'e'), pm = range_set('+', '+');
    gram_set_add(&e, 'E', 'E'), gram_set_add(&pm, '-', '-');
    a = gb_alt(b, ex);
    gb_set(b, a, &e);
    gb_ref(b, a, gb_opt(b, gb_set_rule(b, &pm)));
    gb_ref(b, a, gb_rep(b, gb_range_rule(b, '0', '9'), 1, 2));
    int32_t r = gb_rule(b);
    a = gb_alt(b, r);
    gb_ref(b, a, int_rule(c, sign, true));
    gb_ref(b, a, gb_opt(b, frac));
    gb_ref(b, a, gb_opt(b, ex));
    r = chk(c, r);
    if (sign) c->num = r;
    return r;
}

/* open ws (item ws (sep ws item ws){min-1,max-1})? close, for item counts in [min, max]. */
static int32_t list_rule(sc *c, const char *open, const char *close, int32_t item, int32_t min, int32_t max) {
    gram_builder *b = c->b;
    int32_t ws = ws_rule(c), r = gb_rule(b);
    if (min == 0) {
        int32_t a = gb_alt(b, r);
        gb_str(b, a, open);
        gb_ref(b, a, ws);
        gb_str(b, a, close);
    }
    if (max != 0) {
        int32_t more = gb_rule(b), a = gb_alt(b, more);
        gb_str(b, a, ",");
        gb_ref(b, a, ws);
        gb_ref(b, a, item);
        gb_ref(b, a, ws);
        a = gb_alt(b, r);
        gb_str(b, a, open);
        gb_ref(b, a, ws);
        gb_ref(b, a, item);
        gb_ref(b, a, ws);
        gb_ref(b, a, gb_rep(b, more, min > 1 ? min - 1 : 0, max < 0 ? -1 : max - 1));
        gb_str(b, a, close);
    }
    return chk(c, r);
}

/* Any JSON value (json_object's members, schemas without constraints). */
static int32_t any_rule(sc *c) {
    if (c->any >= 0) return c->any;
    gram_builder *b = c->b;
    int32_t r = c->any = gb_rule(b), ws = ws_rule(c), member = gb_rule(b), a = gb_alt(b, member);
    gb_ref(b, a, string_rule(c, 0, -1));
    gb_ref(b, a, ws);
    gb_str(b, a, ":");
    gb_ref(b, a, ws);
    gb_ref(b, a, r);
    gb_ref(b, gb_alt(b, r), list_rule(c, "{", "}", member, 0, -1));
    gb_ref(b, gb_alt(b, r), list_rule(c, "[", "]", r, 0, -1));
    gb_ref(b, gb_alt(b, r), string_rule(c, 0, -1));
    gb_ref(b, gb_alt(b, r), number_rule(c, true));
    gb_str(b, gb_alt(b, r), "true");
    gb_str(b, gb_alt(b, r), "false");
    gb_str(b, gb_alt(b, r), "null");
    return chk(c, r);
}

/* ---- tries of literal strings ------------------------------------------------ */

typedef struct {
    int32_t child, next; /* first child, next sibling; -1 */
    uint8_t byte;
    bool term;
} tnode;

typedef struct {
    tnode *n;
    int32_t len;
    size_t cap;
} trie;

static int trie_add(trie *t, const char *s, size_t len) {
    if (!t->len) {
        if (arr_reserve((void **)&t->n, &t->cap, 64, sizeof *t->n)) return -1;
        t->n[0] = (tnode){-1, -1, 0, false};
        t->len = 1;
    }
    int32_t at = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t k = t->n[at].child;
        while (k >= 0 && t->n[k].byte != (uint8_t)s[i])
            k = t->n[k].next;
        if (k < 0) {
            if (arr_reserve((void **)&t->n, &t->cap, (size_t)t->len + 1, sizeof *t->n)) return -1;
            k = t->len++;
            t->n[k] = (tnode){-1, t->n[at].child, (uint8_t)s[i], false};
            t->n[at].child = k;
        }
        at = k;
    }
    t->n[at].term = true;
    return 0;
}

/* Exactly one of the trie's strings. */
static int32_t trie_exact(sc *c, const trie *t, int32_t node) {
    gram_builder *b = c->b;
    int32_t r = gb_rule(b);
    if (t->n[node].term) gb_alt(b, r);
    for (int32_t k = t->n[node].child; k >= 0 && !c->rc; k = t->n[k].next) {
        int32_t a = gb_alt(b, r);
        gb_lit(b, a, (const char *)&t->n[k].byte, 1);
        gb_ref(b, a, trie_exact(c, t, k));
    }
    return chk(c, r);
}

/* A non-empty string over `cs` then `term`, that is none of the trie's
 * strings. free: cs* term. */
static int32_t trie_except(sc *c, const trie *t, int32_t node, const gram_set *cs, const char *term, int32_t free_r,
                           int depth) {
    gram_builder *b = c->b;
    int32_t r = gb_rule(b);
    if (depth && !(t->len && t->n[node].term)) gb_str(b, gb_alt(b, r), term);
    gram_set other = *cs;
    for (int32_t k = t->len ? t->n[node].child : -1; k >= 0 && !c->rc; k = t->n[k].next) {
        if (!gram_set_has(cs, t->n[k].byte)) continue;
        other.w[t->n[k].byte >> 6] &= ~(1ull << (t->n[k].byte & 63));
        int32_t a = gb_alt(b, r);
        gb_lit(b, a, (const char *)&t->n[k].byte, 1);
        gb_ref(b, a, trie_except(c, t, k, cs, term, free_r, depth + 1));
    }
    int32_t a = gb_alt(b, r);
    gb_set(b, a, &other);
    gb_ref(b, a, free_r);
    return chk(c, r);
}

/* ---- schemas -------------------------------------------------------------------- */

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_NUM = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };

static const char *const TYPE_NAMES[] = {"null", "boolean", "integer", "number", "string", "array", "object"};

static const char *const ANNOTATIONS[] = {"title",    "description", "default",  "examples",  "$schema", "$id",
                                          "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions"};
static const char *const KEYWORDS[] = {"type",      "properties", "required", "additionalProperties", "items",
                                       "minItems",  "maxItems",   "enum",     "const",                "anyOf",
                                       "oneOf",     "allOf",      "minLength", "maxLength",           "nullable",
                                       "minimum",   "$ref"};

static bool in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}
#define IN(k, L) in_list(k, L, sizeof L / sizeof *L)

/* Any keyword not in the lists is refused by name. */
static int check_keywords(sc *c, const cJSON *s) {
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        if (!IN(k->string, KEYWORDS) && !IN(k->string, ANNOTATIONS))
            return sc_fail(c, E0_EUNSUPPORTED, "the JSON schema keyword '%.64s' is not supported", k->string);
    }
    return 0;
}

static const cJSON *kw(const cJSON *s, const char *name) { return cJSON_GetObjectItemCaseSensitive(s, name); }

/* Constraining keywords other than the annotations and `allowed`. */
static const char *other_keyword(const cJSON *s, const char *const *allowed, size_t n) {
    const cJSON *k;
    cJSON_ArrayForEach(k, s) if (!IN(k->string, ANNOTATIONS) && !in_list(k->string, allowed, n)) return k->string;
    return NULL;
}

static int types_of(sc *c, const cJSON *s, int *out) {
    const cJSON *t = kw(s, "type");
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
    if (cJSON_IsTrue(kw(s, "nullable"))) *out |= T_NULL;
    return 0;
}

static int get_count(sc *c, const cJSON *s, const char *name, int32_t *out) {
    const cJSON *v = kw(s, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return sc_fail(c, E0_EINVAL, "'%s' must be a non-negative integer", name);
    if (v->valuedouble > GRAM_MAX_REP)
        return sc_fail(c, E0_ERANGE, "'%s' above %d is not supported", name, GRAM_MAX_REP);
    *out = (int32_t)v->valuedouble;
    return 0;
}

static int32_t value_rule(sc *c, const cJSON *s, int depth);

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
static int32_t enum_rule(sc *c, const cJSON *s, int types, bool raw) {
    const cJSON *e = kw(s, "enum"), *k = kw(s, "const");
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
        int rc = !txt || trie_add(&t, txt, strlen(txt));
        if (!raw) free(txt);
        if (rc) return free(t.n), sc_fail(c, E0_ENOMEM, "out of memory");
        if (++n, k && e) break;
    }
    if (k && e) return free(t.n), sc_fail(c, E0_EUNSUPPORTED, "'enum' together with 'const' is not supported");
    if (!n) return free(t.n), sc_fail(c, E0_EINVAL, "no value of 'enum'/'const' has an allowed type");
    int32_t r = trie_exact(c, &t, 0);
    free(t.n);
    return r;
}

static int32_t key_free(sc *c, bool xml) {
    int32_t *slot = xml ? &c->key_free_xml : &c->key_free_json;
    if (*slot >= 0) return *slot;
    gram_set cs = range_set(0x20, 0x7e);
    const char *term = xml ? ">" : "\"";
    for (const char *x = xml ? "<>" : "\"\\"; *x; x++)
        cs.w[(unsigned char)*x >> 6] &= ~(1ull << (*x & 63));
    int32_t r = gb_rule(c->b), a = gb_alt(c->b, r);
    gb_ref(c->b, a, gb_star(c->b, gb_set_rule(c->b, &cs)));
    gb_str(c->b, a, term);
    return *slot = chk(c, r);
}

/* An extra key: not one of the listed ones. */
static int32_t extra_key(sc *c, const char *const *keys, int n, bool xml) {
    gram_set cs = range_set(0x20, 0x7e);
    for (const char *x = xml ? "<>" : "\"\\"; *x; x++)
        cs.w[(unsigned char)*x >> 6] &= ~(1ull << (*x & 63));
    trie t = {0};
    for (int i = 0; i < n; i++)
        if (trie_add(&t, keys[i], strlen(keys[i]))) return free(t.n), sc_fail(c, E0_ENOMEM, "out of memory");
    int32_t r = trie_except(c, &t, 0, &cs, xml ? ">" : "\"", key_free(c, xml), 0);
    free(t.n);
    return r;
}

/* The members of an object schema, in order: listed properties, then the
 * required keys the properties do not list. */
typedef struct {
    const char **key;
    const cJSON **schema; /* NULL: any value */
    bool *req;
    int n;
    bool extra;               /* other keys allowed */
    const cJSON *extra_schema; /* their schema, NULL: any */
} members;

static void members_free(members *m) {
    free(m->key);
    free(m->schema);
    free(m->req);
}

static int get_members(sc *c, const cJSON *s, members *m) {
    memset(m, 0, sizeof *m);
    const cJSON *props = kw(s, "properties"), *req = kw(s, "required"), *ap = kw(s, "additionalProperties"), *p;
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
static int32_t object_rule(sc *c, const cJSON *s, int depth) {
    gram_builder *b = c->b;
    members m;
    if (get_members(c, s, &m)) return members_free(&m), -1;
    int32_t ws = ws_rule(c), *mem = calloc((size_t)m.n + 1, sizeof *mem);
    if (!mem) return members_free(&m), sc_fail(c, E0_ENOMEM, "out of memory");
    for (int i = 0; i < m.n && !c->rc; i++) {
        size_t at = path_push(c, "/properties/%.40s", m.key[i]);
        cJSON *ks = cJSON_CreateString(m.key[i]);
        char *lit = ks ? cJSON_PrintUnformatted(ks) : NULL;
        cJSON_Delete(ks);
        int32_t v = m.schema[i] ? value_rule(c, m.schema[i], depth + 1) : any_rule(c);
        if (!lit) sc_fail(c, E0_ENOMEM, "out of memory");
        int32_t r = mem[i] = gb_rule(b), a = gb_alt(b, r);
        if (lit) gb_str(b, a, lit);
        gb_ref(b, a, ws);
        gb_str(b, a, ":");
        gb_ref(b, a, ws);
        gb_ref(b, a, v);
        free(lit);
        path_pop(c, at);
    }
    int32_t xm = -1, after_end = gb_rule(b), first_end = gb_rule(b);
    if (m.extra && !c->rc) {
        size_t at = path_push(c, "/additionalProperties");
        int32_t v = m.extra_schema ? value_rule(c, m.extra_schema, depth + 1) : any_rule(c);
        path_pop(c, at);
        xm = gb_rule(b);
        int32_t a = gb_alt(b, xm);
        gb_str(b, a, "\"");
        gb_ref(b, a, extra_key(c, m.key, m.n, false));
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
    members_free(&m);
    return c->rc ? -1 : chk(c, r);
}

static int32_t array_rule(sc *c, const cJSON *s, int depth) {
    const cJSON *items = kw(s, "items");
    int32_t min = 0, max = -1;
    if (get_count(c, s, "minItems", &min) || get_count(c, s, "maxItems", &max)) return -1;
    if (max >= 0 && max < min) return sc_fail(c, E0_EINVAL, "'maxItems' is below 'minItems'");
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items))
        return sc_fail(c, E0_EUNSUPPORTED, "'items' as an array (tuple validation) is not supported; use one schema");
    if (cJSON_IsFalse(items) && min > 0) return sc_fail(c, E0_EINVAL, "'items': false with 'minItems' above 0");
    size_t at = path_push(c, "/items");
    int32_t item = cJSON_IsObject(items) ? value_rule(c, items, depth + 1) : any_rule(c);
    path_pop(c, at);
    if (cJSON_IsFalse(items)) max = 0;
    return c->rc ? -1 : list_rule(c, "[", "]", item, min, max);
}

static const cJSON *resolve_ref(sc *c, const cJSON *ref) {
    if (!cJSON_IsString(ref)) return sc_fail(c, E0_EINVAL, "'$ref' must be a string"), NULL;
    const char *r = ref->valuestring;
    if (!strcmp(r, "#")) return c->doc;
    const char *name = !strncmp(r, "#/$defs/", 8) ? r + 8 : !strncmp(r, "#/definitions/", 14) ? r + 14 : NULL;
    if (!name || strchr(name, '/') || strchr(name, '~'))
        return sc_fail(c, E0_EUNSUPPORTED,
                       "'$ref' \"%.64s\" is not supported: only \"#\", \"#/$defs/NAME\" and \"#/definitions/NAME\"", r),
               NULL;
    const cJSON *defs = kw(c->doc, r[2] == '$' ? "$defs" : "definitions"), *t = defs ? kw(defs, name) : NULL;
    if (!t || (!cJSON_IsObject(t) && !cJSON_IsBool(t)))
        return sc_fail(c, E0_EINVAL, "'$ref' \"%.64s\" names no schema", r), NULL;
    return t;
}

static int32_t value_rule(sc *c, const cJSON *s, int depth) {
    if (c->rc) return -1;
    gram_builder *b = c->b;
    if (depth > SCHEMA_MAX_DEPTH)
        return sc_fail(c, E0_ERANGE, "the schema is nested deeper than %d levels", SCHEMA_MAX_DEPTH);
    if (cJSON_IsTrue(s)) return any_rule(c);
    if (cJSON_IsFalse(s)) return sc_fail(c, E0_EINVAL, "the schema false allows no value");
    if (!cJSON_IsObject(s)) return sc_fail(c, E0_EINVAL, "a schema must be an object or a boolean");
    if (check_keywords(c, s)) return -1;
    const cJSON *ref = kw(s, "$ref");
    if (ref) {
        static const char *const ONLY[] = {"$ref"};
        const char *o = other_keyword(s, ONLY, 1);
        if (o) return sc_fail(c, E0_EUNSUPPORTED, "'$ref' beside '%.64s' is not supported", o);
        const cJSON *t = resolve_ref(c, ref);
        if (!t) return -1;
        for (int i = 0; i < c->n_refs; i++)
            if (c->refs[i].target == t) return c->refs[i].rule;
        if (c->n_refs == MAX_REFS) return sc_fail(c, E0_ERANGE, "more than %d distinct '$ref' targets", MAX_REFS);
        int32_t r = gb_rule(b);
        c->refs[c->n_refs].target = t;
        c->refs[c->n_refs++].rule = r;
        size_t at = path_push(c, "(%.64s)", ref->valuestring);
        int32_t v = value_rule(c, t, depth + 1);
        path_pop(c, at);
        gb_ref(b, gb_alt(b, r), v);
        return c->rc ? -1 : chk(c, r);
    }
    static const char *const COMB[] = {"anyOf", "oneOf", "allOf"};
    for (int k = 0; k < 3; k++) {
        const cJSON *l = kw(s, COMB[k]), *it;
        if (!l) continue;
        const char *o = other_keyword(s, COMB + k, 1);
        if (o) return sc_fail(c, E0_EUNSUPPORTED, "'%s' beside '%.64s' is not supported", COMB[k], o);
        if (!cJSON_IsArray(l) || !l->child) return sc_fail(c, E0_EINVAL, "'%s' must be a non-empty array", COMB[k]);
        if (k == 2 && l->child->next)
            return sc_fail(c, E0_EUNSUPPORTED, "'allOf' with more than one schema is not supported");
        int32_t r = gb_rule(b), i = 0;
        cJSON_ArrayForEach(it, l) {
            size_t at = path_push(c, "/%s/%d", COMB[k], i++);
            int32_t v = value_rule(c, it, depth + 1);
            path_pop(c, at);
            gb_ref(b, gb_alt(b, r), v);
        }
        return c->rc ? -1 : chk(c, r);
    }
    int types;
    if (types_of(c, s, &types)) return -1;
    if (kw(s, "enum") || kw(s, "const")) return enum_rule(c, s, types, false);
    const cJSON *min = kw(s, "minimum");
    bool sign = true, zero = true;
    if (min) {
        if (!cJSON_IsNumber(min) || (min->valuedouble != 0 && min->valuedouble != 1) ||
            (min->valuedouble == 1 && (types & T_NUM)) || !(types & (T_INT | T_NUM)))
            return sc_fail(c, E0_EUNSUPPORTED, "'minimum' is supported only as 0 (numbers) or 1 (integers)");
        sign = false;
        zero = min->valuedouble == 0;
    }
    int32_t r = gb_rule(b);
    if (types & T_NULL) gb_str(b, gb_alt(b, r), "null");
    if (types & T_BOOL) gb_str(b, gb_alt(b, r), "true"), gb_str(b, gb_alt(b, r), "false");
    if (types & T_NUM) gb_ref(b, gb_alt(b, r), number_rule(c, sign));
    else if (types & T_INT) gb_ref(b, gb_alt(b, r), int_rule(c, sign, zero));
    if (types & T_STR) {
        int32_t lo = 0, hi = -1;
        if (get_count(c, s, "minLength", &lo) || get_count(c, s, "maxLength", &hi)) return -1;
        if (hi >= 0 && hi < lo) return sc_fail(c, E0_EINVAL, "'maxLength' is below 'minLength'");
        gb_ref(b, gb_alt(b, r), string_rule(c, lo, hi));
    }
    if (types & T_ARR) gb_ref(b, gb_alt(b, r), array_rule(c, s, depth));
    if (types & T_OBJ) gb_ref(b, gb_alt(b, r), object_rule(c, s, depth));
    return c->rc ? -1 : chk(c, r);
}

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
        int32_t roots[3] = {body, chk(c, open), chk(c, may)};
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
    return c->rc;
}

int schema_value_grammar(const cJSON *schema, gram **out, char *err) {
    *out = NULL;
    gram_builder *b = gb_new();
    if (!b) return e0_fail(err, E0_ENOMEM, "out of memory");
    sc c;
    sc_init(&c, b, schema, err);
    return finish(&c, value_rule(&c, schema, 0), out);
}

int e0_grammar_response_format(const cJSON *rf, gram **out, char *err) {
    *out = NULL;
    const cJSON *t = cJSON_IsObject(rf) ? kw(rf, "type") : NULL;
    if (!cJSON_IsString(t)) return e0_fail(err, E0_EINVAL, "response_format: 'type' must be a string");
    gram_builder *b = gb_new();
    if (!b) return e0_fail(err, E0_ENOMEM, "out of memory");
    sc c;
    sc_init(&c, b, NULL, err);
    int32_t body = -1;
    if (!strcmp(t->valuestring, "json_object")) {
        snprintf(c.path, sizeof c.path, "response_format");
        int32_t any = any_rule(&c), member = gb_rule(b), a = gb_alt(b, member), ws = ws_rule(&c);
        gb_ref(b, a, string_rule(&c, 0, -1));
        gb_ref(b, a, ws);
        gb_str(b, a, ":");
        gb_ref(b, a, ws);
        gb_ref(b, a, any);
        body = chk(&c, list_rule(&c, "{", "}", member, 0, -1));
    } else if (!strcmp(t->valuestring, "json_schema")) {
        const cJSON *js = kw(rf, "json_schema"), *name = js ? kw(js, "name") : NULL, *schema = js ? kw(js, "schema") : NULL;
        snprintf(c.path, sizeof c.path, "response_format.json_schema");
        if (!cJSON_IsObject(js)) sc_fail(&c, E0_EINVAL, "must be an object");
        else if (!cJSON_IsString(name) || !*name->valuestring) sc_fail(&c, E0_EINVAL, "'name' must be a non-empty string");
        else if (kw(js, "strict") && !cJSON_IsBool(kw(js, "strict"))) sc_fail(&c, E0_EINVAL, "'strict' must be a boolean");
        else if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
            sc_fail(&c, E0_EINVAL, "'schema' must be a JSON schema object");
        if (!c.rc) {
            snprintf(c.path, sizeof c.path, "response_format.json_schema.schema");
            c.doc = schema;
            body = schema ? value_rule(&c, schema, 0) : any_rule(&c);
        }
    } else {
        snprintf(c.path, sizeof c.path, "response_format");
        sc_fail(&c, E0_EINVAL, "'type' must be \"text\", \"json_object\" or \"json_schema\", not \"%.32s\"", t->valuestring);
    }
    return finish(&c, body, out);
}

/* A parameter the XML form reads as a string (toolcall.c param_type 's'). */
static bool xml_reads_string(const cJSON *p) {
    const cJSON *ty = kw(p, "type"), *it;
    if (cJSON_IsString(ty)) return !strcmp(ty->valuestring, "string");
    if (cJSON_IsArray(ty)) {
        cJSON_ArrayForEach(it, ty) if (cJSON_IsString(it) && !strcmp(it->valuestring, "string")) return true;
        return false;
    }
    return !(cJSON_IsObject(p) && (kw(p, "anyOf") || kw(p, "oneOf")));
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
        if (p) {
            static const char *const STR_KW[] = {"type", "enum", "const", "nullable"};
            const char *o = other_keyword(p, STR_KW, 4);
            if (o)
                return sc_fail(c, E0_EUNSUPPORTED,
                               "'%.64s' is not supported on a parameter the XML tool-call form writes as raw text", o);
            if (check_keywords(c, p)) return -1;
        }
        if (p && (kw(p, "enum") || kw(p, "const"))) {
            int types;
            if (types_of(c, p, &types)) return -1;
            gb_ref(b, a, enum_rule(c, p, T_STR, true));
            gb_str(b, a, "\n</parameter>\n");
        } else {
            gb_ref(b, a, raw_text);
            gb_str(b, a, "\n");
        }
    } else {
        gb_ref(b, a, value_rule(c, p, 1));
        gb_str(b, a, "\n</parameter>\n");
    }
    return c->rc ? -1 : chk(c, r);
}

static int32_t tool_call(sc *c, const cJSON *fn, e0_tool_form form) {
    gram_builder *b = c->b;
    const char *name = kw(fn, "name")->valuestring;
    const cJSON *params = kw(fn, "parameters");
    c->doc = params;
    int32_t r = gb_rule(b), a = gb_alt(b, r);
    if (params) {
        int types;
        if (!cJSON_IsObject(params)) return sc_fail(c, E0_EINVAL, "must be a JSON schema object");
        if (check_keywords(c, params) || types_of(c, params, &types)) return -1;
        if (!(types & T_OBJ)) return sc_fail(c, E0_EINVAL, "'type' must be \"object\"");
        static const char *const OBJ_KW[] = {"type", "properties", "required", "additionalProperties", "$defs",
                                             "definitions"};
        const char *o = other_keyword(params, OBJ_KW, 6);
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
        if (params) gb_ref(b, a, object_rule(c, params, 1));
        else gb_str(b, a, "{}");
        gb_str(b, a, "}\n</tool_call>");
        return c->rc ? -1 : chk(c, r);
    }
    gb_str(b, a, "<tool_call>\n<function=");
    gb_str(b, a, name);
    gb_str(b, a, ">\n");
    if (params) {
        members m;
        if (get_members(c, params, &m)) return members_free(&m), -1;
        if (m.extra_schema) {
            members_free(&m);
            return sc_fail(c, E0_EUNSUPPORTED, "'additionalProperties' as a schema is not supported in the XML tool-call form");
        }
        int32_t raw = gb_until(b, "</parameter>");
        for (int i = 0; i < m.n && !c->rc; i++) {
            size_t at = path_push(c, "/properties/%.40s", m.key[i]);
            int32_t p = xml_param(c, m.key[i], m.schema[i], raw);
            gb_ref(b, a, m.req[i] ? p : gb_opt(b, p));
            path_pop(c, at);
        }
        if (m.extra && !c->rc) {
            int32_t x = gb_rule(b), xa = gb_alt(b, x);
            gb_str(b, xa, "<parameter=");
            gb_ref(b, xa, extra_key(c, m.key, m.n, true));
            gb_str(b, xa, "\n");
            gb_ref(b, xa, raw);
            gb_str(b, xa, "\n");
            gb_ref(b, a, gb_star(b, x));
        }
        members_free(&m);
    }
    gb_str(b, a, "</function>\n</tool_call>");
    return c->rc ? -1 : chk(c, r);
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
        const cJSON *fn = kw(t, "function"), *nm = fn ? kw(fn, "name") : NULL;
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
    return finish(&c, c.rc ? -1 : chk(&c, body), out);
}
