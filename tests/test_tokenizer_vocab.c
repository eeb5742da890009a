/* Tokenizer from GGUF metadata (tok_load_vocab): the Qwen3 tokenizer.json
 * turned into the arrays llama.cpp's converter writes, then the golden set
 * and the chat-template goldens through it, the same tables as
 * tok_load_json, the other pre-tokenizer names, and malformed sources that
 * must fail with a clear message. */
#include "testutil.h"

#include "edge0.h"
#include "text/tokenizer.h"
#include "util/file.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QWEN3         "tokenizers/qwen3/tokenizer.json"
#define GOLDEN        "tokenizers/qwen3/golden.jsonl"
#define CHAT_GOLDEN   "tokenizers/qwen3/chat_template_golden.jsonl"
#define QWEN3_N_VOCAB 151936 /* config.json vocab_size of the Qwen3 models: the GGUF pads to it */

/* ---- The converter, in C ----------------------------------------------------
 *
 * What convert_hf_to_gguf.py's get_vocab_base writes for a byte-level BPE
 * tokenizer.json: every id below vocab_size in order; model.vocab keys as
 * NORMAL; added tokens as their content, CONTROL when "special" or when
 * they look special ("<|...|>", so <|fim_prefix|> and friends become
 * CONTROL too), else USER_DEFINED; "[PADi]" as UNUSED for the rest; merges
 * as "A B" (pairs joined with one space). */
typedef struct {
    cJSON *root; /* owns the strings the views point into */
    tok_str *tokens, *merges;
    int32_t *types;
    char *pads;   /* the "[PADi]" strings */
    char *joined; /* merges given as ["A", "B"] pairs, joined */
    tok_vocab_src src;
} gguf_vocab;

static bool looks_special(const char *s) {
    size_t n = strlen(s);
    return n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>");
}

static void gguf_from_json(gguf_vocab *g, const char *pre) {
    char *buf, err[E0_ERR_MAX];
    size_t len;
    if (e0_read_file(tu_shared(QWEN3), &buf, &len, 1 << 26, err)) fail_msg("%s", err);
    memset(g, 0, sizeof *g);
    g->root = cJSON_ParseWithLength(buf, len);
    free(buf);
    assert_non_null(g->root);
    const cJSON *model = cJSON_GetObjectItem(g->root, "model");
    const cJSON *vocab = cJSON_GetObjectItem(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItem(model, "merges");
    const cJSON *added = cJSON_GetObjectItem(g->root, "added_tokens");
    size_t n = QWEN3_N_VOCAB, nm = (size_t)cJSON_GetArraySize(merges);
    g->tokens = calloc(n, sizeof *g->tokens);
    g->types = calloc(n, sizeof *g->types);
    g->merges = calloc(nm, sizeof *g->merges);
    g->pads = calloc(n, 16);
    assert_true(g->tokens && g->types && g->merges && g->pads);
    const cJSON *c;
    cJSON_ArrayForEach(c, vocab) {
        size_t id = (size_t)c->valuedouble;
        assert_true(id < n);
        g->tokens[id] = (tok_str){c->string, strlen(c->string)};
        g->types[id] = TOK_TYPE_NORMAL;
    }
    cJSON_ArrayForEach(c, added) {
        size_t id = (size_t)cJSON_GetObjectItem(c, "id")->valuedouble;
        const char *s = cJSON_GetObjectItem(c, "content")->valuestring;
        assert_true(id < n);
        g->tokens[id] = (tok_str){s, strlen(s)};
        g->types[id] = cJSON_IsTrue(cJSON_GetObjectItem(c, "special")) || looks_special(s)
                           ? TOK_TYPE_CONTROL
                           : TOK_TYPE_USER_DEFINED;
    }
    for (size_t i = 0; i < n; i++)
        if (!g->types[i]) {
            char *p = g->pads + 16 * i;
            g->tokens[i] = (tok_str){p, (size_t)snprintf(p, 16, "[PAD%zu]", i)};
            g->types[i] = TOK_TYPE_UNUSED;
        }
    size_t room = 0;
    cJSON_ArrayForEach(c, merges) {
        if (cJSON_IsArray(c))
            room += strlen(c->child->valuestring) + strlen(c->child->next->valuestring) + 2;
    }
    g->joined = malloc(room + 1);
    assert_non_null(g->joined);
    size_t i = 0, at = 0;
    cJSON_ArrayForEach(c, merges) {
        if (cJSON_IsString(c)) {
            g->merges[i++] = (tok_str){c->valuestring, strlen(c->valuestring)};
            continue;
        }
        char *j = g->joined + at;
        int k =
            snprintf(j, room + 1 - at, "%s %s", c->child->valuestring, c->child->next->valuestring);
        g->merges[i++] = (tok_str){j, (size_t)k};
        at += (size_t)k + 1;
    }
    tok_vocab_src_init(&g->src);
    g->src.model = (tok_str){"gpt2", 4};
    g->src.pre = (tok_str){pre, strlen(pre)};
    g->src.tokens = g->tokens, g->src.n_tokens = n;
    g->src.types = g->types;
    g->src.merges = g->merges, g->src.n_merges = nm;
    g->src.bos_id = 151643, g->src.eos_id = 151645, g->src.pad_id = 151643;
}

static void gguf_free(gguf_vocab *g) {
    cJSON_Delete(g->root);
    free(g->tokens);
    free(g->types);
    free(g->merges);
    free(g->pads);
    free(g->joined);
}

static tok_tokenizer *load_src(const tok_vocab_src *v) {
    char err[E0_ERR_MAX] = "";
    tok_tokenizer *t = NULL;
    if (tok_load_vocab(&t, v, "qwen3.gguf", err)) fail_msg("%s", err);
    assert_non_null(t);
    return t;
}

static bool ids_equal(const int32_t *a, size_t na, const cJSON *ids) {
    if ((size_t)cJSON_GetArraySize(ids) != na) return false;
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, ids) if ((int32_t)x->valuedouble != a[i++]) return false;
    return true;
}

