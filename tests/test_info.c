/* e0_engine_plan and `edge0 info`: the plan printed before a run is the
 * one the run then uses (I/O mode, cache slots, bundle size), on every
 * fixture layout and every GGUF file of ../shared; the model figures agree
 * with what the files and config.json say. */
#include "testutil.h"

#include "edge0.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *MODELS[] = {
    "fixtures/qwen3moe/hf",         "fixtures/qwen3moe/hf-fused",     "fixtures/qwen3moe/mlx",
    "fixtures/qwen3next/hf",        "fixtures/qwen3next/hf-fused",    "fixtures/qwen3next/mlx",
    "fixtures/qwen35moe/hf",        "fixtures/qwen35moe/hf-fused",    "fixtures/qwen35moe/mlx",
    "fixtures/qwen35moe/mlx-fused", "gguf/qwen3moe/model-Q4_0.gguf",  "gguf/qwen3next/model-Q8_0.gguf",
    "gguf/qwen35moe/model-Q4_0.gguf", "gguf/tiny-qwen35moe/model-Q4_K_M.gguf"};
enum { NM = sizeof MODELS / sizeof *MODELS };

/* A budget of 256 MiB (pread into the cache) and none (the fixtures fit in
 * memory, so auto loads them): plan and open agree. */
static void test_plan_is_what_open_does(void **state) {
    (void)state;
    for (size_t i = 0; i < NM; i++) {
        char path[4096], err[E0_ERR_MAX];
        snprintf(path, sizeof path, "%s", tu_shared(MODELS[i]));
        for (int budgeted = 0; budgeted < 2; budgeted++) {
            e0_engine_opts o;
            e0_engine_opts_default(&o);
            if (budgeted) o.mem_budget = 256ull << 20;
            e0_plan p;
            if (e0_engine_plan(path, &o, &p, err)) fail_msg("%s: %s", MODELS[i], err);
            e0_engine *e;
            if (e0_engine_open(&e, path, &o, err)) fail_msg("%s: %s", MODELS[i], err);
            e0_model_info info;
            e0_engine_info(e, &info);
            e0_stats st;
            e0_engine_stats(e, &st);
            assert_int_equal(p.info.weight_bytes, info.weight_bytes);
            assert_int_equal(p.info.expert_bytes, info.expert_bytes);
            /* the same mode and reason (the figures after it are read again) */
            const char *note = e0_engine_io_note(e);
            assert_memory_equal(p.io_note, note, strcspn(note, "("));
            assert_memory_equal(p.budget_note, e0_engine_budget_note(e), strlen(p.budget_note));
            if (budgeted) {
                assert_int_equal(p.io, E0_IO_PREAD);
                assert_int_equal(p.cache_slots, st.cache_slots);
                assert_int_equal(p.bundle_bytes, st.bundle_bytes);
                assert_int_equal(p.mem_budget, 256ull << 20);
                assert_false(p.auto_budget);
            } else {
                assert_int_equal(p.io, E0_IO_LOAD);
                assert_int_equal(p.cache_slots, 0);
                assert_non_null(strstr(e0_engine_io_note(e), "io load"));
            }
            e0_engine_free(e);
        }
    }
}

static cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return cJSON_Parse(buf);
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v)) fail_msg("no number '%s'", k);
    return v->valuedouble;
}

/* Parameters against the bf16 files themselves (every tensor's element
 * count: the plan counts the matrices and leaves out norms and the
 * DeltaNet convolutions, under 2% here) and active parameters against
 * config.json: all but the (E - k) unrouted experts of each layer and the
 * embedding table. */
