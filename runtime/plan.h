/* plan.h: the runtime's in-memory form of plan.txt (docs/plan-format.md is the contract) and the
 * loader's API. The loader checks the version and every line, so the executor and the backends
 * can trust what they get. Values written "a%rb" in the file are kept as (a, b): a + rank*b. */
#ifndef BOOST_PLAN_H
#define BOOST_PLAN_H

#include <stdint.h>
#include <stddef.h>
#include "common/train_settings.h"   // defines: DATA_MAX_SOURCES
#include "common/collective_catalog.h"   // defines: COLLECTIVE_CATALOG, CK_*

#define PLAN_VERSION 1
#define PLAN_NAME_LEN 96
#define PLAN_MAX_KEYS 40

enum PlanDType { PDT_BF16, PDT_FP32, PDT_I32 };
enum TensorKind { TK_ACT, TK_INPUT, TK_OUTPUT, TK_PARAM, TK_GRAD };

/* A number that may depend on the rank: value = base + rank * per_rank. The loader bounds base and
 * per_rank to 2^50 in magnitude (kernel constants to 2^31) and ranks are below 4096: it never wraps. */
typedef struct { int64_t base, per_rank; } RankInt;
static inline int64_t rank_int(RankInt v, int rank) { return v.base + (int64_t)rank * v.per_rank; }

typedef struct {
    char name[PLAN_NAME_LEN];
    int kind;                 /* enum TensorKind */
    int dtype;                /* enum PlanDType */
    int64_t rows, cols;       /* 1-D tensors: rows = 1 */
    int64_t offset;           /* TK_ACT: byte offset in the activation arena at dtype */
    int live0, live1;         /* TK_ACT: first and last step index touching it */
    int param;                /* TK_PARAM/TK_GRAD: index into Plan.params; else -1 */
} PlanTensor;

typedef struct {
    char name[PLAN_NAME_LEN];
    int64_t rows, cols;       /* full shape */
    int init;                 /* 0 normal, 1 ones, 2 zeros */
    double std;
    uint64_t seed;
    int decay;
} PlanCanon;

typedef struct {
    int canon;                /* index into Plan.canons */
    RankInt r0, r1, c0, c1;   /* block of the canon (rows r0..r1-1, cols c0..c1-1) */
    RankInt lr, lc;           /* where it goes in the local param */
    int rep;                  /* 1: every rank holds this block (count once, save from rank 0) */
    int ep;                   /* expert parallelism: only ranks of ep rank `ep` hold it (dp_rank % ep); -1: all ranks */
} PlanPart;

typedef struct {
    char name[PLAN_NAME_LEN];
    int tensor;               /* index of its TK_PARAM tensor */
    int grad;                 /* index of its TK_GRAD tensor (d.NAME) */
    int64_t rows, cols;
    int first_part, nparts;   /* into Plan.parts */
    int decay;                /* decay of its canons (all parts agree) */
} PlanParam;

/* An operand: tensor index plus an element offset (which may depend on the rank). */
typedef struct { int tensor; RankInt off; } Operand;

/* Step kinds: the compute steps and markers, then one per row of the collective catalog
 * (common/collective_catalog.h) in its order: ST_ALLREDUCE, ST_ALLGATHER, ST_REDUCE_SCATTER
 * (a group's sum, each member keeping its shard), ST_GATHER_SHARDS (zero>0, optimizer section:
 * each dp rank's updated shard to every rank), ST_ALLTOALL (expert parallelism). */
enum StepKind {
    ST_GEMM, ST_BATCHED_GEMM, ST_GROUPED_GEMM, ST_KERNEL,
    ST_SAVE, ST_RECOMPUTE_BEGIN, ST_RECOMPUTE_END, ST_OPTIMIZER,
#define PLAN_ST_ENUM(id, word, operands, groups, sections, phases, what) ST_##id,
    COLLECTIVE_CATALOG(PLAN_ST_ENUM)
#undef PLAN_ST_ENUM
    ST_COUNT
};
#define ST_COLL_FIRST ST_ALLREDUCE
/* The collective kind (CK_*) of a step kind, -1 when it is not a collective. */
static inline int step_coll_kind(int kind) {
    return kind >= ST_COLL_FIRST && kind < ST_COUNT ? kind - ST_COLL_FIRST : -1;
}

/* Expert parallelism: the slots of an ep all-to-all (docs/plan-format.md, "alltoall"). The token side
 * holds E*C slot rows, expert-major (expert e's C slots at rows e*C..); the owner of experts
 * [p*El, (p+1)*El) (El = E/ep) holds El*ep*C rows, local expert j's slots from source q at rows
 * (j*ep + q)*C... Slot s of a source is filled when its map (moe_src) entry is >= 0; the router fills
 * each expert's slots from its first one, so an expert's filled slots are its first n_e. */
static inline int64_t ep_owner_row(int64_t j, int q, int ep, int64_t C) { return (j * ep + q) * C; }

