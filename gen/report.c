/* report.c: report.md and `boost report --json`: parameters, FLOPs per token, per-layer collectives
 * of all three layouts side by side (each built from its own schedule; megatron of a low-rank model
 * is its full-rank twin with the same shapes), every GEMM shape with its arithmetic intensity,
 * activation memory with and without checkpointing, weight/gradient/optimizer memory per rank, and
 * the model-level collectives. All figures come from the generated schedules, not from formulas. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/ir.h"
#include "gen/report.h"
#include "gen/align.h"
#include "gen/dp.h"
#include "gen/moe.h"
#include "gen/pipeline.h"
#include "gen/factor.h"
#include "gen/gen.h"          // defines: infer_report_write
#include "gen/pp.h"           // defines: PpPlan, pp_build, pp_report

typedef struct { int64_t count, elems, bytes; } CollSum;
typedef struct { int ta, tb; int64_t m, n, k, batch; int count; } Shape;


typedef struct {
    int ok;
    char why[300];
    CollSum layer_fwd, layer_bwd;          /* layer 0, per rank */
    CollSum all_fwd, all_bwd;              /* every layer */
    CollSum model_fwd, model_bwd;          /* embedding, final gather, head, loss (layer -1) */
    int64_t arena, arena_nockpt, arena_lower;
    Shape l0[16]; int nl0;                 /* layer 0's forward GEMMs, in order */
} LayoutFig;

static void add_coll(CollSum *s, const Op *o, int tp) {
    s->count++;
    /* in place on its buf: elems; src -> dst: the gathered rows x cols*tp */
    if (ccat_kind(ir_coll_kind(o))->operands & CO_BUF) s->elems += o->elems;
    else s->elems += o->rows * o->cols * tp;
    s->bytes += o->bytes;
}

static void l0_gemm(LayoutFig *f, const Gemm *x, int64_t batch) {
    if (f->nl0 >= 16) return;
    Shape s = {x->ta, x->tb, x->m, x->n, x->k, batch, 1};
    f->l0[f->nl0++] = s;
}

static void collect(const Graph *g, LayoutFig *f) {
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (s < g->nfwd_steps && o->layer == 0) {
            if (o->kind == OP_GEMM || o->kind == OP_BATCHED_GEMM) l0_gemm(f, &o->g, o->g.batch > 0 ? o->g.batch : 1);
            if (o->kind == OP_GROUPED_GEMM) for (int i = 0; i < o->nmembers; i++) l0_gemm(f, &o->members[i], 1);
        }
        /* tp only: dp and edp in dp_report, ep in the MoE part */
        if (ir_coll_kind(o) < 0 || o->group != CG_TP) continue;
        int bwd = s >= g->nfwd_steps;
        if (o->layer == 0) add_coll(bwd ? &f->layer_bwd : &f->layer_fwd, o, g->tp);
        if (o->layer >= 0) add_coll(bwd ? &f->all_bwd : &f->all_fwd, o, g->tp);
        else add_coll(bwd ? &f->model_bwd : &f->model_fwd, o, g->tp);
    }
}

static void layout_fig(const Run *run, int layout, LayoutFig *f) {
    memset(f, 0, sizeof *f);
    int st;
    Graph *g = graph_build(run, layout, run->checkpoint, f->why, sizeof f->why, &st);
    if (!g) return;
    collect(g, f);
    f->arena = g->arena_bytes;
    graph_free(g);
    g = graph_build(run, layout, CKPT_NONE, f->why, sizeof f->why, &st);
    if (!g) return;
    f->arena_nockpt = g->arena_bytes;
    graph_free(g);
    f->ok = 1;
}

static void add_shape(Shape **sh, int *n, int *cap, const Gemm *x, int64_t batch) {
    for (int i = 0; i < *n; i++) {
        Shape *s = &(*sh)[i];
        if (s->m == x->m && s->n == x->n && s->k == x->k && s->batch == batch && s->ta == x->ta && s->tb == x->tb) {
            s->count++;
            return;
        }
    }
    if (*n == *cap) { *cap = *cap ? 2 * *cap : 32; *sh = realloc(*sh, (size_t)*cap * sizeof **sh); }
    Shape s = {x->ta, x->tb, x->m, x->n, x->k, batch, 1};
    (*sh)[(*n)++] = s;
}

static double gemm_flops(const Gemm *x, int64_t batch) { return 2.0 * x->m * x->n * x->k * batch; }
static double intensity(int64_t m, int64_t n, int64_t k) { return (double)m * n * k / ((double)m * k + (double)k * n + (double)m * n); }

