/* Byte-level grammars, their parser and the token mask (grammar.h).
 *
 * Layout of a compiled grammar: every alternative of every rule is a run of
 * 32-bit elements in el[], closed by an END element; rule r's alternatives
 * start at alt_pos[rule_off[r] .. rule_off[r + 1]). An element is a byte set
 * (index into sets[]), a rule reference, or END.
 *
 * Parsing (the matcher): a stack node is (pos, parent): for the top of a
 * stack, pos is the set element to match next; for the nodes below, the
 * position to resume at when the rule above ends. A state is the sorted set
 * of top nodes, plus whether the empty stack was reached (the text so far is
 * complete). Moving a state by a byte: every top whose set holds the byte
 * moves to pos + 1, and that is expanded until set elements are on top:
 * END pops to the parent, a reference pushes the continuation and goes into
 * each alternative. A reference followed by END pushes nothing (the rule's
 * end is the caller's end): right recursion, which is how the builder
 * writes repetition, never deepens the stack.
 *
 * Details that are easy to get wrong:
 *  - expansion revisits the same (pos, parent) through nullable
 *    alternatives; it is deduplicated (a stamp per node), or a grammar with
 *    many optional parts blows up exponentially;
 *  - left recursion would expand forever: gram_compile refuses it, with
 *    nullable prefixes taken into account (x := y x where y may be empty);
 *  - the transition table is indexed by state id and grows with the states,
 *    so pointers into it do not survive a step (indices do);
 *  - tokens with the same bytes (an added token spelled like a vocabulary
 *    entry) share a trie node: they are chained, all allowed together.
 */
#include "text/grammar.h"

#include "util/arr.h"
#include "util/err.h"

#include <stdlib.h>
#include <string.h>

enum { EL_SET = 0u, EL_REF = 1u, EL_END = 2u };
#define EL(type, v) (((uint32_t)(type) << 30) | (uint32_t)(v))
#define EL_TYPE(e)  ((e) >> 30)
#define EL_VAL(e)   ((e) & 0x3fffffffu)

/* ---- the builder ----------------------------------------------------------- */

typedef struct {
    uint32_t *e;
    uint32_t n;
    size_t cap;
    int32_t rule;
} galt;

struct gram_builder {
    galt *alts;
    int32_t n_alts;
    size_t cap_alts;
    int32_t n_rules;
    gram_set *sets; /* sets[0..256): the singletons */
    int32_t n_sets;
    size_t cap_sets;
    size_t n_elems;
    int err;
};

gram_builder *gb_new(void) {
    gram_builder *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    if (arr_reserve((void **)&b->sets, &b->cap_sets, 512, sizeof *b->sets)) {
        free(b);
        return NULL;
    }
    for (int i = 0; i < 256; i++) {
        memset(&b->sets[i], 0, sizeof b->sets[i]);
        gram_set_add(&b->sets[i], (unsigned)i, (unsigned)i);
    }
    b->n_sets = 256;
    return b;
}

void gb_free(gram_builder *b) {
    if (!b) return;
    for (int32_t i = 0; i < b->n_alts; i++)
        free(b->alts[i].e);
    free(b->alts);
    free(b->sets);
    free(b);
}

int gb_error(const gram_builder *b) { return b->err; }

static int32_t fail_b(gram_builder *b, int code) {
    if (!b->err) b->err = code;
    return -1;
}

int32_t gb_rule(gram_builder *b) {
    if (b->err) return -1;
    if (b->n_rules >= GRAM_MAX_RULES) return fail_b(b, E0_ERANGE);
    return b->n_rules++;
}

int32_t gb_alt(gram_builder *b, int32_t rule) {
    if (b->err || rule < 0 || rule >= b->n_rules) return fail_b(b, b->err ? b->err : E0_EINVAL);
    if (arr_reserve((void **)&b->alts, &b->cap_alts, (size_t)b->n_alts + 1, sizeof *b->alts))
        return fail_b(b, E0_ENOMEM);
    b->alts[b->n_alts] = (galt){NULL, 0, 0, rule};
    return b->n_alts++;
}

static void put(gram_builder *b, int32_t alt, uint32_t e) {
    if (b->err) return;
    if (alt < 0 || alt >= b->n_alts) {
        fail_b(b, E0_EINVAL);
        return;
    }
    if (++b->n_elems + (size_t)b->n_alts > GRAM_MAX_ELEMS) {
        fail_b(b, E0_ERANGE);
        return;
    }
    galt *a = &b->alts[alt];
    if (arr_reserve((void **)&a->e, &a->cap, (size_t)a->n + 1, sizeof *a->e)) {
        fail_b(b, E0_ENOMEM);
        return;
    }
    a->e[a->n++] = e;
}

void gb_lit(gram_builder *b, int32_t alt, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        put(b, alt, EL(EL_SET, (unsigned char)s[i]));
}

void gb_str(gram_builder *b, int32_t alt, const char *s) { gb_lit(b, alt, s, strlen(s)); }

