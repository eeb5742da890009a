/* GGUF checkpoints end to end, against ../shared/gguf: files written by
 * llama.cpp's converter and quantizer, with goldens that are exact f32
 * arithmetic on each file's quantized weights (README there).
 *  - every file, 32 and 160 ids (prefill then decode): --kernels exact
 *    within 1e-4 relative L2 at every position; the default kernels within
 *    5e-3 with the same argmax at every position;
 *  - the hyper-parameters come from the metadata (no config.json);
 *  - `demo`, `chat` and `serve` on a file with nothing beside it (the
 *    tokenizer from tokenizer.ggml.*);
 *  - Qwen3.5 files with the MTP block (tests/data/mtp, made by llama.cpp's
 *    converter, issue 36): the main layers and their pattern from
 *    block_count - nextn_predict_layers, the block checked and not loaded,
 *    the F32 file within 1e-5 of the Hugging Face checkpoint it was made
 *    from, `info` / `demo` / `chat` / `serve` on the file alone; the
 *    draft-only file, nextn_predict_layers >= block_count, a missing or
 *    misshapen MTP tensor, an unknown tensor or key: clear errors naming
 *    the file once.
 * The streaming paths on GGUF are in test_stream's matrix. */
#include "testutil.h"

#include "edge0.h"
#include "model/model.h"
#include "io/gguf.h"
#include "quant/ggml.h"
#include "quant/mat.h"
#include "stream/switchglu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *FILES[][2] = {
    {"qwen3moe", "Q8_0"},         {"qwen3moe", "Q4_0"},        {"qwen3next", "Q8_0"},
    {"qwen3next", "Q4_0"},        {"qwen35moe", "Q8_0"},       {"qwen35moe", "Q4_0"},
    {"tiny-qwen35moe", "Q4_K_M"}, {"tiny-qwen35moe", "Q6_K"},  {"tiny-qwen35moe", "IQ4_XS"},
    {"tiny-qwen3moe", "Q4_K_M"},
};
enum { NFILES = sizeof FILES / sizeof *FILES };

static const char *model_path(int i) {
    static char rel[256];
    snprintf(rel, sizeof rel, "gguf/%s/model-%s.gguf", FILES[i][0], FILES[i][1]);
    return tu_shared(rel);
}

static st_set *open_golden(int i, bool long_seq) {
    char rel[256], err[E0_ERR_MAX];
    snprintf(rel, sizeof rel, "gguf/%s/golden_%s%s.safetensors", FILES[i][0], FILES[i][1],
             long_seq ? "_long" : "");
    st_set *g;
    if (st_set_open_file(&g, tu_shared(rel), err)) fail_msg("%s", err);
    return g;
}

/* Prefill the first `prompt_len` ids, decode the rest one by one. */
static float *run(e0_engine *e, const int32_t *ids, size_t n, size_t prefill, size_t V) {
    char err[E0_ERR_MAX];
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)n;
    e0_session *s;
    if (e0_session_new(e, &so, &s, err)) fail_msg("%s", err);
    float *lg = malloc(n * V * sizeof *lg);
    assert_non_null(lg);
    if (e0_session_eval(s, ids, prefill, E0_LOGITS_ALL, lg, err)) fail_msg("%s", err);
    for (size_t i = prefill; i < n; i++)
        if (e0_session_eval(s, ids + i, 1, E0_LOGITS_ALL, lg + i * V, err)) fail_msg("%s", err);
    e0_session_free(s);
    return lg;
}

/* Every file and sequence in kernel set k: the worst position within
 * `bound`, and (same_argmax) no position's argmax differs. */
