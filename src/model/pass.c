/* The public face of merged prefill passes (edge0.h: e0_pass_*,
 * e0_session_prepare) over session.c's pass_* (model.h), for schedulers
 * outside the library (src/server/engine.c). */
#include "model/model.h"
#include "util/err.h"

#include <stdlib.h>

int e0_pass_new(e0_pass **out, char *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return e0_fail(err, E0_ENOMEM, "out of memory");
    (*out)->layer = -1; /* no pass in progress */
    return 0;
}

void e0_pass_free(e0_pass *p) {
    if (p) pass_release(p);
    free(p);
}

int e0_pass_begin(e0_pass *p, e0_session *const *ss, const int32_t *const *ids, const size_t *n,
                  int ns, char *err) {
    return pass_begin(p, ss, ids, n, ns, err);
}

int e0_pass_step(e0_pass *p, int max_layers, float *const *logits, bool *done, char *err) {
    return pass_step(p, max_layers, logits, done, err);
}

int e0_pass_step_halves(e0_pass *p, int max_halves, float *const *logits, bool *done, char *err) {
    return pass_step_halves(p, max_halves, logits, done, err);
}

int e0_pass_layer_halves(const e0_pass *p, int layers) {
    return pass_layer_halves(p, layers);
}

int e0_pass_tokens(const e0_pass *p) {
    return p->b.T;
}

int e0_pass_next_half(const e0_pass *p) {
    return 2 * p->layer + p->half;
}

int32_t e0_session_n_batch(const e0_session *s) {
    return s->n_batch;
}

int32_t e0_session_prepare(e0_session *s, const int32_t *prompt, size_t n) {
    return session_prepare(s, prompt, n);
}
