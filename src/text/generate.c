/* Text in, text out: the public e0_text / e0_chat / e0_generate API over the
 * tokenizer, the chat renderer, the sampler and a session. */
#include "edge0.h"
#include "util/clock.h"
#include "io/gguf.h"
#include "model/model.h"
#include "text/chat.h"
#include "text/grammar.h"
#include "text/sampler.h"
#include "text/tokenizer.h"
#include "util/err.h"
#include "util/file.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

struct e0_text {
    tok_tokenizer *tk;
    e0_chat_format format;
    int32_t eot[4]; /* end-of-turn tokens the tokenizer knows (<|im_end|>, <|endoftext|>) */
    int n_eot;
    /* The token trie of constrained decoding, built on first use (gv_mu) and
     * then read-only: what makes e0_text "immutable after open" still true
     * for its users. */
    pthread_mutex_t gv_mu;
    gram_vocab *gv;
};

/* A string array of GGUF metadata as views into the file's mapping;
 * absent: *n = 0 and no error unless `required`. */
static int gguf_strs(const gguf_file *g, const char *key, bool required, tok_str **out, size_t *n,
                     char *err) {
    gguf_vtype elem;
    uint64_t len;
    *out = NULL;
    *n = 0;
    int rc = gguf_get_arr(g, key, &elem, &len, err);
    if (rc == E0_ENOTFOUND && !required) return 0;
    if (rc) return rc;
    if (elem != GGUF_STRING)
        return e0_fail(err, E0_EFORMAT, "%s: %s is an array of %s, not of strings", gguf_fname(g),
                       key, gguf_vtype_name(elem));
    tok_str *v = calloc(len ? len : 1, sizeof *v);
    if (!v) return e0_fail(err, E0_ENOMEM, "out of memory reading %s", key);
    for (uint64_t i = 0; i < len; i++) {
        gguf_str sv;
        if ((rc = gguf_arr_str(g, key, i, &sv, err))) {
            free(v);
            return rc;
        }
        v[i] = (tok_str){sv.p, (size_t)sv.len};
    }
    *out = v;
    *n = (size_t)len;
    return 0;
}

/* tokenizer.ggml.* ids: -1 when absent. */
static int gguf_id(const gguf_file *g, const char *key, int64_t *out, char *err) {
    uint32_t v;
    int rc = gguf_get_u32(g, key, &v, err);
    *out = rc ? -1 : (int64_t)v;
    return rc == E0_ENOTFOUND ? 0 : rc;
}

/* The tokenizer a GGUF file carries in its metadata (tokenizer.ggml.*,
 * text/tokenizer.h tok_vocab_src). */
static int tok_load_gguf(tok_tokenizer **tk, const char *path, char *err) {
    st_set *st;
    int rc = st_set_open_gguf(&st, path, err);
    if (rc) return rc;
    const gguf_file *g = st_gguf(st);
    tok_vocab_src v;
    tok_vocab_src_init(&v);
    tok_str *tokens = NULL, *merges = NULL;
    int32_t *types = NULL;
    const char *model = NULL, *pre = NULL;
    rc = gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (rc == E0_ENOTFOUND)
        rc = e0_fail(err, E0_ENOTFOUND, "%s: no tokenizer in the metadata (tokenizer.ggml.model is "
                                        "missing); pass --tokenizer FILE",
                     path);
    if (!rc && gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL) != 0) pre = NULL;
    if (!rc) rc = gguf_strs(g, "tokenizer.ggml.tokens", true, &tokens, &v.n_tokens, err);
    if (!rc) rc = gguf_strs(g, "tokenizer.ggml.merges", false, &merges, &v.n_merges, err);
    gguf_vtype elem;
    uint64_t nt = 0;
    if (!rc && (rc = gguf_get_arr(g, "tokenizer.ggml.token_type", &elem, &nt, err)) == E0_ENOTFOUND)
        rc = 0, nt = 0; /* optional: every token normal */
    else if (!rc && nt != v.n_tokens)
        rc = e0_fail(err, E0_EFORMAT, "%s: tokenizer.ggml.token_type has %llu entries for %zu tokens",
                     path, (unsigned long long)nt, v.n_tokens);
    if (!rc && nt && !(types = malloc(nt * sizeof *types)))
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
    for (uint64_t i = 0; !rc && i < nt; i++)
        rc = gguf_arr_i32(g, "tokenizer.ggml.token_type", i, &types[i], err);
    if (!rc) rc = gguf_id(g, "tokenizer.ggml.bos_token_id", &v.bos_id, err);
    if (!rc) rc = gguf_id(g, "tokenizer.ggml.eos_token_id", &v.eos_id, err);
    if (!rc) rc = gguf_id(g, "tokenizer.ggml.eot_token_id", &v.eot_id, err);
    if (!rc) rc = gguf_id(g, "tokenizer.ggml.padding_token_id", &v.pad_id, err);
    if (!rc) {
        int brc = gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &v.add_bos, err);
        if (brc && brc != E0_ENOTFOUND) rc = brc;
    }
    if (!rc) {
        v.model = (tok_str){model, strlen(model)};
        if (pre) v.pre = (tok_str){pre, strlen(pre)};
        v.tokens = tokens;
        v.merges = merges;
        v.types = types;
        rc = tok_load_vocab(tk, &v, path, err);
    }
    free(tokens);
    free(merges);
    free(types);
    st_set_free(st);
    return rc;
}