static void check_all(e0_kernels k, double bound, bool same_argmax) {
    assert_int_equal(e0_set_kernels(k), 0);
    for (int i = 0; i < NFILES; i++) {
        char err[E0_ERR_MAX];
        e0_engine *e;
        if (e0_engine_open(&e, model_path(i), NULL, err)) fail_msg("%s", err);
        e0_model_info info;
        e0_engine_info(e, &info);
        assert_string_equal(info.layout, "gguf");
        const size_t V = (size_t)info.vocab_size;
        assert_int_equal(V, 1024);
        for (int long_seq = 0; long_seq < 2; long_seq++) {
            st_set *g = open_golden(i, long_seq);
            size_t n;
            const int32_t *ids = tu_i32(g, "input_ids", &n);
            const float *ref = tu_f32(g, "logits", n * V);
            const size_t prompt = (size_t)atoi(st_meta(g, "prompt_len"));
            float *lg = run(e, ids, n, prompt, V);
            double worst = 0;
            size_t at = 0, differ = 0;
            for (size_t t = 0; t < n; t++) {
                double r = tu_rel_l2(lg + t * V, ref + t * V, V);
                if (r > worst) worst = r, at = t;
                differ += tu_argmax(lg + t * V, V) != tu_argmax(ref + t * V, V);
            }
            printf("  %s %s %zu ids (%s): worst position %zu rel L2 %.3g, argmax differs at %zu\n",
                   FILES[i][0], FILES[i][1], n, e0_kernels_name(), at, worst, differ);
            if (!(worst <= bound))
                fail_msg("%s %s: position %zu rel L2 %.3g > %.0e", FILES[i][0], FILES[i][1], at,
                         worst, bound);
            if (same_argmax && differ) fail_msg("%s %s: argmax differs at %zu positions", FILES[i][0], FILES[i][1], differ);
            free(lg);
            st_set_free(g);
        }
        e0_engine_free(e);
    }
    e0_set_kernels(E0_KERNELS_AUTO);
}

static void test_logits_exact(void **state) {
    (void)state;
    check_all(E0_KERNELS_EXACT, 1e-4, true);
}

static void test_logits_default(void **state) {
    (void)state;
    check_all(E0_KERNELS_AUTO, 5e-3, true);
}

/* Hyper-parameters from the metadata, for one file of each family. */
static void test_config(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    e0_engine *e;
    if (e0_engine_open(&e, model_path(5), NULL, err)) fail_msg("%s", err); /* qwen35moe Q4_0 */
    const e0_config *c = &e->model.cfg;
    assert_int_equal(c->family, E0_FAM_QWEN3_5_MOE);
    assert_int_equal(c->n_layers, 4);
    assert_int_equal(c->hidden, 128);
    assert_int_equal(c->n_experts, 16);
    assert_int_equal(c->top_k, 4);
    assert_int_equal(c->moe_inter, 128);
    assert_int_equal(c->shared_inter, 128);
    assert_int_equal(c->head_dim, 32);
    assert_int_equal(c->rotary_dim, 8);
    assert_int_equal(c->lin_k_heads, 2);
    assert_int_equal(c->lin_v_heads, 4);
    assert_int_equal(c->lin_k_dim, 32);
    assert_int_equal(c->lin_v_dim, 32);
    assert_true(c->layer_linear[0] && c->layer_linear[2] && !c->layer_linear[3]);
    assert_true(e->model.layers[0].vtiled); /* llama.cpp's tiled value heads */
    assert_int_equal(c->n_eos, 1);
    assert_int_equal(c->eos[0], 1023);
    e0_engine_free(e);
    if (e0_engine_open(&e, model_path(3), NULL, err)) fail_msg("%s", err); /* qwen3next Q4_0 */
    assert_int_equal(e->model.cfg.family, E0_FAM_QWEN3_NEXT);
    assert_true(e->model.layers[0].ba_packed);
    assert_false(e->model.layers[0].vtiled);
    e0_engine_free(e);
    if (e0_engine_open(&e, model_path(9), NULL, err)) fail_msg("%s", err); /* qwen3moe Q4_K_M */
    assert_int_equal(e->model.cfg.family, E0_FAM_QWEN3_MOE);
    assert_int_equal(e->model.cfg.n_experts, 32);
    assert_int_equal(e->model.layers[0].experts[0].down.type, E0_W_GGML);
    e0_engine_free(e);
}

