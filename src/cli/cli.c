/* Helpers the commands share (cli.h): errors, option values, files, clocks. */
#include "cli/cli.h"

#include "util/arr.h"
#include "util/file.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("edge0: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

long cli_parse_long(const char *opt, const char *val, long lo, long hi) {
    if (!val) {
        cli_error("%s needs a value", opt);
        return -1;
    }
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || end == val || *end || v < lo || v > hi) {
        cli_error("%s: '%s' is not an integer in [%ld, %ld]", opt, val, lo, hi);
        return -1;
    }
    return v;
}

int cli_parse_ids(const char *opt, const char *s, int32_t **out, size_t *n) {
    size_t cap = 16, k = 0;
    int32_t *v = s ? malloc(cap * sizeof *v) : NULL;
    if (!v) {
        cli_error("%s needs a comma-separated list of token ids", opt);
        return -1;
    }
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            cli_error("%s: '%s' is not a comma-separated list of non-negative integers", opt, s);
            free(v);
            return -1;
        }
        if (arr_reserve((void **)&v, &cap, k + 1, sizeof *v)) {
            free(v);
            return -1;
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        cli_error("%s is empty", opt);
        free(v);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
}

char *cli_read_text_file(const char *opt, const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        cli_error("%s: cannot open %s: %s", opt, path, strerror(errno));
        return NULL;
    }
    char *b = NULL, err[E0_ERR_MAX];
    size_t n = 0;
    const int rc = e0_read_stream(f, strcmp(path, "-") ? path : "standard input", &b, &n, 64u << 20, err);
    if (f != stdin) fclose(f);
    if (rc) {
        cli_error("%s: cannot read %s", opt, err);
        return NULL;
    }
    while (n && (b[n - 1] == '\n' || b[n - 1] == '\r'))
        b[--n] = 0;
    if (!n || strlen(b) != n) {
        cli_error("%s: %s is %s", opt, path, n ? "not text (it holds a NUL byte)" : "empty");
        free(b);
        return NULL;
    }
    return b;
}

bool cli_color(void) {
    const char *nc = getenv("NO_COLOR"); /* no-color.org: set and not empty */
    return isatty(STDOUT_FILENO) && !(nc && *nc);
}

unsigned long long cli_peak_rss(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (unsigned long long)ru.ru_maxrss * 1024ull : 0;
}
