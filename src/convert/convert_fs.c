/* File-system helpers of edge0 convert. See convert_fs.h. */
#include "convert/convert_fs.h"

#include "util/err.h"
#include "util/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static bool ends(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

int convert_fs_pwrite(int fd, const void *buf, size_t len, uint64_t off) {
    const uint8_t *b = buf;
    while (len) {
        ssize_t k = pwrite(fd, b, len, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k;
        len -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

int convert_fs_write_text(const char *path, const char *text, bool sync, char *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return e0_fail(err, E0_EIO, "%s: cannot create: %s", path, strerror(errno));
    int rc = convert_fs_pwrite(fd, text, strlen(text), 0) != 0 || (sync && fsync(fd) != 0);
    int e = errno;
    if (close(fd) != 0) rc = 1;
    return rc ? e0_fail(err, E0_EIO, "%s: write failed: %s", path, strerror(e)) : 0;
}

/* The files mlx-lm carries over next to the weights. */
static bool aux_file(const char *n) {
    static const char *const names[] = {"generation_config.json", "tokenizer.json",       "tokenizer_config.json",
                                        "special_tokens_map.json", "added_tokens.json",  "vocab.json",
                                        "merges.txt",              "tokenizer.model",    "chat_template.jinja",
                                        "chat_template.json",      "preprocessor_config.json"};
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
        if (convert_fs_pwrite(out, buf, (size_t)k, off) != 0) rc = e0_fail(err, E0_EIO, "%s: write failed: %s", to, strerror(errno));
        off += (uint64_t)k;
    }
    if (!rc && sync && fsync(out) != 0) rc = e0_fail(err, E0_EIO, "%s: fsync failed: %s", to, strerror(errno));
    if (close(out) != 0 && !rc) rc = e0_fail(err, E0_EIO, "%s: close failed: %s", to, strerror(errno));
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
        if (!from || !to) rc = e0_fail(err, E0_ENOMEM, "out of memory");
        else if (stat(from, &st) == 0 && S_ISREG(st.st_mode) && !(rc = copy_file(from, to, sync, err))) (*copied)++;
        free(from);
        free(to);
    }
    closedir(d);
    return rc;
}

/* ---- the atomic directory ---------------------------------------------------- */

char *convert_fs_parent(const char *path) {
    const char *sl = strrchr(path, '/');
    if (!sl) return strdup(".");
    if (sl == path) return strdup("/");
    return strndup(path, (size_t)(sl - path));
}

int convert_fs_check_space(const char *dst, uint64_t need_bytes, char *err) {
    char *par = convert_fs_parent(dst);
    if (!par) return e0_fail(err, E0_ENOMEM, "out of memory");
    struct statvfs v;
    int rc = 0;
    if (statvfs(par, &v) != 0) {
        rc = e0_fail(err, errno == ENOENT ? E0_ENOTFOUND : E0_EIO, "%s: %s", par, strerror(errno));
    } else {
        const uint64_t avail = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
        if (avail < need_bytes + (64u << 20))
            rc = e0_fail(err, E0_EIO, "%s: the converted checkpoint needs %.2f GB but only %.2f GB are free", par,
                         (double)need_bytes / 1e9, (double)avail / 1e9);
    }
    free(par);
    return rc;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

void convert_fs_rmtree(const char *dir) { nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

void convert_fs_sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* What --force may replace: an empty directory or one that holds a model
 * (config.json or safetensors files) and no subdirectories. */
int convert_fs_check_replace(const char *dst, const char *src, char *err) {
    struct stat st;
    if (stat(dst, &st) != 0 || !S_ISDIR(st.st_mode))
        return e0_fail(err, E0_EINVAL, "%s exists and is not a directory; --force replaces only model directories",
                       dst);
    char rd[PATH_MAX], rs[PATH_MAX];
    if (realpath(dst, rd) && realpath(src, rs)) {
        size_t l = strlen(rd);
        if (strcmp(rd, rs) == 0 || (strncmp(rs, rd, l) == 0 && (rs[l] == '/' || l == 1)))
            return e0_fail(err, E0_EINVAL, "%s holds the source %s; refusing to replace it", dst, src);
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
        return e0_fail(err, E0_EINVAL,
                       "%s does not look like a model directory (no config.json or *.safetensors, or it has "
                       "subdirectories); refusing to replace it even with --force",
                       dst);
    return 0;
}

/* Moves tmp to dst: never replacing anything unless `replace`, and then
 * swapping atomically where the kernel can, the old tree removed after. */
int convert_fs_install(const char *tmp, const char *dst, bool replace, char *err) {
    struct stat st;
    const bool exists = lstat(dst, &st) == 0;
    if (exists && !replace) return e0_fail(err, E0_EINVAL, "%s appeared during the conversion; not replacing it", dst);
    if (!exists) {
#ifdef RENAME_NOREPLACE
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_NOREPLACE) == 0) return 0;
        if (errno != EINVAL && errno != ENOSYS)
            return e0_fail(err, errno == EEXIST ? E0_EINVAL : E0_EIO, "rename %s -> %s: %s", tmp, dst, strerror(errno));
#endif
        if (rename(tmp, dst) != 0) return e0_fail(err, E0_EIO, "rename %s -> %s: %s", tmp, dst, strerror(errno));
        return 0;
    }
#ifdef RENAME_EXCHANGE
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_EXCHANGE) == 0) {
        convert_fs_rmtree(tmp); /* now the old DST */
        return 0;
    }
#endif
    size_t l = strlen(dst) + 16;
    char *old = malloc(l);
    if (!old) return e0_fail(err, E0_ENOMEM, "out of memory");
    snprintf(old, l, "%s.old-XXXXXX", dst);
    int rc = 0;
    if (!mkdtemp(old) || rename(dst, old) != 0) {
        rc = e0_fail(err, E0_EIO, "cannot move %s aside: %s", dst, strerror(errno));
    } else if (rename(tmp, dst) != 0) {
        rc = e0_fail(err, E0_EIO, "rename %s -> %s: %s", tmp, dst, strerror(errno));
        rename(old, dst);
    } else {
        convert_fs_rmtree(old);
    }
    free(old);
    return rc;
}

