/* Bounded numbers (minimum, maximum, exclusiveMinimum, exclusiveMaximum)
 * as grammars of digit strings (schema_int.h).
 *
 * Integers are exact: [lo, hi] is split by sign and by digit count, and a
 * range of same-length digit strings [a, z] is
 *     a0 [a1.. .. 9..9] | [a0+1 .. z0-1] digit{n-1} | z0 [0..0 .. z1..]
 * recursively (O(n^2) rules for n digits). A one-sided bound is a range
 * up to the 15 digits every integer grammar stops at.
 *
 * Numbers (a subset of the values inside, documented in docs/design.md):
 * the integers inside, a fraction (1 to 15 digits) after an integer part
 * d only where every d.xxx stays inside (d >= lo and d + 1 <= hi for d >= 0,
 * mirrored for -d), no exponent, and the inclusive bounds themselves; a
 * range with none of those (an exclusive one narrower than 1 around no
 * integer) gets its midpoint. */
#include "text/schema_int.h"

#include "util/err.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INT_LIMIT 999999999999999LL /* 15 digits */

static int32_t digit_rep(sc *c, int n) { return gb_rep(c->b, gb_range_rule(c->b, '0', '9'), n, n); }

/* Digit strings of length n from a to z (a <= z, both n digits). */
static int32_t same_len(sc *c, const char *a, const char *z, int n) {
    gram_builder *b = c->b;
    int32_t r = gb_rule(b);
    if (n == 0) {
        gb_alt(b, r);
        return sc_chk(c, r);
    }
    if (a[0] == z[0]) {
        int32_t x = gb_alt(b, r);
        gb_lit(b, x, a, 1);
        gb_ref(b, x, same_len(c, a + 1, z + 1, n - 1));
        return sc_chk(c, r);
    }
    bool lo_full = true, hi_full = true; /* a's rest all 0, z's all 9 (neither is NUL-terminated) */
    for (int i = 1; i < n; i++)
        lo_full &= a[i] == '0', hi_full &= z[i] == '9';
    char nines[20], zeros[20];
    memset(nines, '9', sizeof nines), memset(zeros, '0', sizeof zeros);
    if (!lo_full) {
        int32_t x = gb_alt(b, r);
        gb_lit(b, x, a, 1);
        gb_ref(b, x, same_len(c, a + 1, nines, n - 1));
    }
    int lo_d = a[0] + !lo_full, hi_d = z[0] - !hi_full;
    if (lo_d <= hi_d) {
        int32_t x = gb_alt(b, r);
        gram_set s = sc_range_set((unsigned)lo_d, (unsigned)hi_d);
        gb_set(b, x, &s);
        gb_ref(b, x, digit_rep(c, n - 1));
    }
    if (!hi_full) {
        int32_t x = gb_alt(b, r);
        gb_lit(b, x, z, 1);
        gb_ref(b, x, same_len(c, zeros, z + 1, n - 1));
    }
    return sc_chk(c, r);
}

/* Alternatives of r: the decimal strings (no leading zeros) of [lo, hi], 0 <= lo <= hi. */
static void uint_range(sc *c, int32_t r, long long lo, long long hi) {
    long long p = 1;
    for (int n = 1; n <= 15 && lo <= hi; n++, p *= 10) {
        long long top = p * 10 - 1, a = lo > (n == 1 ? 0 : p) ? lo : (n == 1 ? 0 : p), z = hi < top ? hi : top;
        if (a > z) continue;
        char sa[24], sz[24];
        snprintf(sa, sizeof sa, "%lld", a), snprintf(sz, sizeof sz, "%lld", z);
        gb_ref(c->b, gb_alt(c->b, r), same_len(c, sa, sz, n));
    }
}

/* Alternatives of r for the integers in [lo, hi] (within +-INT_LIMIT). */
static void int_range_alts(sc *c, int32_t r, long long lo, long long hi) {
    if (lo < 0) {
        int32_t neg = gb_rule(c->b), a = gb_alt(c->b, r);
        uint_range(c, neg, hi < -1 ? -hi : 1, -lo);
        gb_str(c->b, a, "-");
        gb_ref(c->b, a, neg);
    }
    if (hi >= 0) uint_range(c, r, lo > 0 ? lo : 0, hi);
}

/* The bounds of a schema: has_lo/lo/lo_ex (exclusive) and the same for hi. */
typedef struct {
    bool has_lo, has_hi, lo_ex, hi_ex;
    double lo, hi;
} bounds;

static int get_bounds(sc *c, const cJSON *s, bounds *o) {
    memset(o, 0, sizeof *o);
    static const char *const K[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int k = 0; k < 4; k++) {
        const cJSON *v = sc_kw(s, K[k]);
        if (!v) continue;
        if (cJSON_IsBool(v) && (k & 1)) { /* draft 4: a flag on minimum / maximum */
            if (k == 1) o->lo_ex = cJSON_IsTrue(v);
            else o->hi_ex = cJSON_IsTrue(v);
            continue;
        }
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
            return sc_fail(c, E0_EINVAL, "'%s' must be a number", K[k]);
        double x = v->valuedouble;
        if (k < 2) {
            if (!o->has_lo || x > o->lo || (x == o->lo && k == 1)) o->lo = x, o->lo_ex = k == 1;
            o->has_lo = true;
        } else {
            if (!o->has_hi || x < o->hi || (x == o->hi && k == 3)) o->hi = x, o->hi_ex = k == 3;
            o->has_hi = true;
        }
    }
    return 0;
}

