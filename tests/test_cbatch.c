/* Continuous batching in `edge0 serve` (issue 16), end to end through the
 * real HTTP server on the reference fixtures: a hybrid DeltaNet family
 * (qwen35moe, mlx layout) and an attention-only one (qwen3moe, hf layout),
 * each with the Qwen3 tokenizer beside it (prompts of single letters, whose
 * ids lie inside the fixtures' 1024-token vocabulary).
 *
 * Greedy completions with logprobs are served by `--parallel 4` while
 * others run, and by `--parallel 1` one at a time: every answer must be the
 * same text with the same tokens and the same log-probabilities (the
 * decode pass gives each sequence logits bit-identical to decoding it
 * alone, and a prompt is prefilled in the same chunks either way). Covered:
 *  - four requests at once with prompts of 3 to ~300 tokens (the long one
 *    prefilled in chunks between the others' decode steps);
 *  - requests that join while a long one decodes;
 *  - a streaming client that leaves mid-batch: the others' answers do not
 *    change, the request is counted cancelled and its slot comes free;
 *  - prompt reuse per slot: a prompt that extends an earlier one finds it
 *    in its slot although another request ran in between;
 *  - prompt chunks of several requests prefilled in one merged pass
 *    (/metrics: a prefill pass of two sequences or more) give the same
 *    answers: each chunk's arithmetic is that of its pass alone;
 *  - /metrics: decode passes of more than one sequence, the TTFT and
 *    inter-token latency histograms, the slot gauges;
 *  - a disk that fails mid-batch (this program's own pread, which the
 *    linker takes over libc's for the engine linked into it, as in
 *    test_faults): every request of the failed pass gets a 500 naming the
 *    error, and the server, in this process, serves the next request
 *    right. */
#include "srvutil.h"

#include "edge0.h"
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char *dir;

/* The disk: reads fail with EIO while g_fail is set. */
static _Atomic int g_fail;

ssize_t pread(int fd, void *buf, size_t n, off_t off);
ssize_t pread64(int fd, void *buf, size_t n, off_t off);
ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    if (atomic_load(&g_fail)) {
        errno = EIO;
        return -1;
    }
    return syscall(SYS_pread64, fd, buf, n, off);
}
ssize_t pread64(int fd, void *buf, size_t n, off_t off) {
    return pread(fd, buf, n, off);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* ---- a raw HTTP client: one request per connection ------------------------------ */

typedef struct {
    int port;
    char *body;       /* request body (owned) */
    int leave_after;  /* > 0: a stream read until this many "data:" events, then the socket closed */
    int status;
    char *resp;       /* the response body, de-chunked */
    pthread_t th;
} req;

static int tcp_open(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

static void send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        assert_true(w > 0);
        p += w;
        n -= (size_t)w;
    }
}

static int count_events(const char *s) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, "data:")); p += 5) n++;
    return n;
}

/* Chunked transfer encoding -> the payload, in place. */
static void dechunk(char *b) {
    char *in = b, *out = b;
    for (;;) {
        char *end;
        unsigned long n = strtoul(in, &end, 16);
        if (end == in || !n) break;
        in = strstr(end, "\r\n");
        if (!in) break;
        in += 2;
        memmove(out, in, n);
        out += n;
        in += n;
        if (!strncmp(in, "\r\n", 2)) in += 2;
    }
    *out = 0;
}

static void *req_run(void *arg) {
    req *r = arg;
    int fd = tcp_open(r->port);
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                      strlen(r->body));
    send_all(fd, head, (size_t)hl);
    send_all(fd, r->body, strlen(r->body));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (n + 4096 > cap) b = realloc(b, cap *= 2);
        ssize_t got = recv(fd, b + n, cap - n - 1, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        n += (size_t)got;
        b[n] = 0;
        if (r->leave_after > 0 && count_events(b) >= r->leave_after) break; /* the client leaves */
    }
    b[n] = 0;
    close(fd);
    r->status = n > 12 ? atoi(b + 9) : -1;
    char *body = strstr(b, "\r\n\r\n");
    body = body ? body + 4 : b + n;
    bool chunked = strstr(b, "chunked") && strstr(b, "chunked") < body;
    r->resp = strdup(body);
    if (chunked) dechunk(r->resp);
    free(b);
    return NULL;
}

