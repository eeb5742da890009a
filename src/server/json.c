/* JSON text out (json.h). */
#include "server/json.h"

#include "util/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void srv_put(srv_buf *b, const char *s) { srv_buf_put(b, s, strlen(s)); }

void srv_putf(srv_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) srv_buf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void put_fn(void *b, const char *s, size_t n) {
    srv_buf_put(b, s, n);
}

void srv_json_str(srv_buf *b, const char *s, size_t n) {
    json_str(put_fn, b, s, n);
}

void srv_json_cstr(srv_buf *b, const char *s) { srv_json_str(b, s, strlen(s)); }
