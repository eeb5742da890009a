#include "util/sbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = true;
            return;
        }
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap <= b->n + (size_t)k) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

void sb_put(sbuf *b, const char *s, size_t n) {
    if (!b->oom && buf_append(&b->p, &b->n, &b->cap, s, n)) b->oom = true;
}

void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

void sb_free(sbuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

int buf_append(char **p, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *q = realloc(*p, c);
        if (!q) return -1;
        *p = q;
        *cap = c;
    }
    if (n) memcpy(*p + *len, s, n);
    *len += n;
    (*p)[*len] = 0;
    return 0;
}
