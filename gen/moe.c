/* moe.c: the MoE block of the btp layout: a top-k router over E low-rank gate/up/down experts in
 * place of a layer's MLP, with static shapes (C token slots per expert), its canonical and local
 * parameters and its collectives. An expert projection's factors, their names and shapes, come
 * from the layout's factorization row (gen/factor.c): its input factor, sigma, its output factor
 * (A, B), or one dense factor (W) under megatron. The backward rules of the moe_* kernels are in
 * backward.c; the kernels' math is the catalog of docs/plan-format.md. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "gen/builder.h"
#include "gen/factor.h"
#include "gen/moe.h"


static int is_moe(const Model *m, int i) { return m->moe_experts > 0 && m->moe_layer[i]; }

/* The factors of an expert projection in a layout: the row's first (it reads the input: [d_in, r],
 * or the dense [d_in, d_out]) and its last (it writes the output: [r, d_out]); the same factor for
 * a dense row. moe_check refuses a row with more (an r x r core has no place in the experts). */
typedef struct { const FactorDef *in, *out; } ExpertFactors;

static ExpertFactors expert_factors(const Model *m, int layout) {
    const Factorization *fz = layout_factorization(m, layout);
    return (ExpertFactors){&fz->factors[0], &fz->factors[fz->nfactors - 1]};
}

/* Width of side `side` (enum Side) of an expert projection from din to dout at rank rk. */
static int64_t expert_side(int side, int64_t din, int64_t rk, int64_t dout) {
    return side == SIDE_IN ? din : side == SIDE_OUT ? dout : rk;
}

/* Canon `name` of factor fd of an expert projection from din to dout at rank rk, its shape and
 * init from the row. */
static void expert_canon(Graph *g, const char *name, const FactorDef *fd, int64_t din, int64_t rk,
                         int64_t dout) {
    const Model *m = &g->run->model;
    ir_canon(g, name, expert_side(fd->rows, din, rk, dout), expert_side(fd->cols, din, rk, dout), 0,
             factor_init_std(m, fd->init, rk, din, dout), 1);
}

int64_t moe_capacity(const Run *run) {
    const Model *m = &run->model;
    if (!m->moe_experts) return 0;
    double M = (double)run->micro_batch * run->seq;
    /* ceil of c*M*k/E, computed so that an exact quotient does not round up by float noise */
    double want = m->moe_capacity * M * m->moe_top_k / m->moe_experts;
    int64_t c = (int64_t)ceil(want - 1e-9 * want);
    return c < 1 ? 1 : c;
}

int moe_check(Graph *g) {
    const Run *r = g->run;
    const Model *m = &r->model;
    const char *f = r->file[0] ? r->file : r->name;
    if (!m->moe_experts) return 0;
    if (g->layout != LAYOUT_BTP && m->moe_shared)
        return ir_error(g, "%s: model %s shares expert factors, built for layout btp only: use layout = \"btp\" or drop "
                    "moe{shared=}", f, m->name);
    if (m->moe_ffn % g->tp) return ir_error(g, "%s: tp=%d must divide the experts' ffn (%d)", f, g->tp, m->moe_ffn);
    if (g->layout == LAYOUT_NAIVE)
        for (int l = 0; l < m->layers; l++)
            for (int p = PROJ_GATE; p <= PROJ_DOWN && is_moe(m, l); p++)
                if (m->proj[l][p].rank % g->tp)
                    return ir_error(g, "%s: layout naive shards the experts' ranks: tp=%d must divide the rank %d of '%s' in layer %d",
                                f, g->tp, m->proj[l][p].rank, proj_name(p), l);
    if (m->lax) return ir_error(g, "%s: MoE layers do not take LaX crossings (model %s)", f, m->name);
    const Factorization *fz = layout_factorization(m, g->layout);
    if (!factorization_experts(fz))
        return ir_error(g, "%s: model %s: MoE experts are one dense factor or 'input factor, sigma, "
                        "output factor'; factorization '%s' (%d factors%s) cannot make experts: use "
                        "lowrank = cola{...}, svd{...} or full{} for an MoE model", f, m->name,
                        fz->family, fz->nfactors, fz->moe_experts ? "" : ", marked no experts");
    return 0;
}

/* Is factor j (0 gate.A, 1 up.A, 2 down.B; MOE_SHARE_* bit j) shared by the experts of the layer? */
static int shared(const Model *m, int j) { return (m->moe_shared >> j) & 1; }

void moe_canons(Graph *g, int i) {
    const Model *m = &g->run->model;
    char nm[96];
    int64_t d = m->hidden, ff = m->moe_ffn;
    snprintf(nm, sizeof nm, "L%d.router.W", i);
    ir_canon(g, nm, d, m->moe_experts, 0, m->init_std, 1);
    static const int ps[3] = {PROJ_GATE, PROJ_UP, PROJ_DOWN};
    ExpertFactors xf = expert_factors(m, g->layout);
    if (xf.in == xf.out) {   /* full-rank experts (the Megatron baseline): L{i}.e{j}.{proj}.W */
        for (int e = 0; e < m->moe_experts; e++)
            for (int j = 0; j < 3; j++) {
                snprintf(nm, sizeof nm, "L%d.e%d.%s.%s", i, e, proj_name(ps[j]), xf.in->name);
                expert_canon(g, nm, xf.in, j == 2 ? ff : d, 0, j == 2 ? d : ff);
            }
        return;
    }
    /* a shared factor (gate's and up's input factor, down's output factor: MOE_SHARE_*) is one
       canon per layer, L{i}.shared.{gate.A,up.A,down.B} */
    for (int j = 0; j < 3; j++) {
        int64_t din = j == 2 ? ff : d, dout = j == 2 ? d : ff, rk = m->proj[i][ps[j]].rank;
        const FactorDef *fd = j == 2 ? xf.out : xf.in;
        if (!shared(m, j)) continue;
        snprintf(nm, sizeof nm, "L%d.shared.%s.%s", i, proj_name(ps[j]), fd->name);
        expert_canon(g, nm, fd, din, rk, dout);
    }
    for (int e = 0; e < m->moe_experts; e++)
        for (int j = 0; j < 3; j++) {
            int64_t din = j == 2 ? ff : d, dout = j == 2 ? d : ff, rk = m->proj[i][ps[j]].rank;
            snprintf(nm, sizeof nm, "L%d.e%d.%s.%s", i, e, proj_name(ps[j]), xf.in->name);
            if (j == 2 || !shared(m, j)) expert_canon(g, nm, xf.in, din, rk, dout);
            snprintf(nm, sizeof nm, "L%d.e%d.%s.%s", i, e, proj_name(ps[j]), xf.out->name);
            if (j != 2 || !shared(m, 2)) expert_canon(g, nm, xf.out, din, rk, dout);
        }
}

