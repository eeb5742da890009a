/* The OpenAI Responses API of edge0 serve (POST /v1/responses), end to end
 * over real HTTP.
 *
 * First group: `edge0 serve` on the tiny synthesized model, curl as the
 * client. The response's shape (id, object, status, output message,
 * usage, the echoed parameters; instructions and a developer message make
 * one system prompt); the stream's event sequence (each event named as its
 * data's type, sequence numbers 0, 1, 2, ..., items added before their
 * deltas and done after, response.completed last and equal to the plain
 * response); max_output_tokens -> incomplete; hosted tools left out with
 * the x-edge0-ignored-tools header; tool_choice required and named, and
 * text.format json_schema, on the model's noise weights (only constrained
 * decoding makes their output valid); hostile bodies -> 400 naming the
 * field, previous_response_id -> 400.
 *
 * Second group: the server in this process with the model's output
 * scripted (a random model never writes a tool call, see su_scripted in srvutil.h):
 * reasoning, message and function_call items plain and streamed; the
 * items sent back with function_call_output items render the tool turn and
 * continue the session; Codex's namespace tools (the call answered as
 * {name, namespace}); a call cut off by max_output_tokens. */
#include "srvutil.h"

#include "edge0.h"
#include "server/responses.h"
#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define KEY "test-key-responses"
#define HDR "-H 'Authorization: Bearer " KEY "'"

static char *dir;
static su_server child;
static int port; /* the server the helpers below talk to */

static int setup(void **state) {
    (void)state;
    dir = tu_tmpdir();
    su_start(&child, dir, su_model(dir), "responses", "--ctx 2048 --api-key " KEY);
    port = child.port;
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

static int post(const char *body, const char *headers, char **out) {
    return su_http(port, dir, "POST", "/v1/responses", body, headers ? headers : HDR, out);
}

static cJSON *response(const char *body) {
    char *out;
    int st = post(body, NULL, &out);
    if (st != 200) fail_msg("status %d: %s\n%s", st, out, body);
    cJSON *j = su_json(out, "the response");
    free(out);
    return j;
}

static bool is_id(const char *s, const char *prefix) {
    size_t p = strlen(prefix);
    if (strncmp(s, prefix, p) || strlen(s) != p + 24) return false;
    for (s += p; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9'))) return false;
    return true;
}

/* The text of a response's message items. */
static char *text_of(const cJSON *r) {
    char *t = calloc(1, 65536);
    const cJSON *it, *part;
    cJSON_ArrayForEach(it, su_at(r, "output")) if (!strcmp(su_str(it, "type"), "message"))
        cJSON_ArrayForEach(part, su_at(it, "content")) strcat(t, su_str(part, "text"));
    return t;
}

/* ---- the event stream ------------------------------------------------------- */

/* A stream checked event by event and rebuilt: the final response, and the
 * output as the item events built it. */
typedef struct {
    cJSON *final;  /* response.completed / incomplete / failed's response */
    cJSON *output; /* the items of the output_item.done events */
    char text[8192], summary[8192], args[8][2048]; /* the deltas joined */
    int events, n_args;
    char last[64];
} sse;

static void stream_parse(const char *text, sse *s) {
    memset(s, 0, sizeof *s);
    s->output = cJSON_CreateArray();
    int open = -1; /* the output_index of the open item */
    for (const char *p = text; *p;) {
        const char *end = strstr(p, "\n\n"), *nl = strchr(p, '\n');
        if (!end || strncmp(p, "event: ", 7) || strncmp(nl + 1, "data: ", 6)) fail_msg("not an event: '%.200s'", p);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(nl - p - 7), p + 7);
        char *data = strndup(nl + 7, (size_t)(end - nl - 7));
        p = end + 2;
        cJSON *d = su_json(data, "an event's data");
        free(data);
        assert_string_equal(su_str(d, "type"), name); /* the event is named as its data's type */
        assert_int_equal((int)su_num(d, "sequence_number"), s->events); /* 0, 1, 2, ... */
        if (s->final) fail_msg("%s after the response ended", name);
        if (s->events == 0) assert_string_equal(name, "response.created");
        if (s->events == 1) assert_string_equal(name, "response.in_progress");
        if (s->events < 2) assert_string_equal(su_str(d, "response.status"), "in_progress");
        s->events++;
        snprintf(s->last, sizeof s->last, "%s", name);
        if (!strcmp(name, "response.output_item.added")) {
            assert_int_equal(open, -1);
            open = (int)su_num(d, "output_index");
            assert_int_equal(open, cJSON_GetArraySize(s->output)); /* 0, 1, 2, ... */
        } else if (!strcmp(name, "response.output_item.done")) {
            assert_int_equal((int)su_num(d, "output_index"), open);
            cJSON_AddItemToArray(s->output, cJSON_Duplicate(su_at(d, "item"), 1));
            open = -1;
        } else if (!strcmp(name, "response.output_text.delta")) {
            assert_int_equal((int)su_num(d, "output_index"), open);
            strcat(s->text, su_str(d, "delta"));
        } else if (!strcmp(name, "response.reasoning_summary_text.delta")) {
            assert_int_equal((int)su_num(d, "output_index"), open);
            strcat(s->summary, su_str(d, "delta"));
        } else if (!strcmp(name, "response.function_call_arguments.delta")) {
            assert_int_equal((int)su_num(d, "output_index"), open);
            assert_true(s->n_args < 8);
            strcat(s->args[s->n_args], su_str(d, "delta"));
        } else if (!strcmp(name, "response.function_call_arguments.done")) {
            assert_string_equal(su_str(d, "arguments"), s->args[s->n_args++]);
        } else if (!strcmp(name, "response.completed") || !strcmp(name, "response.incomplete") ||
                   !strcmp(name, "response.failed")) {
            assert_int_equal(open, -1);
            s->final = cJSON_Duplicate(su_at(d, "response"), 1);
        } else if (strcmp(name, "response.created") && strcmp(name, "response.in_progress") &&
                   strcmp(name, "response.content_part.added") && strcmp(name, "response.content_part.done") &&
                   strcmp(name, "response.output_text.done") && strcmp(name, "response.reasoning_summary_part.added") &&
                   strcmp(name, "response.reasoning_summary_part.done") &&
                   strcmp(name, "response.reasoning_summary_text.done") && strcmp(name, "error")) {
            fail_msg("unexpected event %s", name);
        } else if (strstr(name, ".done") || strstr(name, ".added")) {
            assert_int_equal((int)su_num(d, "output_index"), open);
        }
        cJSON_Delete(d);
    }
    if (!s->final) fail_msg("the stream did not end with the response");
    /* the items as the events built them are the final response's */
    if (!cJSON_Compare(s->output, su_at(s->final, "output"), 1))
        fail_msg("items %s\nare not the final output %s", cJSON_PrintUnformatted(s->output),
                 cJSON_PrintUnformatted(su_at(s->final, "output")));
}

static void sse_free(sse *s) {
    cJSON_Delete(s->final);
    cJSON_Delete(s->output);
}

static void stream_of(const char *body, sse *s) {
    char *out;
    int st = post(body, NULL, &out);
    if (st != 200) fail_msg("status %d: %s", st, out);
    stream_parse(out, s);
    free(out);
}

/* A response without what differs between two runs of one request: ids and times. */
static cJSON *shape_of(const cJSON *r) {
    cJSON *c = cJSON_Duplicate(r, 1), *it;
    cJSON_DeleteItemFromObject(c, "id");
    cJSON_DeleteItemFromObject(c, "created_at");
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(c, "output")) {
        cJSON_DeleteItemFromObject(it, "id");
        cJSON_DeleteItemFromObject(it, "call_id");
    }
    return c;
}

