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
/* Appends n bytes of s (sb_puts: a string), keeping the buffer
 * NUL-terminated. */
void sb_put(sbuf *b, const char *s, size_t n);
void sb_puts(sbuf *b, const char *s);

/* Appends n bytes of s to the NUL-terminated buffer *p of *len bytes and
 * *cap capacity, growing it by doubling (util/arr.h): 0, or -1 when out of
 * memory (the buffer is unchanged). For string builders kept as separate
 * fields (srv_buf, the tool-call parser's buffers). */
int buf_append(char **p, size_t *len, size_t *cap, const char *s, size_t n);
void sb_free(sbuf *b);

#endif