/* Model FLOPs per token (forward + backward), from the tp=1 schedule's GEMMs plus attention. */
static double flops_per_token(const Run *run, double *attn_out, char *err, size_t errlen) {
    Run r1 = *run;
    r1.tp = 1;
    int st;
    Graph *g = graph_build(&r1, run->layout, CKPT_NONE, err, errlen, &st);
    if (!g) return -1;
    double f = 0;
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (o->kind == OP_GEMM || o->kind == OP_BATCHED_GEMM) f += gemm_flops(&o->g, o->g.batch > 0 ? o->g.batch : 1);
        if (o->kind == OP_GROUPED_GEMM) for (int i = 0; i < o->nmembers; i++) f += gemm_flops(&o->members[i], 1);
    }
    f /= (double)g->M;
    const Model *m = &run->model;
    /* attention per token and layer: q k^T and P v over all seq keys (no causal discount),
       2 * 2 * seq * heads * head_dim forward, twice that backward */
    double attn = 12.0 * run->seq * m->heads * m->head_dim * m->layers;
    graph_free(g);
    *attn_out = attn;
    return f + attn;
}

static const char *lname[3] = {"megatron", "naive", "btp"};

static void json_coll(FILE *f, const char *key, const CollSum *s, int comma) {
    fprintf(f, "\"%s\": {\"allreduce_count\": %" PRId64 ", \"allreduce_elems\": %" PRId64 ", \"allreduce_bytes\": %" PRId64 "}%s",
            key, s->count, s->elems, s->bytes, comma ? ", " : "");
}

static void md_bytes(FILE *f, double b) {
    if (b >= 1e9) fprintf(f, "%.2f GB", b / 1e9);
    else if (b >= 1e6) fprintf(f, "%.2f MB", b / 1e6);
    else if (b >= 1e3) fprintf(f, "%.1f kB", b / 1e3);
    else fprintf(f, "%.0f B", b);
}

/* ---- MoE: the collectives of the first MoE layer's MLP next to the dense btp MLP's ---- */

/* Is tag (of a collective of layer i) part of that layer's MLP block, dense or MoE? */
static int mlp_tag(const char *tag, int i) {
    char pre[16];
    snprintf(pre, sizeof pre, "L%d.", i);
    size_t n = strlen(pre);
    if (strncmp(tag, pre, n)) return 0;
    static const char *parts[] = {"gu", "gate", "up", "down", "mlp_norm", "router", "moe_gu", "moe_gus", "moe_down", "moe_gates"};
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) if (!strcmp(tag + n, parts[k])) return 1;
    return 0;
}

static void mlp_colls(const Graph *g, int i, CollSum *fwd, CollSum *bwd) {
    memset(fwd, 0, sizeof *fwd); memset(bwd, 0, sizeof *bwd);
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (ir_coll_kind(o) >= 0 && o->group == CG_TP && o->layer == i && mlp_tag(o->tag, i))
            add_coll(s >= g->nfwd_steps ? bwd : fwd, o, g->tp);
    }
}

/* Bytes of layer i's ep all-to-all steps (forward and backward, per rank and micro-batch, every E*C
 * slot at capacity) in graph g. */
static int64_t alltoall_bytes(const Graph *g, int i) {
    int64_t b = 0;
    for (int s = 0; s < g->nsteps; s++)
        if (ir_coll_kind(&g->steps[s]) >= 0 && g->steps[s].group == CG_EP && g->steps[s].layer == i)
            b += g->steps[s].bytes;
    return b;
}

/* The same from the emitted steps of the run under expert parallelism (btp, its ep or 2 when it has
 * none, dp = ep) with the factors in `shared` shared: -1 (why in err) when that run cannot be built. */
static int64_t ep_dispatch_bytes(const Run *run, int i, unsigned shared, char *why, size_t n) {
    const Model *m = &run->model;
    Run *r = malloc(sizeof *r);
    if (!r) { snprintf(why, n, "out of memory"); return -1; }
    *r = *run;
    int ep = run->ep > 1 ? run->ep : m->moe_experts % 2 == 0 ? 2 : m->moe_experts;
    r->ep = ep; r->dp = ep; r->pp = 1; r->zero = 0; r->layout = LAYOUT_BTP;
    r->model.moe_shared = shared;
    int st;
    Graph *g = graph_build(r, LAYOUT_BTP, run->checkpoint, why, n, &st);
    int64_t b = g ? alltoall_bytes(g, i) : -1;
    graph_free(g);
    free(r);
    return b;
}

