/* /v1/completions logprobs and echo, end to end: `edge0 serve` on the tiny
 * synthesized model with the real Qwen3 tokenizer, curl as the client.
 *
 * Covered: logprobs 0..5 (tokens, token_logprobs, top_logprobs dicts,
 * text_offset) plain and streamed, the same tokens both ways; the
 * alternatives sorted, the sampled token's log-probability among them, a
 * final distribution of top_k 2 summing to 1; echo alone and with
 * logprobs, where the prompt's tokens carry the log-softmax of the model's
 * logits at the position before them, compared with `edge0 logits` for the
 * same ids within 1e-4 (the first token has none); the errors (logprobs
 * out of range or not an integer, suffix). */
#include "srvutil.h"

#include "edge0.h"
#include "io/safetensors.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

static char *dir;
static const char *model;
static su_server srv;

static int setup(void **state) {
    (void)state;
    dir = tu_tmpdir();
    model = su_model(dir);
    su_start(&srv, dir, model, "completions", "--ctx 1024");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    su_stop(&srv);
    tu_rmtree(dir);
    free(dir);
    return 0;
}

static cJSON *post(const char *body) {
    char *out;
    int st = su_http(srv.port, dir, "POST", "/v1/completions", body, NULL, &out);
    if (st != 200) fail_msg("status %d: %s", st, out);
    cJSON *j = su_json(out, "the completion");
    free(out);
    return j;
}

/* The logprobs of a stream, its chunks' arrays joined; *text the stream's text. */
static cJSON *stream_logprobs(const char *body, char **text) {
    char *out;
    assert_int_equal(su_http(srv.port, dir, "POST", "/v1/completions", body, NULL, &out), 200);
    cJSON *all = cJSON_Parse("{\"tokens\":[],\"token_logprobs\":[],\"top_logprobs\":[],\"text_offset\":[]}");
    static const char *const KEYS[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
    size_t cap = strlen(out) + 1;
    *text = calloc(1, cap);
    for (char *p = out; (p = strstr(p, "data: {")); p += 6) {
        char *end = strstr(p, "\n\n");
        assert_non_null(end);
        cJSON *c = cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6));
        assert_non_null(c);
        const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(c, "choices"), 0), *lp;
        strcat(*text, su_str(c0, "text"));
        if ((lp = cJSON_GetObjectItem(c0, "logprobs")) && !cJSON_IsNull(lp))
            for (int k = 0; k < 4; k++) {
                const cJSON *v;
                cJSON_ArrayForEach(v, su_at(lp, KEYS[k]))
                    cJSON_AddItemToArray(cJSON_GetObjectItem(all, KEYS[k]), cJSON_Duplicate(v, 1));
            }
        cJSON_Delete(c);
    }
    assert_non_null(strstr(out, "data: [DONE]"));
    free(out);
    return all;
}

static size_t utf8_chars(const char *s) {
    size_t c = 0;
    for (; *s; s++) c += ((unsigned char)*s & 0xc0) != 0x80;
    return c;
}

/* Checks the shape and sums of a logprobs object over `text`; `kept`: the
 * size of the final distribution when known (0: unknown), `want`: the
 * alternatives asked for. Returns the number of tokens. */
static int check_logprobs(const cJSON *lp, const char *text, int want, int kept, int first_null) {
    const cJSON *toks = su_at(lp, "tokens"), *lps = su_at(lp, "token_logprobs"), *tops = su_at(lp, "top_logprobs"),
                *offs = su_at(lp, "text_offset");
    int n = cJSON_GetArraySize(toks);
    assert_int_equal(cJSON_GetArraySize(lps), n);
    assert_int_equal(cJSON_GetArraySize(tops), n);
    assert_int_equal(cJSON_GetArraySize(offs), n);
    size_t chars = 0;
    char *joined = calloc(1, strlen(text) * 4 + 1024);
    for (int i = 0; i < n; i++) {
        const char *tok = cJSON_GetArrayItem(toks, i)->valuestring;
        const cJSON *l = cJSON_GetArrayItem(lps, i), *top = cJSON_GetArrayItem(tops, i), *e;
        assert_int_equal((int)cJSON_GetArrayItem(offs, i)->valuedouble, (int)chars);
        chars += utf8_chars(tok);
        strcat(joined, tok);
        if (i == 0 && first_null) {
            assert_true(cJSON_IsNull(l) && cJSON_IsNull(top));
            continue;
        }
        double v = l->valuedouble, prev = 1, sum = 0;
        assert_true(v <= 0);
        int k = 0;
        bool self = false;
        cJSON_ArrayForEach(e, top) {
            if (!strcmp(e->string, tok)) {
                assert_true(fabs(e->valuedouble - v) < 1e-6); /* the token's own, among them or added */
                self = true;
            }
            if (k < want) { /* the alternatives, most likely first */
                assert_true(e->valuedouble <= prev + 1e-9);
                prev = e->valuedouble;
                sum += exp(e->valuedouble);
            }
            k++;
        }
        assert_true(self);
        assert_true(k <= want + 1 && k >= (kept && kept < want ? kept : want > 0 ? 1 : 0));
        assert_true(sum <= 1 + 1e-4);
        if (kept && kept <= want) assert_true(fabs(sum - 1) < 1e-3); /* the whole final distribution */
    }
    assert_string_equal(joined, text); /* the tokens spell the text */
    free(joined);
    return n;
}

