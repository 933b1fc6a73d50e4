/* builder.h: the forward-tape builder's vocabulary, shared by the layouts (gen/build.c) and the
 * MoE block (gen/moe.c): activations, canonical parameters and their local parts, GEMMs and the
 * tensor-parallel collectives with their backward duals. Implemented in gen/builder.c. */
#ifndef BOOST_BUILDER_H
#define BOOST_BUILDER_H

#include "gen/ir.h"

#define OUT(state) ((state) + 1)   /* k_op's is_out: the output's parallel state + 1 */

/* g->err from fmt; returns 2 (the status of a bad spec or run) */
int ir_error(Graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- tensors ---- */
int ir_act(Graph *g, int state, int64_t rows, int64_t cols, int dtype, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));   /* TR_ACT tensor named by fmt */
int ir_keep(Graph *g, int t);                 /* mark a tensor kept by checkpointing; returns t */
Opnd ir_opnd_ld(Graph *g, Opnd o);            /* o with ld 0 replaced by its tensor's cols */
void ir_chunk(Graph *g, int layer, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));   /* the chunk (and layer) later ops are stamped with */

/* ---- parameters: canons (full, unsharded, initialised from a seed of their name) and the local
 * params each rank holds, made of parts (blocks of canons) ---- */
int ir_canon_find(const Graph *g, const char *name);   /* index, or -1 */
void ir_canon(Graph *g, const char *name, int64_t rows, int64_t cols, int init, double std,
              int decay);
int ir_param(Graph *g, const char *name, int64_t rows, int64_t cols, int state);
/* block [r0,r1) x [c0,c1) of canon `canon` at (lr, lc) of param tensor ptensor; rep: replicated */
void ir_part(Graph *g, int ptensor, const char *canon, RInt r0, RInt r1, RInt c0, RInt c1,
             int64_t lr, int64_t lc, int rep);
int ir_param_whole(Graph *g, const char *name, const char *canon);   /* replicated on every rank */

/* ---- GEMMs: C [m, n] = A [m, k] @ B [k, n] ---- */
Op *ir_gemm(Graph *g, Opnd A, Opnd B, Opnd C, int64_t m, int64_t n, int64_t k);
Op *ir_gemm_batched(Graph *g, Opnd A, Opnd B, Opnd C, int64_t m, int64_t n, int64_t k,
                    int64_t sA, int64_t sB, int64_t sC, int batch);   /* strides in elements */
Op *ir_gemm_grouped(Graph *g, const Gemm *members, int n);   /* one member: a plain GEMM */
Gemm ir_gemm_member(Opnd A, Opnd B, Opnd C, int64_t m, int64_t n, int64_t k);

/* ---- collectives ----
 * Any forward kind of the catalog (common/collective_catalog.h) on any group its row allows:
 * kind CK_*, group CG_*, reduce RED_SUM | RED_AVG for a reducing kind (RED_NONE otherwise). A kind
 * with a buf operand (allreduce, reduce_scatter) works in place on all of tensor t (dst -1); one
 * with src and dst (allgather) takes t [rows, cols] to dst [rows, cols * n], n the group's size.
 * Its bytes are the payload per rank. Backward: gen/backward.c has duals for the tp all-reduce and
 * all-gather below; for any other kind or group set the returned op's no_grad (a forward-only
 * graph), or the backward fails naming it. Refused (ir_fail): the all-to-all (gen/moe.c), a group
 * the row does not allow. */
Op *ir_collective(Graph *g, int kind, int group, int t, int dst, int reduce, const char *tag);
/* over the tp group, each with its backward dual */
void ir_allreduce(Graph *g, int t, const char *tag);   /* partial -> replicated; dual identity */
void ir_allgather(Graph *g, int src, int dst, const char *tag, int no_grad);   /* dual slice */
void ir_tp_copy(Graph *g, int t, const char *tag);     /* marker; dual all-reduce */

/* out [rows, cols] = a + b, in parallel state `state` */
void ir_add(Graph *g, Opnd a, Opnd b, Opnd out, int64_t rows, int64_t cols, int state);

#endif
