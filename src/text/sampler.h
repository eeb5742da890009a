/* Token sampling: penalties, top-k, top-p, min-p, temperature, seeded draw.
 *
 *     sampler_params sp;
 *     sampler_params_default(&sp);
 *     sp.temperature = 0.6f, sp.top_k = 20, sp.seed = 42;
 *     sampler *s;
 *     if (sampler_new(&sp, vocab, &s, err)) ...;
 *     for (each prompt id) sampler_accept(s, id);       // penalty history
 *     for (;;) {
 *         e0_session_eval(..., logits, err);
 *         int id = sampler_sample(s, logits);
 *         sampler_accept(s, id);
 *         ...
 *     }
 *     sampler_free(s);
 *
 * The chain is llama.cpp's default order, each stage a no-op at its neutral
 * value:
 *   1. penalties over the last `penalty_last_n` accepted tokens, once per
 *      distinct token t seen c(t) times:
 *        logit = logit <= 0 ? logit * repeat_penalty : logit / repeat_penalty
 *        logit -= c(t) * frequency_penalty + presence_penalty
 *   2. temperature <= 0: greedy, the argmax of the penalised logits (lowest
 *      id on ties); stages 3-6 are skipped and the RNG is not advanced.
 *   3. top-k: keep the k highest logits (k = 0: off).
 *   4. top-p: softmax over what is left, keep the smallest prefix by
 *      descending probability whose mass reaches top_p (1: off).
 *   5. min-p: keep tokens with p >= min_p * p_max, i.e. logit >= max +
 *      log(min_p) (0: off).
 *   6. temperature: softmax of logit / temperature over what is left, and one
 *      draw from the sampler's own PRNG (xoshiro256** seeded through
 *      splitmix64), so a seed gives the same tokens on every platform for
 *      the same logits. Top-p and min-p see the logits before temperature,
 *      as in llama.cpp. Every stage keeps at least one token.
 * Ties in logit order by token id, so results never depend on qsort.
 * NaN logits are read as -inf.
 *
 * Memory: sampler_new allocates everything (O(vocab)); sampling and
 * accepting allocate nothing. A sampler belongs to one thread at a time.
 */
#ifndef E0_TEXT_SAMPLER_H
#define E0_TEXT_SAMPLER_H

#include "edge0.h"

#include <stddef.h>
#include <stdint.h>

#define SAMPLER_SEED_RANDOM UINT64_MAX /* seed from the OS; see sampler_seed */
#define SAMPLER_MAX_LAST_N  65536

typedef struct {
    float temperature;       /* >= 0; 0 = greedy. Default 0.8 */
    int32_t top_k;           /* >= 0; 0 = off. Default 40 */
    float top_p;             /* (0, 1]; 1 = off. Default 0.95 */
    float min_p;             /* [0, 1]; 0 = off. Default 0.05 */
    float repeat_penalty;    /* > 0; 1 = off. Default 1 */
    float presence_penalty;  /* finite; 0 = off. Default 0 */
    float frequency_penalty; /* finite; 0 = off. Default 0 */
    int32_t penalty_last_n;  /* [0, SAMPLER_MAX_LAST_N]; 0 = no penalties. Default 64 */
    uint64_t seed;           /* SAMPLER_SEED_RANDOM = a fresh seed. Default random */
} sampler_params;

typedef struct sampler sampler;

/* llama.cpp's defaults (see each field). */
void sampler_params_default(sampler_params *p);

/* Validates `p` (E0_EINVAL naming the field) and allocates for vocab_size. */
int sampler_new(const sampler_params *p, int32_t vocab_size, sampler **out, char *err);
void sampler_free(sampler *s);

/* Adds a token to the penalty window (prompt and generated tokens alike).
 * E0_ERANGE for an id outside [0, vocab). */
int sampler_accept(sampler *s, int32_t token);

