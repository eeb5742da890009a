/* File-system helpers of edge0 convert. See convert_fs.h. */
#include "convert/convert_fs.h"

#include "io/stwriter.h"
#include "util/err.h"
#include "util/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool ends(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* The files mlx-lm carries over next to the weights. */
static bool aux_file(const char *n) {
    static const char *const names[] = {"generation_config.json",
                                        "tokenizer.json",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "added_tokens.json",
                                        "vocab.json",
                                        "merges.txt",
                                        "tokenizer.model",
                                        "chat_template.jinja",
                                        "chat_template.json",
                                        "preprocessor_config.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(n, names[i]) == 0) return true;
    return ends(n, ".tiktoken");
}

static int copy_file(const char *from, const char *to, bool sync, char *err) {
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0) return e0_fail(err, E0_EIO, "%s: cannot open: %s", from, strerror(errno));
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        int e = errno;
        close(in);
        return e0_fail(err, E0_EIO, "%s: cannot create: %s", to, strerror(e));
    }
    int rc = 0;
    char *buf = malloc(1u << 20);
    uint64_t off = 0;
    if (!buf) rc = e0_fail(err, E0_ENOMEM, "out of memory");
    while (!rc) {
        ssize_t k = read(in, buf, 1u << 20);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) rc = e0_fail(err, E0_EIO, "%s: read failed: %s", from, strerror(errno));
        if (k <= 0) break;
        if (stw_pwrite(out, buf, (size_t)k, off) != 0)
            rc = e0_fail(err, E0_EIO, "%s: write failed: %s", to, strerror(errno));
        off += (uint64_t)k;
    }
    if (!rc && sync && fsync(out) != 0)
        rc = e0_fail(err, E0_EIO, "%s: fsync failed: %s", to, strerror(errno));
    if (close(out) != 0 && !rc)
        rc = e0_fail(err, E0_EIO, "%s: close failed: %s", to, strerror(errno));
    close(in);
    free(buf);
    return rc;
}

int convert_fs_copy_aux(const char *src, const char *dir, bool sync, size_t *copied, char *err) {
    DIR *d = opendir(src);
    if (!d) return e0_fail(err, E0_EIO, "%s: cannot list: %s", src, strerror(errno));
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d))) {
        if (!aux_file(de->d_name)) continue;
        char *from = e0_path_join(src, de->d_name), *to = e0_path_join(dir, de->d_name);
        struct stat st;
        if (!from || !to)
            rc = e0_fail(err, E0_ENOMEM, "out of memory");
        else if (stat(from, &st) == 0 && S_ISREG(st.st_mode) &&
                 !(rc = copy_file(from, to, sync, err)))
            (*copied)++;
        free(from);
        free(to);
    }
    closedir(d);
    return rc;
}

/* ---- --force ------------------------------------------------------------------- */

/* What --force may replace: an empty directory or one that holds a model
 * (config.json or safetensors files) and no subdirectories. */
int convert_fs_check_replace(const char *dst, const char *src, char *err) {
    struct stat st;
    if (stat(dst, &st) != 0 || !S_ISDIR(st.st_mode))
        return e0_fail(err, E0_EINVAL,
                       "%s exists and is not a directory; --force replaces only model directories",
                       dst);
    char rd[PATH_MAX], rs[PATH_MAX];
    if (realpath(dst, rd) && realpath(src, rs)) {
        size_t l = strlen(rd);
        if (strcmp(rd, rs) == 0 || (strncmp(rs, rd, l) == 0 && (rs[l] == '/' || l == 1)))
            return e0_fail(err, E0_EINVAL, "%s holds the source %s; refusing to replace it", dst,
                           src);
    }
    DIR *d = opendir(dst);
    if (!d) return e0_fail(err, E0_EIO, "%s: cannot list: %s", dst, strerror(errno));
    bool model = false, other_dir = false, empty = true;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        empty = false;
        model |= !strcmp(de->d_name, "config.json") || ends(de->d_name, ".safetensors");
        char *pth = e0_path_join(dst, de->d_name);
        if (pth && lstat(pth, &st) == 0 && S_ISDIR(st.st_mode)) other_dir = true;
        free(pth);
    }
    closedir(d);
    if (!empty && (!model || other_dir))
        return e0_fail(
            err, E0_EINVAL,
            "%s does not look like a model directory (no config.json or *.safetensors, or it has "
            "subdirectories); refusing to replace it even with --force",
            dst);
    return 0;
}