static void moe_section(const Run *run, const Graph *g, FILE *f, int json) {
    const Model *m = &run->model;
    int i = -1;
    for (int l = 0; l < m->layers && i < 0; l++) if (m->moe_experts && m->moe_layer[l]) i = l;
    if (i < 0 || g->layout != LAYOUT_BTP) return;
    CollSum mf, mb, df = {0}, db = {0};
    mlp_colls(g, i, &mf, &mb);
    Run *dense = malloc(sizeof *dense);
    if (!dense) return;
    *dense = *run;
    dense->model.moe_experts = 0;
    char why[512];
    int st, ok = 0;
    Graph *g2 = graph_build(dense, LAYOUT_BTP, run->checkpoint, why, sizeof why, &st);
    if (g2) { mlp_colls(g2, i, &df, &db); graph_free(g2); ok = 1; }
    free(dense);
    int64_t M = g->M, E = m->moe_experts, K = m->moe_top_k, C = moe_capacity(run);
    int64_t rgu = m->proj[i][PROJ_GATE].rank + m->proj[i][PROJ_UP].rank, rd = m->proj[i][PROJ_DOWN].rank;
    /* dispatch bytes per layer and micro-batch, forward + backward: tp-experts from the steps (this
       run's MoE block collectives, per rank); expert parallelism from the all-to-all steps of the run
       built with ep (full tokens, all three factors shared) and, when the run has ep, its own */
    int64_t asz = (int64_t)ir_dtype_size(ir_act_dtype(g));
    char whyf[512] = "", whys[512] = "";
    int64_t tpx = mf.bytes + mb.bytes, epf = ep_dispatch_bytes(run, i, 0, whyf, sizeof whyf);
    int64_t eps = ep_dispatch_bytes(run, i, MOE_SHARE_GATE_A | MOE_SHARE_UP_A | MOE_SHARE_DOWN_B, whys, sizeof whys);
    int64_t epr = g->ep > 1 ? alltoall_bytes(g, i) : -1;
    int64_t psh = moe_expert_params(m, i, m->moe_shared), pun = moe_expert_params(m, i, 0);
    int64_t pall = moe_expert_params(m, i, MOE_SHARE_GATE_A | MOE_SHARE_UP_A | MOE_SHARE_DOWN_B);
    if (json) {
        fprintf(f, " \"moe\": {\"layer\": %d, \"experts\": %" PRId64 ", \"top_k\": %" PRId64 ", \"capacity\": %" PRId64 ", \"mlp\": {", i, E, K, C);
        json_coll(f, "forward", &mf, 1); json_coll(f, "backward", &mb, 0);
        fprintf(f, "}, \"dense_mlp\": {");
        json_coll(f, "forward", &df, 1); json_coll(f, "backward", &db, 0);
        fprintf(f, "}, \"dispatch\": {\"tp_experts\": {\"bytes\": %" PRId64 "}, \"ep_full\": {\"bytes\": %" PRId64 "}, "
                   "\"ep_shared\": {\"bytes\": %" PRId64 "}, \"ep_run\": {\"ep\": %d, \"bytes\": %" PRId64 "}, \"params_shared\": %" PRId64
                   ", \"params_unshared\": %" PRId64 ", \"params_all_shared\": %" PRId64 ", \"shared\": %u}},\n", tpx, epf, eps,
                g->ep, epr, psh, pun, pall, m->moe_shared);
        return;
    }
    fprintf(f, "\n## MoE layers (btp)\n\nLayer %d's MLP is a mixture of %" PRId64 " low-rank experts, top-%" PRId64
               ", capacity %" PRId64 " token slots per expert (capacity factor %g, %" PRId64 " tokens); load-balance "
               "loss weight %g. Collectives of the MLP block per rank and micro-batch, against the dense btp MLP "
               "with the same ranks:\n\n| block | fwd count | fwd elements | fwd bytes | bwd count | bwd elements | bwd bytes |\n"
               "|---|---:|---:|---:|---:|---:|---:|\n", i, E, K, C, m->moe_capacity, M, m->moe_aux);
    const char *names[2] = {"MoE MLP", "dense MLP"};
    CollSum *fw[2] = {&mf, &df}, *bw[2] = {&mb, &db};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !ok) { fprintf(f, "| dense MLP | n/a: %s |||||\n", why); continue; }
        fprintf(f, "| %s | %" PRId64 " | %" PRId64 " | ", names[k], fw[k]->count, fw[k]->elems);
        md_bytes(f, (double)fw[k]->bytes);
        fprintf(f, " | %" PRId64 " | %" PRId64 " | ", bw[k]->count, bw[k]->elems);
        md_bytes(f, (double)bw[k]->bytes);
        fprintf(f, " |\n");
    }
    fprintf(f, "\nForward, MoE: norm statistic M = %" PRId64 ", router logits M*E = %" PRId64 ", experts' gate/up "
               "bottleneck E*C*(r_g+r_u) = %" PRId64 ", down bottleneck E*C*r_d = %" PRId64 " elements (the routing is "
               "computed on every rank from the all-reduced logits, so tokens never move between ranks). Backward: "
               "the bottlenecks' duals, the norm's dot (M) and the gates' gradient (M*k = %" PRId64 ", fp32).\n",
            M, M * E, E * C * rgu, E * C * rd, M * K);
    if (m->moe_shared)
        fprintf(f, "\nShared factors (%s%s%s): the closed forms in the sentence above are for unshared experts, the table counts the emitted steps: a shared A projects each "
                   "token once, [M, r] all-reduced instead of [E*C, r], and its latent is dispatched in rank space; a "
                   "shared down B combines in rank space (its dual is [M, r_d] and the gates' gradient needs no "
                   "all-reduce).\n", (m->moe_shared & 1) ? "gate.A " : "",
                (m->moe_shared & 2) ? "up.A " : "", (m->moe_shared & 4) ? "down.B" : "");
    fprintf(f, "\nDispatch per MoE layer and micro-batch, forward + backward. tp-experts: this run's MoE block "
               "collectives per rank, counted from the emitted steps (the routing is replicated, no token moves). "
               "Expert parallelism (parallel.ep, docs/moe.md): the `alltoall` steps of the layer emitted for the run "
               "with ep, per rank, at capacity (all E*C = %" PRId64 " slots, out and back, %" PRId64 "-byte elements; "
               "the runtime sends only the filled slots): full tokens carry d out and d back, shared gate/up A and down "
               "B r_g+r_u out and r_d back. Expert parameters of the layer (router excluded; with ep each rank holds "
               "1/ep of the unshared ones):\n\n"
               "| placement | dispatch bytes | expert parameters |\n|---|---:|---:|\n", E * C, asz);
    fprintf(f, "| tp-experts (this run, tp=%d) | ", g->tp); md_bytes(f, (double)tpx); fprintf(f, " | %" PRId64 " |\n", psh);
    if (epr >= 0) { fprintf(f, "| ep=%d (this run) | ", g->ep); md_bytes(f, (double)epr); fprintf(f, " | %" PRId64 " |\n", psh); }
    if (epf >= 0) { fprintf(f, "| ep, full tokens | "); md_bytes(f, (double)epf); fprintf(f, " | %" PRId64 " |\n", pun); }
    else fprintf(f, "| ep, full tokens | n/a: %s | %" PRId64 " |\n", whyf, pun);
    if (eps >= 0) { fprintf(f, "| ep, shared gate.A up.A down.B | "); md_bytes(f, (double)eps); fprintf(f, " | %" PRId64 " |\n", pall); }
    else fprintf(f, "| ep, shared gate.A up.A down.B | n/a: %s | %" PRId64 " |\n", whys, pall);
}

