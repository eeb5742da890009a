#include "util/bigbuf.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

void *e0_big_alloc(size_t bytes) {
    if (!bytes) bytes = 1;
    const size_t n = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = aligned_alloc(HUGE_PAGE, n);
    if (!p) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE); /* advice only: failure leaves 4 KiB pages */
#endif
    /* Fault every page in now. A first touch later costs a page clear (and
     * compaction under a memory cap) in the middle of decode: measured on the
     * 35B shape under an 8 GiB cgroup, decode after a whole-layer prefill ran
     * at 1.5 tok/s without this and 2.8-3.1 with it (docs/experiments.md). */
#ifdef MADV_POPULATE_WRITE
    if (madvise(p, n, MADV_POPULATE_WRITE) == 0) return p;
#endif
    memset(p, 0, n); /* older kernels */
    return p;
}
