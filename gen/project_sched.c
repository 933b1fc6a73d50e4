/* project_sched.c: prices the generator's schedule (gen/pipeline.h: graph_build) step by step with
 * the formulas of project_model.c and composes one training iteration: at pp > 1 the stage schedule
 * gen/pp.c emits, executed as a timeline (gen/project_pp.c), with the (m + pp - 1) x slowest-stage
 * formula beside it; plus the optimizer and the data-parallel gradient all-reduce.
 * docs/cost-model.md is the prose of this file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/dp.h"      // defines: dp_zero2_every_micro
#include "gen/factor.h"
#include "gen/ir.h"        // defines: Graph, Op, Tensor, Param
#include "gen/pipeline.h"  // defines: graph_build
#include "gen/project.h"
#include "gen/project_pp.h"   // pp_timeline; gen/pp.h: pp_build, PpPlan

/* What one pipeline stage spends on one micro-batch (forward + backward). */
typedef struct {
    double gemm, kernel, attn, recompute, tp_comm;
    double ep_comm;           /* the ep all-to-alls (on the critical path: the experts wait for them) */
    double flops, bytes_fwd, bytes_bwd;
    double params;
    /* the emitted dp gradient reduction (group=dp steps, last micro-batch only): all of it, the part
       issued while backward compute still follows, and the backward compute after its first bucket */
    double dp_comm, dp_early, compute_after_dp;
    int dp_started;
} StageCost;

static double kconst(const KernelInst *k, const char *key, double dflt) {
    for (int i = 0; i < k->nconst; i++) if (!strcmp(k->key[i], key)) return k->val[i];
    return dflt;
}

/* Operands that hold one value per row (statistics): they move `rows` elements whatever the
 * buffer they sit in (the online-norm stat follows the activations of the all-reduce buffer). */
static int per_row_operand(const char *key) {
    static const char *keys[] = {"stat", "rho", "rstd", "lse", "dstat", "dot", "sumsq"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) if (!strcmp(key, keys[i])) return 1;
    return 0;
}

/* Operands a kernel updates in place (read, then written): they cross HBM twice. */
static int inplace_operand(const char *kind, const char *key) {
    return (!strcmp(kind, "rope") && !strcmp(key, "x")) || (!strcmp(kind, "online_norm_rescale") && !strcmp(key, "h"));
}

/* HBM bytes of a fused kernel: each operand once (an output written with acc=1: read and
 * written; so is an operand updated in place, rope's x and online_norm_rescale's h), rows x cols of it (cols = heads x head_dim for rope), a per-row statistic `rows`
 * elements, never more than the operand's tensor. Attention: q, k, v, out (and their gradients)
 * at their head widths. */
static double kernel_bytes(const Graph *g, const Op *o) {
    double rows = kconst(&o->k, "rows", -1), cols = kconst(&o->k, "cols", -1);
    double heads = kconst(&o->k, "heads", 0), kv_heads = kconst(&o->k, "kv_heads", heads);
    double head_dim = kconst(&o->k, "head_dim", 0);
    size_t act = ir_dtype_size(ir_act_dtype(g));
    if (!strncmp(o->k.kind, "attention", 9)) {
        double tokens = kconst(&o->k, "batch", 1) * kconst(&o->k, "seq", 0);
        double q = tokens * heads * head_dim, kv = tokens * kv_heads * head_dim;
        double lse = tokens * heads * 4;
        if (strstr(o->k.kind, "bwd")) return act * (3 * q + 2 * kv + q + 2 * kv) + lse;  /* q out dout, k v; dq; dk dv */
        return act * (2 * q + 2 * kv) + lse;                                              /* q k v out */
    }
    if (cols < 0 && heads > 0 && head_dim > 0) cols = heads * head_dim;
    int acc = kconst(&o->k, "acc", 0) != 0;
    double bytes = 0;
    for (int i = 0; i < o->nops; i++) {
        int t = o->ops[i].t;
        if (t < 0 || t >= g->nt) continue;
        double elems = (double)g->t[t].rows * g->t[t].cols;
        double want = per_row_operand(o->opkey[i]) ? rows : rows * cols;
        if (rows > 0 && (cols > 0 || per_row_operand(o->opkey[i])) && want < elems) elems = want;
        double b = elems * ir_dtype_size(g->t[t].dtype);
        bytes += ((o->out_mask >> i & 1) && acc) || inplace_operand(o->k.kind, o->opkey[i]) ? 2 * b : b;
    }
    return bytes;
}

