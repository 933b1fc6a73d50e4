/* dp.c: data-parallel gradient reduction as plan steps. After the backward is built, every local
 * parameter gradient d.P gets one all-reduce over the dp group (op=avg, fp32), grouped in buckets of
 * about run->dp_bucket_bytes in the order the backward finishes the gradients; a bucket's all-reduces
 * follow the step that writes its last gradient, so they overlap the rest of the backward. They run
 * on the last micro-batch of an optimizer step, except zero=2's reduce-scatters at grad_accum > 1
 * and pp = 1, which run on every micro-batch (dp_zero2_every_micro). Also what ZeRO keeps per
 * rank: bytes per parameter per backend and zero=2's live gradients (dp.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/dp.h"

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

/* The static check: a replicated parameter's gradient is complete only after its dp reduction, so
 * every d.P has exactly one group=dp all-reduce, and no step writes d.P after it (that
 * contribution would miss the other dp ranks). 0, or 1 with g->err. */
static int dp_check(Graph *g) {
    for (int p = 0; p < g->nparams; p++) {
        int gt = g->t[g->params[p].tensor].grad, at = -1, count = 0;
        if (gt < 0) continue;
        for (int s = 0; s < g->nsteps; s++) {
            const Op *o = &g->steps[s];
            if (ir_dp_bucket(o) && o->buf.t == gt) { at = s; count++; }
            else if (at >= 0 && step_writes(o, gt)) {
                snprintf(g->err, sizeof g->err, "dp reduction: step %d writes d.%.80s after its dp all-reduce at step %d: "
                         "the other dp ranks would miss that contribution (generator bug)", s, g->params[p].name, at);
                return 1;
            }
        }
        if (count != 1) {
            snprintf(g->err, sizeof g->err, "dp reduction: d.%.80s has %d dp all-reduces, expected 1 (generator bug)",
                     g->params[p].name, count);
            return 1;
        }
    }
    return 0;
}

typedef struct { int param, grad, last, expert; int64_t bytes; } GradEnd;

/* Expert parallelism: a param whose parts belong to one ep rank each (gen/moe.c, stacked) holds
 * experts that only dp/ep ranks share. */
static int ep_param(const Graph *g, int p) {
    const Param *pp = &g->params[p];
    for (int j = pp->first_part; j < pp->first_part + pp->nparts; j++)
        if (g->parts[j].ep >= 0) return 1;
    return 0;
}

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
        ge[n].param = p; ge[n].grad = gt; ge[n].last = last; ge[n].expert = g->ep > 1 && ep_param(g, p);
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
            /* zero=1, 2: the dp reduction gives each dp rank its shard only (ZeRO-1, ZeRO-2) */
            o->kind = r->zero && !ge[i].expert ? OP_REDUCE_SCATTER : OP_ALLREDUCE;
            o->section = SEC_BWD;
            o->layer = -1;
            o->marker_tensor = -1;
            o->aux = -1;
            o->buf = opnd(ge[i].grad, 0, g->t[ge[i].grad].cols);
            o->elems = g->t[ge[i].grad].rows * g->t[ge[i].grad].cols;
            o->dtype = r->dp_bf16 ? IR_BF16 : g->t[ge[i].grad].dtype;   /* the wire dtype; d.P stays fp32 */
            o->dir = 1;
            o->group = CG_DP;
            o->reduce = RED_AVG;
            if (ge[i].expert) {
                /* the owner's gradient already sums its ep group's tokens: sum over the dp/ep ranks
                   that hold the same experts (group=edp), then 1/dp makes it the global batch mean */
                o->group = CG_EDP;
                o->reduce = RED_SUM;
                o->scale = 1.0 / r->dp;
                o->dtype = g->t[ge[i].grad].dtype;
            }
            o->bucket = bucket[i];
            o->bytes = o->elems * (int64_t)ir_dtype_size(o->dtype);
            snprintf(o->tag, sizeof o->tag, "dp.%.90s", g->params[ge[i].param].name);
            snprintf(o->chunk, sizeof o->chunk, "dp.bucket%d", bucket[i]);
        }
    }
    free(g->steps);
    g->steps = ns;
    g->nsteps = k;
    g->caps = g->nsteps + n;
    free(ge); free(bucket); free(after);
    return dp_check(g);
}

/* The optimizer section: the optimizer line; with ZeRO at dp > 1 each param's updated shards then
 * go to every dp rank (one gather_shards per param, in param order). */
