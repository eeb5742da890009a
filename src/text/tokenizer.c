/* Encoding and decoding with a loaded tok_tokenizer (tokenizer_load.c builds
 * it). The encode pipeline is the `tokenizers` library's, step by step; see
 * tokenizer.h for the order and the invalid UTF-8 policy.
 *
 * ---- Details that are easy to get wrong (each changes ids if done otherwise)
 *  - Regex iteration follows Oniguruma's find_iter, which the library uses:
 *    an empty match right where the previous match ended is skipped and the
 *    search moves on one character; other empty matches split the text.
 *  - Each regex runs on one piece only: look-aheads such as \s+(?!\S) do not
 *    see past the end of the piece.
 *  - ByteLevel's add_prefix_space applies to every piece that reaches it, not
 *    only the first one.
 *  - Split behaviours merge a match into its neighbour only when the
 *    neighbour is not itself a match (MergedWithPrevious / MergedWithNext);
 *    Contiguous merges runs of equal kind; empty pieces are dropped last.
 *  - The normalizer runs on each gap between raw added tokens, not on the
 *    whole text: ">" + U+0338 right after "<|im_start|>" stays two code
 *    points instead of composing into U+226F and breaking the token.
 *  - Added tokens: leftmost, then longest; a match rejected by single_word
 *    or skipped as special-as-text still consumes its bytes (the library's
 *    Aho-Corasick iterator moves past it); lstrip never reaches back into the
 *    previous token's span.
 *  - BPE takes the lowest rank first and, on equal ranks, the leftmost pair.
 *  - NFC / NFKC only hand utf8proc the spans that can change (nf_spans). That
 *    is faster and also avoids a utf8proc 2.8 bug: composing an LV syllable
 *    followed by U+11A7 drops the U+11A7 (Unicode, Python and Rust keep it);
 *    U+11A7 is inert, so it never reaches utf8proc after a syllable.
 *  - A byte without a token becomes unk_token (fused if fuse_unk) or, with no
 *    unk_token, is dropped, as the library does.
 */
#include "text/tokenizer_impl.h"

