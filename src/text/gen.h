/* A generation cut at its forward passes: e0_generate_tokens's loop as a
 * state machine that a caller drives, so that a server can run the forward
 * passes of many requests together (e0_session_eval_batch) while each
 * request keeps its own sampler, grammar, stop strings and text stream.
 *
 *     e0_gen *g;
 *     gen_begin(&g, s, t, prompt, n, &o, fn, user, err);   // prepares the session, reuses its prefix
 *     while (gen_prefill_left(g))
 *         gen_prefill(g, 128, err);                       // the prompt in chunks
 *     int32_t id;
 *     while (gen_step(g, &id, err) == GEN_EVAL)          // sample, constrain, stream, callback
 *         e0_session_eval(s, &id, 1, E0_LOGITS_LAST, gen_logits(g), err);
 *     const e0_gen_result *r = gen_result(g);
 *     gen_free(g);
 *
 * e0_generate_tokens is exactly that loop (prefill in one call), so a
 * request stepped by a server in a batch takes the same decisions as one
 * generated alone: the only input of a step is the logits row of the last
 * evaluated id, and e0_session_eval_batch makes it bit-identical to the
 * row a one-token e0_session_eval gives. The prefill's chunking is part
 * of the arithmetic (a batch's arithmetic may depend on its length, mat.h),
 * so the chunk size must be the same for answers to be comparable.
 *
 * Ownership: the gen borrows the session, the text, the prompt (until the
 * prefill is done), the sampling options' strings and grammar (until
 * gen_free); it owns its sampler, grammar matcher and logits buffer. One
 * thread at a time. */
#ifndef E0_TEXT_GEN_H
#define E0_TEXT_GEN_H

#include "edge0.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct e0_gen e0_gen;

/* gen_step: the id in *next must be evaluated (its logits into gen_logits). */
enum { GEN_DONE = 0, GEN_EVAL = 1 };

/* Checks the prompt, builds the sampler, stop strings and grammar matcher,
 * and keeps the part of the session's history the prompt starts with
 * (session_prepare; gen_result's reused_tokens). Errors leave the session
 * untouched: E0_EINVAL (empty prompt), E0_ERANGE (it does not fit). */
int gen_begin(e0_gen **out, e0_session *s, const e0_text *t, const int32_t *prompt, size_t n,
              const e0_sample_opts *o, e0_token_fn fn, void *user, char *err);
void gen_free(e0_gen *g);

/* Prompt ids still to evaluate (0: the prefill is done). */
size_t gen_prefill_left(const e0_gen *g);
/* Evaluates the next min(max, left) prompt ids (max 0: all of them); the
 * last chunk leaves the logits of the prompt's last id in gen_logits. */
int gen_prefill(e0_gen *g, size_t max, char *err);

/* One token from the logits in gen_logits: sample, constrain, accept, stop
 * on end of turn / stop string / max_tokens / full context / a cancel from
 * the callback (which sees the token and its text). GEN_EVAL: *next is to
 * be evaluated next; GEN_DONE: finished, the remaining text handed out;
 * negative: an error (a grammar's, out of memory), message in err. */
int gen_step(e0_gen *g, int32_t *next, char *err);

/* gen_prefill with the chunk's forward pass cut between layers: at most
 * max_layers layers per call (0: the whole pass), so that a scheduler can
 * run decode passes of other requests in between; the pass in progress is
 * finished before another chunk starts. *ran gets the layers this call
 * evaluated (whole passes count every layer). The logits are those of
 * gen_prefill with the same chunks (only the pauses differ). */
int gen_prefill_layers(e0_gen *g, size_t max, int max_layers, int *ran, char *err);

/* The next chunk as part of a pass the caller runs (pass_begin, model.h,
 * merging the chunks of several requests): *ids and the returned count, at
 * most min(max, left, the session's n_batch) (max 0: no limit but those);
 * *last when it ends the prompt (then the pass's logits for this session go
 * to gen_logits). 0 while a gen_prefill_layers pass is paused or nothing is
 * left. After the pass is done, gen_prefill_done(g, m) with that count.
 * With the same chunks, the same logits as gen_prefill. */
size_t gen_prefill_next(const e0_gen *g, size_t max, const int32_t **ids, bool *last);
void gen_prefill_done(e0_gen *g, size_t m);

/* [vocab] floats: where the logits of the next evaluated id go. */
float *gen_logits(e0_gen *g);
e0_session *gen_session(const e0_gen *g);
/* Counts and times so far (final after GEN_DONE). */
const e0_gen_result *gen_result(e0_gen *g);

#endif
