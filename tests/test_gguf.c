/* The GGUF reader: llama.cpp-written fixtures (../shared/gguf) read in
 * place, GGUF as an st_set (slices, preads), the writer round trip, split
 * sets, and hostile headers: every malformed case gives an error naming the
 * file and the key or tensor, and nothing crashes. */
#include "testutil.h"

#include "edge0.h"
#include "io/gguf.h"
#include "quant/ggml.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */

static st_set *open_ok(const char *path) {
    st_set *s = NULL;
    char err[E0_ERR_MAX] = "";
    int rc = st_set_open_gguf(&s, path, err);
    if (rc) fail_msg("%s: %s", path, err);
    return s;
}

static void expect_u32(const gguf_file *g, const char *key, uint32_t want) {
    uint32_t v = 0;
    char err[E0_ERR_MAX] = "";
    if (gguf_get_u32(g, key, &v, err)) fail_msg("%s", err);
    assert_int_equal(v, want);
}

static void expect_str(const gguf_file *g, const char *key, const char *want) {
    const char *v = NULL;
    char err[E0_ERR_MAX] = "";
    if (gguf_get_str(g, key, &v, err)) fail_msg("%s", err);
    assert_string_equal(v, want);
}

static uint64_t arr_len(const gguf_file *g, const char *key, gguf_vtype want_elem) {
    gguf_vtype el;
    uint64_t n = 0;
    char err[E0_ERR_MAX] = "";
    if (gguf_get_arr(g, key, &el, &n, err)) fail_msg("%s", err);
    assert_int_equal(el, want_elem);
    return n;
}

static void expect_tensor(const st_set *s, const char *name, uint32_t gtype, int ndim, uint64_t d0,
                          uint64_t d1, uint64_t d2) {
    const st_tensor *t = st_get(s, name);
    if (!t) fail_msg("tensor %s missing", name);
    assert_int_equal(t->gtype, gtype);
    assert_int_equal(t->dtype, gtype == GGML_F32 ? ST_F32 : ST_GGML);
    assert_int_equal(t->ndim, ndim);
    const uint64_t want[3] = {d0, d1, d2};
    for (int d = 0; d < ndim; d++)
        assert_int_equal(t->shape[d], want[d]);
    /* rows x bytes per row */
    uint64_t rows = st_numel(t) / t->shape[ndim - 1];
    assert_int_equal(t->nbytes, rows * ggml_row_bytes(gtype, t->shape[ndim - 1]));
}

/* A growable byte buffer for hand-made (often broken) GGUF files. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void bb_le(bb *b, uint64_t v, unsigned n) {
    for (unsigned i = 0; i < n; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        bb_put(b, &c, 1);
    }
}
static void bb_str(bb *b, const char *s) {
    bb_le(b, strlen(s), 8);
    bb_put(b, s, strlen(s));
}
static void bb_head(bb *b, uint32_t version, uint64_t n_t, uint64_t n_kv) {
    b->n = 0;
    bb_put(b, "GGUF", 4);
    bb_le(b, version, 4);
    bb_le(b, n_t, 8);
    bb_le(b, n_kv, 8);
}
static void bb_kv_str(bb *b, const char *key, const char *v) {
    bb_str(b, key);
    bb_le(b, GGUF_STRING, 4);
    bb_str(b, v);
}
static void bb_kv_u32(bb *b, const char *key, uint32_t v) {
    bb_str(b, key);
    bb_le(b, GGUF_U32, 4);
    bb_le(b, v, 4);
}
static void bb_tensor(bb *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                      uint64_t off) {
    bb_str(b, name);
    bb_le(b, n_dims, 4);
    for (uint32_t d = 0; d < n_dims; d++)
        bb_le(b, ne[d], 8);
    bb_le(b, type, 4);
    bb_le(b, off, 8);
}
/* Pads to 32 and appends `data` zero bytes. */
static void bb_data(bb *b, size_t data) {
    static const uint8_t z[64];
    while (b->n % 32)
        bb_put(b, z, 1);
    for (size_t i = 0; i < data; i++)
        bb_put(b, z, 1);
}

/* Writes the bytes as DIR/bad.gguf, opens it, expects `code` and a message
 * naming the file and every needle. */
static void expect_bad(const bb *b, int code, const char *n1, const char *n2) {
    char *dir = tu_tmpdir();
    char *p = tu_write(dir, "bad.gguf", b->p, b->n);
    st_set *s = NULL;
    char err[E0_ERR_MAX] = "";
    int rc = st_set_open_gguf(&s, p, err);
    printf("  -> %s\n", err);
    assert_int_equal(rc, code);
    assert_null(s);
    assert_non_null(strstr(err, p));
    if (n1 && !strstr(err, n1)) fail_msg("\"%s\" not in: %s", n1, err);
    if (n2 && !strstr(err, n2)) fail_msg("\"%s\" not in: %s", n2, err);
    free(p);
    tu_rmtree(dir);
    free(dir);
}

/* ---- the llama.cpp fixtures ---------------------------------------------- */

static const struct {
    const char *dir, *arch;
} FAMS[] = {
    {"gguf/qwen3moe", "qwen3moe"},      {"gguf/qwen3next", "qwen3next"},
    {"gguf/qwen35moe", "qwen35moe"},    {"gguf/tiny-qwen35moe", "qwen35moe"},
    {"gguf/tiny-qwen3moe", "qwen3moe"},
};

/* Every *.gguf of every fixture directory: header facts and that every
 * tensor lies inside its file with the bytes its type and shape imply. */
