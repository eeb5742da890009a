/* Mask time of constrained decoding (text/grammar.h) per token, over
 * realistic structured outputs, for the Qwen3 vocabulary (151,669 tokens)
 * and a 248,320-token one (Qwen3.5/3.6's size).
 *
 *   build/bench/bench_grammar [TOKENIZER_JSON]   (default ../shared/tokenizers/qwen3/tokenizer.json)
 *
 * Each case is a grammar (text/schema.h) and an answer that follows it
 * (written here by hand, as a model would write it, think block and all for
 * the tool calls), tokenized with the Qwen3 tokenizer. The answer is
 * replayed token by token: before each token the full mask is computed and
 * timed, the token is checked to be in it, then accepted. Two modes: with
 * the matcher's mask cache by state (what the server runs) and without it
 * (every mask a full trie walk: the cost when the cheap path fails on a
 * state not seen before). The cheap path itself (gram_matcher_check of the
 * sampled token) is timed too. Times are the thread's CPU time (see now()).
 *
 * The 248k vocabulary: no Qwen3.5 tokenizer is available here, so the
 * Qwen3 vocabulary is extended to 248,320 tokens with byte strings made by
 * joining two random Qwen3 tokens (seeded), the way BPE merges make new
 * tokens. That grows the trie by about as many nodes as Qwen3.5's real
 * additions would (mostly multilingual words), and probably more, since
 * random joins share fewer prefixes than real merges: a pessimistic
 * stand-in. The answers use only Qwen3 ids, which it contains. */
#include "text/grammar.h"
#include "text/schema.h"
#include "text/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The thread's CPU time: the machines this runs on are shared, and wall time
 * under a load of 10 on 2 cores measures the neighbours. */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    const tok_tokenizer *tk;
    int32_t base;        /* ids below come from the tokenizer */
    uint8_t *extra;      /* the made-up tokens' bytes */
    uint32_t *extra_off; /* [n_extra + 1] */
} vocab_src;

