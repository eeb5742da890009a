/* Tool calls out of generated text (toolcall.h).
 *
 * The parser is a small state machine over the text stream:
 *   TEXT  content flows out; trailing whitespace and a possible beginning of
 *         "<tool_call>" are held back until the next bytes decide them;
 *   CALL  after "<tool_call>": the call's text is kept and parsed again from
 *         its start after every feed, until it is complete (handed to the
 *         sink), or cannot become a call (MALFORMED: it and all the rest
 *         become content);
 *   FULL  max_calls calls were made: the rest is dropped.
 * Parsing the kept text from its start each time costs O(call length) per
 * feed, which is nothing next to a decode step, and makes the outcome a pure
 * function of the text: a left-to-right scan that reports "need more" as
 * soon as it reaches the end of what it has, so the first complete parse of
 * a call is the same however the text was cut. */
#include "text/toolcall.h"

#include "util/sbuf.h"

#include "util/err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { ST_TEXT, ST_CALL, ST_MALFORMED, ST_FULL };
enum { P_MORE = 0, P_DONE = 1, P_BAD = -1 };

typedef struct {
    char *p;
    size_t len, cap;
} tbuf;

struct e0_tc_parser {
    const cJSON *tools;
    int max_calls, calls;
    int state;
    bool lead;      /* TEXT after a call: leading whitespace is dropped */
    bool truncated;
    tbuf buf;       /* TEXT: held-back text; CALL: the call's text after "<tool_call>" */
    tbuf gap;       /* CALL: the whitespace dropped before "<tool_call>" */
    tbuf args;      /* scratch: the arguments object of an XML call */
    tbuf tmp;       /* scratch: one value */
};

static int tb_put(tbuf *b, const char *s, size_t n) {
    return buf_append(&b->p, &b->len, &b->cap, s, n) ? E0_ENOMEM : 0;
}

static int tb_puts(tbuf *b, const char *s) {
    return tb_put(b, s, strlen(s));
}

/* Drops the first n bytes. */
static void tb_eat(tbuf *b, size_t n) {
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    if (b->p) b->p[b->len] = 0;
}

static bool is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static size_t skip_ws(const char *s, size_t i, size_t n) {
    while (i < n && is_ws(s[i]))
        i++;
    return i;
}

/* 1: s[i..] starts with lit; 0: s[i..n) is a proper prefix of it (need more);
 * -1: neither. */
static int match(const char *s, size_t i, size_t n, const char *lit) {
    size_t k = strlen(lit), have = n - i < k ? n - i : k;
    if (memcmp(s + i, lit, have)) return -1;
    return have == k ? 1 : 0;
}

/* ---- JSON scanning ------------------------------------------------------- */

#define SCAN_MORE SIZE_MAX

/* s[i] == '"': the index after the closing quote, or SCAN_MORE. */
static size_t scan_string(const char *s, size_t i, size_t n) {
    for (i++; i < n; i++) {
        if (s[i] == '\\') {
            i++;
            continue;
        }
        if (s[i] == '"') return i + 1;
    }
    return SCAN_MORE;
}

/* s[i] is '{' or '[': the index after its matching close, or SCAN_MORE.
 * Brackets are counted, not matched by kind: cJSON validates afterwards. */
static size_t scan_compound(const char *s, size_t i, size_t n) {
    size_t depth = 0;
    while (i < n) {
        char c = s[i];
        if (c == '"') {
            if ((i = scan_string(s, i, n)) == SCAN_MORE) return SCAN_MORE;
            continue;
        }
        if (c == '{' || c == '[') depth++;
        if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        }
        i++;
    }
    return SCAN_MORE;
}

/* The end of the value at s[i] in a complete, valid JSON text. */
static size_t skip_value(const char *s, size_t i, size_t n) {
    if (s[i] == '"') return scan_string(s, i, n);
    if (s[i] == '{' || s[i] == '[') return scan_compound(s, i, n);
    while (i < n && !strchr(",}] \t\r\n", s[i]))
        i++;
    return i;
}

/* No control character inside a string of the JSON text s[0..n): cJSON
 * accepts a raw newline there, a strict client's JSON.parse does not. */