static void req_start(req *r, int port, char *body, int leave_after) {
    memset(r, 0, sizeof *r);
    r->port = port;
    r->body = body;
    r->leave_after = leave_after;
    assert_int_equal(pthread_create(&r->th, NULL, req_run, r), 0);
}

static void req_join(req *r) {
    pthread_join(r->th, NULL);
}

static void req_free(req *r) {
    free(r->body);
    free(r->resp);
}

/* A greedy completion of `len` words (single letters: ids < 1024) after
 * `first` (a letter no other prompt of the test starts with, so that no
 * slot reuses another prompt's prefix), with logprobs. */
static char *body_of(char first, int len, int max_tokens, bool stream) {
    char *b = malloc((size_t)len * 2 + 256);
    int at = sprintf(b, "{\"prompt\":\"%c", first);
    uint32_t x = (uint32_t)first * 2654435761u;
    for (int i = 0; i < len; i++) {
        x = x * 1664525u + 1013904223u;
        at += sprintf(b + at, " %c", 'a' + (int)((x >> 16) % 16));
    }
    sprintf(b + at, "\",\"max_tokens\":%d,\"temperature\":0,\"logprobs\":1,\"stream\":%s}", max_tokens,
            stream ? "true" : "false");
    return b;
}

/* The request served alone (the --parallel 1 server, nothing else running). */
static char *alone(int port, char first, int len, int max_tokens) {
    req r;
    req_start(&r, port, body_of(first, len, max_tokens, false), 0);
    req_join(&r);
    if (r.status != 200) fail_msg("status %d: %s", r.status, r.resp);
    char *a = su_completion_answer(r.resp);
    req_free(&r);
    return a;
}

/* A sample of /metrics; absent: a failure, or 0 when `optional`. */
static double metric_of(int port, const char *name, bool optional) {
    char *out = NULL;
    assert_int_equal(su_http(port, dir, "GET", "/metrics", NULL, NULL, &out), 200);
    char key[160];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *at = strstr(out, key);
    if (!at && !optional) fail_msg("no %s in /metrics:\n%s", name, out);
    double v = at ? atof(at + strlen(key)) : 0;
    free(out);
    return v;
}

static double metric(int port, const char *name) { return metric_of(port, name, false); }

/* ---- the fixture model with a tokenizer ------------------------------------------ */

typedef struct {
    const char *fixture; /* under ../shared/fixtures */
    su_server par, one;  /* --parallel 4, --parallel 1 */
} family;

static family HYBRID = {.fixture = "qwen35moe/mlx"}, ATTN = {.fixture = "qwen3moe/hf"};

static int fam_setup(family *f) {
    char m[1024], cmd[16384];
    snprintf(m, sizeof m, "%s/%s", dir, f->fixture[5] == '5' ? "hybrid" : "attn");
    char src[PATH_MAX];
    assert_non_null(realpath(tu_shared("fixtures"), src)); /* the links must work from anywhere */
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s && ln -s %s/%s/config.json %s/%s/model.safetensors %s/ && "
             "cp assets/qwen3-tokenizer/tokenizer.json %s/",
             m, src, f->fixture, src, f->fixture, m, m);
    assert_int_equal(tu_run(cmd), 0);
    char name[64];
    snprintf(name, sizeof name, "%.4s-par", m + strlen(dir) + 1);
    /* one layer per step while others decode: every prefill that overlaps a
     * decode pauses between layers, and the answers must not change.
     * --gather 4: the first four requests (test_concurrent's, the first
     * this server gets) are admitted together however late their
     * connections come (a busy machine once served them one after the
     * other: "no decode pass of more than one sequence"), so they meet in
     * one batch by construction; later requests are admitted as they come. */
    su_start(&f->par, dir, m, name, "--parallel 4 --ctx 1024 --cache-ram 0 --prefill-layers 1 --gather 4");
    snprintf(name, sizeof name, "%.4s-one", m + strlen(dir) + 1);
    su_start(&f->one, dir, m, name, "--parallel 1 --ctx 1024 --cache-ram 0");
    return 0;
}

