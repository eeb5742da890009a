/* Tokenizer: the Qwen3 golden set (400 lines) through the library and the
 * CLI, streaming decode, lookups, invalid UTF-8, small synthetic
 * tokenizer.json files for every normalizer / pre-tokenizer / added-token
 * option, and malformed files that must fail with a clear message. */
#include "testutil.h"

#include "edge0.h"
#include "text/tokenizer.h"
#include "util/file.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QWEN3  "tokenizers/qwen3/tokenizer.json"
#define GOLDEN "tokenizers/qwen3/golden.jsonl"

/* ---- Helpers ------------------------------------------------------------ */

static tok_tokenizer *load_qwen(void) {
    static char path[4096];
    snprintf(path, sizeof path, "%s", tu_shared(QWEN3));
    char err[E0_ERR_MAX] = "";
    tok_tokenizer *t = NULL;
    if (e0_tokenizer_load(&t, path, err)) fail_msg("%s", err);
    return t;
}

typedef struct {
    char *text;
    int32_t *ids;
    size_t n_ids;
    char *decoded;
} golden;

static golden *load_golden(size_t *n) {
    char *buf, err[E0_ERR_MAX];
    size_t len;
    if (e0_read_file(tu_shared(GOLDEN), &buf, &len, 1 << 24, err)) fail_msg("%s", err);
    size_t cap = 512, k = 0;
    golden *g = calloc(cap, sizeof *g);
    assert_non_null(g);
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        assert_true(k < cap);
        const cJSON *ids = cJSON_GetObjectItem(j, "ids");
        g[k].text = strdup(cJSON_GetObjectItem(j, "text")->valuestring);
        g[k].decoded = strdup(cJSON_GetObjectItem(j, "decoded")->valuestring);
        g[k].n_ids = (size_t)cJSON_GetArraySize(ids);
        g[k].ids = malloc((g[k].n_ids + 1) * sizeof(int32_t));
        size_t i = 0;
        const cJSON *x;
        cJSON_ArrayForEach(x, ids) g[k].ids[i++] = (int32_t)x->valuedouble;
        cJSON_Delete(j);
        k++;
    }
    free(buf);
    *n = k;
    return g;
}

static void free_golden(golden *g, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(g[i].text);
        free(g[i].ids);
        free(g[i].decoded);
    }
    free(g);
}

static bool ids_equal(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

/* Whether s[0..n) is valid UTF-8 (no overlongs, surrogates, > U+10FFFF). */
static bool valid_utf8(const char *p, size_t n) {
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i], lo = 0x80, hi = 0xBF;
        size_t need;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        } else {
            return false;
        }
        if (i + need >= n || s[i + 1] < lo || s[i + 1] > hi) return false;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        i += need + 1;
    }
    return true;
}

static char *encode_decode(const tok_tokenizer *t, const char *text, unsigned eflags) {
    char err[E0_ERR_MAX] = "", *s;
    tok_ids ids = {0};
    if (e0_tokenizer_encode(t, text, strlen(text), eflags, &ids, err)) fail_msg("%s", err);
    if (e0_tokenizer_decode(t, ids.v, ids.n, 0, &s, NULL, err)) fail_msg("%s", err);
    e0_ids_free(&ids);
    return s;
}

static char *read_all(const char *path) {
    char *buf, err[E0_ERR_MAX];
    size_t len;
    if (e0_read_file(path, &buf, &len, 1 << 26, err)) fail_msg("%s", err);
    return buf;
}

/* ---- Golden set ------------------------------------------------------------ */

static void test_golden_library(void **state) {
    (void)state;
    tok_tokenizer *t = load_qwen();
    size_t n;
    golden *g = load_golden(&n);
    assert_int_equal(n, 400);
    size_t ids_ok = 0, dec_ok = 0, stream_ok = 0;
    char *buf = malloc(tok_stream_max(t));
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++) {
        char err[E0_ERR_MAX] = "", *dec;
        size_t dn;
        tok_ids ids = {0};
        if (e0_tokenizer_encode(t, g[i].text, strlen(g[i].text), 0, &ids, err))
            fail_msg("line %zu: %s", i + 1, err);
        if (ids_equal(ids.v, ids.n, g[i].ids, g[i].n_ids))
            ids_ok++;
        else
            print_message("golden line %zu: ids differ\n", i + 1);
        if (e0_tokenizer_decode(t, g[i].ids, g[i].n_ids, 0, &dec, &dn, err))
            fail_msg("line %zu: %s", i + 1, err);
        if (dn == strlen(g[i].decoded) && !strcmp(dec, g[i].decoded))
            dec_ok++;
        else
            print_message("golden line %zu: decoded text differs\n", i + 1);
        /* streaming: every chunk is whole characters; together they are decode(ids) */
        tok_stream st;
        tok_stream_init(&st, 0);
        char *acc = malloc(dn + 16);
        size_t an = 0, k;
        bool chunks_ok = true;
        for (size_t j = 0; j < g[i].n_ids; j++) {
            if (tok_stream_push(t, &st, g[i].ids[j], buf, tok_stream_max(t), &k, err))
                fail_msg("%s", err);
            chunks_ok &= valid_utf8(buf, k);
            assert_true(an + k <= dn + 16);
            memcpy(acc + an, buf, k);
            an += k;
        }
        an += tok_stream_flush(&st, acc + an);
        if (chunks_ok && an == dn && !memcmp(acc, dec, dn)) stream_ok++;
        free(acc);
        free(dec);
        e0_ids_free(&ids);
    }
    print_message("golden (library): ids %zu/%zu, decoded %zu/%zu, streamed %zu/%zu\n", ids_ok, n,
                  dec_ok, n, stream_ok, n);
    assert_int_equal(ids_ok, 400);
    assert_int_equal(dec_ok, 400);
    assert_int_equal(stream_ok, 400);
    free(buf);
    free_golden(g, n);
    e0_tokenizer_free(t);
}