/* The chat template's text beside a tokenizer: chat_template.jinja, else
 * tokenizer_config.json's "chat_template" (a string, or a list of {name,
 * template} of which "default" counts). NULL when there is none. */
static char *dir_template(const char *dir) {
    char *p = e0_path_join(dir, "chat_template.jinja"), *text = NULL, err[E0_ERR_MAX];
    size_t len;
    if (p && e0_file_exists(p) && e0_read_file(p, &text, &len, 1 << 24, err) == 0) {
        free(p);
        return text;
    }
    free(p);
    if (!(p = e0_path_join(dir, "tokenizer_config.json")) || !e0_file_exists(p) ||
        e0_read_file(p, &text, &len, 1 << 26, err)) {
        free(p);
        return NULL;
    }
    free(p);
    cJSON *j = cJSON_ParseWithLength(text, len), *ct = cJSON_GetObjectItemCaseSensitive(j, "chat_template"), *it;
    free(text);
    text = NULL;
    if (cJSON_IsString(ct)) text = strdup(ct->valuestring);
    cJSON *list = cJSON_IsArray(ct) ? ct : NULL;
    cJSON_ArrayForEach(it, list) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name"), *t = cJSON_GetObjectItemCaseSensitive(it, "template");
        if (cJSON_IsString(name) && !strcmp(name->valuestring, "default") && cJSON_IsString(t) && !text)
            text = strdup(t->valuestring);
    }
    cJSON_Delete(j);
    return text;
}

/* The format of the template that goes with `model` (a directory or a GGUF file). */
static e0_chat_format model_format(const char *model, bool is_dir) {
    char *text = NULL, err[E0_ERR_MAX];
    if (is_dir) {
        text = dir_template(model);
    } else if (gguf_is_path(model)) {
        st_set *st;
        const char *s;
        if (st_set_open_gguf(&st, model, err) == 0) {
            if (gguf_get_str(st_gguf(st), "tokenizer.chat_template", &s, err) == 0) text = strdup(s);
            st_set_free(st);
        }
        if (!text) { /* beside the file */
            char *dir = strdup(model), *slash = dir ? strrchr(dir, '/') : NULL;
            if (slash) *slash = 0;
            if (dir) text = dir_template(slash ? dir : ".");
            free(dir);
        }
    }
    chat_format f = CHAT_FORMAT_QWEN3;
    if (text && chat_format_detect(text, strlen(text), &f, err)) f = CHAT_FORMAT_QWEN3;
    free(text);
    return f == CHAT_FORMAT_QWEN35 ? E0_CHAT_QWEN35 : E0_CHAT_QWEN3;
}

e0_chat_format e0_text_chat_format(const e0_text *t) { return t->format; }

int e0_text_open(e0_text **out, const char *path, char *err) {
    *out = NULL;
    struct stat st;
    char *file = NULL;
    bool gguf = false;
    const char *model = path;
    bool is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (is_dir) {
        if (!(file = e0_path_join(path, "tokenizer.json"))) return e0_fail(err, E0_ENOMEM, "out of memory");
        path = file;
    } else if (gguf_is_path(path)) { /* a tokenizer.json beside the file wins */
        char *dir = strdup(path);
        if (!dir) return e0_fail(err, E0_ENOMEM, "out of memory");
        char *slash = strrchr(dir, '/');
        if (slash) slash[slash == dir ? 1 : 0] = 0; /* "/m.gguf" lies in "/" */
        file = e0_path_join(slash ? dir : ".", "tokenizer.json");
        free(dir);
        if (!file) return e0_fail(err, E0_ENOMEM, "out of memory");
        if (stat(file, &st) == 0) path = file;
        else gguf = true;
    }
    e0_text *t = calloc(1, sizeof *t);
    int rc = !t         ? e0_fail(err, E0_ENOMEM, "out of memory")
             : gguf     ? tok_load_gguf(&t->tk, path, err)
                        : e0_tokenizer_load(&t->tk, path, err);
    if (rc == E0_ENOTFOUND && !gguf) e0_wrap(err, rc, "no tokenizer (a model directory needs tokenizer.json)");
    free(file);
    if (rc) {
        free(t);
        return rc;
    }
    static const char *eot[] = {CHAT_IM_END, "<|endoftext|>"};
    for (size_t i = 0; i < sizeof eot / sizeof *eot; i++) {
        int32_t id = tok_token_id(t->tk, eot[i]);
        if (id >= 0) t->eot[t->n_eot++] = id;
    }
    t->format = model_format(model, is_dir);
    pthread_mutex_init(&t->gv_mu, NULL);
    *out = t;
    return 0;
}