static void test_fixtures_all(void **state) {
    (void)state;
    int files = 0;
    for (size_t f = 0; f < sizeof FAMS / sizeof *FAMS; f++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", tu_shared(FAMS[f].dir));
        DIR *d = opendir(dir);
        if (!d) fail_msg("cannot open %s", dir);
        struct dirent *de;
        while ((de = readdir(d))) {
            size_t l = strlen(de->d_name);
            if (l < 5 || strcmp(de->d_name + l - 5, ".gguf") != 0) continue;
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
            printf("  %s\n", path);
            assert_true(gguf_is_path(path));
            st_set *s = open_ok(path);
            const gguf_file *g = st_gguf(s);
            assert_non_null(g);
            assert_int_equal(gguf_version(g), 3);
            assert_int_equal(gguf_alignment(g), 32);
            assert_int_equal(gguf_data_start(g) % 32, 0);
            expect_str(g, "general.architecture", FAMS[f].arch);
            assert_int_equal(st_count(s), gguf_n_tensors(g));
            assert_true(st_count(s) > 10);
            assert_int_equal(arr_len(g, "tokenizer.ggml.tokens", GGUF_STRING), 1024);
            assert_int_equal(arr_len(g, "tokenizer.ggml.merges", GGUF_STRING), 768);
            gguf_str tok;
            char err[E0_ERR_MAX];
            assert_int_equal(gguf_arr_str(g, "tokenizer.ggml.tokens", 0, &tok, err), 0);
            assert_int_equal(tok.len, 1);
            assert_int_equal(tok.p[0], '!'); /* id 0 of the Qwen3 byte-level BPE */
            char key[128];
            snprintf(key, sizeof key, "%s.expert_count", FAMS[f].arch);
            uint32_t ne = 0;
            assert_int_equal(gguf_get_u32(g, key, &ne, err), 0);
            assert_true(ne >= 2);
            int stacked = 0;
            for (size_t i = 0; i < st_count(s); i++) {
                const st_tensor *t = st_at(s, i);
                const ggml_type_info *ti = ggml_info(t->gtype);
                assert_non_null(ti);
                assert_int_equal(t->off % 32, 0);
                assert_true(t->off + t->nbytes <=
                            (uint64_t)lseek(st_file_fd(s, t->file), 0, SEEK_END));
                uint64_t rows = st_numel(t) / t->shape[t->ndim - 1];
                assert_int_equal(t->nbytes, rows * ggml_row_bytes(t->gtype, t->shape[t->ndim - 1]));
                if (t->ndim == 3 && strstr(t->name, "_exps.")) {
                    assert_int_equal(t->shape[0], ne);
                    stacked++;
                }
            }
            assert_true(stacked > 0);
            st_set_free(s);
            files++;
        }
        closedir(d);
    }
    assert_int_equal(files, 10);
}

static void test_fixture_known(void **state) {
    (void)state;
    st_set *s = open_ok(tu_shared("gguf/qwen35moe/model-Q4_0.gguf"));
    const gguf_file *g = st_gguf(s);
    /* ggml ne [128, 128, 16] */
    expect_tensor(s, "blk.0.ffn_gate_exps.weight", GGML_Q4_0, 3, 16, 128, 128);
    expect_tensor(s, "token_embd.weight", GGML_Q4_0, 2, 1024, 128, 0);
    expect_tensor(s, "output.weight", GGML_Q8_0, 2, 1024, 128, 0);
    expect_u32(g, "qwen35moe.expert_used_count", 4);
    assert_int_equal(arr_len(g, "qwen35moe.rope.dimension_sections", GGUF_I32), 4);
    const int32_t secs[4] = {11, 11, 10, 0};
    char err[E0_ERR_MAX];
    for (int i = 0; i < 4; i++) {
        int32_t v;
        uint32_t u;
        assert_int_equal(gguf_arr_i32(g, "qwen35moe.rope.dimension_sections", (uint64_t)i, &v, err),
                         0);
        assert_int_equal(v, secs[i]);
        assert_int_equal(gguf_arr_u32(g, "qwen35moe.rope.dimension_sections", (uint64_t)i, &u, err),
                         0);
        assert_int_equal(u, (uint32_t)secs[i]);
    }
    assert_int_equal(gguf_arr_i32(g, "qwen35moe.rope.dimension_sections", 4, &(int32_t){0}, err),
                     E0_ERANGE);
    float eps = 0;
    assert_int_equal(gguf_get_f32(g, "qwen35moe.attention.layer_norm_rms_epsilon", &eps, err), 0);
    assert_true(eps > 0 && eps < 1e-4f);
    /* norms stay F32 */
    const st_tensor *n = st_get(s, "output_norm.weight");
    assert_non_null(n);
    assert_int_equal(n->dtype, ST_F32);
    assert_int_equal(n->gtype, GGML_F32);
    assert_int_equal(n->nbytes, 4 * st_numel(n));
    st_set_free(s);

    s = open_ok(tu_shared("gguf/tiny-qwen3moe/model-Q4_K_M.gguf"));
    g = st_gguf(s);
    expect_tensor(s, "blk.0.ffn_down_exps.weight", GGML_Q5_0, 3, 32, 256, 128);
    const st_tensor *o = st_get(s, "output.weight");
    assert_non_null(o);
    assert_int_equal(o->gtype, GGML_Q6_K);
    expect_u32(g, "qwen3moe.expert_used_count", 4);
    expect_u32(g, "qwen3moe.expert_count", 32);
    /* range-checked conversions and type errors name file and key */
    uint64_t u64;
    int64_t i64;
    int32_t i32;
    bool b;
    assert_int_equal(gguf_get_u64(g, "qwen3moe.expert_count", &u64, err), 0);
    assert_int_equal(u64, 32);
    assert_int_equal(gguf_get_i64(g, "qwen3moe.expert_count", &i64, err), 0);
    assert_int_equal(gguf_get_i32(g, "qwen3moe.expert_count", &i32, err), 0);
    assert_int_equal(gguf_get_bool(g, "qwen3moe.expert_count", &b, err), E0_EFORMAT);
    assert_non_null(strstr(err, "qwen3moe.expert_count"));
    assert_non_null(strstr(err, "model-Q4_K_M.gguf"));
    assert_int_equal(gguf_get_u32(g, "no.such.key", &(uint32_t){0}, err), E0_ENOTFOUND);
    assert_non_null(strstr(err, "no.such.key"));
    assert_int_equal(gguf_get_u32(g, "general.architecture", &(uint32_t){0}, err), E0_EFORMAT);
    assert_int_equal(gguf_get_str(g, "tokenizer.ggml.tokens", &(const char *){0}, err), E0_EFORMAT);
    assert_int_equal(gguf_arr_u32(g, "tokenizer.ggml.tokens", 0, &(uint32_t){0}, err), E0_EFORMAT);
    assert_int_equal(gguf_get_u32(g, "tokenizer.ggml.tokens", &(uint32_t){0}, err), E0_EFORMAT);
    assert_true(gguf_has(g, "tokenizer.ggml.merges"));
    assert_int_equal(gguf_type(g, "tokenizer.ggml.merges"), GGUF_ARRAY);
    assert_int_equal(gguf_type(g, "nope"), -1);
    st_set_free(s);
}