static void test_golden_cli(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), cmd[16384], out[4200];
    snprintf(out, sizeof out, "%s/out.jsonl", dir);
    char tpath[4096];
    snprintf(tpath, sizeof tpath, "%s", tu_shared(QWEN3));
    snprintf(cmd, sizeof cmd, "%s tokenize --tokenizer '%s' --jsonl '%s' > '%s'", tu_bin(), tpath,
             tu_shared(GOLDEN), out);
    assert_int_equal(tu_run(cmd), 0);
    size_t n;
    golden *g = load_golden(&n);
    char *buf = read_all(out);
    size_t k = 0, ids_ok = 0, dec_ok = 0;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"), k++) {
        assert_true(k < n);
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        const cJSON *ids = cJSON_GetObjectItem(j, "ids"), *dec = cJSON_GetObjectItem(j, "decoded");
        assert_true(cJSON_IsArray(ids) && cJSON_IsString(dec));
        size_t m = (size_t)cJSON_GetArraySize(ids), i = 0;
        bool same = m == g[k].n_ids;
        const cJSON *x;
        cJSON_ArrayForEach(x, ids) same = same && i < m && (int32_t)x->valuedouble == g[k].ids[i++];
        ids_ok += same;
        dec_ok += !strcmp(dec->valuestring, g[k].decoded);
        cJSON_Delete(j);
    }
    print_message("golden (CLI): %zu lines, ids %zu/%zu, decoded %zu/%zu\n", k, ids_ok, n, dec_ok,
                  n);
    assert_int_equal(k, 400);
    assert_int_equal(ids_ok, 400);
    assert_int_equal(dec_ok, 400);
    free(buf);
    free_golden(g, n);
    tu_rmtree(dir);
    free(dir);
}

static void *encode_all(void *arg) {
    const tok_tokenizer *t = ((void **)arg)[0];
    const golden *g = ((void **)arg)[1];
    size_t bad = 0;
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < 400; i++) {
            tok_ids ids = {0};
            if (e0_tokenizer_encode(t, g[i].text, strlen(g[i].text), 0, &ids, NULL) ||
                !ids_equal(ids.v, ids.n, g[i].ids, g[i].n_ids))
                bad++;
            e0_ids_free(&ids);
        }
    return (void *)bad;
}

/* One tokenizer, four threads encoding at once. */
static void test_threads(void **state) {
    (void)state;
    tok_tokenizer *t = load_qwen();
    size_t n;
    golden *g = load_golden(&n);
    void *arg[2] = {t, g};
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, encode_all, arg), 0);
    for (int i = 0; i < 4; i++) {
        void *bad;
        pthread_join(th[i], &bad);
        assert_int_equal((size_t)bad, 0);
    }
    free_golden(g, n);
    e0_tokenizer_free(t);
}

/* ---- Qwen3: lookups, flags, stream, errors ----------------------------------- */