/* Everything the report prints, gathered from the run's schedule and the other layouts'. */
typedef struct {
    Graph *g;                                   /* the run's own schedule */
    int64_t total, embed, head, norms, layer0, layers_all;   /* canonical parameters */
    int64_t local, local_layers;                /* parameters held by one rank */
    double fpt, attn;                           /* FLOPs per token: all, attention's share */
    LayoutFig lf[3];                            /* by enum Layout */
    Shape *sh; int nsh;                         /* GEMM shapes of the run's schedule */
    GemmAlign align;                            /* its GEMM FLOPs off cuBLAS's fast paths */
    double wmem, wmem_stage;                    /* weights + grads + AdamW bytes per rank, per stage */
    int pp, self;                               /* pipeline stages; the run's layout */
    PpPlan *pl;                                 /* pp > 1: the stages and schedule (gen/pp.c), else NULL */
} Report;

/* Fill d from a finished graph of the run: 0, or 2 with err (the FLOP count's tp=1 schedule). */
static int report_gather(const Run *run, Graph *g, Report *d, char *err, size_t errlen) {
    int st;
    /* parameters (canonical) */
    int64_t total = 0, embed = 0, head = 0, norms = 0, layer0 = 0, layers_all = 0;
    for (int i = 0; i < g->ncanons; i++) {
        const Canon *c = &g->canons[i];
        int64_t n = c->rows * c->cols;
        total += n;
        if (!strcmp(c->name, "embed")) embed = n;
        else if (!strcmp(c->name, "head")) head = n;
        else if (!strcmp(c->name, "final_norm")) norms += n;
        else {
            layers_all += n;
            if (!strncmp(c->name, "L0.", 3)) layer0 += n;
        }
    }
    int64_t local = 0, local_layers = 0;
    for (int i = 0; i < g->nparams; i++) {
        int64_t n = g->params[i].rows * g->params[i].cols;
        local += n;
        if (g->params[i].name[0] == 'L') local_layers += n;
    }
    double attn = 0;
    double fpt = flops_per_token(run, &attn, err, errlen);
    if (fpt < 0) return 2;
    LayoutFig lf[3];
    for (int l = 0; l < 3; l++) {
        if (l == run->layout) {
            memset(&lf[l], 0, sizeof lf[l]);
            collect(g, &lf[l]);
            lf[l].arena = g->arena_bytes;
            Graph *g2 = graph_build(run, l, CKPT_NONE, lf[l].why, sizeof lf[l].why, &st);
            if (g2) { lf[l].arena_nockpt = g2->arena_bytes; graph_free(g2); lf[l].ok = 1; }
        } else layout_fig(run, l, &lf[l]);
    }
    /* GEMM shapes of the run's own schedule */
    Shape *sh = NULL; int nsh = 0, capsh = 0;
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (o->kind == OP_GEMM || o->kind == OP_BATCHED_GEMM) add_shape(&sh, &nsh, &capsh, &o->g, o->g.batch > 0 ? o->g.batch : 1);
        if (o->kind == OP_GROUPED_GEMM) for (int i = 0; i < o->nmembers; i++) add_shape(&sh, &nsh, &capsh, &o->members[i], 1);
    }
    /* weights (bf16) + fp32 master + fp32 grads + AdamW m and v (fp32): 18 bytes per local element */
    double wmem = 18.0 * (double)local;
    int pp = run->pp > 0 ? run->pp : 1;
    /* with pipeline stages: a stage holds its share of the layers plus the embedding (first) or
       the final norm and head (last); the larger end is reported */
    double wmem_stage = 18.0 * ((double)local_layers / pp + (double)(local - local_layers) / (pp > 1 ? 2 : 1));
    d->g = g;
    d->total = total; d->embed = embed; d->head = head; d->norms = norms; d->layer0 = layer0; d->layers_all = layers_all;
    d->local = local; d->local_layers = local_layers;
    d->fpt = fpt; d->attn = attn;
    memcpy(d->lf, lf, sizeof lf);
    d->sh = sh; d->nsh = nsh;
    gemm_alignment(g, &d->align);
    d->wmem = wmem; d->wmem_stage = wmem_stage;
    d->pp = pp; d->self = run->layout;
    return 0;
}

