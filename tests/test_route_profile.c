/* Routing profiles (synth --route-profile; io/config.h e0_route_cfg): a
 * tiny shape with Qwen3.6's experts (tiny-e256: E = 256, k = 8) written
 * with the qwen36 profile decodes with about the published share of each
 * token's experts kept from the previous token (37%; the same shape without
 * a profile keeps ~3%, k/E), in both the mlx and the GGUF form; the GGUF
 * file's edge0.route_* keys read back into the config config.json gives;
 * out-of-range keys, unknown profiles and a profile with stickiness are
 * refused by name. Routing is read from the expert cache's request trace:
 * a one-token step requests exactly the token's k experts per layer, in
 * layer order (test_route.c). */
#include "testutil.h"

#include "edge0.h"
#include "io/config.h"
#include "io/gguf.h"
#include "util/file.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 64, LAYERS = 4, EXPERTS = 256, K = 8 };

#define QWEN3_TOKENIZER "assets/qwen3-tokenizer/tokenizer.json"

static char *write_synth(const char *root, const char *name, const char *profile, bool gguf,
                         double sticky) {
    char *dst = e0_path_join(root, name);
    e0_synth_opts so;
    e0_synth_opts_default(&so);
    so.no_sync = 1;
    so.route_profile = profile;
    so.route_stickiness = sticky;
    if (gguf) {
        so.format = E0_SYNTH_GGUF;
        so.tokenizer = QWEN3_TOKENIZER;
    }
    char err[E0_ERR_MAX];
    if (e0_synth_write_opts(e0_synth_find("tiny-e256"), dst, &so, err))
        fail_msg("%s: %s", dst, err);
    return dst;
}

/* Greedy decode of STEPS one-token steps through the traced cache; returns
 * the share of a token's experts also chosen by the previous token
 * (averaged over layers and steps >= 1) and the share of the decode's
 * selections that the 16 most used experts of each layer take. */
static double decode_reuse(const char *path, double *top16) {
    e0_engine *e = tu_open_cached(path, 256, -1, LAYERS, EXPERTS, K);
    char err[E0_ERR_MAX];
    e0_model_info in;
    e0_engine_info(e, &in);
    if (e0_engine_trace_start(e, 1 << 16, STEPS, err)) fail_msg("%s", err);
    e0_session *s;
    if (e0_session_new(e, NULL, &s, err)) fail_msg("%s", err);
    float *l = malloc((size_t)in.vocab_size * sizeof *l);
    int32_t id = 7;
    for (int t = 0; t < STEPS; t++) {
        if (e0_session_eval(s, &id, 1, E0_LOGITS_LAST, l, err)) fail_msg("%s", err);
        id = 0;
        for (int32_t v = 1; v < in.vocab_size; v++)
            if (l[v] > l[id]) id = v;
    }
    const uint32_t *keys;
    assert_int_equal(e0_engine_trace(e, &keys), (size_t)STEPS * LAYERS * K);
    int shared = 0;
    int cnt[LAYERS][EXPERTS] = {{0}};
    for (int t = 0; t < STEPS; t++)
        for (int ly = 0; ly < LAYERS; ly++) {
            const uint32_t *b = keys + ((size_t)t * LAYERS + ly) * K, *a = b - LAYERS * K;
            for (int i = 0; i < K; i++) {
                assert_int_equal(b[i] / EXPERTS, (uint32_t)ly);
                cnt[ly][b[i] % EXPERTS]++;
                for (int j = 0; t > 0 && j < K; j++)
                    shared += a[j] == b[i];
            }
        }
    double top = 0;
    for (int ly = 0; ly < LAYERS; ly++) /* the 16 largest counts of the layer */
        for (int r = 0; r < 16; r++) {
            int best = 0;
            for (int x = 1; x < EXPERTS; x++)
                if (cnt[ly][x] > cnt[ly][best]) best = x;
            top += cnt[ly][best];
            cnt[ly][best] = -1;
        }
    *top16 = top / ((double)STEPS * LAYERS * K);
    free(l);
    e0_session_free(s);
    e0_engine_free(e);
    return (double)shared / ((double)(STEPS - 1) * LAYERS * K);
}

/* Previous-token reuse near the published 37% (a coarse bound: uniform
 * routing keeps ~3%), and the popular experts' share near 42%. */
static void test_profile_reuse(void **state) {
    (void)state;
    char *root = tu_tmpdir();
    char *plain = write_synth(root, "plain", NULL, false, 0);
    char *prof = write_synth(root, "q36", "qwen36", false, 0);
    double t0, t1;
    const double r0 = decode_reuse(plain, &t0), r1 = decode_reuse(prof, &t1);
    printf("  tiny-e256, %d tokens: previous-token reuse %.1f%% without a profile, %.1f%% with "
           "qwen36 (published 37%%); top-16 share %.1f%% / %.1f%% (published 42%%)\n",
           STEPS, 100 * r0, 100 * r1, 100 * t0, 100 * t1);
    assert_true(r0 < 0.10);
    assert_true(r1 > 0.27 && r1 < 0.47);
    assert_true(t1 > 0.30 && t1 < 0.60 && t1 > t0 + 0.1);
    free(plain);
    free(prof);
    tu_rmtree(root);
    free(root);
}

/* config_from_gguf of a whole GGUF file. */
static void gguf_config(const char *path, e0_config *c) {
    char *buf = NULL, err[E0_ERR_MAX];
    size_t len = 0;
    assert_int_equal(e0_read_file(path, &buf, &len, 1u << 30, err), 0);
    gguf_file *g;
    if (gguf_parse(&g, (const uint8_t *)buf, len, len, path, err)) fail_msg("%s", err);
    if (config_from_gguf(c, g, 151936, err)) fail_msg("%s", err);
    gguf_free(g);
    free(buf);
}

