/* The streaming expert layer on the fixtures (docs/design.md §3-4):
 *  - every path, preset, cache size and I/O thread count gives logits
 *    bit-identical (memcmp) to exact, in prefill and decode, for separate
 *    and fused layouts;
 *  - full-layer prefill matches exact [separate] and [fused], and the check
 *    would catch gate/up rows concatenated wholesale;
 *  - bundles built in the historical gate-first order are ~100% wrong;
 *  - staged_replace with a wrong prediction drops experts and counts every
 *    drop; without it nothing is dropped;
 *  - direct (O_DIRECT) reads under a memory budget, speculative loads of
 *    the next layer's experts, and the fallback to buffered reads when the
 *    filesystem rejects O_DIRECT, all bit-identical to exact;
 *  - Qwen3.5 GGUF files with the MTP block (tests/data/mtp): every path,
 *    preset and I/O mode bit-identical to the --no-mtp file. */
#include "testutil.h"

#include "edge0.h"
#include "model/model.h"
#include "quant/mat.h"
#include "stream/switchglu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Under ThreadSanitizer (make test's second run) the matrices shrink to
 * what exercises the threads: many I/O threads and a small cache, where
 * loads, evictions and prefetches overlap. The arithmetic is one thread's
 * and the full matrices run in the normal build. */
#if defined(__SANITIZE_THREAD__)
enum { TSAN = 1 };
#else
enum { TSAN = 0 };
#endif

typedef struct {
    int32_t ids[32];
    size_t n;
    int prompt;
} seq;

/* The ids of the family's golden sequence (for a GGUF file, its own golden). */
static seq load_seq(const char *family, const char *layout) {
    char rel[256], err[E0_ERR_MAX];
    if (tu_is_gguf(family))
        snprintf(rel, sizeof rel, "%s/golden_%.*s.safetensors", family,
                 (int)(strlen(layout) - strlen("model-") - strlen(".gguf")), layout + strlen("model-"));
    else
        snprintf(rel, sizeof rel, "fixtures/%s/golden.safetensors", family);
    st_set *g;
    if (st_set_open_file(&g, tu_shared(rel), err)) fail_msg("%s", err);
    seq q;
    const int32_t *ids = tu_i32(g, "input_ids", &q.n);
    assert_true(q.n <= 32);
    memcpy(q.ids, ids, q.n * sizeof *ids);
    q.prompt = atoi(st_meta(g, "prompt_len"));
    st_set_free(g);
    return q;
}

static e0_engine *open_with(const char *family, const char *layout, const e0_engine_opts *o) {
    char err[E0_ERR_MAX];
    e0_engine *e;
    if (e0_engine_open(&e, tu_checkpoint(family, layout), o, err))
        fail_msg("%s/%s: %s", family, layout, err);
    return e;
}

/* Prefill `prompt` ids, decode the rest one by one; every position's logits. */
static float *run_seq(e0_engine *e, const seq *q) {
    char err[E0_ERR_MAX];
    e0_model_info info;
    e0_engine_info(e, &info);
    const size_t V = (size_t)info.vocab_size;
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)q->n;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    float *lg = malloc(q->n * V * sizeof *lg);
    assert_non_null(lg);
    if (e0_session_eval(s, q->ids, (size_t)q->prompt, E0_LOGITS_ALL, lg, err)) fail_msg("%s", err);
    for (size_t i = (size_t)q->prompt; i < q->n; i++)
        if (e0_session_eval(s, q->ids + i, 1, E0_LOGITS_ALL, lg + i * V, err)) fail_msg("%s", err);
    e0_session_free(s);
    return lg;
}

/* The baseline: exact, every bundle straight from the mapping. */
static float *baseline(const char *family, const char *layout, const seq *q) {
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    o.path = E0_PATH_EXACT;
    o.io = E0_IO_MMAP;
    e0_engine *e = open_with(family, layout, &o);
    float *lg = run_seq(e, q);
    e0_engine_free(e);
    return lg;
}

typedef struct {
    const char *name;
    e0_path path;
    const char *preset;
    const char *opts; /* "field=value field=value" */
} config;

static const config CONFIGS[] = {
    {"exact", E0_PATH_EXACT, NULL, ""},
    {"staged n4", E0_PATH_STAGED, NULL, "staged=true staged_n=4"},
    {"staged n8 async", E0_PATH_STAGED, NULL, "staged=true staged_n=8 staged_sync=false"},
    {"staged incr+writeback", E0_PATH_STAGED, NULL,
     "staged=true staged_n=4 incr_stack=true incr_writeback=true asm_cache=false"},
    {"hot 4/interval 1", E0_PATH_HOT, NULL, "hot_per_layer=4 hot_update_interval=1"},
    {"hot 6 window 1", E0_PATH_HOT, NULL, "hot_per_layer=6 hot_window=1 pin_bonus=0"},
    {"full", E0_PATH_FULL, NULL, ""},
    {"full prefill 2 layers + prefill_hot", E0_PATH_AUTO, NULL,
     "full_layer_prefill=true prefill_full_layers=2 prefill_hot=4"},
    {"preset staged_k4", E0_PATH_AUTO, "staged_k4", ""},
    {"preset staged_k4 trigger 4", E0_PATH_AUTO, "staged_k4", "staged_trigger=4"},
    {"preset prod_k8", E0_PATH_AUTO, "prod_k8", ""},
    {"preset staged_k8 trigger 4", E0_PATH_AUTO, "staged_k8", "staged_trigger=4"},
};
enum { NCONFIGS = sizeof CONFIGS / sizeof *CONFIGS };