/* Expert e of a stacked tensor: st_slice's range is e x (out x row bytes)
 * past the tensor, and mapped, pread and direct-read bytes agree. */
static void test_fixture_slice(void **state) {
    (void)state;
    st_set *s = open_ok(tu_shared("gguf/tiny-qwen35moe/model-Q4_K_M.gguf"));
    char err[E0_ERR_MAX];
    int checked = 0;
    for (size_t i = 0; i < st_count(s); i++) {
        const st_tensor *t = st_at(s, i);
        if (t->ndim != 3) continue;
        const uint64_t per = t->shape[1] * ggml_row_bytes(t->gtype, t->shape[2]);
        for (uint64_t e = 0; e < t->shape[0]; e += 7) {
            uint64_t off, len;
            assert_int_equal(st_slice(t, e, &off, &len), 0);
            assert_int_equal(len, per);
            assert_int_equal(off, t->off + e * per);
            uint8_t *buf = malloc(len);
            assert_non_null(buf);
            assert_int_equal(st_pread(s, t->file, off, len, buf, err), 0);
            assert_memory_equal(buf, t->data + e * per, len);
            /* direct read: dst - off must be 4096-aligned */
            uint8_t *base = aligned_alloc(4096, (len + 3 * 4096) & ~(size_t)4095);
            assert_non_null(base);
            uint8_t *dst = base + off % 4096;
            bool direct;
            assert_int_equal(st_pread_direct(s, t->file, off, len, dst, &direct, err), 0);
            assert_memory_equal(dst, t->data + e * per, len);
            free(base);
            free(buf);
            uint32_t f;
            uint64_t at;
            assert_int_equal(st_locate(s, t->data + e * per, &f, &at), 0);
            assert_int_equal(at, off);
            checked++;
        }
        uint64_t off, len;
        assert_int_equal(st_slice(t, t->shape[0], &off, &len), E0_ERANGE);
    }
    assert_true(checked > 20);
    const st_tensor *n = st_get(s, "output_norm.weight");
    assert_non_null(n);
    uint64_t off, len;
    assert_int_equal(st_slice(n, 1, &off, &len), 0); /* F32: one element */
    assert_int_equal(len, 4);
    st_set_free(s);
}

/* ---- writer round trip and split sets ------------------------------------ */

static const struct {
    const char *name;
    uint32_t type;
    int n_dims;
    uint64_t ne[4];
} TS[] = {
    {"a.f32", GGML_F32, 1, {8}},
    {"blk.0.ffn_up_exps.weight", GGML_Q4_0, 3, {64, 3, 5}},
    {"c.q6k", GGML_Q6_K, 2, {256, 2}},
    {"d.bf16", GGML_BF16, 2, {4, 3}},
    {"e.iq4xs", GGML_IQ4_XS, 4, {256, 1, 2, 3}},
};
#define NTS (sizeof TS / sizeof *TS)

static uint8_t pattern(size_t tensor, uint64_t i) {
    return (uint8_t)(i * 31 + tensor * 7 + (i >> 8));
}

static const char *const STRS[] = {"a", "bc", "", "d\xc3\xa9"};

