/* Whole models against the Hugging Face reference (../shared/fixtures):
 * every family x every layout, full-sequence logits, each MoE block alone,
 * prefill-then-decode (through the CLI and the library), and the 160-token
 * long sequences. Bounds from the fixtures' README.
 *
 * Fixture defect, measured and pinned here: the three short golden_q files
 * (32 tokens, mlx layouts) were produced with RoPE inv_freq rounded to bf16
 * (a model built in bf16 and then cast to f32 round-trips that buffer),
 * while golden.safetensors and both golden*_long files use exact f32
 * inv_freq, as transformers in f32 and mlx-lm do. The engine computes the
 * exact f32 model. Against those three files only, the tests reproduce the
 * reference's rounding on a test-side copy of the engine (rope_bf16) and
 * hold the usual 1e-4; they also assert that the exact engine differs from
 * them by no more than that rounding explains (2e-3). With exact inv_freq,
 * qwen3moe/mlx matches golden_q_long to 1.6e-6, so the weights and the rest
 * of the math are not in question.
 *
 * The 1e-4 bounds are those of the exact kernel sets (quant/mat.h), so the
 * library runs here under E0_KERNELS_EXACT and the CLI with `--kernels
 * exact`; the default (lossy) set is held to the 5e-3 over all 160
 * positions in `cli --kernels`, and test_kernels checks its routing. */
#include "testutil.h"

#include "edge0.h"
#include "model/model.h"
#include "quant/mat.h"
#include "util/num.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *family, *layout;
} fx;

static const fx FIXTURES[] = {
    {"qwen3moe", "hf"},         {"qwen3moe", "hf-fused"},  {"qwen3moe", "mlx"},
    {"qwen3next", "hf"},        {"qwen3next", "hf-fused"}, {"qwen3next", "mlx"},
    {"qwen35moe", "hf"},        {"qwen35moe", "hf-fused"}, {"qwen35moe", "mlx"},
    {"qwen35moe", "mlx-fused"},
};

static bool is_mlx(const fx *f) {
    return strncmp(f->layout, "mlx", 3) == 0;
}

static const char *golden_path(const fx *f, bool long_seq) {
    static char rel[256];
    snprintf(rel, sizeof rel, "fixtures/%s/golden%s%s.safetensors", f->family,
             is_mlx(f) ? "_q" : "", long_seq ? "_long" : "");
    return tu_shared(rel);
}

/* The short golden_q references used bf16-rounded RoPE frequencies. */
static bool golden_rope_bf16(const fx *f, bool long_seq) {
    return is_mlx(f) && !long_seq;
}

static void rope_bf16(e0_engine *e) {
    for (int k = 0; k < e->model.cfg.rotary_dim / 2; k++)
        e->model.rope_inv_freq[k] = e0_bf16_to_f32(e0_f32_to_bf16(e->model.rope_inv_freq[k]));
}

static e0_engine *open_model(const fx *f) {
    char rel[256], err[E0_ERR_MAX] = "";
    snprintf(rel, sizeof rel, "fixtures/%s/%s", f->family, f->layout);
    e0_engine *e = NULL;
    int rc = e0_engine_open(&e, tu_shared(rel), NULL, err);
    if (rc) fail_msg("open %s: %s", rel, err);
    e0_model_info info;
    e0_engine_info(e, &info);
    assert_string_equal(info.layout, f->layout);
    return e;
}

static st_set *open_golden(const fx *f, bool long_seq) {
    st_set *g = NULL;
    char err[E0_ERR_MAX];
    if (st_set_open_file(&g, golden_path(f, long_seq), err)) fail_msg("%s", err);
    return g;
}

static int prompt_len(const st_set *g) {
    const char *p = st_meta(g, "prompt_len");
    assert_non_null(p);
    return atoi(p);
}