static void apply(e0_engine_opts *o, const config *c, int slots, int many) {
    char err[E0_ERR_MAX], buf[256];
    e0_engine_opts_default(o);
    if (c->preset && e0_opts_preset(o, c->preset, err)) fail_msg("%s", err);
    o->path = c->path;
    snprintf(buf, sizeof buf, "%s", c->opts);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        assert_non_null(eq);
        *eq = 0;
        if (e0_opts_set(o, tok, eq + 1, err)) fail_msg("%s", err);
    }
    o->io = E0_IO_PREAD; /* the LRU and its reads are what is under test */
    o->layer.cache_slots = slots;
    o->layer.load_threads = many ? 8 : 1;
    o->layer.prefetch_threads = many ? 4 : 0;
}

/* Every path x preset x cache size (1, 2, large) x I/O threads (1, many) on
 * four layouts that cover separate / fused and bf16 / quantized experts;
 * the main paths at two settings on every other layout. */
static bool full_matrix(int li) {
    const char *fam = TU_CHECKPOINTS[li][0], *lay = TU_CHECKPOINTS[li][1];
    return (!strcmp(fam, "qwen3moe") && !strcmp(lay, "hf")) ||
           (!strcmp(fam, "gguf/tiny-qwen35moe") && !strcmp(lay, "model-Q4_K_M.gguf")) ||
           (!strcmp(fam, "qwen3next") && !strcmp(lay, "mlx")) ||
           (!strcmp(fam, "qwen35moe") && (!strcmp(lay, "hf-fused") || !strcmp(lay, "mlx-fused")));
}

static void test_paths_bit_identical(void **state) {
    (void)state;
    const int slots[] = {1, 2, 4096};
    long runs = 0;
    for (int li = 0; li < TU_NCHECKPOINTS; li++) {
        const char *fam = TU_CHECKPOINTS[li][0], *lay = TU_CHECKPOINTS[li][1];
        const bool all = full_matrix(li);
        if (TSAN && !all) continue;
        seq q = load_seq(fam, lay);
        float *ref = baseline(fam, lay, &q);
        e0_engine *e0 = open_with(fam, lay, NULL);
        e0_model_info info;
        e0_engine_info(e0, &info);
        e0_engine_free(e0);
        const size_t bytes = q.n * (size_t)info.vocab_size * sizeof(float);
        for (int ci = 0; ci < NCONFIGS; ci++)
            for (int si = 0; si < 3; si++)
                for (int many = 0; many < 2; many++) {
                    if (!all && (ci > 6 || si + many != 1 + (ci % 2))) continue;
                    if (TSAN && (!many || si != 1)) continue;
                    e0_engine_opts o;
                    apply(&o, &CONFIGS[ci], slots[si], many);
                    e0_engine *e = open_with(fam, lay, &o);
                    float *lg = run_seq(e, &q);
                    e0_stats st;
                    e0_engine_stats(e, &st);
                    if (memcmp(lg, ref, bytes) != 0)
                        fail_msg("%s/%s %s cache_slots=%d threads=%s: logits differ from exact",
                                 fam, lay, CONFIGS[ci].name, slots[si], many ? "many" : "1");
                    assert_int_equal(st.drops, 0);
                    runs++;
                    free(lg);
                    e0_engine_free(e);
                }
        free(ref);
    }
    printf("  %ld configurations bit-identical to exact\n", runs);
}

/* With --io load the default kernels repack the resident 4-bit matrices
 * into 16-row panels (mat.h), while the streaming paths read bundles from
 * the file in its own layout: both layouts, mixed in one run, give exact's
 * logits bit for bit. The GGUF files (nothing repacked: their matrices
 * are read from the loaded copy, their bundles from the file) likewise. */
static void test_paths_loaded(void **state) {
    (void)state;
    const char *models[][2] = {{"qwen3moe", "mlx"},
                               {"gguf/tiny-qwen35moe", "model-Q4_K_M.gguf"},
                               {"qwen3next", "mlx"},
                               {"qwen35moe", "mlx"},
                               {"qwen35moe", "mlx-fused"},
                               {"gguf/tiny-qwen35moe", "model-Q6_K.gguf"},
                               {"gguf/tiny-qwen35moe", "model-IQ4_XS.gguf"},
                               {"gguf/tiny-qwen3moe", "model-Q4_K_M.gguf"}};
    const int cfgs[] = {0, 1, 4, 6, 7};
    long runs = 0;
    for (size_t li = 0; li < (TSAN ? 1 : sizeof models / sizeof *models); li++) {
        seq q = load_seq(models[li][0], models[li][1]);
        float *ref = baseline(models[li][0], models[li][1], &q);
        for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
            e0_engine_opts o;
            apply(&o, &CONFIGS[cfgs[c]], 4096, 1);
            o.io = E0_IO_LOAD;
            e0_engine *e = open_with(models[li][0], models[li][1], &o);
            if (mat_p16_wanted() && !tu_is_gguf(models[li][0]))
                assert_non_null(strstr(e0_engine_io_note(e), "16-row panels"));
            e0_model_info info;
            e0_engine_info(e, &info);
            float *lg = run_seq(e, &q);
            if (memcmp(lg, ref, q.n * (size_t)info.vocab_size * sizeof(float)) != 0)
                fail_msg("%s/%s %s, io load: logits differ from exact", models[li][0], models[li][1],
                         CONFIGS[cfgs[c]].name);
            runs++;
            free(lg);
            e0_engine_free(e);
        }
        free(ref);
    }
    printf("  %ld configurations under --io load bit-identical to exact\n", runs);
}

