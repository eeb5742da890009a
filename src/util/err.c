#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int e0_fail(char *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, E0_ERR_MAX, fmt, ap);
        va_end(ap);
    }
    return code;
}

int e0_wrap(char *err, int code, const char *fmt, ...) {
    if (!err) return code;
    char old[E0_ERR_MAX];
    snprintf(old, sizeof old, "%s", err);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err, E0_ERR_MAX, fmt, ap);
    va_end(ap);
    if (n >= 0 && n < E0_ERR_MAX - 2) {
        size_t at = (size_t)n, room = E0_ERR_MAX - at - 2, ol = strlen(old);
        if (ol > room) ol = room;
        memcpy(err + at, ": ", 2);
        memcpy(err + at + 2, old, ol); /* truncates a long message, as snprintf would */
        err[at + 2 + ol] = 0;
    }
    return code;
}

const char *e0_status_str(int code) {
    switch (code) {
    case E0_OK: return "ok";
    case E0_EIO: return "I/O error";
    case E0_EFORMAT: return "malformed input";
    case E0_ENOMEM: return "out of memory";
    case E0_EINVAL: return "invalid argument";
    case E0_ENOTFOUND: return "not found";
    case E0_EUNSUPPORTED: return "unsupported";
    case E0_ERANGE: return "out of range";
    default: return "unknown error";
    }
}
