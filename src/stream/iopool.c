#include "stream/iopool.h"

#include "edge0.h"
#include "util/err.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct iopool {
    pthread_mutex_t mu; /* guards the queue, `pending` and `stop` */
    pthread_cond_t work, idle;
    iopool_job *head, *tail;
    long pending; /* queued or running */
    bool stop;
    int n;
    pthread_t *th;
};

static void *worker(void *arg) {
    iopool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stop) pthread_cond_wait(&p->work, &p->mu);
        if (!p->head) break; /* stop, and the queue is empty */
        iopool_job *j = p->head;
        p->head = j->next;
        if (!p->head) p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        j->fn(j->arg); /* j may be reused by its owner from here on */
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int iopool_new(iopool **out, int n_threads, char *err) {
    iopool *p = calloc(1, sizeof *p);
    if (!p || (n_threads > 0 && !(p->th = calloc((size_t)n_threads, sizeof *p->th)))) {
        free(p);
        return e0_fail(err, E0_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->idle, NULL);
    for (; p->n < n_threads; p->n++)
        if (pthread_create(&p->th[p->n], NULL, worker, p) != 0) {
            iopool_free(p);
            return e0_fail(err, E0_ENOMEM, "cannot start I/O thread %d", n_threads);
        }
    *out = p;
    return 0;
}

void iopool_free(iopool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->idle);
    free(p->th);
    free(p);
}

void iopool_submit(iopool *p, iopool_job *j, iopool_fn fn, void *arg) {
    if (p->n == 0) {
        fn(arg);
        return;
    }
    *j = (iopool_job){fn, arg, NULL};
    pthread_mutex_lock(&p->mu);
    if (p->tail) p->tail->next = j;
    else p->head = j;
    p->tail = j;
    p->pending++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
}

void iopool_drain(iopool *p) {
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->idle, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

