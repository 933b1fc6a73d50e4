/* cuda.c: placeholder CUDA backend until the real one is built: opening a rank fails with a
 * clear message, so `--backend cuda` never crashes. */
#include <stdio.h>
#include "runtime/backend.h"

static BackendRank *cuda_rank_open(const Plan *p, int rank, int tp, char *err, size_t errlen) {
    snprintf(err, errlen, "the CUDA backend is not built in this binary; use --backend cpu");
    return NULL;
}

const Backend backend_cuda = { .name = "cuda", .rank_open = cuda_rank_open };
