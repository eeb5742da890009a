/* edge0 synth --shape NAME [--format mlx|hf|gguf] [--route-skew S] [--route-stickiness P]
 *             [--route-profile NAME] DST
 * Random-weight checkpoint of a real model's shape, with a progress bar on
 * stderr (a line every few seconds when stderr is not a terminal). */
#include "cli/cli.h"
#include "cli/opts.h"
#include "edge0.h"

#include <signal.h>
#include <stdbool.h>
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
               "With --format gguf, DST is the output file (e.g. model.gguf), written as\n"
               "DST.tmp and renamed when complete.\n"
               "\n"
               "  --shape NAME       the model shape (below)\n"
               "  --format FMT       mlx: mlx affine 4-bit, group 64, routers and shared-expert\n"
               "                     gates 8-bit (default); hf: bf16 in the released\n"
               "                     Hugging Face layout; gguf: one GGUF file DST with\n"
               "                     llama.cpp's names, metadata and a type mix of\n"
               "                     llama-quantize (--gguf-mix), random blocks, the\n"
               "                     tokenizer embedded\n"
               "  --gguf-mix MIX     gguf: the type mix, approximately llama-quantize's for\n"
               "                     that ftype without an imatrix (F32 norms and routers):\n"
               "                     q4_k_m (default): Q4_K, Q6_K for output and the attn_v /\n"
               "                     ffn_down of its more-bits layers; q8_0: Q8_0 throughout;\n"
               "                     iq4_xs: IQ4_XS, Q6_K output, Q5_K for attn_v / attn_qkv\n"
               "                     (heads >= 4 x kv heads) and the first eighth of the\n"
               "                     layers' ffn_down; q4_0: Q4_0, Q6_K output. Rows not a\n"
               "                     multiple of 256 fall back as llama-quantize does (Q4_K,\n"
               "                     Q5_K -> Q5_0, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL)\n"
               "  --tokenizer FILE   gguf: the tokenizer.json to embed (default: the Qwen3\n"
               "                     tokenizer in assets/; tokenizer_config.json beside it\n"
               "                     gives the chat template)\n"
               "  --route-skew S     0: routing close to uniform over experts (default);\n"
               "                     S > 0: Zipf(S)-like expert popularity per layer, so cache\n"
               "                     behaviour can be studied (recorded in config.json;\n"
               "                     not with gguf)\n"
               "  --route-stickiness P  0..1: each token keeps round(P x top-k) of the previous\n"
               "                     token's experts per layer (default 0; recorded in\n"
               "                     config.json, or gguf's edge0.route_stickiness, and applied\n"
               "                     by the router, so a sticky variant is a copy of DST with\n"
               "                     symlinked shards and P edited)\n"
               "  --route-profile NAME  routing fitted to a released model's measured decode\n"
               "                     routing (below): per-layer expert popularity and a bonus\n"
               "                     for the experts of the last tokens, added to the router's\n"
               "                     logits (recorded in config.json edge0_synth.route_* or gguf\n"
               "                     edge0.route_* keys; the CPU and the GPU apply it; not\n"
               "                     with --route-skew or\n"
               "                     --route-stickiness). scripts/route_stats.py checks a\n"
               "                     `bench --trace` of it against the published figures\n"
               "  --mtp              gguf, Qwen3.5 / 3.6 shapes: add one multi-token-prediction\n"
               "                     block (blk.N with nextn.*, as llama.cpp's converter writes\n"
               "                     it); random like the rest, so its drafts are nearly never\n"
               "                     right: for bench --mtp-accept's speed at a forced acceptance\n"
               "  --seed N           PRNG seed (default 1)\n"
               "  --threads N        generator threads (default: one per core, at most 8)\n"
               "  --shard-gb N       largest shard in GiB (default 5; gguf: one file unless\n"
               "                     given, else parts DST-0000K-of-0000N.gguf)\n"
               "  --shard-mb N       largest shard in MiB\n"
               "  --no-sync          skip the fsync before the rename\n"
               "  --sparse           mlx / hf: headers and config.json only, every weight a\n"
               "                     hole that reads as zero (no disk used): the files of a\n"
               "                     shape larger than the disk, for `edge0 info` and plans\n"
               "                     (its answers are zeros, not noise)\n"
               "  --dry-run          print the size and layout (gguf: the type mix), write\n"
               "                     nothing\n"
               "\n"
               "route profiles (fitted with E and k of the model named; use a shape with\n"
               "the same, e.g. tiny-e256 / mid for qwen36, tiny-e128 for qwen3-30b):\n");
    for (size_t i = 0; e0_synth_route_about(i); i++)
        fprintf(f, "  %s\n", e0_synth_route_about(i));
    fprintf(f, "\nshapes (size in the mlx format):\n");
    e0_synth_opts o;
    e0_synth_opts_default(&o);
    for (size_t i = 0; i < e0_synth_count(); i++) {
        const e0_synth_shape *s = e0_synth_at(i);
        e0_synth_info in = {0};
        char err[E0_ERR_MAX];
        e0_synth_plan_info(s, &o, &in, err);
        fprintf(f, "  %-20s %-11s %3d layers, %3d experts top-%-2d %6.1fB params %7.2f GB  %s\n",
                s->name,
                s->family == E0_SYNTH_QWEN3_MOE    ? "qwen3_moe"
                : s->family == E0_SYNTH_QWEN3_NEXT ? "qwen3_next"
                                                : "qwen3_5_moe",
                s->n_layers, s->n_experts, s->top_k, (double)in.params / 1e9,
                (double)in.bytes / 1e9, s->released[0] ? s->released : "(test shape)");
    }
}

