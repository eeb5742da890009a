/* The property of constrained decoding: any path through the token mask
 * yields a valid instance. 1,000 random schemas built from the keywords the
 * grammar enforces (types, properties / required / additionalProperties,
 * items with minItems / maxItems, enum, const, anyOf, allOf, $ref / $defs,
 * minLength / maxLength, pattern, format, integer and number bounds), 20
 * random walks each: at every step the mask must allow something (the
 * grammar never reaches a dead end before the value is complete), one of
 * the allowed tokens is taken at random, and the end-of-turn token sometimes
 * when the value is complete. Tokens are the 256 bytes, so a walk reaches
 * every byte the grammar allows; a few walks use the Qwen3 tokenizer.
 * Every text must parse (cJSON) and pass e0_schema_check; then all the
 * (schema, instance) pairs go to ajv + ajv-formats in one node call
 * (tests/node/schema_property.cjs), the independent oracle. */
#include "testutil.h"

#include "text/grammar.h"
#include "text/schema.h"
#include "text/schema_check.h"
#include "text/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_SCHEMAS 1000
#define N_WALKS   20
#define MAX_TEXT  6000

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(uint32_t n) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

/* A random pattern of the supported syntax, anchored (mostly) so that walks finish. */
static void gen_pattern(char *out, size_t cap) {
    static const char *const ATOM[] = {"[a-z]", "[^a-z\\\\s<]", "\\\\d", "\\\\w", "x", "\\\\.", "[0-9A-F]", "\\\"",
                                       "\\\\\\\\", "\\u00e9", "(ab|c)", "(?:-[0-9]{1,2})", "[\\u4e00-\\u4e0f]", " ",
                                       "\\\\u0041", "[^\\\\d]"};
    static const char *const QUANT[] = {"", "", "?", "{2}", "{0,3}", "{1,}", "*", "+?"};
    size_t n = 0;
    /* unbounded repetition only of narrow atoms (the first five): a walk
     * leaves a loop over a wide class with a probability of 1 in ~200 bytes */
    bool anchored = rnd(16) != 0; /* unanchored: any text may come around (long walks) */
    n += (size_t)snprintf(out + n, cap - n, "%s", anchored ? "^(?:" : "");
    int k = 1 + (int)rnd(4);
    for (int i = 0; i < k && n < cap - 40; i++) {
        uint32_t a = rnd(sizeof ATOM / sizeof *ATOM), q = rnd(sizeof QUANT / sizeof *QUANT);
        if (a == 1 || a == 3 || a == 15 || a == 12) q = q % 5;
        n += (size_t)snprintf(out + n, cap - n, "%s%s", ATOM[a], QUANT[q]);
    }
    if (rnd(3) == 0 && n < cap - 40) n += (size_t)snprintf(out + n, cap - n, "|y[xyz]{1,2}");
    snprintf(out + n, cap - n, "%s", anchored ? ")$" : "");
}

static char *gen_schema(int depth, bool *has_defs);

static void gen_scalar(char *b, size_t cap) {
    static const char *const FMT[] = {"date", "time", "date-time", "email", "uri", "uuid", "ipv4", "ipv6", "hostname"};
    char pat[256];
    long lo = (long)rnd(2000) - 1000, w = (long)rnd(300);
    switch (rnd(11)) {
    case 0:
        snprintf(b, cap, "{\"type\":\"integer\",\"minimum\":%ld,\"maximum\":%ld}", lo, lo + w);
        break;
    case 1:
        snprintf(b, cap, "{\"type\":\"integer\",\"exclusiveMinimum\":%ld}", lo);
        break;
    case 2:
        snprintf(b, cap, "{\"type\":\"number\",\"minimum\":%g,\"exclusiveMaximum\":%g}", (double)lo / 8,
                 (double)(lo + w + 1) / 8);
        break;
    case 3:
        snprintf(b, cap, "{\"type\":\"string\",\"maxLength\":%u,\"minLength\":%u}", 3 + rnd(6), rnd(3));
        break;
    case 4:
    case 5: {
        gen_pattern(pat, sizeof pat);
        snprintf(b, cap, "{\"type\":\"string\",\"pattern\":\"%s\"}", pat);
        break;
    }
    case 6:
        snprintf(b, cap, "{\"type\":\"string\",\"format\":\"%s\"}", FMT[rnd(9)]);
        break;
    case 7:
        snprintf(b, cap, "{\"enum\":[\"a\",\"b\\\"c\",%ld,null,true]}", lo);
        break;
    case 8:
        snprintf(b, cap, "{\"type\":[\"boolean\",\"null\"]}");
        break;
    case 9:
        snprintf(b, cap, "{\"type\":\"number\",\"maximum\":%ld}", lo);
        break;
    default:
        snprintf(b, cap, "{\"const\":{\"k\":[1,\"%ld\"]}}", lo);
    }
}

