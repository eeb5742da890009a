/* The Anthropic Messages API of edge0 serve (POST /v1/messages and
 * /v1/messages/count_tokens), end to end over real HTTP.
 *
 * First group: `edge0 serve` on the tiny synthesized model, curl as the
 * client. The answer's shape (id, type, role, model, content, stop_reason,
 * usage that agrees with count_tokens); the stream's exact event sequence
 * (message_start, ping, block start / deltas / stop with their indices,
 * message_delta, message_stop; each event's name its data's type) giving
 * the same text as the plain answer; stop_sequences (stop_reason
 * stop_sequence and the string); system as text blocks; every error in
 * Anthropic's shape with its status (authentication by x-api-key and
 * Bearer, unknown fields, roles and blocks, thinking budget, a tool_choice
 * without its tool's name, method, endpoint, body size, context); forced
 * tool_use through the official client (constrained decoding).
 *
 * Second group: the server in this process with the model's output
 * scripted (a random model never writes a tool call; see su_scripted in srvutil.h).
 * thinking, text and tool_use blocks plain and streamed (input_json_delta
 * pieces that rebuild the input); the tool conversations of
 * tests/data/chat_tools_golden.jsonl sent in Anthropic's form (tool_use
 * from the assistant, tool_result from the user) render byte for byte as
 * the reference chat templates do, for Qwen3's and Qwen3.5's; a prefill;
 * is_error; the next turn of an agent continues the session; and the
 * official @anthropic-ai/sdk client (tests/node/anthropic_messages.cjs). */
#include "srvutil.h"

#include "edge0.h"
#include "synth/synth.h"
#include "server/server.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define KEY "test-key-anthropic"
#define HDR "-H 'x-api-key: " KEY "' -H 'anthropic-version: 2023-06-01'"

static char *dir;
static su_server child;

static int setup(void **state) {
    (void)state;
    dir = tu_tmpdir();
    su_start(&child, dir, su_model(dir), "messages", "--ctx 2048 --api-key " KEY);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    su_stop(&child);
    tu_rmtree(dir);
    free(dir);
    dir = NULL;
    return 0;
}

static int port; /* the server the helpers below talk to */

static int post(const char *path, const char *body, const char *headers, char **out) {
    return su_http(port, dir, "POST", path, body, headers ? headers : HDR, out);
}

static cJSON *message(const char *body) {
    char *out;
    int st = post("/v1/messages", body, NULL, &out);
    if (st != 200) fail_msg("status %d: %s", st, out);
    cJSON *j = su_json(out, "the message");
    free(out);
    return j;
}

/* A Messages body with one user message and `extra` members. */
static char *body_of(const char *user, int max_tokens, const char *extra) {
    char *b = malloc(strlen(user) + 1024 + (extra ? strlen(extra) : 0));
    sprintf(b, "{\"model\":\"claude-x\",\"max_tokens\":%d,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]%s%s}",
            max_tokens, user, extra ? "," : "", extra ? extra : "");
    return b;
}

static bool is_id(const char *s, const char *prefix) {
    size_t p = strlen(prefix);
    if (strncmp(s, prefix, p) || strlen(s) != p + 24) return false;
    for (s += p; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9'))) return false;
    return true;
}

/* ---- the event stream ------------------------------------------------------- */

/* A stream rebuilt: its content blocks as a message's, stop and usage; the
 * event order checked on the way. */
typedef struct {
    cJSON *msg; /* message_start's message, content filled from the events */
    int events, pings;
    char raw_json[8][4096]; /* tool_use blocks' partial_json joined */
    int pieces[8];
} sse;

static void stream_parse(const char *text, sse *s) {
    memset(s, 0, sizeof *s);
    int open = -1; /* the open block's index */
    bool stopped = false, delta = false;
    for (const char *p = text; *p;) {
        const char *end = strstr(p, "\n\n");
        if (!end) fail_msg("an event does not end with a blank line: '%s'", p);
        if (strncmp(p, "event: ", 7)) fail_msg("an event without its name: '%.*s'", (int)(end - p), p);
        const char *nl = strchr(p, '\n');
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(nl - p - 7), p + 7);
        if (strncmp(nl + 1, "data: ", 6)) fail_msg("event %s without data", name);
        char *data = strndup(nl + 7, (size_t)(end - nl - 7));
        p = end + 2;
        cJSON *d = su_json(data, "an event's data");
        free(data);
        assert_string_equal(su_str(d, "type"), name); /* the event is named as its data's type */
        if (stopped) fail_msg("%s after message_stop", name);
        if (s->events++ == 0) {
            assert_string_equal(name, "message_start");
            s->msg = cJSON_Duplicate(su_at(d, "message"), 1);
            assert_int_equal(cJSON_GetArraySize(su_at(s->msg, "content")), 0);
            assert_true(cJSON_IsNull(su_at(s->msg, "stop_reason")));
        } else if (!strcmp(name, "ping")) {
            s->pings++;
        } else if (!strcmp(name, "content_block_start")) {
            assert_int_equal(open, -1);
            assert_false(delta);
            open = (int)su_num(d, "index");
            assert_int_equal(open, cJSON_GetArraySize(su_at(s->msg, "content"))); /* 0, 1, 2, ... */
            cJSON_AddItemToArray(cJSON_GetObjectItem(s->msg, "content"), cJSON_Duplicate(su_at(d, "content_block"), 1));
        } else if (!strcmp(name, "content_block_delta")) {
            assert_int_equal((int)su_num(d, "index"), open);
            cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(s->msg, "content"), open);
            const char *t = su_str(d, "delta.type"), *btype = su_str(b, "type");
            const char *key = !strcmp(t, "text_delta")       ? "text"
                              : !strcmp(t, "thinking_delta") ? "thinking"
                                                             : NULL;
            if (key) {
                assert_string_equal(btype, key);
                const char *add = su_str(su_at(d, "delta"), key);
                char *joined = malloc(strlen(su_str(b, key)) + strlen(add) + 1);
                strcpy(joined, su_str(b, key));
                strcat(joined, add);
                cJSON_SetValuestring(cJSON_GetObjectItem(b, key), joined);
                free(joined);
            } else {
                assert_string_equal(t, "input_json_delta");
                assert_string_equal(btype, "tool_use");
                assert_true(open < 8);
                strcat(s->raw_json[open], su_str(d, "delta.partial_json"));
                s->pieces[open]++;
            }
        } else if (!strcmp(name, "content_block_stop")) {
            assert_int_equal((int)su_num(d, "index"), open);
            cJSON *b = cJSON_GetArrayItem(cJSON_GetObjectItem(s->msg, "content"), open);
            if (!strcmp(su_str(b, "type"), "tool_use")) {
                assert_int_equal(cJSON_GetArraySize(su_at(b, "input")), 0); /* the start has {} */
                cJSON_ReplaceItemInObject(b, "input", su_json(s->raw_json[open], "a tool_use's joined partial_json"));
            }
            open = -1;
        } else if (!strcmp(name, "message_delta")) {
            assert_int_equal(open, -1);
            assert_false(delta);
            delta = true;
            cJSON_ReplaceItemInObject(s->msg, "stop_reason", cJSON_Duplicate(su_at(d, "delta.stop_reason"), 1));
            cJSON_ReplaceItemInObject(s->msg, "stop_sequence", cJSON_Duplicate(su_at(d, "delta.stop_sequence"), 1));
            cJSON_ReplaceItemInObject(s->msg, "usage", cJSON_Duplicate(su_at(d, "usage"), 1));
        } else if (!strcmp(name, "message_stop")) {
            assert_true(delta);
            stopped = true;
        } else {
            fail_msg("unexpected event %s: %s", name, cJSON_PrintUnformatted(d));
        }
        cJSON_Delete(d);
    }
    assert_true(stopped);
}

