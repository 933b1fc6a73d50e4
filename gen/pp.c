/* pp.c: pipeline parallelism in the generator. Splits a finished whole-model Graph into pp stages
 * (contiguous layers; the embedding on the first stage, final norm, head and loss on the last),
 * gives each stage its own memory plan, and emits its 1F1B schedule over m = grad_accum
 * micro-batches as explicit steps with send/recv, checked statically to pair up and not deadlock. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/ir.h"
#include "gen/memplan.h"
#include "gen/plan_write.h"
#include "gen/pp.h"

static double kconst(const KernelInst *k, const char *key) {
    for (int i = 0; i < k->nconst; i++) if (!strcmp(k->key[i], key)) return k->val[i];
    return 0;
}

static double op_flops(const Op *o) {
    if (o->kind == OP_GEMM || o->kind == OP_BATCHED_GEMM) return 2.0 * o->g.m * o->g.n * o->g.k * (o->g.batch > 1 ? o->g.batch : 1);
    double f = 0;
    if (o->kind == OP_GROUPED_GEMM)
        for (int i = 0; i < o->nmembers; i++) f += 2.0 * o->members[i].m * o->members[i].n * o->members[i].k;
    if (o->kind == OP_KERNEL && !strncmp(o->k.kind, "attention", 9))   /* QK^T and PV per head (causal: half) */
        f += 2.0 * kconst(&o->k, "batch") * kconst(&o->k, "seq") * kconst(&o->k, "seq") *
             kconst(&o->k, "heads") * kconst(&o->k, "head_dim") * (o->k.kind[9] == '_' && o->k.kind[10] == 'b' ? 2 : 1);
    return f;
}

/* The stage of every step of g (per step, in stage[]): by layer; layer -1 steps before the first
 * layer's forward (the embedding) and after the last layer's backward go to stage 0, the others
 * (final norm, head, loss) to the last stage; a dp reduction step to the stage of its param. */
/* A gradient bucket's reduction: group=dp, or group=edp (expert gradients under ep). */
static int dp_reduction(const Op *o) { return ir_dp_bucket(o); }

static int assign_steps(const Graph *g, const PpSplit *sp, int *stage, char *err, size_t errlen) {
    int pp = sp->pp;
    int seen_layer = 0;
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (s == g->nfwd_steps) seen_layer = 0;
        if (o->layer >= 0) { stage[s] = sp->stage_of_layer[o->layer]; seen_layer = 1; continue; }
        int fwd = s < g->nfwd_steps;
        stage[s] = fwd ? (seen_layer ? pp - 1 : 0) : (seen_layer ? 0 : pp - 1);
    }
    /* dp steps (group=dp and group=edp all-reduces of d.P, placed after the backward step that
     * finishes a bucket): the stage whose steps use the param */
    int *pstage = malloc((size_t)(g->nparams + 1) * sizeof *pstage);
    if (!pstage) { snprintf(err, errlen, "out of memory"); return 1; }
    for (int i = 0; i < g->nparams; i++) pstage[i] = -1;
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (dp_reduction(o)) continue;
        const Opnd *ops[3 * 64 + OP_MAX_OPND];
        int n = 0;
        if (o->kind == OP_GEMM || o->kind == OP_BATCHED_GEMM) { ops[n++] = &o->g.A; ops[n++] = &o->g.B; ops[n++] = &o->g.C; }
        if (o->kind == OP_GROUPED_GEMM)
            for (int i = 0; i < o->nmembers && n + 3 <= (int)(sizeof ops / sizeof *ops); i++) {
                ops[n++] = &o->members[i].A; ops[n++] = &o->members[i].B; ops[n++] = &o->members[i].C;
            }
        if (o->kind == OP_KERNEL) for (int i = 0; i < o->nops; i++) ops[n++] = &o->ops[i];
        for (int i = 0; i < n; i++) {
            const Tensor *t = &g->t[ops[i]->t];
            int q = t->param;
            if (q < 0 && t->role == TR_PARAM_GRAD)
                for (int k = 0; k < g->nparams; k++) if (g->t[g->params[k].tensor].grad == ops[i]->t) q = k;
            if (q >= 0 && pstage[q] < 0) pstage[q] = stage[s];
        }
    }
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (!dp_reduction(o)) continue;
        int q = -1;
        for (int k = 0; k < g->nparams && q < 0; k++) if (g->t[g->params[k].tensor].grad == o->buf.t) q = k;
        if (q < 0 || pstage[q] < 0) {
            snprintf(err, errlen, "pipeline: the dp reduction of %s belongs to no stage", g->t[o->buf.t].name);
            free(pstage);
            return 1;
        }
        stage[s] = pstage[q];
    }
    free(pstage);
    /* the forward walks the stages up, the backward down */
    for (int s = 1; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (dp_reduction(o)) continue;
        int prev = s - 1;
        while (prev >= 0 && dp_reduction(&g->steps[prev])) prev--;
        if (prev < 0 || s == g->nfwd_steps) continue;
        if ((s < g->nfwd_steps && stage[s] < stage[prev]) || (s > g->nfwd_steps && stage[s] > stage[prev])) {
            snprintf(err, errlen, "pipeline: step %d (%s) of stage %d follows a step of stage %d: the schedule does not "
                     "split into contiguous stages", s, o->chunk, stage[s], stage[prev]);
            return 1;
        }
    }
    return 0;
}