/* logprobs on completions, plain and streamed alike. */
static void test_logprobs(void **state) {
    (void)state;
    static const char BODY[] = "{\"prompt\":\"The capital of France is\",\"max_tokens\":6,\"logprobs\":3,\"seed\":4,"
                               "\"temperature\":1,\"top_k\":2,\"top_p\":1,\"min_p\":0%s}";
    char body[512];
    snprintf(body, sizeof body, BODY, "");
    cJSON *j = post(body);
    const char *text = su_str(j, "choices.0.text");
    int n = check_logprobs(su_at(j, "choices.0.logprobs"), text, 3, 2, 0);
    assert_int_equal(n, (int)su_num(j, "usage.completion_tokens"));
    snprintf(body, sizeof body, BODY, ",\"stream\":true");
    char *stext;
    cJSON *s = stream_logprobs(body, &stext);
    assert_string_equal(stext, text);
    check_logprobs(s, stext, 3, 2, 0);
    assert_true(cJSON_Compare(su_at(s, "tokens"), su_at(j, "choices.0.logprobs.tokens"), 1));
    assert_true(cJSON_Compare(su_at(s, "text_offset"), su_at(j, "choices.0.logprobs.text_offset"), 1));
    for (int i = 0; i < n; i++)
        assert_true(fabs(cJSON_GetArrayItem(su_at(s, "token_logprobs"), i)->valuedouble -
                         cJSON_GetArrayItem(su_at(j, "choices.0.logprobs.token_logprobs"), i)->valuedouble) < 1e-6);
    free(stext);
    cJSON_Delete(s);
    cJSON_Delete(j);
    /* logprobs 0: each token with its own log-probability alone; greedy: the argmax */
    j = post("{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"logprobs\":0}");
    check_logprobs(su_at(j, "choices.0.logprobs"), su_str(j, "choices.0.text"), 0, 0, 0);
    const cJSON *top;
    cJSON_ArrayForEach(top, su_at(j, "choices.0.logprobs.top_logprobs")) assert_int_equal(cJSON_GetArraySize(top), 1);
    cJSON_Delete(j);
    j = post("{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"logprobs\":5}");
    check_logprobs(su_at(j, "choices.0.logprobs"), su_str(j, "choices.0.text"), 5, 0, 0);
    int i = 0; /* greedy: each token is the most likely one */
    cJSON_ArrayForEach(top, su_at(j, "choices.0.logprobs.top_logprobs"))
        assert_true(fabs(top->child->valuedouble -
                         cJSON_GetArrayItem(su_at(j, "choices.0.logprobs.token_logprobs"), i++)->valuedouble) < 1e-9);
    cJSON_Delete(j);
    /* without logprobs: null */
    j = post("{\"prompt\":\"a\",\"max_tokens\":2}");
    assert_true(cJSON_IsNull(su_at(j, "choices.0.logprobs")));
    cJSON_Delete(j);
}

/* The prompt's ids (POST /tokenize). */
static int32_t *tokenize(const char *text, int *n) {
    char body[1024], *out;
    snprintf(body, sizeof body, "{\"content\":\"%s\"}", text);
    assert_int_equal(su_http(srv.port, dir, "POST", "/tokenize", body, NULL, &out), 200);
    cJSON *j = su_json(out, "tokenize");
    const cJSON *t = su_at(j, "tokens"), *v;
    *n = cJSON_GetArraySize(t);
    int32_t *ids = malloc((size_t)*n * sizeof *ids), i = 0;
    cJSON_ArrayForEach(v, t) ids[i++] = (int32_t)v->valuedouble;
    cJSON_Delete(j);
    free(out);
    return ids;
}

/* echo: the prompt first; with logprobs its tokens' log-probabilities are
 * the log-softmax of `edge0 logits` for the same ids, the first null. */