/* Runs ids[0..n) as a prefill of `prefill` then single decode steps. */
static float *run(e0_engine *e, const int32_t *ids, size_t n, size_t prefill) {
    char err[E0_ERR_MAX];
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)n;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    e0_model_info info;
    e0_engine_info(e, &info);
    size_t V = (size_t)info.vocab_size;
    float *lg = malloc(n * V * sizeof *lg);
    assert_non_null(lg);
    if (e0_session_eval(s, ids, prefill, E0_LOGITS_ALL, lg, err)) fail_msg("%s", err);
    for (size_t i = prefill; i < n; i++)
        if (e0_session_eval(s, ids + i, 1, E0_LOGITS_ALL, lg + i * V, err)) fail_msg("%s", err);
    e0_session_free(s);
    return lg;
}

static void check_positions(const fx *f, const char *what, const float *out, const float *ref,
                            size_t n, size_t V, double bound) {
    double worst = 0;
    size_t at = 0;
    for (size_t t = 0; t < n; t++) {
        double r = tu_rel_l2(out + t * V, ref + t * V, V);
        if (r > worst) worst = r, at = t;
    }
    printf("  %s/%s %s: worst position %zu rel L2 %.3g\n", f->family, f->layout, what, at, worst);
    if (!(worst <= bound))
        fail_msg("%s/%s %s: position %zu rel L2 %.3g > %.0e", f->family, f->layout, what, at, worst,
                 bound);
}

/* Full-sequence logits <= 1e-4, and every position's routing as the
 * reference routes it is implied by the MoE test below. */
static void test_full_logits(void **state) {
    const fx *f = *state;
    e0_engine *e = open_model(f);
    st_set *g = open_golden(f, false);
    size_t n;
    const int32_t *ids = tu_i32(g, "input_ids", &n);
    e0_model_info info;
    e0_engine_info(e, &info);
    size_t V = (size_t)info.vocab_size;
    const float *ref = tu_f32(g, "logits", n * V);
    float *lg = run(e, ids, n, n);
    double r = tu_rel_l2(lg, ref, n * V);
    printf("  %s/%s full logits rel L2 %.3g\n", f->family, f->layout, r);
    if (golden_rope_bf16(f, false)) {
        if (!(r <= 2e-3)) fail_msg("exact engine vs golden_q: rel L2 %.3g > 2e-3", r);
        rope_bf16(e);
        free(lg);
        lg = run(e, ids, n, n);
        r = tu_rel_l2(lg, ref, n * V);
        printf("  %s/%s full logits, reference's bf16 RoPE frequencies: rel L2 %.3g\n", f->family,
               f->layout, r);
    }
    if (!(r <= 1e-4)) fail_msg("rel L2 %.3g > 1e-4", r);
    free(lg);
    st_set_free(g);
    e0_engine_free(e);
}

/* Each MoE block alone on the reference's own input: <= 1e-5. */
static void test_moe_blocks(void **state) {
    const fx *f = *state;
    e0_engine *e = open_model(f);
    st_set *g = open_golden(f, false);
    const e0_config *c = &e->model.cfg;
    size_t n;
    tu_i32(g, "input_ids", &n);
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)n;
    e0_session *s;
    char err[E0_ERR_MAX];
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    size_t H = (size_t)c->hidden;
    float *out = malloc(n * H * sizeof *out);
    assert_non_null(out);
    for (int L = 0; L < c->n_layers; L++) {
        char name[64];
        snprintf(name, sizeof name, "moe.%d.in", L);
        const float *in = tu_f32(g, name, n * H);
        snprintf(name, sizeof name, "moe.%d.out", L);
        const float *ref = tu_f32(g, name, n * H);
        if (moe_forward(s, L, in, (int)n, out, err)) fail_msg("%s", err);
        double r = tu_rel_l2(out, ref, n * H);
        printf("  %s/%s moe.%d rel L2 %.3g\n", f->family, f->layout, L, r);
        if (!(r <= 1e-5)) fail_msg("moe.%d rel L2 %.3g > 1e-5", L, r);
    }
    free(out);
    e0_session_free(s);
    st_set_free(g);
    e0_engine_free(e);
}

/* `edge0 logits` on fixture f with extra options `opts`, the first P ids as
 * one batch: the output file, opened, after checking it holds logits
 * [n, V] (V returned). */