static void test_figures(void **state) {
    (void)state;
    const char *hf[] = {"fixtures/qwen3moe/hf", "fixtures/qwen3next/hf", "fixtures/qwen35moe/hf"};
    for (size_t i = 0; i < 3; i++) {
        char path[4096], err[E0_ERR_MAX];
        snprintf(path, sizeof path, "%s", tu_shared(hf[i]));
        e0_plan p;
        if (e0_engine_plan(path, NULL, &p, err)) fail_msg("%s", err);
        st_set *s;
        if (st_set_open_dir(&s, path, err)) fail_msg("%s", err);
        uint64_t numel = 0;
        for (size_t t = 0; t < st_count(s); t++) {
            const st_tensor *x = st_at(s, t);
            uint64_t n = 1;
            for (int d = 0; d < x->ndim; d++)
                n *= (uint64_t)x->shape[d];
            numel += n;
        }
        st_set_free(s);
        const double rel = ((double)numel - (double)p.params) / (double)numel;
        printf("  %s: %llu parameters planned, %llu in the files (%.2f%% not counted)\n", hf[i],
               (unsigned long long)p.params, (unsigned long long)numel, 100 * rel);
        assert_true(rel >= 0 && rel < 0.02);
        char cfgp[4200];
        snprintf(cfgp, sizeof cfgp, "%s/config.json", path);
        cJSON *cfg = read_json(cfgp);
        assert_non_null(cfg);
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
        if (tc) cfg = cJSON_Duplicate(tc, 1), cJSON_Delete(read_json(cfgp)); /* qwen3.5 nests it */
        const double H = num(cfg, "hidden_size"), I = num(cfg, "moe_intermediate_size"),
                     L = num(cfg, "num_hidden_layers"), k = num(cfg, "num_experts_per_tok"),
                     V = num(cfg, "vocab_size");
        const cJSON *ne = cJSON_GetObjectItemCaseSensitive(cfg, "num_experts");
        const double E = ne ? ne->valuedouble : num(cfg, "num_local_experts");
        const double unrouted = L * (E - k) * 3 * H * I + V * H;
        assert_true((double)p.params - unrouted == (double)p.active_params);
        assert_int_equal(p.moe_layers, (int)L);
        assert_int_equal(p.n_bundles, (uint64_t)(L * E));
        cJSON_Delete(cfg);
    }
}

/* The command: JSON figures equal to the library's plan (--kv-type f16
 * halving the KV bytes), text for people, and clear errors for a path that
 * is not a model and an unknown cache type. */
static void test_cli(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), cmd[16384], out[4200], err[E0_ERR_MAX];
    snprintf(out, sizeof out, "%s/out.txt", dir);
    const char *m = tu_shared("fixtures/qwen35moe/mlx");
    snprintf(cmd, sizeof cmd, "%s info %s --mem-budget 256M --json > %s", tu_bin(), m, out);
    assert_int_equal(tu_run(cmd), 0);
    cJSON *j = read_json(out);
    assert_non_null(j);
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    o.mem_budget = 256ull << 20;
    e0_plan p;
    if (e0_engine_plan(m, &o, &p, err)) fail_msg("%s", err);
    assert_int_equal((int)num(j, "cache_slots"), p.cache_slots);
    assert_true(num(j, "params") == (double)p.params);
    assert_true(num(j, "kv_bytes_per_1k_tokens") == (double)p.kv_bytes_per_1k);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "io")->valuestring, "pread");
    const double kv32 = num(j, "kv_bytes_per_1k_tokens");
    cJSON_Delete(j);
    /* --kv-type f16 reaches the plan: half the KV bytes; a bad type is refused */
    snprintf(cmd, sizeof cmd, "%s info %s --kv-type f16 --json > %s", tu_bin(), m, out);
    assert_int_equal(tu_run(cmd), 0);
    j = read_json(out);
    assert_non_null(j);
    assert_true(kv32 > 0 && num(j, "kv_bytes_per_1k_tokens") * 2 == kv32);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(j, "kv_type")->valuestring, "f16");
    cJSON_Delete(j);
    snprintf(cmd, sizeof cmd, "%s info %s --kv-type q8 2> %s", tu_bin(), m, out);
    assert_int_equal(tu_run(cmd), 2);
    snprintf(cmd, sizeof cmd, "grep -q -- \"--kv-type: 'q8' is not f32 or f16\" %s", out);
    assert_int_equal(tu_run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s info %s > %s", tu_bin(), m, out);
    assert_int_equal(tu_run(cmd), 0);
    snprintf(cmd, sizeof cmd, "grep -q '^plan: io load' %s && grep -q '^expert cache: none' %s",
             out, out);
    assert_int_equal(tu_run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s info %s/nope 2> %s", tu_bin(), dir, out);
    assert_int_equal(tu_run(cmd), 1);
    snprintf(cmd, sizeof cmd, "grep -q 'nope' %s", out);
    assert_int_equal(tu_run(cmd), 0);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_is_what_open_does),
        cmocka_unit_test(test_figures),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
