/* Route stickiness (synth/synth.h): a tiny synthetic model whose config.json
 * carries edge0_synth.route_stickiness P routes each token to at least
 * round(P x k) of the previous position's experts per layer, exactly that
 * many when the router does not repeat more by itself; P = 0 routes bit for
 * bit as a config without the key. Routing is read from the expert cache's
 * request trace (e0_engine_trace_start): a one-token step requests exactly
 * the token's k experts in every layer, in layer order. */
#include "testutil.h"

#include "edge0.h"
#include "io/config.h"
#include "synth/synth.h"
#include "util/file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { STEPS = 24, LAYERS = 4, EXPERTS = 32, K = 4 };

static e0_engine *open_with(const char *dir, int policy, int32_t slots) {
    e0_engine *e = tu_open_cached(dir, slots, policy, LAYERS, EXPERTS, K);
    char err[E0_ERR_MAX];
    if (e0_engine_trace_start(e, 1 << 16, STEPS, err)) fail_msg("%s", err);
    return e;
}

static e0_engine *open_traced(const char *dir) {
    return open_with(dir, E0_CACHE_LRU, 64);
}

/* Greedy decode of STEPS one-token steps from id 7; logits of every step
 * into lg (STEPS x vocab) when given. Returns the session's trace length. */
static size_t decode(e0_engine *e, float *lg) {
    e0_model_info in;
    e0_engine_info(e, &in);
    e0_session *s;
    char err[E0_ERR_MAX];
    if (e0_session_new(e, NULL, &s, err)) fail_msg("%s", err);
    float *l = malloc((size_t)in.vocab_size * sizeof *l);
    int32_t id = 7;
    for (int t = 0; t < STEPS; t++) {
        if (e0_session_eval(s, &id, 1, E0_LOGITS_LAST, l, err)) fail_msg("%s", err);
        if (lg) memcpy(lg + (size_t)t * in.vocab_size, l, (size_t)in.vocab_size * sizeof *l);
        id = 0;
        for (int32_t v = 1; v < in.vocab_size; v++)
            if (l[v] > l[id]) id = v;
    }
    free(l);
    e0_session_free(s);
    return e0_engine_trace(e, NULL);
}

/* The same greedy decode on two engines of one model: identical logits. */
static void decode_same(e0_engine *a, e0_engine *b) {
    e0_model_info in;
    e0_engine_info(a, &in);
    float *la = malloc((size_t)STEPS * in.vocab_size * sizeof *la);
    float *lb = malloc((size_t)STEPS * in.vocab_size * sizeof *lb);
    decode(a, la);
    decode(b, lb);
    assert_memory_equal(la, lb, (size_t)STEPS * in.vocab_size * sizeof *la);
    free(la);
    free(lb);
}

/* Shared experts of consecutive tokens, per (step >= 1, layer): [STEPS-1][LAYERS]. */
static void overlaps(e0_engine *e, int ov[STEPS - 1][LAYERS]) {
    const uint32_t *keys;
    const size_t n = e0_engine_trace(e, &keys);
    assert_int_equal(n, (size_t)STEPS * LAYERS * K);
    for (int t = 1; t < STEPS; t++)
        for (int l = 0; l < LAYERS; l++) {
            const uint32_t *a = keys + ((size_t)(t - 1) * LAYERS + l) * K, *b = a + LAYERS * K;
            int shared = 0;
            for (int i = 0; i < K; i++) {
                assert_int_equal(b[i] / EXPERTS, (uint32_t)l); /* layer order */
                for (int j = 0; j < K; j++)
                    shared += a[i] == b[j];
            }
            ov[t - 1][l] = shared;
        }
}

static void test_sticky_share(void **state) {
    (void)state;
    char *root = tu_tmpdir();
    const double ps[] = {0.0, 0.5, 1.0};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "p%d", i);
        char *dir = tu_synth_sticky(root, name, ps[i]);
        char *cfg = NULL;
        size_t len;
        char err[E0_ERR_MAX], *path = e0_path_join(dir, "config.json");
        assert_int_equal(e0_read_file(path, &cfg, &len, 1 << 20, err), 0);
        char want[64];
        snprintf(want, sizeof want, "\"route_stickiness\": %g", ps[i]);
        assert_non_null(strstr(cfg, want));
        free(cfg);
        free(path);
        e0_engine *e = open_traced(dir);
        decode(e, NULL);
        int ov[STEPS - 1][LAYERS];
        overlaps(e, ov);
        const int n = (int)lround(ps[i] * K);
        int exact = 0, sum = 0;
        for (int t = 0; t < STEPS - 1; t++)
            for (int l = 0; l < LAYERS; l++) {
                assert_true(ov[t][l] >= n);
                exact += ov[t][l] == n;
                sum += ov[t][l];
            }
        const int pairs = (STEPS - 1) * LAYERS;
        printf("  P = %.1f: consecutive tokens share %.2f of %d experts per layer (at least %d), "
               "exactly %d in %d of %d\n",
               ps[i], (double)sum / pairs, K, n, n, exact, pairs);
        if (i == 2) assert_int_equal(exact, pairs); /* P = 1: the same k experts every time */
        /* the router repeats k^2/E = 0.5 experts by chance: most pairs share exactly n */
        if (i == 1) assert_true(exact >= pairs / 2);
        e0_engine_free(e);
        free(dir);
    }
    tu_rmtree(root);
    free(root);
}

