/* ir.c: building blocks of the generator's IR (gen/ir.h): tensors, operands, growable op lists,
 * kernel ops with operands in catalog order. The base of gen/: it calls nothing else in gen/ (the
 * passes build on it; gen/pipeline.c runs them). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/ir.h"

void ir_fail(Graph *g, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->err, sizeof g->err, fmt, ap);
    va_end(ap);
    if (g->fail) longjmp(*g->fail, 1);
    fprintf(stderr, "boost gen: %s (a graph built outside graph_build cannot report this)\n", g->err);
    abort();
}

void *ir_alloc(Graph *g, size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) ir_fail(g, "out of memory (%zu bytes)", bytes);
    return p;
}

/* Room for one more element in a growable array of g (doubling, new room zeroed). */
static void *grow(Graph *g, void *p, int n, int *cap, size_t elem) {
    if (n < *cap) return p;
    int nc = *cap ? *cap * 2 : 64;
    void *q = realloc(p, (size_t)nc * elem);
    if (!q) ir_fail(g, "out of memory (%d entries of %zu bytes)", nc, elem);
    memset((char *)q + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *cap = nc;
    return q;
}

Graph *graph_new(const Run *run, int layout) {
    Graph *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->run = run;
    g->layout = layout;
    g->tp = run->tp;
    g->ep = layout == LAYOUT_BTP && run->ep > 1 && run->model.moe_experts ? run->ep : 1;
    g->part_ep = -1;
    g->M = (int64_t)run->micro_batch * run->seq;
    g->tokens = g->targets = g->loss = -1;
    return g;
}

void graph_free(Graph *g) {
    if (!g) return;
    for (int i = 0; i < g->nt; i++) free(g->t[i].written);
    for (int i = 0; i < g->nfwd; i++) if (g->fwd[i].members) free(g->fwd[i].members);
    for (int i = 0; i < g->nsteps; i++) if (g->steps[i].members) free(g->steps[i].members);
    free(g->owned_run);
    free(g->t); free(g->canons); free(g->params); free(g->parts); free(g->fwd); free(g->steps);
    free(g->opt);
    free(g);
}

size_t ir_dtype_size(int dtype) { return dtype == IR_BF16 ? 2 : 4; }
int ir_act_dtype(const Graph *g) { return g->run->dtype == DT_FP32 ? IR_FP32 : IR_BF16; }

int ir_tensor(Graph *g, const char *name, int64_t rows, int64_t cols, int dtype, int role, int state) {
    g->t = grow(g, g->t, g->nt, &g->capt, sizeof *g->t);
    Tensor *t = &g->t[g->nt];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows; t->cols = cols; t->dtype = dtype; t->role = role; t->state = state;
    t->param = -1; t->grad = -1; t->stat_grad = -1; t->saved = 1; t->recompute_of = -1;
    t->live0 = t->live1 = -1;
    return g->nt++;
}

int ir_find(const Graph *g, const char *name) {
    for (int i = g->nt - 1; i >= 0; i--) if (!strcmp(g->t[i].name, name)) return i;
    return -1;
}

Opnd opnd(int t, int64_t off, int64_t ld) { Opnd o = {t, {off, 0}, ld}; return o; }
Opnd opnd_r(int t, RInt off, int64_t ld) { Opnd o = {t, off, ld}; return o; }

int64_t ir_stat_off(const Graph *g, int t) { return g->t[t].rows * (g->t[t].cols - 1); }
Opnd ir_stat_acts(const Graph *g, int t) { return opnd(t, 0, g->t[t].cols - 1); }
Opnd ir_stat_vec(const Graph *g, int t) { return opnd(t, ir_stat_off(g, t), g->t[t].rows); }
int ir_is_stat_view(const Graph *g, Opnd v) {
    return g->t[v.t].has_stat && v.off.per_rank == 0 && v.off.base == ir_stat_off(g, v.t);
}

Op *ir_push(Graph *g, Op **arr, int *n, int *cap) {
    *arr = grow(g, *arr, *n, cap, sizeof **arr);
    Op *o = &(*arr)[(*n)++];
    memset(o, 0, sizeof *o);
    o->marker_tensor = -1;
    o->layer = -1;
    o->aux = -1;
    return o;
}

int ir_coll_kind(const Op *o) {
    return o->kind >= OP_COLL_FIRST && o->kind < OP_COLL_END ? o->kind - OP_COLL_FIRST : -1;
}

void ir_coll_rw(const Op *o, int reads[3], int *nr, int writes[2], int *nw) {
    *nr = *nw = 0;
    const CollKindRow *row = ccat_kind(ir_coll_kind(o));
    if (!row) return;
    if (row->operands & CO_BUF) { reads[(*nr)++] = o->buf.t; writes[(*nw)++] = o->buf.t; }
    if (row->operands & CO_SRC) reads[(*nr)++] = o->src.t;
    if (row->operands & CO_MAP) reads[(*nr)++] = o->map;
    if (row->operands & CO_DST) writes[(*nw)++] = o->dst.t;
}

int ir_group_size(const Graph *g, int group) {
    int dp = g->run->dp > 1 ? g->run->dp : 1;
    switch (group) {
    case CG_TP: return g->tp;
    case CG_DP: return dp;
    case CG_EP: return g->ep;
    case CG_EDP: return dp / (g->ep > 1 ? g->ep : 1);
    default: return 1;
    }
}

int ir_dp_bucket(const Op *o) {
    int dp_group = o->group == CG_DP || o->group == CG_EDP;
    return ir_coll_kind(o) >= 0 && o->section == SEC_BWD && dp_group;
}

uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 0x100000001b3ull; }
    return h;
}

Op *fwd_op(Graph *g, int kind) {
    Op *o = ir_push(g, &g->fwd, &g->nfwd, &g->capf);
    o->kind = kind;
    o->section = SEC_FWD;
    o->layer = g->cur_layer;
    snprintf(o->chunk, sizeof o->chunk, "%s", g->cur_chunk);
    return o;
}

Op *k_begin(Graph *g, const char *kind) {
    Op *o = fwd_op(g, OP_KERNEL);
    snprintf(o->k.kind, sizeof o->k.kind, "%s", kind);
    return o;
}

int k_op(Graph *g, Op *o, const char *key, Opnd v, int is_out, int bwd_needed) {
    if (o->nops >= OP_MAX_OPND) {
        snprintf(g->err, sizeof g->err, "kernel %s: operand %s is one more than the %d an op holds (raise OP_MAX_OPND in gen/ir.h)",
                 o->k.kind, key, OP_MAX_OPND);
        o->overflow |= OP_OVF_OPERANDS;
        return -1;
    }
    snprintf(o->opkey[o->nops], sizeof o->opkey[0], "%s", key);
    if (v.ld == 0 && v.t >= 0) v.ld = g->t[v.t].cols;
    o->ops[o->nops] = v;
    if (is_out) { o->out_mask |= 1u << o->nops; o->ostate[o->nops] = is_out; }
    if (bwd_needed) o->bwd_needs |= 1u << o->nops;
    o->nops++;
    return 0;
}

int k_const(Op *o, const char *key, double v) { return k_const_r(o, key, v, 0); }

int k_const_r(Op *o, const char *key, double base, double per_rank) {
    KernelInst *k = &o->k;
    if (k->nconst >= KMAX_CONST) { o->overflow |= OP_OVF_CONSTS; return -1; }
    snprintf(k->key[k->nconst], sizeof k->key[0], "%s", key);
    k->val[k->nconst] = base;
    k->per_rank[k->nconst] = per_rank;
    k->nconst++;
    return 0;
}
