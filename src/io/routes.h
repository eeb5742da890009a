/* Routing traces for replay (edge0 bench --replay; docs/design.md, bench):
 * the text `edge0 bench --trace` writes and scripts/route_convert.py makes
 * from published captures.
 *
 *   # layers L experts E decode_from F [top_k K]
 *   LAYER EXPERT            one line per (layer, expert) cache request
 *   # token T               before the requests of decode token T (T = 0, 1, ...)
 *   # anything else         a comment
 *
 * The first F request lines are the prefill's (read for their range only).
 * The decode's are grouped into tokens by the `# token` lines; a trace
 * without them (bench before session 30) is cut where a request's layer is
 * below the previous one's, or where its layer already has k requests in
 * the token. Every (token, layer) the trace names gets exactly k distinct
 * experts; a layer a token does not name is left to the router (-1).
 *
 * Hostile input: every failure names the file and line; the header's L and
 * E must be the model's (the caller's), so sizes are bounded by the model. */
#ifndef E0_IO_ROUTES_H
#define E0_IO_ROUTES_H

#include <stddef.h>
#include <stdint.h>

struct e0_routes {
    int32_t n_layers, n_experts, top_k;
    int32_t n_tokens;
    int32_t *ids; /* [n_tokens, n_layers, top_k]: the experts, or -1 (the router's) */
};

/* Parses `len` bytes of text (name: for messages) for a model of L layers,
 * E experts and top-k k into *out (freed with routes_clear). E0_EFORMAT for
 * a malformed trace, E0_EINVAL for another shape (the message says how to
 * convert one), E0_ENOMEM. */
int routes_parse(const char *text, size_t len, const char *name, int32_t L, int32_t E, int32_t k,
                 struct e0_routes *out, char *err);
void routes_clear(struct e0_routes *r);

#endif