static void test_echo(void **state) {
    (void)state;
    static const char PROMPT[] = "Edge inference streams experts from the SSD, one layer at a time.";
    int n;
    int32_t *ids = tokenize(PROMPT, &n);
    assert_true(n > 8);
    char cmd[16384], list[4096] = "", out[4400];
    for (int i = 0; i < n; i++) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? "," : "", ids[i]);
    snprintf(out, sizeof out, "%s/logits.safetensors", dir);
    snprintf(cmd, sizeof cmd, "%s logits %s --io pread --ids %s --out %s 2>/dev/null", tu_bin(), model, list, out);
    assert_int_equal(tu_run(cmd), 0);
    st_set *set;
    char err[E0_ERR_MAX];
    if (st_set_open_file(&set, out, err)) fail_msg("%s", err);
    e0_engine *eng;
    e0_engine_opts eo;
    e0_engine_opts_default(&eo);
    if (e0_engine_open(&eng, model, &eo, err)) fail_msg("%s", err);
    e0_model_info mi;
    e0_engine_info(eng, &mi);
    e0_engine_free(eng);
    const size_t V = (size_t)mi.vocab_size;
    const float *L = tu_f32(set, "logits", (size_t)n * V);

    char body[1024];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":3,\"logprobs\":2,\"echo\":true}", PROMPT);
    cJSON *j = post(body);
    const char *text = su_str(j, "choices.0.text");
    assert_true(!strncmp(text, PROMPT, strlen(PROMPT)));
    const cJSON *lp = su_at(j, "choices.0.logprobs");
    int total = check_logprobs(lp, text, 2, 0, 1);
    assert_int_equal(total, n + 3);
    assert_int_equal((int)su_num(j, "usage.prompt_tokens"), n);
    double worst = 0;
    for (int i = 1; i < n; i++) { /* token i given ids[0..i): row i-1 */
        const float *x = L + (size_t)(i - 1) * V;
        double m = -INFINITY, s = 0;
        for (size_t v = 0; v < V; v++) m = x[v] > m ? x[v] : m;
        for (size_t v = 0; v < V; v++) s += exp((double)x[v] - m);
        double want = (double)x[ids[i]] - m - log(s), top = -log(s);
        double got = cJSON_GetArrayItem(su_at(lp, "token_logprobs"), i)->valuedouble;
        double got_top = cJSON_GetArrayItem(su_at(lp, "top_logprobs"), i)->child->valuedouble;
        worst = fmax(worst, fmax(fabs(got - want), fabs(got_top - top)));
        if (fabs(got - want) > 1e-4 || fabs(got_top - top) > 1e-4)
            fail_msg("prompt token %d: logprob %.6f (most likely %.6f), edge0 logits says %.6f (%.6f)", i, got, got_top,
                     want, top);
    }
    printf("echo: %d prompt tokens, largest difference from edge0 logits %.2g\n", n - 1, worst);

    /* streamed: the same */
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":3,\"logprobs\":2,\"echo\":true,\"stream\":true}",
             PROMPT);
    char *stext;
    cJSON *s = stream_logprobs(body, &stext);
    assert_string_equal(stext, text);
    check_logprobs(s, stext, 2, 0, 1);
    for (int i = 1; i < total; i++)
        assert_true(fabs(cJSON_GetArrayItem(su_at(s, "token_logprobs"), i)->valuedouble -
                         cJSON_GetArrayItem(su_at(lp, "token_logprobs"), i)->valuedouble) < 1e-6);
    free(stext);
    cJSON_Delete(s);
    cJSON_Delete(j);

    /* echo alone: the prompt and the same answer, no logprobs */
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":3,\"echo\":true}", PROMPT);
    cJSON *e = post(body);
    assert_true(!strncmp(su_str(e, "choices.0.text"), PROMPT, strlen(PROMPT)));
    assert_true(cJSON_IsNull(su_at(e, "choices.0.logprobs")));
    cJSON_Delete(e);
    st_set_free(set);
    free(ids);
}

static void expect_400(const char *body, const char *param) {
    char *out;
    assert_int_equal(su_http(srv.port, dir, "POST", "/v1/completions", body, NULL, &out), 400);
    cJSON *j = su_json(out, "the error");
    assert_string_equal(su_str(j, "error.param"), param);
    cJSON_Delete(j);
    free(out);
}

static void test_errors(void **state) {
    (void)state;
    expect_400("{\"prompt\":\"a\",\"logprobs\":6}", "logprobs");
    expect_400("{\"prompt\":\"a\",\"logprobs\":-1}", "logprobs");
    expect_400("{\"prompt\":\"a\",\"logprobs\":true}", "logprobs");
    expect_400("{\"prompt\":\"a\",\"echo\":\"yes\"}", "echo");
    expect_400("{\"prompt\":\"a\",\"suffix\":\"b\"}", "suffix");
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_echo),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
