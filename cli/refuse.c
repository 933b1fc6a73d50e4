/* refuse.c: the one way a subcommand refuses bad input: "CMD: MESSAGE" on stderr and exit status 2
 * (declared in cli/commands.h; a file of its own so no subcommand calls back into cli/main.c). */
#include <stdarg.h>
#include <stdio.h>
#include "cli/commands.h"

int cli_refuse(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}
