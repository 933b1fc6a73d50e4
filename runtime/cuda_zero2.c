/* cuda_zero2.c: ZeRO-2 on the CUDA backend: where each parameter's full-size gradient lives while
 * the backward needs it (gradients whose lives do not overlap share memory), so that between
 * micro-batches a dp rank holds only its shard of each reduced gradient (BackendRank.gshard). */
#include "runtime/cuda_internal.h"

/* Whether step st reads or writes (any element of) tensor t: a compute step's operands, or the
 * operands of a collective's catalog row. */
static int step_touches(const Plan *p, const PlanStep *st, int t) {
    switch (st->kind) {
    case ST_GEMM: case ST_BATCHED_GEMM:
        return st->gemm.A.tensor == t || st->gemm.B.tensor == t || st->gemm.C.tensor == t;
    case ST_GROUPED_GEMM:
        for (int i = 0; i < st->nmembers; i++) {
            const GemmArgs *g = &p->members[st->first_member + i];
            if (g->A.tensor == t || g->B.tensor == t || g->C.tensor == t)
                return 1;
        }
        return 0;
    case ST_KERNEL:
        for (int i = 0; i < st->kernel->nops; i++) if (st->kernel->op[i].tensor == t) return 1;
        return 0;
    default: break;
    }
    /* a collective: the operands its catalog row names (common/collective_catalog.h) */
    const CollKindRow *row = ccat_kind(step_coll_kind(st->kind));
    if (!row) return 0;
    const CollArgs *c = &st->coll;
    return ((row->operands & CO_BUF) && c->buf.tensor == t) ||
           ((row->operands & CO_SRC) && c->src.tensor == t) ||
           ((row->operands & CO_DST) && c->dst.tensor == t) ||
           ((row->operands & CO_MAP) && c->map.tensor == t);
}

/* Param i's gradient's life [first[i], last[i]]: from the first step that touches it to its one
 * ZeRO reduce_scatter (zero_grad) of the whole gradient, the last step to touch it, run on every
 * micro-batch (not micro=last at grad_accum > 1). 0, or 1 when the plan does not have that shape
 * (its gradients then stay full size). */
static int grad_lives(const Plan *p, int64_t *first, int64_t *last) {
    for (int i = 0; i < p->nparams; i++) {
        int t = p->params[i].grad;
        first[i] = last[i] = -1;
        int64_t touched = -1;
        for (int s = 0; s < p->nsteps; s++) {
            const PlanStep *st = &p->steps_[s];
            if (!step_touches(p, st, t)) continue;
            if (first[i] < 0) first[i] = s;
            touched = s;
            if (st->kind != ST_REDUCE_SCATTER || !st->coll.zero_grad) continue;   /* ZeRO's own */
            if (last[i] >= 0 || st->coll.group != GROUP_DP ||
                (st->coll.last_micro && p->grad_accum > 1) ||
                st->coll.elems != numel(&p->tensors[t]) || rank_int(st->coll.buf.off, 0) != 0 ||
                rank_int(st->coll.buf.off, p->tp - 1) != 0)
                return 1;
            last[i] = s;
        }
        if (last[i] < 0 || touched != last[i]) return 1;
    }
    return 0;
}

/* zero=2 at dp > 1 (without expert parallelism or pipeline stages; at grad_accum > 1 the plan
 * reduce-scatters every micro-batch, each adding its shard to gshard): each
 * gradient's element offset in grads (r->gwork_off, ALIGN_ELEMS-aligned, r->nwork elements in
 * all), the lowest place free of the gradients whose lives overlap its own, taken in the order
 * the gradients are first touched. The reduce-scatter zeroes a gradient's memory after keeping
 * its shard, and the compute stream waits for it there, so the next user finds zeros. Leaves
 * gwork_off NULL when the plan is not of this kind. 0, or -1 out of memory. */
int grad_work_layout(BackendRank *r) {
    const Plan *p = r->p;
    if (p->zero != 2 || p->dp <= 1 || p->ep > 1 || p->pp > 1 || !p->nparams)
        return 0;
    int n = p->nparams;
    int64_t *first = malloc(n * sizeof *first), *last = malloc(n * sizeof *last);
    int64_t *off = malloc(n * sizeof *off), *size = malloc(n * sizeof *size);
    int *order = malloc(n * sizeof *order);
    if (!first || !last || !off || !size || !order) {
        free(first); free(last); free(off); free(size); free(order);
        return -1;
    }
    int ok = !grad_lives(p, first, last);
    for (int i = 0; i < n; i++) {   /* insertion sort by first touch */
        size[i] = align_up(p->params[i].rows * p->params[i].cols, ALIGN_ELEMS);
        int k = i;
        while (k > 0 && first[order[k - 1]] > first[i]) { order[k] = order[k - 1]; k--; }
        order[k] = i;
    }
    int64_t total = 0;
    for (int a = 0; ok && a < n; a++) {
        int i = order[a];
        int64_t o = 0;
        for (int moved = 1; moved;) {   /* past every placed, still-live gradient in the way */
            moved = 0;
            for (int b = 0; b < a; b++) {
                int j = order[b];
                if (last[j] < first[i] || off[j] + size[j] <= o || o + size[i] <= off[j]) continue;
                o = off[j] + size[j];
                moved = 1;
            }
        }
        off[i] = o;
        if (o + size[i] > total) total = o + size[i];
    }
    free(first); free(last); free(size); free(order);
    if (!ok) { free(off); return 0; }
    r->gwork_off = off;
    r->nwork = total;
    return 0;
}

int grad_shard_sum_table(BackendRank *r) {
    if (!r->gshard || !r->dp_buf) return 0;
    size_t bytes = (size_t)r->p->nparams * 2 * sizeof(CUdeviceptr);
    CUdeviceptr *table = malloc(bytes);
    if (!table) return -1;
    for (int i = 0; i < r->p->nparams; i++) {
        table[2 * i] = r->gshard + (size_t)r->state_off[i] * 4;
        table[2 * i + 1] = r->dp_buf;
    }
    CUresult e = api.cuMemAlloc_v2(&r->gshard_sum, bytes);
    if (e == 0) e = api.cuMemcpyHtoD_v2(r->gshard_sum, table, bytes);
    free(table);
    return e ? -1 : 0;
}