bool sc_has_bounds(const cJSON *s) {
    return sc_kw(s, "minimum") || sc_kw(s, "maximum") || cJSON_IsNumber(sc_kw(s, "exclusiveMinimum")) ||
           cJSON_IsNumber(sc_kw(s, "exclusiveMaximum"));
}

/* x as an integer; beyond 15 digits, one past the limit (so that a range
 * beyond it is empty, never clamped into view). */
static long long clamp_ll(double x) {
    return x < -INT_LIMIT ? -INT_LIMIT - 1 : x > INT_LIMIT ? INT_LIMIT + 1 : (long long)x;
}
static long long min_ll(long long a, long long b) { return a < b ? a : b; }
static long long max_ll(long long a, long long b) { return a > b ? a : b; }

/* The smallest / largest integer inside. */
static long long int_lo(const bounds *b) {
    if (!b->has_lo) return -INT_LIMIT;
    return max_ll(-INT_LIMIT, clamp_ll(b->lo_ex ? floor(b->lo) + 1 : ceil(b->lo)));
}
static long long int_hi(const bounds *b) {
    if (!b->has_hi) return INT_LIMIT;
    return min_ll(INT_LIMIT, clamp_ll(b->hi_ex ? ceil(b->hi) - 1 : floor(b->hi)));
}

int32_t sc_int_bounded(sc *c, const cJSON *s) {
    bounds bd;
    if (get_bounds(c, s, &bd)) return -1;
    long long lo = int_lo(&bd), hi = int_hi(&bd);
    if (lo > hi) return sc_fail(c, E0_EINVAL, "no integer lies within 'minimum'/'maximum' (and their exclusive forms)");
    int32_t r = gb_rule(c->b);
    int_range_alts(c, r, lo, hi);
    return sc_chk(c, r);
}

/* The shortest text of x that reads back as x (JSON: no inf/nan here). */
static void num_text(double x, char *buf, size_t n) {
    for (int p = 15; p <= 17; p++) {
        snprintf(buf, n, "%.*g", p, x);
        if (strtod(buf, NULL) == x) return;
    }
}

int32_t sc_number_bounded(sc *c, const cJSON *s) {
    bounds bd;
    if (get_bounds(c, s, &bd)) return -1;
    if (bd.has_lo && bd.has_hi && (bd.lo > bd.hi || (bd.lo == bd.hi && (bd.lo_ex || bd.hi_ex))))
        return sc_fail(c, E0_EINVAL, "no number lies within 'minimum'/'maximum' (and their exclusive forms)");
    gram_builder *b = c->b;
    int32_t r = gb_rule(b), frac = gb_rule(b), a = gb_alt(b, frac);
    gb_str(b, a, ".");
    gb_ref(b, a, gb_rep(b, gb_range_rule(b, '0', '9'), 1, 15));
    bool any = false;
    long long lo = int_lo(&bd), hi = int_hi(&bd);
    if (lo <= hi) int_range_alts(c, r, lo, hi), any = true;
    /* d.xxx for d >= 0: d >= lo (d > lo when exclusive) and d + 1 <= hi */
    long long pl = bd.has_lo ? clamp_ll(bd.lo_ex ? floor(bd.lo) + 1 : ceil(bd.lo)) : 0;
    long long ph = bd.has_hi ? clamp_ll(floor(bd.hi) - 1) : INT_LIMIT;
    pl = max_ll(pl, 0), ph = min_ll(ph, INT_LIMIT);
    if (pl <= ph) {
        int32_t d = gb_rule(b);
        uint_range(c, d, pl, ph);
        a = gb_alt(b, r);
        gb_ref(b, a, d), gb_ref(b, a, frac);
        any = true;
    }
    /* -d.xxx in (-(d + 1), -d]: -(d + 1) >= lo and -d <= hi (< when exclusive) */
    long long nh = bd.has_lo ? clamp_ll(floor(-bd.lo) - 1) : INT_LIMIT;
    long long nl = bd.has_hi ? clamp_ll(bd.hi_ex ? floor(-bd.hi) + 1 : ceil(-bd.hi)) : 0;
    nl = max_ll(nl, 0), nh = min_ll(nh, INT_LIMIT);
    if (nl <= nh) {
        int32_t d = gb_rule(b);
        uint_range(c, d, nl, nh);
        a = gb_alt(b, r);
        gb_str(b, a, "-");
        gb_ref(b, a, d), gb_ref(b, a, frac);
        any = true;
    }
    char buf[40];
    for (int k = 0; k < 2; k++) { /* the inclusive bounds themselves */
        bool has = k ? bd.has_hi && !bd.hi_ex : bd.has_lo && !bd.lo_ex;
        double x = k ? bd.hi : bd.lo;
        if (!has || (x == floor(x) && fabs(x) <= (double)INT_LIMIT)) continue;
        num_text(x, buf, sizeof buf);
        gb_str(b, gb_alt(b, r), buf), any = true;
    }
    if (!any) { /* (lo, hi) narrower than 1 around no integer, or beyond 15 digits: one value inside */
        double x = bd.has_lo && bd.has_hi ? bd.lo / 2 + bd.hi / 2 : bd.has_lo ? bd.lo * 2 : bd.hi * 2;
        num_text(x, buf, sizeof buf);
        gb_str(b, gb_alt(b, r), buf);
    }
    return sc_chk(c, r);
}