/* Every line of a .jsonl golden file whose `key` string encodes to `ids`
 * (and, when `dec_key` is given, decodes back to it). Returns the lines. */
static size_t check_golden(const tok_tokenizer *t, const char *rel, const char *key,
                           const char *dec_key) {
    char *buf, err[E0_ERR_MAX];
    size_t len, lines = 0, ids_ok = 0, dec_ok = 0;
    if (e0_read_file(tu_shared(rel), &buf, &len, 1 << 24, err)) fail_msg("%s", err);
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        const char *text = cJSON_GetObjectItem(j, key)->valuestring;
        tok_ids ids = {0};
        if (e0_tokenizer_encode(t, text, strlen(text), 0, &ids, err))
            fail_msg("%s line %zu: %s", rel, lines + 1, err);
        bool same = ids_equal(ids.v, ids.n, cJSON_GetObjectItem(j, "ids"));
        if (!same) print_message("%s line %zu: ids differ\n", rel, lines + 1);
        ids_ok += same;
        if (dec_key) {
            char *s;
            if (e0_tokenizer_decode(t, ids.v, ids.n, 0, &s, NULL, err)) fail_msg("%s", err);
            dec_ok += !strcmp(s, cJSON_GetObjectItem(j, dec_key)->valuestring);
            free(s);
        }
        e0_ids_free(&ids);
        cJSON_Delete(j);
        lines++;
    }
    free(buf);
    assert_int_equal(ids_ok, lines);
    if (dec_key) assert_int_equal(dec_ok, lines);
    return lines;
}

/* ---- Qwen3 through the GGUF arrays ----------------------------------------- */

static void test_qwen3_golden(void **state) {
    (void)state;
    gguf_vocab g;
    gguf_from_json(&g, "qwen2");
    tok_tokenizer *t = load_src(&g.src);
    assert_int_equal(check_golden(t, GOLDEN, "text", "decoded"), 400);
    assert_int_equal(check_golden(t, CHAT_GOLDEN, "rendered", NULL), 10);
    e0_tokenizer_free(t);
    gguf_free(&g);
}

