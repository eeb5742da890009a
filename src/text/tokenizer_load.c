/* tokenizer.json -> the tables of tok_tokenizer.
 *
 * Everything in the file is hostile until checked: each field is read
 * through a typed getter that names it in the message, ids are bounded by
 * TOK_MAX_ID before anything is sized by them, strings that later meet
 * PCRE2 with PCRE2_NO_UTF_CHECK are validated as UTF-8 here, and regexes get
 * match limits. cJSON's own nesting limit (1000) bounds the recursion
 * through Sequence normalizers and pre-tokenizers.
 *
 * Details that follow the `tokenizers` library (and would otherwise differ):
 *   - merges are "a b" strings (exactly one space) or ["a", "b"] pairs; rank
 *     is the index; a, b and a+b must be vocabulary entries; a pair listed
 *     twice keeps its last rank;
 *   - the bytes a token decodes to: if every character of its string is in
 *     the byte-level alphabet, those bytes, else the string itself (so "é",
 *     U+00E9, decodes to the single byte 0xE9, as the library does);
 *   - added tokens keep the ids the file gives them; "normalized" defaults
 *     to !special; tokens with normalized=true match the normalized content;
 *   - an unk_token missing from the vocabulary is only an error when the
 *     encoder needs it.
 */
#include "text/tokenizer_impl.h"

#include "util/err.h"
#include "util/file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Regex of the ByteLevel pre-tokenizer with use_regex (GPT-2). */
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

#define MATCH_LIMIT 20000000u /* PCRE2 backtracking steps per match call */

typedef struct {
    const char *name;
    char *err;
    tok_tokenizer *t;
    tok_buf arena;
} ld;

__attribute__((format(printf, 3, 4))) static int lfail(ld *L, int code, const char *fmt, ...) {
    char msg[E0_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return e0_fail(L->err, code, "%s: %s", L->name, msg);
}

/* A token string for a message: printable ASCII as is, other bytes \xNN,
 * long strings cut. */
static const char *show(const char *s, size_t n, char out[72]) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (k > 60) {
            memcpy(out + k, "...", 3);
            k += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out[k++] = (char)c;
        } else {
            snprintf(out + k, 5, "\\x%02x", c);
            k += 4;
        }
    }
    out[k] = 0;
    return out;
}

/* ---- Small typed getters ---------------------------------------------- */

static const cJSON *get(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_bool(ld *L, const cJSON *o, const char *path, const char *key, bool def, bool *out) {
    const cJSON *v = get(o, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v)) return lfail(L, E0_EFORMAT, "%s.%s must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A string field; NULL (and no error) when absent and !required. */
static int get_str(ld *L, const cJSON *o, const char *path, const char *key, bool required,
                   const char **out) {
    const cJSON *v = get(o, key);
    *out = NULL;
    if (!v) {
        if (required) return lfail(L, E0_EFORMAT, "%s.%s is missing", path, key);
        return 0;
    }
    if (!cJSON_IsString(v) || !v->valuestring)
        return lfail(L, E0_EFORMAT, "%s.%s must be a string", path, key);
    *out = v->valuestring;
    return 0;
}

static int get_id(ld *L, const cJSON *v, const char *what, int32_t *out) {
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= 0 && d < TOK_MAX_ID) || d != floor(d))
        return lfail(L, E0_EFORMAT, "%s: id must be an integer in [0, %d)", what, TOK_MAX_ID);
    *out = (int32_t)d;
    return 0;
}

/* ---- Arena and tables --------------------------------------------------- */

