/* allOf, and keywords beside $ref / anyOf / oneOf, merged into one schema
 * (schema_int.h: sc_merge).
 *
 * The merge of two schemas keeps what each says alone and intersects what
 * both say: types intersect (integer within number), properties unite as
 * JSON Schema reads them (a key one side lists is held to the other side's
 * additionalProperties: dropped where that is false, a 400 if also
 * required; a key both give a schema gets {"allOf": [both]}, merged when
 * compiled),
 * required unites, lower bounds take the larger and upper bounds the
 * smaller, enums intersect, items / propertyNames / two additionalProperties
 * schemas become an allOf, additionalProperties false wins, uniqueItems
 * true wins, two nots become not anyOf. Anything else must be equal in both
 * (two different patterns are a 400 naming allOf). An anyOf / oneOf beside
 * other keywords is distributed: each branch merged with them. A schema
 * made here lives in c->owned until the compile ends. */
#include "text/schema_int.h"

#include "util/err.h"

#include <math.h>
#include <string.h>

static const char *const LOWER[] = {"minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum"};
static const char *const UPPER[] = {"maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum"};
static const char *const FIRST[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                   "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "contentMediaType",
                                   "contentEncoding", "$anchor"};
static const char *const TYPES[] = {"null", "boolean", "integer", "number", "string", "array", "object"};

static bool one_of(const char *k, const char *const *l, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, l[i])) return true;
    return false;
}
#define ONE_OF(k, L) one_of(k, L, sizeof L / sizeof *L)

static cJSON *own(sc *c, cJSON *x) {
    if (!x) return sc_fail(c, E0_ENOMEM, "out of memory"), NULL;
    if (!c->owned && !(c->owned = cJSON_CreateArray())) return cJSON_Delete(x), sc_fail(c, E0_ENOMEM, "out of memory"), NULL;
    cJSON_AddItemToArray(c->owned, x);
    return x;
}

static cJSON *all_of2(const cJSON *a, const cJSON *b) {
    cJSON *r = cJSON_CreateObject(), *l = r ? cJSON_AddArrayToObject(r, "allOf") : NULL;
    if (!l) return cJSON_Delete(r), NULL;
    cJSON_AddItemToArray(l, cJSON_Duplicate(a, 1));
    cJSON_AddItemToArray(l, cJSON_Duplicate(b, 1));
    return r;
}

static int type_bits(const cJSON *t) {
    if (!t) return 127;
    int bits = 0;
    const cJSON *it = cJSON_IsArray(t) ? t->child : t;
    for (; it; it = cJSON_IsArray(t) ? it->next : NULL)
        for (int k = 0; k < 7; k++)
            if (cJSON_IsString(it) && !strcmp(it->valuestring, TYPES[k])) bits |= 1 << k;
    return bits;
}

