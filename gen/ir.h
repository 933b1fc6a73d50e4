/* ir.h: the generator's intermediate form: tensors with shapes, dtypes and parallel states, and
 * the ordered steps of one forward + backward pass (the schedule) over them. The layout builders
 * (gen/build.c) fill a Graph; the passes (backward, checkpoint, memplan) extend it; the plan
 * writer and the report read it. The cost model may read a finished Graph too: every field that
 * matters to it (GEMM shapes, collective bytes, layer, section) is documented here.
 *
 * Reading a finished Graph (graph_build): steps[0 .. nfwd_steps-1] are the forward section,
 * steps[nfwd_steps .. nsteps-1] the backward one (ops with section SEC_RECOMPUTE sit between
 * OP_RC_BEGIN/OP_RC_END markers). GEMM family: g (or members) with local m, n, k, batch; FLOPs are
 * 2*m*n*k*batch per rank. Collectives: ir_coll_kind(o) >= 0 (a catalog row), bytes per rank, dir,
 * layer (-1: embedding and tail). Kernels: k.kind and k.val[] constants (rows, cols, ...). Shapes
 * are per rank; multiply by tp for model totals of sharded work.
 * This header declares the IR's types and gen/ir.c's building blocks; each pass declares its entry
 * in a header of its own (gen/build.h, gen/backward.h, ..., gen/pipeline.h: graph_build). */
#ifndef BOOST_IR_H
#define BOOST_IR_H

#include <setjmp.h>
#include <stdint.h>
#include <stddef.h>
#include "gen/model.h"
#include "gen/kernels.h"
#include "common/collective_catalog.h"

/* A number that may depend on the tensor-parallel rank: base + rank * per_rank ("a%rb" in the plan). */
typedef struct { int64_t base, per_rank; } RInt;
static inline RInt rint_c(int64_t v) { RInt r = {v, 0}; return r; }
static inline RInt rint_r(int64_t base, int64_t per_rank) { RInt r = {base, per_rank}; return r; }

/* Parallel state of a tensor over the TP group. */
enum PState {
    PS_REPLICATED,  /* every rank holds the same full values */
    PS_SHARD0,      /* every rank holds its block of rows (params: row-parallel weights) */
    PS_SHARD1,      /* every rank holds its block of columns */
    PS_PARTIAL,     /* every rank holds a summand; the full value is the sum over ranks */
};

enum TensorRole { TR_ACT, TR_PARAM, TR_INPUT, TR_OUTPUT, TR_GRAD /* activation gradient */,
                  TR_PARAM_GRAD /* d.P in the runtime's grad arena, not a buffer */ };
enum IrDType { IR_BF16, IR_FP32, IR_I32 };

typedef struct {
    char name[96];
    int64_t rows, cols;      /* local (per-rank) shape; vectors are 1 x N */
    int dtype;               /* enum IrDType */
    int role;                /* enum TensorRole */
    int state;               /* enum PState as the forward builder left it */
    int param;               /* TR_PARAM: index into Graph.params; else -1 */
    int grad;                /* gradient tensor (activation grads: TR_GRAD buffer), -1 if none yet */
    int stat_grad;           /* for an all-reduce buffer carrying online-norm statistics: the
                                [1 x M] fp32 gradient of those statistics; -1 otherwise */
    int keep;                /* the builder marks residual-stream buffers and norm statistics:
                                checkpointing keeps them */
    int has_stat;            /* an all-reduce buffer carrying online-norm statistics: rows x cols
                                elements, the activations [rows, cols-1] first (ld cols-1, so
                                GEMMs keep aligned leading dimensions), then the rows statistics
                                (a dense vector at element rows*(cols-1)): ir_stat_* below */
    int saved;               /* checkpoint pass: 1 = kept for backward, 0 = dropped and recomputed */
    int recompute_of;        /* an rc.* tensor: the forward tensor it recomputes; else -1 */
    /* memory plan (activation arena; TR_ACT and TR_GRAD only) */
    int live0, live1;        /* first and last step index that touches it; -1 if never */
    int64_t offset;          /* byte offset in the arena */
    /* backward bookkeeping: rectangles of this gradient already written */
    int nwritten; int64_t (*written)[4];   /* row0, rows, col0, cols */
} Tensor;

/* A view of a tensor: element offset (may depend on the rank) and leading dimension. */
typedef struct { int t; RInt off; int64_t ld; } Opnd;

typedef struct {
    char name[96];
    int64_t rows, cols;
    int init;                /* 0 normal, 1 ones, 2 zeros */
    double std;
    uint64_t seed;
    int decay;
} Canon;

typedef struct {
    int canon;
    RInt r0, r1, c0, c1;     /* block of the canon */
    int64_t lr, lc;          /* where the block goes in the local param */
    int rep;                 /* every rank holds this block */
    int ep;                  /* expert parallelism: only the ranks of ep rank `ep` hold this block; -1: every rank */
} Part;

