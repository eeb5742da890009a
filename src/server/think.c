/* The reasoning/answer splitter of think.h, as a state machine over a
 * buffer of undecided bytes:
 *
 *   START   leading whitespace and a possible partial "<think>": undecided
 *   R_LEAD  after "<think>": whitespace is dropped (R is trimmed)
 *   R       reasoning; held back: trailing whitespace and a partial "</think>"
 *   C_LEAD  after "</think>": whitespace is dropped (C is trimmed)
 *   CONTENT everything is content, nothing held back
 */
#include "server/think.h"

#include "util/sbuf.h"

#include <stdlib.h>
#include <string.h>

enum { START, R_LEAD, R, C_LEAD, CONTENT };

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

void srv_think_init(srv_think *t) { memset(t, 0, sizeof *t); }

void srv_think_init_opened(srv_think *t) {
    memset(t, 0, sizeof *t);
    t->state = R_LEAD;
    t->has_reasoning = true;
}

bool srv_think_in_reasoning(const srv_think *t) { return t->state == R_LEAD || t->state == R; }

void srv_think_free(srv_think *t) {
    free(t->pend);
    memset(t, 0, sizeof *t);
}

static void drop(srv_think *t, size_t n) {
    if (!n) return;
    memmove(t->pend, t->pend + n, t->len - n);
    t->len -= n;
}

static size_t lead_space(const srv_think *t) {
    size_t i = 0;
    while (i < t->len && is_space(t->pend[i])) i++;
    return i;
}

/* Hands out pend[0..n) and drops it. */
static int emit(srv_think *t, int reasoning, size_t n, srv_think_fn fn, void *user) {
    int rc = n ? fn(user, reasoning, t->pend, n) : 0;
    drop(t, n);
    return rc;
}

static int step(srv_think *t, srv_think_fn fn, void *user) {
    for (;;) {
        size_t i;
        switch (t->state) {
        case START:
            i = lead_space(t);
            if (t->len - i >= strlen(OPEN)) {
                if (!memcmp(t->pend + i, OPEN, strlen(OPEN))) {
                    t->has_reasoning = true;
                    drop(t, i + strlen(OPEN));
                    t->state = R_LEAD;
                } else {
                    t->state = CONTENT;
                }
            } else if (t->len > i && memcmp(t->pend + i, OPEN, t->len - i)) {
                t->state = CONTENT;
            } else {
                return 0; /* whitespace and maybe a partial "<think>": undecided */
            }
            break;
        case R_LEAD:
        case C_LEAD:
            drop(t, lead_space(t));
            if (!t->len) return 0;
            t->state = t->state == R_LEAD ? R : CONTENT;
            break;
        case R: {
            const char *end = memmem(t->pend, t->len, CLOSE, strlen(CLOSE));
            if (end) {
                size_t at = (size_t)(end - t->pend), n = at;
                while (n && is_space(t->pend[n - 1])) n--;
                int rc = emit(t, 1, n, fn, user);
                drop(t, at - n + strlen(CLOSE));
                t->state = C_LEAD;
                if (rc) return rc;
                break;
            }
            /* hold back a partial "</think>" at the end and the whitespace before it */
            size_t keep = 0;
            for (size_t k = strlen(CLOSE) - 1; k > 0; k--)
                if (k <= t->len && !memcmp(t->pend + t->len - k, CLOSE, k)) {
                    keep = k;
                    break;
                }
            while (keep < t->len && is_space(t->pend[t->len - keep - 1])) keep++;
            return emit(t, 1, t->len - keep, fn, user);
        }
        default:
            return emit(t, 0, t->len, fn, user);
        }
    }
}

int srv_think_feed(srv_think *t, const char *s, size_t n, srv_think_fn fn, void *user) {
    if (!n) return 0;
    if (buf_append(&t->pend, &t->len, &t->cap, s, n)) return -1;
    return step(t, fn, user);
}

int srv_think_finish(srv_think *t, srv_think_fn fn, void *user) {
    int rc = 0;
    if (t->state == START) {
        rc = emit(t, 0, t->len, fn, user); /* no "<think>": the text is content, unchanged */
    } else if (t->state == R) {
        size_t n = t->len;
        while (n && is_space(t->pend[n - 1])) n--;
        rc = emit(t, 1, n, fn, user);
    }
    t->len = 0;
    t->state = CONTENT;
    return rc;
}