static void test_lookups(void **state) {
    (void)state;
    tok_tokenizer *t = load_qwen();
    assert_int_equal(e0_tokenizer_vocab_size(t), 151669);
    assert_int_equal(tok_token_id(t, "<|endoftext|>"), 151643);
    assert_int_equal(tok_token_id(t, "<|im_start|>"), 151644);
    assert_int_equal(tok_token_id(t, "<|im_end|>"), 151645);
    assert_int_equal(tok_token_id(t, "<think>"), 151667);
    assert_int_equal(tok_token_id(t, "<|no_such_token|>"), -1);
    assert_int_equal(tok_token_id(t, "Hello"), 9707);
    assert_int_equal(tok_token_id(t, "\xC4\xA0the"), 279); /* "Ġthe" */
    assert_true(tok_is_special(t, 151644));
    assert_true(tok_is_added(t, 151657) && !tok_is_special(t, 151657)); /* <tool_call> */
    assert_false(tok_is_special(t, 9707));
    assert_false(tok_is_added(t, 9707));
    assert_false(tok_is_special(t, -1));
    assert_false(tok_is_token(t, 151669));
    assert_true(tok_is_token(t, 0));
    size_t len;
    assert_string_equal(tok_token_str(t, 279, &len), "\xC4\xA0the");
    assert_int_equal(len, 5);
    const uint8_t *b = tok_token_bytes(t, 279, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(b, " the", 4);
    assert_null(tok_token_str(t, 999999, &len));
    assert_null(tok_token_bytes(t, -5, &len));
    e0_tokenizer_free(t);
}

static void test_special_flags(void **state) {
    (void)state;
    tok_tokenizer *t = load_qwen();
    char err[E0_ERR_MAX];
    tok_ids ids = {0};
    const char *s = "<|im_start|>user\nhi<|im_end|><tool_call>";
    assert_int_equal(e0_tokenizer_encode(t, s, strlen(s), 0, &ids, err), 0);
    assert_int_equal(ids.v[0], 151644);
    assert_int_equal(ids.v[ids.n - 2], 151645);
    assert_int_equal(ids.v[ids.n - 1], 151657);
    /* user content: special tokens are text, non-special added tokens still match */
    ids.n = 0;
    assert_int_equal(e0_tokenizer_encode(t, s, strlen(s), E0_ENCODE_SPECIAL_AS_TEXT, &ids, err), 0);
    for (size_t i = 0; i < ids.n; i++)
        assert_false(tok_is_special(t, ids.v[i]));
    assert_int_equal(ids.v[ids.n - 1], 151657);
    char *dec;
    assert_int_equal(e0_tokenizer_decode(t, ids.v, ids.n, 0, &dec, NULL, err), 0);
    assert_string_equal(dec, s);
    free(dec);
    /* decode can drop special tokens */
    ids.n = 0;
    assert_int_equal(e0_tokenizer_encode(t, s, strlen(s), 0, &ids, err), 0);
    assert_int_equal(e0_tokenizer_decode(t, ids.v, ids.n, E0_DECODE_SKIP_SPECIAL, &dec, NULL, err), 0);
    assert_string_equal(dec, "user\nhi<tool_call>");
    free(dec);
    /* an unknown special-looking token is plain text */
    char *r = encode_decode(t, "<|not_a_token|>", 0);
    assert_string_equal(r, "<|not_a_token|>");
    free(r);
    /* empty text: no ids, appending keeps what was there */
    ids.n = 0;
    assert_int_equal(e0_tokenizer_encode(t, "", 0, 0, &ids, err), 0);
    assert_int_equal(ids.n, 0);
    assert_int_equal(e0_tokenizer_encode(t, "a", 1, 0, &ids, err), 0);
    assert_int_equal(e0_tokenizer_encode(t, "a", 1, 0, &ids, err), 0);
    assert_int_equal(ids.n, 2);
    e0_ids_free(&ids);
    e0_tokenizer_free(t);
}

static void test_stream(void **state) {
    (void)state;
    tok_tokenizer *t = load_qwen();
    char err[E0_ERR_MAX] = "", buf[4096];
    assert_true(tok_stream_max(t) <= sizeof buf);
    tok_ids ids = {0};
    const char *s = " 👍🏽 ok";
    assert_int_equal(e0_tokenizer_encode(t, s, strlen(s), 0, &ids, err), 0);
    tok_stream st;
    tok_stream_init(&st, 0);
    size_t n, total = 0;
    char acc[256];
    for (size_t i = 0; i < ids.n; i++) {
        assert_int_equal(tok_stream_push(t, &st, ids.v[i], buf, sizeof buf, &n, err), 0);
        assert_true(valid_utf8(buf, n)); /* never half a character */
        memcpy(acc + total, buf, n);
        total += n;
    }
    total += tok_stream_flush(&st, acc + total);
    assert_int_equal(total, strlen(s));
    assert_memory_equal(acc, s, total);
    /* a dangling lead byte becomes U+FFFD at the flush; a bad id changes nothing */
    int32_t lead = tok_token_id(t, "\xC3\xB0"); /* byte-level spelling of byte 0xF0 */
    assert_true(lead >= 0);
    tok_stream_init(&st, 0);
    assert_int_equal(tok_stream_push(t, &st, lead, buf, sizeof buf, &n, err), 0);
    assert_int_equal(n, 0);
    assert_int_equal(tok_stream_push(t, &st, -3, buf, sizeof buf, &n, err), E0_ERANGE);
    assert_non_null(strstr(err, "-3"));
    assert_int_equal(tok_stream_push(t, &st, 151669, buf, sizeof buf, &n, err), E0_ERANGE);
    assert_int_equal(tok_stream_push(t, &st, 0, buf, 4, &n, err), E0_EINVAL); /* buffer too small */
    assert_int_equal(tok_stream_flush(&st, buf), 3);
    assert_memory_equal(buf, "\xEF\xBF\xBD", 3);
    assert_int_equal(tok_stream_flush(&st, buf), 0);
    /* a lead byte followed by ASCII: U+FFFD then the ASCII, as the batch decoder */
    int32_t two[2] = {lead, tok_token_id(t, "a")};
    char *dec;
    assert_int_equal(e0_tokenizer_decode(t, two, 2, 0, &dec, &n, err), 0);
    assert_string_equal(dec, "\xEF\xBF\xBD"
                             "a");
    free(dec);
    /* decode errors name the id */
    int32_t bad[3] = {9707, 200000, 11};
    assert_int_equal(e0_tokenizer_decode(t, bad, 3, 0, &dec, &n, err), E0_ERANGE);
    assert_null(dec);
    assert_non_null(strstr(err, "200000"));
    e0_ids_free(&ids);
    e0_tokenizer_free(t);
}

/* Invalid UTF-8: valid runs are tokenized as usual, invalid runs go byte by
 * byte through BPE, so the token bytes give back the input exactly. */
static void test_invalid_utf8(void **state) {
    (void)state;
    tok_tokenizer *t = load_qwen();
    static const char *const cases[] = {
        "ab\xff"
        "cd",
        "\xe2\x82",
        "x\xc0\x80y",
        "\xed\xa0\x80 surrogate",
        "\xf4\x90\x80\x80 big",
        "<|im_start|>\xff<|im_end|>",
        "\x80\x80\x80",
        "caf\xc3\xa9 \xe9t\xe9",
        "\xf0\x9f\x91",
        "tail \xf0",
    };
    char err[E0_ERR_MAX];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const char *s = cases[c];
        size_t n = strlen(s);
        tok_ids ids = {0};
        assert_int_equal(e0_tokenizer_encode(t, s, n, 0, &ids, err), 0);
        char back[256];
        size_t k = 0;
        for (size_t i = 0; i < ids.n; i++) {
            size_t len;
            const uint8_t *b = tok_token_bytes(t, ids.v[i], &len);
            assert_non_null(b);
            assert_true(k + len < sizeof back);
            memcpy(back + k, b, len);
            k += len;
        }
        assert_int_equal(k, n);
        assert_memory_equal(back, s, n);
        char *dec;
        size_t dn;
        assert_int_equal(e0_tokenizer_decode(t, ids.v, ids.n, 0, &dec, &dn, err), 0);
        assert_true(valid_utf8(dec, dn));
        e0_ids_free(&ids);
        free(dec);
    }
    char *dec = encode_decode(t,
                              "ab\xff"
                              "cd\xe2\x82",
                              0);
    assert_string_equal(dec, "ab\xEF\xBF\xBD"
                             "cd\xEF\xBF\xBD");
    free(dec);
    /* NUL bytes are valid text */
    tok_ids ids = {0};
    assert_int_equal(e0_tokenizer_encode(t, "a\0b", 3, 0, &ids, err), 0);
    assert_true(ids.n >= 1);
    e0_ids_free(&ids);
    e0_tokenizer_free(t);
}

