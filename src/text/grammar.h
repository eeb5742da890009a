/* Byte-level grammars for constrained decoding: which tokens may come next so
 * that the output stays a prefix of a sentence of the grammar.
 *
 *     gram_builder *b = gb_new();
 *     int32_t digit = gb_range_rule(b, '0', '9'), num = gb_plus(b, digit);
 *     int32_t root = gb_rule(b), a = gb_alt(b, root);
 *     gb_lit(b, a, "n=", 2), gb_ref(b, a, num);
 *     gram *g;
 *     if (gram_compile(b, &root, 1, &g, err)) ...;     // g is immutable: share it
 *     gb_free(b);
 *
 *     gram_vocab *v;                                   // once per tokenizer
 *     gram_vocab_new(&v, n_vocab, token_bytes, tk, err);
 *     gram_matcher *m;                                 // once per generation
 *     gram_matcher_new(&m, g, v, &opts, err);
 *     for each step:
 *         id = sample(logits);
 *         if (!gram_matcher_check(m, id)) {            // the cheap path failed:
 *             gram_matcher_mask(m, allowed);           // the full mask
 *             id = sample again among `allowed`;
 *         }
 *         gram_matcher_accept(m, id);
 *
 * The grammar. Rules are lists of alternatives; an alternative is a sequence
 * of elements: a byte set (one byte out of up to 256), or a reference to a
 * rule. Repetition, options and counted repetition are helper rules the
 * builder makes (gb_star, gb_opt, gb_rep), right-recursive so that a long
 * repetition never deepens the parse stack. Everything is bytes: UTF-8 is
 * spelled out by the grammars that need it (text/schema.c). Left recursion
 * (a rule that can reach itself without consuming a byte) is refused by
 * gram_compile.
 *
 * The parser is a pushdown automaton run as a set of stacks (as GBNF does):
 * a stack is a list of grammar positions, its top the set element to match
 * next, the rest where to return when a rule ends. Stacks are hash-consed
 * into a tree of nodes (pos, parent), so a set of stacks is a sorted list of
 * node ids, and sets are interned as numbered states. The transition
 * (state, byte) -> state is computed once and kept in a table of 256 entries
 * per state: after the first visit a byte costs one load.
 *
 * The mask. The vocabulary's tokens, as the bytes they decode to, form a
 * trie laid out in depth-first order (gram_vocab, built once per tokenizer
 * and shared). The mask is one walk of it carrying the state of each depth:
 * a byte the grammar rejects skips the node's whole subtree, so what is
 * visited is the tokens' prefixes that stay valid, and a state's mask is
 * kept (a small cache by state) because generation revisits states, e.g.
 * every token inside one JSON string. End-of-turn tokens are allowed only
 * when the grammar is complete; special tokens never.
 *
 * Thread safety: a gram and a gram_vocab are immutable and may be shared by
 * any number of threads; a gram_matcher belongs to one thread at a time.
 * Memory: a matcher allocates as it meets new states (about 1 KiB each) and
 * refuses to grow past GRAM_MAX_STATES (gram_matcher_* then report failure).
 */
#ifndef E0_TEXT_GRAMMAR_H
#define E0_TEXT_GRAMMAR_H

#include "edge0.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRAM_MAX_ELEMS  (1 << 21) /* elements of a grammar, all alternatives together */
#define GRAM_MAX_RULES  (1 << 19)
#define GRAM_MAX_REP    4096      /* counted repetition: the most optional copies gb_rep unrolls */
#define GRAM_MAX_STATES (1 << 16) /* parser states one matcher may create */
#define GRAM_MAX_TOKEN  1024      /* longest token (bytes) the trie holds; longer ones are masked */

/* e0_grammar is the public name of a compiled grammar (edge0.h). */
typedef struct e0_grammar gram;
typedef struct gram_builder gram_builder;

/* A set of bytes: bit (b & 63) of w[b >> 6]. */
typedef struct {
    uint64_t w[4];
} gram_set;

static inline void gram_set_add(gram_set *s, unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi && b < 256; b++)
        s->w[b >> 6] |= 1ull << (b & 63);
}
static inline bool gram_set_has(const gram_set *s, unsigned b) {
    return (s->w[b >> 6] >> (b & 63)) & 1;
}

/* ---- building --------------------------------------------------------------
 * Rules and alternatives are numbered as they are made. Errors are sticky:
 * after an allocation failure or a limit, every call does nothing and
 * returns -1, and gram_compile reports the first error. */

gram_builder *gb_new(void); /* NULL when out of memory */
void gb_free(gram_builder *b);
/* A new rule without alternatives (define them later: rules may refer to
 * each other in any order). */