/* Appends s[0..n) and a NUL to the arena; *off is where it starts. */
static int arena_put(ld *L, const void *s, size_t n, uint32_t *off) {
    if (L->arena.n + n + 1 > UINT32_MAX)
        return lfail(L, E0_EUNSUPPORTED, "token strings exceed 4 GiB");
    *off = (uint32_t)L->arena.n;
    if (tok_buf_put(&L->arena, s, n) || tok_buf_put(&L->arena, "", 1))
        return lfail(L, E0_ENOMEM, "out of memory for token strings");
    return 0;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

static int vocab_insert(ld *L, uint32_t off, uint32_t len, int32_t id) {
    tok_tokenizer *t = L->t;
    const char *s = L->arena.p + off;
    uint32_t h = tok_hash(s, len);
    for (size_t i = h & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        tok_vslot *v = &t->vocab[i];
        if (v->id < 0) {
            *v = (tok_vslot){off, len, h, id};
            return 0;
        }
        if (v->hash == h && v->len == len && !memcmp(L->arena.p + v->off, s, len)) {
            v->id = id; /* a repeated key: the last one wins, as in a JSON map */
            return 0;
        }
    }
}

/* The vocabulary lookup while the arena is still L->arena. */
static int32_t vocab_find(ld *L, const char *s, size_t n) {
    tok_tokenizer *t = L->t;
    uint32_t h = tok_hash(s, n);
    for (size_t i = h & t->vocab_mask;; i = (i + 1) & t->vocab_mask) {
        const tok_vslot *v = &t->vocab[i];
        if (v->id < 0) return -1;
        if (v->hash == h && v->len == n && !memcmp(L->arena.p + v->off, s, n)) return v->id;
    }
}

static uint64_t merge_hash(uint64_t key, int bits) {
    return (key * 0x9E3779B97F4A7C15ull) >> (64 - bits);
}

static void merge_insert(tok_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t mask = ((size_t)1 << t->merge_bits) - 1;
    for (size_t i = merge_hash(key, t->merge_bits);; i = (i + 1) & mask) {
        tok_merge *m = &t->merges[i];
        if (m->key == TOK_MERGE_EMPTY || m->key == key) {
            *m = (tok_merge){key, rank, id}; /* a repeated pair keeps its last rank */
            return;
        }
    }
}

/* The bytes a token string decodes to (ByteLevel decoder), into the arena.
 * If s points into the arena, the caller has reserved n + 1 bytes. */
static int put_decoded(ld *L, const char *s, size_t n, uint32_t *off, uint32_t *len) {
    uint8_t tmp[256];
    uint8_t *out = n <= sizeof tmp ? tmp : malloc(n);
    if (!out) return lfail(L, E0_ENOMEM, "out of memory");
    size_t k = 0;
    bool all = tok_utf8_valid((const uint8_t *)s, n) == n;
    for (size_t i = 0; all && i < n;) {
        uint8_t c = (uint8_t)s[i];
        uint32_t cp;
        if (c < 0x80) {
            cp = c, i += 1;
        } else if (c < 0xE0) {
            cp = (uint32_t)(c & 0x1F) << 6 | ((uint8_t)s[i + 1] & 0x3F), i += 2;
        } else {
            cp = 0x110000, i += 1; /* three bytes or more: outside the alphabet */
        }
        int b = tok_cp_byte(cp);
        if (b < 0)
            all = false;
        else
            out[k++] = (uint8_t)b;
    }
    int rc = all ? arena_put(L, out, k, off) : arena_put(L, s, n, off);
    *len = all ? (uint32_t)k : (uint32_t)n;
    if (out != tmp) free(out);
    return rc;
}

/* ---- Regexes ------------------------------------------------------------- */

#define WORD_CLASS "\\p{L}\\p{M}\\p{N}\\p{Pc}"

static bool is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* Oniguruma (the library's engine) -> PCRE2 where the two differ; see
 * tokenizer.h. Tracks character classes so \w can become a class or a class
 * member. */
static int re_translate(const char *s, size_t n, tok_buf *o) {
    bool in_class = false;
    int rc = 0;
#define PUT(str) (rc |= tok_buf_put(o, str, strlen(str)))
    for (size_t i = 0; i < n && !rc; i++) {
        char c = s[i];
        if (c == '\\' && i + 1 < n) {
            char d = s[i + 1];
            if (d == 'Q') { /* literal until \E */
                size_t j = i + 2;
                while (j + 1 < n && !(s[j] == '\\' && s[j + 1] == 'E'))
                    j++;
                size_t end = j + 1 < n ? j + 2 : n;
                rc |= tok_buf_put(o, s + i, end - i);
                i = end - 1;
                continue;
            }
            if (d == 's') {
                PUT("\\p{White_Space}");
            } else if (d == 'S') {
                PUT("\\P{White_Space}");
            } else if (d == 'w') {
                PUT(in_class ? WORD_CLASS : "[" WORD_CLASS "]");
            } else if (d == 'W' && !in_class) {
                PUT("[^" WORD_CLASS "]");
            } else if (d == 'h') {
                PUT(in_class ? "0-9a-fA-F" : "[0-9a-fA-F]");
            } else if (d == 'H' && !in_class) {
                PUT("[^0-9a-fA-F]");
            } else if (d == 'u' && i + 5 < n && is_hex(s[i + 2]) && is_hex(s[i + 3]) &&
                       is_hex(s[i + 4]) && is_hex(s[i + 5])) {
                char x[16];
                snprintf(x, sizeof x, "\\x{%.4s}", s + i + 2);
                PUT(x);
                i += 4;
            } else {
                rc |= tok_buf_put(o, s + i, 2);
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            size_t j = i + 1;
            if (j < n && s[j] == '^') j++;
            if (j < n && s[j] == ']') j++; /* a leading ] is a member */
            rc |= tok_buf_put(o, s + i, j - i);
            i = j - 1;
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && s[i + 1] == ':') { /* [:alpha:] */
            size_t j = i + 2;
            while (j + 1 < n && !(s[j] == ':' && s[j + 1] == ']'))
                j++;
            size_t end = j + 1 < n ? j + 2 : n;
            rc |= tok_buf_put(o, s + i, end - i);
            i = end - 1;
            continue;
        }
        if (in_class && c == ']') in_class = false;
        rc |= tok_buf_put(o, &c, 1);
    }
#undef PUT
    return rc;
}

static int compile_re(ld *L, const char *pat, size_t len, bool literal, const char *field,
                      pcre2_code **out) {
    tok_buf tr = {0};
    const char *p = pat;
    size_t n = len;
    if (!literal) {
        if (re_translate(pat, len, &tr)) {
            tok_buf_free(&tr);
            return lfail(L, E0_ENOMEM, "out of memory");
        }
        p = tr.p ? tr.p : "", n = tr.n;
    }
    uint32_t opts =
        literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C;
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)p, n, opts, &code, &at, NULL);
    tok_buf_free(&tr);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        char shown[72];
        return lfail(L, E0_EFORMAT, "%s: regex \"%s\" does not compile: %s", field,
                     show(pat, len, shown), (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* on failure pcre2_match interprets */
    *out = re;
    return 0;
}

/* {"String": s} or {"Regex": r}. */
static int get_pattern(ld *L, const cJSON *o, const char *path, pcre2_code **out) {
    const cJSON *p = get(o, "pattern");
    char field[160];
    snprintf(field, sizeof field, "%s.pattern", path);
    if (!p || !cJSON_IsObject(p))
        return lfail(L, E0_EFORMAT, "%s must be {\"String\": ...} or {\"Regex\": ...}", field);
    const cJSON *s = get(p, "String"), *r = get(p, "Regex");
    const cJSON *v = s ? s : r;
    if (!v || !cJSON_IsString(v) || !v->valuestring)
        return lfail(L, E0_EFORMAT, "%s must be {\"String\": ...} or {\"Regex\": ...}", field);
    return compile_re(L, v->valuestring, strlen(v->valuestring), s != NULL, field, out);
}

/* ---- Normalizer and pre-tokenizer ---------------------------------------- */

static int type_of(ld *L, const cJSON *o, const char *path, const char **type) {
    if (!cJSON_IsObject(o)) return lfail(L, E0_EFORMAT, "%s must be an object or null", path);
    return get_str(L, o, path, "type", true, type);
}

static int utf8_str(ld *L, const char *path, const char *key, const char *s, char **out,
                    size_t *n) {
    size_t len = strlen(s);
    if (tok_utf8_valid((const uint8_t *)s, len) != len)
        return lfail(L, E0_EFORMAT, "%s.%s is not valid UTF-8", path, key);
    *out = strdup(s);
    if (!*out) return lfail(L, E0_ENOMEM, "out of memory");
    *n = len;
    return 0;
}

static int parse_norm(ld *L, const cJSON *o, const char *path, int depth) {
    tok_tokenizer *t = L->t;
    const char *type;
    int rc = type_of(L, o, path, &type);
    if (rc) return rc;
    if (!strcmp(type, "Sequence")) {
        const cJSON *a = get(o, "normalizers");
        if (!cJSON_IsArray(a)) return lfail(L, E0_EFORMAT, "%s.normalizers must be an array", path);
        if (depth > 16) return lfail(L, E0_EUNSUPPORTED, "%s: Sequences nested too deep", path);
        size_t i = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, a) {
            char sub[160];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", path, i++);
            if ((rc = parse_norm(L, c, sub, depth + 1))) return rc;
        }
        return 0;
    }
    if (t->n_norm == TOK_MAX_STEPS)
        return lfail(L, E0_EUNSUPPORTED, "%s: more than %d normalizers", path, TOK_MAX_STEPS);
    tok_norm *s = &t->norm[t->n_norm];
    memset(s, 0, sizeof *s);
    if (!strcmp(type, "NFC")) {
        s->kind = TN_NFC;
    } else if (!strcmp(type, "NFD")) {
        s->kind = TN_NFD;
    } else if (!strcmp(type, "NFKC")) {
        s->kind = TN_NFKC;
    } else if (!strcmp(type, "NFKD")) {
        s->kind = TN_NFKD;
    } else if (!strcmp(type, "Lowercase")) {
        s->kind = TN_LOWERCASE;
    } else if (!strcmp(type, "StripAccents")) {
        s->kind = TN_STRIP_ACCENTS;
    } else if (!strcmp(type, "Strip")) {
        s->kind = TN_STRIP;
        if ((rc = get_bool(L, o, path, "strip_left", true, &s->left)) ||
            (rc = get_bool(L, o, path, "strip_right", true, &s->right)))
            return rc;
    } else if (!strcmp(type, "Prepend")) {
        const char *p;
        s->kind = TN_PREPEND;
        if ((rc = get_str(L, o, path, "prepend", true, &p)) ||
            (rc = utf8_str(L, path, "prepend", p, &s->str, &s->str_len)))
            return rc;
    } else if (!strcmp(type, "Replace")) {
        const char *c;
        s->kind = TN_REPLACE;
        if ((rc = get_str(L, o, path, "content", true, &c)) ||
            (rc = utf8_str(L, path, "content", c, &s->str, &s->str_len)))
            return rc;
        t->n_norm++; /* owned from here: tok_free releases what is set */
        return get_pattern(L, o, path, &s->re);
    } else {
        return lfail(L, E0_EUNSUPPORTED, "%s: normalizer type \"%s\" is not supported", path, type);
    }
    t->n_norm++;
    return 0;
}

static int parse_behavior(ld *L, const cJSON *o, const char *path, tok_behavior def,
                          tok_behavior *out) {
    static const struct {
        const char *name;
        tok_behavior b;
    } B[] = {{"Removed", TB_REMOVED},
             {"Isolated", TB_ISOLATED},
             {"MergedWithPrevious", TB_MERGED_PREV},
             {"MergedWithNext", TB_MERGED_NEXT},
             {"Contiguous", TB_CONTIGUOUS}};
    const char *s;
    int rc = get_str(L, o, path, "behavior", false, &s);
    if (rc) return rc;
    if (!s) {
        *out = def;
        return 0;
    }
    for (size_t i = 0; i < sizeof B / sizeof *B; i++)
        if (!strcmp(s, B[i].name)) {
            *out = B[i].b;
            return 0;
        }
    return lfail(L, E0_EFORMAT,
                 "%s.behavior \"%s\" is not one of Removed, Isolated, "
                 "MergedWithPrevious, MergedWithNext, Contiguous",
                 path, s);
}

static tok_pre *new_pre(ld *L, const char *path) {
    tok_tokenizer *t = L->t;
    if (t->n_pre == TOK_MAX_STEPS) {
        lfail(L, E0_EUNSUPPORTED, "%s: more than %d pre-tokenizers", path, TOK_MAX_STEPS);
        return NULL;
    }
    tok_pre *p = &t->pre[t->n_pre++];
    memset(p, 0, sizeof *p);
    return p;
}

static int fixed_split(ld *L, const char *path, const char *re, tok_behavior b, bool invert) {
    tok_pre *p = new_pre(L, path);
    if (!p) return E0_EUNSUPPORTED;
    p->kind = TP_SPLIT, p->behavior = b, p->invert = invert;
    return compile_re(L, re, strlen(re), false, path, &p->re);
}

static int parse_pre(ld *L, const cJSON *o, const char *path, int depth) {
    tok_tokenizer *t = L->t;
    const char *type;
    int rc = type_of(L, o, path, &type);
    if (rc) return rc;
    if (t->n_pre && t->pre[t->n_pre - 1].kind == TP_BYTELEVEL)
        return lfail(
            L, E0_EUNSUPPORTED,
            "%s: a pre-tokenizer after ByteLevel is not supported (ByteLevel must be last)", path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *a = get(o, "pretokenizers");
        if (!cJSON_IsArray(a))
            return lfail(L, E0_EFORMAT, "%s.pretokenizers must be an array", path);
        if (depth > 16) return lfail(L, E0_EUNSUPPORTED, "%s: Sequences nested too deep", path);
        size_t i = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, a) {
            char sub[160];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", path, i++);
            if ((rc = parse_pre(L, c, sub, depth + 1))) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        tok_pre *p = new_pre(L, path);
        if (!p) return E0_EUNSUPPORTED;
        p->kind = TP_SPLIT;
        if ((rc = parse_behavior(L, o, path, TB_ISOLATED, &p->behavior)) ||
            (rc = get_bool(L, o, path, "invert", false, &p->invert)))
            return rc;
        return get_pattern(L, o, path, &p->re);
    }
    if (!strcmp(type, "ByteLevel")) {
        bool use_regex;
        tok_pre *p = new_pre(L, path);
        if (!p) return E0_EUNSUPPORTED;
        p->kind = TP_BYTELEVEL;
        if ((rc = get_bool(L, o, path, "add_prefix_space", true, &p->add_prefix_space)) ||
            (rc = get_bool(L, o, path, "use_regex", true, &use_regex)))
            return rc;
        if (use_regex) return compile_re(L, GPT2_REGEX, strlen(GPT2_REGEX), false, path, &p->re);
        return 0;
    }
    if (!strcmp(type, "Digits")) {
        bool individual;
        tok_pre *p = new_pre(L, path);
        if (!p) return E0_EUNSUPPORTED;
        p->kind = TP_DIGITS;
        if ((rc = get_bool(L, o, path, "individual_digits", false, &individual))) return rc;
        p->behavior = individual ? TB_ISOLATED : TB_CONTIGUOUS;
        return 0;
    }
    if (!strcmp(type, "Whitespace"))
        return fixed_split(L, path, "\\w+|[^\\w\\s]+", TB_REMOVED, true);
    if (!strcmp(type, "WhitespaceSplit")) return fixed_split(L, path, "\\s+", TB_REMOVED, false);
    if (!strcmp(type, "Punctuation")) {
        tok_behavior b;
        if ((rc = parse_behavior(L, o, path, TB_ISOLATED, &b))) return rc;
        return fixed_split(L, path, "[\\p{P}!-/:-@\\[-`{-~]", b, false);
    }
    return lfail(L, E0_EUNSUPPORTED, "%s: pre-tokenizer type \"%s\" is not supported", path, type);
}

/* Only the ByteLevel decoder (alone or in a Sequence) is implemented. */
static int check_decoder(ld *L, const cJSON *o, const char *path, int depth) {
    const char *type;
    int rc = type_of(L, o, path, &type);
    if (rc) return rc;
    if (!strcmp(type, "ByteLevel")) return 0;
    if (!strcmp(type, "Sequence") && depth < 16) {
        const cJSON *a = get(o, "decoders");
        if (!cJSON_IsArray(a)) return lfail(L, E0_EFORMAT, "%s.decoders must be an array", path);
        size_t i = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, a) {
            char sub[160];
            snprintf(sub, sizeof sub, "%s.decoders[%zu]", path, i++);
            if ((rc = check_decoder(L, c, sub, depth + 1))) return rc;
        }
        return 0;
    }
    return lfail(L, E0_EUNSUPPORTED, "%s: decoder type \"%s\" is not supported (only ByteLevel)",
                 path, type);
}

/* ---- Model --------------------------------------------------------------- */

static int parse_vocab(ld *L, const cJSON *vocab, int32_t *max_id) {
    tok_tokenizer *t = L->t;
    size_t n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, vocab) n++;
    t->vocab_mask = pow2_at_least(2 * n + 1) - 1;
    t->vocab = malloc((t->vocab_mask + 1) * sizeof *t->vocab);
    if (!t->vocab) return lfail(L, E0_ENOMEM, "out of memory for %zu vocabulary entries", n);
    for (size_t i = 0; i <= t->vocab_mask; i++)
        t->vocab[i].id = -1;
    cJSON_ArrayForEach(c, vocab) {
        int32_t id;
        size_t len = strlen(c->string);
        double d = cJSON_IsNumber(c) ? c->valuedouble : NAN;
        if (!(d >= 0 && d < TOK_MAX_ID) || d != floor(d)) {
            char shown[72];
            return lfail(L, E0_EFORMAT, "model.vocab[\"%s\"]: id must be an integer in [0, %d)",
                         show(c->string, len, shown), TOK_MAX_ID);
        }
        id = (int32_t)d;
        uint32_t off;
        int rc;
        if ((rc = arena_put(L, c->string, len, &off)) ||
            (rc = vocab_insert(L, off, (uint32_t)len, id)))
            return rc;
        if (id > *max_id) *max_id = id;
    }
    return 0;
}

