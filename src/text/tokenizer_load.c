/* tokenizer.json -> the tables of tok_tokenizer.
 *
 * Everything in the file is hostile until checked: each field is read
 * through a typed getter that names it in the message, ids are bounded by
 * TOK_MAX_ID before anything is sized by them, strings that later meet
 * PCRE2 with PCRE2_NO_UTF_CHECK are validated as UTF-8 here, and regexes get
 * match limits. cJSON's own nesting limit (1000) bounds the recursion
 * through Sequence normalizers and pre-tokenizers.
 *
 * Details that follow the `tokenizers` library (and would otherwise differ):
 *   - merges are "a b" strings (exactly one space) or ["a", "b"] pairs
 *     (what the halves must be: tokenizer_build.c);
 *   - a vocabulary key given twice keeps its last id, as in a JSON map; of
 *     two keys with one id the later one spells it;
 *   - added tokens keep the ids the file gives them; "normalized" defaults
 *     to !special; tokens with normalized=true match the normalized content;
 *   - an unk_token missing from the vocabulary is only an error when the
 *     encoder needs it.
 */
#include "text/tokenizer_impl.h"

#include "util/err.h"
#include "util/file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- Small typed getters ---------------------------------------------- */

static const cJSON *get(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_bool(tok_ld *L, const cJSON *o, const char *path, const char *key, bool def,
                    bool *out) {
    const cJSON *v = get(o, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(v))
        return tok_ld_fail(L, E0_EFORMAT, "%s.%s must be true or false", path, key);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* A string field; NULL (and no error) when absent and !required. */
static int get_str(tok_ld *L, const cJSON *o, const char *path, const char *key, bool required,
                   const char **out) {
    const cJSON *v = get(o, key);
    *out = NULL;
    if (!v) {
        if (required) return tok_ld_fail(L, E0_EFORMAT, "%s.%s is missing", path, key);
        return 0;
    }
    if (!cJSON_IsString(v) || !v->valuestring)
        return tok_ld_fail(L, E0_EFORMAT, "%s.%s must be a string", path, key);
    *out = v->valuestring;
    return 0;
}

static int get_id(tok_ld *L, const cJSON *v, const char *what, int32_t *out) {
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(d >= 0 && d < TOK_MAX_ID) || d != floor(d))
        return tok_ld_fail(L, E0_EFORMAT, "%s: id must be an integer in [0, %d)", what, TOK_MAX_ID);
    *out = (int32_t)d;
    return 0;
}

static int get_pattern(tok_ld *L, const cJSON *o, const char *path, pcre2_code **out) {
    const cJSON *p = get(o, "pattern");
    char field[160];
    snprintf(field, sizeof field, "%s.pattern", path);
    if (!p || !cJSON_IsObject(p))
        return tok_ld_fail(L, E0_EFORMAT, "%s must be {\"String\": ...} or {\"Regex\": ...}",
                           field);
    const cJSON *s = get(p, "String"), *r = get(p, "Regex");
    const cJSON *v = s ? s : r;
    if (!v || !cJSON_IsString(v) || !v->valuestring)
        return tok_ld_fail(L, E0_EFORMAT, "%s must be {\"String\": ...} or {\"Regex\": ...}",
                           field);
    return tok_ld_compile_re(L, v->valuestring, strlen(v->valuestring), s != NULL, field, out);
}

/* ---- Normalizer and pre-tokenizer ---------------------------------------- */

static int type_of(tok_ld *L, const cJSON *o, const char *path, const char **type) {
    if (!cJSON_IsObject(o)) return tok_ld_fail(L, E0_EFORMAT, "%s must be an object or null", path);
    return get_str(L, o, path, "type", true, type);
}

static int utf8_str(tok_ld *L, const char *path, const char *key, const char *s, char **out,
                    size_t *n) {
    size_t len = strlen(s);
    if (tok_utf8_valid((const uint8_t *)s, len) != len)
        return tok_ld_fail(L, E0_EFORMAT, "%s.%s is not valid UTF-8", path, key);
    *out = strdup(s);
    if (!*out) return tok_ld_fail(L, E0_ENOMEM, "out of memory");
    *n = len;
    return 0;
}

static int parse_norm(tok_ld *L, const cJSON *o, const char *path, int depth) {
    tok_tokenizer *t = L->t;
    const char *type;
    int rc = type_of(L, o, path, &type);
    if (rc) return rc;
    if (!strcmp(type, "Sequence")) {
        const cJSON *a = get(o, "normalizers");
        if (!cJSON_IsArray(a))
            return tok_ld_fail(L, E0_EFORMAT, "%s.normalizers must be an array", path);
        if (depth > 16)
            return tok_ld_fail(L, E0_EUNSUPPORTED, "%s: Sequences nested too deep", path);
        size_t i = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, a) {
            char sub[160];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", path, i++);
            if ((rc = parse_norm(L, c, sub, depth + 1))) return rc;
        }
        return 0;
    }
    if (t->n_norm == TOK_MAX_STEPS)
        return tok_ld_fail(L, E0_EUNSUPPORTED, "%s: more than %d normalizers", path, TOK_MAX_STEPS);
    tok_norm *s = &t->norm[t->n_norm];
    memset(s, 0, sizeof *s);
    if (!strcmp(type, "NFC")) {
        s->kind = TN_NFC;
    } else if (!strcmp(type, "NFD")) {
        s->kind = TN_NFD;
    } else if (!strcmp(type, "NFKC")) {
        s->kind = TN_NFKC;
    } else if (!strcmp(type, "NFKD")) {
        s->kind = TN_NFKD;
    } else if (!strcmp(type, "Lowercase")) {
        s->kind = TN_LOWERCASE;
    } else if (!strcmp(type, "StripAccents")) {
        s->kind = TN_STRIP_ACCENTS;
    } else if (!strcmp(type, "Strip")) {
        s->kind = TN_STRIP;
        if ((rc = get_bool(L, o, path, "strip_left", true, &s->left)) ||
            (rc = get_bool(L, o, path, "strip_right", true, &s->right)))
            return rc;
    } else if (!strcmp(type, "Prepend")) {
        const char *p;
        s->kind = TN_PREPEND;
        if ((rc = get_str(L, o, path, "prepend", true, &p)) ||
            (rc = utf8_str(L, path, "prepend", p, &s->str, &s->str_len)))
            return rc;
    } else if (!strcmp(type, "Replace")) {
        const char *c;
        s->kind = TN_REPLACE;
        if ((rc = get_str(L, o, path, "content", true, &c)) ||
            (rc = utf8_str(L, path, "content", c, &s->str, &s->str_len)))
            return rc;
        t->n_norm++; /* owned from here: e0_tokenizer_free releases what is set */
        return get_pattern(L, o, path, &s->re);
    } else {
        return tok_ld_fail(L, E0_EUNSUPPORTED, "%s: normalizer type \"%s\" is not supported", path,
                           type);
    }
    t->n_norm++;
    return 0;
}