void gb_set(gram_builder *b, int32_t alt, const gram_set *s) {
    if (b->err) return;
    int n = 0, one = -1;
    for (int i = 0; i < 4; i++)
        n += __builtin_popcountll(s->w[i]);
    if (n == 1)
        for (int i = 0; i < 256 && one < 0; i++)
            if (gram_set_has(s, (unsigned)i)) one = i;
    if (one >= 0) {
        put(b, alt, EL(EL_SET, one));
        return;
    }
    /* the same set as a recent one: share it (sets come in runs) */
    for (int32_t i = b->n_sets - 1; i >= 256 && i >= b->n_sets - 16; i--)
        if (!memcmp(&b->sets[i], s, sizeof *s)) {
            put(b, alt, EL(EL_SET, i));
            return;
        }
    if (arr_reserve((void **)&b->sets, &b->cap_sets, (size_t)b->n_sets + 1, sizeof *b->sets)) {
        fail_b(b, E0_ENOMEM);
        return;
    }
    b->sets[b->n_sets] = *s;
    put(b, alt, EL(EL_SET, b->n_sets));
    if (!b->err) b->n_sets++;
}

void gb_ref(gram_builder *b, int32_t alt, int32_t rule) {
    if (rule < 0 || rule >= b->n_rules) {
        fail_b(b, b->err ? b->err : E0_EINVAL);
        return;
    }
    put(b, alt, EL(EL_REF, rule));
}

int32_t gb_lit_rule(gram_builder *b, const char *s, size_t n) {
    int32_t r = gb_rule(b);
    gb_lit(b, gb_alt(b, r), s, n);
    return b->err ? -1 : r;
}

int32_t gb_set_rule(gram_builder *b, const gram_set *s) {
    int32_t r = gb_rule(b);
    gb_set(b, gb_alt(b, r), s);
    return b->err ? -1 : r;
}

int32_t gb_range_rule(gram_builder *b, unsigned lo, unsigned hi) {
    gram_set s = {{0}};
    gram_set_add(&s, lo, hi);
    return gb_set_rule(b, &s);
}

int32_t gb_seq2(gram_builder *b, int32_t x, int32_t y) {
    int32_t r = gb_rule(b), a = gb_alt(b, r);
    gb_ref(b, a, x);
    gb_ref(b, a, y);
    return b->err ? -1 : r;
}

int32_t gb_star(gram_builder *b, int32_t x) {
    int32_t r = gb_rule(b), a = gb_alt(b, r);
    gb_ref(b, a, x);
    gb_ref(b, a, r);
    gb_alt(b, r);
    return b->err ? -1 : r;
}

int32_t gb_plus(gram_builder *b, int32_t x) { return gb_seq2(b, x, gb_star(b, x)); }

int32_t gb_opt(gram_builder *b, int32_t x) {
    int32_t r = gb_rule(b);
    gb_ref(b, gb_alt(b, r), x);
    gb_alt(b, r);
    return b->err ? -1 : r;
}

int32_t gb_rep(gram_builder *b, int32_t x, int32_t min, int32_t max) {
    if (b->err) return -1;
    if (min < 0 || min > GRAM_MAX_REP || (max >= 0 && (max < min || max - min > GRAM_MAX_REP)))
        return fail_b(b, E0_ERANGE);
    int32_t tail = -1; /* the optional copies: t_k := x t_{k-1} | "" */
    if (max < 0) {
        tail = gb_star(b, x);
    } else {
        for (int32_t k = 0; k < max - min; k++) {
            int32_t t = gb_rule(b), a = gb_alt(b, t);
            gb_ref(b, a, x);
            if (tail >= 0) gb_ref(b, a, tail);
            gb_alt(b, t);
            tail = t;
        }
    }
    int32_t r = gb_rule(b), a = gb_alt(b, r);
    for (int32_t i = 0; i < min; i++)
        gb_ref(b, a, x);
    if (tail >= 0) gb_ref(b, a, tail);
    return b->err ? -1 : r;
}

int32_t gb_until(gram_builder *b, const char *lit) {
    size_t L = strlen(lit);
    if (b->err) return -1;
    if (!L || L > 64) return fail_b(b, E0_EINVAL);
    int32_t u[64];
    for (size_t i = 0; i < L; i++)
        u[i] = gb_rule(b);
    for (size_t i = 0; i < L && !b->err; i++) {
        /* KMP: after i matched bytes, byte c leads to the longest prefix of
         * lit that is a suffix of lit[0..i) + c; bytes are grouped by it */
        gram_set to[64];
        memset(to, 0, sizeof to);
        for (unsigned c = 1; c < 256; c++) {
            size_t k = i + 1;
            for (; k > 0; k--) {
                /* lit[0..k) == (lit[0..i) + c)[i + 1 - k .. i + 1) */
                if ((unsigned char)lit[k - 1] != c) continue;
                if (!memcmp(lit, lit + i + 1 - k, k - 1)) break;
            }
            if (k == L) continue; /* the match: the terminal alternative */
            gram_set_add(&to[k], c, c);
        }
        if (i + 1 == L) gb_lit(b, gb_alt(b, u[i]), lit + i, 1);
        for (size_t k = 0; k < L; k++) {
            if (!to[k].w[0] && !to[k].w[1] && !to[k].w[2] && !to[k].w[3]) continue;
            int32_t a = gb_alt(b, u[i]);
            gb_set(b, a, &to[k]);
            gb_ref(b, a, u[k]);
        }
    }
    return b->err ? -1 : u[0];
}