/* The same tables as tok_load_json: ids, strings, decoded bytes, flags
 * (except where the converter marks a "<|...|>" token CONTROL that the
 * file calls non-special). */
static void test_qwen3_same_tables(void **state) {
    (void)state;
    gguf_vocab g;
    gguf_from_json(&g, "qwen2");
    tok_tokenizer *a = load_src(&g.src), *b = NULL;
    char err[E0_ERR_MAX];
    if (e0_tokenizer_load(&b, tu_shared(QWEN3), err)) fail_msg("%s", err);
    assert_int_equal(e0_tokenizer_vocab_size(a), e0_tokenizer_vocab_size(b));
    assert_int_equal(e0_tokenizer_vocab_size(a), 151669);
    size_t looked_special = 0;
    for (int32_t id = 0; id < e0_tokenizer_vocab_size(b) + 300; id++) {
        assert_int_equal(tok_is_token(a, id), tok_is_token(b, id));
        if (!tok_is_token(b, id)) continue;
        size_t na, nb, da, db;
        const char *sa = tok_token_str(a, id, &na), *sb = tok_token_str(b, id, &nb);
        assert_true(na == nb && !memcmp(sa, sb, na));
        const uint8_t *ba = tok_token_bytes(a, id, &da), *bb = tok_token_bytes(b, id, &db);
        assert_true(da == db && !memcmp(ba, bb, da));
        assert_int_equal(tok_is_added(a, id), tok_is_added(b, id));
        if (tok_is_special(a, id) != tok_is_special(b, id)) {
            assert_true(tok_is_special(a, id) && looks_special(sa));
            looked_special++;
        }
        assert_int_equal(tok_token_id(a, sa), tok_token_id(b, sb));
    }
    assert_int_equal(looked_special, 6); /* <|fim_prefix|> .. <|file_sep|> */
    e0_tokenizer_free(a);
    e0_tokenizer_free(b);
    gguf_free(&g);
}

static void test_qwen3_special(void **state) {
    (void)state;
    gguf_vocab g;
    gguf_from_json(&g, "qwen2");
    tok_tokenizer *t = load_src(&g.src);
    char err[E0_ERR_MAX];
    static const struct {
        const char *text;
        int32_t id;
    } S[] = {{"<|im_start|>", 151644}, {"<|im_end|>", 151645},   {"<|endoftext|>", 151643},
             {"<think>", 151667},      {"</tool_call>", 151658}, {"<|fim_prefix|>", 151659}};
    for (size_t i = 0; i < sizeof S / sizeof *S; i++) {
        tok_ids ids = {0};
        if (e0_tokenizer_encode(t, S[i].text, strlen(S[i].text), 0, &ids, err)) fail_msg("%s", err);
        assert_int_equal(ids.n, 1);
        assert_int_equal(ids.v[0], S[i].id);
        assert_int_equal(tok_token_id(t, S[i].text), S[i].id);
        e0_ids_free(&ids);
    }
    assert_true(tok_is_special(t, 151644));
    assert_false(tok_is_special(t, 151667)); /* <think>: USER_DEFINED */
    /* as text, a CONTROL token is spelled by ordinary tokens */
    tok_ids ids = {0};
    assert_int_equal(e0_tokenizer_encode(t, "<|im_start|>", 12, E0_ENCODE_SPECIAL_AS_TEXT, &ids, err), 0);
    assert_true(ids.n > 1);
    e0_ids_free(&ids);
    /* a padding id is no token */
    int32_t pad = 151700;
    char *s;
    assert_false(tok_is_token(t, pad));
    assert_int_equal(e0_tokenizer_decode(t, &pad, 1, 0, &s, NULL, err), E0_ERANGE);
    e0_tokenizer_free(t);
    gguf_free(&g);
}

/* Every pre-tokenizer name loads with the Qwen3 arrays and gives back its
 * input. */