static int parse_behavior(tok_ld *L, const cJSON *o, const char *path, tok_behavior def,
                          tok_behavior *out) {
    static const struct {
        const char *name;
        tok_behavior b;
    } B[] = {{"Removed", TB_REMOVED},
             {"Isolated", TB_ISOLATED},
             {"MergedWithPrevious", TB_MERGED_PREV},
             {"MergedWithNext", TB_MERGED_NEXT},
             {"Contiguous", TB_CONTIGUOUS}};
    const char *s;
    int rc = get_str(L, o, path, "behavior", false, &s);
    if (rc) return rc;
    if (!s) {
        *out = def;
        return 0;
    }
    for (size_t i = 0; i < sizeof B / sizeof *B; i++)
        if (!strcmp(s, B[i].name)) {
            *out = B[i].b;
            return 0;
        }
    return tok_ld_fail(L, E0_EFORMAT,
                       "%s.behavior \"%s\" is not one of Removed, Isolated, "
                       "MergedWithPrevious, MergedWithNext, Contiguous",
                       path, s);
}

static tok_pre *new_pre(tok_ld *L, const char *path) {
    tok_tokenizer *t = L->t;
    if (t->n_pre == TOK_MAX_STEPS) {
        tok_ld_fail(L, E0_EUNSUPPORTED, "%s: more than %d pre-tokenizers", path, TOK_MAX_STEPS);
        return NULL;
    }
    tok_pre *p = &t->pre[t->n_pre++];
    memset(p, 0, sizeof *p);
    return p;
}