/* ---- Synthetic tokenizers --------------------------------------------------- */

/* Appends the byte-level spelling of byte b to `o` as a JSON string body. */
static void json_byte(char *o, unsigned b) {
    unsigned cp = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE) ? b
                  : b <= 0x20                                                         ? 256 + b
                  : b <= 0xA0 ? 256 + 33 + (b - 0x7F)
                              : 256 + 67;
    size_t k = strlen(o);
    if (cp == '"' || cp == '\\') o[k++] = '\\';
    if (cp < 0x80) {
        o[k++] = (char)cp;
    } else {
        o[k++] = (char)(0xC0 | cp >> 6);
        o[k++] = (char)(0x80 | (cp & 0x3F));
    }
    o[k] = 0;
}

typedef struct {
    const char *vocab;  /* extra "tok": id entries (ids from 256), or NULL */
    const char *merges; /* JSON array body, or NULL */
    const char *added;  /* added_tokens array body, or NULL */
    const char *norm;   /* normalizer JSON, or NULL (null) */
    const char *pre;    /* pre_tokenizer JSON, or NULL: ByteLevel without prefix space */
    const char *model;  /* extra model fields (",\"ignore_merges\": true"), or NULL */
    const char *skip;   /* bytes left out of the byte vocabulary, or NULL */
} synth;

static char *synth_json(const synth *s) {
    const char *parts[] = {s->vocab, s->merges, s->added, s->norm, s->pre, s->model};
    size_t cap = 16384;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        cap += parts[i] ? strlen(parts[i]) : 0;
    char *j = calloc(cap, 1);
    assert_non_null(j);
    strcat(j, "{\"version\": \"1.0\", \"added_tokens\": [");
    if (s->added) strcat(j, s->added);
    strcat(j, "], \"normalizer\": ");
    strcat(j, s->norm ? s->norm : "null");
    strcat(j, ", \"pre_tokenizer\": ");
    strcat(j, s->pre
                  ? s->pre
                  : "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}");
    strcat(j, ", \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\"");
    if (s->model) strcat(j, s->model);
    strcat(j, ", \"vocab\": {");
    bool first = true;
    for (unsigned b = 0; b < 256; b++) {
        if (s->skip && b && strchr(s->skip, (int)b)) continue;
        if (!first) strcat(j, ", ");
        first = false;
        strcat(j, "\"");
        json_byte(j, b);
        snprintf(j + strlen(j), 16, "\": %u", b);
    }
    if (s->vocab) {
        strcat(j, ", ");
        strcat(j, s->vocab);
    }
    strcat(j, "}, \"merges\": [");
    if (s->merges) strcat(j, s->merges);
    strcat(j, "]}}");
    assert_true(strlen(j) < cap);
    return j;
}

static tok_tokenizer *synth_load(const synth *s) {
    char *j = synth_json(s), err[E0_ERR_MAX] = "";
    tok_tokenizer *t = NULL;
    int rc = tok_load_json(&t, j, strlen(j), "synth.json", err);
    if (rc) fail_msg("synthetic tokenizer: %s\n%s", err, j);
    free(j);
    return t;
}

/* ids of `text` as a comma-separated string */
static const char *ids_of(const tok_tokenizer *t, const char *text) {
    static char out[1024];
    char err[E0_ERR_MAX] = "";
    tok_ids ids = {0};
    if (e0_tokenizer_encode(t, text, strlen(text), 0, &ids, err)) fail_msg("%s", err);
    out[0] = 0;
    for (size_t i = 0; i < ids.n; i++)
        snprintf(out + strlen(out), sizeof out - strlen(out), i ? ",%d" : "%d", ids.v[i]);
    e0_ids_free(&ids);
    return out;
}

/* The pieces the pre-tokenizer makes, shown by ByteLevel's prefix space. */
static char *pieces(const char *pre, const char *text) {
    char p[1024];
    snprintf(p, sizeof p,
             "{\"type\": \"Sequence\", \"pretokenizers\": [%s, {\"type\": \"ByteLevel\", "
             "\"add_prefix_space\": true, \"use_regex\": false}]}",
             pre);
    synth s = {.pre = p};
    tok_tokenizer *t = synth_load(&s);
    char *r = encode_decode(t, text, 0);
    e0_tokenizer_free(t);
    return r;
}