/* One merge: "a b" or ["a", "b"] -> the two halves. */
static int merge_halves(ld *L, const cJSON *m, size_t i, const char **a, size_t *na, const char **b,
                        size_t *nb) {
    if (cJSON_IsString(m) && m->valuestring) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) {
            char shown[72];
            return lfail(L, E0_EFORMAT,
                         "model.merges[%zu]: \"%s\" is not two tokens separated by one space", i,
                         show(s, strlen(s), shown));
        }
        *a = s, *na = (size_t)(sp - s), *b = sp + 1, *nb = strlen(sp + 1);
        return 0;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2) {
        const cJSON *x = m->child, *y = x->next;
        if (cJSON_IsString(x) && cJSON_IsString(y) && x->valuestring && y->valuestring) {
            *a = x->valuestring, *na = strlen(*a), *b = y->valuestring, *nb = strlen(*b);
            return 0;
        }
    }
    return lfail(L, E0_EFORMAT, "model.merges[%zu] must be \"a b\" or [\"a\", \"b\"]", i);
}

static int parse_merges(ld *L, const cJSON *merges) {
    tok_tokenizer *t = L->t;
    size_t n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) n++;
    if (n >= INT32_MAX) return lfail(L, E0_EUNSUPPORTED, "model.merges: too many merges");
    size_t cap = pow2_at_least(2 * n + 1);
    t->merge_bits = 0;
    while (((size_t)1 << t->merge_bits) < cap)
        t->merge_bits++;
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges) return lfail(L, E0_ENOMEM, "out of memory for %zu merges", n);
    for (size_t i = 0; i < cap; i++)
        t->merges[i].key = TOK_MERGE_EMPTY;
    tok_buf cat = {0};
    size_t i = 0;
    int rc = 0;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if ((rc = merge_halves(L, m, i, &a, &na, &b, &nb))) break;
        cat.n = 0;
        if (tok_buf_put(&cat, a, na) || tok_buf_put(&cat, b, nb)) {
            rc = lfail(L, E0_ENOMEM, "out of memory");
            break;
        }
        int32_t ia = vocab_find(L, a, na), ib = vocab_find(L, b, nb);
        int32_t iab = vocab_find(L, cat.p, cat.n);
        if (ia < 0 || ib < 0 || iab < 0) {
            char shown[72];
            const char *miss = ia < 0 ? a : ib < 0 ? b : cat.p;
            size_t nmiss = ia < 0 ? na : ib < 0 ? nb : cat.n;
            rc = lfail(L, E0_EFORMAT, "model.merges[%zu]: \"%s\" is not in model.vocab", i,
                       show(miss, nmiss, shown));
            break;
        }
        merge_insert(t, ia, ib, (int32_t)i, iab);
        i++;
    }
    tok_buf_free(&cat);
    return rc;
}

