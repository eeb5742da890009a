/* Option parsing by table: each command lists its options as rows of
 * {name, kind, pointer, ...} and cli_parse runs the one loop every command
 * used to write by hand (the engine options first, then the table, then
 * the positional argument), with the same messages:
 *
 *     static const cli_opt OPTS[] = {
 *         CLI_OPT("--ctx", CLI_LONG, &ctx, .lo = 16, .hi = 1 << 24),
 *         CLI_OPT("--no-think", CLI_CLEAR, &think),
 *         {0},
 *     };
 *     cli_args p = {.cmd = "chat", .help = HELP, .ce = &ce, .opts = OPTS, .pos = &model};
 *     int rc = cli_parse(&p, argc, argv);    // 0 parsed, 1 --help shown, 2 bad argument
 *
 * The --help texts stay each command's own (written as prose, not made
 * from the table). */
#ifndef E0_CLI_OPTS_H
#define E0_CLI_OPTS_H

#include "cli/cli.h"

#include <stdbool.h>
#include <stdio.h>

typedef enum {
    CLI_SET,   /* bool *ptr = true (no value) */
    CLI_CLEAR, /* bool *ptr = false (no value) */
    CLI_ISET,  /* int *ptr = 1 (no value) */
    CLI_BITS,  /* unsigned *ptr |= lo (no value) */
    CLI_STR,   /* const char **ptr = the value; missing: "NAME needs <need>" */
    CLI_INT,   /* int *ptr = an integer in [lo, hi] (cli_parse_long's messages) */
    CLI_LONG,  /* long *ptr, the same */
    CLI_FN,    /* fn(ptr, name, value): 0, or -1 with its message printed; with `need`,
                  a missing value is "NAME needs <need>", else fn sees NULL */
} cli_opt_kind;

typedef struct {
    const char *name; /* "--ctx"; NULL ends a table */
    cli_opt_kind kind;
    void *ptr;
    long lo, hi;      /* CLI_INT, CLI_LONG */
    int (*fn)(void *ptr, const char *name, const char *value);
    const char *need; /* CLI_STR, CLI_FN: what a missing value lacks ("a value", "a file name") */
} cli_opt;

typedef struct {
    const char *cmd;             /* "serve": "serve: unknown option ..." */
    const char *help;            /* --help's text (with ce: cli_engine_arg prints it) */
    void (*help_fn)(FILE *f);    /* or this prints it */
    cli_engine *ce;              /* the engine options, before the table; or NULL */
    const cli_opt *opts, *more;  /* the command's table, and a shared one (or NULL) */
    const char **pos, **pos2;    /* the positional arguments (NULL: none taken) */
    /* an option (known or not) without a value is "NAME needs a value (see
     * edge0 CMD --help)" before any other check but the flags' (serve) */
    bool value_first;
    bool dash_is_arg; /* "-" alone is a positional argument (stdin), not an option */
} cli_args;

/* A row: CLI_OPT("--ctx", CLI_LONG, &ctx, .lo = 16, .hi = 1 << 24). */
#define CLI_OPT(name_, kind_, ptr_, ...) {.name = (name_), .kind = (kind_), .ptr = (ptr_), __VA_ARGS__}

/* 0: parsed; 1: --help shown (the command exits 0); 2: a bad argument,
 * its message printed (the command exits 2). */
int cli_parse(const cli_args *p, int argc, char **argv);

/* A CLI_FN for an option naming a text file: *(char **)ptr = its text
 * (cli_read_text_file; an earlier one freed). */
int cli_opt_text_file(void *ptr, const char *name, const char *v);

/* The options of commands that write a checkpoint (--threads, --shard-gb,
 * --shard-mb, --no-sync, --dry-run), their rows pointing into *w:
 * out[CLI_WRITE_ROWS], the last one ending the table. */
enum { CLI_WRITE_ROWS = 6 };
void cli_write_table(cli_opt *out, cli_write_opts *w);

#endif
