/* edge0 demo [MODEL] [--prompt TEXT]: one answer streamed to the terminal,
 * then a stats line. Without MODEL it builds (once) a tiny random-weight
 * model of the Qwen3.5/3.6 MoE shape with the real Qwen3 tokenizer (from
 * assets/), so it runs offline on a fresh clone; its answers are noise. */
#include "cli/cli.h"
#include "cli/opts.h"
#include "util/json.h"
#include "edge0.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *HELP =
    "usage: edge0 demo [MODEL] [--prompt TEXT | --prompt-file FILE] [--system TEXT] [--no-think]\n"
    "                  [--ids ID,ID,...]\n"
    "\n"
    "Answers one prompt with MODEL (a directory with config.json, safetensors and\n"
    "tokenizer.json), streaming the answer, then prints a stats line. Without\n"
    "MODEL it uses the demo model of this tree (assets/demo-model: a small\n"
    "Qwen3.5-MoE-architecture model with an MTP block, trained on WordNet's\n"
    "definitions, that answers questions about English words: \"What does\n"
    "happiness mean?\"), else a built-in tiny random-weight model with the real\n"
    "Qwen3 tokenizer (built once into ~/.cache/edge0/demo-tiny) whose answers\n"
    "are noise. Both work offline. The prompt is rendered with the model's own\n"
    "chat template (Qwen3 or Qwen3.5).\n"
    "\n"
    "  --prompt TEXT   the user message (default: a short question)\n"
    "  --prompt-file FILE  the user message from FILE (\"-\": stdin)\n"
    "  --system TEXT   a system message before it\n"
    "  --no-think      render the prompt with thinking off, as the template does\n"
    "  --ids LIST      feed these token ids instead of a prompt (no tokenizer needed)\n"
    "\n";

