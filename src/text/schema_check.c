/* The check after generation (schema_check.h): a recursive validator over
 * the schema and the value together. */
#include "text/schema_check.h"

#include "text/schema.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const cJSON *doc;
    char *why;
    size_t why_len;
    bool quiet; /* inside anyOf / not: failures are not reported */
} ck;

static const cJSON *kw(const cJSON *s, const char *k) { return cJSON_GetObjectItemCaseSensitive(s, k); }

static bool bad(ck *c, const char *path, const char *what) {
    if (!c->quiet && c->why && !*c->why) snprintf(c->why, c->why_len, "%s: %s", *path ? path : "/", what);
    return false;
}

static bool is_int(const cJSON *v) { return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble); }

static bool type_ok(const cJSON *v, const char *t) {
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "integer")) return is_int(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    return false;
}

static size_t utf8_len(const char *s) {
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

static const cJSON *resolve(const ck *c, const char *r) {
    if (!strcmp(r, "#")) return c->doc;
    const char *name = !strncmp(r, "#/$defs/", 8) ? r + 8 : !strncmp(r, "#/definitions/", 14) ? r + 14 : NULL;
    const cJSON *defs = name ? kw(c->doc, r[2] == '$' ? "$defs" : "definitions") : NULL;
    return defs ? kw(defs, name) : NULL;
}

static bool valid(ck *c, const cJSON *s, const cJSON *v, const char *path, int depth);

static bool check_number(ck *c, const cJSON *s, const cJSON *v, const char *path) {
    double x = v->valuedouble;
    const cJSON *k;
    if ((k = kw(s, "minimum")) && cJSON_IsNumber(k) &&
        (cJSON_IsTrue(kw(s, "exclusiveMinimum")) ? x <= k->valuedouble : x < k->valuedouble))
        return bad(c, path, "minimum");
    if ((k = kw(s, "maximum")) && cJSON_IsNumber(k) &&
        (cJSON_IsTrue(kw(s, "exclusiveMaximum")) ? x >= k->valuedouble : x > k->valuedouble))
        return bad(c, path, "maximum");
    if ((k = kw(s, "exclusiveMinimum")) && cJSON_IsNumber(k) && x <= k->valuedouble)
        return bad(c, path, "exclusiveMinimum");
    if ((k = kw(s, "exclusiveMaximum")) && cJSON_IsNumber(k) && x >= k->valuedouble)
        return bad(c, path, "exclusiveMaximum");
    if ((k = kw(s, "multipleOf")) && cJSON_IsNumber(k) && k->valuedouble > 0) {
        double q = x / k->valuedouble;
        if (fabs(q - round(q)) > 1e-9 * (fabs(q) > 1 ? fabs(q) : 1)) return bad(c, path, "multipleOf");
    }
    return true;
}

static bool check_array(ck *c, const cJSON *s, const cJSON *v, const char *path, int depth) {
    int n = cJSON_GetArraySize(v), i = 0;
    const cJSON *k = kw(s, "minItems"), *it;
    if (k && cJSON_IsNumber(k) && n < k->valuedouble) return bad(c, path, "minItems");
    if ((k = kw(s, "maxItems")) && cJSON_IsNumber(k) && n > k->valuedouble) return bad(c, path, "maxItems");
    const cJSON *items = kw(s, "items"), *prefix = kw(s, "prefixItems");
    if (cJSON_IsArray(items) && !prefix) prefix = items, items = kw(s, "additionalItems"); /* draft 7 tuples */
    const cJSON *pi = cJSON_IsArray(prefix) ? prefix->child : NULL;
    cJSON_ArrayForEach(it, v) {
        char p[256];
        snprintf(p, sizeof p, "%s/%d", path, i++);
        const cJSON *sch = pi ? pi : items;
        if (pi) pi = pi->next;
        if (sch && (cJSON_IsObject(sch) || cJSON_IsBool(sch)) && !valid(c, sch, it, p, depth + 1)) return false;
        if (cJSON_IsTrue(kw(s, "uniqueItems")))
            for (const cJSON *o = it->next; o; o = o->next)
                if (cJSON_Compare(it, o, true)) return bad(c, path, "uniqueItems");
    }
    return true;
}

static bool check_object(ck *c, const cJSON *s, const cJSON *v, const char *path, int depth) {
    int n = cJSON_GetArraySize(v);
    const cJSON *k = kw(s, "minProperties"), *props = kw(s, "properties"), *ap = kw(s, "additionalProperties"), *m;
    if (k && cJSON_IsNumber(k) && n < k->valuedouble) return bad(c, path, "minProperties");
    if ((k = kw(s, "maxProperties")) && cJSON_IsNumber(k) && n > k->valuedouble) return bad(c, path, "maxProperties");
    cJSON_ArrayForEach(k, kw(s, "required")) {
        if (cJSON_IsString(k) && !kw(v, k->valuestring)) return bad(c, path, "required");
    }
    const cJSON *pn = kw(s, "propertyNames");
    cJSON_ArrayForEach(m, v) {
        char p[256];
        snprintf(p, sizeof p, "%s/%.64s", path, m->string);
        const cJSON *ps = props ? kw(props, m->string) : NULL;
        if (pn) {
            cJSON *name = cJSON_CreateString(m->string);
            bool ok = !name || valid(c, pn, name, p, depth + 1);
            cJSON_Delete(name);
            if (!ok) return bad(c, p, "propertyNames");
        }
        if (ps && !valid(c, ps, m, p, depth + 1)) return false;
        if (!ps && cJSON_IsFalse(ap)) return bad(c, p, "additionalProperties");
        if (!ps && cJSON_IsObject(ap) && !valid(c, ap, m, p, depth + 1)) return false;
    }
    return true;
}

/* anyOf / oneOf / allOf / not. */
static bool check_comb(ck *c, const cJSON *s, const cJSON *v, const char *path, int depth) {
    const cJSON *k, *it;
    cJSON_ArrayForEach(it, kw(s, "allOf")) if (!valid(c, it, v, path, depth + 1)) return false;
    static const char *const ANY[] = {"anyOf", "oneOf"};
    for (int a = 0; a < 2; a++) {
        if (!cJSON_IsArray(k = kw(s, ANY[a]))) continue;
        bool q = c->quiet, any = false;
        c->quiet = true;
        cJSON_ArrayForEach(it, k) if (!any) any = valid(c, it, v, path, depth + 1);
        c->quiet = q;
        if (!any) return bad(c, path, ANY[a]);
    }
    if ((k = kw(s, "not"))) {
        bool q = c->quiet;
        c->quiet = true;
        bool in = valid(c, k, v, path, depth + 1);
        c->quiet = q;
        if (in) return bad(c, path, "not");
    }
    return true;
}

static bool valid(ck *c, const cJSON *s, const cJSON *v, const char *path, int depth) {
    if (depth > SCHEMA_MAX_DEPTH * 4) return bad(c, path, "nested too deep to check");
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s) || bad(c, path, "false");
    if (!cJSON_IsObject(s)) return true;
    const cJSON *k = kw(s, "$ref"), *it;
    if (cJSON_IsString(k)) {
        const cJSON *t = resolve(c, k->valuestring);
        if (t && !valid(c, t, v, path, depth + 1)) return false;
    }
    if ((k = kw(s, "type"))) {
        bool ok = cJSON_IsNull(v) && cJSON_IsTrue(kw(s, "nullable"));
        if (cJSON_IsString(k)) ok = ok || type_ok(v, k->valuestring);
        if (cJSON_IsArray(k))
            cJSON_ArrayForEach(it, k) ok = ok || (cJSON_IsString(it) && type_ok(v, it->valuestring));
        if (!ok) return bad(c, path, "type");
    }
    if ((k = kw(s, "const")) && !cJSON_Compare(k, v, true)) return bad(c, path, "const");
    if (cJSON_IsArray(k = kw(s, "enum"))) {
        bool in = false;
        cJSON_ArrayForEach(it, k) in = in || cJSON_Compare(it, v, true);
        if (!in) return bad(c, path, "enum");
    }
    if (cJSON_IsString(v)) {
        size_t n = utf8_len(v->valuestring);
        if ((k = kw(s, "minLength")) && cJSON_IsNumber(k) && (double)n < k->valuedouble) return bad(c, path, "minLength");
        if ((k = kw(s, "maxLength")) && cJSON_IsNumber(k) && (double)n > k->valuedouble) return bad(c, path, "maxLength");
    }
    if (cJSON_IsNumber(v) && !check_number(c, s, v, path)) return false;
    if (cJSON_IsArray(v) && !check_array(c, s, v, path, depth)) return false;
    if (cJSON_IsObject(v) && !check_object(c, s, v, path, depth)) return false;
    return check_comb(c, s, v, path, depth);
}

int e0_schema_check(const cJSON *schema, const cJSON *value, char *why, size_t why_len) {
    return schema_check(schema, value, why, why_len);
}

int schema_check(const cJSON *schema, const cJSON *value, char *why, size_t why_len) {
    ck c = {schema, why, why_len, false};
    if (why && why_len) *why = 0;
    return valid(&c, schema, value, "", 0) ? 0 : 1;
}