/* P = 0 and no key at all: the same logits, bit for bit. */
static void test_sticky_zero_is_none(void **state) {
    (void)state;
    char *root = tu_tmpdir();
    char *dir = tu_synth_sticky(root, "zero", 0.0);
    /* the same model without the key: shards linked, config.json edited */
    char *bare = e0_path_join(root, "bare");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "mkdir '%s' && ln -s '%s'/*.safetensors '%s'/ && "
             "sed 's/\"route_stickiness\": 0, //' '%s/config.json' > '%s/config.json' && "
             "! grep -q route_stickiness '%s/config.json'",
             bare, dir, bare, dir, bare, bare);
    assert_int_equal(tu_run(cmd), 0);
    e0_engine *a = open_traced(dir), *b = open_traced(bare);
    decode_same(a, b);
    const uint32_t *ka, *kb;
    const size_t na = e0_engine_trace(a, &ka), nb = e0_engine_trace(b, &kb);
    assert_int_equal(na, nb);
    assert_memory_equal(ka, kb, na * sizeof *ka);
    e0_engine_free(a);
    e0_engine_free(b);
    free(dir);
    free(bare);
    tu_rmtree(root);
    free(root);
}

/* Within a prefill batch token t follows token t - 1: with P = 1 a batch
 * of 6 tokens requests exactly k experts per layer (the first token's),
 * and the decode that follows keeps them. */
static void test_sticky_batch(void **state) {
    (void)state;
    char *root = tu_tmpdir();
    char *dir = tu_synth_sticky(root, "one", 1.0);
    e0_engine *e = open_traced(dir);
    e0_model_info in;
    e0_engine_info(e, &in);
    e0_session *s;
    char err[E0_ERR_MAX];
    assert_int_equal(e0_session_new(e, NULL, &s, err), 0);
    float *l = malloc((size_t)in.vocab_size * sizeof *l);
    const int32_t ids[6] = {11, 300, 4000, 52, 9001, 123};
    assert_int_equal(e0_session_eval(s, ids, 6, E0_LOGITS_LAST, l, err), 0);
    assert_int_equal(e0_engine_trace(e, NULL), (size_t)LAYERS * K);
    int32_t next = 5;
    assert_int_equal(e0_session_eval(s, &next, 1, E0_LOGITS_LAST, l, err), 0);
    const uint32_t *keys;
    assert_int_equal(e0_engine_trace(e, &keys), (size_t)2 * LAYERS * K);
    for (int i = 0; i < LAYERS * K; i++) {
        bool found = false;
        for (int j = 0; j < K; j++)
            found |= keys[LAYERS * K + i] == keys[(i / K) * K + j];
        assert_true(found);
    }
    /* a reset session starts without a previous token: the router's own choice */
    e0_session_reset(s);
    assert_int_equal(e0_session_eval(s, &next, 1, E0_LOGITS_LAST, l, err), 0);
    free(l);
    e0_session_free(s);
    e0_engine_free(e);
    free(dir);
    tu_rmtree(root);
    free(root);
}

/* The CLI writes the key and refuses values outside [0, 1]; config.json
 * with an out-of-range value is refused with the key named. */
static void test_sticky_cli_config(void **state) {
    (void)state;
    char *root = tu_tmpdir();
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s synth --shape tiny-qwen3moe --route-stickiness 0.3 '%s/m' | grep -q sticky && "
             "grep -q '\"route_stickiness\": 0.3' '%s/m/config.json'",
             tu_bin(), root, root);
    assert_int_equal(tu_run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s synth --shape tiny --route-stickiness 1.5 '%s/x' 2>/dev/null",
             tu_bin(), root);
    assert_int_equal(tu_run(cmd), 2);
    const char *bad = "{\"model_type\": \"qwen3_moe\", \"edge0_synth\": {\"route_stickiness\": 1.5}, "
                      "\"hidden_size\": 64, \"num_hidden_layers\": 1, \"vocab_size\": 10, "
                      "\"num_attention_heads\": 1, \"moe_intermediate_size\": 8, "
                      "\"num_experts_per_tok\": 1, \"num_experts\": 2}";
    e0_config c;
    char err[E0_ERR_MAX];
    assert_int_equal(config_parse(&c, bad, strlen(bad), "bad.json", err), E0_EFORMAT);
    assert_non_null(strstr(err, "route_stickiness"));
    const char *good = "{\"model_type\": \"qwen3_moe\", \"edge0_synth\": {\"route_stickiness\": 0.25}, "
                       "\"hidden_size\": 64, \"num_hidden_layers\": 1, \"vocab_size\": 10, "
                       "\"num_attention_heads\": 1, \"moe_intermediate_size\": 8, "
                       "\"num_experts_per_tok\": 1, \"num_experts\": 2}";
    assert_int_equal(config_parse(&c, good, strlen(good), "good.json", err), 0);
    assert_true(c.route_stickiness == 0.25);
    config_free(&c);
    tu_rmtree(root);
    free(root);
}