static char *gen_schema(int depth, bool *has_defs) {
    char *b = malloc(65536);
    if (!b) return NULL;
    uint32_t kind = depth >= 3 ? 0 : rnd(10);
    if (kind <= 3) {
        gen_scalar(b, 4096);
        return b;
    }
    if (kind == 4 && rnd(3) == 0) { /* a tuple */
        char *x = gen_schema(depth + 1, has_defs), *y = gen_schema(depth + 1, has_defs), *z = gen_schema(3, has_defs);
        uint32_t lo = rnd(3);
        snprintf(b, 65536, "{\"type\":\"array\",\"prefixItems\":[%s,%s],\"items\":%s,\"minItems\":%u,\"maxItems\":%u}", x,
                 y, rnd(2) ? "false" : z, lo, lo + rnd(3));
        free(x), free(y), free(z);
        return b;
    }
    if (kind == 4) { /* array */
        char *it = gen_schema(depth + 1, has_defs);
        uint32_t lo = rnd(3);
        snprintf(b, 65536, "{\"type\":\"array\",\"items\":%s,\"minItems\":%u,\"maxItems\":%u}", it, lo, lo + rnd(3));
        free(it);
        return b;
    }
    if (kind == 5) { /* anyOf */
        char *x = gen_schema(depth + 1, has_defs), *y = gen_schema(depth + 1, has_defs);
        snprintf(b, 65536, "{\"anyOf\":[%s,%s]}", x, y);
        free(x), free(y);
        return b;
    }
    if (kind == 6) { /* allOf of two objects, and bounds to intersect */
        long lo = (long)rnd(100);
        snprintf(b, 65536,
                 "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"integer\",\"minimum\":%ld}},"
                 "\"required\":[\"p\"]},{\"properties\":{\"p\":{\"maximum\":%ld},\"q\":{\"type\":\"string\","
                 "\"maxLength\":3}},\"additionalProperties\":false}]}",
                 lo, lo + 5);
        return b;
    }
    if (kind == 8 && rnd(2)) { /* a map */
        char *v = gen_schema(depth + 1, has_defs);
        snprintf(b, 65536,
                 "{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^[a-c]{1,2}$\"},\"maxProperties\":%u,"
                 "\"additionalProperties\":%s}",
                 rnd(4), v);
        free(v);
        return b;
    }
    if (kind == 7) { /* a $ref to the definitions */
        *has_defs = true;
        snprintf(b, 65536, "{\"$ref\":\"#/$defs/d%u\"}", rnd(2));
        return b;
    }
    /* an object */
    size_t n = (size_t)snprintf(b, 65536, "{\"type\":\"object\",\"properties\":{");
    int k = 1 + (int)rnd(4);
    char req[128] = "";
    for (int i = 0; i < k; i++) {
        char *p = gen_schema(depth + 1, has_defs);
        n += (size_t)snprintf(b + n, 65536 - n, "%s\"k%d\":%s", i ? "," : "", i, p);
        free(p);
        if (rnd(2)) snprintf(req + strlen(req), sizeof req - strlen(req), "%s\"k%d\"", *req ? "," : "", i);
    }
    snprintf(b + n, 65536 - n, "},\"required\":[%s],\"additionalProperties\":%s}", req, rnd(4) ? "false" : "{\"type\":\"integer\"}");
    return b;
}

static const uint8_t *byte_token(void *user, int32_t id, size_t *len) {
    static uint8_t bytes[256];
    (void)user;
    if (id >= 256) return NULL;
    bytes[id] = (uint8_t)id;
    *len = 1;
    return &bytes[id];
}

static const uint8_t *tk_token(void *user, int32_t id, size_t *len) {
    const tok_tokenizer *tk = user;
    if (!tok_is_token(tk, id) || tok_is_special(tk, id)) return NULL;
    return tok_token_bytes(tk, id, len);
}

typedef struct {
    gram_vocab *v;
    int32_t nv, eot;
    const uint8_t *(*bytes)(void *, int32_t, size_t *);
    void *user;
} vocab;