static int fixed_split(tok_ld *L, const char *path, const char *re, tok_behavior b, bool invert) {
    tok_pre *p = new_pre(L, path);
    if (!p) return E0_EUNSUPPORTED;
    p->kind = TP_SPLIT, p->behavior = b, p->invert = invert;
    return tok_ld_compile_re(L, re, strlen(re), false, path, &p->re);
}

static int parse_pre(tok_ld *L, const cJSON *o, const char *path, int depth) {
    tok_tokenizer *t = L->t;
    const char *type;
    int rc = type_of(L, o, path, &type);
    if (rc) return rc;
    if (t->n_pre && t->pre[t->n_pre - 1].kind == TP_BYTELEVEL)
        return tok_ld_fail(
            L, E0_EUNSUPPORTED,
            "%s: a pre-tokenizer after ByteLevel is not supported (ByteLevel must be last)", path);
    if (!strcmp(type, "Sequence")) {
        const cJSON *a = get(o, "pretokenizers");
        if (!cJSON_IsArray(a))
            return tok_ld_fail(L, E0_EFORMAT, "%s.pretokenizers must be an array", path);
        if (depth > 16)
            return tok_ld_fail(L, E0_EUNSUPPORTED, "%s: Sequences nested too deep", path);
        size_t i = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, a) {
            char sub[160];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", path, i++);
            if ((rc = parse_pre(L, c, sub, depth + 1))) return rc;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        tok_pre *p = new_pre(L, path);
        if (!p) return E0_EUNSUPPORTED;
        p->kind = TP_SPLIT;
        if ((rc = parse_behavior(L, o, path, TB_ISOLATED, &p->behavior)) ||
            (rc = get_bool(L, o, path, "invert", false, &p->invert)))
            return rc;
        return get_pattern(L, o, path, &p->re);
    }
    if (!strcmp(type, "ByteLevel")) {
        bool use_regex;
        tok_pre *p = new_pre(L, path);
        if (!p) return E0_EUNSUPPORTED;
        p->kind = TP_BYTELEVEL;
        if ((rc = get_bool(L, o, path, "add_prefix_space", true, &p->add_prefix_space)) ||
            (rc = get_bool(L, o, path, "use_regex", true, &use_regex)))
            return rc;
        if (use_regex)
            return tok_ld_compile_re(L, TOK_GPT2_REGEX, strlen(TOK_GPT2_REGEX), false, path,
                                     &p->re);
        return 0;
    }
    if (!strcmp(type, "Digits")) {
        bool individual;
        tok_pre *p = new_pre(L, path);
        if (!p) return E0_EUNSUPPORTED;
        p->kind = TP_DIGITS;
        if ((rc = get_bool(L, o, path, "individual_digits", false, &individual))) return rc;
        p->behavior = individual ? TB_ISOLATED : TB_CONTIGUOUS;
        return 0;
    }
    if (!strcmp(type, "Whitespace"))
        return fixed_split(L, path, "\\w+|[^\\w\\s]+", TB_REMOVED, true);
    if (!strcmp(type, "WhitespaceSplit")) return fixed_split(L, path, "\\s+", TB_REMOVED, false);
    if (!strcmp(type, "Punctuation")) {
        tok_behavior b;
        if ((rc = parse_behavior(L, o, path, TB_ISOLATED, &b))) return rc;
        return fixed_split(L, path, "[\\p{P}!-/:-@\\[-`{-~]", b, false);
    }
    return tok_ld_fail(L, E0_EUNSUPPORTED, "%s: pre-tokenizer type \"%s\" is not supported", path,
                       type);
}