/* ---- compiling -------------------------------------------------------------- */

struct e0_grammar {
    uint32_t *el;
    size_t n_el;
    int32_t *rule_off; /* [n_rules + 1] into alt_pos */
    uint32_t *alt_pos;
    int32_t n_rules;
    gram_set *sets;
    int32_t n_sets;
    int32_t roots[4];
    int n_roots;
};

void e0_grammar_free(gram *g) {
    if (!g) return;
    free(g->el);
    free(g->rule_off);
    free(g->alt_pos);
    free(g->sets);
    free(g);
}

size_t gram_size(const gram *g) { return g->n_el; }

/* Nullable rules, then a depth-first search for a cycle among the edges
 * r -> s where s is referenced at a position of r reached without bytes. */
static int check_left_recursion(const gram *g, char *err) {
    int32_t R = g->n_rules;
    uint8_t *nullable = calloc((size_t)R, 1), *color = calloc((size_t)R, 1);
    int32_t *eoff = calloc((size_t)R + 1, sizeof *eoff), *edge = NULL, *stack = NULL;
    int32_t n_edges = 0;
    size_t cap_edges = 0;
    int rc = 0;
    if (!nullable || !color || !eoff || !(stack = malloc((size_t)R * 2 * sizeof *stack))) goto oom;
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < R; r++) {
            for (int32_t a = g->rule_off[r]; a < g->rule_off[r + 1] && !nullable[r]; a++) {
                const uint32_t *e = g->el + g->alt_pos[a];
                while (EL_TYPE(*e) == EL_REF && nullable[EL_VAL(*e)])
                    e++;
                if (EL_TYPE(*e) == EL_END) nullable[r] = 1, changed = true;
            }
        }
    }
    for (int32_t r = 0; r < R; r++) {
        eoff[r] = n_edges;
        for (int32_t a = g->rule_off[r]; a < g->rule_off[r + 1]; a++)
            for (const uint32_t *e = g->el + g->alt_pos[a]; EL_TYPE(*e) == EL_REF; e++) {
                if (arr_reserve((void **)&edge, &cap_edges, (size_t)n_edges + 1, sizeof *edge))
                    goto oom;
                edge[n_edges++] = (int32_t)EL_VAL(*e);
                if (!nullable[EL_VAL(*e)]) break;
            }
    }
    eoff[R] = n_edges;
    /* iterative: the stack holds (rule, its next edge) */
    for (int32_t s = 0; s < R && !rc; s++) {
        if (color[s]) continue;
        int32_t sp = 0;
        stack[sp++] = s, stack[sp++] = eoff[s];
        color[s] = 1;
        while (sp && !rc) {
            int32_t r = stack[sp - 2], k = stack[sp - 1];
            if (k == eoff[r + 1]) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            stack[sp - 1] = k + 1;
            int32_t t = edge[k];
            if (color[t] == 1)
                rc = e0_fail(err, E0_EINVAL, "grammar: rule %d is left-recursive", t);
            else if (!color[t]) {
                color[t] = 1;
                stack[sp++] = t, stack[sp++] = eoff[t];
            }
        }
    }
    goto out;
oom:
    rc = e0_fail(err, E0_ENOMEM, "grammar: out of memory");
out:
    free(nullable);
    free(color);
    free(eoff);
    free(edge);
    free(stack);
    return rc;
}

int gram_compile(gram_builder *b, const int32_t *roots, int n_roots, gram **out, char *err) {
    *out = NULL;
    if (b->err == E0_ENOMEM) return e0_fail(err, E0_ENOMEM, "grammar: out of memory");
    if (b->err == E0_ERANGE)
        return e0_fail(err, E0_ERANGE, "grammar: too large (over %d elements, %d rules or %d repetitions)",
                       GRAM_MAX_ELEMS, GRAM_MAX_RULES, GRAM_MAX_REP);
    if (b->err) return e0_fail(err, E0_EINVAL, "grammar: a rule or alternative was used before it was made");
    if (n_roots < 1 || n_roots > 4) return e0_fail(err, E0_EINVAL, "grammar: 1 to 4 roots");
    for (int i = 0; i < n_roots; i++)
        if (roots[i] < 0 || roots[i] >= b->n_rules) return e0_fail(err, E0_EINVAL, "grammar: no root rule");
    gram *g = calloc(1, sizeof *g);
    if (!g) return e0_fail(err, E0_ENOMEM, "grammar: out of memory");
    int32_t R = b->n_rules;
    g->n_rules = R;
    g->n_el = b->n_elems + (size_t)b->n_alts + 1;
    g->el = malloc(g->n_el * sizeof *g->el);
    g->rule_off = calloc((size_t)R + 1, sizeof *g->rule_off);
    g->alt_pos = malloc(((size_t)b->n_alts + 1) * sizeof *g->alt_pos);
    g->sets = malloc((size_t)b->n_sets * sizeof *g->sets);
    int32_t *fill = calloc((size_t)R + 1, sizeof *fill);
    if (!g->el || !g->rule_off || !g->alt_pos || !g->sets || !fill) {
        free(fill);
        e0_grammar_free(g);
        return e0_fail(err, E0_ENOMEM, "grammar: out of memory");
    }
    memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof *g->sets);
    g->n_sets = b->n_sets;
    for (int32_t a = 0; a < b->n_alts; a++)
        g->rule_off[b->alts[a].rule + 1]++;
    for (int32_t r = 0; r < R; r++)
        g->rule_off[r + 1] += g->rule_off[r];
    /* alternatives by rule, in the order they were made */
    int32_t *order = malloc(((size_t)b->n_alts + 1) * sizeof *order);
    if (!order) {
        free(fill);
        e0_grammar_free(g);
        return e0_fail(err, E0_ENOMEM, "grammar: out of memory");
    }
    for (int32_t a = 0; a < b->n_alts; a++) {
        int32_t r = b->alts[a].rule;
        order[g->rule_off[r] + fill[r]++] = a;
    }
    size_t at = 0;
    for (int32_t k = 0; k < b->n_alts; k++) {
        const galt *A = &b->alts[order[k]];
        g->alt_pos[k] = (uint32_t)at;
        if (A->n) memcpy(g->el + at, A->e, A->n * sizeof *A->e);
        at += A->n;
        g->el[at++] = EL(EL_END, 0);
    }
    g->el[at++] = EL(EL_END, 0); /* a sentinel for the left-recursion scan */
    g->n_el = at;
    free(order);
    free(fill);
    int rc = 0;
    for (int32_t r = 0; r < R && !rc; r++)
        if (g->rule_off[r] == g->rule_off[r + 1])
            rc = e0_fail(err, E0_EINVAL, "grammar: rule %d has no alternatives", r);
    if (!rc) rc = check_left_recursion(g, err);
    if (rc) {
        e0_grammar_free(g);
        return rc;
    }
    memcpy(g->roots, roots, (size_t)n_roots * sizeof *roots);
    g->n_roots = n_roots;
    *out = g;
    return 0;
}

