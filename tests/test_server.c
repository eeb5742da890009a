/* edge0 serve end to end: the real server on a loopback port, a tiny
 * synthesized model with the real Qwen3 tokenizer, curl as the client.
 *
 * Covered: /health, /v1/models, /metrics; chat and completions, plain and
 * streamed (a stream gives the same text as the plain answer); thinking
 * on/off; seed, stop strings and penalties; every error case of the issue
 * (malformed JSON, wrong types, missing or empty messages, unknown role,
 * body over the limit with and without Content-Length, prompt longer than
 * the context, max_tokens <= 0, unknown endpoint, wrong method, missing or
 * wrong API key, full queue) while a stream is being served, which must
 * finish untouched; 16 concurrent streams; a client that leaves mid-stream
 * frees the engine (timed); the previous conversation's tokens are reused.
 * Plus unit tests of the request parser and the reasoning splitter. The
 * server must exit 0 on SIGTERM (under ASan: without leaks).
 *
 * A random model's greedy answers never end on their own, so every request
 * gives max_tokens. */
#include "testutil.h"
#include "srvutil.h"

#include "edge0.h"
#include "synth/synth.h"
#include "server/request.h"
#include "server/server.h"
#include "server/think.h"
#include "text/chat.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KEY "test-key-123"

static char *dir;
static char model[4200];

typedef struct {
    pid_t pid;
    int port;
    char log[4300];
} server;

static server main_srv;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Starts `edge0 serve` with its log in dir/NAME.log; waits for "listening on". */
static void start_server(server *s, const char *name, const char *args) {
    snprintf(s->log, sizeof s->log, "%s/%s.log", dir, name);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "exec %s serve %s --port 0 --io pread --temp 0 %s 2>%s >&2", tu_bin(), model, args, s->log);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 1200; i++) {
        char *log = su_slurp(s->log);
        const char *at = strstr(log, "listening on http://127.0.0.1:");
        if (at) {
            s->port = atoi(at + strlen("listening on http://127.0.0.1:"));
            free(log);
            assert_true(s->port > 0);
            return;
        }
        int st;
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) fail_msg("the server exited before listening:\n%s", log);
        free(log);
        sleep_ms(50);
    }
    fail_msg("the server did not start listening in 60 s");
}

/* SIGTERM; the server must exit 0 (ASan builds: no leak reports). */
static void stop_server(server *s) {
    kill(s->pid, SIGTERM);
    int st = 0;
    double t0 = now();
    while (waitpid(s->pid, &st, WNOHANG) == 0) {
        if (now() - t0 > 30) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
            fail_msg("the server did not stop within 30 s of SIGTERM");
        }
        sleep_ms(20);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char *log = su_slurp(s->log);
        fail_msg("the server exited with status %d:\n%s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, log);
    }
}

/* ---- curl --------------------------------------------------------------------- */

static int body_seq;

/* The curl command line for a request; the body goes through a file. */
static void curl_cmd(char *cmd, size_t n, const server *s, const char *method, const char *path, const char *body,
                     const char *extra) {
    char file[4400] = "";
    if (body) {
        snprintf(file, sizeof file, "%s/body-%d.json", dir, __atomic_add_fetch(&body_seq, 1, __ATOMIC_RELAXED));
        free(tu_write(dir, strrchr(file, '/') + 1, body, strlen(body)));
    }
    snprintf(cmd, n, "curl -sS -N -X %s %s%s%s %s 'http://127.0.0.1:%d%s'", method, body ? "--data-binary @" : "",
             body ? file : "", body ? " -H 'Content-Type: application/json'" : "", extra ? extra : "", s->port, path);
}

/* One request; *out gets the body (malloc'd), the return value the status. */
static int http_on(const server *s, const char *method, const char *path, const char *body, const char *extra,
                   char **out) {
    char cmd[10000], ex[2000];
    snprintf(ex, sizeof ex, "-w '\\n%%{http_code}' %s", extra ? extra : "-H 'Authorization: Bearer " KEY "'");
    curl_cmd(cmd, sizeof cmd, s, method, path, body, ex);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *b = su_read_all(p);
    pclose(p);
    char *nl = strrchr(b, '\n');
    assert_non_null(nl);
    int status = atoi(nl + 1);
    *nl = 0;
    if (out) *out = b;
    else free(b);
    return status;
}

static int http(const char *method, const char *path, const char *body, char **out) {
    return http_on(&main_srv, method, path, body, NULL, out);
}

static cJSON *json_ok(const char *method, const char *path, const char *body) {
    char *out;
    int st = http(method, path, body, &out);
    if (st != 200) fail_msg("%s %s: status %d: %s", method, path, st, out);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("%s %s: not JSON: %s", method, path, out);
    free(out);
    return j;
}

static const cJSON *at(const cJSON *j, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = j;
    for (char *save, *t = strtok_r(buf, ".", &save); t && v; t = strtok_r(NULL, ".", &save))
        v = t[0] >= '0' && t[0] <= '9' ? cJSON_GetArrayItem(v, atoi(t)) : cJSON_GetObjectItemCaseSensitive(v, t);
    if (!v) fail_msg("no %s in %s", path, cJSON_PrintUnformatted(j));
    return v;
}

static int num(const cJSON *j, const char *path) { return (int)at(j, path)->valuedouble; }
static const char *str(const cJSON *j, const char *path) {
    const cJSON *v = at(j, path);
    if (!cJSON_IsString(v)) fail_msg("%s is not a string", path);
    return v->valuestring;
}

static void check_usage(const cJSON *u, int max_tokens) {
    int p = num(u, "prompt_tokens"), c = num(u, "completion_tokens");
    assert_true(p > 0);
    assert_int_equal(c, max_tokens);
    assert_int_equal(num(u, "total_tokens"), p + c);
    assert_true(num(u, "prompt_tokens_details.cached_tokens") <= p);
}

/* A chat body with one user message. */
static char *chat_body(const char *user, int max_tokens, const char *extra) {
    char *b = malloc(strlen(user) + 512 + (extra ? strlen(extra) : 0));
    sprintf(b, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%d%s%s}", user,
            max_tokens, extra ? "," : "", extra ? extra : "");
    return b;
}

/* ---- server-sent events ------------------------------------------------------- */

typedef struct {
    char *content, *reasoning;
    int events, done, role_first;
    const char *finish;
    cJSON *usage;       /* from the finish chunk */
    cJSON *usage_chunk; /* from the choices:[] chunk */
    char id[64];
    cJSON *keep[4];
} sse;

static void sse_free(sse *s) {
    free(s->content);
    free(s->reasoning);
    for (int i = 0; i < 4; i++) cJSON_Delete(s->keep[i]);
}

static void append(char **dst, const char *s) {
    size_t a = *dst ? strlen(*dst) : 0;
    *dst = realloc(*dst, a + strlen(s) + 1);
    strcpy(*dst + a, s);
}

/* Parses a whole event stream; fails the test on anything malformed. */
static void sse_parse(const char *text, sse *s, int chat) {
    memset(s, 0, sizeof *s);
    s->content = strdup("");
    s->reasoning = strdup("");
    int keep = 0;
    for (const char *p = text; *p;) {
        const char *end = strstr(p, "\n\n");
        if (!end) fail_msg("an event does not end with a blank line: '%s'", p);
        if (strncmp(p, "data: ", 6)) fail_msg("an event without 'data: ': '%.*s'", (int)(end - p), p);
        if (s->done) fail_msg("an event after [DONE]");
        char *data = strndup(p + 6, (size_t)(end - p - 6));
        p = end + 2;
        if (!strcmp(data, "[DONE]")) {
            s->done = 1;
            free(data);
            continue;
        }
        cJSON *j = cJSON_Parse(data);
        if (!j) fail_msg("an event is not JSON: %s", data);
        free(data);
        if (cJSON_GetObjectItem(j, "error")) fail_msg("error event: %s", cJSON_PrintUnformatted(j));
        assert_string_equal(str(j, "object"), chat ? "chat.completion.chunk" : "text_completion");
        if (!s->events) snprintf(s->id, sizeof s->id, "%s", str(j, "id"));
        assert_string_equal(str(j, "id"), s->id);
        s->events++;
        const cJSON *ch = at(j, "choices");
        if (!cJSON_GetArraySize(ch)) {
            assert_true(keep < 4);
            s->usage_chunk = cJSON_GetObjectItem(j, "usage");
            s->keep[keep++] = j;
            continue;
        }
        const cJSON *c0 = cJSON_GetArrayItem(ch, 0), *fr = cJSON_GetObjectItem(c0, "finish_reason");
        if (chat) {
            const cJSON *d = cJSON_GetObjectItem(c0, "delta"), *v;
            if (s->events == 1) s->role_first = cJSON_GetObjectItem(d, "role") != NULL;
            if ((v = cJSON_GetObjectItem(d, "content"))) append(&s->content, v->valuestring);
            if ((v = cJSON_GetObjectItem(d, "reasoning_content"))) append(&s->reasoning, v->valuestring);
        } else {
            append(&s->content, str(c0, "text"));
        }
        if (fr && cJSON_IsString(fr)) {
            assert_null(s->finish);
            assert_true(keep < 4);
            s->finish = fr->valuestring;
            s->usage = cJSON_GetObjectItem(j, "usage");
            s->keep[keep++] = j;
            continue;
        }
        cJSON_Delete(j);
    }
    assert_true(s->done);
    assert_non_null(s->finish);
}

/* ---- raw sockets (a client that leaves mid-stream) ---------------------------- */

static int raw_open(int port, const char *path, const char *body) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " KEY
                     "\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                     path, strlen(body));
    assert_int_equal(write(fd, head, (size_t)n), n);
    assert_int_equal(write(fd, body, strlen(body)), (ssize_t)strlen(body));
    return fd;
}

/* Reads until `events` "data: " events have arrived (up to 60 s). */
static void raw_events(int fd, int events) {
    char buf[65536];
    size_t n = 0;
    double t0 = now();
    for (;;) {
        int k = 0;
        buf[n] = 0;
        for (const char *p = buf; (p = strstr(p, "data: ")); p++) k++;
        if (k >= events) return;
        if (now() - t0 > 60) fail_msg("only %d events in 60 s", k);
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r <= 0) fail_msg("the stream ended after %d events: %s", k, buf);
        n += (size_t)r;
        if (n > sizeof buf - 2) n = 0; /* only the count of recent events matters */
    }
}

