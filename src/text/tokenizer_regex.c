/* Regex iteration with the semantics of Oniguruma's find_iter, which the
 * `tokenizers` library uses (tokenizer.c's notes): for the pre-tokenizers
 * (tokenizer.c) and the Replace normalizer (tokenizer_norm.c). */
#include "text/tokenizer_impl.h"

#include "util/err.h"

#include <stdint.h>
#include <string.h>

/* ---- Regex iteration (Oniguruma find_iter semantics) ------------------------- */

void re_start(re_iter *it, const tok_tokenizer *t, const pcre2_code *re,
                     pcre2_match_data *md, const char *p, size_t n) {
    *it = (re_iter){re, t, md, p, n, 0, SIZE_MAX};
}

/* 1 and [*s, *e) for the next match, 0 at the end, < 0 on error. */
int re_next(re_iter *it, size_t *s, size_t *e, char *err) {
    while (it->pos <= it->n) {
        int rc = pcre2_match(it->re, (PCRE2_SPTR)it->p, it->n, it->pos, PCRE2_NO_UTF_CHECK, it->md,
                             it->t->mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* deep pattern: the interpreter uses the heap */
            rc = pcre2_match(it->re, (PCRE2_SPTR)it->p, it->n, it->pos,
                             PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, it->md, it->t->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return e0_fail(err, E0_EUNSUPPORTED, "tokenizer regex failed on this text: %s",
                           (const char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(it->md);
        size_t ms = ov[0], me = ov[1];
        if (ms < it->pos || ms > me || me > it->n)
            return e0_fail(err, E0_EUNSUPPORTED,
                           "tokenizer regex gave a match out of order (\\K?)");
        if (ms == me && me == it->last_end) {
            if (it->pos >= it->n) return 0;
            it->pos += lead_len((uint8_t)it->p[it->pos]);
            continue;
        }
        it->pos = me, it->last_end = me;
        *s = ms, *e = me;
        return 1;
    }
    return 0;
}
