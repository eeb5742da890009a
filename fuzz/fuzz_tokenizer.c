/* libFuzzer: tokenizer.json loading, encoding and decoding.
 *
 * The first input byte picks what the rest is:
 *   0  a tokenizer.json; when it loads, a few fixed texts and the input
 *      itself are encoded and the ids decoded (batch and streaming);
 *   1  text, encoded by two built-in tokenizers (a plain one, where the
 *      token bytes must give back the input exactly, and one that turns on
 *      every normalizer, pre-tokenizer and added-token option) and by the
 *      Qwen3 tokenizer when $E0_SHARED (default ../shared) has it; the same
 *      with E0_ENCODE_SPECIAL_AS_TEXT;
 *   2  little-endian int32 ids, decoded in one call and one at a time,
 *      which must agree.
 * Any disagreement traps. */
#include "text/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tok_tokenizer *plain, *rich, *qwen;

static void check(bool ok) {
    if (!ok) __builtin_trap();
}

/* The byte-level spelling of byte b, as a JSON string body. */
static size_t json_byte(char *o, unsigned b) {
    unsigned cp = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? b
                  : b <= 0x20                                                       ? 256 + b
                  : b <= 0xA0 ? 256 + 33 + (b - 0x7F)
                              : 256 + 67;
    size_t k = 0;
    if (cp == '"' || cp == '\\') o[k++] = '\\';
    if (cp < 0x80) {
        o[k++] = (char)cp;
    } else {
        o[k++] = (char)(0xC0 | cp >> 6);
        o[k++] = (char)(0x80 | (cp & 0x3F));
    }
    return k;
}

static tok_tokenizer *builtin(const char *head, const char *model_extra, const char *skip) {
    static char j[1 << 16];
    size_t k = (size_t)snprintf(j, sizeof j, "{%s, \"model\": {\"type\": \"BPE\"%s, \"vocab\": {",
                                head, model_extra);
    for (unsigned b = 0; b < 256; b++) {
        if (b && strchr(skip, (int)b)) continue;
        j[k++] = '"';
        k += json_byte(j + k, b);
        k += (size_t)snprintf(j + k, sizeof j - k, "\": %u, ", b);
    }
    k += (size_t)snprintf(
        j + k, sizeof j - k,
        "\"th\": 256, \"the\": 257, \"\xC4\xA0t\": 258, \"\xC4\xA0th\": 259, "
        "\"\xC4\xA0the\": 260, \"in\": 261, \"ing\": 262, \"<s>\": 263, "
        "\"<unk>\": 264, \"aa\": 265, \"aaaa\": 266, \"er\": 267, "
        "\"<|im_start|>\": 268}, \"merges\": [\"t h\", \"th e\", "
        "[\"\xC4\xA0\", \"t\"], \"\xC4\xA0t h\", [\"\xC4\xA0th\", \"e\"], \"i n\", "
        "\"in g\", \"a a\", \"aa aa\", \"e r\"]}}");
    char err[512];
    tok_tokenizer *t = NULL;
    if (tok_load_json(&t, j, k, "builtin.json", err)) {
        fprintf(stderr, "fuzz_tokenizer: built-in tokenizer: %s\n", err);
        abort();
    }
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    plain = builtin(
        "\"added_tokens\": [{\"id\": 263, \"content\": \"<s>\", \"special\": true}, "
        "{\"id\": 268, \"content\": \"<|im_start|>\", \"special\": true}, "
        "{\"id\": 261, \"content\": \"in\", \"special\": false, \"normalized\": false}], "
        "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
        "\"pattern\": {\"Regex\": "
        "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|"
        "\\\\p{N}| "
        "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, "
        "\"behavior\": \"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", "
        "\"add_prefix_space\": false, \"use_regex\": false}]}, \"decoder\": {\"type\": "
        "\"ByteLevel\"}",
        "", "");
    rich = builtin(
        "\"added_tokens\": [{\"id\": 263, \"content\": \"<s>\", \"special\": true, \"lstrip\": "
        "true, "
        "\"rstrip\": true}, {\"id\": 268, \"content\": \"<|im_start|>\", \"special\": true, "
        "\"single_word\": true}, {\"id\": 257, \"content\": \"THE\", \"normalized\": true}, "
        "{\"id\": 265, \"content\": \"aa\", \"single_word\": true, \"lstrip\": true}], "
        "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, "
        "{\"type\": \"Lowercase\"}, {\"type\": \"Replace\", \"pattern\": {\"Regex\": "
        "\"\\\\s{2,}\"}, "
        "\"content\": \" \"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \"x\"}, "
        "\"content\": "
        "\"\"}, {\"type\": \"NFD\"}, {\"type\": \"StripAccents\"}, {\"type\": \"NFC\"}, {\"type\": "
        "\"Strip\", \"strip_left\": true, \"strip_right\": true}, {\"type\": \"Prepend\", "
        "\"prepend\": \"\xE2\x96\x81\"}, {\"type\": \"NFKD\"}]}, "
        "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\", "
        "\"individual_digits\": false}, {\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, "
        "\"behavior\": \"MergedWithNext\"}, {\"type\": \"Split\", \"pattern\": {\"Regex\": "
        "\"x*|,\"}, "
        "\"behavior\": \"MergedWithPrevious\", \"invert\": true}, {\"type\": \"Split\", "
        "\"pattern\": "
        "{\"Regex\": \"[\\\\u0030-\\\\u0039]+\"}, \"behavior\": \"Contiguous\"}, {\"type\": "
        "\"Punctuation\", \"behavior\": \"Removed\"}, {\"type\": \"Whitespace\"}, {\"type\": "
        "\"Digits\", \"individual_digits\": true}, {\"type\": \"ByteLevel\", \"add_prefix_space\": "
        "true, \"use_regex\": true}]}, \"decoder\": {\"type\": \"Sequence\", \"decoders\": "
        "[{\"type\": \"ByteLevel\"}]}",
        ", \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"ignore_merges\": true", "q\xff");
    char path[4096];
    const char *root = getenv("E0_SHARED");
    snprintf(path, sizeof path, "%s/tokenizers/qwen3/tokenizer.json",
             root && *root ? root : "../shared");
    char err[512];
    if (e0_tokenizer_load(&qwen, path, err)) {
        fprintf(stderr, "fuzz_tokenizer: no Qwen3 tokenizer (%s); fuzzing without it\n", err);
        qwen = NULL;
    }
    return 0;
}