void e0_text_free(e0_text *t) {
    if (!t) return;
    gram_vocab_free(t->gv);
    pthread_mutex_destroy(&t->gv_mu);
    e0_tokenizer_free(t->tk);
    free(t);
}

int e0_text_encode(const e0_text *t, const char *s, size_t len, int32_t **ids, size_t *n, char *err) {
    tok_ids v = {0};
    int rc = e0_tokenizer_encode(t->tk, s, len, 0, &v, err);
    if (rc) return rc;
    *ids = v.v;
    *n = v.n;
    return 0;
}

int e0_text_decode(const e0_text *t, const int32_t *ids, size_t n, char **out, size_t *len, char *err) {
    size_t l;
    return e0_tokenizer_decode(t->tk, ids, n, 0, out, len ? len : &l, err);
}

int32_t e0_text_token_id(const e0_text *t, const char *token) { return tok_token_id(t->tk, token); }

void e0_chat_opts_default(e0_chat_opts *o) {
    o->format = E0_CHAT_QWEN3;
    o->add_generation_prompt = 1;
    o->enable_thinking = 1;
    o->tools_json = NULL;
}

int e0_chat_render(const char *messages_json, size_t len, const e0_chat_opts *o, char **out, size_t *out_len,
                   char *err) {
    cJSON *msgs = cJSON_ParseWithLength(messages_json, len), *tools = NULL;
    if (!msgs) return e0_fail(err, E0_EFORMAT, "messages: not valid JSON");
    int rc = 0;
    if (o && o->tools_json && !(tools = cJSON_Parse(o->tools_json)))
        rc = e0_fail(err, E0_EFORMAT, "tools: not valid JSON");
    if (!rc) {
        chat_opts co;
        chat_opts_default(&co);
        if (o) {
            co.format = o->format == E0_CHAT_QWEN35 ? CHAT_FORMAT_QWEN35 : CHAT_FORMAT_QWEN3;
            co.add_generation_prompt = o->add_generation_prompt != 0;
            co.enable_thinking = o->enable_thinking != 0;
        }
        co.tools = tools;
        rc = chat_render(msgs, &co, out, out_len, err);
    }
    cJSON_Delete(tools);
    cJSON_Delete(msgs);
    return rc;
}

void e0_sample_opts_default(e0_sample_opts *o) {
    sampler_params p;
    sampler_params_default(&p);
    memset(o, 0, sizeof *o);
    o->temperature = p.temperature;
    o->top_k = p.top_k;
    o->top_p = p.top_p;
    o->min_p = p.min_p;
    o->repeat_penalty = p.repeat_penalty;
    o->presence_penalty = p.presence_penalty;
    o->frequency_penalty = p.frequency_penalty;
}

static bool is_eot(const e0_text *t, const e0_config *c, int32_t id) {
    for (int i = 0; i < t->n_eot; i++)
        if (t->eot[i] == id) return true;
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos[i] == id) return true;
    return false;
}

/* ---- constrained decoding ------------------------------------------------------ */

/* Special tokens are never allowed by their bytes (they decode to nothing
 * in the answer); end-of-turn tokens are handled by the matcher. */
static const uint8_t *token_bytes(void *user, int32_t id, size_t *len) {
    const tok_tokenizer *tk = user;
    if (!tok_is_token(tk, id) || tok_is_special(tk, id)) return NULL;
    return tok_token_bytes(tk, id, len);
}

static const gram_vocab *text_vocab(const e0_text *t, char *err) {
    e0_text *w = (e0_text *)t; /* the lazily built trie; guarded */
    pthread_mutex_lock(&w->gv_mu);
    if (!w->gv && gram_vocab_new(&w->gv, e0_tokenizer_vocab_size(t->tk), token_bytes, t->tk, err)) w->gv = NULL;
    pthread_mutex_unlock(&w->gv_mu);
    return w->gv;
}