static int parse_model(ld *L, const cJSON *root, int32_t *max_id) {
    tok_tokenizer *t = L->t;
    const cJSON *model = get(root, "model");
    if (!model || !cJSON_IsObject(model))
        return lfail(L, E0_EFORMAT, "model is missing or not an object");
    const char *type, *s;
    int rc = get_str(L, model, "model", "type", false, &type);
    if (rc) return rc;
    if (type && strcmp(type, "BPE"))
        return lfail(L, E0_EUNSUPPORTED, "model.type \"%s\" is not supported (only BPE)", type);
    const cJSON *vocab = get(model, "vocab");
    if (!vocab || !cJSON_IsObject(vocab))
        return lfail(L, E0_EFORMAT, "model.vocab is missing or not an object");
    if ((rc = parse_vocab(L, vocab, max_id))) return rc;
    const cJSON *merges = get(model, "merges");
    if (merges && !cJSON_IsArray(merges))
        return lfail(L, E0_EFORMAT, "model.merges must be an array");
    if ((rc = parse_merges(L, merges))) return rc;
    static const char *const AFFIX[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        if ((rc = get_str(L, model, "model", AFFIX[i], false, &s))) return rc;
        if (s && *s)
            return lfail(L, E0_EUNSUPPORTED, "model.%s \"%s\" is not supported", AFFIX[i], s);
    }
    const cJSON *d = get(model, "dropout");
    if (d && !cJSON_IsNumber(d))
        return lfail(L, E0_EFORMAT, "model.dropout must be a number or null");
    bool byte_fallback; /* never needed: every byte has a byte-level token */
    if ((rc = get_bool(L, model, "model", "fuse_unk", false, &t->fuse_unk)) ||
        (rc = get_bool(L, model, "model", "ignore_merges", false, &t->ignore_merges)) ||
        (rc = get_bool(L, model, "model", "byte_fallback", false, &byte_fallback)) ||
        (rc = get_str(L, model, "model", "unk_token", false, &s)))
        return rc;
    t->unk_id = -1;
    if (s) {
        t->unk_id = vocab_find(L, s, strlen(s));
        t->unk_missing = t->unk_id < 0;
    }
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_byte_cp((uint8_t)b);
        char u[2] = {(char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F))};
        char one = (char)b;
        t->byte_id[b] = cp < 0x80 ? vocab_find(L, &one, 1) : vocab_find(L, u, 2);
    }
    return 0;
}

