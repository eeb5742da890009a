/* Error reporting for library code: functions return an E0_* status and fill
 * a caller buffer of E0_ERR_MAX bytes with a message that names the file,
 * tensor or field. Only main() exits. */
#ifndef E0_UTIL_ERR_H
#define E0_UTIL_ERR_H

#include "edge0.h"

/* Writes the message (if err != NULL) and returns code, so callers can
 * `return e0_fail(err, E0_EFORMAT, "...")`. */
int e0_fail(char *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefixes an existing message: "<prefix>: <old message>". Returns code. */
int e0_wrap(char *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
