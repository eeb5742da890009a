/* Hostile checkpoints: every malformed-input case of the loader gives a
 * clear error naming the file and the tensor or key, and nothing crashes.
 * Also: sharded checkpoints load and compute exactly what one file does;
 * --io load and pread's pinning leave a GGUF file's MTP head in the file. */
#include "testutil.h"

#include "model/model.h"

#include "edge0.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "quant/mat.h"
#include "util/file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A raw safetensors file: header JSON + `data_len` zero bytes of data. */
static char *raw_file(const char *dir, const char *name, const char *json, uint64_t hlen_override,
                      size_t data_len) {
    size_t jl = strlen(json), n = 8 + jl + data_len;
    uint8_t *buf = calloc(1, n);
    assert_non_null(buf);
    uint64_t hl = hlen_override ? hlen_override : jl;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(hl >> (8 * i));
    memcpy(buf + 8, json, jl);
    char *p = tu_write(dir, name, buf, n);
    free(buf);
    return p;
}

/* Opens a raw file, expects failure with `code` and every `needle` in the message. */
static void expect_open_error(const char *json, uint64_t hlen, size_t data_len, int code,
                              const char *needle1, const char *needle2) {
    char *dir = tu_tmpdir();
    char *p = raw_file(dir, "bad.safetensors", json, hlen, data_len);
    st_set *s = NULL;
    char err[E0_ERR_MAX] = "";
    int rc = st_set_open_file(&s, p, err);
    printf("  -> %s\n", err);
    assert_int_equal(rc, code);
    assert_null(s);
    assert_non_null(strstr(err, "bad.safetensors"));
    if (needle1) assert_non_null(strstr(err, needle1));
    if (needle2) assert_non_null(strstr(err, needle2));
    free(p);
    tu_rmtree(dir);
    free(dir);
}

/* st_set_load's progress: bytes so far only grow, the last call says done. */
static void load_seen(void *ctx, uint64_t done, uint64_t total) {
    uint64_t **pc = ctx;
    assert_true(done > *pc[0] && done <= total);
    *pc[0] = done;
    ++*pc[1];
}

/* ctx: {last, calls, total}; the total never changes, done only grows */
static void repack_seen(void *ctx, uint64_t done, uint64_t total) {
    uint64_t **pc = ctx;
    assert_true(done > *pc[0] && done <= total);
    assert_true(!*pc[1] || total == *pc[2]);
    *pc[0] = done, *pc[2] = total;
    ++*pc[1];
}

static void test_valid_raw(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    const char *json = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"a\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]},"
                       "\"e\":{\"dtype\":\"U32\",\"shape\":[0,4],\"data_offsets\":[16,16]}}";
    char *p = raw_file(dir, "ok.safetensors", json, 0, 16);
    st_set *s;
    char err[E0_ERR_MAX];
    assert_int_equal(st_set_open_file(&s, p, err), 0);
    assert_int_equal(st_count(s), 3);
    const st_tensor *a = st_get(s, "a");
    assert_non_null(a);
    assert_int_equal(a->dtype, ST_BF16);
    assert_int_equal(a->nbytes, 12);
    /* the header is not padded, so the data is unaligned: allowed by the format */
    assert_int_equal(a->off, 8 + strlen(json));
    assert_int_not_equal(a->off % 4, 0);
    uint64_t off, len;
    assert_int_equal(st_slice(a, 1, &off, &len), 0);
    assert_int_equal(len, 6);
    assert_int_equal(off, a->off + 6);
    assert_int_equal(st_slice(a, 2, &off, &len), E0_ERANGE);
    assert_string_equal(st_meta(s, "format"), "pt");
    assert_null(st_get(s, "missing"));
    st_set_free(s);
    free(p);
    tu_rmtree(dir);
    free(dir);
}