/* Contiguous split of the layers minimising the largest stage cost (cost[l] per layer, first and
 * last: the embedding's and the tail's), or the spec's explicit split. */
static void split_layers(const Run *run, const double *cost, double first, double last, PpSplit *sp) {
    int L = run->model.layers, pp = sp->pp;
    if (run->pp_nstages == pp) {
        int l = 0;
        for (int s = 0; s < pp; s++) { sp->first_layer[s] = l; l += run->pp_stages[s]; }
        sp->first_layer[pp] = L;
    } else {
        /* best[s][l]: the smallest max cost of putting layers [0, l) on stages [0, s) */
        double *best = malloc(sizeof(double) * (size_t)(pp + 1) * (size_t)(L + 1));
        int *cut = malloc(sizeof(int) * (size_t)(pp + 1) * (size_t)(L + 1));
        double *pre = malloc(sizeof(double) * (size_t)(L + 1));
        if (!best || !cut || !pre) {   /* fall back to equal counts */
            for (int s = 0; s <= pp; s++) sp->first_layer[s] = (int)((int64_t)L * s / pp);
        } else {
            pre[0] = 0;
            for (int l = 0; l < L; l++) pre[l + 1] = pre[l] + cost[l];
#define B(s, l) best[(size_t)(s) * (size_t)(L + 1) + (size_t)(l)]
#define C(s, l) cut[(size_t)(s) * (size_t)(L + 1) + (size_t)(l)]
            for (int s = 0; s <= pp; s++)
                for (int l = 0; l <= L; l++) { B(s, l) = 1e300; C(s, l) = -1; }
            B(0, 0) = 0;
            for (int s = 1; s <= pp; s++)
                for (int l = s; l <= L - (pp - s); l++)
                    for (int k = s - 1; k < l; k++) {
                        if (B(s - 1, k) >= 1e300) continue;
                        double c = pre[l] - pre[k] + (s == 1 ? first : 0) + (s == pp ? last : 0);
                        double m = c > B(s - 1, k) ? c : B(s - 1, k);
                        if (m < B(s, l) * (1 - 1e-12)) { B(s, l) = m; C(s, l) = k; }
                    }
            int l = L;
            sp->first_layer[pp] = L;
            for (int s = pp; s >= 1; s--) { l = C(s, l); sp->first_layer[s - 1] = l; }
#undef B
#undef C
        }
        free(best); free(cut); free(pre);
    }
    for (int s = 0; s < pp; s++)
        for (int l = sp->first_layer[s]; l < sp->first_layer[s + 1]; l++) sp->stage_of_layer[l] = s;
}