static void test_merges(void **state) {
    (void)state;
    /* ranks decide: (b c) before (a b) gives a|bc; the other order ab|c */
    synth s = {.vocab = "\"ab\": 256, \"bc\": 257, \"abc\": 258", .merges = "\"b c\", \"a b\""};
    tok_tokenizer *t = synth_load(&s);
    assert_string_equal(ids_of(t, "abc"), "97,257");
    e0_tokenizer_free(t);
    s.merges = "\"a b\", \"b c\"";
    t = synth_load(&s);
    assert_string_equal(ids_of(t, "abc"), "256,99");
    e0_tokenizer_free(t);
    /* pairs and strings are the same merges */
    s.merges = "[\"a\", \"b\"], [\"ab\", \"c\"]";
    t = synth_load(&s);
    assert_string_equal(ids_of(t, "abcab"), "258,256");
    e0_tokenizer_free(t);
    s.merges = "\"a b\", \"ab c\"";
    t = synth_load(&s);
    assert_string_equal(ids_of(t, "abcab"), "258,256");
    /* leftmost on equal rank: aaa -> aa a */
    e0_tokenizer_free(t);
    s = (synth){.vocab = "\"aa\": 256", .merges = "\"a a\""};
    t = synth_load(&s);
    assert_string_equal(ids_of(t, "aaa"), "256,97");
    assert_string_equal(ids_of(t, "aaaa"), "256,256");
    e0_tokenizer_free(t);
    /* ignore_merges: a whole piece in the vocabulary wins */
    s = (synth){.vocab = "\"ab\": 256, \"abc\": 257", .merges = "\"a b\""};
    t = synth_load(&s);
    assert_string_equal(ids_of(t, "abc"), "256,99");
    e0_tokenizer_free(t);
    s.model = ", \"ignore_merges\": true";
    t = synth_load(&s);
    assert_string_equal(ids_of(t, "abc"), "257");
    e0_tokenizer_free(t);
    /* a byte with no token: unk (fused or not), or dropped without unk_token */
    s = (synth){.vocab = "\"<unk>\": 256", .skip = "z"};
    t = synth_load(&s);
    assert_string_equal(ids_of(t, "azzb"), "97,98");
    e0_tokenizer_free(t);
    s.model = ", \"unk_token\": \"<unk>\"";
    t = synth_load(&s);
    assert_string_equal(ids_of(t, "azzb"), "97,256,256,98");
    e0_tokenizer_free(t);
    s.model = ", \"unk_token\": \"<unk>\", \"fuse_unk\": true";
    t = synth_load(&s);
    assert_string_equal(ids_of(t, "azzb"), "97,256,98");
    e0_tokenizer_free(t);
    s.model = ", \"unk_token\": \"<nope>\"";
    t = synth_load(&s);
    char err[E0_ERR_MAX];
    tok_ids ids = {0};
    assert_int_equal(e0_tokenizer_encode(t, "az", 2, 0, &ids, err), E0_EFORMAT);
    assert_non_null(strstr(err, "unk_token"));
    assert_int_equal(ids.n, 0);
    e0_ids_free(&ids);
    e0_tokenizer_free(t);
}

static void test_normalizers(void **state) {
    (void)state;
    static const struct {
        const char *norm, *in, *out;
    } C[] = {
        {"{\"type\": \"NFC\"}", "e\xCC\x81 A\xCC\x8A", "\xC3\xA9 \xC3\x85"},
        {"{\"type\": \"NFD\"}", "\xC3\xA9", "e\xCC\x81"},
        {"{\"type\": \"NFKC\"}", "\xEF\xBC\xA1\xE2\x91\xA0 \xEF\xAC\x81", "A1 fi"}, /* Ａ① ﬁ */
        {"{\"type\": \"NFKD\"}", "\xC3\xA9\xC2\xB2",
         "e\xCC\x81"
         "2"},
        {"{\"type\": \"Lowercase\"}", "ÀB \xCE\xA3\xCE\x91\xCE\xA3 \xC4\xB0", "àb σας i\xCC\x87"},
        {"{\"type\": \"Replace\", \"pattern\": {\"String\": \"ab\"}, \"content\": \"X\"}", "abcab",
         "XcX"},
        {"{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" {2,}\"}, \"content\": \" \"}",
         "a   b  c", "a b c"},
        {"{\"type\": \"Prepend\", \"prepend\": \"\xE2\x96\x81\"}", "hi", "\xE2\x96\x81hi"},
        {"{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": false}", " \xE3\x80\x80 x ",
         "x "},
        {"{\"type\": \"StripAccents\"}", "e\xCC\x81", "e"},
        {"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, {\"type\": "
         "\"Lowercase\"}, "
         "{\"type\": \"Replace\", \"pattern\": {\"String\": \"x\"}, \"content\": \"y\"}]}",
         "\xEF\xBC\xA1"
         "BX",
         "aby"},
        /* U+11A7 after an LV syllable stays (utf8proc 2.8 alone drops it) */
        {"{\"type\": \"NFC\"}", "\xEA\xB0\x80\xE1\x86\xA7 \xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA7",
         "\xEA\xB0\x80\xE1\x86\xA7 \xEA\xB0\x80\xE1\x86\xA7"},
        /* NFC spans: composed and decomposed text mixed with inert text */
        {"{\"type\": \"NFC\"}", "日本 e\xCC\x81t\xC3\xA9 \xE1\x84\x80\xE1\x85\xA1 ok",
         "日本 \xC3\xA9t\xC3\xA9 \xEA\xB0\x80 ok"},
    };
    /* lowercase that lengthens the text (U+0130 -> i + U+0307), then ASCII */
    char in[65], want[128];
    size_t k = 0;
    for (int i = 0; i < 10; i++)
        k += (size_t)snprintf(in + k, sizeof in - k, "\xC4\xB0");
    memset(in + k, 'A', 64 - k), in[64] = 0;
    k = 0;
    for (int i = 0; i < 10; i++)
        k += (size_t)snprintf(want + k, sizeof want - k, "i\xCC\x87");
    memset(want + k, 'a', 44), want[k + 44] = 0;
    synth lower = {.norm = "{\"type\": \"Lowercase\"}"};
    tok_tokenizer *lt = synth_load(&lower);
    char *lr = encode_decode(lt, in, 0);
    assert_string_equal(lr, want);
    free(lr);
    e0_tokenizer_free(lt);
    for (size_t i = 0; i < sizeof C / sizeof *C; i++) {
        synth s = {.norm = C[i].norm};
        tok_tokenizer *t = synth_load(&s);
        char *r = encode_decode(t, C[i].in, 0);
        if (strcmp(r, C[i].out))
            fail_msg("normalizer %s: \"%s\" -> \"%s\", want \"%s\"", C[i].norm, C[i].in, r,
                     C[i].out);
        free(r);
        e0_tokenizer_free(t);
    }
}

