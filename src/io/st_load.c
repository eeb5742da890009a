/* --io load and pinning of an opened set (safetensors.h): the tensors'
 * bytes copied out of the file mappings into memory of their own, less the
 * spans the caller leaves out (the routed experts; tensors the model does
 * not compute with). */
#include "io/safetensors.h"

#include "io/st_internal.h"
#include "util/err.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* st_set_load reads in chunks of LOAD_CHUNK bytes, LOAD_THREADS at once. */
#define LOAD_CHUNK   ((uint64_t)64 << 20)
#define LOAD_THREADS 4

/* ---- spans left out of --io load and of pinning ---------------------------- */

static int span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    return x->p < y->p ? -1 : x->p > y->p;
}

/* A sorted copy of the n spans of `skip` in which spans that touch or
 * overlap are one (the experts of a stacked tensor follow each other, and
 * the page holding the boundary between two of them belongs to neither
 * side). NULL without memory; *m gets the count. */
static st_span *spans_merged(const st_span *skip, size_t n, size_t *m) {
    st_span *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return NULL;
    if (n) memcpy(v, skip, n * sizeof *v);
    qsort(v, n, sizeof *v, span_cmp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k && v[i].p <= v[k - 1].p + v[k - 1].len) {
            const uint8_t *end = v[i].p + v[i].len;
            if (end > v[k - 1].p + v[k - 1].len) v[k - 1].len = (uint64_t)(end - v[k - 1].p);
        } else {
            v[k++] = v[i];
        }
    }
    *m = k;
    return v;
}

/* The whole pages of f's mapping inside the merged spans v[0..n), as file
 * offsets [r[i][0], r[i][1]), sorted and disjoint; returns how many (at
 * most n). A page that also holds bytes outside the spans is not among
 * them. */
static size_t file_skips(const st_file *f, const st_span *v, size_t n, uint64_t pg, uint64_t (*r)[2]) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].p < f->map || v[i].p >= f->map + f->size) continue;
        const uint64_t off = (uint64_t)(v[i].p - f->map);
        const uint64_t a = (off + pg - 1) & ~(pg - 1), b = (off + v[i].len) & ~(pg - 1);
        if (b <= a) continue;
        r[k][0] = a;
        r[k++][1] = b;
    }
    return k;
}

/* One file's load, shared by the reader threads: chunks are claimed from
 * `next`, the skipped ranges inside a chunk are not read; the first
 * failure is kept in err. */
typedef struct {
    const st_file *f;
    uint8_t *dst;
    const uint64_t (*skip)[2]; /* sorted, disjoint file offsets */
    size_t nskip;
    atomic_uint_fast64_t next;
    pthread_mutex_t mu; /* guards done, the callback, err */
    uint64_t *done, total;
    st_load_fn progress;
    void *ctx;
    char *err;
    bool failed;
} load_job;

/* Reads [lo, hi) of the file into the copy; false on failure (recorded). */
static bool load_range(load_job *j, uint64_t lo, uint64_t hi) {
    const st_file *f = j->f;
    for (uint64_t got = 0; lo + got < hi;) {
        const ssize_t n = pread(f->fd, j->dst + lo + got, hi - lo - got, (off_t)(lo + got));
        if (n <= 0) {
            pthread_mutex_lock(&j->mu);
            if (!j->failed)
                e0_fail(j->err, E0_EIO, "%s: read failed at offset %llu: %s", f->path,
                        (unsigned long long)(lo + got),
                        n < 0 ? strerror(errno) : "unexpected end of file");
            j->failed = true;
            pthread_mutex_unlock(&j->mu);
            return false;
        }
        got += (uint64_t)n;
    }
    return true;
}

static void *load_worker(void *arg) {
    load_job *j = arg;
    const st_file *f = j->f;
    for (;;) {
        const uint64_t off = atomic_fetch_add(&j->next, LOAD_CHUNK);
        if (off >= f->size) return NULL;
        const uint64_t end = f->size - off < LOAD_CHUNK ? f->size : off + LOAD_CHUNK;
        uint64_t at = off, read = 0;
        for (size_t k = 0; k < j->nskip && j->skip[k][0] < end; k++) {
            if (j->skip[k][1] <= at) continue;
            if (j->skip[k][0] > at) {
                if (!load_range(j, at, j->skip[k][0])) return NULL;
                read += j->skip[k][0] - at;
            }
            at = j->skip[k][1];
        }
        if (at < end) {
            if (!load_range(j, at, end)) return NULL;
            read += end - at;
        }
        /* the page cache's copy is not needed again: giving it back now lets the
         * next chunk's huge pages come from free memory rather than reclaim */
        posix_fadvise(f->fd, (off_t)off, (off_t)(end - off), POSIX_FADV_DONTNEED);
        pthread_mutex_lock(&j->mu);
        *j->done += read;
        if (j->progress && !j->failed) j->progress(j->ctx, *j->done, j->total);
        pthread_mutex_unlock(&j->mu);
    }
}

