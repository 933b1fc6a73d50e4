/* cuda_internal.h: what the files of the CUDA backend (runtime/cuda*.c) share and nothing outside
 * them includes: a rank's state (BackendRank), the local rank group, the pipeline's state, the
 * loaded libraries and the process's module, the error macros, and each file's functions. */
#ifndef BOOST_CUDA_INTERNAL_H
#define BOOST_CUDA_INTERNAL_H

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "runtime/backend.h"
#include "runtime/cuda_api.h"
#include "runtime/cuda_device.h"
#include "runtime/cuda.h"
#include "runtime/cuda_pipe.h"
#include "common/nvrtc.h"
#include "common/files.h"   // defines: file_read_all
#include "common/env.h"     // defines: runtime_env, runtime_nccl_timeout
#include "runtime/world.h"

#define CUDA_MAX_TP 64
#define ALIGN_ELEMS 64            /* params and grads start on 256-byte boundaries */
#define SUMSQ_BLOCKS 256

/* The ranks of one Engine: an abortable barrier and each rank's published pointer. */
typedef struct {
    int tp;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int count, gen, aborted;
    CUdeviceptr ptr[CUDA_MAX_TP];
    CUdeviceptr dptrs;            /* device copy of ptr[] for the all-reduce kernel */
    BackendRank *ranks[CUDA_MAX_TP];
    CUdeviceptr step_ptrs;        /* [slots][nsteps][tp]: every rank's buffer of each all-reduce
                                   * and reduce-scatter step per arena slot, uploaded once */
} CudaGroup;

