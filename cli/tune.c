/* tune.c: placeholder until this subcommand is built; it says so and exits 1. */
#include <stdio.h>
#include "cli/commands.h"
int cmd_tune(int argc, char **argv) { fprintf(stderr, "boost: '%s' is not built yet\n", argv[0]); return 1; }