static bool strict_strings(const char *s, size_t n) {
    bool in = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (in && c == '\\') i++;
        else if (c == '"') in = !in;
        else if (c < 0x20 && (in || !is_ws((char)c))) return false;
    }
    return true;
}

/* Walks the members of the valid JSON object s[i..n) (s[i] == '{'): for
 * each, fn(user, key, klen, value_begin, value_end). Stops early when fn
 * returns non-zero and returns that. */
typedef int (*member_fn)(void *user, const char *s, size_t key, size_t klen, size_t v0, size_t v1);

static int walk_members(const char *s, size_t i, size_t n, member_fn fn, void *user) {
    i = skip_ws(s, i + 1, n);
    while (i < n && s[i] == '"') {
        size_t k0 = i, k1 = scan_string(s, i, n);
        if (k1 == SCAN_MORE) return 0;
        i = skip_ws(s, k1, n);
        if (i >= n || s[i] != ':') return 0;
        size_t v0 = skip_ws(s, i + 1, n), v1 = skip_value(s, v0, n);
        if (v1 == SCAN_MORE) return 0;
        int rc = fn(user, s, k0, k1 - k0, v0, v1);
        if (rc) return rc;
        i = skip_ws(s, v1, n);
        if (i < n && s[i] == ',') i = skip_ws(s, i + 1, n);
    }
    return 0;
}

/* A JSON string literal of s[0..n) (UTF-8 kept, controls escaped). */
static int put_json_str(tbuf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    int rc = tb_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        rc = tb_put(b, s + i - run, run);
        run = 0;
        char e[7] = {'\\', (char)c, 0};
        size_t k = 2;
        if (c == '\n') e[1] = 'n';
        else if (c == '\t') e[1] = 't';
        else if (c == '\r') e[1] = 'r';
        else if (c == '\b') e[1] = 'b';
        else if (c == '\f') e[1] = 'f';
        else if (c < 0x20) e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[c >> 4], e[5] = hex[c & 15], k = 6;
        if (!rc) rc = tb_put(b, e, k);
    }
    if (!rc) rc = tb_put(b, s + n - run, run);
    if (!rc) rc = tb_put(b, "\"", 1);
    return rc;
}

/* ---- the parsed call ------------------------------------------------------ */

typedef struct {
    const char *name;
    size_t name_len;
    const char *args; /* a valid JSON object text */
    size_t args_len;
    size_t consumed;  /* bytes of the call text up to and including "</tool_call>" */
    cJSON *owned;     /* what name/args point into, when not the buffer */
    char *owned_args;
} call;

static int emit_piece(void *user, const char *s, size_t key, size_t klen, size_t v0, size_t v1);

typedef struct {
    const e0_tc_sink *k;
    void *user;
    int index;
    size_t from; /* args bytes handed on so far */
    int rc;
} piece_ctx;

/* The arguments in pieces, cut after each top-level member's value. */
static int emit_piece(void *user, const char *s, size_t key, size_t klen, size_t v0, size_t v1) {
    (void)key, (void)klen, (void)v0;
    piece_ctx *c = user;
    c->rc = c->k->args(c->user, c->index, s + c->from, v1 - c->from);
    c->from = v1;
    return c->rc;
}

static int emit_call(e0_tc_parser *p, const call *cl, const e0_tc_sink *k, void *user) {
    int rc = k->call(user, p->calls, cl->name, cl->name_len);
    if (rc) return rc;
    piece_ctx c = {k, user, p->calls, 0, 0};
    if ((rc = walk_members(cl->args, 0, cl->args_len, emit_piece, &c))) return rc;
    if ((rc = k->args(user, p->calls, cl->args + c.from, cl->args_len - c.from))) return rc;
    p->calls++;
    return 0;
}

/* ---- the JSON form ---------------------------------------------------------- */

typedef struct {
    size_t v0, v1;
    bool found;
} find_ctx;

static int find_arguments(void *user, const char *s, size_t key, size_t klen, size_t v0, size_t v1) {
    find_ctx *f = user;
    if ((klen == 11 && !memcmp(s + key, "\"arguments\"", 11)) || (klen == 12 && !memcmp(s + key, "\"parameters\"", 12))) {
        f->v0 = v0, f->v1 = v1, f->found = true;
        return 1;
    }
    return 0;
}

