/* The grammar engine (text/grammar.h) and the schema compiler (text/schema.h).
 *
 * Strings a grammar must accept or refuse, byte by byte; schemas compiled and
 * run against JSON texts whose validity is known (and, when accepted,
 * parsed back by cJSON); the errors for unsupported or hostile schemas; and
 * the token mask on the real Qwen3 tokenizer against the brute force: every
 * token's bytes run through a fresh matcher that has replayed the same text
 * (no trie, no mask cache), for every prefix of several answers. Plus
 * sampler_resample. */
#include "testutil.h"

#include "text/grammar.h"
#include "text/sampler.h"
#include "text/schema.h"
#include "text/schema_check.h"
#include "text/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A vocabulary of the 256 single bytes (id = byte) and an end-of-turn id 256. */
static const uint8_t *byte_token(void *user, int32_t id, size_t *len) {
    static uint8_t bytes[256];
    (void)user;
    if (id >= 256) return NULL;
    bytes[id] = (uint8_t)id;
    *len = 1;
    return &bytes[id];
}

static gram_vocab *bytes_vocab(void) {
    gram_vocab *v;
    char err[E0_ERR_MAX];
    if (gram_vocab_new(&v, 257, byte_token, NULL, err)) fail_msg("%s", err);
    return v;
}

/* 1: s is a complete sentence; 0: a valid prefix only; -1: refused. */
static int run(const gram *g, const gram_vocab *v, int root, const char *s) {
    gram_matcher_opts o;
    gram_matcher_opts_default(&o);
    o.root = root;
    gram_matcher *m;
    char err[E0_ERR_MAX];
    if (gram_matcher_new(&m, g, v, &o, err)) fail_msg("%s", err);
    int r = gram_matcher_accept_bytes(m, (const uint8_t *)s, strlen(s)) ? -1 : gram_matcher_complete(m) ? 1 : 0;
    gram_matcher_free(m);
    return r;
}

static void expect(const gram *g, const gram_vocab *v, int root, const char *s, int want) {
    int got = run(g, v, root, s);
    if (got != want) fail_msg("\"%s\": got %d, want %d (1 complete, 0 prefix, -1 refused)", s, got, want);
}

static void test_builder(void **state) {
    (void)state;
    gram_vocab *v = bytes_vocab();
    gram_builder *b = gb_new();
    /* root := "n=" [0-9]{1,3} ("," [0-9]{1,3})* | "t:" until("END") */
    int32_t digits = gb_rep(b, gb_range_rule(b, '0', '9'), 1, 3), more = gb_rule(b), a = gb_alt(b, more);
    gb_str(b, a, ",");
    gb_ref(b, a, digits);
    int32_t root = gb_rule(b);
    a = gb_alt(b, root);
    gb_str(b, a, "n=");
    gb_ref(b, a, digits);
    gb_ref(b, a, gb_star(b, more));
    a = gb_alt(b, root);
    gb_str(b, a, "t:");
    gb_ref(b, a, gb_until(b, "END"));
    gram *g;
    char err[E0_ERR_MAX];
    if (gram_compile(b, &root, 1, &g, err)) fail_msg("%s", err);
    gb_free(b);
    expect(g, v, 0, "", 0);
    expect(g, v, 0, "n=", 0);
    expect(g, v, 0, "n=1", 1);
    expect(g, v, 0, "n=123", 1);
    expect(g, v, 0, "n=1234", -1);
    expect(g, v, 0, "n=1,22,333", 1);
    expect(g, v, 0, "n=1,", 0);
    expect(g, v, 0, "n=1,,", -1);
    expect(g, v, 0, "x", -1);
    expect(g, v, 0, "t:abcEN", 0);
    expect(g, v, 0, "t:abcEND", 1);
    expect(g, v, 0, "t:EENENDX", -1); /* the text ends at the first END */
    expect(g, v, 0, "t:EEND", 1);
    e0_grammar_free(g);

    /* left recursion (through a nullable prefix) is refused, as is a rule without alternatives */
    b = gb_new();
    int32_t x = gb_rule(b), y = gb_opt(b, gb_lit_rule(b, "a", 1));
    a = gb_alt(b, x);
    gb_ref(b, a, y);
    gb_ref(b, a, x);
    gb_str(b, gb_alt(b, x), "b");
    assert_int_equal(gram_compile(b, &x, 1, &g, err), E0_EINVAL);
    assert_non_null(strstr(err, "left-recursive"));
    gb_free(b);
    b = gb_new();
    x = gb_rule(b);
    gb_ref(b, gb_alt(b, gb_rule(b)), x);
    int32_t r2 = 1;
    assert_int_equal(gram_compile(b, &r2, 1, &g, err), E0_EINVAL);
    gb_free(b);
    /* counted repetition beyond the limit is an error, not an allocation */
    b = gb_new();
    assert_int_equal(gb_rep(b, gb_lit_rule(b, "a", 1), 0, GRAM_MAX_REP + 1), -1);
    assert_int_equal(gb_error(b), E0_ERANGE);
    gb_free(b);
    gram_vocab_free(v);
}

static gram *compile_schema(const char *json) {
    cJSON *j = cJSON_Parse(json);
    if (!j) fail_msg("bad test JSON: %s", json);
    gram *g;
    char err[E0_ERR_MAX];
    if (schema_value_grammar(j, &g, err)) fail_msg("%s: %s", json, err);
    cJSON_Delete(j);
    return g;
}

typedef struct {
    const char *text;
    int want;
} sample;