static void stream_of(const char *body, sse *s) {
    char *out;
    int st = post("/v1/messages", body, NULL, &out);
    if (st != 200) fail_msg("status %d: %s", st, out);
    stream_parse(out, s);
    free(out);
}

/* The text of a message's text blocks. */
static char *text_of(const cJSON *msg) {
    char *t = calloc(1, 65536);
    const cJSON *b;
    cJSON_ArrayForEach(b, su_at(msg, "content")) if (!strcmp(su_str(b, "type"), "text")) strcat(t, su_str(b, "text"));
    return t;
}

/* ---- first group: the tiny model ---------------------------------------------- */

static void test_message(void **state) {
    (void)state;
    port = child.port;
    char *b = body_of("Hello there", 6, "\"system\":\"You are terse.\",\"thinking\":{\"type\":\"disabled\"}");
    cJSON *j = message(b);
    assert_true(is_id(su_str(j, "id"), "msg_"));
    assert_string_equal(su_str(j, "type"), "message");
    assert_string_equal(su_str(j, "role"), "assistant");
    assert_string_equal(su_str(j, "model"), "m");
    assert_string_equal(su_str(j, "content.0.type"), "text");
    assert_true(strlen(su_str(j, "content.0.text")) > 0);
    assert_int_equal(cJSON_GetArraySize(su_at(j, "content")), 1);
    assert_string_equal(su_str(j, "stop_reason"), "max_tokens");
    assert_true(cJSON_IsNull(su_at(j, "stop_sequence")));
    assert_int_equal((int)su_num(j, "usage.output_tokens"), 6);
    /* count_tokens renders the same prompt: system as a string or as blocks */
    char *out;
    assert_int_equal(post("/v1/messages/count_tokens", b, NULL, &out), 200);
    cJSON *c = su_json(out, "count_tokens");
    assert_int_equal((int)su_num(c, "input_tokens"), (int)su_num(j, "usage.input_tokens"));
    free(out);
    cJSON_Delete(c);
    char *b2 = body_of("Hello there", 6,
                       "\"system\":[{\"type\":\"text\",\"text\":\"You are terse.\",\"cache_control\":{\"type\":"
                       "\"ephemeral\"}}],\"thinking\":{\"type\":\"disabled\"}");
    cJSON *j2 = message(b2);
    assert_int_equal((int)su_num(j2, "usage.input_tokens"), (int)su_num(j, "usage.input_tokens"));
    assert_string_equal(su_str(j2, "content.0.text"), su_str(j, "content.0.text"));
    cJSON_Delete(j2);
    free(b2);
    /* no system prompt: fewer tokens */
    b2 = body_of("Hello there", 6, "\"thinking\":{\"type\":\"disabled\"}");
    assert_int_equal(post("/v1/messages/count_tokens", b2, NULL, &out), 200);
    c = su_json(out, "count_tokens");
    assert_true(su_num(c, "input_tokens") < su_num(j, "usage.input_tokens"));
    free(out);
    cJSON_Delete(c);
    free(b2);
    cJSON_Delete(j);
    free(b);
}