static int act_t(Graph *g, int state, int64_t rows, int64_t cols, int dtype, int i, const char *what) {
    return ir_act(g, state, rows, cols, dtype, "L%d.%s", i, what);
}

/* Stacked expert factor: local param [El*rows_l, cols_l] (El = E/ep local experts) with local expert
 * e's block of canon L{i}.e{p*El+e}.{proj}.{AB} at row e*rows_l on ep rank p (part ep=p; ep = 1:
 * every expert, no tag); `rowsplit`: the canon's rows are sharded over tp (A of a row-parallel
 * factor), else its columns (B of a column-parallel one); `col0` places it. */
static int stacked(Graph *g, int i, int w, const char *proj, const char *ab, int64_t rows_l, int64_t cols_l,
                   int rowsplit, int64_t col0) {
    const Model *m = &g->run->model;
    int ep = g->ep, El = m->moe_experts / ep;
    char cn[96];
    for (int p = 0; p < ep; p++) {
        g->part_ep = ep > 1 ? p : -1;
        for (int e = 0; e < El; e++) {
            snprintf(cn, sizeof cn, "L%d.e%d.%s.%s", i, p * El + e, proj, ab);
            if (rowsplit) ir_part(g, w, cn, rint_r(0, rows_l), rint_r(rows_l, rows_l), rint_c(0), rint_c(cols_l), e * rows_l, col0, g->tp == 1);
            else ir_part(g, w, cn, rint_c(0), rint_c(rows_l), rint_r(0, cols_l), rint_r(cols_l, cols_l), e * rows_l, col0, g->tp == 1);
        }
    }
    g->part_ep = -1;
    return w;
}

/* Expert parallelism (g->ep > 1): the all-to-all on the ep group that moves the routed slots of
 * `src` [E*C, cols] (way 0: the token side's slots, expert-major; way 1: the owner's [E/ep, ep, C]
 * slots) to `dst` of the same shape on the other side; `map` is the token side's moe_src [1, E*C]
 * (empty slots are not sent and arrive as zeros). Returns dst. */
static int alltoall(Graph *g, int src, int map, int way, int64_t C, int i, const char *what, const char *tag) {
    const Tensor *ts = &g->t[src];
    int dst = act_t(g, ts->state, ts->rows, ts->cols, ts->dtype, i, what);
    Op *o = fwd_op(g, OP_ALLTOALL);
    o->src = opnd(src, 0, g->t[src].cols);
    o->dst = opnd(dst, 0, g->t[dst].cols);
    o->map = map;
    o->experts = g->run->model.moe_experts;
    o->rows = C; o->cols = g->t[src].cols;
    o->dtype = g->t[src].dtype;
    o->bytes = o->experts * C * o->cols * (int64_t)ir_dtype_size(o->dtype);
    o->group = CG_EP;
    o->way = way;
    snprintf(o->tag, sizeof o->tag, "%s", tag);
    o->dual = "alltoall";
    return dst;
}

/* After the all-reduce of an expert A output [S, w]: y, z = act(h) over all S slot rows. */
static void bottleneck(Graph *g, int h, int y, int z, int64_t S, int64_t w, int act) {
    Op *o = k_begin(g, "bottleneck_act");
    k_op(g, o, "h", opnd(h, 0, w), 0, 1);
    k_op(g, o, "y", opnd(y, 0, w), OUT(PS_REPLICATED), 1);
    k_op(g, o, "z", opnd(z, 0, w), OUT(PS_REPLICATED), 0);
    k_const(o, "rows", (double)S); k_const(o, "cols", (double)w);
    k_const(o, "ldh", (double)w); k_const(o, "ldy", (double)w); k_const(o, "ldz", (double)w);
    k_const(o, "act", act == ACT_SILU ? 1 : 0); k_const(o, "norm", 0);
    k_const(o, "eps", g->run->model.norm_eps);
}

/* out[m] = sum over m's kept choices of gate * eo[slot] ([M, cols]; `state` of out: shard(1) for
 * the experts' d/t columns, replicated for rank-space latents, whose gates' gradient is then whole). */
static void combine(Graph *g, int eo, int sel, int slot, int gates, int out, int64_t M, int64_t cols, int64_t K,
                    int64_t E, int64_t C, int state) {
    Op *o = k_begin(g, "moe_combine");
    k_op(g, o, "eo", opnd(eo, 0, 0), 0, 1);
    k_op(g, o, "sel", opnd(sel, 0, 0), 0, 1);
    k_op(g, o, "slot", opnd(slot, 0, 0), 0, 1);
    k_op(g, o, "gates", opnd(gates, 0, 0), 0, 1);
    k_op(g, o, "out", opnd(out, 0, 0), OUT(state), 0);
    k_const(o, "rows", (double)M); k_const(o, "cols", (double)cols); k_const(o, "top_k", (double)K);
    k_const(o, "experts", (double)E); k_const(o, "capacity", (double)C);
    k_const(o, "lde", (double)cols); k_const(o, "ldo", (double)cols);
}

/* ---- megatron and naive: the residual stream replicated [M, d] ---- */

/* Stacked expert weights of a Megatron-style layout: local [E*rows_l, cols_l], expert e's block of
 * canon L{i}.e{e}.{proj}.{ab}: `rowsplit` shards the canon's rows (a row-parallel factor), else its
 * columns (column-parallel). */
static int stacked_rep(Graph *g, int i, const char *pname, const char *proj, const char *ab, int64_t rows_l, int64_t cols_l,
                       int rowsplit) {
    const Model *m = &g->run->model;
    int w = ir_param(g, pname, m->moe_experts * rows_l, cols_l, rowsplit ? PS_SHARD0 : PS_SHARD1);
    return stacked(g, i, w, proj, ab, rows_l, cols_l, rowsplit, 0);
}

