/* align.c: which GEMM FLOPs of a finished schedule cuBLAS cannot run on its fast (Hopper) paths:
 * a GEMM whose operand starts off a 16-byte boundary, whose leading dimension is not a multiple of
 * 8 elements, or (batched) whose batch stride is not. Buffers start 256-byte aligned (the arena
 * plan here; parameters, gradients and inputs in the runtime), so a view's start is its element
 * offset times the element size, checked for rank 0 and for every rank step (per_rank). The
 * layout's share (what the generator's buffer layout decides) is kept apart from the shape's (a
 * dense operand whose width, a model dimension such as 4 router experts, is not a multiple
 * of 8). */
#include <string.h>
#include "gen/ir.h"
#include "gen/align.h"

#define ALIGN_BYTES 16
#define ALIGN_ELEMS 8

static int64_t gemm_flops(const Gemm *x, int64_t batch) { return 2 * x->m * x->n * x->k * batch; }

/* The bytes of one element of operand o: its tensor's dtype (a parameter gradient is fp32). */
static int64_t elem_bytes(const Graph *g, const Opnd *o) {
    return (int64_t)ir_dtype_size(g->t[o->t].dtype);
}

static int start_misaligned(const Graph *g, const Opnd *o) {
    int64_t es = elem_bytes(g, o);
    return (o->off.base * es) % ALIGN_BYTES != 0 || (o->off.per_rank * es) % ALIGN_BYTES != 0;
}

/* The columns of operand i (0 A, 1 B, 2 C) as stored, row-major: A is [m, k] ([k, m] when ta),
 * B [k, n] ([n, k] when tb), C [m, n]. */
static int64_t stored_cols(const Gemm *x, int i) {
    if (i == 0) return x->ta ? x->m : x->k;
    if (i == 1) return x->tb ? x->k : x->n;
    return x->n;
}

/* One GEMM: adds its FLOPs to the total and to each rule it breaks. A leading dimension equal to
 * the operand's stored columns (a dense operand) that is not a multiple of 8 comes from the GEMM's
 * own shape (the model's dimensions), not from how a buffer is laid out. */
static void one(const Graph *g, const Gemm *x, int64_t batch, GemmAlign *a) {
    double f = (double)gemm_flops(x, batch);
    const Opnd *ops[3] = {&x->A, &x->B, &x->C};
    const int64_t strides[3] = {x->sA, x->sB, x->sC};
    int bad_start = 0, bad_ld = 0, bad_stride = 0, bad_shape = 0;
    for (int i = 0; i < 3; i++) {
        if (start_misaligned(g, ops[i])) bad_start = 1;
        if (ops[i]->ld % ALIGN_ELEMS) {
            if (ops[i]->ld == stored_cols(x, i)) bad_shape = 1;
            else bad_ld = 1;
        }
        if (batch > 1 && strides[i] % ALIGN_ELEMS) bad_stride = 1;
    }
    a->total += f;
    if (bad_start) a->start += f;
    if (bad_ld) a->ld += f;
    if (bad_stride) a->stride += f;
    if (bad_shape) a->shape += f;
    if (bad_start || bad_ld || bad_stride) a->layout += f;
    if (bad_start || bad_ld || bad_stride || bad_shape) {
        a->misaligned += f;
        a->ngemms_misaligned++;
    }
}

void gemm_alignment(const Graph *g, GemmAlign *a) {
    memset(a, 0, sizeof *a);
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (o->kind == OP_GEMM || o->kind == OP_BATCHED_GEMM)
            one(g, &o->g, o->g.batch > 0 ? o->g.batch : 1, a);
        if (o->kind == OP_GROUPED_GEMM)
            for (int i = 0; i < o->nmembers; i++) one(g, &o->members[i], 1, a);
    }
}