/* The value of a metric line "name value" (first match), or -1. */
static double metric(const char *text, const char *name) {
    for (const char *p = text; (p = strstr(p, name)); p++)
        if ((p == text || p[-1] == '\n') && (p[strlen(name)] == ' ')) return atof(p + strlen(name) + 1);
    return -1;
}

/* ---- setup --------------------------------------------------------------------- */

static int setup(void **state) {
    (void)state;
    dir = tu_tmpdir();
    char err[E0_ERR_MAX], cmd[8800];
    snprintf(model, sizeof model, "%s/m", dir);
    if (e0_synth_write(e0_synth_find("tiny"), model, 11, err)) fail_msg("%s", err);
    snprintf(cmd, sizeof cmd, "cp assets/qwen3-tokenizer/tokenizer.json %s/", model);
    assert_int_equal(tu_run(cmd), 0);
    start_server(&main_srv, "main", "--ctx 2048 --max-queue 32 --api-key " KEY);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    stop_server(&main_srv);
    tu_rmtree(dir);
    free(dir);
    dir = NULL;
    return 0;
}

/* ---- unit tests ------------------------------------------------------------------ */

typedef struct {
    char r[4096], c[4096];
} split_out;

static int collect(void *user, int reasoning, const char *s, size_t n) {
    split_out *o = user;
    strncat(reasoning ? o->r : o->c, s, n);
    return 0;
}

/* The streaming splitter gives chat_split_reasoning's answer for every way
 * of cutting the text into pieces (except "R</think>C" without an opening
 * tag, which it leaves as content; see think.h). */
static void test_think_split(void **state) {
    (void)state;
    static const char *cases[] = {
        "<think>\nLet me see.\n</think>\n\nThe answer.",
        "  <think>R</think>C",
        "<think>\n\n</think>\n\nHello!",
        "<think>cut off while thinking  \n",
        "<think>",
        "<thin",
        "no think at all",
        "  leading spaces kept",
        "<think>a </thi b</think>  c </think> d",
        "<think>x</think>",
        "",
        "\n\n",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *t = cases[i];
        size_t len = strlen(t);
        chat_split want;
        chat_split_reasoning(t, len, &want);
        for (size_t step = 1; step <= len + 1; step++) {
            split_out o = {{0}, {0}};
            srv_think th;
            srv_think_init(&th);
            for (size_t p = 0; p < len; p += step)
                assert_int_equal(srv_think_feed(&th, t + p, step < len - p ? step : len - p, collect, &o), 0);
            assert_int_equal(srv_think_finish(&th, collect, &o), 0);
            if (strncmp(o.r, want.reasoning, want.reasoning_len) || strlen(o.r) != want.reasoning_len ||
                strncmp(o.c, want.content, want.content_len) || strlen(o.c) != want.content_len ||
                th.has_reasoning != want.has_reasoning)
                fail_msg("case %zu step %zu: got reasoning '%s' content '%s'", i, step, o.r, o.c);
            srv_think_free(&th);
        }
    }
    /* the documented difference: no opening tag, the text stays content */
    split_out o = {{0}, {0}};
    srv_think th;
    srv_think_init(&th);
    srv_think_feed(&th, "R</think>C", 10, collect, &o);
    srv_think_finish(&th, collect, &o);
    assert_string_equal(o.c, "R</think>C");
    assert_string_equal(o.r, "");
    srv_think_free(&th);
}

static void parse_err(srv_kind kind, const char *body, const char *code, const char *param) {
    srv_defaults d;
    srv_defaults_init(&d);
    srv_request r;
    srv_error e;
    if (srv_request_parse(&r, kind, body, strlen(body), &d, &e) == 0) fail_msg("accepted: %s", body);
    if (strcmp(e.code, code) || (param && strcmp(e.param, param)))
        fail_msg("%s: code %s param %s (%s), want %s %s", body, e.code, e.param, e.message, code, param ? param : "");
    assert_int_equal(e.status, 400);
    assert_true(e.message[0]);
    srv_request_free(&r);
}

static void test_request_parse(void **state) {
    (void)state;
    srv_defaults d;
    srv_defaults_init(&d);
    d.sample.max_tokens = 77;
    srv_request r;
    srv_error e;
    const char *ok = "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":[{\"type\":"
                     "\"text\",\"text\":\"hi\"}]},{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"function\":"
                     "{\"name\":\"f\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"content\":\"r\"}],"
                     "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":-1,\"min_p\":0.1,\"seed\":0,\"stop\":[\"a\",\"\",\"bc\"],"
                     "\"presence_penalty\":1.5,\"frequency_penalty\":-1,\"max_completion_tokens\":12,\"stream\":true,"
                     "\"stream_options\":{\"include_usage\":true},\"chat_template_kwargs\":{\"enable_thinking\":false},"
                     "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"n\":1,\"logprobs\":null}";
    assert_int_equal(srv_request_parse(&r, SRV_CHAT, ok, strlen(ok), &d, &e), 0);
    assert_int_equal(cJSON_GetArraySize(r.messages), 4);
    assert_true(r.stream && r.include_usage && !r.enable_thinking);
    assert_true(r.sample.temperature == 0.5f && r.sample.top_p == 0.9f && r.sample.top_k == 0 && r.sample.min_p == 0.1f);
    assert_true(r.sample.seed != 0); /* seed 0 is a real seed, not "random" */
    assert_int_equal(r.sample.n_stop, 2);
    assert_string_equal(r.sample.stop[1], "bc");
    assert_int_equal(r.sample.max_tokens, 12);
    assert_non_null(r.tools_json);
    char *prompt;
    size_t len;
    assert_int_equal(srv_request_render(&r, &prompt, &len, &e), 0);
    assert_non_null(strstr(prompt, "<think>\n\n</think>\n\n"));
    assert_non_null(strstr(prompt, "<tools>"));
    free(prompt);
    srv_request_free(&r);
    const char *dflt = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stop\":null,\"tools\":null}";
    assert_int_equal(srv_request_parse(&r, SRV_CHAT, dflt, strlen(dflt), &d, &e), 0);
    assert_int_equal(r.sample.max_tokens, 77);
    assert_true(r.enable_thinking);
    srv_request_free(&r);
    const char *comp = "{\"prompt\":[\"once\"],\"max_tokens\":3,\"stop\":\"x\"}";
    assert_int_equal(srv_request_parse(&r, SRV_COMPLETION, comp, strlen(comp), &d, &e), 0);
    assert_string_equal(r.prompt, "once");
    srv_request_free(&r);

    parse_err(SRV_CHAT, "{", "invalid_json", "");
    parse_err(SRV_CHAT, "[1]", "invalid_json", "");
    parse_err(SRV_CHAT, "{}", "missing_field", "messages");
    parse_err(SRV_CHAT, "{\"messages\":[]}", "invalid_value", "messages");
    parse_err(SRV_CHAT, "{\"messages\":\"hi\"}", "invalid_type", "messages");
    parse_err(SRV_CHAT, "{\"messages\":[1]}", "invalid_type", "messages[0]");
    parse_err(SRV_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "missing_field", "messages[0].role");
    parse_err(SRV_CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "invalid_role", "messages[0].role");
    parse_err(SRV_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "missing_field", "messages[0].content");
    parse_err(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", "invalid_type", "messages[0].content");
    parse_err(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", "invalid_type",
              "messages[0].content");
    const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
    char b[512];
    static const struct {
        const char *field, *code, *param;
    } bad[] = {
        {"\"max_tokens\":0", "invalid_value", "max_tokens"},
        {"\"max_tokens\":-3", "invalid_value", "max_tokens"},
        {"\"max_completion_tokens\":0", "invalid_value", "max_completion_tokens"},
        {"\"max_tokens\":1.5", "invalid_type", "max_tokens"},
        {"\"max_tokens\":\"8\"", "invalid_type", "max_tokens"},
        {"\"temperature\":\"hot\"", "invalid_type", "temperature"},
        {"\"temperature\":-1", "invalid_value", "temperature"},
        {"\"top_p\":0", "invalid_value", "top_p"},
        {"\"min_p\":2", "invalid_value", "min_p"},
        {"\"top_k\":2.5", "invalid_type", "top_k"},
        {"\"presence_penalty\":3", "invalid_value", "presence_penalty"},
        {"\"seed\":\"x\"", "invalid_type", "seed"},
        {"\"stop\":5", "invalid_type", "stop"},
        {"\"stop\":[\"a\",1]", "invalid_type", "stop"},
        {"\"stream\":\"yes\"", "invalid_type", "stream"},
        {"\"stream_options\":1", "invalid_type", "stream_options"},
        {"\"stream_options\":{\"include_usage\":1}", "invalid_type", "stream_options.include_usage"},
        {"\"n\":2", "invalid_value", "n"},
        {"\"model\":3", "invalid_type", "model"},
        {"\"tools\":{}", "invalid_type", "tools"},
        {"\"chat_template_kwargs\":{\"enable_thinking\":\"no\"}", "invalid_type", "chat_template_kwargs.enable_thinking"},
        /* tools and tool_choice */
        {"\"tools\":[1]", "invalid_type", "tools[0]"},
        {"\"tools\":[{\"type\":\"code\"}]", "invalid_value", "tools[0].type"},
        {"\"tools\":[{\"type\":\"function\"}]", "invalid_type", "tools[0].function"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]", "invalid_type", "tools[0].function.name"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a<b\"}}]", "invalid_value",
         "tools[0].function.name"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]", "invalid_type",
         "tools[0].function.parameters"},
        {"\"tool_choice\":\"required\"", "invalid_value", "tool_choice"}, /* without tools */
        {"\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", "invalid_value", "tool_choice"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],\"tool_choice\":{\"type\":\"function\","
         "\"function\":{\"name\":\"f\"}}",
         "invalid_value", "tool_choice"},
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"g\",\"parameters\":{\"type\":\"object\","
         "\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}}}}}],\"tool_choice\":\"required\"",
         "unsupported_value", "tools"}, /* a back-reference: formats and plain patterns are enforced */
        {"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],\"tool_choice\":\"required\","
         "\"response_format\":{\"type\":\"json_object\"}",
         "unsupported_value", "response_format"},
        {"\"tool_choice\":\"sometimes\"", "invalid_value", "tool_choice"},
        {"\"tool_choice\":{\"type\":\"function\"}", "invalid_type", "tool_choice"},
        {"\"parallel_tool_calls\":1", "invalid_type", "parallel_tool_calls"},
        /* accepted and not implemented: a 400 naming the field, never ignored */
        {"\"response_format\":{\"type\":\"xml\"}", "unsupported_value", "response_format"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{}}", "invalid_value", "response_format"},
        {"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"type\":"
         "\"string\",\"pattern\":\"(?=a)\"}}}",
         "unsupported_value", "response_format"}, /* lookahead */
        {"\"response_format\":\"json\"", "invalid_type", "response_format"},
        {"\"logprobs\":1", "invalid_type", "logprobs"},
        {"\"top_logprobs\":2", "invalid_value", "top_logprobs"},
        {"\"logprobs\":true,\"top_logprobs\":21", "invalid_value", "top_logprobs"},
        {"\"logit_bias\":{\"42\":-100}", "unsupported_value", "logit_bias"},
        {"\"functions\":[]", "unsupported_value", "functions"},
        {"\"function_call\":\"auto\"", "unsupported_value", "function_call"},
        {"\"store\":true", "unsupported_value", "store"},
        {"\"modalities\":[\"text\",\"audio\"]", "unsupported_value", "modalities"},
        {"\"audio\":{}", "unsupported_value", "audio"},
        {"\"prediction\":{}", "unsupported_value", "prediction"},
        {"\"reasoning_effort\":\"low\"", "unsupported_value", "reasoning_effort"},
        {"\"web_search_options\":{}", "unsupported_value", "web_search_options"},
        {"\"user\":5", "invalid_type", "user"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(b, sizeof b, "{%s,%s}", m, bad[i].field);
        parse_err(SRV_CHAT, b, bad[i].code, bad[i].param);
    }
    parse_err(SRV_COMPLETION, "{\"max_tokens\":3}", "missing_field", "prompt");
    parse_err(SRV_COMPLETION, "{\"prompt\":\"\"}", "invalid_value", "prompt");
    parse_err(SRV_COMPLETION, "{\"prompt\":[1,2]}", "invalid_type", "prompt");
    parse_err(SRV_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"echo\":true}", "unsupported_value",
              "echo");
    parse_err(SRV_COMPLETION, "{\"prompt\":\"a\",\"echo\":1}", "invalid_type", "echo");
    parse_err(SRV_COMPLETION, "{\"prompt\":\"a\",\"suffix\":\"b\"}", "unsupported_value", "suffix");
    parse_err(SRV_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":6}", "invalid_value", "logprobs");
    parse_err(SRV_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":true}", "invalid_type", "logprobs");
    parse_err(SRV_COMPLETION, "{\"prompt\":\"a\",\"best_of\":3}", "unsupported_value", "best_of");
    parse_err(SRV_COMPLETION, "{\"prompt\":\"a\",\"tools\":[]}", "unsupported_value", "tools");
    /* their neutral values, the developer role (as system), tool_choice none / auto */
    const char *neutral = "{\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},{\"role\":\"user\","
                          "\"content\":\"x\"}],\"response_format\":{\"type\":\"text\"},\"logprobs\":false,\"echo\":false,"
                          "\"logit_bias\":{},\"store\":false,\"user\":\"u1\",\"metadata\":{\"k\":\"v\"},\"modalities\":[\"text\"],"
                          "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":\"none\","
                          "\"parallel_tool_calls\":false}";
    assert_int_equal(srv_request_parse(&r, SRV_CHAT, neutral, strlen(neutral), &d, &e), 0);
    assert_false(r.parse_tools);
    assert_false(r.parallel_tool_calls);
    assert_int_equal(srv_request_render(&r, &prompt, &len, &e), 0);
    assert_non_null(strstr(prompt, "<|im_start|>system\nbe brief\n\n# Tools")); /* tools still rendered, as the template does */
    free(prompt);
    srv_request_free(&r);
    const char *autoc = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"auto\","
                        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}";
    assert_int_equal(srv_request_parse(&r, SRV_CHAT, autoc, strlen(autoc), &d, &e), 0);
    assert_true(r.parse_tools && r.parallel_tool_calls && cJSON_IsArray(r.tools));
    srv_request_free(&r);
    /* the renderer's own checks come back as 400 with the field named */
    const char *badcall = "{\"messages\":[{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{}}]}]}";
    assert_int_equal(srv_request_parse(&r, SRV_CHAT, badcall, strlen(badcall), &d, &e), 0);
    assert_int_equal(srv_request_render(&r, &prompt, &len, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "invalid_message");
    srv_request_free(&r);
}

