/* Routing replay (edge0.h e0_session_replay, io/routes.h; bench --replay):
 * on the tiny-e256 shape (4 MoE layers, E = 256, k = 8) the expert cache is
 * asked for exactly the trace's experts, token t of the decode taking the
 * trace's token t mod its length, a layer the trace leaves out routed by the
 * router; in a batch each sequence replays from its own offset and the
 * cache sees the union of their experts; bench --replay with --trace writes
 * those requests back under '# token' lines; a malformed trace is refused
 * with its file:line, another shape's with the conversion to run. Routing
 * is read from the cache's request trace: a one-token step requests its k
 * experts per layer, in layer order (test_route.c). */
#include "testutil.h"

#include "edge0.h"
#include "util/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LAYERS = 4, EXPERTS = 256, K = 8, TOKENS = 5, HOLE_TOKEN = 2, HOLE_LAYER = 1 };

static char *g_dir, *g_model, *g_trace;
static int32_t g_ids[TOKENS][LAYERS][K]; /* -1: the router's */

/* The trace: TOKENS tokens of pseudo-random distinct experts, except that
 * token HOLE_TOKEN does not name layer HOLE_LAYER; a prefill request first. */
static char *write_trace(const char *dir) {
    uint64_t h = 40;
    char *txt = malloc(1 << 16);
    int n = snprintf(txt, 1 << 16, "# layers %d experts %d decode_from 1 top_k %d\n3 7\n", LAYERS,
                     EXPERTS, K);
    for (int t = 0; t < TOKENS; t++) {
        n += snprintf(txt + n, (size_t)(1 << 16) - (size_t)n, "# token %d\n", t);
        for (int l = 0; l < LAYERS; l++)
            for (int j = 0; j < K; j++) {
                g_ids[t][l][j] = -1;
                if (t == HOLE_TOKEN && l == HOLE_LAYER) continue;
                for (bool dup = true; dup;) {
                    h = h * 6364136223846793005ull + 1442695040888963407ull;
                    g_ids[t][l][j] = (int32_t)(h >> 33) % EXPERTS;
                    dup = false;
                    for (int i = 0; i < j; i++)
                        dup |= g_ids[t][l][i] == g_ids[t][l][j];
                }
                n += snprintf(txt + n, (size_t)(1 << 16) - (size_t)n, "%d %d\n", l, g_ids[t][l][j]);
            }
    }
    char *path = tu_write(dir, "replay.trace", txt, (size_t)n);
    free(txt);
    return path;
}

static int setup(void **state) {
    g_dir = tu_tmpdir();
    g_model = e0_path_join(g_dir, "model");
    e0_synth_opts so;
    e0_synth_opts_default(&so);
    so.no_sync = 1;
    char err[E0_ERR_MAX];
    if (e0_synth_write_opts(e0_synth_find("tiny-e256"), g_model, &so, err)) fail_msg("%s", err);
    g_trace = write_trace(g_dir);
    return 0;
}

static int teardown(void **state) {
    tu_rmtree(g_dir);
    free(g_dir);
    free(g_model);
    free(g_trace);
    return 0;
}

/* Every expert fits the cache: its requests are the routing, not misses. */
static e0_engine *open_engine(void) {
    return tu_open_cached(g_model, LAYERS * EXPERTS, -1, LAYERS, EXPERTS, K);
}

static bool in_set(const int32_t *v, int n, int32_t x) {
    for (int i = 0; i < n; i++)
        if (v[i] == x) return true;
    return false;
}

/* The requests keys[0..n) of one decode step of `ns` sequences, whose trace
 * tokens are tok[0..ns): per layer in order, the union of their experts
 * (the router's k where a token leaves the layer out and ns is 1). */