/* The GGUF form carries the profile: its config equals config.json's (the
 * popularity offsets too, to float rounding of the stored values), and it
 * decodes with the same reuse; route stickiness travels the same way. */
static void test_profile_gguf(void **state) {
    (void)state;
    char *root = tu_tmpdir();
    char *dir = write_synth(root, "q36", "qwen36", false, 0);
    char *gg = write_synth(root, "q36.gguf", "qwen36", true, 0);
    e0_config a, b;
    char err[E0_ERR_MAX];
    assert_int_equal(config_load(&a, dir, err), 0);
    gguf_config(gg, &b);
    assert_string_equal(a.route.name, "qwen36");
    assert_string_equal(b.route.name, "qwen36");
    assert_true(a.route.popularity > 0 && a.route.recent > 0 && a.route.window_len > 1);
    assert_true(fabs(a.route.popularity - b.route.popularity) < 1e-6);
    assert_true(fabs(a.route.recent - b.route.recent) < 1e-6);
    assert_true(fabs(a.route.window - b.route.window) < 1e-6);
    assert_true(fabs(a.route.decay - b.route.decay) < 1e-6);
    assert_int_equal(a.route.window_len, b.route.window_len);
    assert_true(a.route.seed == b.route.seed);
    assert_true(config_route_on(&a) && config_route_on(&b));
    assert_non_null(a.route.bias);
    assert_non_null(b.route.bias);
    int differ = 0;
    for (int i = 0; i < LAYERS * EXPERTS; i++) {
        assert_true(fabsf(a.route.bias[i] - b.route.bias[i]) < 1e-5f);
        differ += i >= EXPERTS && a.route.bias[i] != a.route.bias[i - EXPERTS];
    }
    assert_true(differ > EXPERTS); /* each layer its own popularity ranking */
    config_free(&a);
    config_free(&b);
    double top;
    const double r = decode_reuse(gg, &top);
    printf("  tiny-e256 GGUF, qwen36: previous-token reuse %.1f%%, top-16 share %.1f%%\n", 100 * r,
           100 * top);
    assert_true(r > 0.27 && r < 0.47);
    char *st = write_synth(root, "sticky.gguf", NULL, true, 0.5);
    gguf_config(st, &b);
    assert_true(b.route_stickiness == 0.5);
    assert_false(config_route_on(&b));
    assert_true(config_route_kept(&b));
    config_free(&b);
    free(st);
    free(dir);
    free(gg);
    tu_rmtree(root);
    free(root);
}

/* Refusals, each naming what is wrong. */
static void test_profile_errors(void **state) {
    (void)state;
    char *root = tu_tmpdir();
    e0_synth_opts so;
    e0_synth_opts_default(&so);
    so.route_profile = "nope";
    e0_synth_info info;
    char err[E0_ERR_MAX];
    assert_int_equal(e0_synth_plan_info(e0_synth_find("tiny-e256"), &so, &info, err), E0_EINVAL);
    assert_non_null(strstr(err, "nope"));
    so.route_profile = "qwen36";
    so.route_stickiness = 0.5;
    assert_int_equal(e0_synth_plan_info(e0_synth_find("tiny-e256"), &so, &info, err), E0_EINVAL);
    assert_non_null(strstr(err, "stickiness"));
    so.format = E0_SYNTH_GGUF;
    so.tokenizer = QWEN3_TOKENIZER;
    assert_int_equal(e0_synth_plan_info(e0_synth_find("tiny-e256"), &so, &info, err), E0_EINVAL);
    static const char *const bad[] = {"\"route_popularity\": 9", "\"route_recent\": -1",
                                      "\"route_decay\": 1.5",    "\"route_window_len\": 2.5",
                                      "\"route_window\": \"x\"", "\"route_profile\": 3",
                                      "\"route_seed\": -1"};
    static const char *const named[] = {"route_popularity", "route_recent", "route_decay",
                                        "route_window_len", "route_window", "route_profile",
                                        "route_seed"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char js[1024];
        snprintf(js, sizeof js,
                 "{\"model_type\": \"qwen3_moe\", \"edge0_synth\": {%s}, \"hidden_size\": 64, "
                 "\"num_hidden_layers\": 1, \"vocab_size\": 10, \"num_attention_heads\": 1, "
                 "\"moe_intermediate_size\": 8, \"num_experts_per_tok\": 1, \"num_experts\": 2}",
                 bad[i]);
        e0_config c;
        assert_int_equal(config_parse(&c, js, strlen(js), "bad.json", err), E0_EFORMAT);
        if (!strstr(err, named[i])) fail_msg("%s: %s", bad[i], err);
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s synth --shape tiny-e256 --route-profile qwen36 '%s/m' > '%s/out' && "
             "grep -q 'profile qwen36' '%s/out' && "
             "grep -q '\"route_profile\": \"qwen36\"' '%s/m/config.json' && "
             "%s synth --help > '%s/help' && grep -q -- --route-profile '%s/help' && "
             "! %s synth --shape tiny --route-profile nope '%s/x' 2>/dev/null",
             tu_bin(), root, root, root, root, tu_bin(), root, root, tu_bin(), root);
    assert_int_equal(tu_run(cmd), 0);
    tu_rmtree(root);
    free(root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_reuse),
        cmocka_unit_test(test_profile_gguf),
        cmocka_unit_test(test_profile_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