/* ---- end to end --------------------------------------------------------------------- */

static void test_health_models(void **state) {
    (void)state;
    char *out;
    assert_int_equal(http_on(&main_srv, "GET", "/health", NULL, " ", &out), 200); /* no key needed */
    cJSON *j = cJSON_Parse(out);
    assert_string_equal(str(j, "status"), "ok");
    cJSON_Delete(j);
    free(out);
    j = json_ok("GET", "/v1/models", NULL);
    assert_string_equal(str(j, "object"), "list");
    assert_string_equal(str(j, "data.0.id"), "m");
    assert_string_equal(str(j, "data.0.object"), "model");
    assert_int_equal(num(j, "data.0.meta.n_ctx"), 2048);
    cJSON_Delete(j);
}

static void test_chat(void **state) {
    (void)state;
    char *b = chat_body("Hello, who are you?", 8, "\"temperature\":0");
    double t0 = (double)time(NULL);
    cJSON *j = json_ok("POST", "/v1/chat/completions", b);
    assert_non_null(strstr(str(j, "id"), "chatcmpl-"));
    assert_string_equal(str(j, "object"), "chat.completion");
    assert_string_equal(str(j, "model"), "m");
    assert_true(num(j, "created") >= t0 - 2 && num(j, "created") <= t0 + 60);
    assert_string_equal(str(j, "choices.0.message.role"), "assistant");
    assert_true(strlen(str(j, "choices.0.message.content")) > 0);
    assert_string_equal(str(j, "choices.0.finish_reason"), "length");
    check_usage(at(j, "usage"), 8);
    char *plain = strdup(str(j, "choices.0.message.content"));
    int prompt = num(j, "usage.prompt_tokens");
    cJSON_Delete(j);

    /* the same request streamed: the same text, role first, usage at the end */
    char *sb = chat_body("Hello, who are you?", 8, "\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    char cmd[10000], *out;
    curl_cmd(cmd, sizeof cmd, &main_srv, "POST", "/v1/chat/completions", sb, "-H 'Authorization: Bearer " KEY "'");
    FILE *p = popen(cmd, "r");
    out = su_read_all(p);
    assert_int_equal(pclose(p), 0);
    sse s;
    sse_parse(out, &s, 1);
    assert_true(s.role_first);
    assert_string_equal(s.content, plain);
    assert_string_equal(s.reasoning, "");
    assert_string_equal(s.finish, "length");
    assert_non_null(s.usage_chunk);
    check_usage(s.usage_chunk, 8);
    check_usage(s.usage, 8);
    assert_int_equal(num(s.usage_chunk, "prompt_tokens"), prompt);
    assert_non_null(strstr(s.id, "chatcmpl-"));
    sse_free(&s);
    free(out);
    free(plain);
    free(b);
    free(sb);
}

static void test_thinking(void **state) {
    (void)state;
    static const char *variants[] = {NULL, "\"chat_template_kwargs\":{\"enable_thinking\":false}",
                                     "\"enable_thinking\":false", "\"think\":false",
                                     "\"chat_template_kwargs\":{\"enable_thinking\":true}"};
    int prompt[5];
    for (int i = 0; i < 5; i++) {
        char *b = chat_body("Think about it", 2, variants[i]);
        cJSON *j = json_ok("POST", "/v1/chat/completions", b);
        prompt[i] = num(j, "usage.prompt_tokens");
        /* a random model does not think: no reasoning_content, all content */
        assert_null(cJSON_GetObjectItem(at(j, "choices.0.message"), "reasoning_content"));
        cJSON_Delete(j);
        free(b);
    }
    assert_int_equal(prompt[1], prompt[0] + 4); /* "<think>\n\n</think>\n\n": 4 tokens */
    assert_int_equal(prompt[2], prompt[1]);
    assert_int_equal(prompt[3], prompt[1]);
    assert_int_equal(prompt[4], prompt[0]);
}

static void test_completions(void **state) {
    (void)state;
    const char *b = "{\"prompt\":\"Once upon a time\",\"max_tokens\":6}";
    cJSON *j = json_ok("POST", "/v1/completions", b);
    assert_non_null(strstr(str(j, "id"), "cmpl-"));
    assert_string_equal(str(j, "object"), "text_completion");
    assert_string_equal(str(j, "choices.0.finish_reason"), "length");
    check_usage(at(j, "usage"), 6);
    char *plain = strdup(str(j, "choices.0.text"));
    cJSON_Delete(j);
    char cmd[10000];
    curl_cmd(cmd, sizeof cmd, &main_srv, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":6,\"stream\":true}", "-H 'Authorization: Bearer " KEY "'");
    FILE *p = popen(cmd, "r");
    char *out = su_read_all(p);
    pclose(p);
    sse s;
    sse_parse(out, &s, 0);
    assert_string_equal(s.content, plain);
    assert_null(s.usage_chunk); /* only with stream_options.include_usage */
    check_usage(s.usage, 6);
    sse_free(&s);
    free(out);
    free(plain);
}

static void test_sampling(void **state) {
    (void)state;
    /* seed: the same seed, the same text at temperature 1 */
    char *texts[2];
    for (int i = 0; i < 2; i++) {
        cJSON *j = json_ok("POST", "/v1/completions",
                           "{\"prompt\":\"The weather\",\"max_tokens\":12,\"temperature\":1.0,\"top_k\":0,\"top_p\":1,"
                           "\"min_p\":0,\"seed\":1234,\"presence_penalty\":0.5,\"frequency_penalty\":0.5}");
        texts[i] = strdup(str(j, "choices.0.text"));
        cJSON_Delete(j);
    }
    assert_string_equal(texts[0], texts[1]);
    /* stop: cut the greedy answer at a string taken from its middle */
    cJSON *j = json_ok("POST", "/v1/completions", "{\"prompt\":\"The weather\",\"max_tokens\":12}");
    const char *t = str(j, "choices.0.text");
    size_t len = strlen(t), k = len / 2;
    while (k < len && ((unsigned char)t[k] & 0xc0) == 0x80) k++;
    size_t e = k + 1;
    while (e < len && ((unsigned char)t[e] & 0xc0) == 0x80) e++;
    assert_true(e <= len && k < len);
    char stop[64];
    snprintf(stop, sizeof stop, "%.*s", (int)(e - k), t + k);
    size_t want = (size_t)(strstr(t, stop) - t);
    cJSON *sj = cJSON_CreateObject();
    cJSON_AddStringToObject(sj, "prompt", "The weather");
    cJSON_AddNumberToObject(sj, "max_tokens", 12);
    cJSON_AddStringToObject(sj, "stop", stop);
    char *body = cJSON_PrintUnformatted(sj);
    cJSON *r = json_ok("POST", "/v1/completions", body);
    assert_string_equal(str(r, "choices.0.finish_reason"), "stop");
    assert_int_equal(strlen(str(r, "choices.0.text")), want);
    assert_memory_equal(str(r, "choices.0.text"), t, want);
    cJSON_Delete(r);
    cJSON_Delete(sj);
    cJSON_Delete(j);
    free(body);
    free(texts[0]);
    free(texts[1]);
}

/* One error request: the status, and a JSON error with message, type and code. */
static void expect_error(const server *s, const char *method, const char *path, const char *body, const char *extra,
                         int status, const char *code) {
    char *out;
    int st = http_on(s, method, path, body, extra, &out);
    if (st != status) fail_msg("%s %s %.80s: status %d, want %d: %s", method, path, body ? body : "", st, status, out);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("%s %s: error body is not JSON: %s", method, path, out);
    assert_true(strlen(str(j, "error.message")) > 0);
    assert_true(strlen(str(j, "error.type")) > 0);
    assert_string_equal(str(j, "error.code"), code);
    cJSON_Delete(j);
    free(out);
}

static void all_errors(void) {
    const char *key = "-H 'Authorization: Bearer " KEY "'";
    const server *s = &main_srv;
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\": [", key, 400, "invalid_json");
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"temperature\":\"hot\"}",
                 key, 400, "invalid_type");
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\":{\"role\":\"user\"}}", key, 400, "invalid_type");
    expect_error(s, "POST", "/v1/chat/completions", "{\"max_tokens\":4}", key, 400, "missing_field");
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\":[]}", key, 400, "invalid_value");
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", key, 400,
                 "invalid_role");
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}",
                 key, 400, "invalid_value");
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":-1}",
                 key, 400, "invalid_value");
    expect_error(s, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_completion_tokens\":0}", key, 400, "invalid_value");
    expect_error(s, "POST", "/v1/completions", "{\"prompt\":5}", key, 400, "invalid_type");
    /* a prompt longer than the context (2048) */
    size_t n = 3000 * 6 + 64;
    char *longp = malloc(n);
    strcpy(longp, "{\"prompt\":\"");
    for (int i = 0; i < 3000; i++) strcat(longp, "hello ");
    strcat(longp, "\",\"max_tokens\":4}");
    expect_error(s, "POST", "/v1/completions", longp, key, 400, "context_length_exceeded");
    free(longp);
    /* a body over the limit (1 MiB), with Content-Length and chunked */
    size_t big = (1 << 20) + 4096;
    char *huge = malloc(big + 64);
    strcpy(huge, "{\"prompt\":\"");
    memset(huge + 11, 'a', big);
    strcpy(huge + 11 + big, "\"}");
    expect_error(s, "POST", "/v1/completions", huge, key, 413, "body_too_large");
    expect_error(s, "POST", "/v1/completions", huge, "-H 'Authorization: Bearer " KEY "' -H 'Transfer-Encoding: chunked'",
                 413, "body_too_large");
    free(huge);
    expect_error(s, "GET", "/v1/nothing", NULL, key, 404, "not_found");
    expect_error(s, "POST", "/v2/chat/completions", "{}", key, 404, "not_found");
    expect_error(s, "GET", "/v1/chat/completions", NULL, key, 405, "method_not_allowed");
    expect_error(s, "POST", "/health", "{}", key, 405, "method_not_allowed");
    expect_error(s, "DELETE", "/v1/models", NULL, key, 405, "method_not_allowed");
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", " ", 401,
                 "invalid_api_key");
    expect_error(s, "POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                 "-H 'Authorization: Bearer wrong-key'", 401, "invalid_api_key");
    expect_error(s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer " KEY "x'", 401, "invalid_api_key");
}

/* Every error case, fired while a stream is being served: each gets its
 * answer, and the stream finishes untouched with the right usage. */
static void test_errors_while_streaming(void **state) {
    (void)state;
    /* a stream of about 4 s on this machine (sanitizer builds are ~30x
     * slower), within the server's 2048-position context */
    char *warm = chat_body("How fast are you?", 16, NULL);
    cJSON *w = json_ok("POST", "/v1/chat/completions", warm);
    double tps = at(w, "timings.predicted_per_second")->valuedouble;
    cJSON_Delete(w);
    free(warm);
    const int TOK = tps * 4 > 1500 ? 1500 : tps * 4 < 48 ? 48 : (int)(tps * 4);
    char cmd[10000];
    char *b = chat_body("Tell me a long story", TOK, "\"stream\":true");
    char *bb = chat_body("Tell me a long story", TOK, NULL);
    curl_cmd(cmd, sizeof cmd, &main_srv, "POST", "/v1/chat/completions", b, "-H 'Authorization: Bearer " KEY "'");
    FILE *p = popen(cmd, "r");
    for (int i = 0;; i++) { /* wait until the stream runs */
        char *m;
        assert_int_equal(http("GET", "/metrics", NULL, &m), 200);
        double running = metric(m, "edge0_requests_running");
        free(m);
        if (running == 1) break;
        if (i == 400) fail_msg("the stream never started");
        sleep_ms(10);
    }
    double t0 = now();
    all_errors();
    double dt = now() - t0;
    char *m;
    assert_int_equal(http("GET", "/metrics", NULL, &m), 200);
    double running = metric(m, "edge0_requests_running");
    free(m);
    print_message("all error cases answered in %.2f s, the stream %s\n", dt,
                  running == 1 ? "still running" : "already finished");
    assert_true(running == 1); /* they were answered while it ran */
    char *out = su_read_all(p);
    assert_int_equal(pclose(p), 0);
    sse s;
    sse_parse(out, &s, 1);
    check_usage(s.usage, TOK);
    assert_string_equal(s.finish, "length");
    /* and it is the answer the request gets alone */
    cJSON *j = json_ok("POST", "/v1/chat/completions", bb);
    assert_string_equal(str(j, "choices.0.message.content"), s.content);
    cJSON_Delete(j);
    sse_free(&s);
    free(out);
    free(b);
    free(bb);
}

/* 16 streams at once: all complete, each with its own right answer and usage. */
static void test_concurrent_streams(void **state) {
    (void)state;
    enum { N = 16, TOK = 4, CHECK = 4 };
    FILE *p[N];
    char cmd[10000];
    double t0 = now();
    for (int i = 0; i < N; i++) {
        char user[64];
        snprintf(user, sizeof user, "Question number %d: what is %d + %d?", i, i, 2 * i);
        char *b = chat_body(user, TOK, "\"stream\":true,\"stream_options\":{\"include_usage\":true}");
        curl_cmd(cmd, sizeof cmd, &main_srv, "POST", "/v1/chat/completions", b, "-H 'Authorization: Bearer " KEY "'");
        assert_non_null(p[i] = popen(cmd, "r"));
        free(b);
    }
    sse s[N];
    for (int i = 0; i < N; i++) {
        char *out = su_read_all(p[i]);
        assert_int_equal(pclose(p[i]), 0);
        sse_parse(out, &s[i], 1);
        check_usage(s[i].usage_chunk, TOK);
        free(out);
    }
    double dt = now() - t0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < i; k++) assert_string_not_equal(s[k].id, s[i].id);
    for (int i = 0; i < CHECK; i++) { /* the same answers as alone */
        char user[64];
        snprintf(user, sizeof user, "Question number %d: what is %d + %d?", i * 5, i * 5, 10 * i);
        char *b = chat_body(user, TOK, NULL);
        cJSON *j = json_ok("POST", "/v1/chat/completions", b);
        assert_string_equal(str(j, "choices.0.message.content"), s[i * 5].content);
        assert_int_equal(num(j, "usage.prompt_tokens"), num(s[i * 5].usage_chunk, "prompt_tokens"));
        cJSON_Delete(j);
        free(b);
    }
    print_message("16 concurrent streams of %d tokens: all complete in %.2f s\n", TOK, dt);
    for (int i = 0; i < N; i++) sse_free(&s[i]);
}