static int setup(void **state) {
    (void)state;
    dir = tu_tmpdir();
    fam_setup(&HYBRID);
    fam_setup(&ATTN);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    su_stop(&HYBRID.par);
    su_stop(&HYBRID.one);
    su_stop(&ATTN.par);
    su_stop(&ATTN.one);
    tu_rmtree(dir);
    free(dir);
    return 0;
}

/* ---- the tests ------------------------------------------------------------------ */

/* Four requests at once, prompts of 3 to 300 words, the same answers as
 * alone. The first requests of the --parallel 4 server: it admits them
 * together (--gather 4, fam_setup), so they share decode passes. */
static void concurrent(family *f) {
    static const struct {
        char first;
        int len, max;
    } R[] = {{'a', 3, 160}, {'b', 40, 140}, {'c', 300, 120}, {'d', 12, 150}};
    req r[4];
    for (int i = 0; i < 4; i++) req_start(&r[i], f->par.port, body_of(R[i].first, R[i].len, R[i].max, false), 0);
    for (int i = 0; i < 4; i++) req_join(&r[i]);
    for (int i = 0; i < 4; i++) {
        if (r[i].status != 200) fail_msg("%s request %d: status %d: %s", f->fixture, i, r[i].status, r[i].resp);
        char *got = su_completion_answer(r[i].resp), *want = alone(f->one.port, R[i].first, R[i].len, R[i].max);
        if (strcmp(got, want)) fail_msg("%s request %d (%d words) batched:\n%s\nalone:\n%s", f->fixture, i, R[i].len, got, want);
        free(got);
        free(want);
        req_free(&r[i]);
    }
    /* the batch really held several sequences: not every pass was of one */
    const double ones = metric(f->par.port, "edge0_batch_size_per_step_bucket{le=\"1\"}"),
                 all = metric(f->par.port, "edge0_batch_size_per_step_count");
    if (!(all > ones)) fail_msg("%s: no decode pass of more than one sequence (%g passes, %g of one)", f->fixture, all, ones);
    /* the passes by batch size agree with the histogram, each with its time */
    double by_size = 0;
    for (int n = 1; n <= 4; n++) {
        char name[96], secs[96];
        snprintf(name, sizeof name, "edge0_decode_passes_total{batch=\"%d\"}", n);
        snprintf(secs, sizeof secs, "edge0_decode_pass_seconds_total{batch=\"%d\"}", n);
        const double k = metric_of(f->par.port, name, true), t = metric_of(f->par.port, secs, true);
        if ((k > 0) != (t > 0)) fail_msg("%s: %g passes of %d sequences in %g s", f->fixture, k, n, t);
        by_size += k;
    }
    if (by_size != all) fail_msg("%s: %g passes by batch size, %g in the histogram", f->fixture, by_size, all);
    assert_true(metric_of(f->par.port, "edge0_decode_passes_total{batch=\"1\"}", true) == ones);
    /* and prompts arriving together were prefilled in merged passes */
    const double p1 = metric(f->par.port, "edge0_prefill_seqs_per_pass_bucket{le=\"1\"}"),
                 pall = metric(f->par.port, "edge0_prefill_seqs_per_pass_count");
    if (!(pall > p1)) fail_msg("%s: no prefill pass of more than one sequence (%g passes, %g of one)", f->fixture, pall, p1);
    assert_true(metric(f->one.port, "edge0_prefill_seqs_per_pass_count") ==
                metric(f->one.port, "edge0_prefill_seqs_per_pass_bucket{le=\"1\"}"));
    assert_true(metric(f->one.port, "edge0_prefill_seqs_per_pass_count") >= 4);
    assert_true(metric(f->par.port, "edge0_slots") == 4);
    assert_true(metric(f->one.port, "edge0_slots") == 1);
    /* one pass per step: the --parallel 1 server never batched */
    assert_true(metric(f->one.port, "edge0_batch_size_per_step_count") ==
                metric(f->one.port, "edge0_batch_size_per_step_bucket{le=\"1\"}"));
    /* every request's first token, and the ones after it */
    assert_true(metric(f->par.port, "edge0_time_to_first_token_seconds_count") >= 4);
    assert_true(metric(f->par.port, "edge0_inter_token_latency_seconds_count") >= 4 * 100);
}

static void test_concurrent_hybrid(void **state) {
    (void)state;
    concurrent(&HYBRID);
}

static void test_concurrent_attn(void **state) {
    (void)state;
    concurrent(&ATTN);
}