/* Causal flash attention FLOPs (QK^T and PV over the lower triangle); backward is 2.5x. */
static double attention_flops(const Op *o) {
    double b = kconst(&o->k, "batch", 1), s = kconst(&o->k, "seq", 0);
    double h = kconst(&o->k, "heads", 0), hd = kconst(&o->k, "head_dim", 0);
    double fwd = 2.0 * b * h * s * s * hd;
    return strstr(o->k.kind, "bwd") ? 2.5 * fwd : fwd;
}

static void gemm_cost(const CostConsts *c, const GemmRates *rates, const Gpu *gpu, const Gemm *gm,
                      double *seconds, double *flops, Projection *p) {
    int measured = 0;
    double batch = gm->batch > 0 ? (double)gm->batch : 1;
    *seconds += gemm_seconds(c, rates, gpu, (double)gm->m, (double)gm->n, (double)gm->k, batch);
    *flops += 2.0 * gm->m * gm->n * gm->k * batch;
    gemm_eff(c, rates, gpu, (double)gm->m, (double)gm->n, (double)gm->k, &measured);
    if (measured) p->gemms_measured++; else p->gemms_modelled++;
}

/* What prices one step: the constants, measured rates, GPU and the tp group's link. */
typedef struct {
    const CostConsts *c;
    const GemmRates *rates;
    const Gpu *gpu;
    int tp;
    double tp_bw, tp_alpha;   /* coll_eff applied */
} Pricer;

enum { CAT_NONE, CAT_GEMM, CAT_KERNEL, CAT_ATTN, CAT_TP };

/* Seconds of one step of the schedule (a GEMM, kernel, attention call or tp collective; markers,
 * copies and dp buckets, which the caller prices on the dp link, are CAT_NONE with 0) into *t, its
 * GEMM/attention FLOPs added to *flops; returns the category. GEMM shapes are counted in p. */
static int step_seconds(const Pricer *P, const Graph *g, const Op *o, Projection *p, double *t, double *flops) {
    *t = 0;
    switch (o->kind) {
    case OP_GEMM: case OP_BATCHED_GEMM:
        gemm_cost(P->c, P->rates, P->gpu, &o->g, t, flops, p);
        return CAT_GEMM;
    case OP_GROUPED_GEMM:
        for (int j = 0; j < o->nmembers; j++) gemm_cost(P->c, P->rates, P->gpu, &o->members[j], t, flops, p);
        *t -= (o->nmembers - 1) * P->c->launch_us * 1e-6;            /* one launch for the group */
        return CAT_GEMM;
    case OP_KERNEL:
        if (!strncmp(o->k.kind, "attention", 9)) {
            *t = attention_seconds(P->c, P->gpu, attention_flops(o), kernel_bytes(g, o), strstr(o->k.kind, "bwd") != NULL);
            return CAT_ATTN;
        }
        *t = hbm_seconds(P->c, P->gpu, kernel_bytes(g, o));
        return CAT_KERNEL;
    default:   /* a collective by its catalog row; markers and TP copies: no step */
        if (ir_coll_kind(o) < 0 || o->group != CG_TP) return CAT_NONE;   /* other groups: caller */
        *t = ccat_seconds(ir_coll_kind(o), (double)o->bytes, P->tp, P->tp_bw, P->tp_alpha);
        return CAT_TP;
    }
}

/* The layer of a parameter from its name ("L12.q.A" -> 12), -1 for embed/head/final_norm. */
static int param_layer(const char *name) {
    int l;
    if (name[0] == 'L' && sscanf(name + 1, "%d.", &l) == 1) return l;
    return -1;
}

/* The full-rank twin: same shapes, every projection the row megatron builds with (the dense
 * one: W, its SwiGLU gate, no LaX crossing). */
