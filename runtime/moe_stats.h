/* moe_stats.h: what an MoE user watches during training, gathered from the routing statistics
 * each MoE layer's router leaves in L{i}.moe_aux ([loss, f_e (E), P_e (E), z-loss], docs/moe.md):
 * tokens routed to each expert per optimizer step, the fraction dropped by the capacity, and the
 * load-balance and router z-losses (each the mean over the step's micro-batches of every dp rank),
 * as JSON fields of the training log. */
#ifndef BOOST_MOE_STATS_H
#define BOOST_MOE_STATS_H
#include <stddef.h>
#include <stdint.h>
#include "runtime/plan.h"
#include "runtime/runtime.h"

typedef struct {
    int n;                    /* MoE layers (0: the model has none, nothing is logged) */
    int *layer;               /* [n] decoder layer index */
    int E, K;                 /* experts, top_k (the same in every MoE layer) */
    int64_t M, C;             /* tokens per micro-batch and rank, capacity slots per expert */
    int auxn;                 /* elements of L{i}.moe_aux */
    int ranks, tp;            /* dp ranks read (each one's micro-batch), tp stride between them */
    double *load;             /* [n*E] routed choices per expert this step (before capacity) */
    double *dropped, *aux, *z, *choices;   /* [n] per layer, summed over the micro-batches read */
    int mb;                   /* micro-batches read this step */
    int rows;                 /* (dp rank, micro-batch) rows read this step: the losses are their mean */
    float *buf;
} MoeStats;

/* From the plan's L{i}.moe_aux / moe_sel / moe_src shapes; dp ranks of `tp` ranks each. 0, or -1. */
int moe_stats_init(MoeStats *s, const Plan *p, int dp, int tp);
/* The same over a pipeline's stage plans (pp > 1): each MoE layer from the stage that holds it. */
int moe_stats_init_stages(MoeStats *s, const Plan *const *plans, int nplans, int dp, int tp);
/* After a forward+backward: add each dp rank's routing of that micro-batch (with one process per
 * rank, a sum over the processes: every process calls it alike). */
void moe_stats_add(MoeStats *s, Engine *e);
/* The same from rows read elsewhere (pp > 1: runtime/pipeline.h, pipeline_moe_aux): rows[d*n + q] is
 * dp rank d's L{layer[q]}.moe_aux of one micro-batch (auxn floats), NULL when not read. */
void moe_stats_add_rows(MoeStats *s, const float *const *rows);
/* The step's JSON fields (",\"moe_load\":[[..],..],\"moe_dropped\":[..],...") into buf, then reset;
 * an empty string when no MoE layer or nothing was read. */
void moe_stats_json(MoeStats *s, char *buf, size_t n);
void moe_stats_free(MoeStats *s);
#endif
