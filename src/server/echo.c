/* Log-probabilities for an answer: each generated token's, kept as it
 * comes, and echo's, the prompt's own (engine_int.h). */
#include "server/engine_int.h"

#include "util/arr.h"
#include "util/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A token's log-probabilities, kept for the answer (j->mu held). */
int srv_add_logprob(srv_job *j, const e0_token_info *tok) {
    if (arr_reserve((void **)&j->lp, &j->cap_lp, j->n_lp + 1, sizeof *j->lp)) return -1;
    j->lp[j->n_lp++] = *tok;
    return 0;
}

/* ---- echo: the prompt's own log-probabilities ------------------------------ *
 *
 * A completion with echo and logprobs reports every prompt token's
 * log-probability given the tokens before it: log_softmax(logits of
 * position i-1)[id_i], the model's own distribution (no sampling filters:
 * nothing was sampled there), and its n most likely alternatives; the
 * first token has none. That needs the logits of every prompt position,
 * which a generation never computes, so the engine evaluates the prompt
 * itself first, from an empty session, in the batches a prefill uses
 * (PROMPT_LP_ROWS, the session's n_batch: E0_LOGITS_ALL [rows, vocab]
 * floats, 311 MB for 512 rows of Qwen3's vocabulary at most): the
 * arithmetic of a batch depends on its length (about 1e-3 in the logits),
 * so these are the logits the prefill of this prompt computes, and those
 * `edge0 logits` writes for it. e0_generate then finds the prompt in the
 * session: a model with attention only evaluates the last id again; one
 * with recurrent layers cannot rewind and evaluates the whole prompt again
 * (echo with logprobs costs two prefills there). The reuse of an earlier
 * conversation's prefix is lost either way. */
#define PROMPT_LP_ROWS 512 /* e0_session_opts.n_batch's default, which the engine's session uses */

/* Row x [V] -> the entry for `id`: its log-probability and the k most
 * likely tokens (descending, lower id first on ties). */
static void row_logprobs(const float *x, int32_t V, int32_t id, int32_t k, e0_token_info *t) {
    double m = -INFINITY, sum = 0;
    for (int32_t v = 0; v < V; v++)
        if (x[v] > m) m = x[v];
    for (int32_t v = 0; v < V; v++) sum += exp((double)x[v] - m);
    const double lse = m + log(sum);
    memset(t, 0, sizeof *t);
    t->id = id;
    t->logprob = (float)((double)x[id] - lse);
    for (int32_t v = 0; v < V && k > 0; v++) {
        if (t->n_top == k && x[v] <= x[t->top_ids[k - 1]]) continue;
        int32_t i = t->n_top < k ? t->n_top++ : k - 1;
        while (i > 0 && x[v] > x[t->top_ids[i - 1]]) {
            t->top_ids[i] = t->top_ids[i - 1];
            i--;
        }
        t->top_ids[i] = v;
    }
    for (int32_t i = 0; i < t->n_top; i++) t->top_logprobs[i] = (float)((double)x[t->top_ids[i]] - lse);
}


/* Evaluates the job's prompt into a reset session and keeps each token's
 * entry in j->lp (j->n_prompt_lp of them). */
int srv_prompt_logprobs(srv_engine *E, srv_slot *sl, srv_job *j, double *seconds, char *err) {
    const double t0 = now_s();
    e0_model_info mi;
    e0_engine_info(E->eng, &mi);
    const int32_t V = mi.vocab_size, k = j->req.sample.top_logprobs;
    const size_t n = j->n_ids;
    e0_session_reset(sl->s);
    const size_t R = n < PROMPT_LP_ROWS ? n : PROMPT_LP_ROWS;
    float *rows = malloc(R * (size_t)V * sizeof *rows);
    if (!rows) {
        snprintf(err, E0_ERR_MAX, "out of memory for the prompt's logits");
        return E0_ENOMEM;
    }
    e0_token_info first = {.id = j->ids[0]};
    pthread_mutex_lock(&j->mu);
    int rc = srv_add_logprob(j, &first) ? E0_ENOMEM : 0;
    pthread_mutex_unlock(&j->mu);
    for (size_t at = 0; !rc && at < n; at += PROMPT_LP_ROWS) {
        size_t m = n - at < PROMPT_LP_ROWS ? n - at : PROMPT_LP_ROWS;
        if ((rc = e0_session_eval(sl->s, j->ids + at, m, E0_LOGITS_ALL, rows, err))) break;
        pthread_mutex_lock(&j->mu);
        for (size_t r = 0; r < m && at + r + 1 < n && !rc; r++) { /* row r: the distribution of id at + r + 1 */
            e0_token_info t;
            int32_t id = j->ids[at + r + 1];
            row_logprobs(rows + r * (size_t)V, V, id < V ? id : 0, k, &t);
            t.id = id;
            if (srv_add_logprob(j, &t)) rc = E0_ENOMEM;
        }
        bool cancel = j->cancel;
        pthread_mutex_unlock(&j->mu);
        if (cancel) break; /* the generation that follows notices it at once */
    }
    if (rc == E0_ENOMEM) snprintf(err, E0_ERR_MAX, "out of memory for the prompt's logprobs");
    free(rows);
    j->n_prompt_lp = j->n_lp;
    *seconds = now_s() - t0;
    return rc;
}