static void test_stream(void **state) {
    (void)state;
    port = child.port;
    char *b = body_of("Tell me about edges", 8, "\"thinking\":{\"type\":\"disabled\"}");
    cJSON *j = message(b);
    free(b);
    b = body_of("Tell me about edges", 8, "\"thinking\":{\"type\":\"disabled\"},\"stream\":true");
    sse s;
    stream_of(b, &s);
    assert_int_equal(s.pings, 1);
    assert_true(is_id(su_str(s.msg, "id"), "msg_"));
    assert_string_equal(su_str(s.msg, "model"), "m");
    char *t1 = text_of(j), *t2 = text_of(s.msg);
    assert_string_equal(t2, t1);
    assert_int_equal(cJSON_GetArraySize(su_at(s.msg, "content")), 1);
    assert_string_equal(su_str(s.msg, "stop_reason"), "max_tokens");
    assert_int_equal((int)su_num(s.msg, "usage.output_tokens"), 8);
    assert_int_equal((int)su_num(s.msg, "usage.input_tokens"), (int)su_num(j, "usage.input_tokens"));
    printf("stream: %d events\n", s.events);
    free(t1);
    free(t2);
    free(b);
    cJSON_Delete(s.msg);
    cJSON_Delete(j);
}

/* stop_sequences: a piece of the greedy answer stops it there. */
static void test_stop_sequence(void **state) {
    (void)state;
    port = child.port;
    char *b = body_of("Count the stars", 12, "\"thinking\":{\"type\":\"disabled\"}");
    cJSON *j = message(b);
    char *t = text_of(j);
    size_t n = strlen(t), at = n / 2;
    while (at > 1 && ((unsigned char)t[at] & 0xc0) == 0x80) at--; /* a character boundary */
    size_t len = 1;
    while (at + len < n && (((unsigned char)t[at + len] & 0xc0) == 0x80 || len < 2)) len++;
    char stop[64];
    snprintf(stop, sizeof stop, "%.*s", (int)len, t + at);
    cJSON *extra = cJSON_CreateObject();
    cJSON_AddItemToObject(extra, "stop_sequences", cJSON_CreateStringArray((const char *[]){"never-there", stop}, 2));
    char *es = cJSON_PrintUnformatted(extra), *b2 = body_of("Count the stars", 12, "\"thinking\":{\"type\":\"disabled\"}");
    b2[strlen(b2) - 1] = 0; /* append the stop sequences */
    char *b3 = malloc(strlen(b2) + strlen(es) + 4);
    sprintf(b3, "%s,%s", b2, es + 1);
    cJSON *k = message(b3);
    char *want = strndup(t, (size_t)(strstr(t, stop) - t)), *got = text_of(k);
    assert_string_equal(got, want);
    assert_string_equal(su_str(k, "stop_reason"), "stop_sequence");
    assert_string_equal(su_str(k, "stop_sequence"), stop);
    char *bs = malloc(strlen(b3) + 32);
    sprintf(bs, "%.*s,\"stream\":true}", (int)strlen(b3) - 1, b3);
    sse s;
    stream_of(bs, &s);
    assert_string_equal(su_str(s.msg, "stop_reason"), "stop_sequence");
    assert_string_equal(su_str(s.msg, "stop_sequence"), stop);
    printf("stop_sequences [\"%s\"]: %zu of %zu bytes, then stop_sequence\n", stop, strlen(want), n);
    cJSON_Delete(s.msg);
    free(bs);
    free(want);
    free(got);
    free(b3);
    free(b2);
    free(es);
    cJSON_Delete(extra);
    cJSON_Delete(k);
    free(t);
    cJSON_Delete(j);
    free(b);
}

/* An error in Anthropic's shape: status, error.type, and a message naming `what`. */
static void expect_error(const char *method, const char *path, const char *body, const char *headers, int status,
                         const char *type, const char *what) {
    char *out;
    int st = su_http(port, dir, method, path, body, headers ? headers : HDR, &out);
    if (st != status) fail_msg("%s %s: status %d, not %d: %s", method, path, st, status, out);
    cJSON *j = su_json(out, "the error");
    assert_string_equal(su_str(j, "type"), "error");
    assert_string_equal(su_str(j, "error.type"), type);
    if (what && !strstr(su_str(j, "error.message"), what))
        fail_msg("the message does not name '%s': %s", what, su_str(j, "error.message"));
    cJSON_Delete(j);
    free(out);
}

