/* ECMAScript regular expressions to grammar rules (schema_regex.h).
 *
 * Two passes: a recursive-descent parser builds a small syntax tree (nodes
 * in one array, sets of code points as sorted ranges in another), then
 * each node becomes a rule. Details that are easy to get wrong:
 *  - a repetition without an upper bound of something that can match the
 *    empty string ((a*)*, (a|)+) would make a left-recursive rule, which
 *    gram_compile refuses: it is written as the counted copies followed by
 *    the star of the non-empty version of its body (nonempty() below);
 *  - counts multiply ((a{100}){100} is 10,000 characters), so the expanded
 *    size is computed before any rule is made and capped;
 *  - surrogates (U+D800..U+DFFF) are never produced: they are not valid
 *    UTF-8, and a lone \uD800 escape is refused by some JSON parsers;
 *  - inside a JSON string '"', '\' and the control characters must be
 *    escaped; in the raw form they are written as they are.
 */
#include "text/schema_regex.h"

#include "util/arr.h"
#include "util/err.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CP_MAX 0x10FFFFu

enum { N_SET, N_CAT, N_ALT, N_REP, N_EMPTY, N_BOL, N_EOL };

typedef struct {
    uint8_t kind;
    int32_t first, next; /* CAT / ALT children, siblings: -1 ends */
    int32_t child;       /* REP */
    int32_t min, max;    /* REP: max < 0 unbounded; SET: ranges [min, min + max) */
    int32_t rule, nn;    /* emitted rules, -1 not yet (nn -2: no non-empty version) */
} rxnode;

typedef struct {
    uint32_t lo, hi;
} cprange;

typedef struct {
    const char *s;
    size_t at, len;
    rx_form form;
    rxnode *n;
    int32_t n_nodes;
    size_t cap_nodes;
    cprange *r;
    int32_t n_r;
    size_t cap_r;
    int rc;
    char *err;
    gram_builder *b;
    int32_t any; /* the rule of one unconstrained character */
} rx;