/* Only the ByteLevel decoder (alone or in a Sequence) is implemented. */
static int check_decoder(tok_ld *L, const cJSON *o, const char *path, int depth) {
    const char *type;
    int rc = type_of(L, o, path, &type);
    if (rc) return rc;
    if (!strcmp(type, "ByteLevel")) return 0;
    if (!strcmp(type, "Sequence") && depth < 16) {
        const cJSON *a = get(o, "decoders");
        if (!cJSON_IsArray(a))
            return tok_ld_fail(L, E0_EFORMAT, "%s.decoders must be an array", path);
        size_t i = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, a) {
            char sub[160];
            snprintf(sub, sizeof sub, "%s.decoders[%zu]", path, i++);
            if ((rc = check_decoder(L, c, sub, depth + 1))) return rc;
        }
        return 0;
    }
    return tok_ld_fail(L, E0_EUNSUPPORTED,
                       "%s: decoder type \"%s\" is not supported (only ByteLevel)", path, type);
}

/* ---- Model --------------------------------------------------------------- */

static int parse_vocab(tok_ld *L, const cJSON *vocab, int32_t *max_id) {
    size_t n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, vocab) n++;
    int rc = tok_ld_vocab_alloc(L, n);
    if (rc) return rc;
    cJSON_ArrayForEach(c, vocab) {
        int32_t id;
        size_t len = strlen(c->string);
        double d = cJSON_IsNumber(c) ? c->valuedouble : NAN;
        if (!(d >= 0 && d < TOK_MAX_ID) || d != floor(d)) {
            char shown[72];
            return tok_ld_fail(L, E0_EFORMAT,
                               "model.vocab[\"%s\"]: id must be an integer in [0, %d)",
                               tok_ld_show(c->string, len, shown), TOK_MAX_ID);
        }
        id = (int32_t)d;
        uint32_t off;
        if ((rc = tok_ld_arena_put(L, c->string, len, &off)) ||
            (rc = tok_ld_vocab_insert(L, off, (uint32_t)len, id)))
            return rc;
        if (id > *max_id) *max_id = id;
    }
    return 0;
}

/* One merge: "a b" or ["a", "b"] -> the two halves. */
static int merge_halves(tok_ld *L, const cJSON *m, size_t i, const char **a, size_t *na,
                        const char **b, size_t *nb) {
    if (cJSON_IsString(m) && m->valuestring) {
        const char *s = m->valuestring, *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' ')) {
            char shown[72];
            return tok_ld_fail(L, E0_EFORMAT,
                               "model.merges[%zu]: \"%s\" is not two tokens separated by one space",
                               i, tok_ld_show(s, strlen(s), shown));
        }
        *a = s, *na = (size_t)(sp - s), *b = sp + 1, *nb = strlen(sp + 1);
        return 0;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2) {
        const cJSON *x = m->child, *y = x->next;
        if (cJSON_IsString(x) && cJSON_IsString(y) && x->valuestring && y->valuestring) {
            *a = x->valuestring, *na = strlen(*a), *b = y->valuestring, *nb = strlen(*b);
            return 0;
        }
    }
    return tok_ld_fail(L, E0_EFORMAT, "model.merges[%zu] must be \"a b\" or [\"a\", \"b\"]", i);
}

static int parse_merges(tok_ld *L, const cJSON *merges) {
    size_t n = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) n++;
    int rc = tok_ld_merges_alloc(L, n);
    if (rc) return rc;
    tok_buf cat = {0};
    size_t i = 0;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if ((rc = merge_halves(L, m, i, &a, &na, &b, &nb)) ||
            (rc = tok_ld_merge_add(L, "model.merges", "model.vocab", i, a, na, b, nb, &cat)))
            break;
        i++;
    }
    tok_buf_free(&cat);
    return rc;
}

