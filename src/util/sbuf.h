/* A growable string for building JSON and headers. Errors are sticky: after
 * an allocation failure `oom` is set and further appends do nothing. */
#ifndef E0_UTIL_SBUF_H
#define E0_UTIL_SBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_free(sbuf *b);

#endif