void dp_emit_optimizer(Graph *g) {
    const Run *r = g->run;
    Op *o = ir_push(g, &g->opt, &g->nopt, &g->capo);
    o->kind = OP_OPTIMIZER;
    o->section = SEC_OPT;
    if (!r->zero || r->dp <= 1) return;
    for (int i = 0; i < g->nparams; i++) {
        const Tensor *t = &g->t[g->params[i].tensor];
        o = ir_push(g, &g->opt, &g->nopt, &g->capo);
        o->kind = OP_GATHER_SHARDS;
        o->section = SEC_OPT;
        o->group = CG_DP;
        o->buf = opnd(g->params[i].tensor, 0, t->cols);
        o->elems = t->rows * t->cols;
        o->dtype = t->dtype;
        o->bytes = o->elems * (int64_t)ir_dtype_size(o->dtype);
    }
}

/* What the dp reduction moves and hides (gen/report.c): figures of the emitted group=dp steps. */
void dp_figures(const Graph *g, DpFigures *d) {
    memset(d, 0, sizeof *d);
    int last_compute = -1;
    for (int s = g->nfwd_steps; s < g->nsteps; s++) {
        int k = g->steps[s].kind;
        if (k == OP_GEMM || k == OP_BATCHED_GEMM || k == OP_GROUPED_GEMM || k == OP_KERNEL) last_compute = s;
    }
    int64_t local = 0;
    for (int i = 0; i < g->nparams; i++) local += g->params[i].rows * g->params[i].cols;
    d->local_params = local;
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (!ir_dp_bucket(o)) continue;
        d->steps++;
        d->bytes += o->bytes;
        if (o->bucket + 1 > d->buckets) d->buckets = o->bucket + 1;
        if (s < last_compute) d->bytes_overlapped += o->bytes;
    }
}

/* Per local parameter: bf16 weight 2 + fp32 gradient 4 + fp32 master 4 + AdamW m, v 8 = 18 bytes.
 * zero=1 shards master and moments over dp: 6 + 12/dp. zero=2 shards the gradient too: 2 + 16/dp
 * where the backend keeps only gradient shards between micro-batches (a full-size d.P lives only
 * from its first write to its reduce_scatter, dp_zero2_live_grad_bytes, not counted here);
 * elsewhere every full-size d.P accumulates until the last micro-batch: zero=1's 6 + 12/dp, plus
 * the 4/dp gradient shard where the backend accumulates one beside them (cpu): 6 + 16/dp. */
double dp_zero_bytes_per_param(int zero, int dp, int shards_only, int otherwise) {
    if (dp <= 1 || zero == 0) return 18.0;
    if (zero == 1 || (!shards_only && otherwise == ZERO2_AS_ZERO1)) return 6.0 + 12.0 / dp;
    return (shards_only ? 2.0 : 6.0) + 16.0 / dp;
}

/* The cpu backend's figures: it keeps only gradient shards where no full-size gradient accumulates
 * over micro-batches (grad_accum: those that do; 1 where zero=2 reduces every micro-batch). */
double dp_bytes_per_param(int zero, int dp, int grad_accum) {
    return dp_zero_bytes_per_param(zero, dp, grad_accum <= 1, ZERO2_FULL_AND_SHARD);
}

int dp_zero2_every_micro(const Run *r) {
    return r->zero == 2 && r->dp > 1 && r->grad_accum > 1 && r->pp <= 1;
}

int64_t dp_zero2_live_grad_bytes(const Graph *g) {
    /* delta[s]: bytes that become live at step s, less those freed after step s - 1 */
    int64_t *delta = calloc((size_t)g->nsteps + 1, sizeof *delta), live = 0, peak = 0;
    if (!delta) return -1;
    for (int p = 0; p < g->nparams; p++) {
        int gt = g->t[g->params[p].tensor].grad, first = -1, end = -1;
        if (gt < 0) continue;
        for (int s = 0; s < g->nsteps && end < 0; s++) {
            const Op *o = &g->steps[s];
            if (ir_dp_bucket(o) && o->buf.t == gt)
                end = s;
            else if (first < 0 && step_writes(o, gt))
                first = s;
        }
        if (first < 0 || end < 0) continue;
        int64_t bytes = g->t[gt].rows * g->t[gt].cols * (int64_t)ir_dtype_size(g->t[gt].dtype);
        delta[first] += bytes;
        delta[end + 1] -= bytes;
    }
    for (int s = 0; s < g->nsteps; s++) {
        live += delta[s];
        if (live > peak) peak = live;
    }
    free(delta);
    return peak;
}

