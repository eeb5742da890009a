/* A pool of persistent I/O threads running queued jobs in FIFO order, as
 * Redis bio.c does. One pool serves on-demand loads (load_threads), another
 * prefetches (prefetch_threads); neither creates a thread per job. With zero
 * threads, iopool_submit runs the job inline. */
#ifndef E0_STREAM_IOPOOL_H
#define E0_STREAM_IOPOOL_H

typedef void (*iopool_fn)(void *arg);
typedef struct iopool iopool;

/* A queued job. The caller owns it (embedded in its own per-job state) and
 * must not reuse it until fn has run: submitting allocates nothing. */
typedef struct iopool_job {
    iopool_fn fn;
    void *arg;
    struct iopool_job *next;
} iopool_job;

int iopool_new(iopool **out, int n_threads, char *err);
/* Finishes the queued jobs, then joins the threads. */
void iopool_free(iopool *p);
/* Queues fn(arg) using the caller's node `j`. */
void iopool_submit(iopool *p, iopool_job *j, iopool_fn fn, void *arg);
/* Blocks until every job submitted so far has finished. */
void iopool_drain(iopool *p);

#endif