/* ---------------- the 1F1B schedule ---------------- */

static void push_sched(PpStage *st, int kind, int micro, int slot, int vs) {
    PpSched x = {kind, micro, slot, vs};
    st->sched[st->nsched++] = x;
}

/* Pipeline rank r's order of (virtual stage, micro-batch) forwards and backwards. v = 1 (1F1B):
 * warm-up of min(pp-r-1, m) forwards, then one forward and one backward in turn, then the remaining
 * backwards. v > 1 (interleaved 1F1B): the m*v chunk passes go in groups of pp micro-batches per
 * chunk (forward chunks 0..v-1, backward v-1..0) with a warm-up of (pp-r-1)*2 + (v-1)*pp forwards.
 * Each forward takes its stage's lowest free activation slot; its backward frees it. */
static void emit_rank(PpPlan *pl, int r) {
    int pp = pl->pp, v = pl->v, m = pl->m, nv = pl->nv, total = m * v;
    PpStage *st = &pl->stages[r];
    int warm = v == 1 ? pp - r - 1 : (pp - r - 1) * 2 + (v - 1) * pp;
    if (warm > total) warm = total;
    int *slot_of = calloc((size_t)(m * nv), sizeof *slot_of);
    int *order = malloc(sizeof *order * (size_t)(2 * total + 2)), n = 0;   /* +k+1: forward pass k, -(k+1): backward pass k */
    unsigned char (*used)[PP_MAX_SLOTS] = calloc(PP_MAX_STAGES, sizeof *used);   /* per stage: slots taken */
    if (!slot_of || !order || !used) { free(slot_of); free(order); free(used); st->nsched = 0; return; }
    for (int k = 0; k < warm; k++) order[n++] = k + 1;
    for (int i = 0; i + warm < total; i++) { order[n++] = warm + i + 1; order[n++] = -(i + 1); }
    for (int k = total - warm; k < total; k++) order[n++] = -(k + 1);
    for (int i = 0; i < n; i++) {
        int k = (order[i] > 0 ? order[i] : -order[i]) - 1, fwd = order[i] > 0;
        int chunk = v == 1 ? 0 : (k / pp) % v, j = v == 1 ? k : (k / (pp * v)) * pp + k % pp;
        if (!fwd) chunk = v - 1 - chunk;
        int vs = chunk * pp + r;
        PpStage *vst = &pl->stages[vs];
        if (fwd) {
            int q = 0;
            while (q < PP_MAX_SLOTS - 1 && used[vs][q]) q++;
            used[vs][q] = 1; slot_of[vs * m + j] = q;
            if (q + 1 > vst->slots) vst->slots = q + 1;
            if (vs > 0) push_sched(st, PS_RECV_FWD, j, q, vs);
            push_sched(st, PS_FORWARD, j, q, vs);
            if (vs < nv - 1) push_sched(st, PS_SEND_FWD, j, q, vs);
        } else {
            int q = slot_of[vs * m + j];
            if (vs < nv - 1) push_sched(st, PS_RECV_BWD, j, q, vs);
            push_sched(st, PS_BACKWARD, j, q, vs);
            if (vs > 0) push_sched(st, PS_SEND_BWD, j, q, vs);
            used[vs][q] = 0;
        }
    }
    free(slot_of); free(order); free(used);
}