static void test_pretokenizers(void **state) {
    (void)state;
    static const struct {
        const char *pre, *in, *out;
    } C[] = {
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Removed\"}",
         "a-b--c", " a b c"},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Isolated\"}",
         "a-b--c", " a - b - - c"},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": "
         "\"MergedWithPrevious\"}",
         "a-b--c", " a- b- - c"},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": "
         "\"MergedWithNext\"}",
         "a-b--c", " a -b - -c"},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Contiguous\"}",
         "a-b--c", " a - b -- c"},
        {"{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"Removed\", "
         "\"invert\": true}",
         "a-b--c", " - - -"},
        {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"behavior\": \"Removed\"}",
         "a \xC2\x85 b\xE3\x80\x80"
         "c",
         " a b c"},
        {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\w+\"}, \"behavior\": \"Isolated\"}",
         "ab,c\xCC\x81"
         "d",
         " ab , c\xCC\x81"
         "d"},
        {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"[\\\\u0041-\\\\u0043]+\"}, "
         "\"behavior\": \"Isolated\"}",
         "xABCy", " x ABC y"},
        {"{\"type\": \"Split\", \"pattern\": {\"Regex\": \"x*\"}, \"behavior\": \"Isolated\"}",
         "ab", " a b"},
        {"{\"type\": \"Digits\", \"individual_digits\": true}", "a123b", " a 1 2 3 b"},
        {"{\"type\": \"Digits\", \"individual_digits\": false}", "a123b4", " a 123 b 4"},
        {"{\"type\": \"Whitespace\"}", "hi, you!", " hi , you !"},
        {"{\"type\": \"WhitespaceSplit\"}", "hi,  you!", " hi, you!"},
        {"{\"type\": \"Punctuation\"}", "a,b", " a , b"},
        {"{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"WhitespaceSplit\"}, {\"type\": "
         "\"Digits\", \"individual_digits\": true}]}",
         "ab12 c", " ab 1 2 c"},
    };
    for (size_t i = 0; i < sizeof C / sizeof *C; i++) {
        char *r = pieces(C[i].pre, C[i].in);
        if (strcmp(r, C[i].out))
            fail_msg("pre-tokenizer %s: \"%s\" -> \"%s\", want \"%s\"", C[i].pre, C[i].in, r,
                     C[i].out);
        free(r);
    }
    /* ByteLevel with the GPT-2 regex and a prefix space */
    synth s = {.pre = "{\"type\": \"ByteLevel\", \"add_prefix_space\": true}"};
    tok_tokenizer *t = synth_load(&s);
    char *r = encode_decode(t, "Hi there", 0);
    assert_string_equal(r, " Hi there");
    free(r);
    e0_tokenizer_free(t);
}

static void test_added_tokens(void **state) {
    (void)state;
    synth s = {
        .vocab =
            "\"<m>\": 256, \"hi\": 257, \"<b>\": 258, \"<bb>\": 259, \"yes\": 260, \"<s>\": 261",
        .added = "{\"id\": 256, \"content\": \"<m>\", \"lstrip\": true, \"rstrip\": true, "
                 "\"special\": true},"
                 "{\"id\": 257, \"content\": \"hi\", \"single_word\": true, \"special\": false},"
                 "{\"id\": 258, \"content\": \"<b>\", \"special\": true},"
                 "{\"id\": 259, \"content\": \"<bb>\", \"special\": true},"
                 "{\"id\": 260, \"content\": \"yes\", \"normalized\": true},"
                 "{\"id\": 261, \"content\": \"<s>\", \"special\": true, \"normalized\": false}",
        .norm = "{\"type\": \"Lowercase\"}",
    };
    tok_tokenizer *t = synth_load(&s);
    assert_string_equal(ids_of(t, "a  <m>  b"), "97,256,98"); /* whitespace around <m> is eaten */
    assert_string_equal(ids_of(t, "hi there"), "257,32,116,104,101,114,101");
    assert_string_equal(ids_of(t, "his"), "104,105,115"); /* not a single word */
    assert_string_equal(ids_of(t, "<bb><b>"), "259,258"); /* longest first */
    assert_string_equal(ids_of(t, "YES"), "260");         /* matched after normalizing */
    assert_string_equal(ids_of(t, "<S>"), "60,115,62");   /* raw match only, then lowercased */
    assert_string_equal(ids_of(t, "<s>"), "261");
    assert_true(tok_is_special(t, 256) && !tok_is_special(t, 257));
    assert_int_equal(tok_token_id(t, "<bb>"), 259);
    char err[E0_ERR_MAX];
    tok_ids ids = {0};
    assert_int_equal(e0_tokenizer_encode(t, "<b>x", 4, E0_ENCODE_SPECIAL_AS_TEXT, &ids, err), 0);
    assert_int_equal(ids.n, 4);
    e0_ids_free(&ids);
    e0_tokenizer_free(t);
}

/* Vocabulary strings outside the byte-level alphabet decode to themselves
 * (the library's ByteLevel decoder keeps such a token as it is); many of
 * them make the string arena grow while they are copied. */
static void test_raw_vocab_strings(void **state) {
    (void)state;
    size_t cap = 1 << 16, k = 0;
    char *v = malloc(cap);
    assert_non_null(v);
    for (int i = 0; i < 2000; i++)
        k += (size_t)snprintf(v + k, cap - k, "%s\"\xE6\x97\xA5 %d\": %d", i ? ", " : "", i,
                              256 + i);
    synth s = {.vocab = v};
    tok_tokenizer *t = synth_load(&s);
    for (int i = 0; i < 2000; i += 111) {
        char want[32];
        size_t len;
        snprintf(want, sizeof want, "\xE6\x97\xA5 %d", i);
        const uint8_t *b = tok_token_bytes(t, 256 + i, &len);
        assert_int_equal(len, strlen(want));
        assert_memory_equal(b, want, len);
        assert_int_equal(tok_token_id(t, want), 256 + i);
    }
    e0_tokenizer_free(t);
    free(v);
}

/* ---- Malformed files ----------------------------------------------------------- */

