/* pp.h: pipeline parallelism in the generator (gen/pp.c): the split of a whole-model Graph into
 * pp stages, each with its own memory plan and its emitted 1F1B schedule, the static schedule check,
 * and the plan and report writers for pp > 1. */
#ifndef BOOST_PP_H
#define BOOST_PP_H

#include <stdio.h>
#include "gen/ir.h"

#define PP_MAX_STAGES 64
#define PP_MAX_SLOTS 64

enum PpSchedKind { PS_FORWARD, PS_BACKWARD, PS_SEND_FWD, PS_RECV_FWD, PS_SEND_BWD, PS_RECV_BWD };

typedef struct { int kind, micro, slot, vs; } PpSched;   /* one schedule step of a pipeline rank, on virtual stage vs */

typedef struct {
    int pp;
    int first_layer[PP_MAX_STAGES + 1];   /* stage s holds layers [first_layer[s], first_layer[s+1]) */
    int stage_of_layer[MAX_LAYERS];
} PpSplit;

typedef struct {
    int layer0, layer1;
    Graph *g;                     /* the stage's steps and memory plan (tensors copied from the whole graph) */
    unsigned char *canon_used, *param_used;   /* by index in the whole graph */
    int in, out, din, dout;       /* boundary tensors: residual in/out, gradient sent back / received; -1 none */
    PpSched *sched; int nsched;
    int slots;                    /* activation slots: micro-batches in flight at once */
    int64_t param_elems, boundary_bytes;
    double flops;                 /* one micro-batch's forward + backward */
} PpStage;

/* stages[0 .. nv-1] are the virtual stages (nv = pp*v; v = 1: the stages), each with its layers, graph
 * and slots; stages[r].sched (r < pp) is pipeline rank r's schedule, whose steps name their stage in vs.
 * Virtual stage k runs on rank k % pp (chunk k / pp). */
typedef struct {
    int pp, m, v, nv;
    PpSplit split;
    PpStage stages[PP_MAX_STAGES];
    double layer_flops[MAX_LAYERS], first_flops, last_flops;
    double bubble;                /* of the emitted schedule, simulated (backward = 2 x forward) */
    int moe_aux_terms;            /* MoE layers whose L{i}.moe_aux[0] the runtime adds to the loss (their
                                   * moe_aux_add steps are in no stage) */
} PpPlan;

/* Split a finished whole-model graph (run->pp > 1). NULL with err on failure. */
PpPlan *pp_build(const Graph *g, char *err, size_t errlen);
void pp_free(PpPlan *pl);
/* Static check of the emitted schedules: every send has its receive in the same micro-batch order,
 * and executing them (sends never block, a receive waits) finishes: no stage waits for itself.
 * With forward time tf and backward tb, *bubble = 1 - m(tf+tb)/makespan. 0, or 1 with err. */
int pp_check_schedule(const PpPlan *pl, double tf, double tb, double *bubble, char *err, size_t errlen);
/* plan.txt for pp > 1 (docs/plan-format.md "Pipeline stages"). */
int pp_write_plan(const Graph *g, const PpPlan *pl, FILE *f);
/* The report's pipeline section (markdown). */
void pp_report(const Graph *g, const PpPlan *pl, FILE *f);

#endif