/* The share of `part` in `all` GEMM FLOPs (0 when there are none). */
static double share(double part, double all) { return all > 0 ? part / all : 0; }

static void json_align(FILE *f, const GemmAlign *a) {
    double t = a->total;
    fprintf(f, " \"gemm_alignment\": {\"gemm_flops\": %.0f, \"misaligned_flops_share\": %.6f, "
               "\"layout_share\": %.6f, \"start_share\": %.6f, \"ld_share\": %.6f, "
               "\"stride_share\": %.6f, \"shape_share\": %.6f, \"misaligned_gemms\": %d},\n",
            t, share(a->misaligned, t), share(a->layout, t), share(a->start, t), share(a->ld, t),
            share(a->stride, t), share(a->shape, t), a->ngemms_misaligned);
}

static void md_align(FILE *f, const GemmAlign *a) {
    double t = a->total / 100;   /* percentages */
    fprintf(f, "\nGEMM alignment: %.2f%% of these GEMM FLOPs (%d GEMMs) miss cuBLAS's fast "
               "paths. Buffer layout: %.2f%% (an operand start off 16 bytes %.2f%%, a leading "
               "dimension not a multiple of 8 elements %.2f%%, a batch stride not a multiple of 8 "
               "%.2f%%); model shape: %.2f%% (a dense operand whose width, a model dimension, is not "
               "a multiple of 8).\n",
            share(a->misaligned, t), a->ngemms_misaligned, share(a->layout, t), share(a->start, t),
            share(a->ld, t), share(a->stride, t), share(a->shape, t));
}

/* JSON: the pipeline's split, point-to-point bytes and bubble (report.md's "Pipeline", gen/pp.c). */
static void pipeline_json(const PpPlan *pl, FILE *f) {
    fprintf(f, " \"pipeline\": {\"pp\": %d, \"virtual_stages\": %d, \"micro_batches\": %d, \"schedule\": \"%s\", \"stages\": [",
            pl->pp, pl->v, pl->m, pl->v > 1 ? "interleaved-1f1b" : "1f1b");
    for (int s = 0; s < pl->nv; s++) {
        const PpStage *st = &pl->stages[s];
        fprintf(f, "%s{\"stage\": %d, \"rank\": %d, \"layers\": [%d, %d], \"local_params\": %" PRId64 ", \"activation_slots\": %d}",
                s ? ", " : "", s, s % pl->pp, st->layer0, st->layer1 - 1, st->param_elems, st->slots);
    }
    fprintf(f, "], \"p2p_bytes_per_microbatch\": %" PRId64 ", \"bubble\": %.6g, \"bubble_formula\": %.6g},\n",
            pl->stages[0].boundary_bytes, pl->bubble, (double)(pl->pp - 1) / (pl->v * pl->m + pl->pp - 1));
}