/* One expert projection over the S slot rows of the replicated input `in` [S, din] (tp_copy'd by
 * the caller): full rank (megatron) W column-parallel -> shard(1) [S, dout/t] when `colpar`, or
 * row-parallel from a shard(1) input -> partial [S, dout]; low rank (naive) A column-parallel ->
 * [S, r/t], sigma, B row-parallel -> partial [S, dout]. Returns the output tensor. */
static int rep_proj(Graph *g, int i, int in, int64_t S, int64_t C, int64_t din, int64_t dout, int proj, int colpar,
                    const char *what) {
    const Model *m = &g->run->model;
    int t = g->tp, ad = ir_act_dtype(g);
    int64_t E = m->moe_experts;
    char nm[96];
    const char *pn = proj_name(proj);
    ExpertFactors xf = expert_factors(m, g->layout);
    if (g->layout == LAYOUT_MEGATRON) {
        snprintf(nm, sizeof nm, "L%d.moe.%s.%s", i, pn, xf.in->name);
        int64_t rl = colpar ? din : din / t, cl = colpar ? dout / t : dout;
        int w = stacked_rep(g, i, nm, pn, xf.in->name, rl, cl, !colpar);
        int out = act_t(g, colpar ? PS_SHARD1 : PS_PARTIAL, S, cl, ad, i, what);
        ir_gemm_batched(g, opnd(in, 0, rl), opnd(w, 0, cl), opnd(out, 0, cl), C, cl, rl, C * rl, rl * cl, C * cl, (int)E);
        return out;
    }
    int64_t rk = m->proj[i][proj].rank, rl = rk / t;
    snprintf(nm, sizeof nm, "L%d.moe.%s.%s", i, pn, xf.in->name);
    int wa = stacked_rep(g, i, nm, pn, xf.in->name, din, rl, 0);
    char w2[48];
    snprintf(w2, sizeof w2, "%s_h", what);
    int hh = act_t(g, PS_SHARD1, S, rl, ad, i, w2);
    ir_gemm_batched(g, opnd(in, 0, din), opnd(wa, 0, rl), opnd(hh, 0, rl), C, rl, din, C * din, din * rl, C * rl, (int)E);
    snprintf(w2, sizeof w2, "%s_y", what);
    int y = act_t(g, PS_SHARD1, S, rl, ad, i, w2);
    snprintf(w2, sizeof w2, "%s_z", what);
    int z = act_t(g, PS_SHARD1, S, rl, ad, i, w2);
    Op *o = k_begin(g, "bottleneck_act");
    k_op(g, o, "h", opnd(hh, 0, rl), 0, 1);
    k_op(g, o, "y", opnd(y, 0, rl), OUT(PS_SHARD1), 1);
    k_op(g, o, "z", opnd(z, 0, rl), OUT(PS_SHARD1), 0);
    k_const(o, "rows", (double)S); k_const(o, "cols", (double)rl);
    k_const(o, "ldh", (double)rl); k_const(o, "ldy", (double)rl); k_const(o, "ldz", (double)rl);
    k_const(o, "act", m->proj[i][proj].act == ACT_SILU ? 1 : 0); k_const(o, "norm", 0);
    k_const(o, "eps", m->norm_eps);
    snprintf(nm, sizeof nm, "L%d.moe.%s.%s", i, pn, xf.out->name);
    int wb = stacked_rep(g, i, nm, pn, xf.out->name, rl, dout, 1);
    int out = act_t(g, PS_PARTIAL, S, dout, ad, i, what);
    ir_gemm_batched(g, opnd(z, 0, rl), opnd(wb, 0, dout), opnd(out, 0, dout), C, dout, rl, C * rl, rl * dout, C * dout, (int)E);
    return out;
}

/* The MoE MLP of layer i under megatron (full-rank experts) or naive (low-rank experts, Megatron
 * inside each factor) on the replicated residual h [M, d]: the norm and the router are computed
 * whole on every rank (no collective), the tokens dispatched as x̂ [E*C, d]; megatron: gate/up W
 * column-parallel, GLU on the rank's ffn/t columns, down W row-parallel; naive: every factor pair
 * A column-parallel (rank r/t), B row-parallel, all-reducing gate/up [E*C, 2 ffn] and down
 * [E*C, d]. The expert outputs are all-reduced before the combine. */