static size_t check_step(const uint32_t *keys, size_t n, const int *tok, int ns) {
    size_t at = 0;
    for (int l = 0; l < LAYERS; l++) {
        int32_t want[K * 4];
        int nw = 0;
        bool router = false;
        for (int q = 0; q < ns; q++)
            for (int j = 0; j < K; j++) {
                const int32_t x = g_ids[tok[q]][l][j];
                router |= x < 0;
                if (x >= 0 && !in_set(want, nw, x)) want[nw++] = x;
            }
        if (router) { /* the router's experts: k requests of this layer */
            assert_int_equal(ns, 1);
            for (int j = 0; j < K; j++, at++)
                assert_int_equal(keys[at] / EXPERTS, (uint32_t)l);
            continue;
        }
        for (int j = 0; j < nw; j++, at++) {
            assert_true(at < n);
            assert_int_equal(keys[at] / EXPERTS, (uint32_t)l);
            assert_true(in_set(want, nw, (int32_t)(keys[at] % EXPERTS)));
            for (int i = 0; i < j; i++)
                assert_int_not_equal(keys[at - 1 - i], keys[at]);
        }
    }
    return at;
}

/* One sequence: decode step t asks the cache for the trace's token t mod
 * TOKENS, the hole by the router; 3 rounds of the trace. */
static void test_replay_one(void **state) {
    e0_engine *e = open_engine();
    char err[E0_ERR_MAX];
    e0_routes *r;
    if (e0_routes_load(e, g_trace, &r, err)) fail_msg("%s", err);
    assert_int_equal(e0_routes_tokens(r), TOKENS);
    e0_session *s;
    if (e0_session_new(e, NULL, &s, err)) fail_msg("%s", err);
    const int32_t prompt[3] = {5, 9, 11};
    e0_model_info in;
    e0_engine_info(e, &in);
    float *lg = malloc((size_t)in.vocab_size * sizeof *lg);
    if (e0_session_eval(s, prompt, 3, E0_LOGITS_NONE, NULL, err)) fail_msg("%s", err);
    if (e0_session_replay(s, r, 0, err)) fail_msg("%s", err);
    if (e0_engine_trace_start(e, 1 << 16, 64, err)) fail_msg("%s", err);
    enum { STEPS = 3 * TOKENS };
    int32_t id = 7;
    for (int t = 0; t < STEPS; t++)
        if (e0_session_eval(s, &id, 1, E0_LOGITS_LAST, lg, err)) fail_msg("%s", err);
    const uint32_t *keys;
    const size_t n = e0_engine_trace(e, &keys);
    assert_int_equal(n, (size_t)STEPS * LAYERS * K);
    size_t at = 0;
    for (int t = 0; t < STEPS; t++) {
        const int tok = t % TOKENS;
        at += check_step(keys + at, n - at, &tok, 1);
    }
    assert_int_equal(at, n);
    for (int v = 0; v < 16; v++)
        assert_true(lg[v] == lg[v]); /* the model computed */
    /* off again: the router's routing, which the trace's first token is not */
    if (e0_session_replay(s, NULL, 0, err)) fail_msg("%s", err);
    if (e0_engine_trace_start(e, 1 << 16, 64, err)) fail_msg("%s", err);
    if (e0_session_eval(s, &id, 1, E0_LOGITS_LAST, lg, err)) fail_msg("%s", err);
    assert_int_equal(e0_engine_trace(e, &keys), (size_t)LAYERS * K);
    int same = 0;
    for (int j = 0; j < K; j++)
        same += in_set(g_ids[STEPS % TOKENS][0], K, (int32_t)keys[j]);
    assert_true(same < K);
    free(lg);
    e0_session_free(s);
    e0_routes_free(r);
    e0_engine_free(e);
}

/* Two sequences in one batch, replaying from offsets 0 and 3: each step's
 * requests per layer are the union of their two tokens' experts. */
static void test_replay_batch(void **state) {
    e0_engine *e = open_engine();
    char err[E0_ERR_MAX];
    e0_routes *r;
    if (e0_routes_load(e, g_trace, &r, err)) fail_msg("%s", err);
    e0_session *ss[2];
    const int off[2] = {0, 3};
    for (int i = 0; i < 2; i++) {
        if (e0_session_new(e, NULL, &ss[i], err)) fail_msg("%s", err);
        const int32_t p[2] = {3 + i, 4};
        if (e0_session_eval(ss[i], p, 2, E0_LOGITS_NONE, NULL, err)) fail_msg("%s", err);
        if (e0_session_replay(ss[i], r, off[i], err)) fail_msg("%s", err);
    }
    if (e0_engine_trace_start(e, 1 << 16, 64, err)) fail_msg("%s", err);
    const int32_t ids[2] = {7, 8};
    const uint32_t *keys;
    size_t at = 0;
    for (int t = 0; t < 6; t++) {
        if (e0_session_eval_batch(ss, ids, 2, NULL, err)) fail_msg("%s", err);
        int tok[2] = {(off[0] + t) % TOKENS, (off[1] + t) % TOKENS};
        if (tok[0] == HOLE_TOKEN || tok[1] == HOLE_TOKEN) { /* the router's in one layer: skip */
            at = e0_engine_trace(e, &keys);
            continue;
        }
        const size_t n = e0_engine_trace(e, &keys);
        at += check_step(keys + at, n - at, tok, 2);
        assert_int_equal(at, n);
    }
    for (int i = 0; i < 2; i++)
        e0_session_free(ss[i]);
    e0_routes_free(r);
    e0_engine_free(e);
}