/* Batch decode and streaming decode of the same ids agree. */
static void decode_both(const tok_tokenizer *t, const int32_t *ids, size_t n, unsigned flags) {
    char err[512], *s = NULL;
    size_t len;
    int rc = e0_tokenizer_decode(t, ids, n, flags, &s, &len, err);
    size_t cap = tok_stream_max(t), total = 0, k;
    char *buf = malloc(cap), *acc = malloc(len + 16);
    check(buf != NULL);
    tok_stream st;
    tok_stream_init(&st, flags);
    bool all_ok = true;
    for (size_t i = 0; i < n; i++) {
        if (tok_stream_push(t, &st, ids[i], buf, cap, &k, err)) {
            all_ok = false;
            break;
        }
        if (rc == 0) {
            check(total + k <= len);
            memcpy(acc + total, buf, k);
        }
        total += k;
    }
    check(all_ok == (rc == 0));
    if (rc == 0) {
        total += tok_stream_flush(&st, acc + total);
        check(total == len && memcmp(acc, s, len) == 0 && s[len] == 0);
    }
    free(acc);
    free(buf);
    free(s);
}

/* Encode, decode both ways; with `exact`, the token bytes are the input. */
static void encode_check(const tok_tokenizer *t, const char *text, size_t n, unsigned flags,
                         bool exact) {
    char err[512];
    tok_ids ids = {0};
    int rc = e0_tokenizer_encode(t, text, n, flags, &ids, err);
    if (rc) {
        check(ids.n == 0);
        e0_ids_free(&ids);
        return;
    }
    for (size_t i = 0; i < ids.n; i++)
        check(tok_is_token(t, ids.v[i]));
    if (exact) {
        size_t k = 0;
        for (size_t i = 0; i < ids.n; i++) {
            size_t len;
            const uint8_t *b = tok_token_bytes(t, ids.v[i], &len);
            check(k + len <= n && memcmp(text + k, b, len) == 0);
            k += len;
        }
        check(k == n);
    }
    decode_both(t, ids.v, ids.n, 0);
    decode_both(t, ids.v, ids.n, E0_DECODE_SKIP_SPECIAL);
    e0_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const char *p = (const char *)data + 1;
    size_t n = size - 1;
    switch (data[0] % 3) {
    case 0: {
        char err[512];
        tok_tokenizer *t = NULL;
        if (tok_load_json(&t, p, n, "fuzz/tokenizer.json", err) == 0) {
            static const char *const texts[] = {"Hello, world! 123", "  <s>x\xff\xfe caf\xc3\xa9",
                                                "\xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x91\x8d"};
            for (size_t i = 0; i < 3; i++)
                encode_check(t, texts[i], strlen(texts[i]), 0, false);
            encode_check(t, p, n < 256 ? n : 256, 0, false);
            (void)tok_token_id(t, "<s>");
            (void)e0_tokenizer_vocab_size(t);
            e0_tokenizer_free(t);
        }
        break;
    }
    case 1:
        if (n > 8192) n = 8192; /* long pieces are covered; more runs matter more */
        encode_check(plain, p, n, 0, true);
        encode_check(plain, p, n, E0_ENCODE_SPECIAL_AS_TEXT, true);
        encode_check(rich, p, n, 0, false);
        encode_check(rich, p, n, E0_ENCODE_SPECIAL_AS_TEXT, false);
        if (qwen) encode_check(qwen, p, n, 0, false);
        break;
    default: {
        size_t k = n / 4;
        int32_t *ids = malloc((k ? k : 1) * sizeof *ids);
        for (size_t i = 0; i < k; i++)
            memcpy(&ids[i], p + 4 * i, 4);
        const tok_tokenizer *t = qwen ? qwen : plain;
        for (size_t i = 0; i < k; i++) /* mostly valid ids, some not */
            if (ids[i] >= 0 && (ids[i] & 0xFF000000) == 0) ids[i] %= e0_tokenizer_vocab_size(t) + 2;
        decode_both(t, ids, k, 0);
        decode_both(t, ids, k, E0_DECODE_SKIP_SPECIAL);
        decode_both(plain, ids, k, 0);
        free(ids);
        break;
    }
    }
    return 0;
}
