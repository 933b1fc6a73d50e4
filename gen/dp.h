/* dp.h: data parallelism in the generator (gen/dp.c): the dp gradient reduction and the optimizer
 * section of a Graph, the report's dp figures, and ZeRO memory per parameter, as the cpu backend
 * holds it and as a backend allocates it (which gradients it holds full size at zero=2, and the
 * peak of the full-size gradients a ZeRO-2 step holds at once). */
#ifndef BOOST_GEN_DP_H
#define BOOST_GEN_DP_H

#include <stdint.h>
#include <stdio.h>
#include "gen/ir.h"

int dp_emit_reduction(Graph *g);               /* dp > 1: bucketed all-reduces (group=dp; zero > 0:
                                                  reduce-scatters) of the param grads */
void dp_emit_optimizer(Graph *g);              /* the optimizer section (Graph.opt) */
typedef struct {
    int steps, buckets;
    int64_t bytes;            /* payload of the group=dp all-reduces per rank and optimizer step */
    int64_t bytes_overlapped; /* of it, issued before the backward's last compute step */
    int64_t local_params;     /* elements one rank holds */
} DpFigures;
void dp_figures(const Graph *g, DpFigures *d);
/* The report's dp section (json: its JSON form); nothing at dp=1 */
void dp_report(const Run *run, const Graph *g, FILE *f, int json);
/* Weights + gradients + AdamW bytes per local parameter and dp rank at ZeRO stage zero, as the cpu
 * backend holds them */
double dp_bytes_per_param(int zero, int dp, int grad_accum);

/* How a backend holds zero=2's gradients where it cannot keep only their shards between
 * micro-batches: the cpu backend keeps the full-size d.P and a shard accumulator beside them
 * (ZERO2_FULL_AND_SHARD), the cuda backend the full-size d.P alone, as zero=1 does
 * (ZERO2_AS_ZERO1). */
enum { ZERO2_FULL_AND_SHARD, ZERO2_AS_ZERO1 };

/* Weights + gradients + AdamW bytes per local parameter and dp rank at ZeRO stage zero.
 * shards_only: the backend keeps only gradient shards between micro-batches (cpu: grad_accum 1;
 * cuda: grad_accum 1, pp 1, no ep); else `otherwise` (ZERO2_*) says what it holds. */
double dp_zero_bytes_per_param(int zero, int dp, int shards_only, int otherwise);

/* 1 when ZeRO-2's dp reduce-scatters run on every micro-batch (zero=2, dp > 1, grad_accum > 1,
 * pp = 1; gen/plan_write.c writes them without micro=last): each adds its reduced shard to the
 * rank's shard accumulator, so the full-size gradients live only within a micro-batch, as at
 * grad_accum 1, at grad_accum x the reduce-scatter traffic. At pp > 1 they keep micro=last. */
int dp_zero2_every_micro(const Run *r);

/* zero=2 at grad_accum 1 (or every micro-batch, above): the most bytes of full-size fp32
 * parameter gradients live at one step,
 * each from the first step that writes it to its dp reduction (the cuda backend packs them into
 * one buffer at least this large, runtime/cuda_zero2.c; 0 at dp = 1; -1 out of memory). */
int64_t dp_zero2_live_grad_bytes(const Graph *g);

#endif