static void test_pre_names(void **state) {
    (void)state;
    static const char *const texts[] = {"Hello world, it's 12345 o'clock!\n\n  x",
                                        "x\xcc\x81y caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac"};
    gguf_vocab g;
    gguf_from_json(&g, "qwen2");
    tok_tokenizer *q2 = load_src(&g.src);
    const char *names[] = {"qwen35", "gpt-2", "default", ""};
    for (size_t k = 0; k < 4; k++) {
        g.src.pre = (tok_str){names[k], strlen(names[k])};
        tok_tokenizer *t = load_src(&g.src);
        for (size_t i = 0; i < 2; i++) {
            char err[E0_ERR_MAX], *s;
            tok_ids ids = {0};
            assert_int_equal(e0_tokenizer_encode(t, texts[i], strlen(texts[i]), 0, &ids, err), 0);
            assert_int_equal(e0_tokenizer_decode(t, ids.v, ids.n, 0, &s, NULL, err), 0);
            assert_string_equal(s, texts[i]);
            free(s);
            e0_ids_free(&ids);
        }
        e0_tokenizer_free(t);
    }
    e0_tokenizer_free(q2);
    gguf_free(&g);
}

/* ---- Malformed sources ----------------------------------------------------- */

/* A small valid source: the 256 byte tokens, "ab", "abc", a control token,
 * a user-defined one and an unused pad; merges "a b", "ab c". */
typedef struct {
    tok_str tok[262];
    int32_t type[262];
    tok_str merge[2];
    char bytes[256][3];
    tok_vocab_src src;
} small;

static void small_init(small *s) {
    memset(s, 0, sizeof *s);
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? b
                      : b <= 0x20                                                       ? 256 + b
                      : b <= 0xA0 ? 256 + 33 + (b - 0x7F)
                                  : 256 + 67;
        char *p = s->bytes[b];
        size_t k = 0;
        if (cp < 0x80) {
            p[k++] = (char)cp;
        } else {
            p[k++] = (char)(0xC0 | cp >> 6);
            p[k++] = (char)(0x80 | (cp & 0x3F));
        }
        s->tok[b] = (tok_str){p, k};
        s->type[b] = TOK_TYPE_NORMAL;
    }
    s->tok[256] = (tok_str){"ab", 2}, s->type[256] = TOK_TYPE_NORMAL;
    s->tok[257] = (tok_str){"abc", 3}, s->type[257] = TOK_TYPE_NORMAL;
    s->tok[258] = (tok_str){"<|im_start|>", 12}, s->type[258] = TOK_TYPE_CONTROL;
    s->tok[259] = (tok_str){"<think>", 7}, s->type[259] = TOK_TYPE_USER_DEFINED;
    s->tok[260] = (tok_str){"[PAD260]", 8}, s->type[260] = TOK_TYPE_UNUSED;
    s->tok[261] = (tok_str){"[PAD261]", 8}, s->type[261] = TOK_TYPE_UNUSED;
    s->merge[0] = (tok_str){"a b", 3};
    s->merge[1] = (tok_str){"ab c", 4};
    tok_vocab_src_init(&s->src);
    s->src.model = (tok_str){"gpt2", 4};
    s->src.pre = (tok_str){"qwen2", 5};
    s->src.tokens = s->tok, s->src.types = s->type, s->src.n_tokens = 262;
    s->src.merges = s->merge, s->src.n_merges = 2;
    s->src.eos_id = 258;
}

/* Loading fails with `code` and a message holding every one of `want`. */
static void expect_fail(const tok_vocab_src *v, int code, const char *want1, const char *want2) {
    char err[E0_ERR_MAX] = "";
    tok_tokenizer *t = (tok_tokenizer *)&err; /* must become NULL */
    int rc = tok_load_vocab(&t, v, "bad.gguf", err);
    print_message("  %s\n", err);
    assert_int_equal(rc, code);
    assert_null(t);
    assert_non_null(strstr(err, "bad.gguf"));
    assert_non_null(strstr(err, want1));
    if (want2) assert_non_null(strstr(err, want2));
}

