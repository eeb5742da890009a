#include "cli/cli.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("tokenize: not built yet");
    return 1;
}