int pp_check_schedule(const PpPlan *pl, double tf, double tb, double *bubble, char *err, size_t errlen) {
    int pp = pl->pp, nv = pl->nv > 0 ? pl->nv : pl->pp;
    /* channels: boundary b (between virtual stages b and b+1): 2b forward, 2b+1 backward; FIFO of (micro, time) */
    int cap = 2 * pl->m + 4;
    int *q = calloc((size_t)(2 * nv * cap), sizeof *q);
    double *qt = calloc((size_t)(2 * nv * cap), sizeof *qt);
    int head[2 * PP_MAX_STAGES] = {0}, tail[2 * PP_MAX_STAGES] = {0}, pc[PP_MAX_STAGES] = {0};
    double now[PP_MAX_STAGES] = {0};
    if (!q || !qt) { free(q); free(qt); snprintf(err, errlen, "out of memory"); return 1; }
    int rc = 0;
    for (;;) {
        int progressed = 0, done = 1;
        for (int s = 0; s < pp && !rc; s++) {
            const PpStage *st = &pl->stages[s];
            while (pc[s] < st->nsched && !rc) {
                const PpSched *x = &st->sched[pc[s]];
                int kind = x->kind, vs = x->vs;
                if (kind == PS_RECV_FWD || kind == PS_RECV_BWD) {
                    int ch = kind == PS_RECV_FWD ? 2 * (vs - 1) : 2 * vs + 1;
                    if (ch < 0 || ch >= 2 * (nv - 1)) { snprintf(err, errlen, "pipeline schedule: rank %d step %d receives from outside the pipeline", s, pc[s]); rc = 1; break; }
                    if (head[ch] == tail[ch]) break;   /* nothing there yet: wait */
                    if (q[ch * cap + head[ch]] != x->micro) {
                        snprintf(err, errlen, "pipeline schedule: rank %d step %d receives micro-batch %d %s, but micro-batch %d "
                                 "was sent first", s, pc[s], x->micro, kind == PS_RECV_FWD ? "forward" : "backward",
                                 q[ch * cap + head[ch]]);
                        rc = 1; break;
                    }
                    if (qt[ch * cap + head[ch]] > now[s]) now[s] = qt[ch * cap + head[ch]];
                    head[ch]++;
                } else if (kind == PS_SEND_FWD || kind == PS_SEND_BWD) {
                    int ch = kind == PS_SEND_FWD ? 2 * vs : 2 * (vs - 1) + 1;
                    if (ch < 0 || ch >= 2 * (nv - 1) || tail[ch] >= cap) {
                        snprintf(err, errlen, "pipeline schedule: rank %d step %d sends outside the pipeline or too often", s, pc[s]);
                        rc = 1; break;
                    }
                    qt[ch * cap + tail[ch]] = now[s];
                    q[ch * cap + tail[ch]++] = x->micro;
                } else now[s] += kind == PS_FORWARD ? tf : tb;
                pc[s]++;
                progressed = 1;
            }
            if (pc[s] < st->nsched) done = 0;
        }
        if (rc || done) break;
        if (!progressed) {
            int s = 0;
            while (pc[s] >= pl->stages[s].nsched) s++;
            const PpSched *x = &pl->stages[s].sched[pc[s]];
            snprintf(err, errlen, "pipeline schedule: deadlock: rank %d waits at step %d for micro-batch %d %s, which no stage "
                     "can send", s, pc[s], x->micro, x->kind == PS_RECV_FWD ? "forward" : "backward");
            rc = 1;
        }
    }
    for (int ch = 0; ch < 2 * (nv - 1) && !rc; ch++)
        if (head[ch] != tail[ch]) {
            snprintf(err, errlen, "pipeline schedule: boundary %d has %d %s send(s) that no stage receives", ch / 2,
                     tail[ch] - head[ch], ch % 2 ? "backward" : "forward");
            rc = 1;
        }
    if (!rc && bubble) {
        double T = 0;
        for (int s = 0; s < pp; s++) if (now[s] > T) T = now[s];
        *bubble = T > 0 ? 1.0 - pl->m * (pl->nv / pp) * (tf + tb) / T : 0;
    }
    free(q); free(qt);
    return rc;
}

/* ---------------- stages ---------------- */

static void free_stage(PpStage *st) {
    free(st->sched); free(st->canon_used); free(st->param_used);
    if (st->g) { free(st->g->t); free(st->g->steps); free(st->g); }
}