static st_set *cli_logits(const fx *f, const char *opts, const int32_t *ids, size_t n, size_t P,
                          const char *out, size_t *V) {
    char rel[256], cmd[8192];
    snprintf(rel, sizeof rel, "fixtures/%s/%s", f->family, f->layout);
    int o = snprintf(cmd, sizeof cmd, "%s logits %s %s --prefill %zu --out %s --ids ", tu_bin(),
                     tu_shared(rel), opts, P, out);
    for (size_t i = 0; i < n; i++)
        o += snprintf(cmd + o, sizeof cmd - (size_t)o, "%s%d", i ? "," : "", ids[i]);
    snprintf(cmd + o, sizeof cmd - (size_t)o, " 2>/dev/null");
    assert_int_equal(tu_run(cmd), 0);
    st_set *r;
    char err[E0_ERR_MAX];
    if (st_set_open_file(&r, out, err)) fail_msg("%s", err);
    const st_tensor *t = st_get(r, "logits");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], n);
    *V = (size_t)t->shape[1];
    return r;
}

/* `edge0 logits --prefill 12` through the real binary and its output file:
 * bit-identical to the library run, which is within 1e-4 of the reference
 * at every position. */
static void test_cli_prefill_decode(void **state) {
    const fx *f = *state;
    st_set *g = open_golden(f, false);
    size_t n;
    const int32_t *ids = tu_i32(g, "input_ids", &n);
    int P = prompt_len(g);
    char *dir = tu_tmpdir(), out[4200];
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    size_t V;
    st_set *r = cli_logits(f, "--kernels exact", ids, n, (size_t)P, out, &V);
    const float *cli = tu_f32(r, "logits", n * V), *ref = tu_f32(g, "logits", n * V);
    e0_engine *e = open_model(f);
    float *lib = run(e, ids, n, (size_t)P);
    assert_memory_equal(cli, lib, n * V * sizeof *lib);
    if (golden_rope_bf16(f, false)) {
        check_positions(f, "--prefill 12 (exact engine)", lib, ref, n, V, 2e-3 * 4);
        rope_bf16(e);
        free(lib);
        lib = run(e, ids, n, (size_t)P);
    }
    check_positions(f, "--prefill 12", lib, ref, n, V, 1e-4);
    free(lib);
    e0_engine_free(e);
    st_set_free(r);
    tu_rmtree(dir);
    free(dir);
    st_set_free(g);
}

/* `--kernels` through the real binary on the 4-bit layouts, 160 tokens with
 * prefill 100: the default set (`auto`: avx512-mixed with VNNI) and
 * avx512-q16 keep every position within the 5e-3 of the reference;
 * `exact` is bit-identical to the library under E0_KERNELS_EXACT; an
 * unknown set is refused with exit status 2. */
static void test_cli_kernels(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof FIXTURES / sizeof *FIXTURES; i++) {
        const fx *f = &FIXTURES[i];
        if (strncmp(f->layout, "mlx", 3)) continue;
        st_set *g = open_golden(f, true);
        size_t n;
        const int32_t *ids = tu_i32(g, "input_ids", &n);
        const size_t P = (size_t)prompt_len(g);
        char *dir = tu_tmpdir(), rel[256], cmd[8192], out[4200];
        snprintf(rel, sizeof rel, "fixtures/%s/%s", f->family, f->layout);
        snprintf(out, sizeof out, "%s/out.safetensors", dir);
        e0_engine *e = open_model(f);
        float *lib = run(e, ids, n, P);
        const char *sets[] = {"auto", "avx512-q16", "exact"};
        for (int k = 0; k < 3; k++) {
            e0_kernels kk;
            if (e0_kernels_parse(sets[k], &kk) || !e0_kernels_supported(kk)) continue;
            char opts[64];
            snprintf(opts, sizeof opts, "--kernels %s", sets[k]);
            size_t V;
            st_set *r = cli_logits(f, opts, ids, n, P, out, &V);
            const float *cli = tu_f32(r, "logits", n * V);
            if (k < 2)
                check_positions(f, opts, cli, tu_f32(g, "logits", n * V), n, V, 5e-3);
            else
                assert_memory_equal(cli, lib, n * V * sizeof *lib);
            st_set_free(r);
        }
        snprintf(cmd, sizeof cmd, "%s logits %s --kernels nope --ids 1 --out %s 2>/dev/null",
                 tu_bin(), tu_shared(rel), out);
        assert_int_equal(tu_run(cmd), 2);
        free(lib);
        e0_engine_free(e);
        tu_rmtree(dir);
        free(dir);
        st_set_free(g);
    }
}

