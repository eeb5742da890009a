#include "util/file.h"

#include "util/arr.h"
#include "util/err.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int e0_read_stream(FILE *f, const char *name, char **out, size_t *len, size_t max, char *err) {
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (arr_reserve((void **)&buf, &cap, n + 4096 + 1, 1)) {
            rc = e0_fail(err, E0_ENOMEM, "%s: out of memory", name);
            break;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (n > max) {
            rc = e0_fail(err, E0_EFORMAT, "%s: larger than %zu bytes", name, max);
            break;
        }
        if (r == 0) {
            if (ferror(f)) rc = e0_fail(err, E0_EIO, "%s: read failed", name);
            break;
        }
    }
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

int e0_read_file(const char *path, char **out, size_t *len, size_t max, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return e0_fail(err, errno == ENOENT ? E0_ENOTFOUND : E0_EIO, "%s: cannot open: %s", path,
                       strerror(errno));
    int rc = e0_read_stream(f, path, out, len, max, err);
    fclose(f);
    return rc;
}

char *e0_path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int e0_file_exists(const char *path) { return access(path, F_OK) == 0; }