/* A client that leaves mid-stream frees the engine: measured. */
static void test_disconnect(void **state) {
    (void)state;
    enum { LONG = 1900 };
    /* this machine's decode speed, to know what the long request would cost */
    char *warm = chat_body("Warm up and measure", 16, NULL);
    cJSON *j = json_ok("POST", "/v1/chat/completions", warm);
    free(warm);
    double tps = at(j, "timings.predicted_per_second")->valuedouble;
    cJSON_Delete(j);
    assert_true(tps > 0);
    char *b = chat_body("Write an endless poem", LONG, "\"stream\":true");
    int fd = raw_open(main_srv.port, "/v1/chat/completions", b);
    free(b);
    raw_events(fd, 4);
    double t_close = now();
    close(fd);
    char *quick = chat_body("Quick one", 4, NULL);
    j = json_ok("POST", "/v1/chat/completions", quick);
    double freed = now() - t_close;
    check_usage(at(j, "usage"), 4);
    cJSON_Delete(j);
    free(quick);
    double full = LONG / tps;
    print_message("disconnect: the next request finished %.3f s after the client left; the abandoned request "
                  "would have run %.1f s more (%d tokens at %.0f tok/s)\n", freed, full, LONG, tps);
    assert_true(freed < full / 5);
    /* the log says the stream ended cancelled (499), long before LONG tokens */
    char *log = NULL;
    const char *line = NULL;
    for (int i = 0; i < 100 && !line; i++, sleep_ms(50)) {
        free(log);
        log = su_slurp(main_srv.log);
        line = strstr(log, " 499 stream ");
    }
    if (!line) fail_msg("no 499 stream line in the log:\n%s", log);
    const char *c = strstr(line, "completion="), *eol = strchr(line, '\n');
    int done = c ? atoi(c + strlen("completion=")) : -1;
    bool cancelled = eol && c && strstr(line, "finish=cancelled") && strstr(line, "finish=cancelled") < eol;
    if (!cancelled) fail_msg("the abandoned request was not logged as cancelled: %.*s", (int)(eol ? eol - line : 80), line);
    print_message("disconnect: the abandoned request stopped after %d of %d tokens\n", done, LONG);
    assert_true(done < LONG / 4);
    free(log);
    char *m;
    assert_int_equal(http("GET", "/metrics", NULL, &m), 200);
    assert_true(metric(m, "edge0_requests_cancelled_total") >= 1);
    free(m);
}

