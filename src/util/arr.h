/* Growable arrays: the one way the tree grows a heap array to fit, so that
 * the doubling, the overflow checks and the what-happens-on-failure rule are
 * written once. Byte strings that are appended to go through util/sbuf.h,
 * which grows through this too. */
#ifndef E0_UTIL_ARR_H
#define E0_UTIL_ARR_H

#include <stddef.h>

/* Makes room for `need` elements of `elem` bytes in the array *p of *cap
 * elements (*p may be NULL with *cap 0): when need > *cap the capacity
 * doubles, from 16 elements, until it holds `need` (exactly `need` where
 * doubling would overflow), and *p is reallocated. The first *cap elements
 * keep their values; the new ones are uninitialised. Returns 0, or -1 when
 * need * elem does not fit in a size_t or realloc fails; *p and *cap are then
 * unchanged and *p is still the caller's to free. *cap never shrinks, so a
 * capacity may be kept larger than the array's count; parallel arrays that
 * share one count each keep their own capacity, or are reserved one after
 * another and the shared capacity is updated only once all have grown.
 *
 * p is the address of a typed pointer cast to void ** (as with
 * `arr_reserve((void **)&ids, &cap, n + 1, sizeof *ids)`): object pointers
 * share one representation on every target edge0 builds for. */
int arr_reserve(void **p, size_t *cap, size_t need, size_t elem);

#endif
