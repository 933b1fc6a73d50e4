/* report.c: placeholder report until the full one lands. */
#include <stdio.h>
#include "gen/ir.h"
int report_write(const Run *run, FILE *f, int json, char *err, size_t errlen) {
    fprintf(f, json ? "{}\n" : "# %s\n", run->name);
    return 0;
}
