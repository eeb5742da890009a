/* libFuzzer: tokenizer from GGUF metadata arrays (tok_load_vocab).
 *
 * Input: two header bytes, then lines.
 *   byte 0   bits 0-2: tokenizer.ggml.pre (qwen2, qwen35, gpt-2, default,
 *            absent, an unknown name); bit 3: types given; bit 4: the 256
 *            byte-level tokens come first (so merges can be valid); bit 5:
 *            model "llama" instead of "gpt2"; bit 6: add_bos
 *   byte 1   eos id (0xFF: none); bos id = eos id + 1 when add_bos
 *   lines    tokens, one a line ("\n" separated); with types, each line's
 *            first byte % 8 is its type and the rest the token; an empty
 *            line ends the tokens and the lines after it are merges
 * When the source loads, a few fixed texts are encoded (with and without
 * special tokens) and decoded; the decode of an encoding must succeed and
 * the ids must be tokens. Any disagreement traps. */
#include "text/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok) {
    if (!ok) __builtin_trap();
}

static char byte_tok[256][3];
static size_t byte_len[256];

static void init_bytes(void) {
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? b
                      : b <= 0x20                                                       ? 256 + b
                      : b <= 0xA0 ? 256 + 33 + (b - 0x7F)
                                  : 256 + 67;
        size_t k = 0;
        if (cp < 0x80) {
            byte_tok[b][k++] = (char)cp;
        } else {
            byte_tok[b][k++] = (char)(0xC0 | cp >> 6);
            byte_tok[b][k++] = (char)(0x80 | (cp & 0x3F));
        }
        byte_len[b] = k;
    }
}

static void encode_check(const tok_tokenizer *t, const char *text, unsigned flags) {
    char err[512], *s = NULL;
    tok_ids ids = {0};
    if (e0_tokenizer_encode(t, text, strlen(text), flags, &ids, err) == 0) {
        for (size_t i = 0; i < ids.n; i++)
            check(tok_is_token(t, ids.v[i]));
        size_t n;
        check(e0_tokenizer_decode(t, ids.v, ids.n, 0, &s, &n, err) == 0);
        free(s);
    } else {
        check(ids.n == 0);
    }
    e0_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    if (!byte_len[0]) init_bytes();
    static const char *const PRE[] = {"qwen2", "qwen35", "gpt-2", "default", "", "llama-bpe"};
    uint8_t flags = data[0];
    const char *p = (const char *)data + 2, *end = (const char *)data + size;
    size_t cap = 256 + size, nt = 0, nm = 0;
    tok_str *tokens = malloc(cap * sizeof *tokens), *merges = malloc(cap * sizeof *merges);
    int32_t *types = malloc(cap * sizeof *types);
    check(tokens && merges && types);
    if (flags & 16)
        for (unsigned b = 0; b < 256; b++, nt++)
            tokens[nt] = (tok_str){byte_tok[b], byte_len[b]}, types[nt] = TOK_TYPE_NORMAL;
    bool in_merges = false;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (!in_merges && n == 0) {
            in_merges = true;
        } else if (in_merges) {
            merges[nm++] = (tok_str){p, n};
        } else if (flags & 8) {
            types[nt] = n ? (uint8_t)p[0] % 8 : 0;
            tokens[nt++] = (tok_str){n ? p + 1 : p, n ? n - 1 : 0};
        } else {
            types[nt] = TOK_TYPE_NORMAL;
            tokens[nt++] = (tok_str){p, n};
        }
        p += n + (nl != NULL);
    }
    tok_vocab_src v;
    tok_vocab_src_init(&v);
    const char *pre = PRE[(flags & 7) % 6];
    v.model = flags & 32 ? (tok_str){"llama", 5} : (tok_str){"gpt2", 4};
    v.pre = (tok_str){pre, strlen(pre)};
    v.tokens = tokens, v.n_tokens = nt;
    v.types = flags & 8 ? types : NULL;
    v.merges = merges, v.n_merges = nm;
    v.eos_id = data[1] == 0xFF ? -1 : data[1];
    v.add_bos = (flags & 64) != 0;
    if (v.add_bos) v.bos_id = v.eos_id + 1;
    char err[512];
    tok_tokenizer *t = NULL;
    if (tok_load_vocab(&t, &v, "fuzz.gguf", err) == 0) {
        static const char *const texts[] = {"Hello, world! 123 abc",
                                            "<|im_start|>x\xff caf\xc3\xa9",
                                            "x\xcc\x81y \xe6\x97\xa5 \xf0\x9f\x91\x8d"};
        for (size_t i = 0; i < 3; i++) {
            encode_check(t, texts[i], 0);
            encode_check(t, texts[i], E0_ENCODE_SPECIAL_AS_TEXT);
        }
        for (int32_t id = -1; id <= e0_tokenizer_vocab_size(t); id++) {
            size_t n;
            const char *s = tok_token_str(t, id, &n);
            check((s != NULL) == tok_is_token(t, id));
            if (s) check(tok_token_id(t, s) >= 0);
        }
        e0_tokenizer_free(t);
    } else {
        check(t == NULL);
    }
    free(tokens);
    free(merges);
    free(types);
    return 0;
}