struct BackendRank {
    const Plan *p;
    int rank, tp;
    CUstream stream;              /* compute: GEMMs, kernels, copies */
    CUstream comm;                /* collectives (multi-process mode; rank 0's for the whole group in local mode) */
    int comm_used;                /* work went to `comm` since the rank last waited for it */
    CUevent *ev_ready, *ev_done;  /* per plan step (collectives): compute reached the issue / the collective is done */
    CUdeviceptr gemm_ptrs;        /* grouped GEMMs: [slots][3 * nmembers] pointer arrays ([B], [A], [C] per step), uploaded once at open */
    CUdeviceptr *gemm_ptrs_host;  /* the same on the host, to check the executor passes these pointers */
    int slot, nslots;             /* pipeline stages: the arena slot the activations are in, of nslots (plan's slots=K; 1 without) */
    size_t slot_bytes;            /* arena bytes per slot (slot k at arena + k * slot_bytes) */
    int64_t *rep_off, *rep_n;     /* ranks > 0: element ranges of grads in replicated (rep=1) blocks, */
    int nrep;                     /* left out of the gradient norm; nrep -1: too many, done on the host */
    void *blas;
    CUdeviceptr arena, io, params, grads, master, adam_m, adam_v, scratch;
    CUdeviceptr blas_ws;          /* cuBLAS's workspace, set before a graph capture (BOOST_CUDA_GRAPH) */
    CUdeviceptr adam_chunks;      /* multi-tensor AdamW: per chunk {element offset, count, flags} (int64); */
    int64_t adam_nchunks;         /* zero=1: {param offset, master offset, m/v offset, count, flags} */
    size_t io_bytes, scratch_bytes;
    int64_t nelems;               /* elements of params/grads (with alignment padding) */
    int64_t *param_off;           /* per param: element offset in params and grads */
    /* ZeRO-1 (zero=1, dp > 1): master and m/v hold this dp rank's shard only (zero_shard over the
     * param's elements, room for the largest shard ceil(n/dp) each); an fp32 param's master is the
     * param itself and stays whole. Else the same offsets and sizes as params/grads. */
    int64_t *master_off, *state_off;   /* per param: element offset in master, in adam_m/adam_v */
    int64_t nmaster, nstate;      /* elements of master, of adam_m and adam_v */
    /* ZeRO-2 (zero=2, dp > 1, pp 1; grad_work_layout): grads holds only the full-size
     * gradients the backward needs at once (nwork elements; param i's at gwork_off[i]), and gshard
     * this dp rank's shard of each reduced gradient (state_off's layout, nstate elements). Else
     * gwork_off is NULL, gshard 0 and grads has param_off's layout. */
    int64_t *gwork_off, nwork;
    CUdeviceptr gshard;
    CUdeviceptr gshard_sum;       /* zero=2: per param {its shard in gshard, dp_buf}
                                   * (grad_shard_sum_table) */
    CUdeviceptr *tptr;            /* per tensor */
    CudaGroup *group;
    ncclComm_t nccl_comm;         /* multi-process mode: the tp group's NCCL communicator (the world's at dp = 1) */
    ncclComm_t world_comm;        /* multi-process mode: the whole world (the same as nccl_comm at dp = 1) */
    ncclComm_t dp_comm;           /* dp > 1: this rank's dp group, split from the world (runtime/grid.h order) */
    int wrank, wsize;             /* multi-process mode: world rank and size (rank and tp at dp = 1) */
    int dp, dp_rank;              /* the dp degree and this rank's index in its dp group (1, 0 without dp) */
    struct CudaPipe *pipe;        /* a pipeline stage's rank (runtime/cuda_pipe.h): the pipeline's world
                                   * is watched in host waits and aborted with the rank's; else NULL */
    ncclComm_t ep_comm, edp_comm; /* ep > 1: this rank's ep and edp groups, split from the world (runtime/grid.h) */
    int ep, ep_rank;              /* the ep degree and this rank's ep rank (1, 0 without expert parallelism) */
    /* multi-process mode: each group's size (enum GridGroup) and this rank's index in it (its rank
     * in that group's NCCL communicator) */
    int gsize[GROUP_COUNT], gidx[GROUP_COUNT];
    CUdeviceptr ep_buf;           /* ep > 1: an out all-to-all's send staging (the token side's slots, empty ones zeroed) */
    size_t ep_bytes;
    int zero;                     /* zero=1 at dp > 1 (set at open): AdamW, its state and the gradient norm cover this dp rank's shard */
    CUdeviceptr dp_buf;           /* reduce-scatters' and dp steps' staging (bf16 wire, shard
                                   * padding), used on `comm` only */
    size_t dp_bytes;
    CUevent ev_dp_ready, ev_dp_done;   /* a dp step on `comm` in the compute stream's order */
    int64_t *sq_off, *sq_n;       /* zero=1: the gradient norm's element ranges, each added (sq_sign 1) or */
    int *sq_sign, nsq;            /* subtracted (-1: a replicated block that tp rank 0 counts) */
    int world;                    /* multi-process mode */
    int dead;                     /* the communicator was aborted after a failure: no more collectives */
    double nccl_timeout;          /* seconds a host wait may take in multi-process mode (BOOST_NCCL_TIMEOUT) */
    int graphs;                   /* BOOST_CUDA_GRAPH=1 (tp=1): passes replayed as CUDA graphs */
    int graph_seen[2], capturing; /* per pass key (0 forward, 1 forward+backward): passes run so far */
    CUgraphExec graph_exec[2];
    CUdeviceptr coll_buf;         /* multi-process mode: all-gathers' staging, host sums */
    size_t coll_bytes;
    int sync_steps;               /* BOOST_CUDA_SYNC=1: synchronise after every step */
    int opened;                   /* holds a reference on the shared module */
    char err[1024];
};

/* Multi-tensor AdamW (templates/runtime.cu): one launch, a block per chunk of a parameter. */
#define KERNEL_ADAMW_MULTI "adamw_multi_fp32_master_bf16"
#define KERNEL_ADAMW_SHARDED "adamw_multi_sharded"   /* zero=1: the state at its own offsets */
#define ADAMW_CHUNK 65536

#define CU(r, call) do { CUresult rc_ = (call); if (rc_ != 0) { \
    char m_[256]; snprintf(m_, sizeof m_, "%s (CUDA error %d) at %s:%d", cu_str(rc_), (int)rc_, __FILE__, __LINE__); \
    return rfail((r), "%s", m_); } } while (0)