void pp_free(PpPlan *pl) {
    if (!pl) return;
    for (int s = 0; s < (pl->nv > pl->pp ? pl->nv : pl->pp); s++) free_stage(&pl->stages[s]);
    free(pl);
}

static int part_of_param_uses(const Graph *g, int tensor) {
    const Tensor *t = &g->t[tensor];
    if (t->param >= 0) return t->param;
    if (t->role == TR_PARAM_GRAD)
        for (int k = 0; k < g->nparams; k++) if (g->t[g->params[k].tensor].grad == tensor) return k;
    return -1;
}

static void mark_param(const Graph *g, PpStage *st, int tensor) {
    int q = part_of_param_uses(g, tensor);
    if (q < 0) return;
    st->param_used[q] = 1;
    const Param *p = &g->params[q];
    for (int j = p->first_part; j < p->first_part + p->nparts; j++) st->canon_used[g->parts[j].canon] = 1;
}

/* No activation (or its gradient) crosses a stage of pl but the boundary tensors (the residual
 * stream and its gradient): 0, or 1 with err naming the first tensor two stages use. */
static int check_stage_crossings(const Graph *g, const PpPlan *pl, char *err, size_t errlen) {
    for (int t = 0; t < g->nt; t++) {
        int first = -1;
        for (int s = 0; s < pl->nv; s++) {
            const PpStage *st = &pl->stages[s];
            if (st->g->t[t].live0 < 0) continue;
            if (t == st->in || t == st->out || t == st->din || t == st->dout) continue;
            if (g->t[t].role != TR_ACT && g->t[t].role != TR_GRAD) continue;
            if (first >= 0) {
                snprintf(err, errlen, "pipeline: %s is used by stages %d and %d, but only the "
                         "residual stream crosses a stage boundary (pp > 1 does not support this "
                         "model's structure yet): regenerate with -D pp=1", g->t[t].name, first, s);
                return 1;
            }
            first = s;
        }
    }
    return 0;
}