int32_t gb_rule(gram_builder *b);
/* A new empty alternative of `rule`; elements are appended to it. */
int32_t gb_alt(gram_builder *b, int32_t rule);
void gb_lit(gram_builder *b, int32_t alt, const char *s, size_t n);
void gb_str(gram_builder *b, int32_t alt, const char *s); /* NUL-terminated literal */
void gb_set(gram_builder *b, int32_t alt, const gram_set *s);
void gb_ref(gram_builder *b, int32_t alt, int32_t rule);
/* Helper rules. */
int32_t gb_lit_rule(gram_builder *b, const char *s, size_t n);
int32_t gb_set_rule(gram_builder *b, const gram_set *s);
int32_t gb_range_rule(gram_builder *b, unsigned lo, unsigned hi);
int32_t gb_seq2(gram_builder *b, int32_t x, int32_t y);     /* x y */
int32_t gb_star(gram_builder *b, int32_t x);                /* x* */
int32_t gb_plus(gram_builder *b, int32_t x);                /* x+ */
int32_t gb_opt(gram_builder *b, int32_t x);                 /* x? */
/* x{min,max}; max < 0: unbounded. At most GRAM_MAX_REP copies are unrolled. */
int32_t gb_rep(gram_builder *b, int32_t x, int32_t min, int32_t max);
/* Any text that ends with the first occurrence of `lit` (which it includes). */
int32_t gb_until(gram_builder *b, const char *lit);
/* The builder's sticky error: 0, E0_ENOMEM or E0_ERANGE (a limit). */
int gb_error(const gram_builder *b);

/* Compiles the rules reachable from roots[0..n_roots) (n_roots <= 4): a
 * matcher starts at one of them. E0_EINVAL names a rule without
 * alternatives or a left recursion; E0_ERANGE a grammar over the limits. */
int gram_compile(gram_builder *b, const int32_t *roots, int n_roots, gram **out, char *err);
/* e0_grammar_free(gram *g) is public: edge0.h. */
/* Elements and rules, for reports. */
size_t gram_size(const gram *g);

/* ---- the vocabulary ----------------------------------------------------- */

typedef struct gram_vocab gram_vocab;

/* The bytes token `id` decodes to, or NULL for a token that is never
 * allowed by its bytes (special tokens, ids without a token). */
typedef const uint8_t *(*gram_token_fn)(void *user, int32_t id, size_t *len);

int gram_vocab_new(gram_vocab **out, int32_t n_vocab, gram_token_fn fn, void *user, char *err);
void gram_vocab_free(gram_vocab *v);
int32_t gram_vocab_size(const gram_vocab *v);
size_t gram_vocab_nodes(const gram_vocab *v); /* trie nodes */

/* ---- matching ------------------------------------------------------------ */

typedef struct gram_matcher gram_matcher;

typedef struct {
    int root;              /* which of the compiled roots (0) */
    const int32_t *eot;    /* end-of-turn ids: allowed only when the grammar is complete */
    int n_eot;
    bool mask_cache;       /* keep masks by state (true; the bench turns it off) */
} gram_matcher_opts;

void gram_matcher_opts_default(gram_matcher_opts *o);
int gram_matcher_new(gram_matcher **out, const gram *g, const gram_vocab *v, const gram_matcher_opts *o, char *err);
void gram_matcher_free(gram_matcher *m);
/* Whether `id` may come next (nothing changes). */
bool gram_matcher_check(gram_matcher *m, int32_t id);
/* Takes `id` (it must pass gram_matcher_check): 0, or E0_EINVAL when it
 * does not, E0_ENOMEM when the matcher is out of memory or states. An
 * end-of-turn id ends the match. */
int gram_matcher_accept(gram_matcher *m, int32_t id);
/* Takes raw bytes (a test's or the prompt's text): 0, or E0_EINVAL. */
int gram_matcher_accept_bytes(gram_matcher *m, const uint8_t *s, size_t n);
/* The allowed tokens: bit (id & 31) of allowed[id >> 5], (n_vocab + 31) / 32
 * words. 0, or E0_ENOMEM (then nothing is allowed). */
int gram_matcher_mask(gram_matcher *m, uint32_t *allowed);
/* The text so far is a sentence of the grammar (an end-of-turn may come). */
bool gram_matcher_complete(const gram_matcher *m);
/* Some byte may still follow. */
bool gram_matcher_can_continue(gram_matcher *m);
/* States made so far. */
int32_t gram_matcher_states(const gram_matcher *m);

#endif
