/* edge0 convert against the reference fixtures.
 *  (the quantizer itself is tested in tests/test_quant.c)
 *  - converting every fixture's hf/ and hf-fused/ (and with --fused-gate-up)
 *    gives every tensor of the fixture's mlx/ (mlx-fused/) byte for byte:
 *    quantized words, scales and biases, 1 + w norms, F32 A_log, conv1d
 *    [C, K, 1]; the same tensor names and nothing else; the same per-module
 *    quantization settings in config.json;
 *  - the converted model's logits are bit-identical to the engine's on the
 *    fixture mlx/ directory and within 1e-4 relative L2 per position of
 *    golden_q_long (160 tokens, one prefill, exact f32 reference);
 *  - sharded source in, sharded output out (--shard-mb);
 *  - malformed sources (missing shard, an I64 weight, a shape that disagrees
 *    with config.json, a tensor with no place in the model), an existing
 *    DST without --force and a cancelled run: clear errors, no DST and no
 *    temporary directory left behind;
 *  - a Qwen3.5 checkpoint with its MTP block (tests/data/mtp/hf): mtp.*
 *    dropped by default, kept as they are with --keep-mtp; Hugging Face and
 *    mlx folders with mtp.* load, compute what they compute without them
 *    (bit for bit) and leave them out of the weight bytes. */
#include "testutil.h"

#include "convert/convert.h"
#include "edge0.h"
#include "io/config.h"
#include "quant/mat.h"
#include "io/safetensors.h"
#include "quant/quantize.h"
#include "util/file.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers -------------------------------------------------------------- */

/* Each test's temporary directory, removed by the teardown also when the
 * test fails. */
static char *g_root;

static char *new_root(void) {
    assert_null(g_root);
    g_root = tu_tmpdir();
    return g_root;
}

static int cleanup(void **state) {
    (void)state;
    if (g_root) {
        tu_rmtree(g_root);
        free(g_root);
        g_root = NULL;
    }
    return 0;
}

static const char *fixture(const char *family, const char *layout) {
    static char rel[256];
    snprintf(rel, sizeof rel, "fixtures/%s/%s", family, layout);
    return tu_shared(rel);
}

static char *join(const char *a, const char *b) {
    char *p = e0_path_join(a, b);
    assert_non_null(p);
    return p;
}

/* Nothing named DST and no DST.tmp-* next to it. */
static void assert_nothing_left(const char *root, const char *dst_name) {
    DIR *d = opendir(root);
    assert_non_null(d);
    struct dirent *de;
    size_t l = strlen(dst_name);
    while ((de = readdir(d)))
        if (strncmp(de->d_name, dst_name, l) == 0) fail_msg("%s/%s was left behind", root, de->d_name);
    closedir(d);
}

static void copy_text(const char *from_dir, const char *to_dir, const char *name) {
    char *from = join(from_dir, name), *text = NULL;
    size_t len = 0;
    char err[E0_ERR_MAX];
    if (e0_read_file(from, &text, &len, 1u << 24, err)) fail_msg("%s", err);
    free(tu_write(to_dir, name, text, len));
    free(text);
    free(from);
}

/* Converts through the library (ASan sees it); returns the status. */
static int convert(const char *src, const char *dst, bool fused, char *err) {
    e0_convert_opts o;
    e0_convert_opts_default(&o);
    o.fused_gate_up = fused;
    o.no_sync = 1;
    return e0_convert_run(src, dst, &o, NULL, err);
}

/* Every tensor of `ref` in `out` with the same dtype, shape and bytes, and
 * nothing else in `out`. Quantized modules that differ are counted per
 * group (words, scale or bias of the same group). Returns differing tensors. */
