/* export.c: `boost export` (not yet written: refuses with exit 2). */
#include <stdio.h>
#include "cli/commands.h"
int cmd_export(int argc, char **argv) { fprintf(stderr, "boost export: not available yet\n"); return 2; }