/* Tensors [first, first + n) of TS into `path`; split keys when count > 0. */
static void write_file(const char *path, uint32_t alignment, int no, int count, size_t first,
                       size_t n) {
    gguf_writer *w;
    char err[E0_ERR_MAX] = "";
    assert_int_equal(gguf_writer_new(&w, alignment, err), 0);
    assert_int_equal(gguf_writer_add_str(w, "general.architecture", "qwen3moe", err), 0);
    if (count) {
        uint16_t sno = (uint16_t)no, sc = (uint16_t)count;
        int32_t total = (int32_t)NTS;
        assert_int_equal(gguf_writer_add_scalar(w, "split.no", GGUF_U16, &sno, err), 0);
        assert_int_equal(gguf_writer_add_scalar(w, "split.count", GGUF_U16, &sc, err), 0);
        assert_int_equal(gguf_writer_add_scalar(w, "split.tensors.count", GGUF_I32, &total, err),
                         0);
    }
    if (no == 0) {
        uint8_t u8 = 200;
        int8_t i8 = -5;
        uint16_t u16 = 65535;
        int16_t i16 = -300;
        int64_t i64 = -(1ll << 40);
        double f64 = 0.125;
        assert_int_equal(gguf_writer_add_scalar(w, "t.u8", GGUF_U8, &u8, err), 0);
        assert_int_equal(gguf_writer_add_scalar(w, "t.i8", GGUF_I8, &i8, err), 0);
        assert_int_equal(gguf_writer_add_scalar(w, "t.u16", GGUF_U16, &u16, err), 0);
        assert_int_equal(gguf_writer_add_scalar(w, "t.i16", GGUF_I16, &i16, err), 0);
        assert_int_equal(gguf_writer_add_u32(w, "t.u32", 4000000000u, err), 0);
        assert_int_equal(gguf_writer_add_i32(w, "t.i32", -7, err), 0);
        assert_int_equal(gguf_writer_add_f32(w, "t.f32", 1.5f, err), 0);
        assert_int_equal(gguf_writer_add_bool(w, "t.bool", true, err), 0);
        assert_int_equal(gguf_writer_add_u64(w, "t.u64", 1ull << 40, err), 0);
        assert_int_equal(gguf_writer_add_scalar(w, "t.i64", GGUF_I64, &i64, err), 0);
        assert_int_equal(gguf_writer_add_scalar(w, "t.f64", GGUF_F64, &f64, err), 0);
        const int32_t secs[4] = {11, 11, 10, 0};
        const float fl[3] = {0.5f, -2.0f, 3.25f};
        assert_int_equal(gguf_writer_add_arr(w, "t.arr_i32", GGUF_I32, secs, 4, err), 0);
        assert_int_equal(gguf_writer_add_arr(w, "t.arr_f32", GGUF_F32, fl, 3, err), 0);
        assert_int_equal(gguf_writer_add_arr_str(w, "t.arr_str", STRS, 4, err), 0);
        assert_int_equal(gguf_writer_add_arr(w, "t.arr_empty", GGUF_U8, NULL, 0, err), 0);
        assert_int_equal(gguf_writer_add_u32(w, "t.u32", 1, err), E0_EINVAL); /* twice */
    }
    for (size_t i = first; i < first + n; i++)
        assert_int_equal(
            gguf_writer_add_tensor(w, TS[i].name, TS[i].type, TS[i].n_dims, TS[i].ne, err), 0);
    assert_int_equal(gguf_writer_open(w, path, err), 0);
    for (size_t i = 0; i < n; i++) {
        const uint64_t off = gguf_writer_tensor_offset(w, i), len = gguf_writer_tensor_bytes(w, i);
        assert_int_equal(off % (alignment ? alignment : 32), 0);
        uint8_t *buf = malloc(len);
        assert_non_null(buf);
        for (uint64_t k = 0; k < len; k++)
            buf[k] = pattern(first + i, k);
        /* in two pieces, as a streaming writer would */
        assert_int_equal(gguf_writer_pwrite(w, off + len / 2, buf + len / 2, len - len / 2, err),
                         0);
        assert_int_equal(gguf_writer_pwrite(w, off, buf, len / 2, err), 0);
        free(buf);
    }
    assert_int_equal(
        gguf_writer_pwrite(w,
                           gguf_writer_tensor_offset(w, n - 1) + gguf_writer_tensor_bytes(w, n - 1),
                           "x", 1, err),
        E0_ERANGE);
    assert_int_equal(gguf_writer_finish(w, err), 0);
    gguf_writer_free(w);
}

static void check_tensors(const st_set *s, size_t first, size_t n) {
    for (size_t i = first; i < first + n; i++) {
        const st_tensor *t = st_get(s, TS[i].name);
        if (!t) fail_msg("tensor %s missing", TS[i].name);
        assert_int_equal(t->gtype, TS[i].type);
        assert_int_equal(t->ndim, TS[i].n_dims);
        for (int d = 0; d < t->ndim; d++)
            assert_int_equal(t->shape[d], TS[i].ne[t->ndim - 1 - d]);
        for (uint64_t k = 0; k < t->nbytes; k++)
            if (t->data[k] != pattern(i, k))
                fail_msg("%s: byte %llu differs", t->name, (unsigned long long)k);
    }
}