static void full_rank_twin(const Run *run, Run *twin) {
    *twin = *run;
    factorization_apply(layout_factorization(&run->model, LAYOUT_MEGATRON), &twin->model, 0);
    twin->layout = LAYOUT_MEGATRON;
}

static const char *section_name(int s) { return s == SEC_FWD ? "fwd" : s == SEC_BWD ? "bwd" : "recompute"; }

/* One line of the --steps trace: section, layer, what, shape, seconds. */
static void trace_step(FILE *f, const Graph *g, const Op *o, int stage, double t) {
    char what[160] = "";
    switch (o->kind) {
    case OP_GEMM: case OP_BATCHED_GEMM:
        snprintf(what, sizeof what, "%s m=%lld n=%lld k=%lld batch=%lld", o->kind == OP_GEMM ? "gemm" : "batched_gemm",
                 (long long)o->g.m, (long long)o->g.n, (long long)o->g.k, (long long)(o->g.batch > 0 ? o->g.batch : 1));
        break;
    case OP_GROUPED_GEMM: snprintf(what, sizeof what, "grouped_gemm count=%d", o->nmembers); break;
    case OP_KERNEL: snprintf(what, sizeof what, "kernel %s", o->k.kind); break;
    default:   /* a collective: elems of its buf, or rows x cols of its src */
        if (ir_coll_kind(o) < 0) return;
        if (ccat_kind(ir_coll_kind(o))->operands & CO_BUF)
            snprintf(what, sizeof what, "%s %lld elems %s", ccat_word(ir_coll_kind(o)),
                     (long long)o->elems, o->tag);
        else snprintf(what, sizeof what, "%s %lldx%lld %s", ccat_word(ir_coll_kind(o)),
                      (long long)o->rows, (long long)o->cols, o->tag);
    }
    (void)g;
    fprintf(f, "  %-9s %5d %5d  %-60s %10.1f us\n", section_name(o->section), o->layer, stage, what, t * 1e6);
}

/* The finished schedule of one layout of a run; megatron lays out the run's full-rank twin.
 * Low-rank checkpointing belongs to btp; the baselines keep every activation. */
static Graph *layout_graph(const Run *run, int layout, char *err, size_t errlen, int *status) {
    if (layout != LAYOUT_MEGATRON)
        return graph_build(run, layout, layout == LAYOUT_BTP ? run->checkpoint : CKPT_NONE, err, errlen, status);
    Run *twin = malloc(sizeof *twin);   /* large: not on the stack */
    if (!twin) { snprintf(err, errlen, "out of memory"); *status = 1; return NULL; }
    full_rank_twin(run, twin);
    Graph *g = graph_build(twin, layout, CKPT_NONE, err, errlen, status);
    free(twin);
    return g;
}

/* The boundary b's link (between virtual stages b and b+1, on pipeline ranks b % pp and (b+1) % pp):
 * NVLink when every pair of peers sits in one node, else the network. Ranks are laid out tp fastest,
 * then dp, then pp (DESIGN.md), nodes of gpus_per_node consecutive ranks. */
static void boundary_link(const Gpu *gpu, int tp, int dp, int pp, int b, double *bw_gbs, double *alpha_us) {
    int per_node = gpu->gpus_per_node > 0 ? gpu->gpus_per_node : 1, ra = b % pp, rb = (b + 1) % pp, same = 1;
    for (int i = 0; i < dp && same; i++)
        same = ((long)ra * dp * tp + (long)i * tp) / per_node == ((long)rb * dp * tp + (long)i * tp) / per_node;
    if (same) { *bw_gbs = gpu->nvlink_gbs; *alpha_us = gpu->nvlink_latency_us; }
    else { *bw_gbs = gpu->net_gbs; *alpha_us = gpu->net_latency_us; }
}