static int compare_dirs(const char *out, const char *ref, const char *what) {
    st_set *a, *b;
    char err[E0_ERR_MAX];
    if (st_set_open_dir(&a, out, err)) fail_msg("%s", err);
    if (st_set_open_dir(&b, ref, err)) fail_msg("%s", err);
    int bad = 0;
    uint64_t bytes = 0, groups = 0, bad_groups = 0;
    for (size_t i = 0; i < st_count(b); i++) {
        const st_tensor *r = st_at(b, i), *t = st_get(a, r->name);
        if (!t) {
            printf("  %s: %s missing from the output\n", what, r->name);
            bad++;
            continue;
        }
        bool same = t->dtype == r->dtype && t->ndim == r->ndim && !memcmp(t->shape, r->shape, sizeof t->shape);
        if (!same) {
            printf("  %s: %s has another dtype or shape\n", what, r->name);
            bad++;
            continue;
        }
        bytes += r->nbytes;
        const size_t l = strlen(r->name);
        if (l > 7 && !strcmp(r->name + l - 7, ".scales")) {
            /* per group: the scale, the bias and the group's words */
            char base[512], nm[600];
            snprintf(base, sizeof base, "%.*s", (int)(l - 7), r->name);
            snprintf(nm, sizeof nm, "%s.weight", base);
            const st_tensor *rw = st_get(b, nm), *tw = st_get(a, nm);
            snprintf(nm, sizeof nm, "%s.biases", base);
            const st_tensor *rb = st_get(b, nm), *tb = st_get(a, nm);
            assert_true(rw && tw && rb && tb && rw->nbytes == tw->nbytes && rb->nbytes == tb->nbytes);
            const uint64_t ng = st_numel(r), wpg = rw->nbytes / ng;
            for (uint64_t g = 0; g < ng; g++) {
                groups++;
                bad_groups += memcmp(t->data + 2 * g, r->data + 2 * g, 2) || memcmp(tb->data + 2 * g, rb->data + 2 * g, 2) ||
                              memcmp(tw->data + g * wpg, rw->data + g * wpg, wpg);
            }
        }
        if (memcmp(t->data, r->data, r->nbytes)) {
            printf("  %s: %s differs\n", what, r->name);
            bad++;
        }
    }
    for (size_t i = 0; i < st_count(a); i++)
        if (!st_get(b, st_at(a, i)->name)) {
            printf("  %s: %s is not in the reference\n", what, st_at(a, i)->name);
            bad++;
        }
    printf("  %s: %zu tensors, %.2f MB compared, %llu of %llu quantization groups differ, %d tensors differ\n", what,
           st_count(b), (double)bytes / 1e6, (unsigned long long)bad_groups, (unsigned long long)groups, bad);
    st_set_free(a);
    st_set_free(b);
    return bad;
}

/* The per-module quantization settings of two model directories agree. */
static void compare_quant_config(const char *out, const char *ref) {
    e0_config a, b;
    char err[E0_ERR_MAX];
    if (config_load(&a, out, err)) fail_msg("%s", err);
    if (config_load(&b, ref, err)) fail_msg("%s", err);
    assert_true(a.quantized && b.quantized);
    assert_int_equal(a.q_bits, b.q_bits);
    assert_int_equal(a.q_group, b.q_group);
    assert_int_equal(a.n_q_over, b.n_q_over);
    for (int i = 0; i < b.n_q_over; i++) {
        int bits, group;
        assert_int_equal(config_quant_for(&a, b.q_over[i].module, &bits, &group), 0);
        assert_int_equal(bits, b.q_over[i].bits);
        assert_int_equal(group, b.q_over[i].group);
    }
    config_free(&a);
    config_free(&b);
}

static float *run_logits(const char *dir, const int32_t *ids, size_t n, size_t *V) {
    e0_engine *e;
    char err[E0_ERR_MAX];
    if (e0_engine_open(&e, dir, NULL, err)) fail_msg("open %s: %s", dir, err);
    e0_model_info info;
    e0_engine_info(e, &info);
    *V = (size_t)info.vocab_size;
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)n;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    float *lg = malloc(n * *V * sizeof *lg);
    assert_non_null(lg);
    if (e0_session_eval(s, ids, n, E0_LOGITS_ALL, lg, err)) fail_msg("%s", err);
    e0_session_free(s);
    e0_engine_free(e);
    return lg;
}

/* ---- fixtures ----------------------------------------------------------------- */

typedef struct {
    const char *family, *src, *ref; /* source layout, reference layout */
    bool fused;
} cv_case;