/* ---- the vocabulary trie ------------------------------------------------------ */

typedef struct {
    uint32_t end;  /* preorder index after this node's subtree */
    int32_t tok;   /* a token whose bytes end here, or -1 (more in vocab->same) */
    uint16_t depth; /* 1 for the first byte */
    uint8_t byte;
} tnode;

/* "Plain" bytes: printable ASCII but '"' and '\\', what a JSON string (and
 * most text) repeats. A state that stays itself on every plain byte (inside
 * a string) allows every token made only of them: those come from a
 * precomputed bitmap, and the walk skips the subtrees that hold only them. */
static bool plain_byte(unsigned b) {
    return b >= 0x20 && b < 0x7f && b != '"' && b != '\\';
}

struct gram_vocab {
    int32_t n_vocab;
    tnode *nodes;
    size_t n_nodes;
    uint8_t *plain_sub; /* [n_nodes] the node's subtree spells plain bytes only */
    uint32_t *plain;    /* [words] the tokens made of plain bytes only */
    int32_t *same; /* [n_vocab] the next token with the same bytes, -1 */
    uint32_t *off; /* [n_vocab + 1] bytes of token i: blob[off[i] .. off[i + 1]) */
    uint8_t *blob;
    int max_depth;
};

static int cmp_tok(const void *pa, const void *pb, void *user) {
    const gram_vocab *v = user;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint32_t la = v->off[a + 1] - v->off[a], lb = v->off[b + 1] - v->off[b];
    int c = memcmp(v->blob + v->off[a], v->blob + v->off[b], la < lb ? la : lb);
    if (c) return c;
    return la != lb ? (la < lb ? -1 : 1) : (a < b ? -1 : a > b);
}

void gram_vocab_free(gram_vocab *v) {
    if (!v) return;
    free(v->nodes);
    free(v->plain_sub);
    free(v->plain);
    free(v->same);
    free(v->off);
    free(v->blob);
    free(v);
}

int32_t gram_vocab_size(const gram_vocab *v) { return v->n_vocab; }
size_t gram_vocab_nodes(const gram_vocab *v) { return v->n_nodes; }