/* ---- Added tokens -------------------------------------------------------- */

typedef struct {
    const char *content;
    size_t len;
} added_src;

static int parse_added(ld *L, const cJSON *arr, int32_t *max_id, added_src **srcs) {
    tok_tokenizer *t = L->t;
    size_t n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) n++;
    t->added = calloc(n ? n : 1, sizeof *t->added);
    *srcs = calloc(n ? n : 1, sizeof **srcs);
    if (!t->added || !*srcs) return lfail(L, E0_ENOMEM, "out of memory for %zu added tokens", n);
    size_t i = 0;
    cJSON_ArrayForEach(c, arr) {
        char path[64];
        snprintf(path, sizeof path, "added_tokens[%zu]", i);
        if (!cJSON_IsObject(c)) return lfail(L, E0_EFORMAT, "%s must be an object", path);
        tok_added *a = &t->added[i];
        const cJSON *idv = get(c, "id");
        const char *content;
        int rc;
        if (!idv) return lfail(L, E0_EFORMAT, "%s.id is missing", path);
        if ((rc = get_id(L, idv, path, &a->id)) ||
            (rc = get_str(L, c, path, "content", true, &content)) ||
            (rc = get_bool(L, c, path, "special", false, &a->special)) ||
            (rc = get_bool(L, c, path, "lstrip", false, &a->lstrip)) ||
            (rc = get_bool(L, c, path, "rstrip", false, &a->rstrip)) ||
            (rc = get_bool(L, c, path, "single_word", false, &a->single_word)) ||
            (rc = get_bool(L, c, path, "normalized", !a->special, &a->normalized)))
            return rc;
        size_t len = strlen(content);
        if (!len) return lfail(L, E0_EFORMAT, "%s.content is empty", path);
        if (tok_utf8_valid((const uint8_t *)content, len) != len)
            return lfail(L, E0_EFORMAT, "%s.content is not valid UTF-8", path);
        (*srcs)[i] = (added_src){content, len};
        if (a->id > *max_id) *max_id = a->id;
        i++;
    }
    t->n_added = n;
    return 0;
}