static const cv_case CASES[] = {
    {"qwen3moe", "hf", "mlx", false},          {"qwen3moe", "hf-fused", "mlx", false},
    {"qwen3next", "hf", "mlx", false},         {"qwen3next", "hf-fused", "mlx", false},
    {"qwen35moe", "hf", "mlx", false},         {"qwen35moe", "hf-fused", "mlx", false},
    {"qwen35moe", "hf", "mlx-fused", true},    {"qwen35moe", "hf-fused", "mlx-fused", true},
};

static void test_fixture(void **state) {
    const cv_case *c = *state;
    char *root = new_root(), *dst = join(root, "out"), err[E0_ERR_MAX], what[128];
    snprintf(what, sizeof what, "%s/%s%s -> %s", c->family, c->src, c->fused ? " --fused-gate-up" : "", c->ref);
    if (convert(fixture(c->family, c->src), dst, c->fused, err)) fail_msg("%s: %s", what, err);
    assert_int_equal(compare_dirs(dst, fixture(c->family, c->ref), what), 0);
    compare_quant_config(dst, fixture(c->family, c->ref));
    /* the source's generation_config.json comes along */
    char *g = join(fixture(c->family, c->src), "generation_config.json"), *h = join(dst, "generation_config.json");
    assert_int_equal(e0_file_exists(g), e0_file_exists(h));
    free(g), free(h);

    /* Same bytes, same logits as the fixture's mlx directory; and the exact
     * f32 reference over 160 tokens as one prefill. */
    char rel[256], err2[E0_ERR_MAX];
    snprintf(rel, sizeof rel, "fixtures/%s/golden_q_long.safetensors", c->family);
    st_set *gold;
    if (st_set_open_file(&gold, tu_shared(rel), err2)) fail_msg("%s", err2);
    size_t n, V, V2;
    const int32_t *ids = tu_i32(gold, "input_ids", &n);
    float *mine = run_logits(dst, ids, n, &V), *theirs = run_logits(fixture(c->family, c->ref), ids, n, &V2);
    assert_int_equal(V, V2);
    assert_memory_equal(mine, theirs, n * V * sizeof *mine);
    const float *ref = tu_f32(gold, "logits", n * V);
    double worst = 0;
    for (size_t t = 0; t < n; t++) {
        double r = tu_rel_l2(mine + t * V, ref + t * V, V);
        worst = r > worst ? r : worst;
    }
    printf("  %s: logits bit-identical to the engine on %s; golden_q_long worst position rel L2 %.3g\n", what,
           c->ref, worst);
    assert_true(worst <= 1e-4);
    free(mine), free(theirs);
    st_set_free(gold);
    free(dst);
}

/* A two-shard source with an index, converted into 1 MiB shards. */
static void test_sharded(void **state) {
    (void)state;
    char *root = new_root(), *src = join(root, "src"), *dst = join(root, "out"), err[E0_ERR_MAX];
    assert_int_equal(mkdir(src, 0755), 0);
    const char *fx = fixture("qwen3next", "hf");
    st_set *s;
    if (st_set_open_dir(&s, fx, err)) fail_msg("%s", err);
    const size_t n = st_count(s), half = n / 2;
    st_wtensor *wt = calloc(n, sizeof *wt);
    assert_non_null(wt);
    char idx[65536];
    int o = snprintf(idx, sizeof idx, "{\"metadata\": {}, \"weight_map\": {");
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = st_at(s, i);
        wt[i] = (st_wtensor){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(wt[i].shape, t->shape, sizeof wt[i].shape);
        o += snprintf(idx + o, sizeof idx - (size_t)o, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "",
                      t->name, i < half ? 1 : 2);
        assert_true(o < (int)sizeof idx);
    }
    snprintf(idx + o, sizeof idx - (size_t)o, "}}");
    static const char *const meta[] = {"format", "pt"};
    char *p1 = join(src, "model-00001-of-00002.safetensors"), *p2 = join(src, "model-00002-of-00002.safetensors");
    if (st_write(p1, wt, half, meta, 2, err) || st_write(p2, wt + half, n - half, meta, 2, err)) fail_msg("%s", err);
    free(tu_write(src, "model.safetensors.index.json", idx, strlen(idx)));
    copy_text(fx, src, "config.json");
    copy_text(fx, src, "generation_config.json");
    st_set_free(s);
    free(wt), free(p1), free(p2);

    e0_convert_opts co;
    e0_convert_opts_default(&co);
    co.shard_bytes = 1u << 20;
    co.no_sync = 1;
    e0_convert_info info;
    if (e0_convert_run(src, dst, &co, &info, err)) fail_msg("%s", err);
    printf("  sharded source (2 files) -> %d output shards of <= 1 MiB, %zu tensors\n", info.n_shards, info.out_tensors);
    assert_true(info.n_shards >= 2);
    char *ix = join(dst, "model.safetensors.index.json");
    assert_true(e0_file_exists(ix));
    free(ix);
    DIR *d = opendir(dst);
    struct dirent *de;
    while ((de = readdir(d))) {
        char *pth = join(dst, de->d_name);
        struct stat st;
        assert_int_equal(stat(pth, &st), 0);
        if (strstr(de->d_name, ".safetensors") && !strstr(de->d_name, ".json"))
            assert_true((uint64_t)st.st_size <= (1u << 20) + 65536); /* data <= 1 MiB, plus the header */
        free(pth);
    }
    closedir(d);
    assert_int_equal(compare_dirs(dst, fixture("qwen3next", "mlx"), "qwen3next sharded"), 0);
    free(src), free(dst);
}

