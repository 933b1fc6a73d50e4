/* cuda.h: what the CUDA backend offers besides backend_cuda (runtime/backend.h). */
#ifndef BOOST_CUDA_H
#define BOOST_CUDA_H

#include "runtime/plan.h"

/* Checks a plan's kernel steps against what the CUDA kernels were compiled for: known kinds,
 * operand names, operand dtypes (the catalog's defaults or the name's dtype suffix), launch
 * ranges, and, with names (the kernels defined in kernels.cu), that each kernel exists.
 * Returns the number of problems; the first few go to err as "plan.txt:LINE: ..." lines. */
int cuda_plan_check(const Plan *p, const char *const *names, int nnames, char *err, size_t errlen);

/* For `boost tune` (with a rank of backend_cuda open): compile CUDA source for the device with the
 * JIT cache and load it as an extra module; time `reps` launches of kernel `name` of that module
 * with kernel step k's operands (ops: device pointers, as the executor resolves them) and the
 * given launch size; seconds per launch, measured on the rank's stream. */
struct BackendRank;
void *cuda_module_load(const char *src, char *err, size_t errlen);
void cuda_module_free(void *module);
const char *cuda_device_arch(void);
/* 1 when the driver loads and reports a CUDA device (backend "auto" choosing for pipeline stages). */
int cuda_device_present(void);
int cuda_time_kernel(struct BackendRank *r, void *module, const char *name, const KernelArgs *k, void **ops,
                     int64_t grid, int64_t block, int64_t smem, int reps, double *seconds);

#endif
