/* Tool-call parser (src/text/toolcall.c) on canned model outputs in both
 * forms: plain calls, text before a call, several calls, nested JSON
 * arguments, unicode, markup-like text inside values, schema-typed XML
 * values, truncated and malformed calls, max_calls. Every case is also fed
 * cut in two at every byte and one byte at a time: the events must be the
 * same as for the whole text. */
#include "testutil.h"

#include "text/toolcall.h"
#include "util/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXC 8

typedef struct {
    char content[8192];
    int n;
    char name[MAXC][300];
    char args[MAXC][4096];
    int pieces[MAXC];
    bool malformed, truncated, full;
} result;

static int on_content(void *user, const char *s, size_t n) {
    result *r = user;
    assert_true(n > 0);
    strncat(r->content, s, n);
    return 0;
}

static int on_call(void *user, int index, const char *s, size_t n) {
    result *r = user;
    assert_int_equal(index, r->n);
    assert_true(index < MAXC);
    snprintf(r->name[index], sizeof r->name[index], "%.*s", (int)n, s);
    r->n++;
    return 0;
}

static int on_args(void *user, int index, const char *s, size_t n) {
    result *r = user;
    assert_int_equal(index, r->n - 1);
    strncat(r->args[index], s, n);
    r->pieces[index]++;
    return 0;
}

static const e0_tc_sink SINK = {on_content, on_call, on_args};

static cJSON *tools;

/* Feeds text in pieces of `step` bytes, the first piece `first` bytes. */
static void run(const char *text, size_t first, size_t step, int max_calls, result *r) {
    memset(r, 0, sizeof *r);
    e0_tc_parser *p;
    char err[E0_ERR_MAX];
    assert_int_equal(e0_tc_parser_new(&p, tools, max_calls, err), 0);
    size_t n = strlen(text), i = 0;
    if (first) {
        assert_int_equal(e0_tc_feed(p, text, first < n ? first : n, &SINK, r), 0);
        i = first < n ? first : n;
    }
    for (; i < n; i += step)
        assert_int_equal(e0_tc_feed(p, text + i, step < n - i ? step : n - i, &SINK, r), 0);
    assert_int_equal(e0_tc_finish(p, &SINK, r), 0);
    assert_int_equal(e0_tc_calls(p), r->n);
    r->malformed = e0_tc_malformed(p);
    r->truncated = e0_tc_truncated(p);
    r->full = e0_tc_full(p);
    e0_tc_parser_free(p);
    for (int k = 0; k < r->n; k++) {
        cJSON *a = cJSON_Parse(r->args[k]);
        if (!cJSON_IsObject(a)) fail_msg("arguments of call %d are not a JSON object: %s", k, r->args[k]);
        cJSON_Delete(a);
    }
}

static void same(const result *a, const result *b, const char *text, size_t cut) {
    if (strcmp(a->content, b->content) || a->n != b->n || a->malformed != b->malformed ||
        a->truncated != b->truncated || a->full != b->full)
        fail_msg("cut at %zu: content '%s' vs '%s', %d vs %d calls, in:\n%s", cut, a->content, b->content, a->n, b->n,
                 text);
    for (int k = 0; k < a->n; k++) {
        assert_string_equal(a->name[k], b->name[k]);
        assert_string_equal(a->args[k], b->args[k]);
    }
}

/* The whole text at once, then every cut in two, then byte by byte. */
static void parse(const char *text, int max_calls, result *r) {
    run(text, 0, strlen(text) ? strlen(text) : 1, max_calls, r);
    result c;
    for (size_t cut = 1; cut < strlen(text); cut++) {
        run(text, cut, strlen(text), max_calls, &c);
        same(r, &c, text, cut);
    }
    run(text, 0, 1, max_calls, &c);
    same(r, &c, text, 1);
}

/* arguments compared as JSON values */
static void args_equal(const char *got, const char *want) {
    cJSON *g = cJSON_Parse(got), *w = cJSON_Parse(want);
    assert_non_null(w);
    if (!cJSON_Compare(g, w, 1)) fail_msg("arguments %s, expected %s", got, want);
    cJSON_Delete(g);
    cJSON_Delete(w);
}

