/* The file-system side of edge0 convert that the shared writer
 * (io/stwriter.h) does not own: the copied tokenizer and generation files
 * and what --force may replace. */
#ifndef E0_CONVERT_CONVERT_FS_H
#define E0_CONVERT_CONVERT_FS_H

#include <stdbool.h>
#include <stddef.h>

/* Copies the tokenizer, chat-template and generation files of src into dir. */
int convert_fs_copy_aux(const char *src, const char *dir, bool sync, size_t *copied, char *err);

/* What --force may replace: an empty directory or one holding a model
 * (config.json or *.safetensors) and no subdirectories; never src or a
 * directory above it. */
int convert_fs_check_replace(const char *dst, const char *src, char *err);

#endif