/* zero=1: the shard of an n-element tensor that dp rank d of dp owns: [*lo, *hi), s = ceil(n/dp). */
static inline void zero_shard(int64_t n, int d, int dp, int64_t *lo, int64_t *hi) {
    int64_t s = (n + dp - 1) / dp, a = (int64_t)d * s, b = a + s;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

typedef struct {
    int ta, tb;
    int64_t m, n, k, lda, ldb, ldc, sA, sB, sC, batch;
    double alpha, beta;
    Operand A, B, C;
} GemmArgs;

/* The kernel catalog (docs/plan-format.md): operand o (0-based, launch order) of KIND: its key (into
 * key[n]), its default storage dtype (PDT_*) and whether it is optional. Returns 0, 1 when o is past
 * the last operand, -1 when KIND is not in the catalog. */
int plan_catalog_operand(const char *kind, int o, char *key, size_t n, int *dtype, int *optional);
/* The catalog's i-th kind, NULL past the last. */
const char *plan_catalog_kind(int i);
/* A step kind's name as plan.txt spells it (enum StepKind), "step" when out of range. */
const char *plan_step_kind_name(int kind);

/* A kernel's operands (in catalog order) and constants, as key/value pairs. */
typedef struct {
    char kind[32];            /* catalog kind, e.g. "online_norm_fwd" */
    char name[PLAN_NAME_LEN]; /* procedural name in kernels.cu */
    int64_t grid, block, smem;
    int nops;                 /* operands in the order of the line */
    char op_key[PLAN_MAX_KEYS][16];
    Operand op[PLAN_MAX_KEYS];
    int nconst;
    char const_key[PLAN_MAX_KEYS][16];
    RankInt const_int[PLAN_MAX_KEYS];    /* integer constants (may carry %r) */
    double const_val[PLAN_MAX_KEYS];     /* the same constant as a double */
} KernelArgs;

typedef struct {
    int kind;                 /* CK_* (common/collective_catalog.h): which collective */
    Operand buf, src, dst;    /* allreduce: buf; allgather: src, dst */
    int64_t elems;            /* allreduce */
    int64_t rows, cols, ld_src, ld_dst;   /* allgather */
    int dtype, bwd;           /* bwd: dir=bwd */
    int group;                /* enum GridGroup (runtime/grid.h): tp (the default), dp, ep, edp */
    int avg;                  /* op=avg: the sum over the group divided by its size */
    int zero_grad;            /* reduce_scatter group=dp of a gradient in a zero plan: ZeRO's
                               * gradient reduction (zero=2: the rank keeps only its shard) */
    double scale;             /* scale=S (group=edp expert gradients): the sum times S; 0: none */
    Operand map;              /* ST_ALLTOALL: the token side's [1, E*C] slot -> token table (fp32, < 0: empty) */
    int64_t experts, capacity;/* ST_ALLTOALL: E and C (rows = E*C; cols = the row width) */
    int way;                  /* ST_ALLTOALL: 0 out (token side -> owners), 1 back */
    int last_micro;           /* micro=last: runs only on the last micro-batch of an optimizer step */
    int bucket;               /* bucket=K (dp gradient buckets, for readers and the report); -1 none */
    char tag[PLAN_NAME_LEN];
} CollArgs;

typedef struct {
    int kind;                 /* enum StepKind */
    int section;              /* 0 forward, 1 backward, 2 optimizer */
    int line;                 /* line in plan.txt, for messages */
    GemmArgs gemm;            /* ST_GEMM, ST_BATCHED_GEMM */
    int first_member, nmembers;   /* ST_GROUPED_GEMM: into Plan.members */
    KernelArgs *kernel;       /* ST_KERNEL (owned by the plan) */
    CollArgs coll;            /* ST_ALLREDUCE, ST_ALLGATHER */
    int marker_tensor;        /* ST_SAVE */
    char chunk[PLAN_NAME_LEN];/* ST_RECOMPUTE_* */
} PlanStep;

typedef struct {
    /* header */
    char model_name[PLAN_NAME_LEN], family[16];
    int hidden, layers, heads, kv_heads, head_dim, ffn, vocab;
    double eps, rope_theta;
    char run_name[PLAN_NAME_LEN], layout[16], gpu[16], arch[16];
    int tp, pp, dp, micro_batch, seq, grad_accum, dtype, online_rmsnorm, group_linears, checkpoint;
    int zero;                 /* ZeRO stage of the run line (1: AdamW state sharded over dp; 2: grads too) */
    int ep;                   /* expert-parallel degree of the run line (ep=N, default 1; divides dp) */
    int steps, warmup, eval_every;
    int max_bad_steps;        /* stop after this many skipped (non-finite) updates in a row (default 5) */
    int spike_window;         /* loss spikes (runtime/train.c): window of good steps, 0: off */
    double spike_z;           /* z-score over the window above which a loss or norm is a spike */
    int spike_rollback_after;    /* spikes in a row that roll back */
    int spike_max_rollbacks;     /* rollbacks allowed */
    double norm_skip_above;   /* set by the trainer before each update, not read from the file: a
                                 gradient norm above it skips the update (0: no limit) */
    double lr, min_lr, beta1, beta2, adam_eps, weight_decay, clip;
    uint64_t seed;
    char data_path[512];
    double val_fraction;
    char tokenizer_path[512]; /* data line's tokenizer= ("" for none: text is bytes) */
    uint32_t tokenizer_crc;   /* its tokenizer_crc32c=: the file's CRC-32C when the plan was made */
    int nsources;             /* a data mixture: the data line's sources=N, then N `source` lines */
    struct { char path[512]; double weight; } sources[DATA_MAX_SOURCES];   /* weight > 0 */
    int64_t arena_bytes;
    int arena_slots;          /* `arena act ... slots=K` (pipeline stages): K copies of the arena, one per micro-batch in flight; 1 by default */
    /* tables */
    PlanTensor *tensors; int ntensors;
    PlanCanon *canons;   int ncanons;
    PlanParam *params;   int nparams;
    PlanPart *parts;     int nparts;
    PlanStep *steps_;    int nsteps;       /* forward, backward, then optimizer */
    GemmArgs *members;   int nmembers;     /* grouped_gemm members */
    int tokens, targets, loss;             /* tensor indices of the inputs and the output */
    char path[512];
} Plan;

/* Load and check plan.txt. Returns NULL with a message "PATH:LINE: what is wrong" in err. */
Plan *plan_load(const char *path, char *err, size_t errlen);
/* The same from the text of a plan (modified in place and freed here; malloc'ed by the caller). */
Plan *plan_parse_text(const char *path, char *text, char *err, size_t errlen);
void plan_free(Plan *p);
int plan_find_tensor(const Plan *p, const char *name);   /* -1 when absent */
/* Set the plan's field of a training setting by its name in common/train_settings.h (steps, lr,
 * min_lr, ..., val_fraction); v is already checked against the table's bounds. */
void plan_set_train_setting(Plan *p, const char *name, double v);
int plan_find_canon(const Plan *p, const char *name);
size_t plan_dtype_size(int dtype);

/* Kernel line accessors (runtime/plan.c). kernel_op: index into k->op of operand `key`, -1 when
 * absent. kernel_int: integer constant at `rank` (a%rb forms resolved), dflt when absent.
 * kernel_num: the constant as a double, dflt when absent. */
int kernel_op(const KernelArgs *k, const char *key);
int kernel_has(const KernelArgs *k, const char *key);
int64_t kernel_int(const KernelArgs *k, const char *key, int rank, int64_t dflt);
double kernel_num(const KernelArgs *k, const char *key, double dflt);

/* The GEMM FLOPs of one step (2*m*n*k per GEMM, times the batch; grouped: summed over the members);
 * 0 for every other kind. */
double plan_step_flops(const Plan *p, const PlanStep *st);
/* Pipeline plans (pp > 1, docs/plan-format.md "Pipeline stages"): the pipeline line's settings, one
 * Plan per stage (the header plus that stage's section, line numbers those of the file, pp set to 1:
 * the stage's Engine runs its dp x tp slice), and each pipeline rank's schedule as steps. */
#define PLAN_MAX_STAGES 64
enum { PS_FORWARD, PS_BACKWARD, PS_SEND, PS_RECV };
/* One schedule line: forward/backward of stage vs on micro-batch `micro` in activation slot `slot`,
 * or send/recv of activation buffer `buf` in direction bwd (0 fwd, 1 bwd) with pipeline rank peer. */
typedef struct { int kind, vs, micro, slot, bwd, peer, line; char buf[128]; } PlanSchedStep;
typedef struct {
    int pp, v, nv, m;             /* pipeline ranks, virtual stages each, nv = pp*v stages, micro-batches */
    int moe_aux;                  /* loss_terms=moe_aux */
    Plan *stage[PLAN_MAX_STAGES]; /* by stage (virtual stage k runs on pipeline rank k % pp) */
    PlanSchedStep *sched[PLAN_MAX_STAGES];   /* by pipeline rank, nsched[r] steps each */
    int nsched[PLAN_MAX_STAGES];
} PlanStages;
/* 1 when the file at path is a pipeline plan (a `pipeline` line in its header), 0 when not (or not
 * a text plan: plan_load says why), -1 when it cannot be opened. */
int plan_is_pipeline(const char *path);
/* NULL with a "file:line: ..." message in err when a section, a schedule line or a stage plan is
 * wrong. plan_stages_free frees the plans and schedules still in it (a caller that keeps one sets
 * its pointer to NULL first). */
PlanStages *plan_stages_load(const char *path, char *err, size_t errlen);
void plan_stages_free(PlanStages *ps);
#endif
