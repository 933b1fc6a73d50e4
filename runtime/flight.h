/* flight.h: a flight record per rank: a ring of its last N collectives and step boundaries (plan
 * line, kind, group, bytes, start time, done or not), fed by the executor (runtime/exec.c) and
 * printed when a collective fails or times out (a peer died, BOOST_NCCL_TIMEOUT), so that the rank
 * that is out of step with the others shows. Also each rank's time outside collective waits, which
 * the training loop compares across ranks to name a straggler (runtime/train.c). A rank's ring is
 * written by that rank's thread only; reading it (printing) happens on that thread or between
 * jobs. */
#ifndef BOOST_FLIGHT_H
#define BOOST_FLIGHT_H

#include <stdint.h>
#include <stdio.h>
#include "runtime/plan.h"   // defines: Plan

typedef struct Flight Flight;

/* Rings for nranks ranks of this process, cap entries each (BOOST_FLIGHT_RECORDS overrides cap;
 * at least 4). NULL when out of memory (then every call below does nothing). */
Flight *flight_new(int nranks, int cap);
void flight_free(Flight *f);

/* A collective starts on rank: plan step index and line, kind ("allreduce"), group ("tp"), bytes.
 * step FLIGHT_HOST_SUM: a sum of host values over the processes (no plan line). Returns its entry
 * number, for flight_done. */
#define FLIGHT_HOST_SUM (-2)
int64_t flight_begin(Flight *f, int rank, int step, int line, const char *kind, const char *group,
                     int64_t bytes);
/* Entry id finished (seconds in it added to the rank's wait time when `waited`). */
void flight_done(Flight *f, int rank, int64_t id, int waited);
/* The newest unfinished entry of plan step `step` finished (an issued collective waited for). */
void flight_done_step(Flight *f, int rank, int step);
/* Every entry of rank so far finished (a host wait for all its work succeeded). */
void flight_settle(Flight *f, int rank);
/* Seconds rank spent waiting (inside blocking collectives and waits for issued ones). */
void flight_add_wait(Flight *f, int rank, double seconds);
/* A training step boundary (step = steps done), recorded on every rank's ring. */
void flight_mark_step(Flight *f, int step);
/* Unfinished entries of rank. */
int flight_pending(const Flight *f, int rank);
/* Print rank's ring, oldest first, the first unfinished collective marked as the one waited on;
 * who: how the rank is named ("rank 1 of 2"). */
void flight_print(const Flight *f, int rank, const char *who, FILE *out);
/* Seconds rank spent outside collective waits in the jobs timed since the last call; reset. */
double flight_take_busy(Flight *f, int rank);
/* A timed job on rank: its wall seconds, of which the waits recorded meanwhile are taken out. */
void flight_job(Flight *f, int rank, double wall_s);

/* Plan step s of p on rank, when it is a collective (kind, group, bytes from the plan): its entry;
 * -1 when the step is no collective. */
int64_t flight_plan_step(Flight *f, int rank, const Plan *p, int s);

/* Monotonic seconds. */
double flight_now(void);

#endif
