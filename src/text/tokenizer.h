/* Byte-level BPE tokenizer driven by a Hugging Face tokenizer.json (or by
 * the same tables from GGUF metadata: tok_load_vocab).
 *
 *     tok_tokenizer *tk;
 *     char err[E0_ERR_MAX];
 *     if (e0_tokenizer_load(&tk, "model/tokenizer.json", err)) die(err);
 *     tok_ids ids = {0};
 *     if (e0_tokenizer_encode(tk, text, strlen(text), 0, &ids, err)) die(err);   // appends
 *     char *s;
 *     size_t n;
 *     if (e0_tokenizer_decode(tk, ids.v, ids.n, 0, &s, &n, err)) die(err);
 *     free(s);
 *     e0_ids_free(&ids);
 *     e0_tokenizer_free(tk);
 *
 * The file is followed generally, not one model by hand. Encoding runs the
 * steps of the `tokenizers` library in its order:
 *   1. added tokens with "normalized": false are cut out of the raw text
 *      (leftmost-longest; "special", "lstrip", "rstrip", "single_word");
 *   2. each remaining part goes through the normalizer (NFC, NFD, NFKC, NFKD,
 *      Lowercase, Replace, Prepend, Strip, StripAccents, Sequence);
 *   3. added tokens with "normalized": true are cut out of the normalized text;
 *   4. the pre-tokenizer splits the rest (Split with the file's regex or
 *      string and any of its five behaviours and `invert`, Digits, Whitespace,
 *      WhitespaceSplit, Punctuation, Sequence, and ByteLevel, which must come
 *      last and may add a prefix space or apply the GPT-2 regex);
 *   5. BPE over the bytes of each piece: lowest merge rank first, leftmost on
 *      ties; `ignore_merges`, `unk_token` and `fuse_unk` as the library does.
 * No BOS/EOS is added: the post_processor is not applied (chat templates add
 * their own markers). Decoding is the ByteLevel decoder: the bytes of every
 * token joined, invalid UTF-8 replaced by U+FFFD per maximal ill-formed
 * subsequence (as Rust's String::from_utf8_lossy).
 *
 * Not supported, so loading fails with E0_EUNSUPPORTED naming the field:
 * models other than BPE, pre-tokenizers without ByteLevel (Metaspace,
 * BertPreTokenizer, ...), Precompiled / BertNormalizer normalizers, decoders
 * other than ByteLevel, continuing_subword_prefix / end_of_word_suffix.
 * Ignored: dropout, byte_fallback (every byte has a byte-level token),
 * post_processor, truncation, padding.
 *
 * Regexes are PCRE2 (JIT when available, the interpreter otherwise) with
 * UTF and UCP; the file's Oniguruma syntax is translated where the two differ:
 * \s and \S mean Unicode White_Space (PCRE2 alone misses U+0085), \w and \W
 * letters, marks, numbers and connector punctuation, \h a hex digit, \uHHHH
 * a code point. Normalisation is utf8proc.
 *
 * Invalid UTF-8 in the text to encode (the library only accepts valid
 * strings) has a byte fallback: the text is cut into maximal valid runs and
 * runs of invalid bytes; a valid run is tokenized as above, an invalid run
 * becomes one piece whose raw bytes go through BPE, never through the
 * normalizer or the regex. So no byte is lost: the concatenated
 * tok_token_bytes of the ids give back the input wherever the normalizer did
 * not change it, and e0_tokenizer_decode shows them as U+FFFD (one per maximal
 * ill-formed subsequence).
 *
 * Errors: every function that can fail returns E0_OK or a negative E0_E*
 * status and writes a message naming the file and field (loading) or the
 * offending id (decoding) into `err` (E0_ERR_MAX bytes, may be NULL).
 *
 * Threads: a loaded tokenizer is immutable; any number of threads may encode
 * and decode with it at once. A tok_stream belongs to one thread at a time.
 */
#ifndef E0_TEXT_TOKENIZER_H
#define E0_TEXT_TOKENIZER_H

#include "edge0.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOK_MAX_FILE (1u << 30) /* largest tokenizer.json e0_tokenizer_load reads */
#define TOK_MAX_ID   (1 << 24)  /* ids must be in [0, TOK_MAX_ID); tables are sized by id */

typedef struct e0_tokenizer tok_tokenizer; /* e0_tokenizer in edge0.h */

/* e0_tokenizer_load (edge0.h) reads and validates a tokenizer.json;
 * e0_tokenizer_free frees. */
/* The same from memory; `name` is only used in messages. Pure: safe to fuzz. */
int tok_load_json(tok_tokenizer **out, const char *json, size_t len, const char *name, char *err);

/* ---- From GGUF metadata (llama.cpp's format) ---------------------------
 *
 * A GGUF file carries the tokenizer as arrays under tokenizer.ggml.*; the
 * GGUF reader fills a tok_vocab_src with views into its mapping and
 * tok_load_vocab builds the tokenizer that tok_load_json builds from the
 * tokenizer.json the file was converted from (tokenizer_vocab.c lists how
 * each field maps and where llama.cpp differs). Nothing is kept: the views
 * may go away once it returns. */