/* The think block before a grammar's answer: where it stands, so that a
 * reasoning that never ends can be closed after its budget. */
typedef struct {
    int state;     /* 0: none yet (may open), 1: inside, 2: over or never */
    char tail[16]; /* the last bytes seen, for a "</think>" cut across tokens */
    size_t n_tail, seen;
    int32_t tokens, budget, close_id;
} think_track;

static void think_feed(think_track *k, const uint8_t *p, size_t n) {
    char buf[16 + GRAM_MAX_TOKEN];
    if (k->state == 2 || n > GRAM_MAX_TOKEN) return;
    memcpy(buf, k->tail, k->n_tail);
    memcpy(buf + k->n_tail, p, n);
    size_t len = k->n_tail + n;
    if (k->state == 0) {
        /* tail holds everything seen so far: a prefix of "<think>" */
        if (len >= 7) k->state = memcmp(buf, "<think>", 7) ? 2 : 1;
        else if (memcmp(buf, "<think>", len)) k->state = 2;
    }
    if (k->state == 1) {
        k->tokens++;
        if (memmem(buf, len, "</think>", 8)) k->state = 2;
    }
    k->seen += n;
    size_t keep = len < 7 ? len : 7;
    memmove(k->tail, buf + len - keep, keep);
    k->n_tail = keep;
}

typedef struct {
    e0_piece_fn fn;
    void *user;
} piece_only;

static int piece_only_fn(void *user, const e0_token_info *tok, const char *text, size_t len) {
    (void)tok;
    piece_only *p = user;
    return p->fn(p->user, text, len);
}

int e0_generate(e0_session *s, const e0_text *t, const int32_t *prompt, size_t n, const e0_sample_opts *o,
                e0_piece_fn fn, void *user, e0_gen_result *r, char *err) {
    piece_only p = {fn, user};
    return e0_generate_tokens(s, t, prompt, n, o, fn ? piece_only_fn : NULL, &p, r, err);
}

/* The cheap path and the full mask: the sampled *id stands if the grammar
 * allows it; else the full mask is computed and the draw is repeated among
 * the allowed tokens the filters kept (sampler_resample), or, when the
 * filters kept none, the whole chain runs again on the masked logits. *id
 * -1: nothing is allowed. */
static int constrain(gram_matcher *gm, sampler *sm, float *logits, uint32_t *allowed, int32_t n_vocab, int32_t *id,
                     e0_gen_result *r, char *err) {
    const double t0 = now_s();
    int rc = 0;
    if (!gram_matcher_check(gm, *id)) {
        r->masks++;
        if ((rc = gram_matcher_mask(gm, allowed))) {
            rc = e0_fail(err, rc, "constrained decoding: out of memory (grammar states)");
        } else if ((*id = sampler_resample(sm, allowed)) < 0) {
            bool any = false;
            for (int32_t i = 0; i < n_vocab; i++) {
                if (!((allowed[i >> 5] >> (i & 31)) & 1)) logits[i] = -INFINITY;
                else any = true;
            }
            *id = any ? sampler_sample(sm, logits) : -1;
        }
    }
    r->mask_s += now_s() - t0;
    return rc;
}

/* ---- the generation loop, one step at a time (edge0.h: e0_gen_*) --------------------- */

struct e0_gen {
    e0_session *s;
    const e0_text *t;
    const e0_config *c;
    e0_sample_opts o; /* its strings and grammar borrowed */
    e0_token_fn fn;
    void *user;
    const int32_t *prompt; /* borrowed until the prefill is done */
    size_t n, done;        /* prompt ids; of them evaluated or reused */
    size_t part_n;         /* ids of a prefill pass paused between layers (0: none) */
    sampler *sm;
    chat_stop *stop;
    gram_matcher *gm;
    uint32_t *allowed; /* [vocab / 32] the grammar's mask */
    think_track think;
    float *logits; /* [vocab] */
    char *piece;
    tok_stream ts;
    e0_gen_result r;
    double t0, t1; /* begin, end of the prefill */
    bool finished;
    /* e0_gen_advance: the id chosen and not evaluated yet (has_x), the
     * last id a step drew, and the drafting pass's buffers: the verify
     * pass's logits [2, vocab], the draft's q, the main model's p and the
     * leftover max(0, p - q) [vocab] each, in one block (spec_lg) */
    int32_t x, last_id;
    bool has_x;
    float *spec_lg, *spec_q, *spec_p, *spec_r;
    /* between e0_gen_pass_ids and e0_gen_pass_done: the ids the pass
     * evaluates (1, or 2 with the draft spec_d), from position spec_pos */
    int spec_n;
    int32_t spec_d, spec_pos;
};

