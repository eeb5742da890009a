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

int cli_parse_ids(const char *opt, const char *s, int32_t **out, size_t *n) {
    size_t cap = 16, k = 0;
    int32_t *v = s ? malloc(cap * sizeof *v) : NULL;
    if (!v) {
        cli_error("%s needs a comma-separated list of token ids", opt);
        return -1;
    }
    for (const char *p = s; *p;) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            cli_error("%s: '%s' is not a comma-separated list of non-negative integers", opt, s);
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        cli_error("%s is empty", opt);
        free(v);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
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
    {"convert", cmd_convert, "convert a Hugging Face checkpoint to the streaming (mlx 4-bit) layout"},
    {"chat", cmd_chat, "chat with a model in the terminal, answers streamed"},
    {"demo", cmd_demo, "run a model on a prompt and print timings (no MODEL: built-in tiny model)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
    {"info", cmd_info, "what a model is, and the plan a run would make in this machine's memory"},
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
