/* runtime.h: the runtime's public API. An Engine runs one plan on one backend for all the
 * tensor-parallel ranks of this process (threads on the CPU backend; shards in one process, or one
 * rank per process, on CUDA). The training loop (runtime/train.c) and the tests use only this. */
#ifndef BOOST_RUNTIME_H
#define BOOST_RUNTIME_H

#include <stdint.h>
#include <stddef.h>
#include "runtime/plan.h"
#include "runtime/overlap.h"

typedef struct Engine Engine;

/* What a checkpoint holds per canonical tensor. */
enum CanonSlot { SLOT_PARAM, SLOT_ADAM_M, SLOT_ADAM_V, SLOT_GRAD };

/* backend: "cpu", "cuda" or "auto" (cuda when a GPU is there, else cpu). On failure returns NULL
 * and a message saying what is wrong and what to do (e.g. no GPU: use --backend cpu). */
Engine *engine_create(const Plan *plan, const char *backend, char *err, size_t errlen);
void engine_free(Engine *e);
const char *engine_backend_name(const Engine *e);

/* Fill every local param from its canons' init rules (TP-invariant); zero grads and AdamW state. */
int engine_init_params(Engine *e, char *err, size_t errlen);

/* One micro-batch per dp rank: forward and backward, gradients accumulate. tokens/targets:
 * dp*micro_batch*seq values each; dp rank i takes rows [i*micro_batch*seq, (i+1)*micro_batch*seq)
 * (its tp ranks see the same rows). *loss: the mean over the dp ranks of their micro-batch's mean
 * loss. The plan's micro=last steps (dp gradient reduction) run on every grad_accum-th call only:
 * the Engine counts the calls since the last optimizer step. */
int engine_forward_backward(Engine *e, const int32_t *tokens, const int32_t *targets, float *loss,
                            char *err, size_t errlen);
/* Forward only (validation), on dp*micro_batch*seq tokens like engine_forward_backward. */
int engine_forward(Engine *e, const int32_t *tokens, const int32_t *targets, float *loss,
                   char *err, size_t errlen);
/* Clip by the global gradient norm, AdamW at optimizer step `step` (0-based), zero the grads.
 * Reports the pre-clip norm and the learning rate used. Returns 1, the update skipped and the
 * gradients zeroed, when the plan's norm_skip_above is set and the norm exceeds it (a spike). */
int engine_optimizer_step(Engine *e, int step, float *grad_norm, float *lr, char *err, size_t errlen);
float engine_lr_at(const Plan *p, int step);
/* Zero the accumulated gradients without an update (a step whose loss is not finite is skipped;
 * engine_optimizer_step itself skips, zeroes and returns -1 when the gradient norm is not finite,
 * with *grad_norm set to that norm). No collectives. */
int engine_discard_grads(Engine *e, char *err, size_t errlen);

/* Canonical (full, unsharded) tensors, rows*cols floats, gathered from / scattered to the ranks. */
int engine_get_canon(Engine *e, int canon, int slot, float *full);
int engine_set_canon(Engine *e, int canon, int slot, const float *full);

/* Copy a tensor of rank `rank` (a buffer, param or grad, by its plan name) to the host as fp32.
 * Activation buffers hold what the last pass left there (the arena reuses memory). */
int engine_read_tensor(Engine *e, int rank, const char *name, float *host, char *err, size_t errlen);

/* One rank's local param `param` (index into Plan.params) as that rank holds it, rows*cols floats:
 * slot SLOT_PARAM, SLOT_ADAM_M, SLOT_ADAM_V or SLOT_GRAD (zero=1 moments: the rank's dp shard
 * (zero_shard over the local param's elements), zeros elsewhere). Only ranks of this process. For
 * sharded checkpoints: each rank writes what it holds, nothing is gathered. */