static int moe_block_rep(Graph *g, int i, int h) {
    const Run *r = g->run;
    const Model *m = &r->model;
    int t = g->tp, ad = ir_act_dtype(g), mega = g->layout == LAYOUT_MEGATRON;
    int64_t M = g->M, d = m->hidden, E = m->moe_experts, K = m->moe_top_k, ff = m->moe_ffn;
    int64_t C = moe_capacity(r), S = E * C, fl = ff / t;
    char nm[96];
    ir_chunk(g, i, "L%d.moe_router", i);
    snprintf(nm, sizeof nm, "L%d.mlp_norm", i);
    int gamma = ir_param(g, nm, 1, d, PS_REPLICATED);
    ir_part(g, gamma, nm, rint_c(0), rint_c(1), rint_c(0), rint_c(d), 0, 0, 1);
    int rs = ir_keep(g, act_t(g, PS_REPLICATED, 1, M, IR_FP32, i, "moe_rstd"));
    int xn = act_t(g, PS_REPLICATED, M, d, ad, i, "moe_xn");
    Op *o = k_begin(g, "rmsnorm_fwd");
    k_op(g, o, "x", opnd(h, 0, 0), 0, 1);
    k_op(g, o, "gamma", opnd(gamma, 0, 0), 0, 1);
    k_op(g, o, "out", opnd(xn, 0, 0), OUT(PS_REPLICATED), 0);
    k_op(g, o, "rstd", opnd(rs, 0, 0), OUT(PS_REPLICATED), 1);
    k_const(o, "rows", (double)M); k_const(o, "cols", (double)d); k_const(o, "ldx", (double)d);
    k_const(o, "ldo", (double)d); k_const(o, "divisor", (double)d); k_const(o, "eps", m->norm_eps);
    snprintf(nm, sizeof nm, "L%d.router.W", i);
    int wr = ir_param(g, nm, d, E, PS_REPLICATED);
    ir_part(g, wr, nm, rint_c(0), rint_c(d), rint_c(0), rint_c(E), 0, 0, 1);
    int logits = act_t(g, PS_REPLICATED, M, E, ad, i, "router_logits");
    ir_gemm_batched(g, opnd(xn, 0, 0), opnd(wr, 0, 0), opnd(logits, 0, 0), M, E, d, 0, 0, 0, 1);
    int sel, slot, gates, src;
    {
        int probs = ir_keep(g, act_t(g, PS_REPLICATED, M, E, IR_FP32, i, "router_probs"));
        sel = ir_keep(g, act_t(g, PS_REPLICATED, M, K, IR_FP32, i, "moe_sel"));
        gates = ir_keep(g, act_t(g, PS_REPLICATED, M, K, IR_FP32, i, "moe_gates"));
        slot = ir_keep(g, act_t(g, PS_REPLICATED, M, K, IR_FP32, i, "moe_slot"));
        src = ir_keep(g, act_t(g, PS_REPLICATED, 1, S, IR_FP32, i, "moe_src"));
        int aux = ir_keep(g, act_t(g, PS_REPLICATED, 1, m->moe_z > 0 ? 2 + 2 * E + M : 1 + 2 * E, IR_FP32, i, "moe_aux"));
        o = k_begin(g, "moe_router");
        k_op(g, o, "logits", opnd(logits, 0, 0), 0, 0);
        k_op(g, o, "probs", opnd(probs, 0, 0), OUT(PS_REPLICATED), 1);
        k_op(g, o, "sel", opnd(sel, 0, 0), OUT(PS_REPLICATED), 1);
        k_op(g, o, "gates", opnd(gates, 0, 0), OUT(PS_REPLICATED), 1);
        k_op(g, o, "slot", opnd(slot, 0, 0), OUT(PS_REPLICATED), 1);
        k_op(g, o, "src", opnd(src, 0, 0), OUT(PS_REPLICATED), 1);
        k_op(g, o, "aux", opnd(aux, 0, 0), OUT(PS_REPLICATED), 1);
        k_const(o, "rows", (double)M); k_const(o, "experts", (double)E); k_const(o, "top_k", (double)K);
        k_const(o, "capacity", (double)C); k_const(o, "ldl", (double)E); k_const(o, "norm", K > 1);
        k_const(o, "coef", m->moe_aux);
        if (m->moe_z > 0) k_const(o, "zcoef", m->moe_z);
    }
    ir_chunk(g, i, "L%d.moe_gu", i);
    int xe = act_t(g, PS_REPLICATED, S, d, ad, i, "moe_xe");
    o = k_begin(g, "moe_dispatch");
    k_op(g, o, "x", opnd(xn, 0, 0), 0, 0);
    k_op(g, o, "src", opnd(src, 0, 0), 0, 1);
    k_op(g, o, "out", opnd(xe, 0, 0), OUT(PS_REPLICATED), 0);
    k_const(o, "rows", (double)S); k_const(o, "cols", (double)d); k_const(o, "top_k", (double)K);
    k_const(o, "tokens", (double)M); k_const(o, "ldx", (double)d); k_const(o, "ldo", (double)d);
    snprintf(nm, sizeof nm, "L%d.moe_gu", i);
    ir_tp_copy(g, xe, nm);
    int gu_g = rep_proj(g, i, xe, S, C, d, ff, PROJ_GATE, 1, "moe_gate");
    int gu_u = rep_proj(g, i, xe, S, C, d, ff, PROJ_UP, 1, "moe_up");
    int64_t gw = mega ? fl : ff;   /* the GLU's columns on this rank */
    if (!mega) {   /* naive: the B outputs are partial sums over the rank's r/t */
        snprintf(nm, sizeof nm, "L%d.moe_gate", i); ir_allreduce(g, gu_g, nm);
        snprintf(nm, sizeof nm, "L%d.moe_up", i); ir_allreduce(g, gu_u, nm);
    }
    ir_chunk(g, i, "L%d.moe_down", i);
    int gl = act_t(g, mega ? PS_SHARD1 : PS_REPLICATED, S, gw, ad, i, "moe_glu");
    o = k_begin(g, "glu_fwd");
    k_op(g, o, "gate", opnd(gu_g, 0, gw), 0, 1); k_op(g, o, "up", opnd(gu_u, 0, gw), 0, 1);
    k_op(g, o, "out", opnd(gl, 0, gw), OUT(mega ? PS_SHARD1 : PS_REPLICATED), 0);
    k_const(o, "rows", (double)S); k_const(o, "cols", (double)gw);
    k_const(o, "ldg", (double)gw); k_const(o, "ldu", (double)gw); k_const(o, "ldo", (double)gw);
    k_const(o, "act", (mega ? ACT_SILU : m->mlp_gate_act) == ACT_SILU ? 1 : 0);
    snprintf(nm, sizeof nm, "L%d.moe_down", i);
    if (!mega) ir_tp_copy(g, gl, nm);
    int eo = rep_proj(g, i, gl, S, C, ff, d, PROJ_DOWN, 0, "moe_eo");
    ir_allreduce(g, eo, nm);
    ir_chunk(g, i, "L%d.moe_out", i);
    int mo = act_t(g, PS_REPLICATED, M, d, ad, i, "moe_out");
    combine(g, eo, sel, slot, gates, mo, M, d, K, E, C, PS_REPLICATED);
    snprintf(nm, sizeof nm, "L%d.x", i + 1);
    int xo = ir_keep(g, ir_act(g, PS_REPLICATED, M, d, ad, "%s", nm));
    ir_add(g, opnd(h, 0, 0), opnd(mo, 0, 0), opnd(xo, 0, 0), M, d, PS_REPLICATED);
    return xo;
}

/* What the stages of the btp MoE block share: its shapes and the router's outputs. Expert
 * parallelism: this rank's El = E/ep experts see C2 = ep*C slots each, from the ep ranks of its
 * group (the S = E*C rows of the token side become El*C2 = S rows on the owner). */
