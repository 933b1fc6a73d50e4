/* builder.c: the forward-tape builder's vocabulary (gen/builder.h): activations, canonical
 * parameters and their local parts, GEMMs, and the tensor-parallel collectives with their duals.
 * The layouts (gen/build.c) and the MoE block (gen/moe.c) both build on it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/builder.h"

/* A forward activation (TR_ACT) named by fmt, in parallel state `state`. */
int ir_act(Graph *g, int state, int64_t rows, int64_t cols, int dtype, const char *fmt, ...) {
    char name[96];
    va_list ap; va_start(ap, fmt); vsnprintf(name, sizeof name, fmt, ap); va_end(ap);
    return ir_tensor(g, name, rows, cols, dtype, TR_ACT, state);
}

int ir_keep(Graph *g, int t) { g->t[t].keep = 1; return t; }

int ir_error(Graph *g, const char *fmt, ...) {
    va_list ap; va_start(ap, fmt); vsnprintf(g->err, sizeof g->err, fmt, ap); va_end(ap);
    return 2;
}

/* ---- parameters ---- */

int ir_canon_find(const Graph *g, const char *name) {
    for (int i = 0; i < g->ncanons; i++) if (!strcmp(g->canons[i].name, name)) return i;
    return -1;
}

void ir_canon(Graph *g, const char *name, int64_t rows, int64_t cols, int init, double std,
              int decay) {
    if (g->ncanons == g->capc) {
        g->capc = g->capc ? 2 * g->capc : 64;
        g->canons = realloc(g->canons, (size_t)g->capc * sizeof *g->canons);
        if (!g->canons) ir_fail(g, "out of memory (canons)");
    }
    Canon *c = &g->canons[g->ncanons++];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->rows = rows; c->cols = cols; c->init = init; c->std = std; c->decay = decay;
    c->seed = fnv1a64(name) ^ g->run->seed;
}

int ir_param(Graph *g, const char *name, int64_t rows, int64_t cols, int state) {
    if (g->nparams == g->capp) {
        g->capp = g->capp ? 2 * g->capp : 64;
        g->params = realloc(g->params, (size_t)g->capp * sizeof *g->params);
        if (!g->params) ir_fail(g, "out of memory (params)");
    }
    int t = ir_tensor(g, name, rows, cols, ir_act_dtype(g), TR_PARAM, state);
    Param *p = &g->params[g->nparams];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->tensor = t; p->rows = rows; p->cols = cols; p->first_part = g->nparts; p->nparts = 0;
    p->dtype = ir_act_dtype(g);
    g->t[t].param = g->nparams++;
    return t;
}

/* Block [r0,r1) x [c0,c1) of canon `canon` goes to (lr, lc) of the param most recently added. */
void ir_part(Graph *g, int ptensor, const char *canon, RInt r0, RInt r1, RInt c0, RInt c1,
                     int64_t lr, int64_t lc, int rep) {
    int c = ir_canon_find(g, canon);
    if (c < 0) ir_fail(g, "internal: param part of canon %s, which was never added", canon);
    if (g->nparts == g->capparts) {
        g->capparts = g->capparts ? 2 * g->capparts : 64;
        g->parts = realloc(g->parts, (size_t)g->capparts * sizeof *g->parts);
        if (!g->parts) ir_fail(g, "out of memory (param parts)");
    }
    Part *p = &g->parts[g->nparts++];
    p->canon = c; p->r0 = r0; p->r1 = r1; p->c0 = c0; p->c1 = c1;
    p->lr = lr; p->lc = lc; p->rep = rep; p->ep = g->part_ep;
    g->params[g->t[ptensor].param].nparts++;
}

/* A whole canon, replicated on every rank. */
int ir_param_whole(Graph *g, const char *name, const char *canon) {
    const Canon *c = &g->canons[ir_canon_find(g, canon)];
    int t = ir_param(g, name, c->rows, c->cols, PS_REPLICATED);
    ir_part(g, t, canon, rint_c(0), rint_c(c->rows), rint_c(0), rint_c(c->cols), 0, 0, 1);
    return t;
}

Opnd ir_opnd_ld(Graph *g, Opnd o) { if (o.ld == 0) o.ld = g->t[o.t].cols; return o; }

Op *ir_gemm(Graph *g, Opnd A, Opnd B, Opnd C, int64_t m, int64_t n, int64_t k) {
    Op *o = fwd_op(g, OP_GEMM);
    o->g.m = m; o->g.n = n; o->g.k = k;
    o->g.A = ir_opnd_ld(g, A); o->g.B = ir_opnd_ld(g, B); o->g.C = ir_opnd_ld(g, C);
    o->g.batch = 1; o->g.alpha = 1; o->g.beta = 0;
    return o;
}