/* The paths are really taken: staged hits, hot hits and whole-layer loads happen. */
static void test_paths_exercised(void **state) {
    (void)state;
    seq q = load_seq("qwen35moe", "mlx");
    e0_engine_opts o;
    e0_stats st;
    apply(&o, &CONFIGS[1], 64, 1); /* staged n4 */
    e0_engine *e = open_with("qwen35moe", "mlx", &o);
    free(run_seq(e, &q));
    e0_engine_stats(e, &st);
    printf("  staged: %llu hits, %llu exact fallbacks, prediction %llu/%llu\n",
           (unsigned long long)st.staged_hits, (unsigned long long)st.exact_fallbacks,
           (unsigned long long)st.predicted_routed, (unsigned long long)st.routed_staged);
    assert_true(st.staged_hits > 0);
    assert_int_equal(st.staged_hits + st.exact_fallbacks, st.routed_staged);
    e0_engine_free(e);
    apply(&o, &CONFIGS[4], 64, 1); /* hot */
    e = open_with("qwen35moe", "mlx", &o);
    free(run_seq(e, &q));
    e0_engine_stats(e, &st);
    printf("  hot: %llu hits, %llu misses\n", (unsigned long long)st.hot_hits,
           (unsigned long long)st.hot_misses);
    assert_true(st.hot_hits > 0 && st.hot_misses > 0);
    e0_engine_free(e);
    apply(&o, &CONFIGS[7], 64, 1); /* full-layer prefill on 2 layers */
    e = open_with("qwen35moe", "mlx-fused", &o);
    free(run_seq(e, &q));
    e0_engine_stats(e, &st);
    assert_int_equal(st.full_layers, 2);
    e0_engine_free(e);
    apply(&o, &CONFIGS[0], 4096, 1); /* exact: the LRU hits once warm */
    e = open_with("qwen35moe", "mlx", &o);
    free(run_seq(e, &q));
    e0_engine_stats(e, &st);
    stream_counters sc;
    stream_counters_get(e->stream, &sc);
    printf("  exact: LRU %llu hits, %llu misses, %llu bytes read, %llu speculative loads (%llu "
           "used)\n",
           (unsigned long long)st.lru_hits, (unsigned long long)st.lru_misses,
           (unsigned long long)st.bytes_read, (unsigned long long)sc.spec_loads,
           (unsigned long long)sc.spec_used);
    assert_true(st.lru_hits > 0);
    /* every read is a miss or a speculative load, of the expert bytes alone */
    assert_int_equal((st.lru_misses + sc.spec_loads) * st.bundle_bytes, st.bytes_read);
    assert_true(sc.spec_used <= sc.spec_loads && sc.spec_used <= st.lru_hits);
    e0_engine_free(e);
}

/* MoE block `L` of the golden file, through the engine, vs the reference. */
static double moe_err(e0_engine *e, const char *family, int L) {
    char rel[256], err[E0_ERR_MAX], name[64];
    e0_model_info info;
    e0_engine_info(e, &info);
    snprintf(rel, sizeof rel, "fixtures/%s/golden%s.safetensors", family,
             strncmp(info.layout, "mlx", 3) ? "" : "_q");
    st_set *g;
    if (st_set_open_file(&g, tu_shared(rel), err)) fail_msg("%s", err);
    const size_t T = 32, H = (size_t)e->model.cfg.hidden;
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)T;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    snprintf(name, sizeof name, "moe.%d.in", L);
    const float *in = tu_f32(g, name, T * H);
    snprintf(name, sizeof name, "moe.%d.out", L);
    const float *ref = tu_f32(g, name, T * H);
    float *out = malloc(T * H * sizeof *out);
    if (moe_forward(s, L, in, (int)T, out, err)) fail_msg("%s", err);
    double r = tu_rel_l2(out, ref, T * H);
    free(out);
    e0_session_free(s);
    st_set_free(g);
    return r;
}

static void full_layer_case(const char *family, const char *layout) {
    seq q = load_seq(family, layout);
    q.prompt = (int)q.n; /* all prefill */
    float *ref = baseline(family, layout, &q);
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    o.layer.full_layer_prefill = 1;
    o.io = E0_IO_PREAD;
    e0_engine *e = open_with(family, layout, &o);
    float *lg = run_seq(e, &q);
    e0_stats st;
    e0_engine_stats(e, &st);
    assert_int_equal(st.full_layers, e->model.cfg.n_layers);
    e0_model_info info;
    e0_engine_info(e, &info);
    assert_memory_equal(lg, ref, q.n * (size_t)info.vocab_size * sizeof(float));
    /* whole-layer reads: the stacked tensors only, nothing else */
    printf("  %s/%s: full-layer prefill matches exact; read %llu bytes for %llu of experts\n",
           family, layout, (unsigned long long)st.bytes_read,
           (unsigned long long)info.expert_bytes);
    assert_true(st.bytes_read <= info.expert_bytes + info.expert_bytes / 20);
    free(lg);
    free(ref);
    e0_engine_free(e);
}

static void test_full_layer_separate(void **state) {
    (void)state;
    full_layer_case("qwen35moe", "mlx");
    full_layer_case("qwen3moe", "mlx");
    full_layer_case("qwen3moe", "hf");
    full_layer_case("gguf/tiny-qwen35moe", "model-Q4_K_M.gguf"); /* mixed ggml types */
    full_layer_case("gguf/qwen3next", "model-Q8_0.gguf");
}

