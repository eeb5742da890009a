/* The JSON pieces every schema grammar shares (whitespace, strings,
 * numbers, any value, lists), tries of literal strings, and the keyword
 * lists and $ref targets the other schema files look up (schema_int.h).
 * Pieces are made once per compile where they do not vary. */
#include "text/schema_int.h"

#include "util/arr.h"
#include "util/err.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int32_t sc_fail(sc *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int32_t sc_fail(sc *c, int code, const char *fmt, ...) {
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
int32_t sc_chk(sc *c, int32_t r) {
    if (r < 0 && !c->rc) {
        int e = gb_error(c->b);
        return sc_fail(c, e ? e : E0_EINVAL, e == E0_ENOMEM ? "out of memory"
                                             : e == E0_ERANGE ? "the schema makes a grammar over the size limits"
                                                              : "internal grammar error");
    }
    return r;
}

size_t sc_path_push(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
size_t sc_path_push(sc *c, const char *fmt, ...) {
    size_t n = strlen(c->path);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->path + n, sizeof c->path - n, fmt, ap);
    va_end(ap);
    return n;
}

void sc_path_pop(sc *c, size_t n) { c->path[n] = 0; }

gram_set sc_range_set(unsigned lo, unsigned hi) {
    gram_set s = {{0}};
    gram_set_add(&s, lo, hi);
    return s;
}
/* ---- shared JSON pieces ------------------------------------------------------- */

/* "" | " " | "\n" [ \t]{0,32} */
int32_t sc_ws(sc *c) {
    if (c->ws >= 0) return c->ws;
    gram_builder *b = c->b;
    gram_set st = sc_range_set(' ', ' ');
    gram_set_add(&st, '\t', '\t');
    int32_t r = gb_rule(b), indent = gb_rep(b, gb_set_rule(b, &st), 0, 32);
    gb_alt(b, r);
    gb_str(b, gb_alt(b, r), " ");
    int32_t a = gb_alt(b, r);
    gb_str(b, a, "\n");
    gb_ref(b, a, indent);
    return c->ws = sc_chk(c, r);
}

/* One character of a JSON string: printable ASCII but '"' and '\', valid
 * UTF-8, or an escape (\u without surrogates). */
int32_t sc_char(sc *c) {
    if (c->chr >= 0) return c->chr;
    gram_builder *b = c->b;
    int32_t r = gb_rule(b);
    gram_set ascii = sc_range_set(0x20, 0x7f);
    ascii.w['"' >> 6] &= ~(1ull << ('"' & 63));
    ascii.w['\\' >> 6] &= ~(1ull << ('\\' & 63));
    gb_set(b, gb_alt(b, r), &ascii);
    gram_set cont = sc_range_set(0x80, 0xbf);
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
        gram_set s1 = sc_range_set(U8[i].lo, U8[i].hi), s2 = sc_range_set(U8[i].lo2, U8[i].hi2);
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
    gram_set hex = sc_range_set('0', '9'), hexnd = sc_range_set('0', '9'), d07 = sc_range_set('0', '7');
    gram_set_add(&hex, 'a', 'f'), gram_set_add(&hex, 'A', 'F');
    gram_set_add(&hexnd, 'a', 'c'), gram_set_add(&hexnd, 'A', 'C'), gram_set_add(&hexnd, 'e', 'f');
    gram_set_add(&hexnd, 'E', 'F');
    gram_set dd = sc_range_set('d', 'd');
    gram_set_add(&dd, 'D', 'D');
    a = gb_alt(b, r); /* \u: any first hex digit but d/D */
    gb_str(b, a, "\\u");
    gb_set(b, a, &hexnd), gb_set(b, a, &hex), gb_set(b, a, &hex), gb_set(b, a, &hex);
    a = gb_alt(b, r); /* \uD0xx..\uD7xx */
    gb_str(b, a, "\\u");
    gb_set(b, a, &dd), gb_set(b, a, &d07), gb_set(b, a, &hex), gb_set(b, a, &hex);
    return c->chr = sc_chk(c, r);
}