int gram_vocab_new(gram_vocab **out, int32_t n_vocab, gram_token_fn fn, void *user, char *err) {
    *out = NULL;
    if (n_vocab <= 0) return e0_fail(err, E0_EINVAL, "grammar vocabulary: %d tokens", n_vocab);
    gram_vocab *v = calloc(1, sizeof *v);
    int32_t *ids = malloc((size_t)n_vocab * sizeof *ids);
    size_t total = 0, n_ids = 0;
    if (v) {
        v->n_vocab = n_vocab;
        v->same = malloc((size_t)n_vocab * sizeof *v->same);
        v->off = calloc((size_t)n_vocab + 1, sizeof *v->off);
    }
    if (!v || !ids || !v->same || !v->off) goto oom;
    for (int32_t i = 0; i < n_vocab; i++) {
        size_t len = 0;
        const uint8_t *p = fn(user, i, &len);
        v->same[i] = -1;
        if (p && len && len <= GRAM_MAX_TOKEN) total += len;
    }
    if (total >= UINT32_MAX) return e0_fail(err, E0_ERANGE, "grammar vocabulary: too many bytes");
    if (!(v->blob = malloc(total ? total : 1))) goto oom;
    total = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        size_t len = 0;
        const uint8_t *p = fn(user, i, &len);
        v->off[i] = (uint32_t)total;
        if (p && len && len <= GRAM_MAX_TOKEN) {
            memcpy(v->blob + total, p, len);
            total += len;
            ids[n_ids++] = i;
        }
    }
    v->off[n_vocab] = (uint32_t)total;
    qsort_r(ids, n_ids, sizeof *ids, cmp_tok, v);
    /* at most one node per byte of the vocabulary */
    if (!(v->nodes = malloc((total ? total : 1) * sizeof *v->nodes))) goto oom;
    uint32_t path[GRAM_MAX_TOKEN + 1];
    size_t open = 0, n = 0;
    for (size_t k = 0; k < n_ids; k++) {
        int32_t id = ids[k];
        const uint8_t *s = v->blob + v->off[id];
        size_t len = v->off[id + 1] - v->off[id], l = 0;
        if (k) {
            int32_t p = ids[k - 1];
            const uint8_t *q = v->blob + v->off[p];
            size_t pl = v->off[p + 1] - v->off[p];
            while (l < len && l < pl && q[l] == s[l])
                l++;
        }
        if (l == len) { /* the same bytes as the previous token */
            tnode *t = &v->nodes[path[len]];
            v->same[id] = t->tok;
            t->tok = id;
            continue;
        }
        for (; open > l; open--)
            v->nodes[path[open]].end = (uint32_t)n;
        for (size_t d = l + 1; d <= len; d++) {
            v->nodes[n] = (tnode){0, -1, (uint16_t)d, s[d - 1]};
            path[d] = (uint32_t)n++;
        }
        open = len;
        v->nodes[path[len]].tok = id;
        if ((int)len > v->max_depth) v->max_depth = (int)len;
    }
    for (; open > 0; open--)
        v->nodes[path[open]].end = (uint32_t)n;
    v->n_nodes = n;
    free(ids);
    v->plain_sub = malloc(n ? n : 1);
    v->plain = calloc(((size_t)n_vocab + 31) / 32, sizeof *v->plain);
    if (!v->plain_sub || !v->plain) goto oom_built;
    for (size_t i = n; i-- > 0;) { /* children lie after their parent */
        bool p = plain_byte(v->nodes[i].byte);
        for (size_t k = i + 1; p && k < v->nodes[i].end; k = v->nodes[k].end)
            p = v->plain_sub[k];
        v->plain_sub[i] = p;
    }
    for (int32_t i = 0; i < n_vocab; i++) {
        bool p = v->off[i] < v->off[i + 1];
        for (uint32_t k = v->off[i]; p && k < v->off[i + 1]; k++)
            p = plain_byte(v->blob[k]);
        if (p) v->plain[i >> 5] |= 1u << (i & 31);
    }
    *out = v;
    return 0;
oom_built:
    gram_vocab_free(v);
    return e0_fail(err, E0_ENOMEM, "grammar vocabulary: out of memory");
oom:
    free(ids);
    gram_vocab_free(v);
    return e0_fail(err, E0_ENOMEM, "grammar vocabulary: out of memory");
}

/* ---- the matcher ---------------------------------------------------------------- */

#define CACHE_SLOTS 32
#define DEAD        (-1)
#define FAILED      (-2) /* out of memory or states */

struct gram_matcher {
    const gram *g;
    const gram_vocab *v;
    gram_matcher_opts o;
    int32_t eot[8];
    /* stack nodes (pos, parent), hash-consed */
    uint32_t *npos;
    int32_t *npar;
    uint32_t *stamp;
    int32_t n_nodes;
    size_t cap_nodes;
    int32_t *nhash; /* node id + 1, 0 empty */
    uint32_t nhash_cap;
    /* states: tops spool[soff[s] .. soff[s] + slen[s]), complete sacc[s] */
    int32_t *soff, *slen;
    uint8_t *sacc;
    int32_t n_states;
    size_t cap_states;
    int32_t *spool;
    int32_t n_spool;
    size_t cap_spool;
    int32_t *shash;
    uint32_t shash_cap;
    int32_t *trans; /* [cap_states * 256]: 0 not yet known, -1 dead, k + 1 state k */
    uint8_t *sloop; /* [cap_states] 0 not known, 1 every plain byte leads back to the state, 2 not */
    uint32_t cur_stamp;
    /* scratch */
    int32_t *work, n_work; /* (pos, parent) pairs */
    int32_t *tops, n_tops;
    size_t cap_work, cap_tops;
    int32_t *dstate; /* [max_depth + 1] the state at each trie depth */
    /* mask cache by state */
    int32_t ckey[CACHE_SLOTS];
    uint32_t *cbits;
    size_t words;
    int32_t cur;
    bool ended, failed;
};

void gram_matcher_opts_default(gram_matcher_opts *o) {
    memset(o, 0, sizeof *o);
    o->mask_cache = true;
}

static uint32_t hash2(uint32_t a, uint32_t b) {
    uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u;
    return h ^ (h >> 15);
}

