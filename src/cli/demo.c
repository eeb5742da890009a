#include "cli/cli.h"

#include <stdio.h>

int cmd_demo(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("demo: not built yet");
    return 1;
}
