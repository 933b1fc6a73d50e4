/* profile.h: BOOST_PROFILE=1 — where a rank's time goes, step kind by step kind. The Engine times
 * every plan step one rank runs in training passes (evaluation passes are left out) and the optimizer,
 * and prints, when it is freed, a table per training step summed by section and kind (kernels by
 * catalog kind, GEMMs with their GFLOP/s), largest first. */
#ifndef BOOST_PROFILE_H
#define BOOST_PROFILE_H
#include <stdio.h>
#include "runtime/plan.h"

typedef struct StepProfile StepProfile;

/* NULL unless the environment has BOOST_PROFILE=1 (or on out of memory: profiling is optional). */
StepProfile *profile_open(const Plan *p, const char *backend_name);
double profile_now(void);                                   /* seconds, monotonic */
void profile_step(StepProfile *pf, int step, double seconds);   /* step: index into p->steps_ */
void profile_optimizer(StepProfile *pf, double seconds);    /* AdamW + zeroing the gradients */
void profile_pass(StepProfile *pf);                         /* one training pass (forward + backward) done */
void profile_label(StepProfile *pf, const char *label);    /* named in the table's header (a pipeline stage) */
/* The table (rows summed by section and kind), to `out`. Returns the rows printed. */
int profile_print(const StepProfile *pf, FILE *out);
void profile_free(StepProfile *pf);
#endif