static void schema_cases(const char *schema, const sample *s, size_t n) {
    gram_vocab *v = bytes_vocab();
    gram *g = compile_schema(schema);
    for (size_t i = 0; i < n; i++) {
        int got = run(g, v, SCHEMA_ROOT_PLAIN, s[i].text);
        if (got != s[i].want)
            fail_msg("schema %s\n  text %s: got %d, want %d", schema, s[i].text, got, s[i].want);
        if (got == 1) { /* a complete sentence is JSON */
            cJSON *j = cJSON_Parse(s[i].text);
            if (!j) fail_msg("accepted text is not JSON: %s", s[i].text);
            cJSON_Delete(j);
        }
    }
    e0_grammar_free(g);
    gram_vocab_free(v);
}
#define CASES(schema, ...)                                                                                             \
    do {                                                                                                               \
        static const sample S_[] = {__VA_ARGS__};                                                                      \
        schema_cases(schema, S_, sizeof S_ / sizeof *S_);                                                              \
    } while (0)

static void test_schema_values(void **state) {
    (void)state;
    CASES("{\"type\":\"integer\"}", {"0", 1}, {"-12", 1}, {"012", -1}, {"1.5", -1}, {"123456789012345", 1},
          {"1234567890123456", -1}, {"-", 0});
    CASES("{\"type\":\"integer\",\"minimum\":1}", {"0", -1}, {"-1", -1}, {"7", 1});
    CASES("{\"type\":\"number\",\"minimum\":0}", {"0", 1}, {"0.5", 1}, {"-0.5", -1}, {"-1", -1}, {"12.25", 1});
    CASES("{\"type\":\"number\"}", {"1.5e-3", 1}, {"-0.25", 1}, {"1e100", -1}, {"1.", 0}, {".5", -1});
    CASES("{\"type\":[\"boolean\",\"null\"]}", {"true", 1}, {"null", 1}, {"nul", 0}, {"1", -1});
    CASES("{\"type\":\"string\",\"maxLength\":3,\"minLength\":1}", {"\"\"", -1}, {"\"abc\"", 1}, {"\"abcd\"", -1},
          {"\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", 1}, {"\"\\u00e9\"", 1}, {"\"\\ud800\"", -1}, {"\"\xc3\"", -1},
          {"\"\xed\xa0\x80\"", -1}, {"\"a\nb\"", -1}, {"\"\\q\"", -1});
    CASES("{\"enum\":[\"red\",\"green\",3,null,{\"a\":1}]}", {"\"red\"", 1}, {"\"gre\"", -1}, {"3", 1},
          {"null", 1}, {"{\"a\":1}", 1}, {"\"blue\"", -1}, {"4", -1});
    CASES("{\"type\":\"string\",\"enum\":[\"a\",1]}", {"\"a\"", 1}, {"1", -1});
    CASES("{\"const\":\"x\"}", {"\"x\"", 1}, {"\"y\"", -1});
    CASES("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}", {"[]", -1},
          {"[1]", 1}, {"[1, 2]", 1}, {"[1,2,3]", -1}, {"[ 1 ,\n  2 ]", 1});
    CASES("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},"
          "\"required\":[\"b\"],\"additionalProperties\":false}",
          {"{\"b\":\"x\"}", 1}, {"{\"a\":1,\"b\":\"x\"}", 1}, {"{\"a\":1}", -1}, {"{}", -1},
          {"{\"b\":\"x\",\"a\":1}", -1}, /* the schema's order */
          {"{\"b\":\"x\",\"c\":1}", -1}, {"{ \"a\": 1, \"b\": \"x\" }", 1});
    /* extra keys: allowed, but never a listed key again, and without escapes */
    CASES("{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"}}}", {"{}", 1}, {"{\"ab\":1}", 1},
          {"{\"ab\":1,\"c\":[true]}", 1}, {"{\"c\":\"x\",\"ab\":1}", -1}, {"{\"ab\":1,\"ab\":2}", -1},
          {"{\"abc\":1}", 1}, {"{\"a\":1}", 1}, {"{\"a\\u0062\":1}", -1}, {"{\"\":1}", -1});
    CASES("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"properties\":{\"x\":{\"const\":1}},"
          "\"required\":[\"x\"],\"additionalProperties\":false}]}",
          {"5", 1}, {"{\"x\":1}", 1}, {"{\"x\":2}", -1}, {"\"s\"", -1});
    /* recursion through $ref */
    CASES("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\",\"items\":"
          "{\"$ref\":\"#/$defs/node\"}}},\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}",
          {"{}", 1}, {"{\"kids\":[{},{\"kids\":[{\"kids\":[]}]}]}", 1}, {"{\"kids\":[1]}", -1});
    /* whitespace is bounded: a newline and at most 32 blanks */
    char ws[80] = "[\n";
    memset(ws + 2, ' ', 32);
    strcpy(ws + 34, "1]");
    char ws2[96];
    snprintf(ws2, sizeof ws2, "[ %s", ws + 1);
    char ws3[80] = "[\n";
    memset(ws3 + 2, ' ', 33);
    strcpy(ws3 + 35, "1]");
    const sample wss[] = {{ws, 1}, {ws2, -1}, {ws3, -1}, {"[  1]", -1}};
    schema_cases("{\"type\":\"array\"}", wss, 4);
}