static void test_small_ok(void **state) {
    (void)state;
    small s;
    small_init(&s);
    tok_tokenizer *t = load_src(&s.src);
    char err[E0_ERR_MAX];
    tok_ids ids = {0};
    assert_int_equal(e0_tokenizer_encode(t, "abc<|im_start|>ab<think>", 24, 0, &ids, err), 0);
    int32_t want[] = {257, 258, 256, 259};
    assert_int_equal(ids.n, 4);
    assert_memory_equal(ids.v, want, sizeof want);
    e0_ids_free(&ids);
    assert_int_equal(e0_tokenizer_vocab_size(t), 260);
    e0_tokenizer_free(t);
    /* no merges, no types: every token NORMAL, BPE stops at bytes */
    s.src.n_merges = 0, s.src.merges = NULL, s.src.types = NULL, s.src.n_tokens = 258;
    s.src.eos_id = -1;
    t = load_src(&s.src);
    assert_int_equal(e0_tokenizer_encode(t, "abc", 3, 0, &ids, err), 0);
    assert_int_equal(ids.n, 3);
    e0_ids_free(&ids);
    e0_tokenizer_free(t);
    /* the same string twice: the later id is found, the earlier still decodes */
    small_init(&s);
    s.tok[257] = (tok_str){"ab", 2};
    s.src.n_merges = 1;
    t = load_src(&s.src);
    assert_int_equal(tok_token_id(t, "ab"), 257);
    assert_int_equal(e0_tokenizer_encode(t, "ab", 2, 0, &ids, err), 0);
    assert_int_equal(ids.n, 1);
    assert_int_equal(ids.v[0], 257);
    char *d;
    int32_t early = 256;
    assert_int_equal(e0_tokenizer_decode(t, &early, 1, 0, &d, NULL, err), 0);
    assert_string_equal(d, "ab");
    free(d);
    e0_ids_free(&ids);
    e0_tokenizer_free(t);
}

/* qwen35 keeps a combining mark in its word where qwen2 cuts before it:
 * with merges "x" + "\u0301" (bytes CC 81, spelled "Ì" "ģ"), "x\u0301" is one
 * token under qwen35 and three under qwen2 ("x", then "\u0301" alone). */
static void test_qwen35_marks(void **state) {
    (void)state;
    small s;
    small_init(&s);
    s.tok[256] = (tok_str){"x\xc3\x8c", 3};         /* "xÌ" */
    s.tok[257] = (tok_str){"x\xc3\x8c\xc4\xa3", 5}; /* "xÌģ" */
    s.merge[0] = (tok_str){"x \xc3\x8c", 4};
    s.merge[1] = (tok_str){"x\xc3\x8c \xc4\xa3", 6};
    char err[E0_ERR_MAX];
    for (int k = 0; k < 2; k++) {
        s.src.pre = k ? (tok_str){"qwen35", 6} : (tok_str){"qwen2", 5};
        tok_tokenizer *t = load_src(&s.src);
        tok_ids ids = {0};
        assert_int_equal(e0_tokenizer_encode(t, "x\xcc\x81", 3, 0, &ids, err), 0);
        assert_int_equal(ids.n, k ? 1 : 3);
        if (k) assert_int_equal(ids.v[0], 257);
        e0_ids_free(&ids);
        e0_tokenizer_free(t);
    }
}

