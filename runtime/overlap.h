/* overlap.h: the overlap analysis of a plan's collectives (runtime/overlap.c): where the executor
 * waits for each one, and a report of how much compute each can overlap. */
#ifndef BOOST_OVERLAP_H
#define BOOST_OVERLAP_H

#include <stddef.h>
#include "runtime/plan.h"

/* first_use[s] for every collective step s in [0, end) (end: the first step after the forward and
 * backward sections): the first later step in [s+1, end) whose memory accesses conflict with the
 * collective's, or `end`; -1 for other steps. With no_overlap, s+1. A gather_shards step s after
 * `end` (the optimizer's) runs into the next pass: its first use is the first step in [0, end)
 * that touches its param, or `end` (with no_overlap, the pass's first step). first_use holds
 * p->nsteps entries. */
void overlap_first_use(const Plan *p, int end, int no_overlap, int *first_use);

/* How much compute each collective of the plan can overlap: per section (forward, backward) the
 * steps and GEMM FLOPs between a collective's issue and the first step that touches its memory,
 * and steps after that use which do not need the collective; then one line per collective of layer
 * 0 and outside the layers. Text in out (lines end in \n); 0, or -1 when out of memory. The same
 * analysis tells the executor where to wait (runtime/exec.c); BOOST_VERBOSE=1 prints it when an
 * engine is created. */
int plan_overlap_report(const Plan *p, char *out, size_t n);

#endif