typedef struct {
    char name[96];
    int tensor;              /* its TR_PARAM tensor */
    int64_t rows, cols;
    int first_part, nparts;
    int dtype;
} Param;

/* Step kinds. The collectives come from the catalog (common/collective_catalog.h): one kind per
 * row, OP_<ID> = OP_COLL_FIRST + CK_<ID> (OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCE_SCATTER,
 * OP_GATHER_SHARDS, OP_ALLTOALL, ...); ir_coll_kind gives an op's CK_* back. */
enum OpKind {
    OP_GEMM, OP_BATCHED_GEMM, OP_GROUPED_GEMM, OP_KERNEL,
    OP_TP_COPY,              /* no step: identity forward over a replicated input of a
                                column-parallel op; its backward dual is an allreduce of the grad */
    OP_SAVE, OP_RC_BEGIN, OP_RC_END,
    OP_OPTIMIZER,            /* the optimizer section's `optimizer adamw` line (Graph.opt) */
    OP_COLL_FIRST,
#define IR_COLL_OP(id, word, operands, groups, sections, phases, what) \
    OP_##id = OP_COLL_FIRST + CK_##id,
    COLLECTIVE_CATALOG(IR_COLL_OP)
#undef IR_COLL_OP
    OP_COLL_END = OP_COLL_FIRST + CK_COUNT
};
/* OP_ALLTOALL: expert parallelism, routed slots to their experts' ep ranks and back (src, dst,
 * map = the token side's moe_src, experts, rows = C, cols, way). OP_REDUCE_SCATTER: gen/dp.c's dp
 * buckets at zero > 0. OP_GATHER_SHARDS: the optimizer section's ZeRO parameter gathers. */
enum Section { SEC_FWD, SEC_BWD, SEC_RECOMPUTE, SEC_OPT /* the optimizer section (Graph.opt) */ };
/* A collective's reduction (Op.reduce): none (gathers, all-to-all), the sum, the mean. */
enum CollReduce { RED_NONE, RED_SUM, RED_AVG };

typedef struct {
    int ta, tb;
    int64_t m, n, k;
    Opnd A, B, C;            /* lda/ldb/ldc are the operands' ld */
    int64_t sA, sB, sC, batch;
    double alpha, beta;
} Gemm;

#define OP_MAX_OPND 12

typedef struct {
    int kind;                /* enum OpKind */
    int section;             /* enum Section */
    int layer;               /* decoder layer, -1 for the embedding and the tail */
    char chunk[48];          /* segment between two collectives, e.g. "L0.attn_A" */
    /* gemm family: one Gemm (batch = 1 for OP_GEMM); grouped: members */
    Gemm g;
    Gemm *members; int nmembers;
    /* kernel: instance + operands in catalog order */
    KernelInst k;
    int nops; char opkey[OP_MAX_OPND][12]; Opnd ops[OP_MAX_OPND];
    unsigned out_mask;       /* bit i: ops[i] is written */
    int ostate[OP_MAX_OPND]; /* written operand: its parallel state + 1; read-only operand: 0 */
    int aux;                 /* rule-specific tensor (bottleneck_act: the rho it undoes; xent_combine: logits) */
    unsigned bwd_needs;      /* bit i: the backward rule reads ops[i]'s forward value */
    /* collectives (kinds from the catalog: the row's operand bits say which of buf, src, dst and
     * map the op uses, ir_coll_rw which it reads and writes) */
    Opnd buf, src, dst;      /* allreduce, reduce_scatter, gather_shards: buf; allgather: src,
                                dst */
    int64_t elems, rows, cols;
    int dtype, dir;          /* dir: 0 fwd, 1 bwd */
    char tag[96];
    int64_t bytes;           /* payload per rank: elems (or rows*cols*t for allgather) * dtype size */
    int group;               /* enum CollGroup: CG_TP; CG_DP (gen/dp.c: gradient buckets, op=avg,
                                run on the last micro-batch of an optimizer step only; the optimizer
                                section's gather_shards); CG_EP (OP_ALLTOALL); CG_EDP (dp/ep ranks
                                holding the same experts: expert gradients, op=sum scale=1/dp) */
    int reduce;              /* enum CollReduce: what a reducing collective computes (op=sum|avg) */
    int bucket;              /* dp all-reduces: the bucket index */
    double scale;            /* group=edp all-reduces: the sum is multiplied by it (1/dp); 0: none */
    int map;                 /* OP_ALLTOALL: the [1, E*C] slot -> token table of the token side (-1 < 0: empty slot) */
    int64_t experts;         /* OP_ALLTOALL: experts E of the layer (rows = C slots per expert and source) */
    int way;                 /* OP_ALLTOALL: 0 out (token side [E*C] -> owner [E/ep, ep*C]), 1 back */
    const char *dual;        /* forward collectives: the backward dual ("identity" for an all-reduce,
                                "slice" for an all-gather, "allreduce" for OP_TP_COPY) */
    int marker_tensor;       /* OP_SAVE, OP_TP_COPY */
    int no_grad;             /* forward op with no backward rule (statistics, loss partials) */
    int overflow;            /* k_op / k_const_r found no room (OP_OVF_*): the pipeline fails */
} Op;

