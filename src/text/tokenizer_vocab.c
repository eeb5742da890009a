/* GGUF tokenizer metadata -> the tables of tok_tokenizer.
 *
 * llama.cpp's converter (convert_hf_to_gguf.py, get_vocab_base) writes a
 * Hugging Face byte-level BPE tokenizer as:
 *   tokens      every id of config.json's vocab_size in order: model.vocab
 *               keys as they are (byte-level spelling, "Ġthe"), added
 *               tokens as their content ("<|im_start|>"), "[PADi]" for ids
 *               that are neither;
 *   token_type  NORMAL for model.vocab, CONTROL for added tokens that are
 *               special (or look special: "<|...|>"), USER_DEFINED for the
 *               other added tokens, UNUSED for the padding;
 *   merges      "A B", the halves joined by one space, in rank order;
 *   pre         a name for the pre-tokenizer, picked by hashing how the HF
 *               tokenizer splits a test text; llama.cpp maps the name back
 *               to regexes (llama-vocab.cpp).
 * This file undoes that, so the result equals tok_load_json of the
 * tokenizer.json:
 *   - NORMAL, UNKNOWN and BYTE tokens are the vocabulary (BPE input and
 *     output); CONTROL and USER_DEFINED are added tokens with
 *     normalized=false, lstrip/rstrip/single_word false, special = CONTROL,
 *     which is what every added token of Qwen2/3/3.5 is; so they are cut
 *     out of the raw text before normalization, as there;
 *   - UNUSED ids are no token (decoding them fails with E0_ERANGE, as ids
 *     between the tokenizer's size and config.json's vocab_size do), so
 *     e0_tokenizer_vocab_size is the tokenizer's, not the padded count;
 *   - the pre-tokenizer comes from `pre` (table below): the normalizer and
 *     Split regex of the model family's tokenizer.json, then ByteLevel
 *     without prefix space or regex. The regexes are the tokenizer.json
 *     originals, which llama.cpp keeps in comments above its rewrites.
 * Where this differs from llama.cpp on purpose: llama.cpp skips the NFC
 * normalizer of Qwen's tokenizer.json (its encodings differ on text that is
 * not NFC); it accepts merges whose halves or concatenation are not tokens,
 * where the `tokenizers` library and tok_load_json refuse the file, as here.
 * Duplicate token strings (no tokenizer.json can express them: a JSON map
 * keeps one id per key): the later id is the one lookups and merges find,
 * as in llama.cpp's text-to-id map; the earlier id still decodes.
 *
 * Hostile input: every string must be valid UTF-8 without NUL (GGUF strings
 * are UTF-8; NUL-terminated lookups could not reach a token with a NUL), a
 * type must be 1..6, ids are bounded by TOK_MAX_ID before anything is sized
 * by them, the special ids must name tokens. */
#include "text/tokenizer_impl.h"

#include "util/err.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One pre-tokenizer name: what the model family's tokenizer.json does. */
typedef struct {
    const char *name;
    bool nfc;             /* normalizer NFC */
    const char *split[4]; /* Split regexes (Isolated), in order */
    bool bytelevel_regex; /* ByteLevel use_regex (the GPT-2 regex) */
} pre_spec;