/* A keyword both schemas have: its merged value into r. */
static int merge_key(sc *c, cJSON *r, const char *k, const cJSON *x, const cJSON *y) {
    cJSON *v = NULL;
    if (ONE_OF(k, FIRST)) {
        v = cJSON_Duplicate(x, 1);
    } else if (ONE_OF(k, LOWER) || ONE_OF(k, UPPER)) {
        if (!cJSON_IsNumber(x) || !cJSON_IsNumber(y)) {
            if (cJSON_Compare(x, y, true)) v = cJSON_Duplicate(x, 1); /* draft-4 boolean exclusives */
            else return sc_fail(c, E0_EUNSUPPORTED, "allOf: two different '%s' that are not numbers", k);
        } else {
            bool lower = ONE_OF(k, LOWER);
            v = cJSON_Duplicate((x->valuedouble > y->valuedouble) == lower ? x : y, 1);
        }
    } else if (!strcmp(k, "type")) {
        int bx = type_bits(x), by = type_bits(y);
        if (bx & 8) bx |= 4; /* number includes integer */
        if (by & 8) by |= 4;
        int both = bx & by;
        if ((both & 8) && !((type_bits(x) & 8) && (type_bits(y) & 8))) both &= ~8;
        if (!both) return sc_fail(c, E0_EINVAL, "allOf: the types of its schemas do not intersect");
        v = cJSON_CreateArray();
        for (int t = 0; t < 7 && v; t++)
            if (both & (1 << t)) cJSON_AddItemToArray(v, cJSON_CreateString(TYPES[t]));
    } else if (!strcmp(k, "properties")) {
        v = cJSON_Duplicate(x, 1);
        const cJSON *p;
        cJSON_ArrayForEach(p, y) {
            if (!v) break;
            const cJSON *q = cJSON_GetObjectItemCaseSensitive(x, p->string);
            if (q) cJSON_ReplaceItemInObjectCaseSensitive(v, p->string, all_of2(q, p));
            else cJSON_AddItemToObject(v, p->string, cJSON_Duplicate(p, 1));
        }
    } else if (!strcmp(k, "required")) {
        v = cJSON_Duplicate(x, 1);
        const cJSON *p, *q;
        cJSON_ArrayForEach(p, y) {
            bool in = false;
            cJSON_ArrayForEach(q, x) in = in || cJSON_Compare(p, q, true);
            if (!in && v) cJSON_AddItemToArray(v, cJSON_Duplicate(p, 1));
        }
    } else if (!strcmp(k, "enum")) {
        v = cJSON_CreateArray();
        const cJSON *p, *q;
        cJSON_ArrayForEach(p, x) {
            bool in = false;
            cJSON_ArrayForEach(q, y) in = in || cJSON_Compare(p, q, true);
            if (in && v) cJSON_AddItemToArray(v, cJSON_Duplicate(p, 1));
        }
        if (v && !v->child) return cJSON_Delete(v), sc_fail(c, E0_EINVAL, "allOf: the enums of its schemas share no value");
    } else if (!strcmp(k, "additionalProperties") && (cJSON_IsBool(x) || cJSON_IsBool(y))) {
        v = cJSON_Duplicate(cJSON_IsFalse(x) || cJSON_IsTrue(y) ? x : y, 1);
    } else if (!strcmp(k, "uniqueItems") || !strcmp(k, "nullable")) {
        bool on = !strcmp(k, "uniqueItems") ? cJSON_IsTrue(x) || cJSON_IsTrue(y) : cJSON_IsTrue(x) && cJSON_IsTrue(y);
        v = cJSON_CreateBool(on);
    } else if (!strcmp(k, "not")) {
        cJSON *n = all_of2(x, y);
        if (n) cJSON_AddItemToObject(n, "anyOf", cJSON_DetachItemFromObject(n, "allOf"));
        v = n;
    } else if (!strcmp(k, "items") || !strcmp(k, "propertyNames") || !strcmp(k, "additionalProperties")) {
        v = all_of2(x, y);
    } else if (cJSON_Compare(x, y, true)) {
        v = cJSON_Duplicate(x, 1);
    } else {
        return sc_fail(c, E0_EUNSUPPORTED, "allOf: its schemas give '%.64s' two different values", k);
    }
    if (!v) return sc_fail(c, E0_ENOMEM, "out of memory");
    cJSON_AddItemToObject(r, k, v);
    return 0;
}

static const cJSON *deref(sc *c, const cJSON *s) {
    for (int i = 0; i < 16 && cJSON_IsObject(s) && sc_kw(s, "$ref"); i++) {
        const char *o = sc_other_keyword(s, (const char *const[]){"$ref"}, 1);
        if (o) return s; /* beside other keywords: merged by the caller */
        const cJSON *t = sc_resolve_ref(c, sc_kw(s, "$ref"));
        if (!t) return NULL;
        s = t;
    }
    return s;
}

static cJSON *merge2(sc *c, const cJSON *a, const cJSON *b, int depth);

