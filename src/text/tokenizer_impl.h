/* Internals of the tokenizer shared by tokenizer_build.c (the tables every
 * loader fills), tokenizer_load.c (tokenizer.json), tokenizer_vocab.c (GGUF
 * metadata arrays) and tokenizer.c (encode, decode). Not for other modules:
 * include text/tokenizer.h.
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
#include <utf8proc.h>

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

struct e0_tokenizer {
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

/* ---- Building the tables (tokenizer_build.c) ----------------------------
 *
 * A loader fills one tok_ld: strings go to the arena (which becomes
 * t->arena at the end), the vocabulary and merges through the functions
 * below, added tokens through t->added plus their source strings. The order
 * is fixed by what each step reads:
 *   tok_ld_vocab_alloc, tok_ld_vocab_insert (every vocabulary string)
 *   tok_ld_merges_alloc, tok_ld_merge_add   (needs the vocabulary)
 *   tok_ld_byte_ids
 *   tok_ld_entries_alloc, ent[] of the vocabulary (tok_ld_put_decoded)
 *   t->norm / t->pre, tok_norm_setup
 *   tok_ld_finish_added                     (normalizes with t->norm)
 *   tok_ld_finish                           (hands over, or frees on error)
 * Every function returns 0 or a negative E0_E* with L->err filled as
 * "NAME: message". */

/* Regex of the ByteLevel pre-tokenizer with use_regex (GPT-2). */
extern const char TOK_GPT2_REGEX[];

#define TOK_MATCH_LIMIT 20000000u /* PCRE2 backtracking steps per match call */

typedef struct {
    const char *name; /* the source, first in every message */
    char *err;
    tok_tokenizer *t;
    tok_buf arena;
} tok_ld;

/* The source string of added token i (t->added[i]); not NUL-terminated. */
typedef struct {
    const char *content;
    size_t len;
} tok_added_src;

int tok_ld_fail(tok_ld *L, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* s[0..n) for a message: printable ASCII as is, other bytes \xNN, cut after
 * about 60 characters. */
const char *tok_ld_show(const char *s, size_t n, char out[72]);
/* Appends s[0..n) and a NUL to the arena; *off is where it starts. */
int tok_ld_arena_put(tok_ld *L, const void *s, size_t n, uint32_t *off);
/* Sizes the vocabulary hash for n strings. */
int tok_ld_vocab_alloc(tok_ld *L, size_t n);
/* Maps the arena string at off to id; a string inserted twice keeps the
 * later id. */
int tok_ld_vocab_insert(tok_ld *L, uint32_t off, uint32_t len, int32_t id);
/* The id of a vocabulary string, -1 if absent (while building). */
int32_t tok_ld_vocab_find(tok_ld *L, const char *s, size_t n);
/* Sizes the merge table for n merges. */
int tok_ld_merges_alloc(tok_ld *L, size_t n);
/* Merge `rank` of halves a and b: a, b and a+b must be vocabulary strings,
 * as the `tokenizers` library requires; a pair listed twice keeps its last
 * rank. `field` names the merge list and `vocab` the vocabulary in the
 * message. `cat` is scratch space kept across calls. */
int tok_ld_merge_add(tok_ld *L, const char *field, const char *vocab, size_t rank, const char *a,
                     size_t na, const char *b, size_t nb, tok_buf *cat);
/* byte_id[] from the vocabulary: the token spelling each single byte. */
void tok_ld_byte_ids(tok_ld *L);
/* Allocates ent[0..max_id] (max_id < 0: `empty` names what is empty). */
int tok_ld_entries_alloc(tok_ld *L, int32_t max_id, const char *empty);
/* Makes `id` a vocabulary token spelled by the arena string at off, with
 * the bytes it decodes to. */
int tok_ld_entry(tok_ld *L, int32_t id, uint32_t off, uint32_t len);
/* The bytes a token string decodes to (ByteLevel decoder), into the arena.
 * If s points into the arena, the caller has reserved n + 1 bytes. */
int tok_ld_put_decoded(tok_ld *L, const char *s, size_t n, uint32_t *off, uint32_t *len);
/* Compiles a pattern of the file (Oniguruma syntax, translated; or a
 * literal) with UTF, UCP and JIT. `field` names it in the message. */
int tok_ld_compile_re(tok_ld *L, const char *pat, size_t len, bool literal, const char *field,
                      pcre2_code **out);
/* Gives the added tokens (t->added[0..n_added), their strings in srcs)
 * their entries and match sets; after the normalizer is set up. */
int tok_ld_finish_added(tok_ld *L, const tok_added_src *srcs);
/* Ends a load: with rc == 0 finishes the tables and stores the tokenizer in
 * *out; otherwise, or if finishing fails, frees everything. Returns rc or
 * the finishing error. */
int tok_ld_finish(tok_ld *L, int rc, tok_tokenizer **out);

int nf_map(const tok_norm *st, const char *s, size_t n, tok_buf *o, char *err);
/* ---- shared by tokenizer.c and tokenizer_norm.c ---------------------------- */

/* Decoders for text already known to be valid. */
static inline size_t lead_len(uint8_t c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

static inline uint32_t cp_at(const char *p, size_t *len) {
    const uint8_t *s = (const uint8_t *)p;
    size_t n = lead_len(s[0]);
    uint32_t cp = n == 1 ? s[0] : n == 2 ? s[0] & 0x1Fu : n == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (size_t k = 1; k < n; k++)
        cp = cp << 6 | (s[k] & 0x3Fu);
    *len = n;
    return cp;
}

/* The code point that ends at s + end (end > 0); *start is where it begins. */
static inline uint32_t cp_before(const char *s, size_t end, size_t *start) {
    size_t i = end - 1;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80)
        i--;
    size_t len;
    *start = i;
    return cp_at(s + i, &len);
}

/* Unicode White_Space (Rust's char::is_whitespace, Oniguruma's \s). */
static inline bool is_ws(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static inline int put_cp(tok_buf *b, uint32_t cp) {
    uint8_t u[4];
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, u);
    return tok_buf_put(b, u, (size_t)n);
}

/* Regex iteration (Oniguruma find_iter semantics; tokenizer.c). */
typedef struct {
    const pcre2_code *re;
    const tok_tokenizer *t;
    pcre2_match_data *md;
    const char *p;
    size_t n;
    size_t pos;      /* where the next search starts */
    size_t last_end; /* end of the last match returned; SIZE_MAX before the first */
} re_iter;
void re_start(re_iter *it, const tok_tokenizer *t, const pcre2_code *re,
                     pcre2_match_data *md, const char *p, size_t n);
int re_next(re_iter *it, size_t *s, size_t *e, char *err);

size_t utf8_seq(const uint8_t *s, size_t n);

#endif