void e0_gen_free(e0_gen *g) {
    if (!g) return;
    if (g->part_n) e0_session_reset(g->s); /* a pass stopped between layers: its states are half-updated */
    gram_matcher_free(g->gm);
    free(g->allowed);
    chat_stop_free(g->stop);
    sampler_free(g->sm);
    free(g->piece);
    free(g->logits);
    free(g->spec_lg);
    free(g);
}

int e0_gen_begin(e0_gen **out, e0_session *s, const e0_text *t, const int32_t *prompt, size_t n,
              const e0_sample_opts *o, e0_token_fn fn, void *user, char *err) {
    *out = NULL;
    const e0_config *c = &s->m->cfg;
    e0_gen *g = calloc(1, sizeof *g);
    if (!g) return e0_fail(err, E0_ENOMEM, "out of memory");
    if (o) g->o = *o;
    else e0_sample_opts_default(&g->o);
    o = &g->o;
    g->s = s;
    g->t = t;
    g->c = c;
    g->fn = fn;
    g->user = user;
    g->prompt = prompt;
    g->n = n;
    g->r.prompt_tokens = (int32_t)n;
    g->think = (think_track){.state = 2, .close_id = -1};
    int rc = 0;
    if (n == 0) rc = e0_fail(err, E0_EINVAL, "the prompt is empty");
    else if (n >= (size_t)s->n_ctx)
        rc = e0_fail(err, E0_ERANGE, "the prompt has %zu tokens but the context holds %d; shorten it or raise the context size",
                     n, s->n_ctx);
    if (rc) {
        e0_gen_free(g);
        return rc;
    }
    sampler_params sp;
    sampler_params_default(&sp);
    sp.temperature = o->temperature;
    sp.top_k = o->top_k;
    sp.top_p = o->top_p;
    sp.min_p = o->min_p;
    sp.repeat_penalty = o->repeat_penalty;
    sp.presence_penalty = o->presence_penalty;
    sp.frequency_penalty = o->frequency_penalty;
    if (o->seed) sp.seed = o->seed;
    g->logits = malloc((size_t)c->vocab * sizeof *g->logits);
    g->piece = malloc(tok_stream_max(t->tk) + 8);
    rc = !g->logits || !g->piece ? e0_fail(err, E0_ENOMEM, "out of memory") : 0;
    if (!rc) rc = sampler_new(&sp, c->vocab, &g->sm, err);
    if (!rc) rc = chat_stop_new(&g->stop, o->stop, o->n_stop, err);
    if (!rc && o->grammar) {
        const gram_vocab *gv = text_vocab(t, err);
        gram_matcher_opts mo;
        gram_matcher_opts_default(&mo);
        int32_t eot[8];
        for (int i = 0; i < t->n_eot; i++)
            eot[mo.n_eot++] = t->eot[i];
        for (int i = 0; i < c->n_eos && mo.n_eot < 8; i++)
            eot[mo.n_eot++] = c->eos[i];
        mo.eot = eot;
        mo.root = o->grammar_root;
        rc = !gv ? E0_ENOMEM : gram_matcher_new(&g->gm, o->grammar, gv, &mo, err);
        if (!rc && !(g->allowed = calloc(((size_t)c->vocab + 31) / 32, sizeof *g->allowed)))
            rc = e0_fail(err, E0_ENOMEM, "out of memory");
        if (o->grammar_root != E0_GRAMMAR_PLAIN) {
            g->think.state = o->grammar_root == E0_GRAMMAR_THINK_OPEN ? 1 : 0;
            g->think.budget = o->max_tokens > 0 ? o->max_tokens / 2 : 4096;
            g->think.close_id = tok_token_id(t->tk, "</think>");
        }
    }
    if (rc) {
        e0_gen_free(g);
        return rc;
    }
    g->t0 = now_s();
    g->r.reused_tokens = session_prepare(s, prompt, n);
    g->done = (size_t)g->r.reused_tokens;
    for (size_t i = 0; i < n; i++)
        if (prompt[i] < c->vocab) sampler_accept(g->sm, prompt[i]);
    tok_stream_init(&g->ts, E0_DECODE_SKIP_SPECIAL);
    g->r.finish = E0_FINISH_LENGTH;
    *out = g;
    return 0;
}

size_t e0_gen_prefill_left(const e0_gen *g) { return g->n - g->done; }

float *e0_gen_logits(e0_gen *g) { return g->logits; }

e0_session *e0_gen_session(const e0_gen *g) { return g->s; }