/* s with its allOf and $ref beside other keywords merged away (an
 * anyOf / oneOf may remain, distributed by merge2). */
static cJSON *flatten(sc *c, const cJSON *s, int depth) {
    if (depth > SCHEMA_MAX_DEPTH) return sc_fail(c, E0_ERANGE, "allOf nested deeper than %d levels", SCHEMA_MAX_DEPTH), NULL;
    if (++c->merge_steps > SC_MAX_MERGE_STEPS)
        return sc_fail(c, E0_ERANGE, "allOf / $ref merging takes more than %d steps", SC_MAX_MERGE_STEPS), NULL;
    if (!(s = deref(c, s))) return NULL;
    if (cJSON_IsFalse(s)) return sc_fail(c, E0_EINVAL, "allOf: the schema false allows no value"), NULL;
    if (!cJSON_IsObject(s)) return cJSON_CreateObject();
    const cJSON *all = sc_kw(s, "allOf"), *ref = sc_kw(s, "$ref");
    if (all && (!cJSON_IsArray(all) || !all->child)) return sc_fail(c, E0_EINVAL, "'allOf' must be a non-empty array"), NULL;
    cJSON *acc = cJSON_Duplicate(s, 1);
    if (!acc) return sc_fail(c, E0_ENOMEM, "out of memory"), NULL;
    cJSON_DeleteItemFromObjectCaseSensitive(acc, "allOf");
    cJSON_DeleteItemFromObjectCaseSensitive(acc, "$ref");
    const cJSON *parts[2] = {ref ? sc_resolve_ref(c, ref) : NULL, all ? all->child : NULL};
    if (ref && !parts[0]) return cJSON_Delete(acc), NULL;
    for (int k = 0; k < 2; k++)
        for (const cJSON *it = parts[k]; it && acc; it = k ? it->next : NULL) {
            cJSON *f = flatten(c, it, depth + 1), *m = f ? merge2(c, acc, f, depth + 1) : NULL;
            cJSON_Delete(f);
            cJSON_Delete(acc);
            acc = m;
        }
    return acc;
}

/* What schema s gives key k: its property, else its additionalProperties
 * (NULL: any value; *forbid: none). */
static const cJSON *prop_of(const cJSON *s, const char *k, bool *forbid) {
    const cJSON *p = sc_kw(sc_kw(s, "properties"), k), *ap = sc_kw(s, "additionalProperties");
    *forbid = !p && cJSON_IsFalse(ap);
    return p ? p : cJSON_IsObject(ap) ? ap : NULL;
}

static bool required_in(const cJSON *s, const char *k) {
    const cJSON *it;
    cJSON_ArrayForEach(it, sc_kw(s, "required")) if (cJSON_IsString(it) && !strcmp(it->valuestring, k)) return true;
    return false;
}

/* The merged properties, as JSON Schema reads each side: a key one side
 * lists is held, on the other side, to that side's additionalProperties. */
static int merge_props(sc *c, cJSON *r, const cJSON *a, const cJSON *b) {
    if (!sc_kw(a, "properties") && !sc_kw(b, "properties")) return 0;
    cJSON *props = cJSON_CreateObject();
    if (!props) return sc_fail(c, E0_ENOMEM, "out of memory");
    for (int side = 0; side < 2; side++) {
        const cJSON *k;
        cJSON_ArrayForEach(k, sc_kw(side ? b : a, "properties")) {
            if (sc_kw(props, k->string)) continue;
            bool fa, fb;
            const cJSON *pa = prop_of(a, k->string, &fa), *pb = prop_of(b, k->string, &fb);
            if (fa || fb) {
                if (required_in(a, k->string) || required_in(b, k->string))
                    return cJSON_Delete(props), sc_fail(c, E0_EINVAL,
                                                        "allOf: \"%.64s\" is required by one schema and forbidden by "
                                                        "the other's additionalProperties",
                                                        k->string);
                continue; /* never written */
            }
            cJSON *v = pa && pb ? all_of2(pa, pb) : cJSON_Duplicate(pa ? pa : pb, 1);
            if (!v) return cJSON_Delete(props), sc_fail(c, E0_ENOMEM, "out of memory");
            cJSON_AddItemToObject(props, k->string, v);
        }
    }
    cJSON_DeleteItemFromObjectCaseSensitive(r, "properties");
    cJSON_AddItemToObject(r, "properties", props);
    return 0;
}