static void test_errors(void **state) {
    (void)state;
    port = child.port;
    static const char OK[] = "{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    const char *BAD = "invalid_request_error";
    /* keys: none, wrong, in x-api-key or as Bearer */
    expect_error("POST", "/v1/messages", OK, "-H 'anthropic-version: 2023-06-01'", 401, "authentication_error", "x-api-key");
    expect_error("POST", "/v1/messages", OK, "-H 'x-api-key: nope'", 401, "authentication_error", NULL);
    expect_error("POST", "/v1/messages/count_tokens", OK, "-H 'x-api-key: nope'", 401, "authentication_error", NULL);
    assert_int_equal(post("/v1/messages", OK, "-H 'Authorization: Bearer " KEY "'", NULL), 200);
    assert_int_equal(post("/v1/messages", OK, "-H 'Authorization: Bearer nope' -H 'x-api-key: " KEY "'", NULL), 200);
    /* the request */
    static const struct {
        const char *body, *what;
    } bad[] = {
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "max_tokens"},
        {"{\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "model"},
        {"{\"model\":\"m\",\"max_tokens\":2}", "messages"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"messages\":[]}", "messages"},
        {"{\"model\":\"m\",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "max_tokens"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"service_tier\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "service_tier"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"tool\",\"content\":\"hi\"}]}", "messages[0].role"},
        /* Claude Code's fields, wrong */
        {"{\"model\":\"m\",\"max_tokens\":2,\"output_config\":{\"effort\":\"extreme\"},\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}]}",
         "output_config"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"context_management\":{\"edits\":[{\"type\":\"clear_tool_uses_20250919\"}]},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "clear_tool_uses_20250919"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"context_management\":{\"edits\":[{\"type\":\"clear_thinking_20251015\","
         "\"keep\":{\"type\":\"thinking_turns\",\"value\":-1}}]},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "keep.value"},
        {"{\"model\":\"m\",\"max_tokens\":4000,\"thinking\":{\"type\":\"adaptive\",\"budget_tokens\":2000},\"messages\":[{"
         "\"role\":\"user\",\"content\":\"hi\"}]}",
         "budget_tokens"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}}]}]}",
         "messages[0].content[0]"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\","
         "\"extra\":1}]}]}",
         "messages[0].content[0].extra"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}",
         "tool_use_id"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"temperature\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "temperature"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"stop_sequences\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "stop_sequences"},
        {"{\"model\":\"m\",\"max_tokens\":4000,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":100},\"messages\":[{"
         "\"role\":\"user\",\"content\":\"hi\"}]}",
         "budget_tokens"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"metadata\":{\"user_id\":\"u\",\"x\":1},\"messages\":[{\"role\":\"user\","
         "\"content\":\"hi\"}]}",
         "metadata.x"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],"
         "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "tools[0].type"},
        /* a forced tool needs its name */
        {"{\"model\":\"m\",\"max_tokens\":2,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
         "\"tool_choice\":{\"type\":\"tool\"},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
         "tool_choice"},
        {"{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
         "\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}]}]}",
         "prefill"},
        {"{\"model\":", "JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        expect_error("POST", "/v1/messages", bad[i].body, NULL, 400, BAD, bad[i].what);
    expect_error("GET", "/v1/messages", NULL, NULL, 405, BAD, "POST");
    expect_error("POST", "/v1/messages/batches", OK, NULL, 404, "not_found_error", NULL);
    /* the context (2048) and the body limit (1 MiB) */
    size_t big = 3000 * 6;
    char *b = malloc(big + 256);
    strcpy(b, "{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (size_t i = 0; i < 3000; i++) strcat(b, "words ");
    strcat(b, "\"}]}");
    expect_error("POST", "/v1/messages", b, NULL, 400, BAD, "context");
    free(b);
    b = malloc((2u << 20) + 256);
    strcpy(b, "{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"");
    size_t n = strlen(b);
    memset(b + n, 'a', 2u << 20);
    strcpy(b + n + (2u << 20), "\"}]}");
    expect_error("POST", "/v1/messages", b, NULL, 413, "request_too_large", NULL);
    free(b);
}

/* ---- second group: scripted output ------------------------------------------------
 *
 * srv_start in this process with srv_opts.generate = su_scripted
 * (tests/srvutil.h): it answers with the text after the last "SCRIPT:" in
 * the prompt and keeps the prompt it was given (su_last_prompt). */

static su_inproc ip;
static void ip_start(e0_chat_format format) {
    su_inproc_start(&ip, KEY, format, NULL);
    port = ip.port;
}

static int ip_setup(void **state) {
    (void)state;
    su_inproc_open(&ip);
    dir = ip.dir;
    ip_start(E0_CHAT_QWEN35);
    return 0;
}

static int ip_teardown(void **state) {
    (void)state;
    su_inproc_close(&ip);
    dir = NULL;
    return 0;
}

#define TOOLS                                                                                                          \
    "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather\",\"input_schema\":{\"type\":\"object\","          \
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"where\":{\"type\":\"object\"}}}},"  \
    "{\"name\":\"search\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"}}},"     \
    "\"cache_control\":{\"type\":\"ephemeral\"}}]"

/* Qwen3.5's XML form: a thought, a sentence, two calls. */
static const char XML_SCRIPT[] =
    "Checking.</think>\\n\\nLet me look.\\n\\n<tool_call>\\n<function=get_weather>\\n<parameter=city>\\nZ\\u00fcrich\\n"
    "</parameter>\\n<parameter=days>\\n2\\n</parameter>\\n<parameter=where>\\n{\\\"lat\\\": [47.4, {\\\"x\\\": null}]}\\n"
    "</parameter>\\n</function>\\n</tool_call>\\n<tool_call>\\n<function=search>\\n<parameter=query>\\nedge0\\n"
    "</parameter>\\n</function>\\n</tool_call>";

static char *script_body(const char *script, bool stream) {
    char *b = malloc(strlen(script) + 2048);
    sprintf(b, "{\"model\":\"m\",\"max_tokens\":100,\"stream\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"SCRIPT:%s\"}]," TOOLS "}",
            stream ? "true" : "false", script);
    return b;
}

static void json_same(const cJSON *got, const char *want) {
    cJSON *w = su_json(want, "want");
    if (!cJSON_Compare(got, w, 1)) fail_msg("got %s, want %s", cJSON_PrintUnformatted(got), want);
    cJSON_Delete(w);
}

/* thinking, text and tool_use blocks, in order; plain and streamed alike. */
static void check_tool_message(const cJSON *m) {
    const cJSON *c = su_at(m, "content");
    assert_int_equal(cJSON_GetArraySize(c), 4);
    assert_string_equal(su_str(c, "0.type"), "thinking");
    assert_string_equal(su_str(c, "0.thinking"), "Checking.");
    assert_string_equal(su_str(c, "0.signature"), "");
    assert_string_equal(su_str(c, "1.type"), "text");
    assert_string_equal(su_str(c, "1.text"), "Let me look.");
    assert_string_equal(su_str(c, "2.type"), "tool_use");
    assert_string_equal(su_str(c, "2.name"), "get_weather");
    json_same(su_at(c, "2.input"), "{\"city\": \"Z\xc3\xbcrich\", \"days\": 2, \"where\": {\"lat\": [47.4, {\"x\": null}]}}");
    assert_string_equal(su_str(c, "3.name"), "search");
    json_same(su_at(c, "3.input"), "{\"query\": \"edge0\"}");
    assert_true(is_id(su_str(c, "2.id"), "toolu_") && is_id(su_str(c, "3.id"), "toolu_"));
    assert_string_not_equal(su_str(c, "2.id"), su_str(c, "3.id"));
    assert_string_equal(su_str(m, "stop_reason"), "tool_use");
    assert_true(cJSON_IsNull(su_at(m, "stop_sequence")));
}