const e0_gen_result *e0_gen_get_result(e0_gen *g) {
    if (!g->finished) {
        if (g->done < g->n) g->r.prefill_s = now_s() - g->t0;
        else g->r.decode_s = now_s() - g->t1;
    }
    return &g->r;
}

int e0_gen_prefill(e0_gen *g, size_t max, char *err) {
    int ran;
    return e0_gen_prefill_layers(g, max, 0, &ran, err);
}

int e0_gen_prefill_layers(e0_gen *g, size_t max, int max_layers, int *ran, char *err) {
    const int L = g->c->n_layers;
    size_t left = g->n - g->done, m = g->part_n ? g->part_n : max && max < left ? max : left;
    *ran = 0;
    if (!m) return 0;
    const bool last = m == left;
    int rc;
    bool done = true;
    if (max_layers > 0 || g->part_n) { /* a pass that may pause between layers */
        if (m > (size_t)g->s->n_batch) m = (size_t)g->s->n_batch;
        const bool fin = m == left;
        const int from = g->part_n ? session_part_layer(g->s) : 0;
        rc = session_eval_part(g->s, g->prompt + g->done, m, max_layers, fin ? g->logits : NULL, &done, err);
        g->part_n = rc || done ? 0 : m;
        if (rc) return rc;
        *ran = (done ? L : session_part_layer(g->s)) - from;
        if (!done) return 0;
        g->done += m;
        if (!fin) return 0;
    } else {
        rc = e0_session_eval(g->s, g->prompt + g->done, m, last ? E0_LOGITS_LAST : E0_LOGITS_NONE,
                             last ? g->logits : NULL, err);
        if (rc) return rc;
        *ran = L * (int)((m + (size_t)g->s->n_batch - 1) / (size_t)g->s->n_batch); /* whole passes */
        g->done += m;
        if (!last) return 0;
    }
    g->t1 = now_s();
    g->r.prefill_s = g->t1 - g->t0;
    g->prompt = NULL;
    return 0;
}

size_t e0_gen_prefill_next(const e0_gen *g, size_t max, const int32_t **ids, bool *last) {
    size_t left = g->n - g->done, m = max && max < left ? max : left;
    if (g->part_n) return 0;
    if (m > (size_t)g->s->n_batch) m = (size_t)g->s->n_batch;
    *ids = g->prompt + g->done;
    *last = m == left;
    return m;
}

void e0_gen_prefill_done(e0_gen *g, size_t m) {
    g->done += m;
    if (g->done < g->n) return;
    g->t1 = now_s();
    g->r.prefill_s = g->t1 - g->t0;
    g->prompt = NULL;
}

/* The end: the text still held back, unless the callback cancelled. */
static void gen_finish(e0_gen *g) {
    e0_gen_result *r = &g->r;
    chat_emit em;
    if (r->finish != E0_FINISH_CANCELLED) {
        size_t len = tok_stream_flush(&g->ts, g->piece);
        if (!chat_stop_feed(g->stop, g->piece, len, &em) && em.len && em.stop < 0 && g->fn)
            g->fn(g->user, NULL, em.text, em.len);
        chat_stop_finish(g->stop, &em);
        if (em.len && em.stop < 0 && g->fn) g->fn(g->user, NULL, em.text, em.len);
    }
}

/* A draft to decide on in a step (speculative sampling, e0_gen_advance):
 * the id d drawn from q ([vocab], sampler_dist of the draft's logits). */
typedef struct {
    int32_t d;
    const float *q;
} gen_draft;

/* The id sampled from logits, or with a draft (sampled, not greedy) the
 * speculative sampling rule's (sampler_spec). */
static int32_t gen_sample(e0_gen *g, const float *logits, const gen_draft *dr) {
    if (!dr) return sampler_sample(g->sm, logits);
    return sampler_spec(g->sm, logits, dr->d, dr->q, g->spec_p, g->spec_r);
}

/* One token from `logits`, the logits after position pos - 1 of the
 * generation (the session may hold more: a verify pass's second id). */
