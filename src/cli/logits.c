/* edge0 logits MODEL --ids 1,2,3 [--prefill N] --out F.safetensors
 *
 * The first N ids run as one prefill batch, each later id as one decode
 * step; every position's logits go to `logits` F32 [T, vocab]. */
#include "cli/cli.h"
#include "cli/opts.h"
#include "edge0.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *HELP =
    "usage: edge0 logits MODEL --ids ID,ID,... [--prefill N] --out FILE.safetensors\n"
    "\n"
    "Runs the ids through the model and writes every position's logits as the\n"
    "tensor `logits` (F32 [T, vocab]) of a safetensors file.\n"
    "\n"
    "  --ids LIST     comma-separated token ids\n"
    "  --prefill N    run the first N ids as one batch, then decode the rest one\n"
    "                 at a time through the KV cache (default: all ids in one batch)\n"
    "  --out FILE     output safetensors file\n"
    "\n";

/* The value as given, NULL when missing (cmd_logits then names what it needs). */
static int opt_value(void *ptr, const char *name, const char *v) {
    *(const char **)ptr = v;
    return 0;
}

int cmd_logits(int argc, char **argv) {
    const char *model = NULL, *ids_s = NULL, *outp = NULL;
    long prefill = 0;
    cli_engine ce;
    cli_engine_init(&ce);
    const cli_opt opts[] = {
        CLI_OPT("--ids", CLI_FN, &ids_s, .fn = opt_value),
        CLI_OPT("--out", CLI_FN, &outp, .fn = opt_value),
        CLI_OPT("--prefill", CLI_LONG, &prefill, .lo = 1, .hi = 1L << 30),
        {0},
    };
    const cli_args args = {.cmd = "logits", .help = HELP, .ce = &ce, .opts = opts, .pos = &model};
    const int parsed = cli_parse(&args, argc, argv);
    if (parsed) return parsed == 1 ? 0 : 2;
    if (cli_engine_finish(&ce) != 0) return 2;
    if (!model || !ids_s || !outp) {
        cli_error("logits needs MODEL, --ids and --out (see edge0 logits --help)");
        return 2;
    }
    int32_t *ids;
    size_t n;
    if (cli_parse_ids("--ids", ids_s, &ids, &n) != 0) return 2;
    if (prefill == 0) prefill = (long)n;
    if ((size_t)prefill > n) {
        cli_error("--prefill %ld exceeds the %zu ids", prefill, n);
        free(ids);
        return 2;
    }
    char err[E0_ERR_MAX];
    e0_engine *eng = NULL;
    e0_session *s = NULL;
    float *logits = NULL;
    int status = 1;
    if (e0_engine_open(&eng, model, &ce.eo, err) != E0_OK) goto fail;
    cli_engine_opened(&ce, eng);
    e0_model_info info;
    e0_engine_info(eng, &info);
    e0_session_opts so;
    e0_session_opts_default(&so);
    so.n_ctx = (int32_t)n;
    so.n_batch = (int32_t)prefill;
    so.mtp = 0; /* the main model's logits: nothing drafts */
    if (e0_session_new(eng, &so, &s, err) != E0_OK) goto fail;
    const size_t V = (size_t)info.vocab_size;
    logits = malloc(n * V * sizeof *logits);
    if (!logits) {
        snprintf(err, sizeof err, "out of memory for %zu x %zu logits", n, V);
        goto fail;
    }
    double t0 = now_s();
    if (e0_session_eval(s, ids, (size_t)prefill, E0_LOGITS_ALL, logits, err) != E0_OK) goto fail;
    double t1 = now_s();
    for (size_t i = (size_t)prefill; i < n; i++)
        if (e0_session_eval(s, ids + i, 1, E0_LOGITS_ALL, logits + i * V, err) != E0_OK) goto fail;
    double t2 = now_s();
    if (e0_save_f32(outp, "logits", (int64_t)n, (int64_t)V, logits, err) != 0) goto fail;
    fprintf(stderr, "edge0 logits: %s (%s, %s layout): prefill %ld tokens %.1f ms, decode %zu tokens %.1f ms -> %s\n",
            model, info.family, info.layout, prefill, (t1 - t0) * 1e3, n - (size_t)prefill, (t2 - t1) * 1e3, outp);
    if (ce.stats) cli_print_stats(eng, stderr);
    status = 0;
fail:
    if (status) cli_error("%s", err);
    free(logits);
    free(ids);
    e0_session_free(s);
    e0_engine_free(eng);
    return status;
}