static void test_tool_use(void **state) {
    (void)state;
    char *b = script_body(XML_SCRIPT, false);
    cJSON *j = message(b);
    check_tool_message(j);
    free(b);
    b = script_body(XML_SCRIPT, true);
    sse s;
    stream_of(b, &s);
    check_tool_message(s.msg);
    assert_true(s.pieces[2] >= 3); /* the input came in pieces */
    assert_int_equal((int)su_num(s.msg, "usage.output_tokens"), (int)su_num(j, "usage.output_tokens"));
    cJSON_Delete(s.msg);
    free(b);
    cJSON_Delete(j);
    /* disable_parallel_tool_use: the first call only */
    b = script_body(XML_SCRIPT, false);
    b[strlen(b) - 1] = 0;
    char *b2 = malloc(strlen(b) + 128);
    sprintf(b2, "%s,\"tool_choice\":{\"type\":\"auto\",\"disable_parallel_tool_use\":true}}", b);
    j = message(b2);
    assert_int_equal(cJSON_GetArraySize(su_at(j, "content")), 3);
    assert_string_equal(su_str(j, "stop_reason"), "tool_use");
    cJSON_Delete(j);
    free(b2);
    free(b);
}

/* The golden conversation `g` (OpenAI messages) as a Messages body: the
 * system message on top, the assistant's reasoning, text and calls as
 * thinking, text and tool_use blocks, consecutive tool messages as one user
 * message of tool_result blocks. */
static char *anthropic_body(const cJSON *g) {
    cJSON *b = cJSON_CreateObject(), *msgs = cJSON_CreateArray(), *tools = cJSON_CreateArray(), *pending = NULL;
    cJSON_AddStringToObject(b, "model", "m");
    cJSON_AddNumberToObject(b, "max_tokens", 4096);
    const cJSON *m, *t, *opts = su_at(g, "options");
    cJSON_ArrayForEach(m, su_at(g, "messages")) {
        const char *role = su_str(m, "role");
        const cJSON *content = cJSON_GetObjectItem(m, "content");
        if (strcmp(role, "tool")) pending = NULL;
        if (!strcmp(role, "system")) {
            cJSON_AddItemToObject(b, "system", cJSON_Duplicate(content, 1));
        } else if (!strcmp(role, "user")) {
            cJSON *u = cJSON_CreateObject();
            cJSON_AddStringToObject(u, "role", "user");
            cJSON_AddItemToObject(u, "content", cJSON_Duplicate(content, 1));
            cJSON_AddItemToArray(msgs, u);
        } else if (!strcmp(role, "assistant")) {
            cJSON *a = cJSON_CreateObject(), *blocks = cJSON_CreateArray(), *blk;
            cJSON_AddStringToObject(a, "role", "assistant");
            const cJSON *rc = cJSON_GetObjectItem(m, "reasoning_content"), *c;
            if (cJSON_IsString(rc)) {
                blk = cJSON_CreateObject();
                cJSON_AddStringToObject(blk, "type", "thinking");
                cJSON_AddStringToObject(blk, "thinking", rc->valuestring);
                cJSON_AddStringToObject(blk, "signature", "");
                cJSON_AddItemToArray(blocks, blk);
            }
            if (cJSON_IsString(content) && *content->valuestring) {
                blk = cJSON_CreateObject();
                cJSON_AddStringToObject(blk, "type", "text");
                cJSON_AddStringToObject(blk, "text", content->valuestring);
                cJSON_AddItemToArray(blocks, blk);
            }
            cJSON_ArrayForEach(c, cJSON_GetObjectItem(m, "tool_calls")) {
                blk = cJSON_CreateObject();
                cJSON_AddStringToObject(blk, "type", "tool_use");
                cJSON_AddStringToObject(blk, "id", su_str(c, "id"));
                cJSON_AddStringToObject(blk, "name", su_str(c, "function.name"));
                cJSON_AddItemToObject(blk, "input", cJSON_Duplicate(su_at(c, "function.arguments"), 1));
                cJSON_AddItemToArray(blocks, blk);
            }
            cJSON_AddItemToObject(a, "content", blocks);
            cJSON_AddItemToArray(msgs, a);
        } else {
            if (!pending) {
                cJSON *u = cJSON_CreateObject();
                cJSON_AddStringToObject(u, "role", "user");
                pending = cJSON_AddArrayToObject(u, "content");
                cJSON_AddItemToArray(msgs, u);
            }
            cJSON *blk = cJSON_CreateObject();
            cJSON_AddStringToObject(blk, "type", "tool_result");
            cJSON_AddStringToObject(blk, "tool_use_id", su_str(m, "tool_call_id"));
            cJSON_AddItemToObject(blk, "content", cJSON_Duplicate(content, 1));
            cJSON_AddItemToArray(pending, blk);
        }
    }
    cJSON_AddItemToObject(b, "messages", msgs);
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(opts, "tools")) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "name", su_str(t, "function.name"));
        cJSON_AddStringToObject(a, "description", su_str(t, "function.description"));
        cJSON_AddItemToObject(a, "input_schema", cJSON_Duplicate(su_at(t, "function.parameters"), 1));
        cJSON_AddItemToArray(tools, a);
    }
    cJSON_AddItemToObject(b, "tools", tools);
    const cJSON *et = cJSON_GetObjectItem(opts, "enable_thinking");
    cJSON *th = cJSON_AddObjectToObject(b, "thinking");
    if (cJSON_IsFalse(et)) {
        cJSON_AddStringToObject(th, "type", "disabled");
    } else {
        cJSON_AddStringToObject(th, "type", "enabled");
        cJSON_AddNumberToObject(th, "budget_tokens", 1024);
    }
    char *s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    return s;
}