/* Fused: correct per-expert interleaving matches; views made the way a
 * wholesale concatenation of [E, I, H] gate and up stacks would lay rows out
 * (expert e's gate_up = rows [2eI, 2eI + 2I) of [gate_all; up_all]) do not. */
static void test_full_layer_fused(void **state) {
    (void)state;
    full_layer_case("qwen35moe", "mlx-fused");
    full_layer_case("qwen35moe", "hf-fused");
    full_layer_case("qwen3next", "hf-fused");
    e0_engine *e = open_with("qwen35moe", "mlx", NULL);
    e0_layer *ly = &e->model.layers[0];
    const int E = e->model.cfg.n_experts;
    const int64_t I = e->model.cfg.moe_inter;
    double good = moe_err(e, "qwen35moe", 0);
    e0_expert *keep = malloc((size_t)E * sizeof *keep), *wrong = malloc((size_t)E * sizeof *wrong);
    memcpy(keep, ly->experts, (size_t)E * sizeof *keep);
    for (int x = 0; x < E; x++) {
        /* row r of [gate_all; up_all] */
        int64_t r0 = (int64_t)x * 2 * I, r1 = r0 + I;
        wrong[x] = keep[x];
        wrong[x].gate = r0 < E * I ? mat_rows(&keep[r0 / I].gate, 0, I)
                                   : mat_rows(&keep[(r0 - E * I) / I].up, 0, I);
        wrong[x].up = r1 < E * I ? mat_rows(&keep[r1 / I].gate, 0, I)
                                 : mat_rows(&keep[(r1 - E * I) / I].up, 0, I);
    }
    memcpy(ly->experts, wrong, (size_t)E * sizeof *wrong);
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    o.io = E0_IO_MMAP; /* compute from the (wrong) views themselves */
    stream_free(e->stream);
    char err[E0_ERR_MAX];
    if (stream_new(&e->stream, &e->model, &o, err)) fail_msg("%s", err);
    double bad = moe_err(e, "qwen35moe", 0);
    printf("  gate/up interleaved per expert: rel L2 %.2g; concatenated wholesale: %.2g\n", good,
           bad);
    assert_true(good < 1e-5);
    assert_true(bad > 0.3);
    memcpy(ly->experts, keep, (size_t)E * sizeof *keep);
    free(keep);
    free(wrong);
    e0_engine_free(e);
}

/* Bundles in the historical gate-first order: silu(up) * gate, ~100% wrong. */
static void test_gate_first_order(void **state) {
    (void)state;
    const char *lays[] = {"hf", "mlx"};
    for (int i = 0; i < 2; i++) {
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.path = E0_PATH_EXACT;
        o.io = E0_IO_PREAD;
        o.layer.cache_slots = 0; /* every bundle read with the plan in force */
        e0_engine *e = open_with("qwen3moe", lays[i], &o);
        double good = moe_err(e, "qwen3moe", 1);
        stream_debug_order(e->stream, XB_ORDER_GATE_FIRST);
        double bad = moe_err(e, "qwen3moe", 1);
        printf("  qwen3moe/%s layer 1: math order rel L2 %.2g, gate-first %.2g\n", lays[i], good,
               bad);
        assert_true(good < 1e-5);
        assert_true(bad > 0.5);
        e0_engine_free(e);
    }
}

/* staged_replace with a wrong prediction drops, and counts every drop;
 * without it the same prediction drops nothing and the logits are exact. */
static void test_staged_replace(void **state) {
    (void)state;
    seq q = load_seq("qwen35moe", "mlx");
    float *ref = baseline("qwen35moe", "mlx", &q);
    for (int replace = 0; replace < 2; replace++) {
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.path = E0_PATH_STAGED;
        o.io = E0_IO_PREAD;
        o.layer.staged = 1;
        o.layer.staged_n = 4;
        o.layer.staged_replace = replace;
        e0_engine *e = open_with("qwen35moe", "mlx", &o);
        const int wrong[4] = {0, 1, 2, 3};
        for (int l = 0; l < e->model.cfg.n_layers; l++)
            stream_debug_predict(e->stream, l, wrong, 4);
        float *lg = run_seq(e, &q);
        e0_stats st;
        e0_engine_stats(e, &st);
        e0_model_info info;
        e0_engine_info(e, &info);
        printf("  staged_replace=%d: %llu staged hits, %llu drops, %llu exact fallbacks of %llu "
               "routed\n",
               replace, (unsigned long long)st.staged_hits, (unsigned long long)st.drops,
               (unsigned long long)st.exact_fallbacks, (unsigned long long)st.routed_staged);
        /* every routed expert is a staged hit, a drop or a fallback; hits are exactly the predicted
         * ones */
        assert_int_equal(st.staged_hits + st.drops + st.exact_fallbacks, st.routed_staged);
        assert_int_equal(st.staged_hits, st.predicted_routed);
        int same = memcmp(lg, ref, q.n * (size_t)info.vocab_size * sizeof(float)) == 0;
        if (replace) {
            assert_true(st.drops > 0);
            assert_int_equal(st.exact_fallbacks, 0);
            assert_false(same);
        } else {
            assert_int_equal(st.drops, 0);
            assert_true(st.exact_fallbacks > 0);
            assert_true(same);
        }
        free(lg);
        e0_engine_free(e);
    }
    free(ref);
}