static void test_header_errors(void **state) {
    (void)state;
    const char *ok_entry = "\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";
    char json[512];
    /* header length past the end of the file */
    snprintf(json, sizeof json, "{%s}", ok_entry);
    expect_open_error(json, 1u << 20, 8, E0_EFORMAT, "header length", "past the end");
    /* malformed JSON */
    expect_open_error("{\"t\":{\"dtype\":\"F32\",", 0, 8, E0_EFORMAT, "not valid JSON", NULL);
    expect_open_error("[1,2]", 0, 8, E0_EFORMAT, "not an object", NULL);
    /* offsets beyond the data: a truncated file */
    expect_open_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 0, 8, E0_EFORMAT,
                      "tensor t", "truncated");
    /* begin > end */
    expect_open_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}", 0, 8, E0_EFORMAT,
                      "tensor t", "begin");
    /* overlapping tensors */
    expect_open_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                      "\"u\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      0, 8, E0_EFORMAT, "overlap", NULL);
    /* shape x dtype != bytes */
    expect_open_error("{\"t\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 0, 8, E0_EFORMAT,
                      "tensor t", "shape x dtype");
    /* shape overflow */
    expect_open_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", 0,
                      8, E0_EFORMAT, "tensor t", "overflow");
    /* unknown dtype, negative / fractional numbers, wrong types */
    expect_open_error("{\"t\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, 8, E0_EFORMAT,
                      "tensor t", "dtype");
    expect_open_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 0, 8, E0_EFORMAT,
                      "tensor t", "shape");
    expect_open_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.5]}}", 0, 8, E0_EFORMAT,
                      "tensor t", "data_offsets");
    expect_open_error("{\"t\":{\"dtype\":\"F32\",\"shape\":\"2\",\"data_offsets\":[0,8]}}", 0, 8, E0_EFORMAT,
                      "tensor t", "shape");
    expect_open_error("{\"t\":5}", 0, 8, E0_EFORMAT, "tensor t", NULL);
    expect_open_error("{\"__metadata__\":{\"k\":1}}", 0, 8, E0_EFORMAT, "__metadata__", NULL);
    /* duplicate names */
    expect_open_error("{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                      "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                      0, 8, E0_EFORMAT, "tensor t", "twice");
    /* a file shorter than the length prefix */
    char *dir = tu_tmpdir();
    char *p = tu_write(dir, "bad.safetensors", "abc", 3);
    st_set *s = NULL;
    char err[E0_ERR_MAX];
    assert_int_equal(st_set_open_file(&s, p, err), E0_EFORMAT);
    assert_non_null(strstr(err, "too short"));
    free(p);
    tu_rmtree(dir);
    free(dir);
}

/* ---- model directories derived from a fixture ------------------------- */

static char *copy_file(const char *src, const char *dir, const char *name) {
    char *text;
    size_t len;
    char err[E0_ERR_MAX];
    if (e0_read_file(src, &text, &len, 1u << 30, err)) fail_msg("%s", err);
    char *p = tu_write(dir, name, text, len);
    free(text);
    return p;
}