/* The tool conversations of the chat goldens, sent as Anthropic clients
 * send them, render as the reference templates render the OpenAI form.
 * (A golden that ends with an assistant message is left out: to the
 * Messages API that message is a prefill, see test_prefill.) */
static void test_tool_turn_render(void **state) {
    (void)state;
    char *all = su_slurp("tests/data/chat_tools_golden.jsonl");
    int checked[2] = {0, 0};
    for (int f = 0; f < 2; f++) {
        const char *want_tmpl = f ? "qwen35" : "qwen3";
        su_inproc_stop(&ip);
        ip_start(f ? E0_CHAT_QWEN35 : E0_CHAT_QWEN3);
        for (char *line = all, *nl; *line; line = nl + 1) {
            nl = strchr(line, '\n');
            if (!nl) break;
            *nl = 0;
            cJSON *g = su_json(line, "a golden line");
            *nl = '\n';
            const cJSON *msgs = su_at(g, "messages");
            const char *last = su_str(cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1), "role");
            if (strcmp(su_str(g, "template"), want_tmpl) || !strcmp(last, "assistant")) {
                cJSON_Delete(g);
                continue;
            }
            char *body = anthropic_body(g), *out;
            int st = post("/v1/messages", body, NULL, &out);
            if (st != 200) fail_msg("%s/%s: status %d: %s\n%s", want_tmpl, su_str(g, "name"), st, out, body);
            char *lp = su_last_prompt();
            if (strcmp(lp, su_str(g, "rendered")))
                fail_msg("%s/%s: the prompt\n%s\nis not the reference rendering\n%s", want_tmpl, su_str(g, "name"),
                         *lp ? lp : "(none)", su_str(g, "rendered"));
            free(lp);
            checked[f]++;
            free(out);
            free(body);
            cJSON_Delete(g);
        }
    }
    printf("tool turns rendered as the reference templates: %d qwen3, %d qwen3.5\n", checked[0], checked[1]);
    assert_true(checked[0] >= 3 && checked[1] >= 3);
    free(all);
}

/* A last assistant message of text is a prefill: the prompt ends with it
 * (thinking off) and the answer continues it. is_error reaches the model. */
static void test_prefill(void **state) {
    (void)state;
    cJSON *j = message("{\"model\":\"m\",\"max_tokens\":50,\"messages\":[{\"role\":\"user\",\"content\":\"SCRIPT:, and "
                       "more.\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"So far\"}]}]}");
    char *lp = su_last_prompt();
    static const char TAIL[] = "<|im_start|>assistant\n<think>\n\n</think>\n\nSo far";
    assert_true(strlen(lp) > strlen(TAIL) && !strcmp(lp + strlen(lp) - strlen(TAIL), TAIL));
    free(lp);
    assert_string_equal(su_str(j, "content.0.text"), ", and more.");
    assert_int_equal(cJSON_GetArraySize(su_at(j, "content")), 1);
    assert_string_equal(su_str(j, "stop_reason"), "end_turn");
    cJSON_Delete(j);
    j = message("{\"model\":\"m\",\"max_tokens\":50," TOOLS ",\"messages\":[{\"role\":\"user\",\"content\":\"go\"},"
                "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"search\","
                "\"input\":{\"query\":\"q\"}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
                "\"toolu_1\",\"is_error\":true,\"content\":[{\"type\":\"text\",\"text\":\"boom\"}]},{\"type\":\"text\","
                "\"text\":\"SCRIPT:</think>\\n\\nnoted\"}]}]}");
    lp = su_last_prompt();
    assert_non_null(strstr(lp, "<tool_response>\nError: boom\n</tool_response>"));
    free(lp);
    assert_string_equal(su_str(j, "content.0.text"), "noted");
    cJSON_Delete(j);
}

/* A tool call cut off by max_tokens: stop_reason max_tokens and the call
 * as far as it got (its complete parameters) as a tool_use block; its
 * markup never in a text block. */
static void test_truncated_call(void **state) {
    (void)state;
    cJSON *j = message("{\"model\":\"m\",\"max_tokens\":50," TOOLS ",\"messages\":[{\"role\":\"user\",\"content\":"
                       "\"SCRIPT:</think>\\n\\nLooking.\\n<tool_call>\\n<function=search>\\n<parameter=query>\\nhal~\"}]}");
    assert_string_equal(su_str(j, "stop_reason"), "max_tokens");
    const cJSON *c = su_at(j, "content"), *b;
    int uses = 0;
    cJSON_ArrayForEach(b, c) {
        const char *t = su_str(b, "type");
        if (!strcmp(t, "text")) assert_null(strstr(su_str(b, "text"), "<tool_call>"));
        if (!strcmp(t, "tool_use")) {
            uses++;
            assert_string_equal(su_str(b, "name"), "search");
            assert_int_equal(cJSON_GetArraySize(su_at(b, "input")), 0);
        }
    }
    assert_int_equal(uses, 1);
    cJSON_Delete(j);
}

