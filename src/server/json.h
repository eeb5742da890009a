/* JSON text out, for the server's answers: appending to an srv_buf
 * (engine.h), and string literals of arbitrary bytes.
 *
 * Generated text may hold any bytes: srv_json_str escapes control
 * characters, '"' and '\\', and replaces invalid UTF-8 (a byte-level BPE
 * token may end inside a character) with U+FFFD, so what it writes is
 * always valid JSON. An allocation that fails leaves the buffer short;
 * callers check b->p at the end (NULL when the first append failed), as
 * every writer here only appends.
 *
 * Threads: reentrant; a buffer belongs to one thread at a time. */
#ifndef E0_SERVER_JSON_H
#define E0_SERVER_JSON_H

#include "server/engine.h"

#include <stddef.h>

/* Appends the NUL-terminated s. */
void srv_put(srv_buf *b, const char *s);
/* Appends printf output (at most 511 bytes per call). */
void srv_putf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends the JSON string literal of s[0..n), quotes included. */
void srv_json_str(srv_buf *b, const char *s, size_t n);
void srv_json_cstr(srv_buf *b, const char *s);

#endif
