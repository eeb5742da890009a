/* scripts/load.py, the load test of edge0 serve (issue 16), end to end:
 * against the tiny synthesized model it starts `edge0 serve` itself, drives
 * 1 and 2 clients and reports every level with zero errors and prompts of the
 * asked size; against a stand-in server (tests/load_fake_server.py) it counts
 * 500 and 503 answers apart and fails on the 500s only; it refuses a
 * non-loopback URL and fails when the server refuses the prompt. */
#include "srvutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *dir;

/* The tiny synthesized model with the Qwen3 tokenizer, written once. */
static const char *model(void) {
    static const char *m;
    if (!m) m = su_model(dir);
    return m;
}

static int setup(void **st) {
    (void)st;
    dir = tu_tmpdir();
    return 0;
}

static int teardown(void **st) {
    (void)st;
    tu_rmtree(dir);
    free(dir);
    return 0;
}

/* Runs load.py with ARGS (its report in dir/NAME.json, its output in dir/NAME.out); returns its exit status. */
static int load(const char *name, const char *args) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "python3 scripts/load.py --bin %s --json %s/%s.json %s >%s/%s.out 2>&1", tu_bin(), dir,
             name, args, dir, name);
    return tu_run(cmd);
}

static cJSON *report(const char *name) {
    char p[4300];
    snprintf(p, sizeof p, "%s/%s.json", dir, name);
    char *t = su_slurp(p);
    cJSON *j = su_json(t, p);
    free(t);
    return j;
}

static void show(const char *name) {
    char p[4300];
    snprintf(p, sizeof p, "%s/%s.out", dir, name);
    char *t = su_slurp(p);
    print_message("%s", t);
    free(t);
}

/* 1 and 2 clients, 3 requests each, against edge0 serve on the tiny model: every
 * level is there, every request completed with zero errors, the prompts have the
 * sizes asked for (/tokenize sized them), and the server stopped cleanly. */
static void test_tiny_levels(void **st) {
    (void)st;
    char args[4400];
    snprintf(args, sizeof args,
             "%s --clients 1,2 --requests-per-client 3 --seconds 20 --prompt-tokens 40-80 --max-tokens 12 "
             "--late-prompt 100 --server-args '--io pread'",
             model());
    int rc = load("tiny", args);
    if (rc) show("tiny");
    assert_int_equal(rc, 0);
    cJSON *j = report("tiny");
    assert_true(cJSON_IsTrue(su_at(j, "ok")));
    assert_int_equal(cJSON_GetArraySize(su_at(j, "levels")), 2);
    for (int i = 0; i < 2; i++) {
        char p[64];
        const int n = i + 1;
        snprintf(p, sizeof p, "levels.%d.clients", i);
        assert_int_equal((int)su_num(j, p), n);
        snprintf(p, sizeof p, "levels.%d.requests", i);
        assert_int_equal((int)su_num(j, p), 3 * n);
        snprintf(p, sizeof p, "levels.%d.errors", i);
        assert_null(su_at(j, p)->child);
        snprintf(p, sizeof p, "levels.%d.aborted", i);
        assert_int_equal((int)su_num(j, p), 0);
        snprintf(p, sizeof p, "levels.%d.agg_tok_s", i);
        assert_true(su_num(j, p) > 0);
        /* /metrics' decode counters over the level: every generated token after a
         * request's first (which its prefill gives) came from a decode pass (the
         * late prompt's answer decodes in the level too, uncounted in gen) */
        snprintf(p, sizeof p, "levels.%d.decode_tok_s", i);
        assert_true(su_num(j, p) > 0);
        snprintf(p, sizeof p, "levels.%d.decode_tokens", i);
        const double dec = su_num(j, p);
        snprintf(p, sizeof p, "levels.%d.generated_tokens", i);
        const double gen = su_num(j, p);
        print_message("  %d clients: %.0f tokens generated, %.0f decoded one at a time\n", n, gen, dec);
        assert_true(dec >= gen - 3 * n);
        /* the passes that stepped all n streams together: present at one client
         * (every pass there holds its stream, the late prompt's answer aside),
         * a share of the decode time when present */
        snprintf(p, sizeof p, "levels.%d.full_passes", i);
        const cJSON *fp = su_at(j, p);
        if (n == 1) assert_true(cJSON_IsNumber(fp));
        if (cJSON_IsNumber(fp)) {
            assert_true(fp->valuedouble >= 1 && fp->valuedouble * n <= dec);
            snprintf(p, sizeof p, "levels.%d.full_share", i);
            assert_true(su_num(j, p) > 0 && su_num(j, p) <= 1.0 + 1e-9);
            snprintf(p, sizeof p, "levels.%d.full_tok_s", i);
            assert_true(su_num(j, p) > 0);
        }
        snprintf(p, sizeof p, "levels.%d.ttft_p50_ms", i);
        assert_true(su_num(j, p) > 0);
        /* the chat template adds nothing on /v1/completions: the server counted what /tokenize did */
        snprintf(p, sizeof p, "levels.%d.prompt_tokens_mean", i);
        double pt = su_num(j, p);
        assert_true(pt >= 40 && pt <= 80);
        snprintf(p, sizeof p, "levels.%d.completion_tokens_mean", i);
        assert_true(su_num(j, p) >= 1 && su_num(j, p) <= 12);
    }
    assert_int_equal((int)su_num(j, "server.exit"), 0);
    cJSON_Delete(j);
}