/* A full queue answers 503 with Retry-After, and serves again once it drains. */
static void test_queue_full(void **state) {
    (void)state;
    server q;
    start_server(&q, "queue", "--parallel 1 --max-queue 1 --ctx 2048 --api-key " KEY); /* one slot: the second waits */
    char *b = chat_body("Occupy the engine", 1900, "\"stream\":true");
    int fd = raw_open(q.port, "/v1/chat/completions", b); /* running */
    free(b);
    raw_events(fd, 2);
    char cmd[10000];
    char *wait_body = chat_body("Wait in the queue", 3, NULL);
    curl_cmd(cmd, sizeof cmd, &q, "POST", "/v1/chat/completions", wait_body,
             "-w '\\n%{http_code}' -H 'Authorization: Bearer " KEY "'");
    FILE *p = popen(cmd, "r"); /* queued */
    free(wait_body);
    for (int i = 0;; i++) {
        char *m;
        assert_int_equal(http_on(&q, "GET", "/metrics", NULL, NULL, &m), 200);
        double depth = metric(m, "edge0_queue_depth");
        free(m);
        if (depth == 1) break;
        if (i == 200) fail_msg("the second request never showed in the queue");
        sleep_ms(25);
    }
    char *b3 = chat_body("No room", 3, NULL);
    char *out;
    int st = http_on(&q, "POST", "/v1/chat/completions", b3, "-i -H 'Authorization: Bearer " KEY "'", &out);
    assert_int_equal(st, 503);
    assert_non_null(strcasestr(out, "\r\nRetry-After: "));
    assert_non_null(strstr(out, "\"queue_full\""));
    free(out);
    free(b3);
    close(fd); /* the running one leaves: the queued one runs */
    out = su_read_all(p);
    pclose(p);
    char *nl = strrchr(out, '\n');
    assert_non_null(nl);
    assert_int_equal(atoi(nl + 1), 200);
    free(out);
    stop_server(&q);
}

/* A chat that continues the last conversation does not pay for its history
 * again; nor does a completion that continues the last prompt and answer. */
static void test_reuse(void **state) {
    (void)state;
    cJSON *req = cJSON_Parse("{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                             "{\"role\":\"user\",\"content\":\"First question?\"}],\"max_tokens\":8}");
    int history = 0;
    for (int turn = 0; turn < 3; turn++) {
        char *body = cJSON_PrintUnformatted(req);
        cJSON *j;
        const char *content;
        int prompt, cached, completion;
        if (turn < 2) {
            j = json_ok("POST", "/v1/chat/completions", body);
            content = str(j, "choices.0.message.content");
            prompt = num(j, "usage.prompt_tokens");
            cached = num(j, "usage.prompt_tokens_details.cached_tokens");
            completion = num(j, "usage.completion_tokens");
        } else { /* the third turn streamed */
            cJSON_AddTrueToObject(req, "stream");
            free(body);
            body = cJSON_PrintUnformatted(req);
            char cmd[10000];
            curl_cmd(cmd, sizeof cmd, &main_srv, "POST", "/v1/chat/completions", body,
                     "-H 'Authorization: Bearer " KEY "'");
            FILE *p = popen(cmd, "r");
            char *out = su_read_all(p);
            pclose(p);
            sse s;
            sse_parse(out, &s, 1);
            prompt = num(s.usage, "prompt_tokens");
            cached = num(s.usage, "prompt_tokens_details.cached_tokens");
            completion = num(s.usage, "completion_tokens");
            sse_free(&s);
            free(out);
            j = NULL;
            content = "";
        }
        print_message("reuse: turn %d: prompt %d tokens, %d of them cached (history %d)\n", turn + 1, prompt, cached,
                      history);
        if (turn > 0) assert_int_equal(cached, history); /* everything the session held */
        assert_true(prompt > cached);
        history = prompt + completion;
        cJSON *msgs = cJSON_GetObjectItem(req, "messages"), *a = cJSON_CreateObject(), *u = cJSON_CreateObject();
        cJSON_AddStringToObject(a, "role", "assistant");
        cJSON_AddStringToObject(a, "content", content);
        cJSON_AddItemToArray(msgs, a);
        cJSON_AddStringToObject(u, "role", "user");
        cJSON_AddStringToObject(u, "content", turn ? "And the third?" : "A second question?");
        cJSON_AddItemToArray(msgs, u);
        cJSON_Delete(j);
        free(body);
    }
    cJSON_Delete(req);

    /* completions: the next prompt is the last prompt + its answer + more */
    cJSON *j = json_ok("POST", "/v1/completions", "{\"prompt\":\"In the beginning\",\"max_tokens\":6}");
    int p1 = num(j, "usage.prompt_tokens"), c1 = num(j, "usage.completion_tokens");
    cJSON *next = cJSON_CreateObject();
    char *text = malloc(strlen(str(j, "choices.0.text")) + 64);
    sprintf(text, "In the beginning%s and then", str(j, "choices.0.text"));
    cJSON_AddStringToObject(next, "prompt", text);
    cJSON_AddNumberToObject(next, "max_tokens", 4);
    char *body = cJSON_PrintUnformatted(next);
    cJSON *k = json_ok("POST", "/v1/completions", body);
    assert_int_equal(num(k, "usage.prompt_tokens_details.cached_tokens"), p1 + c1);
    cJSON_Delete(k);
    cJSON_Delete(next);
    cJSON_Delete(j);
    free(body);
    free(text);
}

static void test_metrics(void **state) {
    (void)state;
    char *m;
    assert_int_equal(http("GET", "/metrics", NULL, &m), 200);
    static const char *positive[] = {
        "edge0_requests_total{endpoint=\"chat_completions\",status=\"200\"}",
        "edge0_requests_total{endpoint=\"completions\",status=\"200\"}",
        "edge0_requests_total{endpoint=\"chat_completions\",status=\"400\"}",
        "edge0_requests_total{endpoint=\"other\",status=\"404\"}",
        "edge0_requests_total{endpoint=\"completions\",status=\"413\"}",
        "edge0_requests_total{endpoint=\"chat_completions\",status=\"401\"}",
        "edge0_requests_total{endpoint=\"chat_completions\",status=\"405\"}",
        "edge0_prompt_tokens_total",
        "edge0_cached_prompt_tokens_total",
        "edge0_completion_tokens_total",
        "edge0_prefill_tokens_per_second",
        "edge0_decode_tokens_per_second",
        "edge0_expert_cache_hits_total",
        "edge0_expert_cache_misses_total",
        "edge0_expert_bytes_read_total",
        "edge0_request_duration_seconds_count",
        "edge0_rss_bytes",
    };
    for (size_t i = 0; i < sizeof positive / sizeof *positive; i++)
        if (!(metric(m, positive[i]) > 0)) fail_msg("%s is not positive in:\n%s", positive[i], m);
    assert_true(metric(m, "edge0_queue_depth") == 0);
    assert_true(metric(m, "edge0_queue_capacity") == 32);
    assert_non_null(strstr(m, "# TYPE edge0_requests_total counter"));
    free(m);
    /* one log line per request, with id, status, tokens and time */
    char *log = su_slurp(main_srv.log);
    assert_non_null(strstr(log, "POST /v1/chat/completions 200 prompt="));
    assert_non_null(strstr(log, " 413 body_too_large "));
    free(log);
}

/* JSON Schema keywords (docs/design.md §8.6): a pattern is enforced by the
 * grammar (and measured on /metrics); a keyword checked after generation
 * that no answer can meet (three distinct items out of two values) is
 * generated three times and then reported. Seeded: an unseeded sample may
 * spend its max_tokens on the whitespace the grammar allows. */
static void test_schema_keywords(void **state) {
    (void)state;
    char *m;
    assert_int_equal(http("GET", "/metrics", NULL, &m), 200);
    double g0 = metric(m, "edge0_grammar_requests_total");
    free(m);
    char *b = chat_body("x", 60, "\"temperature\":1,\"seed\":7,\"chat_template_kwargs\":{\"enable_thinking\":false},"
                                 "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":"
                                 "{\"type\":\"string\",\"pattern\":\"^[a-z]{3}-\\\\d{2}$\"}}}");
    cJSON *j = json_ok("POST", "/v1/chat/completions", b);
    free(b);
    if (!strcmp(str(j, "choices.0.finish_reason"), "stop")) {
        cJSON *v = cJSON_Parse(str(j, "choices.0.message.content"));
        assert_true(cJSON_IsString(v) && strlen(v->valuestring) == 6 && v->valuestring[3] == '-');
        cJSON_Delete(v);
    }
    assert_null(cJSON_GetObjectItem(j, "x_edge0_schema_violation"));
    cJSON_Delete(j);
    b = chat_body("x", 200, "\"temperature\":1,\"seed\":7,\"chat_template_kwargs\":{\"enable_thinking\":false},"
                            "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"u\",\"schema\":"
                            "{\"type\":\"array\",\"items\":{\"enum\":[1,2]},\"minItems\":3,\"maxItems\":3,"
                            "\"uniqueItems\":true}}}");
    j = json_ok("POST", "/v1/chat/completions", b);
    free(b);
    assert_string_equal(str(j, "choices.0.finish_reason"), "stop");
    assert_non_null(strstr(str(j, "x_edge0_schema_violation"), "uniqueItems"));
    cJSON_Delete(j);
    /* a forced tool call's arguments, the same way */
    b = chat_body("x", 200, "\"temperature\":1,\"seed\":7,\"chat_template_kwargs\":{\"enable_thinking\":false},\"tool_choice\":"
                            "\"required\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{"
                            "\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"const\":1},"
                            "\"minItems\":2,\"maxItems\":2,\"uniqueItems\":true}},\"required\":[\"a\"],"
                            "\"additionalProperties\":false}}}]");
    j = json_ok("POST", "/v1/chat/completions", b);
    free(b);
    assert_string_equal(str(j, "choices.0.finish_reason"), "tool_calls");
    assert_non_null(strstr(str(j, "x_edge0_schema_violation"), "tool call 0 (f): /a: uniqueItems"));
    cJSON_Delete(j);
    assert_int_equal(http("GET", "/metrics", NULL, &m), 200);
    assert_true(metric(m, "edge0_grammar_requests_total") == g0 + 7); /* the pattern; the array and the call three times */
    assert_true(metric(m, "edge0_grammar_seconds_total") > 0);
    assert_true(metric(m, "edge0_grammar_compile_seconds_total") > 0);
    free(m);
}

/* ---- HTTP basics on the real binary -------------------------------------------------- */

static char *curl_raw(const char *args) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "curl -sS %s 2>&1", args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *b = su_read_all(p);
    pclose(p);
    return b;
}