/* Builds one match set: tokens with normalized == norm, keyed by the text
 * they match (already in the arena). Sorted by first byte, longest first,
 * file order on ties. */
static int build_matchset(ld *L, tok_matchset *ms, bool norm) {
    tok_tokenizer *t = L->t;
    size_t n = 0;
    for (size_t i = 0; i < t->n_added; i++)
        n += t->added[i].normalized == norm && t->added[i].len;
    ms->idx = malloc((n ? n : 1) * sizeof *ms->idx);
    if (!ms->idx) return lfail(L, E0_ENOMEM, "out of memory");
    ms->n = 0;
    for (uint32_t i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == norm && t->added[i].len) ms->idx[ms->n++] = i;
    /* insertion sort by (first byte, -len, index): few tokens, and stable */
    for (size_t i = 1; i < n; i++) {
        uint32_t v = ms->idx[i];
        const tok_added *a = &t->added[v];
        uint8_t fa = (uint8_t)L->arena.p[a->off];
        size_t j = i;
        while (j > 0) {
            const tok_added *b = &t->added[ms->idx[j - 1]];
            uint8_t fb = (uint8_t)L->arena.p[b->off];
            if (fb < fa || (fb == fa && b->len >= a->len)) break;
            ms->idx[j] = ms->idx[j - 1];
            j--;
        }
        ms->idx[j] = v;
    }
    size_t k = 0;
    for (int b = 0; b < 256; b++) {
        ms->start[b] = (uint32_t)k;
        while (k < n && (uint8_t)L->arena.p[t->added[ms->idx[k]].off] == b)
            k++;
    }
    ms->start[256] = (uint32_t)n;
    return 0;
}

