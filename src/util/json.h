/* JSON string literals: the one escaper every room uses (the server's
 * answers, the CLI's messages and output). The chat template's
 * json.dumps (text/chat.c) is not this: it must match Python's bytes. */
#ifndef E0_UTIL_JSON_H
#define E0_UTIL_JSON_H

#include "util/sbuf.h"

#include <stddef.h>

/* Bytes of the valid UTF-8 sequence at s (n bytes left): 1..4, or 0 when
 * it is not one (overlong, a surrogate, past U+10FFFF, cut short). */
size_t utf8_len(const unsigned char *s, size_t n);

/* Writes s[0..n) as a JSON string literal, quotes included, through put:
 * valid UTF-8 as it is; '"' and '\\' escaped; \n, \t, \r as such; other
 * control bytes as \u00XX; each byte of invalid UTF-8 as \ufffd. */
typedef void (*json_put_fn)(void *ctx, const char *s, size_t n);
void json_str(json_put_fn put, void *ctx, const char *s, size_t n);

/* The same appended to b. */
void sb_json_str(sbuf *b, const char *s, size_t n);

#endif