Op *ir_gemm_batched(Graph *g, Opnd A, Opnd B, Opnd C, int64_t m, int64_t n, int64_t k,
                        int64_t sA, int64_t sB, int64_t sC, int batch) {
    Op *o = ir_gemm(g, A, B, C, m, n, k);
    if (batch > 1) o->kind = OP_BATCHED_GEMM;
    o->g.sA = sA; o->g.sB = sB; o->g.sC = sC; o->g.batch = batch;
    return o;
}

Op *ir_gemm_grouped(Graph *g, const Gemm *mem, int n) {
    if (n == 1) return ir_gemm(g, mem[0].A, mem[0].B, mem[0].C, mem[0].m, mem[0].n, mem[0].k);
    Op *o = fwd_op(g, OP_GROUPED_GEMM);
    o->members = ir_alloc(g, (size_t)n * sizeof *o->members);
    memcpy(o->members, mem, (size_t)n * sizeof *mem);
    o->nmembers = n;
    for (int i = 0; i < n; i++) {
        Gemm *x = &o->members[i];
        x->A = ir_opnd_ld(g, x->A); x->B = ir_opnd_ld(g, x->B); x->C = ir_opnd_ld(g, x->C);
        x->batch = 1; x->alpha = 1; x->beta = 0;
    }
    return o;
}

Gemm ir_gemm_member(Opnd A, Opnd B, Opnd C, int64_t m, int64_t n, int64_t k) {
    Gemm x; memset(&x, 0, sizeof x);
    x.A = A; x.B = B; x.C = C; x.m = m; x.n = n; x.k = k; x.batch = 1; x.alpha = 1;
    return x;
}

Op *ir_collective(Graph *g, int kind, int group, int t, int dst, int reduce, const char *tag) {
    const CollKindRow *row = ccat_kind(kind);
    if (!row || (row->operands & CO_MAP) || !(row->sections & CS_FWD))
        ir_fail(g, "collective %s (%s): not a kind a layout builds (the all-to-all: gen/moe.c)",
                ccat_word(kind), tag);
    if (!ccat_allows_group(kind, group))
        ir_fail(g, "collective %s (%s): the catalog does not allow group %s for it", row->word, tag,
                ccat_group_name(group));
    if ((row->operands & CO_DST) && dst < 0)
        ir_fail(g, "collective %s (%s): it needs a destination tensor", row->word, tag);
    Op *o = fwd_op(g, OP_COLL_FIRST + kind);
    o->group = group;
    o->reduce = reduce;
    o->dtype = g->t[t].dtype;
    if (row->operands & CO_BUF) {   /* the whole tensor in place */
        o->buf = opnd(t, 0, g->t[t].cols);
        o->elems = g->t[t].rows * g->t[t].cols;
        o->bytes = o->elems * (int64_t)ir_dtype_size(o->dtype);
    } else {                        /* src [rows, cols] -> dst [rows, cols * n] */
        o->src = opnd(t, 0, g->t[t].cols);
        o->dst = opnd(dst, 0, g->t[dst].cols);
        o->rows = g->t[t].rows; o->cols = g->t[t].cols;
        o->bytes = o->rows * o->cols * ir_group_size(g, group) * (int64_t)ir_dtype_size(o->dtype);
    }
    snprintf(o->tag, sizeof o->tag, "%s", tag);
    return o;
}

void ir_allreduce(Graph *g, int t, const char *tag) {
    ir_collective(g, CK_ALLREDUCE, CG_TP, t, -1, RED_SUM, tag)->dual = "identity";
}

void ir_allgather(Graph *g, int src, int dst, const char *tag, int no_grad) {
    Op *o = ir_collective(g, CK_ALLGATHER, CG_TP, src, dst, RED_NONE, tag);
    o->dual = "slice";
    o->no_grad = no_grad;
}

void ir_tp_copy(Graph *g, int t, const char *tag) {
    Op *o = fwd_op(g, OP_TP_COPY);
    o->marker_tensor = t;
    snprintf(o->tag, sizeof o->tag, "%s", tag);
    o->dual = "allreduce";
}

void ir_chunk(Graph *g, int layer, const char *fmt, ...) {
    g->cur_layer = layer;
    va_list ap;
    va_start(ap, fmt); vsnprintf(g->cur_chunk, sizeof g->cur_chunk, fmt, ap); va_end(ap);
}

void ir_add(Graph *g, Opnd a, Opnd b, Opnd out, int64_t rows, int64_t cols, int state) {
    a = ir_opnd_ld(g, a); b = ir_opnd_ld(g, b); out = ir_opnd_ld(g, out);
    Op *o = k_begin(g, "add");
    k_op(g, o, "a", a, 0, 0); k_op(g, o, "b", b, 0, 0); k_op(g, o, "out", out, OUT(state), 0);
    k_const(o, "rows", (double)rows); k_const(o, "cols", (double)cols);
    k_const(o, "lda", (double)a.ld); k_const(o, "ldb", (double)b.ld);
    k_const(o, "ldo", (double)out.ld);
}