enum { OP_OVF_OPERANDS = 1, OP_OVF_CONSTS = 2 };

typedef struct {
    const Run *run;
    int layout, tp;
    int ep;                  /* expert-parallel degree of this graph (1 unless btp with parallel.ep > 1) */
    int part_ep;             /* builder state: the ep tag of new parts (-1: all ranks) */
    int64_t M;               /* micro_batch * seq */
    Tensor *t; int nt, capt;
    Canon *canons; int ncanons, capc;
    Param *params; int nparams, capp;
    Part *parts; int nparts, capparts;
    Op *fwd; int nfwd, capf;      /* the forward tape */
    Op *steps; int nsteps, caps;  /* the final schedule: forward (with markers) then backward */
    int nfwd_steps;               /* steps[0..nfwd_steps-1] are the forward section */
    Op *opt; int nopt, capo;      /* the optimizer section: the optimizer line, then (ZeRO at
                                     dp > 1) one gather_shards per param (gen/dp.c) */
    int tokens, targets, loss;
    int64_t arena_bytes;
    int64_t arena_lower_bound;    /* the most bytes live at any one step: no plan can do better */
    /* memplan: extra live ranges (gen/pp.c: a pipeline stage's received buffers are live from the
     * start of their section, the sent ones to its end); none in a whole-model graph */
    int npin, pin_t[4], pin_lo[4], pin_hi[4];
    int cur_layer;                /* builder state: layer and chunk stamped on new ops */
    char cur_chunk[48];
    Run *owned_run;               /* the copy of the run this graph was built for */
    jmp_buf *fail;                /* set by graph_build: where ir_fail returns to; NULL outside it */
    char err[512];
} Graph;

/* Errors: the builders and passes return 2 (bad input) or 1 with g->err set. A failure they cannot
 * return from (out of memory deep in a builder, an internal inconsistency) calls ir_fail: the
 * message goes to g->err and control goes back to graph_build (gen/pipeline.c), which frees the
 * graph and returns status 1 (temporaries of the pass that failed are not freed). Outside
 * graph_build (g->fail NULL: a graph built by hand in a test) ir_fail prints and aborts. */
void ir_fail(Graph *g, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
void *ir_alloc(Graph *g, size_t bytes);        /* malloc, or ir_fail on out of memory */
Graph *graph_new(const Run *run, int layout);
void graph_free(Graph *g);
int ir_tensor(Graph *g, const char *name, int64_t rows, int64_t cols, int dtype, int role, int state);
int ir_find(const Graph *g, const char *name);
Opnd opnd(int t, int64_t off, int64_t ld);     /* ld 0: the tensor's cols */
Opnd opnd_r(int t, RInt off, int64_t ld);
/* A buffer with online-norm statistics (Tensor.has_stat): the element offset of its statistics,
 * the view of its activations [rows, cols-1] and of its statistics [rows] (ld rows), and whether
 * a view is that statistics vector. */
int64_t ir_stat_off(const Graph *g, int t);
Opnd ir_stat_acts(const Graph *g, int t);
Opnd ir_stat_vec(const Graph *g, int t);
int ir_is_stat_view(const Graph *g, Opnd v);
Op *ir_push(Graph *g, Op **arr, int *n, int *cap);
/* Collectives, by their catalog row: the op's CK_* (-1: not a collective); the tensors it reads
 * (buf, src, map as the row's operands say) and writes (buf, dst) into reads[3] / writes[2] with
 * their counts (0, 0 for any other op); the ranks of a group in g (tp, dp, ep, dp/ep); whether the
 * op is a gradient bucket of the dp reduction (group dp or edp, backward section: gen/dp.c). */
int ir_coll_kind(const Op *o);
void ir_coll_rw(const Op *o, int reads[3], int *nr, int writes[2], int *nw);
int ir_group_size(const Graph *g, int group);
int ir_dp_bucket(const Op *o);
size_t ir_dtype_size(int dtype);
uint64_t fnv1a64(const char *s);
int ir_act_dtype(const Graph *g);              /* the run's activation dtype */
/* kernel op helpers: start a kernel op on the tape, add operands and constants in catalog order.
 * k_op and k_const* return 0, or -1 when the op has no room left (OP_MAX_OPND operands,
 * KMAX_CONST constants): the value is dropped and o->overflow set, and graph_build fails with
 * status 1 naming the kernel (k_op also writes g->err). */
Op *fwd_op(Graph *g, int kind);                 /* new op on the forward tape, stamped with cur_* */
Op *k_begin(Graph *g, const char *kind);
int k_op(Graph *g, Op *o, const char *key, Opnd v, int out_state_plus1, int bwd_needed);
int k_const(Op *o, const char *key, double v);
int k_const_r(Op *o, const char *key, double base, double per_rank);

#endif
