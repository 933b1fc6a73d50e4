/* pipeline.h: pipeline-parallel training (runtime/pipeline.c), CPU or CUDA backend. A pp > 1 plan
 * (docs/plan-format.md "Pipeline stages") holds one plan section per stage and each stage's emitted
 * 1F1B schedule; a Pipeline runs one Engine per stage (its dp x tp ranks as threads), one driver
 * thread per stage walking that schedule, and send/recv as queues between the drivers. Under mpirun
 * (one process per grid rank, world = dp x pp x tp) each process opens the Engines of its pipeline
 * rank's stages only, holding its one (dp, tp) rank of them, drives its own schedule, and send/recv
 * go over MPI point-to-point; every call below is then made by every process alike. On the cuda
 * backend: one process (every stage's ranks on the device, boundaries through the host queues), or
 * one process per GPU as under mpirun, send/recv going device to device over NCCL
 * (runtime/cuda_pipe.h). */
#ifndef BOOST_PIPELINE_H
#define BOOST_PIPELINE_H

#include <stdint.h>
#include <stddef.h>
#include "runtime/runtime.h"

typedef struct Pipeline Pipeline;

/* 1 when the plan file at path is a pipeline plan (has a `pipeline` line), 0 when not, -1 unreadable. */
int pipeline_plan_is(const char *path);
/* Load a pp > 1 plan and open an Engine per stage. NULL with "PATH:LINE: what is wrong" in err.
 * backend NULL: the stage plans and canons only, no Engine (for reading a run's settings). */
Pipeline *pipeline_open(const char *path, const char *backend, char *err, size_t errlen);
void pipeline_free(Pipeline *pl);
int pipeline_stages(const Pipeline *pl);      /* stage sections (pp * virtual_stages), one Engine each */
int pipeline_ranks(const Pipeline *pl);       /* pipeline ranks (pp); stage k runs on rank k % pp */
int pipeline_micro_batches(const Pipeline *pl);   /* m = grad_accum */
Plan *pipeline_stage_plan(Pipeline *pl, int stage);   /* stage 0's header is the run's */
Engine *pipeline_stage_engine(Pipeline *pl, int stage);   /* NULL: another process's stage (mpirun) */
/* How the stages talk: threads with queues, or processes over MPI (for the run's banner). */
const char *pipeline_transport(const Pipeline *pl);

int pipeline_init_params(Pipeline *pl, char *err, size_t errlen);
/* One optimizer step's m micro-batches through the 1F1B schedule: tokens/targets hold m blocks of
 * dp*micro_batch*seq values (block j = micro-batch j, laid out as engine_forward_backward takes
 * one); losses[j]: micro-batch j's loss (mean over dp). Gradients accumulate. */
int pipeline_forward_backward(Pipeline *pl, const int32_t *tokens, const int32_t *targets, float *losses,
                              char *err, size_t errlen);
/* Forward only (validation) of one micro-batch block (dp*micro_batch*seq values). */
int pipeline_forward(Pipeline *pl, const int32_t *tokens, const int32_t *targets, float *loss, char *err, size_t errlen);
/* Global gradient norm (all stages), clipping, AdamW on every stage, gradients zeroed. As
 * engine_optimizer_step: -1 with the update skipped when the norm is not finite, 1 when it exceeds
 * norm_skip_above (stage 0's plan). */
int pipeline_optimizer_step(Pipeline *pl, int step, float *grad_norm, float *lr, char *err, size_t errlen);
int pipeline_discard_grads(Pipeline *pl, char *err, size_t errlen);

/* MoE with pp > 1 (the plan's `loss_terms=moe_aux`): after pipeline_forward_backward (all processes
 * alike under MPI), dp rank d's L{layer}.moe_aux of micro-batch `micro` (its first n elements: [loss,
 * f_e, P_e, ...], docs/moe.md) in out; -1 when layer is not an MoE layer of the plan. The losses the
 * pipeline reports already include each layer's aux[0]. */
int pipeline_moe_aux(const Pipeline *pl, int micro, int layer, int d, float *out, int n);

/* Canonical tensors over all stages (each canon lives on one stage): the same names and shapes as
 * the pp=1 plan of the model, so checkpoints do not depend on pp. */
int pipeline_canon_count(const Pipeline *pl);
const PlanCanon *pipeline_canon(const Pipeline *pl, int i);
int pipeline_find_canon(const Pipeline *pl, const char *name);
int pipeline_get_canon(Pipeline *pl, int i, int slot, float *full);
int pipeline_set_canon(Pipeline *pl, int i, int slot, const float *full);
/* The stage canon i lives on, and its index among that stage plan's canons in *local (may be NULL).
 * Canons are numbered stage by stage: stage 0's in its plan's order, then stage 1's, ... */
int pipeline_canon_stage(const Pipeline *pl, int i, int *local);
/* Under mpirun: n doubles summed over every process of the job, each process getting the sum (a
 * barrier too; sharded checkpoints use it); threads: nothing to do. 0 or -1. */
int pipeline_world_sum(Pipeline *pl, double *vals, int n);

#endif