static void test_writer_roundtrip(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    for (int pass = 0; pass < 2; pass++) {
        const uint32_t align = pass ? 64 : 0;
        char path[4200];
        snprintf(path, sizeof path, "%s/w%d.gguf", dir, pass);
        write_file(path, align, 0, 0, 0, NTS);
        st_set *s = open_ok(path);
        const gguf_file *g = st_gguf(s);
        assert_int_equal(gguf_alignment(g), pass ? 64 : 32);
        assert_int_equal(st_count(s), NTS);
        check_tensors(s, 0, NTS);
        assert_int_equal(st_get(s, "a.f32")->dtype, ST_F32);
        assert_int_equal(st_get(s, "d.bf16")->dtype, ST_BF16);
        assert_int_equal(st_get(s, "c.q6k")->dtype, ST_GGML);
        /* expert 3 of the stacked Q4_0 tensor: 3 rows of 2 blocks of 18 bytes */
        const st_tensor *x = st_get(s, "blk.0.ffn_up_exps.weight");
        uint64_t off, len;
        assert_int_equal(st_slice(x, 3, &off, &len), 0);
        assert_int_equal(len, 3 * 2 * 18);
        assert_int_equal(off, x->off + 3 * len);
        assert_int_equal(st_slice(st_get(s, "a.f32"), 2, &off, &len), 0);
        assert_int_equal(len, 4);
        char err[E0_ERR_MAX];
        uint32_t u32;
        int32_t i32;
        int64_t i64;
        uint64_t u64;
        float f;
        bool b;
        expect_str(g, "general.architecture", "qwen3moe");
        expect_u32(g, "t.u8", 200);
        expect_u32(g, "t.u16", 65535);
        expect_u32(g, "t.u32", 4000000000u);
        assert_int_equal(gguf_get_i32(g, "t.i8", &i32, err), 0);
        assert_int_equal(i32, -5);
        assert_int_equal(gguf_get_i32(g, "t.i16", &i32, err), 0);
        assert_int_equal(i32, -300);
        assert_int_equal(gguf_get_i32(g, "t.i32", &i32, err), 0);
        assert_int_equal(i32, -7);
        assert_int_equal(gguf_get_u32(g, "t.i32", &u32, err), E0_ERANGE);
        assert_non_null(strstr(err, "t.i32"));
        assert_int_equal(gguf_get_i32(g, "t.u32", &i32, err), E0_ERANGE);
        assert_int_equal(gguf_get_u32(g, "t.u64", &u32, err), E0_ERANGE);
        assert_int_equal(gguf_get_u64(g, "t.u64", &u64, err), 0);
        assert_int_equal(u64, 1ull << 40);
        assert_int_equal(gguf_get_i64(g, "t.i64", &i64, err), 0);
        assert_true(i64 == -(1ll << 40));
        assert_int_equal(gguf_get_u64(g, "t.i64", &u64, err), E0_ERANGE);
        assert_int_equal(gguf_get_f32(g, "t.f32", &f, err), 0);
        assert_true(f == 1.5f);
        assert_int_equal(gguf_get_f32(g, "t.f64", &f, err), 0);
        assert_true(f == 0.125f);
        assert_int_equal(gguf_get_f32(g, "t.u8", &f, err), 0);
        assert_true(f == 200.0f);
        assert_int_equal(gguf_get_u32(g, "t.f32", &u32, err), E0_EFORMAT);
        assert_int_equal(gguf_get_bool(g, "t.bool", &b, err), 0);
        assert_true(b);
        assert_int_equal(arr_len(g, "t.arr_i32", GGUF_I32), 4);
        assert_int_equal(gguf_arr_i32(g, "t.arr_i32", 2, &i32, err), 0);
        assert_int_equal(i32, 10);
        assert_int_equal(arr_len(g, "t.arr_f32", GGUF_F32), 3);
        assert_int_equal(gguf_arr_f32(g, "t.arr_f32", 2, &f, err), 0);
        assert_true(f == 3.25f);
        assert_int_equal(arr_len(g, "t.arr_empty", GGUF_U8), 0);
        assert_int_equal(arr_len(g, "t.arr_str", GGUF_STRING), 4);
        for (uint64_t i = 0; i < 4; i++) {
            gguf_str v;
            assert_int_equal(gguf_arr_str(g, "t.arr_str", i, &v, err), 0);
            assert_int_equal(v.len, strlen(STRS[i]));
            assert_memory_equal(v.p, STRS[i], v.len);
        }
        gguf_str v;
        assert_int_equal(gguf_arr_str(g, "t.arr_str", 4, &v, err), E0_ERANGE);
        assert_int_equal(gguf_n_kv(g), 16 + (pass ? 1 : 0));
        st_set_free(s);
        /* the parser on the file's bytes alone (pure path) */
        char *text = NULL;
        size_t tl = 0;
        FILE *fp = fopen(path, "rb");
        assert_non_null(fp);
        fseek(fp, 0, SEEK_END);
        tl = (size_t)ftell(fp);
        rewind(fp);
        text = malloc(tl);
        assert_int_equal(fread(text, 1, tl, fp), tl);
        fclose(fp);
        gguf_file *pg;
        assert_int_equal(gguf_parse(&pg, (const uint8_t *)text, tl, tl, path, err), 0);
        assert_int_equal(gguf_n_tensors(pg), NTS);
        assert_non_null(gguf_tensor_find(pg, "c.q6k"));
        assert_null(gguf_tensor_find(pg, "nope"));
        gguf_free(pg);
        free(text);
    }
    /* an unfinished writer leaves nothing behind */
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/unfinished.gguf", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    gguf_writer *w;
    char err[E0_ERR_MAX];
    assert_int_equal(gguf_writer_new(&w, 0, err), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "x", GGML_Q4_0, 1, (const uint64_t[]){33}, err),
                     E0_EINVAL);
    assert_non_null(strstr(err, "x"));
    assert_int_equal(gguf_writer_open(w, path, err), 0);
    assert_int_equal(access(tmp, F_OK), 0);
    gguf_writer_free(w);
    assert_int_not_equal(access(tmp, F_OK), 0);
    assert_int_not_equal(access(path, F_OK), 0);
    assert_int_equal(gguf_writer_new(&w, 48, err), E0_EINVAL);
    tu_rmtree(dir);
    free(dir);
}

