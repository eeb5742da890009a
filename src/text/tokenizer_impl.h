/* Internals of the tokenizer shared by tokenizer_load.c (tokenizer.json ->
 * tables) and tokenizer.c (encode, decode). Not for other modules: include
 * text/tokenizer.h.
 *
 * Every string the encoder handles is valid UTF-8 (checked at load or cut
 * out of the input before use), so PCRE2 runs with PCRE2_NO_UTF_CHECK. */
#ifndef E0_TEXT_TOKENIZER_IMPL_H
#define E0_TEXT_TOKENIZER_IMPL_H

#include "text/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOK_MAX_STEPS 64 /* normalizer / pre-tokenizer steps after flattening Sequences */

/* A growable byte buffer. */
typedef struct {
    char *p;
    size_t n, cap;
} tok_buf;

int tok_buf_reserve(tok_buf *b, size_t extra);
int tok_buf_put(tok_buf *b, const void *s, size_t n);
void tok_buf_free(tok_buf *b);

enum { TOK_F_TOKEN = 1, TOK_F_ADDED = 2, TOK_F_SPECIAL = 4 };

/* One id. Offsets are into tok_tokenizer.arena. */
typedef struct {
    uint32_t str_off, str_len; /* the string in tokenizer.json (NUL follows it) */
    uint32_t dec_off, dec_len; /* the bytes it decodes to */
    uint8_t flags;             /* TOK_F_* (0: no token has this id) */
} tok_entry;

/* Vocabulary hash slot: string (in the arena) -> id; id < 0 marks empty. */
typedef struct {
    uint32_t off, len;
    uint32_t hash;
    int32_t id;
} tok_vslot;

/* Merge table slot: (left id, right id) -> (rank, merged id). */
typedef struct {
    uint64_t key; /* left << 32 | right; TOK_MERGE_EMPTY if free */
    int32_t rank, id;
} tok_merge;

#define TOK_MERGE_EMPTY UINT64_MAX

typedef struct {
    int32_t id;
    uint32_t off, len; /* the text it matches (normalized content if `normalized`) */
    bool special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* Added tokens matched in one pass (raw text or normalized text): indices
 * into tok_tokenizer.added sorted by first byte, then longest first. */
typedef struct {
    uint32_t *idx;
    uint32_t start[257]; /* idx[start[b] .. start[b + 1]) begin with byte b */
    size_t n;
} tok_matchset;

typedef enum {
    TN_NFC,
    TN_NFD,
    TN_NFKC,
    TN_NFKD,
    TN_LOWERCASE,
    TN_REPLACE,
    TN_PREPEND,
    TN_STRIP,
    TN_STRIP_ACCENTS,
} tok_norm_kind;

typedef struct {
    tok_norm_kind kind;
    pcre2_code *re; /* Replace: the pattern (PCRE2_LITERAL for a String pattern) */
    char *str;      /* Replace: the content; Prepend: the prefix */
    size_t str_len;
    bool left, right; /* Strip */
} tok_norm;

typedef enum { TP_SPLIT, TP_DIGITS, TP_BYTELEVEL } tok_pre_kind;

/* SplitDelimiterBehavior of the library. */
typedef enum {
    TB_REMOVED,
    TB_ISOLATED,
    TB_MERGED_PREV,
    TB_MERGED_NEXT,
    TB_CONTIGUOUS
} tok_behavior;

typedef struct {
    tok_pre_kind kind;
    pcre2_code *re;        /* Split; ByteLevel with use_regex (the GPT-2 regex) */
    tok_behavior behavior; /* Split, Digits */
    bool invert;           /* Split */
    bool add_prefix_space; /* ByteLevel */
} tok_pre;

struct tok_tokenizer {
    char *arena; /* every string, NUL-separated */
    size_t arena_len;

    tok_entry *ent; /* [n_ent] by id */
    int32_t n_ent;
    size_t max_dec_len;

    tok_vslot *vocab; /* [vocab_mask + 1] */
    size_t vocab_mask;
    tok_merge *merges; /* [1 << merge_bits] */
    int merge_bits;
    int32_t byte_id[256]; /* the single-byte token of each byte, -1 if missing */

    int32_t unk_id;   /* -1: no unk_token */
    bool unk_missing; /* unk_token names no vocabulary entry */
    bool fuse_unk, ignore_merges;

    tok_added *added;
    size_t n_added;
    tok_matchset match_raw, match_norm;

    tok_norm norm[TOK_MAX_STEPS];
    size_t n_norm;
    tok_pre pre[TOK_MAX_STEPS]; /* the last one is ByteLevel */
    size_t n_pre;

    pcre2_match_context *mctx; /* match limits; shared read-only */

    /* Speed-ups built by tok_build_fast once the tables above are final. */
    tok_vslot *direct; /* decoded bytes -> id, for tokens BPE maps to themselves */
    size_t direct_mask;
    int32_t *bpair; /* [65536][2]: rank, id of merging the tokens of bytes b1, b2 (rank -1: none) */
    const uint8_t *nf_inert[2]; /* bitsets over [0, TOK_NF_TABLE): NFC, NFKC leave this code
                                   point alone (process-wide, not owned) */
};

#define TOK_NF_TABLE 0x30000 /* code points at or above are all inert */

/* FNV-1a, the vocabulary hash. */
uint32_t tok_hash(const void *s, size_t n);
/* The id of a vocabulary string, -1 if absent. */
int32_t tok_vocab_get(const tok_tokenizer *t, const char *s, size_t n);

/* Byte-level alphabet (GPT-2 bytes_to_unicode): the code point of byte b,
 * and the byte of a code point (-1 if the code point is not in the alphabet). */
uint32_t tok_byte_cp(uint8_t b);
int tok_cp_byte(uint32_t cp);

/* Length of the longest valid UTF-8 prefix of s[0..n) (no overlongs,
 * surrogates or code points above U+10FFFF). */
size_t tok_utf8_valid(const uint8_t *s, size_t n);

/* Points nf_inert at the process-wide NFC / NFKC tables the normalizer
 * needs (building them once); before any normalization. */
int tok_norm_setup(tok_tokenizer *t, char *err);
/* Builds the speed-up tables (direct, bpair); needs the final arena. */
int tok_build_fast(tok_tokenizer *t, char *err);

/* Runs the normalizer over s[0..n) (valid UTF-8). The result is s itself or
 * lives in one of `bufs`; it stays valid until `bufs` are reused. */
int tok_normalize(const tok_tokenizer *t, const char *s, size_t n, tok_buf bufs[2],
                  pcre2_match_data *md, const char **out, size_t *out_n, char *err);

#endif