/* A long request decodes; three join while it runs. */
static void join(family *f) {
    const double itl0 = metric(f->par.port, "edge0_inter_token_latency_seconds_count");
    req a, r[3];
    req_start(&a, f->par.port, body_of('e', 20, 700, false), 0);
    /* wait until it decodes (its tokens count in the inter-token histogram) */
    for (int i = 0; i < 2000 && metric(f->par.port, "edge0_inter_token_latency_seconds_count") < itl0 + 2; i++)
        sleep_ms(1);
    static const char first[3] = {'f', 'g', 'h'};
    static const int len[3] = {5, 130, 60};
    for (int i = 0; i < 3; i++) req_start(&r[i], f->par.port, body_of(first[i], len[i], 90, false), 0);
    req_join(&a);
    for (int i = 0; i < 3; i++) req_join(&r[i]);
    assert_int_equal(a.status, 200);
    char *got = su_completion_answer(a.resp), *want = alone(f->one.port, 'e', 20, 700);
    if (strcmp(got, want)) fail_msg("%s: the long request with others joining:\n%s\nalone:\n%s", f->fixture, got, want);
    free(got);
    free(want);
    for (int i = 0; i < 3; i++) {
        if (r[i].status != 200) fail_msg("status %d: %s", r[i].status, r[i].resp);
        got = su_completion_answer(r[i].resp);
        want = alone(f->one.port, first[i], len[i], 90);
        if (strcmp(got, want)) fail_msg("%s: joining request %d:\n%s\nalone:\n%s", f->fixture, i, got, want);
        free(got);
        free(want);
        req_free(&r[i]);
    }
    req_free(&a);
}

static void test_join_hybrid(void **state) {
    (void)state;
    join(&HYBRID);
}

static void test_join_attn(void **state) {
    (void)state;
    join(&ATTN);
}

/* A streaming client leaves mid-batch: the two others do not change, the
 * request is cancelled and every slot comes free. */
static void cancel(family *f) {
    const double cancelled0 = metric(f->par.port, "edge0_requests_cancelled_total");
    req x, r[2];
    req_start(&r[0], f->par.port, body_of('i', 30, 300, false), 0);
    req_start(&x, f->par.port, body_of('j', 10, 900, true), 5); /* leaves after 5 events */
    req_start(&r[1], f->par.port, body_of('k', 70, 300, false), 0);
    req_join(&x);
    for (int i = 0; i < 2; i++) req_join(&r[i]);
    assert_int_equal(x.status, 200);
    static const char first[2] = {'i', 'k'};
    static const int len[2] = {30, 70};
    for (int i = 0; i < 2; i++) {
        if (r[i].status != 200) fail_msg("status %d: %s", r[i].status, r[i].resp);
        char *got = su_completion_answer(r[i].resp), *want = alone(f->one.port, first[i], len[i], 300);
        if (strcmp(got, want)) fail_msg("%s: request %d beside a cancelled one:\n%s\nalone:\n%s", f->fixture, i, got, want);
        free(got);
        free(want);
        req_free(&r[i]);
    }
    req_free(&x);
    /* the server notices within a step; the slot comes free */
    int i = 0;
    while (i++ < 3000 && (metric(f->par.port, "edge0_requests_cancelled_total") < cancelled0 + 1 ||
                          metric(f->par.port, "edge0_requests_running") != 0))
        sleep_ms(2);
    assert_true(metric(f->par.port, "edge0_requests_cancelled_total") >= cancelled0 + 1);
    assert_true(metric(f->par.port, "edge0_requests_running") == 0);
    /* and it still serves */
    char *again = alone(f->par.port, 'l', 8, 20), *want = alone(f->one.port, 'l', 8, 20);
    assert_string_equal(again, want);
    free(again);
    free(want);
}

static void test_cancel_hybrid(void **state) {
    (void)state;
    cancel(&HYBRID);
}

static void test_cancel_attn(void **state) {
    (void)state;
    cancel(&ATTN);
}