/* ---- malformed sources ----------------------------------------------------------- */

/* A copy of qwen3moe/hf in root/src, with tensor `drop` left out, `extra`
 * (dtype, 1-D n) added, and config.json text replaced when given. */
static char *make_source(const char *root, const char *drop, const char *extra, st_dtype dt, uint64_t n,
                         const char *config) {
    char *src = join(root, "src"), err[E0_ERR_MAX];
    assert_int_equal(mkdir(src, 0755), 0);
    const char *fx = fixture("qwen3moe", "hf");
    st_set *s;
    if (st_set_open_dir(&s, fx, err)) fail_msg("%s", err);
    st_wtensor *wt = calloc(st_count(s) + 1, sizeof *wt);
    uint8_t *zeros = calloc(n ? n : 1, 8);
    assert_true(wt && zeros);
    size_t k = 0;
    for (size_t i = 0; i < st_count(s); i++) {
        const st_tensor *t = st_at(s, i);
        if (drop && !strcmp(t->name, drop)) continue;
        wt[k] = (st_wtensor){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(wt[k++].shape, t->shape, sizeof wt[0].shape);
    }
    if (extra) wt[k++] = (st_wtensor){extra, dt, 1, {n}, zeros};
    char *p = join(src, "model.safetensors");
    static const char *const meta[] = {"format", "pt"};
    if (st_write(p, wt, k, meta, 2, err)) fail_msg("%s", err);
    if (config) free(tu_write(src, "config.json", config, strlen(config)));
    else copy_text(fx, src, "config.json");
    st_set_free(s);
    free(wt), free(zeros), free(p);
    return src;
}

static void expect_error(const char *src, const char *root, const char *must1, const char *must2) {
    char *dst = join(root, "out"), err[E0_ERR_MAX] = "";
    int rc = convert(src, dst, false, err);
    printf("  error: %s\n", err);
    assert_int_not_equal(rc, 0);
    if (!strstr(err, must1) || (must2 && !strstr(err, must2)))
        fail_msg("message lacks '%s'%s%s: %s", must1, must2 ? " / " : "", must2 ? must2 : "", err);
    assert_nothing_left(root, "out");
    free(dst);
}

static void test_missing_shard(void **state) {
    (void)state;
    char *root = new_root(), *src = join(root, "src");
    assert_int_equal(mkdir(src, 0755), 0);
    copy_text(fixture("qwen3moe", "hf"), src, "config.json");
    const char *idx = "{\"weight_map\": {\"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\","
                      " \"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}";
    free(tu_write(src, "model.safetensors.index.json", idx, strlen(idx)));
    expect_error(src, root, "missing", "model-00001-of-00002.safetensors");
    free(src);
}

static void test_bad_dtype(void **state) {
    (void)state;
    char *root = new_root();
    char *src = make_source(root, "model.norm.weight", "model.norm.weight", ST_I64, 128, NULL);
    expect_error(src, root, "model.norm.weight", "I64");
    free(src);
}

static void test_bad_shape(void **state) {
    (void)state;
    char *root = new_root(), *text = NULL, err[E0_ERR_MAX];
    char *cp = join(fixture("qwen3moe", "hf"), "config.json");
    size_t len;
    if (e0_read_file(cp, &text, &len, 1u << 20, err)) fail_msg("%s", err);
    char *at = strstr(text, "\"moe_intermediate_size\": 128");
    assert_non_null(at);
    memcpy(at, "\"moe_intermediate_size\": 64 ", 28);
    char *src = make_source(root, NULL, NULL, ST_F32, 0, text);
    expect_error(src, root, "config.json implies", "[64, 128]");
    free(src), free(text), free(cp);
}

static void test_unknown_and_dropped(void **state) {
    (void)state;
    char *root = new_root();
    char *src = make_source(root, NULL, "model.layers.0.self_attn.q_proj.bias", ST_BF16, 128, NULL);
    expect_error(src, root, "model.layers.0.self_attn.q_proj.bias", "not part of");
    free(src);
    /* MTP tensors are dropped, as mlx-lm drops them: output unchanged */
    cleanup(NULL);
    root = new_root();
    src = make_source(root, NULL, "mtp.fc.weight", ST_BF16, 64, NULL);
    char *dst = join(root, "out"), err[E0_ERR_MAX];
    e0_convert_opts o;
    e0_convert_opts_default(&o);
    o.no_sync = 1;
    e0_convert_info info;
    if (e0_convert_run(src, dst, &o, &info, err)) fail_msg("%s", err);
    assert_int_equal(info.dropped, 1);
    assert_string_equal(info.dropped_example, "mtp.fc.weight");
    assert_int_equal(compare_dirs(dst, fixture("qwen3moe", "mlx"), "qwen3moe + mtp.fc.weight"), 0);
    free(src), free(dst);
}

/* ---- MTP tensors ---------------------------------------------------------------- */

static const char *MTP_HF = "tests/data/mtp/hf";

/* 1 when dir's tensors hold mtp.fc.weight (the block's), else 0. */
static int st_exists_mtp(const char *dir) {
    st_set *s;
    char err[E0_ERR_MAX];
    if (st_set_open_dir(&s, dir, err)) fail_msg("%s", err);
    const int has = st_get(s, "mtp.fc.weight") != NULL;
    st_set_free(s);
    return has;
}

/* dir's logits over a fixed sequence (prefill then decode) and weight bytes. */
static float *mtp_logits(const char *dir, uint64_t *weight_bytes) {
    static const int32_t ids[] = {5, 17, 300, 2, 999, 41, 7, 7, 120, 64, 1000, 3, 1023, 8};
    const size_t n = sizeof ids / sizeof *ids, V = 1024;
    char err[E0_ERR_MAX];
    e0_engine *e;
    if (e0_engine_open(&e, dir, NULL, err)) fail_msg("open %s: %s", dir, err);
    e0_model_info info;
    e0_engine_info(e, &info);
    assert_int_equal(info.vocab_size, V);
    /* a folder's mtp.* is described (one block), not loaded: the library's default is --mtp off */
    assert_int_equal(info.mtp_layers, st_exists_mtp(dir));
    assert_int_equal(info.mtp_on, 0);
    *weight_bytes = info.weight_bytes;
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)n;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    float *lg = malloc(n * V * sizeof *lg);
    assert_non_null(lg);
    if (e0_session_eval(s, ids, 5, E0_LOGITS_ALL, lg, err)) fail_msg("%s", err);
    for (size_t i = 5; i < n; i++)
        if (e0_session_eval(s, ids + i, 1, E0_LOGITS_ALL, lg + i * V, err)) fail_msg("%s", err);
    e0_session_free(s);
    e0_engine_free(e);
    return lg;
}