/* The GGUF type mix: tensors and bytes of each ggml type, largest first. */
static void print_mix(const e0_synth_info *in) {
    bool done[E0_SYNTH_GTYPES] = {0};
    for (;;) {
        int best = -1;
        for (int t = 0; t < E0_SYNTH_GTYPES; t++)
            if (!done[t] && in->type_tensors[t] &&
                (best < 0 || in->type_bytes[t] > in->type_bytes[best]))
                best = t;
        if (best < 0) return;
        done[best] = true;
        const char *name = e0_ggml_type_name((uint32_t)best);
        printf("  %-5s %5u tensors %9.3f GB (%4.1f%%)\n", name ? name : "?",
               in->type_tensors[best], (double)in->type_bytes[best] / 1e9,
               100.0 * (double)in->type_bytes[best] / (double)(in->bytes ? in->bytes : 1));
    }
}

static void on_progress(void *ctx, const e0_synth_progress *p) {
    cli_phase ph = p->phase == E0_SYNTH_WRITING ? CLI_PHASE_WRITING
                   : p->phase == E0_SYNTH_SYNCING ? CLI_PHASE_SYNCING
                                               : CLI_PHASE_DONE;
    cli_progress_update(ctx, ph, (double)p->done, (double)p->total, p->seconds);
}

static int opt_format(void *ptr, const char *name, const char *v) {
    if (!v || (strcmp(v, "mlx") && strcmp(v, "hf") && strcmp(v, "gguf"))) {
        cli_error("--format must be mlx, hf or gguf");
        return -1;
    }
    *(const char **)ptr = v;
    return 0;
}

/* --gguf-mix: the mix, and that it was given. */
typedef struct {
    e0_synth_gguf_mix *mix;
    int *given;
} gguf_mix_arg;

static int opt_gguf_mix(void *ptr, const char *name, const char *v) {
    static const char *const mixes[] = {"q4_k_m", "q8_0", "iq4_xs", "q4_0"};
    const gguf_mix_arg *m = ptr;
    int k = -1;
    for (int j = 0; v && j < 4; j++)
        if (!strcmp(v, mixes[j])) k = j;
    if (k < 0) {
        cli_error("--gguf-mix must be q4_k_m, q8_0, iq4_xs or q4_0");
        return -1;
    }
    *m->mix = (e0_synth_gguf_mix)k, *m->given = 1;
    return 0;
}