static void test_malformed(void **state) {
    (void)state;
    small s;
#define CASE(edit, code, w1, w2)                                                                   \
    do {                                                                                           \
        small_init(&s);                                                                            \
        edit;                                                                                      \
        expect_fail(&s.src, code, w1, w2);                                                         \
    } while (0)
    CASE(s.src.model = ((tok_str){"llama", 5}), E0_EUNSUPPORTED, "tokenizer.ggml.model", "llama");
    CASE(s.src.model = ((tok_str){NULL, 0}), E0_EUNSUPPORTED, "tokenizer.ggml.model", NULL);
    CASE(s.src.pre = ((tok_str){"llama-bpe", 9}), E0_EUNSUPPORTED, "tokenizer.ggml.pre",
         "llama-bpe");
    CASE(s.src.n_tokens = 0, E0_EFORMAT, "tokenizer.ggml.tokens is empty", NULL);
    CASE(s.src.tokens = NULL, E0_EINVAL, "tokenizer.ggml.tokens", NULL);
    CASE(s.src.merges = NULL, E0_EINVAL, "tokenizer.ggml.merges", NULL);
    CASE(s.type[7] = 7, E0_EFORMAT, "token_type[7]", NULL);
    CASE(s.type[7] = 0, E0_EFORMAT, "token_type[7]", NULL);
    CASE(s.tok[256] = ((tok_str){"a\xff", 2}), E0_EFORMAT, "tokens[256]", "UTF-8");
    CASE(s.tok[256] = ((tok_str){"\xc0\xaf", 2}), E0_EFORMAT, "tokens[256]", "UTF-8");
    CASE(s.tok[256] = ((tok_str){"a\0b", 3}), E0_EFORMAT, "tokens[256]", "NUL");
    CASE(s.tok[258] = ((tok_str){"", 0}), E0_EFORMAT, "tokens[258] is empty", NULL);
    CASE(s.tok[3] = ((tok_str){NULL, 5}), E0_EINVAL, "tokens[3]", NULL);
    CASE(s.merge[1] = ((tok_str){"abc", 3}), E0_EFORMAT, "merges[1]", "one space");
    CASE(s.merge[1] = ((tok_str){"a b c", 5}), E0_EFORMAT, "merges[1]", "one space");
    CASE(s.merge[1] = ((tok_str){"", 0}), E0_EFORMAT, "merges[1]", "one space");
    CASE(s.merge[1] = ((tok_str){"ab zz", 5}), E0_EFORMAT, "merges[1]", "\"zz\" is not in");
    CASE(s.merge[1] = ((tok_str){"b c", 3}), E0_EFORMAT, "merges[1]", "\"bc\" is not in");
    CASE(s.merge[1] = ((tok_str){"ab ", 3}), E0_EFORMAT, "merges[1]", "is not in");
    /* an added token is no vocabulary entry: merges cannot use it */
    CASE(s.merge[1] = ((tok_str){"<think> c", 9}), E0_EFORMAT, "merges[1]", "<think>");
    CASE(s.src.eos_id = 262, E0_EFORMAT, "eos_token_id = 262", NULL);
    CASE(s.src.eos_id = 260, E0_EFORMAT, "eos_token_id = 260", NULL); /* UNUSED */
    CASE(s.src.bos_id = -7, E0_EFORMAT, "bos_token_id = -7", NULL);
    CASE(s.src.pad_id = (int64_t)UINT32_MAX, E0_EFORMAT, "padding_token_id", NULL);
    CASE(s.src.eot_id = 1 << 30, E0_EFORMAT, "eot_token_id", NULL);
    CASE(s.src.add_bos = true, E0_EFORMAT, "add_bos_token", NULL);
    CASE(for (int i = 0; i < 262; i++) s.type[i] = TOK_TYPE_UNUSED; s.src.n_merges = 0;
         s.src.eos_id = -1, E0_EFORMAT, "every token is unused", NULL);
    CASE(s.src.n_tokens = (size_t)TOK_MAX_ID + 1, E0_EUNSUPPORTED, "tokenizer.ggml.tokens", NULL);
#undef CASE
    char err[E0_ERR_MAX] = "";
    tok_tokenizer *t = NULL;
    assert_int_equal(tok_load_vocab(&t, NULL, "x.gguf", err), E0_EINVAL);
    assert_null(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3_golden),  cmocka_unit_test(test_qwen3_same_tables),
        cmocka_unit_test(test_qwen3_special), cmocka_unit_test(test_pre_names),
        cmocka_unit_test(test_small_ok),      cmocka_unit_test(test_qwen35_marks),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