/* demo, chat and serve on a copy of the file at `path` in an empty directory. */
static void cli_single_file(const char *path) {
    char *dir = tu_tmpdir(), cmd[16384];
    snprintf(cmd, sizeof cmd, "cp %s %s/m.gguf", path, dir);
    assert_int_equal(tu_run(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "%s demo %s/m.gguf --prompt 'Hello there' --max-tokens 6 --temp 0 > %s/demo.out 2>&1 && "
             "grep -q 'gguf layout' %s/demo.out && grep -q 'decode 6 tokens' %s/demo.out",
             tu_bin(), dir, dir, dir, dir);
    if (tu_run(cmd) != 0) fail_msg("demo on a lone GGUF file failed (see %s/demo.out)", dir);
    snprintf(cmd, sizeof cmd,
             "printf 'Hello\\n/exit\\n' | %s chat %s/m.gguf --max-tokens 6 --temp 0 > %s/chat.out "
             "2>&1 && grep -q 'new prompt tokens' %s/chat.out",
             tu_bin(), dir, dir, dir);
    if (tu_run(cmd) != 0) fail_msg("chat on a lone GGUF file failed (see %s/chat.out)", dir);
    /* serve: start, wait for the port, one chat completion, SIGTERM */
    snprintf(cmd, sizeof cmd,
             "d=%s; %s serve $d/m.gguf --port 0 --temp 0 > $d/serve.log 2>&1 & pid=$!; "
             "for i in $(seq 600); do grep -q 'listening on' $d/serve.log && break; sleep 0.1; done; "
             "port=$(sed -n 's|.*listening on http://127.0.0.1:\\([0-9]*\\).*|\\1|p' $d/serve.log); "
             "code=$(curl -s -o $d/resp.json -w '%%{http_code}' -H 'Content-Type: application/json' "
             "-d '{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":5}' "
             "http://127.0.0.1:$port/v1/chat/completions); kill -TERM $pid; wait $pid; rc=$?; "
             "test \"$code\" = 200 && test $rc = 0 && grep -q '\"completion_tokens\":5' $d/resp.json",
             dir, tu_bin());
    if (tu_run(cmd) != 0) fail_msg("serve on a lone GGUF file failed (see %s/serve.log, resp.json)", dir);
    tu_rmtree(dir);
    free(dir);
}

static void test_cli_single_file(void **state) {
    (void)state;
    cli_single_file(model_path(9));
}

/* The bundle order of GGUF's separate ffn_{up,gate,down}_exps is the math
 * order (docs/design.md §3): bundles read gate-first, with every bundle
 * read through the plan, move the logits ~100%; the math order matches. */
static void test_bundle_order(void **state) {
    (void)state;
    assert_int_equal(e0_set_kernels(E0_KERNELS_EXACT), 0);
    const int i = 6; /* tiny-qwen35moe Q4_K_M: Q4_K gate/up, Q5_0/Q8_0 down */
    st_set *g = open_golden(i, false);
    size_t n;
    const int32_t *ids = tu_i32(g, "input_ids", &n);
    const float *ref = tu_f32(g, "logits", n * 1024);
    double r[2];
    for (int order = 0; order < 2; order++) {
        char err[E0_ERR_MAX];
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.path = E0_PATH_EXACT;
        o.io = E0_IO_PREAD;
        o.layer.cache_slots = 0; /* every bundle read with the plan in force */
        e0_engine *e;
        if (e0_engine_open(&e, model_path(i), &o, err)) fail_msg("%s", err);
        if (order) stream_debug_order(e->stream, XB_ORDER_GATE_FIRST);
        float *lg = run(e, ids, n, n, 1024);
        r[order] = tu_rel_l2(lg, ref, n * 1024);
        free(lg);
        e0_engine_free(e);
    }
    printf("  math order rel L2 %.2g, gate-first %.2g\n", r[0], r[1]);
    assert_true(r[0] < 1e-4);
    assert_true(r[1] > 0.3);
    st_set_free(g);
    e0_set_kernels(E0_KERNELS_AUTO);
}

/* Bad files: a clear error naming the file, nothing crashes. */
static void test_bad_files(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), err[E0_ERR_MAX], path[4200];
    /* a truncated copy: the data of the last tensors is gone */
    snprintf(path, sizeof path, "%s/t.gguf", dir);
    FILE *in = fopen(model_path(9), "rb"), *out = fopen(path, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n, total = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0 && total < 4000000)
        total += fwrite(buf, 1, n, out);
    fclose(in);
    fclose(out);
    e0_engine *e = NULL;
    assert_int_not_equal(e0_engine_open(&e, path, NULL, err), 0);
    assert_null(e);
    printf("  truncated: %s\n", err);
    assert_non_null(strstr(err, "t.gguf"));
    tu_rmtree(dir);
    free(dir);
}

/* A small GGUF of `arch` with the metadata keys given (NULL-terminated
 * pairs of key and u32 value) and one F32 token_embd [8, 4]. */
static char *write_meta(const char *dir, const char *name, const char *arch, const char *const *keys,
                        const uint32_t *vals) {
    char err[E0_ERR_MAX], path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    gguf_writer *w;
    assert_int_equal(gguf_writer_new(&w, 0, err), 0);
    assert_int_equal(gguf_writer_add_str(w, "general.architecture", arch, err), 0);
    for (int i = 0; keys[i]; i++)
        assert_int_equal(gguf_writer_add_u32(w, keys[i], vals[i], err), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "token_embd.weight", GGML_F32, 2, (const uint64_t[]){4, 8}, err), 0);
    assert_int_equal(gguf_writer_open(w, path, err), 0);
    assert_int_equal(gguf_writer_finish(w, err), 0);
    gguf_writer_free(w);
    return strdup(path);
}

