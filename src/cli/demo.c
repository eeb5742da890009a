/* edge0 demo [MODEL]: greedy generation from a prompt, with timings.
 * Without MODEL it builds (once) and runs a tiny random-weight model of the
 * Qwen3.5/3.6 MoE shape, so it works offline on a fresh clone. Until the
 * tokenizer lands it shows token ids rather than text. */
#include "cli/cli.h"
#include "edge0.h"
#include "model/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *HELP =
    "usage: edge0 demo [MODEL] [--ids ID,ID,...] [--max-tokens N] [--threads N]\n"
    "\n"
    "Runs a prompt through MODEL and generates greedily, printing each token id\n"
    "as it comes and a stats line at the end. Without MODEL it uses a built-in\n"
    "tiny random-weight model (built once into ~/.cache/edge0/demo-tiny).\n"
    "\n"
    "  --ids LIST       prompt token ids (default: a fixed 16-token prompt)\n"
    "  --max-tokens N   tokens to generate (default 32)\n"
    "\n";

/* ~/.cache/edge0/demo-tiny, built on first use. */
static int builtin_model(char *dir, size_t n) {
    const char *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char root[4096];
    if (cache && *cache) snprintf(root, sizeof root, "%s/edge0", cache);
    else if (home && *home) snprintf(root, sizeof root, "%s/.cache/edge0", home);
    else snprintf(root, sizeof root, "/tmp/edge0-cache");
    snprintf(dir, n, "%s/demo-tiny", root);
    struct stat st;
    if (stat(dir, &st) == 0) return 0;
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", root);
    for (char *p = parent + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(parent, 0755);
            *p = '/';
        }
    mkdir(parent, 0755);
    fprintf(stderr, "edge0 demo: no MODEL given; building the built-in tiny model (random weights, "
                    "qwen3_5_moe layout) in %s\n", dir);
    char err[E0_ERR_MAX];
    if (synth_write(synth_find("tiny"), dir, 1, err) != 0) {
        cli_error("%s", err);
        return -1;
    }
    return 0;
}

int cmd_demo(int argc, char **argv) {
    const char *model = NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    long max_tokens = 32;
    cli_engine ce;
    cli_engine_init(&ce);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        CLI_ENGINE_ARG(&ce, argc, argv, &i, HELP);
        if (!strcmp(a, "--ids")) {
            if (prompt || cli_parse_ids(a, v, &prompt, &n_prompt) != 0) {
                if (prompt) cli_error("--ids given twice");
                free(prompt);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--max-tokens")) {
            if ((max_tokens = cli_parse_long(a, v, 1, 1 << 20)) < 0) goto usage;
            i++;
        } else if (a[0] == '-') {
            cli_error("demo: unknown option '%s' (see edge0 demo --help)", a);
            goto usage;
        } else if (!model) {
            model = a;
        } else {
            cli_error("demo: unexpected argument '%s'", a);
            goto usage;
        }
    }
    if (cli_engine_finish(&ce) != 0) goto usage;
    char dir[4200];
    if (!model) {
        if (builtin_model(dir, sizeof dir) != 0) {
            free(prompt);
            return 1;
        }
        model = dir;
    }
    char err[E0_ERR_MAX] = "out of memory";
    e0_engine *eng = NULL;
    e0_session *s = NULL;
    float *logits = NULL;
    int status = 1;
    double t0 = cli_now();
    if (e0_engine_open(&eng, model, &ce.eo, err) != E0_OK) goto out;
    cli_engine_opened(&ce, eng);
    e0_model_info info;
    e0_engine_info(eng, &info);
    if (!prompt) { /* a fixed prompt: ids spread over the vocabulary */
        if (!(prompt = malloc(16 * sizeof *prompt))) goto out;
        for (n_prompt = 0; n_prompt < 16; n_prompt++) prompt[n_prompt] = (int32_t)((n_prompt * 7919 + 13) % info.vocab_size);
    }
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)n_prompt + (int32_t)max_tokens;
    if (e0_session_new(eng, &so, &s, err) != E0_OK) goto out;
    if (!(logits = malloc((size_t)info.vocab_size * sizeof *logits))) {
        snprintf(err, sizeof err, "out of memory");
        goto out;
    }
    double t1 = cli_now();
    printf("model: %s (%s, %s layout, %d layers, %d experts, top-%d)\n", model, info.family, info.layout,
           info.n_layers, info.n_experts, info.top_k);
    printf("prompt ids:");
    for (size_t i = 0; i < n_prompt; i++) printf(" %d", prompt[i]);
    printf("\ngenerated ids:");
    fflush(stdout);
    if (e0_session_eval(s, prompt, (size_t)n_prompt, E0_LOGITS_LAST, logits, err) != E0_OK) goto out;
    double t2 = cli_now();
    for (long k = 0; k < max_tokens; k++) {
        int32_t best = 0;
        for (int32_t v = 1; v < info.vocab_size; v++)
            if (logits[v] > logits[best]) best = v;
        printf(" %d", best);
        fflush(stdout);
        if (k + 1 < max_tokens && e0_session_eval(s, &best, 1, E0_LOGITS_LAST, logits, err) != E0_OK) goto out;
    }
    double t3 = cli_now();
    printf("\n\nload %.2f s | prefill %zu tokens, %.1f tok/s | decode %ld tokens, %.1f tok/s | peak RSS %.0f MiB\n",
           t1 - t0, n_prompt, n_prompt / (t2 - t1), max_tokens, (max_tokens - 1) / (t3 - t2),
           (double)cli_peak_rss() / (1 << 20));
    if (ce.stats) cli_print_stats(eng, stdout);
    status = 0;
out:
    if (status) cli_error("%s", err);
    free(prompt);
    free(logits);
    e0_session_free(s);
    e0_engine_free(eng);
    return status;
usage:
    free(prompt);
    return 2;
}