int32_t sc_string(sc *c, int32_t min, int32_t max) {
    if (min == 0 && max < 0 && c->str >= 0) return c->str;
    gram_builder *b = c->b;
    int32_t body = gb_rep(b, sc_char(c), min, max), r = gb_rule(b), a = gb_alt(b, r);
    gb_str(b, a, "\"");
    gb_ref(b, a, body);
    gb_str(b, a, "\"");
    r = sc_chk(c, r);
    if (min == 0 && max < 0) c->str = r;
    return r;
}

/* -?(0|[1-9][0-9]{0,14}); sign: may be negative; zero: may be 0. */
int32_t sc_int(sc *c, bool sign, bool zero) {
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
    return sc_chk(c, r);
}

/* int (\.[0-9]{1,15})? ([eE][+-]?[0-9]{1,2})? */
int32_t sc_number(sc *c, bool sign) {
    if (sign && c->num >= 0) return c->num;
    gram_builder *b = c->b;
    int32_t frac = gb_rule(b), a = gb_alt(b, frac);
    gb_str(b, a, ".");
    gb_ref(b, a, gb_rep(b, gb_range_rule(b, '0', '9'), 1, 15));
    int32_t ex = gb_rule(b);
    gram_set e = sc_range_set('e', 'e'), pm = sc_range_set('+', '+');
    gram_set_add(&e, 'E', 'E'), gram_set_add(&pm, '-', '-');
    a = gb_alt(b, ex);
    gb_set(b, a, &e);
    gb_ref(b, a, gb_opt(b, gb_set_rule(b, &pm)));
    gb_ref(b, a, gb_rep(b, gb_range_rule(b, '0', '9'), 1, 2));
    int32_t r = gb_rule(b);
    a = gb_alt(b, r);
    gb_ref(b, a, sc_int(c, sign, true));
    gb_ref(b, a, gb_opt(b, frac));
    gb_ref(b, a, gb_opt(b, ex));
    r = sc_chk(c, r);
    if (sign) c->num = r;
    return r;
}

/* open ws (item ws (sep ws item ws){min-1,max-1})? close, for item counts in [min, max]. */
int32_t sc_list(sc *c, const char *open, const char *close, int32_t item, int32_t min, int32_t max) {
    gram_builder *b = c->b;
    int32_t ws = sc_ws(c), r = gb_rule(b);
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
    return sc_chk(c, r);
}

/* Any JSON value (json_object's members, schemas without constraints). */
int32_t sc_any(sc *c) {
    if (c->any >= 0) return c->any;
    gram_builder *b = c->b;
    int32_t r = c->any = gb_rule(b), ws = sc_ws(c), member = gb_rule(b), a = gb_alt(b, member);
    gb_ref(b, a, sc_string(c, 0, -1));
    gb_ref(b, a, ws);
    gb_str(b, a, ":");
    gb_ref(b, a, ws);
    gb_ref(b, a, r);
    gb_ref(b, gb_alt(b, r), sc_list(c, "{", "}", member, 0, -1));
    gb_ref(b, gb_alt(b, r), sc_list(c, "[", "]", r, 0, -1));
    gb_ref(b, gb_alt(b, r), sc_string(c, 0, -1));
    gb_ref(b, gb_alt(b, r), sc_number(c, true));
    gb_str(b, gb_alt(b, r), "true");
    gb_str(b, gb_alt(b, r), "false");
    gb_str(b, gb_alt(b, r), "null");
    return sc_chk(c, r);
}

/* ---- tries of literal strings ------------------------------------------------ */