static int parse_model(tok_ld *L, const cJSON *root, int32_t *max_id) {
    tok_tokenizer *t = L->t;
    const cJSON *model = get(root, "model");
    if (!model || !cJSON_IsObject(model))
        return tok_ld_fail(L, E0_EFORMAT, "model is missing or not an object");
    const char *type, *s;
    int rc = get_str(L, model, "model", "type", false, &type);
    if (rc) return rc;
    if (type && strcmp(type, "BPE"))
        return tok_ld_fail(L, E0_EUNSUPPORTED, "model.type \"%s\" is not supported (only BPE)",
                           type);
    const cJSON *vocab = get(model, "vocab");
    if (!vocab || !cJSON_IsObject(vocab))
        return tok_ld_fail(L, E0_EFORMAT, "model.vocab is missing or not an object");
    if ((rc = parse_vocab(L, vocab, max_id))) return rc;
    const cJSON *merges = get(model, "merges");
    if (merges && !cJSON_IsArray(merges))
        return tok_ld_fail(L, E0_EFORMAT, "model.merges must be an array");
    if ((rc = parse_merges(L, merges))) return rc;
    static const char *const AFFIX[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++) {
        if ((rc = get_str(L, model, "model", AFFIX[i], false, &s))) return rc;
        if (s && *s)
            return tok_ld_fail(L, E0_EUNSUPPORTED, "model.%s \"%s\" is not supported", AFFIX[i], s);
    }
    const cJSON *d = get(model, "dropout");
    if (d && !cJSON_IsNumber(d))
        return tok_ld_fail(L, E0_EFORMAT, "model.dropout must be a number or null");
    bool byte_fallback; /* never needed: every byte has a byte-level token */
    if ((rc = get_bool(L, model, "model", "fuse_unk", false, &t->fuse_unk)) ||
        (rc = get_bool(L, model, "model", "ignore_merges", false, &t->ignore_merges)) ||
        (rc = get_bool(L, model, "model", "byte_fallback", false, &byte_fallback)) ||
        (rc = get_str(L, model, "model", "unk_token", false, &s)))
        return rc;
    t->unk_id = -1;
    if (s) {
        t->unk_id = tok_ld_vocab_find(L, s, strlen(s));
        t->unk_missing = t->unk_id < 0;
    }
    tok_ld_byte_ids(L);
    return 0;
}

/* ---- Added tokens -------------------------------------------------------- */

static int parse_added(tok_ld *L, const cJSON *arr, int32_t *max_id, tok_added_src **srcs) {
    tok_tokenizer *t = L->t;
    size_t n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, arr) n++;
    t->added = calloc(n ? n : 1, sizeof *t->added);
    *srcs = calloc(n ? n : 1, sizeof **srcs);
    if (!t->added || !*srcs)
        return tok_ld_fail(L, E0_ENOMEM, "out of memory for %zu added tokens", n);
    size_t i = 0;
    cJSON_ArrayForEach(c, arr) {
        char path[64];
        snprintf(path, sizeof path, "added_tokens[%zu]", i);
        if (!cJSON_IsObject(c)) return tok_ld_fail(L, E0_EFORMAT, "%s must be an object", path);
        tok_added *a = &t->added[i];
        const cJSON *idv = get(c, "id");
        const char *content;
        int rc;
        if (!idv) return tok_ld_fail(L, E0_EFORMAT, "%s.id is missing", path);
        if ((rc = get_id(L, idv, path, &a->id)) ||
            (rc = get_str(L, c, path, "content", true, &content)) ||
            (rc = get_bool(L, c, path, "special", false, &a->special)) ||
            (rc = get_bool(L, c, path, "lstrip", false, &a->lstrip)) ||
            (rc = get_bool(L, c, path, "rstrip", false, &a->rstrip)) ||
            (rc = get_bool(L, c, path, "single_word", false, &a->single_word)) ||
            (rc = get_bool(L, c, path, "normalized", !a->special, &a->normalized)))
            return rc;
        size_t len = strlen(content);
        if (!len) return tok_ld_fail(L, E0_EFORMAT, "%s.content is empty", path);
        if (tok_utf8_valid((const uint8_t *)content, len) != len)
            return tok_ld_fail(L, E0_EFORMAT, "%s.content is not valid UTF-8", path);
        (*srcs)[i] = (tok_added_src){content, len};
        if (a->id > *max_id) *max_id = a->id;
        i++;
    }
    t->n_added = n;
    return 0;
}

