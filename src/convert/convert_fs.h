/* The file-system side of edge0 convert: positioned writes, the copied
 * tokenizer and generation files, and the atomic output directory (free
 * space, --force checks, the final rename, removal on failure). */
#ifndef E0_CONVERT_CONVERT_FS_H
#define E0_CONVERT_CONVERT_FS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* pwrite of exactly len bytes at off; -1 with errno on failure. */
int convert_fs_pwrite(int fd, const void *buf, size_t len, uint64_t off);
/* Creates path (it must not exist) holding text; fsync'd when sync. */
int convert_fs_write_text(const char *path, const char *text, bool sync, char *err);
/* Copies the tokenizer, chat-template and generation files of src into dir. */
int convert_fs_copy_aux(const char *src, const char *dir, bool sync, size_t *copied, char *err);

/* The directory part of path, malloc'd ("." when there is none). */
char *convert_fs_parent(const char *path);
/* Fails unless the file system of dst's parent has need bytes (+ 64 MiB) free. */
int convert_fs_check_space(const char *dst, uint64_t need, char *err);
/* What --force may replace: an empty directory or one holding a model
 * (config.json or *.safetensors) and no subdirectories; never src or a
 * directory above it. */
int convert_fs_check_replace(const char *dst, const char *src, char *err);
/* Moves the finished tmp directory to dst: never over an existing dst
 * unless replace, and then by an atomic exchange where the kernel has one,
 * the old tree removed afterwards. */
int convert_fs_install(const char *tmp, const char *dst, bool replace, char *err);
void convert_fs_rmtree(const char *dir);
void convert_fs_sync_dir(const char *dir);

#endif
