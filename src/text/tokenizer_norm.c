/* The normalizers of the encode pipeline (tokenizer.c: NFC / NFD / NFKC /
 * NFKD through utf8proc on the spans that can change, and the rest of
 * the `tokenizers` library's normalizer kinds). */
#include "text/tokenizer_impl.h"

#include "util/err.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- Normalizers ------------------------------------------------------------ */

/* Below this code point the form leaves text unchanged (NFC: nothing under
 * U+0300 composes or decomposes canonically; NFD: U+00C0 is the first
 * decomposable letter; compatibility forms: U+00A0 maps to a space). */
static uint32_t nf_inert_below(tok_norm_kind k) {
    return k == TN_NFC ? 0x300 : k == TN_NFD ? 0xC0 : 0xA0;
}

/* The form of s[0..n) (valid UTF-8) appended to o. */
int nf_map(const tok_norm *st, const char *s, size_t n, tok_buf *o, char *err) {
    int opts = UTF8PROC_STABLE;
    opts |= st->kind == TN_NFC || st->kind == TN_NFKC ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
    if (st->kind == TN_NFKC || st->kind == TN_NFKD) opts |= UTF8PROC_COMPAT;
    if (n > (size_t)PTRDIFF_MAX / 8) return e0_fail(err, E0_ERANGE, "text too long to normalize");
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t r =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &d, (utf8proc_option_t)opts);
    if (r < 0) {
        free(d);
        return e0_fail(err, r == UTF8PROC_ERROR_NOMEM ? E0_ENOMEM : E0_EFORMAT, "normalizer: %s",
                       utf8proc_errmsg(r));
    }
    int rc = tok_buf_put(o, d, (size_t)r);
    free(d);
    return rc ? e0_fail(err, E0_ENOMEM, "normalizer: out of memory") : 0;
}

static bool nf_inert(const uint8_t *bits, uint32_t cp) {
    return cp >= TOK_NF_TABLE || (bits[cp >> 3] >> (cp & 7) & 1);
}

/* NFC / NFKC with the inert table: only the spans that can change go
 * through utf8proc. A span starts at the character before the first
 * non-inert one (the starter it may compose with) and runs to the next
 * inert character, which nothing after it can reach across. */
static int nf_spans(const uint8_t *bits, const tok_norm *st, const char *s, size_t n, tok_buf *o,
                    bool *changed, char *err) {
    size_t done = 0, i = 0, len;
    while (i < n) {
        if ((uint8_t)s[i] < 0x80 || nf_inert(bits, cp_at(s + i, &len))) {
            i += (uint8_t)s[i] < 0x80 ? 1 : len;
            continue;
        }
        size_t start = i, end = i + len;
        if (i > done) cp_before(s, i, &start);
        while (end < n && (uint8_t)s[end] >= 0x80 && !nf_inert(bits, cp_at(s + end, &len)))
            end += len;
        int rc;
        if (tok_buf_put(o, s + done, start - done))
            return e0_fail(err, E0_ENOMEM, "normalizer: out of memory");
        if ((rc = nf_map(st, s + start, end - start, o, err))) return rc;
        *changed = true;
        done = i = end;
    }
    if (*changed && tok_buf_put(o, s + done, n - done))
        return e0_fail(err, E0_ENOMEM, "normalizer: out of memory");
    return 0;
}

static int norm_nf(const tok_tokenizer *t, const tok_norm *st, const char *s, size_t n, tok_buf *o,
                   bool *changed, char *err) {
    const uint8_t *bits = st->kind == TN_NFC    ? t->nf_inert[0]
                          : st->kind == TN_NFKC ? t->nf_inert[1]
                                                : NULL;
    if (bits) return nf_spans(bits, st, s, n, o, changed, err);
    uint32_t below = nf_inert_below(st->kind);
    size_t i = 0;
    while (i < n) {
        if ((uint8_t)s[i] < 0x80) {
            i++;
            continue;
        }
        size_t len;
        if (cp_at(s + i, &len) >= below) break;
        i += len;
    }
    if (i == n) return 0;
    *changed = true;
    return nf_map(st, s, n, o, err);
}

static bool is_cased(uint32_t c) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

static bool is_case_ignorable(uint32_t c) {
    if (c == '\'' || c == '.' || c == ':' || c == 0xB7 || c == 0x2019) return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK;
}

/* Capital sigma at s + i is final: a cased letter before it and none after
 * (skipping case-ignorable characters), as Rust's to_lowercase decides. */
static bool final_sigma(const char *s, size_t n, size_t i, size_t len) {
    bool before = false, after = false;
    for (size_t j = i; j > 0;) {
        uint32_t c = cp_before(s, j, &j);
        if (is_case_ignorable(c)) continue;
        before = is_cased(c);
        break;
    }
    for (size_t j = i + len; j < n;) {
        size_t l;
        uint32_t c = cp_at(s + j, &l);
        j += l;
        if (is_case_ignorable(c)) continue;
        after = is_cased(c);
        break;
    }
    return before && !after;
}

