/* Engine options shared by every command that runs a model, and the
 * --stats report. Applied in a fixed order whatever the argument order:
 * defaults, --preset, each --opt, --prefill-ondemand, --path/--io/--kv-type/--threads. */
#include "cli/cli.h"
#include "util/pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *CLI_ENGINE_HELP =
    "engine options:\n"
    "  --preset NAME        staged_k4, prod_k8 or staged_k8 (docs/design.md §4.6)\n"
    "  --opt FIELD=VALUE    set one LayerOptions field (repeatable; --opt help lists them)\n"
    "  --path P             force the expert path: exact, staged, hot or full\n"
    "  --prefill-ondemand   per-expert prefill instead of whole-layer reads\n"
    "  --mem-budget SIZE    size the expert cache to fit SIZE (e.g. 8G, 512M) and say what it\n"
    "                       chose; auto (default): when --io auto reads experts on demand,\n"
    "                       the smaller of the cgroup's memory limit and MemAvailable,\n"
    "                       less 256 MiB + 3%; off: no budget (the cache is --opt\n"
    "                       cache_slots)\n"
    "  --io auto|pread|mmap|load  pread: experts read into the bounded LRU; mmap: through\n"
    "                       the page cache's mapping; load: the whole checkpoint read into\n"
    "                       memory (huge pages) at start; auto (default): load when the\n"
    "                       checkpoint fits in 80% of available memory and no budget is set,\n"
    "                       else pread\n"
    "  --gpu auto|off|N     compute on NVIDIA GPU N (0, 1, ...); auto (default): on the first\n"
    "                       GPU when the driver finds one and the whole model fits its VRAM\n"
    "                       budget, else on the CPU, saying why; off: the CPU\n"
    "  --vram-budget SIZE|auto  device memory the GPU may hold (auto, the default: what is\n"
    "                       free, less 512 MiB or 5%); every expert resident when they fit,\n"
    "                       else the dense weights resident and the experts in a VRAM cache\n"
    "  --mtp auto|on|off    speculative decoding with the checkpoint's multi-token-prediction\n"
    "                       (MTP) block (Qwen3.5 / 3.6 ship one): each decode pass verifies\n"
    "                       the block's draft of the next token beside the current one and\n"
    "                       gives two tokens when it stands; greedy output is identical\n"
    "                       to --mtp off, sampled output has the same distribution. auto\n"
    "                       (default): loads the block, times 8 one-token and 8 drafting\n"
    "                       passes and drafts only when that gives 5% more tokens a second\n"
    "                       (re-checked every 32; --stats says what it decided); on: drafts,\n"
    "                       an error without a block or with the GPU (MTP is CPU-only for\n"
    "                       now); off: not loaded\n"
    "  --mtp-vocab N|all|auto  the ids a draft scores: the first N of the vocabulary (its\n"
    "                       most frequent pieces); auto (default): 32768 of a vocabulary over\n"
    "                       65536, else all. Output is exact either way; acceptance may\n"
    "                       change\n"
    "  --threads N          compute threads (default: one per core)\n"
    "  --kv-type f32|f16    the KV cache's values: f32 (default, exact attention) or f16\n"
    "                       (llama.cpp's default: half the cache's memory and of what decode\n"
    "                       reads from it; logits within 7.4e-3 of the reference on the\n"
    "                       fixtures, same argmax)\n"
    "  --kernels SET        auto (default): avx512-mixed where the CPU has VNNI (16-bit\n"
    "                       activations for 4-bit mlx weights, 24-bit for GGUF k-quants:\n"
    "                       logits within 1.7e-3 of the reference on the fixtures), else avx512\n"
    "                       or avx2; exact: avx512-q24 (as exact as f32) or the f32 set;\n"
    "                       avx512-q16 (16-bit everywhere, within 3e-3), avx512, avx2, ref\n"
    "  --stats              print tokens/s, bytes read, cache and path statistics at the end\n";