typedef struct {
    int i, ad;
    int64_t M, d, dl, E, K, C, S, fl, El, C2, rg, ru, rd;
    int xn, src, sel, slot, gates;   /* the normed shard [M, d/t] and the routing (moe_router) */
    const char *fa, *fb;     /* the names of the experts' input and output factors ("A", "B") */
} MoeBtp;

/* out [S, cols] (in `state`) = for each slot, the row of x [M, cols] of the token the router put
 * there (b->src; an empty slot gets zeros). */
static void dispatch(Graph *g, const MoeBtp *b, int x, int out, int64_t cols, int state) {
    Op *o = k_begin(g, "moe_dispatch");
    k_op(g, o, "x", opnd(x, 0, 0), 0, 0);
    k_op(g, o, "src", opnd(b->src, 0, 0), 0, 1);
    k_op(g, o, "out", opnd(out, 0, 0), OUT(state), 0);
    k_const(o, "rows", (double)b->S); k_const(o, "cols", (double)cols);
    k_const(o, "top_k", (double)b->K); k_const(o, "tokens", (double)b->M);
    k_const(o, "ldx", (double)cols); k_const(o, "ldo", (double)cols);
}

/* The btp MoE block's shapes for layer i. */
static MoeBtp btp_shapes(const Graph *g, int i) {
    const Model *m = &g->run->model;
    MoeBtp b = {.i = i, .ad = ir_act_dtype(g), .M = g->M, .d = m->hidden, .E = m->moe_experts,
                .K = m->moe_top_k, .C = moe_capacity(g->run)};
    b.dl = b.d / g->tp; b.S = b.E * b.C; b.fl = m->moe_ffn / g->tp;
    b.El = b.E / g->ep; b.C2 = b.C * g->ep;
    b.rg = m->proj[i][PROJ_GATE].rank; b.ru = m->proj[i][PROJ_UP].rank; b.rd = m->proj[i][PROJ_DOWN].rank;
    ExpertFactors xf = expert_factors(m, g->layout);
    b.fa = xf.in->name;
    b.fb = xf.out->name;
    return b;
}

/* Norm of the residual shard h (sync statistics: the sum of squares all-reduced), router logits
 * [M, E] (all-reduced) and the routing, which every rank computes the same; sets b's tensors. */
static void btp_router(Graph *g, MoeBtp *b, int h) {
    const Model *m = &g->run->model;
    int i = b->i, t = g->tp, ad = b->ad;
    int64_t M = b->M, d = b->d, dl = b->dl, E = b->E, K = b->K, C = b->C, S = b->S;
    char nm[96];
    /* norm (sync statistics: the sum of squares all-reduced) and router logits [M, E] */
    ir_chunk(g, i, "L%d.moe_router", i);
    snprintf(nm, sizeof nm, "L%d.mlp_norm", i);
    int gamma = ir_param(g, nm, 1, dl, PS_SHARD1);
    ir_part(g, gamma, nm, rint_c(0), rint_c(1), rint_r(0, dl), rint_r(dl, dl), 0, 0, t == 1);
    int ss = act_t(g, PS_PARTIAL, 1, M, IR_FP32, i, "moe_sumsq");
    Op *o = k_begin(g, "sumsq");
    k_op(g, o, "x", opnd(h, 0, 0), 0, 0);
    k_op(g, o, "out", opnd(ss, 0, 0), OUT(PS_PARTIAL), 0);
    k_const(o, "rows", (double)M); k_const(o, "cols", (double)dl); k_const(o, "ldx", (double)dl);
    o->no_grad = 1;
    snprintf(nm, sizeof nm, "L%d.mlp_norm", i);
    ir_allreduce(g, ss, nm);
    int rs = ir_keep(g, act_t(g, PS_REPLICATED, 1, M, IR_FP32, i, "moe_rstd"));
    int xn = b->xn = act_t(g, PS_SHARD1, M, dl, ad, i, "moe_xn");
    o = k_begin(g, "rmsnorm_fwd");
    k_op(g, o, "x", opnd(h, 0, 0), 0, 1);
    k_op(g, o, "gamma", opnd(gamma, 0, 0), 0, 1);
    k_op(g, o, "out", opnd(xn, 0, 0), OUT(PS_SHARD1), 0);
    k_op(g, o, "rstd", opnd(rs, 0, 0), OUT(PS_REPLICATED), 1);
    k_op(g, o, "sumsq", opnd(ss, 0, 0), 0, 0);
    k_const(o, "rows", (double)M); k_const(o, "cols", (double)dl); k_const(o, "ldx", (double)dl);
    k_const(o, "ldo", (double)dl); k_const(o, "divisor", (double)d); k_const(o, "eps", m->norm_eps);
    snprintf(nm, sizeof nm, "L%d.router.W", i);
    int wr = ir_param(g, nm, dl, E, PS_SHARD0);
    ir_part(g, wr, nm, rint_r(0, dl), rint_r(dl, dl), rint_c(0), rint_c(E), 0, 0, t == 1);
    int logits = act_t(g, PS_PARTIAL, M, E, ad, i, "router_logits");
    ir_gemm_batched(g, opnd(xn, 0, 0), opnd(wr, 0, 0), opnd(logits, 0, 0), M, E, dl, 0, 0, 0, 1);
    snprintf(nm, sizeof nm, "L%d.router", i);
    ir_allreduce(g, logits, nm);

    /* routing: every rank computes the same (replicated logits, deterministic) */
    ir_chunk(g, i, "L%d.moe_gu_A", i);
    int probs = ir_keep(g, act_t(g, PS_REPLICATED, M, E, IR_FP32, i, "router_probs"));
    int sel = ir_keep(g, act_t(g, PS_REPLICATED, M, K, IR_FP32, i, "moe_sel"));
    int gates = ir_keep(g, act_t(g, PS_REPLICATED, M, K, IR_FP32, i, "moe_gates"));
    int slot = ir_keep(g, act_t(g, PS_REPLICATED, M, K, IR_FP32, i, "moe_slot"));
    int src = ir_keep(g, act_t(g, PS_REPLICATED, 1, S, IR_FP32, i, "moe_src"));
    /* aux: [loss, f_e, P_e] and, with a z-loss, [.., z-loss, lse of each token] (loss = both losses) */
    int aux = ir_keep(g, act_t(g, PS_REPLICATED, 1, m->moe_z > 0 ? 2 + 2 * E + M : 1 + 2 * E, IR_FP32, i, "moe_aux"));
    o = k_begin(g, "moe_router");
    k_op(g, o, "logits", opnd(logits, 0, 0), 0, 0);
    k_op(g, o, "probs", opnd(probs, 0, 0), OUT(PS_REPLICATED), 1);
    k_op(g, o, "sel", opnd(sel, 0, 0), OUT(PS_REPLICATED), 1);
    k_op(g, o, "gates", opnd(gates, 0, 0), OUT(PS_REPLICATED), 1);
    k_op(g, o, "slot", opnd(slot, 0, 0), OUT(PS_REPLICATED), 1);
    k_op(g, o, "src", opnd(src, 0, 0), OUT(PS_REPLICATED), 1);
    k_op(g, o, "aux", opnd(aux, 0, 0), OUT(PS_REPLICATED), 1);
    k_const(o, "rows", (double)M); k_const(o, "experts", (double)E); k_const(o, "top_k", (double)K);
    k_const(o, "capacity", (double)C); k_const(o, "ldl", (double)E); k_const(o, "norm", K > 1);
    k_const(o, "coef", m->moe_aux);
    if (m->moe_z > 0) k_const(o, "zcoef", m->moe_z);
    b->src = src; b->sel = sel; b->slot = slot; b->gates = gates;
}