/* The prompt tokens a completion reused (usage.prompt_tokens_details.cached_tokens). */
static int cached_of(int port, char first, int len) {
    req r;
    req_start(&r, port, body_of(first, len, 4, false), 0);
    req_join(&r);
    if (r.status != 200) fail_msg("status %d: %s", r.status, r.resp);
    cJSON *j = su_json(r.resp, "a completion");
    int cached = (int)su_num(j, "usage.prompt_tokens_details.cached_tokens");
    cJSON_Delete(j);
    req_free(&r);
    return cached;
}

/* Prompt reuse per slot: a prompt that extends an earlier one goes to the
 * slot that holds it, though another conversation ran in between (the
 * attention-only model keeps a common prefix). With one slot, the other
 * conversation has taken its place. body_of(c, 40) extends body_of(c, 30). */
static void test_slot_reuse(void **state) {
    (void)state;
    for (int one = 0; one < 2; one++) {
        const int port = one ? ATTN.one.port : ATTN.par.port;
        assert_int_equal(cached_of(port, 's', 30), 0);
        assert_int_equal(cached_of(port, 't', 30), 0);
        const int cached = cached_of(port, 's', 40);
        if (one) assert_int_equal(cached, 0);
        else assert_int_equal(cached, 31); /* "s" and its 30 words */
    }
}

/* The prefix cache (--cache-ram) with one slot on the hybrid model, whose
 * DeltaNet states cannot be rewound: a conversation of three turns, each
 * prompt the previous one plus a line of new words, with another
 * conversation between the turns (it takes the only slot, so only the
 * cache can resume the first one). Turns 2 and 3 resume from the previous
 * prompt's snapshot (cached_tokens) and answer exactly as a server without
 * the cache, which evaluates every turn whole. bf16 weights (qwen35moe/hf):
 * their prefill gives the same logits however the prompt is split. */
static char *body_text(const char *prompt, int max_tokens) {
    char *b = malloc(strlen(prompt) * 2 + 128);
    int at = sprintf(b, "{\"prompt\":\"");
    for (const char *p = prompt; *p; p++)
        at += *p == '\n' ? sprintf(b + at, "\\n") : sprintf(b + at, "%c", *p);
    sprintf(b + at, "\",\"max_tokens\":%d,\"temperature\":0,\"logprobs\":1}", max_tokens);
    return b;
}

static void add_words(char *p, char first, int n) {
    uint32_t x = (uint32_t)first * 2246822519u;
    size_t at = strlen(p);
    at += (size_t)sprintf(p + at, "%s%c", at ? "\n" : "", first);
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        at += (size_t)sprintf(p + at, " %c", 'a' + (int)((x >> 16) % 16));
    }
}

static void test_prefix_cache(void **state) {
    (void)state;
    char m[PATH_MAX], src[PATH_MAX], cmd[6 * PATH_MAX];
    snprintf(m, sizeof m, "%s/hybf", dir);
    assert_non_null(realpath(tu_shared("fixtures/qwen35moe/hf"), src));
    snprintf(cmd, sizeof cmd, "mkdir -p %s && ln -s %s/config.json %s/model.safetensors %s/ && "
                              "cp assets/qwen3-tokenizer/tokenizer.json %s/", m, src, src, m, m);
    assert_int_equal(tu_run(cmd), 0);
    su_server sv[2];
    su_start(&sv[0], dir, m, "pc-on", "--parallel 1 --ctx 1024 --cache-ram 256M");
    su_start(&sv[1], dir, m, "pc-off", "--parallel 1 --ctx 1024 --cache-ram 0");
    enum { NREQ = 5 };
    char *ans[2][NREQ];
    int cached[2][NREQ], ptok[2][NREQ];
    for (int k = 0; k < 2; k++) {
        char conv[4096] = "", other[1024] = "";
        for (int i = 0; i < NREQ; i++) {
            const char *p;
            if (i % 2 == 0) { /* the conversation: 50 words, then 20 more per turn */
                add_words(conv, (char)('p' + i / 2), i ? 20 : 50);
                p = conv;
            } else { /* another one between its turns */
                other[0] = 0;
                add_words(other, (char)('x' + i / 2), 40);
                p = other;
            }
            req r;
            req_start(&r, sv[k].port, body_text(p, 12), 0);
            req_join(&r);
            if (r.status != 200) fail_msg("request %d: status %d: %s", i, r.status, r.resp);
            cJSON *j = su_json(r.resp, "a completion");
            cached[k][i] = (int)su_num(j, "usage.prompt_tokens_details.cached_tokens");
            ptok[k][i] = (int)su_num(j, "usage.prompt_tokens");
            cJSON_Delete(j);
            ans[k][i] = su_completion_answer(r.resp);
            req_free(&r);
        }
    }
    for (int i = 0; i < NREQ; i++) {
        print_message("request %d: %d prompt tokens, cached %d with the prefix cache, %d without\n", i,
                      ptok[0][i], cached[0][i], cached[1][i]);
        if (strcmp(ans[0][i], ans[1][i]))
            fail_msg("request %d with the prefix cache:\n%s\nwithout:\n%s", i, ans[0][i], ans[1][i]);
        free(ans[0][i]);
        free(ans[1][i]);
        assert_int_equal(cached[1][i], 0); /* one slot, another conversation between the turns */
    }
    /* turns 2 and 3 resume from the previous turn's prompt: all of it */
    assert_int_equal(cached[0][2], ptok[0][0]);
    assert_int_equal(cached[0][4], ptok[0][2]);
    assert_true(metric(sv[0].port, "edge0_prefix_cache_hits_total") >= 2);
    assert_true(metric(sv[0].port, "edge0_prefix_cache_bytes") <= 256.0 * 1024 * 1024);
    assert_true(metric(sv[0].port, "edge0_prefix_cache_entries") >= 3);
    assert_true(metric(sv[1].port, "edge0_prefix_cache_budget_bytes") == 0);
    su_stop(&sv[0]);
    su_stop(&sv[1]);
}