/* A number in [0, hi] into *(double *)ptr, else `msg`. */
static int opt_unit(void *ptr, const char *v, double hi, const char *msg) {
    char *end = NULL;
    double s = v ? strtod(v, &end) : -1;
    if (!v || *end || !(s >= 0 && s <= hi)) {
        cli_error("%s", msg);
        return -1;
    }
    *(double *)ptr = s;
    return 0;
}

static int opt_route_skew(void *ptr, const char *name, const char *v) {
    return opt_unit(ptr, v, 8, "--route-skew needs a number in [0, 8] (0: near-uniform routing)");
}

static int opt_route_stickiness(void *ptr, const char *name, const char *v) {
    return opt_unit(ptr, v, 1, "--route-stickiness needs a number in [0, 1] (0: no stickiness)");
}

static int opt_seed(void *ptr, const char *name, const char *v) {
    const long n = cli_parse_long(name, v, 0, 1L << 62);
    if (n < 0) return -1;
    *(uint64_t *)ptr = (uint64_t)n;
    return 0;
}

int cmd_synth(int argc, char **argv) {
    const char *shape = NULL, *dst = NULL, *fmt = "mlx", *tok = NULL;
    int mix_given = 0;
    e0_synth_opts o;
    e0_synth_opts_default(&o);
    cli_write_opts w = {o.n_threads, o.shard_bytes, o.no_sync, 0};
    gguf_mix_arg mix = {&o.gguf_mix, &mix_given};
    cli_opt write_opts[CLI_WRITE_ROWS];
    cli_write_table(write_opts, &w);
    const cli_opt opts[] = {
        CLI_OPT("--shape", CLI_STR, &shape, .need = "a value (see edge0 synth --help)"),
        CLI_OPT("--format", CLI_FN, &fmt, .fn = opt_format),
        CLI_OPT("--gguf-mix", CLI_FN, &mix, .fn = opt_gguf_mix),
        CLI_OPT("--tokenizer", CLI_STR, &tok, .need = "a tokenizer.json path"),
        CLI_OPT("--route-skew", CLI_FN, &o.route_skew, .fn = opt_route_skew),
        CLI_OPT("--route-stickiness", CLI_FN, &o.route_stickiness, .fn = opt_route_stickiness),
        CLI_OPT("--route-profile", CLI_STR, &o.route_profile, .need = "a profile name (see edge0 synth --help)"),
        CLI_OPT("--sparse", CLI_ISET, &o.sparse),
        CLI_OPT("--mtp", CLI_ISET, &o.mtp),
        CLI_OPT("--seed", CLI_FN, &o.seed, .fn = opt_seed),
        {0},
    };
    const cli_args args = {.cmd = "synth", .help_fn = help, .opts = opts, .more = write_opts, .pos = &dst};
    const int parsed = cli_parse(&args, argc, argv);
    if (parsed) return parsed == 1 ? 0 : 2;
    o.n_threads = w.n_threads, o.shard_bytes = w.shard_bytes, o.no_sync = w.no_sync;
    if (!shape || (!dst && !w.dry)) {
        cli_error("synth needs --shape and DST (see edge0 synth --help)");
        return 2;
    }
    const e0_synth_shape *s = e0_synth_find(shape);
    if (!s) {
        cli_error("synth: unknown shape '%s' (known: %s)", shape, e0_synth_names());
        return 2;
    }
    o.format = !strcmp(fmt, "hf") ? E0_SYNTH_HF : !strcmp(fmt, "gguf") ? E0_SYNTH_GGUF : E0_SYNTH_MLX;
    char tok_path[4096];
    if (o.format == E0_SYNTH_GGUF) {
        if (o.route_skew > 0) {
            cli_error("synth: --route-skew is not available with --format gguf (use mlx or hf)");
            return 2;
        }
        if (o.sparse) {
            cli_error("synth: --sparse is for --format mlx or hf");
            return 2;
        }
        if (!tok && cli_find_tokenizer("synth", "--format gguf", tok_path, sizeof tok_path))
            return 2;
        o.tokenizer = tok ? tok : tok_path;
    } else if (tok) {
        cli_error("synth: --tokenizer is for --format gguf");
        return 2;
    } else if (o.mtp) {
        cli_error("synth: --mtp is for --format gguf");
        return 2;
    } else if (mix_given) {
        cli_error("synth: --gguf-mix is for --format gguf");
        return 2;
    }
    char err[E0_ERR_MAX];
    static const char *const gguf_mix_desc[] = {
        "GGUF, llama.cpp names, Q4_K_M type mix (general.file_type 15)",
        "GGUF, llama.cpp names, Q8_0 type mix (general.file_type 7)",
        "GGUF, llama.cpp names, IQ4_XS type mix (general.file_type 30)",
        "GGUF, llama.cpp names, Q4_0 type mix (general.file_type 2)"};
    e0_synth_info info;
    if (e0_synth_plan_info(s, &o, &info, err) != 0) {
        cli_error("%s", err);
        return 1;
    }
    printf("edge0 synth: %s%s%s%s, %s, seed %llu\n", s->name, s->released[0] ? " (shape of " : "",
           s->released, s->released[0] ? ")" : "",
           o.format == E0_SYNTH_MLX  ? "mlx affine 4-bit g64, routers and shared-expert gates 8-bit"
           : o.format == E0_SYNTH_HF ? "bf16, Hugging Face layout"
                                  : gguf_mix_desc[o.gguf_mix],
           (unsigned long long)o.seed);
    if (o.route_skew > 0)
        printf("routing: Zipf-like expert popularity, route skew %g (a random expert ranking per "
               "layer)\n",
               o.route_skew);
    else
        printf("routing: near-uniform over experts (no skew; --route-skew S plants Zipf-like "
               "popularity)\n");
    if (o.route_profile)
        printf("routing: profile %s, fitted to a released model's measured routing (config "
               "edge0_synth.route_* / gguf edge0.route_*, applied by the router)\n",
               o.route_profile);
    if (o.route_stickiness > 0)
        printf("routing: sticky, each token keeps %g of the previous token's experts per layer "
               "(config.json edge0_synth.route_stickiness, applied by the router)\n",
               o.route_stickiness);
    printf("plan: %.2f GB, %.2fB parameters, %zu tensors in %d file%s\n", (double)info.bytes / 1e9,
           (double)info.params / 1e9, info.n_tensors, info.n_shards, info.n_shards > 1 ? "s" : "");
    if (o.format == E0_SYNTH_GGUF) print_mix(&info);
    fflush(stdout);
    if (w.dry) return 0;

    cli_progress st = {.cmd = "synth", .unit = "", .verb = "written", .tty = isatty(STDERR_FILENO)};
    o.progress = on_progress;
    o.progress_ctx = &st;
    o.cancel = cli_cancel_begin();
    double t0 = now_s();
    int rc = e0_synth_write_opts(s, dst, &o, err);
    cli_cancel_end();
    if (rc != 0) {
        if (st.tty) fputc('\n', stderr);
        cli_error("%s", err);
        return 1;
    }
    double dt = now_s() - t0;
    if (o.sparse) {
        printf("wrote %s: %.2f GB of sparse files (headers only, weights read as zeros) in %.1f s\n",
               dst, (double)info.bytes / 1e9, dt);
        return 0;
    }
    printf("wrote %s: %.2f GB in %.1f s (%.2f GB/s), peak RSS %.0f MiB\n", dst,
           (double)info.bytes / 1e9, dt, (double)info.bytes / 1e9 / (dt > 0 ? dt : 1e-9),
           (double)cli_peak_rss() / (1 << 20));
    return 0;
}