/* ---- Entry point ---------------------------------------------------------- */

static int load(tok_ld *L, const cJSON *root) {
    tok_tokenizer *t = L->t;
    int32_t max_id = -1;
    int rc = parse_model(L, root, &max_id);
    if (rc) return rc;
    const cJSON *at = get(root, "added_tokens");
    if (at && !cJSON_IsArray(at))
        return tok_ld_fail(L, E0_EFORMAT, "added_tokens must be an array");
    tok_added_src *srcs = NULL;
    if ((rc = parse_added(L, at, &max_id, &srcs))) goto out;
    if ((rc = tok_ld_entries_alloc(L, max_id, "model.vocab and added_tokens are empty"))) goto out;
    for (size_t i = 0; i <= t->vocab_mask; i++) {
        const tok_vslot *v = &t->vocab[i];
        if (v->id < 0) continue;
        const tok_entry *e = &t->ent[v->id];
        if (e->flags && e->str_off > v->off) continue; /* two keys, one id: keep the later one */
        if ((rc = tok_ld_entry(L, v->id, v->off, v->len))) goto out;
    }
    const cJSON *norm = get(root, "normalizer");
    if (norm && (rc = parse_norm(L, norm, "normalizer", 0))) goto out;
    if ((rc = tok_norm_setup(t, L->err))) {
        e0_wrap(L->err, rc, "%s", L->name);
        goto out;
    }
    const cJSON *pre = get(root, "pre_tokenizer");
    if (pre && (rc = parse_pre(L, pre, "pre_tokenizer", 0))) goto out;
    if (!t->n_pre || t->pre[t->n_pre - 1].kind != TP_BYTELEVEL) {
        rc = tok_ld_fail(L, E0_EUNSUPPORTED,
                         "pre_tokenizer has no ByteLevel step: only byte-level "
                         "BPE tokenizers are supported");
        goto out;
    }
    const cJSON *dec = get(root, "decoder");
    if (dec && (rc = check_decoder(L, dec, "decoder", 0))) goto out;
    rc = tok_ld_finish_added(L, srcs);
out:
    free(srcs);
    return rc;
}

int tok_load_json(tok_tokenizer **out, const char *json, size_t len, const char *name, char *err) {
    *out = NULL;
    if (!json) return e0_fail(err, E0_EINVAL, "%s: no data", name);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        size_t at = end && end >= json && end <= json + len ? (size_t)(end - json) : 0, line = 1;
        for (size_t i = 0; i < at; i++)
            line += json[i] == '\n';
        return e0_fail(err, E0_EFORMAT, "%s: not valid JSON (line %zu, byte %zu)", name, line, at);
    }
    tok_ld L = {.name = name, .err = err};
    int rc;
    if (!cJSON_IsObject(root)) {
        rc = tok_ld_fail(&L, E0_EFORMAT, "the top level is not a JSON object");
        cJSON_Delete(root);
        return rc;
    }
    L.t = calloc(1, sizeof *L.t);
    if (!L.t) {
        cJSON_Delete(root);
        return e0_fail(err, E0_ENOMEM, "%s: out of memory", name);
    }
    rc = load(&L, root);
    cJSON_Delete(root);
    return tok_ld_finish(&L, rc, out);
}

int e0_tokenizer_load(tok_tokenizer **out, const char *path, char *err) {
    char *buf;
    size_t len;
    *out = NULL;
    int rc = e0_read_file(path, &buf, &len, TOK_MAX_FILE, err);
    if (rc) return rc;
    rc = tok_load_json(out, buf, len, path, err);
    free(buf);
    return rc;
}