static bool is_mtp_name(const char *n) {
    return strncmp(n, "mtp.", 4) == 0;
}

/* The source's mtp.* tensors in `out`, same dtype, shape and bytes (keep),
 * or none there (!keep). */
static void check_mtp_in(const char *out, bool keep) {
    st_set *a, *b;
    char err[E0_ERR_MAX];
    if (st_set_open_dir(&a, out, err)) fail_msg("%s", err);
    if (st_set_open_dir(&b, MTP_HF, err)) fail_msg("%s", err);
    size_t n = 0, found = 0;
    for (size_t i = 0; i < st_count(b); i++) {
        const st_tensor *r = st_at(b, i);
        if (!is_mtp_name(r->name)) continue;
        n++;
        const st_tensor *t = st_get(a, r->name);
        if (!t) continue;
        found++;
        assert_int_equal(t->dtype, r->dtype);
        assert_int_equal(t->ndim, r->ndim);
        assert_memory_equal(t->shape, r->shape, sizeof t->shape);
        assert_int_equal(t->nbytes, r->nbytes);
        assert_memory_equal(t->data, r->data, r->nbytes);
    }
    size_t in_out = 0;
    for (size_t i = 0; i < st_count(a); i++)
        in_out += is_mtp_name(st_at(a, i)->name);
    assert_int_equal(n, 29); /* fc, 3 norms, a layer of 25 tensors with 4 experts */
    assert_int_equal(found, keep ? n : 0);
    assert_int_equal(in_out, found);
    st_set_free(a);
    st_set_free(b);
}