/* pattern, format and bounds (schema_regex.c, schema_num.c). */
static void test_schema_keywords(void **state) {
    (void)state;
    /* anchored both sides */
    CASES("{\"type\":\"string\",\"pattern\":\"^[a-c]{2}(-\\\\d+)?$\"}", {"\"ab\"", 1}, {"\"ab-12\"", 1},
          {"\"ab-\"", -1}, {"\"abc\"", -1}, {"\"a\"", -1}, {"\"ab-x\"", -1}, {"\"xab\"", -1});
    /* unanchored: anything before and after */
    CASES("{\"type\":\"string\",\"pattern\":\"ab+c\"}", {"\"abc\"", 1}, {"\"xxabbbcyy\"", 1}, {"\"ac\"", -1},
          {"\"a\\\"bc\"", -1}, {"\"\\\"abc\\\\\"", 1}, {"\"abd\"", -1});
    CASES("{\"type\":\"string\",\"pattern\":\"^x\"}", {"\"x\"", 1}, {"\"xyz\"", 1}, {"\"yx\"", -1});
    CASES("{\"type\":\"string\",\"pattern\":\"z$\"}", {"\"z\"", 1}, {"\"abz\"", 1}, {"\"za\"", -1});
    /* classes, negation, escapes, alternation, nullable repetition */
    CASES("{\"type\":\"string\",\"pattern\":\"^([^a-z\\\\s]|\\\\.)*$\"}", {"\"\"", 1}, {"\"AB.9\"", 1},
          {"\"Ab\"", -1}, {"\"A B\"", -1}, {"\"\\\\\\\"\"", 1}, {"\"\\u00e9\"", -1}, {"\"\xc3\xa9\"", 1});
    CASES("{\"type\":\"string\",\"pattern\":\"^(a*|b)+$\"}", {"\"\"", 1}, {"\"aab\"", 1}, {"\"bba\"", 1}, {"\"c\"", -1});
    CASES("{\"type\":\"string\",\"pattern\":\"^\\\\u00e9.\\\\x41$\"}", {"\"\xc3\xa9zA\"", 1}, {"\"\xc3\xa9\\nA\"", -1},
          {"\"eza\"", -1});
    /* a quote, a backslash and a newline the pattern asks for are escaped in JSON */
    CASES("{\"type\":\"string\",\"pattern\":\"^[\\\"\\\\\\\\\\\\n]$\"}", {"\"\\\"\"", 1}, {"\"\\\\\"", 1},
          {"\"\\n\"", 1}, {"\"\\u000a\"", 1}, {"\"\n\"", -1}, {"\"\"\"", -1});
    /* formats */
    CASES("{\"type\":\"string\",\"format\":\"date\"}", {"\"2024-02-29\"", 1}, {"\"2023-02-29\"", -1},
          {"\"1900-02-29\"", -1}, {"\"2000-02-29\"", 1}, {"\"2024-04-31\"", -1}, {"\"2024-12-31\"", 1},
          {"\"2024-13-01\"", -1});
    CASES("{\"type\":\"string\",\"format\":\"date-time\"}", {"\"2024-05-06T07:08:09Z\"", 1},
          {"\"2024-05-06T07:08:09.123+02:00\"", 1}, {"\"2024-05-06T24:00:00Z\"", -1}, {"\"2024-05-06T07:08:09\"", -1});
    CASES("{\"type\":\"string\",\"format\":\"uuid\"}", {"\"123e4567-e89b-12d3-a456-426614174000\"", 1},
          {"\"123e4567e89b12d3a456426614174000\"", -1});
    CASES("{\"type\":\"string\",\"format\":\"ipv4\"}", {"\"192.168.0.255\"", 1}, {"\"256.1.1.1\"", -1},
          {"\"01.1.1.1\"", -1});
    CASES("{\"type\":\"string\",\"format\":\"email\"}", {"\"a.b@example.com\"", 1}, {"\"a@b\"", -1});
    CASES("{\"type\":\"string\",\"format\":\"uri\"}", {"\"https://example.com/a/b\"", 1}, {"\"example.com\"", -1});
    CASES("{\"type\":\"string\",\"format\":\"no-such-format\"}", {"\"anything\"", 1});
    /* tuples (Pydantic's Tuple[int, str]; draft 7's items array) */
    CASES("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"},{\"type\":\"string\"}],\"minItems\":2,"
          "\"maxItems\":2}",
          {"[1,\"a\"]", 1}, {"[1]", -1}, {"[\"a\",1]", -1}, {"[1,\"a\",2]", -1}, {"[]", -1});
    CASES("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"integer\"}],\"items\":{\"type\":\"boolean\"}}", {"[]", 1},
          {"[1]", 1}, {"[1,true,false]", 1}, {"[true]", -1}, {"[1,2]", -1});
    CASES("{\"type\":\"array\",\"items\":[{\"const\":1}],\"additionalItems\":false}", {"[1]", 1}, {"[]", 1},
          {"[1,1]", -1});
    /* maps: propertyNames and the counts */
    CASES("{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^[a-z]{1,3}$\"},\"maxProperties\":2,"
          "\"minProperties\":1,\"additionalProperties\":{\"type\":\"integer\"}}",
          {"{}", -1}, {"{\"ab\":1}", 1}, {"{\"ab\":1,\"c\":2}", 1}, {"{\"ab\":1,\"c\":2,\"d\":3}", -1},
          {"{\"abcd\":1}", -1}, {"{\"A\":1}", -1}, {"{\"ab\":\"x\"}", -1});
    CASES("{\"type\":\"object\",\"propertyNames\":{\"enum\":[\"x\",\"y\"]}}", {"{\"x\":[]}", 1}, {"{\"z\":1}", -1});
    /* allOf merged; keywords beside $ref and anyOf */
    CASES("{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
          "{\"properties\":{\"b\":{\"type\":\"string\"},\"a\":{\"minimum\":3}},\"required\":[\"b\"],"
          "\"additionalProperties\":false}]}",
          {"{\"a\":3,\"b\":\"x\"}", 1}, {"{\"a\":1,\"b\":\"x\"}", -1}, {"{\"a\":3}", -1}, {"{\"a\":3,\"b\":\"x\",\"c\":1}", -1});
    CASES("{\"allOf\":[{\"type\":\"number\",\"minimum\":0},{\"type\":\"integer\",\"maximum\":5,\"minimum\":2}]}", {"1", -1},
          {"2", 1}, {"5", 1}, {"6", -1}, {"2.5", -1});
    CASES("{\"$defs\":{\"P\":{\"type\":\"integer\",\"minimum\":1}},\"$ref\":\"#/$defs/P\",\"maximum\":3}", {"0", -1},
          {"3", 1}, {"4", -1});
    CASES("{\"type\":\"string\",\"anyOf\":[{\"maxLength\":1},{\"pattern\":\"^ab$\"}]}", {"\"a\"", 1}, {"\"ab\"", 1},
          {"\"abc\"", -1}, {"1", -1});
    CASES("{\"type\":\"object\",\"properties\":{\"x\":{\"allOf\":[{\"$ref\":\"#/$defs/X\"}],\"description\":\"d\"}},"
          "\"$defs\":{\"X\":{\"type\":\"string\",\"maxLength\":2}}}",
          {"{\"x\":\"ab\"}", 1}, {"{\"x\":\"abc\"}", -1});
    /* integer bounds, exhaustively */
    gram_vocab *v = bytes_vocab();
    static const struct {
        const char *schema;
        long lo, hi;
    } R[] = {
        {"{\"type\":\"integer\",\"minimum\":-17,\"maximum\":1234}", -17, 1234},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":-17,\"exclusiveMaximum\":1234}", -16, 1233},
        {"{\"type\":\"integer\",\"minimum\":-17.5,\"maximum\":99.9}", -17, 99},
        {"{\"type\":\"integer\",\"minimum\":100}", 100, 999999999999999L},
        {"{\"type\":\"integer\",\"maximum\":-3}", -999999999999999L, -3},
        {"{\"type\":\"integer\",\"minimum\":7,\"maximum\":7}", 7, 7},
    };
    for (size_t k = 0; k < sizeof R / sizeof *R; k++) {
        gram *g = compile_schema(R[k].schema);
        for (long x = -40; x <= 1300; x++) {
            char t[32];
            snprintf(t, sizeof t, "%ld", x);
            int want = x >= R[k].lo && x <= R[k].hi ? 1 : -1, got = run(g, v, 0, t);
            if (want == -1 && got == 0) got = -1; /* a prefix of a longer valid integer */
            if (got != want) fail_msg("%s: %ld got %d want %d", R[k].schema, x, got, want);
        }
        assert_int_equal(run(g, v, 0, "0123"), -1);
        e0_grammar_free(g);
    }
    /* number bounds: only values inside */
    gram *g = compile_schema("{\"type\":\"number\",\"minimum\":-2.5,\"exclusiveMaximum\":10}");
    static const struct {
        const char *t;
        int want;
    } N[] = {{"-2.5", 1}, {"-2", 1}, {"-1.99", 1}, {"-2.6", -1}, {"-3", -1}, {"9.75", 1}, {"10.5", -1}, {"9", 1}, {"8.999", 1},
             {"10", -1}, {"1e3", -1}, {"0.5", 1}};
    for (size_t k = 0; k < sizeof N / sizeof *N; k++) {
        int got = run(g, v, 0, N[k].t);
        if (N[k].want == -1 && got == 0) got = -1;
        if (got != N[k].want) fail_msg("number %s: got %d want %d", N[k].t, got, N[k].want);
    }
    e0_grammar_free(g);
    g = compile_schema("{\"type\":\"number\",\"exclusiveMinimum\":0.25,\"exclusiveMaximum\":0.75}");
    assert_int_equal(run(g, v, 0, "0.5"), 1); /* no integer part fits: the midpoint */
    e0_grammar_free(g);
    gram_vocab_free(v);
    /* the XML form writes a pattern's characters raw, the JSON form escaped */
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                               "\"properties\":{\"q\":{\"type\":\"string\",\"pattern\":\"^\\\"[a-z]+\\\"$\"},\"n\":{"
                               "\"type\":\"integer\",\"minimum\":1,\"maximum\":3}},\"required\":[\"q\",\"n\"]}}}]");
    char err[E0_ERR_MAX];
    v = bytes_vocab();
    assert_int_equal(e0_grammar_tools(tools, NULL, 1, E0_TOOL_FORM_XML, &g, err), 0);
    expect(g, v, 0,
           "<tool_call>\n<function=f>\n<parameter=q>\n\"ab\"\n</parameter>\n<parameter=n>\n2\n</parameter>\n"
           "</function>\n</tool_call>",
           1);
    expect(g, v, 0, "<tool_call>\n<function=f>\n<parameter=q>\n\\\"ab", -1);
    expect(g, v, 0, "<tool_call>\n<function=f>\n<parameter=q>\n\"ab\"\n</parameter>\n<parameter=n>\n4", -1);
    e0_grammar_free(g);
    assert_int_equal(e0_grammar_tools(tools, NULL, 1, E0_TOOL_FORM_JSON, &g, err), 0);
    expect(g, v, 0, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"\\\"ab\\\"\", \"n\": 3}}\n</tool_call>", 1);
    expect(g, v, 0, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"\"ab", -1);
    e0_grammar_free(g);
    gram_vocab_free(v);
    cJSON_Delete(tools);
    /* parameters as a $ref and an allOf (Pydantic, zod's .and()): merged */
    tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"$defs\":{\"A\":{"
                        "\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"maximum\":5}},\"required\":[\"a\"]}},"
                        "\"allOf\":[{\"$ref\":\"#/$defs/A\"},{\"properties\":{\"b\":{\"type\":\"boolean\"}}}]}}}]");
    v = bytes_vocab();
    assert_int_equal(e0_grammar_tools(tools, NULL, 1, E0_TOOL_FORM_JSON, &g, err), 0);
    expect(g, v, 0, "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"a\": 5, \"b\": true}}\n</tool_call>", 1);
    expect(g, v, 0, "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"a\": 6", -1);
    e0_grammar_free(g);
    assert_int_equal(e0_grammar_tools(tools, NULL, 1, E0_TOOL_FORM_XML, &g, err), 0);
    expect(g, v, 0, "<tool_call>\n<function=g>\n<parameter=a>\n3\n</parameter>\n</function>\n</tool_call>", 1);
    e0_grammar_free(g);
    gram_vocab_free(v);
    cJSON_Delete(tools);
}

