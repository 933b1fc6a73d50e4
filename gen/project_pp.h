/* project_pp.h: the cost model's pipeline timeline (gen/project_pp.c): the schedule gen/pp.c emits
 * (forward/backward/send/recv steps per pipeline rank) executed as events with per-stage compute
 * times and per-boundary transfer times, giving the iteration's pipeline time, the bubble measured
 * from the timeline and each rank's idle time. docs/cost-model.md "Pipeline" is its prose. */
#ifndef BOOST_PROJECT_PP_H
#define BOOST_PROJECT_PP_H

#include <stddef.h>
#include "gen/pp.h"

typedef struct {
    double seconds;                    /* the last step of any rank ends here (start = 0) */
    double bubble;                     /* idle share of all ranks: sum(idle) / (pp * seconds) */
    double busy_s[PP_MAX_STAGES];      /* per pipeline rank: its forwards and backwards */
    double idle_s[PP_MAX_STAGES];      /* per pipeline rank: seconds - busy */
    double wait_s[PP_MAX_STAGES];      /* per rank: the part of idle spent before its last step (waiting on a transfer) */
    int pp;
} PpTimeline;

/* Execute the emitted schedules of pl (pl->stages[r].sched for rank r < pl->pp) as a timeline.
 * fwd_s[k], bwd_s[k]: seconds of one micro-batch's forward / backward on virtual stage k (k < nv);
 * p2p_s[b]: one transfer across boundary b (between virtual stages b and b+1), either way (b < nv-1).
 * A rank runs its steps in order; forward and backward occupy it; a send is issued when the rank
 * reaches it and does not occupy the rank (the communication stream), its transfer starts when the
 * boundary's link in that direction is free (transfers on one link go one after the other) and
 * lasts p2p_s[b]; a forward or backward that consumes a received tensor starts no earlier than the
 * end of that tensor's transfer. Returns 0, or 1 with err when the schedule is malformed: a receive
 * that no step can ever satisfy (deadlock), a receive of another micro-batch than the one sent first,
 * a compute step before its receive, a send without its receive. */
int pp_timeline(const PpPlan *pl, const double *fwd_s, const double *bwd_s, const double *p2p_s,
                PpTimeline *out, char *err, size_t errlen);

/* The 1F1B formula the timeline replaces: (m + pp - 1) x (stage_s + 2 send_s) for pp > 1; with
 * v virtual stages per rank and stage_s the time of one chunk, (v m + pp - 1)(stage_s + 2 send_s). */
double pp_formula_seconds(double stage_s, double send_s, int m, int pp, int v);

#endif