const char *CLI_SAMPLE_HELP =
    "sampling options:\n"
    "  --temp T             temperature, 0 = greedy (0.8)\n"
    "  --top-k K            keep the K most likely tokens, 0 = off (40)\n"
    "  --top-p P            nucleus sampling, 1 = off (0.95)\n"
    "  --min-p P            drop tokens below P x the best one's probability, 0 = off (0.05)\n"
    "  --repeat-penalty R   penalise the last 64 tokens, 1 = off (1)\n"
    "  --presence-penalty X, --frequency-penalty X   OpenAI-style penalties (0)\n"
    "  --seed N             reproducible sampling (default: random)\n"
    "  --max-tokens N       stop after N tokens\n"
    "  --stop TEXT          stop at TEXT (repeatable)\n";

void cli_engine_init(cli_engine *c) {
    memset(c, 0, sizeof *c);
    e0_engine_opts_default(&c->eo);
    e0_sample_opts_default(&c->sample);
    c->sample.stop = c->stops;
    c->gpu = E0_GPU_AUTO;
    c->mtp = E0_MTP_AUTO;
}

/* A float option value; -1 (message printed) when it is not a number. */
static int parse_float(const char *opt, const char *v, float *out) {
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || d != d) {
        cli_error("%s: '%s' is not a number", opt, v);
        return -1;
    }
    *out = (float)d;
    return 0;
}

/* A float option within [lo, hi] (lo_open: lo itself excluded). */
static int parse_range(const char *opt, const char *v, float lo, bool lo_open, float hi,
                       float *out) {
    if (parse_float(opt, v, out)) return -1;
    if (*out < lo || (lo_open && *out == lo) || *out > hi) {
        cli_error("%s: %s is out of range: it takes a number %s %g and <= %g", opt, v,
                  lo_open ? ">" : ">=", lo, hi);
        return -1;
    }
    return 0;
}

static int sample_arg(cli_engine *c, const char *a, const char *v) {
    e0_sample_opts *s = &c->sample;
    long n;
    if (!strcmp(a, "--temp")) return parse_range(a, v, 0, false, 100, &s->temperature);
    if (!strcmp(a, "--top-p")) return parse_range(a, v, 0, true, 1, &s->top_p);
    if (!strcmp(a, "--min-p")) return parse_range(a, v, 0, false, 1, &s->min_p);
    if (!strcmp(a, "--repeat-penalty")) return parse_range(a, v, 0, true, 100, &s->repeat_penalty);
    if (!strcmp(a, "--presence-penalty")) return parse_range(a, v, -2, false, 2, &s->presence_penalty);
    if (!strcmp(a, "--frequency-penalty"))
        return parse_range(a, v, -2, false, 2, &s->frequency_penalty);
    if (!strcmp(a, "--top-k"))
        return (n = cli_parse_long(a, v, 0, 1 << 24)) < 0 ? -1 : (s->top_k = (int32_t)n, 0);
    if (!strcmp(a, "--max-tokens"))
        return (n = cli_parse_long(a, v, 1, 1 << 24)) < 0 ? -1 : (s->max_tokens = (int32_t)n, 0);
    if (!strcmp(a, "--seed")) {
        char *end;
        unsigned long long x = strtoull(v, &end, 10);
        if (end == v || *end || v[0] == '-') {
            cli_error("--seed: '%s' is not a non-negative integer", v);
            return -1;
        }
        s->seed = x ? x : 1; /* 0 would mean "random" */
        return 0;
    }
    if (!strcmp(a, "--stop")) {
        if (s->n_stop == sizeof c->stops / sizeof *c->stops || !*v) {
            cli_error("--stop: at most %zu non-empty stop strings",
                      sizeof c->stops / sizeof *c->stops);
            return -1;
        }
        c->stops[s->n_stop++] = v;
        return 0;
    }
    return 1; /* not a sampling option */
}

/* "8G", "8GiB", "512M", "1.5g", "123456" -> bytes; 0 on error. */
unsigned long long cli_parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0)) return 0;
    double mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 't':
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (!strcmp(end, "iB") || !strcmp(end, "B") || !strcmp(end, "b")) end += strlen(end);
    if (*end) return 0;
    return (unsigned long long)(v * mul);
}

/* Where the weights and the KV cache live: --io, --kv-type, --mem-budget,
 * --gpu, --vram-budget (and --mtp, which adds the draft block to them). 1: taken (with its value), 0: not one of them,
 * -1: a bad value (said on stderr). */