/* What Claude Code sends (issue 39): POST /v1/messages?beta=true with
 * anthropic-beta values, thinking {type: "adaptive"} (thinking on),
 * output_config.effort, the system prompt as blocks with cache_control and
 * a system message inside 'messages' (joined to the system prompt), and
 * context_management's clear_thinking_20251015, which leaves the thinking
 * of all but the last kept assistant turns out of the prompt. HEAD / and
 * GET / answer without a key. */
static char *agent_body(const char *extra) {
    char *b = malloc(4096);
    snprintf(b, 4096,
             "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":32000,\"stream\":false," TOOLS ","
             "\"system\":[{\"type\":\"text\",\"text\":\"You are Claude Code.\"},{\"type\":\"text\",\"text\":"
             "\" Be brief.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
             "\"metadata\":{\"user_id\":\"user_abc\"},\"thinking\":{\"type\":\"adaptive\"},"
             "\"output_config\":{\"effort\":\"high\"}%s%s,\"messages\":["
             "{\"role\":\"system\",\"content\":\"Inner rules.\"},"
             "{\"role\":\"user\",\"content\":\"go\"},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"FIRST-THOUGHT\","
             "\"signature\":\"s1\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"search\",\"input\":"
             "{\"query\":\"a\"}}]},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"r1\"}]},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"SECOND-THOUGHT\","
             "\"signature\":\"s2\"},{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"search\",\"input\":"
             "{\"query\":\"b\"}}]},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\",\"content\":"
             "\"SCRIPT:thought</think>\\n\\ndone\"}]}]}",
             extra ? "," : "", extra ? extra : "");
    return b;
}

/* The prompt of one Claude Code request (extra: more members). */
static char *agent_prompt(const char *extra) {
    char *b = agent_body(extra), *out;
    int st = su_http(port, dir, "POST", "/v1/messages?beta=true", b,
                     HDR " -H 'anthropic-beta: claude-code-20250219,interleaved-thinking-2025-05-14,"
                         "context-management-2025-06-27,fine-grained-tool-streaming-2025-05-14'",
                     &out);
    if (st != 200) fail_msg("status %d: %s\n%s", st, out, b);
    cJSON *j = su_json(out, "the message");
    assert_string_equal(su_str(j, "content.0.type"), "thinking"); /* adaptive: the model thinks */
    cJSON_Delete(j);
    free(out);
    free(b);
    char *p = su_last_prompt();
    return p;
}

static void test_claude_code(void **state) {
    (void)state;
    char *out;
    assert_int_equal(su_http(port, dir, "HEAD", "/", NULL, "--head", &out), 200);
    free(out);
    assert_int_equal(su_http(port, dir, "GET", "/", NULL, "", &out), 200);
    assert_non_null(strstr(out, "edge0 is running"));
    free(out);
    char *p = agent_prompt(NULL);
    /* the system message is the first (the template puts the tools before its text) */
    const char *sys = strstr(p, "You are Claude Code. Be brief.\n\nInner rules.<|im_end|>");
    if (strncmp(p, "<|im_start|>system\n", 19) || !sys || strstr(p + 19, "<|im_start|>") < sys)
        fail_msg("the system prompt is not the blocks and the system message:\n%s", p);
    assert_non_null(strstr(p, "FIRST-THOUGHT")); /* no edit: both turns' thinking (after the last query) */
    assert_non_null(strstr(p, "SECOND-THOUGHT"));
    static const char ON[] = "<|im_start|>assistant\n<think>\n";
    assert_string_equal(p + strlen(p) - strlen(ON), ON); /* thinking on */
    free(p);
    p = agent_prompt("\"context_management\":{\"edits\":[{\"type\":\"clear_thinking_20251015\"}]}");
    assert_null(strstr(p, "FIRST-THOUGHT")); /* the default keeps the last turn's */
    assert_non_null(strstr(p, "SECOND-THOUGHT"));
    free(p);
    p = agent_prompt("\"context_management\":{\"edits\":[{\"type\":\"clear_thinking_20251015\",\"keep\":{\"type\":"
                     "\"thinking_turns\",\"value\":0}}]}");
    assert_null(strstr(p, "FIRST-THOUGHT"));
    assert_null(strstr(p, "SECOND-THOUGHT"));
    free(p);
    p = agent_prompt("\"context_management\":{\"edits\":[{\"type\":\"clear_thinking_20251015\",\"keep\":\"all\"}]}");
    assert_non_null(strstr(p, "FIRST-THOUGHT"));
    free(p);
    printf("Claude Code's request shape: accepted; system blocks and message joined; clear_thinking applied\n");
}