/* A string view: len bytes at ptr, not NUL-terminated (ptr may be NULL
 * when len is 0). */
typedef struct {
    const char *ptr;
    size_t len;
} tok_str;

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,      /* a special added token */
    TOK_TYPE_USER_DEFINED = 4, /* a non-special added token */
    TOK_TYPE_UNUSED = 5,       /* padding up to the model's vocab_size: no token */
    TOK_TYPE_BYTE = 6,
};

typedef struct {
    tok_str model;         /* tokenizer.ggml.model: only "gpt2" (byte-level BPE) */
    tok_str pre;           /* tokenizer.ggml.pre: "qwen2", "qwen35", "gpt-2", "default";
                              absent (len 0) reads as "default", as in llama.cpp */
    const tok_str *tokens; /* tokenizer.ggml.tokens [n_tokens], by id */
    size_t n_tokens;
    const int32_t *types;  /* tokenizer.ggml.token_type [n_tokens]; NULL: all NORMAL */
    const tok_str *merges; /* tokenizer.ggml.merges [n_merges]: "A B", in rank order */
    size_t n_merges;
    /* tokenizer.ggml.{bos,eos,eot,padding}_token_id; -1 when absent. Only
     * checked (each must name a token): e0_tokenizer_encode adds none of them. */
    int64_t bos_id, eos_id, eot_id, pad_id;
    bool add_bos; /* tokenizer.ggml.add_bos_token: needs bos_id; the caller prepends it */
} tok_vocab_src;

/* Sets every id to -1 and everything else to zero. */
void tok_vocab_src_init(tok_vocab_src *v);

/* Builds a tokenizer from GGUF arrays; `name` (the file) starts every
 * message. E0_EUNSUPPORTED names tokenizer.ggml.model or .pre and the value
 * it does not know; E0_EFORMAT names the array and index of a malformed
 * entry. Pure: safe to fuzz. */
int tok_load_vocab(tok_tokenizer **out, const tok_vocab_src *v, const char *name, char *err);

/* A growable id array (e0_ids, edge0.h); e0_tokenizer_encode appends to
 * it, e0_tokenizer_decode and the E0_ENCODE_* / E0_DECODE_* flags are
 * public too. */
typedef e0_ids tok_ids;

/* Incremental decoding for generation: push one id at a time and get the
 * text that is complete so far. A UTF-8 sequence split across tokens is held
 * back until its last byte arrives, so no output ever ends in half a
 * character; bytes that cannot become a character come out as U+FFFD exactly
 * where e0_tokenizer_decode puts them, so the concatenation of every push and the
 * final flush equals e0_tokenizer_decode of the same ids. No allocation:
 *
 *     char *buf = malloc(tok_stream_max(tk));     // once, at load
 *     tok_stream st;
 *     tok_stream_init(&st, E0_DECODE_SKIP_SPECIAL);
 *     for each generated id:
 *         if (tok_stream_push(tk, &st, id, buf, tok_stream_max(tk), &n, err)) ...;
 *         fwrite(buf, 1, n, stdout);
 *     n = tok_stream_flush(&st, buf);             // at the end of the stream
 */
typedef struct {
    unsigned flags;  /* TOK_DECODE_* */
    uint8_t pend[4]; /* the incomplete sequence held back */
    uint8_t npend;   /* bytes in pend */
    uint8_t need;    /* continuation bytes still expected */
    uint8_t lo, hi;  /* range of the next continuation byte */
} tok_stream;

void tok_stream_init(tok_stream *s, unsigned flags);
/* Bytes one push may write (and at least what a flush writes). */
size_t tok_stream_max(const tok_tokenizer *t);
/* Writes the newly complete text of `id` to out[0..*n); cap >= tok_stream_max.
 * An id that is not a token fails with E0_ERANGE and leaves `s` unchanged. */
int tok_stream_push(const tok_tokenizer *t, tok_stream *s, int32_t id, char *out, size_t cap,
                    size_t *n, char *err);
/* Ends the stream: writes U+FFFD for a held-back incomplete sequence (at most
 * 3 bytes), returns the count and resets `s` for a new stream. */
size_t tok_stream_flush(tok_stream *s, char *out);

/* Lookups (for chat templates and samplers). */

/* e0_tokenizer_vocab_size (edge0.h). */
/* The id of an added token's content ("<|im_start|>"), else of a vocabulary
 * entry spelled as in tokenizer.json ("Ġthe"); -1 if there is none. */
int32_t tok_token_id(const tok_tokenizer *t, const char *s);
/* Whether `id` is a token at all / an added token / a special added token. */
bool tok_is_token(const tok_tokenizer *t, int32_t id);
bool tok_is_added(const tok_tokenizer *t, int32_t id);
bool tok_is_special(const tok_tokenizer *t, int32_t id);
/* The token as tokenizer.json spells it (NUL-terminated), NULL if none. */
const char *tok_token_str(const tok_tokenizer *t, int32_t id, size_t *len);
/* The bytes the token decodes to (not NUL-terminated), NULL if none. */
const uint8_t *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len);

#endif
