/* Commands of the edge0 binary. Each returns the process exit status. */
#ifndef E0_CLI_H
#define E0_CLI_H

#include "edge0.h"
#include "util/clock.h" /* now_s */

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

int cmd_logits(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_info(int argc, char **argv);

/* A progress bar for long commands (progress.c): redrawn on a terminal, a
 * line every 5 s otherwise; bytes, rate over ~3 s, ETA. */
typedef enum { CLI_PHASE_WRITING, CLI_PHASE_SYNCING, CLI_PHASE_DONE } cli_phase;
typedef struct {
    const char *cmd;     /* "synth", "convert" */
    const char *unit;    /* after "GB": " read" or "" */
    const char *verb;    /* "read" or "written", in the syncing line */
    int tty;
    double last_line;    /* non-tty: time of the last line */
    double win_t, win_d; /* start of the rate window */
    double rate;         /* recent bytes/s */
} cli_progress;
void cli_progress_update(cli_progress *st, cli_phase phase, double done, double total, double seconds);

/* Options shared by the commands that write a checkpoint (synth, convert). */
typedef struct {
    int n_threads;        /* --threads N */
    uint64_t shard_bytes; /* --shard-gb N, --shard-mb N */
    int no_sync;          /* --no-sync */
    int dry;              /* --dry-run */
} cli_write_opts;
/* cli_write_table (opts.h) makes their option rows. */

/* SIGINT / SIGTERM set the returned flag until cli_cancel_end restores the
 * previous handlers: a long write stops cleanly instead of dying. */
const volatile sig_atomic_t *cli_cancel_begin(void);
void cli_cancel_end(void);

/* The Qwen3 tokenizer.json of assets/qwen3-tokenizer (demo.c): under
 * $E0_ASSETS, or the source tree the binary was built in. -1 (message
 * naming `cmd` and what needs it) when there is none. */
int cli_find_tokenizer(const char *cmd, const char *why, char *out, size_t n);
/* assets/REL of the edge0 tree ($E0_ASSETS, else beside the binary's
 * directory or in it) into out: 0, or -1 when there is none. */
int cli_find_asset(const char *rel, char *out, size_t n);

/* Peak resident set size of this process in bytes. */
unsigned long long cli_peak_rss(void);

/* "error: ..." on stderr. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Parses a non-negative integer option value; exits-free: returns -1 on error. */
long cli_parse_long(const char *opt, const char *val, long lo, long hi);
/* "8G", "8GiB", "512M", "1.5g", "123456" -> bytes; 0 on error. */
unsigned long long cli_parse_size(const char *s);
/* "1,2,3" -> malloc'd ids; -1 (message printed) on a malformed or empty list. */
int cli_parse_ids(const char *opt, const char *s, int32_t **out, size_t *n);

/* The chat prompt (lineedit.c): libedit line editing, history and
 * bracketed paste on a terminal, plain reads otherwise. cli_line_read
 * returns one turn (malloc'd; lines joined by a trailing backslash or
 * pasted together keep their newlines), or NULL at the end of input or when
 * Ctrl-C interrupted the read (*interrupted). */
typedef struct cli_line cli_line;
cli_line *cli_line_open(void);
char *cli_line_read(cli_line *l, bool *interrupted);
void cli_line_add_history(cli_line *l, const char *text);
void cli_line_close(cli_line *l);

/* A whole text file ("-": stdin), trailing newlines dropped; NULL
 * (message naming `opt` printed) when unreadable, empty, binary or over
 * 64 MiB. */
char *cli_read_text_file(const char *opt, const char *path);

/* Colour on stdout: a terminal and no NO_COLOR in the environment. */
bool cli_color(void);

/* Engine options shared by every command that runs a model. */
#define CLI_MAX_OPTS 64
typedef struct {
    e0_engine_opts eo; /* valid after cli_engine_finish */
    const char *preset;
    const char *opts[CLI_MAX_OPTS];
    int n_opts;
    e0_path path;
    e0_io_mode io;
    e0_kv_type kv_type;
    bool path_set, io_set, kernels_set, ondemand, stats;
    bool sampling; /* the command samples tokens: the sampling options are its own */
    unsigned long long mem_budget;
    bool budget_off; /* --mem-budget off */
    int gpu;         /* --gpu: E0_GPU_AUTO (default), E0_GPU_OFF or an ordinal */
    unsigned long long vram_budget; /* --vram-budget SIZE (0: from the free memory) */
    int threads;
    e0_mtp_mode mtp; /* --mtp: E0_MTP_AUTO (default), E0_MTP_ON or E0_MTP_OFF */
    bool mtp_set;    /* --mtp was given */
    e0_sample_opts sample; /* --temp --top-k --top-p --min-p --seed --max-tokens --stop ... */
    const char *stops[16];
} cli_engine;

extern const char *CLI_ENGINE_HELP;
extern const char *CLI_SAMPLE_HELP;
void cli_engine_init(cli_engine *c);
/* argv[*i] is an engine option: 1 (consumed, *i advanced past its value),
 * 0 (not one), -1 (bad value, message printed), 2 (--help: `help` and the
 * engine options printed; the command exits 0). */
int cli_engine_arg(cli_engine *c, int argc, char **argv, int *i, const char *help);
/* (cli_parse, opts.h, asks it first for every argument.) */
/* Builds c->eo: defaults, preset, opts, --prefill-ondemand, the rest. */
int cli_engine_finish(cli_engine *c);
/* After open: prints what --mem-budget chose. */
void cli_engine_opened(const cli_engine *c, e0_engine *e);
void cli_print_stats(e0_engine *e, FILE *f);
/* Decoded tokens per decode pass (e0_stats: with MTP drafts, up to 2). */
double cli_tokens_per_pass(const e0_stats *st);

/* Greedy decoding of token ids (greedy.c), as demo --ids and bench run it:
 * n more ids, each the argmax of the logits before it, evaluated in s; lg
 * ([vocab]) holds the last evaluation's logits on entry and the logits
 * after out[n - 1] on return. When s can draft with the MTP block
 * (e0_session_can_draft) each pass verifies the next id with the block's
 * draft (two ids a pass when it stands): the same ids, bit for bit.
 * force (NULL: none): bench's acceptance hook, the draft replaced by the
 * answer key's id with probability `accept` (its own coin, seeded), else by
 * an id that is not it; key[k] is the id out[k] must be (a run without
 * drafts), so drafts stand at that rate whatever the block predicts.
 * on_id (may be NULL) sees each id as it is decided. 0 or an error (err). */
typedef struct {
    const int32_t *key; /* [n] */
    double accept;
    uint64_t rng;
} cli_mtp_force;
int cli_greedy(e0_session *s, float *lg, int32_t vocab, int n, int32_t *out, cli_mtp_force *force,
               void (*on_id)(void *user, int k, int32_t id), void *user, char *err);

#endif