/* levels[level].errors[status] (su_at would read a numeric key as an array index); 0 when absent. */
static int errors(const cJSON *j, int level, const char *status) {
    char p[64];
    snprintf(p, sizeof p, "levels.%d.errors", level);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(su_at(j, p), status);
    return v ? (int)v->valuedouble : 0;
}

/* The stand-in server in MODE; load.py attached to it with --url and `more` arguments. */
static int fake(const char *name, const char *mode, const char *more, cJSON **out) {
    char pf[4300], cmd[9000];
    snprintf(pf, sizeof pf, "%s/%s.port", dir, name);
    snprintf(cmd, sizeof cmd, "python3 tests/load_fake_server.py %s %s", mode, pf);
    FILE *srv = popen(cmd, "w"); /* it exits when this pipe closes */
    assert_non_null(srv);
    int port = 0;
    for (int i = 0; i < 400 && !port; i++) {
        char *t = su_slurp(pf);
        port = atoi(t);
        free(t);
        if (!port) usleep(25000);
    }
    assert_true(port > 0);
    char args[300];
    snprintf(args, sizeof args, "--url http://127.0.0.1:%d --clients 1,2 --requests-per-client 2 --seconds 10 %s", port,
             more);
    int rc = load(name, args);
    pclose(srv);
    *out = report(name);
    return rc;
}

/* 500s fail the run and are counted apart from 503s; 503s alone do not fail it. */
static void test_statuses(void **st) {
    (void)st;
    cJSON *j;
    int rc = fake("mixed", "mixed", "", &j);
    if (rc != 1) show("mixed");
    assert_int_equal(rc, 1);
    assert_true(cJSON_IsFalse(su_at(j, "ok")));
    /* requests 2..7 after the warm-up: level 1 gets 2 (503), 3 (500); level 2 gets 4..7 */
    assert_int_equal((int)errors(j, 0, "503"), 1);
    assert_int_equal((int)errors(j, 0, "500"), 1);
    assert_int_equal((int)errors(j, 1, "503"), 2);
    assert_int_equal((int)errors(j, 1, "500"), 2);
    char *probs = cJSON_PrintUnformatted(su_at(j, "problems"));
    assert_non_null(strstr(probs, "errors {'500': 2}")); /* level 2: the 500s, not the 503s */
    free(probs);
    cJSON_Delete(j);

    rc = fake("busy", "busy", "", &j);
    if (rc != 0) show("busy");
    assert_int_equal(rc, 0);
    assert_true(cJSON_IsTrue(su_at(j, "ok")));
    assert_int_equal((int)errors(j, 0, "503"), 1);
    assert_int_equal((int)su_num(j, "levels.0.requests"), 1);
    assert_int_equal((int)errors(j, 1, "503"), 2);
    assert_int_equal((int)su_num(j, "levels.1.requests"), 2);
    /* 8 one-token chunks per stream, with the usage's 8 tokens */
    assert_int_equal((int)su_num(j, "levels.1.generated_tokens"), 16);
    assert_true(su_num(j, "levels.1.tokens_per_chunk") == 1.0);
    cJSON_Delete(j);
}

