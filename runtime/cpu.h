/* cpu.h: the CPU backend's kernels and GEMM as plain functions, for the tests (the executor
 * reaches them through backend_cpu). fp32 in and out; every kernel is the math of the catalog in
 * docs/plan-format.md, deterministic. */
#ifndef BOOST_CPU_H
#define BOOST_CPU_H

#include <stddef.h>
#include "runtime/plan.h"

/* Layers, each calling only those below it: runtime/cpu_gemm.c (threads, GEMM), then
 * runtime/cpu_kernels.c and runtime/cpu_infer.c (the kernels), then runtime/cpu.c (the ranks). */

/* runtime/cpu_kernels.c: run kernel k with operand pointers ops[i] for k->op_key[i] (fp32, i32 for
 * tokens/targets), constants resolved at `rank`. Returns 0, or -1 with a message in err. */
int cpu_kernel_run(const KernelArgs *k, void **ops, int rank, char *err, size_t errlen);

/* runtime/cpu_infer.c: the inference kinds (rope_at, kv_append, attention_decode). Returns 0, -1
 * with a message in err, or 1 when k is not one of them. */
int cpu_infer_kernel_run(const KernelArgs *k, void **ops, int rank, char *err, size_t errlen);

/* runtime/cpu_gemm.c: C = alpha op(A) op(B) + beta C for each batch (row-major, OpenBLAS). */
void cpu_gemm(const GemmArgs *g, const float *A, const float *B, float *C);

/* runtime/cpu_gemm.c: threads per rank for the kernels and OpenBLAS: BOOST_THREADS (default: the
 * online cores less the 1-minute load average of the machine, at least 1) divided by tp, at least
 * 1. cpu_threads_set records it for a process of tp ranks and returns it. */
int cpu_threads_set(int tp);
int cpu_threads(void);

/* runtime/cpu.c: the bytes of fp32 gradients rank r holds now (full-size d.P buffers, and at zero=2
 * the shards of ceil(n/dp) elements) and, in *peak, the most it has held since it was opened. */
struct BackendRank;
size_t cpu_gradient_bytes(const struct BackendRank *r, size_t *peak);

#endif