/* The merge of two flattened schemas (new, the caller's). */
static cJSON *merge2(sc *c, const cJSON *a, const cJSON *b, int depth) {
    cJSON *r = cJSON_CreateObject();
    if (!r) return sc_fail(c, E0_ENOMEM, "out of memory"), NULL;
    const cJSON *k;
    bool branches = false;
    cJSON_ArrayForEach(k, a) {
        const cJSON *o = sc_kw(b, k->string);
        bool br = !strcmp(k->string, "anyOf") || !strcmp(k->string, "oneOf");
        branches |= br;
        if (!o) cJSON_AddItemToObject(r, k->string, cJSON_Duplicate(k, 1));
        else if (br) return cJSON_Delete(r), sc_fail(c, E0_EUNSUPPORTED, "allOf of two schemas with '%s'", k->string), NULL;
        else if (merge_key(c, r, k->string, k, o)) return cJSON_Delete(r), NULL;
    }
    cJSON_ArrayForEach(k, b) {
        branches |= !strcmp(k->string, "anyOf") || !strcmp(k->string, "oneOf");
        if (!sc_kw(a, k->string)) cJSON_AddItemToObject(r, k->string, cJSON_Duplicate(k, 1));
    }
    if (merge_props(c, r, a, b)) return cJSON_Delete(r), NULL;
    return branches ? sc_distribute(c, r, depth) : r;
}

/* {"anyOf": [...], more...} -> {"anyOf": [merge(branch, more)...]} (r is consumed). */
cJSON *sc_distribute(sc *c, cJSON *r, int depth) {
    const char *name = sc_kw(r, "anyOf") ? "anyOf" : "oneOf";
    cJSON *l = cJSON_DetachItemFromObjectCaseSensitive(r, name), *out = cJSON_CreateObject(), *nl = NULL;
    if (out) nl = cJSON_AddArrayToObject(out, "anyOf");
    bool rest = sc_other_keyword(r, NULL, 0) != NULL;
    const cJSON *it, *list = cJSON_IsArray(l) ? l : NULL;
    if (sc_kw(r, "anyOf") || sc_kw(r, "oneOf")) sc_fail(c, E0_EUNSUPPORTED, "both 'anyOf' and 'oneOf' beside other keywords");
    cJSON_ArrayForEach(it, list) {
        if (!nl || c->rc) break;
        cJSON *f = rest ? flatten(c, it, depth + 1) : cJSON_Duplicate(it, 1), *m = f && rest ? merge2(c, f, r, depth + 1) : f;
        if (rest) cJSON_Delete(f);
        if (m) cJSON_AddItemToArray(nl, m);
    }
    if (!cJSON_IsArray(l) || !l->child) sc_fail(c, E0_EINVAL, "'%s' must be a non-empty array", name);
    cJSON_Delete(l);
    cJSON_Delete(r);
    if (!nl || c->rc) return cJSON_Delete(out), c->rc ? NULL : (sc_fail(c, E0_ENOMEM, "out of memory"), NULL);
    return out;
}

const cJSON *sc_merge(sc *c, const cJSON *s) {
    cJSON *m = flatten(c, s, 0);
    if (m && (sc_kw(m, "anyOf") || sc_kw(m, "oneOf")) && sc_other_keyword(m, (const char *const[]){"anyOf", "oneOf"}, 2))
        m = sc_distribute(c, m, 0);
    return m ? own(c, m) : NULL;
}