static void same_shape(const cJSON *a, const cJSON *b) {
    cJSON *x = shape_of(a), *y = shape_of(b);
    if (!cJSON_Compare(x, y, 1)) fail_msg("%s\nis not\n%s", cJSON_PrintUnformatted(x), cJSON_PrintUnformatted(y));
    cJSON_Delete(x);
    cJSON_Delete(y);
}

/* ---- first group: the tiny model ---------------------------------------------- */

#define NO_THINK "\"reasoning\":{\"effort\":\"none\"}"

static void test_plain(void **state) {
    (void)state;
    cJSON *j = response("{\"model\":\"gpt-x\",\"input\":\"Hello there\",\"max_output_tokens\":6,\"instructions\":\"Be "
                        "terse.\",\"metadata\":{\"k\":\"v\"},\"store\":true,\"temperature\":0," NO_THINK "}");
    assert_true(is_id(su_str(j, "id"), "resp_"));
    assert_string_equal(su_str(j, "object"), "response");
    assert_true(su_num(j, "created_at") > 1.7e9);
    assert_string_equal(su_str(j, "model"), "m");
    assert_string_equal(su_str(j, "status"), "incomplete"); /* 6 tokens of noise end nowhere */
    assert_string_equal(su_str(j, "incomplete_details.reason"), "max_output_tokens");
    assert_int_equal(cJSON_GetArraySize(su_at(j, "output")), 1);
    assert_string_equal(su_str(j, "output.0.type"), "message");
    assert_true(is_id(su_str(j, "output.0.id"), "msg_"));
    assert_string_equal(su_str(j, "output.0.role"), "assistant");
    assert_string_equal(su_str(j, "output.0.status"), "incomplete");
    assert_string_equal(su_str(j, "output.0.content.0.type"), "output_text");
    assert_true(strlen(su_str(j, "output.0.content.0.text")) > 0);
    assert_int_equal((int)su_num(j, "usage.output_tokens"), 6);
    assert_int_equal((int)su_num(j, "usage.output_tokens_details.reasoning_tokens"), 0);
    assert_int_equal((int)su_num(j, "usage.total_tokens"), (int)su_num(j, "usage.input_tokens") + 6);
    /* the parameters, echoed; store is false whatever was asked: nothing is kept */
    assert_string_equal(su_str(j, "instructions"), "Be terse.");
    assert_string_equal(su_str(j, "metadata.k"), "v");
    assert_true(cJSON_IsFalse(su_at(j, "store")));
    assert_int_equal((int)su_num(j, "max_output_tokens"), 6);
    assert_string_equal(su_str(j, "tool_choice"), "auto");
    assert_string_equal(su_str(j, "reasoning.effort"), "none");
    assert_string_equal(su_str(j, "text.format.type"), "text");
    /* instructions and a developer message are one system prompt: the same
     * prompt as both in instructions, so the same tokens and greedy text */
    cJSON *k = response("{\"input\":[{\"role\":\"developer\",\"content\":\"Rule two.\"},{\"type\":\"message\",\"role\":"
                        "\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Hello there\"}]}],\"instructions\":"
                        "\"Be terse.\",\"max_output_tokens\":6," NO_THINK "}");
    /* (a reasoning item with no text, as OpenAI's encrypted ones, adds nothing) */
    cJSON *l = response("{\"input\":[{\"type\":\"reasoning\",\"summary\":[],\"encrypted_content\":\"gAAA\"},"
                        "{\"role\":\"user\",\"content\":\"Hello there\"}],\"instructions\":\"Be terse.\\n\\nRule two.\","
                        "\"max_output_tokens\":6," NO_THINK "}");
    assert_int_equal((int)su_num(k, "usage.input_tokens"), (int)su_num(l, "usage.input_tokens"));
    assert_true(su_num(k, "usage.input_tokens") > su_num(j, "usage.input_tokens"));
    char *a = text_of(k), *b = text_of(l);
    assert_string_equal(a, b);
    free(a);
    free(b);
    cJSON_Delete(l);
    cJSON_Delete(k);
    cJSON_Delete(j);
}