static int rx_fail(rx *p, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int rx_fail(rx *p, int code, const char *fmt, ...) {
    if (p->rc) return -1;
    char msg[E0_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->rc = code;
    e0_fail(p->err, code, "%s", msg);
    return -1;
}

static int32_t node_new(rx *p, int kind) {
    if (p->rc) return -1;
    if (arr_reserve((void **)&p->n, &p->cap_nodes, (size_t)p->n_nodes + 1, sizeof *p->n))
        return rx_fail(p, E0_ENOMEM, "out of memory");
    p->n[p->n_nodes] = (rxnode){(uint8_t)kind, -1, -1, -1, 0, 0, -1, -1};
    return p->n_nodes++;
}

/* ---- sets of code points -------------------------------------------------------
 * A set under construction is the ranges from `base` to p->n_r; set_close
 * sorts and merges them, takes out the surrogates and stores the set as a
 * node. */

static int range_add(rx *p, uint32_t lo, uint32_t hi) {
    if (p->rc) return -1;
    if (arr_reserve((void **)&p->r, &p->cap_r, (size_t)p->n_r + 1, sizeof *p->r))
        return rx_fail(p, E0_ENOMEM, "out of memory");
    p->r[p->n_r++] = (cprange){lo, hi};
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Sorts and merges ranges [base, n_r) in place. */
static void set_norm(rx *p, int32_t base) {
    int32_t n = p->n_r - base, k = 0;
    cprange *r = p->r + base;
    qsort(r, (size_t)n, sizeof *r, cmp_range);
    for (int32_t i = 0; i < n; i++) {
        if (k && r[i].lo <= r[k - 1].hi + 1) {
            if (r[i].hi > r[k - 1].hi) r[k - 1].hi = r[i].hi;
        } else {
            r[k++] = r[i];
        }
    }
    p->n_r = base + k;
}

/* Replaces ranges [base, n_r) by their complement in [0, CP_MAX]. */
static void set_negate(rx *p, int32_t base) {
    set_norm(p, base);
    int32_t n = p->n_r - base;
    cprange *tmp = malloc(((size_t)n + 1) * sizeof *tmp);
    if (!tmp) {
        rx_fail(p, E0_ENOMEM, "out of memory");
        return;
    }
    memcpy(tmp, p->r + base, (size_t)n * sizeof *tmp);
    p->n_r = base;
    uint32_t next = 0;
    for (int32_t i = 0; i < n; i++) {
        if (tmp[i].lo > next) range_add(p, next, tmp[i].lo - 1);
        next = tmp[i].hi + 1;
    }
    if (next <= CP_MAX) range_add(p, next, CP_MAX);
    free(tmp);
}

/* Takes code points `lo..hi` out of ranges [base, n_r) (normalised). */
static void set_remove(rx *p, int32_t base, uint32_t lo, uint32_t hi) {
    int32_t n = p->n_r;
    for (int32_t i = base; i < n && !p->rc; i++) {
        cprange *r = &p->r[i];
        if (r->hi < lo || r->lo > hi) continue;
        uint32_t a = r->lo, z = r->hi;
        r->lo = 1, r->hi = 0; /* emptied, dropped below */
        if (a < lo) range_add(p, a, lo - 1);
        if (z > hi) range_add(p, hi + 1, z);
    }
    int32_t k = base;
    for (int32_t i = base; i < p->n_r; i++)
        if (p->r[i].lo <= p->r[i].hi) p->r[k++] = p->r[i];
    p->n_r = k;
    set_norm(p, base);
}

/* wild: a set the pattern did not spell out (".", negations), which in
 * the raw form leaves out '<'. */
static int32_t set_close(rx *p, int32_t base, bool wild) {
    set_norm(p, base);
    set_remove(p, base, 0xD800, 0xDFFF);
    if (wild && p->form == RX_FORM_RAW) set_remove(p, base, '<', '<');
    if (p->n_r == base) return rx_fail(p, E0_EUNSUPPORTED, "a character class that matches no character");
    int32_t id = node_new(p, N_SET);
    if (id < 0) return -1;
    p->n[id].min = base;
    p->n[id].max = p->n_r - base;
    return id;
}

static void add_class_escape(rx *p, int c) {
    switch (c | 0x20) {
    case 'd':
        range_add(p, '0', '9');
        break;
    case 'w':
        range_add(p, '0', '9'), range_add(p, 'A', 'Z'), range_add(p, '_', '_'), range_add(p, 'a', 'z');
        break;
    default: { /* s: ECMAScript's white space and line terminators */
        static const uint32_t WS[][2] = {{9, 13},         {32, 32},         {0xa0, 0xa0},     {0x1680, 0x1680},
                                         {0x2000, 0x200a}, {0x2028, 0x2029}, {0x202f, 0x202f}, {0x205f, 0x205f},
                                         {0x3000, 0x3000}, {0xfeff, 0xfeff}};
        for (size_t i = 0; i < sizeof WS / sizeof *WS; i++)
            range_add(p, WS[i][0], WS[i][1]);
    }
    }
}

/* ---- the parser ------------------------------------------------------------------ */

static bool at_end(const rx *p) { return p->at >= p->len; }
static int peek(const rx *p) { return at_end(p) ? -1 : (unsigned char)p->s[p->at]; }

/* One UTF-8 code point of the pattern (invalid bytes are refused). */
static int32_t next_cp(rx *p) {
    const unsigned char *s = (const unsigned char *)p->s + p->at;
    size_t left = p->len - p->at;
    uint32_t c = s[0];
    int n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
    if (!n || (size_t)n > left) return rx_fail(p, E0_EINVAL, "invalid UTF-8 at byte %zu", p->at);
    if (n > 1) c &= 0x3fu >> (n - 1);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return rx_fail(p, E0_EINVAL, "invalid UTF-8 at byte %zu", p->at);
        c = c << 6 | (s[i] & 0x3f);
    }
    static const uint32_t MIN[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < MIN[n] || c > CP_MAX) return rx_fail(p, E0_EINVAL, "invalid UTF-8 at byte %zu", p->at);
    p->at += (size_t)n;
    return (int32_t)c;
}

static int hexval(int c) {
    return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* n hex digits, or -1 (nothing consumed). */
static int32_t hex_digits(rx *p, int n) {
    if (p->len - p->at < (size_t)n) return -1;
    int32_t v = 0;
    for (int i = 0; i < n; i++) {
        int h = hexval((unsigned char)p->s[p->at + (size_t)i]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    p->at += (size_t)n;
    return v;
}

/* After a backslash: a code point (>= 0), or -2 - the class letter for
 * \d \w \s \D \W \S, or -1 after an error. in_class: inside [...]. */
static int32_t parse_escape(rx *p, bool in_class) {
    if (at_end(p)) return rx_fail(p, E0_EINVAL, "a backslash ends the pattern");
    int c = peek(p);
    if (c > 0 && strchr("dwsDWS", c)) return p->at++, -2 - c;
    if (c >= '1' && c <= '9') return rx_fail(p, E0_EUNSUPPORTED, "back-references (\\%c) are not supported", c);
    if (c == 'k' && !in_class) return rx_fail(p, E0_EUNSUPPORTED, "named back-references (\\k) are not supported");
    if (c == 'b' && !in_class) return rx_fail(p, E0_EUNSUPPORTED, "word boundaries (\\b) are not supported");
    if (c == 'B') return rx_fail(p, E0_EUNSUPPORTED, "word boundaries (\\B) are not supported");
    if (c == 'p' || c == 'P') return rx_fail(p, E0_EUNSUPPORTED, "Unicode property escapes (\\%c) are not supported", c);
    p->at++;
    static const char SIMPLE[] = "t\tn\nr\rv\vf\fb\b";
    for (const char *e = SIMPLE; *e; e += 2)
        if (c == *e && (c != 'b' || in_class)) return (unsigned char)e[1];
    if (c == '0') return 0;
    if (c == 'c') {
        int l = peek(p);
        if ((l | 0x20) >= 'a' && (l | 0x20) <= 'z') return p->at++, l % 32;
        return '\\'; /* Annex B: "\c" not followed by a letter is a backslash and a 'c' */
    }
    if (c == 'x') {
        int32_t v = hex_digits(p, 2);
        return v >= 0 ? v : 'x';
    }
    if (c == 'u') {
        if (peek(p) == '{') {
            size_t save = p->at++;
            uint32_t v = 0;
            int nd = 0, h;
            while ((h = hexval(peek(p))) >= 0 && nd < 8)
                v = v * 16 + (uint32_t)h, p->at++, nd++;
            if (nd && peek(p) == '}' && v <= CP_MAX) return p->at++, (int32_t)v;
            p->at = save;
            return 'u';
        }
        int32_t v = hex_digits(p, 4);
        if (v >= 0xD800 && v <= 0xDBFF && p->len - p->at >= 6 && p->s[p->at] == '\\' && p->s[p->at + 1] == 'u') {
            size_t save = p->at;
            p->at += 2;
            int32_t lo = hex_digits(p, 4);
            if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
            p->at = save;
        }
        return v >= 0 ? v : 'u';
    }
    p->at--;
    return next_cp(p); /* an identity escape: \. \* \/ ... */
}

static int32_t parse_class(rx *p) {
    int32_t base = p->n_r;
    bool neg = peek(p) == '^';
    if (neg) p->at++;
    while (!p->rc) {
        if (at_end(p)) return rx_fail(p, E0_EINVAL, "a '[' without its ']'");
        if (peek(p) == ']') {
            p->at++;
            break;
        }
        int32_t lo;
        if (peek(p) == '\\') {
            p->at++;
            lo = parse_escape(p, true);
        } else {
            lo = next_cp(p);
        }
        if (lo == -1) return -1;
        if (lo <= -2) {
            int32_t sub = p->n_r;
            add_class_escape(p, -2 - lo);
            if ((-2 - lo) < 'a') set_negate(p, sub);
            continue;
        }
        if (peek(p) == '-' && p->at + 1 < p->len && p->s[p->at + 1] != ']') {
            p->at++;
            int32_t hi;
            if (peek(p) == '\\') {
                p->at++;
                hi = parse_escape(p, true);
            } else {
                hi = next_cp(p);
            }
            if (hi == -1) return -1;
            if (hi <= -2) { /* [a-\d]: Annex B reads the '-' as itself */
                range_add(p, (uint32_t)lo, (uint32_t)lo), range_add(p, '-', '-');
                int32_t sub = p->n_r;
                add_class_escape(p, -2 - hi);
                if ((-2 - hi) < 'a') set_negate(p, sub);
                continue;
            }
            if (hi < lo) return rx_fail(p, E0_EINVAL, "a class range out of order");
            range_add(p, (uint32_t)lo, (uint32_t)hi);
        } else {
            range_add(p, (uint32_t)lo, (uint32_t)lo);
        }
    }
    if (p->rc) return -1;
    if (neg) set_negate(p, base);
    if (!neg && p->n_r == base) return rx_fail(p, E0_EUNSUPPORTED, "the empty class [] matches no character");
    return set_close(p, base, neg);
}

static int32_t parse_alt(rx *p, int depth);

/* A decimal count of a quantifier; -1 when there is none. */
static int32_t parse_count(rx *p) {
    int32_t v = -1;
    while (peek(p) >= '0' && peek(p) <= '9') {
        int d = peek(p) - '0';
        v = v < 0 ? d : v > 1000000 ? v : v * 10 + d;
        p->at++;
    }
    return v;
}

/* After '{': {n}, {n,}, {n,m} into min/max; false (nothing consumed) when
 * it is not a quantifier (then '{' is a literal, as Annex B says). */
static bool parse_braces(rx *p, int32_t *min, int32_t *max) {
    size_t save = p->at;
    p->at++;
    int32_t a = parse_count(p), b = a;
    if (a >= 0 && peek(p) == ',') {
        p->at++;
        b = parse_count(p);
    }
    if (a < 0 || peek(p) != '}') {
        p->at = save;
        return false;
    }
    p->at++;
    *min = a, *max = b;
    return true;
}

static int32_t parse_atom(rx *p, int depth) {
    int c = peek(p);
    int32_t base = p->n_r;
    switch (c) {
    case '(': {
        p->at++;
        if (peek(p) == '?') {
            p->at++;
            int k = peek(p);
            if (k == ':') {
                p->at++;
            } else if (k == '<' && p->at + 1 < p->len && p->s[p->at + 1] != '=' && p->s[p->at + 1] != '!') {
                const char *close = memchr(p->s + p->at, '>', p->len - p->at);
                if (!close) return rx_fail(p, E0_EINVAL, "a group name without its '>'");
                p->at = (size_t)(close - p->s) + 1;
            } else if (k == '=' || k == '!' || k == '<') {
                return rx_fail(p, E0_EUNSUPPORTED, "lookahead and lookbehind ((?=, (?!, (?<=, (?<!) are not supported");
            } else {
                return rx_fail(p, E0_EINVAL, "an unknown group form '(?%c'", k < 0 ? ' ' : k);
            }
        }
        int32_t g = parse_alt(p, depth + 1);
        if (g < 0) return -1;
        if (peek(p) != ')') return rx_fail(p, E0_EINVAL, "a '(' without its ')'");
        p->at++;
        return g;
    }
    case '[':
        p->at++;
        return parse_class(p);
    case '.':
        p->at++;
        range_add(p, '\n', '\n'), range_add(p, '\r', '\r'), range_add(p, 0x2028, 0x2029);
        set_negate(p, base);
        return set_close(p, base, true);
    case '^':
        return p->at++, node_new(p, N_BOL);
    case '$':
        return p->at++, node_new(p, N_EOL);
    case '*':
    case '+':
    case '?':
        return rx_fail(p, E0_EINVAL, "'%c' has nothing to repeat", c);
    case '{': {
        int32_t a, b;
        if (parse_braces(p, &a, &b)) return rx_fail(p, E0_EINVAL, "a count has nothing to repeat");
        p->at++;
        range_add(p, '{', '{');
        return set_close(p, base, false);
    }
    case ')':
        return rx_fail(p, E0_EINVAL, "a ')' without its '('");
    case '\\': {
        p->at++;
        int32_t e = parse_escape(p, false);
        if (e == -1) return -1;
        if (e <= -2) {
            add_class_escape(p, -2 - e);
            if ((-2 - e) < 'a') set_negate(p, base);
            return set_close(p, base, (-2 - e) < 'a');
        }
        range_add(p, (uint32_t)e, (uint32_t)e);
        return set_close(p, base, false);
    }
    default: {
        int32_t cp = next_cp(p);
        if (cp < 0) return -1;
        range_add(p, (uint32_t)cp, (uint32_t)cp);
        return set_close(p, base, false);
    }
    }
}

/* An atom and its quantifiers. */
static int32_t parse_piece(rx *p, int depth) {
    int32_t a = parse_atom(p, depth);
    while (a >= 0 && !p->rc) {
        int c = peek(p);
        int32_t min, max;
        if (c == '*') min = 0, max = -1, p->at++;
        else if (c == '+') min = 1, max = -1, p->at++;
        else if (c == '?') min = 0, max = 1, p->at++;
        else if (c == '{' && parse_braces(p, &min, &max)) (void)0;
        else break;
        if (peek(p) == '?') p->at++; /* lazy: the same strings */
        if (p->n[a].kind == N_BOL || p->n[a].kind == N_EOL) return rx_fail(p, E0_EINVAL, "an anchor cannot repeat");
        if (max >= 0 && max < min) return rx_fail(p, E0_EINVAL, "a count {n,m} with m below n");
        if (min > GRAM_MAX_REP || (max >= 0 && max - min > GRAM_MAX_REP))
            return rx_fail(p, E0_ERANGE, "a count above %d", GRAM_MAX_REP);
        int32_t r = node_new(p, N_REP);
        if (r < 0) return -1;
        p->n[r].child = a, p->n[r].min = min, p->n[r].max = max;
        a = r;
    }
    return p->rc ? -1 : a;
}

static int32_t parse_cat(rx *p, int depth) {
    int32_t cat = node_new(p, N_CAT), last = -1;
    while (cat >= 0 && !at_end(p) && peek(p) != '|' && peek(p) != ')') {
        int32_t x = parse_piece(p, depth);
        if (x < 0) return -1;
        if (last < 0) p->n[cat].first = x;
        else p->n[last].next = x;
        last = x;
    }
    return p->rc ? -1 : cat;
}

static int32_t parse_alt(rx *p, int depth) {
    if (depth > RX_MAX_DEPTH) return rx_fail(p, E0_ERANGE, "groups nested deeper than %d", RX_MAX_DEPTH);
    int32_t alt = node_new(p, N_ALT), last = -1;
    for (;;) {
        int32_t x = parse_cat(p, depth);
        if (x < 0 || alt < 0) return -1;
        if (last < 0) p->n[alt].first = x;
        else p->n[last].next = x;
        last = x;
        if (peek(p) != '|') break;
        p->at++;
    }
    return alt;
}

/* ---- analysis ------------------------------------------------------------------------ */

static bool nullable(const rx *p, int32_t i) {
    const rxnode *n = &p->n[i];
    switch (n->kind) {
    case N_SET:
        return false;
    case N_CAT:
        for (int32_t k = n->first; k >= 0; k = p->n[k].next)
            if (!nullable(p, k)) return false;
        return true;
    case N_ALT:
        for (int32_t k = n->first; k >= 0; k = p->n[k].next)
            if (nullable(p, k)) return true;
        return false;
    case N_REP:
        return n->min == 0 || nullable(p, n->child);
    default:
        return true;
    }
}

/* The longest string (in characters), saturated at RX_MAX_EXPANDED + 1;
 * unbounded repetition counts as min + 1 copies. */
static int64_t expanded(const rx *p, int32_t i) {
    const rxnode *n = &p->n[i];
    int64_t s = 0, cap = RX_MAX_EXPANDED + 1;
    switch (n->kind) {
    case N_SET:
        return 1;
    case N_CAT:
    case N_ALT:
        for (int32_t k = n->first; k >= 0; k = p->n[k].next) {
            int64_t x = expanded(p, k);
            s = n->kind == N_CAT ? s + x : (x > s ? x : s);
        }
        return s < cap ? s : cap;
    case N_REP: {
        int64_t x = expanded(p, n->child), times = n->max < 0 ? (int64_t)n->min + 1 : n->max;
        s = x * times;
        return s < cap ? s : cap;
    }
    default:
        return 0;
    }
}

enum { ANC_NONE = 0, ANC_ALL = 1, ANC_MIXED = 2 };

/* Whether every path through node i starts (end: ends) with an anchor. */
static int anchored(const rx *p, int32_t i, bool end) {
    const rxnode *n = &p->n[i];
    if (n->kind == (end ? N_EOL : N_BOL)) return ANC_ALL;
    if (n->kind == N_CAT) {
        int32_t k = n->first, last = -1;
        if (!end) return k >= 0 ? anchored(p, k, end) : ANC_NONE;
        for (; k >= 0; k = p->n[k].next)
            last = k;
        return last >= 0 ? anchored(p, last, end) : ANC_NONE;
    }
    if (n->kind == N_ALT) {
        int all = 1, none = 1;
        for (int32_t k = n->first; k >= 0; k = p->n[k].next) {
            int a = anchored(p, k, end);
            all &= a == ANC_ALL, none &= a == ANC_NONE;
        }
        return all ? ANC_ALL : none ? ANC_NONE : ANC_MIXED;
    }
    return ANC_NONE;
}

/* Anchors only where they anchor: start / end say whether node i can be
 * at the start / end of its top-level alternative. */
static int check_anchors(rx *p, int32_t i, bool start, bool end) {
    const rxnode *n = &p->n[i];
    if (n->kind == N_BOL && !start)
        return rx_fail(p, E0_EUNSUPPORTED, "'^' is supported only at the start of the pattern or of an alternative");
    if (n->kind == N_EOL && !end)
        return rx_fail(p, E0_EUNSUPPORTED, "'$' is supported only at the end of the pattern or of an alternative");
    if (n->kind == N_REP) return check_anchors(p, n->child, false, false);
    if (n->kind == N_ALT)
        for (int32_t k = n->first; k >= 0; k = p->n[k].next)
            if (check_anchors(p, k, start, end)) return -1;
    if (n->kind == N_CAT) {
        bool s = start;
        for (int32_t k = n->first; k >= 0; k = p->n[k].next) {
            bool e = end;
            for (int32_t j = p->n[k].next; j >= 0 && e; j = p->n[j].next)
                e = p->n[j].kind == N_EOL;
            if (check_anchors(p, k, s, e)) return -1;
            s = s && p->n[k].kind == N_BOL;
        }
    }
    return 0;
}

/* ---- emission --------------------------------------------------------------------------- */

static gram_set byte_range(unsigned lo, unsigned hi) {
    gram_set s = {{0}};
    gram_set_add(&s, lo, hi);
    return s;
}

static int utf8_encode(uint32_t c, uint8_t *o) {
    if (c < 0x80) return o[0] = (uint8_t)c, 1;
    if (c < 0x800) return o[0] = (uint8_t)(0xc0 | c >> 6), o[1] = (uint8_t)(0x80 | (c & 0x3f)), 2;
    if (c < 0x10000)
        return o[0] = (uint8_t)(0xe0 | c >> 12), o[1] = (uint8_t)(0x80 | (c >> 6 & 0x3f)),
               o[2] = (uint8_t)(0x80 | (c & 0x3f)), 3;
    o[0] = (uint8_t)(0xf0 | c >> 18), o[1] = (uint8_t)(0x80 | (c >> 12 & 0x3f));
    o[2] = (uint8_t)(0x80 | (c >> 6 & 0x3f)), o[3] = (uint8_t)(0x80 | (c & 0x3f));
    return 4;
}

/* Alternatives of rule r for the code points lo..hi (>= 0x80, no surrogates):
 * split until every byte position is a plain range. */
static void utf8_alts(gram_builder *b, int32_t r, uint32_t lo, uint32_t hi) {
    static const uint32_t LIM[] = {0x7f, 0x7ff, 0xffff};
    for (int i = 0; i < 3; i++)
        if (lo <= LIM[i] && hi > LIM[i]) {
            utf8_alts(b, r, lo, LIM[i]);
            utf8_alts(b, r, LIM[i] + 1, hi);
            return;
        }
    int n = hi < 0x80 ? 1 : hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) == (hi & ~m)) continue;
        if (lo & m) {
            utf8_alts(b, r, lo, lo | m);
            utf8_alts(b, r, (lo | m) + 1, hi);
            return;
        }
        if ((hi & m) != m) {
            utf8_alts(b, r, lo, (hi & ~m) - 1);
            utf8_alts(b, r, hi & ~m, hi);
            return;
        }
    }
    uint8_t a[4], z[4];
    utf8_encode(lo, a), utf8_encode(hi, z);
    int32_t alt = gb_alt(b, r);
    for (int k = 0; k < n; k++) {
        gram_set s = byte_range(a[k], z[k]);
        gb_set(b, alt, &s);
    }
}

/* One character out of ranges r[0..n) in the form. */
static int32_t emit_set(gram_builder *b, const cprange *r, int32_t n, rx_form form) {
    int32_t rule = gb_rule(b);
    gram_set ascii = {{0}};
    for (int32_t i = 0; i < n; i++) {
        if (r[i].lo < 0x80) gram_set_add(&ascii, r[i].lo, r[i].hi < 0x80 ? r[i].hi : 0x7f);
        if (r[i].hi >= 0x80) utf8_alts(b, rule, r[i].lo < 0x80 ? 0x80 : r[i].lo, r[i].hi);
    }
    if (form == RX_FORM_JSON) {
        static const char SHORT[] = "\bb\tt\nn\ff\rr\"\"\\\\";
        for (const char *e = SHORT; *e; e += 2)
            if (gram_set_has(&ascii, (unsigned char)e[0])) {
                char lit[2] = {'\\', e[1]};
                gb_lit(b, gb_alt(b, rule), lit, 2);
            }
        for (unsigned c = 0; c < 0x20; c++)
            if (gram_set_has(&ascii, c)) {
                char lit[8];
                snprintf(lit, sizeof lit, "\\u%04x", c);
                gb_str(b, gb_alt(b, rule), lit);
            }
        ascii.w[0] &= ~0xffffffffull;
        ascii.w['"' >> 6] &= ~(1ull << ('"' & 63));
        ascii.w['\\' >> 6] &= ~(1ull << ('\\' & 63));
    }
    if (ascii.w[0] | ascii.w[1]) gb_set(b, gb_alt(b, rule), &ascii);
    return gb_error(b) ? -1 : rule;
}

int32_t rx_any_char(gram_builder *b, rx_form form) {
    cprange all[3] = {{0, 0xD7FF}, {0xE000, CP_MAX}, {0, 0}};
    if (form == RX_FORM_RAW) all[0] = (cprange){0, '<' - 1}, all[1] = (cprange){'<' + 1, 0xD7FF}, all[2] = (cprange){0xE000, CP_MAX};
    return emit_set(b, all, form == RX_FORM_RAW ? 3 : 2, form);
}

static int32_t emit(rx *p, int32_t i);

/* The non-empty strings of node i: a rule, or -2 when it has none. */
static int32_t nonempty(rx *p, int32_t i) {
    rxnode *n = &p->n[i];
    if (n->nn != -1) return n->nn;
    gram_builder *b = p->b;
    int32_t r = -2;
    switch (n->kind) {
    case N_SET:
        r = emit(p, i);
        break;
    case N_CAT: /* the first child that is not empty, the rest as they are */
        for (int32_t k = p->n[i].first; k >= 0 && !p->rc; k = p->n[k].next) {
            int32_t x = nonempty(p, k);
            if (x >= 0) {
                if (r < 0) r = gb_rule(b);
                int32_t a = gb_alt(b, r);
                gb_ref(b, a, x);
                for (int32_t j = p->n[k].next; j >= 0; j = p->n[j].next)
                    gb_ref(b, a, emit(p, j));
            }
            if (!nullable(p, k)) break;
        }
        break;
    case N_ALT:
        for (int32_t k = p->n[i].first; k >= 0 && !p->rc; k = p->n[k].next) {
            int32_t x = nonempty(p, k);
            if (x < 0) continue;
            if (r < 0) r = gb_rule(b);
            gb_ref(b, gb_alt(b, r), x);
        }
        break;
    case N_REP: {
        int32_t c = p->n[i].child, x = nonempty(p, c);
        if (x < 0 || p->n[i].max == 0) break;
        int32_t mx = p->n[i].max;
        if (!nullable(p, c)) {
            r = gb_rep(b, emit(p, c), p->n[i].min ? p->n[i].min : 1, mx);
        } else { /* one non-empty copy, the others may be empty */
            r = gb_seq2(b, x, mx < 0 ? gb_star(b, x) : gb_rep(b, emit(p, c), 0, mx - 1));
        }
        break;
    }
    default:
        break;
    }
    if (gb_error(b)) return -1;
    return p->n[i].nn = r;
}

static int32_t emit(rx *p, int32_t i) {
    rxnode *n = &p->n[i];
    if (n->rule >= 0 || p->rc) return n->rule;
    gram_builder *b = p->b;
    int32_t r = -1;
    switch (n->kind) {
    case N_SET:
        r = emit_set(b, p->r + n->min, n->max, p->form);
        break;
    case N_CAT:
    case N_ALT: {
        r = gb_rule(b);
        int32_t a = n->kind == N_CAT ? gb_alt(b, r) : -1;
        for (int32_t k = p->n[i].first; k >= 0; k = p->n[k].next) {
            int32_t x = emit(p, k);
            gb_ref(b, n->kind == N_CAT ? a : gb_alt(b, r), x);
        }
        if (p->n[i].first < 0) gb_alt(b, r);
        break;
    }
    case N_REP: {
        int32_t c = n->child, x = emit(p, c);
        if (n->max < 0 && nullable(p, c)) {
            int32_t nn = nonempty(p, c), fixed = gb_rep(b, x, n->min, n->min);
            r = nn >= 0 ? gb_seq2(b, fixed, gb_star(b, nn)) : fixed;
        } else {
            r = gb_rep(b, x, n->min, n->max);
        }
        break;
    }
    default: /* empty, and anchors (checked to be where they anchor) */
        r = gb_rule(b);
        gb_alt(b, r);
    }
    if (gb_error(b)) return -1;
    return p->n[i].rule = r;
}

/* The top: each alternative with "any character" sides where it is not anchored. */
static int32_t emit_top(rx *p, int32_t top) {
    gram_builder *b = p->b;
    int32_t r = gb_rule(b), star = -1;
    for (int32_t k = p->n[top].first; k >= 0 && !p->rc; k = p->n[k].next) {
        int s = anchored(p, k, false), e = anchored(p, k, true);
        if (s == ANC_MIXED || e == ANC_MIXED)
            return rx_fail(p, E0_EUNSUPPORTED, "an alternative anchored on some paths and not on others");
        if (check_anchors(p, k, true, true)) return -1;
        if ((s != ANC_ALL || e != ANC_ALL) && star < 0) star = gb_star(b, rx_any_char(b, p->form));
        int32_t a = gb_alt(b, r);
        if (s != ANC_ALL) gb_ref(b, a, star);
        gb_ref(b, a, emit(p, k));
        if (e != ANC_ALL) gb_ref(b, a, star);
    }
    return p->rc || gb_error(b) ? -1 : r;
}

int rx_rule(gram_builder *b, const char *pattern, rx_form form, int32_t *out, char *err) {
    *out = -1;
    size_t len = strlen(pattern);
    if (len > RX_MAX_PATTERN) return e0_fail(err, E0_ERANGE, "longer than %d bytes", RX_MAX_PATTERN);
    rx p = {.s = pattern, .len = len, .form = form, .err = err, .b = b, .any = -1};
    int32_t top = parse_alt(&p, 0);
    if (top >= 0 && !at_end(&p)) rx_fail(&p, E0_EINVAL, "a ')' without its '('");
    if (!p.rc && expanded(&p, top) > RX_MAX_EXPANDED)
        rx_fail(&p, E0_ERANGE, "its counts expand to more than %d characters", RX_MAX_EXPANDED);
    int32_t r = p.rc ? -1 : emit_top(&p, top);
    if (!p.rc && (r < 0 || gb_error(b)))
        rx_fail(&p, gb_error(b) == E0_ENOMEM ? E0_ENOMEM : E0_ERANGE, "makes a grammar over the size limits");
    free(p.n);
    free(p.r);
    if (p.rc) return p.rc;
    *out = r;
    return 0;
}