/* Metadata that does not describe a model edge0 runs: errors name the
 * file and the key or tensor. */
static void test_bad_metadata(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), err[E0_ERR_MAX];
    static const char *const none[] = {NULL};
    static const char *const k[] = {"qwen3moe.embedding_length", "qwen3moe.attention.head_count",
                                    "qwen3moe.expert_count", "qwen3moe.expert_used_count",
                                    "qwen3moe.expert_feed_forward_length", "qwen3moe.block_count", NULL};
    static const uint32_t v[] = {4, 2, 4, 2, 8, 1};
    struct {
        const char *file, *arch;
        const char *const *keys;
        int drop; /* leave out key `drop` (-1: none) */
        const char *want;
    } cases[] = {
        {"llama.gguf", "llama", none, -1, "general.architecture \"llama\" is not supported"},
        {"nokey.gguf", "qwen3moe", k, 5, "qwen3moe.block_count is missing"},
        {"notensor.gguf", "qwen3moe", k, -1, "tensor output_norm.weight is missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *keys[8];
        uint32_t vals[8];
        int n = 0;
        for (int j = 0; cases[i].keys[j]; j++)
            if (j != cases[i].drop) keys[n] = cases[i].keys[j], vals[n++] = v[j];
        keys[n] = NULL;
        char *path = write_meta(dir, cases[i].file, cases[i].arch, keys, vals);
        e0_engine *e = NULL;
        assert_int_not_equal(e0_engine_open(&e, path, NULL, err), 0);
        printf("  %s: %s\n", cases[i].file, err);
        assert_non_null(strstr(err, cases[i].want));
        assert_non_null(strstr(err, cases[i].file));
        free(path);
    }
    tu_rmtree(dir);
    free(dir);
}

/* ---- MTP (tests/data/mtp) ------------------------------------------------ */

static const char *mtp_path(const char *name) {
    static char p[256];
    snprintf(p, sizeof p, "tests/data/mtp/%s.gguf", name);
    return p;
}

/* The main model and the MTP block's description from a file with both;
 * its bytes counted apart from the model's. */
static void test_mtp_config(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    e0_engine *e, *r;
    if (e0_engine_open(&e, mtp_path("model-Q8_0"), NULL, err)) fail_msg("%s", err);
    if (e0_engine_open(&r, mtp_path("model-Q8_0-nomtp"), NULL, err)) fail_msg("%s", err);
    const e0_config *c = &e->model.cfg;
    assert_int_equal(c->n_layers, 4); /* block_count 5, nextn_predict_layers 1 */
    assert_int_equal(c->mtp_layers, 1);
    assert_true(c->layer_linear[0] && c->layer_linear[1] && c->layer_linear[2] && !c->layer_linear[3]);
    assert_int_equal(r->model.cfg.n_layers, 4);
    assert_int_equal(r->model.cfg.mtp_layers, 0);
    const e0_mtp *m = &e->model.mtp;
    assert_int_equal(m->n_layers, 1);
    const e0_mtp_layer *x = &m->layers[0];
    assert_int_equal(x->blk, 4);
    assert_string_equal(x->eh_proj->name, "blk.4.nextn.eh_proj.weight");
    assert_int_equal(x->eh_proj->shape[0], c->hidden);
    assert_int_equal(x->eh_proj->shape[1], 2 * c->hidden);
    assert_true(x->q && x->k && x->v && x->o && x->router && x->gate && x->up && x->down && x->sh_router);
    assert_null(x->gate_up);
    assert_non_null(x->head_norm); /* the converter writes shared_head_norm ... */
    assert_null(x->embed);         /* ... and no embeddings or head of its own */
    assert_null(x->head);
    uint64_t bytes = 0;
    int n = 0;
    for (size_t k = 0; k < st_count(e->model.st); k++) {
        const st_tensor *t = st_at(e->model.st, k);
        if (strncmp(t->name, "blk.4.", 6) == 0) {
            bytes += t->nbytes, n++;
            assert_int_equal(e->model.used[k], 2);
        } else {
            assert_int_equal(e->model.used[k], 1);
        }
    }
    assert_int_equal(m->n_tensors, n);
    assert_int_equal(m->bytes, bytes);
    e0_model_info a, b;
    e0_engine_info(e, &a);
    e0_engine_info(r, &b);
    assert_int_equal(a.mtp_bytes, bytes);
    assert_int_equal(a.weight_bytes, b.weight_bytes);
    assert_int_equal(a.n_layers, 4);
    printf("  %d MTP tensors, %llu bytes, out of weight_bytes %llu\n", n, (unsigned long long)bytes,
           (unsigned long long)a.weight_bytes);
    e0_engine_free(e);
    e0_engine_free(r);
}