/* Price the schedule gen/pp.c emits for g's run as a timeline (gen/project_pp.c): each virtual
 * stage's forward and backward of one micro-batch from its own steps (the same step prices as the
 * formula), each boundary's transfer of `bytes` on its link. A projection may ask for fewer
 * micro-batches than stages (a plan may not): then the schedule is built for pp micro-batches and
 * the later ones dropped, which is the 1F1B order for m (warm-up of min(pp-s-1, m) forwards).
 * Fills pipeline_s, bubble, pp_busy_s, pp_idle_s; 0, or 1 with err (the caller keeps the formula). */
static int pipeline_timeline(const Graph *g, const Pricer *P, double bytes, double coll_eff, Projection *out,
                             char *err, size_t errlen) {
    const Run *r = g->run;
    int pp = r->pp, m = r->grad_accum > 0 ? r->grad_accum : 1, dp = r->dp > 1 ? r->dp : 1;
    Run *run2 = NULL;
    Graph *g2 = NULL;
    const Graph *gs = g;
    if (m < pp) {
        run2 = malloc(sizeof *run2); g2 = malloc(sizeof *g2);
        if (!run2 || !g2) { free(run2); free(g2); snprintf(err, errlen, "out of memory"); return 1; }
        *run2 = *r; run2->grad_accum = pp;
        *g2 = *g; g2->run = run2;
        gs = g2;
    }
    PpPlan *pl = pp_build(gs, err, errlen);
    int rc = pl ? 0 : 1;
    double fwd[PP_MAX_STAGES] = {0}, bwd[PP_MAX_STAGES] = {0}, p2p[PP_MAX_STAGES] = {0}, act[PP_MAX_STAGES] = {0};
    if (pl && m < pp) {   /* drop the micro-batches beyond m */
        for (int k = 0; k < pl->pp; k++) {
            PpStage *rk = &pl->stages[k];
            int n = 0;
            for (int i = 0; i < rk->nsched; i++) if (rk->sched[i].micro < m) rk->sched[n++] = rk->sched[i];
            rk->nsched = n;
        }
        pl->m = m;
    }
    for (int k = 0; pl && k < pl->nv; k++) {
        const Graph *sg = pl->stages[k].g;
        Projection scratch;   /* GEMM shape counts are the whole graph's, counted once by the caller */
        memset(&scratch, 0, sizeof scratch);
        for (int i = 0; i < sg->nsteps; i++) {
            double t = 0, flops = 0;
            step_seconds(P, sg, &sg->steps[i], &scratch, &t, &flops);
            if (sg->steps[i].section == SEC_FWD) fwd[k] += t; else bwd[k] += t;
        }
        act[k % pl->pp] += (double)sg->arena_bytes * (pl->stages[k].slots > 0 ? pl->stages[k].slots : 1);
        if (k < pl->nv - 1) {
            double bw, alpha;
            boundary_link(P->gpu, P->tp, dp, pl->pp, k, &bw, &alpha);
            p2p[k] = send_seconds(bytes, bw * coll_eff, alpha);
        }
    }
    PpTimeline tl;
    if (pl && pp_timeline(pl, fwd, bwd, p2p, &tl, err, errlen)) rc = 1;
    if (!rc) {
        out->pipeline_s = tl.seconds;
        out->bubble = tl.bubble;
        out->pp_ranks = pp;
        for (int k = 0; k < pp && k < 64; k++) { out->pp_busy_s[k] = tl.busy_s[k]; out->pp_idle_s[k] = tl.idle_s[k]; }
        out->pp_simulated = 1;
        out->act_bytes = 0;
        for (int k = 0; k < pp && k < PP_MAX_STAGES; k++) if (act[k] > out->act_bytes) out->act_bytes = act[k];
    }
    pp_free(pl);
    free(g2); free(run2);
    return rc;
}

/* The last backward compute step of g (-1: none): dp buckets issued before it overlap compute. */
static int last_backward_compute(const Graph *g) {
    int last = -1;
    for (int i = g->nfwd_steps; i < g->nsteps; i++) {
        int k = g->steps[i].kind;
        if (k == OP_GEMM || k == OP_BATCHED_GEMM || k == OP_GROUPED_GEMM || k == OP_KERNEL)
            last = i;
    }
    return last;
}