static void report_json(const Run *run, const Report *d, FILE *f) {
    const Model *m = &run->model;
    const Graph *g = d->g;
    const LayoutFig *lf = d->lf;
    const Shape *sh = d->sh;
    int nsh = d->nsh, pp = d->pp, self = d->self;
    int64_t total = d->total, embed = d->embed, head = d->head, norms = d->norms, layer0 = d->layer0;
    int64_t layers_all = d->layers_all, local = d->local;
    double fpt = d->fpt, attn = d->attn, wmem = d->wmem, wmem_stage = d->wmem_stage;
    fprintf(f, "{\"run\": \"%s\", \"model\": \"%s\", \"layout\": \"%s\", \"tp\": %d, \"pp\": %d, \"tokens_per_microbatch\": %" PRId64 ",\n",
            run->name, m->name, layout_name(self), run->tp, pp, g->M);
    fprintf(f, " \"params\": {\"total\": %" PRId64 ", \"per_layer\": %" PRId64 ", \"layers\": %" PRId64 ", \"embedding\": %" PRId64
               ", \"head\": %" PRId64 ", \"final_norm\": %" PRId64 ", \"local_per_rank\": %" PRId64 ", \"per_stage_layers\": %" PRId64 "},\n",
            total, layer0, layers_all, embed, head, norms, local, layers_all / pp);
    fprintf(f, " \"flops_per_token\": %.0f, \"attention_flops_per_token\": %.0f,\n", fpt, attn);
    fprintf(f, " \"per_layer\": {");
    json_coll(f, "forward", &lf[self].layer_fwd, 1);
    json_coll(f, "backward", &lf[self].layer_bwd, 0);
    fprintf(f, "},\n");
    moe_section(run, g, f, 1);
    if (d->pl) pipeline_json(d->pl, f);
    fprintf(f, " \"model_level\": {");
    json_coll(f, "forward", &lf[self].model_fwd, 1);
    json_coll(f, "backward", &lf[self].model_bwd, 0);
    fprintf(f, "},\n \"layouts\": {");
    for (int l = 0; l < 3; l++) {
        fprintf(f, "\"%s\": ", lname[l]);
        if (!lf[l].ok) { fprintf(f, "{\"error\": \"");
            for (const char *c = lf[l].why; *c; c++) { if (*c == '"' || *c == '\\') fputc('\\', f); fputc(*c, f); }
            fprintf(f, "\"}%s", l < 2 ? ", " : ""); continue; }
        fprintf(f, "{\"per_layer\": {");
        json_coll(f, "forward", &lf[l].layer_fwd, 1);
        json_coll(f, "backward", &lf[l].layer_bwd, 0);
        fprintf(f, "}, \"all_layers\": {");
        json_coll(f, "forward", &lf[l].all_fwd, 1);
        json_coll(f, "backward", &lf[l].all_bwd, 0);
        fprintf(f, "}, \"model_level\": {");
        json_coll(f, "forward", &lf[l].model_fwd, 1);
        json_coll(f, "backward", &lf[l].model_bwd, 0);
        fprintf(f, "}, \"layer0_forward_gemms\": [");
        for (int i = 0; i < lf[l].nl0; i++) {
            const Shape *q = &lf[l].l0[i];
            fprintf(f, "%s{\"m\": %" PRId64 ", \"n\": %" PRId64 ", \"k\": %" PRId64 ", \"batch\": %" PRId64 ", \"intensity\": %.1f}",
                    i ? ", " : "", q->m, q->n, q->k, q->batch, intensity(q->m, q->n, q->k));
        }
        fprintf(f, "], \"activation_bytes\": %" PRId64 ", \"activation_bytes_no_checkpoint\": %" PRId64 "}%s",
                lf[l].arena, lf[l].arena_nockpt, l < 2 ? ", " : "");
    }
    fprintf(f, "},\n \"gemms\": [");
    for (int i = 0; i < nsh; i++)
        fprintf(f, "%s{\"m\": %" PRId64 ", \"n\": %" PRId64 ", \"k\": %" PRId64 ", \"batch\": %" PRId64 ", \"ta\": %d, \"tb\": %d, \"count\": %d, \"intensity\": %.1f}",
                i ? ", " : "", sh[i].m, sh[i].n, sh[i].k, sh[i].batch, sh[i].ta, sh[i].tb, sh[i].count, intensity(sh[i].m, sh[i].n, sh[i].k));
    fprintf(f, "],\n");
    json_align(f, &d->align);
    dp_report(run, g, f, 1);
    fprintf(f, " \"memory\": {\"activation_bytes\": %" PRId64 ", \"activation_bytes_no_checkpoint\": %" PRId64
               ", \"activation_bytes_busiest_step\": %" PRId64
               ", \"weights_grads_adamw_bytes_per_rank\": %.0f, \"weights_grads_adamw_bytes_per_rank_per_stage\": %.0f}}\n",
            lf[self].arena, lf[self].arena_nockpt, g->arena_lower_bound, wmem, wmem_stage);
}

