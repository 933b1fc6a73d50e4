/* dp.c: data-parallel gradient reduction as plan steps. After the backward is built, every local
 * parameter gradient d.P gets one all-reduce over the dp group (op=avg, fp32), grouped in buckets of
 * about run->dp_bucket_bytes in the order the backward finishes the gradients; a bucket's all-reduces
 * follow the step that writes its last gradient, so they overlap the rest of the backward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/ir.h"

/* 1 when step o writes parameter gradient t (GEMM outputs, kernel operands, grouped members). */
static int step_writes(const Op *o, int t) {
    switch (o->kind) {
    case OP_GEMM: case OP_BATCHED_GEMM: return o->g.C.t == t;
    case OP_GROUPED_GEMM:
        for (int i = 0; i < o->nmembers; i++) if (o->members[i].C.t == t) return 1;
        return 0;
    case OP_KERNEL:
        /* a parameter gradient appears on a backward kernel only as its output (acc=1 or not) */
        for (int i = 0; i < o->nops; i++) if (o->ops[i].t == t) return 1;
        return 0;
    default: return 0;
    }
}

typedef struct { int param, grad, last; int64_t bytes; } GradEnd;

static int by_last(const void *a, const void *b) {
    const GradEnd *x = a, *y = b;
    return x->last != y->last ? (x->last < y->last ? -1 : 1) : (x->param < y->param ? -1 : x->param > y->param);
}

int dp_emit_reduction(Graph *g) {
    const Run *r = g->run;
    if (r->dp <= 1 || g->nparams == 0) return 0;
    GradEnd *ge = calloc((size_t)g->nparams, sizeof *ge);
    if (!ge) { snprintf(g->err, sizeof g->err, "out of memory"); return 1; }
    int n = 0;
    for (int p = 0; p < g->nparams; p++) {
        int gt = g->t[g->params[p].tensor].grad;
        if (gt < 0) continue;
        int last = -1;
        for (int s = g->nfwd_steps; s < g->nsteps; s++) if (step_writes(&g->steps[s], gt)) last = s;
        if (last < 0) {
            snprintf(g->err, sizeof g->err, "dp reduction: no backward step writes d.%s (generator bug)", g->params[p].name);
            free(ge);
            return 1;
        }
        ge[n].param = p; ge[n].grad = gt; ge[n].last = last;
        ge[n].bytes = g->t[gt].rows * g->t[gt].cols * (int64_t)ir_dtype_size(g->t[gt].dtype);
        n++;
    }
    qsort(ge, (size_t)n, sizeof *ge, by_last);
    /* buckets: close one when it reaches the bucket size; it is issued after its last gradient */
    int *bucket = calloc((size_t)n + 1, sizeof *bucket), *after = calloc((size_t)n + 1, sizeof *after);
    Op *ns = calloc((size_t)(g->nsteps + n), sizeof *ns);
    if (!bucket || !after || !ns) { free(ge); free(bucket); free(after); free(ns); snprintf(g->err, sizeof g->err, "out of memory"); return 1; }
    int nb = 0;
    int64_t fill = 0;
    for (int i = 0; i < n; i++) {
        bucket[i] = nb;
        fill += ge[i].bytes;
        if (fill >= r->dp_bucket_bytes || i == n - 1) {
            for (int j = i; j >= 0 && bucket[j] == nb; j--) after[j] = ge[i].last;
            nb++;
            fill = 0;
        }
    }
    int k = 0, i = 0;
    for (int s = 0; s < g->nsteps; s++) {
        ns[k++] = g->steps[s];
        for (; i < n && after[i] == s; i++) {
            Op *o = &ns[k++];
            memset(o, 0, sizeof *o);
            o->kind = OP_ALLREDUCE;
            o->section = SEC_BWD;
            o->layer = -1;
            o->marker_tensor = -1;
            o->aux = -1;
            o->buf = opnd(ge[i].grad, 0, g->t[ge[i].grad].cols);
            o->elems = g->t[ge[i].grad].rows * g->t[ge[i].grad].cols;
            o->dtype = g->t[ge[i].grad].dtype;
            o->dir = 1;
            o->group = 1;
            o->bucket = bucket[i];
            o->bytes = ge[i].bytes;
            snprintf(o->tag, sizeof o->tag, "dp.%.90s", g->params[ge[i].param].name);
            snprintf(o->chunk, sizeof o->chunk, "dp.bucket%d", bucket[i]);
        }
    }
    free(g->steps);
    g->steps = ns;
    g->nsteps = k;
    g->caps = g->nsteps + n;
    free(ge); free(bucket); free(after);
    return 0;
}