static bool valid_name(const char *s, size_t n) {
    if (!n || n > 256) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == '<' || s[i] == '>') return false;
    return true;
}

/* b[i] == '{'. */
static int parse_json_call(const char *b, size_t i, size_t n, call *cl) {
    size_t j = scan_compound(b, i, n);
    if (j == SCAN_MORE) return P_MORE;
    size_t e = skip_ws(b, j, n);
    int m = match(b, e, n, TC_CLOSE);
    if (m <= 0) return m == 0 ? P_MORE : P_BAD;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(b + i, j - i, &end, 0);
    if (!o || end != b + j || !cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return P_BAD;
    }
    cl->owned = o;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (!cJSON_IsString(name) || !valid_name(name->valuestring, strlen(name->valuestring))) return P_BAD;
    cl->name = name->valuestring;
    cl->name_len = strlen(name->valuestring);
    find_ctx f = {0};
    walk_members(b, i, j, find_arguments, &f);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!a) a = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    if (!a || !f.found) {
        cl->args = "{}", cl->args_len = 2;
    } else if (cJSON_IsObject(a) && strict_strings(b + f.v0, f.v1 - f.v0)) {
        cl->args = b + f.v0, cl->args_len = f.v1 - f.v0;
    } else if (cJSON_IsObject(a)) { /* raw control characters in a string: written again */
        if (!(cl->owned_args = cJSON_PrintUnformatted(a))) return E0_ENOMEM;
        cl->args = cl->owned_args, cl->args_len = strlen(cl->owned_args);
    } else if (cJSON_IsString(a)) { /* a JSON object written as a string */
        const char *s = a->valuestring, *pe = NULL;
        size_t k = skip_ws(s, 0, strlen(s));
        cJSON *inner = cJSON_ParseWithLengthOpts(s + k, strlen(s + k), &pe, 0);
        bool ok = cJSON_IsObject(inner) && pe && skip_ws(pe, 0, strlen(pe)) == strlen(pe);
        cl->owned_args = ok ? cJSON_PrintUnformatted(inner) : NULL;
        cJSON_Delete(inner);
        if (!ok) return P_BAD;
        if (!cl->owned_args) return E0_ENOMEM;
        cl->args = cl->owned_args, cl->args_len = strlen(cl->owned_args);
    } else {
        return P_BAD;
    }
    cl->consumed = e + strlen(TC_CLOSE);
    return P_DONE;
}

/* ---- the XML form ------------------------------------------------------------ */

/* The JSON schema type of parameter `key` of tool `fn`: 's' string (or
 * unknown), 'b' boolean, 'j' another JSON type. */
static char param_type(const cJSON *tools, const char *fn, size_t fn_len, const char *key, size_t klen) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(f)) f = t;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(name) || strlen(name->valuestring) != fn_len || memcmp(name->valuestring, fn, fn_len))
            continue;
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "parameters"),
                                                              "properties"),
                    *pr;
        cJSON_ArrayForEach(pr, props) {
            if (!pr->string || strlen(pr->string) != klen || memcmp(pr->string, key, klen)) continue;
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(pr, "type"), *it;
            if (cJSON_IsString(ty))
                return !strcmp(ty->valuestring, "string") ? 's' : !strcmp(ty->valuestring, "boolean") ? 'b' : 'j';
            if (cJSON_IsArray(ty)) { /* ["integer", "null"]: typed unless a string is allowed */
                char r = 'j';
                cJSON_ArrayForEach(it, ty) {
                    if (cJSON_IsString(it) && !strcmp(it->valuestring, "string")) return 's';
                    if (cJSON_IsString(it) && !strcmp(it->valuestring, "boolean")) r = 'b';
                }
                return r;
            }
            /* no "type" (anyOf, enum, ...): a value that is JSON stays JSON */
            return cJSON_IsObject(pr) && (cJSON_GetObjectItemCaseSensitive(pr, "anyOf") ||
                                          cJSON_GetObjectItemCaseSensitive(pr, "oneOf"))
                       ? 'j'
                       : 's';
        }
        return 's';
    }
    return 's';
}