static void test_stream(void **state) {
    (void)state;
    static const char BODY[] = "{\"input\":\"Tell me about edges\",\"max_output_tokens\":8," NO_THINK "%s}";
    char b[512];
    snprintf(b, sizeof b, BODY, "");
    cJSON *j = response(b);
    snprintf(b, sizeof b, BODY, ",\"stream\":true");
    sse s;
    stream_of(b, &s);
    assert_string_equal(s.last, "response.incomplete");
    same_shape(s.final, j); /* the final event holds the plain response */
    char *t = text_of(j);
    assert_string_equal(s.text, t); /* the deltas make the text */
    printf("stream: %d events, %zu bytes of text\n", s.events, strlen(t));
    free(t);
    sse_free(&s);
    cJSON_Delete(j);
}

/* Hosted tools are left out of the prompt and said in a header; the function tool is not. */
static void test_ignored_tools(void **state) {
    (void)state;
    char hdr[4400], *out, *h;
    snprintf(hdr, sizeof hdr, HDR " -D %s/headers.txt", dir);
    static const char WITH[] = "{\"input\":\"hi\",\"max_output_tokens\":2,\"tools\":[{\"type\":\"web_search\"},{\"type\":"
                               "\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}},{\"type\":"
                               "\"code_interpreter\",\"container\":{\"type\":\"auto\"}},{\"type\":\"web_search\"}]}";
    assert_int_equal(post(WITH, hdr, &out), 200);
    cJSON *a = su_json(out, "the response");
    free(out);
    snprintf(hdr, sizeof hdr, "%s/headers.txt", dir);
    h = su_slurp(hdr);
    if (!strstr(h, "x-edge0-ignored-tools: web_search,code_interpreter\r\n") &&
        !strstr(h, "X-Edge0-Ignored-Tools: web_search,code_interpreter\r\n"))
        fail_msg("no ignored-tools header: %s", h);
    free(h);
    assert_int_equal(cJSON_GetArraySize(su_at(a, "tools")), 4); /* echoed as sent */
    cJSON *b = response("{\"input\":\"hi\",\"max_output_tokens\":2,\"tools\":[{\"type\":\"function\",\"name\":\"f\","
                        "\"parameters\":{\"type\":\"object\"}}]}");
    assert_int_equal((int)su_num(a, "usage.input_tokens"), (int)su_num(b, "usage.input_tokens"));
    cJSON *c = response("{\"input\":\"hi\",\"max_output_tokens\":2}");
    assert_true(su_num(c, "usage.input_tokens") < su_num(b, "usage.input_tokens")); /* f is in the prompt */
    cJSON_Delete(c);
    cJSON_Delete(b);
    cJSON_Delete(a);
}

/* tool_choice required and named on the noise weights: constrained
 * decoding gives a function_call item whose arguments are valid JSON
 * (with text.format too: the call is the whole output). */
