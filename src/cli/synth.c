/* edge0 synth --shape NAME [--format mlx|hf] [--route-skew S] [--route-stickiness P] DST
 * Random-weight checkpoint of a real model's shape, with a progress bar on
 * stderr (a line every few seconds when stderr is not a terminal). */
#include "cli/cli.h"
#include "edge0.h"
#include "model/synth.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void help(FILE *f) {
    fprintf(f, "usage: edge0 synth --shape NAME [options] DST\n"
               "\n"
               "Writes a random-weight checkpoint with the tensor names, shapes, dtypes and\n"
               "layout of a released model into the new directory DST (written as\n"
               "DST.tmp-XXXXXX and renamed when complete; an existing DST is refused).\n"
               "\n"
               "  --shape NAME       the model shape (below)\n"
               "  --format FMT       mlx: mlx affine 4-bit, group 64, routers and shared-expert\n"
               "                     gates 8-bit (default); hf: bf16 in the released\n"
               "                     Hugging Face layout\n"
               "  --route-skew S     0: routing close to uniform over experts (default);\n"
               "                     S > 0: Zipf(S)-like expert popularity per layer, so cache\n"
               "                     behaviour can be studied (recorded in config.json)\n"
               "  --route-stickiness P  0..1: each token keeps round(P x top-k) of the previous\n"
               "                     token's experts per layer (default 0; recorded in\n"
               "                     config.json and applied by the router, so a sticky variant\n"
               "                     is a copy of DST with symlinked shards and P edited)\n"
               "  --seed N           PRNG seed (default 1)\n"
               "  --threads N        generator threads (default: one per core, at most 8)\n"
               "  --shard-gb N       largest shard in GiB (default 5)\n"
               "  --shard-mb N       largest shard in MiB\n"
               "  --no-sync          skip the fsync before the rename\n"
               "  --dry-run          print the size and layout, write nothing\n"
               "\n"
               "shapes (size in the mlx format):\n");
    synth_opts o;
    synth_opts_default(&o);
    for (size_t i = 0; i < synth_count(); i++) {
        const synth_shape *s = synth_at(i);
        synth_info in = {0};
        char err[E0_ERR_MAX];
        synth_plan_info(s, &o, &in, err);
        fprintf(f, "  %-20s %-11s %3d layers, %3d experts top-%-2d %6.1fB params %7.2f GB  %s\n",
                s->name,
                s->family == SYNTH_QWEN3_MOE    ? "qwen3_moe"
                : s->family == SYNTH_QWEN3_NEXT ? "qwen3_next"
                                                : "qwen3_5_moe",
                s->n_layers, s->n_experts, s->top_k, (double)in.params / 1e9,
                (double)in.bytes / 1e9, s->released[0] ? s->released : "(test shape)");
    }
}

static void on_progress(void *ctx, const synth_progress *p) {
    cli_phase ph = p->phase == SYNTH_WRITING ? CLI_PHASE_WRITING
                   : p->phase == SYNTH_SYNCING ? CLI_PHASE_SYNCING
                                               : CLI_PHASE_DONE;
    cli_progress_update(ctx, ph, (double)p->done, (double)p->total, p->seconds);
}

