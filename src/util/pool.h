/* The compute thread pool: one per process, persistent, as ds4's
 * parallel_for. The caller of pool_for is thread 0 and works alongside the
 * n - 1 workers; nothing is created or allocated per call.
 *
 * Threads: pool_for may be called from any thread. One call runs on the
 * workers at a time; a call made while the pool is busy (another thread's
 * call, or a pool_for nested inside a job) runs serially in its caller.
 * Callers therefore must make a job's result independent of how [0, n) is
 * split: the kernels partition output rows and never split a reduction, so
 * results do not depend on the thread count.
 *
 * Threads claim chunks from a shared counter, so a descheduled worker
 * delays only the chunk it holds. Workers spin briefly after a job (decode
 * issues hundreds of small matmuls back to back), then sleep on a
 * condition variable. The I/O threads of the
 * streaming layer are a separate pool (stream/iopool.h). */
#ifndef E0_UTIL_POOL_H
#define E0_UTIL_POOL_H

#include <stdint.h>

/* fn runs items [i0, i1) as thread `tid` (0 = the caller). */
typedef void (*pool_fn)(void *ctx, int64_t i0, int64_t i1, int tid);

/* Starts (or resizes to) n threads, the caller included; n <= 0 means one
 * per online core. 0, or E0_ENOMEM when no worker could be started (the
 * pool then runs everything serially). */
int pool_init(int n_threads);
/* Joins the workers; pool_for then runs serially until the next pool_init. */
void pool_shutdown(void);
/* Threads a pool_for uses, the caller included (1 before pool_init). */
int pool_threads(void);
/* The number of online cores. */
int pool_cores(void);

/* Splits [0, n) into chunks whose bounds are multiples of `align` (except
 * n), runs fn on each from any of the pool's threads, and returns when all
 * have finished. Jobs too small to pay for a wake-up belong in the caller. */
void pool_for(int64_t n, int64_t align, pool_fn fn, void *ctx);
/* The same with one item per chunk: for a few large items of unequal size
 * (whole experts), claimed one at a time. */
void pool_for_each(int64_t n, pool_fn fn, void *ctx);

#endif