/* The F32 file computes what the Hugging Face checkpoint it was converted
 * from does (exact kernels, prefill then decode): the converter's main
 * layers are the model, whatever block follows them. */
static void test_mtp_matches_hf(void **state) {
    (void)state;
    assert_int_equal(e0_set_kernels(E0_KERNELS_EXACT), 0);
    char err[E0_ERR_MAX];
    st_set *g;
    if (st_set_open_file(&g, tu_shared("fixtures/qwen35moe/golden.safetensors"), err)) fail_msg("%s", err);
    size_t n;
    const int32_t *ids = tu_i32(g, "input_ids", &n);
    const size_t prompt = (size_t)atoi(st_meta(g, "prompt_len"));
    e0_engine *e, *h;
    if (e0_engine_open(&e, mtp_path("model-F32"), NULL, err)) fail_msg("%s", err);
    if (e0_engine_open(&h, "tests/data/mtp/hf", NULL, err)) fail_msg("%s", err);
    float *a = run(e, ids, n, prompt, 1024), *b = run(h, ids, n, prompt, 1024);
    double worst = 0;
    for (size_t t = 0; t < n; t++) {
        const double r = tu_rel_l2(a + t * 1024, b + t * 1024, 1024);
        worst = r > worst ? r : worst;
        assert_int_equal(tu_argmax(a + t * 1024, 1024), tu_argmax(b + t * 1024, 1024));
    }
    printf("  model-F32.gguf vs its Hugging Face source, %zu ids: worst position rel L2 %.3g\n", n, worst);
    assert_true(worst <= 1e-5);
    free(a), free(b);
    e0_engine_free(e);
    e0_engine_free(h);
    st_set_free(g);
    e0_set_kernels(E0_KERNELS_AUTO);
}

/* `info` names the MTP draft head and its bytes (loaded for drafts with
 * --mtp on; checked only by default, --mtp auto, and with --mtp off); demo,
 * chat and serve run on the MTP file alone. */
static void test_mtp_cli(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s info %s --mtp on > %s/info.txt 2>&1 && grep -q '4 layers (4 MoE)' %s/info.txt && "
             "grep -q '^MTP draft head: 1 layer, 0.04 MiB in the file (loaded, in the weights above' "
             "%s/info.txt && %s info %s --mtp off | grep -q '^MTP draft head: 1 layer, 0.04 MiB in the "
             "file (checked; not loaded: --mtp off)' && "
             "%s info %s | grep -q '^MTP draft head: 1 layer, 0.04 MiB in the file (loaded, in the weights "
             "above: --mtp auto drafts with it once' && "
             "%s info %s --json --mtp on | grep -q '\"mtp_layers\":1,\"mtp_bytes\":37440,\"mtp\":true'",
             tu_bin(), mtp_path("model-Q8_0"), dir, dir, dir, tu_bin(), mtp_path("model-Q8_0"), tu_bin(),
             mtp_path("model-Q8_0"), tu_bin(), mtp_path("model-Q8_0"));
    if (tu_run(cmd) != 0) fail_msg("edge0 info on the MTP file (see %s/info.txt)", dir);
    snprintf(cmd, sizeof cmd, "cat %s/info.txt", dir);
    tu_run(cmd);
    tu_rmtree(dir);
    free(dir);
    cli_single_file(mtp_path("model-Q4_0"));
}

/* A copy of `src` in dir/name with the first occurrence of `from` in its
 * header replaced by `to` (the same length); `at`: the bytes after it
 * replaced instead when non-NULL (`from` then stays). */