/* Three requests decode together; the disk fails: each gets a 500 naming
 * the failed evaluation; the disk heals: the next request is served, the
 * answer it gets alone. An in-process server (srv_start) on the hybrid
 * fixture, pread I/O and a cache of two bundles, so every step reads. */
static void test_read_failure(void **state) {
    (void)state;
    char model[PATH_MAX], err[E0_ERR_MAX];
    snprintf(model, sizeof model, "%s/hybrid", dir);
    e0_engine_opts eo;
    e0_engine_opts_default(&eo);
    eo.io = E0_IO_PREAD;
    eo.budget_mode = E0_BUDGET_OFF;
    eo.layer.cache_slots = 2;
    e0_engine *eng;
    e0_text *text;
    if (e0_engine_open(&eng, model, &eo, err) || e0_text_open(&text, model, err)) fail_msg("%s", err);
    srv_opts so;
    srv_opts_default(&so);
    so.engine = eng;
    so.text = text;
    so.model_name = "m";
    so.port = 0;
    so.n_ctx = 1024;
    so.parallel = 3;
    srv *S;
    if (srv_start(&S, &so, err)) fail_msg("%s", err);
    const int port = srv_port(S);
    req r[3];
    for (int i = 0; i < 3; i++) req_start(&r[i], port, body_of((char)('m' + i), 10 + 20 * i, 800, false), 0);
    int i = 0; /* all three decoding */
    while (i++ < 5000 && metric(port, "edge0_batch_size") < 3) sleep_ms(1);
    assert_true(metric(port, "edge0_batch_size") == 3);
    atomic_store(&g_fail, 1);
    for (i = 0; i < 3; i++) req_join(&r[i]);
    atomic_store(&g_fail, 0);
    for (i = 0; i < 3; i++) {
        if (r[i].status != 500 || !strstr(r[i].resp, "evaluation failed") || !strstr(r[i].resp, "model.safetensors"))
            fail_msg("request %d: status %d: %s", i, r[i].status, r[i].resp);
        req_free(&r[i]);
    }
    char *again = alone(port, 'p', 12, 40), *want = alone(HYBRID.one.port, 'p', 12, 40);
    assert_string_equal(again, want);
    free(again);
    free(want);
    srv_stop(S);
    e0_text_free(text);
    e0_engine_free(eng);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_hybrid), cmocka_unit_test(test_concurrent_attn),
        cmocka_unit_test(test_join_hybrid),       cmocka_unit_test(test_join_attn),
        cmocka_unit_test(test_cancel_hybrid),     cmocka_unit_test(test_cancel_attn),
        cmocka_unit_test(test_slot_reuse),        cmocka_unit_test(test_read_failure),
        cmocka_unit_test(test_prefix_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
