/* cpu.h: what runtime/cpu.c (backend_cpu, the fp32 reference backend; the executor reaches it
 * through runtime/backend.h) offers besides the backend table: its gradient memory, for the tests.
 * Its layers, each calling only those below it: runtime/cpu_gemm.h (threads, GEMM), then
 * runtime/cpu_kernels.h and runtime/cpu_infer.h (the kernels), then runtime/cpu.c (the ranks). */
#ifndef BOOST_CPU_H
#define BOOST_CPU_H

#include <stddef.h>

/* The bytes of fp32 gradients rank r holds now (full-size d.P buffers, and at zero=2 the shards of
 * ceil(n/dp) elements) and, in *peak, the most it has held since it was opened. */
struct BackendRank;
size_t cpu_gradient_bytes(const struct BackendRank *r, size_t *peak);

#endif