/* report.md, first part: the model, parameters, FLOPs, per-layer collectives, MoE. */
static void md_overview(const Run *run, const Report *d, FILE *f) {
    const Model *m = &run->model;
    const Graph *g = d->g;
    const LayoutFig *lf = d->lf;
    int pp = d->pp, self = d->self;
    int64_t total = d->total, embed = d->embed, head = d->head, norms = d->norms, layer0 = d->layer0;
    int64_t layers_all = d->layers_all, local = d->local;
    double fpt = d->fpt, attn = d->attn;
    fprintf(f, "# %s: %s, layout %s, tp=%d, pp=%d\n\n", run->name, m->name, layout_name(self), run->tp, pp);
    fprintf(f, "Model: d=%d, %d layers, %d heads (%d kv), head_dim %d, d_ff %d, vocab %d, family %s%s.\n",
            m->hidden, m->layers, m->heads, m->kv_heads, m->head_dim, m->ffn, m->vocab, m->family, m->lax ? " (LaX crossings)" : "");
    fprintf(f, "Micro-batch: %d x %d = %" PRId64 " tokens per rank and step; activations %s.\n\n",
            run->micro_batch, run->seq, g->M, run->dtype == DT_FP32 ? "fp32" : "bf16");
    fprintf(f, "## Parameters\n\n| part | parameters |\n|---|---:|\n");
    fprintf(f, "| total | %" PRId64 " |\n| per layer (layer 0) | %" PRId64 " |\n| all layers | %" PRId64 " |\n"
               "| embedding | %" PRId64 " |\n| LM head | %" PRId64 " |\n| final norm | %" PRId64 " |\n"
               "| held by one rank (this layout) | %" PRId64 " |\n",
            total, layer0, layers_all, embed, head, norms, local);
    if (pp > 1)
        fprintf(f, "\nPipeline: pp=%d; a stage holds about %d layers (%" PRId64 " layer parameters per stage); the plan has "
                   "one section per stage (the split, slots, p2p bytes and bubble: \"Pipeline\" at the end).\n", pp,
                (m->layers + pp - 1) / pp, layers_all / pp);
    fprintf(f, "\n## FLOPs per token (forward + backward)\n\n%.4g FLOPs per token: GEMMs from the tp=1 schedule "
               "(2mnk each, forward and both backward products) plus attention %.4g (q k^T and P v over all %d keys, "
               "no causal discount). Recompute is not counted.\n", fpt, attn, run->seq);
    fprintf(f, "\n## Collectives per layer (per rank, one micro-batch; layer 0)\n\n"
               "| layout | fwd count | fwd elements | fwd bytes | bwd count | bwd elements | bwd bytes |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for (int l = 0; l < 3; l++) {
        if (!lf[l].ok) { fprintf(f, "| %s | n/a: %s |||||\n", lname[l], lf[l].why); continue; }
        fprintf(f, "| %s%s | %" PRId64 " | %" PRId64 " | ", lname[l],
                l == 0 && factorization_lowrank(model_factorization(m)) ? " (full-rank twin)" : "",
                lf[l].layer_fwd.count, lf[l].layer_fwd.elems);
        md_bytes(f, (double)lf[l].layer_fwd.bytes);
        fprintf(f, " | %" PRId64 " | %" PRId64 " | ", lf[l].layer_bwd.count, lf[l].layer_bwd.elems);
        md_bytes(f, (double)lf[l].layer_bwd.bytes);
        fprintf(f, " |\n");
    }
    if (self == LAYOUT_BTP && run->online_rmsnorm && run->tp > 1)   /* tp=1: plain norm */
        fprintf(f, "\nOnline RMSNorm: each rank's share of the mean square, s_i/d, rides in the "
                   "all-reduce buffer after its [M, r] activations (one per token, so the GEMMs keep "
                   "aligned leading dimensions) in the activation dtype (%s), so the forward carries 2 "
                   "extra elements per token "
                   "and layer and the backward none. In bf16 each share is rounded to 8 significant bits (relative "
                   "error <= 2^-9), the same rounding the rank-r entries beside it get; the resulting 1/sqrt error is "
                   "<= 2^-10 relative, below the bf16 rounding of the normalized activations themselves.\n",
                run->dtype == DT_FP32 ? "fp32" : "bf16");
    moe_section(run, g, f, 0);
}

