/* cpu_infer.h: the CPU backend's inference kernels (runtime/cpu_infer.c): rope_at, kv_append and
 * attention_decode, fp32, the math of docs/plan-format.md ("Inference kinds"). */
#ifndef BOOST_CPU_INFER_H
#define BOOST_CPU_INFER_H

#include <stddef.h>
#include "runtime/plan.h"   // defines: KernelArgs

/* Run inference kernel k with operand pointers ops[i] for k->op_key[i], constants resolved at
 * `rank`. Returns 0, -1 with a message in err, or 1 when k is not one of the inference kinds. */
int cpu_infer_kernel_run(const KernelArgs *k, void **ops, int rank, char *err, size_t errlen);

#endif
