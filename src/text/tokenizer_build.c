/* The tables of tok_tokenizer, filled the same way by every loader
 * (tokenizer_load.c for tokenizer.json, tokenizer_vocab.c for GGUF
 * metadata): the string arena, the vocabulary and merge hashes, the entries
 * by id, the added-token match sets, and the final hand-over. The order of
 * the calls is in tokenizer_impl.h.
 *
 * Details that follow the `tokenizers` library (and would otherwise differ):
 *   - a merge's halves a, b and a+b must be vocabulary entries; rank is the
 *     index; a pair listed twice keeps its last rank;
 *   - the bytes a token decodes to: if every character of its string is in
 *     the byte-level alphabet, those bytes, else the string itself (so "é",
 *     U+00E9, decodes to the single byte 0xE9, as the library does).
 */
#include "text/tokenizer_impl.h"

#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Messages ------------------------------------------------------------ */

int tok_ld_fail(tok_ld *L, int code, const char *fmt, ...) {
    char msg[E0_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return e0_fail(L->err, code, "%s: %s", L->name, msg);
}

const char *tok_ld_show(const char *s, size_t n, char out[72]) {
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

/* ---- Arena and tables --------------------------------------------------- */

int tok_ld_arena_put(tok_ld *L, const void *s, size_t n, uint32_t *off) {
    if (L->arena.n + n + 1 > UINT32_MAX)
        return tok_ld_fail(L, E0_EUNSUPPORTED, "token strings exceed 4 GiB");
    *off = (uint32_t)L->arena.n;
    if (tok_buf_put(&L->arena, s, n) || tok_buf_put(&L->arena, "", 1))
        return tok_ld_fail(L, E0_ENOMEM, "out of memory for token strings");
    return 0;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

int tok_ld_vocab_insert(tok_ld *L, uint32_t off, uint32_t len, int32_t id) {
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

int32_t tok_ld_vocab_find(tok_ld *L, const char *s, size_t n) {
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

int tok_ld_vocab_alloc(tok_ld *L, size_t n) {
    tok_tokenizer *t = L->t;
    t->vocab_mask = pow2_at_least(2 * n + 1) - 1;
    t->vocab = malloc((t->vocab_mask + 1) * sizeof *t->vocab);
    if (!t->vocab) return tok_ld_fail(L, E0_ENOMEM, "out of memory for %zu vocabulary entries", n);
    for (size_t i = 0; i <= t->vocab_mask; i++)
        t->vocab[i].id = -1;
    return 0;
}

int tok_ld_merges_alloc(tok_ld *L, size_t n) {
    tok_tokenizer *t = L->t;
    if (n >= INT32_MAX) return tok_ld_fail(L, E0_EUNSUPPORTED, "too many merges (%zu)", n);
    size_t cap = pow2_at_least(2 * n + 1);
    t->merge_bits = 0;
    while (((size_t)1 << t->merge_bits) < cap)
        t->merge_bits++;
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges) return tok_ld_fail(L, E0_ENOMEM, "out of memory for %zu merges", n);
    for (size_t i = 0; i < cap; i++)
        t->merges[i].key = TOK_MERGE_EMPTY;
    return 0;
}

int tok_ld_merge_add(tok_ld *L, const char *field, const char *vocab, size_t rank, const char *a,
                     size_t na, const char *b, size_t nb, tok_buf *cat) {
    cat->n = 0;
    if (tok_buf_put(cat, a, na) || tok_buf_put(cat, b, nb))
        return tok_ld_fail(L, E0_ENOMEM, "out of memory");
    int32_t ia = tok_ld_vocab_find(L, a, na), ib = tok_ld_vocab_find(L, b, nb);
    int32_t iab = tok_ld_vocab_find(L, cat->p, cat->n);
    if (ia < 0 || ib < 0 || iab < 0) {
        char shown[72];
        const char *miss = ia < 0 ? a : ib < 0 ? b : cat->p;
        size_t nmiss = ia < 0 ? na : ib < 0 ? nb : cat->n;
        return tok_ld_fail(L, E0_EFORMAT, "%s[%zu]: \"%s\" is not in %s", field, rank,
                           tok_ld_show(miss, nmiss, shown), vocab);
    }
    merge_insert(L->t, ia, ib, (int32_t)rank, iab);
    return 0;
}

void tok_ld_byte_ids(tok_ld *L) {
    for (int b = 0; b < 256; b++) {
        uint32_t cp = tok_byte_cp((uint8_t)b);
        char u[2] = {(char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F))};
        char one = (char)b;
        L->t->byte_id[b] = cp < 0x80 ? tok_ld_vocab_find(L, &one, 1) : tok_ld_vocab_find(L, u, 2);
    }
}

int tok_ld_entries_alloc(tok_ld *L, int32_t max_id, const char *empty) {
    tok_tokenizer *t = L->t;
    if (max_id < 0) return tok_ld_fail(L, E0_EFORMAT, "%s", empty);
    t->n_ent = max_id + 1;
    t->ent = calloc((size_t)t->n_ent, sizeof *t->ent);
    if (!t->ent) return tok_ld_fail(L, E0_ENOMEM, "out of memory for %d ids", t->n_ent);
    return 0;
}

int tok_ld_entry(tok_ld *L, int32_t id, uint32_t off, uint32_t len) {
    tok_entry *e = &L->t->ent[id];
    e->flags = TOK_F_TOKEN;
    e->str_off = off, e->str_len = len;
    /* the source is in the arena: reserve first so that it does not move */
    if (tok_buf_reserve(&L->arena, (size_t)len + 1))
        return tok_ld_fail(L, E0_ENOMEM, "out of memory for token strings");
    return tok_ld_put_decoded(L, L->arena.p + off, len, &e->dec_off, &e->dec_len);
}

int tok_ld_put_decoded(tok_ld *L, const char *s, size_t n, uint32_t *off, uint32_t *len) {
    uint8_t tmp[256];
    uint8_t *out = n <= sizeof tmp ? tmp : malloc(n);
    if (!out) return tok_ld_fail(L, E0_ENOMEM, "out of memory");
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
    int rc = all ? tok_ld_arena_put(L, out, k, off) : tok_ld_arena_put(L, s, n, off);
    *len = all ? (uint32_t)k : (uint32_t)n;
    if (out != tmp) free(out);
    return rc;
}

/* ---- Regexes ------------------------------------------------------------- */

const char TOK_GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

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

int tok_ld_compile_re(tok_ld *L, const char *pat, size_t len, bool literal, const char *field,
                      pcre2_code **out) {
    tok_buf tr = {0};
    const char *p = pat;
    size_t n = len;
    if (!literal) {
        if (re_translate(pat, len, &tr)) {
            tok_buf_free(&tr);
            return tok_ld_fail(L, E0_ENOMEM, "out of memory");
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
        return tok_ld_fail(L, E0_EFORMAT, "%s: regex \"%s\" does not compile: %s", field,
                           tok_ld_show(pat, len, shown), (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* on failure pcre2_match interprets */
    *out = re;
    return 0;
}

/* Builds one match set: tokens with normalized == norm, keyed by the text
 * they match (already in the arena). Sorted by first byte, longest first,
 * file order on ties. */
static int build_matchset(tok_ld *L, tok_matchset *ms, bool norm) {
    tok_tokenizer *t = L->t;
    size_t n = 0;
    for (size_t i = 0; i < t->n_added; i++)
        n += t->added[i].normalized == norm && t->added[i].len;
    ms->idx = malloc((n ? n : 1) * sizeof *ms->idx);
    if (!ms->idx) return tok_ld_fail(L, E0_ENOMEM, "out of memory");
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

int tok_ld_finish_added(tok_ld *L, const tok_added_src *srcs) {
    tok_tokenizer *t = L->t;
    tok_buf bufs[2] = {{0}, {0}};
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    int rc = md ? 0 : tok_ld_fail(L, E0_ENOMEM, "out of memory");
    for (size_t i = 0; i < t->n_added && !rc; i++) {
        tok_added *a = &t->added[i];
        tok_entry *e = &t->ent[a->id];
        e->flags |= TOK_F_TOKEN | TOK_F_ADDED | (a->special ? TOK_F_SPECIAL : 0);
        if ((rc = tok_ld_arena_put(L, srcs[i].content, srcs[i].len, &e->str_off))) break;
        e->str_len = (uint32_t)srcs[i].len;
        if ((rc = tok_ld_put_decoded(L, srcs[i].content, srcs[i].len, &e->dec_off, &e->dec_len)))
            break;
        const char *m = srcs[i].content;
        size_t mn = srcs[i].len;
        if (a->normalized && t->n_norm) {
            /* tok_normalize reads only t->norm, not the arena */
            if ((rc = tok_normalize(t, m, mn, bufs, md, &m, &mn, L->err))) {
                e0_wrap(L->err, rc, "%s: added_tokens[%zu]: normalizing the content", L->name, i);
                break;
            }
        }
        if ((rc = tok_ld_arena_put(L, m, mn, &a->off))) break;
        a->len = (uint32_t)mn; /* 0 if the normalizer erased it: never matched */
    }
    tok_buf_free(&bufs[0]);
    tok_buf_free(&bufs[1]);
    pcre2_match_data_free(md);
    if (rc) return rc;
    if ((rc = build_matchset(L, &t->match_raw, false))) return rc;
    return build_matchset(L, &t->match_norm, true);
}

/* ---- Hand-over ------------------------------------------------------------- */

int tok_ld_finish(tok_ld *L, int rc, tok_tokenizer **out) {
    tok_tokenizer *t = L->t;
    *out = NULL;
    if (!rc) {
        for (int32_t id = 0; id < t->n_ent; id++)
            if (t->ent[id].dec_len > t->max_dec_len) t->max_dec_len = t->ent[id].dec_len;
        t->mctx = pcre2_match_context_create(NULL);
        if (!t->mctx)
            rc = tok_ld_fail(L, E0_ENOMEM, "out of memory");
        else
            pcre2_set_match_limit(t->mctx, TOK_MATCH_LIMIT);
    }
    t->arena = L->arena.p;
    t->arena_len = L->arena.n;
    L->arena = (tok_buf){0};
    if (!rc && (rc = tok_build_fast(t, L->err))) e0_wrap(L->err, rc, "%s", L->name);
    if (rc) {
        e0_tokenizer_free(t);
        L->t = NULL;
        return rc;
    }
    *out = t;
    return 0;
}

void e0_tokenizer_free(tok_tokenizer *t) {
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
