/* What a chat answer goes through as it streams (chat.h): stop strings
 * held back until they can no longer match, and the split of a Qwen
 * answer into reasoning and content. */
#include "text/chat.h"
#include "text/slice.h"

#include "util/err.h"
#include "util/sbuf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- stop strings ----------------------------------------------------------- */

struct chat_stop {
    char **stops;
    size_t *lens;
    size_t n;
    char *buf; /* text fed and not yet emitted (plus `drop` bytes emitted last call) */
    size_t len, cap;
    size_t drop; /* bytes at the front handed out by the previous call */
    int hit;     /* stop index, or -1 */
};

void chat_stop_free(chat_stop *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++)
        free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->buf);
    free(s);
}

int chat_stop_new(chat_stop **out, const char *const *stops, size_t n, char *err) {
    if (!out || (n && !stops)) return e0_fail(err, E0_EINVAL, "chat_stop_new: NULL argument");
    *out = NULL;
    for (size_t i = 0; i < n; i++)
        if (!stops[i] || !stops[i][0])
            return e0_fail(err, E0_EINVAL, "stop[%zu]: empty stop string", i);
    chat_stop *s = calloc(1, sizeof *s);
    if (!s) return e0_fail(err, E0_ENOMEM, "chat_stop_new: out of memory");
    s->hit = -1;
    size_t maxlen = 0;
    if (n) {
        s->stops = calloc(n, sizeof *s->stops);
        s->lens = calloc(n, sizeof *s->lens);
        if (!s->stops || !s->lens) goto oom;
        for (size_t i = 0; i < n; i++, s->n++) {
            s->lens[i] = strlen(stops[i]);
            if (!(s->stops[i] = strdup(stops[i]))) goto oom;
            if (s->lens[i] > maxlen) maxlen = s->lens[i];
        }
    }
    s->cap = 2 * maxlen + 256;
    if (!(s->buf = malloc(s->cap))) goto oom;
    *out = s;
    return 0;
oom:
    chat_stop_free(s);
    return e0_fail(err, E0_ENOMEM, "chat_stop_new: out of memory");
}

void chat_stop_reset(chat_stop *s) {
    s->len = s->drop = 0;
    s->hit = -1;
}

/* The end of the longest prefix of b[0..k) that does not stop inside a UTF-8
 * sequence still missing bytes. */
static size_t utf8_cut(const char *b, size_t k) {
    size_t i = k, cont = 0;
    while (i > 0 && cont < 3 && ((unsigned char)b[i - 1] & 0xC0) == 0x80)
        i--, cont++;
    if (i == 0) return k;
    unsigned char c = (unsigned char)b[i - 1];
    size_t need = c >= 0xF5 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 1;
    return need > 1 && cont + 1 < need ? i - 1 : k;
}

static void stop_drop(chat_stop *s) {
    if (!s->drop) return;
    memmove(s->buf, s->buf + s->drop, s->len - s->drop);
    s->len -= s->drop;
    s->drop = 0;
}

int chat_stop_feed(chat_stop *s, const char *piece, size_t len, chat_emit *e) {
    e->text = s->buf;
    e->len = 0;
    e->stop = s->hit;
    if (s->hit >= 0) return 0;
    stop_drop(s);
    if (buf_append(&s->buf, &s->len, &s->cap, piece, len)) return E0_ENOMEM;
    e->text = s->buf;

    /* The earliest complete stop string. Nothing emitted earlier can start
     * one: a suffix that was a prefix of a stop string was held back. */
    size_t best = SIZE_MAX;
    int which = -1;
    for (size_t k = 0; k < s->n; k++) {
        const char *at = memmem(s->buf, s->len, s->stops[k], s->lens[k]);
        if (at && (size_t)(at - s->buf) < best) best = (size_t)(at - s->buf), which = (int)k;
    }
    if (which >= 0) {
        s->hit = which;
        s->len = best;
        e->len = best; /* the text before a stop string is final */
        e->stop = which;
        return 0;
    }
    /* Hold back the longest suffix that is a proper prefix of a stop string. */
    size_t keep = s->len;
    for (size_t k = 0; k < s->n; k++) {
        size_t from = s->len >= s->lens[k] ? s->len - s->lens[k] + 1 : 0;
        for (size_t p = from; p < keep; p++)
            if (memcmp(s->buf + p, s->stops[k], s->len - p) == 0) {
                keep = p;
                break;
            }
    }
    e->len = utf8_cut(s->buf, keep);
    s->drop = e->len;
    return 0;
}

void chat_stop_finish(chat_stop *s, chat_emit *e) {
    e->text = s->buf;
    e->len = 0;
    e->stop = s->hit;
    if (s->hit >= 0) return;
    stop_drop(s);
    e->len = s->len;
    s->drop = s->len;
}

/* ---- reasoning split ---------------------------------------------------------- */

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

void chat_split_reasoning(const char *text, size_t len, chat_split *out) {
    static const char OPEN[] = "<think>", CLOSE[] = "</think>";
    slice s = {text ? text : "", text ? len : 0};
    *out = (chat_split){false, s.p, 0, s.p, s.n};
    size_t i = 0;
    while (i < s.n && is_space(s.p[i]))
        i++;
    bool opened = s.n - i >= strlen(OPEN) && memcmp(s.p + i, OPEN, strlen(OPEN)) == 0;
    slice r = s;
    if (opened) r = (slice){s.p + i + strlen(OPEN), s.n - i - strlen(OPEN)};
    const char *end = sl_find(r, CLOSE);
    slice c = {s.p + s.n, 0};
    if (end) {
        const char *after = end + strlen(CLOSE);
        c = (slice){after, (size_t)(s.p + s.n - after)};
        r.n = (size_t)(end - r.p);
    } else if (!opened) {
        return; /* no reasoning: content is the whole text */
    }
    while (r.n && is_space(r.p[0]))
        r.p++, r.n--;
    while (r.n && is_space(r.p[r.n - 1]))
        r.n--;
    while (c.n && is_space(c.p[0]))
        c.p++, c.n--;
    *out = (chat_split){true, r.p, r.n, c.p, c.n};
}