static void test_json_form(void **state) {
    (void)state;
    result r;
    parse("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>", 8,
          &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.name[0], "get_weather");
    /* verbatim, in pieces cut after each member */
    assert_string_equal(r.args[0], "{\"city\": \"Paris\", \"days\": 3}");
    assert_true(r.pieces[0] >= 2);
    assert_string_equal(r.content, "");
    assert_false(r.malformed || r.truncated);

    /* text before, nested arguments, unicode, markup inside a string, two calls */
    parse("Let me check both.\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": {\"a\": [1, {\"b\": null}], "
          "\"s\": \"</tool_call> <tool_call> }{\"}, \"u\": \"Zürich 東京 🙂\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
          "\"g\", \"arguments\": {}}\n</tool_call>",
          8, &r);
    assert_string_equal(r.content, "Let me check both.");
    assert_int_equal(r.n, 2);
    assert_string_equal(r.name[0], "f");
    args_equal(r.args[0], "{\"q\": {\"a\": [1, {\"b\": null}], \"s\": \"</tool_call> <tool_call> }{\"}, \"u\": \"Zürich "
                          "東京 🙂\"}");
    assert_string_equal(r.name[1], "g");
    assert_string_equal(r.args[1], "{}");

    /* arguments as a JSON string, keys in the other order, no arguments */
    parse("<tool_call>{\"arguments\": \"{\\\"x\\\": 1}\", \"name\": \"h\"}</tool_call>", 8, &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.name[0], "h");
    args_equal(r.args[0], "{\"x\": 1}");
    parse("<tool_call>\n{\"name\": \"noargs\"}\n</tool_call>", 8, &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.args[0], "{}");
    /* a raw newline inside a string argument is written again, validly */
    parse("<tool_call>{\"name\": \"w\", \"arguments\": {\"t\": \"a\nb\"}}</tool_call>", 8, &r);
    assert_int_equal(r.n, 1);
    args_equal(r.args[0], "{\"t\": \"a\\nb\"}");
    assert_null(strchr(r.args[0], '\n'));
}

static void test_xml_form(void **state) {
    (void)state;
    result r;
    parse("I will look it up.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
          "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n</function>\n</tool_call>",
          8, &r);
    assert_string_equal(r.content, "I will look it up.");
    assert_int_equal(r.n, 1);
    assert_string_equal(r.name[0], "get_weather");
    args_equal(r.args[0], "{\"city\": \"San Francisco\", \"days\": 3, \"metric\": true}");
    assert_true(r.pieces[0] >= 3);

    /* typed by the schema: a string parameter that looks like a number stays a
     * string; object/array parsed; Python's True; multi-line and markup-like values */
    parse("<tool_call>\n<function=edit>\n<parameter=path>\n007\n</parameter>\n<parameter=opts>\n{\"a\": [1, 2]}\n"
          "</parameter>\n<parameter=lines>\n[3, 4]\n</parameter>\n<parameter=force>\nTrue\n</parameter>\n"
          "<parameter=text>\nline 1\n</parameter> not the end\n<b>ü</b> \"q\"\\\n</parameter>\n</function>\n"
          "</tool_call>",
          8, &r);
    assert_int_equal(r.n, 1);
    args_equal(r.args[0], "{\"path\": \"007\", \"opts\": {\"a\": [1, 2]}, \"lines\": [3, 4], \"force\": true, "
                          "\"text\": \"line 1\\n</parameter> not the end\\n<b>ü</b> \\\"q\\\"\\\\\"}");

    /* a number parameter that does not parse stays a string; an unknown tool: strings */
    parse("<tool_call>\n<function=edit>\n<parameter=lines>\nall of them\n</parameter>\n</function>\n</tool_call>"
          "<tool_call>\n<function=other>\n<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>",
          8, &r);
    assert_int_equal(r.n, 2);
    args_equal(r.args[0], "{\"lines\": \"all of them\"}");
    assert_string_equal(r.name[1], "other");
    args_equal(r.args[1], "{\"n\": \"5\"}");

    /* no parameters; an empty value */
    parse("<tool_call>\n<function=now>\n</function>\n</tool_call>", 8, &r);
    assert_int_equal(r.n, 1);
    assert_string_equal(r.args[0], "{}");
    parse("<tool_call>\n<function=edit>\n<parameter=path>\n</parameter>\n</function>\n</tool_call>", 8, &r);
    assert_int_equal(r.n, 1);
    args_equal(r.args[0], "{\"path\": \"\"}");
}

static void test_plain_text(void **state) {
    (void)state;
    result r;
    const char *t[] = {"", "Hello, world.", "a < b and <tool and <tool_c", "trailing spaces  \n",
                       "<tool_response>x</tool_response>", "ends with <tool_cal"};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        parse(t[i], 8, &r);
        assert_string_equal(r.content, t[i]);
        assert_int_equal(r.n, 0);
        assert_false(r.malformed || r.truncated);
    }
}

