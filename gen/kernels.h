/* kernels.h: a fused kernel as the schedule builder asks for it (kind + constants), and the
 * emitter that specialises it for a GPU: procedural name, launch configuration, CUDA source.
 * The kinds and their math are the kernel catalog of docs/plan-format.md; the source text comes
 * from templates/. */
#ifndef BOOST_KERNELS_H
#define BOOST_KERNELS_H

#include <stdio.h>
#include <stdint.h>
#include "gen/model.h"

#define KMAX_CONST 24

typedef struct {
    char kind[32];                 /* catalog kind, e.g. "bottleneck_act" */
    int nconst;
    char key[KMAX_CONST][16];      /* constant names as in the catalog (rows, cols, act, ...) */
    double val[KMAX_CONST];        /* value (ints stored exactly; act: 0 none, 1 silu) */
    double per_rank[KMAX_CONST];   /* non-zero: value = val + rank*per_rank, passed at launch */
    /* filled by kernel_specialise: */
    char name[96];                 /* procedural name encoding kind, constants, dtype, tuning */
    int64_t grid, block, smem;
} KernelInst;

/* Name it and choose its launch configuration from the GPU's tuning table. */
int kernel_specialise(KernelInst *k, const Run *run, char *err, size_t errlen);

/* Write a self-contained kernels.cu (only cuda_bf16.h included) with one definition per distinct
 * name among ks[0..n-1]. */
int kernels_emit(FILE *out, const KernelInst *ks, int n, const Run *run, char *err, size_t errlen);

#endif