static void test_malformed(void **state) {
    (void)state;
    static const char *const PRE = "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}";
    static const char *const VOC = "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}";
    char buf[4][1024];
    snprintf(buf[0], sizeof buf[0], "{%s, \"model\": {%s, \"merges\": [\"a b c\"]}}", PRE, VOC);
    snprintf(buf[1], sizeof buf[1], "{%s, \"model\": {%s, \"merges\": [\"a x\"]}}", PRE, VOC);
    snprintf(buf[2], sizeof buf[2], "{%s, \"model\": {%s, \"merges\": [[\"a\"]]}}", PRE, VOC);
    snprintf(buf[3], sizeof buf[3],
             "{%s, \"model\": {%s}, \"added_tokens\": [{\"id\": 5, \"content\": \"\\u00ff\xff\"}]}",
             PRE, VOC);
    const struct {
        const char *json;
        int code;
        const char *msg;
    } C[] = {
        {"", E0_EFORMAT, "not valid JSON"},
        {"{\"model\": ", E0_EFORMAT, "not valid JSON (line 1"},
        {"[1, 2]", E0_EFORMAT, "top level"},
        {"{}", E0_EFORMAT, "model is missing"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", E0_EUNSUPPORTED, "model.type"},
        {"{\"model\": {\"type\": \"BPE\"}}", E0_EFORMAT, "model.vocab"},
        {"{\"model\": {\"vocab\": {\"a\": -1}}}", E0_EFORMAT, "model.vocab[\"a\"]"},
        {"{\"model\": {\"vocab\": {\"a\": 1.5}}}", E0_EFORMAT, "integer"},
        {"{\"model\": {\"vocab\": {\"a\": \"0\"}}}", E0_EFORMAT, "integer"},
        {"{\"model\": {\"vocab\": {\"a\": 1e12}}}", E0_EFORMAT, "integer"},
        {"{\"model\": {\"vocab\": {}}}", E0_EFORMAT, "empty"},
        {"{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": {}}}", E0_EFORMAT, "model.merges"},
        {buf[0], E0_EFORMAT, "model.merges[0]: \"a b c\" is not two tokens"},
        {buf[1], E0_EFORMAT, "model.merges[0]: \"x\" is not in model.vocab"},
        {buf[2], E0_EFORMAT, "model.merges[0] must be"},
        {buf[3], E0_EFORMAT, "added_tokens[0].content is not valid UTF-8"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"added_tokens\": {}}", E0_EFORMAT,
         "added_tokens must be an array"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"added_tokens\": [{\"content\": \"x\"}]}",
         E0_EFORMAT, "added_tokens[0].id"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"added_tokens\": [{\"id\": 3}]}", E0_EFORMAT,
         "added_tokens[0].content is missing"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"added_tokens\": [{\"id\": 3, \"content\": \"\"}]}",
         E0_EFORMAT, "content is empty"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"added_tokens\": [{\"id\": 3, \"content\": \"x\", "
         "\"special\": 1}]}",
         E0_EFORMAT, "added_tokens[0].special"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}}", E0_EUNSUPPORTED, "no ByteLevel"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"normalizer\": {\"type\": \"Precompiled\"}, "
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         E0_EUNSUPPORTED, "normalizer type \"Precompiled\""},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"normalizer\": {\"kind\": \"NFC\"}}", E0_EFORMAT,
         "normalizer.type is missing"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"normalizer\": {\"type\": \"Sequence\", "
         "\"normalizers\": [{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(\"}, \"content\": "
         "\"\"}]}}",
         E0_EFORMAT, "normalizer.normalizers[0].pattern: regex \"(\" does not compile"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"normalizer\": {\"type\": \"Replace\", "
         "\"pattern\": {\"Regex\": \"a\"}}}",
         E0_EFORMAT, "normalizer.content is missing"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"normalizer\": {\"type\": \"Replace\", "
         "\"pattern\": \"a\", \"content\": \"\"}}",
         E0_EFORMAT, "normalizer.pattern must be"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Split\", "
         "\"pattern\": {\"Regex\": \"[a\"}}}",
         E0_EFORMAT, "pre_tokenizer.pattern: regex"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Split\", "
         "\"pattern\": {\"String\": \"a\"}, \"behavior\": \"Sideways\"}}",
         E0_EFORMAT, "pre_tokenizer.behavior \"Sideways\""},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Sequence\", "
         "\"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": \"Digits\"}]}}",
         E0_EUNSUPPORTED, "pre_tokenizer.pretokenizers[1]: a pre-tokenizer after ByteLevel"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Metaspace\"}}",
         E0_EUNSUPPORTED, "pre-tokenizer type \"Metaspace\""},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Sequence\"}}",
         E0_EFORMAT, "pre_tokenizer.pretokenizers must be an array"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
         "\"use_regex\": \"yes\"}}",
         E0_EFORMAT, "pre_tokenizer.use_regex"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, "
         "\"decoder\": {\"type\": \"WordPiece\"}}",
         E0_EUNSUPPORTED, "decoder type \"WordPiece\""},
        {"{\"model\": {\"vocab\": {\"a\": 0}, \"continuing_subword_prefix\": \"##\"}, "
         "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}",
         E0_EUNSUPPORTED, "continuing_subword_prefix"},
        {"{\"model\": {\"vocab\": {\"a\": 0}}, \"pre_tokenizer\": {\"type\": \"Split\", "
         "\"pattern\": {\"Regex\": \"\\\\C\"}}}",
         E0_EFORMAT, "does not compile"},
    };
    char *dir = tu_tmpdir();
    for (size_t i = 0; i < sizeof C / sizeof *C; i++) {
        char name[32], err[E0_ERR_MAX] = "";
        snprintf(name, sizeof name, "bad%02zu.json", i);
        char *path = tu_write(dir, name, C[i].json, strlen(C[i].json));
        tok_tokenizer *t = (tok_tokenizer *)1;
        int rc = e0_tokenizer_load(&t, path, err);
        if (rc != C[i].code || !strstr(err, C[i].msg) || !strstr(err, name) || t)
            fail_msg("case %zu (%s): rc %d, message \"%s\"; want rc %d and \"%s\"", i, C[i].json,
                     rc, err, C[i].code, C[i].msg);
        free(path);
    }
    /* deep nesting stops in the JSON parser, not on the stack */
    size_t deep = 5000;
    char *d = malloc(2 * deep + 1);
    memset(d, '[', deep);
    memset(d + deep, ']', deep);
    d[2 * deep] = 0;
    char err[E0_ERR_MAX];
    tok_tokenizer *t;
    assert_int_equal(tok_load_json(&t, d, strlen(d), "deep.json", err), E0_EFORMAT);
    free(d);
    assert_int_equal(e0_tokenizer_load(&t, "/nonexistent/tokenizer.json", err), E0_ENOTFOUND);
    assert_non_null(strstr(err, "/nonexistent/tokenizer.json"));
    tu_rmtree(dir);
    free(dir);
}