void dp_report(const Run *run, const Graph *g, FILE *f, int json) {
    if (run->dp <= 1) return;
    DpFigures d;
    dp_figures(g, &d);
    int dp = run->dp;
    double ring = ccat_wire_bytes(CK_ALLREDUCE, (double)d.bytes, dp);   /* 2(dp-1)/dp x payload */
    int ga = run->pp <= 1 ? 1 : run->grad_accum;   /* zero=2 at pp 1: shards only */
    double lp = (double)d.local_params, z0 = dp_bytes_per_param(0, dp, ga) * lp;
    double z1 = dp_bytes_per_param(1, dp, ga) * lp, z2 = dp_bytes_per_param(2, dp, ga) * lp;
    if (json) {
        fprintf(f, " \"dp\": {\"dp\": %d, \"zero\": %d, \"bucket_bytes\": %" PRId64 ", \"buckets\": %d, \"allreduce_steps\": %d, "
                   "\"bytes_per_step\": %" PRId64 ", \"bytes_issued_before_backward_end\": %" PRId64 ", \"ring_bytes_per_rank\": %.0f, "
                   "\"weights_grads_adamw_bytes_per_rank_zero0\": %.0f, \"weights_grads_adamw_bytes_per_rank_zero1\": %.0f, "
                   "\"weights_grads_adamw_bytes_per_rank_zero2\": %.0f},\n",
                dp, run->zero, run->dp_bucket_bytes, d.buckets, d.steps, d.bytes, d.bytes_overlapped, ring, z0, z1, z2);
        return;
    }
    fprintf(f, "\n## Data parallelism (dp=%d, per rank and optimizer step)\n\n| | |\n|---|---:|\n", dp);
    fprintf(f, "| gradient all-reduce payload (%s, group=dp) | %.1f MB in %d buckets of >= %.1f MB (%d steps) |\n",
            run->dp_bf16 ? "bf16" : "fp32", d.bytes / 1e6, d.buckets, run->dp_bucket_bytes / 1e6, d.steps);
    fprintf(f, "| issued before the backward ends (overlapped) | %.1f MB (%.0f%%) |\n", d.bytes_overlapped / 1e6,
            d.bytes ? 100.0 * (double)d.bytes_overlapped / (double)d.bytes : 0.0);
    fprintf(f, "| ring traffic, 2(dp-1)/dp x payload | %.1f MB |\n", ring / 1e6);
    fprintf(f, "| weights + grads + AdamW, zero=0 | %.1f MB |\n| weights + grads + AdamW, zero=1 | %.1f MB |\n"
               "| weights + grads + AdamW, zero=2 | %.1f MB |\n", z0 / 1e6, z1 / 1e6, z2 / 1e6);
    if (g->ep > 1)
        fprintf(f, "\nExpert parallelism (ep=%d): the payload includes the expert gradients, which reduce over the dp/ep = %d "
                   "ranks holding the same experts (group=edp, op=sum scale=1/dp); the rest over all dp ranks.\n",
                g->ep, dp / g->ep);
    if (dp_zero2_every_micro(run))
        fprintf(f, "\nzero=2 with grad_accum = %d: the reduce-scatters run on every micro-batch "
                   "(no micro=last), %d x the payload above per optimizer step, so that only "
                   "gradient shards accumulate.\n", run->grad_accum, run->grad_accum);
    fprintf(f, "\nWith grad_accum > 1 the dp steps run on the last micro-batch only (micro=last), "
               "but zero=2's at pp = 1 on every one. zero=1 shards the fp32 "
               "master weights and both AdamW moments over dp (6 + 12/dp bytes per local parameter); the cuda "
               "backend allocates them at shard size, plus one staging buffer of 4(dp+1)ceil(n/dp) bytes for the "
               "largest reduce_scatter of n elements. zero=2 shards the gradients too (2 + 16/dp bytes per local "
               "parameter at grad_accum = 1, plus each full-size d.P from its first write to its reduce_scatter; "
               "and at grad_accum > 1 with pp = 1, where each micro-batch's reduce-scatter adds "
               "its shard to the shard accumulator; at pp > 1 the full d.P accumulate until the "
               "last micro-batch: 6 + 16/dp on the cpu backend, zero=1's memory on cuda).\n");
}
