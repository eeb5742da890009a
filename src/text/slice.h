/* String slices: a pointer and a length into text that lives elsewhere,
 * for the Python str methods the chat template uses (chat.c) and the
 * reasoning split (chat_stop.c). */
#ifndef E0_TEXT_SLICE_H
#define E0_TEXT_SLICE_H

#include <stddef.h>
#include <string.h>

typedef struct {
    const char *p;
    size_t n;
} slice;

static inline slice sl_of(const char *s) {
    return (slice){s, strlen(s)};
}

/* The first occurrence of needle in s, or NULL. */
static inline const char *sl_find(slice s, const char *needle) {
    return memmem(s.p, s.n, needle, strlen(needle));
}

#endif