/* The check after generation (schema_check.c). */
static void test_schema_check(void **state) {
    (void)state;
    static const struct {
        const char *schema, *value, *why; /* why NULL: valid */
    } C[] = {
        {"{\"type\":\"array\",\"uniqueItems\":true}", "[1,2,3]", NULL},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "[1,{\"a\":2},{\"a\":2}]", "/: uniqueItems"},
        {"{\"type\":\"number\",\"multipleOf\":0.5}", "2.5", NULL},
        {"{\"type\":\"number\",\"multipleOf\":0.5}", "2.25", "multipleOf"},
        {"{\"not\":{\"type\":\"string\"}}", "3", NULL},
        {"{\"not\":{\"type\":\"string\"}}", "\"x\"", "not"},
        {"{\"type\":\"object\",\"minProperties\":2}", "{\"a\":1}", "minProperties"},
        {"{\"type\":\"object\",\"maxProperties\":1}", "{\"a\":1}", NULL},
        {"{\"type\":\"object\",\"propertyNames\":{\"maxLength\":2}}", "{\"abc\":1}", "/abc: maxLength"},
        {"{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/i\"},"
         "\"uniqueItems\":true}},\"$defs\":{\"i\":{\"type\":\"integer\",\"minimum\":0}}}",
         "{\"t\":[0,-1]}", "/t/1: minimum"},
        {"{\"type\":\"string\",\"pattern\":\"^a\",\"minLength\":3}", "\"ab\"", "minLength"},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"uniqueItems\":true}]}", "[1,1]", "anyOf"},
        {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"array\",\"uniqueItems\":true}]}", "[1,2]", NULL},
        {"{\"$ref\":\"#\"}", "1", "deep"},
    };
    for (size_t i = 0; i < sizeof C / sizeof *C; i++) {
        cJSON *s = cJSON_Parse(C[i].schema), *v = cJSON_Parse(C[i].value);
        char why[256];
        int got = schema_check(s, v, why, sizeof why);
        if (got != (C[i].why != NULL) || (C[i].why && !strstr(why, C[i].why)))
            fail_msg("%s on %s: got %d \"%s\"", C[i].schema, C[i].value, got, got ? why : "");
        cJSON_Delete(s);
        cJSON_Delete(v);
    }
}