/* 160 tokens, prefill 100 then 60 decode steps: RoPE / KV past 128 positions,
 * several 64-token DeltaNet chunks in the reference. */
static void test_long(void **state) {
    const fx *f = *state;
    e0_engine *e = open_model(f);
    st_set *g = open_golden(f, true);
    size_t n;
    const int32_t *ids = tu_i32(g, "input_ids", &n);
    e0_model_info info;
    e0_engine_info(e, &info);
    size_t V = (size_t)info.vocab_size;
    const float *ref = tu_f32(g, "logits", n * V);
    float *lg = run(e, ids, n, (size_t)prompt_len(g));
    check_positions(f, "long --prefill 100", lg, ref, n, V, 1e-4);
    free(lg);
    lg = run(e, ids, n, n);
    check_positions(f, "long full", lg, ref, n, V, 1e-4);
    free(lg);
    st_set_free(g);
    e0_engine_free(e);
}

/* `--kv-type f16`: the 160-token golden, prefill 100 then 60 decode steps,
 * within 1e-2 of the reference (measured: 7.4e-3 on qwen3moe/hf, whose
 * four attention layers amplify the rounding most; <= 6e-4 on the others)
 * with the same argmax at every position; the plan counts half the KV
 * bytes; a snapshot taken after the prefill and restored into a new
 * session decodes bit-identically. */
static void test_kv_f16(void **state) {
    const fx *f = *state;
    char rel[256], err[E0_ERR_MAX] = "";
    snprintf(rel, sizeof rel, "fixtures/%s/%s", f->family, f->layout);
    e0_engine_opts o;
    e0_engine_opts_default(&o);
    e0_plan p32, p16;
    if (e0_engine_plan(tu_shared(rel), &o, &p32, err)) fail_msg("%s", err);
    o.kv_type = E0_KV_F16;
    if (e0_engine_plan(tu_shared(rel), &o, &p16, err)) fail_msg("%s", err);
    assert_true(p32.kv_bytes_per_1k > 0);
    assert_true(p16.kv_bytes_per_1k * 2 == p32.kv_bytes_per_1k);
    e0_engine *e = NULL;
    if (e0_engine_open(&e, tu_shared(rel), &o, err)) fail_msg("open %s: %s", rel, err);
    st_set *g = open_golden(f, true);
    size_t n;
    const int32_t *ids = tu_i32(g, "input_ids", &n);
    e0_model_info info;
    e0_engine_info(e, &info);
    const size_t V = (size_t)info.vocab_size, P = (size_t)prompt_len(g);
    const float *ref = tu_f32(g, "logits", n * V);
    float *lg = run(e, ids, n, P);
    check_positions(f, "--kv-type f16", lg, ref, n, V, 1e-2);
    for (size_t t = 0; t < n; t++)
        if (tu_argmax(lg + t * V, V) != tu_argmax(ref + t * V, V))
            fail_msg("--kv-type f16: position %zu argmax %zu, the reference's %zu", t,
                     tu_argmax(lg + t * V, V), tu_argmax(ref + t * V, V));
    /* snapshot after the prefill, decode in a new session */
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)n;
    e0_session *s, *s2;
    if (e0_session_new(e, &so, &s, err) || e0_session_new(e, &so, &s2, err)) fail_msg("%s", err);
    float *l1 = malloc(V * sizeof *l1), *l2 = malloc(V * sizeof *l2);
    assert_true(l1 && l2);
    if (e0_session_eval(s, ids, P, E0_LOGITS_LAST, l1, err)) fail_msg("%s", err);
    e0_snapshot *snap;
    if (e0_session_snapshot(s, &snap, err) || e0_session_restore(s2, snap, err)) fail_msg("%s", err);
    for (size_t i = P; i < n; i++) {
        if (e0_session_eval(s, ids + i, 1, E0_LOGITS_LAST, l1, err) ||
            e0_session_eval(s2, ids + i, 1, E0_LOGITS_LAST, l2, err))
            fail_msg("%s", err);
        if (memcmp(l1, l2, V * sizeof *l1)) fail_msg("--kv-type f16: restored session differs at %zu", i);
    }
    e0_snapshot_free(snap);
    e0_session_free(s);
    e0_session_free(s2);
    free(l1), free(l2), free(lg);
    st_set_free(g);
    e0_engine_free(e);
}