/* One walk: 1 finished (text in out), 0 ran past MAX_TEXT. Fails on a dead end. */
static int walk(const gram *g, const vocab *V, const char *schema, char *out) {
    gram_matcher_opts o;
    gram_matcher_opts_default(&o);
    o.eot = &V->eot;
    o.n_eot = 1;
    gram_matcher *m;
    char err[E0_ERR_MAX];
    if (gram_matcher_new(&m, g, V->v, &o, err)) fail_msg("%s", err);
    uint32_t *mask = malloc(((size_t)V->nv + 31) / 32 * sizeof *mask);
    int32_t *cand = malloc((size_t)V->nv * sizeof *cand);
    size_t len = 0;
    int done = 0;
    while (len < MAX_TEXT) {
        assert_int_equal(gram_matcher_mask(m, mask), 0);
        bool eot_ok = (mask[V->eot >> 5] >> (V->eot & 31)) & 1;
        if (eot_ok && rnd(3) == 0) {
            done = 1;
            break;
        }
        int32_t n = 0;
        for (int32_t id = 0; id < V->nv; id++)
            if (id != V->eot && ((mask[id >> 5] >> (id & 31)) & 1)) cand[n++] = id;
        if (!n) {
            if (eot_ok) {
                done = 1;
                break;
            }
            out[len] = 0;
            fail_msg("dead end: schema %s\n  after \"%s\"", schema, out);
        }
        int32_t id = cand[rnd((uint32_t)n)];
        assert_int_equal(gram_matcher_accept(m, id), 0);
        size_t bl;
        const uint8_t *bt = V->bytes(V->user, id, &bl);
        if (len + bl >= MAX_TEXT) break;
        memcpy(out + len, bt, bl);
        len += bl;
    }
    out[len] = 0;
    if (done) assert_true(gram_matcher_complete(m));
    gram_matcher_free(m);
    free(mask);
    free(cand);
    return done;
}

static void test_property(void **state) {
    (void)state;
    char err[E0_ERR_MAX], *text = malloc(MAX_TEXT + 8);
    vocab bytes_v = {NULL, 257, 256, byte_token, NULL};
    if (gram_vocab_new(&bytes_v.v, 257, byte_token, NULL, err)) fail_msg("%s", err);
    tok_tokenizer *tk;
    if (e0_tokenizer_load(&tk, tu_shared("tokenizers/qwen3/tokenizer.json"), err)) fail_msg("%s", err);
    vocab tok_v = {NULL, e0_tokenizer_vocab_size(tk), tok_token_id(tk, "<|im_end|>"), tk_token, tk};
    if (gram_vocab_new(&tok_v.v, tok_v.nv, tk_token, tk, err)) fail_msg("%s", err);
    char *dir = tu_tmpdir(), path[512];
    snprintf(path, sizeof path, "%s/pairs.jsonl", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    int finished = 0, unfinished = 0;
    for (int s = 0; s < N_SCHEMAS; s++) {
        bool defs = false;
        char *body = gen_schema(0, &defs), *d0 = gen_schema(3, &defs), *d1 = gen_schema(3, &defs);
        size_t n = strlen(body) + strlen(d0) + strlen(d1) + 64;
        char *js = malloc(n);
        /* $defs beside a root that is not an object-keyword schema: wrap it */
        snprintf(js, n, "{\"allOf\":[%s],\"$defs\":{\"d0\":%s,\"d1\":%s}}", body, d0, d1);
        free(body), free(d0), free(d1);
        cJSON *schema = cJSON_Parse(js);
        if (!schema) fail_msg("bad generated schema %s", js);
        gram *g;
        if (schema_value_grammar(schema, &g, err)) fail_msg("schema %s: %s", js, err);
        for (int w = 0; w < N_WALKS; w++) {
            const vocab *V = (s % 100 == 0 && w < 2) ? &tok_v : &bytes_v; /* a few walks on real tokens */
            if (!walk(g, V, js, text)) {
                if (getenv("E0_PROP_DEBUG") && unfinished < 6) printf("unfinished: %s\n  %.300s\n", js, text);
                unfinished++;
                continue;
            }
            cJSON *inst = cJSON_Parse(text);
            if (!inst) fail_msg("not JSON: schema %s\n  text %s", js, text);
            char why[256];
            /* cJSON ends a string at \u0000: the C check only where that cannot cut one */
            if (!strstr(text, "\\u0000") && e0_schema_check(schema, inst, why, sizeof why))
                fail_msg("schema %s\n  text %s\n  %s", js, text, why);
            for (char *nl = text; (nl = strchr(nl, '\n'));) /* whitespace between tokens: strings escape theirs */
                *nl = ' ';
            fprintf(f, "[%s,%s]\n", js, text); /* the text itself, as generated */
            cJSON_Delete(inst);
            finished++;
        }
        e0_grammar_free(g);
        cJSON_Delete(schema);
        free(js);
    }
    fclose(f);
    printf("property: %d walks finished, %d ran past %d bytes\n", finished, unfinished, MAX_TEXT);
    assert_true(unfinished * 50 <= finished); /* walks end (an unanchored pattern's sides are long) */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "node tests/node/schema_property.cjs %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[4096];
    size_t got = fread(out, 1, sizeof out - 1, p);
    out[got] = 0;
    int st = pclose(p);
    printf("%s", out);
    if (st) fail_msg("ajv refused generated instances (scripts/deps.sh installs node, ajv and ajv-formats):\n%s", out);
    remove(path);
    snprintf(cmd, sizeof cmd, "%s.bad", path);
    remove(cmd);
    tu_rmtree(dir);
    free(dir);
    gram_vocab_free(bytes_v.v);
    gram_vocab_free(tok_v.v);
    e0_tokenizer_free(tk);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_property)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