static const uint8_t *token_fn(void *user, int32_t id, size_t *len) {
    const vocab_src *v = user;
    if (id < v->base) {
        if (!tok_is_token(v->tk, id) || tok_is_special(v->tk, id)) return NULL;
        return tok_token_bytes(v->tk, id, len);
    }
    int32_t k = id - v->base;
    *len = v->extra_off[k + 1] - v->extra_off[k];
    return v->extra + v->extra_off[k];
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* tokens [base, n) as joins of two random ordinary tokens */
static void extend(vocab_src *v, int32_t n) {
    int32_t k = n - v->base;
    v->extra_off = malloc(((size_t)k + 1) * sizeof *v->extra_off);
    v->extra = malloc((size_t)k * 64);
    uint32_t at = 0;
    for (int32_t i = 0; i < k; i++) {
        v->extra_off[i] = at;
        for (int half = 0; half < 2; half++) {
            size_t len = 0;
            const uint8_t *p = NULL;
            while (!p || len > 31) {
                int32_t id = (int32_t)(next_rand() % 151643);
                p = token_fn(v, id, &len);
            }
            memcpy(v->extra + at, p, len);
            at += (uint32_t)len;
        }
    }
    v->extra_off[k] = at;
}

typedef struct {
    const char *name;
    const char *grammar_json; /* a response_format, or tools (with kind 't' / 'x') */
    char kind;                /* 'r' response_format, 't' tools JSON form, 'x' tools XML form */
    int root;
    const char *answer;
} bench_case;

#define PERSON_SCHEMA                                                                                                \
    "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"schema\":{\"type\":\"object\",\"properties\":{"  \
    "\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},\"email\":{\"type\":\"string\"},"                    \
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"},"  \
    "\"zip\":{\"type\":\"string\"}},\"required\":[\"street\",\"city\"],\"additionalProperties\":false},"               \
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":8},"                                    \
    "\"status\":{\"enum\":[\"active\",\"inactive\",\"banned\"]},\"score\":{\"type\":\"number\"}},"                      \
    "\"required\":[\"name\",\"age\",\"address\",\"tags\",\"status\"],\"additionalProperties\":false}}}"

#define TOOLS                                                                                                        \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","             \
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"unit\":{\"enum\":[\"celsius\","    \
    "\"fahrenheit\"]}},\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":\"search\","            \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"},\"filters\":{\"type\":"      \
    "\"object\",\"properties\":{\"site\":{\"type\":\"string\"},\"year\":{\"type\":\"integer\"}}}},"                    \
    "\"required\":[\"query\"],\"additionalProperties\":false}}}]"

static const bench_case CASES[] = {
    {"json_schema person", PERSON_SCHEMA, 'r', SCHEMA_ROOT_PLAIN,
     "{\n  \"name\": \"Ada Lovelace\",\n  \"age\": 36,\n  \"email\": \"ada@example.org\",\n  \"address\": {\n    "
     "\"street\": \"12 St James's Square\",\n    \"city\": \"London\"\n  },\n  \"tags\": [\"mathematics\", "
     "\"analytical engine\", \"poetry\"],\n  \"status\": \"inactive\",\n  \"score\": 98.5\n}"},
    {"json_object", "{\"type\":\"json_object\"}", 'r', SCHEMA_ROOT_PLAIN,
     "{\"results\": [{\"title\": \"Mixture of experts\", \"year\": 2017, \"authors\": [\"Shazeer\", \"Mirhoseini\"], "
     "\"cited\": true}, {\"title\": \"Switch Transformers\", \"year\": 2021, \"pages\": null, \"score\": -1.25e3}], "
     "\"query\": \"sparse models, 2017\\u20132021\", \"total\": 2}"},
    {"tool call JSON (Qwen3), thinking", TOOLS, 't', SCHEMA_ROOT_THINK_MAY,
     "<think>\nThe user wants the weather in Zürich for three days, then a search.\n</think>\n\n<tool_call>\n"
     "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\", \"days\": 3, \"unit\": \"celsius\"}}\n"
     "</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"Zürich events this week\", "
     "\"filters\": {\"site\": \"zuerich.com\", \"year\": 2026}}}\n</tool_call>"},
    {"tool call XML (Qwen3.5), thinking", TOOLS, 'x', SCHEMA_ROOT_THINK_OPEN,
     "The user wants the weather in Zürich for three days.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
     "<parameter=city>\nZürich\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=unit>\ncelsius\n"
     "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=search>\n<parameter=query>\n"
     "Zürich events \"this week\" <b>\n</parameter>\n<parameter=filters>\n{\"site\": \"zuerich.com\", \"year\": 2026}"
     "\n</parameter>\n</function>\n</tool_call>"},
};

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void report(const char *what, double *t, size_t n) {
    qsort(t, n, sizeof *t, cmp_d);
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += t[i];
    printf("  %-34s n=%4zu  mean %7.3f ms  p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n", what, n, s / n * 1e3,
           t[n / 2] * 1e3, t[(size_t)(n * 0.99)] * 1e3, t[n - 1] * 1e3);
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "../shared/tokenizers/qwen3/tokenizer.json";
    char err[E0_ERR_MAX];
    tok_tokenizer *tk;
    if (e0_tokenizer_load(&tk, path, err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int32_t eot = tok_token_id(tk, "<|im_end|>");
    static const int32_t SIZES[] = {151669, 248320};
    for (int vi = 0; vi < 2; vi++) {
        vocab_src src = {tk, e0_tokenizer_vocab_size(tk), NULL, NULL};
        if (SIZES[vi] > src.base) extend(&src, SIZES[vi]);
        gram_vocab *gv;
        double t0 = now();
        if (gram_vocab_new(&gv, SIZES[vi], token_fn, &src, err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        printf("vocabulary %d tokens: trie of %zu nodes, built in %.0f ms\n", SIZES[vi], gram_vocab_nodes(gv),
               (now() - t0) * 1e3);
        size_t cap = 1 << 14, n_all[2] = {0, 0}, n_chk = 0;
        double *all[2] = {malloc(cap * sizeof(double)), malloc(cap * sizeof(double))}, *chk = malloc(cap * sizeof(double));
        uint32_t *mask = malloc(((size_t)SIZES[vi] + 31) / 32 * sizeof *mask);
        for (size_t ci = 0; ci < sizeof CASES / sizeof *CASES; ci++) {
            const bench_case *bc = &CASES[ci];
            cJSON *j = cJSON_Parse(bc->grammar_json);
            gram *g = NULL;
            int rc = bc->kind == 'r' ? e0_grammar_response_format(j, &g, err)
                                     : e0_grammar_tools(j, NULL, 4, bc->kind == 'x' ? E0_TOOL_FORM_XML : E0_TOOL_FORM_JSON,
                                                            &g, err);
            cJSON_Delete(j);
            if (rc) {
                fprintf(stderr, "%s: %s\n", bc->name, err);
                return 1;
            }
            tok_ids ids = {0};
            if (e0_tokenizer_encode(tk, bc->answer, strlen(bc->answer), 0, &ids, err)) return fprintf(stderr, "%s\n", err), 1;
            printf(" %s: %zu tokens\n", bc->name, ids.n);
            for (int cache = 1; cache >= 0; cache--) {
                gram_matcher_opts mo;
                gram_matcher_opts_default(&mo);
                mo.root = bc->root;
                mo.eot = &eot;
                mo.n_eot = 1;
                mo.mask_cache = cache;
                gram_matcher *m;
                if (gram_matcher_new(&m, g, gv, &mo, err)) return fprintf(stderr, "%s\n", err), 1;
                double *t = malloc((ids.n + 1) * sizeof *t);
                for (size_t i = 0; i <= ids.n; i++) {
                    int32_t id = i < ids.n ? ids.v[i] : eot;
                    double a = now();
                    gram_matcher_mask(m, mask);
                    t[i] = now() - a;
                    if (!((mask[id >> 5] >> (id & 31)) & 1)) {
                        fprintf(stderr, "%s: token %zu (id %d) is not in the mask\n", bc->name, i, id);
                        return 1;
                    }
                    a = now();
                    bool ok = gram_matcher_check(m, id);
                    double c = now() - a;
                    if (!ok || gram_matcher_accept(m, id)) return fprintf(stderr, "%s: token %zu refused\n", bc->name, i), 1;
                    if (cache && n_chk < cap) chk[n_chk++] = c;
                    if (n_all[cache] < cap) all[cache][n_all[cache]++] = t[i];
                }
                char what[64];
                snprintf(what, sizeof what, "full mask, %s", cache ? "cache by state" : "no cache");
                report(what, t, ids.n + 1);
                free(t);
                if (cache) printf("  (%d parser states)\n", gram_matcher_states(m));
                gram_matcher_free(m);
            }
            e0_ids_free(&ids);
            e0_grammar_free(g);
        }
        printf(" all cases, vocabulary %d:\n", SIZES[vi]);
        report("full mask, cache by state", all[1], n_all[1]);
        report("full mask, no cache", all[0], n_all[0]);
        report("cheap path (check one token)", chk, n_chk);
        free(all[0]), free(all[1]), free(chk), free(mask);
        gram_vocab_free(gv);
        free(src.extra), free(src.extra_off);
    }
    e0_tokenizer_free(tk);
    return 0;
}
