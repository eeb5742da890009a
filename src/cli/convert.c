/* edge0 convert SRC DST [--bits 4|8] [--group-size 32|64|128] [--fused-gate-up] [--keep-mtp]
 * Hugging Face checkpoint -> mlx layout, with a progress bar on stderr (a
 * line every few seconds when stderr is not a terminal). */
#include "cli/cli.h"
#include "cli/opts.h"
#include "edge0.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void help(FILE *f) {
    fprintf(f,
            "usage: edge0 convert SRC DST [options]\n"
            "\n"
            "Converts the Hugging Face checkpoint in SRC (qwen3_moe, qwen3_next or qwen3_5_moe;\n"
            "per-expert or fused experts; one file or shards; BF16, F16 or F32) into the mlx\n"
            "layout edge0 streams from: mlx affine quantization computed in f32 (bit for bit\n"
            "what mlx-lm's CPU quantizer writes), routers and shared-expert gates 8-bit group 64,\n"
            "experts stacked per layer, hybrid norms stored as 1 + w, conv1d as [C, K, 1], MTP and\n"
            "vision tensors dropped (MTP kept with --keep-mtp). Writes safetensors shards, model.safetensors.index.json and\n"
            "config.json (with its \"quantization\" block) and copies the tokenizer and generation\n"
            "files. Reads and writes one slice at a time: memory stays at a few MiB per thread.\n"
            "DST is written as DST.tmp-XXXXXX and renamed when complete.\n"
            "\n"
            "  --bits N           4 (default) or 8 (2, 3, 5, 6 also accepted)\n"
            "  --group-size N     32, 64 (default) or 128\n"
            "  --fused-gate-up    one switch_mlp.gate_up_proj per layer (gate rows on top of up\n"
            "                     rows, per expert) instead of gate_proj + up_proj\n"
            "  --keep-mtp         keep the multi-token-prediction tensors (mtp.*) as the source\n"
            "                     has them (names, dtype, values; not quantized) instead of\n"
            "                     dropping them; edge0 does not run them (yet)\n"
            "  --force            replace an existing DST (only a model directory)\n"
            "  --threads N        worker threads (default: one per core, at most 8)\n"
            "  --shard-gb N       largest shard in GiB (default 5, as mlx-lm)\n"
            "  --shard-mb N       largest shard in MiB\n"
            "  --no-sync          skip the fsyncs before the rename (faster, not durable)\n"
            "  --dry-run          check SRC and print the plan, write nothing\n");
}

static void on_progress(void *ctx, const e0_convert_progress *p) {
    cli_phase ph = p->phase == E0_CONVERT_WRITING ? CLI_PHASE_WRITING
                   : p->phase == E0_CONVERT_SYNCING ? CLI_PHASE_SYNCING
                                                 : CLI_PHASE_DONE;
    cli_progress_update(ctx, ph, (double)p->done, (double)p->total, p->seconds);
}

static int opt_bits(void *ptr, const char *name, const char *v) {
    const long n = cli_parse_long(name, v, 2, 8);
    if (n < 0) return -1;
    if (n == 7) {
        cli_error("--bits must be 2, 3, 4, 5, 6 or 8");
        return -1;
    }
    *(int *)ptr = (int)n;
    return 0;
}

static int opt_group(void *ptr, const char *name, const char *v) {
    const long n = cli_parse_long(name, v, 32, 128);
    if (n < 0) return -1;
    if (n != 32 && n != 64 && n != 128) {
        cli_error("--group-size must be 32, 64 or 128");
        return -1;
    }
    *(int *)ptr = (int)n;
    return 0;
}

int cmd_convert(int argc, char **argv) {
    const char *src = NULL, *dst = NULL;
    e0_convert_opts o;
    e0_convert_opts_default(&o);
    cli_write_opts w = {o.n_threads, o.shard_bytes, o.no_sync, 0};
    cli_opt write_opts[CLI_WRITE_ROWS];
    cli_write_table(write_opts, &w);
    const cli_opt opts[] = {
        CLI_OPT("--bits", CLI_FN, &o.bits, .fn = opt_bits),
        CLI_OPT("--group-size", CLI_FN, &o.group, .fn = opt_group),
        CLI_OPT("--fused-gate-up", CLI_ISET, &o.fused_gate_up),
        CLI_OPT("--keep-mtp", CLI_ISET, &o.keep_mtp),
        CLI_OPT("--force", CLI_ISET, &o.force),
        {0},
    };
    const cli_args args = {.cmd = "convert", .help_fn = help, .opts = opts, .more = write_opts, .pos = &src,
                           .pos2 = &dst};
    const int parsed = cli_parse(&args, argc, argv);
    if (parsed) return parsed == 1 ? 0 : 2;
    o.n_threads = w.n_threads, o.shard_bytes = w.shard_bytes, o.no_sync = w.no_sync;
    if (!src || (!dst && !w.dry)) {
        cli_error("convert needs SRC and DST (see edge0 convert --help)");
        return 2;
    }
    struct stat sst;
    if (dst && !w.dry && !o.force && lstat(dst, &sst) == 0) {
        cli_error("%s already exists; remove it, choose another path or pass --force", dst);
        return 1;
    }
    char err[E0_ERR_MAX];
    e0_convert_info info;
    if (e0_convert_plan(src, &o, &info, err) != 0) {
        cli_error("%s", err);
        return 1;
    }
    printf("edge0 convert: %s (%s, %s experts, %zu tensors, %.2f GB) -> mlx affine %d-bit group %d, routers and "
           "shared-expert gates 8-bit group 64%s\n",
           src, info.family, info.src_layout, info.src_tensors, (double)info.src_bytes / 1e9, o.bits, o.group,
           o.fused_gate_up ? ", fused gate_up" : "");
    printf("plan: %zu tensors (%zu quantized modules), %.2f GB in %d file%s", info.out_tensors, info.quantized,
           (double)info.out_bytes / 1e9, info.n_shards, info.n_shards > 1 ? "s" : "");
    if (info.kept_mtp) printf("; %zu MTP tensors kept as they are", info.kept_mtp);
    if (info.dropped) printf("; %zu source tensors dropped (MTP, vision, ...: %s)", info.dropped, info.dropped_example);
    printf("\n");
    fflush(stdout);
    if (w.dry) return 0;

    cli_progress st = {.cmd = "convert", .unit = " read", .verb = "read", .tty = isatty(STDERR_FILENO)};
    o.progress = on_progress;
    o.progress_ctx = &st;
    o.cancel = cli_cancel_begin();
    const double t0 = now_s();
    int rc = e0_convert_run(src, dst, &o, &info, err);
    cli_cancel_end();
    if (rc != 0) {
        if (st.tty) fputc('\n', stderr);
        cli_error("%s", err);
        return 1;
    }
    const double dt = now_s() - t0, s = dt > 0 ? dt : 1e-9;
    printf("wrote %s: %.2f GB from %.2f GB in %.1f s (read %.0f MB/s, write %.0f MB/s), %zu file%s copied, "
           "peak RSS %.0f MiB\n",
           dst, (double)info.out_bytes / 1e9, (double)info.src_bytes / 1e9, dt, (double)info.src_bytes / 1e6 / s,
           (double)info.out_bytes / 1e6 / s, info.copied_files, info.copied_files == 1 ? "" : "s",
           (double)cli_peak_rss() / (1 << 20));
    return 0;
}
