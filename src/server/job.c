/* Jobs: one request's life between a connection thread and the scheduler
 * (engine.h: srv_job_new, srv_job_ref / unref, cancel, the end of a
 * connection). */
#include "server/engine_int.h"
#include "server/responses.h"

#include "util/clock.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- jobs ----------------------------------------------------------------- */

srv_job *srv_job_new(void) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->fd = -1;
    return j;
}

void srv_job_ref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    srv_request_free(&j->req);
    srv_resp_info_free(j->resp);
    free(j->prompt);
    free(j->ids);
    free(j->reasoning.p);
    free(j->content.p);
    free(j->lp);
    for (int i = 0; i < j->n_calls; i++) {
        free(j->calls[i].name.p);
        free(j->calls[i].args.p);
        free(j->calls[i].cuts);
    }
    free(j->calls);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void srv_job_cancel(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->cancel = true;
    j->fd = -1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static const char *finish_name(e0_finish f) {
    return f == E0_FINISH_STOP ? "stop" : f == E0_FINISH_CANCELLED ? "cancelled" : "length";
}

/* One line per request: id, method, path, status, tokens in/out, time. */
void srv_log_job(const srv_job *j) {
    char gram[96] = "";
    const int32_t n = j->res.completion_tokens;
    if (j->req.grammar && n) /* constrained decoding: its time per token next to the decode step's */
        snprintf(gram, sizeof gram, " grammar=%.3fms/tok (decode %.1fms/tok, %d masks)", j->res.mask_s * 1e3 / n,
                 j->res.decode_s * 1e3 / n, j->res.masks);
    fprintf(stderr, "edge0: %s %s %s %d%s prompt=%d cached=%d completion=%d finish=%s reuse=%s%s %.3fs\n", j->id,
            j->method, j->url, j->http_status, j->streamed ? " stream" : "", j->res.prompt_tokens,
            j->res.reused_tokens, j->res.completion_tokens, j->status != 200 ? "error" : j->finish_reason ? j->finish_reason : finish_name(j->res.finish),
            j->reuse ? j->reuse : "none", gram, now_s() - j->t0);
}

void srv_job_connection_over(srv_job *j, int http_status, bool left) {
    pthread_mutex_lock(&j->mu);
    if (left && !j->done) j->cancel = true;
    j->fd = -1;
    j->http_status = http_status;
    j->conn_over = true;
    bool done = j->done;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    if (done) srv_log_job(j);
}

bool srv_client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    int r;
    while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR) {}
    return r > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}