/* Under a memory budget bundles are read with O_DIRECT into aligned slots
 * (and speculative loads run ahead in decode); a filesystem that rejects
 * O_DIRECT (simulated: the first direct read of each shard fails with
 * EINVAL) falls back to buffered reads for good. Every path, a tiny and a
 * large cache, separate / fused and bf16 / quantized experts: logits
 * bit-identical to exact from the mapping. */
static void test_direct_reads(void **state) {
    (void)state;
    static const char *lays[][2] = {{"qwen35moe", "mlx"},
                                    {"qwen35moe", "mlx-fused"},
                                    {"qwen3moe", "hf"},
                                    {"qwen3next", "hf-fused"},
                                    {"gguf/tiny-qwen35moe", "model-Q4_K_M.gguf"}};
    static const struct {
        const char *name;
        e0_path path;
        const char *opts;
    } paths[] = {{"exact", E0_PATH_EXACT, ""},
                 {"full", E0_PATH_FULL, ""},
                 {"staged n4", E0_PATH_STAGED, "staged=true staged_n=4"},
                 {"hot 4", E0_PATH_HOT, "hot_per_layer=4 hot_update_interval=1"}};
    uint64_t spec_loads = 0, spec_used = 0;
    int runs = 0, direct_runs = 0;
    for (size_t li = 0; li < sizeof lays / sizeof *lays; li++) {
        const char *fam = lays[li][0], *lay = lays[li][1];
        seq q = load_seq(fam, lay);
        float *ref = baseline(fam, lay, &q);
        for (size_t pi = 0; pi < sizeof paths / sizeof *paths; pi++)
            for (int slots = 2; slots <= 4096; slots *= 2048)
                for (int fail = 0; fail < 2; fail++) {
                    if (fail && pi > 1) continue;
                    char err[E0_ERR_MAX];
                    e0_engine_opts o;
                    e0_engine_opts_default(&o);
                    o.io = E0_IO_PREAD;
                    e0_engine *e = open_with(fam, lay, &o);
                    /* a stream of our own: a budget (direct reads) with a cache of `slots` */
                    config c = {paths[pi].name, paths[pi].path, NULL, paths[pi].opts};
                    apply(&o, &c, slots, 1);
                    o.mem_budget = 1ull << 30;
                    stream_free(e->stream);
                    if (stream_new(&e->stream, &e->model, &o, err)) fail_msg("%s", err);
                    const st_set *st = e->model.st;
                    const bool can = st_direct_on(st, 0);
                    if (fail) st_debug_direct_einval(e->model.st);
                    float *lg = run_seq(e, &q);
                    e0_model_info info;
                    e0_engine_info(e, &info);
                    if (memcmp(lg, ref, q.n * (size_t)info.vocab_size * sizeof(float)) != 0)
                        fail_msg("%s/%s %s cache_slots=%d%s: logits differ from exact", fam, lay,
                                 paths[pi].name, slots, fail ? " (O_DIRECT rejected)" : "");
                    if (can && fail)
                        assert_false(st_direct_on(st, 0)); /* fell back, and stays so */
                    if (can && !fail) assert_true(st_direct_on(st, 0));
                    direct_runs += can && !fail;
                    stream_counters sc;
                    stream_counters_get(e->stream, &sc);
                    spec_loads += sc.spec_loads;
                    spec_used += sc.spec_used;
                    runs++;
                    free(lg);
                    e0_engine_free(e);
                }
        free(ref);
    }
    printf("  %d configurations bit-identical to exact (%d with O_DIRECT on); %llu speculative "
           "loads, %llu used\n",
           runs, direct_runs, (unsigned long long)spec_loads, (unsigned long long)spec_used);
    if (!direct_runs)
        printf("  note: the fixtures' filesystem does not take O_DIRECT; only the fallback ran\n");
    assert_true(spec_loads > 0 && spec_used > 0);
}

/* prefetch_k: how many of the next layer's experts a decode token loads on
 * a guess. A fixed N never loads more than N per (token, layer) and leaves
 * the logits as exact's; the default (0: k/2, and the rest of the top-k
 * while they pay, which they do here) loads more than N = k/2 does. The
 * cache holds 12 of the 64 bundles, so that guesses load. */
static void test_prefetch_k(void **state) {
    (void)state;
    seq q = load_seq("qwen35moe", "mlx");
    float *ref = baseline("qwen35moe", "mlx", &q);
    e0_model_info info;
    uint64_t loads[4] = {0};
    const int32_t ks[] = {1, 2, 4, 0};
    enum { SLOTS = 12 };
    for (int i = 0; i < 4; i++) {
        char err[E0_ERR_MAX], v[16];
        e0_engine_opts o;
        apply(&o, &CONFIGS[0], SLOTS, 1); /* exact */
        snprintf(v, sizeof v, "%d", ks[i]);
        if (e0_opts_set(&o, "prefetch_k", v, err)) fail_msg("%s", err);
        e0_engine *e = open_with("qwen35moe", "mlx", &o);
        e0_engine_info(e, &info);
        float *lg = run_seq(e, &q);
        if (memcmp(lg, ref, q.n * (size_t)info.vocab_size * sizeof(float)) != 0)
            fail_msg("prefetch_k=%d: logits differ from exact", ks[i]);
        stream_counters sc;
        stream_counters_get(e->stream, &sc);
        loads[i] = sc.spec_loads;
        printf("  prefetch_k=%d: %llu speculative loads, %llu used\n", ks[i],
               (unsigned long long)sc.spec_loads, (unsigned long long)sc.spec_used);
        /* guesses are made at each MoE layer but the last, per decode token */
        const uint64_t calls = (uint64_t)(q.n - (size_t)q.prompt) * (uint64_t)(info.n_layers - 1);
        if (ks[i]) assert_true(sc.spec_loads <= calls * (uint64_t)ks[i]);
        free(lg);
        e0_engine_free(e);
    }
    assert_true(info.top_k == 4);
    /* (which guesses find their bundle already loading moves with the I/O
     * threads' timing, so only the bounds are exact) */
    assert_true(loads[0] > 0 && loads[0] < loads[1] && loads[1] < loads[2]);
    assert_true(loads[3] > loads[1]); /* the rest of the top-k, while they pay */
    char err[E0_ERR_MAX];
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    assert_int_equal(o.layer.prefetch_k, 0);
    assert_int_not_equal(e0_opts_set(&o, "prefetch_k", "-1", err), 0);
    assert_non_null(strstr(err, "prefetch_k"));
    free(ref);
}

