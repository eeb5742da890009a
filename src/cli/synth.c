/* edge0 synth --shape NAME DST */
#include "cli/cli.h"
#include "edge0.h"
#include "model/synth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(FILE *f) {
    fprintf(f,
            "usage: edge0 synth --shape NAME [--seed N] DST\n"
            "\n"
            "Writes a random-weight checkpoint with the tensor names, shapes and layout\n"
            "of a real model (mlx affine 4-bit, group 64; routers 8-bit) into DST.\n"
            "\n"
            "  --shape NAME   one of: %s\n"
            "  --seed N       PRNG seed (default 1)\n",
            synth_names());
}

int cmd_synth(int argc, char **argv) {
    const char *shape = NULL, *dst = NULL;
    long seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "--shape")) {
            shape = v, i++;
        } else if (!strcmp(a, "--seed")) {
            if ((seed = cli_parse_long(a, v, 0, 1L << 62)) < 0) return 2;
            i++;
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
    if (!shape || !dst) {
        cli_error("synth needs --shape and DST (see edge0 synth --help)");
        return 2;
    }
    const synth_shape *s = synth_find(shape);
    if (!s) {
        cli_error("synth: unknown shape '%s' (known: %s)", shape, synth_names());
        return 2;
    }
    char err[E0_ERR_MAX];
    double t0 = cli_now();
    if (synth_write(s, dst, (uint64_t)seed, err) != 0) {
        cli_error("%s", err);
        return 1;
    }
    fprintf(stderr, "edge0 synth: wrote shape %s (seed %ld) to %s in %.2f s\n", shape, seed, dst, cli_now() - t0);
    return 0;
}
