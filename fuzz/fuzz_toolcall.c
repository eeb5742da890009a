/* libFuzzer: the tool-call parser (src/text/toolcall.c).
 *
 * The first byte picks max_calls and a piece size; the rest is model
 * output, fed whole and in pieces. Checked: no crash or leak; the events are
 * the same however the text is cut; every call's arguments are a JSON object
 * (by cJSON and with no raw control character in a string); content never
 * holds more bytes than the input; without a call the content is the input. */
#include "text/toolcall.h"
#include "util/err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok) {
    if (!ok) abort();
}

typedef struct {
    char *p;
    size_t n;
} acc;

static void put(acc *a, const char *s, size_t n) {
    char *p = realloc(a->p, a->n + n + 1);
    check(p != NULL);
    memcpy(p + a->n, s, n);
    a->n += n;
    p[a->n] = 0;
    a->p = p;
}

typedef struct {
    acc content, events; /* events: "N<name>\0A<args>\0..." in order */
    int calls;
} out;

static int on_content(void *u, const char *s, size_t n) {
    put(&((out *)u)->content, s, n);
    return 0;
}
static int on_call(void *u, int index, const char *s, size_t n) {
    out *o = u;
    check(index == o->calls++);
    put(&o->events, "\nN", 2);
    put(&o->events, s, n);
    put(&o->events, "\nA", 2);
    return 0;
}
static int on_args(void *u, int index, const char *s, size_t n) {
    out *o = u;
    check(index == o->calls - 1);
    put(&o->events, s, n);
    return 0;
}
static const e0_tc_sink SINK = {on_content, on_call, on_args};

static cJSON *tools;

static void run(const char *t, size_t n, size_t step, int max_calls, out *o, int flags[3]) {
    e0_tc_parser *p;
    char err[E0_ERR_MAX];
    check(e0_tc_parser_new(&p, tools, max_calls, err) == 0);
    for (size_t i = 0; i < n; i += step) check(e0_tc_feed(p, t + i, step < n - i ? step : n - i, &SINK, o) == 0);
    check(e0_tc_finish(p, &SINK, o) == 0);
    check(e0_tc_calls(p) == o->calls);
    flags[0] = e0_tc_full(p), flags[1] = e0_tc_malformed(p), flags[2] = e0_tc_truncated(p);
    e0_tc_parser_free(p);
}

/* Each call's arguments, from the event text. */
static void check_args(const acc *ev) {
    for (const char *a = ev->p ? strstr(ev->p, "\nA") : NULL; a; a = strstr(a + 2, "\nA")) {
        const char *end = strstr(a + 2, "\nN");
        size_t n = end ? (size_t)(end - a - 2) : strlen(a + 2);
        char *s = strndup(a + 2, n);
        cJSON *j = cJSON_Parse(s);
        check(cJSON_IsObject(j));
        cJSON_Delete(j);
        bool in = false;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)s[i];
            if (in && c == '\\') i++;
            else if (c == '"') in = !in;
            else if (in) check(c >= 0x20);
        }
        free(s);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    if (!tools)
        tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":"
                            "{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"number\"},\"b\":{\"type\":\"boolean\"},"
                            "\"o\":{\"type\":[\"object\",\"null\"]}}}}}]");
    int max_calls = 1 + (data[0] & 3);
    size_t step = 1 + (data[0] >> 2);
    const char *t = (const char *)data + 1;
    size_t n = size - 1;
    out whole = {0}, cut = {0};
    int fw[3], fc[3];
    run(t, n, n ? n : 1, max_calls, &whole, fw);
    run(t, n, step, max_calls, &cut, fc);
    check(whole.content.n == cut.content.n && (!whole.content.n || !memcmp(whole.content.p, cut.content.p, whole.content.n)));
    check(whole.events.n == cut.events.n && (!whole.events.n || !memcmp(whole.events.p, cut.events.p, whole.events.n)));
    check(!memcmp(fw, fc, sizeof fw));
    check(whole.content.n <= n);
    if (!whole.calls) check(whole.content.n == n && (!n || !memcmp(whole.content.p, t, n)));
    check_args(&whole.events);
    free(whole.content.p), free(whole.events.p), free(cut.content.p), free(cut.events.p);
    return 0;
}