/* --rounds 2: the levels run twice in turn, each row says its round, and
 * the summary holds each round's ratio to its own 1-client level and their
 * median (the mean of two). */
static void test_rounds(void **st) {
    (void)st;
    cJSON *j;
    int rc = fake("rounds", "pairs", "--rounds 2", &j);
    if (rc) show("rounds");
    assert_int_equal(rc, 0);
    assert_int_equal(cJSON_GetArraySize(su_at(j, "levels")), 4);
    static const int clients[4] = {1, 2, 1, 2}, round_of[4] = {1, 1, 2, 2};
    double ratio[2];
    for (int l = 0; l < 4; l++) {
        char p[64];
        snprintf(p, sizeof p, "levels.%d.clients", l);
        assert_int_equal((int)su_num(j, p), clients[l]);
        snprintf(p, sizeof p, "levels.%d.round", l);
        assert_int_equal((int)su_num(j, p), round_of[l]);
        if (clients[l] == 2) {
            char q[64];
            snprintf(p, sizeof p, "levels.%d.agg_tok_s", l);
            snprintf(q, sizeof q, "levels.%d.agg_tok_s", l - 1);
            ratio[l / 2] = su_num(j, p) / su_num(j, q);
        }
    }
    /* rounds["2"] (su_at would read the key 2 as an array index) */
    const cJSON *two = cJSON_GetObjectItemCaseSensitive(su_at(j, "rounds"), "2");
    assert_non_null(two);
    for (int r = 0; r < 2; r++) {
        char p[64];
        snprintf(p, sizeof p, "agg.per_round.%d", r);
        assert_true(fabs(su_num(two, p) - ratio[r]) < 1e-9);
    }
    assert_true(fabs(su_num(two, "agg.median") - (ratio[0] + ratio[1]) / 2) < 1e-9);
    /* the stand-in has no decode counters: no decode ratios */
    assert_true(cJSON_IsNull(su_at(two, "decode.median")));
    cJSON_Delete(j);
}

/* Inter-token gaps per token: chunks of two tokens 200 ms apart are gaps of
 * about 100 ms when the chunks list their tokens (--itl token, the default:
 * the streams ask for logprobs), of about 200 ms counted per chunk. */
static void test_itl_per_token(void **st) {
    (void)st;
    const char *mode[2] = {"", "--itl chunk"};
    for (int i = 0; i < 2; i++) {
        cJSON *j;
        int rc = fake(i ? "pairs-chunk" : "pairs-token", "pairs", mode[i], &j);
        if (rc) show(i ? "pairs-chunk" : "pairs-token");
        assert_int_equal(rc, 0);
        for (int l = 0; l < 2; l++) {
            char p[64];
            snprintf(p, sizeof p, "levels.%d.itl_p50_ms", l);
            const double itl = su_num(j, p);
            print_message("%s level %d: ITL p50 %.1f ms\n", i ? "per chunk" : "per token", l, itl);
            if (i) assert_true(itl > 180 && itl < 400);
            else assert_true(itl > 90 && itl < 180);
            snprintf(p, sizeof p, "levels.%d.tokens_per_chunk", l);
            assert_true(su_num(j, p) == 2.0);
        }
        cJSON_Delete(j);
    }
}

/* Loopback only; a server that refuses the prompt (context too small) fails the run, naming why. */
static void test_refusals(void **st) {
    (void)st;
    assert_int_equal(load("remote", "--url http://192.0.2.1:8080"), 2);
    char p[4300];
    snprintf(p, sizeof p, "%s/remote.out", dir);
    char *t = su_slurp(p);
    assert_non_null(strstr(t, "not a loopback address"));
    free(t);

    char args[4400];
    snprintf(args, sizeof args, "%s --clients 1 --prompt-tokens 200 --max-tokens 8 --server-args '--ctx 64 --io pread'",
             model());
    assert_int_equal(load("small", args), 1);
    cJSON *j = report("small");
    assert_true(strstr(su_str(j, "problems.0"), "context") != NULL);
    assert_int_equal((int)su_num(j, "server.exit"), 0);
    cJSON_Delete(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_levels),
        cmocka_unit_test(test_statuses),
        cmocka_unit_test(test_rounds),
        cmocka_unit_test(test_itl_per_token),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
