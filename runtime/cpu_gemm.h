/* cpu_gemm.h: the CPU backend's base layer (runtime/cpu_gemm.c): the threads a rank computes with
 * and the row-major fp32 GEMM over OpenBLAS. The kernels (runtime/cpu_kernels.h) and the ranks
 * (runtime/cpu.h) sit above it. */
#ifndef BOOST_CPU_GEMM_H
#define BOOST_CPU_GEMM_H

#include "runtime/plan.h"   // defines: GemmArgs

/* C = alpha op(A) op(B) + beta C for each batch (row-major, OpenBLAS). */
void cpu_gemm(const GemmArgs *g, const float *A, const float *B, float *C);

/* Threads per rank for the kernels and OpenBLAS: BOOST_THREADS (default: the online cores less the
 * 1-minute load average of the machine, at least 1) divided by tp, at least 1. cpu_threads_set
 * records it for a process of tp ranks and returns it. */
int cpu_threads_set(int tp);
int cpu_threads(void);

#endif
