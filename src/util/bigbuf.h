/* Large weight buffers (the expert cache, whole-layer and hot buffers):
 * 2 MiB-aligned and marked for transparent huge pages, so that kernels
 * packing 16 rows at a time from them do not miss the TLB on every
 * 4 KiB page. The kernel's THP setting decides; without THP this is a
 * page-aligned allocation like any other. Free with free(). */
#ifndef E0_UTIL_BIGBUF_H
#define E0_UTIL_BIGBUF_H

#include <stddef.h>

/* bytes rounded up to 2 MiB, zeroed and faulted in; NULL when out of memory. */
void *e0_big_alloc(size_t bytes);

#endif