static int schema_err(const char *json, char *err) {
    cJSON *j = cJSON_Parse(json);
    if (!j) fail_msg("bad test JSON: %s", json);
    gram *g = NULL;
    int rc = schema_value_grammar(j, &g, err);
    e0_grammar_free(g);
    cJSON_Delete(j);
    return rc;
}

static void test_schema_errors(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    static const struct {
        const char *schema, *needle;
        int rc;
    } bad[] = {
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "'pattern' \"(a)\\1\" is not supported: back-references",
         E0_EUNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"(?=x)\"}}}", "/properties/a",
         E0_EUNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"a(?<!b)\"}", "lookbehind", E0_EUNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"\\\\bx\"}", "word boundaries", E0_EUNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", "'^'", E0_EUNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"(a{1000}){1000}\"}", "expand", E0_ERANGE},
        {"{\"type\":\"string\",\"pattern\":\"a{5000}\"}", "count above", E0_ERANGE},
        {"{\"type\":\"string\",\"pattern\":\"(ab\"}", "'('", E0_EINVAL},
        {"{\"type\":\"string\",\"pattern\":\"[b-a]\"}", "out of order", E0_EINVAL},
        {"{\"type\":\"string\",\"pattern\":\"*\"}", "nothing to repeat", E0_EINVAL},
        {"{\"type\":\"string\",\"pattern\":7}", "'pattern' must be a string", E0_EINVAL},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer", E0_EINVAL},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":4,\"exclusiveMaximum\":5}", "no integer", E0_EINVAL},
        {"{\"type\":\"number\",\"minimum\":\"x\"}", "'minimum' must be a number", E0_EINVAL},
        {"{\"type\":\"array\",\"contains\":{}}", "'contains'", E0_EUNSUPPORTED},
        {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", "more items", E0_EINVAL},
        {"{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "do not intersect", E0_EINVAL},
        {"{\"allOf\":[{\"properties\":{\"a\":{}},\"required\":[\"a\"]}],\"additionalProperties\":false}",
         "forbidden by the other's additionalProperties", E0_EINVAL}, /* as JSON Schema reads it: no value */
        {"{\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", "'pattern' two different", E0_EUNSUPPORTED},
        {"{\"anyOf\":[{}],\"oneOf\":[{}],\"type\":\"object\"}", "both 'anyOf' and 'oneOf'", E0_EUNSUPPORTED},
        {"{\"$defs\":{\"d\":{\"type\":\"object\",\"properties\":{\"x\":{\"allOf\":[{\"$ref\":\"#/$defs/d\"},{\"$ref\":"
         "\"#/$defs/d\"}]}}}},\"$ref\":\"#/$defs/d\"}",
         "steps", E0_ERANGE}, /* merges that double at every level */
        {"{\"$defs\":{\"n\":{\"allOf\":[{\"$ref\":\"#/$defs/n\"},{\"$ref\":\"#/$defs/n\"}]}},\"$ref\":\"#/$defs/n\"}",
         "allOf", E0_ERANGE},
        {"{\"$ref\":\"http://x/y\"}", "'$ref'", E0_EUNSUPPORTED},
        {"{\"$ref\":\"#\"}", "recurses", E0_EUNSUPPORTED},
        {"{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "recurses", E0_EUNSUPPORTED},
        {"{\"$ref\":\"#/$defs/missing\"}", "names no schema", E0_EINVAL},
        {"{\"type\":\"strin\"}", "unknown type", E0_EINVAL},
        {"{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":false}", "\"x\"", E0_EINVAL},
        {"{\"type\":\"array\",\"maxItems\":100000}", "'maxItems'", E0_ERANGE},
        {"{\"enum\":[]}", "no value", E0_EINVAL},
        {"false", "allows no value", E0_EINVAL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = schema_err(bad[i].schema, err);
        if (rc != bad[i].rc || !strstr(err, bad[i].needle))
            fail_msg("%s: got %d \"%s\", want %d naming %s", bad[i].schema, rc, err, bad[i].rc, bad[i].needle);
    }
    /* hostile: 10,000 levels (built in memory: cJSON's parser stops at 1000), a huge enum */
    cJSON *root = cJSON_CreateObject(), *at = root;
    for (int i = 0; i < 10000; i++) {
        cJSON *p = cJSON_AddObjectToObject(at, "properties"), *x = cJSON_AddObjectToObject(p, "x");
        at = x;
    }
    gram *g = NULL;
    assert_int_equal(schema_value_grammar(root, &g, err), E0_ERANGE);
    assert_non_null(strstr(err, "deeper"));
    cJSON_Delete(root);
    cJSON *e = cJSON_CreateObject(), *vals = cJSON_AddArrayToObject(e, "enum");
    for (int i = 0; i < 100000; i++)
        cJSON_AddItemToArray(vals, cJSON_CreateNumber(i));
    assert_int_equal(schema_value_grammar(e, &g, err), E0_ERANGE);
    assert_non_null(strstr(err, "'enum'"));
    cJSON_Delete(e);
    /* the largest enum allowed compiles, and its grammar is a trie (fast to match) */
    e = cJSON_CreateObject(), vals = cJSON_AddArrayToObject(e, "enum");
    char buf[32];
    for (int i = 0; i < SCHEMA_MAX_ENUM; i++) {
        snprintf(buf, sizeof buf, "value-%d", i * 7919);
        cJSON_AddItemToArray(vals, cJSON_CreateString(buf));
    }
    assert_int_equal(schema_value_grammar(e, &g, err), 0);
    gram_vocab *v = bytes_vocab();
    assert_int_equal(run(g, v, 0, "\"value-7919\""), 1);
    assert_int_equal(run(g, v, 0, "\"value-7918\""), -1);
    gram_vocab_free(v);
    e0_grammar_free(g);
    cJSON_Delete(e);
    /* response_format and tools front ends */
    cJSON *rf = cJSON_Parse("{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":\"object\","
                            "\"properties\":{\"a\":{\"if\":{}}}}}}");
    assert_int_equal(e0_grammar_response_format(rf, &g, err), E0_EUNSUPPORTED);
    assert_non_null(strstr(err, "response_format.json_schema.schema/properties/a"));
    cJSON_Delete(rf);
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
                               "\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":3}}}}}]");
    assert_int_equal(e0_grammar_tools(tools, NULL, 1, E0_TOOL_FORM_JSON, &g, err), 0);
    e0_grammar_free(g);
    assert_int_equal(e0_grammar_tools(tools, NULL, 1, E0_TOOL_FORM_XML, &g, err), 0);
    e0_grammar_free(g);
    assert_int_equal(e0_grammar_tools(tools, "g", 1, E0_TOOL_FORM_JSON, &g, err), E0_EINVAL);
    assert_non_null(strstr(err, "\"g\""));
    cJSON_Delete(tools);
}