int cli_find_asset(const char *rel, char *out, size_t n) {
    const char *env = getenv("E0_ASSETS");
    char exe[PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *cands[3];
    char a[PATH_MAX + 256], b[PATH_MAX + 256], c[PATH_MAX + 256];
    int k = 0;
    if (env && *env) {
        snprintf(a, sizeof a, "%s/%s", env, rel);
        cands[k++] = a;
    }
    if (l > 0) {
        exe[l] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(b, sizeof b, "%s/../assets/%s", exe, rel);
        snprintf(c, sizeof c, "%s/assets/%s", exe, rel);
        cands[k++] = b;
        cands[k++] = c;
    }
    for (int i = 0; i < k; i++)
        if (access(cands[i], R_OK) == 0) {
            snprintf(out, n, "%s", cands[i]);
            return 0;
        }
    return -1;
}

int cli_find_tokenizer(const char *cmd, const char *why, char *out, size_t n) {
    if (cli_find_asset("qwen3-tokenizer/tokenizer.json", out, n) == 0) return 0;
    cli_error("%s: %s needs assets/qwen3-tokenizer/tokenizer.json (set E0_ASSETS to the assets "
              "directory of the edge0 source tree)",
              cmd, why);
    return -1;
}

/* The trained demo model (assets/demo-model: tools/train, issue 41), found
 * as the tokenizer is; -1 when this tree has none. */
static int trained_model(char *dir, size_t n) {
    char cfg[PATH_MAX + 256];
    if (cli_find_asset("demo-model/model.safetensors", cfg, sizeof cfg) != 0) return -1;
    char *slash = strrchr(cfg, '/');
    *slash = 0;
    if (strlen(cfg) >= n) return -1;
    memcpy(dir, cfg, strlen(cfg) + 1);
    return 0;
}

static int copy_file(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb"), *out = in ? fopen(dst, "wb") : NULL;
    char buf[1 << 16];
    size_t r;
    int ok = in && out;
    while (ok && (r = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, r, out) == r;
    if (in) fclose(in);
    if (out && fclose(out) != 0) ok = 0;
    if (!ok) cli_error("demo: cannot copy %s to %s: %s", src, dst, strerror(errno));
    return ok ? 0 : -1;
}

/* ~/.cache/edge0/demo-tiny: the tiny model plus the tokenizer, built on first use. */
static int builtin_model(char *dir, size_t n) {
    const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char root[4096], tok[PATH_MAX + 64], dst[4300];
    if (cache && *cache) snprintf(root, sizeof root, "%s/edge0", cache);
    else if (home && *home) snprintf(root, sizeof root, "%s/.cache/edge0", home);
    else snprintf(root, sizeof root, "/tmp/edge0-cache");
    snprintf(dir, n, "%s/demo-tiny", root);
    snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
    struct stat st;
    if (stat(dst, &st) == 0) return 0;
    if (cli_find_tokenizer("demo", "the built-in model", tok, sizeof tok) != 0) return -1;
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", root);
    for (char *p = parent + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(parent, 0755);
            *p = '/';
        }
    mkdir(parent, 0755);
    if (stat(dir, &st) != 0) {
        fprintf(stderr, "edge0 demo: no MODEL given; building the built-in tiny model (random weights, "
                        "qwen3_5_moe layout, Qwen3 tokenizer) in %s\n", dir);
        char err[E0_ERR_MAX];
        if (e0_synth_write(e0_synth_find("tiny"), dir, 1, err) != 0) {
            cli_error("%s", err);
            return -1;
        }
    }
    return copy_file(tok, dst);
}

static int print_piece(void *user, const char *text, size_t len) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

/* [{"role":"system",...},{"role":"user","content":"<prompt, JSON-escaped>"}]
 * (malloc'd), or NULL out of memory. */
static char *messages_json(const char *system, const char *prompt) {
    sbuf b = {0};
    sb_printf(&b, "[");
    for (int m = system ? 0 : 1; m < 2; m++) {
        const char *text_m = m ? prompt : system;
        sb_printf(&b, "%s{\"role\":\"%s\",\"content\":", m && system ? "," : "", m ? "user" : "system");
        sb_json_str(&b, text_m, strlen(text_m));
        sb_printf(&b, "}");
    }
    sb_printf(&b, "]");
    if (b.oom) sb_free(&b);
    return b.p;
}

static void print_id(void *user, int k, int32_t id) {
    (void)k;
    printf(" %d", id);
    fflush(stdout);
    ((e0_gen_result *)user)->completion_tokens++;
}

/* Token ids without a tokenizer: greedy (with the MTP block's drafts when
 * the engine has them: cli_greedy), printing the ids, the last one not
 * evaluated; r gets the counts and times. 0, or an error (err; -1 out of
 * memory, err left). */
static int greedy_ids(e0_session *s, const int32_t *ids, size_t n_ids, int32_t vocab, int max_tokens,
                      e0_gen_result *r, char *err) {
    float *logits = malloc((size_t)vocab * sizeof *logits);
    int32_t *out = malloc((size_t)max_tokens * sizeof *out);
    if (!logits || !out) {
        free(logits), free(out);
        return -1;
    }
    memset(r, 0, sizeof *r);
    double a = now_s();
    int rc = e0_session_eval(s, ids, n_ids, E0_LOGITS_LAST, logits, err);
    r->prefill_s = now_s() - a;
    a = now_s();
    if (!rc && max_tokens > 1) rc = cli_greedy(s, logits, vocab, max_tokens - 1, out, NULL, print_id, r, err);
    if (!rc) print_id(r, max_tokens - 1, (int32_t)e0_argmax(logits, (size_t)vocab));
    r->decode_s = now_s() - a;
    free(logits);
    free(out);
    return rc;
}

/* --prompt-file: the text read, which becomes the prompt. */
typedef struct {
    const char **prompt;
    char **buf;
} prompt_arg;

static int opt_prompt_file(void *ptr, const char *name, const char *v) {
    const prompt_arg *p = ptr;
    if (cli_opt_text_file(p->buf, name, v)) return -1;
    *p->prompt = *p->buf;
    return 0;
}

/* --ids: once. */
typedef struct {
    int32_t **ids;
    size_t *n;
} id_list;

static int opt_ids(void *ptr, const char *name, const char *v) {
    const id_list *l = ptr;
    return *l->ids || cli_parse_ids(name, v, l->ids, l->n) != 0 ? -1 : 0;
}

int cmd_demo(int argc, char **argv) {
    const char *model = NULL, *prompt = "What does happiness mean?", *system = NULL;
    char *prompt_buf = NULL; /* --prompt-file */
    int32_t *ids = NULL;
    size_t n_ids = 0;
    bool think = true;
    cli_engine ce;
    cli_engine_init(&ce);
    ce.sampling = true;
    prompt_arg pf = {&prompt, &prompt_buf};
    id_list il = {&ids, &n_ids};
    const cli_opt opts[] = {
        CLI_OPT("--prompt", CLI_STR, &prompt),
        CLI_OPT("--prompt-file", CLI_FN, &pf, .fn = opt_prompt_file, .need = "a file name"),
        CLI_OPT("--system", CLI_STR, &system),
        CLI_OPT("--no-think", CLI_CLEAR, &think),
        CLI_OPT("--ids", CLI_FN, &il, .fn = opt_ids),
        {0},
    };
    const cli_args args = {.cmd = "demo", .help = HELP, .ce = &ce, .opts = opts, .pos = &model};
    const int parsed = cli_parse(&args, argc, argv);
    if (parsed == 1) {
        free(prompt_buf);
        free(ids);
        return 0;
    }
    if (parsed) goto usage;
    if (cli_engine_finish(&ce) != 0) goto usage;
    if (!ce.sample.max_tokens) ce.sample.max_tokens = 64;
    char dir[4200];
    bool trained = false;
    if (!model && trained_model(dir, sizeof dir) == 0) {
        model = dir;
        trained = true;
    }
    if (!model) {
        if (builtin_model(dir, sizeof dir) != 0) {
            free(prompt_buf);
            free(ids);
            return 1;
        }
        model = dir;
    }
    char err[E0_ERR_MAX] = "out of memory", *rendered = NULL;
    e0_engine *eng = NULL;
    e0_session *s = NULL;
    e0_text *text = NULL;
    int status = 1;
    double t0 = now_s();
    if (e0_engine_open(&eng, model, &ce.eo, err) != E0_OK) goto out;
    cli_engine_opened(&ce, eng);
    if (!ids) {
        if (e0_text_open(&text, model, err) != E0_OK) {
            char why[E0_ERR_MAX];
            snprintf(why, sizeof why, "%s", err);
            snprintf(err, sizeof err, "%.400s (give --ids to run token ids without a tokenizer)", why);
            goto out;
        }
        char *msg = messages_json(system, prompt);
        if (!msg) goto out;
        e0_chat_opts co;
        e0_chat_opts_default(&co);
        co.format = e0_text_chat_format(text);
        co.enable_thinking = think;
        size_t rl;
        int rc = e0_chat_render(msg, strlen(msg), &co, &rendered, &rl, err);
        free(msg);
        if (rc || e0_text_encode(text, rendered, rl, &ids, &n_ids, err)) goto out;
    }
    e0_model_info info;
    e0_engine_info(eng, &info);
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)n_ids + ce.sample.max_tokens + 1;
    if (e0_session_new(eng, &so, &s, err) != E0_OK) goto out;
    printf("model: %s (%s, %s layout, %d layers, %d experts, top-%d)%s\n", model, info.family, info.layout,
           info.n_layers, info.n_experts, info.top_k,
           trained        ? "\n  (the built-in demo model: 6 M parameters trained on WordNet's definitions, it "
                            "answers questions about English words; for anything else give a model: edge0 demo "
                            "DIR-or-FILE.gguf)"
           : model == dir ? "\n  (the built-in tiny model has random weights, so its answer is noise; for a real "
                            "answer give a model: edge0 demo DIR-or-FILE.gguf, a Hugging Face or "
                            "mlx-community folder or a GGUF file)"
                          : "");
    if (text) printf("> %s\n", prompt);
    else printf("prompt ids: %zu of them\n", n_ids);
    fflush(stdout);
    e0_gen_result r;
    if (text) {
        if (e0_generate(s, text, ids, n_ids, &ce.sample, print_piece, NULL, &r, err) != E0_OK) goto out;
    } else if (greedy_ids(s, ids, n_ids, info.vocab_size, ce.sample.max_tokens, &r, err)) {
        goto out;
    }
    e0_stats st;
    e0_engine_stats(eng, &st);
    const uint64_t tokens = st.prefill_tokens + st.decode_tokens, lk = st.lru_hits + st.lru_misses;
    char hit[40] = "n/a (checkpoint in memory)";
    if (lk) snprintf(hit, sizeof hit, "%.1f%%", 100.0 * (double)st.lru_hits / (double)lk);
    printf("\n\nload %.2f s | prefill %zu tokens, %.1f tok/s | decode %d tokens, %.1f tok/s | read %.1f MiB/token | "
           "cache hit rate %s | peak RSS %.0f MiB\n",
           now_s() - t0 - r.prefill_s - r.decode_s, n_ids, (double)n_ids / r.prefill_s, r.completion_tokens,
           r.decode_s > 0 ? r.completion_tokens / r.decode_s : 0.0,
           tokens ? (double)st.bytes_read / (double)tokens / (1 << 20) : 0.0, hit, (double)st.peak_rss / (1 << 20));
    if (ce.stats) cli_print_stats(eng, stdout);
    status = 0;
out:
    if (status) cli_error("%s", err);
    free(prompt_buf);
    free(rendered);
    free(ids);
    e0_text_free(text);
    e0_session_free(s);
    e0_engine_free(eng);
    return status;
usage:
    free(prompt_buf);
    free(ids);
    return 2;
}