PpPlan *pp_build(const Graph *g, char *err, size_t errlen) {
    const Run *run = g->run;
    int pp = run->pp, L = run->model.layers, m = run->grad_accum;
    if (pp < 2 || pp > PP_MAX_STAGES || pp > L || m < pp || m > 65536) {
        snprintf(err, errlen, "pipeline: pp=%d with %d layers and grad_accum=%d cannot be scheduled (need 2 <= pp <= min(%d, "
                 "layers) and grad_accum >= pp)", pp, L, m, PP_MAX_STAGES);
        return NULL;
    }
    PpPlan *pl = calloc(1, sizeof *pl);
    int *stage = malloc((size_t)(g->nsteps + 1) * sizeof *stage);
    double *cost = calloc((size_t)L + 1, sizeof *cost);
    if (!pl || !stage || !cost) { free(pl); free(stage); free(cost); snprintf(err, errlen, "out of memory"); return NULL; }
    int v = run->pp_virtual > 1 ? run->pp_virtual : 1, nv = pp * v;
    if (nv > PP_MAX_STAGES || nv > L || (v > 1 && (L % nv || m % pp))) {
        snprintf(err, errlen, "pipeline: pp=%d x virtual_stages=%d over %d layers and grad_accum=%d cannot be interleaved (the "
                 "chunks must divide the layers, grad_accum be a multiple of pp, at most %d chunks)", pp, v, L, m, PP_MAX_STAGES);
        free(pl); free(stage); free(cost);
        return NULL;
    }
    pl->pp = pp; pl->m = m; pl->v = v; pl->nv = nv;
    pl->split.pp = nv;
    /* per-layer cost: GEMM and attention FLOPs of its forward and backward steps (recompute included) */
    double first = 0, last = 0;
    int seen = 0;
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (s == g->nfwd_steps) seen = 0;
        if (o->layer >= 0) { cost[o->layer] += op_flops(o); seen = 1; }
        else if ((s < g->nfwd_steps) == !seen) first += op_flops(o);
        else last += op_flops(o);
    }
    for (int l = 0; l < L; l++) pl->layer_flops[l] = cost[l];
    pl->first_flops = first; pl->last_flops = last;
    split_layers(run, cost, first, last, &pl->split);
    free(cost);
    int rc = assign_steps(g, &pl->split, stage, err, errlen);
    /* MoE: the steps adding each MoE layer's load-balance (and z-) loss, L{i}.moe_aux[0], to the
     * loss belong to no stage: the layer's stage holds its aux tensor, the loss is on the last one.
     * The loss of a micro-batch is the last stage's plus every stage's aux terms, which the runtime
     * adds (`loss_terms=moe_aux` on the pipeline line); their gradients never crossed a boundary (the
     * router's backward carries them, moe_aux_add has no gradient). */
    for (int i = 0; i < g->nsteps && !rc; i++)
        if (g->steps[i].kind == OP_KERNEL && !strcmp(g->steps[i].k.kind, "moe_aux_add")) { stage[i] = -1; pl->moe_aux_terms++; }
    for (int s = 0; s < nv && !rc; s++) {
        PpStage *st = &pl->stages[s];
        st->layer0 = pl->split.first_layer[s]; st->layer1 = pl->split.first_layer[s + 1];
        st->canon_used = calloc((size_t)g->ncanons + 1, 1);
        st->param_used = calloc((size_t)g->nparams + 1, 1);
        st->sched = malloc(sizeof *st->sched * (size_t)(6 * m * v + 8));
        Graph *sg = st->g = malloc(sizeof *sg);
        if (!st->canon_used || !st->param_used || !st->sched || !sg) { rc = 1; snprintf(err, errlen, "out of memory"); break; }
        *sg = *g;
        sg->t = malloc(sizeof *sg->t * (size_t)g->nt);
        sg->steps = malloc(sizeof *sg->steps * (size_t)(g->nsteps + 1));
        if (!sg->t || !sg->steps) { rc = 1; snprintf(err, errlen, "out of memory"); break; }
        memcpy(sg->t, g->t, sizeof *sg->t * (size_t)g->nt);
        sg->nsteps = 0; sg->nfwd_steps = 0;
        for (int i = 0; i < g->nsteps; i++) {
            if (stage[i] != s) continue;
            if (i < g->nfwd_steps) sg->nfwd_steps++;
            sg->steps[sg->nsteps++] = g->steps[i];
            const Op *o = &g->steps[i];
            if (o->kind == OP_GEMM || o->kind == OP_BATCHED_GEMM) { mark_param(g, st, o->g.A.t); mark_param(g, st, o->g.B.t); mark_param(g, st, o->g.C.t); }
            if (o->kind == OP_GROUPED_GEMM)
                for (int k = 0; k < o->nmembers; k++) {
                    mark_param(g, st, o->members[k].A.t); mark_param(g, st, o->members[k].B.t); mark_param(g, st, o->members[k].C.t);
                }
            if (o->kind == OP_KERNEL) for (int k = 0; k < o->nops; k++) mark_param(g, st, o->ops[k].t);
            int rd[3], wr[2], nr, nw;   /* a collective: its catalog row's operands */
            ir_coll_rw(o, rd, &nr, wr, &nw);
            for (int k = 0; k < nr; k++) mark_param(g, st, rd[k]);
            for (int k = 0; k < nw; k++) mark_param(g, st, wr[k]);
        }
        /* boundaries: the residual stream entering the stage (received) and leaving it (sent), and
         * the one residual-gradient buffer the backward accumulates into */
        char name[96];
        st->in = st->out = st->din = st->dout = -1;
        if (s > 0) {
            snprintf(name, sizeof name, "L%d.x", st->layer0);
            st->in = ir_find(g, name);
            st->din = st->in >= 0 ? g->t[st->in].grad : -1;
        }
        if (s < nv - 1) {
            snprintf(name, sizeof name, "L%d.x", st->layer1);
            st->out = ir_find(g, name);
            st->dout = st->out >= 0 ? g->t[st->out].grad : -1;
        }
        if ((s > 0 && (st->in < 0 || st->din < 0)) || (s < nv - 1 && (st->out < 0 || st->dout < 0))) {
            snprintf(err, errlen, "pipeline: stage %d: the residual stream at its boundary (L%d.x or L%d.x) or its gradient is "
                     "missing from the graph", s, st->layer0, st->layer1);
            rc = 1; break;
        }
        int nb = sg->nsteps - 1;
        sg->npin = 0;
        if (st->in >= 0) { sg->pin_t[sg->npin] = st->in; sg->pin_lo[sg->npin] = 0; sg->pin_hi[sg->npin++] = 0; }
        if (st->out >= 0) { sg->pin_t[sg->npin] = st->out; sg->pin_lo[sg->npin] = sg->nfwd_steps - 1; sg->pin_hi[sg->npin++] = sg->nfwd_steps - 1; }
        if (st->dout >= 0) { sg->pin_t[sg->npin] = st->dout; sg->pin_lo[sg->npin] = sg->nfwd_steps; sg->pin_hi[sg->npin++] = sg->nfwd_steps; }
        if (st->din >= 0) { sg->pin_t[sg->npin] = st->din; sg->pin_lo[sg->npin] = nb; sg->pin_hi[sg->npin++] = nb; }
        if (memplan(sg)) { snprintf(err, errlen, "pipeline: stage %d: %s", s, sg->err); rc = 1; break; }
        st->boundary_bytes = st->out >= 0 ? g->t[st->out].rows * g->t[st->out].cols * (int64_t)ir_dtype_size(g->t[st->out].dtype) : 0;
        for (int q = 0; q < g->nparams; q++)
            if (st->param_used[q]) st->param_elems += g->params[q].rows * g->params[q].cols;
        for (int i = 0; i < sg->nsteps; i++) st->flops += op_flops(&sg->steps[i]);
    }
    if (!rc) rc = check_stage_crossings(g, pl, err, errlen);
    free(stage);
    for (int r = 0; r < pp && !rc; r++) emit_rank(pl, r);
    if (!rc) rc = pp_check_schedule(pl, 1.0, 2.0, &pl->bubble, err, errlen);
    if (rc) { pp_free(pl); return NULL; }
    return pl;
}