static void test_broken(void **state) {
    (void)state;
    result r;
    /* truncated (the end of generation inside a call): the call as far as it
     * got, never its markup: the JSON form's name with no arguments, the XML
     * form's complete parameters; nothing where the name is not whole */
    parse("Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": ", 8, &r);
    assert_true(r.truncated);
    assert_string_equal(r.content, "Sure.");
    assert_int_equal(r.n, 1);
    assert_string_equal(r.name[0], "f");
    assert_string_equal(r.args[0], "{}");
    static const char *const cut[][2] = {
        {"<tool_call>\n<function=f>\n<parameter=a>\nhalf a val", "{}"},
        {"<tool_call>\n<function=f>\n<parameter=a>\nwhole\n</parameter>\n<parameter=b>\nha", "{\"a\": \"whole\"}"},
        {"<tool_call>\n<function=f>\n<parameter=a>\nwhole\n</parameter>\n</function>\n</tool_", "{\"a\": \"whole\"}"},
    };
    for (size_t i = 0; i < sizeof cut / sizeof *cut; i++) {
        parse(cut[i][0], 8, &r);
        assert_true(r.truncated);
        assert_string_equal(r.content, "");
        assert_int_equal(r.n, 1);
        assert_string_equal(r.name[0], "f");
        assert_string_equal(r.args[0], cut[i][1]);
    }
    static const char *no_name[] = {"Hm.\n<tool_call>\n<function=f", "Hm.\n<tool_call>\n{\"name\": \"f",
                                    "Hm.\n<tool_call>\n", "Hm.\n<tool_call>\n{\"arguments\": {}, \"na"};
    for (size_t i = 0; i < sizeof no_name / sizeof *no_name; i++) {
        parse(no_name[i], 8, &r);
        assert_true(r.truncated);
        assert_int_equal(r.n, 0);
        assert_string_equal(r.content, "Hm.");
    }

    /* malformed: the call and everything after it are content */
    static const char *bad[] = {
        "<tool_call>\nnot json\n</tool_call> then text",
        "<tool_call>\n{\"name\": 5, \"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": tru}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\"} trailing\n</tool_call>",
        "<tool_call>\n<function=f\n>\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n<param=a>\n1\n</param>\n</function>\n</tool_call>",
        "<tool_call>\n<function=f>\n</function>\n</tool_cal> <tool_call>",
        "<tool_call>\n<function=>\n</function>\n</tool_call>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        parse(bad[i], 8, &r);
        if (r.n || !r.malformed || strcmp(r.content, bad[i])) fail_msg("case %zu: %d calls, content '%s'", i, r.n, r.content);
    }
    /* a good call, then a bad one: the first is a call, the rest content */
    parse("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{oops}\n</tool_call>", 8, &r);
    assert_int_equal(r.n, 1);
    assert_true(r.malformed);
    assert_string_equal(r.content, "<tool_call>\n{oops}\n</tool_call>");
}

static void test_max_calls(void **state) {
    (void)state;
    result r;
    const char *two = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", "
                      "\"arguments\": {}}\n</tool_call>\nand text";
    parse(two, 1, &r);
    assert_int_equal(r.n, 1);
    assert_true(r.full);
    assert_string_equal(r.content, "");
    parse(two, 8, &r);
    assert_int_equal(r.n, 2);
    assert_false(r.full);
    assert_string_equal(r.content, "and text");
}

static int setup(void **state) {
    (void)state;
    tools = cJSON_Parse(
        "[{\"type\": \"function\", \"function\": {\"name\": \"edit\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"path\": {\"type\": \"string\"}, \"opts\": {\"type\": \"object\"}, \"lines\": {\"type\": "
        "[\"array\", \"null\"]}, \"force\": {\"type\": \"boolean\"}, \"text\": {\"type\": \"string\"}}}}},"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, \"metric\": "
        "{\"type\": \"boolean\"}}}}}]");
    assert_non_null(tools);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    cJSON_Delete(tools);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_form),  cmocka_unit_test(test_xml_form),  cmocka_unit_test(test_plain_text),
        cmocka_unit_test(test_broken),     cmocka_unit_test(test_max_calls),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