/* gate/up with per-expert A (the factors not shared): the dispatched x̂ [E*C, d/t] @ A
 * (row-parallel, batched over the experts), all-reduce of [E*C, Rn], sigma; sets where gate (0)
 * and up (1) find their B's input (zsrc, zoff, zld). */
static void btp_gu_expert_A(Graph *g, const MoeBtp *b, int64_t Rn, int *zsrc, int64_t *zoff,
                            int64_t *zld) {
    const Model *m = &g->run->model;
    int i = b->i, ad = b->ad;
    int64_t dl = b->dl, C = b->C, S = b->S, El = b->El, C2 = b->C2;
    int64_t rg = b->rg, ru = b->ru;
    char nm[96];
    int xn = b->xn, src = b->src, sg = shared(m, 0), su = shared(m, 1);
    int64_t rgu[2] = {rg, ru};
    int xe = act_t(g, PS_SHARD1, S, dl, ad, i, "moe_xe");
    dispatch(g, b, xn, xe, dl, PS_SHARD1);
    if (g->ep > 1) {
        snprintf(nm, sizeof nm, "L%d.moe_dispatch", i);
        xe = alltoall(g, xe, src, 0, C, i, "moe_xe_ep", nm);
    }
    snprintf(nm, sizeof nm, "L%d.moe.gu.%s", i, b->fa);
    int wa = ir_param(g, nm, El * dl, Rn, PS_SHARD0);
    int64_t c0 = 0;
    if (!sg) { stacked(g, i, wa, "gate", b->fa, dl, rg, 1, c0); c0 += rg; }
    if (!su) stacked(g, i, wa, "up", b->fa, dl, ru, 1, c0);
    int ar = act_t(g, PS_PARTIAL, S, Rn, ad, i, "moe_gu_ar");
    ir_gemm_batched(g, opnd(xe, 0, dl), opnd(wa, 0, Rn), opnd(ar, 0, Rn), C2, Rn, dl, C2 * dl, dl * Rn, C2 * Rn, (int)El);
    snprintf(nm, sizeof nm, "L%d.moe_gu", i);
    ir_allreduce(g, ar, nm);
    ir_chunk(g, i, "L%d.moe_gu_B", i);
    int y = act_t(g, PS_REPLICATED, S, Rn, ad, i, "moe_gu_y"), z = act_t(g, PS_REPLICATED, S, Rn, ad, i, "moe_gu_z");
    bottleneck(g, ar, y, z, S, Rn, m->proj[i][PROJ_GATE].act);
    ir_tp_copy(g, z, nm);
    c0 = 0;
    for (int j = 0; j < 2; j++)
        if (!shared(m, j)) { zsrc[j] = z; zoff[j] = c0; zld[j] = Rn; c0 += rgu[j]; }
}

/* gate/up with shared A: each token projected once ([M, Rs], all-reduced), its latent sigma(A x̂)
 * dispatched in rank-r space; sets zsrc, zoff, zld of the shared factors. */
static void btp_gu_shared_A(Graph *g, const MoeBtp *b, int64_t Rs, int *zsrc, int64_t *zoff,
                            int64_t *zld) {
    const Model *m = &g->run->model;
    int i = b->i, t = g->tp, ad = b->ad;
    int64_t M = b->M, dl = b->dl, C = b->C, S = b->S, rg = b->rg, ru = b->ru;
    char nm[96];
    int xn = b->xn, src = b->src;
    int64_t rgu[2] = {rg, ru};
    ir_chunk(g, i, "L%d.moe_gu_sA", i);
    snprintf(nm, sizeof nm, "L%d.moe.gu.%ss", i, b->fa);
    int was = ir_param(g, nm, dl, Rs, PS_SHARD0);
    int64_t c0 = 0;
    for (int j = 0; j < 2; j++) {
        if (!shared(m, j)) continue;
        snprintf(nm, sizeof nm, "L%d.shared.%s.%s", i, j ? "up" : "gate", b->fa);
        ir_part(g, was, nm, rint_r(0, dl), rint_r(dl, dl), rint_c(0), rint_c(rgu[j]), 0, c0, t == 1);
        c0 += rgu[j];
    }
    int ars = act_t(g, PS_PARTIAL, M, Rs, ad, i, "moe_gus_ar");
    ir_gemm_batched(g, opnd(xn, 0, 0), opnd(was, 0, 0), opnd(ars, 0, 0), M, Rs, dl, 0, 0, 0, 1);
    snprintf(nm, sizeof nm, "L%d.moe_gus", i);
    ir_allreduce(g, ars, nm);
    ir_chunk(g, i, "L%d.moe_gus_B", i);
    int ys = act_t(g, PS_REPLICATED, M, Rs, ad, i, "moe_gus_y"), zs = act_t(g, PS_REPLICATED, M, Rs, ad, i, "moe_gus_z");
    bottleneck(g, ars, ys, zs, M, Rs, m->proj[i][PROJ_GATE].act);
    ir_tp_copy(g, zs, nm);
    /* the rank-Rs latents go to their experts' slots (the all-reduce of their gradient is [M, Rs]) */
    int ze = act_t(g, PS_REPLICATED, S, Rs, ad, i, "moe_gus_ze");
    dispatch(g, b, zs, ze, Rs, PS_REPLICATED);
    if (g->ep > 1) {   /* rank-r dispatch: the latents travel, not the d-wide tokens */
        snprintf(nm, sizeof nm, "L%d.moe_dispatch_r", i);
        ze = alltoall(g, ze, src, 0, C, i, "moe_gus_ze_ep", nm);
    }
    c0 = 0;
    for (int j = 0; j < 2; j++)
        if (shared(m, j)) { zsrc[j] = ze; zoff[j] = c0; zld[j] = Rs; c0 += rgu[j]; }
}