static int memory_arg(cli_engine *c, const char *a, const char *v) {
    if (!strcmp(a, "--io")) {
        int k = -1;
        for (int j = 0; j < E0_IO_MODES; j++)
            if (!strcmp(v, e0_io_name((e0_io_mode)j))) k = j;
        if (k < 0) {
            cli_error("--io: '%s' is not auto, pread, mmap or load", v);
            return -1;
        }
        c->io = (e0_io_mode)k;
        c->io_set = true;
    } else if (!strcmp(a, "--kv-type")) {
        if (!strcmp(v, e0_kv_name(E0_KV_F32))) {
            c->kv_type = E0_KV_F32;
        } else if (!strcmp(v, e0_kv_name(E0_KV_F16))) {
            c->kv_type = E0_KV_F16;
        } else {
            cli_error("--kv-type: '%s' is not f32 or f16", v);
            return -1;
        }
    } else if (!strcmp(a, "--mem-budget")) {
        c->mem_budget = 0;
        c->budget_off = !strcmp(v, "off");
        if (!c->budget_off && strcmp(v, "auto") && !(c->mem_budget = cli_parse_size(v))) {
            cli_error("--mem-budget: '%s' is not a size such as 8G or 512M, auto or off", v);
            return -1;
        }
    } else if (!strcmp(a, "--gpu")) {
        if (!strcmp(v, "auto")) {
            c->gpu = E0_GPU_AUTO;
        } else if (!strcmp(v, "off")) {
            c->gpu = E0_GPU_OFF;
        } else {
            long n = cli_parse_long(a, v, 0, 63);
            if (n < 0) return -1;
            c->gpu = (int)n;
        }
    } else if (!strcmp(a, "--mtp")) {
        const e0_mtp_mode modes[] = {E0_MTP_AUTO, E0_MTP_ON, E0_MTP_OFF};
        int k = -1;
        for (int j = 0; j < 3; j++)
            if (!strcmp(v, e0_mtp_name(modes[j]))) k = j;
        if (k < 0) {
            cli_error("--mtp: '%s' is not auto, on or off", v);
            return -1;
        }
        c->mtp = modes[k];
        c->mtp_set = true;
    } else if (!strcmp(a, "--mtp-vocab")) {
        if (!strcmp(v, "auto")) {
            c->eo.mtp_vocab = 0;
        } else if (!strcmp(v, "all")) {
            c->eo.mtp_vocab = -1;
        } else {
            long n = cli_parse_long(a, v, 16, 1 << 30);
            if (n < 0) return -1;
            c->eo.mtp_vocab = (int32_t)n;
        }
    } else if (!strcmp(a, "--vram-budget")) {
        c->vram_budget = 0; /* auto: what the driver reports free, less headroom */
        if (strcmp(v, "auto") && !(c->vram_budget = cli_parse_size(v))) {
            cli_error("--vram-budget: '%s' is not a size such as 8G or 512M, or auto", v);
            return -1;
        }
    } else {
        return 0;
    }
    return 1;
}