static inline int64_t numel(const PlanTensor *t) { return t->rows * t->cols; }
static inline int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

/* Pipeline stages with one process per GPU (runtime/cuda_pipe.h, below): the stages' Engines get
 * the pipeline at their group set-up (cuda_stage_init) and split their communicators from its stage
 * communicator. */
struct CudaPipe {
    const Plan *plan;             /* stage 0's: where the world's NCCL id is exchanged */
    int wrank, wsize, me, r0, nlocal;   /* world rank and size; pipeline rank; stage rank of nlocal = dp*tp */
    ncclComm_t world, stage;      /* every process; the processes of pipeline rank me (made at the first Engine) */
    /* channel c = 2b (forward, stage b to b+1) or 2b+1 (backward): this (dp, tp) rank's pair of
     * processes on boundary b (NULL when not on it), and the stream of its transfers here */
    ncclComm_t chan[CUDA_PIPE_MAX_CHANS];
    CUstream chan_stream[CUDA_PIPE_MAX_CHANS];
    int nchans;
    CUstream stream;              /* sums and broadcasts over the world */
    CUdeviceptr buf;              /* their staging */
    size_t buf_bytes;
    struct { BackendRank *r; int slot; CUevent done; } *out;   /* transfers a compute step of (r, slot) must wait for */
    int nout, cap_out;
    CUevent *evs;                 /* this pass's events, recycled at cuda_pipe_flush */
    int nevs, cap_evs;
    int dead, held;               /* dead: aborted after a failure; held: a reference on the shared module */
    double timeout;
    char err[1024];
};