/* gate/up of the experts: A (per expert or shared), sigma, B, GLU; returns the GLU [E*C, ffn/t]. */
static int btp_gate_up(Graph *g, const MoeBtp *b) {
    const Model *m = &g->run->model;
    int i = b->i, ad = b->ad;
    int64_t S = b->S, fl = b->fl, El = b->El, C2 = b->C2, rg = b->rg, ru = b->ru, R = rg + ru;
    char nm[96];
    /* gate/up: a factor whose A is per expert reads the dispatched x̂ [E*C, d/t] (A row-parallel,
       batched over E, all-reduce of [E*C, r]); a shared A projects each token once ([M, r], all-
       reduced), and its latent sigma(A x̂) is dispatched in rank-r space. zsrc/zoff/zld: where each
       of gate (0) and up (1) finds its B's input [E*C, r] per expert. */
    int sg = shared(m, 0), su = shared(m, 1);
    int64_t Rs = (sg ? rg : 0) + (su ? ru : 0), Rn = R - Rs;
    int zsrc[2] = {-1, -1};
    int64_t zoff[2] = {0, 0}, zld[2] = {0, 0};
    if (Rn > 0) btp_gu_expert_A(g, b, Rn, zsrc, zoff, zld);
    if (Rs > 0) btp_gu_shared_A(g, b, Rs, zsrc, zoff, zld);
    int gu = act_t(g, PS_SHARD1, S, 2 * fl, ad, i, "moe_gu");
    snprintf(nm, sizeof nm, "L%d.moe.gate.%s", i, b->fb);
    int bg = stacked(g, i, ir_param(g, nm, El * rg, fl, PS_SHARD1), "gate", b->fb, rg, fl, 0, 0);
    snprintf(nm, sizeof nm, "L%d.moe.up.%s", i, b->fb);
    int bu = stacked(g, i, ir_param(g, nm, El * ru, fl, PS_SHARD1), "up", b->fb, ru, fl, 0, 0);
    ir_gemm_batched(g, opnd(zsrc[0], zoff[0], zld[0]), opnd(bg, 0, fl), opnd(gu, 0, 2 * fl), C2, fl, rg, C2 * zld[0], rg * fl, C2 * 2 * fl, (int)El);
    ir_gemm_batched(g, opnd(zsrc[1], zoff[1], zld[1]), opnd(bu, 0, fl), opnd(gu, fl, 2 * fl), C2, fl, ru, C2 * zld[1], ru * fl, C2 * 2 * fl, (int)El);
    int gl = act_t(g, PS_SHARD1, S, fl, ad, i, "moe_glu");
    Op *o = k_begin(g, "glu_fwd");
    k_op(g, o, "gate", opnd(gu, 0, 2 * fl), 0, 1); k_op(g, o, "up", opnd(gu, fl, 2 * fl), 0, 1);
    k_op(g, o, "out", opnd(gl, 0, fl), OUT(PS_SHARD1), 0);
    k_const(o, "rows", (double)S); k_const(o, "cols", (double)fl);
    k_const(o, "ldg", (double)(2 * fl)); k_const(o, "ldu", (double)(2 * fl)); k_const(o, "ldo", (double)fl);
    k_const(o, "act", m->mlp_gate_act == ACT_SILU ? 1 : 0);
    return gl;
}

/* down A (row-parallel, all-reduce [E*C, rd]), sigma, down B (column-parallel, or shared after
 * the combine) back to d/t columns, combined into the residual shard h; returns x_{i+1}. */