/* A prefill pass with the LRU holding several layers: the next MoE layer's
 * experts that its router ranks in any prompt token's top-k load during
 * this layer (spec_prefill), whole experts run one per thread as their
 * loads land; the prompt's logits equal those with no guesses at all
 * (prefetch_cap 0) and the mapping's. A cache of fewer than four layers'
 * experts makes no prefill guesses. */
static void test_prefill_spec(void **state) {
    (void)state;
    seq q = load_seq("qwen35moe", "mlx");
    float *ref = baseline("qwen35moe", "mlx", &q);
    e0_model_info info;
    const struct {
        int slots;
        const char *cap;
    } runs[] = {{4096, "48"}, {4096, "0"}, {12, "48"}};
    for (int i = 0; i < 3; i++) {
        char err[E0_ERR_MAX];
        e0_engine_opts o;
        apply(&o, &CONFIGS[0], runs[i].slots, 1); /* exact, 8 load and 4 prefetch threads */
        if (e0_opts_set(&o, "prefetch_cap", runs[i].cap, err)) fail_msg("%s", err);
        e0_engine *e = open_with("qwen35moe", "mlx", &o);
        e0_engine_info(e, &info);
        const size_t V = (size_t)info.vocab_size;
        e0_session_opts so;
        e0_session_opts_default(&so);
        so.n_ctx = (int32_t)q.n;
        e0_session *s;
        if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
        float *lg = malloc((size_t)q.prompt * V * sizeof *lg);
        assert_non_null(lg);
        if (e0_session_eval(s, q.ids, (size_t)q.prompt, E0_LOGITS_ALL, lg, err))
            fail_msg("%s", err);
        if (memcmp(lg, ref, (size_t)q.prompt * V * sizeof(float)) != 0)
            fail_msg("slots %d prefetch_cap %s: prompt logits differ from the mapping's",
                     runs[i].slots, runs[i].cap);
        stream_counters sc;
        stream_counters_get(e->stream, &sc);
        printf("  slots %d prefetch_cap %s: %llu speculative loads in a prefill of %d ids, "
               "%llu used\n",
               runs[i].slots, runs[i].cap, (unsigned long long)sc.spec_loads, q.prompt,
               (unsigned long long)sc.spec_used);
        if (i == 0) {
            assert_true(sc.spec_loads > 0);
            assert_true(sc.spec_used > 0 && sc.spec_used <= sc.spec_loads);
        } else {
            assert_true(sc.spec_loads == 0);
        }
        free(lg);
        e0_session_free(s);
        e0_engine_free(e);
    }
    assert_true(4 * info.n_experts > 12); /* the small cache is below four layers' experts */
    free(ref);
}

/* Qwen3.5 GGUF files as llama.cpp's converter writes them by default, with
 * the MTP block after the main layers (tests/data/mtp, issue 36): every
 * path, preset, cache size, I/O thread count and I/O mode gives logits
 * bit-identical to the same type's --no-mtp file under exact, in prefill
 * and decode; the MTP bytes are never read (the same expert bytes read as
 * the --no-mtp file's with one I/O thread, the same weight bytes); `edge0
 * logits` writes the same file for both. */
