/* libFuzzer: the server's request parser (src/server/request.c) and the
 * reasoning splitter (src/server/think.c), without a model.
 *
 * The input is a request body. It is parsed both as a chat completion and
 * as a completion; what parses is rendered to a prompt, and the prompt is
 * split into reasoning and content whole and in uneven pieces. Checked: no
 * crash or leak; a rejection has status 400 (or 500), a code, a type and a
 * message; an accepted request's fields are within their documented ranges;
 * the splitter gives the same answer however the text is cut. src/server/ is
 * not in the fuzz link (it needs libmicrohttpd), so the two files are
 * compiled in here. */
#include "../src/server/request.c"
#include "../src/server/think.c"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok) {
    if (!ok) abort();
}

typedef struct {
    char *p[2];
    size_t n[2];
} split_buf;

static int collect(void *user, int reasoning, const char *s, size_t n) {
    split_buf *b = user;
    char *p = realloc(b->p[reasoning], b->n[reasoning] + n + 1);
    if (!p) return -1;
    memcpy(p + b->n[reasoning], s, n);
    b->n[reasoning] += n;
    b->p[reasoning] = p;
    return 0;
}

static void split(const char *t, size_t len, size_t step, split_buf *out) {
    srv_think th;
    srv_think_init(&th);
    for (size_t i = 0; i < len; i += step) check(srv_think_feed(&th, t + i, step < len - i ? step : len - i, collect, out) == 0);
    check(srv_think_finish(&th, collect, out) == 0);
    srv_think_free(&th);
}

static void split_check(const char *t, size_t len) {
    split_buf whole = {{0}, {0}}, cut = {{0}, {0}};
    split(t, len, len ? len : 1, &whole);
    split(t, len, 1 + len % 7, &cut);
    for (int k = 0; k < 2; k++) {
        check(whole.n[k] == cut.n[k] && (!whole.n[k] || !memcmp(whole.p[k], cut.p[k], whole.n[k])));
        check(whole.n[k] <= len);
        free(whole.p[k]);
        free(cut.p[k]);
    }
}

static void one(srv_kind kind, const char *body, size_t size) {
    srv_defaults d;
    srv_defaults_init(&d);
    srv_request r;
    srv_error e;
    if (srv_request_parse(&r, kind, body, size, &d, &e)) {
        check(e.status == 400 || e.status == 500);
        check(e.code && e.type && e.message[0]);
        srv_request_free(&r);
        return;
    }
    const e0_sample_opts *s = &r.sample;
    check(s->temperature >= 0 && s->temperature <= 100);
    check(s->top_p > 0 && s->top_p <= 1);
    check(s->min_p >= 0 && s->min_p <= 1);
    check(s->top_k >= 0 && s->max_tokens >= 0);
    check(s->n_stop <= SRV_MAX_STOP);
    for (size_t i = 0; i < s->n_stop; i++) check(s->stop[i] && s->stop[i][0]);
    if (kind == SRV_CHAT) check(cJSON_IsArray(r.messages) && cJSON_GetArraySize(r.messages) > 0);
    else check(r.prompt && r.prompt_len == strlen(r.prompt) && r.prompt_len > 0);
    char *prompt;
    size_t len;
    if (srv_request_render(&r, &prompt, &len, &e) == 0) {
        check(strlen(prompt) == len);
        split_check(prompt, len);
        free(prompt);
    } else {
        check((e.status == 400 || e.status == 500) && e.message[0]);
    }
    srv_request_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    one(SRV_CHAT, (const char *)data, size);
    one(SRV_COMPLETION, (const char *)data, size);
    split_check((const char *)data, size);
    return 0;
}