static char *patched(const char *dir, const char *name, const char *src, const char *from,
                     const char *to, const void *at, size_t at_len) {
    FILE *f = fopen(src, "rb");
    assert_non_null(f);
    static uint8_t buf[1 << 21];
    const size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(len > 0 && len < sizeof buf);
    const size_t fl = strlen(from);
    size_t i = 0;
    while (i + fl <= len && memcmp(buf + i, from, fl) != 0) i++;
    if (i + fl > len) fail_msg("%s: no %s in its first %zu bytes", src, from, len);
    if (at) {
        memcpy(buf + i + fl, at, at_len);
    } else {
        assert_int_equal(strlen(to), fl);
        memcpy(buf + i, to, fl);
    }
    return tu_write(dir, name, buf, len);
}

/* How many times `needle` occurs in `hay`. */
static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_mtp_errors(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), err[E0_ERR_MAX];
    char q8[256];
    snprintf(q8, sizeof q8, "%s", mtp_path("model-Q8_0"));
    /* nextn_predict_layers: u32 (type 4), then the value */
    const uint8_t six[8] = {4, 0, 0, 0, 6, 0, 0, 0}, five[8] = {4, 0, 0, 0, 5, 0, 0, 0};
    struct {
        const char *file;
        char *path;
        const char *want;
    } cases[] = {
        {"draft-Q8_0.gguf", strdup(mtp_path("draft-Q8_0")), "is a draft-only MTP file"},
        {"over.gguf", patched(dir, "over.gguf", q8, "qwen35moe.nextn_predict_layers", NULL, six, 8),
         "qwen35moe.nextn_predict_layers = 6 is not less than qwen35moe.block_count = 5"},
        {"all.gguf", patched(dir, "all.gguf", q8, "qwen35moe.nextn_predict_layers", NULL, five, 8),
         "qwen35moe.nextn_predict_layers = 5 is not less than qwen35moe.block_count = 5"},
        {"missing.gguf",
         patched(dir, "missing.gguf", q8, "blk.4.nextn.enorm.weight", "blk.4.nextn.xnorm.weight", NULL, 0),
         "tensor blk.4.nextn.enorm.weight is missing: qwen35moe.nextn_predict_layers = 1 makes blk.4"},
        {"main.gguf", patched(dir, "main.gguf", q8, "blk.0.attn_qkv.weight", "blk.0.attn_qkx.weight", NULL, 0),
         "main.gguf: tensor blk.0.attn_qkv.weight is missing"},
        {"shape.gguf", patched(dir, "shape.gguf", q8, "blk.4.attn_q.weight", "blk.4.attn_x.weight", NULL, 0),
         NULL},
        {"unknown.gguf",
         patched(dir, "unknown.gguf", q8, "blk.4.nextn.shared_head_norm.weight",
                 "blk.4.nextn.shared_head_xxxx.weight", NULL, 0),
         "tensor blk.4.nextn.shared_head_xxxx.weight is not part of the qwen35moe model"},
        {"key.gguf",
         patched(dir, "key.gguf", q8, "qwen35moe.rope.dimension_sections",
                 "qwen35moe.rope.dimension_sectionz", NULL, 0),
         "metadata key qwen35moe.rope.dimension_sectionz is not one edge0 knows"},
    };
    /* shape.gguf: attn_q renamed attn_x, then attn_k renamed attn_q: a
     * [64, 32] tensor where the config implies [256, 32] */
    free(cases[5].path);
    char *tmp = patched(dir, "tmp.gguf", q8, "blk.4.attn_q.weight", "blk.4.attn_x.weight", NULL, 0);
    cases[5].path = patched(dir, "shape.gguf", tmp, "blk.4.attn_k.weight", "blk.4.attn_q.weight", NULL, 0);
    cases[5].want = "tensor blk.4.attn_q.weight has shape [64, 32] but the GGUF metadata implies [256, 32]";
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        e0_engine *e = NULL;
        err[0] = 0;
        assert_int_not_equal(e0_engine_open(&e, cases[i].path, NULL, err), 0);
        assert_null(e);
        printf("  %s: %s\n", cases[i].file, err);
        if (!strstr(err, cases[i].want)) fail_msg("%s: the message lacks '%s'", cases[i].file, cases[i].want);
        assert_int_equal(count(err, cases[i].file), 1); /* the file, named once */
        free(cases[i].path);
    }
    free(tmp);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_exact),  cmocka_unit_test(test_logits_default),
        cmocka_unit_test(test_config),        cmocka_unit_test(test_cli_single_file),
        cmocka_unit_test(test_bundle_order), cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_bad_metadata),  cmocka_unit_test(test_mtp_config),
        cmocka_unit_test(test_mtp_matches_hf), cmocka_unit_test(test_mtp_cli),
        cmocka_unit_test(test_mtp_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