/* ---- CLI --------------------------------------------------------------------- */

static void test_cli(void **state) {
    (void)state;
    char *dir = tu_tmpdir(), cmd[16384], out[4200], tpath[4096];
    snprintf(out, sizeof out, "%s/out.txt", dir);
    snprintf(tpath, sizeof tpath, "%s", tu_shared(QWEN3));
    snprintf(cmd, sizeof cmd, "%s tokenize --tokenizer '%s' --text 'Hello, World! ' > '%s'",
             tu_bin(), tpath, out);
    assert_int_equal(tu_run(cmd), 0);
    char *r = read_all(out);
    assert_string_equal(r, "[9707, 11, 4337, 0, 220]\n");
    free(r);
    snprintf(cmd, sizeof cmd, "%s tokenize --tokenizer '%s' --decode 9707,11,4337 > '%s'", tu_bin(),
             tpath, out);
    assert_int_equal(tu_run(cmd), 0);
    r = read_all(out);
    assert_string_equal(r, "Hello, World\n");
    free(r);
    /* MODEL directory with its tokenizer.json */
    synth s = {.vocab = "\"hi\": 256", .merges = "\"h i\""};
    char *j = synth_json(&s);
    free(tu_write(dir, "tokenizer.json", j, strlen(j)));
    free(j);
    snprintf(cmd, sizeof cmd, "%s tokenize '%s' --text hi > '%s'", tu_bin(), dir, out);
    assert_int_equal(tu_run(cmd), 0);
    r = read_all(out);
    assert_string_equal(r, "[256]\n");
    free(r);
    /* jsonl: per line ids and decoded text; a bad line is an error naming it */
    const char *jl = "{\"text\": \"hi\\n\\\"q\\\"\"}\n\n{\"text\": \"\\u00e9\"}\n";
    char *in = tu_write(dir, "in.jsonl", jl, strlen(jl));
    snprintf(cmd, sizeof cmd, "%s tokenize '%s' --jsonl '%s' > '%s'", tu_bin(), dir, in, out);
    assert_int_equal(tu_run(cmd), 0);
    r = read_all(out);
    assert_string_equal(r, "{\"ids\": [256, 10, 34, 113, 34], \"decoded\": \"hi\\n\\\"q\\\"\"}\n"
                           "{\"ids\": [195, 169], \"decoded\": \"\xC3\xA9\"}\n");
    free(r);
    free(in);
    const char *nul = "{\"text\": \"a\\u0000b\"}\n";
    in = tu_write(dir, "nul.jsonl", nul, strlen(nul));
    snprintf(cmd, sizeof cmd, "%s tokenize '%s' --jsonl '%s' > '%s' 2>&1", tu_bin(), dir, in, out);
    assert_int_equal(tu_run(cmd), 1); /* not silently cut at the NUL */
    r = read_all(out);
    assert_non_null(strstr(r, "nul.jsonl:1: \\u0000"));
    free(r);
    free(in);
    in = tu_write(dir, "bad.jsonl", "{\"text\": 1}\n", 12);
    snprintf(cmd, sizeof cmd, "%s tokenize '%s' --jsonl '%s' > '%s' 2>&1", tu_bin(), dir, in, out);
    assert_int_equal(tu_run(cmd), 1);
    r = read_all(out);
    assert_non_null(strstr(r, "bad.jsonl:1"));
    free(r);
    free(in);
    /* usage errors, help, malformed tokenizer */
    snprintf(cmd, sizeof cmd, "%s tokenize --help > '%s'", tu_bin(), out);
    assert_int_equal(tu_run(cmd), 0);
    r = read_all(out);
    assert_non_null(strstr(r, "usage: edge0 tokenize"));
    free(r);
    snprintf(cmd, sizeof cmd, "%s tokenize --text x 2>/dev/null", tu_bin());
    assert_int_equal(tu_run(cmd), 2);
    snprintf(cmd, sizeof cmd, "%s tokenize '%s' --bogus 2>/dev/null", tu_bin(), dir);
    assert_int_equal(tu_run(cmd), 2);
    char *bad = tu_write(dir, "broken.json", "{\"model\": 3}", 12);
    snprintf(cmd, sizeof cmd, "%s tokenize --tokenizer '%s' --text x > '%s' 2>&1", tu_bin(), bad,
             out);
    assert_int_equal(tu_run(cmd), 1);
    r = read_all(out);
    assert_non_null(strstr(r, "broken.json: model is missing or not an object"));
    free(r);
    free(bad);
    tu_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_library), cmocka_unit_test(test_golden_cli),
        cmocka_unit_test(test_threads),        cmocka_unit_test(test_lookups),
        cmocka_unit_test(test_special_flags),  cmocka_unit_test(test_stream),
        cmocka_unit_test(test_invalid_utf8),   cmocka_unit_test(test_merges),
        cmocka_unit_test(test_normalizers),    cmocka_unit_test(test_pretokenizers),
        cmocka_unit_test(test_added_tokens),   cmocka_unit_test(test_raw_vocab_strings),
        cmocka_unit_test(test_malformed),      cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