static const pre_spec PRE[] = {
    /* Qwen2, Qwen2.5, Qwen3 (tokenizer.json: NFC, this Split, ByteLevel) */
    {"qwen2",
     true,
     {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     false},
    /* Qwen3.5 / 3.6: the same with combining marks (\p{M}) kept in words */
    {"qwen35",
     true,
     {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
      "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     false},
    /* GPT-2's tokenizer.json: ByteLevel with its own regex, nothing else */
    {"gpt-2", false, {NULL}, true},
    /* llama.cpp's fallback (an absent or "default" pre): its four regexes,
     * each splitting the pieces of the one before, no normalizer. No
     * tokenizer.json does this; it is here to tokenize as llama.cpp does. */
    {"default",
     false,
     {"[\\p{P}\\$\\+<=>\\^~\\|]+",
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", "\\p{N}+",
      "[0-9][0-9][0-9]"},
     false},
};

void tok_vocab_src_init(tok_vocab_src *v) {
    memset(v, 0, sizeof *v);
    v->bos_id = v->eos_id = v->eot_id = v->pad_id = -1;
}

static bool str_is(tok_str s, const char *lit) {
    return s.len == strlen(lit) && (s.len == 0 || !memcmp(s.ptr, lit, s.len));
}

/* The pre-tokenizer steps of `spec`. */
static int build_pre(tok_ld *L, const pre_spec *spec) {
    tok_tokenizer *t = L->t;
    int rc;
    if (spec->nfc) t->norm[t->n_norm++] = (tok_norm){.kind = TN_NFC};
    if ((rc = tok_norm_setup(t, L->err))) return e0_wrap(L->err, rc, "%s", L->name);
    for (size_t i = 0; i < sizeof spec->split / sizeof *spec->split && spec->split[i]; i++) {
        tok_pre *p = &t->pre[t->n_pre++];
        *p = (tok_pre){.kind = TP_SPLIT, .behavior = TB_ISOLATED};
        if ((rc = tok_ld_compile_re(L, spec->split[i], strlen(spec->split[i]), false,
                                    "tokenizer.ggml.pre", &p->re)))
            return rc;
    }
    tok_pre *b = &t->pre[t->n_pre++];
    *b = (tok_pre){.kind = TP_BYTELEVEL};
    if (spec->bytelevel_regex)
        return tok_ld_compile_re(L, TOK_GPT2_REGEX, strlen(TOK_GPT2_REGEX), false,
                                 "tokenizer.ggml.pre", &b->re);
    return 0;
}

/* Checks the strings and types; counts the vocabulary and added tokens and
 * finds the largest id that is a token. */
static int check_tokens(tok_ld *L, const tok_vocab_src *v, size_t *n_vocab, size_t *n_added,
                        int32_t *max_id) {
    *n_vocab = *n_added = 0;
    *max_id = -1;
    for (size_t i = 0; i < v->n_tokens; i++) {
        tok_str s = v->tokens[i];
        int32_t type = v->types ? v->types[i] : TOK_TYPE_NORMAL;
        char shown[72];
        if (type < TOK_TYPE_NORMAL || type > TOK_TYPE_BYTE)
            return tok_ld_fail(
                L, E0_EFORMAT,
                "tokenizer.ggml.token_type[%zu] = %" PRId32 " is not a token type (1..6)", i, type);
        if (s.len && !s.ptr)
            return tok_ld_fail(L, E0_EINVAL, "tokenizer.ggml.tokens[%zu] has no data", i);
        if (s.len > UINT32_MAX)
            return tok_ld_fail(L, E0_EUNSUPPORTED, "tokenizer.ggml.tokens[%zu] is too long", i);
        if (tok_utf8_valid((const uint8_t *)s.ptr, s.len) != s.len)
            return tok_ld_fail(L, E0_EFORMAT,
                               "tokenizer.ggml.tokens[%zu] \"%s\" is not valid UTF-8", i,
                               tok_ld_show(s.ptr, s.len, shown));
        if (s.len && memchr(s.ptr, 0, s.len))
            return tok_ld_fail(L, E0_EFORMAT,
                               "tokenizer.ggml.tokens[%zu] \"%s\" contains a NUL byte", i,
                               tok_ld_show(s.ptr, s.len, shown));
        if (type == TOK_TYPE_UNUSED) continue;
        if (type == TOK_TYPE_CONTROL || type == TOK_TYPE_USER_DEFINED) {
            if (!s.len)
                return tok_ld_fail(
                    L, E0_EFORMAT,
                    "tokenizer.ggml.tokens[%zu] is empty (an added token, type %" PRId32 ")", i,
                    type);
            (*n_added)++;
        } else {
            (*n_vocab)++;
        }
        *max_id = (int32_t)i;
    }
    return 0;
}

/* The vocabulary, the entries and the added tokens, by id. */
static int fill_tokens(tok_ld *L, const tok_vocab_src *v, tok_added_src *srcs) {
    tok_tokenizer *t = L->t;
    size_t k = 0;
    for (int32_t id = 0; id < t->n_ent; id++) {
        tok_str s = v->tokens[id];
        int32_t type = v->types ? v->types[id] : TOK_TYPE_NORMAL;
        if (type == TOK_TYPE_UNUSED) continue;
        if (type == TOK_TYPE_CONTROL || type == TOK_TYPE_USER_DEFINED) {
            t->added[k] = (tok_added){.id = id, .special = type == TOK_TYPE_CONTROL};
            srcs[k++] = (tok_added_src){s.ptr, s.len};
            continue;
        }
        uint32_t off;
        int rc;
        if (!s.ptr) s.ptr = ""; /* an empty view may have no pointer */
        if ((rc = tok_ld_arena_put(L, s.ptr, s.len, &off)) ||
            (rc = tok_ld_vocab_insert(L, off, (uint32_t)s.len, id)) ||
            (rc = tok_ld_entry(L, id, off, (uint32_t)s.len)))
            return rc;
    }
    t->n_added = k;
    return 0;
}

static int fill_merges(tok_ld *L, const tok_vocab_src *v) {
    int rc = tok_ld_merges_alloc(L, v->n_merges);
    if (rc) return rc;
    tok_buf cat = {0};
    for (size_t i = 0; i < v->n_merges && !rc; i++) {
        tok_str m = v->merges[i];
        char shown[72];
        const char *sp = m.len && m.ptr ? memchr(m.ptr, ' ', m.len) : NULL;
        if (!sp || memchr(sp + 1, ' ', m.len - (size_t)(sp + 1 - m.ptr))) {
            rc = tok_ld_fail(L, E0_EFORMAT,
                             "tokenizer.ggml.merges[%zu]: \"%s\" is not two tokens separated by "
                             "one space",
                             i, tok_ld_show(m.ptr ? m.ptr : "", m.ptr ? m.len : 0, shown));
            break;
        }
        size_t na = (size_t)(sp - m.ptr);
        rc = tok_ld_merge_add(L, "tokenizer.ggml.merges", "the vocabulary of tokenizer.ggml.tokens",
                              i, m.ptr, na, sp + 1, m.len - na - 1, &cat);
    }
    tok_buf_free(&cat);
    return rc;
}

/* Each special id must name a token (llama.cpp only warns and drops it). */
static int check_special(tok_ld *L, const tok_vocab_src *v) {
    const struct {
        const char *key;
        int64_t id;
    } S[] = {{"bos_token_id", v->bos_id},
             {"eos_token_id", v->eos_id},
             {"eot_token_id", v->eot_id},
             {"padding_token_id", v->pad_id}};
    for (size_t i = 0; i < sizeof S / sizeof *S; i++) {
        int64_t id = S[i].id;
        if (id == -1) continue;
        if (id < 0 || (uint64_t)id >= v->n_tokens || (v->types && v->types[id] == TOK_TYPE_UNUSED))
            return tok_ld_fail(L, E0_EFORMAT,
                               "tokenizer.ggml.%s = %" PRId64 " is not a token (%zu tokens)",
                               S[i].key, id, v->n_tokens);
    }
    if (v->add_bos && v->bos_id == -1)
        return tok_ld_fail(L, E0_EFORMAT,
                           "tokenizer.ggml.add_bos_token is true but there is no bos_token_id");
    return 0;
}

static int load(tok_ld *L, const tok_vocab_src *v) {
    tok_tokenizer *t = L->t;
    char shown[72];
    t->unk_id = -1;
    if (!str_is(v->model, "gpt2"))
        return tok_ld_fail(
            L, E0_EUNSUPPORTED,
            "tokenizer.ggml.model \"%s\" is not supported (only \"gpt2\", "
            "byte-level BPE)",
            tok_ld_show(v->model.ptr ? v->model.ptr : "", v->model.ptr ? v->model.len : 0, shown));
    const pre_spec *spec = NULL;
    tok_str pre = v->pre.len && v->pre.ptr ? v->pre : (tok_str){"default", 7};
    for (size_t i = 0; i < sizeof PRE / sizeof *PRE && !spec; i++)
        if (str_is(pre, PRE[i].name)) spec = &PRE[i];
    if (!spec)
        return tok_ld_fail(L, E0_EUNSUPPORTED,
                           "tokenizer.ggml.pre \"%s\" is not supported (known: qwen2, qwen35, "
                           "gpt-2, default)",
                           tok_ld_show(pre.ptr, pre.len, shown));
    if (!v->n_tokens) return tok_ld_fail(L, E0_EFORMAT, "tokenizer.ggml.tokens is empty");
    if (!v->tokens) return tok_ld_fail(L, E0_EINVAL, "tokenizer.ggml.tokens has no data");
    if (v->n_tokens > TOK_MAX_ID)
        return tok_ld_fail(L, E0_EUNSUPPORTED, "tokenizer.ggml.tokens: %zu tokens (at most %d)",
                           v->n_tokens, TOK_MAX_ID);
    if (v->n_merges && !v->merges)
        return tok_ld_fail(L, E0_EINVAL, "tokenizer.ggml.merges has no data");
    size_t n_vocab, n_added;
    int32_t max_id;
    int rc;
    if ((rc = check_tokens(L, v, &n_vocab, &n_added, &max_id)) || (rc = check_special(L, v)) ||
        (rc = tok_ld_vocab_alloc(L, n_vocab)) ||
        (rc = tok_ld_entries_alloc(L, max_id, "tokenizer.ggml.tokens: every token is unused")))
        return rc;
    t->added = calloc(n_added ? n_added : 1, sizeof *t->added);
    tok_added_src *srcs = calloc(n_added ? n_added : 1, sizeof *srcs);
    if (!t->added || !srcs) {
        rc = tok_ld_fail(L, E0_ENOMEM, "out of memory for %zu added tokens", n_added);
    } else if (!(rc = fill_tokens(L, v, srcs)) && !(rc = fill_merges(L, v))) {
        tok_ld_byte_ids(L);
        if (!(rc = build_pre(L, spec))) rc = tok_ld_finish_added(L, srcs);
    }
    free(srcs);
    return rc;
}

int tok_load_vocab(tok_tokenizer **out, const tok_vocab_src *v, const char *name, char *err) {
    *out = NULL;
    if (!name) name = "(gguf)";
    if (!v) return e0_fail(err, E0_EINVAL, "%s: no tokenizer metadata", name);
    tok_ld L = {.name = name, .err = err};
    L.t = calloc(1, sizeof *L.t);
    if (!L.t) return e0_fail(err, E0_ENOMEM, "%s: out of memory", name);
    return tok_ld_finish(&L, load(&L, v), out);
}