/* Replaces the first `from` in s (malloc'd) by `to`. */
static char *replace1(char *s, const char *from, const char *to) {
    char *at = strstr(s, from);
    assert_non_null(at);
    char *out = malloc(strlen(s) + strlen(to) + 1);
    sprintf(out, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
    free(s);
    return out;
}

/* What later Claude Code releases add (2.1.332): tools with defer_loading,
 * strict, eager_input_streaming, input_examples and allowed_callers
 * (accepted, without effect), and thinking.display "omitted" (the thinking
 * block comes back, empty); an unknown display value is a 400. */
static void test_claude_code_later(void **state) {
    (void)state;
    char *b = agent_body(NULL), *out;
    b = replace1(b, "{\"name\":\"search\",", "{\"name\":\"search\",\"defer_loading\":true,\"strict\":true,"
                 "\"eager_input_streaming\":true,\"input_examples\":[{\"query\":\"x\"}],\"allowed_callers\":[\"direct\"],");
    b = replace1(b, "\"thinking\":{\"type\":\"adaptive\"}", "\"thinking\":{\"type\":\"adaptive\",\"display\":\"omitted\"}");
    int st = su_http(port, dir, "POST", "/v1/messages?beta=true", b, HDR, &out);
    if (st != 200) fail_msg("status %d: %s\n%s", st, out, b);
    cJSON *j = su_json(out, "the message");
    assert_string_equal(su_str(j, "content.0.type"), "thinking");
    assert_string_equal(su_str(j, "content.0.thinking"), ""); /* the script thought "thought": omitted */
    cJSON_Delete(j);
    free(out);
    char *plain = replace1(strdup(b), "\"display\":\"omitted\"", "\"display\":\"summarized\"");
    assert_int_equal(su_http(port, dir, "POST", "/v1/messages", plain, HDR, &out), 200);
    j = su_json(out, "the message");
    assert_string_equal(su_str(j, "content.0.thinking"), "thought");
    cJSON_Delete(j);
    free(out);
    char *stream = replace1(strdup(b), "\"stream\":false", "\"stream\":true");
    assert_int_equal(su_http(port, dir, "POST", "/v1/messages", stream, HDR, &out), 200);
    assert_non_null(strstr(out, "\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\""));
    assert_null(strstr(out, "thinking_delta")); /* omitted: no thinking text streamed */
    assert_non_null(strstr(out, "message_stop"));
    free(out);
    char *bad = replace1(strdup(b), "\"display\":\"omitted\"", "\"display\":\"full\"");
    assert_int_equal(su_http(port, dir, "POST", "/v1/messages", bad, HDR, &out), 400);
    assert_non_null(strstr(out, "thinking.display"));
    free(out);
    free(b), free(plain), free(stream), free(bad);
    printf("Claude Code 2.1.332's tool fields and thinking.display: accepted; \"omitted\" returns the block empty\n");
}


/* An agent's next turn (the answer's blocks sent back as they came, and
 * the tool results) continues the session: the whole first turn is reused. */
static void test_tool_turn_reuse(void **state) {
    (void)state;
    char *b = script_body(XML_SCRIPT, false);
    cJSON *j1 = message(b), *body = su_json(b, "the body");
    int history = (int)su_num(j1, "usage.input_tokens") + (int)su_num(j1, "usage.output_tokens");
    cJSON *msgs = cJSON_GetObjectItem(body, "messages"), *a = cJSON_CreateObject(), *u = cJSON_CreateObject();
    cJSON_AddStringToObject(a, "role", "assistant");
    cJSON_AddItemToObject(a, "content", cJSON_Duplicate(su_at(j1, "content"), 1));
    cJSON_AddItemToArray(msgs, a);
    cJSON_AddStringToObject(u, "role", "user");
    cJSON *results = cJSON_AddArrayToObject(u, "content");
    for (int i = 2; i < 4; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "type", "tool_result");
        cJSON_AddStringToObject(r, "tool_use_id", su_str(j1, i == 2 ? "content.2.id" : "content.3.id"));
        cJSON_AddStringToObject(r, "content", i == 2 ? "SCRIPT:</think>\n\nSunny in Z\xc3\xbcrich." : "[]");
        cJSON_AddItemToArray(results, r);
    }
    cJSON_AddItemToArray(msgs, u);
    char *text = cJSON_PrintUnformatted(body);
    double before = su_metric(port, dir, HDR, "edge0_cached_prompt_tokens_total");
    cJSON *j2 = message(text);
    assert_string_equal(su_str(j2, "content.0.text"), "Sunny in Z\xc3\xbcrich.");
    assert_string_equal(su_str(j2, "stop_reason"), "end_turn");
    double reused = su_metric(port, dir, HDR, "edge0_cached_prompt_tokens_total") - before;
    if ((int)reused != history) fail_msg("the next turn reused %.0f tokens, not the %d of the first turn", reused, history);
    printf("tool turn reuse: %d of %d prompt tokens reused\n", history, (int)su_num(j2, "usage.input_tokens"));
    free(text);
    cJSON_Delete(j2);
    cJSON_Delete(body);
    cJSON_Delete(j1);
    free(b);
}

/* node SCRIPT PORT KEY: one of the official client's tests against this server. */
static void run_node(const char *script, const char *what) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "node tests/node/%s %d " KEY " 2>&1", script, port);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *out = su_read_all(p);
    int st = pclose(p);
    if (st) fail_msg("%s failed (scripts/deps.sh installs node and the client):\n%s", what, out);
    printf("%s", out);
    free(out);
}

/* The official @anthropic-ai/sdk client (tests/node/anthropic_messages.cjs,
 * installed by scripts/deps.sh) against this server. */
static void test_node_anthropic(void **state) {
    (void)state;
    run_node("anthropic_messages.cjs", "the @anthropic-ai/sdk client test");
}

/* tool_choice {type: "tool"} and {type: "any"} through the official client
 * against the tiny model's noise weights (tests/node/anthropic_tool_forced.cjs):
 * only constrained decoding makes these valid tool_use blocks, plain and
 * streamed. */
static void test_node_anthropic_forced(void **state) {
    (void)state;
    port = child.port;
    run_node("anthropic_tool_forced.cjs", "the forced tool_use test");
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_message),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_stop_sequence),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_node_anthropic_forced),
    };
    const struct CMUnitTest scripted_tests[] = {
        cmocka_unit_test(test_tool_use),
        cmocka_unit_test(test_tool_turn_render),
        cmocka_unit_test(test_prefill),
        cmocka_unit_test(test_claude_code),
        cmocka_unit_test(test_claude_code_later),
        cmocka_unit_test(test_truncated_call),
        cmocka_unit_test(test_tool_turn_reuse),
        cmocka_unit_test(test_node_anthropic),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    return failed + cmocka_run_group_tests(scripted_tests, ip_setup, ip_teardown);
}