static const char *SCHED_NAMES[] = {"forward", "backward", "send", "recv", "send", "recv"};

int pp_write_plan(const Graph *g, const PpPlan *pl, FILE *f) {
    plan_write_header(g, f);
    fprintf(f, "pipeline stages=%d virtual=%d micro_batches=%d schedule=%s%s\n", pl->pp, pl->v, pl->m, pl->v > 1 ? "interleaved" : "1f1b",
            pl->moe_aux_terms ? " loss_terms=moe_aux" : "");
    for (int s = 0; s < pl->nv; s++) {
        const PpStage *st = &pl->stages[s];
        fprintf(f, "\nstage %d layers=%d:%d rank=%d chunk=%d\n", s, st->layer0, st->layer1, s % pl->pp, s / pl->pp);
        if (plan_write_body(st->g, f, st->canon_used, st->param_used, st->slots)) return 1;
    }
    for (int r = 0; r < pl->pp; r++) {
        const PpStage *rk = &pl->stages[r];
        fprintf(f, "\nschedule rank=%d steps=%d\n", r, rk->nsched);
        for (int i = 0; i < rk->nsched; i++) {
            const PpSched *x = &rk->sched[i];
            const PpStage *st = &pl->stages[x->vs];
            int vs = x->vs, P = pl->pp;
            fprintf(f, "%s stage=%d", SCHED_NAMES[x->kind], vs);
            switch (x->kind) {
            case PS_FORWARD: case PS_BACKWARD: fprintf(f, " micro=%d slot=%d\n", x->micro, x->slot); break;
            case PS_SEND_FWD: fprintf(f, " dir=fwd buf=%s micro=%d slot=%d peer=%d\n", g->t[st->out].name, x->micro, x->slot, (vs + 1) % P); break;
            case PS_RECV_FWD: fprintf(f, " dir=fwd buf=%s micro=%d slot=%d peer=%d\n", g->t[st->in].name, x->micro, x->slot, (vs - 1) % P); break;
            case PS_SEND_BWD: fprintf(f, " dir=bwd buf=%s micro=%d slot=%d peer=%d\n", g->t[st->din].name, x->micro, x->slot, (vs - 1) % P); break;
            case PS_RECV_BWD: fprintf(f, " dir=bwd buf=%s micro=%d slot=%d peer=%d\n", g->t[st->dout].name, x->micro, x->slot, (vs + 1) % P); break;
            }
        }
    }
    return ferror(f) ? 1 : 0;
}

