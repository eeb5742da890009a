/* Small file helpers shared by the loaders. */
#ifndef E0_UTIL_FILE_H
#define E0_UTIL_FILE_H

#include <stddef.h>
#include <stdio.h>

/* Reads f to its end (at most `max` bytes) into a NUL-terminated buffer the
 * caller frees; name is for messages. f stays open. */
int e0_read_stream(FILE *f, const char *name, char **out, size_t *len, size_t max, char *err);
/* Reads a whole file (at most `max` bytes) into a NUL-terminated buffer the
 * caller frees. E0_ENOTFOUND if it does not exist. */
int e0_read_file(const char *path, char **out, size_t *len, size_t max, char *err);

/* "dir/name", malloc'd; NULL when out of memory. */
char *e0_path_join(const char *dir, const char *name);

int e0_file_exists(const char *path);

#endif