static int gen_step(e0_gen *g, const float *logits_in, int32_t pos, const gen_draft *dr, int32_t *next,
                    char *err) {
    if (g->finished) return E0_GEN_DONE;
    if (g->done < g->n) return e0_fail(err, E0_EINVAL, "e0_gen_step before the prompt's prefill is done");
    const e0_config *c = g->c;
    const e0_sample_opts *o = &g->o;
    const e0_text *t = g->t;
    e0_gen_result *r = &g->r;
    float *logits = (float *)logits_in; /* constrain() masks them for the full mask */
    int rc = 0;
    chat_emit em;
    bool over = true;
    do {
        if (o->max_tokens > 0 && r->completion_tokens >= o->max_tokens) break;
        if (pos >= g->s->n_ctx) {
            r->finish = E0_FINISH_CONTEXT;
            break;
        }
        int32_t id;
        if (g->gm && g->think.state == 1 && g->think.tokens >= g->think.budget && g->think.close_id >= 0 &&
            gram_matcher_check(g->gm, g->think.close_id)) {
            id = g->think.close_id; /* the reasoning's budget is spent: close it */
        } else {
            id = gen_sample(g, logits, dr);
            g->last_id = id;
            if (g->gm && (rc = constrain(g->gm, g->sm, logits, g->allowed, c->vocab, &id, r, err))) break;
            if (id < 0) { /* the grammar allows nothing: it is over */
                r->finish = E0_FINISH_STOP;
                break;
            }
        }
        e0_token_info tok = {.id = id};
        if (o->logprobs) {
            int32_t k = o->top_logprobs < 0 ? 0 : o->top_logprobs > E0_MAX_TOP_LOGPROBS ? E0_MAX_TOP_LOGPROBS : o->top_logprobs;
            tok.n_top = sampler_logprobs(g->sm, id, &tok.logprob, k, tok.top_ids, tok.top_logprobs);
        }
        sampler_accept(g->sm, id);
        if (g->gm) {
            const double a0 = now_s();
            size_t bl = 0;
            const uint8_t *b = id < e0_tokenizer_vocab_size(t->tk) ? tok_token_bytes(t->tk, id, &bl) : NULL;
            if (g->think.state != 2 && b) think_feed(&g->think, b, bl);
            rc = gram_matcher_accept(g->gm, id);
            r->mask_s += now_s() - a0;
            if (rc) {
                rc = e0_fail(err, rc, "constrained decoding: %s", rc == E0_ENOMEM ? "out of memory (grammar states)"
                                                                                  : "a token the grammar refuses");
                break;
            }
        }
        if (is_eot(t, c, id)) {
            r->finish = E0_FINISH_STOP;
            break;
        }
        r->completion_tokens++;
        size_t len = 0;
        if (id < e0_tokenizer_vocab_size(t->tk) &&
            tok_stream_push(t->tk, &g->ts, id, g->piece, tok_stream_max(t->tk), &len, err) != 0)
            len = 0; /* an id the tokenizer lacks (the model's vocab may be larger): no text */
        if ((rc = chat_stop_feed(g->stop, g->piece, len, &em))) break;
        /* called after every token, text or not, so a cancel lands within one token */
        if (g->fn && g->fn(g->user, &tok, em.len ? em.text : "", em.len)) {
            r->finish = E0_FINISH_CANCELLED;
            break;
        }
        if (em.stop >= 0) {
            r->finish = E0_FINISH_STOP;
            r->stop = o->stop[em.stop];
            break;
        }
        *next = id;
        over = false;
    } while (0);
    if (!over) return E0_GEN_EVAL;
    if (!rc) gen_finish(g);
    r->decode_s = now_s() - g->t1;
    g->finished = true;
    return rc ? rc : E0_GEN_DONE;
}

int e0_gen_step(e0_gen *g, int32_t *next, char *err) {
    const int rc = gen_step(g, g->logits, e0_session_pos(g->s), NULL, next, err);
    g->has_x = rc == E0_GEN_EVAL; /* e0_gen_advance may evaluate it */
    if (g->has_x) g->x = *next;
    return rc;
}

/* ---- speculative decoding with the MTP block (edge0.h e0_session_draft) ------- */

/* Whether the next pass may draft: the session can (its MTP state), the
 * generation has room for two more ids (max_tokens: the last id alone is
 * evaluated as without drafts), and the draw does not need the grammar's
 * mask (sampling under a grammar would change p; greedy is exact: the
 * main model's choice on the first row decides, grammar and all). */
static bool spec_on(const e0_gen *g) {
    const e0_sample_opts *o = &g->o;
    if (!e0_session_can_draft(g->s) || (g->gm && !sampler_greedy(g->sm))) return false;
    return !(o->max_tokens > 0 && g->r.completion_tokens >= o->max_tokens);
}

/* The buffers a drafting pass uses, made on the first. */
static int spec_bufs(e0_gen *g, char *err) {
    if (g->spec_lg) return 0;
    const size_t V = (size_t)g->c->vocab;
    g->spec_lg = malloc(5 * V * sizeof *g->spec_lg); /* verify [2, V], q, p, r */
    if (!g->spec_lg) return e0_fail(err, E0_ENOMEM, "out of memory");
    g->spec_q = g->spec_lg + 2 * V;
    g->spec_p = g->spec_q + V;
    g->spec_r = g->spec_p + V;
    return 0;
}