static int32_t node_get(gram_matcher *m, uint32_t pos, int32_t par) {
    if ((uint32_t)m->n_nodes * 2 >= m->nhash_cap) {
        uint32_t cap = m->nhash_cap ? 2 * m->nhash_cap : 1024;
        int32_t *h = calloc(cap, sizeof *h);
        if (!h) return FAILED;
        for (int32_t i = 0; i < m->n_nodes; i++) {
            uint32_t k = hash2(m->npos[i], (uint32_t)m->npar[i]) & (cap - 1);
            while (h[k])
                k = (k + 1) & (cap - 1);
            h[k] = i + 1;
        }
        free(m->nhash);
        m->nhash = h;
        m->nhash_cap = cap;
    }
    uint32_t k = hash2(pos, (uint32_t)par) & (m->nhash_cap - 1);
    for (; m->nhash[k]; k = (k + 1) & (m->nhash_cap - 1)) {
        int32_t i = m->nhash[k] - 1;
        if (m->npos[i] == pos && m->npar[i] == par) return i;
    }
    if (m->n_nodes >= (1 << 26)) return FAILED;
    if ((size_t)m->n_nodes == m->cap_nodes) {
        /* npos, npar and stamp share cap_nodes: npos's growth picks the new
         * capacity, the others are reserved to it, and cap_nodes changes only
         * once all three have grown (one that grew before another failed is
         * just larger than recorded) */
        size_t cap = m->cap_nodes, cap_par = m->cap_nodes, cap_stamp = m->cap_nodes;
        if (arr_reserve((void **)&m->npos, &cap, (size_t)m->n_nodes + 1, sizeof *m->npos) ||
            arr_reserve((void **)&m->npar, &cap_par, cap, sizeof *m->npar) ||
            arr_reserve((void **)&m->stamp, &cap_stamp, cap, sizeof *m->stamp))
            return FAILED;
        m->cap_nodes = cap;
    }
    int32_t i = m->n_nodes++;
    m->npos[i] = pos;
    m->npar[i] = par;
    m->stamp[i] = 0;
    m->nhash[k] = i + 1;
    return i;
}

static bool push_work(gram_matcher *m, uint32_t pos, int32_t par) {
    if (arr_reserve((void **)&m->work, &m->cap_work, (size_t)m->n_work + 2, sizeof *m->work))
        return false;
    m->work[m->n_work++] = (int32_t)pos;
    m->work[m->n_work++] = par;
    return true;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static uint32_t state_hash(const int32_t *t, int32_t n, bool acc) {
    uint32_t h = 2166136261u ^ (uint32_t)acc;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)t[i]) * 16777619u;
    return h ^ (h >> 13);
}

/* The state id of m->tops[0..n_tops) (sorted, unique) and acc. */
static int32_t state_get(gram_matcher *m, bool acc) {
    int32_t n = m->n_tops;
    if ((uint32_t)m->n_states * 2 >= m->shash_cap) {
        uint32_t cap = m->shash_cap ? 2 * m->shash_cap : 256;
        int32_t *h = calloc(cap, sizeof *h);
        if (!h) return FAILED;
        for (int32_t s = 0; s < m->n_states; s++) {
            uint32_t k = state_hash(m->spool + m->soff[s], m->slen[s], m->sacc[s]) & (cap - 1);
            while (h[k])
                k = (k + 1) & (cap - 1);
            h[k] = s + 1;
        }
        free(m->shash);
        m->shash = h;
        m->shash_cap = cap;
    }
    uint32_t k = state_hash(m->tops, n, acc) & (m->shash_cap - 1);
    for (; m->shash[k]; k = (k + 1) & (m->shash_cap - 1)) {
        int32_t s = m->shash[k] - 1;
        if (m->slen[s] == n && m->sacc[s] == acc && !memcmp(m->spool + m->soff[s], m->tops, (size_t)n * sizeof *m->tops))
            return s;
    }
    if (m->n_states >= GRAM_MAX_STATES || m->n_spool > INT32_MAX - n) return FAILED;
    if ((size_t)m->n_states == m->cap_states) {
        /* soff, slen, sacc, trans (256 entries a state) and sloop share
         * cap_states, grown as npos and its fellows are (node_get); the new
         * states' transitions and loops start unknown (0) */
        const size_t old = m->cap_states;
        size_t cap = old, cap_len = old, cap_acc = old, cap_trans = old * 256, cap_loop = old;
        if (arr_reserve((void **)&m->soff, &cap, old + 1, sizeof *m->soff) ||
            arr_reserve((void **)&m->slen, &cap_len, cap, sizeof *m->slen) ||
            arr_reserve((void **)&m->sacc, &cap_acc, cap, sizeof *m->sacc) ||
            arr_reserve((void **)&m->trans, &cap_trans, cap * 256, sizeof *m->trans) ||
            arr_reserve((void **)&m->sloop, &cap_loop, cap, sizeof *m->sloop))
            return FAILED;
        memset(m->trans + old * 256, 0, (cap - old) * 256 * sizeof *m->trans);
        memset(m->sloop + old, 0, cap - old);
        m->cap_states = cap;
    }
    if (arr_reserve((void **)&m->spool, &m->cap_spool, (size_t)m->n_spool + (size_t)n + 1,
                    sizeof *m->spool))
        return FAILED;
    int32_t s = m->n_states++;
    m->soff[s] = m->n_spool;
    m->slen[s] = n;
    m->sacc[s] = acc;
    if (n) memcpy(m->spool + m->n_spool, m->tops, (size_t)n * sizeof *m->tops);
    m->n_spool += n;
    m->shash[k] = s + 1;
    return s;
}

