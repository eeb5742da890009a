/* Several direct reads in flight at once, through io_uring (liburing).
 *
 * An expert bundle is 3 to 9 ranges in different tensors of the checkpoint
 * (the weights, scales and biases of gate, up and down). Read one after the
 * other by one load thread, each range waits out the device's latency
 * alone and the disk never sees more than load_threads reads queued;
 * submitted together, the bundle costs about one round trip and the queue
 * is load_threads x ranges deep, which this kind of virtual disk rewards
 * (docs/experiments.md sections 51 and 83). pread has no batched form for
 * scattered offsets and file descriptors; io_uring is the kernel's
 * interface for exactly this, and liburing its maintained wrapper.
 *
 * Each thread keeps one small ring, made on its first batch and closed when
 * the thread exits (a pthread key's destructor). Where io_uring cannot be
 * had (an old kernel, a seccomp filter, kernel.io_uring_disabled), and for
 * any range that is not a whole direct read or whose read failed or came
 * back short, the range goes through st_pread_direct one at a time: that
 * path owns the EINVAL fallback to the page cache and the error messages,
 * so results and errors are the same either way. */
#include "io/safetensors.h"
#include "io/st_internal.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

enum { RING_ENTRIES = 32, SUBMIT_TRIES = 1000 };

static pthread_key_t ring_key;
static pthread_once_t ring_once = PTHREAD_ONCE_INIT;
static bool ring_key_ok;
static atomic_bool uring_unavailable; /* the kernel refused a ring: do not ask again */
static atomic_bool uring_forced_off;  /* tests: st_debug_uring(false) */
static atomic_ullong ring_reads;      /* ranges read through a ring */

static void ring_free(void *p) {
    io_uring_queue_exit(p);
    free(p);
}

static void ring_key_init(void) {
    ring_key_ok = pthread_key_create(&ring_key, ring_free) == 0;
}

/* This thread's ring, or NULL (then the caller reads one range at a time). */
static struct io_uring *thread_ring(void) {
    if (atomic_load_explicit(&uring_unavailable, memory_order_relaxed) ||
        atomic_load_explicit(&uring_forced_off, memory_order_relaxed))
        return NULL;
    pthread_once(&ring_once, ring_key_init);
    if (!ring_key_ok) return NULL;
    struct io_uring *r = pthread_getspecific(ring_key);
    if (r) return r;
    if (!(r = malloc(sizeof *r))) return NULL;
    const int rc = io_uring_queue_init(RING_ENTRIES, r, 0);
    if (rc < 0) {
        free(r);
        if (rc == -ENOSYS || rc == -EPERM || rc == -EACCES)
            atomic_store_explicit(&uring_unavailable, true, memory_order_relaxed);
        return NULL;
    }
    if (pthread_setspecific(ring_key, r) != 0) {
        ring_free(r);
        return NULL;
    }
    return r;
}

/* Drops this thread's ring after a failure the ring itself reported
 * (nothing of ours is in flight on it any more). */
static void ring_drop(struct io_uring *r) {
    pthread_setspecific(ring_key, NULL);
    ring_free(r);
}

/* Whether range r can be one direct read of its enclosing aligned span,
 * as st_pread_direct would make it; its span's start and length if so. */
static bool whole_direct(const st_set *s, const st_read *r, uint64_t *a, uint64_t *span) {
    if (r->file >= s->nfiles) return false;
    st_file *f = &s->files[r->file];
    const uint64_t A = ST_DIRECT_ALIGN;
    if (r->len == 0 || r->off > f->size || r->len > f->size - r->off ||
        ((uintptr_t)r->dst - r->off) % A != 0 ||
        !atomic_load_explicit(&f->direct_on, memory_order_relaxed) ||
        atomic_load_explicit(&f->fail_next, memory_order_relaxed))
        return false;
    *a = r->off & ~(A - 1);
    *span = ((r->off + r->len + A - 1) & ~(A - 1)) - *a;
    return *span <= (1u << 30);
}

bool e0_uring_on(void) {
    return thread_ring() != NULL;
}

uint64_t st_uring_reads(void) {
    return atomic_load(&ring_reads);
}

void st_debug_uring(bool on) {
    atomic_store(&uring_forced_off, !on);
}

int st_pread_direct_many(const st_set *s, const st_read *rd, int n, bool *all_direct, char *err) {
    bool done[RING_ENTRIES] = {false}, all = true;
    struct io_uring *ring = n > 1 && n <= RING_ENTRIES ? thread_ring() : NULL;
    if (ring) {
        uint64_t want[RING_ENTRIES];
        int queued = 0;
        for (int i = 0; i < n; i++) {
            uint64_t a, span;
            if (!whole_direct(s, &rd[i], &a, &span)) continue;
            struct io_uring_sqe *q = io_uring_get_sqe(ring);
            if (!q) break;
            uint8_t *base = (uint8_t *)rd[i].dst - (rd[i].off - a);
            io_uring_prep_read(q, s->files[rd[i].file].dfd, base, (unsigned)span, a);
            io_uring_sqe_set_data64(q, (uint64_t)i);
            want[i] = span;
            queued++;
        }
        /* Submit everything queued. EINTR, EAGAIN (no memory for the
         * requests just now) and EBUSY pass, so try again, but not forever:
         * on any other error, or on SUBMIT_TRIES transient ones in a row,
         * collect what the kernel took and give the ring up (the rest is
         * read one range at a time below). */
        int submitted = 0, tries = 0;
        bool broken = false;
        while (submitted < queued) {
            const int rc = io_uring_submit(ring);
            if (rc > 0) {
                submitted += rc;
                tries = 0;
                continue;
            }
            const bool transient = rc == 0 || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY;
            if (!transient || ++tries >= SUBMIT_TRIES) {
                broken = true;
                submitted = queued - (int)io_uring_sq_ready(ring);
                break;
            }
        }
        for (int got = 0; got < submitted;) {
            struct io_uring_cqe *c;
            const int rc = io_uring_wait_cqe(ring, &c);
            if (rc == -EINTR || rc == -EAGAIN) continue;
            /* A ring that cannot report its completions while reads into the
             * caller's memory are in flight: returning would let the kernel
             * write into freed or reused buffers later. */
            if (rc < 0) abort();
            const uint64_t i = io_uring_cqe_get_data64(c);
            if (i < (uint64_t)n && c->res >= 0 && (uint64_t)c->res == want[i]) done[i] = true;
            io_uring_cqe_seen(ring, c);
            got++;
        }
        if (broken) ring_drop(ring);
    }
    for (int i = 0; i < n; i++) {
        if (i < RING_ENTRIES && done[i]) {
            atomic_fetch_add_explicit(&ring_reads, 1, memory_order_relaxed);
            continue;
        }
        bool d;
        const int rc = st_pread_direct(s, rd[i].file, rd[i].off, rd[i].len, rd[i].dst, &d, err);
        if (rc) return rc;
        all &= d;
    }
    if (all_direct) *all_direct = all;
    return 0;
}