/* e0_argmax (edge0.h, sampler.c): the first index of the largest of
 * x[0..n) (NaN read as -inf; 0 when every value is -inf or NaN): greedy's
 * choice, vectorised. */

/* One token id from logits [vocab]; E0_EINVAL if logits is NULL. */
int32_t sampler_sample(sampler *s, const float *logits);

/* After sampler_sample, for constrained decoding: a draw from the same final
 * distribution (the penalties and filters of the last sampler_sample, on
 * the same logits) restricted to the tokens set in `allowed` (bit id & 31
 * of allowed[id >> 5]), i.e. the filters first and then the constraint.
 * Equal in distribution to drawing again until an allowed token comes, so
 * "sample; if the token is not allowed, resample" is exactly "sample from
 * the filtered distribution conditioned on being allowed". Greedy: the
 * allowed token with the highest penalised logit. Returns -1 when no token
 * the filters kept is allowed (the caller then masks the logits and calls
 * sampler_sample again: the filters act on the allowed tokens alone).
 * sampler_logprobs afterwards describe the restricted distribution. */
int32_t sampler_resample(sampler *s, const uint32_t *allowed);

/* After sampler_sample: log-probabilities under the distribution the token
 * was drawn from, the final one after the filters: softmax(logit / T) over
 * the tokens top-k, top-p and min-p kept (a filtered-out token has
 * SAMPLER_LOGPROB_MIN). A greedy step has no such distribution; its
 * log-probabilities are those of the penalised logits' softmax (T = 1, no
 * filters), the model's own. *lp gets `id`'s; top_ids / top_lps get the
 * n_top most likely tokens (descending, lower id first on ties; fewer when
 * fewer were kept); returns how many. Allocates nothing. */
#define SAMPLER_LOGPROB_MIN (-9999.0f) /* OpenAI's value for "impossible": JSON has no -inf */
int32_t sampler_logprobs(const sampler *s, int32_t id, float *lp, int32_t n_top, int32_t *top_ids, float *top_lps);

/* ---- Speculative sampling (text/generate.c, with the MTP block's drafts) --
 * Leviathan et al.'s rule: a draft id d drawn from q is kept with
 * probability min(1, p(d) / q(d)), else an id is drawn from
 * norm(max(0, p - q)); the kept id is then distributed as p exactly. p and
 * q are sampler_dist of the main model's and the draft's logits. */

/* Temperature 0 (or one whose inverse overflows): sampler_sample is the argmax. */
bool sampler_greedy(const sampler *s);
/* p[vocab] = the distribution sampler_sample would draw from on these
 * logits (0 for the tokens the filters dropped; greedy: 1 on the argmax),
 * nothing drawn. Leaves the state sampler_sample leaves (sampler_logprobs
 * describes this distribution). */
void sampler_dist(sampler *s, const float *logits, float *p);
/* A draw from the non-negative weights w[vocab] (normalised here) with the
 * sampler's PRNG; -1 when they are all 0. */
int32_t sampler_draw(sampler *s, const float *w);
/* The rule on the main model's logits for the draft d ~ q ([vocab], q[d]
 * > 0): p = sampler_dist(logits) into p, then d with probability
 * min(1, p(d) / q(d)), else a draw from norm(max(0, p - q)) (built in
 * rest [vocab]; p itself when nothing is left over, p == q). The state is
 * sampler_dist's: sampler_logprobs describes p. */
int32_t sampler_spec(sampler *s, const float *logits, int32_t d, const float *q, float *p, float *rest);

/* Stage 1 alone, in place on logits [vocab]: what the penalties do to the
 * logits given the current window. */
void sampler_penalize(sampler *s, float *logits);

/* Empties the penalty window and restarts the PRNG from the seed, so the
 * same logits give the same tokens again. */
void sampler_reset(sampler *s);

/* The seed in use (the drawn one when SAMPLER_SEED_RANDOM was asked for). */
uint64_t sampler_seed(const sampler *s);

#endif