#define NCCL(r, call) do { ncclResult_t nrc_ = (call); if (nrc_ != 0) \
    return world_abort((r), "%s failed: %s (NCCL error %d)", #call, nccl.ncclGetErrorString(nrc_), (int)nrc_); } while (0)

static inline int nccl_dtype(int dt) { return dt == PDT_FP32 ? NCCL_FLOAT32_ : NCCL_BFLOAT16_; }

/* The launch parameters of kernel step k: pointers in catalog order (NULL when absent), then the
 * rank-dependent constants as long long. */
typedef struct { CUdeviceptr ptrs[10]; long long consts[PLAN_MAX_KEYS]; void *args[10 + PLAN_MAX_KEYS]; } LaunchArgs;

/* cuda_libs.c: the libraries, loaded once per process (api_load, nccl_load under their
 * pthread_once; *_ok 0: *_why says why not) */
extern CudaApi api;
extern pthread_once_t api_once;
extern char api_why[512];
extern int api_ok;
void api_load(void);
extern NcclApi nccl;                      /* multi-process mode only */
extern pthread_once_t nccl_once;
extern char nccl_why[512];
extern int nccl_ok;
void nccl_load(void);
const char *cu_str(CUresult rc);

/* cuda_jit.c: the device context and module shared by the process's ranks (under shared_mu) */
/* one kernel of the module: its name (heap, any length), function and raised dynamic shared
 * memory limit (dyn_max; 0: the 48 KiB every function gets) */
typedef struct { char *name; CUfunction fn; int64_t dyn_max; } FnEntry;
typedef struct {
    CUcontext ctx;
    CUdevice dev;
    CUmodule mod;
    char arch[16];
    int smem_optin;            /* the device's most shared memory a block may opt in to (bytes) */
    int max_pitch;             /* cuMemcpy2D's largest pitch on this device (bytes) */
    char src_path[1100];
    FnEntry *fns; int nfns, capfns;
    int users;
} CudaShared;
extern pthread_mutex_t shared_mu;
extern CudaShared shared;

/* cuda_jit.c */
int ctx_set(BackendRank *r, const char *what);
int ctx_set_err(char *err, size_t errlen, const char *what);
int shared_open(const Plan *p, char *err, size_t errlen);
void shared_close(void);
CUfunction get_fn(const char *name);
int launch_on(BackendRank *r, CUstream s, const char *name, int64_t grid, int64_t block, int64_t smem, void **args);
int launch(BackendRank *r, const char *name, int64_t grid, int64_t block, int64_t smem, void **args);
int kernel_args(BackendRank *r, const KernelArgs *k, void **ops, LaunchArgs *la);

/* cuda.c */
int rfail(BackendRank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int after_step(BackendRank *r, const char *what);

/* cuda_mem.c */
void cuda_rank_close(BackendRank *r);
CUdeviceptr operand_ptr(const BackendRank *r, const Operand *op);
void point_acts(BackendRank *r, int k);
void own_range(const BackendRank *r, int64_t n, int64_t *lo, int64_t *hi);
void state_index(const BackendRank *r, int i, int64_t j, int64_t lo, int64_t *mi, int64_t *si);
int adam_table(BackendRank *r, CUresult *cu);
int sq_ranges(BackendRank *r);
int grad_work_layout(BackendRank *r);
/* zero=2, after dp_buf is allocated: gshard_sum, the two-pointer table per param with which a
 * reduce-scatter adds the reduced shard it staged at dp_buf to the param's shard in gshard
 * (boost_allreduce_fp32 over the two; every micro-batch's at grad_accum > 1). 0, or -1. */
int grad_shard_sum_table(BackendRank *r);
BackendRank *cuda_rank_open(const Plan *p, int rank, int tp, char *err, size_t errlen);
int copy_2d(BackendRank *r, CUstream s, CUdeviceptr dst, size_t dpitch, CUdeviceptr src, size_t spitch,
                   size_t width, size_t rows);
int read_back(BackendRank *r, void *host, CUdeviceptr src, size_t bytes, const char *what);
int cuda_to_host(BackendRank *r, int t, float *host);
int cuda_from_host(BackendRank *r, int t, const float *host);
int cuda_set_i32(BackendRank *r, int t, const int32_t *host);
int cuda_zero_grads(BackendRank *r);
int cuda_state_to_host(BackendRank *r, int param, int slot, float *host);
int cuda_state_from_host(BackendRank *r, int param, int slot, const float *host);
int cuda_arena_slot(BackendRank *r, int slot);

/* cuda_world.c */
int nccl_exchange_id(const Plan *p, int rank, ncclUniqueId *id, char *path, size_t pathlen, char *err, size_t errlen);
int world_abort(BackendRank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int poll_stream(CUstream s, const ncclComm_t *cs, int nc, double timeout, const char *what, CUresult *cu_err,
                       char *why, size_t n);
int host_wait(BackendRank *r, CUstream s, const char *what);
int rank_idle(BackendRank *r, const char *what);
int cuda_world_allreduce_host(BackendRank *r, void *host, int64_t n, int is_f64);
int cuda_group_init(BackendRank **ranks, int tp, char *err, size_t errlen);
int cuda_stage_init(BackendRank **ranks, const Grid *grid, const StageLink *stage, char *err,
                    size_t errlen);

/* cuda_pipe.c */
int pipe_world(CudaPipe *cp, char *err, size_t errlen);

/* cuda_coll.c */
int cuda_collective(BackendRank *r, const CollArgs *c, const CollPtrs *ptr);
int cuda_collective_issue(BackendRank *r, int step, const CollArgs *c, const CollPtrs *ptr);
int cuda_coll_wait(BackendRank *r, int step);

/* cuda_graph.c */
int cuda_pass_begin(BackendRank *r, int key);
int cuda_pass_end(BackendRank *r, int key);

/* cuda_gemm.c */
int cuda_gemm(BackendRank *r, const GemmArgs *g, void *A, void *B, void *C);
int cuda_grouped_gemm(BackendRank *r, int n, const GemmArgs *g, void **A, void **B, void **C);

/* cuda_adamw.c */
int cuda_adamw(BackendRank *r, float lr, float grad_scale, int t_step);
double cuda_grad_sq_norm(BackendRank *r);

#endif