int cli_engine_arg(cli_engine *c, int argc, char **argv, int *i, const char *help) {
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
        fputs(help, stdout);
        fputs(CLI_ENGINE_HELP, stdout);
        if (c->sampling) fputs(CLI_SAMPLE_HELP, stdout);
        return 2;
    }
    static const char *valued[] = {"--preset",
                                   "--opt",
                                   "--path",
                                   "--mem-budget",
                                   "--gpu",
                                   "--vram-budget",
                                   "--mtp",
                                   "--mtp-vocab",
                                   "--io",
                                   "--kv-type",
                                   "--threads",
                                   "--kernels",
                                   "--temp",
                                   "--top-p",
                                   "--min-p",
                                   "--top-k",
                                   "--repeat-penalty",
                                   "--presence-penalty",
                                   "--frequency-penalty",
                                   "--max-tokens",
                                   "--seed",
                                   "--stop"};
    bool takes = false;
    for (size_t k = 0; k < sizeof valued / sizeof *valued; k++)
        takes |= !strcmp(a, valued[k]);
    if (takes && !v) {
        cli_error("%s needs a value", a);
        return -1;
    }
    int sr = takes && c->sampling ? sample_arg(c, a, v) : 1;
    if (sr < 0) return -1;
    if (sr == 0) {
        (*i)++;
        return 1;
    }
    int mr = takes ? memory_arg(c, a, v) : 0;
    if (mr < 0) return -1;
    if (mr) {
        (*i)++;
        return 1;
    }
    if (!strcmp(a, "--preset")) {
        c->preset = v;
    } else if (!strcmp(a, "--opt")) {
        if (!strcmp(v, "help")) {
            char buf[2048];
            e0_engine_opts d;
            e0_engine_opts_default(&d);
            e0_opts_format(&d, buf, sizeof buf);
            printf("LayerOptions fields and their defaults:\n%s", buf);
            exit(0);
        }
        if (c->n_opts == CLI_MAX_OPTS || !strchr(v, '=')) {
            cli_error("--opt takes FIELD=VALUE (at most %d of them)", CLI_MAX_OPTS);
            return -1;
        }
        c->opts[c->n_opts++] = v;
    } else if (!strcmp(a, "--path")) {
        static const char *names[] = {"exact", "staged", "hot", "full"};
        static const e0_path paths[] = {E0_PATH_EXACT, E0_PATH_STAGED, E0_PATH_HOT, E0_PATH_FULL};
        int k = -1;
        for (int j = 0; j < 4; j++)
            if (!strcmp(v, names[j])) k = j;
        if (k < 0) {
            cli_error("--path: '%s' is not exact, staged, hot or full", v);
            return -1;
        }
        c->path = paths[k];
        c->path_set = true;
    } else if (!strcmp(a, "--threads")) {
        long n = cli_parse_long(a, v, 0, 1024);
        if (n < 0) return -1;
        c->threads = (int)n;
    } else if (!strcmp(a, "--kernels")) {
        e0_kernels k;
        if (e0_kernels_parse(v, &k) || !e0_kernels_supported(k)) {
            cli_error("--kernels: '%s' is not a kernel set this CPU runs (auto, exact, "
                      "avx512-mixed, avx512-q24, avx512-q16, avx512, avx2, ref)",
                      v);
            return -1;
        }
        e0_set_kernels(k);
        c->kernels_set = true;
    } else if (!strcmp(a, "--prefill-ondemand")) {
        c->ondemand = true;
        return 1;
    } else if (!strcmp(a, "--stats")) {
        c->stats = true;
        return 1;
    } else {
        return 0;
    }
    (*i)++;
    return 1;
}

/* --io load: a progress bar on a terminal while the checkpoint is read (a
 * 20 GB file takes seconds from the page cache, minutes from a slow disk),
 * and another while the weights are rearranged into the kernels' panels
 * (seconds); nothing when stderr is not a terminal, nor for a stage that
 * ends within half a second (a checkpoint already in the page cache). */
typedef struct {
    const char *title, *unit;
    cli_progress bar;
    double t0;
    uint64_t last; /* 0: no stage under way */
    bool shown;
} load_stage;

static void stage_progress(load_stage *st, uint64_t done, uint64_t total) {
    if (!st->last || done < st->last) { /* a new stage */
        memset(&st->bar, 0, sizeof st->bar);
        st->bar.cmd = "load";
        st->bar.unit = st->unit;
        st->bar.verb = st->unit + 1;
        st->bar.tty = 1;
        st->t0 = now_s();
        st->shown = false;
    }
    st->last = done < total ? done : 0;
    if (!st->shown && done < total && now_s() - st->t0 < 0.5) return;
    if (!st->shown) {
        if (done >= total) return; /* fast: nothing to show */
        fprintf(stderr, "edge0: %s\n", st->title);
        st->shown = true;
    }
    cli_progress_update(&st->bar, done < total ? CLI_PHASE_WRITING : CLI_PHASE_DONE, (double)done,
                        (double)total, now_s() - st->t0);
}

static void load_progress(void *ctx, uint64_t done, uint64_t total) {
    static load_stage st = {.title = "loading the checkpoint into memory", .unit = " read"};
    (void)ctx;
    stage_progress(&st, done, total);
}

static void repack_progress(void *ctx, uint64_t done, uint64_t total) {
    static load_stage st = {.title = "arranging the weights into 16-row panels for the decode kernels",
                            .unit = " arranged"};
    (void)ctx;
    stage_progress(&st, done, total);
}

