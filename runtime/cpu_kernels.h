/* cpu_kernels.h: the fp32 reference of every kernel kind of the catalog (runtime/cpu_kernels.c),
 * as a plain function for the CPU backend and the tests; deterministic, the math of
 * docs/plan-format.md. */
#ifndef BOOST_CPU_KERNELS_H
#define BOOST_CPU_KERNELS_H

#include <stddef.h>
#include "runtime/plan.h"   // defines: KernelArgs

/* Run kernel k with operand pointers ops[i] for k->op_key[i] (fp32, i32 for tokens/targets),
 * constants resolved at `rank`. Returns 0, or -1 with a message in err. */
int cpu_kernel_run(const KernelArgs *k, void **ops, int rank, char *err, size_t errlen);

#endif