static int finish_added(ld *L, const added_src *srcs) {
    tok_tokenizer *t = L->t;
    tok_buf bufs[2] = {{0}, {0}};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    int rc = md ? 0 : lfail(L, E0_ENOMEM, "out of memory");
    for (size_t i = 0; i < t->n_added && !rc; i++) {
        tok_added *a = &t->added[i];
        tok_entry *e = &t->ent[a->id];
        e->flags |= TOK_F_TOKEN | TOK_F_ADDED | (a->special ? TOK_F_SPECIAL : 0);
        if ((rc = arena_put(L, srcs[i].content, srcs[i].len, &e->str_off))) break;
        e->str_len = (uint32_t)srcs[i].len;
        if ((rc = put_decoded(L, srcs[i].content, srcs[i].len, &e->dec_off, &e->dec_len))) break;
        const char *m = srcs[i].content;
        size_t mn = srcs[i].len;
        if (a->normalized && t->n_norm) {
            /* tok_normalize reads only t->norm, not the arena */
            if ((rc = tok_normalize(t, m, mn, bufs, md, &m, &mn, L->err))) {
                e0_wrap(L->err, rc, "%s: added_tokens[%zu]: normalizing the content", L->name, i);
                break;
            }
        }
        if ((rc = arena_put(L, m, mn, &a->off))) break;
        a->len = (uint32_t)mn; /* 0 if the normalizer erased it: never matched */
    }
    tok_buf_free(&bufs[0]);
    tok_buf_free(&bufs[1]);
    pcre2_match_data_free(md);
    if (rc) return rc;
    if ((rc = build_matchset(L, &t->match_raw, false))) return rc;
    return build_matchset(L, &t->match_norm, true);
}

/* ---- Entry point ---------------------------------------------------------- */