/* The pipeline stage of a parameter (of its layer; embed: the first, the rest: the last). */
static int param_stage(const char *name, int pp, int layers) {
    int l = param_layer(name);
    if (l >= 0) return (int)((long)l * pp / layers);
    return !strncmp(name, "embed", 5) ? 0 : pp - 1;
}

/* Which stage a step belongs to: its layer's; layer -1 steps before the first layer step of a
 * section are the model's front (forward: embedding, stage 0; backward: the tail's backward, last
 * stage), those after it the other end. A dp bucket step (layer -1, tag "dp.PARAM"): the stage
 * that holds its parameter, as for the parameter counts (not the end of the backward, which would
 * charge every stage's reduction to one). seen_layer[bwd]: a layer's step seen in the section. */
static int op_stage(const Op *o, int pp, int layers, int seen_layer[2]) {
    int bwd = o->section != SEC_FWD;
    if (ir_dp_bucket(o) && !strncmp(o->tag, "dp.", 3)) return param_stage(o->tag + 3, pp, layers);
    if (o->layer >= 0) {
        seen_layer[bwd] = 1;
        return (int)((long)o->layer * pp / layers);
    }
    if (!bwd) return seen_layer[0] ? pp - 1 : 0;
    return seen_layer[1] ? 0 : pp - 1;
}

/* A tp collective step of t seconds into its stage's time and bytes, and layer 0's into the
 * per-layer figures of out: its elements in place on its buf, else src -> dst [rows, cols*tp]. */
static void count_tp_step(const Op *o, int tp, double t, StageCost *s, Projection *out) {
    int in_place = ccat_kind(ir_coll_kind(o))->operands & CO_BUF;
    double bytes = (double)o->bytes;
    double elems = in_place ? (double)o->elems : (double)o->rows * o->cols * tp;
    s->tp_comm += t;
    if (o->dir) s->bytes_bwd += bytes;
    else s->bytes_fwd += bytes;
    if (o->layer != 0) return;
    if (o->dir) {
        out->layer_bwd_elems += elems;
        out->layer_bwd_bytes += bytes;
        out->layer_bwd_count++;
    } else {
        out->layer_fwd_elems += elems;
        out->layer_fwd_bytes += bytes;
        out->layer_fwd_count++;
    }
}

/* One micro-batch's forward + backward on a stage. */
static double stage_seconds(const StageCost *s) {
    return s->gemm + s->kernel + s->attn + s->recompute + s->tp_comm + s->ep_comm;
}

/* The stage that takes longest (the first of equals). */
static int slowest_stage(const StageCost *st, int pp) {
    int slow = 0;
    for (int s = 1; s < pp; s++)
        if (stage_seconds(&st[s]) > stage_seconds(&st[slow])) slow = s;
    return slow;
}

/* dp: the emitted buckets run on the communication stream beside the rest of the backward; what
 * the backward compute after the first bucket cannot cover, and the buckets issued after the last
 * compute step, add to the iteration (the slowest stage's figure): out's dp_comm_s, dp_total_s,
 * dp_hidden_s. */
static void dp_exposed(const StageCost *st, int pp, Projection *out) {
    for (int s = 0; s < pp; s++) {
        double hidden = st[s].dp_early < st[s].compute_after_dp ? st[s].dp_early
                                                                : st[s].compute_after_dp;
        if (st[s].dp_comm - hidden > out->dp_comm_s) {
            out->dp_comm_s = st[s].dp_comm - hidden;
            out->dp_total_s = st[s].dp_comm;
            out->dp_hidden_s = hidden;
        }
    }
}

int project_cuda_zero2_shards(int grad_accum, int pp, int ep) {
    (void)grad_accum;   /* at grad_accum > 1 the reduce-scatters run every micro-batch */
    return pp <= 1 && ep <= 1;
}