/* Keep-alive (several requests, a generation among them, over one
 * connection), the Bearer scheme in any case, X-Api-Key, GET /v1/models/{id},
 * the developer role, /tokenize and /detokenize, no CORS unless asked. */
static void test_http_basics(void **state) {
    (void)state;
    int port = main_srv.port;
    char args[2000], *out;
    char *body = chat_body("hi", 2, NULL);
    char *file = tu_write(dir, "keepalive.json", body, strlen(body));
    snprintf(args, sizeof args,
             "-v -o /dev/null -H 'Authorization: Bearer " KEY "' http://127.0.0.1:%d/v1/models http://127.0.0.1:%d/health "
             "--next -v -o /dev/null -H 'Authorization: Bearer " KEY "' -H 'Content-Type: application/json' "
             "--data-binary @%s http://127.0.0.1:%d/v1/chat/completions "
             "--next -v -o /dev/null -H 'Authorization: Bearer " KEY "' http://127.0.0.1:%d/v1/models/m",
             port, port, file, port, port);
    out = curl_raw(args);
    int reused = 0;
    for (const char *p = out; (p = strstr(p, "existing connection")); p++) reused++;
    if (reused != 3 || strcasestr(out, "< Connection: close") || strcasestr(out, "Access-Control-Allow-Origin"))
        fail_msg("4 requests should share one connection (%d re-uses), without CORS headers:\n%s", reused, out);
    free(out);
    free(file);
    free(body);

    assert_int_equal(http_on(&main_srv, "GET", "/v1/models", NULL, "-H 'authorization: bearer " KEY "'", NULL), 200);
    assert_int_equal(http_on(&main_srv, "GET", "/v1/models", NULL, "-H 'Authorization: BEARER   " KEY "'", NULL), 200);
    assert_int_equal(http_on(&main_srv, "GET", "/v1/models", NULL, "-H 'X-Api-Key: " KEY "'", NULL), 200);
    assert_int_equal(http_on(&main_srv, "GET", "/v1/models", NULL, "-H 'authorization: bearer wrong'", NULL), 401);
    assert_int_equal(http_on(&main_srv, "GET", "/v1/models", NULL, "-H 'Authorization: Basic " KEY "'", NULL), 401);

    cJSON *j = json_ok("GET", "/v1/models/m", NULL);
    assert_string_equal(str(j, "id"), "m");
    assert_string_equal(str(j, "object"), "model");
    cJSON_Delete(j);
    assert_int_equal(http("GET", "/v1/models/gpt-4o", NULL, &out), 404);
    j = cJSON_Parse(out);
    assert_string_equal(str(j, "error.code"), "model_not_found");
    assert_string_equal(str(j, "error.type"), "invalid_request_error");
    assert_non_null(strstr(str(j, "error.message"), "gpt-4o"));
    cJSON_Delete(j);
    free(out);

    j = json_ok("POST", "/v1/chat/completions",
                "{\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"hi\"}],"
                "\"max_tokens\":2}");
    assert_string_equal(str(j, "choices.0.finish_reason"), "length");
    cJSON_Delete(j);

    j = json_ok("POST", "/tokenize", "{\"content\":\"Hello <|im_end|> w\\u00f6rld\"}");
    const cJSON *toks = at(j, "tokens");
    assert_true(cJSON_GetArraySize(toks) >= 4);
    bool special = false;
    const cJSON *t;
    cJSON_ArrayForEach(t, toks) special |= t->valuedouble == 151645;
    assert_true(special);
    char *ids = cJSON_PrintUnformatted(toks), req[1024];
    snprintf(req, sizeof req, "{\"tokens\":%s}", ids);
    free(ids);
    cJSON_Delete(j);
    j = json_ok("POST", "/detokenize", req);
    assert_string_equal(str(j, "content"), "Hello <|im_end|> w\xc3\xb6rld");
    cJSON_Delete(j);
    assert_int_equal(http("POST", "/detokenize", "{\"tokens\":[1,-5]}", &out), 400);
    assert_non_null(strstr(out, "\"param\":\"tokens[1]\""));
    free(out);
    assert_int_equal(http("POST", "/tokenize", "{\"text\":\"x\"}", &out), 400);
    assert_non_null(strstr(out, "\"param\":\"content\""));
    free(out);

    /* tool_choice none: tools rendered, nothing parsed; required: a 400 over HTTP too */
    const char *tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    char extra[512];
    snprintf(extra, sizeof extra, "%s,\"tool_choice\":\"none\"", tools);
    body = chat_body("hi", 2, extra);
    j = json_ok("POST", "/v1/chat/completions", body);
    assert_null(cJSON_GetObjectItem(at(j, "choices.0.message"), "tool_calls"));
    cJSON_Delete(j);
    free(body);
    snprintf(extra, sizeof extra, "%s,\"tool_choice\":\"required\",\"think\":false", tools);
    body = chat_body("hi", 200, extra);
    j = json_ok("POST", "/v1/chat/completions", body);
    assert_string_equal(str(j, "choices.0.finish_reason"), "tool_calls");
    assert_string_equal(str(j, "choices.0.message.tool_calls.0.function.name"), "f");
    assert_string_equal(str(j, "choices.0.message.tool_calls.0.function.arguments"), "{}");
    assert_true(num(j, "timings.grammar_masks") >= 0);
    cJSON_Delete(j);
    free(body);
}

/* Checks one "logprobs.content" entry; returns its logprob. `kept`: the
 * most alternatives the final distribution can have (0: no limit). */
static double check_lp_entry(const cJSON *e, int want_top, int kept, bool greedy) {
    double lp = at(e, "logprob")->valuedouble, sum = 0, prev = 1;
    assert_true(lp <= 0);
    assert_true(cJSON_IsString(at(e, "token")) && cJSON_IsArray(at(e, "bytes")));
    const cJSON *top = at(e, "top_logprobs"), *t;
    int n = cJSON_GetArraySize(top);
    assert_int_equal(n, kept && kept < want_top ? kept : want_top);
    bool found = false;
    cJSON_ArrayForEach(t, top) {
        double v = at(t, "logprob")->valuedouble;
        assert_true(v <= prev); /* sorted, most likely first */
        prev = v;
        sum += exp(v);
        if (!strcmp(str(t, "token"), str(e, "token")) && fabs(v - lp) < 1e-6) found = true;
    }
    assert_true(sum <= 1 + 1e-4);
    if (kept && kept <= want_top) assert_true(fabs(sum - 1) < 1e-3); /* the whole final distribution */
    if (greedy) assert_true(fabs(at(top, "0.logprob")->valuedouble - lp) < 1e-6); /* the argmax was taken */
    if (greedy || (kept && kept <= want_top)) assert_true(found); /* the sampled token is among them */
    return lp;
}

/* logprobs / top_logprobs on chat, plain and streamed: one entry per token,
 * sorted alternatives, the sampled one among them, and with top_k 2 a
 * distribution of two tokens that sums to 1. */
static void test_logprobs(void **state) {
    (void)state;
    char *body = chat_body("Count to three.", 4, "\"logprobs\":true,\"top_logprobs\":3,\"seed\":5");
    cJSON *j = json_ok("POST", "/v1/chat/completions", body);
    const cJSON *content = at(j, "choices.0.logprobs.content"), *e;
    assert_int_equal(cJSON_GetArraySize(content), num(j, "usage.completion_tokens"));
    double plain_lp[8];
    int k = 0;
    cJSON_ArrayForEach(e, content) plain_lp[k++] = check_lp_entry(e, 3, 0, true);
    free(body);

    body = chat_body("Count to three.", 4, "\"logprobs\":true,\"top_logprobs\":3,\"seed\":5,\"stream\":true");
    char *out;
    assert_int_equal(http("POST", "/v1/chat/completions", body, &out), 200);
    int n = 0;
    for (char *p = out; (p = strstr(p, "data: {")); p += 6) {
        char *end = strstr(p, "\n\n");
        cJSON *c = cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6));
        const cJSON *lc = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c, "choices"), 0),
                                                                   "logprobs"),
                                              "content");
        cJSON_ArrayForEach(e, lc) {
            assert_true(n < k);
            double v = check_lp_entry(e, 3, 0, true);
            assert_true(fabs(v - plain_lp[n]) < 1e-3);
            assert_string_equal(str(e, "token"), str(cJSON_GetArrayItem(content, n), "token"));
            n++;
        }
        cJSON_Delete(c);
    }
    assert_int_equal(n, k);
    free(out);
    free(body);
    cJSON_Delete(j);

    body = chat_body("Count to three.", 4, "\"logprobs\":true,\"top_logprobs\":5,\"temperature\":1,\"top_k\":2,"
                                          "\"top_p\":1,\"min_p\":0,\"seed\":9");
    j = json_ok("POST", "/v1/chat/completions", body);
    cJSON_ArrayForEach(e, at(j, "choices.0.logprobs.content")) check_lp_entry(e, 5, 2, false);
    cJSON_Delete(j);
    free(body);
    /* without logprobs: null, as before */
    body = chat_body("hi", 2, NULL);
    j = json_ok("POST", "/v1/chat/completions", body);
    assert_true(cJSON_IsNull(at(j, "choices.0.logprobs")));
    cJSON_Delete(j);
    free(body);
}

/* ---- tool calls: an in-process server whose model output is scripted --------------------
 *
 * A random model never writes a tool call, so these tests run srv_start in
 * this process with srv_opts.generate set to su_scripted (tests/srvutil.h):
 * it answers with the text after the last "SCRIPT:" in the prompt (up to
 * the end of that turn), token by token; a script ending in "~" ends as if
 * cut off by max_tokens. Everything else is the real server: parsing, rendering with
 * Qwen3.5's template, the engine thread, the tool-call parser, HTTP. */