/* Appends the value v[0..n) typed as `type` to p->args. */
static int put_value(e0_tc_parser *p, char type, const char *v, size_t n) {
    if (type != 's') {
        size_t a = skip_ws(v, 0, n), z = n;
        while (z > a && is_ws(v[z - 1]))
            z--;
        /* the template prints booleans and null with Python's str() */
        static const char *const PY[][2] = {{"True", "true"}, {"False", "false"}, {"None", "null"}};
        for (int i = 0; i < 3; i++)
            if (z - a == strlen(PY[i][0]) && !memcmp(v + a, PY[i][0], z - a)) return tb_puts(&p->args, PY[i][1]);
        p->tmp.len = 0;
        if (z > a && !memchr(v + a, 0, z - a)) {
            int rc = tb_put(&p->tmp, v + a, z - a);
            if (rc) return rc;
            /* written again by cJSON: what it accepts ("007") is not all valid JSON */
            cJSON *j = cJSON_ParseWithOpts(p->tmp.p, NULL, 1);
            char *t = j ? cJSON_PrintUnformatted(j) : NULL;
            cJSON_Delete(j);
            if (j && !t) return E0_ENOMEM;
            if (t) {
                rc = tb_puts(&p->args, t);
                free(t);
                return rc;
            }
        }
    }
    return put_json_str(&p->args, v, n);
}

/* The end of the value starting at b[v]: the first "</parameter>" followed,
 * after whitespace, by "<parameter=" or "</function>". *next gets the index
 * after that "</parameter>". */
static int value_end(const char *b, size_t v, size_t n, size_t *end, size_t *next) {
    static const char CLOSE[] = "</parameter>";
    for (size_t i = v; i < n; i++) {
        int m = match(b, i, n, CLOSE);
        if (m == 0) return P_MORE;
        if (m < 0) continue;
        size_t after = i + strlen(CLOSE), w = skip_ws(b, after, n);
        if (w == n) return P_MORE;
        int a = match(b, w, n, "<parameter="), f = match(b, w, n, "</function>");
        if (a == 1 || f == 1) {
            *end = i;
            *next = after;
            return P_DONE;
        }
        if (a == 0 || f == 0) return P_MORE;
    }
    return P_MORE;
}

/* b[i..] starts with "<function=". partial (the text was cut off by the
 * end of generation): where more text would be needed after the name,
 * the call as far as its complete parameters instead. */
static int parse_xml_call(e0_tc_parser *p, const char *b, size_t i, size_t n, bool partial, call *cl) {
#define MORE()                    \
    do {                          \
        if (partial) goto cut;    \
        return P_MORE;            \
    } while (0)
    size_t nm = i + strlen("<function="), k = nm;
    while (k < n && b[k] != '>' && b[k] != '\n' && b[k] != '<')
        k++;
    if (k == n) return P_MORE;
    if (b[k] != '>' || !valid_name(b + nm, k - nm)) return P_BAD;
    p->args.len = 0;
    if (tb_put(&p->args, "{", 1)) return E0_ENOMEM;
    size_t at = k + 1;
    for (int np = 0;; np++) {
        at = skip_ws(b, at, n);
        if (at == n) MORE();
        int a = match(b, at, n, "<parameter="), f = match(b, at, n, "</function>");
        if (f == 1) {
            at += strlen("</function>");
            break;
        }
        if (a != 1) {
            if (a == 0 || f == 0) MORE();
            return P_BAD;
        }
        size_t k0 = at + strlen("<parameter="), k1 = k0;
        while (k1 < n && b[k1] != '>' && b[k1] != '\n' && b[k1] != '<')
            k1++;
        if (k1 == n) MORE();
        if (b[k1] != '>' || k1 == k0) return P_BAD;
        size_t v = k1 + 1;
        if (v == n) MORE();
        if (b[v] == '\n') v++;
        size_t ve, next;
        int r = value_end(b, v, n, &ve, &next);
        if (r == P_MORE) MORE();
        if (r != P_DONE) return r;
        if (ve > v && b[ve - 1] == '\n') ve--;
        if (ve < v) ve = v; /* "<parameter=a>\n</parameter>": empty */
        int rc = (np ? tb_put(&p->args, ", ", 2) : 0);
        if (!rc) rc = put_json_str(&p->args, b + k0, k1 - k0);
        if (!rc) rc = tb_put(&p->args, ": ", 2);
        if (!rc) rc = put_value(p, param_type(p->tools, b + nm, k - nm, b + k0, k1 - k0), b + v, ve - v);
        if (rc) return rc;
        at = next;
    }
    at = skip_ws(b, at, n);
    int m = match(b, at, n, TC_CLOSE);
    if (m == 0) MORE();
    if (m < 0) return P_BAD;
    at += strlen(TC_CLOSE);
    goto close;
cut: /* partial: the text ends inside the call; it is taken whole */
    at = n;
close:
    if (tb_put(&p->args, "}", 1)) return E0_ENOMEM;
    cl->name = b + nm;
    cl->name_len = k - nm;
    cl->args = p->args.p;
    cl->args_len = p->args.len;
    cl->consumed = at;
    return P_DONE;
#undef MORE
}

