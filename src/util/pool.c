/* The compute pool (util/pool.h).
 *
 * A job is split into chunks that threads claim from a shared counter
 * (ggml's chunk counters), so a thread that the OS has descheduled (two
 * cores, I/O threads, other processes) delays nothing but the chunk it
 * holds: the caller and whoever else runs take the rest.
 *
 * `state` packs the job's generation (high 32 bits) with the next chunk to
 * claim (low 32 bits, CLOSED when the job is over); a claim is a CAS on it,
 * so a late worker can never claim a chunk of a newer job. Job fields are
 * written by the caller before it publishes the generation and stay fixed
 * until the caller has closed the job and seen `active` (workers inside the
 * job) drop to zero; a worker counts itself in before it reads `state`
 * (both sequentially consistent), so either it sees CLOSED or the caller
 * waits for it.
 *
 * Waiting: workers spin on `pub` (the published generation) for SPIN_NS
 * after their last job, yielding now and then, then sleep on `cv`
 * (`sleepers` counts them; the caller broadcasts when it is non-zero).
 * Locks: run_mu is held by the thread whose job is on the workers (the only
 * writer of the job fields); cfg_mu orders pool_init / pool_shutdown; mu
 * guards the condition variable.
 */
#include "util/pool.h"

#include "edge0.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define MAX_THREADS       256
#define SPIN_NS           200000 /* a worker spins this long after its last job before sleeping */
#define CLOSED            0xffffffffu /* chunk index of a finished job */
#define CHUNKS_PER_THREAD 4

static struct {
    pthread_mutex_t run_mu, cfg_mu, mu;
    pthread_cond_t cv;
    pthread_t th[MAX_THREADS];
    int n;                      /* threads, the caller included */
    uint32_t gen;               /* generation of the last job (run_mu) */
    uint32_t gen0;              /* generation when the workers were started */
    atomic_uint_fast32_t pub;   /* published generation: what workers wait on */
    atomic_uint_fast64_t state; /* gen << 32 | next chunk */
    atomic_int active;          /* workers inside the current job */
    atomic_int done;            /* chunks finished */
    atomic_int sleepers;
    atomic_bool stop;
    /* the current job */
    pool_fn fn;
    void *ctx;
    int64_t items, chunk;
    uint32_t nchunks;
} P = {.run_mu = PTHREAD_MUTEX_INITIALIZER,
       .cfg_mu = PTHREAD_MUTEX_INITIALIZER,
       .mu = PTHREAD_MUTEX_INITIALIZER,
       .cv = PTHREAD_COND_INITIALIZER,
       .n = 1};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Claims and runs chunks of job g until none are left. */
static void run_chunks(uint32_t g, int tid) {
    for (;;) {
        uint_fast64_t s = atomic_load(&P.state);
        const uint32_t c = (uint32_t)s;
        if ((uint32_t)(s >> 32) != g || c >= P.nchunks) return; /* CLOSED >= nchunks too */
        if (!atomic_compare_exchange_weak(&P.state, &s, s + 1)) continue;
        const int64_t i0 = (int64_t)c * P.chunk,
                      i1 = i0 + P.chunk < P.items ? i0 + P.chunk : P.items;
        P.fn(P.ctx, i0, i1, tid);
        atomic_fetch_add_explicit(&P.done, 1, memory_order_release);
    }
}

static void *worker(void *arg) {
    const int tid = (int)(intptr_t)arg;
    uint32_t seen = P.gen0; /* jobs published after pool_init count */
    for (;;) {
        int64_t t0 = now_ns();
        for (unsigned spins = 0;
             (uint32_t)atomic_load_explicit(&P.pub, memory_order_acquire) == seen &&
             !atomic_load_explicit(&P.stop, memory_order_relaxed);
             spins++) {
            cpu_relax();
            if ((spins & 255) != 255) continue;
            if (now_ns() - t0 > SPIN_NS) {
                pthread_mutex_lock(&P.mu);
                atomic_fetch_add(&P.sleepers, 1);
                while ((uint32_t)atomic_load(&P.pub) == seen && !atomic_load(&P.stop))
                    pthread_cond_wait(&P.cv, &P.mu);
                atomic_fetch_sub(&P.sleepers, 1);
                pthread_mutex_unlock(&P.mu);
                break;
            }
            sched_yield(); /* let a runnable I/O or compute thread have this core */
        }
        if (atomic_load(&P.stop)) break;
        seen = (uint32_t)atomic_load(&P.pub);
        atomic_fetch_add(&P.active, 1);
        const uint_fast64_t s = atomic_load(&P.state);
        if ((uint32_t)(s >> 32) == seen && (uint32_t)s != CLOSED) run_chunks(seen, tid);
        atomic_fetch_sub(&P.active, 1);
    }
    return NULL;
}

