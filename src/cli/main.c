/* edge0: command dispatch and shared CLI helpers. */
#include "cli/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

void cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("edge0: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

long cli_parse_long(const char *opt, const char *val, long lo, long hi) {
    if (!val) {
        cli_error("%s needs a value", opt);
        return -1;
    }
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || end == val || *end || v < lo || v > hi) {
        cli_error("%s: '%s' is not an integer in [%ld, %ld]", opt, val, lo, hi);
        return -1;
    }
    return v;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

unsigned long long cli_peak_rss(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (unsigned long long)ru.ru_maxrss * 1024ull : 0;
}

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} COMMANDS[] = {
    {"bench", cmd_bench, "prefill/decode speed, cold and warm, as ratios to this machine's bandwidth"},
    {"demo", cmd_demo, "run a model on a prompt and print timings (no MODEL: built-in tiny model)"},
    {"logits", cmd_logits, "write the logits of a token sequence to a safetensors file"},
    {"synth", cmd_synth, "write a random-weight checkpoint of a real model's shape"},
    {"tokenize", cmd_tokenize, "encode text with a model's tokenizer.json"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: edge0 COMMAND [ARGS]   (edge0 COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        fprintf(f, "  %-8s %s\n", COMMANDS[i].name, COMMANDS[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 1, argv + 1);
    cli_error("unknown command '%s'", argv[1]);
    usage(stderr);
    return 2;
}
