/* kernels.c: placeholder kernel specialiser until the template emitter is built: names a kernel
 * from its kind and constants and gives a default launch configuration; emits no source. */
#include <stdio.h>
#include <string.h>
#include "gen/kernels.h"

int kernel_specialise(KernelInst *k, const Run *run, char *err, size_t errlen) {
    int n = snprintf(k->name, sizeof k->name, "%s", k->kind);
    for (int i = 0; i < k->nconst && n < (int)sizeof k->name - 16; i++)
        n += snprintf(k->name + n, sizeof k->name - n, "_%g", k->val[i]);
    for (char *c = k->name; *c; c++) if (*c == '.' || *c == '-' || *c == '+') *c = 'p';
    k->grid = 1; k->block = 256; k->smem = 0;
    return 0;
}

int kernels_emit(FILE *out, const KernelInst *ks, int n, const Run *run, char *err, size_t errlen) {
    fprintf(out, "// kernels.cu: not emitted yet\n");
    return 0;
}