static void test_mtp_gguf(void **state) {
    (void)state;
    static const char *const types[] = {"F32", "Q8_0", "Q4_0"};
    const int slots[] = {1, 2, 4096};
    const e0_io_mode ios[] = {E0_IO_PREAD, E0_IO_MMAP, E0_IO_LOAD};
    const seq q = load_seq("qwen35moe", "hf"); /* 32 ids < 1024, prompt 12 */
    long runs = 0;
    char err[E0_ERR_MAX];
    for (size_t ti = TSAN ? 2 : 0; ti < sizeof types / sizeof *types; ti++) {
        char mtp[256], ref[256];
        snprintf(mtp, sizeof mtp, "tests/data/mtp/model-%s.gguf", types[ti]);
        snprintf(ref, sizeof ref, "tests/data/mtp/model-%s-nomtp.gguf", types[ti]);
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.path = E0_PATH_EXACT;
        o.io = E0_IO_MMAP;
        e0_engine *e;
        if (e0_engine_open(&e, ref, &o, err)) fail_msg("%s", err);
        e0_model_info ri, mi;
        e0_engine_info(e, &ri);
        const size_t bytes = q.n * (size_t)ri.vocab_size * sizeof(float);
        float *want = run_seq(e, &q);
        e0_engine_free(e);
        assert_int_equal(ri.mtp_layers, 0);
        for (int ci = 0; ci < NCONFIGS; ci++)
            for (int si = 0; si < 3; si++)
                for (int many = 0; many < 2; many++) {
                    if (TSAN && (!many || si != 1)) continue;
                    apply(&o, &CONFIGS[ci], slots[si], many);
                    if (e0_engine_open(&e, mtp, &o, err)) fail_msg("%s", err);
                    float *lg = run_seq(e, &q);
                    e0_stats st;
                    e0_engine_stats(e, &st);
                    if (memcmp(lg, want, bytes) != 0)
                        fail_msg("%s %s cache_slots=%d threads=%s: logits differ from the --no-mtp "
                                 "file's", mtp, CONFIGS[ci].name, slots[si], many ? "many" : "1");
                    free(lg);
                    e0_engine_free(e);
                    /* the same reads as the --no-mtp file: expert bundles only */
                    if (e0_engine_open(&e, ref, &o, err)) fail_msg("%s", err);
                    free(run_seq(e, &q));
                    e0_stats rs;
                    e0_engine_stats(e, &rs);
                    e0_engine_free(e);
                    /* (with many I/O threads the staged paths' reads depend on timing) */
                    if (!many) assert_int_equal(st.bytes_read, rs.bytes_read);
                    assert_int_equal(st.drops, 0);
                    runs++;
                }
        for (size_t ii = 0; ii < sizeof ios / sizeof *ios; ii++) {
            e0_engine_opts_default(&o);
            o.io = ios[ii];
            o.budget_mode = E0_BUDGET_OFF;
            if (e0_engine_open(&e, mtp, &o, err)) fail_msg("%s", err);
            e0_engine_info(e, &mi);
            float *lg = run_seq(e, &q);
            if (memcmp(lg, want, bytes) != 0)
                fail_msg("%s --io %s: logits differ from the --no-mtp file's", mtp, e0_io_name(ios[ii]));
            free(lg);
            e0_engine_free(e);
            runs++;
        }
        assert_int_equal(mi.mtp_layers, 1);
        assert_true(mi.mtp_bytes > 0);
        assert_int_equal(mi.weight_bytes, ri.weight_bytes);
        assert_int_equal(mi.expert_bytes, ri.expert_bytes);
        printf("  %s: MTP head %llu bytes, never read; weights %llu bytes as the --no-mtp file's\n",
               types[ti], (unsigned long long)mi.mtp_bytes, (unsigned long long)mi.weight_bytes);
        free(want);
    }
    /* edge0 logits: the same output file, prefill then decode */
    char *dir = tu_tmpdir(), cmd[16384];
    const char *const variants[] = {"--path exact --io mmap", "--path staged --opt staged_n=3",
                                    "--path hot --opt hot_per_layer=2 --opt cache_slots=1",
                                    "--path full", "--preset prod_k8", "--io load",
                                    "--mem-budget 100M"};
    for (size_t i = 0; i < (TSAN ? 1 : sizeof variants / sizeof *variants); i++) {
        snprintf(cmd, sizeof cmd,
                 "for f in model-Q4_0 model-Q4_0-nomtp; do %s logits tests/data/mtp/$f.gguf "
                 "--ids 5,17,300,2,999,41,7,7,120,64,1000,3 --prefill 5 %s --out %s/$f.st "
                 "2>/dev/null || exit 1; done; cmp -s %s/model-Q4_0.st %s/model-Q4_0-nomtp.st",
                 tu_bin(), variants[i], dir, dir, dir);
        if (tu_run(cmd) != 0) fail_msg("edge0 logits %s: the MTP file's logits differ", variants[i]);
        runs++;
    }
    tu_rmtree(dir);
    free(dir);
    printf("  %ld configurations on MTP files bit-identical to the --no-mtp files\n", runs);
}

