/* Routing traces for replay (io/routes.h): a line cursor over untrusted
 * text, every number range-checked before use, every failure naming the
 * file and line. */
#include "io/routes.h"

#include "edge0.h"
#include "util/err.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* At most 64 Mi expert ids (256 MiB) in a trace: tokens x layers x top-k. */
enum { ROUTES_MAX_IDS = 1 << 26 };

typedef struct {
    const char *p, *end; /* the rest of the line */
} cur;

static void skip_ws(cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r'))
        c->p++;
}

/* A decimal number of at most 9 digits; false when there is none. */
static bool num(cur *c, int64_t *v) {
    skip_ws(c);
    int n = 0;
    *v = 0;
    for (; c->p < c->end && *c->p >= '0' && *c->p <= '9' && n < 10; c->p++, n++)
        *v = *v * 10 + (*c->p - '0');
    return n > 0 && n <= 9 && (c->p == c->end || *c->p == ' ' || *c->p == '\t' || *c->p == '\r');
}

/* The word w next, followed by a blank or the end. */
static bool word(cur *c, const char *w) {
    skip_ws(c);
    const size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n)) return false;
    if (c->p + n < c->end && c->p[n] != ' ' && c->p[n] != '\t' && c->p[n] != '\r') return false;
    c->p += n;
    return true;
}

static bool at_end(cur *c) {
    skip_ws(c);
    return c->p == c->end;
}

typedef struct {
    const char *name;
    int32_t L, E, k;
    int64_t from;     /* decode_from: prefill requests before the decode's */
    int64_t reqs;     /* request lines so far */
    int marked;       /* -1 unknown, 0 cut by layer order, 1 '# token' lines */
    int64_t prev;     /* the previous request's layer (unmarked) */
    int32_t *cnt;     /* [L] requests of each layer in the token being read */
    int64_t *first;   /* [L] the line of its first one */
    int64_t tok_line; /* the line that opened the token */
    size_t cap;       /* ids allocated */
    struct e0_routes *r;
} parser;

static int32_t *row(parser *ps) {
    return ps->r->ids + (size_t)(ps->r->n_tokens - 1) * (size_t)ps->L * (size_t)ps->k;
}

static int open_token(parser *ps, int64_t line, char *err) {
    const size_t per = (size_t)ps->L * (size_t)ps->k, need = (size_t)(ps->r->n_tokens + 1) * per;
    if (need > ROUTES_MAX_IDS)
        return e0_fail(err, E0_EFORMAT, "%s:%lld: more than %d expert ids in the trace", ps->name,
                       (long long)line, ROUTES_MAX_IDS);
    if (need > ps->cap) {
        size_t cap = ps->cap ? 2 * ps->cap : 64 * per;
        if (cap > ROUTES_MAX_IDS) cap = ROUTES_MAX_IDS;
        if (cap < need) cap = need;
        int32_t *ids = realloc(ps->r->ids, cap * sizeof *ids);
        if (!ids) return e0_fail(err, E0_ENOMEM, "%s: out of memory for the trace", ps->name);
        ps->r->ids = ids;
        ps->cap = cap;
    }
    ps->r->n_tokens++;
    int32_t *w = row(ps);
    for (size_t i = 0; i < per; i++)
        w[i] = -1;
    memset(ps->cnt, 0, (size_t)ps->L * sizeof *ps->cnt);
    ps->tok_line = line;
    return 0;
}

/* The token being read is complete: every layer it names has k experts. */
static int close_token(parser *ps, char *err) {
    if (ps->r->n_tokens == 0) return 0;
    int named = 0;
    for (int32_t l = 0; l < ps->L; l++) {
        named += ps->cnt[l] > 0;
        if (ps->cnt[l] > 0 && ps->cnt[l] < ps->k)
            return e0_fail(err, E0_EFORMAT,
                           "%s:%lld: decode token %d names %d experts of layer %d, want %d (the "
                           "model's top-k)",
                           ps->name, (long long)ps->first[l], ps->r->n_tokens - 1, ps->cnt[l], l,
                           ps->k);
    }
    if (!named)
        return e0_fail(err, E0_EFORMAT, "%s:%lld: decode token %d has no requests", ps->name,
                       (long long)ps->tok_line, ps->r->n_tokens - 1);
    return 0;
}

static int header(parser *ps, cur *c, char *err) {
    int64_t L, E, F, K = ps->k;
    if (!word(c, "#") || !word(c, "layers") || !num(c, &L) || !word(c, "experts") || !num(c, &E) ||
        !word(c, "decode_from") || !num(c, &F) ||
        (!at_end(c) && (!word(c, "top_k") || !num(c, &K))) || !at_end(c))
        return e0_fail(err, E0_EFORMAT,
                       "%s:1: not a routing trace header ('# layers L experts E decode_from F "
                       "[top_k K]')",
                       ps->name);
    if (L != ps->L || E != ps->E)
        return e0_fail(err, E0_EINVAL,
                       "%s: the trace is for %lld layers x %lld experts, the model has %d x %d: "
                       "convert it with scripts/route_convert.py --layers %d --experts %d",
                       ps->name, (long long)L, (long long)E, ps->L, ps->E, ps->L, ps->E);
    if (K != ps->k)
        return e0_fail(err, E0_EINVAL,
                       "%s: the trace routes top-%lld, the model top-%d: convert it with "
                       "scripts/route_convert.py --top-k %d",
                       ps->name, (long long)K, ps->k, ps->k);
    ps->from = F;
    return 0;
}