/* Expands the work list into m->tops; returns the state, DEAD or FAILED. */
static int32_t close_state(gram_matcher *m) {
    const gram *g = m->g;
    bool acc = false;
    m->n_tops = 0;
    if (++m->cur_stamp == 0) { /* wrapped: clear the stamps */
        memset(m->stamp, 0, (size_t)m->n_nodes * sizeof *m->stamp);
        m->cur_stamp = 1;
    }
    while (m->n_work) {
        int32_t par = m->work[--m->n_work];
        uint32_t pos = (uint32_t)m->work[--m->n_work];
        uint32_t e = g->el[pos];
        if (EL_TYPE(e) == EL_END) { /* the rule ended: return to the parent */
            if (par < 0) acc = true;
            else if (!push_work(m, m->npos[par], m->npar[par])) return FAILED;
            continue;
        }
        int32_t id = node_get(m, pos, par);
        if (id < 0) return FAILED;
        if (m->stamp[id] == m->cur_stamp) continue; /* seen in this step */
        m->stamp[id] = m->cur_stamp;
        if (EL_TYPE(e) == EL_SET) {
            if (arr_reserve((void **)&m->tops, &m->cap_tops, (size_t)m->n_tops + 1, sizeof *m->tops))
                return FAILED;
            m->tops[m->n_tops++] = id;
            continue;
        }
        int32_t r = (int32_t)EL_VAL(e), cont = par;
        if (EL_TYPE(g->el[pos + 1]) != EL_END && (cont = node_get(m, pos + 1, par)) < 0) return FAILED;
        for (int32_t a = g->rule_off[r + 1]; a-- > g->rule_off[r];)
            if (!push_work(m, g->alt_pos[a], cont)) return FAILED;
    }
    if (!m->n_tops && !acc) return DEAD;
    qsort(m->tops, (size_t)m->n_tops, sizeof *m->tops, cmp_i32);
    int32_t k = 0;
    for (int32_t i = 0; i < m->n_tops; i++)
        if (!k || m->tops[i] != m->tops[k - 1]) m->tops[k++] = m->tops[i];
    m->n_tops = k;
    return state_get(m, acc);
}

/* The state after byte c in state s: computed once, then a table load. */
static int32_t step_slow(gram_matcher *m, int32_t s, unsigned c) {
    const gram *g = m->g;
    m->n_work = 0;
    for (int32_t i = m->slen[s]; i-- > 0;) {
        int32_t id = m->spool[m->soff[s] + i];
        uint32_t pos = m->npos[id];
        if (gram_set_has(&g->sets[EL_VAL(g->el[pos])], c) && !push_work(m, pos + 1, m->npar[id])) return FAILED;
    }
    int32_t t = m->n_work ? close_state(m) : DEAD;
    if (t == FAILED) {
        m->failed = true;
        return DEAD; /* not remembered */
    }
    m->trans[(size_t)s * 256 + c] = t < 0 ? -1 : t + 1;
    return t;
}

static inline int32_t step(gram_matcher *m, int32_t s, unsigned c) {
    int32_t t = m->trans[(size_t)s * 256 + c];
    return t > 0 ? t - 1 : t < 0 ? DEAD : step_slow(m, s, c);
}

void gram_matcher_free(gram_matcher *m) {
    if (!m) return;
    free(m->npos);
    free(m->npar);
    free(m->stamp);
    free(m->nhash);
    free(m->soff);
    free(m->slen);
    free(m->sacc);
    free(m->spool);
    free(m->shash);
    free(m->trans);
    free(m->sloop);
    free(m->work);
    free(m->tops);
    free(m->dstate);
    free(m->cbits);
    free(m);
}

int gram_matcher_new(gram_matcher **out, const gram *g, const gram_vocab *v, const gram_matcher_opts *o, char *err) {
    *out = NULL;
    gram_matcher_opts d;
    if (!o) gram_matcher_opts_default(&d), o = &d;
    if (o->root < 0 || o->root >= g->n_roots) return e0_fail(err, E0_EINVAL, "grammar: no root %d", o->root);
    if (o->n_eot < 0 || o->n_eot > 8) return e0_fail(err, E0_EINVAL, "grammar: at most 8 end-of-turn tokens");
    gram_matcher *m = calloc(1, sizeof *m);
    if (!m) return e0_fail(err, E0_ENOMEM, "grammar matcher: out of memory");
    m->g = g;
    m->v = v;
    m->o = *o;
    if (o->n_eot) memcpy(m->eot, o->eot, (size_t)o->n_eot * sizeof *o->eot);
    m->o.eot = m->eot;
    m->words = ((size_t)v->n_vocab + 31) / 32;
    m->dstate = malloc(((size_t)v->max_depth + 1) * sizeof *m->dstate);
    if (o->mask_cache) m->cbits = malloc(CACHE_SLOTS * m->words * sizeof *m->cbits);
    for (int i = 0; i < CACHE_SLOTS; i++)
        m->ckey[i] = -1;
    int32_t r = g->roots[o->root];
    bool ok = m->dstate && (!o->mask_cache || m->cbits);
    for (int32_t a = g->rule_off[r + 1]; ok && a-- > g->rule_off[r];)
        ok = push_work(m, g->alt_pos[a], -1);
    if (ok) m->cur = close_state(m);
    if (!ok || m->cur < 0) {
        gram_matcher_free(m);
        return e0_fail(err, E0_ENOMEM, "grammar matcher: out of memory");
    }
    *out = m;
    return 0;
}

