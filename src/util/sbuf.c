#include "util/sbuf.h"

#include "util/arr.h"

#include <stdarg.h>
#include <stdint.h>
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
        if ((size_t)k >= SIZE_MAX - b->n ||
            arr_reserve((void **)&b->p, &b->cap, b->n + (size_t)k + 1, 1)) {
            b->oom = true;
            return;
        }
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
    if (n >= SIZE_MAX - *len || arr_reserve((void **)p, cap, *len + n + 1, 1)) return -1;
    if (n) memcpy(*p + *len, s, n);
    *len += n;
    (*p)[*len] = 0;
    return 0;
}