static su_inproc inp;
static server ip;

static int ip_setup(void **state) {
    (void)state;
    su_inproc_open(&inp);
    dir = inp.dir; /* request bodies go here (the first group's dir is gone) */
    su_inproc_start(&inp, KEY, E0_CHAT_QWEN35, "https://app.example");
    ip.port = inp.port;
    snprintf(ip.log, sizeof ip.log, "%s/none.log", inp.dir);
    return 0;
}

static int ip_teardown(void **state) {
    (void)state;
    su_inproc_close(&inp);
    dir = NULL;
    return 0;
}

#define TOOLS_JSON                                                                                                     \
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","   \
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"where\":{\"type\":\"object\"}}}}},"  \
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\",\"properties\":"      \
    "{\"query\":{\"type\":\"string\"}}}}}]"

/* The body of a chat request whose answer is `script` (JSON-escaped). */
static char *script_body(const char *script, bool stream, const char *extra) {
    char *b = malloc(strlen(script) + 2048);
    sprintf(b, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"SCRIPT:%s\"}],\"stream\":%s," TOOLS_JSON "%s%s}",
            script, stream ? "true" : "false", extra ? "," : "", extra ? extra : "");
    return b;
}

static cJSON *ip_chat(const char *script, const char *extra) {
    char *body = script_body(script, false, extra), *out;
    int st = http_on(&ip, "POST", "/v1/chat/completions", body, NULL, &out);
    if (st != 200) fail_msg("status %d: %s", st, out);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("not JSON: %s", out);
    free(out);
    free(body);
    return j;
}

/* A stream's text, tool calls and finish reason. */
typedef struct {
    char content[4096], reasoning[4096];
    int n;
    char id[4][64], name[4][64], args[4][2048];
    int pieces[4];
    char finish[32];
} tstream;

static void ip_stream(const char *script, const char *extra, tstream *ts) {
    memset(ts, 0, sizeof *ts);
    char *body = script_body(script, true, extra), *out;
    int st = http_on(&ip, "POST", "/v1/chat/completions", body, NULL, &out);
    if (st != 200) fail_msg("status %d: %s", st, out);
    for (char *p = out; (p = strstr(p, "data: ")); p += 6) {
        if (!strncmp(p + 6, "[DONE]", 6)) break;
        char *end = strstr(p, "\n\n");
        assert_non_null(end);
        cJSON *j = cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6));
        assert_non_null(j);
        const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), *d, *v, *tc;
        if (!c0) {
            cJSON_Delete(j);
            continue;
        }
        d = cJSON_GetObjectItem(c0, "delta");
        if ((v = cJSON_GetObjectItem(d, "content")) && cJSON_IsString(v)) strcat(ts->content, v->valuestring);
        if ((v = cJSON_GetObjectItem(d, "reasoning_content"))) strcat(ts->reasoning, v->valuestring);
        cJSON_ArrayForEach(tc, cJSON_GetObjectItem(d, "tool_calls")) {
            int k = num(tc, "index");
            assert_true(k >= 0 && k < 4);
            if (cJSON_GetObjectItem(tc, "id")) { /* the head: id, type and name, once, in order */
                assert_int_equal(k, ts->n);
                snprintf(ts->id[k], sizeof ts->id[k], "%s", str(tc, "id"));
                assert_string_equal(str(tc, "type"), "function");
                snprintf(ts->name[k], sizeof ts->name[k], "%s", str(tc, "function.name"));
                ts->n++;
            } else {
                assert_true(k == ts->n - 1);
                ts->pieces[k]++;
            }
            strcat(ts->args[k], str(tc, "function.arguments"));
        }
        if ((v = cJSON_GetObjectItem(c0, "finish_reason")) && cJSON_IsString(v))
            snprintf(ts->finish, sizeof ts->finish, "%s", v->valuestring);
        cJSON_Delete(j);
    }
    free(out);
    free(body);
}

static void json_same(const char *got, const char *want) {
    cJSON *g = cJSON_Parse(got), *w = cJSON_Parse(want);
    assert_non_null(w);
    if (!cJSON_Compare(g, w, 1)) fail_msg("got %s, want %s", got, want);
    cJSON_Delete(g);
    cJSON_Delete(w);
}

/* Qwen3.5's XML form, two calls after a thought and a sentence, plain and streamed. */
static const char XML_SCRIPT[] =
    "Checking.</think>\\n\\nLet me look.\\n\\n<tool_call>\\n<function=get_weather>\\n<parameter=city>\\nZ\\u00fcrich "
    "</parameter> <b>\\n</parameter>\\n<parameter=days>\\n2\\n</parameter>\\n<parameter=where>\\n{\\\"lat\\\": [47.4, "
    "{\\\"x\\\": null}]}\\n</parameter>\\n</function>\\n</tool_call>\\n<tool_call>\\n<function=search>\\n"
    "<parameter=query>\\n\\\"edge0\\\"\\n</parameter>\\n</function>\\n</tool_call>";
static const char XML_ARGS0[] = "{\"city\": \"Z\xc3\xbcrich </parameter> <b>\", \"days\": 2, \"where\": {\"lat\": [47.4, "
                                "{\"x\": null}]}}";

static void test_tool_calls(void **state) {
    (void)state;
    cJSON *j = ip_chat(XML_SCRIPT, NULL);
    assert_string_equal(str(j, "choices.0.finish_reason"), "tool_calls");
    assert_string_equal(str(j, "choices.0.message.content"), "Let me look.");
    assert_string_equal(str(j, "choices.0.message.reasoning_content"), "Checking.");
    const cJSON *calls = at(j, "choices.0.message.tool_calls");
    assert_int_equal(cJSON_GetArraySize(calls), 2);
    assert_string_equal(str(calls, "0.type"), "function");
    assert_string_equal(str(calls, "0.function.name"), "get_weather");
    json_same(str(calls, "0.function.arguments"), XML_ARGS0);
    assert_string_equal(str(calls, "1.function.name"), "search");
    json_same(str(calls, "1.function.arguments"), "{\"query\": \"\\\"edge0\\\"\"}");
    const char *id0 = str(calls, "0.id"), *id1 = str(calls, "1.id");
    assert_true(!strncmp(id0, "call_", 5) && strlen(id0) == 29 && strcmp(id0, id1));

    tstream ts;
    ip_stream(XML_SCRIPT, NULL, &ts);
    assert_string_equal(ts.finish, "tool_calls");
    assert_string_equal(ts.content, "Let me look.");
    assert_string_equal(ts.reasoning, "Checking.");
    assert_int_equal(ts.n, 2);
    assert_string_equal(ts.name[0], "get_weather");
    assert_string_equal(ts.args[0], str(calls, "0.function.arguments")); /* the same text as the plain answer */
    assert_string_equal(ts.args[1], str(calls, "1.function.arguments"));
    assert_true(ts.pieces[0] >= 3); /* the arguments came in pieces */
    assert_true(!strncmp(ts.id[0], "call_", 5) && strcmp(ts.id[0], ts.id[1]));
    cJSON_Delete(j);

    /* Qwen3's JSON form, with parallel_tool_calls false: the first call only */
    static const char JSON2[] =
        "</think>\\n\\n<tool_call>\\n{\\\"name\\\": \\\"search\\\", \\\"arguments\\\": {\\\"query\\\": \\\"a "
        "</tool_call> b\\\"}}\\n</tool_call>\\n<tool_call>\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": {}}\\n"
        "</tool_call>";
    j = ip_chat(JSON2, "\"parallel_tool_calls\":false");
    calls = at(j, "choices.0.message.tool_calls");
    assert_int_equal(cJSON_GetArraySize(calls), 1);
    assert_string_equal(str(calls, "0.function.arguments"), "{\"query\": \"a </tool_call> b\"}");
    assert_true(cJSON_IsNull(at(j, "choices.0.message.content")));
    assert_string_equal(str(j, "choices.0.finish_reason"), "tool_calls");
    cJSON_Delete(j);
    j = ip_chat(JSON2, NULL);
    assert_int_equal(cJSON_GetArraySize(at(j, "choices.0.message.tool_calls")), 2);
    cJSON_Delete(j);
}

/* A malformed call ends as content with finish_reason "stop"; one cut off by
 * max_tokens as the call as far as it got (its complete parameters) with
 * "length", never its markup in content; plain and streamed alike. */