static void stop_workers(void) {
    if (P.n <= 1) return;
    atomic_store(&P.stop, true);
    pthread_mutex_lock(&P.mu);
    pthread_cond_broadcast(&P.cv);
    pthread_mutex_unlock(&P.mu);
    for (int i = 1; i < P.n; i++)
        pthread_join(P.th[i], NULL);
    atomic_store(&P.stop, false);
    P.n = 1;
}

int pool_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

int pool_init(int n_threads) {
    int n = n_threads <= 0 ? pool_cores() : n_threads > MAX_THREADS ? MAX_THREADS : n_threads;
    pthread_mutex_lock(&P.run_mu);
    pthread_mutex_lock(&P.cfg_mu);
    int rc = 0;
    if (n != P.n) {
        stop_workers();
        P.gen0 = P.gen;
        for (int i = 1; i < n; i++) {
            if (pthread_create(&P.th[i], NULL, worker, (void *)(intptr_t)i) != 0) {
                rc = P.n == 1 ? E0_ENOMEM : 0; /* fewer threads still compute correctly */
                break;
            }
            P.n = i + 1;
        }
    }
    pthread_mutex_unlock(&P.cfg_mu);
    pthread_mutex_unlock(&P.run_mu);
    return rc;
}

void pool_shutdown(void) {
    pthread_mutex_lock(&P.run_mu);
    pthread_mutex_lock(&P.cfg_mu);
    stop_workers();
    pthread_mutex_unlock(&P.cfg_mu);
    pthread_mutex_unlock(&P.run_mu);
}

int pool_threads(void) {
    pthread_mutex_lock(&P.cfg_mu);
    int n = P.n;
    pthread_mutex_unlock(&P.cfg_mu);
    return n;
}

/* Spins until *v reaches want (a counter that only moves towards it). */
static void wait_for(atomic_int *v, int want, bool up) {
    for (unsigned spins = 1;; spins++) {
        const int x = atomic_load(v);
        if (up ? x >= want : x <= want) return;
        cpu_relax();
        if ((spins & 1023) == 0) sched_yield(); /* a descheduled worker holds a chunk */
    }
}

static void run_job(int64_t n, int64_t align, bool each, pool_fn fn, void *ctx) {
    if (n <= 0) return;
    if (align < 1) align = 1;
    const int64_t units = (n + align - 1) / align;
    if (units < 2 || pthread_mutex_trylock(&P.run_mu) != 0) {
        fn(ctx, 0, n, 0); /* one unit, or the pool is busy: serial in the caller */
        return;
    }
    if (P.n < 2) {
        pthread_mutex_unlock(&P.run_mu);
        fn(ctx, 0, n, 0);
        return;
    }
    int64_t nch = (int64_t)P.n * CHUNKS_PER_THREAD;
    if (nch > units || each) nch = units;
    P.fn = fn;
    P.ctx = ctx;
    P.items = n;
    P.chunk = (units + nch - 1) / nch * align;
    P.nchunks = (uint32_t)((n + P.chunk - 1) / P.chunk);
    atomic_store(&P.done, 0);
    const uint32_t g = ++P.gen;
    atomic_store(&P.state, (uint_fast64_t)g << 32);
    atomic_store(&P.pub, g);
    if (atomic_load(&P.sleepers) > 0) {
        pthread_mutex_lock(&P.mu);
        pthread_cond_broadcast(&P.cv);
        pthread_mutex_unlock(&P.mu);
    }
    run_chunks(g, 0);
    wait_for(&P.done, (int)P.nchunks, true);
    atomic_store(&P.state, (uint_fast64_t)g << 32 | CLOSED);
    wait_for(&P.active, 0, false);
    pthread_mutex_unlock(&P.run_mu);
}

void pool_for(int64_t n, int64_t align, pool_fn fn, void *ctx) {
    run_job(n, align, false, fn, ctx);
}

void pool_for_each(int64_t n, pool_fn fn, void *ctx) {
    run_job(n, 1, true, fn, ctx);
}