static void test_split(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char p1[4200], p2[4200], p3[4200];
    snprintf(p1, sizeof p1, "%s/m-00001-of-00002.gguf", dir);
    snprintf(p2, sizeof p2, "%s/m-00002-of-00002.gguf", dir);
    write_file(p1, 0, 0, 2, 0, 2);
    write_file(p2, 0, 1, 2, 2, NTS - 2);
    const char *paths[2] = {p1, p2};
    for (int k = 0; k < 2; k++) { /* either part finds the other */
        st_set *s = open_ok(paths[k]);
        assert_int_equal(st_count(s), NTS);
        check_tensors(s, 0, NTS);
        assert_int_equal(st_get(s, "a.f32")->file, 0);
        assert_int_equal(st_get(s, "c.q6k")->file, 1);
        assert_string_equal(st_file_path(s, 1), p2);
        const gguf_file *g = st_gguf(s);
        expect_u32(g, "t.u32", 4000000000u); /* metadata of the first part */
        st_set_free(s);
    }
    /* a part that claims another number */
    snprintf(p3, sizeof p3, "%s/m-00002-of-00002.gguf.keep", dir);
    assert_int_equal(rename(p2, p3), 0);
    write_file(p2, 0, 0, 2, 2, NTS - 2);
    st_set *s = NULL;
    char err[E0_ERR_MAX] = "";
    assert_int_equal(st_set_open_gguf(&s, p1, err), E0_EFORMAT);
    printf("  -> %s\n", err);
    assert_non_null(strstr(err, p2));
    assert_non_null(strstr(err, "split.no"));
    /* a missing part: the error names it */
    assert_int_equal(unlink(p2), 0);
    assert_int_equal(st_set_open_gguf(&s, p1, err), E0_ENOTFOUND);
    printf("  -> %s\n", err);
    assert_null(s);
    assert_non_null(strstr(err, p2));
    assert_non_null(strstr(err, "missing"));
    /* a lone part whose keys say it belongs to a split set */
    char lone[4200];
    snprintf(lone, sizeof lone, "%s/lone.gguf", dir);
    assert_int_equal(rename(p1, lone), 0);
    assert_int_equal(st_set_open_gguf(&s, lone, err), E0_EFORMAT);
    printf("  -> %s\n", err);
    assert_non_null(strstr(err, lone));
    assert_non_null(strstr(err, "split.count"));
    tu_rmtree(dir);
    free(dir);
}

/* ---- hostile headers ----------------------------------------------------- */

/* Every prefix of a small valid file fails cleanly, in the header (the
 * parser on the bytes alone) and in the data (a file that short). */
static void test_truncated(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/small.gguf", dir);
    write_file(path, 0, 0, 0, 0, 3);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    uint8_t buf[8192];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    assert_true(n > 600 && n < sizeof buf);
    char err[E0_ERR_MAX];
    gguf_file *g;
    assert_int_equal(gguf_parse(&g, buf, n, n, "small.gguf", err), 0);
    const uint64_t data_start = gguf_data_start(g);
    gguf_free(g);
    for (size_t len = 0; len < n; len++) {
        /* a copy of exactly len bytes, so ASan sees any read past it */
        uint8_t *cp = malloc(len ? len : 1);
        memcpy(cp, buf, len);
        err[0] = 0;
        int rc = gguf_parse(&g, cp, len, len, "small.gguf", err);
        if (rc == 0) fail_msg("a %zu-byte prefix of %zu parsed", len, n);
        assert_int_equal(rc, E0_EFORMAT);
        assert_non_null(strstr(err, "small.gguf"));
        if (len >= data_start) assert_non_null(strstr(err, "tensor"));
        /* the header read from a buffer shorter than the file */
        if (len < data_start) { /* fails unless only padding is missing */
            rc = gguf_parse(&g, cp, len, n, "small.gguf", err);
            if (rc == 0) {
                assert_true(len + 32 > data_start);
                gguf_free(g);
            } else {
                assert_int_equal(rc, E0_EFORMAT);
                assert_non_null(strstr(err, "small.gguf"));
            }
        }
        free(cp);
    }
    /* and through files, a few lengths */
    const size_t cuts[] = {0,    3, 4, 10, 23, 24, 100, (size_t)data_start - 1, (size_t)data_start,
                           n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        char *p = tu_write(dir, "cut.gguf", buf, cuts[i]);
        st_set *s = NULL;
        int rc = st_set_open_gguf(&s, p, err);
        assert_true(rc == E0_EFORMAT);
        assert_null(s);
        assert_non_null(strstr(err, p));
        free(p);
    }
    tu_rmtree(dir);
    free(dir);
}