int st_set_load(st_set *s, const st_span *skip, size_t nskip, st_load_fn progress, void *ctx,
                char *err) {
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    size_t m;
    st_span *v = spans_merged(skip, nskip, &m);
    uint64_t(*r)[2] = malloc((m ? m : 1) * sizeof *r);
    if (!v || !r) {
        free(v);
        free(r);
        return e0_fail(err, E0_ENOMEM, "out of memory");
    }
    uint64_t total = 0, done = 0;
    for (uint32_t i = 0; i < s->nfiles; i++) {
        const st_file *f = &s->files[i];
        if (!f->map || f->loaded) continue;
        total += f->size;
        const size_t k = file_skips(f, v, m, pg, r);
        for (size_t q = 0; q < k; q++)
            total -= r[q][1] - r[q][0];
    }
    int rc = 0;
    for (uint32_t i = 0; i < s->nfiles && !rc; i++) {
        st_file *f = &s->files[i];
        if (!f->map || f->loaded) continue;
        const size_t k = file_skips(f, v, m, pg, r);
        const uint64_t span = st_map_span(f->size);
        uint8_t *a = st_reserve_aligned(span, PROT_READ | PROT_WRITE);
        if (!a) {
            rc = e0_fail(err, E0_ENOMEM, "%s: cannot allocate %.2f GiB to load it: %s", f->path,
                         (double)span / (1u << 30), strerror(errno));
            break;
        }
#ifdef MADV_HUGEPAGE
        madvise(a, span, MADV_HUGEPAGE); /* advice: without THP these are 4 KiB pages */
#endif
        /* several readers: most of a load's time is the kernel faulting in
         * and clearing fresh pages, which runs in parallel */
        load_job j = {.f = f, .dst = a, .skip = (const uint64_t(*)[2])r, .nskip = k, .done = &done,
                      .total = total, .progress = progress, .ctx = ctx, .err = err};
        atomic_init(&j.next, 0);
        pthread_mutex_init(&j.mu, NULL);
        pthread_t th[LOAD_THREADS];
        int started = 0;
        for (; started < LOAD_THREADS - 1; started++)
            if (pthread_create(&th[started], NULL, load_worker, &j) != 0) break;
        load_worker(&j);
        for (int t = 0; t < started; t++)
            pthread_join(th[t], NULL);
        pthread_mutex_destroy(&j.mu);
        if (j.failed) {
            munmap(a, span);
            rc = E0_EIO;
            break;
        }
        mprotect(a, span, PROT_READ);
        /* the copy takes the mapping's place: every pointer into it stays valid */
        if (mremap(a, span, span, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)f->map) == MAP_FAILED) {
            const int e = errno;
            munmap(a, span);
            rc = e0_fail(err, E0_EIO, "%s: cannot move the loaded copy in place: %s", f->path,
                         strerror(e));
            break;
        }
        f->loaded = true;
        /* the skipped pages read the file again, as before the load (private:
         * st_set_writable may make the whole copy writable) */
        for (size_t q = 0; q < k && !rc; q++)
            if (mmap((void *)(f->map + r[q][0]), r[q][1] - r[q][0], PROT_READ,
                     MAP_PRIVATE | MAP_FIXED, f->fd, (off_t)r[q][0]) == MAP_FAILED)
                rc = e0_fail(err, E0_EIO, "%s: cannot map the bytes left out of the load: %s",
                             f->path, strerror(errno));
    }
    free(v);
    free(r);
    return rc;
}

/* Pages [lo, hi) of f's mapping (offsets, page-aligned, within the file)
 * replaced by an anonymous copy. */
static int pin_pages(st_file *f, uint64_t lo, uint64_t hi, char *err) {
    const uint64_t len = hi - lo;
    uint8_t *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED)
        return e0_fail(err, E0_ENOMEM, "%s: cannot allocate %.1f MiB for resident weights: %s",
                       f->path, (double)len / (1 << 20), strerror(errno));
    const uint64_t end = hi < f->size ? hi : f->size;
    for (uint64_t got = 0; lo + got < end;) {
        const ssize_t r = pread(f->fd, a + got, end - lo - got, (off_t)(lo + got));
        if (r <= 0) {
            const int e = errno;
            munmap(a, len);
            return e0_fail(err, E0_EIO, "%s: read failed at offset %llu: %s", f->path,
                           (unsigned long long)(lo + got),
                           r < 0 ? strerror(e) : "unexpected end of file");
        }
        got += (uint64_t)r;
    }
    mprotect(a, len, PROT_READ);
    if (mremap(a, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)(f->map + lo)) == MAP_FAILED) {
        const int e = errno;
        munmap(a, len);
        return e0_fail(err, E0_EIO, "%s: cannot move resident weights in place: %s", f->path,
                       strerror(e));
    }
    return 0;
}

int st_set_writable(st_set *s, bool writable) {
    for (uint32_t i = 0; i < s->nfiles; i++) {
        st_file *f = &s->files[i];
        if (f->loaded && mprotect((void *)f->map, st_map_span(f->size),
                                  writable ? PROT_READ | PROT_WRITE : PROT_READ) != 0)
            return E0_EIO;
    }
    return 0;
}

int st_set_pin(st_set *s, const st_span *skip, size_t n, uint64_t *pinned, char *err) {
    *pinned = 0;
    const uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
    size_t m;
    st_span *v = spans_merged(skip, n, &m);
    uint64_t(*r)[2] = malloc((m ? m : 1) * sizeof *r);
    if (!v || !r) {
        free(v);
        free(r);
        return e0_fail(err, E0_ENOMEM, "out of memory");
    }
    int rc = 0;
    for (uint32_t i = 0; i < s->nfiles && !rc; i++) {
        st_file *f = &s->files[i];
        if (!f->map || f->loaded) continue;
        const uint64_t fend = (f->size + pg - 1) & ~(pg - 1);
        const size_t k = file_skips(f, v, m, pg, r);
        uint64_t at = 0; /* pages before `at` are decided */
        for (size_t q = 0; q <= k && !rc; q++) {
            const uint64_t a = q < k ? r[q][0] : fend, b = q < k ? r[q][1] : fend;
            if (a > at) {
                rc = pin_pages(f, at, a, err);
                *pinned += a - at;
            }
            if (b > at) at = b;
        }
    }
    free(v);
    free(r);
    return rc;
}