static void test_tool_forms(void **state) {
    (void)state;
    cJSON *tools = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"unit\":{\"enum\":[\"c\","
        "\"f\"]}},\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]");
    gram_vocab *v = bytes_vocab();
    gram *g;
    char err[E0_ERR_MAX];
    assert_int_equal(e0_grammar_tools(tools, NULL, 2, E0_TOOL_FORM_JSON, &g, err), 0);
    const char *call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\", \"days\": 2}}\n</tool_call>";
    expect(g, v, SCHEMA_ROOT_PLAIN, call, 1);
    char two[512];
    snprintf(two, sizeof two, "%s\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>", call);
    expect(g, v, SCHEMA_ROOT_PLAIN, two, 1);
    snprintf(two, sizeof two, "%s\n%s\n%s", call, call, call); /* max_calls 2 */
    expect(g, v, SCHEMA_ROOT_PLAIN, two, -1);
    expect(g, v, SCHEMA_ROOT_PLAIN, "Sure. <tool_call>", -1);
    expect(g, v, SCHEMA_ROOT_PLAIN, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}", -1);
    snprintf(two, sizeof two, "Let me think </thin> about it.</think>\n\n%s", call);
    expect(g, v, SCHEMA_ROOT_THINK_OPEN, two, 1);
    expect(g, v, SCHEMA_ROOT_THINK_OPEN, call, 0); /* still in the reasoning */
    snprintf(two, sizeof two, "<think>\nhm</think>\n\n%s", call);
    expect(g, v, SCHEMA_ROOT_THINK_MAY, two, 1);
    expect(g, v, SCHEMA_ROOT_THINK_MAY, call, 1);
    e0_grammar_free(g);
    assert_int_equal(e0_grammar_tools(tools, "ping", 1, E0_TOOL_FORM_XML, &g, err), 0);
    expect(g, v, SCHEMA_ROOT_PLAIN, "<tool_call>\n<function=ping>\n</function>\n</tool_call>", 1);
    expect(g, v, SCHEMA_ROOT_PLAIN, "<tool_call>\n<function=get_weather>\n", -1);
    e0_grammar_free(g);
    assert_int_equal(e0_grammar_tools(tools, "get_weather", 1, E0_TOOL_FORM_XML, &g, err), 0);
    expect(g, v, SCHEMA_ROOT_PLAIN,
           "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan <b>Jos\xc3\xa9</b>\n</parameter>\n"
           "<parameter=days>\n3\n</parameter>\n<parameter=unit>\nf\n</parameter>\n</function>\n</tool_call>",
           1);
    expect(g, v, SCHEMA_ROOT_PLAIN,
           "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=when>\nnow\n"
           "</parameter>\n</function>\n</tool_call>",
           1); /* an extra parameter (additionalProperties absent) */
    expect(g, v, SCHEMA_ROOT_PLAIN,
           "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=city>\ny\n", -1);
    expect(g, v, SCHEMA_ROOT_PLAIN,
           "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=days>\nthree", -1);
    expect(g, v, SCHEMA_ROOT_PLAIN, "<tool_call>\n<function=get_weather>\n<parameter=city>\na</parameter>b", -1);
    e0_grammar_free(g);
    gram_vocab_free(v);
    cJSON_Delete(tools);
}