int cli_engine_finish(cli_engine *c) {
    char err[E0_ERR_MAX];
    e0_engine_opts_default(&c->eo);
    if (c->preset && e0_opts_preset(&c->eo, c->preset, err)) {
        cli_error("%s", err);
        return -1;
    }
    for (int i = 0; i < c->n_opts; i++) {
        char field[64];
        const char *eq = strchr(c->opts[i], '=');
        snprintf(field, sizeof field, "%.*s", (int)(eq - c->opts[i]), c->opts[i]);
        if (e0_opts_set(&c->eo, field, eq + 1, err)) {
            cli_error("--opt %s: %s", c->opts[i], err);
            return -1;
        }
        if (!strcmp(field, "cache_slots") && !c->mem_budget)
            c->budget_off = true; /* the cache's size as given, not an automatic budget's */
    }
    if (c->ondemand) c->eo.layer.full_layer_prefill = 0;
    if (c->path_set) c->eo.path = c->path;
    if (c->io_set) c->eo.io = c->io;
    c->eo.kv_type = c->kv_type;
    c->eo.n_threads = c->threads;
    if (c->threads > pool_cores() && pool_cores() > 0)
        fprintf(stderr,
                "edge0: warning: --threads %d is more than this machine's %d cores; threads "
                "beyond the cores wait for each other instead of computing\n",
                c->threads, pool_cores());
    c->eo.mem_budget = c->mem_budget;
    c->eo.gpu = c->gpu;
    c->eo.vram_budget = c->vram_budget;
    c->eo.mtp = c->mtp;
    c->eo.budget_mode = c->budget_off ? E0_BUDGET_OFF : E0_BUDGET_AUTO;
    if (isatty(STDERR_FILENO)) {
        c->eo.load_progress = load_progress;
        c->eo.repack_progress = repack_progress;
    }
    if (c->eo.layer.top_k)
        fprintf(
            stderr,
            "edge0: warning: top_k=%d overrides the model's routing; this is a different model\n",
            c->eo.layer.top_k);
    return 0;
}

/* The options the engine does not read where it computes, said once at
 * open instead of dropped in silence: on a GPU the CPU's streaming paths,
 * kernels and LayerOptions (the expert cache's policy and top_k excepted:
 * the VRAM cache and the router read them), --io load (the device reads
 * the checkpoint through its mapping); on the CPU, --vram-budget. */
static void say_unread(const cli_engine *c, e0_engine *e) {
    static const char *gpu_reads[] = {"cache_policy", "cache_half_life", "router_half_life", "top_k"};
    const int gpu = e0_engine_gpu(e);
    if (gpu < 0) {
        if (c->vram_budget)
            fprintf(stderr, "edge0: warning: --vram-budget sizes what a GPU holds, and the engine computes on the "
                            "CPU (--gpu 0 requires the GPU and says why it cannot be used)\n");
        return;
    }
    char list[1024] = "";
    size_t n = 0;
    const char *what[5 + CLI_MAX_OPTS]; /* the five flags below and every --opt */
    int k = 0;
    if (c->path_set) what[k++] = "--path";
    if (c->kernels_set) what[k++] = "--kernels";
    if (c->ondemand) what[k++] = "--prefill-ondemand";
    if (c->io_set && c->io == E0_IO_LOAD) what[k++] = "--io load";
    if (c->preset) what[k++] = "--preset";
    for (int i = 0; i < c->n_opts; i++) {
        const size_t len = (size_t)(strchr(c->opts[i], '=') - c->opts[i]);
        bool read = false;
        for (size_t j = 0; j < sizeof gpu_reads / sizeof *gpu_reads; j++)
            read |= strlen(gpu_reads[j]) == len && !strncmp(c->opts[i], gpu_reads[j], len);
        if (!read) what[k++] = c->opts[i];
    }
    for (int i = 0; i < k && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s%s", i ? ", " : "",
                              what[i][0] == '-' ? "" : "--opt ", what[i]);
    if (k)
        fprintf(stderr, "edge0: warning: %s %s for the CPU, and the engine computes on GPU %d, which does not "
                        "read %s (--gpu off computes on the CPU)\n",
                list, k > 1 ? "are" : "is", gpu, k > 1 ? "them" : "it");
}