/* Writes tensors first, first + step, ... of `src` (except `skip`) into dir/name. */
static void write_tensors(const st_set *src, const char *dir, const char *name, size_t first, size_t step,
                          const char *skip) {
    size_t n = st_count(src), k = 0;
    st_wtensor *w = calloc(n, sizeof *w);
    assert_non_null(w);
    for (size_t i = first; i < n; i += step) {
        const st_tensor *t = st_at(src, i);
        if (skip && strcmp(t->name, skip) == 0) continue;
        w[k] = (st_wtensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
        memcpy(w[k].shape, t->shape, sizeof t->shape);
        k++;
    }
    char path[4096], err[E0_ERR_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (st_write(path, w, k, NULL, 0, err)) fail_msg("%s", err);
    free(w);
}

static st_set *fixture_set(const char *layout) {
    char rel[256], err[E0_ERR_MAX];
    snprintf(rel, sizeof rel, "fixtures/qwen3moe/%s/model.safetensors", layout);
    st_set *s;
    if (st_set_open_file(&s, tu_shared(rel), err)) fail_msg("%s", err);
    return s;
}

static int open_engine(const char *dir, char *err) {
    e0_engine *e = NULL;
    int rc = e0_engine_open(&e, dir, NULL, err);
    printf("  -> %s\n", rc ? err : "ok");
    e0_engine_free(e);
    return rc;
}

/* A config.json with one substitution applied to the fixture's. */
static void write_config(const char *dir, const char *from, const char *to) {
    char *text;
    size_t len;
    char err[E0_ERR_MAX];
    if (e0_read_file(tu_shared("fixtures/qwen3moe/hf/config.json"), &text, &len, 1u << 20, err))
        fail_msg("%s", err);
    char *at = from ? strstr(text, from) : NULL;
    if (from) assert_non_null(at);
    size_t n = len + (to ? strlen(to) : 0) + 1;
    char *out = malloc(n);
    assert_non_null(out);
    if (at) snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    else snprintf(out, n, "%s", text);
    free(tu_write(dir, "config.json", out, strlen(out)));
    free(out);
    free(text);
}

static void test_sharded_equals_single(void **state) {
    (void)state;
    st_set *src = fixture_set("hf");
    char *dir = tu_tmpdir();
    write_config(dir, NULL, NULL);
    write_tensors(src, dir, "model-00001-of-00002.safetensors", 0, 2, NULL);
    write_tensors(src, dir, "model-00002-of-00002.safetensors", 1, 2, NULL);
    /* index.json: every tensor -> its shard */
    size_t n = st_count(src), cap = 256 + n * 128, o = 0;
    char *idx = malloc(cap);
    assert_non_null(idx);
    o += (size_t)snprintf(idx + o, cap - o, "{\"metadata\":{},\"weight_map\":{");
    for (size_t i = 0; i < n; i++)
        o += (size_t)snprintf(idx + o, cap - o, "%s\"%s\":\"model-0000%zu-of-00002.safetensors\"", i ? "," : "",
                              st_at(src, i)->name, i % 2 + 1);
    snprintf(idx + o, cap - o, "}}");
    free(tu_write(dir, "model.safetensors.index.json", idx, strlen(idx)));

    char err[E0_ERR_MAX];
    e0_engine *a, *b;
    if (e0_engine_open(&a, dir, NULL, err)) fail_msg("%s", err);
    if (e0_engine_open(&b, tu_shared("fixtures/qwen3moe/hf"), NULL, err)) fail_msg("%s", err);
    int32_t ids[6] = {1, 5, 9, 700, 3, 1023};
    float *la = malloc(6 * 1024 * sizeof(float)), *lb = malloc(6 * 1024 * sizeof(float));
    e0_session *sa, *sb;
    assert_int_equal(e0_session_new(a, NULL, &sa, err), 0);
    assert_int_equal(e0_session_new(b, NULL, &sb, err), 0);
    assert_int_equal(e0_session_eval(sa, ids, 6, E0_LOGITS_ALL, la, err), 0);
    assert_int_equal(e0_session_eval(sb, ids, 6, E0_LOGITS_ALL, lb, err), 0);
    assert_memory_equal(la, lb, 6 * 1024 * sizeof(float));
    e0_session_free(sa);
    e0_session_free(sb);
    e0_engine_free(a);
    e0_engine_free(b);
    free(la);
    free(lb);

    /* a missing shard */
    char p[4096];
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    char *saved = copy_file(p, dir, "saved.bin");
    unlink(p);
    assert_int_equal(open_engine(dir, err), E0_ENOTFOUND);
    assert_non_null(strstr(err, "model-00002-of-00002.safetensors"));
    /* a truncated shard */
    FILE *f = fopen(saved, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long full = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *bytes = malloc((size_t)full);
    assert_int_equal(fread(bytes, 1, (size_t)full, f), (size_t)full);
    fclose(f);
    free(tu_write(dir, "model-00002-of-00002.safetensors", bytes, (size_t)full - 1000));
    assert_int_equal(open_engine(dir, err), E0_EFORMAT);
    assert_non_null(strstr(err, "model-00002-of-00002.safetensors"));
    assert_non_null(strstr(err, "truncated"));
    free(bytes);
    /* index naming a shard outside the directory */
    const char *evil = "{\"weight_map\":{\"lm_head.weight\":\"../etc/passwd\"}}";
    free(tu_write(dir, "model.safetensors.index.json", evil, strlen(evil)));
    assert_int_equal(open_engine(dir, err), E0_EFORMAT);
    assert_non_null(strstr(err, "lm_head.weight"));
    const char *cut = "{\"weight_map\":";
    free(tu_write(dir, "model.safetensors.index.json", cut, strlen(cut)));
    assert_int_equal(open_engine(dir, err), E0_EFORMAT);
    assert_non_null(strstr(err, "index.json"));
    free(saved);
    free(idx);
    st_set_free(src);
    tu_rmtree(dir);
    free(dir);
}

static void test_model_errors(void **state) {
    (void)state;
    st_set *src = fixture_set("hf");
    char *dir = tu_tmpdir(), err[E0_ERR_MAX];
    /* no config.json */
    write_tensors(src, dir, "model.safetensors", 0, 1, NULL);
    assert_int_equal(open_engine(dir, err), E0_ENOTFOUND);
    assert_non_null(strstr(err, "config.json"));
    /* unknown model_type */
    write_config(dir, "\"qwen3_moe\"", "\"llama\"");
    assert_int_equal(open_engine(dir, err), E0_EUNSUPPORTED);
    assert_non_null(strstr(err, "llama"));
    /* malformed config */
    const char *trunc = "{\"model_type\": \"qwen3_moe\", \"hidden_size\": ";
    free(tu_write(dir, "config.json", trunc, strlen(trunc)));
    assert_int_equal(open_engine(dir, err), E0_EFORMAT);
    assert_non_null(strstr(err, "config.json"));
    write_config(dir, "\"hidden_size\": 128", "\"hidden_size\": \"128\"");
    assert_int_equal(open_engine(dir, err), E0_EFORMAT);
    assert_non_null(strstr(err, "hidden_size"));
    write_config(dir, "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3");
    assert_int_equal(open_engine(dir, err), E0_EFORMAT);
    assert_non_null(strstr(err, "num_key_value_heads"));
    write_config(dir, "\"num_experts_per_tok\": 4", "\"num_experts_per_tok\": 40");
    assert_int_equal(open_engine(dir, err), E0_EFORMAT);
    assert_non_null(strstr(err, "num_experts_per_tok"));
    /* config that disagrees with the tensor shapes */
    write_config(dir, "\"moe_intermediate_size\": 128", "\"moe_intermediate_size\": 96");
    assert_int_equal(open_engine(dir, err), E0_EFORMAT);
    assert_non_null(strstr(err, "experts.0.gate_proj.weight"));
    assert_non_null(strstr(err, "[128, 128]"));
    write_config(dir, "\"vocab_size\": 1024", "\"vocab_size\": 1000");
    assert_int_equal(open_engine(dir, err), E0_EFORMAT);
    assert_non_null(strstr(err, "embed_tokens.weight"));
    /* a missing tensor */
    write_config(dir, NULL, NULL);
    assert_int_equal(open_engine(dir, err), 0);
    write_tensors(src, dir, "model.safetensors", 0, 1, "model.layers.2.self_attn.k_norm.weight");
    assert_int_equal(open_engine(dir, err), E0_ENOTFOUND);
    assert_non_null(strstr(err, "model.layers.2.self_attn.k_norm.weight"));
    write_tensors(src, dir, "model.safetensors", 0, 1, "lm_head.weight");
    assert_int_equal(open_engine(dir, err), E0_ENOTFOUND);
    assert_non_null(strstr(err, "lm_head"));
    /* ... unless the embeddings are tied */
    write_config(dir, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
    assert_int_equal(open_engine(dir, err), 0);
    st_set_free(src);
    tu_rmtree(dir);
    free(dir);
}

/* Ids outside the vocabulary and bad arguments through the CLI: clear
 * message, non-zero exit, no crash. */
/* st_set_load (--io load): every tensor keeps its address and its bytes,
 * the mapping is 2 MiB-aligned, and logits through the loaded copy are
 * byte-identical to those through the mapping. */
static void test_load_in_place(void **state) {
    (void)state;
    char err[E0_ERR_MAX];
    st_set *s;
    if (st_set_open_dir(&s, tu_shared("fixtures/qwen35moe/hf"), err)) fail_msg("%s", err);
    const size_t n = st_count(s);
    const uint8_t **where = malloc(n * sizeof *where);
    uint8_t **copy = malloc(n * sizeof *copy);
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = st_at(s, i);
        where[i] = t->data;
        copy[i] = malloc(t->nbytes ? t->nbytes : 1);
        memcpy(copy[i], t->data, t->nbytes);
    }
    uint32_t file;
    uint64_t off;
    assert_int_equal(st_locate(s, st_at(s, 0)->data, &file, &off), 0);
    assert_int_equal((uintptr_t)(st_at(s, 0)->data - off) % (2u << 20), 0);
    uint64_t last = 0, calls = 0;
    uint64_t *pc[2] = {&last, &calls};
    assert_int_equal(st_set_load(s, NULL, 0, load_seen, pc, err), 0);
    assert_true(calls > 0);
    for (size_t i = 0; i < n; i++) {
        const st_tensor *t = st_at(s, i);
        assert_ptr_equal(t->data, where[i]);
        assert_memory_equal(t->data, copy[i], t->nbytes);
        free(copy[i]);
    }
    free(copy);
    free(where);
    st_set_free(s);

    /* the loaded copy computes what the mapping does; the mlx fixtures' 4-bit
     * matrices are repacked into 16-row panels (mat.h) under the default
     * kernels, and then give the file layout's logits too, through a batch
     * and through single-token decode steps */
    const char *models[] = {"fixtures/qwen35moe/hf", "fixtures/qwen35moe/mlx",
                            "fixtures/qwen35moe/mlx-fused", "fixtures/qwen3moe/mlx"};
    const int32_t ids[] = {1, 100, 1000, 5, 77, 9};
    for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++) {
        float *lg[3];
        for (int v = 0; v < 3; v++) {
            e0_engine_opts o;
            e0_engine_opts_default(&o);
            o.io = v == 0 ? E0_IO_MMAP : v == 1 ? E0_IO_LOAD : E0_IO_PREAD;
            uint64_t rp_last = 0, rp_calls = 0, rp_total = 0, *rp[3] = {&rp_last, &rp_calls, &rp_total};
            o.repack_progress = repack_seen, o.load_ctx = rp;
            e0_engine *e;
            if (e0_engine_open(&e, tu_shared(models[mi]), &o, err)) fail_msg("%s", err);
            if (v == 1) {
                assert_non_null(strstr(e0_engine_io_note(e), "io load"));
                if (mi > 0 && mat_p16_wanted()) {
                    assert_non_null(strstr(e0_engine_io_note(e), "16-row panels"));
                    /* the progress of the repack: every matrix reported, ending at the total */
                    assert_true(rp_calls > 0);
                    assert_int_equal(rp_last, rp_total);
                }
            }
            if (v != 1 || mi == 0 || !mat_p16_wanted()) assert_int_equal(rp_calls, 0);
            e0_model_info info;
            e0_engine_info(e, &info);
            e0_session *ss;
            if (e0_session_new(e, NULL, &ss, err)) fail_msg("%s", err);
            const size_t V = (size_t)info.vocab_size;
            lg[v] = malloc(6 * V * sizeof(float));
            if (e0_session_eval(ss, ids, 3, E0_LOGITS_ALL, lg[v], err)) fail_msg("%s", err);
            for (int t = 3; t < 6; t++)
                if (e0_session_eval(ss, ids + t, 1, E0_LOGITS_ALL, lg[v] + t * V, err))
                    fail_msg("%s", err);
            if (v) assert_memory_equal(lg[0], lg[v], 6 * V * sizeof(float));
            e0_session_free(ss);
            e0_engine_free(e);
        }
        printf("  %s: io mmap, load and pread give the same logits\n", models[mi]);
        for (int v = 0; v < 3; v++)
            free(lg[v]);
    }
}

/* The checkpoint truncated under open engines. pread I/O: the resident
 * weights were copied out of the mapping at open, so nothing reads a page
 * past the new end of file: expert reads fail with an error naming the
 * file, the process lives, and the same engine answers again once the file
 * is whole (logits before the truncation equal those of --io load). mmap
 * I/O: the SIGBUS guard turns the lost pages into an error naming the file. */
static void test_truncated_while_open(void **state) {
    (void)state;
    char err[E0_ERR_MAX], cmd[16384];
    char *dir = tu_tmpdir();
    snprintf(cmd, sizeof cmd, "cp %s/* %s/", tu_shared("fixtures/qwen35moe/mlx"), dir);
    assert_int_equal(tu_run(cmd), 0);
    char path[4200], keep[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(keep, sizeof keep, "%s/whole", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s", path, keep);
    assert_int_equal(tu_run(cmd), 0);
    float *lg[2];
    const int32_t ids[] = {1, 100, 1000, 5, 77, 9};
    e0_engine *e[2];
    size_t V = 0;
    for (int v = 0; v < 2; v++) {
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.io = v ? E0_IO_PREAD : E0_IO_LOAD;
        o.layer.cache_slots = 0; /* every expert read from the file, every time */
        if (e0_engine_open(&e[v], dir, &o, err)) fail_msg("%s", err);
        e0_model_info info;
        e0_engine_info(e[v], &info);
        V = (size_t)info.vocab_size;
        e0_session *ss;
        if (e0_session_new(e[v], NULL, &ss, err)) fail_msg("%s", err);
        lg[v] = malloc(6 * V * sizeof(float));
        if (e0_session_eval(ss, ids, 6, E0_LOGITS_ALL, lg[v], err)) fail_msg("%s", err);
        e0_session_free(ss);
    }
    assert_memory_equal(lg[0], lg[1], 6 * V * sizeof(float));
    assert_non_null(strstr(e0_engine_io_note(e[1]), "copied out of the file mappings"));
    e0_engine_opts om;
    e0_engine_opts_default(&om);
    om.io = E0_IO_MMAP;
    e0_engine *em;
    if (e0_engine_open(&em, dir, &om, err)) fail_msg("%s", err);
    assert_int_equal(truncate(path, 100000), 0);
    e0_session *ss;
    /* through the mapping: the SIGBUS guard's zeros, then an error */
    if (e0_session_new(em, NULL, &ss, err)) fail_msg("%s", err);
    assert_int_not_equal(e0_session_eval(ss, ids, 6, E0_LOGITS_ALL, lg[1], err), 0);
    if (!strstr(err, "model.safetensors: the file shrank"))
        fail_msg("mmap: the error does not say what happened: %s", err);
    e0_session_free(ss);
    e0_engine_free(em);
    if (e0_session_new(e[1], NULL, &ss, err)) fail_msg("%s", err);
    int rc = e0_session_eval(ss, ids, 6, E0_LOGITS_ALL, lg[1], err);
    assert_int_not_equal(rc, 0);
    if (!strstr(err, "model.safetensors")) fail_msg("error does not name the file: %s", err);
    e0_session_free(ss);
    snprintf(cmd, sizeof cmd, "cat %s > %s", keep, path); /* whole again, same inode */
    assert_int_equal(tu_run(cmd), 0);
    if (e0_session_new(e[1], NULL, &ss, err)) fail_msg("%s", err);
    if (e0_session_eval(ss, ids, 6, E0_LOGITS_ALL, lg[1], err)) fail_msg("%s", err);
    assert_memory_equal(lg[0], lg[1], 6 * V * sizeof(float));
    e0_session_free(ss);
    for (int v = 0; v < 2; v++) {
        e0_engine_free(e[v]);
        free(lg[v]);
    }
    tu_rmtree(dir);
    free(dir);
}

/* The pages pread I/O copies out of the mappings are the non-expert
 * weights' (plus the headers and the pages they share with an expert), not
 * the pages between one expert and the next of a stacked tensor. */
static void test_pin_only_resident(void **state) {
    (void)state;
    const char *models[] = {"fixtures/qwen35moe/mlx", "fixtures/qwen3moe/hf",
                            "gguf/tiny-qwen35moe/model-Q4_K_M.gguf"};
    for (int i = 0; i < 3; i++) {
        char err[E0_ERR_MAX];
        e0_model m;
        if (model_load(&m, tu_shared(models[i]), err)) fail_msg("%s", err);
        uint64_t pinned;
        if (model_pin_resident(&m, &pinned, err)) fail_msg("%s", err);
        const uint64_t rest = m.weight_bytes - m.expert_bytes, slack = 64 * 4096;
        printf("  %s: %llu bytes copied for %llu of non-expert weights\n", models[i],
               (unsigned long long)pinned, (unsigned long long)rest);
        assert_true(pinned >= rest && pinned <= rest + slack);
        model_free(&m);
    }
}

/* What /proc/self/maps says is mapped at p: 1 a mapping of a file whose
 * path ends in `file`, 0 anonymous memory, -1 neither. */
static int mapped_from(const void *p, const char *file) {
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[4608];
    int r = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &at) < 2) continue;
        if ((uintptr_t)p < lo || (uintptr_t)p >= hi) continue;
        char *path = line + at;
        path[strcspn(path, "\n")] = 0;
        const size_t pl = strlen(path), fl = strlen(file);
        r = !*path ? 0 : pl >= fl && !strcmp(path + pl - fl, file) ? 1 : -1;
        break;
    }
    fclose(f);
    return r;
}

/* The MTP head of a GGUF file (issue 36) stays in the file under every I/O
 * mode: --io load and pread's pinning copy the model's weights into
 * anonymous memory and leave its pages mappings of the file (experts too
 * under pread); the bytes read through them are the file's. */
static void test_mtp_not_loaded(void **state) {
    (void)state;
    const char *path = "tests/data/mtp/model-F32.gguf";
    const e0_io_mode ios[] = {E0_IO_LOAD, E0_IO_PREAD};
    for (int i = 0; i < 2; i++) {
        char err[E0_ERR_MAX];
        e0_engine_opts o;
        e0_engine_opts_default(&o);
        o.io = ios[i];
        o.budget_mode = E0_BUDGET_OFF;
        e0_engine *e;
        if (e0_engine_open(&e, path, &o, err)) fail_msg("%s", err);
        const e0_model *m = &e->model;
        const st_tensor *q = m->mtp.layers[0].q, *emb = st_get(m->st, "token_embd.weight"),
                        *exps = st_get(m->st, "blk.0.ffn_gate_exps.weight");
        assert_true(q && q->nbytes >= 3 * 4096 && emb && exps && exps->nbytes >= 3 * 4096);
        const uint8_t *mid_q = q->data + q->nbytes / 2, *mid_e = emb->data + emb->nbytes / 2,
                      *mid_x = exps->data + exps->nbytes / 2;
        printf("  --io %s: MTP attn_q %s, token_embd %s, blk.0 experts %s\n", e0_io_name(ios[i]),
               mapped_from(mid_q, "model-F32.gguf") == 1 ? "file" : "memory",
               mapped_from(mid_e, "model-F32.gguf") == 1 ? "file" : "memory",
               mapped_from(mid_x, "model-F32.gguf") == 1 ? "file" : "memory");
        assert_int_equal(mapped_from(mid_q, "model-F32.gguf"), 1);
        assert_int_equal(mapped_from(mid_e, "model-F32.gguf"), 0);
        assert_int_equal(mapped_from(mid_x, "model-F32.gguf"), ios[i] == E0_IO_PREAD ? 1 : 0);
        /* the bytes are the file's */
        FILE *f = fopen(path, "rb");
        assert_non_null(f);
        uint8_t *buf = malloc(q->nbytes);
        assert_non_null(buf);
        assert_int_equal(fseek(f, (long)q->off, SEEK_SET), 0);
        assert_int_equal(fread(buf, 1, q->nbytes, f), q->nbytes);
        fclose(f);
        assert_memory_equal(buf, q->data, q->nbytes);
        free(buf);
        e0_engine_free(e);
    }
}

static void test_cli_errors(void **state) {
    (void)state;
    char cmd[4096];
    const char *m = tu_shared("fixtures/qwen3moe/hf");
    char *dir = tu_tmpdir();
    snprintf(cmd, sizeof cmd, "%s logits %s --ids 1,2,1024 --out %s/o.safetensors 2>%s/err.txt", tu_bin(), m, dir, dir);
    assert_int_equal(tu_run(cmd), 1);
    snprintf(cmd, sizeof cmd, "grep -q 'token id 1024 at index 2 is outside the vocabulary' %s/err.txt", dir);
    assert_int_equal(tu_run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s logits %s --ids 1,x --out %s/o.safetensors 2>/dev/null", tu_bin(), m, dir);
    assert_int_equal(tu_run(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s logits %s --ids 1,2 --prefill 3 --out %s/o.safetensors 2>/dev/null", tu_bin(), m, dir);
    assert_int_equal(tu_run(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s logits /nonexistent --ids 1 --out %s/o.safetensors 2>%s/err.txt", tu_bin(), dir, dir);
    assert_int_equal(tu_run(cmd), 1);
    snprintf(cmd, sizeof cmd, "grep -q '/nonexistent: no such file or directory' %s/err.txt", dir);
    assert_int_equal(tu_run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s logits --help >/dev/null", tu_bin());
    assert_int_equal(tu_run(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s nosuchcommand 2>/dev/null", tu_bin());
    assert_int_equal(tu_run(cmd), 2);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_raw),
        cmocka_unit_test(test_header_errors),
        cmocka_unit_test(test_sharded_equals_single),
        cmocka_unit_test(test_model_errors),
        cmocka_unit_test(test_load_in_place),
        cmocka_unit_test(test_truncated_while_open),
        cmocka_unit_test(test_pin_only_resident),
        cmocka_unit_test(test_mtp_not_loaded),
        cmocka_unit_test(test_cli_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