/* A reset session reproduces a fresh one exactly; prefill split into small
 * batches equals one batch. */
static void test_reset_and_batching(void **state) {
    const fx *f = *state;
    e0_engine *e = open_model(f);
    st_set *g = open_golden(f, false);
    size_t n;
    const int32_t *ids = tu_i32(g, "input_ids", &n);
    e0_model_info info;
    e0_engine_info(e, &info);
    size_t V = (size_t)info.vocab_size;
    char err[E0_ERR_MAX];
    if (golden_rope_bf16(f, false)) rope_bf16(e);
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)n;
    so.n_batch = 5;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    float *a = malloc(n * V * sizeof *a), *b = malloc(n * V * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(e0_session_eval(s, ids, n, E0_LOGITS_ALL, a, err), 0);
    assert_int_equal(e0_session_pos(s), (int)n);
    /* the context is full: one more id is refused */
    assert_int_equal(e0_session_eval(s, ids, 1, E0_LOGITS_LAST, b, err), E0_ERANGE);
    e0_session_reset(s);
    assert_int_equal(e0_session_eval(s, ids, n, E0_LOGITS_ALL, b, err), 0);
    assert_memory_equal(a, b, n * V * sizeof *a);
    double r = tu_rel_l2(a, tu_f32(g, "logits", n * V), n * V);
    if (!(r <= 1e-4)) fail_msg("batched prefill rel L2 %.3g", r);
    /* an id outside the vocabulary is refused and changes nothing */
    e0_session_reset(s);
    int32_t bad[2] = {ids[0], (int32_t)V};
    assert_int_equal(e0_session_eval(s, bad, 2, E0_LOGITS_LAST, b, err), E0_ERANGE);
    assert_non_null(strstr(err, "outside the vocabulary"));
    assert_int_equal(e0_session_pos(s), 0);
    free(a);
    free(b);
    e0_session_free(s);
    st_set_free(g);
    e0_engine_free(e);
}

int main(void) {
    enum { NF = sizeof FIXTURES / sizeof *FIXTURES };
    e0_set_kernels(E0_KERNELS_EXACT);
    struct CMUnitTest tests[NF * 6 + 1];
    size_t k = 0;
    static char names[NF * 6][96];
    for (size_t i = 0; i < NF; i++) {
        void *st = (void *)&FIXTURES[i];
        struct {
            const char *what;
            CMUnitTestFunction fn;
        } kinds[] = {{"full logits", test_full_logits},
                     {"moe blocks", test_moe_blocks},
                     {"cli --prefill 12", test_cli_prefill_decode},
                     {"long 160 --prefill 100", test_long},
                     {"reset and batching", test_reset_and_batching},
                     {"--kv-type f16", test_kv_f16}};
        for (size_t j = 0; j < 6; j++, k++) {
            snprintf(names[k], sizeof names[k], "%s/%s %s", FIXTURES[i].family, FIXTURES[i].layout,
                     kinds[j].what);
            tests[k] = (struct CMUnitTest){names[k], kinds[j].fn, NULL, NULL, st};
        }
    }
    tests[k++] = (struct CMUnitTest){"cli --kernels", test_cli_kernels, NULL, NULL, NULL};
    return _cmocka_run_group_tests("fixtures", tests, k, NULL, NULL);
}