/* ---- the mask against the brute force, on the Qwen3 tokenizer ---------------------- */

static const uint8_t *tk_token(void *user, int32_t id, size_t *len) {
    const tok_tokenizer *tk = user;
    if (!tok_is_token(tk, id) || tok_is_special(tk, id)) return NULL;
    return tok_token_bytes(tk, id, len);
}

static void test_mask_brute_force(void **state) {
    (void)state;
    tok_tokenizer *tk;
    char err[E0_ERR_MAX];
    if (e0_tokenizer_load(&tk, tu_shared("tokenizers/qwen3/tokenizer.json"), err)) fail_msg("%s", err);
    int32_t nv = e0_tokenizer_vocab_size(tk), eot = tok_token_id(tk, "<|im_end|>");
    gram_vocab *v;
    if (gram_vocab_new(&v, nv, tk_token, tk, err)) fail_msg("%s", err);
    static const struct {
        const char *schema, *answer;
        int root;
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":20},\"n\":{\"type\":"
         "\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"yy\"]}}},\"required\":[\"name\"],"
         "\"additionalProperties\":false}",
         "{\"name\": \"Zürich \\u00e9\", \"n\": -42, \"tags\": [\"yy\", \"x\"]}", SCHEMA_ROOT_PLAIN},
        {"{\"type\":\"array\",\"items\":{\"type\":[\"number\",\"null\",\"boolean\"]}}", "[1.5e-3, null,\n  true, 7]",
         SCHEMA_ROOT_THINK_OPEN},
    };
    size_t words = ((size_t)nv + 31) / 32;
    uint32_t *mask = malloc(words * sizeof *mask);
    size_t checked = 0;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        gram *g = compile_schema(cases[c].schema);
        char text[512];
        snprintf(text, sizeof text, "%s%s", cases[c].root == SCHEMA_ROOT_THINK_OPEN ? "ok </th>\n</think>\n\n" : "",
                 cases[c].answer);
        tok_ids ids = {0};
        if (e0_tokenizer_encode(tk, text, strlen(text), 0, &ids, err)) fail_msg("%s", err);
        gram_matcher_opts o;
        gram_matcher_opts_default(&o);
        o.root = cases[c].root;
        o.eot = &eot;
        o.n_eot = 1;
        gram_matcher *m;
        if (gram_matcher_new(&m, g, v, &o, err)) fail_msg("%s", err);
        for (size_t i = 0; i <= ids.n; i++) {
            /* the oracle: a fresh matcher fed the same bytes, then each token's bytes */
            gram_matcher_opts fo = o;
            fo.mask_cache = false;
            gram_matcher *f;
            if (gram_matcher_new(&f, g, v, &fo, err)) fail_msg("%s", err);
            for (size_t k = 0; k < i; k++) {
                size_t bl;
                const uint8_t *bt = tok_token_bytes(tk, ids.v[k], &bl);
                assert_int_equal(gram_matcher_accept_bytes(f, bt, bl), 0);
            }
            assert_int_equal(gram_matcher_mask(m, mask), 0);
            for (int32_t id = 0; id < nv; id++) {
                bool want;
                size_t bl = 0;
                const uint8_t *bt = tk_token(tk, id, &bl);
                if (id == eot) {
                    want = gram_matcher_complete(f);
                } else if (!bt) {
                    want = false;
                } else {
                    want = gram_matcher_check(f, id); /* the token's bytes from f's state, one by one */
                }
                bool got = (mask[id >> 5] >> (id & 31)) & 1;
                if (got != want) {
                    fail_msg("case %zu, after %zu tokens: token %d (%.*s): mask %d, brute force %d", c, i, id,
                             (int)bl, bt ? (const char *)bt : "", got, want);
                }
                checked++;
            }
            gram_matcher_free(f);
            if (i < ids.n) {
                assert_true(gram_matcher_check(m, ids.v[i]));
                assert_int_equal(gram_matcher_accept(m, ids.v[i]), 0);
            } else {
                assert_true(gram_matcher_complete(m));
                assert_true(gram_matcher_check(m, eot));
            }
        }
        gram_matcher_free(m);
        e0_ids_free(&ids);
        e0_grammar_free(g);
    }
    printf("mask == brute force for %zu (prefix, token) pairs\n", checked);
    free(mask);
    gram_vocab_free(v);
    e0_tokenizer_free(tk);
}