int sc_trie_add(trie *t, const char *s, size_t len) {
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
int32_t sc_trie_exact(sc *c, const trie *t, int32_t node) {
    gram_builder *b = c->b;
    int32_t r = gb_rule(b);
    if (t->n[node].term) gb_alt(b, r);
    for (int32_t k = t->n[node].child; k >= 0 && !c->rc; k = t->n[k].next) {
        int32_t a = gb_alt(b, r);
        gb_lit(b, a, (const char *)&t->n[k].byte, 1);
        gb_ref(b, a, sc_trie_exact(c, t, k));
    }
    return sc_chk(c, r);
}

/* A non-empty string over `cs` then `term`, that is none of the trie's
 * strings. free: cs* term. */
int32_t sc_trie_except(sc *c, const trie *t, int32_t node, const gram_set *cs, const char *term, int32_t free_r,
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
        gb_ref(b, a, sc_trie_except(c, t, k, cs, term, free_r, depth + 1));
    }
    int32_t a = gb_alt(b, r);
    gb_set(b, a, &other);
    gb_ref(b, a, free_r);
    return sc_chk(c, r);
}

/* ---- keywords ------------------------------------------------------------------- */

static const char *const ANNOTATIONS[] = {"title",    "description", "default",  "examples",  "$schema", "$id",
                                          "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions",
                                          "contentMediaType", "contentEncoding", "$anchor"};
/* Checked after generation (text/schema_check.h), not by the grammar. */
static const char *const CHECKED[] = {"not", "uniqueItems", "multipleOf", "minProperties", "maxProperties",
                                      "propertyNames"};
static const char *const KEYWORDS[] = {"type",      "properties", "required", "additionalProperties", "items",
                                       "minItems",  "maxItems",   "enum",     "const",                "anyOf",
                                       "oneOf",     "allOf",      "minLength", "maxLength",           "nullable",
                                       "minimum",   "$ref",       "maximum",   "exclusiveMinimum",    "exclusiveMaximum",
                                       "pattern",   "format",     "prefixItems", "additionalItems"};

static bool in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}
#define IN(k, L) in_list(k, L, sizeof L / sizeof *L)

/* Any keyword not in the lists is refused by name. */
int sc_check_keywords(sc *c, const cJSON *s) {
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        if (!IN(k->string, KEYWORDS) && !IN(k->string, ANNOTATIONS) && !IN(k->string, CHECKED))
            return sc_fail(c, E0_EUNSUPPORTED, "the JSON schema keyword '%.64s' is not supported", k->string);
    }
    return 0;
}

const cJSON *sc_kw(const cJSON *s, const char *name) { return cJSON_GetObjectItemCaseSensitive(s, name); }

/* Constraining keywords other than the annotations, the ones checked after
 * generation and `allowed`. */
const char *sc_other_keyword(const cJSON *s, const char *const *allowed, size_t n) {
    const cJSON *k;
    cJSON_ArrayForEach(k, s) if (!IN(k->string, ANNOTATIONS) && !IN(k->string, CHECKED) &&
                                 !in_list(k->string, allowed, n)) return k->string;
    return NULL;
}

const cJSON *sc_resolve_ref(sc *c, const cJSON *ref) {
    if (!cJSON_IsString(ref)) return sc_fail(c, E0_EINVAL, "'$ref' must be a string"), NULL;
    const char *r = ref->valuestring;
    if (!strcmp(r, "#")) return c->doc;
    const char *name = !strncmp(r, "#/$defs/", 8) ? r + 8 : !strncmp(r, "#/definitions/", 14) ? r + 14 : NULL;
    if (!name || strchr(name, '/') || strchr(name, '~'))
        return sc_fail(c, E0_EUNSUPPORTED,
                       "'$ref' \"%.64s\" is not supported: only \"#\", \"#/$defs/NAME\" and \"#/definitions/NAME\"", r),
               NULL;
    const cJSON *defs = sc_kw(c->doc, r[2] == '$' ? "$defs" : "definitions"), *t = defs ? sc_kw(defs, name) : NULL;
    if (!t || (!cJSON_IsObject(t) && !cJSON_IsBool(t)))
        return sc_fail(c, E0_EINVAL, "'$ref' \"%.64s\" names no schema", r), NULL;
    return t;
}