static void test_tool_calls_broken(void **state) {
    (void)state;
    static const struct {
        const char *script, *finish, *content, *call, *args;
    } cases[] = {
        {"</think>\\n\\nOK.\\n<tool_call>\\n{\\\"name\\\": 7}\\n</tool_call>", "stop",
         "OK.\n<tool_call>\n{\"name\": 7}\n</tool_call>", NULL, NULL},
        {"</think>\\n\\n<tool_call>\\n<function=search>\\n<parameter=query>\\nhalf~", "length", NULL, "search", "{}"},
        {"</think>\\n\\nLet me look.\\n<tool_call>\\n<function=get_weather>\\n<parameter=city>\\nBern\\n</parameter>\\n"
         "<parameter=days>\\n2~",
         "length", "Let me look.", "get_weather", "{\"city\": \"Bern\"}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cJSON *j = ip_chat(cases[i].script, NULL);
        assert_string_equal(str(j, "choices.0.finish_reason"), cases[i].finish);
        const cJSON *c = at(j, "choices.0.message.content");
        if (cases[i].content) assert_string_equal(c->valuestring, cases[i].content);
        else assert_true(cJSON_IsNull(c) || (cJSON_IsString(c) && !*c->valuestring));
        const cJSON *calls = cJSON_GetObjectItem(at(j, "choices.0.message"), "tool_calls");
        if (!cases[i].call) {
            assert_null(calls);
        } else {
            assert_int_equal(cJSON_GetArraySize(calls), 1);
            assert_string_equal(str(j, "choices.0.message.tool_calls.0.function.name"), cases[i].call);
            assert_string_equal(str(j, "choices.0.message.tool_calls.0.function.arguments"), cases[i].args);
        }
        cJSON_Delete(j);
        tstream ts;
        ip_stream(cases[i].script, NULL, &ts);
        assert_string_equal(ts.finish, cases[i].finish);
        assert_string_equal(ts.content, cases[i].content ? cases[i].content : "");
        assert_int_equal(ts.n, cases[i].call ? 1 : 0);
    }
}

/* The next turn: the call sent back (arguments as a JSON string, as OpenAI
 * clients do) and its result render with Qwen3.5's template; CORS. */
static void test_tool_turn_and_cors(void **state) {
    (void)state;
    char *out;
    const char *body =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"SCRIPT:</think>\\n\\nIt is sunny.\"},{\"role\":\"assistant\","
        "\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":\"{\\\"city\\\": \\\"Bern\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":"
        "\"sunny\"}]," TOOLS_JSON "}";
    assert_int_equal(http_on(&ip, "POST", "/v1/chat/completions", body, NULL, &out), 200);
    cJSON *j = cJSON_Parse(out);
    assert_string_equal(str(j, "choices.0.message.content"), "It is sunny.");
    assert_string_equal(str(j, "choices.0.finish_reason"), "stop");
    cJSON_Delete(j);
    free(out);

    char args[1024];
    snprintf(args, sizeof args, "-i http://127.0.0.1:%d/health", ip.port);
    out = curl_raw(args);
    assert_non_null(strstr(out, "Access-Control-Allow-Origin: https://app.example"));
    assert_non_null(strstr(out, "Vary: Origin"));
    free(out);
    snprintf(args, sizeof args,
             "-i -X OPTIONS -H 'Origin: https://app.example' -H 'Access-Control-Request-Method: POST' "
             "http://127.0.0.1:%d/v1/chat/completions",
             ip.port);
    out = curl_raw(args); /* no API key: a preflight carries none */
    assert_non_null(strstr(out, " 204"));
    assert_non_null(strstr(out, "Access-Control-Allow-Methods: GET, POST, OPTIONS"));
    assert_non_null(strcasestr(out, "Access-Control-Allow-Headers: Authorization, Content-Type"));
    free(out);
}

/* An agent's next turn (the calls sent back as the client got them, with
 * content null, and the tool results) continues the session: every token of
 * the first turn is reused, nothing is evaluated twice. */
static void test_tool_turn_reuse(void **state) {
    (void)state;
    cJSON *j1 = ip_chat(XML_SCRIPT, NULL);
    int history = num(j1, "usage.prompt_tokens") + num(j1, "usage.completion_tokens");
    cJSON *msg = cJSON_Duplicate(at(j1, "choices.0.message"), 1);
    cJSON *body = cJSON_Parse("{\"model\":\"m\",\"messages\":[]," TOOLS_JSON "}");
    cJSON *msgs = cJSON_GetObjectItem(body, "messages"), *user = cJSON_CreateObject();
    char first[4096];
    snprintf(first, sizeof first, "{\"c\":\"SCRIPT:%s\"}", XML_SCRIPT);
    cJSON *fc = cJSON_Parse(first);
    cJSON_AddStringToObject(user, "role", "user");
    cJSON_AddStringToObject(user, "content", cJSON_GetObjectItem(fc, "c")->valuestring);
    cJSON_AddItemToArray(msgs, user);
    cJSON_AddItemToArray(msgs, msg);
    const cJSON *c;
    int i = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(msg, "tool_calls")) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "role", "tool");
        cJSON_AddStringToObject(t, "tool_call_id", str(c, "id"));
        cJSON_AddStringToObject(t, "content", i++ ? "[]" : "SCRIPT:</think>\n\nSunny in Z\u00fcrich.");
        cJSON_AddItemToArray(msgs, t);
    }
    char *text = cJSON_PrintUnformatted(body), *out;
    assert_int_equal(http_on(&ip, "POST", "/v1/chat/completions", text, NULL, &out), 200);
    cJSON *j2 = cJSON_Parse(out);
    assert_string_equal(str(j2, "choices.0.message.content"), "Sunny in Z\u00fcrich.");
    if (num(j2, "usage.prompt_tokens_details.cached_tokens") != history)
        fail_msg("the next turn reused %d tokens, not the %d of the first turn", num(j2, "usage.prompt_tokens_details.cached_tokens"),
                 history);
    assert_true(num(j2, "usage.prompt_tokens") > history);
    printf("tool turn reuse: %d of %d prompt tokens reused\n", history, num(j2, "usage.prompt_tokens"));
    free(out);
    free(text);
    cJSON_Delete(j2);
    cJSON_Delete(fc);
    cJSON_Delete(body);
    cJSON_Delete(j1);
}

/* The official openai npm client (tests/node/openai_tools.cjs, installed by
 * scripts/deps.sh) against this server: its parsing is the reference. */
static void test_node_openai(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "node tests/node/openai_tools.cjs %d " KEY " 2>&1", ip.port);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *out = su_read_all(p);
    int st = pclose(p);
    if (st) fail_msg("the openai client test failed (scripts/deps.sh installs node and the client):\n%s", out);
    printf("%s", out);
    free(out);
}

/* Constrained decoding end to end (tests/node/openai_constrained.cjs): the
 * main server (Qwen3's template: JSON tool calls) and a second one on the
 * same model with Qwen3.5's template (XML tool calls); the random model's
 * noise under a grammar must give valid calls and schema-valid JSON, which
 * ajv checks. */
static void test_node_constrained(void **state) {
    (void)state;
    char cmd[13000], m35[4200];
    snprintf(m35, sizeof m35, "%.4150s/m35", dir);
    snprintf(cmd, sizeof cmd, "cp -r %s %s && cp %s %s/", model, m35, tu_shared("tokenizers/qwen35/chat_template.jinja"),
             m35);
    assert_int_equal(tu_run(cmd), 0);
    char saved[4200];
    snprintf(saved, sizeof saved, "%s", model);
    snprintf(model, sizeof model, "%s", m35);
    server s35;
    start_server(&s35, "qwen35", "--ctx 4096 --api-key " KEY);
    snprintf(model, sizeof model, "%s", saved);
    const double t0 = now();
    snprintf(cmd, sizeof cmd, "node tests/node/openai_constrained.cjs %d %d " KEY " 2>&1", main_srv.port, s35.port);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char *out = su_read_all(p);
    int st = pclose(p);
    char *log = su_slurp(s35.log);
    stop_server(&s35);
    if (st) fail_msg("the constrained-decoding client test failed:\n%s\nqwen3.5 server log:\n%.4000s", out, log);
    printf("%s  (%.1f s)\n", out, now() - t0);
    free(log);
    free(out);
}

/* SIGTERM while a stream runs and another request waits: the waiting one
 * gets 503 at once; with --shutdown-grace long enough the stream ends
 * normally (finish_reason and usage; 300 s, so that a slow sanitizer build
 * on a loaded machine still finishes the 480 tokens: the server exits as
 * soon as the stream ends), with 0 it ends with an error event
 * saying the server is shutting down; either way the server exits 0. */
static void test_sigterm_mid_stream(void **state) {
    (void)state;
    for (int grace = 0; grace < 2; grace++) {
        server g;
        start_server(&g, grace ? "grace300" : "grace0",
                     grace ? "--parallel 1 --shutdown-grace 300 --max-queue 4" : "--parallel 1 --shutdown-grace 0 --max-queue 4");
        char cmd[10000], cmd2[10000], *m = NULL;
        char *b = chat_body("Tell me a long story", 480, "\"stream\":true");
        char *q = chat_body("And another", 8, NULL);
        curl_cmd(cmd, sizeof cmd, &g, "POST", "/v1/chat/completions", b,
                 "-H 'Authorization: Bearer " KEY "'");
        curl_cmd(cmd2, sizeof cmd2, &g, "POST", "/v1/chat/completions", q,
                 "-w '\\n%{http_code}' -H 'Authorization: Bearer " KEY "'");
        FILE *p = popen(cmd, "r");
        for (int i = 0;; i++) { /* wait until the stream runs */
            assert_int_equal(http_on(&g, "GET", "/metrics", NULL, NULL, &m), 200);
            const double running = metric(m, "edge0_requests_running");
            free(m);
            if (running == 1) break;
            if (i == 400) fail_msg("the stream never started");
            sleep_ms(10);
        }
        FILE *p2 = popen(cmd2, "r"); /* queued behind the stream */
        for (int i = 0;; i++) {
            assert_int_equal(http_on(&g, "GET", "/metrics", NULL, NULL, &m), 200);
            const double queued = metric(m, "edge0_queue_depth");
            free(m);
            if (queued == 1) break;
            if (i == 400) fail_msg("the second request never queued");
            sleep_ms(10);
        }
        kill(g.pid, SIGTERM);
        char *out2 = su_read_all(p2);
        pclose(p2);
        const char *nl = strrchr(out2, '\n');
        assert_non_null(nl);
        assert_int_equal(atoi(nl + 1), 503);
        assert_non_null(strstr(out2, "shutting down"));
        char *out = su_read_all(p);
        assert_int_equal(pclose(p), 0);
        if (grace) {
            sse s;
            sse_parse(out, &s, 1);
            check_usage(s.usage, 480);
            assert_string_equal(s.finish, "length");
            sse_free(&s);
        } else if (!strstr(out, "shutting down")) {
            fail_msg("the cancelled stream does not say why:\n%s", out);
        }
        stop_server(&g); /* exits 0 */
        printf("  --shutdown-grace %d: %s\n", grace ? 300 : 0,
               grace ? "the stream finished; the queued request got 503"
                     : "the stream ended with an error event; the queued request got 503");
        free(out);
        free(out2);
        free(b);
        free(q);
    }
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_think_split),
        cmocka_unit_test(test_request_parse),
        cmocka_unit_test(test_health_models),
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_thinking),
        cmocka_unit_test(test_completions),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_errors_while_streaming),
        cmocka_unit_test(test_concurrent_streams),
        cmocka_unit_test(test_disconnect),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_reuse),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_schema_keywords),
        cmocka_unit_test(test_http_basics),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_node_constrained),
        cmocka_unit_test(test_sigterm_mid_stream),
    };
    const struct CMUnitTest tools[] = {
        cmocka_unit_test(test_tool_calls),
        cmocka_unit_test(test_tool_calls_broken),
        cmocka_unit_test(test_tool_turn_and_cors),
        cmocka_unit_test(test_tool_turn_reuse),
        cmocka_unit_test(test_node_openai),
    };
    /* E0_TEST_FILTER=test_sigterm* runs only the tests whose names match */
    if (getenv("E0_TEST_FILTER")) cmocka_set_test_filter(getenv("E0_TEST_FILTER"));
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    return failed + cmocka_run_group_tests(tools, ip_setup, ip_teardown);
}