int cmd_synth(int argc, char **argv) {
    const char *shape = NULL, *dst = NULL, *fmt = "mlx";
    synth_opts o;
    synth_opts_default(&o);
    cli_write_opts w = {o.n_threads, o.shard_bytes, o.no_sync, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "--shape")) {
            if (!v) {
                cli_error("--shape needs a value (see edge0 synth --help)");
                return 2;
            }
            shape = v, i++;
        } else if (!strcmp(a, "--format")) {
            if (!v || (strcmp(v, "mlx") && strcmp(v, "hf"))) {
                cli_error("--format must be mlx or hf");
                return 2;
            }
            fmt = v, i++;
        } else if (!strcmp(a, "--route-skew")) {
            char *end = NULL;
            double s = v ? strtod(v, &end) : -1;
            if (!v || *end || !(s >= 0 && s <= 8)) {
                cli_error("--route-skew needs a number in [0, 8] (0: near-uniform routing)");
                return 2;
            }
            o.route_skew = s, i++;
        } else if (!strcmp(a, "--route-stickiness")) {
            char *end = NULL;
            double s = v ? strtod(v, &end) : -1;
            if (!v || *end || !(s >= 0 && s <= 1)) {
                cli_error("--route-stickiness needs a number in [0, 1] (0: no stickiness)");
                return 2;
            }
            o.route_stickiness = s, i++;
        } else if (!strcmp(a, "--seed")) {
            if ((n = cli_parse_long(a, v, 0, 1L << 62)) < 0) return 2;
            o.seed = (uint64_t)n, i++;
        } else if ((n = cli_write_opt(a, v, &i, &w)) != 0) {
            if (n < 0) return 2;
        } else if (a[0] == '-') {
            cli_error("synth: unknown option '%s' (see edge0 synth --help)", a);
            return 2;
        } else if (!dst) {
            dst = a;
        } else {
            cli_error("synth: unexpected argument '%s'", a);
            return 2;
        }
    }
    o.n_threads = w.n_threads, o.shard_bytes = w.shard_bytes, o.no_sync = w.no_sync;
    if (!shape || (!dst && !w.dry)) {
        cli_error("synth needs --shape and DST (see edge0 synth --help)");
        return 2;
    }
    const synth_shape *s = synth_find(shape);
    if (!s) {
        cli_error("synth: unknown shape '%s' (known: %s)", shape, synth_names());
        return 2;
    }
    o.format = strcmp(fmt, "hf") == 0 ? SYNTH_HF : SYNTH_MLX;
    char err[E0_ERR_MAX];
    synth_info info;
    if (synth_plan_info(s, &o, &info, err) != 0) {
        cli_error("%s", err);
        return 1;
    }
    printf("edge0 synth: %s%s%s%s, %s, seed %llu\n", s->name, s->released[0] ? " (shape of " : "",
           s->released, s->released[0] ? ")" : "",
           o.format == SYNTH_MLX ? "mlx affine 4-bit g64, routers and shared-expert gates 8-bit"
                                 : "bf16, Hugging Face layout",
           (unsigned long long)o.seed);
    if (o.route_skew > 0)
        printf("routing: Zipf-like expert popularity, route skew %g (a random expert ranking per "
               "layer)\n",
               o.route_skew);
    else
        printf("routing: near-uniform over experts (no skew; --route-skew S plants Zipf-like "
               "popularity)\n");
    if (o.route_stickiness > 0)
        printf("routing: sticky, each token keeps %g of the previous token's experts per layer "
               "(config.json edge0_synth.route_stickiness, applied by the router)\n",
               o.route_stickiness);
    printf("plan: %.2f GB, %.2fB parameters, %zu tensors in %d file%s\n", (double)info.bytes / 1e9,
           (double)info.params / 1e9, info.n_tensors, info.n_shards, info.n_shards > 1 ? "s" : "");
    fflush(stdout);
    if (w.dry) return 0;

    cli_progress st = {.cmd = "synth", .unit = "", .verb = "written", .tty = isatty(STDERR_FILENO)};
    o.progress = on_progress;
    o.progress_ctx = &st;
    o.cancel = cli_cancel_begin();
    double t0 = cli_now();
    int rc = synth_write_opts(s, dst, &o, err);
    cli_cancel_end();
    if (rc != 0) {
        if (st.tty) fputc('\n', stderr);
        cli_error("%s", err);
        return 1;
    }
    double dt = cli_now() - t0;
    printf("wrote %s: %.2f GB in %.1f s (%.2f GB/s), peak RSS %.0f MiB\n", dst,
           (double)info.bytes / 1e9, dt, (double)info.bytes / 1e9 / (dt > 0 ? dt : 1e-9),
           (double)cli_peak_rss() / (1 << 20));
    return 0;
}