int e0_gen_pass_ids(e0_gen *g, int32_t *ids, char *err) {
    if (!g->has_x) return e0_fail(err, E0_EINVAL, "e0_gen_pass_ids before a step chose the id to evaluate");
    e0_session *s = g->s;
    ids[0] = g->x;
    g->spec_pos = e0_session_pos(s); /* x goes there */
    g->spec_n = 1;
    if (!spec_on(g)) return 1;
    int rc = spec_bufs(g, err);
    if (!rc) rc = e0_session_draft(s, g->x, g->spec_r, err);
    if (rc) return rc;
    if (sampler_greedy(g->sm)) {
        g->spec_d = sampler_sample(g->sm, g->spec_r); /* the choice the main model's row is compared with */
    } else {
        sampler_dist(g->sm, g->spec_r, g->spec_q);
        g->spec_d = sampler_draw(g->sm, g->spec_q);
    }
    ids[1] = g->spec_d;
    return g->spec_n = 2;
}

/* After a pass with a draft: the first row's step decides d (greedy: the
 * main model's choice equals it; sampled: the speculative rule), the
 * second's gives the id after it when d stands. Ends as e0_gen_step's loop
 * would: an id chosen and not evaluated in g->x, or done with the session
 * as that loop leaves it (a verified id it would not have evaluated rolled
 * back). */
static int spec_done(e0_gen *g, const float *lg, char *err) {
    e0_session *s = g->s;
    const size_t V = (size_t)g->c->vocab;
    const int32_t P = g->spec_pos;
    const gen_draft dr = {.d = g->spec_d, .q = g->spec_q};
    int32_t a, b;
    char ignored[E0_ERR_MAX]; /* a rollback right after its verify pass cannot fail */
    int rc = gen_step(g, lg, P + 1, sampler_greedy(g->sm) ? NULL : &dr, &a, err);
    if (rc != E0_GEN_EVAL) { /* done after x: d was never to be evaluated */
        e0_session_rollback(s, g->last_id != dr.d, ignored);
        return rc;
    }
    if (a != dr.d) {
        g->x = a;
        e0_session_rollback(s, true, ignored);
        return E0_GEN_EVAL;
    }
    rc = gen_step(g, lg + V, P + 2, NULL, &b, err);
    if (rc == E0_GEN_EVAL) g->x = b;
    return rc;
}

int e0_gen_pass_done(e0_gen *g, const float *logits, int32_t *next, char *err) {
    int rc;
    if (g->spec_n == 2) {
        rc = spec_done(g, logits, err);
    } else {
        if (logits != g->logits) memcpy(g->logits, logits, (size_t)g->c->vocab * sizeof *g->logits);
        rc = gen_step(g, g->logits, g->spec_pos + 1, NULL, &g->x, err);
    }
    g->spec_n = 0;
    g->has_x = rc == E0_GEN_EVAL;
    if (g->has_x && next) *next = g->x;
    return rc;
}

int e0_gen_advance(e0_gen *g, int32_t *next, char *err) {
    int rc;
    if (!g->has_x) { /* the first id, from the prefill's logits */
        rc = gen_step(g, g->logits, e0_session_pos(g->s), NULL, &g->x, err);
        if (rc != E0_GEN_EVAL) return rc;
        g->has_x = true;
    }
    int32_t ids[2];
    const int n = e0_gen_pass_ids(g, ids, err);
    if (n < 0) {
        g->has_x = false;
        return n;
    }
    if (n == 2) {
        rc = e0_session_verify(g->s, ids, g->spec_lg, err);
    } else {
        rc = e0_session_eval(g->s, ids, 1, E0_LOGITS_LAST, g->logits, err);
    }
    if (rc) {
        g->spec_n = 0;
        g->has_x = false;
        return rc;
    }
    return e0_gen_pass_done(g, n == 2 ? g->spec_lg : g->logits, next, err);
}

int e0_generate_tokens(e0_session *s, const e0_text *t, const int32_t *prompt, size_t n, const e0_sample_opts *o,
                       e0_token_fn fn, void *user, e0_gen_result *r, char *err) {
    e0_gen *g;
    memset(r, 0, sizeof *r);
    r->prompt_tokens = (int32_t)n;
    int rc = e0_gen_begin(&g, s, t, prompt, n, o, fn, user, err);
    if (rc) return rc;
    rc = e0_gen_prefill(g, 0, err);
    if (!rc)
        do rc = e0_gen_advance(g, NULL, err);
        while (rc == E0_GEN_EVAL);
    *r = *e0_gen_get_result(g);
    e0_gen_free(g);
    return rc;
}