double project_backend_dp_wait(const Run *run, int backend, Projection *p) {
    double waited = 0;
    if (backend == PROJECT_BACKEND_CUDA && run->zero == 2 && run->dp > 1 &&
        project_cuda_zero2_shards(run->grad_accum, run->pp, run->ep)) {
        waited = p->dp_hidden_s;   /* the compute stream waits for each reduce-scatter */
        p->dp_hidden_s = 0;
        p->dp_comm_s += waited;
    }
    /* zero=2 reducing every micro-batch (gen/dp.h): grad_accum - 1 more reductions, each as
       exposed as the one priced */
    if (dp_zero2_every_micro(run)) {
        double more = (run->grad_accum - 1) * p->dp_comm_s;
        p->dp_comm_s += more;
        waited += more;
    }
    p->comm_s += waited;
    p->seconds += waited;
    p->seconds_formula += waited;
    return waited;
}

/* The parts of out's iteration: the slowest stage S's, times the pipeline's steps (m micro-batches,
 * pp stages of v chunks each), scaled so that they add up to the pipeline's time (the timeline's
 * idle spread over them in proportion); then the compute and communication sums and the totals
 * of FLOPs and tp bytes. */
static void iteration_parts(const StageCost *S, int m, int pp, int v, double send_s,
                            Projection *out) {
    double scale = out->pipeline_formula_s > 0 ? out->pipeline_s / out->pipeline_formula_s : 1;
    double steps = pp > 1 ? ((double)v * m + pp - 1) / v : m;
    out->gemm_s = scale * steps * S->gemm;
    out->kernel_s = scale * steps * S->kernel;
    out->attn_s = scale * steps * S->attn;
    out->recompute_s = scale * steps * S->recompute;
    out->tp_comm_s = scale * steps * S->tp_comm;
    out->ep_comm_s = scale * steps * S->ep_comm;
    out->pp_send_s = pp > 1 ? scale * ((double)v * m + pp - 1) * 2 * send_s : 0;
    out->compute_s = out->gemm_s + out->kernel_s + out->attn_s + out->recompute_s + out->optim_s;
    out->comm_s = out->tp_comm_s + out->ep_comm_s + out->pp_send_s + out->dp_comm_s;
    out->gemm_flops = m * S->flops;
    out->tp_bytes_fwd = m * S->bytes_fwd;
    out->tp_bytes_bwd = m * S->bytes_bwd;
}

int project_layout(const Run *run, int layout, const CostConsts *c, const GemmRates *rates,
                   Projection *out, char *err, size_t errlen) {
    return project_layout_trace(run, layout, c, rates, out, NULL, err, errlen);
}