/* '# token T': opens decode token T (tokens numbered from 0 in order). */
static int marker(parser *ps, cur *c, int64_t line, char *err) {
    int64_t t;
    if (!num(c, &t) || !at_end(c))
        return e0_fail(err, E0_EFORMAT, "%s:%lld: want '# token T'", ps->name, (long long)line);
    if (ps->reqs < ps->from)
        return e0_fail(err, E0_EFORMAT,
                       "%s:%lld: '# token' before the decode's first request (decode_from %lld)",
                       ps->name, (long long)line, (long long)ps->from);
    if (ps->marked == 0)
        return e0_fail(err, E0_EFORMAT,
                       "%s:%lld: a '# token' line after decode requests without one", ps->name,
                       (long long)line);
    if (t != ps->r->n_tokens)
        return e0_fail(err, E0_EFORMAT, "%s:%lld: token %lld where token %d is next", ps->name,
                       (long long)line, (long long)t, ps->r->n_tokens);
    ps->marked = 1;
    int rc = close_token(ps, err);
    return rc ? rc : open_token(ps, line, err);
}

static int request(parser *ps, cur *c, int64_t line, char *err) {
    int64_t l, x;
    if (!num(c, &l) || !num(c, &x) || !at_end(c))
        return e0_fail(err, E0_EFORMAT, "%s:%lld: want 'LAYER EXPERT'", ps->name, (long long)line);
    if (l >= ps->L || x >= ps->E)
        return e0_fail(err, E0_EFORMAT, "%s:%lld: layer %lld or expert %lld out of range (%d x %d)",
                       ps->name, (long long)line, (long long)l, (long long)x, ps->L, ps->E);
    if (ps->reqs++ < ps->from) return 0; /* the prefill's */
    if (ps->marked < 0) ps->marked = 0;
    int rc = 0;
    if (ps->marked == 0 && (ps->r->n_tokens == 0 || l < ps->prev || ps->cnt[l] == ps->k))
        if (!(rc = close_token(ps, err))) rc = open_token(ps, line, err);
    if (rc) return rc;
    ps->prev = l;
    if (ps->cnt[l] == ps->k)
        return e0_fail(err, E0_EFORMAT,
                       "%s:%lld: more than %d experts for layer %lld in decode token %d", ps->name,
                       (long long)line, ps->k, (long long)l, ps->r->n_tokens - 1);
    int32_t *w = row(ps) + (size_t)l * (size_t)ps->k;
    for (int32_t j = 0; j < ps->cnt[l]; j++)
        if (w[j] == x)
            return e0_fail(err, E0_EFORMAT,
                           "%s:%lld: expert %lld twice for layer %lld in decode token %d", ps->name,
                           (long long)line, (long long)x, (long long)l, ps->r->n_tokens - 1);
    if (ps->cnt[l] == 0) ps->first[l] = line;
    w[ps->cnt[l]++] = (int32_t)x;
    return 0;
}

static int parse_lines(parser *ps, const char *text, size_t len, char *err) {
    const char *p = text, *end = text + len;
    int64_t line = 0;
    int rc = 0;
    while (!rc && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        cur c = {p, nl ? nl : end};
        p = nl ? nl + 1 : end;
        line++;
        if (line == 1) {
            rc = header(ps, &c, err);
        } else if (at_end(&c)) {
            continue;
        } else if (*c.p == '#') {
            c.p++;
            if (word(&c, "token")) rc = marker(ps, &c, line, err); /* other '#' lines: comments */
        } else {
            rc = request(ps, &c, line, err);
        }
    }
    if (rc) return rc;
    if (line == 0) return e0_fail(err, E0_EFORMAT, "%s:1: empty, not a routing trace", ps->name);
    if ((rc = close_token(ps, err))) return rc;
    if (ps->r->n_tokens == 0)
        return e0_fail(err, E0_EFORMAT, "%s: no decode requests (%lld requests, decode_from %lld)",
                       ps->name, (long long)ps->reqs, (long long)ps->from);
    return 0;
}

int routes_parse(const char *text, size_t len, const char *name, int32_t L, int32_t E, int32_t k,
                 struct e0_routes *out, char *err) {
    memset(out, 0, sizeof *out);
    if (L < 1 || E < 1 || k < 1 || k > E)
        return e0_fail(err, E0_EINVAL,
                       "%s: no routing to replay on a model of %d layers, %d experts, "
                       "top-%d",
                       name, L, E, k);
    parser ps = {.name = name, .L = L, .E = E, .k = k, .marked = -1, .r = out};
    ps.cnt = calloc((size_t)L, sizeof *ps.cnt);
    ps.first = calloc((size_t)L, sizeof *ps.first);
    int rc = ps.cnt && ps.first ? parse_lines(&ps, text, len, err)
                                : e0_fail(err, E0_ENOMEM, "%s: out of memory", name);
    free(ps.cnt);
    free(ps.first);
    if (rc) {
        routes_clear(out);
        return rc;
    }
    out->n_layers = L;
    out->n_experts = E;
    out->top_k = k;
    return 0;
}

void routes_clear(struct e0_routes *r) {
    free(r->ids);
    memset(r, 0, sizeof *r);
}