static int btp_down(Graph *g, const MoeBtp *b, int gl, int h) {
    const Model *m = &g->run->model;
    int i = b->i, t = g->tp, ad = b->ad;
    int64_t M = b->M, dl = b->dl, E = b->E, K = b->K, C = b->C, S = b->S, fl = b->fl;
    int64_t El = b->El, C2 = b->C2, rd = b->rd;
    char nm[96];
    int src = b->src, sel = b->sel, slot = b->slot, gates = b->gates, sd = shared(m, 2);
    snprintf(nm, sizeof nm, "L%d.moe.down.%s", i, b->fa);
    int wd = stacked(g, i, ir_param(g, nm, El * fl, rd, PS_SHARD0), "down", b->fa, fl, rd, 1, 0);
    int ard = act_t(g, PS_PARTIAL, S, rd, ad, i, "moe_down_ar");
    ir_gemm_batched(g, opnd(gl, 0, fl), opnd(wd, 0, rd), opnd(ard, 0, rd), C2, rd, fl, C2 * fl, fl * rd, C2 * rd, (int)El);
    snprintf(nm, sizeof nm, "L%d.moe_down", i);
    ir_allreduce(g, ard, nm);

    /* sigma, down B (column-parallel) back to [E*C, d/t], combine into the residual shard */
    ir_chunk(g, i, "L%d.moe_down_B", i);
    int yd = act_t(g, PS_REPLICATED, S, rd, ad, i, "moe_down_y"), zd = act_t(g, PS_REPLICATED, S, rd, ad, i, "moe_down_z");
    bottleneck(g, ard, yd, zd, S, rd, m->proj[i][PROJ_DOWN].act);
    int mo;
    if (!sd) {
        ir_tp_copy(g, zd, nm);
        snprintf(nm, sizeof nm, "L%d.moe.down.%s", i, b->fb);
        int bd = ir_param(g, nm, El * rd, dl, PS_SHARD1);
        stacked(g, i, bd, "down", b->fb, rd, dl, 0, 0);
        int eo = act_t(g, PS_SHARD1, S, dl, ad, i, "moe_eo");
        ir_gemm_batched(g, opnd(zd, 0, rd), opnd(bd, 0, dl), opnd(eo, 0, dl), C2, dl, rd, C2 * rd, rd * dl, C2 * dl, (int)El);
        if (g->ep > 1) {
            ir_chunk(g, i, "L%d.moe_out", i);
            snprintf(nm, sizeof nm, "L%d.moe_return", i);
            eo = alltoall(g, eo, src, 1, C, i, "moe_eo_back", nm);
        }
        mo = act_t(g, PS_SHARD1, M, dl, ad, i, "moe_out");
        combine(g, eo, sel, slot, gates, mo, M, dl, K, E, C, PS_SHARD1);
    } else {
        /* shared down B: combine the gated rank-rd latents per token [M, rd], then one GEMM to d */
        if (g->ep > 1) {   /* the rank-rd latents return, not the d-wide outputs */
            ir_chunk(g, i, "L%d.moe_out", i);
            snprintf(nm, sizeof nm, "L%d.moe_return_r", i);
            zd = alltoall(g, zd, src, 1, C, i, "moe_down_z_back", nm);
            snprintf(nm, sizeof nm, "L%d.moe_down", i);
        }
        int zc = act_t(g, PS_REPLICATED, M, rd, ad, i, "moe_down_zc");
        combine(g, zd, sel, slot, gates, zc, M, rd, K, E, C, PS_REPLICATED);
        ir_tp_copy(g, zc, nm);
        snprintf(nm, sizeof nm, "L%d.moe.down.%ss", i, b->fb);
        int bs = ir_param(g, nm, rd, dl, PS_SHARD1);
        snprintf(nm, sizeof nm, "L%d.shared.down.%s", i, b->fb);
        ir_part(g, bs, nm, rint_c(0), rint_c(rd), rint_r(0, dl), rint_r(dl, dl), 0, 0, t == 1);
        mo = act_t(g, PS_SHARD1, M, dl, ad, i, "moe_out");
        ir_gemm_batched(g, opnd(zc, 0, 0), opnd(bs, 0, 0), opnd(mo, 0, 0), M, dl, rd, 0, 0, 0, 1);
    }
    snprintf(nm, sizeof nm, "L%d.x", i + 1);
    int xo = ir_keep(g, ir_act(g, PS_SHARD1, M, dl, ad, "%s", nm));
    ir_add(g, opnd(h, 0, 0), opnd(mo, 0, 0), opnd(xo, 0, 0), M, dl, PS_SHARD1);
    return xo;
}

int moe_block(Graph *g, int i, int h) {
    if (g->layout != LAYOUT_BTP) return moe_block_rep(g, i, h);
    MoeBtp b = btp_shapes(g, i);
    btp_router(g, &b, h);
    int gl = btp_gate_up(g, &b);
    return btp_down(g, &b, gl, h);
}

void moe_tail(Graph *g) {
    const Model *m = &g->run->model;
    if (!m->moe_experts) return;
    ir_chunk(g, -1, "head");
    char nm[96];
    for (int i = 0; i < m->layers; i++) {
        if (!is_moe(m, i)) continue;
        snprintf(nm, sizeof nm, "L%d.moe_aux", i);
        int aux = ir_find(g, nm);
        Op *o = k_begin(g, "moe_aux_add");
        k_op(g, o, "aux", opnd(aux, 0, 0), 0, 0);
        k_op(g, o, "loss", opnd(g->loss, 0, 0), OUT(PS_REPLICATED), 0);
        k_const(o, "rows", 1);
        o->no_grad = 1;   /* the router's backward carries the load-balance gradient */
    }
}

/* Closed forms for the report and the cost model (docs/moe.md, "Dispatch"). Elements one
 * micro-batch's routed slots carry across an expert-parallel all-to-all in the forward pass, out to
 * the experts' owners and back: every one of the E*C slots counted (padding included; with ep ranks
 * the share 1/ep that stays on its rank still counts). Full tokens: d out, d back. With `shared`
 * (MOE_SHARE_* bits): out r_g + r_u when both gate and up A are shared (else d), back r_d when
 * down B is shared (else d). The backward pass moves the same amounts again. */
int64_t moe_dispatch_elems(const Run *run, int i, unsigned shared) {
    const Model *m = &run->model;
    int64_t S = m->moe_experts * moe_capacity(run), d = m->hidden;
    int64_t rg = m->proj[i][PROJ_GATE].rank, ru = m->proj[i][PROJ_UP].rank, rd = m->proj[i][PROJ_DOWN].rank;
    int64_t out = (shared & 3) == 3 ? rg + ru : d, back = (shared & 4) ? rd : d;
    return S * (out + back);
}

/* Canonical parameters of layer i's experts (not the router) with the factors in `shared` shared. */
int64_t moe_expert_params(const Model *m, int i, unsigned shared) {
    int64_t d = m->hidden, ff = m->moe_ffn, E = m->moe_experts, n = 0;
    static const int ps[3] = {PROJ_GATE, PROJ_UP, PROJ_DOWN};
    ExpertFactors xf = expert_factors(m, LAYOUT_BTP);
    for (int j = 0; j < 3; j++) {
        int64_t din = j == 2 ? ff : d, dout = j == 2 ? d : ff, rk = m->proj[i][ps[j]].rank;
        int64_t fin = expert_side(xf.in->rows, din, rk, dout) *
                      expert_side(xf.in->cols, din, rk, dout);
        int64_t fout = expert_side(xf.out->rows, din, rk, dout) *
                       expert_side(xf.out->cols, din, rk, dout);
        int64_t outer = j == 2 ? fout : fin, inner = j == 2 ? fin : fout;   /* token-side, inner */
        n += E * inner + (((shared >> j) & 1) ? outer : E * outer);
    }
    return n;
}