static void test_forced_tool(void **state) {
    (void)state;
    static const char BODY[] =
        "{\"input\":\"Is it on?\",\"max_output_tokens\":200," NO_THINK ",\"parallel_tool_calls\":false,\"tools\":[{\"type\":"
        "\"function\",\"name\":\"set\",\"strict\":true,\"parameters\":{\"type\":\"object\",\"properties\":{\"on\":{"
        "\"type\":\"boolean\"},\"mode\":{\"enum\":[\"a\",\"b\"]}},\"required\":[\"on\",\"mode\"],\"additionalProperties\":"
        "false}},{\"type\":\"namespace\",\"name\":\"ns\",\"tools\":[{\"type\":\"function\",\"name\":\"get\",\"parameters\":{"
        "\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"boolean\"}},\"required\":[\"k\"]}}]}],\"tool_choice\":%s%s%s}";
    static const char *const CHOICE[] = {"\"required\"", "{\"type\":\"function\",\"name\":\"set\"}",
                                         "{\"type\":\"function\",\"name\":\"get\",\"namespace\":\"ns\"}"};
    for (int i = 0; i < 3; i++)
        for (int stream = 0; stream < 2; stream++) {
            char b[2048];
            /* a named function with text.format, as the Agents SDK sends them: the call is the output */
            snprintf(b, sizeof b, BODY, CHOICE[i], stream ? ",\"stream\":true" : "",
                     i == 1 ? ",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"o\",\"schema\":{\"type\":"
                              "\"object\",\"properties\":{\"s\":{\"type\":\"string\"}}}}}"
                            : "");
            sse s = {0};
            cJSON *j = NULL;
            if (stream) stream_of(b, &s);
            else j = response(b);
            const cJSON *r = stream ? s.final : j, *fc = NULL, *it;
            cJSON_ArrayForEach(it, su_at(r, "output")) if (!strcmp(su_str(it, "type"), "function_call")) fc = it;
            if (!fc) fail_msg("no function_call item: %s", cJSON_PrintUnformatted(r));
            assert_true(is_id(su_str(fc, "call_id"), "call_"));
            assert_true(is_id(su_str(fc, "id"), "fc_"));
            cJSON *args = su_json(su_str(fc, "arguments"), "the arguments");
            if (i == 2) {
                assert_string_equal(su_str(fc, "name"), "get");
                assert_string_equal(su_str(fc, "namespace"), "ns");
                assert_true(cJSON_IsBool(su_at(args, "k")));
            } else {
                if (i == 1) assert_string_equal(su_str(fc, "name"), "set");
                if (!strcmp(su_str(fc, "name"), "set")) {
                    assert_true(cJSON_IsBool(su_at(args, "on")));
                    const char *m = su_str(args, "mode");
                    assert_true(!strcmp(m, "a") || !strcmp(m, "b"));
                }
            }
            assert_string_equal(su_str(r, "status"), "completed");
            if (stream) assert_int_equal(s.n_args, 1);
            cJSON_Delete(args);
            sse_free(&s);
            cJSON_Delete(j);
        }
}

/* A forced call cut off by max_output_tokens: incomplete, the call as far
 * as it got (valid JSON arguments) or none, never markup in a message. */
static void test_forced_cut(void **state) {
    (void)state;
    int calls = 0;
    for (int n = 4; n <= 40; n += 6) {
        char b[1024];
        snprintf(b, sizeof b,
                 "{\"input\":\"Go\",\"max_output_tokens\":%d," NO_THINK ",\"tool_choice\":\"required\",\"tools\":[{"
                 "\"type\":\"function\",\"name\":\"note\",\"parameters\":{\"type\":\"object\",\"properties\":{"
                 "\"text\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},\"required\":[\"text\",\"n\"]}}]}",
                 n);
        cJSON *j = response(b);
        const cJSON *it;
        if (strcmp(su_str(j, "status"), "incomplete")) {
            cJSON_Delete(j); /* the call was short enough to end */
            continue;
        }
        assert_string_equal(su_str(j, "incomplete_details.reason"), "max_output_tokens");
        cJSON_ArrayForEach(it, su_at(j, "output")) {
            const char *t = su_str(it, "type");
            if (!strcmp(t, "function_call")) {
                cJSON *a = su_json(su_str(it, "arguments"), "the cut call's arguments");
                assert_true(cJSON_IsObject(a));
                cJSON_Delete(a);
                calls++;
            } else {
                char *x = text_of(j);
                if (strstr(x, "<tool_call>") || strstr(x, "<function")) fail_msg("markup in the text: %s", x);
                free(x);
            }
        }
        cJSON_Delete(j);
    }
    printf("forced calls cut off: %d reported as far as they got\n", calls);
    assert_true(calls > 0);
}