int project_layout_trace(const Run *run, int layout, const CostConsts *c, const GemmRates *rates,
                         Projection *out, FILE *trace, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->layout = layout;
    int status = 0;
    Graph *g = layout_graph(run, layout, err, errlen, &status);
    if (!g) return status ? status : 1;
    const Run *r = g->run;   /* the run as laid out (megatron: the twin) */

    const Gpu *gpu = &r->gpu;
    int pp = r->pp > 0 ? r->pp : 1, tp = r->tp > 0 ? r->tp : 1;
    int layers = r->model.layers;
    if (pp > layers) {
        snprintf(err, errlen, "%s: pp=%d is more than the model's %d layers (lower pp)", run->file, pp, layers);
        graph_free(g);
        return 2;
    }
    StageCost *st = calloc(pp, sizeof *st);
    if (!st) { graph_free(g); snprintf(err, errlen, "out of memory"); return 1; }
    double tp_bw, tp_alpha;
    tp_link(gpu, tp, &tp_bw, &tp_alpha);
    tp_bw *= c->coll_eff;
    const Pricer P = {c, rates, gpu, tp, tp_bw, tp_alpha};
    /* the dp group's link: NVLink when the whole tp x pp x dp grid fits a node, else the network */
    int per_node = gpu->gpus_per_node > 0 ? gpu->gpus_per_node : 1, dp = r->dp > 1 ? r->dp : 1;
    int dp_in_node = (long)tp * pp * dp <= per_node;
    double dp_bw = c->coll_eff * (dp_in_node ? gpu->nvlink_gbs : gpu->net_gbs);
    double dp_alpha = dp_in_node ? gpu->nvlink_latency_us : gpu->net_latency_us;
    /* the ep group's link: NVLink when the tp x ep ranks of a group fit a node, else the network */
    int ep = g->ep > 1 ? g->ep : 1, ep_in_node = (long)tp * ep <= per_node;
    double ep_bw = c->coll_eff * (ep_in_node ? gpu->nvlink_gbs : gpu->net_gbs);
    double ep_alpha = ep_in_node ? gpu->nvlink_latency_us : gpu->net_latency_us;
    int last_compute = last_backward_compute(g);
    int seen_layer[2] = {0, 0};   /* forward, backward: a layer's step seen yet */
    for (int i = 0; i < g->nsteps; i++) {
        const Op *o = &g->steps[i];
        int stage = op_stage(o, pp, layers, seen_layer);
        StageCost *s = &st[stage];
        double t = 0, flops = 0;
        int is_compute = 0;
        if (ir_coll_kind(o) >= 0 && o->group == CG_EP) {
            /* every slot at capacity; (ep-1)/ep of it leaves the rank */
            t = ccat_seconds(ir_coll_kind(o), (double)o->bytes, ep, ep_bw, ep_alpha);
            s->ep_comm += t;
        } else if (ir_dp_bucket(o)) {
            /* a dp bucket: priced on the dp link, once per optimizer step, as the all-reduce it
               is at zero=0 (at zero > 0 its reduce_scatter plus the optimizer's gather_shards:
               the same two ring phases) */
            t = ccat_seconds(CK_ALLREDUCE, (double)o->bytes, dp, dp_bw, dp_alpha);
            s->dp_comm += t;
            if (i < last_compute) s->dp_early += t;
            s->dp_started = 1;
        } else {
            int cat = step_seconds(&P, g, o, out, &t, &flops);
            int priced = o->section == SEC_RECOMPUTE ? 0 : 1;
            is_compute = cat != CAT_TP && cat != CAT_NONE;
            if (cat == CAT_GEMM) s->gemm += priced ? t : 0;
            else if (cat == CAT_ATTN) s->attn += priced ? t : 0;
            else if (cat == CAT_KERNEL) s->kernel += priced ? t : 0;
            else if (cat == CAT_TP) count_tp_step(o, tp, t, s, out);
        }
        if (trace && o->layer <= 0) trace_step(trace, g, o, stage, t);
        if (is_compute && o->section == SEC_RECOMPUTE) s->recompute += t;
        if (is_compute && s->dp_started) s->compute_after_dp += t;
        s->flops += flops;
    }
    for (int i = 0; i < g->nparams; i++) {
        const Param *pa = &g->params[i];
        st[param_stage(pa->name, pp, layers)].params += (double)pa->rows * pa->cols;
    }
    const StageCost *S = &st[slowest_stage(st, pp)];   /* the slowest stage sets the pace */
    int m = r->grad_accum > 0 ? r->grad_accum : 1;
    double send_s = 0;
    if (pp > 1) {
        double pp_bw, pp_alpha;
        pp_link(gpu, tp, pp, &pp_bw, &pp_alpha);
        pp_bw *= c->coll_eff;
        double width = layout == LAYOUT_BTP ? (double)r->model.hidden / tp : r->model.hidden;
        double bytes = (double)g->M * width * (r->dtype == DT_FP32 ? 4 : 2);
        send_s = send_seconds(bytes, pp_bw, pp_alpha);
    }
    double params = 0;
    for (int s = 0; s < pp; s++) if (st[s].params > params) params = st[s].params;
    out->params_local = params;
    out->act_bytes = (double)g->arena_bytes;   /* pp > 1: the timeline sets the busiest rank's */
    out->optim_s = hbm_seconds(c, gpu, params * c->optim_bytes_per_param);
    dp_exposed(st, pp, out);
    out->stage_s = stage_seconds(S);
    int v = pp > 1 && r->pp_virtual > 1 ? r->pp_virtual : 1;
    /* the formula: v m + pp - 1 steps of the slowest stage's chunk (even split of the layers) */
    out->pipeline_formula_s = pp > 1 ? pp_formula_seconds(out->stage_s / v, send_s, m, pp, v) : m * out->stage_s;
    out->bubble_formula = pp > 1 ? (double)(pp - 1) / ((double)v * m + pp - 1) : 0;
    out->pipeline_s = out->pipeline_formula_s;
    out->bubble = out->bubble_formula;
    out->pp_ranks = pp;
    if (pp > 1) {
        double width = layout == LAYOUT_BTP ? (double)r->model.hidden / tp : r->model.hidden;
        double bytes = (double)g->M * width * (r->dtype == DT_FP32 ? 4 : 2);
        char why[512] = "";
        if (pipeline_timeline(g, &P, bytes, c->coll_eff, out, why, sizeof why)) {
            out->pipeline_s = out->pipeline_formula_s;
            out->bubble = out->bubble_formula;
            snprintf(out->pp_note, sizeof out->pp_note, "the formula (no stage schedule for the timeline: %s)", why);
        }
    }
    out->seconds_formula = out->pipeline_formula_s + out->optim_s + out->dp_comm_s;
    out->seconds = out->pipeline_s + out->optim_s + out->dp_comm_s;
    iteration_parts(S, m, pp, v, send_s, out);
    free(st);
    graph_free(g);
    return 0;
}