/* The JSON form cut off: its name where the text has it whole (the
 * object's first member, "name": "...", as the templates write it), with
 * no arguments. */
static int parse_json_partial(const char *b, size_t i, size_t n, call *cl) {
    size_t q = skip_ws(b, i + 1, n);
    if (match(b, q, n, "\"name\"") != 1) return P_MORE;
    q = skip_ws(b, q + 6, n);
    if (q == n || b[q] != ':') return P_MORE;
    q = skip_ws(b, q + 1, n);
    if (q == n || b[q] != '"') return P_MORE;
    size_t e = q + 1;
    while (e < n && b[e] != '"' && b[e] != '\\')
        e++;
    if (e == n || b[e] != '"' || !valid_name(b + q + 1, e - q - 1)) return P_MORE;
    cl->name = b + q + 1;
    cl->name_len = e - q - 1;
    cl->args = "{}", cl->args_len = 2;
    cl->consumed = n;
    return P_DONE;
}

/* Parses the call text in p->buf: P_MORE, P_DONE (cl filled), P_BAD, or
 * E0_ENOMEM. partial: the text ends here (generation stopped); P_DONE
 * then means the call as far as it got (parse_xml_call, parse_json_partial). */
static int parse_call(e0_tc_parser *p, bool partial, call *cl) {
    const char *b = p->buf.p ? p->buf.p : "";
    size_t n = p->buf.len, i = skip_ws(b, 0, n);
    memset(cl, 0, sizeof *cl);
    if (i == n) return P_MORE;
    if (b[i] == '{') {
        int r = parse_json_call(b, i, n, cl);
        if (r == P_MORE && partial) r = parse_json_partial(b, i, n, cl);
        return r;
    }
    int m = match(b, i, n, "<function=");
    if (m == 1) return parse_xml_call(p, b, i, n, partial, cl);
    return m == 0 ? P_MORE : P_BAD;
}

/* ---- the stream ------------------------------------------------------------- */

int e0_tc_parser_new(e0_tc_parser **out, const cJSON *tools, int max_calls, char *err) {
    if (!out || max_calls < 1) return e0_fail(err, E0_EINVAL, "e0_tc_parser_new: bad argument");
    e0_tc_parser *p = calloc(1, sizeof *p);
    if (!p) return e0_fail(err, E0_ENOMEM, "tool-call parser: out of memory");
    p->tools = cJSON_IsArray(tools) ? tools : NULL;
    p->max_calls = max_calls;
    *out = p;
    return 0;
}

void e0_tc_parser_free(e0_tc_parser *p) {
    if (!p) return;
    free(p->buf.p);
    free(p->gap.p);
    free(p->args.p);
    free(p->tmp.p);
    free(p);
}

int e0_tc_calls(const e0_tc_parser *p) {
    return p->calls;
}
bool e0_tc_full(const e0_tc_parser *p) {
    return p->state == ST_FULL;
}
bool e0_tc_malformed(const e0_tc_parser *p) {
    return p->state == ST_MALFORMED;
}
bool e0_tc_truncated(const e0_tc_parser *p) {
    return p->truncated;
}

static int send_content(const e0_tc_sink *k, void *user, const char *s, size_t n) {
    return n ? k->content(user, s, n) : 0;
}

/* The call text failed: everything held is content from now on. */
static int give_up(e0_tc_parser *p, const e0_tc_sink *k, void *user) {
    int rc = send_content(k, user, p->gap.p, p->gap.len);
    if (!rc) rc = send_content(k, user, TC_OPEN, strlen(TC_OPEN));
    if (!rc) rc = send_content(k, user, p->buf.p, p->buf.len);
    p->gap.len = p->buf.len = 0;
    return rc;
}