/* Full lowercase mapping: utf8proc's simple mapping plus the two special
 * cases of Rust's str::to_lowercase (U+0130 and final sigma). */
static int norm_lower(const char *s, size_t n, tok_buf *o, bool *changed) {
    if (tok_buf_reserve(o, n)) return -1;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        if (c < 0x80) {
            /* lowercase can be longer (U+0130, U+023A): the reservation may be used up */
            if (o->n == o->cap && tok_buf_reserve(o, n - i)) return -1;
            o->p[o->n++] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
            i++;
            continue;
        }
        size_t len;
        uint32_t cp = cp_at(s + i, &len);
        int rc;
        if (cp == 0x130)
            rc = tok_buf_put(o, "i\xCC\x87", 3);
        else if (cp == 0x3A3)
            rc = put_cp(o, final_sigma(s, n, i, len) ? 0x3C2 : 0x3C3);
        else
            rc = put_cp(o, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
        if (rc) return -1;
        i += len;
    }
    *changed = true;
    return 0;
}

static int norm_replace(const tok_tokenizer *t, const tok_norm *st, const char *s, size_t n,
                        tok_buf *o, pcre2_match_data *md, bool *changed, char *err) {
    re_iter it;
    re_start(&it, t, st->re, md, s, n);
    size_t done = 0, ms, me;
    int rc;
    while ((rc = re_next(&it, &ms, &me, err)) == 1) {
        if (tok_buf_put(o, s + done, ms - done) || tok_buf_put(o, st->str, st->str_len))
            return e0_fail(err, E0_ENOMEM, "normalizer: out of memory");
        done = me;
        *changed = true;
    }
    if (rc < 0) return rc;
    if (*changed && tok_buf_put(o, s + done, n - done))
        return e0_fail(err, E0_ENOMEM, "normalizer: out of memory");
    return 0;
}

static int norm_strip_accents(const char *s, size_t n, tok_buf *o, bool *changed) {
    if (tok_buf_reserve(o, n)) return -1;
    for (size_t i = 0; i < n;) {
        size_t len;
        uint32_t cp = cp_at(s + i, &len);
        utf8proc_category_t k =
            cp < 0x300 ? UTF8PROC_CATEGORY_LL : utf8proc_category((utf8proc_int32_t)cp);
        if (k != UTF8PROC_CATEGORY_MN && k != UTF8PROC_CATEGORY_MC && k != UTF8PROC_CATEGORY_ME) {
            memcpy(o->p + o->n, s + i, len);
            o->n += len;
        }
        i += len;
    }
    *changed = true;
    return 0;
}

int tok_normalize(const tok_tokenizer *t, const char *s, size_t n, tok_buf bufs[2],
                  pcre2_match_data *md, const char **out, size_t *out_n, char *err) {
    const char *cur = s;
    size_t cn = n;
    int w = 0; /* bufs[w] never holds cur */
    for (size_t k = 0; k < t->n_norm; k++) {
        const tok_norm *st = &t->norm[k];
        tok_buf *o = &bufs[w];
        o->n = 0;
        bool changed = false;
        int rc = 0;
        switch (st->kind) {
        case TN_NFC:
        case TN_NFD:
        case TN_NFKC:
        case TN_NFKD:
            rc = norm_nf(t, st, cur, cn, o, &changed, err);
            break;
        case TN_LOWERCASE:
            if (norm_lower(cur, cn, o, &changed))
                rc = e0_fail(err, E0_ENOMEM, "normalizer: out of memory");
            break;
        case TN_STRIP_ACCENTS:
            if (norm_strip_accents(cur, cn, o, &changed))
                rc = e0_fail(err, E0_ENOMEM, "normalizer: out of memory");
            break;
        case TN_REPLACE:
            rc = norm_replace(t, st, cur, cn, o, md, &changed, err);
            break;
        case TN_PREPEND:
            if (cn) {
                if (tok_buf_put(o, st->str, st->str_len) || tok_buf_put(o, cur, cn))
                    rc = e0_fail(err, E0_ENOMEM, "normalizer: out of memory");
                changed = true;
            }
            break;
        case TN_STRIP: /* a sub-range of cur: nothing to copy */
            while (st->left && cn) {
                size_t len;
                if (!is_ws(cp_at(cur, &len))) break;
                cur += len, cn -= len;
            }
            while (st->right && cn) {
                size_t at;
                if (!is_ws(cp_before(cur, cn, &at))) break;
                cn = at;
            }
            break;
        }
        if (rc) return rc;
        if (changed) {
            cur = o->n ? o->p : "", cn = o->n;
            w ^= 1;
        }
    }
    *out = cur, *out_n = cn;
    return 0;
}
