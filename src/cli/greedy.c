/* Greedy decoding of token ids with the MTP block's drafts (cli.h
 * cli_greedy): demo --ids and bench. The generation loop of the library
 * (e0_generate, e0_gen_advance) does the same for text; this one has no
 * tokenizer, sampler or stop strings, and bench's acceptance hook. */
#include "cli/cli.h"
#include "util/rng.h"

#include <stdlib.h>
#include <string.h>

/* The hook's coin: splitmix64's output as a uniform in [0, 1). */
static double coin(uint64_t *x) { return (double)(splitmix64(x) >> 11) * 0x1.0p-53; }

/* The draft for out[k + 1]: the block's argmax, or under the hook the key's
 * id (kept) or one that is not it (rejected). */
static int32_t pick_draft(const float *q, int32_t vocab, int k, cli_mtp_force *f) {
    const int32_t d = (int32_t)e0_argmax(q, (size_t)vocab);
    if (!f) return d;
    const int32_t want = f->key[k + 1];
    if (coin(&f->rng) < f->accept) return want;
    return d != want ? d : (want + 1) % vocab;
}

int cli_greedy(e0_session *s, float *lg, int32_t vocab, int n, int32_t *out, cli_mtp_force *force,
               void (*on_id)(void *user, int k, int32_t id), void *user, char *err) {
    float *buf = NULL; /* the draft's logits [vocab], the verify pass's [2, vocab] */
    int rc = 0;
    for (int k = 0; !rc && k < n;) {
        const int32_t x = (int32_t)e0_argmax(lg, (size_t)vocab);
        out[k] = x;
        if (on_id) on_id(user, k, x);
        if (k + 2 > n || !e0_session_can_draft(s)) { /* the last id alone, as without drafts */
            rc = e0_session_eval(s, &x, 1, E0_LOGITS_LAST, lg, err);
            k++;
            continue;
        }
        if (!buf && !(buf = malloc(3 * (size_t)vocab * sizeof *buf))) {
            snprintf(err, E0_ERR_MAX, "out of memory");
            return E0_ENOMEM;
        }
        if ((rc = e0_session_draft(s, x, buf, err))) break;
        const int32_t two[2] = {x, pick_draft(buf, vocab, k, force)};
        float *v = buf + vocab;
        if ((rc = e0_session_verify(s, two, v, err))) break;
        const int32_t a = (int32_t)e0_argmax(v, (size_t)vocab);
        k++;
        if (a == two[1]) { /* it stands: the pass gave two ids */
            out[k] = a;
            if (on_id) on_id(user, k, a);
            k++;
            memcpy(lg, v + vocab, (size_t)vocab * sizeof *lg);
        } else {
            rc = e0_session_rollback(s, true, err);
            memcpy(lg, v, (size_t)vocab * sizeof *lg);
        }
    }
    free(buf);
    return rc;
}
