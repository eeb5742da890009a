/* Routing replay (edge0.h e0_session_replay): a parsed trace (io/routes.h)
 * hooked into the session, read by the MoE layer (moe.c) in place of the
 * router's top-k, as the routing profiles and stickiness hook in there. */
#include "io/routes.h"
#include "model/model.h"
#include "util/err.h"
#include "util/file.h"

#include <stdlib.h>

/* A trace file of at most 256 MiB. */
#define ROUTES_MAX_FILE ((size_t)256 << 20)

int e0_routes_load(const e0_engine *e, const char *path, e0_routes **out, char *err) {
    *out = NULL;
    char *text;
    size_t len;
    int rc = e0_read_file(path, &text, &len, ROUTES_MAX_FILE, err);
    if (rc) return rc;
    e0_routes *r = calloc(1, sizeof *r);
    if (!r) rc = e0_fail(err, E0_ENOMEM, "%s: out of memory", path);
    const e0_config *c = &e->model.cfg;
    if (!rc) rc = routes_parse(text, len, path, c->n_layers, c->n_experts, e->top_k, r, err);
    free(text);
    if (rc) {
        free(r);
        return rc;
    }
    *out = r;
    return 0;
}

void e0_routes_free(e0_routes *r) {
    if (!r) return;
    routes_clear(r);
    free(r);
}

int32_t e0_routes_tokens(const e0_routes *r) {
    return r ? r->n_tokens : 0;
}

int e0_session_replay(e0_session *s, const e0_routes *r, int32_t offset, char *err) {
    const e0_config *c = &s->m->cfg;
    if (r &&
        (r->n_layers != c->n_layers || r->n_experts != c->n_experts || r->top_k != s->eng->top_k))
        return e0_fail(err, E0_EINVAL,
                       "the routing trace is for %d layers x %d experts top-%d, the "
                       "model has %d x %d top-%d",
                       r->n_layers, r->n_experts, r->top_k, c->n_layers, c->n_experts,
                       s->eng->top_k);
    if (r && s->gs)
        return e0_fail(err, E0_EUNSUPPORTED,
                       "routing replay runs on the CPU only (the session is on "
                       "the GPU: --gpu off)");
    s->replay = r;
    s->replay_off = r ? (int64_t)offset % r->n_tokens : 0;
    s->replay_p0 = s->pos;
    return 0;
}

const int32_t *replay_experts(const e0_session *s, int layer, int64_t p) {
    const e0_routes *r = s->replay;
    if (!r) return NULL;
    const int64_t n = r->n_tokens, t = ((s->replay_off + p - s->replay_p0) % n + n) % n;
    const int32_t *ids =
        r->ids + ((size_t)t * (size_t)r->n_layers + (size_t)layer) * (size_t)r->top_k;
    return ids[0] >= 0 ? ids : NULL;
}