/* A random walk through the masks ends in a complete answer that cJSON reads
 * and whose shape is the schema's. */
static void test_random_walk(void **state) {
    (void)state;
    tok_tokenizer *tk;
    char err[E0_ERR_MAX];
    if (e0_tokenizer_load(&tk, tu_shared("tokenizers/qwen3/tokenizer.json"), err)) fail_msg("%s", err);
    int32_t nv = e0_tokenizer_vocab_size(tk), eot = tok_token_id(tk, "<|im_end|>");
    gram_vocab *v;
    if (gram_vocab_new(&v, nv, tk_token, tk, err)) fail_msg("%s", err);
    gram *g = compile_schema("{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"alpha\",\"beta\"]},\"n\":{"
                             "\"type\":\"integer\"},\"s\":{\"type\":\"string\",\"maxLength\":4},\"b\":{\"type\":"
                             "\"boolean\"}},\"required\":[\"k\",\"n\",\"s\",\"b\"],\"additionalProperties\":false}");
    uint32_t *mask = malloc(((size_t)nv + 31) / 32 * sizeof *mask);
    int32_t *cand = malloc((size_t)nv * sizeof *cand);
    uint64_t rng = 12345;
    for (int walk = 0; walk < 20; walk++) {
        gram_matcher_opts o;
        gram_matcher_opts_default(&o);
        o.eot = &eot;
        o.n_eot = 1;
        gram_matcher *m;
        if (gram_matcher_new(&m, g, v, &o, err)) fail_msg("%s", err);
        char text[4096];
        size_t len = 0;
        for (int step = 0;; step++) {
            assert_true(step < 1000);
            assert_int_equal(gram_matcher_mask(m, mask), 0);
            int32_t n = 0;
            for (int32_t id = 0; id < nv; id++)
                if ((mask[id >> 5] >> (id & 31)) & 1) cand[n++] = id;
            assert_true(n > 0);
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            int32_t id = cand[rng % (uint64_t)n];
            assert_int_equal(gram_matcher_accept(m, id), 0);
            if (id == eot) break;
            size_t bl;
            const uint8_t *bt = tok_token_bytes(tk, id, &bl);
            assert_true(len + bl < sizeof text);
            memcpy(text + len, bt, bl);
            len += bl;
        }
        text[len] = 0;
        cJSON *j = cJSON_Parse(text);
        if (!j) fail_msg("walk %d: not JSON: %s", walk, text);
        const cJSON *k = cJSON_GetObjectItem(j, "k"), *nn = cJSON_GetObjectItem(j, "n"), *s = cJSON_GetObjectItem(j, "s");
        assert_true(cJSON_IsString(k) && (!strcmp(k->valuestring, "alpha") || !strcmp(k->valuestring, "beta")));
        assert_true(cJSON_IsNumber(nn) && cJSON_IsString(s) && cJSON_IsBool(cJSON_GetObjectItem(j, "b")));
        assert_int_equal(cJSON_GetArraySize(j), 4);
        cJSON_Delete(j);
        gram_matcher_free(m);
    }
    free(cand);
    free(mask);
    e0_grammar_free(g);
    gram_vocab_free(v);
    e0_tokenizer_free(tk);
}

static void test_resample(void **state) {
    (void)state;
    sampler_params p;
    sampler_params_default(&p);
    p.seed = 3;
    p.top_k = 4;
    p.top_p = 1;
    p.min_p = 0;
    p.temperature = 1;
    sampler *s;
    char err[E0_ERR_MAX];
    assert_int_equal(sampler_new(&p, 64, &s, err), 0);
    float logits[64];
    for (int i = 0; i < 64; i++)
        logits[i] = (float)(i % 8); /* 7, 15, 23, 31, ... are the best; top-4: 7, 15, 23, 31 */
    uint32_t allowed[2] = {0, 0};
    allowed[0] |= 1u << 15;
    allowed[1] |= 1u << (39 - 32); /* 39 is a top logit too, but not in the top 4 (ties: lower ids first) */
    int hits15 = 0;
    for (int i = 0; i < 200; i++) {
        sampler_sample(s, logits);
        int32_t id = sampler_resample(s, allowed);
        assert_int_equal(id, 15); /* the only allowed token the filters kept */
        hits15++;
    }
    allowed[0] = 1u << 3; /* allowed, but filtered out: none left */
    sampler_sample(s, logits);
    assert_int_equal(sampler_resample(s, allowed), -1);
    sampler_free(s);
    p.temperature = 0; /* greedy: the best allowed */
    assert_int_equal(sampler_new(&p, 64, &s, err), 0);
    sampler_sample(s, logits);
    allowed[0] = (1u << 3) | (1u << 5);
    allowed[1] = 0;
    assert_int_equal(sampler_resample(s, allowed), 5);
    sampler_free(s);
    assert_int_equal(hits15, 200);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builder),        cmocka_unit_test(test_schema_values),
        cmocka_unit_test(test_schema_errors),  cmocka_unit_test(test_tool_forms),
        cmocka_unit_test(test_mask_brute_force), cmocka_unit_test(test_random_walk),
        cmocka_unit_test(test_schema_keywords), cmocka_unit_test(test_schema_check),
        cmocka_unit_test(test_resample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