int engine_read_local(Engine *e, int rank, int param, int slot, float *host, char *err, size_t errlen);
/* Multi-process mode: sum n doubles over the processes, every process gets the sum (a barrier too);
 * one process (threads): nothing to do. 0 or -1. */
int engine_world_sum(Engine *e, double *vals, int64_t n);
/* Each grid rank's seconds in training passes outside collective waits since the last call
 * (busy[nranks]: this process's ranks; the others' stay as they are); then reset. The number of
 * grid ranks. And a step boundary on every rank's flight record (runtime/flight.h). */
int engine_rank_busy(Engine *e, double *busy);
void engine_flight_step(Engine *e, int step);
/* Copy host fp32 values into a tensor (a buffer by its plan name, rows*cols floats) of rank `rank`,
 * or of every rank when rank is -1: the decode step's position and KV cache (runtime/decode.c). */
int engine_write_tensor(Engine *e, int rank, const char *name, const float *host, char *err, size_t errlen);

/* Collective bytes moved by one forward+backward, per rank (sum of allreduce/allgather payloads:
 * an allreduce counts elems * dtype size, an allgather its gathered rows x (tp*cols) * dtype size). */
int64_t engine_collective_bytes(const Engine *e);
/* The same figure from the plan alone (what an Engine of it would count). */
int64_t plan_collective_bytes(const Plan *p);

/* plan_overlap_report (how much compute each collective can overlap): runtime/overlap.h */

/* Pipeline stages (runtime/pipeline.c runs one Engine per stage, its plan being the stage's section).
 * engine_stage_pass: the forward (backward=0) or backward section alone, for one micro-batch whose
 * activations live in arena slot `slot`; tokens/targets as in engine_forward_backward (NULL: keep);
 * flags: STAGE_LAST runs the micro=last steps, STAGE_TRAIN marks a training pass (BOOST_PROFILE
 * times those, each backward counting as one pass); loss_per_dp (forward, may be NULL): each dp
 * rank's loss. engine_profile_label: a label for the BOOST_PROFILE table's header ("stage 1").
 * engine_set_slot: later tensor reads and writes see slot `slot`. engine_grad_sq: the sum of squares
 * engine_optimizer_step would take the norm of; engine_adamw_clipped: clip by a norm computed over
 * all stages, AdamW, zero the gradients. */
enum { STAGE_LAST = 1, STAGE_TRAIN = 2 };
void engine_profile_label(Engine *e, const char *label);
int engine_stage_pass(Engine *e, int backward, int slot, const int32_t *tokens, const int32_t *targets, int flags,
                      float *loss_per_dp, char *err, size_t errlen);
int engine_set_slot(Engine *e, int slot, char *err, size_t errlen);
int engine_grad_sq(Engine *e, double *sq);
int engine_adamw_clipped(Engine *e, int step, double global_norm, char *err, size_t errlen);
/* One pipeline stage's Engine in a process of a multi-process job: this process is grid rank `rank`
 * of the stage's size = dp*tp processes. backend "cpu" (mpirun): stage->mpi spans the stage's
 * processes (size 1: no MPI inside the stage); "cuda" (one process per GPU): the
 * stage's communicators split from stage->cuda's (runtime/cuda_pipe.h). The stage plan has pp=1. */
struct StageLink;
Engine *engine_create_stage(const Plan *plan, const char *backend, int rank, int size, const struct StageLink *stage,
                            char *err, size_t errlen);
/* The device side of buffer `name` of held rank `rank` in its current activation slot, for transfers
 * that do not go through the host: the backend's rank, the address, elements and dtype (PDT_*).
 * engine_backend_rank: held rank `rank`'s backend side (NULL: not held by this process). */
struct BackendRank;
struct BackendRank *engine_backend_rank(Engine *e, int rank);
int engine_tensor_span(Engine *e, int rank, const char *name, struct BackendRank **br, void **ptr, int64_t *elems, int *dtype,
                       char *err, size_t errlen);

#endif