/* The weights: replaying the router's own routing (recorded from a plain
 * decode) gives that decode's logits, up to the order the k weighted
 * outputs are summed in (the trace lists a layer's experts in request
 * order, the router by weight; 2e-7 at the first step, 3e-5 once the
 * states carry it): the trace's experts get the router's renormalised
 * probabilities (weights 1/k are 0.3 off at the first step). */
static void test_replay_own_routing(void **state) {
    enum { STEPS = 6 };
    e0_engine *e = open_engine();
    e0_model_info in;
    e0_engine_info(e, &in);
    const size_t V = (size_t)in.vocab_size;
    float *want = malloc(STEPS * V * sizeof *want), *got = malloc(V * sizeof *got);
    const int32_t prompt[3] = {5, 9, 11};
    int32_t ids[STEPS];
    char err[E0_ERR_MAX];
    e0_session *s;
    if (e0_session_new(e, NULL, &s, err)) fail_msg("%s", err);
    if (e0_session_eval(s, prompt, 3, E0_LOGITS_LAST, got, err)) fail_msg("%s", err);
    if (e0_engine_trace_start(e, 1 << 16, 64, err)) fail_msg("%s", err);
    for (int t = 0; t < STEPS; t++) {
        ids[t] = (int32_t)tu_argmax(t ? want + (size_t)(t - 1) * V : got, V);
        if (e0_session_eval(s, &ids[t], 1, E0_LOGITS_LAST, want + (size_t)t * V, err))
            fail_msg("%s", err);
    }
    const uint32_t *keys;
    assert_int_equal(e0_engine_trace(e, &keys), (size_t)STEPS * LAYERS * K);
    char *txt = malloc(1 << 16);
    int n = snprintf(txt, 1 << 16, "# layers %d experts %d decode_from 0\n", LAYERS, EXPERTS);
    for (int i = 0; i < STEPS * LAYERS * K; i++) {
        if (i % (LAYERS * K) == 0)
            n += snprintf(txt + n, (size_t)(1 << 16) - (size_t)n, "# token %d\n", i / (LAYERS * K));
        n += snprintf(txt + n, (size_t)(1 << 16) - (size_t)n, "%u %u\n", keys[i] / EXPERTS,
                      keys[i] % EXPERTS);
    }
    char *p = tu_write(g_dir, "own.trace", txt, (size_t)n);
    e0_routes *r;
    if (e0_routes_load(e, p, &r, err)) fail_msg("%s", err);
    e0_session_reset(s);
    if (e0_session_eval(s, prompt, 3, E0_LOGITS_LAST, got, err)) fail_msg("%s", err);
    if (e0_session_replay(s, r, 0, err)) fail_msg("%s", err);
    for (int t = 0; t < STEPS; t++) {
        if (e0_session_eval(s, &ids[t], 1, E0_LOGITS_LAST, got, err)) fail_msg("%s", err);
        const double d = tu_rel_l2(got, want + (size_t)t * V, V);
        if (!(d < 1e-3)) fail_msg("step %d: replayed logits %.3g off the router's", t, d);
    }
    e0_routes_free(r);
    e0_session_free(s);
    e0_engine_free(e);
    free(p);
    free(txt);
    free(want);
    free(got);
}

/* A trace `text` is refused with a message containing its path and `want`. */
static void refused(e0_engine *e, const char *text, int code, const char *want) {
    char *p = tu_write(g_dir, "bad.trace", text, strlen(text));
    e0_routes *r = NULL;
    char err[E0_ERR_MAX] = "";
    assert_int_equal(e0_routes_load(e, p, &r, err), code);
    assert_null(r);
    char full[600];
    snprintf(full, sizeof full, "%s%s", p, want); /* want: what follows the path */
    if (!strstr(err, full)) fail_msg("want '%s' in '%s'", full, err);
    free(p);
}