int project_layouts(const Model *m, int layouts[3]) {
    int lowrank = 0;
    for (int l = 0; l < m->layers && !lowrank; l++)
        for (int p = 0; p < NPROJ; p++) if (m->proj[l][p].factor != FACTOR_FULL) lowrank = 1;
    if (m->moe_shared) { layouts[0] = LAYOUT_BTP; return 1; }   /* shared expert factors: btp only */
    if (!lowrank) { layouts[0] = LAYOUT_MEGATRON; return 1; }
    /* megatron (the model dense), then each low-rank layout the factorization runs in */
    int n = 0;
    const int order[3] = {LAYOUT_MEGATRON, LAYOUT_NAIVE, LAYOUT_BTP};
    for (int i = 0; i < 3; i++)
        if (factorization_unsplit(layout_factorization(m, order[i]), order[i]) < 0)
            layouts[n++] = order[i];
    return n;
}

/* The distinct GEMM shapes of a layout's schedule (grouped members one by one), as lines
 * "LAYOUT m n k batch count" for a rate benchmark to measure. */
int project_list_gemms(const Run *run, int layout, FILE *f, char *err, size_t errlen) {
    int status = 0;
    Graph *g = layout_graph(run, layout, err, errlen, &status);
    if (!g) return status ? status : 1;
    int cap = 64, n = 0;
    int64_t (*shape)[5] = malloc(cap * sizeof *shape);   /* m n k batch count */
    if (!shape) { graph_free(g); snprintf(err, errlen, "out of memory"); return 1; }
    for (int i = 0; i < g->nsteps; i++) {
        const Op *o = &g->steps[i];
        int nm = o->kind == OP_GROUPED_GEMM ? o->nmembers : (o->kind == OP_GEMM || o->kind == OP_BATCHED_GEMM);
        for (int j = 0; j < nm; j++) {
            const Gemm *gm = o->kind == OP_GROUPED_GEMM ? &o->members[j] : &o->g;
            int64_t batch = gm->batch > 0 ? gm->batch : 1;
            int found = 0;
            for (int q = 0; q < n && !found; q++)
                if (shape[q][0] == gm->m && shape[q][1] == gm->n && shape[q][2] == gm->k && shape[q][3] == batch) {
                    shape[q][4]++; found = 1;
                }
            if (found) continue;
            if (n == cap) {
                void *grown = realloc(shape, 2 * cap * sizeof *shape);
                if (!grown) { free(shape); graph_free(g); snprintf(err, errlen, "out of memory"); return 1; }
                shape = grown; cap *= 2;
            }
            shape[n][0] = gm->m; shape[n][1] = gm->n; shape[n][2] = gm->k; shape[n][3] = batch; shape[n][4] = 1;
            n++;
        }
    }
    for (int q = 0; q < n; q++)
        fprintf(f, "%s %lld %lld %lld %lld %lld\n", layout_name(layout), (long long)shape[q][0], (long long)shape[q][1],
                (long long)shape[q][2], (long long)shape[q][3], (long long)shape[q][4]);
    free(shape);
    graph_free(g);
    return 0;
}