/* report.md, second part: layer-0 GEMMs by layout, model-level collectives, the run's GEMM shapes. */
static void md_gemms(const Run *run, const Report *d, FILE *f) {
    const LayoutFig *lf = d->lf;
    const Shape *sh = d->sh;
    int nsh = d->nsh, self = d->self;
    fprintf(f, "\n## Layer-0 forward GEMMs by layout (per rank)\n\n"
               "m x n x k (batch) and arithmetic intensity mnk/(mk+kn+mn), in execution order.\n\n");
    for (int l = 0; l < 3; l++) {
        if (!lf[l].ok) continue;
        fprintf(f, "- %s:", lname[l]);
        for (int i = 0; i < lf[l].nl0; i++) {
            const Shape *q = &lf[l].l0[i];
            fprintf(f, "%s %" PRId64 "x%" PRId64 "x%" PRId64, i ? ";" : "", q->m, q->n, q->k);
            if (q->batch > 1) fprintf(f, " (x%" PRId64 ")", q->batch);
            fprintf(f, " AI %.0f", intensity(q->m, q->n, q->k));
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\n## Model-level collectives (%s)\n\n| direction | count | bytes |\n|---|---:|---:|\n", layout_name(self));
    fprintf(f, "| forward (embedding gather, final gather, loss statistics) | %" PRId64 " | ", lf[self].model_fwd.count);
    md_bytes(f, (double)lf[self].model_fwd.bytes);
    fprintf(f, " |\n| backward (LM head input gradient) | %" PRId64 " | ", lf[self].model_bwd.count);
    md_bytes(f, (double)lf[self].model_bwd.bytes);
    fprintf(f, " |\n\n## GEMMs (%s, local shapes, forward + backward%s)\n\n"
               "Arithmetic intensity mnk/(mk+kn+mn) per batch member.\n\n| m | n | k | batch | op | count | intensity |\n|---:|---:|---:|---:|---|---:|---:|\n",
            layout_name(self), run->checkpoint == CKPT_LOWRANK ? " + recompute" : "");
    for (int i = 0; i < nsh; i++)
        fprintf(f, "| %" PRId64 " | %" PRId64 " | %" PRId64 " | %" PRId64 " | %s | %d | %.1f |\n", sh[i].m, sh[i].n, sh[i].k, sh[i].batch,
                sh[i].ta ? "A^T B" : sh[i].tb ? "A B^T" : "A B", sh[i].count, intensity(sh[i].m, sh[i].n, sh[i].k));
    md_align(f, &d->align);
}

/* report.md, last part: memory per rank and the activation arena of each layout. */
static void md_memory(const Run *run, const Report *d, FILE *f) {
    const Graph *g = d->g;
    const LayoutFig *lf = d->lf;
    int pp = d->pp, self = d->self;
    double wmem = d->wmem, wmem_stage = d->wmem_stage;
    fprintf(f, "\n## Memory per rank\n\n| | bytes |\n|---|---:|\n| activation arena (checkpoint=%s) | ",
            run->checkpoint == CKPT_LOWRANK ? "lowrank" : "none");
    md_bytes(f, (double)lf[self].arena);
    fprintf(f, " (busiest step: ");
    md_bytes(f, (double)g->arena_lower_bound);
    fprintf(f, " live)");
    fprintf(f, " |\n| activation arena without checkpointing | ");
    md_bytes(f, (double)lf[self].arena_nockpt);
    fprintf(f, " |\n| weights + grads + AdamW | ");
    md_bytes(f, wmem);
    if (pp > 1) { fprintf(f, " |\n| weights + grads + AdamW, one pipeline stage (pp=%d) | ", pp); md_bytes(f, wmem_stage); }
    if (run->zero && run->dp > 1) {   /* masters and moments (zero=2: and gradients) of a 1/dp shard */
        fprintf(f, " |\n| weights + grads + AdamW, zero=%d (%s sharded over dp=%d) | ", run->zero,
                run->zero == 2 ? "gradients, masters and moments" : "masters and moments", run->dp);
        int ga = run->pp <= 1 ? 1 : run->grad_accum;   /* zero=2 at pp 1: shards only */
        md_bytes(f, dp_bytes_per_param(run->zero, run->dp, ga) * (double)d->local);
    }
    fprintf(f, " |\n\nAssumption: bf16 weights (2 B), fp32 master copy (4 B), fp32 gradients (4 B) and two fp32 "
               "AdamW moments (8 B): 18 bytes per local parameter. Activation figures are the generated arena "
               "(forward activations, their gradients, recompute buffers) for one micro-batch.\n");
    if (pp > 1)
        fprintf(f, "The plan and the arena cover the whole model; a pipeline stage holds about 1/%d of the layer "
                   "activations per micro-batch in flight.\n", pp);
    fprintf(f, "\nActivation arena by layout:");
    for (int l = 0; l < 3; l++)
        if (lf[l].ok) { fprintf(f, " %s ", lname[l]); md_bytes(f, (double)lf[l].arena); fprintf(f, " (no checkpoint "); md_bytes(f, (double)lf[l].arena_nockpt); fprintf(f, ")%s", l < 2 ? ";" : "."); }
    fprintf(f, "\n");
    dp_report(run, g, f, 0);
}

int report_write(const Run *run, FILE *f, int json, char *err, size_t errlen) {
    int st;
    Graph *g = graph_build(run, run->layout, run->checkpoint, err, errlen, &st);
    if (!g) return st ? st : 1;
    Report d;
    memset(&d, 0, sizeof d);
    int rc = report_gather(run, g, &d, err, errlen);
    if (!rc && run->pp > 1 && !(d.pl = pp_build(g, err, errlen))) rc = 2;   /* its Pipeline section */
    if (!rc && json) report_json(run, &d, f);
    else if (!rc) {
        md_overview(run, &d, f); md_gemms(run, &d, f); md_memory(run, &d, f); infer_report_write(run, f);
        if (d.pl) pp_report(g, d.pl, f);
    }
    pp_free(d.pl);
    free(d.sh);
    graph_free(g);
    return rc ? rc : ferror(f) ? 1 : 0;
}