/* text.format json_schema on the noise weights: the text is valid JSON of the schema. */
static void test_json_schema(void **state) {
    (void)state;
    cJSON *j = response("{\"input\":\"Answer\",\"max_output_tokens\":200," NO_THINK ",\"text\":{\"format\":{\"type\":"
                        "\"json_schema\",\"name\":\"a\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{"
                        "\"ok\":{\"type\":\"boolean\"},\"n\":{\"type\":\"integer\"}},\"required\":[\"ok\",\"n\"],"
                        "\"additionalProperties\":false}}}}");
    char *t = text_of(j);
    cJSON *v = su_json(t, "the structured output");
    assert_true(cJSON_IsBool(su_at(v, "ok")));
    assert_true(cJSON_IsNumber(su_at(v, "n")));
    assert_int_equal(cJSON_GetArraySize(v), 2);
    assert_string_equal(su_str(j, "text.format.type"), "json_schema"); /* echoed */
    assert_string_equal(su_str(j, "status"), "completed");
    printf("json_schema: %s\n", t);
    cJSON_Delete(v);
    free(t);
    cJSON_Delete(j);
}

/* An error in OpenAI's shape: status, and a message and param naming `what`. */
static void expect_error(const char *body, const char *headers, int status, const char *what) {
    char *out;
    int st = post(body, headers, &out);
    if (st != status) fail_msg("%s\nstatus %d, not %d: %.300s", body, st, status, out);
    cJSON *j = su_json(out, "the error");
    const cJSON *p = su_at(j, "error.param");
    const char *m = su_str(j, "error.message");
    assert_true(strlen(su_str(j, "error.type")) > 0);
    if (what && !strstr(m, what) && !(cJSON_IsString(p) && strstr(p->valuestring, what)))
        fail_msg("the error does not name '%s': %s", what, out);
    cJSON_Delete(j);
    free(out);
}