/* Options: presets hold the documented values; bad fields and values fail. */
static void test_options(void **state) {
    (void)state;
    e0_engine_opts o;
    char err[E0_ERR_MAX];
    e0_engine_opts_default(&o);
    assert_int_equal(o.layer.staged, 0);
    assert_int_equal(o.layer.staged_n, 8);
    assert_int_equal(o.layer.staged_trigger, 8);
    assert_int_equal(o.layer.staged_sync, 1);
    assert_int_equal(o.layer.asm_cache, 1);
    assert_int_equal(o.layer.incr_stack, 0);
    assert_int_equal(o.layer.hot_update_interval, 4);
    assert_true(o.layer.hot_decay == 0.75f && o.layer.pin_bonus == 2.0f);
    assert_int_equal(o.layer.cache_slots, 64);
    assert_int_equal(o.layer.prefetch_cap, 48);
    assert_int_equal(o.layer.load_threads, 8);
    assert_int_equal(o.layer.prefetch_threads, 4);
    assert_int_equal(o.layer.full_layer_prefill, 0);
    assert_int_equal(e0_opts_preset(&o, "staged_k4", err), 0);
    assert_true(o.layer.staged && o.layer.staged_n == 4 && o.layer.prefill_hot == 32 &&
                !o.layer.full_layer_prefill && o.layer.warm_willneed && o.layer.incr_stack &&
                o.layer.incr_writeback && o.layer.cache_slots == 64);
    e0_engine_opts_default(&o);
    assert_int_equal(e0_opts_preset(&o, "prod_k8", err), 0);
    assert_true(!o.layer.staged && o.layer.full_layer_prefill && o.layer.cache_slots == 64);
    e0_engine_opts_default(&o);
    assert_int_equal(e0_opts_preset(&o, "staged_k8", err), 0);
    assert_true(o.layer.staged && o.layer.staged_n == 8 && o.layer.full_layer_prefill &&
                o.layer.cache_slots == 64);
    assert_int_equal(o.layer.top_k, 0); /* presets never change the model's top-k */
    assert_int_equal(e0_opts_preset(&o, "fast", err), E0_EINVAL);
    assert_non_null(strstr(err, "staged_k4"));
    assert_int_equal(e0_opts_set(&o, "cache_slot", "3", err), E0_EINVAL);
    assert_non_null(strstr(err, "cache_slots"));
    assert_int_equal(e0_opts_set(&o, "cache_slots", "-3", err), E0_EINVAL);
    assert_int_equal(e0_opts_set(&o, "cache_slots", "3x", err), E0_EINVAL);
    assert_int_equal(e0_opts_set(&o, "staged", "maybe", err), E0_EINVAL);
    assert_int_equal(e0_opts_set(&o, "hot_decay", "1.5", err), E0_EINVAL);
    assert_int_equal(e0_opts_set(&o, "hot_decay", "0.5", err), 0);
    assert_true(o.layer.hot_decay == 0.5f);
    char buf[2048];
    assert_int_equal(e0_opts_format(&o, buf, sizeof buf), 0);
    assert_non_null(strstr(buf, "hot_decay=0.5\n"));
    assert_non_null(strstr(buf, "staged_n=8\n"));
}

/* The same options through the command line: identical logits files for
 * every --path and preset, clear errors for bad values, --mem-budget. */
static void test_cli_flags(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), cmd[16384], a[4200], b[4200];
    const char *m = tu_shared("fixtures/qwen35moe/mlx-fused");
    const char *ids = "--ids 5,17,300,2,999,41,7,7,7,120,64,1000,3,8 --prefill 5";
    snprintf(a, sizeof a, "%s/ref.safetensors", dir);
    snprintf(cmd, sizeof cmd, "%s logits %s %s --path exact --io mmap --out %s 2>/dev/null",
             tu_bin(), m, ids, a);
    assert_int_equal(tu_run(cmd), 0);
    const char *variants[] = {
        "--path staged --opt staged_n=3",
        "--path hot --opt hot_per_layer=2 --opt cache_slots=1",
        "--path full",
        "--preset staged_k4 --opt staged_trigger=4",
        "--preset prod_k8 --prefill-ondemand",
        "--preset staged_k8 --threads 1 --opt load_threads=1 --opt prefetch_threads=0",
        "--mem-budget 100M --stats"};
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        snprintf(b, sizeof b, "%s/v%zu.safetensors", dir, i);
        snprintf(cmd, sizeof cmd, "%s logits %s %s %s --out %s 2>%s/err.txt", tu_bin(), m, ids,
                 variants[i], b, dir);
        assert_int_equal(tu_run(cmd), 0);
        snprintf(cmd, sizeof cmd, "cmp -s %s %s", a, b);
        if (tu_run(cmd) != 0)
            fail_msg("edge0 logits %s: logits differ from --path exact", variants[i]);
    }
    /* the last run printed what the budget chose and the stats */
    snprintf(cmd, sizeof cmd,
             "grep -q 'mem budget 0.10 GiB.*cache_slots=' %s/err.txt && grep -q 'LRU: ' %s/err.txt",
             dir, dir);
    assert_int_equal(tu_run(cmd), 0);
    const struct {
        const char *args, *msg;
    } bad[] = {{"--opt cache_slots=-1", "cache_slots"},
               {"--opt nosuch=1", "unknown option 'nosuch'"},
               {"--opt staged", "FIELD=VALUE"},
               {"--preset turbo", "unknown preset 'turbo'"},
               {"--path fastest", "exact, staged, hot or full"},
               {"--mem-budget lots", "not a size"},
               {"--mem-budget 1K", "too small"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cmd, sizeof cmd, "%s logits %s --ids 1 --out %s/x.safetensors %s 2>%s/err.txt",
                 tu_bin(), m, dir, bad[i].args, dir);
        int rc = tu_run(cmd);
        if (rc != 1 && rc != 2) fail_msg("%s: exit %d", bad[i].args, rc);
        snprintf(cmd, sizeof cmd, "grep -q -- \"%s\" %s/err.txt", bad[i].msg, dir);
        if (tu_run(cmd) != 0) fail_msg("%s: message lacks '%s'", bad[i].args, bad[i].msg);
    }
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    /* paths are bit-identical under any set; the 1e-5 bounds against the
     * reference arithmetic are the exact sets' (quant/mat.h) */
    e0_set_kernels(E0_KERNELS_EXACT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_cli_flags),
        cmocka_unit_test(test_paths_bit_identical),
        cmocka_unit_test(test_paths_loaded),
        cmocka_unit_test(test_paths_exercised),
        cmocka_unit_test(test_full_layer_separate),
        cmocka_unit_test(test_full_layer_fused),
        cmocka_unit_test(test_gate_first_order),
        cmocka_unit_test(test_staged_replace),
        cmocka_unit_test(test_direct_reads),
        cmocka_unit_test(test_prefetch_k),
        cmocka_unit_test(test_prefill_spec),
        cmocka_unit_test(test_mtp_gguf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