void pp_report(const Graph *g, const PpPlan *pl, FILE *f) {
    const Run *r = g->run;
    int64_t M = g->M, d = r->model.hidden;
    size_t es = ir_dtype_size(ir_act_dtype(g));
    if (pl->v > 1) fprintf(f, "\n## Pipeline: pp=%d, interleaved 1F1B with %d chunks per rank over m=%d micro-batches\n\n", pl->pp, pl->v, pl->m);
    else fprintf(f, "\n## Pipeline: pp=%d, 1F1B over m=%d micro-batches\n\n", pl->pp, pl->m);
    fprintf(f, "| stage | layers | local params / rank | GEMM+attention GFLOP / micro-batch | activation slots | arena / slot | arena total |\n");
    fprintf(f, "|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < pl->nv; s++) {
        const PpStage *st = &pl->stages[s];
        fprintf(f, "| %d | %d-%d%s%s | %" PRId64 " | %.3f | %d | %.2f MB | %.2f MB |\n", s, st->layer0, st->layer1 - 1,
                s == 0 ? " + embedding" : "", s == pl->nv - 1 ? " + final norm, head, loss" : "", st->param_elems, st->flops / 1e9,
                st->slots, st->g->arena_bytes / 1e6, st->g->arena_bytes * (double)st->slots / 1e6);
    }
    fprintf(f, "\nThe activation arena of a stage holds the micro-batches in flight there (pp-s on stage s under 1F1B): one slot each"
            "%s.\n", pl->v > 1 ? "; stage k runs on rank k mod pp" : "");
    if (pl->moe_aux_terms)
        fprintf(f, "\nMoE: each of the %d MoE layers stays on its stage with its router, experts and load-balance (and z-) loss "
                "gradient; the runtime adds the layers' loss terms to each micro-batch's loss (`loss_terms=moe_aux`).\n",
                pl->moe_aux_terms);
    int64_t here = pl->stages[0].boundary_bytes;
    fprintf(f, "\nPoint-to-point per micro-batch per boundary, each way (activation forward, its gradient backward): "
            "%" PRId64 " bytes per rank in this plan (%s layout, tp=%d); btp sends each tp rank's [b,s,d/tp] shard = %" PRId64
            " bytes, megatron the full [b,s,d] = %" PRId64 " bytes per rank.\n", here, layout_name(g->layout), r->tp,
            (int64_t)(M * (d / r->tp) * (int64_t)es), (int64_t)(M * d * (int64_t)es));
    fprintf(f, "\nBubble fraction of the emitted schedule (stage times simulated, backward = 2 x forward): %.4f; "
            "formula (pp-1)/(v*m+pp-1) = %.4f (v = %d).\n", pl->bubble, (double)(pl->pp - 1) / (pl->v * pl->m + pl->pp - 1), pl->v);
}
