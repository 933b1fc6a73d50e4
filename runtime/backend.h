/* backend.h: what a backend implements for the executor (runtime/exec.c). The executor walks the
 * plan's steps and resolves operands to pointers; a backend owns the memory of each rank and runs
 * the step kinds. cpu.c is the fp32 reference; cuda.c runs the same steps on a GPU. */
#ifndef BOOST_BACKEND_H
#define BOOST_BACKEND_H

#include "runtime/plan.h"
#include "runtime/grid.h"

typedef struct BackendRank BackendRank;   /* one rank's memory and streams, backend-defined */

/* A pipeline stage's Engine in a multi-process job (runtime/pipeline.c): where its ranks find each
 * other. mpi: the stage's processes (cpu under mpirun, cpu_stage_init); cuda: the pipeline, whose stage communicator the ranks split
 * their own from (runtime/cuda_pipe.h). */
struct CommMpi;
struct CudaPipe;
typedef struct StageLink { struct CommMpi *mpi; struct CudaPipe *cuda; } StageLink;

/* A collective step's operands as pointers; NULL where its kind has none (the catalog row's
 * operand bits: buf, or src and dst, and map for alltoall: the token side's moe_src). */
typedef struct { void *buf, *src, *dst; const void *map; } CollPtrs;

typedef struct Backend {
    const char *name;
    int elem_bytes_fp32_only;  /* 1: every tensor is fp32 (CPU); 0: tensors have their dtype */
    /* Create tensor-parallel rank `rank` of `tp` (one of them per dp rank): allocate the arena, inputs/outputs, params, grads, AdamW state. */
    BackendRank *(*rank_open)(const Plan *p, int rank, int tp, char *err, size_t errlen);
    void (*rank_close)(BackendRank *r);
    /* Base pointer of tensor t (device pointer on CUDA) and its element size there. */
    void *(*tensor_ptr)(BackendRank *r, int t);
    int (*gemm)(BackendRank *r, const GemmArgs *g, void *A, void *B, void *C);
    int (*grouped_gemm)(BackendRank *r, int n, const GemmArgs *g, void **A, void **B, void **C);
    int (*kernel)(BackendRank *r, const KernelArgs *k, void **ops);
    /* Collectives (common/collective_catalog.h; CollArgs.kind is the row, CollArgs.group the
     * group). coll_kinds: bit 1 << CK_* for every kind `collective` runs; the engine refuses a plan
     * with any other at open. `collective` runs one and completes it before the next step (the
     * ranks of a group synchronise). zero>0 plans: the backend keeps AdamW state (and at zero=2
     * gradients) for its dp shard only (zero_shard in runtime/plan.h), and adamw/grad_sq_norm
     * cover the shard. */
    unsigned coll_kinds;
    int (*collective)(BackendRank *r, const CollArgs *c, const CollPtrs *ptr);
    /* Host <-> backend copies of whole tensors as fp32 (params, grads, inputs, loss). */
    int (*to_host)(BackendRank *r, int t, float *host);
    int (*from_host)(BackendRank *r, int t, const float *host);
    int (*set_i32)(BackendRank *r, int t, const int32_t *host);
    /* AdamW over all local params with the given scalars; grad scaled by `grad_scale` first
     * (clipping). Adam state lives in the backend. slot 1/2 = m/v for checkpoints. */
    int (*adamw)(BackendRank *r, float lr, float grad_scale, int t_step);
    double (*grad_sq_norm)(BackendRank *r);   /* sum of squares of local grads, rep=1 parts only on rank 0 */
    int (*zero_grads)(BackendRank *r);
    int (*state_to_host)(BackendRank *r, int param, int slot, float *host);   /* slot 1 m, 2 v */
    int (*state_from_host)(BackendRank *r, int param, int slot, const float *host);
    const char *(*last_error)(BackendRank *r);
    /* Optional (NULL: nothing to do): called once after all ranks are open, so the ranks can find
     * each other for collectives. */
    int (*group_init)(BackendRank **ranks, int tp, char *err, size_t errlen);
    /* Optional, used instead of group_init and grid_init for a pipeline stage's Engine
     * (engine_create_stage with a StageLink): grid_init's work over the stage's grid (pp=1), with
     * the stage's communicators. */
    int (*stage_init)(BackendRank **ranks, const Grid *grid, const StageLink *stage, char *err,
                      size_t errlen);
    /* Optional, used instead of group_init when set: ranks[0..grid->world) indexed by grid rank (all
     * in this process, or in multi-process mode only this process's rank set); make one communicator
     * per group of the grid (tp groups, dp groups). A collective runs on the group its CollArgs.group
     * names. A backend without it trains dp=1 only. */
    int (*grid_init)(BackendRank **ranks, const Grid *grid, char *err, size_t errlen);
    /* Optional, multi-process mode only (one rank per process; the Engine then passes group_init an
     * array where only this process's rank is set): sum n values of a host buffer (double when
     * is_f64, else float) over the processes; every process gets the sum. */
    int (*world_allreduce_host)(BackendRank *r, void *host, int64_t n, int is_f64);
    /* Optional, for overlapping collectives with compute (NULL, or a kind missing from
     * coll_issue_kinds: the engine calls `collective`, complete before the next step, as on the
     * CPU). `step` is the collective's index in Plan.steps_. collective_issue starts the collective
     * after the work issued so far and returns without waiting; coll_wait(step) makes the work
     * issued after it on this rank wait for that collective (on a device: a stream-side wait, not
     * a host wait). The engine calls coll_wait before the first later step that touches the
     * collective's memory (its arena range, or any tensor aliasing it) and, at the end of a pass,
     * for every collective still outstanding. A gather_shards issued after the sharded AdamW update
     * is waited for before the first step of the next pass that touches its parameter (else at
     * that pass's end), and before any other use of the rank (host reads and writes, the next
     * optimizer step, closing it). */
    unsigned coll_issue_kinds;
    int (*collective_issue)(BackendRank *r, int step, const CollArgs *c, const CollPtrs *ptr);
    int (*coll_wait)(BackendRank *r, int step);
    /* Optional: a pass (key 0 forward, 1 forward+backward) as one replayable unit (CUDA graphs,
     * BOOST_CUDA_GRAPH=1). pass_begin returns 1 when the backend ran the pass's steps itself (a
     * replay: the executor skips them), 0 when the executor issues them (the backend may record
     * them), -1 on failure; pass_end follows the issued steps. The batch is uploaded before. */
    int (*pass_begin)(BackendRank *r, int key);
    int (*pass_end)(BackendRank *r, int key);
    /* Optional, pipeline stages (plans with `arena act ... slots=K`): the activation buffers live in
     * arena copy `slot` (0..K-1) from now on. NULL: the backend cannot run pp > 1 plans. */
    int (*arena_slot)(BackendRank *r, int slot);
} Backend;

extern const Backend backend_cpu;
extern const Backend backend_cuda;     /* runtime/cuda.c; rank_open fails clearly without a GPU */

#endif
