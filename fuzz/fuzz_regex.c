/* libFuzzer: the regular-expression compiler (src/text/schema_regex.c) and
 * the grammar it makes.
 *
 * The input is "PATTERN\0TEXT": PATTERN is compiled in both forms (JSON
 * string body and raw), then TEXT is run through each grammar byte by byte,
 * with a mask over a vocabulary of the 256 bytes after every byte. Checked:
 * no crash, leak or unbounded time (the compiler refuses what is too large);
 * an error leaves no rule and a message; a byte is in the mask exactly when
 * the matcher accepts it. */
#include "text/grammar.h"
#include "text/schema_regex.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok) {
    if (!ok) abort();
}

static const uint8_t *byte_token(void *user, int32_t id, size_t *len) {
    static uint8_t bytes[256];
    (void)user;
    bytes[id] = (uint8_t)id;
    *len = 1;
    return &bytes[id];
}

static void run(const gram *g, const gram_vocab *v, const uint8_t *text, size_t n) {
    char err[E0_ERR_MAX];
    uint32_t mask[8];
    gram_matcher *m;
    check(gram_matcher_new(&m, g, v, NULL, err) == 0);
    for (size_t i = 0; i < n && i < 512; i++) {
        if (gram_matcher_mask(m, mask)) break;
        bool in = (mask[text[i] >> 5] >> (text[i] & 31)) & 1;
        check(in == gram_matcher_check(m, text[i]));
        if (!in || gram_matcher_accept(m, text[i])) break;
    }
    gram_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static gram_vocab *v;
    char err[E0_ERR_MAX];
    if (!v) check(gram_vocab_new(&v, 256, byte_token, NULL, err) == 0);
    const uint8_t *z = memchr(data, 0, size);
    size_t pl = z ? (size_t)(z - data) : size;
    if (pl > RX_MAX_PATTERN + 16) return 0;
    char *pat = malloc(pl + 1);
    if (!pat) return 0;
    memcpy(pat, data, pl);
    pat[pl] = 0;
    const uint8_t *text = z ? z + 1 : data + size;
    size_t tl = z ? size - pl - 1 : 0;
    for (int form = 0; form < 2; form++) {
        gram_builder *b = gb_new();
        check(b != NULL);
        int32_t r = -1;
        err[0] = 0;
        int rc = rx_rule(b, pat, form ? RX_FORM_RAW : RX_FORM_JSON, &r, err);
        if (rc) {
            check(r == -1 && err[0]);
        } else {
            gram *g = NULL;
            if (gram_compile(b, &r, 1, &g, err) == 0) run(g, v, text, tl); /* only limits may refuse it */
            e0_grammar_free(g);
        }
        gb_free(b);
    }
    free(pat);
    return 0;
}