static void test_malformed(void **state) {
    (void)state;
    bb b = {0};
    const uint64_t ne2[2] = {32, 2}, ne5[5] = {32, 1, 1, 1, 1};

    /* the baseline is valid */
    bb_head(&b, 3, 1, 1);
    bb_kv_str(&b, "general.architecture", "x");
    bb_tensor(&b, "w", 2, ne2, GGML_Q8_0, 0);
    bb_data(&b, 68);
    {
        gguf_file *g;
        char err[E0_ERR_MAX];
        assert_int_equal(gguf_parse(&g, b.p, b.n, b.n, "ok", err), 0);
        gguf_free(g);
    }

    printf("bad magic\n");
    bb_head(&b, 3, 0, 0);
    memcpy(b.p, "GGML", 4);
    expect_bad(&b, E0_EFORMAT, "not a GGUF file", NULL);

    printf("version 1\n");
    bb_head(&b, 1, 0, 0);
    expect_bad(&b, E0_EUNSUPPORTED, "version 1", NULL);
    printf("big-endian / unknown version\n");
    bb_head(&b, 0x03000000, 0, 0);
    expect_bad(&b, E0_EUNSUPPORTED, "version", NULL);

    printf("key length past the end\n");
    bb_head(&b, 3, 0, 1);
    bb_le(&b, 1ull << 40, 8);
    bb_put(&b, "general.architecture", 20);
    bb_le(&b, GGUF_U32, 4);
    bb_le(&b, 1, 4);
    expect_bad(&b, E0_EFORMAT, "metadata key #0", "truncated");

    printf("string value length past the end\n");
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "general.name");
    bb_le(&b, GGUF_STRING, 4);
    bb_le(&b, 1000, 8);
    bb_put(&b, "abc", 3);
    expect_bad(&b, E0_EFORMAT, "general.name", "truncated");

    printf("string array element past the end\n");
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "tokenizer.ggml.tokens");
    bb_le(&b, GGUF_ARRAY, 4);
    bb_le(&b, GGUF_STRING, 4);
    bb_le(&b, 2, 8);
    bb_str(&b, "a");
    bb_le(&b, 99, 8);
    bb_put(&b, "bcdefghij", 9);
    expect_bad(&b, E0_EFORMAT, "tokenizer.ggml.tokens", "string 1");

    printf("array too long for the file\n");
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "x.arr");
    bb_le(&b, GGUF_ARRAY, 4);
    bb_le(&b, GGUF_U32, 4);
    bb_le(&b, (1ull << 62) + 1, 8); /* x 4 overflows to 4 */
    bb_le(&b, 0, 8);
    expect_bad(&b, E0_EFORMAT, "x.arr", "array of");

    printf("unknown value type\n");
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "general.odd");
    bb_le(&b, 13, 4);
    bb_le(&b, 0, 8);
    expect_bad(&b, E0_EFORMAT, "general.odd", "unknown value type 13");

    printf("unknown array element type\n");
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "general.odd");
    bb_le(&b, GGUF_ARRAY, 4);
    bb_le(&b, 77, 4);
    bb_le(&b, 0, 8);
    expect_bad(&b, E0_EFORMAT, "general.odd", "element type 77");

    printf("nested array\n");
    bb_head(&b, 3, 0, 1);
    bb_str(&b, "general.nest");
    bb_le(&b, GGUF_ARRAY, 4);
    bb_le(&b, GGUF_ARRAY, 4);
    bb_le(&b, 0, 8);
    expect_bad(&b, E0_EFORMAT, "general.nest", "nested");

    printf("absurd counts\n");
    bb_head(&b, 3, 0, 1ull << 60);
    bb_kv_u32(&b, "a", 1);
    expect_bad(&b, E0_EFORMAT, "metadata entries", NULL);
    bb_head(&b, 3, 1ull << 60, 0);
    bb_tensor(&b, "w", 2, ne2, GGML_Q8_0, 0);
    expect_bad(&b, E0_EFORMAT, "tensor infos", NULL);

    printf("duplicate key\n");
    bb_head(&b, 3, 0, 2);
    bb_kv_u32(&b, "general.k", 1);
    bb_kv_u32(&b, "general.k", 2);
    expect_bad(&b, E0_EFORMAT, "general.k", "twice");

    printf("empty key\n");
    bb_head(&b, 3, 0, 1);
    bb_kv_u32(&b, "", 1);
    expect_bad(&b, E0_EFORMAT, "empty name", NULL);

    printf("alignment not a power of two / not an integer\n");
    bb_head(&b, 3, 0, 1);
    bb_kv_u32(&b, "general.alignment", 48);
    expect_bad(&b, E0_EFORMAT, "general.alignment", "power of two");
    bb_head(&b, 3, 0, 1);
    bb_kv_str(&b, "general.alignment", "32");
    expect_bad(&b, E0_EFORMAT, "general.alignment", NULL);

    printf("unknown ggml type\n");
    bb_head(&b, 3, 1, 0);
    bb_tensor(&b, "blk.0.attn_q.weight", 2, ne2, 4, 0);
    bb_data(&b, 64);
    expect_bad(&b, E0_EFORMAT, "blk.0.attn_q.weight", "ggml type 4");
    bb_head(&b, 3, 1, 0);
    bb_tensor(&b, "blk.0.attn_k.weight", 2, ne2, 1000, 0);
    bb_data(&b, 64);
    expect_bad(&b, E0_EFORMAT, "blk.0.attn_k.weight", "ggml type 1000");

    printf("n_dims > 4\n");
    bb_head(&b, 3, 1, 0);
    bb_tensor(&b, "blk.1.ffn_up_exps.weight", 5, ne5, GGML_F32, 0);
    bb_data(&b, 128);
    expect_bad(&b, E0_EFORMAT, "blk.1.ffn_up_exps.weight", "5 dimensions");

    printf("zero and negative dims, overflow\n");
    bb_head(&b, 3, 1, 0);
    bb_tensor(&b, "z", 2, (const uint64_t[]){32, 0}, GGML_F32, 0);
    bb_data(&b, 128);
    expect_bad(&b, E0_EFORMAT, "tensor z", "dimension 1 is 0");
    bb_head(&b, 3, 1, 0);
    bb_tensor(&b, "neg", 2, (const uint64_t[]){32, (uint64_t)-3}, GGML_F32, 0);
    bb_data(&b, 128);
    expect_bad(&b, E0_EFORMAT, "tensor neg", "-3");
    bb_head(&b, 3, 1, 0);
    bb_tensor(&b, "big", 3, (const uint64_t[]){1ull << 31, 1ull << 31, 1ull << 31}, GGML_F32, 0);
    bb_data(&b, 128);
    expect_bad(&b, E0_EFORMAT, "tensor big", "overflows");
    bb_head(&b, 3, 1, 0); /* element count fits, bytes do not */
    bb_tensor(&b, "big2", 2, (const uint64_t[]){1ull << 31, 1ull << 31}, GGML_F64, 0);
    bb_data(&b, 128);
    expect_bad(&b, E0_EFORMAT, "tensor big2", "overflows");

    printf("ne[0] not a multiple of the block size\n");
    bb_head(&b, 3, 1, 0);
    bb_tensor(&b, "blk.0.ffn_down_exps.weight", 2, (const uint64_t[]){100, 2}, GGML_Q4_K, 0);
    bb_data(&b, 1024);
    expect_bad(&b, E0_EFORMAT, "blk.0.ffn_down_exps.weight", "block size 256");

    printf("offset out of range\n");
    bb_head(&b, 3, 1, 0);
    bb_tensor(&b, "far", 2, ne2, GGML_Q8_0, 1ull << 62);
    bb_data(&b, 68);
    expect_bad(&b, E0_EFORMAT, "tensor far", "past the end");

    printf("misaligned offset\n");
    bb_head(&b, 3, 1, 0);
    bb_tensor(&b, "mis", 2, ne2, GGML_Q8_0, 4);
    bb_data(&b, 128);
    expect_bad(&b, E0_EFORMAT, "tensor mis", "alignment 32");

    printf("data past the end of the file\n");
    bb_head(&b, 3, 1, 0);
    bb_tensor(&b, "short", 2, ne2, GGML_Q8_0, 0);
    bb_data(&b, 67);
    expect_bad(&b, E0_EFORMAT, "tensor short", "past the end");
    bb_head(&b, 3, 1, 0); /* no data section at all */
    bb_tensor(&b, "none", 2, ne2, GGML_Q8_0, 0);
    expect_bad(&b, E0_EFORMAT, "tensor none", "truncated");

    printf("overlapping tensors\n");
    bb_head(&b, 3, 2, 0);
    bb_tensor(&b, "first", 2, ne2, GGML_Q8_0, 0);
    bb_tensor(&b, "second", 2, ne2, GGML_Q8_0, 64);
    bb_data(&b, 160);
    expect_bad(&b, E0_EFORMAT, "first", "second");

    printf("duplicate tensor names\n");
    bb_head(&b, 3, 2, 0);
    bb_tensor(&b, "same", 2, ne2, GGML_Q8_0, 0);
    bb_tensor(&b, "same", 2, ne2, GGML_Q8_0, 96);
    bb_data(&b, 192);
    expect_bad(&b, E0_EFORMAT, "tensor same", "twice");

    printf("tensor name with a NUL\n");
    bb_head(&b, 3, 1, 0);
    bb_le(&b, 3, 8);
    bb_put(&b, "a\0b", 3);
    bb_le(&b, 1, 4);
    bb_le(&b, 32, 8);
    bb_le(&b, GGML_F32, 4);
    bb_le(&b, 0, 8);
    bb_data(&b, 128);
    expect_bad(&b, E0_EFORMAT, "tensor #0", "NUL");

    /* the message names the tensor even when the cursor runs out inside it */
    printf("tensor info truncated\n");
    bb_head(&b, 3, 1, 0);
    bb_str(&b, "blk.3.attn_v.weight");
    bb_le(&b, 2, 4);
    bb_le(&b, 32, 8);
    expect_bad(&b, E0_EFORMAT, "blk.3.attn_v.weight", "truncated");
    free(b.p);
}