void cli_engine_opened(const cli_engine *c, e0_engine *e) {
    const char *note = e0_engine_budget_note(e);
    /* the plan, in one line: what memory there is, what was chosen, why */
    fprintf(stderr, "edge0: %s\n", e0_engine_io_note(e));
    if (note && *note) fprintf(stderr, "edge0: %s\n", note);
    const char *gpu = e0_engine_gpu_note(e);
    /* where it computes; quiet on machines with no NVIDIA driver at all */
    if (*gpu && (c->gpu >= 0 || strncmp(gpu, "CPU: no NVIDIA driver", 21)))
        fprintf(stderr, "edge0: %s\n", gpu);
    say_unread(c, e);
}

double cli_tokens_per_pass(const e0_stats *st) {
    /* each pass keeps 1 position (one id) or 2 less a rejection (a verify pass) */
    const uint64_t passes = st->decode_tokens + st->mtp_rejected - st->mtp_drafts;
    return passes ? (double)st->decode_tokens / (double)passes : 0.0;
}

static double mib(uint64_t b) {
    return (double)b / (1 << 20);
}
static double pct(uint64_t a, uint64_t b) {
    return b ? 100.0 * (double)a / (double)b : 0.0;
}

void cli_print_stats(e0_engine *e, FILE *f) {
    e0_stats st;
    e0_engine_stats(e, &st);
    e0_model_info info;
    e0_engine_info(e, &info);
    const uint64_t tokens = st.prefill_tokens + st.decode_tokens;
    fprintf(f, "stats: prefill %llu tokens at %.2f tok/s | decode %llu tokens at %.2f tok/s\n",
            (unsigned long long)st.prefill_tokens,
            st.prefill_s > 0 ? st.prefill_tokens / st.prefill_s : 0.0,
            (unsigned long long)st.decode_tokens,
            st.decode_s > 0 ? st.decode_tokens / st.decode_s : 0.0);
    if (!st.cache_slots && !st.lru_hits && !st.lru_misses && !st.overflow_reads) {
        fprintf(f, "  experts: read from memory (%s), so there is no expert cache\n",
                strncmp(e0_engine_io_note(e), "io load", 7) ? "the checkpoint's mapping"
                                                            : "the checkpoint is loaded");
    } else {
        fprintf(f,
                "  experts: bundle %.2f MiB, cache_slots %d (one token's working set: %d "
                "bundles)%s\n",
                mib(st.bundle_bytes), st.cache_slots, st.working_set,
                st.cache_slots < st.working_set
                    ? " -- too small for hits across tokens; size it with --mem-budget"
                    : "");
        fprintf(f, "  LRU: %llu hits, %llu misses (hit rate %.1f%%), %llu reads outside the LRU\n",
                (unsigned long long)st.lru_hits, (unsigned long long)st.lru_misses,
                pct(st.lru_hits, st.lru_hits + st.lru_misses),
                (unsigned long long)st.overflow_reads);
    }
    if (st.pressure_shrinks || st.pressure_grows)
        fprintf(f, "  memory pressure: the cache's limit went down %llu times and up %llu times; "
                   "%d of %d slots usable now\n",
                (unsigned long long)st.pressure_shrinks, (unsigned long long)st.pressure_grows,
                st.cache_limit, st.cache_slots);
    fprintf(f,
            "  bytes read from the checkpoint: %.1f MiB (%.2f MiB/token); touched by kernels %.1f "
            "MiB (%.2f MiB/token)\n",
            mib(st.bytes_read), tokens ? mib(st.bytes_read) / (double)tokens : 0.0,
            mib(st.bytes_touched), tokens ? mib(st.bytes_touched) / (double)tokens : 0.0);
    if (st.routed_staged)
        fprintf(
            f,
            "  staged: %llu hits, %llu exact fallbacks, %llu drops; prediction accuracy %.1f%%\n",
            (unsigned long long)st.staged_hits, (unsigned long long)st.exact_fallbacks,
            (unsigned long long)st.drops, pct(st.predicted_routed, st.routed_staged));
    if (st.hot_hits + st.hot_misses)
        fprintf(f, "  hot: %llu hits, %llu misses (%.1f%%)\n", (unsigned long long)st.hot_hits,
                (unsigned long long)st.hot_misses, pct(st.hot_hits, st.hot_hits + st.hot_misses));
    if (st.full_layers)
        fprintf(f, "  whole-layer loads: %llu\n", (unsigned long long)st.full_layers);
    if (st.spec_loads)
        fprintf(f, "  speculative loads: %llu, %llu of them routed to (%.1f%%)\n",
                (unsigned long long)st.spec_loads, (unsigned long long)st.spec_used,
                pct(st.spec_used, st.spec_loads));
    fprintf(f, "  time: expert I/O wait %.3f s, expert compute %.3f s\n", st.io_wait_s,
            st.compute_s);
    if (st.mtp_drafts) {
        const uint64_t kept = st.mtp_drafts - st.mtp_rejected;
        fprintf(f,
                "  MTP drafts: %llu verified, %llu kept (acceptance %.1f%%), %.2f tokens per decode "
                "pass; the block's time %.3f s; expert bytes read per decoded token %.2f MiB\n",
                (unsigned long long)st.mtp_drafts, (unsigned long long)kept, pct(kept, st.mtp_drafts),
                cli_tokens_per_pass(&st), st.mtp_s,
                st.decode_tokens ? mib(st.decode_bytes_read) / (double)st.decode_tokens : 0.0);
    } else if (info.mtp_on) {
        fprintf(f, "  MTP drafts: none (the block is loaded; nothing was decoded with drafts)\n");
    }
    const char *auto_note = e0_engine_mtp_note(e);
    if (*auto_note) fprintf(f, "  %s\n", auto_note);
    if (st.lru_hits + st.lru_misses) {
        fprintf(f, "  expert cache hit rate per layer:");
        for (int l = 0; l < info.n_layers; l++) {
            uint64_t h, m;
            e0_engine_layer_stats(e, l, &h, &m);
            if (h + m) fprintf(f, " %d:%.0f%%", l, pct(h, h + m));
        }
        fprintf(f, "\n");
    }
    if (st.vram_slots)
        fprintf(f, "  VRAM expert cache: %d slots, %llu hits, %llu misses (hit rate %.1f%%); PCIe %.1f MiB "
                   "(%.1f MiB staged by the device) (%.2f MiB/token, %.1f GB/s measured at start); routing read back "
                   "%.3f s, copies %.3f s\n",
                st.vram_slots, (unsigned long long)st.vram_hits, (unsigned long long)st.vram_misses,
                pct(st.vram_hits, st.vram_hits + st.vram_misses), mib(st.pcie_bytes), mib(st.pcie_staged_bytes),
                tokens ? mib(st.pcie_bytes) / (double)tokens : 0.0, st.pcie_gbs, st.vram_wait_s,
                st.vram_copy_s);
    if (st.vram_prefetched)
        fprintf(f, "  VRAM expert cache, the next layer's experts guessed and copied ahead: %llu, %llu routed to (%.1f%%)\n",
                (unsigned long long)st.vram_prefetched, (unsigned long long)st.vram_prefetch_used,
                pct(st.vram_prefetch_used, st.vram_prefetched));
    if (st.vram_host_experts || st.vram_host_timed)
        fprintf(f, "  VRAM expert cache, misses computed by the host instead of copied in: %llu (%.3f s), up to %d a "
                   "MoE call%s\n",
                (unsigned long long)st.vram_host_experts, st.vram_host_s, st.vram_host_max,
                st.vram_host_timed ? " (the fastest so far, timed while decoding)" : "");
    if (st.host_cache_slots)
        fprintf(f, "  host expert cache (pinned, for the GPU): %d slots, %llu hits, %llu misses (hit rate %.1f%%); "
                   "read %.1f MiB from the checkpoint in %.3f s; %llu given up by the VRAM kept\n",
                st.host_cache_slots, (unsigned long long)st.host_cache_hits,
                (unsigned long long)st.host_cache_misses, pct(st.host_cache_hits, st.host_cache_hits + st.host_cache_misses),
                mib(st.disk_bytes), st.disk_read_s, (unsigned long long)st.host_cache_kept);
    fprintf(f, "  peak RSS %.1f MiB\n", mib(st.peak_rss));
}