static void test_errors(void **state) {
    (void)state;
    static const struct {
        const char *body, *what;
    } bad[] = {
        {"{\"model\":\"m\"}", "input"},
        {"{\"input\":[]}", "input"},
        {"{\"input\":7}", "input"},
        {"{\"input\":\"hi\",\"previous_response_id\":\"resp_123\"}", "previous_response_id"},
        {"{\"input\":\"hi\",\"conversation\":\"conv_1\"}", "conversation"},
        {"{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]}", "input[0]"},
        {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"http://x\"}]}]}",
         "input[0].content[0]"},
        {"{\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "input[0].role"},
        {"{\"input\":[{\"role\":\"user\"}]}", "input[0].content"},
        {"{\"input\":[{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"{}\"}]}", "input[0].call_id"},
        {"{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":[{\"type\":\"input_file\"}]}]}",
         "input[0].output[0]"},
        {"{\"input\":[{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\"}]}]}", "input[0].summary[0].text"},
        {"{\"input\":[{\"type\":\"computer_call\",\"call_id\":\"c\"}]}", "computer_call"},
        {"{\"input\":[{\"role\":\"developer\",\"content\":\"only rules\"}]}", "input"},
        {"{\"input\":\"hi\",\"tools\":[{\"type\":\"function\"}]}", "tools[0].name"},
        {"{\"input\":\"hi\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":3}]}", "tools[0].parameters"},
        {"{\"input\":\"hi\",\"tools\":[{\"type\":\"namespace\",\"name\":\"n\"}]}", "tools[0].tools"},
        {"{\"input\":\"hi\",\"tools\":{}}", "tools"},
        {"{\"input\":\"hi\",\"tools\":[{\"type\":\"x\\r\\nSet-Cookie: a=b\"}]}", "tools[0].type"},
        {"{\"input\":\"hi\",\"tools\":[{\"type\":\"\"}]}", "tools[0].type"},
        {"{\"input\":\"hi\",\"tool_choice\":\"sometimes\"}", "tool_choice"},
        {"{\"input\":\"hi\",\"tools\":[{\"type\":\"web_search\"}],\"tool_choice\":{\"type\":\"web_search\"}}", "tool_choice"},
        {"{\"input\":\"hi\",\"tool_choice\":\"required\"}", "tool_choice"},
        {"{\"input\":\"hi\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":\"function\","
         "\"name\":\"g\"}}",
         "g"},
        {"{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a\"}}}", "text.format.schema"},
        {"{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"xml\"}}}", "text.format"},
        {"{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":{\"type\":\"object\"}}}}",
         "text.format.name"},
        {"{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a\",\"schema\":{\"type\":"
         "\"object\"}},\"verbosity\":\"loud\"}}",
         "text.verbosity"},
        {"{\"input\":\"hi\",\"reasoning\":{\"effort\":\"maximal\"}}", "reasoning.effort"},
        {"{\"input\":\"hi\",\"max_output_tokens\":0}", "max_output_tokens"},
        {"{\"input\":\"hi\",\"temperature\":2.5}", "temperature"},
        {"{\"input\":\"hi\",\"top_p\":0}", "top_p"},
        {"{\"input\":\"hi\",\"stream\":\"yes\"}", "stream"},
        {"{\"input\":\"hi\",\"metadata\":{\"k\":1}}", "metadata"},
        {"{\"input\":\"hi\",\"background\":true}", "background"},
        {"{\"input\":\"hi\",\"include\":[\"message.output_text.logprobs\"]}", "include"},
        {"{\"input\":\"hi\",\"top_logprobs\":3}", "top_logprobs"},
        {"{\"input\":\"hi\",\"store\":\"no\"}", "store"},
        {"{\"input\":\"hi\",\"model\":5}", "model"},
        {"[1,2]", "JSON object"},
        {"{\"input\":", "JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) expect_error(bad[i].body, NULL, 400, bad[i].what);
    expect_error("{\"input\":\"hi\"}", "-H 'Authorization: Bearer nope'", 401, NULL);
    char *out;
    assert_int_equal(su_http(port, dir, "GET", "/v1/responses", NULL, HDR, &out), 405);
    free(out);
    /* what Codex sends beside its input is accepted (and without effect) */
    cJSON *j = response("{\"model\":\"gpt-5-codex\",\"instructions\":\"You are Codex.\",\"input\":[{\"type\":\"message\","
                        "\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"<permissions/>\"}]},"
                        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"hi\"}]}],"
                        "\"tools\":[],\"tool_choice\":\"auto\",\"parallel_tool_calls\":false,\"reasoning\":{\"summary\":"
                        "\"auto\"},\"store\":false,\"stream\":false,\"include\":[\"reasoning.encrypted_content\"],"
                        "\"prompt_cache_key\":\"abc\",\"client_metadata\":{\"x\":\"y\"},\"service_tier\":\"auto\","
                        "\"truncation\":\"auto\",\"text\":{\"verbosity\":\"low\"},\"max_output_tokens\":2,"
                        "\"some_future_field\":1}");
    assert_string_equal(su_str(j, "reasoning.summary"), "auto");
    cJSON_Delete(j);
    /* the path without /v1, and the requests in /metrics under their endpoint */
    assert_int_equal(su_http(port, dir, "POST", "/responses", "{\"input\":\"hi\",\"max_output_tokens\":1}", HDR, NULL),
                     200);
    assert_int_equal(su_http(port, dir, "GET", "/metrics", NULL, HDR, &out), 200);
    assert_non_null(strstr(out, "edge0_requests_total{endpoint=\"responses\",status=\"200\"}"));
    assert_non_null(strstr(out, "edge0_requests_total{endpoint=\"responses\",status=\"400\"}"));
    free(out);
}

/* A job that fails while it streams (the engine's 500, or 503 at shutdown):
 * after what was sent, an error event and response.failed with the error. */
static void test_stream_failure(void **state) {
    (void)state;
    srv_job *j = srv_job_new();
    snprintf(j->id, sizeof j->id, "resp_ABCDEFGHIJKLMNOPQRSTUVWX");
    srv_buf_put(&j->content, "Half", 4);
    srv_resp_stream st = {0};
    srv_buf out = {0};
    assert_true(srv_resp_stream_news(&st, j));
    srv_resp_stream_events(&st, &out, j, "m");
    assert_false(srv_resp_stream_news(&st, j));
    j->done = true;
    j->status = 500;
    snprintf(j->err, sizeof j->err, "expert bytes could not be read");
    assert_true(srv_resp_stream_news(&st, j));
    srv_resp_stream_events(&st, &out, j, "m");
    assert_int_equal(st.phase, 2);
    srv_buf_put(&out, "", 0);
    char *err = strstr(out.p, "event: error\n");
    assert_non_null(err);
    sse s;
    stream_parse(out.p, &s);
    assert_string_equal(s.last, "response.failed");
    assert_string_equal(su_str(s.final, "status"), "failed");
    assert_string_equal(su_str(s.final, "error.message"), "expert bytes could not be read");
    assert_string_equal(s.text, "Half");
    assert_string_equal(su_str(s.final, "output.0.status"), "incomplete"); /* the item closed, cut short */
    char *data = strndup(strchr(err, '{'), (size_t)(strstr(err, "\n\n") - strchr(err, '{')));
    cJSON *e = su_json(data, "the error event");
    free(data);
    assert_string_equal(su_str(e, "code"), "server_error");
    assert_string_equal(su_str(e, "message"), "expert bytes could not be read");
    cJSON_Delete(e);
    sse_free(&s);
    free(out.p);
    srv_job_unref(j);
}

/* ---- second group: scripted output ------------------------------------------------
 *
 * srv_start in this process with srv_opts.generate = su_scripted
 * (tests/srvutil.h): it answers with the text after the last "SCRIPT:" in
 * the prompt and keeps the prompt it was given (su_last_prompt). */

static su_inproc ip;
static int ip_setup(void **state) {
    (void)state;
    su_inproc_open(&ip);
    dir = ip.dir;
    su_inproc_start(&ip, KEY, E0_CHAT_QWEN35, NULL);
    port = ip.port;
    return 0;
}

static int ip_teardown(void **state) {
    (void)state;
    su_inproc_close(&ip);
    dir = NULL;
    return 0;
}

static char *prompt_now(void) { return su_last_prompt(); }

#define TOOLS                                                                                                          \
    "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather\",\"parameters\":{\"type\":"   \
    "\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}},{\"type\":"           \
    "\"namespace\",\"name\":\"mcp__docs_\",\"description\":\"Docs\",\"tools\":[{\"type\":\"function\",\"name\":"        \
    "\"search\",\"parameters\":{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"}}}},{\"type\":"      \
    "\"custom\",\"name\":\"patch\"}]},{\"type\":\"web_search\"}]"

/* Qwen3.5's XML form: a thought, a sentence, two calls (the second one a
 * namespaced function, by its flat name). */
static const char SCRIPT[] =
    "Checking.</think>\\n\\nLet me look.\\n\\n<tool_call>\\n<function=get_weather>\\n<parameter=city>\\nZ\\u00fcrich\\n"
    "</parameter>\\n<parameter=days>\\n2\\n</parameter>\\n</function>\\n</tool_call>\\n<tool_call>\\n<function="
    "mcp__docs__search>\\n<parameter=query>\\nedge0\\n</parameter>\\n</function>\\n</tool_call>";

static char *script_body(const char *script, bool stream) {
    char *b = malloc(strlen(script) + 2048);
    sprintf(b, "{\"model\":\"m\",\"max_output_tokens\":300,\"stream\":%s,\"input\":\"SCRIPT:%s\"," TOOLS "}",
            stream ? "true" : "false", script);
    return b;
}

static void check_calls(const cJSON *r) {
    const cJSON *o = su_at(r, "output");
    assert_int_equal(cJSON_GetArraySize(o), 4);
    assert_string_equal(su_str(o, "0.type"), "reasoning");
    assert_true(is_id(su_str(o, "0.id"), "rs_"));
    assert_string_equal(su_str(o, "0.summary.0.type"), "summary_text");
    assert_string_equal(su_str(o, "0.summary.0.text"), "Checking.");
    assert_string_equal(su_str(o, "1.type"), "message");
    assert_string_equal(su_str(o, "1.status"), "completed");
    assert_string_equal(su_str(o, "1.content.0.text"), "Let me look.");
    assert_string_equal(su_str(o, "2.type"), "function_call");
    assert_string_equal(su_str(o, "2.name"), "get_weather");
    assert_false(cJSON_HasObjectItem(cJSON_GetArrayItem(o, 2), "namespace"));
    cJSON *a = su_json(su_str(o, "2.arguments"), "arguments"), *w = su_json("{\"city\":\"Z\xc3\xbcrich\",\"days\":2}", "w");
    assert_true(cJSON_Compare(a, w, 1));
    cJSON_Delete(a);
    cJSON_Delete(w);
    assert_string_equal(su_str(o, "3.name"), "search"); /* Codex's namespace, split back */
    assert_string_equal(su_str(o, "3.namespace"), "mcp__docs_");
    assert_string_equal(su_str(o, "3.arguments"), "{\"query\": \"edge0\"}");
    assert_string_equal(su_str(o, "3.status"), "completed");
    assert_string_not_equal(su_str(o, "2.call_id"), su_str(o, "3.call_id"));
    assert_string_equal(su_str(r, "status"), "completed");
    assert_true(su_num(r, "usage.output_tokens_details.reasoning_tokens") >= 2); /* "Checking." and "</think>" */
    assert_true(su_num(r, "usage.output_tokens_details.reasoning_tokens") < su_num(r, "usage.output_tokens") / 2);
}

static void test_calls(void **state) {
    (void)state;
    char *b = script_body(SCRIPT, false), hdr[4400];
    snprintf(hdr, sizeof hdr, HDR " -D %s/h2.txt", dir);
    char *out;
    assert_int_equal(post(b, hdr, &out), 200);
    cJSON *j = su_json(out, "the response");
    free(out);
    check_calls(j);
    snprintf(hdr, sizeof hdr, "%s/h2.txt", dir);
    char *h = su_slurp(hdr);
    assert_non_null(strcasestr(h, "x-edge0-ignored-tools: custom,web_search"));
    free(h);
    /* the prompt: the functions by their flat names, no hosted tool */
    char *p = prompt_now();
    assert_non_null(strstr(p, "\"name\": \"mcp__docs__search\""));
    assert_non_null(strstr(p, "\"name\": \"get_weather\""));
    assert_null(strstr(p, "web_search"));
    assert_null(strstr(p, "patch"));
    free(p);
    free(b);
    b = script_body(SCRIPT, true);
    sse s;
    stream_of(b, &s);
    check_calls(s.final);
    same_shape(s.final, j);
    assert_string_equal(s.summary, "Checking.");
    assert_string_equal(s.text, "Let me look.");
    assert_int_equal(s.n_args, 2);
    sse_free(&s);
    free(b);
    cJSON_Delete(j);
}


/* An agent's next turn: the output items sent back as they came, then
 * function_call_output items. The tool results reach the prompt, and the
 * whole first turn is reused (the session continues). */
static void test_round_trip(void **state) {
    (void)state;
    char *b = script_body(SCRIPT, false);
    cJSON *j1 = response(b), *body = su_json(b, "the body");
    int history = (int)su_num(j1, "usage.input_tokens") + (int)su_num(j1, "usage.output_tokens");
    cJSON *in = cJSON_CreateArray(), *it;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddStringToObject(u, "role", "user");
    cJSON_AddStringToObject(u, "content", su_str(body, "input"));
    cJSON_AddItemToArray(in, u);
    cJSON_ArrayForEach(it, su_at(j1, "output")) cJSON_AddItemToArray(in, cJSON_Duplicate(it, 1));
    for (int i = 2; i < 4; i++) {
        cJSON *r = cJSON_CreateObject();
        char path[32];
        snprintf(path, sizeof path, "output.%d.call_id", i);
        cJSON_AddStringToObject(r, "type", "function_call_output");
        cJSON_AddStringToObject(r, "call_id", su_str(j1, path));
        if (i == 2) {
            cJSON_AddStringToObject(r, "output", "SCRIPT:</think>\n\nSunny in Z\xc3\xbcrich.");
        } else {
            cJSON *parts = cJSON_AddArrayToObject(r, "output"), *pt = cJSON_CreateObject();
            cJSON_AddStringToObject(pt, "type", "input_text");
            cJSON_AddStringToObject(pt, "text", "DOC-RESULT");
            cJSON_AddItemToArray(parts, pt);
        }
        cJSON_AddItemToArray(in, r);
    }
    cJSON_ReplaceItemInObject(body, "input", in);
    char *text = cJSON_PrintUnformatted(body);
    double before = su_metric(port, dir, HDR, "edge0_cached_prompt_tokens_total");
    cJSON *j2 = response(text);
    char *t = text_of(j2);
    assert_string_equal(t, "Sunny in Z\xc3\xbcrich.");
    assert_string_equal(su_str(j2, "status"), "completed");
    char *p = prompt_now();
    assert_non_null(strstr(p, "<tool_response>\nDOC-RESULT\n</tool_response>"));
    assert_non_null(strstr(p, "<function=mcp__docs__search>")); /* the call, flat again */
    free(p);
    double reused = su_metric(port, dir, HDR, "edge0_cached_prompt_tokens_total") - before;
    if ((int)reused != history) fail_msg("the next turn reused %.0f tokens, not the %d of the first turn", reused, history);
    printf("round trip: %d of %d prompt tokens reused\n", history, (int)su_num(j2, "usage.input_tokens"));
    free(t);
    free(text);
    cJSON_Delete(j2);
    cJSON_Delete(body);
    cJSON_Delete(j1);
    free(b);
}

/* A call cut off by max_output_tokens: incomplete, the call as far as it
 * got (its complete parameters), never markup in a message. */
static void test_truncated_call(void **state) {
    (void)state;
    char *b = script_body("</think>\\n\\nLooking.\\n<tool_call>\\n<function=get_weather>\\n<parameter=days>\\n3\\n"
                          "</parameter>\\n<parameter=city>\\nBe~",
                          false);
    cJSON *j = response(b);
    assert_string_equal(su_str(j, "status"), "incomplete");
    assert_string_equal(su_str(j, "incomplete_details.reason"), "max_output_tokens");
    char *t = text_of(j);
    assert_string_equal(t, "Looking.");
    const cJSON *o = su_at(j, "output");
    assert_int_equal(cJSON_GetArraySize(o), 2);
    assert_string_equal(su_str(o, "1.type"), "function_call");
    assert_string_equal(su_str(o, "1.name"), "get_weather");
    cJSON *a = su_json(su_str(o, "1.arguments"), "the arguments"), *w = su_json("{\"days\":3}", "w");
    assert_true(cJSON_Compare(a, w, 1));
    cJSON_Delete(a);
    cJSON_Delete(w);
    free(t);
    free(b);
    cJSON_Delete(j);
    /* streamed: the same, ending in response.incomplete */
    b = script_body("</think>\\n\\nHalf a sent~", true);
    sse s;
    stream_of(b, &s);
    assert_string_equal(s.last, "response.incomplete");
    assert_string_equal(s.text, "Half a sent");
    assert_string_equal(su_str(s.final, "output.0.status"), "incomplete");
    sse_free(&s);
    free(b);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),       cmocka_unit_test(test_stream),      cmocka_unit_test(test_ignored_tools),
        cmocka_unit_test(test_forced_tool), cmocka_unit_test(test_json_schema), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_forced_cut),  cmocka_unit_test(test_stream_failure),
    };
    const struct CMUnitTest scripted_tests[] = {
        cmocka_unit_test(test_calls),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_truncated_call),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    return failed + cmocka_run_group_tests(scripted_tests, ip_setup, ip_teardown);
}