#include "util/arr.h"
#include "util/err.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Rust regex \w: alphabetic, marks, decimal digits, connector punctuation, joiners. */
static bool is_word(uint32_t c) {
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               c == '_';
    if (c == 0x200C || c == 0x200D) return true;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

static bool is_numeric(uint32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

/* ---- Encoder state ----------------------------------------------------------- */

typedef struct {
    size_t s, e;
    bool m; /* a match of the splitting pattern */
} split;

typedef struct {
    size_t s, e; /* relative to the piece that was split */
} span;

typedef struct {
    span *v;
    size_t n, cap;
} spans;

typedef struct {
    int32_t rank, pos, a, b, id;
} cand; /* a mergeable pair: symbols pos (id a) and its successor (id b) */

typedef struct {
    const tok_tokenizer *t;
    unsigned flags;
    tok_ids *out;
    char *err;
    pcre2_match_data *md;
    tok_buf nb[2]; /* normalizer output */
    tok_buf pfx;   /* a piece with ByteLevel's prefix space */
    tok_buf word;  /* byte-level spelling of a piece (ignore_merges) */
    split *sp;
    size_t sp_n, sp_cap;
    spans lv[TOK_MAX_STEPS + 1]; /* pieces produced by pre-tokenizer step k - 1 */
    int32_t *sid, *nx, *pv;      /* BPE symbols: id (-1: merged away), links */
    size_t sym_cap;
    cand *heap;
    size_t heap_n, heap_cap;
} enc;

static int oom(enc *e) {
    return e0_fail(e->err, E0_ENOMEM, "e0_tokenizer_encode: out of memory");
}

static int push_id(enc *e, int32_t id) {
    tok_ids *o = e->out;
    if (arr_reserve((void **)&o->v, &o->cap, o->n + 1, sizeof *o->v)) return oom(e);
    o->v[o->n++] = id;
    return 0;
}

static int push_split(enc *e, size_t s, size_t en, bool m) {
    if (arr_reserve((void **)&e->sp, &e->sp_cap, e->sp_n + 1, sizeof *e->sp)) return oom(e);
    e->sp[e->sp_n++] = (split){s, en, m};
    return 0;
}

static int push_span(enc *e, spans *l, size_t s, size_t en) {
    if (arr_reserve((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v)) return oom(e);
    l->v[l->n++] = (span){s, en};
    return 0;
}

static void enc_free(enc *e) {
    pcre2_match_data_free(e->md);
    tok_buf_free(&e->nb[0]);
    tok_buf_free(&e->nb[1]);
    tok_buf_free(&e->pfx);
    tok_buf_free(&e->word);
    free(e->sp);
    for (size_t k = 0; k <= e->t->n_pre; k++)
        free(e->lv[k].v);
    free(e->sid);
    free(e->nx);
    free(e->pv);
    free(e->heap);
}

/* ---- BPE -------------------------------------------------------------------- */

static bool merge_get(const tok_tokenizer *t, int32_t a, int32_t b, int32_t *rank, int32_t *id) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t mask = ((size_t)1 << t->merge_bits) - 1;
    for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> (64 - t->merge_bits);; i = (i + 1) & mask) {
        const tok_merge *m = &t->merges[i];
        if (m->key == key) {
            *rank = m->rank, *id = m->id;
            return true;
        }
        if (m->key == TOK_MERGE_EMPTY) return false;
    }
}

static bool cand_less(const cand *x, const cand *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void heap_push(enc *e, cand c) {
    cand *h = e->heap;
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(enc *e) {
    cand *h = e->heap, top = h[0], last = h[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_less(&h[c + 1], &h[c])) c++;
        if (!cand_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = last;
    return top;
}

static void try_pair(enc *e, int32_t i, int32_t j) {
    cand c = {.pos = i, .a = e->sid[i], .b = e->sid[j]};
    if (merge_get(e->t, c.a, c.b, &c.rank, &c.id)) heap_push(e, c);
}

static int grow_sym(enc *e, size_t n) {
    if (n <= e->sym_cap) return 0;
    if (n > INT32_MAX / 4)
        return e0_fail(e->err, E0_ERANGE, "e0_tokenizer_encode: a piece of %zu bytes is too long", n);
    /* sid, nx and pv share sym_cap (the heap, 3 candidates per symbol):
     * sid's growth picks the new capacity, the others are reserved to it, and
     * the recorded capacities change only once all four have grown (an array
     * that grew before another failed is just larger than recorded). */
    size_t cap = e->sym_cap, cap_nx = e->sym_cap, cap_pv = e->sym_cap, cap_h = e->heap_cap;
    if (arr_reserve((void **)&e->sid, &cap, n, sizeof *e->sid) ||
        arr_reserve((void **)&e->nx, &cap_nx, cap, sizeof *e->nx) ||
        arr_reserve((void **)&e->pv, &cap_pv, cap, sizeof *e->pv) ||
        arr_reserve((void **)&e->heap, &cap_h, 3 * cap, sizeof *e->heap))
        return oom(e);
    e->sym_cap = cap, e->heap_cap = cap_h;
    return 0;
}

/* The whole piece as one vocabulary entry (ignore_merges), -1 if none. */
static int32_t whole_word(enc *e, const uint8_t *u, size_t n) {
    e->word.n = 0;
    if (tok_buf_reserve(&e->word, 2 * n)) return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = tok_byte_cp(u[i]);
        if (cp < 0x80) {
            e->word.p[e->word.n++] = (char)cp;
        } else {
            e->word.p[e->word.n++] = (char)(0xC0 | cp >> 6);
            e->word.p[e->word.n++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    return tok_vocab_get(e->t, e->word.p, e->word.n);
}

/* BPE over the bytes of one piece; appends its ids. */
static int bpe(enc *e, const char *p, size_t n) {
    const tok_tokenizer *t = e->t;
    const uint8_t *u = (const uint8_t *)p;
    if (n == 1 && t->byte_id[u[0]] >= 0) return push_id(e, t->byte_id[u[0]]);
    if (t->ignore_merges) {
        int32_t id = whole_word(e, u, n);
        if (id >= 0) return push_id(e, id);
    }
    if (t->direct) {
        uint32_t h = tok_hash(u, n);
        for (size_t i = h & t->direct_mask;; i = (i + 1) & t->direct_mask) {
            const tok_vslot *v = &t->direct[i];
            if (v->id < 0) break;
            if (v->hash == h && v->len == n && !memcmp(t->arena + v->off, u, n))
                return push_id(e, v->id);
        }
    }
    int rc = grow_sym(e, n);
    if (rc) return rc;
    int32_t m = 0;
    bool in_unk = false;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[u[i]];
        if (id >= 0) {
            e->sid[m++] = id;
            in_unk = false;
        } else if (t->unk_id >= 0) {
            if (!(in_unk && t->fuse_unk)) e->sid[m++] = t->unk_id;
            in_unk = true;
        } else if (t->unk_missing) {
            return e0_fail(e->err, E0_EFORMAT,
                           "byte 0x%02x has no token and model.unk_token is not "
                           "in the vocabulary",
                           u[i]);
        } /* else dropped, as the library drops it */
    }
    if (m == 0) return 0;
    for (int32_t i = 0; i < m; i++)
        e->pv[i] = i - 1, e->nx[i] = i + 1;
    e->nx[m - 1] = -1;
    e->heap_n = 0;
    if ((size_t)m == n && t->bpair) { /* every symbol is its byte's token */
        for (int32_t i = 0; i + 1 < m; i++) {
            const int32_t *bp = t->bpair + 2 * ((size_t)u[i] << 8 | u[i + 1]);
            if (bp[0] >= 0) heap_push(e, (cand){bp[0], i, e->sid[i], e->sid[i + 1], bp[1]});
        }
    } else {
        for (int32_t i = 0; i + 1 < m; i++)
            try_pair(e, i, i + 1);
    }
    while (e->heap_n) {
        cand c = heap_pop(e);
        int32_t i = c.pos, j = e->nx[i];
        if (j < 0 || e->sid[i] != c.a || e->sid[j] != c.b) continue; /* stale */
        e->sid[i] = c.id;
        e->sid[j] = -1;
        e->nx[i] = e->nx[j];
        if (e->nx[i] >= 0) e->pv[e->nx[i]] = i;
        if (e->pv[i] >= 0) try_pair(e, e->pv[i], i);
        if (e->nx[i] >= 0) try_pair(e, i, e->nx[i]);
    }
    for (int32_t i = 0; i >= 0; i = e->nx[i])
        if ((rc = push_id(e, e->sid[i]))) return rc;
    return 0;
}

/* ---- Pre-tokenizers ------------------------------------------------------------ */

static int regex_splits(enc *e, const pcre2_code *re, const char *p, size_t n) {
    re_iter it;
    re_start(&it, e->t, re, e->md, p, n);
    size_t prev = 0, ms, me;
    int rc;
    while ((rc = re_next(&it, &ms, &me, e->err)) == 1) {
        if (prev != ms && (rc = push_split(e, prev, ms, false))) return rc;
        if ((rc = push_split(e, ms, me, true))) return rc;
        prev = me;
    }
    if (rc < 0) return rc;
    return prev != n ? push_split(e, prev, n, false) : 0;
}

static int digit_splits(enc *e, const char *p, size_t n) {
    size_t last = 0;
    int rc;
    for (size_t i = 0; i < n;) {
        size_t len;
        uint32_t cp = cp_at(p + i, &len);
        if (is_numeric(cp)) {
            if (last < i && (rc = push_split(e, last, i, false))) return rc;
            if ((rc = push_split(e, i, i + len, true))) return rc;
            last = i + len;
        }
        i += len;
    }
    return last < n ? push_split(e, last, n, false) : 0;
}

/* e->sp (covering the piece) -> pieces in `out`, by the library's rules. */
static int apply_behavior(enc *e, tok_behavior b, bool invert, spans *out) {
    out->n = 0;
    bool prev = false;
    int rc;
    if (b == TB_MERGED_NEXT) {
        for (size_t k = e->sp_n; k-- > 0;) {
            split s = e->sp[k];
            bool m = s.m != invert;
            if (m && !prev && out->n)
                out->v[out->n - 1].s = s.s;
            else if ((rc = push_span(e, out, s.s, s.e)))
                return rc;
            prev = m;
        }
        for (size_t i = 0, j = out->n; i + 1 < j; i++, j--) {
            span x = out->v[i];
            out->v[i] = out->v[j - 1], out->v[j - 1] = x;
        }
        return 0;
    }
    for (size_t k = 0; k < e->sp_n; k++) {
        split s = e->sp[k];
        bool m = s.m != invert;
        switch (b) {
        case TB_REMOVED:
            if (!m && (rc = push_span(e, out, s.s, s.e))) return rc;
            break;
        case TB_MERGED_PREV:
            if (m && !prev && out->n)
                out->v[out->n - 1].e = s.e;
            else if ((rc = push_span(e, out, s.s, s.e)))
                return rc;
            break;
        case TB_CONTIGUOUS:
            if (m == prev && out->n)
                out->v[out->n - 1].e = s.e;
            else if ((rc = push_span(e, out, s.s, s.e)))
                return rc;
            break;
        default: /* TB_ISOLATED */
            if ((rc = push_span(e, out, s.s, s.e))) return rc;
            break;
        }
        prev = m;
    }
    return 0;
}

/* The last step: optional prefix space, optional GPT-2 regex, then BPE. */
static int byte_level(enc *e, const tok_pre *st, const char *p, size_t n) {
    if (st->add_prefix_space && p[0] != ' ') {
        e->pfx.n = 0;
        if (tok_buf_put(&e->pfx, " ", 1) || tok_buf_put(&e->pfx, p, n)) return oom(e);
        p = e->pfx.p, n = e->pfx.n;
    }
    if (!st->re) return bpe(e, p, n);
    e->sp_n = 0;
    int rc = regex_splits(e, st->re, p, n);
    for (size_t k = 0; !rc && k < e->sp_n; k++)
        rc = bpe(e, p + e->sp[k].s, e->sp[k].e - e->sp[k].s);
    return rc;
}

/* Pre-tokenizer step k on one piece (non-empty), then the later steps on
 * each of its pieces. */
static int pretok(enc *e, size_t k, const char *p, size_t n) {
    const tok_pre *st = &e->t->pre[k];
    if (st->kind == TP_BYTELEVEL) return byte_level(e, st, p, n);
    e->sp_n = 0;
    int rc = st->kind == TP_SPLIT ? regex_splits(e, st->re, p, n) : digit_splits(e, p, n);
    if (rc || (rc = apply_behavior(e, st->behavior, st->invert, &e->lv[k + 1]))) return rc;
    for (size_t i = 0; i < e->lv[k + 1].n; i++) {
        span s = e->lv[k + 1].v[i];
        if (s.e > s.s && (rc = pretok(e, k + 1, p + s.s, s.e - s.s))) return rc;
    }
    return 0;
}

/* ---- Speed-up tables ------------------------------------------------------------ */

static void bit_set(uint8_t *b, uint32_t i) {
    b[i >> 3] |= (uint8_t)(1u << (i & 7));
}
static bool bit_get(const uint8_t *b, uint32_t i) {
    return b[i >> 3] >> (i & 7) & 1;
}

/* Code points below TOK_NF_TABLE that NFC (compat: NFKC) leaves alone in
 * any context: combining class 0, not the second half of any canonical
 * composition, and unchanged by the form on its own. A string of inert code
 * points is already normalized. The tables depend only on utf8proc's data:
 * built once per process, read-only afterwards. */
static uint8_t nf_tables[2][TOK_NF_TABLE / 8];
static bool nf_tables_ok;
static pthread_once_t nf_once = PTHREAD_ONCE_INIT;

static void build_nf_tables(void) {
    static uint8_t second[TOK_NF_TABLE / 8];
    for (uint32_t cp = 0; cp < TOK_NF_TABLE; cp++) {
        const utf8proc_property_t *pr = utf8proc_get_property((utf8proc_int32_t)cp);
        if (pr->decomp_seqindex == UINT16_MAX || pr->decomp_type != 0) continue;
        utf8proc_int32_t d[32];
        int bc = 0;
        utf8proc_ssize_t k =
            utf8proc_decompose_char((utf8proc_int32_t)cp, d, 32, UTF8PROC_DECOMPOSE, &bc);
        for (utf8proc_ssize_t j = 1; j < k && j < 32; j++)
            if (d[j] >= 0 && (uint32_t)d[j] < TOK_NF_TABLE) bit_set(second, (uint32_t)d[j]);
    }
    for (uint32_t cp = 0x1161; cp <= 0x1175; cp++)
        bit_set(second, cp); /* Hangul V */
    for (uint32_t cp = 0x11A8; cp <= 0x11C2; cp++)
        bit_set(second, cp); /* Hangul T */
    tok_buf o = {0};
    for (int compat = 0; compat < 2; compat++) {
        tok_norm st = {.kind = compat ? TN_NFKC : TN_NFC};
        for (uint32_t cp = 0; cp < TOK_NF_TABLE; cp++) {
            if (cp >= 0xD800 && cp < 0xE000) continue;
            const utf8proc_property_t *pr = utf8proc_get_property((utf8proc_int32_t)cp);
            if (pr->combining_class != 0 || bit_get(second, cp)) continue;
            if (pr->decomp_seqindex != UINT16_MAX && (compat || pr->decomp_type == 0)) {
                uint8_t u[4];
                utf8proc_ssize_t ul = utf8proc_encode_char((utf8proc_int32_t)cp, u);
                o.n = 0;
                if (nf_map(&st, (const char *)u, (size_t)ul, &o, NULL)) goto out;
                if (o.n != (size_t)ul || memcmp(o.p, u, o.n)) continue;
            }
            bit_set(nf_tables[compat], cp);
        }
    }
    nf_tables_ok = true;
out:
    tok_buf_free(&o);
}

int tok_norm_setup(tok_tokenizer *t, char *err) {
    bool need[2] = {false, false};
    for (size_t k = 0; k < t->n_norm; k++) {
        need[0] |= t->norm[k].kind == TN_NFC;
        need[1] |= t->norm[k].kind == TN_NFKC;
    }
    if (need[0] || need[1]) {
        pthread_once(&nf_once, build_nf_tables);
        if (!nf_tables_ok)
            return e0_fail(err, E0_ENOMEM, "out of memory for the normalizer tables");
        for (int w = 0; w < 2; w++)
            t->nf_inert[w] = need[w] ? nf_tables[w] : NULL;
    }
    return 0;
}

int tok_build_fast(tok_tokenizer *t, char *err) {
    int32_t *bp = malloc(65536 * 2 * sizeof *bp);
    if (!bp) return e0_fail(err, E0_ENOMEM, "out of memory");
    for (size_t i = 0; i < 65536; i++) {
        int32_t a = t->byte_id[i >> 8], b = t->byte_id[i & 255];
        bp[2 * i] = -1, bp[2 * i + 1] = -1;
        if (a >= 0 && b >= 0) merge_get(t, a, b, &bp[2 * i], &bp[2 * i + 1]);
    }
    t->bpair = bp;
    /* The direct table: every token of two or more bytes that BPE over its
     * own bytes gives back as one token. A piece equal to those bytes gets
     * that id without running BPE: the same computation, done at load. */
    size_t n = 0;
    for (int32_t id = 0; id < t->n_ent; id++)
        n += t->ent[id].dec_len >= 2;
    size_t cap = 16;
    while (cap < 2 * n + 1)
        cap <<= 1;
    tok_vslot *d = malloc(cap * sizeof *d);
    if (!d) return e0_fail(err, E0_ENOMEM, "out of memory");
    for (size_t i = 0; i < cap; i++)
        d[i].id = -1;
    tok_ids ids = {0};
    enc e = {.t = t, .out = &ids, .err = err};
    int rc = 0;
    for (int32_t id = 0; id < t->n_ent && !rc; id++) {
        const tok_entry *en = &t->ent[id];
        if (en->dec_len < 2) continue;
        ids.n = 0;
        if ((rc = bpe(&e, t->arena + en->dec_off, en->dec_len))) break;
        if (ids.n != 1 || ids.v[0] != id) continue;
        uint32_t h = tok_hash(t->arena + en->dec_off, en->dec_len);
        size_t i = h & (cap - 1);
        while (d[i].id >= 0)
            i = (i + 1) & (cap - 1);
        d[i] = (tok_vslot){en->dec_off, en->dec_len, h, id};
    }
    enc_free(&e);
    e0_ids_free(&ids);
    if (rc) {
        free(d);
        return rc;
    }
    t->direct = d, t->direct_mask = cap - 1;
    return 0;
}

/* ---- Added tokens -------------------------------------------------------------- */

typedef int (*gap_fn)(enc *e, const char *s, size_t n);

/* Cuts the tokens of `ms` out of s[0..n) (valid UTF-8); the text between
 * them goes to `gap`. */
static int added_split(enc *e, const tok_matchset *ms, const char *s, size_t n, gap_fn gap) {
    const tok_tokenizer *t = e->t;
    if (!ms->n) return n ? gap(e, s, n) : 0;
    size_t done = 0, pos = 0;
    int rc;
    while (pos < n) {
        const tok_added *a = NULL;
        size_t q;
        for (q = pos; q < n && !a; q++) {
            uint8_t b = (uint8_t)s[q];
            for (uint32_t i = ms->start[b]; i < ms->start[b + 1]; i++) {
                const tok_added *c = &t->added[ms->idx[i]];
                if (c->len <= n - q && !memcmp(t->arena + c->off, s + q, c->len)) {
                    a = c;
                    break;
                }
            }
        }
        if (!a) break;
        size_t start = q - 1, stop = start + a->len;
        pos = stop;
        if (a->special && (e->flags & E0_ENCODE_SPECIAL_AS_TEXT)) continue;
        if (a->single_word) {
            size_t at;
            if (start > 0 && is_word(cp_before(s, start, &at))) continue;
            if (stop < n && is_word(cp_at(s + stop, &at))) continue;
        }
        if (a->lstrip) {
            size_t at;
            while (start > done && is_ws(cp_before(s, start, &at)))
                start = at;
        }
        if (a->rstrip) {
            size_t len;
            while (stop < n && is_ws(cp_at(s + stop, &len)))
                stop += len;
            pos = stop;
        }
        if (done < start && (rc = gap(e, s + done, start - done))) return rc;
        if ((rc = push_id(e, a->id))) return rc;
        done = stop;
    }
    return done < n ? gap(e, s + done, n - done) : 0;
}

static int gap_normalized(enc *e, const char *s, size_t n) {
    return pretok(e, 0, s, n);
}

static int gap_raw(enc *e, const char *s, size_t n) {
    const char *p = s;
    size_t m = n;
    if (e->t->n_norm) {
        int rc = tok_normalize(e->t, s, n, e->nb, e->md, &p, &m, e->err);
        if (rc) return rc;
    }
    return added_split(e, &e->t->match_norm, p, m, gap_normalized);
}

int e0_tokenizer_encode(const tok_tokenizer *t, const char *text, size_t len, unsigned flags, tok_ids *out,
               char *err) {
    if (!t || !out || (!text && len))
        return e0_fail(err, E0_EINVAL, "e0_tokenizer_encode: no tokenizer, text or output");
    enc e = {.t = t, .flags = flags, .out = out, .err = err};
    size_t n0 = out->n;
    int rc = 0;
    e.md = pcre2_match_data_create(1, NULL);
    if (!e.md) rc = oom(&e);
    const uint8_t *u = (const uint8_t *)text;
    for (size_t i = 0; i < len && !rc;) {
        size_t v = tok_utf8_valid(u + i, len - i);
        if (v) {
            rc = added_split(&e, &t->match_raw, text + i, v, gap_raw);
            i += v;
            continue;
        }
        size_t j = i + 1; /* a run of invalid bytes: one piece, raw bytes */
        while (j < len && !utf8_seq(u + j, len - j))
            j++;
        rc = bpe(&e, text + i, j - i);
        i = j;
    }
    enc_free(&e);
    if (rc) out->n = n0;
    return rc;
}

void e0_ids_free(tok_ids *ids) {
    if (!ids) return;
    free(ids->v);
    *ids = (tok_ids){0};
}

/* ---- Decoding ------------------------------------------------------------------- */

static const tok_entry *entry(const tok_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_ent && t->ent[id].flags ? &t->ent[id] : NULL;
}

void tok_stream_init(tok_stream *s, unsigned flags) {
    *s = (tok_stream){.flags = flags};
}

size_t tok_stream_max(const tok_tokenizer *t) {
    return 3 * t->max_dec_len + 9;
}

/* Feeds bytes through a UTF-8 validator that emits complete characters and
 * one U+FFFD per maximal ill-formed subsequence. Writes at most
 * 3 * (n + s->npend) bytes. */
static size_t lossy_feed(tok_stream *s, const uint8_t *b, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = b[i];
        if (s->need) {
            if (c >= s->lo && c <= s->hi) {
                s->pend[s->npend++] = c;
                s->lo = 0x80, s->hi = 0xBF;
                if (--s->need == 0) {
                    memcpy(out + k, s->pend, s->npend);
                    k += s->npend;
                    s->npend = 0;
                }
                continue;
            }
            memcpy(out + k, "\xEF\xBF\xBD", 3); /* the held bytes end here */
            k += 3;
            s->need = 0, s->npend = 0;
        }
        if (c < 0x80) {
            out[k++] = (char)c;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            s->need = 1, s->lo = 0x80, s->hi = 0xBF;
        } else if (c >= 0xE0 && c <= 0xEF) {
            s->need = 2, s->lo = c == 0xE0 ? 0xA0 : 0x80, s->hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            s->need = 3, s->lo = c == 0xF0 ? 0x90 : 0x80, s->hi = c == 0xF4 ? 0x8F : 0xBF;
        } else {
            memcpy(out + k, "\xEF\xBF\xBD", 3);
            k += 3;
            continue;
        }
        s->pend[0] = c;
        s->npend = 1;
    }
    return k;
}

int tok_stream_push(const tok_tokenizer *t, tok_stream *s, int32_t id, char *out, size_t cap,
                    size_t *n, char *err) {
    *n = 0;
    const tok_entry *en = entry(t, id);
    if (!en)
        return e0_fail(err, E0_ERANGE, "token id %d is not in the tokenizer (ids 0..%d)", id,
                       t ? t->n_ent - 1 : -1);
    if ((en->flags & TOK_F_SPECIAL) && (s->flags & E0_DECODE_SKIP_SPECIAL)) return 0;
    if (cap < 3 * (size_t)en->dec_len + 9)
        return e0_fail(err, E0_EINVAL, "tok_stream_push: buffer of %zu bytes, need %zu", cap,
                       3 * (size_t)en->dec_len + 9);
    *n = lossy_feed(s, (const uint8_t *)t->arena + en->dec_off, en->dec_len, out);
    return 0;
}

size_t tok_stream_flush(tok_stream *s, char *out) {
    size_t k = 0;
    if (s->need) {
        memcpy(out, "\xEF\xBF\xBD", 3);
        k = 3;
    }
    *s = (tok_stream){.flags = s->flags};
    return k;
}

int e0_tokenizer_decode(const tok_tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char **out,
               size_t *out_len, char *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || (!ids && n)) return e0_fail(err, E0_EINVAL, "e0_tokenizer_decode: no tokenizer or ids");
    tok_buf b = {0};
    tok_stream s;
    tok_stream_init(&s, flags);
    for (size_t i = 0; i < n; i++) {
        const tok_entry *en = entry(t, ids[i]);
        if (!en) {
            tok_buf_free(&b);
            return e0_fail(err, E0_ERANGE, "ids[%zu] = %d is not in the tokenizer (ids 0..%d)", i,
                           ids[i], t->n_ent - 1);
        }
        size_t need = 3 * (size_t)en->dec_len + 9, k;
        if (tok_buf_reserve(&b, need)) {
            tok_buf_free(&b);
            return e0_fail(err, E0_ENOMEM, "e0_tokenizer_decode: out of memory");
        }
        tok_stream_push(t, &s, ids[i], b.p + b.n, need, &k, NULL);
        b.n += k;
    }
    if (tok_buf_reserve(&b, 4)) {
        tok_buf_free(&b);
        return e0_fail(err, E0_ENOMEM, "e0_tokenizer_decode: out of memory");
    }
    b.n += tok_stream_flush(&s, b.p + b.n);
    b.p[b.n] = 0;
    *out = b.p;
    if (out_len) *out_len = b.n;
    return 0;
}

/* ---- Lookups --------------------------------------------------------------------- */

int32_t e0_tokenizer_vocab_size(const tok_tokenizer *t) {
    return t->n_ent;
}

int32_t tok_token_id(const tok_tokenizer *t, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < t->n_added; i++) {
        const tok_entry *en = &t->ent[t->added[i].id];
        if (en->str_len == n && !memcmp(t->arena + en->str_off, s, n)) return t->added[i].id;
    }
    return tok_vocab_get(t, s, n);
}

bool tok_is_token(const tok_tokenizer *t, int32_t id) {
    return entry(t, id) != NULL;
}

bool tok_is_added(const tok_tokenizer *t, int32_t id) {
    const tok_entry *en = entry(t, id);
    return en && (en->flags & TOK_F_ADDED);
}

bool tok_is_special(const tok_tokenizer *t, int32_t id) {
    const tok_entry *en = entry(t, id);
    return en && (en->flags & TOK_F_SPECIAL);
}

const char *tok_token_str(const tok_tokenizer *t, int32_t id, size_t *len) {
    const tok_entry *en = entry(t, id);
    if (len) *len = en ? en->str_len : 0;
    return en ? t->arena + en->str_off : NULL;
}

const uint8_t *tok_token_bytes(const tok_tokenizer *t, int32_t id, size_t *len) {
    const tok_entry *en = entry(t, id);
    if (len) *len = en ? en->dec_len : 0;
    return en ? (const uint8_t *)t->arena + en->dec_off : NULL;
}