/* convert drops mtp.* by default and keeps them with --keep-mtp (library
 * and command line); the mlx folder with them computes what the one
 * without does, as the Hugging Face folder with them computes what a copy
 * without them does. */
static void test_mtp_keep_drop(void **state) {
    (void)state;
    char *root = new_root(), *drop = join(root, "drop"), *keep = join(root, "keep"), err[E0_ERR_MAX];
    e0_convert_opts o;
    e0_convert_opts_default(&o);
    o.no_sync = 1;
    e0_convert_info info;
    if (e0_convert_run(MTP_HF, drop, &o, &info, err)) fail_msg("%s", err);
    assert_int_equal(info.dropped, 29);
    assert_int_equal(info.kept_mtp, 0);
    check_mtp_in(drop, false);
    o.keep_mtp = 1;
    if (e0_convert_run(MTP_HF, keep, &o, &info, err)) fail_msg("%s", err);
    assert_int_equal(info.dropped, 0);
    assert_int_equal(info.kept_mtp, 29);
    check_mtp_in(keep, true);
    printf("  convert: 29 mtp.* tensors dropped by default, kept byte for byte with keep_mtp\n");
    uint64_t wd, wk, wh, wn;
    float *ld = mtp_logits(drop, &wd), *lk = mtp_logits(keep, &wk);
    assert_memory_equal(ld, lk, 14 * 1024 * sizeof *ld);
    assert_int_equal(wd, wk);

    /* the Hugging Face folder, and a copy of it without mtp.* */
    char *nomtp = join(root, "nomtp"), *p = join(nomtp, "model.safetensors");
    assert_int_equal(mkdir(nomtp, 0755), 0);
    st_set *s;
    if (st_set_open_dir(&s, MTP_HF, err)) fail_msg("%s", err);
    st_wtensor *wt = calloc(st_count(s), sizeof *wt);
    assert_non_null(wt);
    size_t k = 0;
    for (size_t i = 0; i < st_count(s); i++) {
        const st_tensor *t = st_at(s, i);
        if (is_mtp_name(t->name)) continue;
        wt[k] = (st_wtensor){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(wt[k++].shape, t->shape, sizeof wt[0].shape);
    }
    static const char *const meta[] = {"format", "pt"};
    if (st_write(p, wt, k, meta, 2, err)) fail_msg("%s", err);
    copy_text(MTP_HF, nomtp, "config.json");
    copy_text(MTP_HF, nomtp, "tokenizer.json");
    st_set_free(s);
    float *lh = mtp_logits(MTP_HF, &wh), *ln = mtp_logits(nomtp, &wn);
    assert_memory_equal(lh, ln, 14 * 1024 * sizeof *lh);
    assert_int_equal(wh, wn);
    printf("  hf with mtp.* = hf without (weight bytes %llu); mlx with mtp.* = mlx without (%llu)\n",
           (unsigned long long)wh, (unsigned long long)wd);

    /* the command line: --keep-mtp, and the plan says what it does */
    char cmd[8192], *log = join(root, "log"), *keep2 = join(root, "keep2");
    snprintf(cmd, sizeof cmd,
             "%s convert %s %s --keep-mtp --no-sync > %s 2>&1 && grep -q '29 MTP tensors kept as "
             "they are' %s && %s convert %s %s/drop2 --no-sync --dry-run | grep -q '29 source "
             "tensors dropped (MTP'",
             tu_bin(), MTP_HF, keep2, log, log, tu_bin(), MTP_HF, root);
    if (tu_run(cmd) != 0) fail_msg("edge0 convert --keep-mtp (see %s)", log);
    check_mtp_in(keep2, true);
    free(ld), free(lk), free(lh), free(ln), free(wt), free(p), free(nomtp), free(log), free(keep2);
    free(drop), free(keep);
}

/* Through the binary: an existing DST is refused (and left as it was)
 * without --force, replaced with it; --force does not replace what is not
 * a model directory. */
static void test_existing_dst(void **state) {
    (void)state;
    char *root = new_root(), *dst = join(root, "out"), cmd[8192], *log = join(root, "log");
    assert_int_equal(mkdir(dst, 0755), 0);
    free(tu_write(dst, "config.json", "{}", 2));
    snprintf(cmd, sizeof cmd, "%s convert %s %s > %s 2>&1", tu_bin(), fixture("qwen3moe", "hf"), dst, log);
    assert_int_not_equal(tu_run(cmd), 0);
    char *text = NULL, err[E0_ERR_MAX];
    size_t len;
    if (e0_read_file(log, &text, &len, 1u << 20, err)) fail_msg("%s", err);
    printf("  %s", text);
    assert_non_null(strstr(text, "already exists"));
    free(text);
    char *cfg = join(dst, "config.json"), *st = join(dst, "model.safetensors");
    if (e0_read_file(cfg, &text, &len, 1u << 20, err)) fail_msg("%s", err);
    assert_string_equal(text, "{}");
    free(text);
    assert_false(e0_file_exists(st));
    snprintf(cmd, sizeof cmd, "%s convert %s %s --force --no-sync > %s 2>&1", tu_bin(), fixture("qwen3moe", "hf"),
             dst, log);
    assert_int_equal(tu_run(cmd), 0);
    assert_true(e0_file_exists(st));
    assert_int_equal(compare_dirs(dst, fixture("qwen3moe", "mlx"), "qwen3moe --force"), 0);
    assert_nothing_left(root, "out.");
    /* not a model directory: refused even with --force */
    char *other = join(root, "other"), *sub = join(other, "sub");
    assert_int_equal(mkdir(other, 0755), 0);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(cmd, sizeof cmd, "%s convert %s %s --force > %s 2>&1", tu_bin(), fixture("qwen3moe", "hf"), other, log);
    assert_int_not_equal(tu_run(cmd), 0);
    assert_true(e0_file_exists(sub));
    free(dst), free(log), free(cfg), free(st), free(other), free(sub);
}

static void test_cancel(void **state) {
    (void)state;
    char *root = new_root(), *dst = join(root, "out"), err[E0_ERR_MAX];
    static volatile sig_atomic_t cancel = 1;
    e0_convert_opts o;
    e0_convert_opts_default(&o);
    o.cancel = &cancel;
    assert_int_equal(e0_convert_run(fixture("qwen35moe", "hf"), dst, &o, NULL, err), E0_EINVAL);
    printf("  cancelled: %s\n", err);
    assert_nothing_left(root, "out");
    free(dst);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    e0_set_kernels(E0_KERNELS_EXACT); /* the 1e-4 bound is the exact sets' (quant/mat.h) */
    struct CMUnitTest tests[32];
    size_t n = 0;
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        static char names[8][96];
        snprintf(names[i], sizeof names[i], "fixture %s/%s%s -> %s", CASES[i].family, CASES[i].src,
                 CASES[i].fused ? " --fused-gate-up" : "", CASES[i].ref);
        tests[n++] = (struct CMUnitTest){names[i], test_fixture, NULL, cleanup, (void *)&CASES[i]};
    }
    tests[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_sharded, cleanup);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_missing_shard, cleanup);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_bad_dtype, cleanup);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_bad_shape, cleanup);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_unknown_and_dropped, cleanup);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_existing_dst, cleanup);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_cancel, cleanup);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test_teardown(test_mtp_keep_drop, cleanup);
    return _cmocka_run_group_tests("test_convert", tests, n, NULL, NULL);
}