/* Works through p->buf as far as it can. */
static int advance(e0_tc_parser *p, const e0_tc_sink *k, void *user) {
    for (;;) {
        if (p->state == ST_MALFORMED) {
            int rc = send_content(k, user, p->buf.p, p->buf.len);
            p->buf.len = 0;
            return rc;
        }
        if (p->state == ST_FULL) {
            p->buf.len = 0;
            return 0;
        }
        char *b = p->buf.p;
        size_t n = p->buf.len;
        if (p->state == ST_TEXT) {
            if (p->lead) { /* whitespace after a call */
                size_t w = skip_ws(b, 0, n);
                tb_eat(&p->buf, w);
                b = p->buf.p, n = p->buf.len;
                if (!n) return 0;
                p->lead = false;
            }
            const char *at = n ? memmem(b, n, TC_OPEN, strlen(TC_OPEN)) : NULL;
            if (at) {
                size_t q = (size_t)(at - b), t = q;
                while (t && is_ws(b[t - 1]))
                    t--;
                int rc = send_content(k, user, b, t);
                p->gap.len = 0;
                if (!rc) rc = tb_put(&p->gap, b + t, q - t);
                if (rc) return rc;
                tb_eat(&p->buf, q + strlen(TC_OPEN));
                p->state = ST_CALL;
                continue;
            }
            /* hold back a possible start of "<tool_call>" and the whitespace before it */
            size_t t = n;
            for (size_t h = strlen(TC_OPEN) - 1; h > 0; h--)
                if (n >= h && !memcmp(b + n - h, TC_OPEN, h)) {
                    t = n - h;
                    break;
                }
            while (t && is_ws(b[t - 1]))
                t--;
            int rc = send_content(k, user, b, t);
            tb_eat(&p->buf, t);
            return rc;
        }
        /* ST_CALL */
        call cl;
        int r = parse_call(p, false, &cl);
        if (r == P_MORE && p->buf.len > TC_MAX_CALL) r = P_BAD;
        if (r < P_BAD) { /* out of memory */
            cJSON_Delete(cl.owned), free(cl.owned_args);
            return r;
        }
        if (r == P_MORE) return 0;
        if (r == P_BAD) {
            cJSON_Delete(cl.owned), free(cl.owned_args);
            p->state = ST_MALFORMED;
            int rc = give_up(p, k, user);
            if (rc) return rc;
            continue;
        }
        int rc = emit_call(p, &cl, k, user);
        cJSON_Delete(cl.owned), free(cl.owned_args);
        if (rc) return rc;
        tb_eat(&p->buf, cl.consumed);
        p->gap.len = 0;
        p->state = p->calls >= p->max_calls ? ST_FULL : ST_TEXT;
        p->lead = true;
    }
}

int e0_tc_feed(e0_tc_parser *p, const char *s, size_t n, const e0_tc_sink *k, void *user) {
    if (!n) return 0;
    if (p->state == ST_FULL) return 0;
    if (p->state == ST_MALFORMED) return send_content(k, user, s, n);
    int rc = tb_put(&p->buf, s, n);
    return rc ? rc : advance(p, k, user);
}

int e0_tc_finish(e0_tc_parser *p, const e0_tc_sink *k, void *user) {
    int rc = 0;
    if (p->state == ST_CALL) { /* cut off: the call as far as it got, never its markup */
        p->truncated = true;
        call cl;
        int r = parse_call(p, true, &cl);
        if (r == P_DONE) rc = emit_call(p, &cl, k, user);
        else if (r == P_BAD) rc = give_up(p, k, user); /* not a call after all: what it was is content */
        else if (r < P_BAD) rc = r;
        cJSON_Delete(cl.owned), free(cl.owned_args);
    } else if (p->state == ST_TEXT) {
        size_t n = p->buf.len;
        if (p->calls) /* whitespace after the last call is the template's */
            while (n && is_ws(p->buf.p[n - 1]))
                n--;
        rc = send_content(k, user, p->buf.p, n);
    }
    p->buf.len = 0;
    return rc;
}
