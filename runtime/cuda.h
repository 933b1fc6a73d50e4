/* cuda.h: what the CUDA backend offers besides backend_cuda (runtime/backend.h). */
#ifndef BOOST_CUDA_H
#define BOOST_CUDA_H

#include "runtime/plan.h"

/* Checks a plan's kernel steps against what the CUDA kernels were compiled for: known kinds,
 * operand names, operand dtypes (the catalog's defaults or the name's dtype suffix), launch
 * ranges, and, with names (the kernels defined in kernels.cu), that each kernel exists.
 * Returns the number of problems; the first few go to err as "plan.txt:LINE: ..." lines. */
int cuda_plan_check(const Plan *p, const char *const *names, int nnames, char *err, size_t errlen);

#endif