/* The cache's router policy (stream/routecount.h, its default settings)
 * on a model with Zipf-skewed, sticky routing, 40 slots for 128 (layer,
 * expert) keys: eviction changes where bytes come from, never the logits;
 * each policy's hits are its simulation's exactly (the router policy's
 * replayed from the router logits the trace recorded; the simulation knows
 * no pins, and here no victim it picks is pinned: one token's experts are
 * the last requested), and the router policy hits more than LRU; the
 * recent policy likewise. */
static void test_router_policy(void **state) {
    (void)state;
    char *root = tu_tmpdir();
    char *dir = e0_path_join(root, "skew");
    e0_synth_opts so;
    e0_synth_opts_default(&so);
    so.no_sync = 1;
    so.route_skew = 1.0;
    so.route_stickiness = 0.25;
    char err[E0_ERR_MAX];
    if (e0_synth_write_opts(e0_synth_find("tiny"), dir, &so, err)) fail_msg("%s: %s", dir, err);
    e0_engine *a = open_with(dir, E0_CACHE_ROUTER, 40), *b = open_with(dir, E0_CACHE_LRU, 40);
    decode_same(a, b);
    e0_stats sa, sb;
    e0_engine_stats(a, &sa);
    e0_engine_stats(b, &sb);
    e0_cache_study ca, cb;
    assert_int_equal(e0_engine_cache_study(a, 40, 0, &ca, err), 0);
    assert_int_equal(e0_engine_cache_study(b, 40, 0, &cb, err), 0);
    assert_true(ca.router_replayed && cb.router_replayed);
    assert_int_equal(ca.requests, (uint64_t)STEPS * LAYERS * K);
    assert_int_equal(sa.lru_hits + sa.lru_misses, ca.requests);
    printf("  %llu requests, 40 slots: LRU %llu hits (simulated %llu), router %llu (simulated "
           "%llu), Belady %llu\n",
           (unsigned long long)ca.requests, (unsigned long long)sb.lru_hits,
           (unsigned long long)cb.hits[E0_POLICY_LRU], (unsigned long long)sa.lru_hits,
           (unsigned long long)ca.hits[E0_POLICY_ROUTER],
           (unsigned long long)ca.hits[E0_POLICY_BELADY]);
    assert_int_equal(sb.lru_hits, cb.hits[E0_POLICY_LRU]);
    assert_int_equal(sa.lru_hits, ca.hits[E0_POLICY_ROUTER]);
    assert_true(ca.hits[E0_POLICY_ROUTER] > ca.hits[E0_POLICY_LRU]);
    /* the recent policy (cachesim.h) likewise: the same logits, its
     * simulation's hits exactly, more than LRU */
    e0_engine *r = open_with(dir, E0_CACHE_RECENT, 40);
    assert_int_equal(e0_engine_cache_policy(r), E0_CACHE_RECENT);
    decode_same(r, b);
    e0_stats sr;
    e0_engine_stats(r, &sr);
    e0_cache_study cr;
    assert_int_equal(e0_engine_cache_study(r, 40, 0, &cr, err), 0);
    printf("  recent %llu (simulated %llu)\n", (unsigned long long)sr.lru_hits,
           (unsigned long long)cr.hits[E0_POLICY_RECENT]);
    assert_int_equal(sr.lru_hits, cr.hits[E0_POLICY_RECENT]);
    assert_true(cr.hits[E0_POLICY_RECENT] > cr.hits[E0_POLICY_LRU]);
    e0_engine_free(r);
    e0_engine_free(a);
    e0_engine_free(b);
    free(dir);
    tu_rmtree(root);
    free(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sticky_share),
        cmocka_unit_test(test_sticky_zero_is_none),
        cmocka_unit_test(test_sticky_batch),
        cmocka_unit_test(test_sticky_cli_config),
        cmocka_unit_test(test_router_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