static bool is_eot(const gram_matcher *m, int32_t id) {
    for (int i = 0; i < m->o.n_eot; i++)
        if (m->eot[i] == id) return true;
    return false;
}

/* The state after token id's bytes from the current state, or DEAD. */
static int32_t walk_token(gram_matcher *m, int32_t id) {
    const gram_vocab *v = m->v;
    if (id < 0 || id >= v->n_vocab) return DEAD;
    uint32_t a = v->off[id], z = v->off[id + 1];
    if (a == z) return DEAD; /* special, or no token */
    int32_t s = m->cur;
    for (uint32_t i = a; i < z && s >= 0; i++)
        s = step(m, s, v->blob[i]);
    return s;
}

bool gram_matcher_check(gram_matcher *m, int32_t id) {
    if (m->ended || m->failed) return false;
    if (is_eot(m, id)) return m->sacc[m->cur];
    return walk_token(m, id) >= 0;
}

int gram_matcher_accept(gram_matcher *m, int32_t id) {
    if (m->failed) return E0_ENOMEM;
    if (m->ended) return E0_EINVAL;
    if (is_eot(m, id)) {
        if (!m->sacc[m->cur]) return E0_EINVAL;
        m->ended = true;
        return 0;
    }
    int32_t s = walk_token(m, id);
    if (m->failed) return E0_ENOMEM;
    if (s < 0) return E0_EINVAL;
    m->cur = s;
    return 0;
}

int gram_matcher_accept_bytes(gram_matcher *m, const uint8_t *p, size_t n) {
    int32_t s = m->cur;
    for (size_t i = 0; i < n && s >= 0; i++)
        s = step(m, s, p[i]);
    if (m->failed) return E0_ENOMEM;
    if (s < 0 || m->ended) return E0_EINVAL;
    m->cur = s;
    return 0;
}

bool gram_matcher_complete(const gram_matcher *m) { return !m->ended && m->sacc[m->cur]; }

bool gram_matcher_can_continue(gram_matcher *m) { return !m->ended && m->slen[m->cur] > 0; }

int32_t gram_matcher_states(const gram_matcher *m) { return m->n_states; }

/* Whether every plain byte leads from s back to s. */
static bool self_loop(gram_matcher *m, int32_t s) {
    if (!m->sloop[s]) {
        bool loop = true;
        for (unsigned b = 0x20; b < 0x7f && loop; b++)
            if (plain_byte(b)) loop = step(m, s, b) == s;
        m->sloop[s] = loop ? 1 : 2;
    }
    return m->sloop[s] == 1;
}

/* The walk: the trie in preorder with the state of each depth; a dead byte
 * skips the subtree, and so does a subtree of plain bytes under a state
 * that loops on them (its tokens are in the plain bitmap). */
static void mask_walk(gram_matcher *m, uint32_t *bits) {
    const gram_vocab *v = m->v;
    const tnode *nd = v->nodes;
    const int32_t *same = v->same;
    const uint8_t *plain_sub = v->plain_sub;
    int32_t *ds = m->dstate;
    const int32_t cur = ds[0] = m->cur;
    const bool loop = self_loop(m, cur);
    if (loop)
        for (size_t w = 0; w < m->words; w++)
            bits[w] |= v->plain[w];
    const size_t n = v->n_nodes;
    for (size_t i = 0; i < n;) {
        const tnode *t = &nd[i];
        int32_t s = ds[t->depth - 1];
        if (loop && s == cur && plain_sub[i]) {
            i = t->end;
            continue;
        }
        int32_t x = m->trans[(size_t)s * 256 + t->byte];
        int32_t nx = x > 0 ? x - 1 : x < 0 ? DEAD : step_slow(m, s, t->byte);
        if (nx < 0) {
            i = t->end;
            continue;
        }
        ds[t->depth] = nx;
        for (int32_t id = t->tok; id >= 0; id = same[id])
            bits[id >> 5] |= 1u << (id & 31);
        i++;
    }
}

int gram_matcher_mask(gram_matcher *m, uint32_t *allowed) {
    memset(allowed, 0, m->words * sizeof *allowed);
    if (m->ended || m->failed) return m->failed ? E0_ENOMEM : 0;
    int slot = m->cur % CACHE_SLOTS;
    if (m->cbits && m->ckey[slot] == m->cur) {
        memcpy(allowed, m->cbits + (size_t)slot * m->words, m->words * sizeof *allowed);
        return 0;
    }
    mask_walk(m, allowed);
    if (m->failed) {
        memset(allowed, 0, m->words * sizeof *allowed);
        return E0_ENOMEM;
    }
    if (m->sacc[m->cur])
        for (int i = 0; i < m->o.n_eot; i++)
            if (m->eot[i] >= 0 && m->eot[i] < m->v->n_vocab) allowed[m->eot[i] >> 5] |= 1u << (m->eot[i] & 31);
    if (m->cbits) {
        memcpy(m->cbits + (size_t)slot * m->words, allowed, m->words * sizeof *allowed);
        m->ckey[slot] = m->cur;
    }
    return 0;
}
