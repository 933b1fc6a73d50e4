/* kernels.h: a fused kernel as the schedule builder asks for it (kind + constants), and the
 * emitter that specialises it for a GPU: procedural name, launch configuration, CUDA source.
 * The kinds are the rows of common/kernel_catalog.h, their math is docs/plan-format.md's; the
 * source text comes from templates/. */
#ifndef BOOST_KERNELS_H
#define BOOST_KERNELS_H

#include <stdio.h>
#include <stdint.h>
#include "gen/model.h"

#define KMAX_CONST 24
#define KMAX_OPS 10

typedef struct {
    char kind[32];                 /* catalog kind, e.g. "bottleneck_act" */
    int nconst;
    char key[KMAX_CONST][16];      /* constant names as in the catalog (rows, cols, act, ...) */
    double val[KMAX_CONST];        /* value (ints stored exactly; act: 0 none, 1 silu) */
    double per_rank[KMAX_CONST];   /* non-zero: value = val + rank*per_rank, passed at launch */
    /* optional: storage type of operand i (catalog order), "bf16" | "fp32" | "i32"; "" (zeroed)
     * = the catalog default (docs/plan-format.md, "Kernel operands on CUDA") */
    char op_dtype[KMAX_OPS][8];
    /* filled by kernel_specialise: */
    char name[96];                 /* procedural name encoding kind, constants, dtype, tuning */
    int64_t grid, block, smem;
    int vec, tune_bq, tune_bk;     /* vector width; attention query/key tile sizes */
} KernelInst;

/* Name it and choose its launch configuration from the GPU's tuning table. */
int kernel_specialise(KernelInst *k, const Run *run, char *err, size_t errlen);

/* Write a self-contained kernels.cu (only cuda_bf16.h included) with one definition per distinct
 * name among ks[0..n-1]. */
int kernels_emit(FILE *out, const KernelInst *ks, int n, const Run *run, char *err, size_t errlen);

/* Shared memory one block may use on arch (static + dynamic, bytes): the driver's opt-in maximum
 * (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN) as arch_limits finds it, 48 KiB (what a
 * function gets without cuFuncSetAttribute) for an unknown or no arch. */
int64_t kernel_smem_optin(const char *arch);
/* An arch's limits into out's smem_block_kib, smem_sm_kib, regs_sm, threads_sm, blocks_sm (0:
 * unknown; smem_block_kib 48 when unknown): those of the first GPU spec (spec_load_gpus, by name)
 * with that arch, else of a small table of archs no shipped spec names; "sm_NNa" falls back to
 * sm_NN's. 1 found, 0 not. Reads the GPU specs each call: call it once per arch. */
int arch_limits(const char *arch, Gpu *out);
#define KERNEL_SMEM_DEFAULT (48 * 1024)
/* The dynamic shared memory (bytes) of kernel `name` as its "// boost:dynamic_smem NAME BYTES" line
 * in a kernels.cu text says (kernels_emit writes one before each kernel that takes some); 0 without. */
long long kernels_dynamic_smem(const char *src, const char *name);

/* The catalog's kinds (common/kernel_catalog.h), in catalog order (for tests and tools). */
int kernel_kind_count(void);
const char *kernel_kind_name(int i);
/* Operand o of kind i: its key (into name) and default storage dtype ("bf16" | "fp32" | "i32", into
 * dtype); -1 past the last. */
int kernel_kind_operand(int i, int o, char *name, size_t n, char *dtype, size_t dn);

/* The templates/ folder ($BOOST_HOME/templates or next to the binary's folder). */
int kernels_template_dir(char *dir, size_t n, char *err, size_t errlen);

/* Kernels every kernels.cu carries for the CUDA backend itself (templates/runtime.cu). */
#define KERNEL_ADAMW          "adamw_fp32_master_bf16"
#define KERNEL_SUMSQ_FP32     "boost_sumsq_fp32"
#define KERNEL_ALLREDUCE_BF16 "boost_allreduce_bf16"
#define KERNEL_ALLREDUCE_FP32 "boost_allreduce_fp32"
#define KERNEL_FP32_TO_BF16   "boost_fp32_to_bf16"
#define KERNEL_BF16_TO_FP32   "boost_bf16_to_fp32"

#endif