static void test_is_path(void **state) {
    (void)state;
    char *dir = tu_tmpdir();
    char *st = tu_write(dir, "a.safetensors", "\x02\0\0\0\0\0\0\0{}", 10);
    char *gg = tu_write(dir, "b.bin", "GGUF\3\0\0\0", 8);
    char *sh = tu_write(dir, "c.gguf", "GGU", 3);
    assert_false(gguf_is_path(st));
    assert_true(gguf_is_path(gg));
    assert_false(gguf_is_path(sh));
    assert_false(gguf_is_path(dir));
    assert_false(gguf_is_path("/nonexistent/x.gguf"));
    /* a safetensors set has no GGUF header; opening a GGUF as safetensors fails cleanly */
    st_set *s;
    char err[E0_ERR_MAX];
    assert_int_equal(st_set_open_file(&s, st, err), 0);
    assert_null(st_gguf(s));
    st_set_free(s);
    assert_int_not_equal(st_set_open_file(&s, tu_shared("gguf/qwen3moe/model-Q8_0.gguf"), err), 0);
    /* a missing file */
    assert_int_equal(st_set_open_gguf(&s, "/nonexistent/x.gguf", err), E0_ENOTFOUND);
    assert_non_null(strstr(err, "/nonexistent/x.gguf"));
    free(st);
    free(gg);
    free(sh);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures_all),  cmocka_unit_test(test_fixture_known),
        cmocka_unit_test(test_fixture_slice), cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_split),         cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_malformed),     cmocka_unit_test(test_is_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