static int load(ld *L, const cJSON *root) {
    tok_tokenizer *t = L->t;
    int32_t max_id = -1;
    int rc = parse_model(L, root, &max_id);
    if (rc) return rc;
    const cJSON *at = get(root, "added_tokens");
    if (at && !cJSON_IsArray(at)) return lfail(L, E0_EFORMAT, "added_tokens must be an array");
    added_src *srcs = NULL;
    if ((rc = parse_added(L, at, &max_id, &srcs))) goto out;
    if (max_id < 0) {
        rc = lfail(L, E0_EFORMAT, "model.vocab and added_tokens are empty");
        goto out;
    }
    t->n_ent = max_id + 1;
    t->ent = calloc((size_t)t->n_ent, sizeof *t->ent);
    if (!t->ent) {
        rc = lfail(L, E0_ENOMEM, "out of memory for %d ids", t->n_ent);
        goto out;
    }
    for (size_t i = 0; i <= t->vocab_mask; i++) {
        const tok_vslot *v = &t->vocab[i];
        if (v->id < 0) continue;
        tok_entry *e = &t->ent[v->id];
        if (e->flags && e->str_off > v->off) continue; /* two keys, one id: keep the later one */
        e->flags = TOK_F_TOKEN;
        e->str_off = v->off, e->str_len = v->len;
        /* the source is in the arena: reserve first so that it does not move */
        if (tok_buf_reserve(&L->arena, (size_t)v->len + 1)) {
            rc = lfail(L, E0_ENOMEM, "out of memory for token strings");
            goto out;
        }
        if ((rc = put_decoded(L, L->arena.p + v->off, v->len, &e->dec_off, &e->dec_len))) goto out;
    }
    const cJSON *norm = get(root, "normalizer");
    if (norm && (rc = parse_norm(L, norm, "normalizer", 0))) goto out;
    if ((rc = tok_norm_setup(t, L->err))) {
        e0_wrap(L->err, rc, "%s", L->name);
        goto out;
    }
    const cJSON *pre = get(root, "pre_tokenizer");
    if (pre && (rc = parse_pre(L, pre, "pre_tokenizer", 0))) goto out;
    if (!t->n_pre || t->pre[t->n_pre - 1].kind != TP_BYTELEVEL) {
        rc = lfail(L, E0_EUNSUPPORTED,
                   "pre_tokenizer has no ByteLevel step: only byte-level "
                   "BPE tokenizers are supported");
        goto out;
    }
    const cJSON *dec = get(root, "decoder");
    if (dec && (rc = check_decoder(L, dec, "decoder", 0))) goto out;
    if ((rc = finish_added(L, srcs))) goto out;
    for (int32_t id = 0; id < t->n_ent; id++)
        if (t->ent[id].dec_len > t->max_dec_len) t->max_dec_len = t->ent[id].dec_len;
    t->mctx = pcre2_match_context_create(NULL);
    if (!t->mctx) {
        rc = lfail(L, E0_ENOMEM, "out of memory");
        goto out;
    }
    pcre2_set_match_limit(t->mctx, MATCH_LIMIT);
out:
    free(srcs);
    return rc;
}

int tok_load_json(tok_tokenizer **out, const char *json, size_t len, const char *name, char *err) {
    *out = NULL;
    if (!json) return e0_fail(err, E0_EINVAL, "%s: no data", name);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0, line = 1;
        for (size_t i = 0; i < at; i++)
            line += json[i] == '\n';
        return e0_fail(err, E0_EFORMAT, "%s: not valid JSON (line %zu, byte %zu)", name, line, at);
    }
    ld L = {.name = name, .err = err};
    int rc;
    if (!cJSON_IsObject(root)) {
        rc = lfail(&L, E0_EFORMAT, "the top level is not a JSON object");
        cJSON_Delete(root);
        return rc;
    }
    L.t = calloc(1, sizeof *L.t);
    if (!L.t) {
        cJSON_Delete(root);
        return e0_fail(err, E0_ENOMEM, "%s: out of memory", name);
    }
    rc = load(&L, root);
    cJSON_Delete(root);
    L.t->arena = L.arena.p;
    L.t->arena_len = L.arena.n;
    if (!rc && (rc = tok_build_fast(L.t, err))) e0_wrap(err, rc, "%s", name);
    if (rc) {
        tok_free(L.t);
        return rc;
    }
    *out = L.t;
    return 0;
}

int tok_load(tok_tokenizer **out, const char *path, char *err) {
    char *buf;
    size_t len;
    *out = NULL;
    int rc = e0_read_file(path, &buf, &len, TOK_MAX_FILE, err);
    if (rc) return rc;
    rc = tok_load_json(out, buf, len, path, err);
    free(buf);
    return rc;
}

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n_norm; i++) {
        pcre2_code_free(t->norm[i].re);
        free(t->norm[i].str);
    }
    for (size_t i = 0; i < t->n_pre; i++)
        pcre2_code_free(t->pre[i].re);
    pcre2_match_context_free(t->mctx);
    free(t->match_raw.idx);
    free(t->match_norm.idx);
    free(t->added);
    free(t->merges);
    free(t->direct);
    free(t->bpair);
    free(t->vocab);
    free(t->ent);
    free(t->arena);
    free(t);
}