static void test_replay_malformed(void **state) {
    e0_engine *e = open_engine();
    refused(e, "0 1\n", E0_EFORMAT, ":1: not a routing trace header");
    refused(e, "# layers 4 experts 256 decode_from 0\n0 1\n0 256\n", E0_EFORMAT,
            ":3: layer 0 or expert 256 out of range");
    refused(e, "# layers 4 experts 256 decode_from 0\n# token 0\n1 5\n1 5\n", E0_EFORMAT,
            ":4: expert 5 twice");
    refused(e, "# layers 4 experts 256 decode_from 0\n# token 0\n1 5\n1 6\n", E0_EFORMAT,
            ":3: decode token 0 names 2 experts of layer 1, want 8");
    refused(e, "# layers 4 experts 256 decode_from 0\n# token 1\n", E0_EFORMAT,
            ":2: token 1 where token 0 is next");
    refused(e, "# layers 4 experts 256 decode_from 0\n0 x\n", E0_EFORMAT,
            ":2: want 'LAYER EXPERT'");
    refused(e, "# layers 4 experts 256 decode_from 3\n0 1\n", E0_EFORMAT, ": no decode requests");
    refused(e, "# layers 48 experts 256 decode_from 0\n0 1\n", E0_EINVAL,
            ": the trace is for 48 layers x 256 experts, the model has 4 x 256: convert it with "
            "scripts/route_convert.py --layers 4 --experts 256");
    refused(e, "# layers 4 experts 256 decode_from 0 top_k 4\n", E0_EINVAL,
            ": the trace routes top-4, the model top-8");
    e0_engine_free(e);
}

/* bench --replay --trace: the decode's requests, token by token, are the
 * trace's; a malformed trace ends bench with exit 1 and its file:line. */
static void test_replay_bench(void **state) {
    char *out = e0_path_join(g_dir, "out.trace"), *log = e0_path_join(g_dir, "bench.log");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s bench %s --io pread --threads 2 --prefill 4 --decode 7 --skip-cold --gpu off "
             "--opt prefetch_cap=0 --replay %s --trace %s > %s 2>&1",
             tu_bin(), g_model, g_trace, out, log);
    assert_int_equal(tu_run(cmd), 0);
    char *txt;
    size_t len;
    char err[E0_ERR_MAX];
    if (e0_read_file(out, &txt, &len, 1 << 24, err)) fail_msg("%s", err);
    int t = -1, l, x, got[LAYERS] = {0}, bad = 0;
    for (char *p = txt; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (sscanf(p, "# token %d", &t) == 1) {
            memset(got, 0, sizeof got);
            continue;
        }
        if (t < 0 || sscanf(p, "%d %d", &l, &x) != 2) continue;
        const int tok = t % TOKENS;
        got[l]++;
        bad += !(tok == HOLE_TOKEN && l == HOLE_LAYER) && !in_set(g_ids[tok][l], K, x);
    }
    assert_int_equal(t, 6);
    assert_int_equal(bad, 0);
    free(txt);
    const char *bad_trace = "# layers 4 experts 256 decode_from 0\n0 999\n";
    char *p = tu_write(g_dir, "bad.trace", bad_trace, strlen(bad_trace));
    snprintf(cmd, sizeof cmd, "%s bench %s --skip-cold --replay %s > %s 2>&1", tu_bin(), g_model, p,
             log);
    assert_int_equal(tu_run(cmd), 1);
    if (e0_read_file(log, &txt, &len, 1 << 24, err)) fail_msg("%s", err);
    char want[600];
    snprintf(want, sizeof want, "%s:2: layer 0 or expert 999 out of range", p);
    if (!strstr(txt, want)) fail_msg("want '%s' in:\n%s", want, txt);
    free(txt);
    free(p);
    free(out);
    free(log);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replay_one),         cmocka_unit_test(test_replay_batch),
        cmocka_unit_test(test_replay_own_routing), cmocka_unit_test(test_replay_malformed),
        cmocka_unit_test(test_replay_bench),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
