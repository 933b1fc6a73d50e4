/* build.c: the forward tape of one micro-batch for each tensor-parallel layout (megatron, naive,
 * btp), with every tensor's parallel state, every collective with its backward dual, canonical
 * and local parameters (parts), and the static state check. The backward, the checkpoint plan
 * and the memory plan are later passes (backward.c, checkpoint.c, memplan.c). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/builder.h"
#include "gen/factor.h"
#include "gen/build.h"
#include "gen/moe.h"

static int lowrank_layout(const Graph *g) { return g->layout != LAYOUT_MEGATRON; }

/* ---- factors: each projection's parameters as its factorization's row says (gen/factor.h) */

/* The row the graph's layout builds its model with. */
static const Factorization *graph_factorization(const Graph *g) {
    return layout_factorization(&g->run->model, g->layout);
}

/* A product's factors in the low-rank layouts: the one reading the input (A, F_READS), the one
 * writing the output (B, the last); sigma and, in a row of three, the core S sit between. */
enum { F_READS = 0, F_CORE = 1 };
static int f_writes(const Graph *g) { return graph_factorization(g)->nfactors - 1; }
static int has_core(const Graph *g) { return graph_factorization(g)->nfactors > 2; }

/* L<i>.<proj>.<factor>: the canonical name of factor f of projection p in layer i. */
static void factor_canon_name(const Graph *g, int i, int p, int f, char *buf, size_t len) {
    snprintf(buf, len, "L%d.%s.%s", i, proj_name(p), graph_factorization(g)->factors[f].name);
}

/* The side (enum Side) of factor f of projection p that the graph's layout splits over tp. */
static int factor_split(const Graph *g, int p, int f) {
    return graph_factorization(g)->factors[f].split[g->layout][proj_role(p)];
}

/* The parallel state of a param holding factor f of projection p: split rows (row-parallel) are
 * shard(0), split columns (column-parallel) shard(1). */
static int factor_state(const Graph *g, int p, int f) {
    const FactorDef *fd = &graph_factorization(g)->factors[f];
    int split = factor_split(g, p, f);
    if (split == SIDE_NONE || split == SIDE_WHOLE) return PS_REPLICATED;
    return split == fd->rows ? PS_SHARD0 : PS_SHARD1;
}

/* Full and local (one rank's) width of side `side` of factor f of projection p in layer i. */
static int64_t factor_full(const Graph *g, int i, int p, int side) {
    return factor_side(&g->run->model, i, p, side);
}
static int64_t factor_local(const Graph *g, int i, int p, int f, int side) {
    int64_t w = factor_full(g, i, p, side);
    return factor_split(g, p, f) == side ? w / g->tp : w;
}

/* This rank's block of factor f of projection p in layer i, at (lr, lc) of param tensor w. */
static void factor_part(Graph *g, int w, int i, int p, int f, int64_t lr, int64_t lc) {
    const FactorDef *fd = &graph_factorization(g)->factors[f];
    int split = factor_split(g, p, f);
    int64_t rl = factor_local(g, i, p, f, fd->rows), cl = factor_local(g, i, p, f, fd->cols);
    int64_t rf = factor_full(g, i, p, fd->rows), cf = factor_full(g, i, p, fd->cols);
    RInt r0 = rint_c(0), r1 = rint_c(rf), c0 = rint_c(0), c1 = rint_c(cf);
    if (split == fd->rows) { r0 = rint_r(0, rl); r1 = rint_r(rl, rl); }
    if (split == fd->cols) { c0 = rint_r(0, cl); c1 = rint_r(cl, cl); }
    char cn[96];
    factor_canon_name(g, i, p, f, cn, sizeof cn);
    int whole = split == SIDE_NONE || split == SIDE_WHOLE;
    ir_part(g, w, cn, r0, r1, c0, c1, lr, lc, g->tp == 1 || whole);
}

/* A param holding this rank's block of factor f of projection p alone (named as its canon). */
static int factor_param(Graph *g, int i, int p, int f) {
    const FactorDef *fd = &graph_factorization(g)->factors[f];
    char cn[96];
    factor_canon_name(g, i, p, f, cn, sizeof cn);
    int w = ir_param(g, cn, factor_local(g, i, p, f, fd->rows), factor_local(g, i, p, f, fd->cols),
                     factor_state(g, p, f));
    factor_part(g, w, i, p, f, 0, 0);
    return w;
}

/* A param L<i>.<group>.<factor> [rows, cols] that concatenates factor f of a group of
 * projections led by p0 (filled by factor_part). */
static int factor_group(Graph *g, int i, const char *group, int p0, int f, int64_t rows,
                        int64_t cols) {
    char nm[96];
    snprintf(nm, sizeof nm, "L%d.%s.%s", i, group, graph_factorization(g)->factors[f].name);
    return ir_param(g, nm, rows, cols, factor_state(g, p0, f));
}

static void add_canons(Graph *g) {
    const Model *m = &g->run->model;
    const Run *r = g->run;
    int de = r->decay_embeddings ? 1 : 0;
    ir_canon(g, "embed", m->vocab, m->hidden, 0, m->init_std, de);
    char nm[96];
    for (int i = 0; i < m->layers; i++) {
        snprintf(nm, sizeof nm, "L%d.attn_norm", i); ir_canon(g, nm, 1, m->hidden, 1, 0, 0);
        snprintf(nm, sizeof nm, "L%d.mlp_norm", i); ir_canon(g, nm, 1, m->hidden, 1, 0, 0);
        if (m->moe_experts && m->moe_layer[i]) moe_canons(g, i);
        for (int p = 0; p < NPROJ; p++) {
            if (m->moe_experts && m->moe_layer[i] && p >= PROJ_GATE) continue;   /* the experts replace the MLP */
            const Factorization *fz = graph_factorization(g);
            for (int f = 0; f < fz->nfactors; f++) {
                const FactorDef *fd = &fz->factors[f];
                factor_canon_name(g, i, p, f, nm, sizeof nm);
                ir_canon(g, nm, factor_side(m, i, p, fd->rows), factor_side(m, i, p, fd->cols), 0,
                         factor_init_std(m, fd->init, m->proj[i][p].rank, proj_in(m, p),
                                         proj_out(m, p)), 1);
            }
        }
    }
    ir_canon(g, "final_norm", 1, m->hidden, 1, 0, 0);
    ir_canon(g, "head", m->hidden, m->vocab, 0, m->init_std, de);
}

/* ---- ops ---- */

/* ---- kernels ---- */

static void k_rmsnorm(Graph *g, int x, Opnd gamma, int out, int rstd, int sumsq, int64_t divisor) {
    const Tensor *tx = &g->t[x];
    Op *o = k_begin(g, "rmsnorm_fwd");
    k_op(g, o, "x", opnd(x, 0, 0), 0, 1);
    k_op(g, o, "gamma", gamma, 0, 1);
    k_op(g, o, "out", opnd(out, 0, 0), OUT(g->t[out].state), 0);
    k_op(g, o, "rstd", opnd(rstd, 0, 0), OUT(g->t[rstd].state), 1);
    if (sumsq >= 0) k_op(g, o, "sumsq", opnd(sumsq, 0, 0), 0, 0);
    k_const(o, "rows", (double)tx->rows); k_const(o, "cols", (double)tx->cols);
    k_const(o, "ldx", (double)tx->cols); k_const(o, "ldo", (double)g->t[out].cols);
    k_const(o, "divisor", (double)divisor); k_const(o, "eps", g->run->model.norm_eps);
}

/* Bottleneck activation after an all-reduce: h [M, cols] -> y, z [M, cols]; norm: the summed
 * online-norm statistics (the [M] vector after h's activations in the same buffer) give rstd. */
static void k_bottleneck(Graph *g, Opnd h, int64_t cols, Opnd y, Opnd z, int rstd, int rho, int act, int norm) {
    h = ir_opnd_ld(g, h); y = ir_opnd_ld(g, y); z = ir_opnd_ld(g, z);
    Op *o = k_begin(g, "bottleneck_act");
    k_op(g, o, "h", h, 0, 1);
    k_op(g, o, "y", y, OUT(g->t[y.t].state), 1);
    k_op(g, o, "z", z, OUT(g->t[z.t].state), 0);
    if (norm) k_op(g, o, "rstd", opnd(rstd, 0, 0), OUT(g->t[rstd].state), 1);
    if (norm) k_op(g, o, "stat", ir_stat_vec(g, h.t), 0, 0);
    k_const(o, "rows", (double)g->M); k_const(o, "cols", (double)cols);
    k_const(o, "ldh", (double)h.ld); k_const(o, "ldy", (double)y.ld); k_const(o, "ldz", (double)z.ld);
    k_const(o, "act", act == ACT_SILU ? 1 : 0); k_const(o, "norm", norm);
    k_const(o, "eps", g->run->model.norm_eps);
    o->aux = rho;   /* online norm: the rho of the norm feeding h (backward reads it) */
}

/* out [M, cols] = a + b */
static void k_add(Graph *g, Opnd a, Opnd b, Opnd out, int64_t cols, int state) {
    ir_add(g, a, b, out, g->M, cols, state);
}

static void k_rope(Graph *g, Opnd x, int heads, int state) {
    x = ir_opnd_ld(g, x);
    const Model *m = &g->run->model;
    Op *o = k_begin(g, "rope");
    k_op(g, o, "x", x, OUT(state), 0);
    k_const(o, "rows", (double)g->M); k_const(o, "heads", heads); k_const(o, "head_dim", m->head_dim);
    k_const(o, "ldx", (double)x.ld); k_const(o, "seq", g->run->seq); k_const(o, "theta", m->rope_theta);
    k_const(o, "inverse", 0);
}

static void k_attention(Graph *g, Opnd q, Opnd k, Opnd v, int out, int lse, int heads, int kv_heads) {
    const Model *m = &g->run->model;
    Op *o = k_begin(g, "attention_fwd");
    k_op(g, o, "q", q, 0, 1); k_op(g, o, "k", k, 0, 1); k_op(g, o, "v", v, 0, 1);
    k_op(g, o, "out", opnd(out, 0, 0), OUT(g->t[out].state), 1);
    k_op(g, o, "lse", opnd(lse, 0, 0), OUT(g->t[lse].state), 1);
    k_const(o, "batch", g->run->micro_batch); k_const(o, "seq", g->run->seq);
    k_const(o, "heads", heads); k_const(o, "kv_heads", kv_heads); k_const(o, "head_dim", m->head_dim);
    k_const(o, "ldq", (double)q.ld); k_const(o, "ldk", (double)k.ld); k_const(o, "ldv", (double)v.ld);
    k_const(o, "ldo", (double)g->t[out].cols); k_const(o, "scale", 1.0 / sqrt((double)m->head_dim));
}

static void k_glu(Graph *g, Opnd gate, Opnd up, int out, int64_t cols, int act) {
    gate = ir_opnd_ld(g, gate); up = ir_opnd_ld(g, up);
    Op *o = k_begin(g, "glu_fwd");
    k_op(g, o, "gate", gate, 0, 1); k_op(g, o, "up", up, 0, 1);
    k_op(g, o, "out", opnd(out, 0, 0), OUT(g->t[out].state), 0);
    k_const(o, "rows", (double)g->M); k_const(o, "cols", (double)cols);
    k_const(o, "ldg", (double)gate.ld); k_const(o, "ldu", (double)up.ld);
    k_const(o, "ldo", (double)g->t[out].cols); k_const(o, "act", act == ACT_SILU ? 1 : 0);
}

/* ---- shapes and checks ---- */

static int check_run(Graph *g) {
    const Run *r = g->run;
    const Model *m = &r->model;
    int t = r->tp;
    const char *f = r->file[0] ? r->file : r->name;
    if (t < 1) return ir_error(g, "%s: tp=%d: the tensor-parallel degree must be at least 1", f, t);
    if (m->layers < 1 || m->layers > MAX_LAYERS) return ir_error(g, "%s: layers=%d out of range 1..%d", f, m->layers, MAX_LAYERS);
    if (m->hidden % t || m->ffn % t || m->vocab % t || m->heads % t || m->kv_heads % t)
        return ir_error(g, "%s: tp=%d must divide hidden (%d), ffn (%d), vocab (%d), heads (%d) and kv_heads (%d)",
                    f, t, m->hidden, m->ffn, m->vocab, m->heads, m->kv_heads);
    if (m->kv_heads < 1 || m->heads % m->kv_heads)
        return ir_error(g, "%s: heads (%d) must be a multiple of kv_heads (%d)", f, m->heads, m->kv_heads);
    if (r->micro_batch < 1 || r->seq < 1) return ir_error(g, "%s: micro_batch and seq must be positive", f);
    if (!lowrank_layout(g)) return 0;
    for (int i = 0; i < m->layers; i++)
        for (int p = 0; p < NPROJ; p++) {
            const ProjSpec *ps = &m->proj[i][p];
            if (ps->factor == FACTOR_FULL)
                return ir_error(g, "%s: layout %s needs low-rank projections but L%d.%s is full rank "
                            "(use layout=megatron for full-rank models)", f, layout_name(g->layout), i, proj_name(p));
            if (ps->rank < 1) return ir_error(g, "%s: L%d.%s has rank %d", f, i, proj_name(p), ps->rank);
            if (g->layout == LAYOUT_NAIVE && ps->rank % t)
                return ir_error(g, "%s: layout naive shards every rank over tp=%d but L%d.%s has rank %d "
                            "(choose a rank divisible by tp)", f, t, i, proj_name(p), ps->rank);
        }
    const Factorization *fz = graph_factorization(g);
    int k = factorization_unsplit(fz, g->layout);
    if (k >= 0)
        return ir_error(g, "%s: model %s is %s, which layout %s cannot split (factor %s): "
                        "use layout = \"btp\"", f, m->name, fz->family, layout_name(g->layout),
                        fz->factors[k].name);
    if (m->lax)
        for (int i = 0; i < m->layers; i++) {
            const ProjSpec *ps = m->proj[i];
            if (ps[PROJ_O].rank != ps[PROJ_V].rank || ps[PROJ_GATE].rank != ps[PROJ_O].rank ||
                ps[PROJ_UP].rank != ps[PROJ_O].rank || ps[PROJ_DOWN].rank != ps[PROJ_UP].rank)
                return ir_error(g, "%s: LaX crossings need equal ranks for v, o, gate, up and down (layer %d)", f, i);
        }
    return 0;
}

/* ---- embedding and tail ---- */

static int build_embed(Graph *g) {
    const Model *m = &g->run->model;
    int t = g->tp;
    int64_t dl = m->hidden / t, M = g->M;
    ir_chunk(g, -1, "embed");
    int table = ir_param(g, "embed", m->vocab, dl, PS_SHARD1);
    ir_part(g, table, "embed", rint_c(0), rint_c(m->vocab), rint_r(0, dl), rint_r(dl, dl), 0, 0, t == 1);
    int x0 = -1;
    int out = g->layout == LAYOUT_BTP ? (x0 = ir_keep(g, ir_act(g, PS_SHARD1, M, dl, ir_act_dtype(g), "L0.x")))
                                      : ir_act(g, PS_SHARD1, M, dl, ir_act_dtype(g), "embed_out");
    Op *o = k_begin(g, "embedding_fwd");
    k_op(g, o, "tokens", opnd(g->tokens, 0, 0), 0, 1);
    k_op(g, o, "table", opnd(table, 0, 0), 0, 0);
    k_op(g, o, "out", opnd(out, 0, 0), OUT(PS_SHARD1), 0);
    k_const(o, "rows", (double)M); k_const(o, "cols", (double)dl); k_const(o, "vocab", m->vocab);
    if (g->layout != LAYOUT_BTP) {
        x0 = ir_act(g, PS_REPLICATED, M, m->hidden, ir_act_dtype(g), "L0.x");
        ir_allgather(g, out, x0, "embed", 0);
    }
    return x0;
}

static void build_tail(Graph *g, int x) {
    const Model *m = &g->run->model;
    int t = g->tp;
    int64_t M = g->M, d = m->hidden, vl = m->vocab / t;
    int ad = ir_act_dtype(g);
    ir_chunk(g, -1, "final");
    int xfull = x;
    if (g->layout == LAYOUT_BTP) {
        xfull = ir_act(g, PS_REPLICATED, M, d, ad, "final_x");
        ir_allgather(g, x, xfull, "final", 0);
    }
    ir_chunk(g, -1, "head");
    int gamma = ir_param_whole(g, "final_norm", "final_norm");
    int xf = ir_act(g, PS_REPLICATED, M, d, ad, "final_xn");
    int rstd = ir_keep(g, ir_act(g, PS_REPLICATED, 1, M, IR_FP32, "final_rstd"));
    k_rmsnorm(g, xfull, opnd(gamma, 0, 0), xf, rstd, -1, d);
    ir_tp_copy(g, xf, "head");
    int head = ir_param(g, "head", d, vl, PS_SHARD1);
    ir_part(g, head, "head", rint_c(0), rint_c(d), rint_r(0, vl), rint_r(vl, vl), 0, 0, t == 1);
    int logits = ir_act(g, PS_SHARD1, M, vl, ad, "logits");
    ir_gemm(g, opnd(xf, 0, 0), opnd(head, 0, 0), opnd(logits, 0, 0), M, vl, d);
    int stats = ir_act(g, PS_SHARD1, M, 3, IR_FP32, "xent_stats");
    Op *o = k_begin(g, "xent_fwd");
    k_op(g, o, "logits", opnd(logits, 0, 0), 0, 1);
    k_op(g, o, "targets", opnd(g->targets, 0, 0), 0, 1);
    k_op(g, o, "stats", opnd(stats, 0, 0), OUT(PS_SHARD1), 0);
    k_const(o, "rows", (double)M); k_const(o, "cols", (double)vl); k_const(o, "ldl", (double)vl);
    k_const_r(o, "vocab_offset", 0, (double)vl);
    o->no_grad = 1;
    int stats_all = ir_act(g, PS_REPLICATED, M, 3 * t, IR_FP32, "xent_stats_all");
    ir_allgather(g, stats, stats_all, "xent", 1);
    int lse = ir_keep(g, ir_act(g, PS_REPLICATED, 1, M, IR_FP32, "xent_lse"));
    o = k_begin(g, "xent_combine");
    k_op(g, o, "stats_all", opnd(stats_all, 0, 0), 0, 0);
    k_op(g, o, "lse", opnd(lse, 0, 0), OUT(PS_REPLICATED), 1);
    k_op(g, o, "loss", opnd(g->loss, 0, 0), OUT(PS_REPLICATED), 0);
    k_const(o, "rows", (double)M); k_const(o, "tp", t);
    o->aux = logits;   /* the backward (xent_bwd) reads the logits */
}

/* ---- megatron (full rank) ---- */

static int megatron_layer(Graph *g, int i, int x) {
    const Model *m = &g->run->model;
    const Run *r = g->run;
    int t = g->tp, ad = ir_act_dtype(g);
    int64_t M = g->M, d = m->hidden, hd = m->head_dim;
    int64_t qw = m->heads / t * hd, kw = m->kv_heads / t * hd, W = qw + 2 * kw, fl = m->ffn / t;
    /* a low-rank model's full-rank twin takes the dense row's gate */
    const Factorization *fz = graph_factorization(g);
    int act = model_factorization(m) != fz ? fz->gate_act : m->mlp_gate_act;
    char nm[96], cn[96];
    ir_chunk(g, i, "L%d.attn", i);
    snprintf(cn, sizeof cn, "L%d.attn_norm", i);
    int gamma = ir_param_whole(g, cn, cn);
    int xn = ir_act(g, PS_REPLICATED, M, d, ad, "L%d.xn1", i);
    int rstd = ir_keep(g, ir_act(g, PS_REPLICATED, 1, M, IR_FP32, "L%d.rstd1", i));
    k_rmsnorm(g, x, opnd(gamma, 0, 0), xn, rstd, -1, d);
    snprintf(nm, sizeof nm, "L%d.qkv", i);
    ir_tp_copy(g, xn, nm);
    int qkv = ir_act(g, PS_SHARD1, M, W, ad, "L%d.qkv", i);
    const int qp[3] = {PROJ_Q, PROJ_K, PROJ_V};
    const int64_t widths[3] = {qw, kw, kw};
    if (r->group_linears) {
        int w = factor_group(g, i, "qkv", PROJ_Q, 0, d, W);
        int64_t col = 0;
        for (int j = 0; j < 3; j++) { factor_part(g, w, i, qp[j], 0, 0, col); col += widths[j]; }
        ir_gemm(g, opnd(xn, 0, 0), opnd(w, 0, 0), opnd(qkv, 0, 0), M, W, d);
    } else {
        int64_t col = 0;
        for (int j = 0; j < 3; j++) {
            int w = factor_param(g, i, qp[j], 0);
            ir_gemm(g, opnd(xn, 0, 0), opnd(w, 0, 0), opnd(qkv, col, W), M, widths[j], d);
            col += widths[j];
        }
    }
    k_rope(g, opnd(qkv, 0, W), m->heads / t, PS_SHARD1);
    k_rope(g, opnd(qkv, qw, W), m->kv_heads / t, PS_SHARD1);
    int attn = ir_act(g, PS_SHARD1, M, qw, ad, "L%d.attn", i);
    int lse = ir_act(g, PS_SHARD1, 1, (int64_t)r->micro_batch * (m->heads / t) * r->seq, IR_FP32, "L%d.lse", i);
    k_attention(g, opnd(qkv, 0, W), opnd(qkv, qw, W), opnd(qkv, qw + kw, W), attn, lse, m->heads / t, m->kv_heads / t);
    int wo = factor_param(g, i, PROJ_O, 0);
    int oo = ir_act(g, PS_PARTIAL, M, d, ad, "L%d.o_out", i);
    ir_gemm(g, opnd(attn, 0, 0), opnd(wo, 0, 0), opnd(oo, 0, 0), M, d, qw);
    snprintf(nm, sizeof nm, "L%d.o", i);
    ir_allreduce(g, oo, nm);
    ir_chunk(g, i, "L%d.mlp", i);
    int h = ir_keep(g, ir_act(g, PS_REPLICATED, M, d, ad, "L%d.h", i));
    k_add(g, opnd(x, 0, d), opnd(oo, 0, d), opnd(h, 0, d), d, PS_REPLICATED);
    if (m->moe_experts && m->moe_layer[i]) return moe_block(g, i, h);
    snprintf(cn, sizeof cn, "L%d.mlp_norm", i);
    int gamma2 = ir_param_whole(g, cn, cn);
    int xn2 = ir_act(g, PS_REPLICATED, M, d, ad, "L%d.xn2", i);
    int rstd2 = ir_keep(g, ir_act(g, PS_REPLICATED, 1, M, IR_FP32, "L%d.rstd2", i));
    k_rmsnorm(g, h, opnd(gamma2, 0, 0), xn2, rstd2, -1, d);
    snprintf(nm, sizeof nm, "L%d.gate_up", i);
    ir_tp_copy(g, xn2, nm);
    int gu = ir_act(g, PS_SHARD1, M, 2 * fl, ad, "L%d.gu", i);
    if (r->group_linears) {
        int w = factor_group(g, i, "gu", PROJ_GATE, 0, d, 2 * fl);
        factor_part(g, w, i, PROJ_GATE, 0, 0, 0);
        factor_part(g, w, i, PROJ_UP, 0, 0, fl);
        ir_gemm(g, opnd(xn2, 0, 0), opnd(w, 0, 0), opnd(gu, 0, 0), M, 2 * fl, d);
    } else {
        for (int j = 0; j < 2; j++) {
            int w = factor_param(g, i, j ? PROJ_UP : PROJ_GATE, 0);
            ir_gemm(g, opnd(xn2, 0, 0), opnd(w, 0, 0), opnd(gu, j * fl, 2 * fl), M, fl, d);
        }
    }
    int gl = ir_act(g, PS_SHARD1, M, fl, ad, "L%d.glu", i);
    k_glu(g, opnd(gu, 0, 2 * fl), opnd(gu, fl, 2 * fl), gl, fl, act);
    int wd = factor_param(g, i, PROJ_DOWN, 0);
    int dn = ir_act(g, PS_PARTIAL, M, d, ad, "L%d.down_out", i);
    ir_gemm(g, opnd(gl, 0, 0), opnd(wd, 0, 0), opnd(dn, 0, 0), M, d, fl);
    snprintf(nm, sizeof nm, "L%d.down", i);
    ir_allreduce(g, dn, nm);
    ir_chunk(g, i, "L%d.out", i);
    int xo = ir_keep(g, ir_act(g, PS_REPLICATED, M, d, ad, "L%d.x", i + 1));
    k_add(g, opnd(h, 0, d), opnd(dn, 0, d), opnd(xo, 0, d), d, PS_REPLICATED);
    return xo;
}

/* ---- naive low-rank TP (A column-parallel on r, B row-parallel, all-reduce on d_out) ---- */

/* The A side of a group sharing the input xin [M, din] (replicated): z [M, sum r_p/t] sharded. */
static int naive_A(Graph *g, int i, int xin, int64_t din, const int *projs, int np, const char *gname, int64_t *zcol) {
    const Model *m = &g->run->model;
    int t = g->tp, ad = ir_act_dtype(g);
    int64_t M = g->M, R = 0;
    char nm[96];
    for (int j = 0; j < np; j++) { zcol[j] = R; R += m->proj[i][projs[j]].rank / t; }
    snprintf(nm, sizeof nm, "L%d.%s", i, gname);
    ir_tp_copy(g, xin, nm);
    int a = ir_act(g, PS_SHARD1, M, R, ad, "L%d.%s_a", i, gname);
    if (g->run->group_linears && np > 1) {
        int w = factor_group(g, i, gname, projs[0], F_READS, din, R);
        for (int j = 0; j < np; j++) factor_part(g, w, i, projs[j], F_READS, 0, zcol[j]);
        ir_gemm(g, opnd(xin, 0, 0), opnd(w, 0, 0), opnd(a, 0, 0), M, R, din);
    } else {
        for (int j = 0; j < np; j++) {
            int64_t rl = m->proj[i][projs[j]].rank / t;
            int w = factor_param(g, i, projs[j], F_READS);
            ir_gemm(g, opnd(xin, 0, 0), opnd(w, 0, 0), opnd(a, zcol[j], R), M, rl, din);
        }
    }
    int y = ir_act(g, PS_SHARD1, M, R, ad, "L%d.%s_y", i, gname);
    int z = ir_act(g, PS_SHARD1, M, R, ad, "L%d.%s_z", i, gname);
    k_bottleneck(g, opnd(a, 0, R), R, opnd(y, 0, R), opnd(z, 0, R), -1, -1, m->proj[i][projs[0]].act, 0);
    return z;
}

/* The B side: z_p [M, r_p/t] @ B_p [r_p/t, dout_p] -> out_p (partial) then one all-reduce each.
 * outs[j]: the output tensor of projection j (contiguous [M, dout_p] at offset outoff[j]). */
static void naive_B(Graph *g, int i, const Opnd *zin, const int *projs, int np, const int *outs,
                    const int64_t *outoff, const char *gname) {
    const Model *m = &g->run->model;
    int t = g->tp;
    int64_t M = g->M;
    int batchable = g->run->group_linears && np > 1;
    for (int j = 1; j < np; j++)
        if (m->proj[i][projs[j]].rank != m->proj[i][projs[0]].rank || proj_out(m, projs[j]) != proj_out(m, projs[0]) ||
            outs[j] != outs[0] || zin[j].t != zin[0].t)
            batchable = 0;
    if (batchable) {
        int64_t rl = m->proj[i][projs[0]].rank / t, dout = proj_out(m, projs[0]);
        int w = factor_group(g, i, gname, projs[0], f_writes(g), np * rl, dout);
        for (int j = 0; j < np; j++) factor_part(g, w, i, projs[j], f_writes(g), j * rl, 0);
        ir_gemm_batched(g, zin[0], opnd(w, 0, 0), opnd(outs[0], outoff[0], dout), M, dout, rl,
                     zin[1].off.base - zin[0].off.base, rl * dout, outoff[1] - outoff[0], np);
    } else {
        Gemm mem[4];
        for (int j = 0; j < np; j++) {
            int64_t rl = m->proj[i][projs[j]].rank / t, dout = proj_out(m, projs[j]);
            int w = factor_param(g, i, projs[j], f_writes(g));
            mem[j] = ir_gemm_member(zin[j], opnd(w, 0, 0), opnd(outs[j], outoff[j], dout), M, dout, rl);
        }
        if (g->run->group_linears) ir_gemm_grouped(g, mem, np);
        else for (int j = 0; j < np; j++) ir_gemm(g, mem[j].A, mem[j].B, mem[j].C, mem[j].m, mem[j].n, mem[j].k);
    }
    for (int j = 0; j < np; j++) {
        /* one all-reduce per projection on its contiguous [M, dout] block */
        Op *o = fwd_op(g, OP_ALLREDUCE);
        int64_t dout = proj_out(m, projs[j]);
        o->buf = opnd(outs[j], outoff[j], dout);
        o->elems = M * dout;
        o->dtype = g->t[outs[j]].dtype;
        o->bytes = o->elems * (int64_t)ir_dtype_size(o->dtype);
        o->reduce = RED_SUM;
        snprintf(o->tag, sizeof o->tag, "L%d.%s", i, proj_name(projs[j]));
        o->dual = "identity";
    }
}

static int naive_layer(Graph *g, int i, int x) {
    const Model *m = &g->run->model;
    const Run *r = g->run;
    int ad = ir_act_dtype(g);
    int64_t M = g->M, d = m->hidden, hd = m->head_dim, ff = m->ffn;
    int64_t qw = (int64_t)m->heads * hd, kw = (int64_t)m->kv_heads * hd;
    char cn[96];
    ir_chunk(g, i, "L%d.attn", i);
    snprintf(cn, sizeof cn, "L%d.attn_norm", i);
    int gamma = ir_param_whole(g, cn, cn);
    int xn = ir_act(g, PS_REPLICATED, M, d, ad, "L%d.xn1", i);
    int rstd = ir_keep(g, ir_act(g, PS_REPLICATED, 1, M, IR_FP32, "L%d.rstd1", i));
    k_rmsnorm(g, x, opnd(gamma, 0, 0), xn, rstd, -1, d);
    const int qp[3] = {PROJ_Q, PROJ_K, PROJ_V};
    int64_t zc[3];
    int z = naive_A(g, i, xn, d, qp, 3, "qkv", zc);
    int64_t R = g->t[z].cols;
    Opnd zin[3] = {opnd(z, zc[0], R), opnd(z, zc[1], R), opnd(z, zc[2], R)};
    int outs[3]; int64_t off[3];
    int mha = qw == kw && m->proj[i][PROJ_Q].rank == m->proj[i][PROJ_K].rank && m->proj[i][PROJ_K].rank == m->proj[i][PROJ_V].rank;
    if (mha) {   /* q, k, v stacked [3][M][d]: each block contiguous for its own all-reduce */
        int qkv = ir_act(g, PS_PARTIAL, 3 * M, qw, ad, "L%d.qkv", i);
        for (int j = 0; j < 3; j++) { outs[j] = qkv; off[j] = j * M * qw; }
    } else {
        outs[0] = ir_act(g, PS_PARTIAL, M, qw, ad, "L%d.q", i);
        outs[1] = ir_act(g, PS_PARTIAL, M, kw, ad, "L%d.k", i);
        outs[2] = ir_act(g, PS_PARTIAL, M, kw, ad, "L%d.v", i);
        off[0] = off[1] = off[2] = 0;
    }
    ir_chunk(g, i, "L%d.attn_B", i);
    naive_B(g, i, zin, qp, 3, outs, off, "qkv");
    ir_chunk(g, i, "L%d.o", i);
    Opnd q = opnd(outs[0], off[0], qw), k = opnd(outs[1], off[1], kw), v = opnd(outs[2], off[2], kw);
    k_rope(g, q, m->heads, PS_REPLICATED);
    k_rope(g, k, m->kv_heads, PS_REPLICATED);
    int attn = ir_act(g, PS_REPLICATED, M, qw, ad, "L%d.attn", i);
    int lse = ir_act(g, PS_REPLICATED, 1, (int64_t)r->micro_batch * m->heads * r->seq, IR_FP32, "L%d.lse", i);
    k_attention(g, q, k, v, attn, lse, m->heads, m->kv_heads);
    const int op_[1] = {PROJ_O};
    int64_t oc[1];
    int zo = naive_A(g, i, attn, qw, op_, 1, "o", oc);
    Opnd zoin = opnd(zo, 0, 0);
    if (m->lax) {   /* B_o reads z_o + z_v */
        int zx = ir_act(g, PS_SHARD1, M, g->t[zo].cols, ad, "L%d.o_zx", i);
        k_add(g, opnd(zo, 0, 0), zin[2], opnd(zx, 0, 0), g->t[zo].cols, PS_SHARD1);
        zoin = opnd(zx, 0, 0);
    }
    int oo = ir_act(g, PS_PARTIAL, M, d, ad, "L%d.o_out", i);
    int64_t z0 = 0;
    naive_B(g, i, &zoin, op_, 1, &oo, &z0, "o");
    ir_chunk(g, i, "L%d.mlp", i);
    int h = ir_keep(g, ir_act(g, PS_REPLICATED, M, d, ad, "L%d.h", i));
    k_add(g, opnd(x, 0, d), opnd(oo, 0, d), opnd(h, 0, d), d, PS_REPLICATED);
    if (m->moe_experts && m->moe_layer[i]) return moe_block(g, i, h);
    snprintf(cn, sizeof cn, "L%d.mlp_norm", i);
    int gamma2 = ir_param_whole(g, cn, cn);
    int xn2 = ir_act(g, PS_REPLICATED, M, d, ad, "L%d.xn2", i);
    int rstd2 = ir_keep(g, ir_act(g, PS_REPLICATED, 1, M, IR_FP32, "L%d.rstd2", i));
    k_rmsnorm(g, h, opnd(gamma2, 0, 0), xn2, rstd2, -1, d);
    const int gp[2] = {PROJ_GATE, PROJ_UP};
    int64_t gc[2];
    int zg = naive_A(g, i, xn2, d, gp, 2, "gu", gc);
    int64_t R2 = g->t[zg].cols;
    Opnd zgin[2] = {opnd(zg, gc[0], R2), opnd(zg, gc[1], R2)};
    if (m->lax) {   /* B_gate, B_up read z_p + z_o */
        int zx = ir_act(g, PS_SHARD1, M, R2, ad, "L%d.gu_zx", i);
        for (int j = 0; j < 2; j++) {
            k_add(g, zgin[j], opnd(zo, 0, 0), opnd(zx, gc[j], R2), g->t[zo].cols, PS_SHARD1);
            zgin[j] = opnd(zx, gc[j], R2);
        }
    }
    int gu = ir_act(g, PS_PARTIAL, 2 * M, ff, ad, "L%d.gu", i);
    int guo[2] = {gu, gu}; int64_t gof[2] = {0, M * ff};
    ir_chunk(g, i, "L%d.mlp_B", i);
    naive_B(g, i, zgin, gp, 2, guo, gof, "gu");
    ir_chunk(g, i, "L%d.down", i);
    int gl = ir_act(g, PS_REPLICATED, M, ff, ad, "L%d.glu", i);
    k_glu(g, opnd(gu, 0, ff), opnd(gu, M * ff, ff), gl, ff, m->mlp_gate_act);
    const int dp_[1] = {PROJ_DOWN};
    int64_t dc[1];
    int zd = naive_A(g, i, gl, ff, dp_, 1, "down", dc);
    Opnd zdin = opnd(zd, 0, 0);
    if (m->lax) {   /* B_down reads z_down + z_up */
        int zx = ir_act(g, PS_SHARD1, M, g->t[zd].cols, ad, "L%d.down_zx", i);
        k_add(g, opnd(zd, 0, 0), opnd(zg, gc[1], R2), opnd(zx, 0, 0), g->t[zd].cols, PS_SHARD1);
        zdin = opnd(zx, 0, 0);
    }
    int dn = ir_act(g, PS_PARTIAL, M, d, ad, "L%d.down_out", i);
    naive_B(g, i, &zdin, dp_, 1, &dn, &z0, "down");
    ir_chunk(g, i, "L%d.out", i);
    int xo = ir_keep(g, ir_act(g, PS_REPLICATED, M, d, ad, "L%d.x", i + 1));
    k_add(g, opnd(h, 0, d), opnd(dn, 0, d), opnd(xo, 0, d), d, PS_REPLICATED);
    return xo;
}

/* ---- btp: A row-parallel (input sharded), all-reduce on rank-r, B column-parallel ---- */

/* Norm + A side of a group reading the residual shard x [M, dl]: returns, per projection, the
 * view of its z (replicated [M, r_p]). With online norm each all-reduce buffer carries the norm's
 * statistics in the same collective: [M, w] activations (ld w: aligned GEMM operands), then the
 * M statistics (Tensor.has_stat). At tp = 1 there is no collective for the statistics to ride
 * in or to be summed by, so the norm is the plain one naive runs (no rescale, no sumsq). */
static void btp_A(Graph *g, int i, int x, const char *normname, const int *projs, int np,
                  const char *gname, Opnd *zout) {
    const Model *m = &g->run->model;
    const Run *r = g->run;
    int t = g->tp, ad = ir_act_dtype(g);
    int64_t M = g->M, d = m->hidden, dl = d / t;
    char nm[96];
    int online = r->online_rmsnorm && t > 1;
    int gamma = ir_param(g, normname, 1, dl, PS_SHARD1);
    ir_part(g, gamma, normname, rint_c(0), rint_c(1), rint_r(0, dl), rint_r(dl, dl), 0, 0, t == 1);
    int xin = ir_act(g, PS_SHARD1, M, dl, ad, "L%d.%s_xn", i, gname);
    int rho = -1;
    int grouped = r->group_linears && np > 1;
    int nbuf = grouped ? 1 : np;
    int64_t ranks[4], R = 0;
    for (int j = 0; j < np; j++) { ranks[j] = m->proj[i][projs[j]].rank; R += ranks[j]; }
    int ar[4];
    for (int b = 0; b < nbuf; b++) {
        int64_t w = grouped ? R : ranks[b];
        /* M*(w+1) elements with online norm ([M, w] then [M] statistics), else [M, w]; grouped: one
           buffer for the whole group, else one per projection */
        ar[b] = ir_act(g, PS_PARTIAL, M, w + (online ? 1 : 0), ad, "L%d.%s_ar", i, grouped ? gname : proj_name(projs[b]));
        g->t[ar[b]].has_stat = online;
    }
    if (online) {
        rho = ir_keep(g, ir_act(g, PS_SHARD1, 1, M, IR_FP32, "L%d.%s_rho", i, gname));
        Op *o = k_begin(g, "online_norm_fwd");
        k_op(g, o, "x", opnd(x, 0, 0), 0, 1);
        k_op(g, o, "gamma", opnd(gamma, 0, 0), 0, 1);
        k_op(g, o, "xhat", opnd(xin, 0, 0), OUT(PS_SHARD1), 0);
        k_op(g, o, "rho", opnd(rho, 0, 0), OUT(PS_SHARD1), 1);
        k_op(g, o, "stat", ir_stat_vec(g, ar[0]), OUT(PS_PARTIAL), 0);
        k_const(o, "rows", (double)M); k_const(o, "cols", (double)dl); k_const(o, "ldx", (double)dl);
        k_const(o, "ldstat", 1); k_const(o, "divisor", (double)d);
        k_const(o, "eps", m->norm_eps);
        for (int b = 1; b < nbuf; b++) {   /* ungrouped: every buffer carries the statistics */
            Op *c = k_begin(g, "copy");
            k_op(g, c, "src", ir_stat_vec(g, ar[0]), 0, 0);
            k_op(g, c, "dst", ir_stat_vec(g, ar[b]), OUT(PS_PARTIAL), 0);
            k_const(c, "rows", 1); k_const(c, "cols", (double)M);
            k_const(c, "lds", (double)M); k_const(c, "ldd", (double)M); k_const(c, "acc", 0);
        }
    } else {
        int ss = -1;   /* tp > 1: the row's sum of squares over the ranks' shards [M] */
        if (t > 1) {
            ss = ir_act(g, PS_PARTIAL, 1, M, IR_FP32, "L%d.%s_sumsq", i, gname);
            Op *o = k_begin(g, "sumsq");
            k_op(g, o, "x", opnd(x, 0, 0), 0, 0);
            k_op(g, o, "out", opnd(ss, 0, 0), OUT(PS_PARTIAL), 0);
            k_const(o, "rows", (double)M); k_const(o, "cols", (double)dl);
            k_const(o, "ldx", (double)dl);
            o->no_grad = 1;
            ir_allreduce(g, ss, normname);
        }
        int rs = ir_keep(g, ir_act(g, PS_SHARD1, 1, M, IR_FP32, "L%d.%s_rstd_n", i, gname));
        k_rmsnorm(g, x, opnd(gamma, 0, 0), xin, rs, ss, d);
    }
    /* A: [M, dl] @ [dl, r] -> partial */
    int64_t col = 0;
    if (grouped) {
        int w = factor_group(g, i, gname, projs[0], F_READS, dl, R);
        for (int j = 0; j < np; j++) {
            factor_part(g, w, i, projs[j], F_READS, 0, col);
            col += ranks[j];
        }
        ir_gemm(g, opnd(xin, 0, 0), opnd(w, 0, 0), opnd(ar[0], 0, R), M, R, dl);
    } else {
        for (int j = 0; j < np; j++) {
            int w = factor_param(g, i, projs[j], F_READS);
            ir_gemm(g, opnd(xin, 0, 0), opnd(w, 0, 0), opnd(ar[j], 0, ranks[j]), M, ranks[j], dl);
        }
    }
    for (int b = 0; b < nbuf; b++) {
        if (!online) continue;
        Opnd h = ir_stat_acts(g, ar[b]);
        Op *o = k_begin(g, "online_norm_rescale");
        k_op(g, o, "h", h, OUT(PS_PARTIAL), 0);
        k_op(g, o, "rho", opnd(rho, 0, 0), 0, 0);
        k_const(o, "rows", (double)M); k_const(o, "cols", (double)h.ld); k_const(o, "ldh", (double)h.ld);
    }
    for (int b = 0; b < nbuf; b++) {
        snprintf(nm, sizeof nm, "L%d.%s", i, grouped ? gname : proj_name(projs[b]));
        ir_allreduce(g, ar[b], nm);
    }
    /* after the all-reduce: the next chunk starts */
    ir_chunk(g, i, "L%d.%s_B", i, gname);
    int64_t zw = grouped ? R : 0;
    int y = -1, z = -1;
    if (grouped) {
        y = ir_act(g, PS_REPLICATED, M, R, ad, "L%d.%s_y", i, gname);
        z = ir_act(g, PS_REPLICATED, M, R, ad, "L%d.%s_z", i, gname);
    }
    col = 0;
    for (int b = 0; b < nbuf; b++) {
        int64_t w = grouped ? R : ranks[b];
        int yb = y, zb = z;
        if (!grouped) {
            yb = ir_act(g, PS_REPLICATED, M, w, ad, "L%d.%s_y", i, proj_name(projs[b]));
            zb = ir_act(g, PS_REPLICATED, M, w, ad, "L%d.%s_z", i, proj_name(projs[b]));
        }
        int rs = online ? ir_keep(g, ir_act(g, PS_REPLICATED, 1, M, IR_FP32, "L%d.%s_rstd", i, grouped ? gname : proj_name(projs[b]))) : -1;
        k_bottleneck(g, opnd(ar[b], 0, w), w, opnd(yb, 0, w), opnd(zb, 0, w), rs, rho,
                     m->proj[i][projs[b]].act, online);
        if (!grouped) {
            zout[b] = opnd(zb, 0, w);
            snprintf(nm, sizeof nm, "L%d.%s", i, proj_name(projs[b]));
            if (!has_core(g)) ir_tp_copy(g, zb, nm);   /* else the core's output feeds B */
        }
    }
    if (grouped) {
        for (int j = 0; j < np; j++) { zout[j] = opnd(z, col, zw); col += ranks[j]; }
        snprintf(nm, sizeof nm, "L%d.%s", i, gname);
        if (!has_core(g)) ir_tp_copy(g, z, nm);
    }
}

/* One projection with a single A (o or down): input shard [M, in_l] -> z replicated [M, r]. */
static Opnd btp_A1(Graph *g, int i, int xin, int p) {
    const Model *m = &g->run->model;
    int ad = ir_act_dtype(g);
    int64_t M = g->M, inl = g->t[xin].cols, rk = m->proj[i][p].rank;
    char nm[96];
    int w = factor_param(g, i, p, F_READS);
    int ar = ir_act(g, PS_PARTIAL, M, rk, ad, "L%d.%s_ar", i, proj_name(p));
    ir_gemm(g, opnd(xin, 0, 0), opnd(w, 0, 0), opnd(ar, 0, 0), M, rk, inl);
    snprintf(nm, sizeof nm, "L%d.%s", i, proj_name(p));
    ir_allreduce(g, ar, nm);
    ir_chunk(g, i, "L%d.%s_B", i, proj_name(p));
    int y = ir_act(g, PS_REPLICATED, M, rk, ad, "L%d.%s_y", i, proj_name(p));
    int z = ir_act(g, PS_REPLICATED, M, rk, ad, "L%d.%s_z", i, proj_name(p));
    k_bottleneck(g, opnd(ar, 0, 0), rk, opnd(y, 0, 0), opnd(z, 0, 0), -1, -1, m->proj[i][p].act, 0);
    if (!has_core(g)) ir_tp_copy(g, z, nm);
    return opnd(z, 0, rk);
}

/* The r x r cores of a row of three factors (btp): u_p = z_p @ S_p [r_p, r_p] on the replicated
 * latent (S whole on every rank: no collective), into one u [M, sum r_p]; z[] becomes u's views,
 * which feed the column-parallel B (tp_copy). A row without a core leaves z as it is. */
static void btp_core(Graph *g, int i, const int *projs, int np, Opnd *z, const char *gname) {
    if (!has_core(g)) return;
    const Model *m = &g->run->model;
    int64_t R = 0, col[4];
    for (int j = 0; j < np; j++) { col[j] = R; R += m->proj[i][projs[j]].rank; }
    int u = ir_act(g, PS_REPLICATED, g->M, R, ir_act_dtype(g), "L%d.%s_u", i, gname);
    for (int j = 0; j < np; j++) {
        int64_t r = m->proj[i][projs[j]].rank;
        int s = factor_param(g, i, projs[j], F_CORE);
        ir_gemm(g, z[j], opnd(s, 0, 0), opnd(u, col[j], R), g->M, r, r);
        z[j] = opnd(u, col[j], R);
    }
    char nm[96];
    snprintf(nm, sizeof nm, "L%d.%s", i, gname);
    ir_tp_copy(g, u, nm);
}

/* B side: z_p (replicated) @ B_p [r_p, dout_p/t] -> columns of out [M, sum dout_p/t]. */
static void btp_B(Graph *g, int i, const Opnd *zin, const int *projs, int np, int out, const char *gname) {
    const Model *m = &g->run->model;
    int t = g->tp;
    int64_t M = g->M, W = g->t[out].cols;
    int64_t rk[4], wl[4], col[4], c = 0;
    for (int j = 0; j < np; j++) {
        rk[j] = m->proj[i][projs[j]].rank; wl[j] = proj_out(m, projs[j]) / t; col[j] = c; c += wl[j];
    }
    int batchable = g->run->group_linears && np > 1;
    for (int j = 1; j < np; j++) if (rk[j] != rk[0] || wl[j] != wl[0] || zin[j].t != zin[0].t) batchable = 0;
    if (batchable) {
        int w = factor_group(g, i, gname, projs[0], f_writes(g), np * rk[0], wl[0]);
        for (int j = 0; j < np; j++) factor_part(g, w, i, projs[j], f_writes(g), j * rk[0], 0);
        ir_gemm_batched(g, zin[0], opnd(w, 0, 0), opnd(out, 0, W), M, wl[0], rk[0],
                     zin[1].off.base - zin[0].off.base, rk[0] * wl[0], wl[0], np);
        return;
    }
    Gemm mem[4];
    for (int j = 0; j < np; j++) {
        int w = factor_param(g, i, projs[j], f_writes(g));
        mem[j] = ir_gemm_member(zin[j], opnd(w, 0, 0), opnd(out, col[j], W), M, wl[j], rk[j]);
    }
    if (g->run->group_linears) ir_gemm_grouped(g, mem, np);
    else for (int j = 0; j < np; j++) ir_gemm(g, mem[j].A, mem[j].B, mem[j].C, mem[j].m, mem[j].n, mem[j].k);
}

static int btp_layer(Graph *g, int i, int x) {
    const Model *m = &g->run->model;
    const Run *r = g->run;
    int t = g->tp, ad = ir_act_dtype(g);
    int64_t M = g->M, dl = m->hidden / t, hd = m->head_dim;
    int64_t qw = m->heads / t * hd, kw = m->kv_heads / t * hd, W = qw + 2 * kw, fl = m->ffn / t;
    char cn[96];
    ir_chunk(g, i, "L%d.attn_A", i);
    const int qp[3] = {PROJ_Q, PROJ_K, PROJ_V};
    Opnd zq[3];
    snprintf(cn, sizeof cn, "L%d.attn_norm", i);
    btp_A(g, i, x, cn, qp, 3, "qkv", zq);
    btp_core(g, i, qp, 3, zq, "qkv");
    int qkv = ir_act(g, PS_SHARD1, M, W, ad, "L%d.qkv", i);
    btp_B(g, i, zq, qp, 3, qkv, "qkv");
    k_rope(g, opnd(qkv, 0, W), m->heads / t, PS_SHARD1);
    k_rope(g, opnd(qkv, qw, W), m->kv_heads / t, PS_SHARD1);
    int attn = ir_act(g, PS_SHARD1, M, qw, ad, "L%d.attn", i);
    int lse = ir_act(g, PS_SHARD1, 1, (int64_t)r->micro_batch * (m->heads / t) * r->seq, IR_FP32, "L%d.lse", i);
    k_attention(g, opnd(qkv, 0, W), opnd(qkv, qw, W), opnd(qkv, qw + kw, W), attn, lse, m->heads / t, m->kv_heads / t);
    const int op_[1] = {PROJ_O};
    Opnd zo = btp_A1(g, i, attn, PROJ_O);
    btp_core(g, i, op_, 1, &zo, "o");
    Opnd zob = zo;
    int64_t ro = m->proj[i][PROJ_O].rank;
    if (m->lax) {
        int zx = ir_act(g, PS_REPLICATED, M, ro, ad, "L%d.o_zx", i);
        k_add(g, zo, zq[2], opnd(zx, 0, ro), ro, PS_REPLICATED);
        zob = opnd(zx, 0, ro);
    }
    int oo = ir_act(g, PS_SHARD1, M, dl, ad, "L%d.o_out", i);
    btp_B(g, i, &zob, op_, 1, oo, "o");
    int h = ir_keep(g, ir_act(g, PS_SHARD1, M, dl, ad, "L%d.h", i));
    k_add(g, opnd(x, 0, 0), opnd(oo, 0, 0), opnd(h, 0, 0), dl, PS_SHARD1);
    if (m->moe_experts && m->moe_layer[i]) return moe_block(g, i, h);
    ir_chunk(g, i, "L%d.mlp_A", i);
    const int gp[2] = {PROJ_GATE, PROJ_UP};
    Opnd zg[2];
    snprintf(cn, sizeof cn, "L%d.mlp_norm", i);
    btp_A(g, i, h, cn, gp, 2, "gu", zg);
    btp_core(g, i, gp, 2, zg, "gu");
    Opnd zgb[2] = {zg[0], zg[1]};
    if (m->lax) {
        int64_t rg = m->proj[i][PROJ_GATE].rank, ru = m->proj[i][PROJ_UP].rank;
        int zx = ir_act(g, PS_REPLICATED, M, rg + ru, ad, "L%d.gu_zx", i);
        k_add(g, zg[0], zo, opnd(zx, 0, rg + ru), rg, PS_REPLICATED);
        k_add(g, zg[1], zo, opnd(zx, rg, rg + ru), ru, PS_REPLICATED);
        zgb[0] = opnd(zx, 0, rg + ru); zgb[1] = opnd(zx, rg, rg + ru);
    }
    int gu = ir_act(g, PS_SHARD1, M, 2 * fl, ad, "L%d.gu", i);
    btp_B(g, i, zgb, gp, 2, gu, "gu");
    int gl = ir_act(g, PS_SHARD1, M, fl, ad, "L%d.glu", i);
    k_glu(g, opnd(gu, 0, 2 * fl), opnd(gu, fl, 2 * fl), gl, fl, m->mlp_gate_act);
    const int dp_[1] = {PROJ_DOWN};
    Opnd zd = btp_A1(g, i, gl, PROJ_DOWN);
    btp_core(g, i, dp_, 1, &zd, "down");
    int64_t rd = m->proj[i][PROJ_DOWN].rank;
    if (m->lax) {
        int zx = ir_act(g, PS_REPLICATED, M, rd, ad, "L%d.down_zx", i);
        k_add(g, zd, zg[1], opnd(zx, 0, rd), rd, PS_REPLICATED);
        zd = opnd(zx, 0, rd);
    }
    int dn = ir_act(g, PS_SHARD1, M, dl, ad, "L%d.down_out", i);
    btp_B(g, i, &zd, dp_, 1, dn, "down");
    int xo = ir_keep(g, ir_act(g, PS_SHARD1, M, dl, ad, "L%d.x", i + 1));
    k_add(g, opnd(h, 0, 0), opnd(dn, 0, 0), opnd(xo, 0, 0), dl, PS_SHARD1);
    return xo;
}

int build_forward(Graph *g) {
    int rc = check_run(g);
    if (!rc) rc = moe_check(g);
    if (rc) return rc;
    const Model *m = &g->run->model;
    g->tokens = ir_tensor(g, "tokens", 1, g->M, IR_I32, TR_INPUT, PS_REPLICATED);
    g->targets = ir_tensor(g, "targets", 1, g->M, IR_I32, TR_INPUT, PS_REPLICATED);
    g->loss = ir_tensor(g, "loss", 1, 1, IR_FP32, TR_OUTPUT, PS_REPLICATED);
    add_canons(g);
    int x = build_embed(g);
    if (x < 0) return ir_error(g, "internal: no embedding output");
    for (int i = 0; i < m->layers; i++) {
        if (g->layout == LAYOUT_BTP) x = btp_layer(g, i, x);
        else if (g->layout == LAYOUT_NAIVE) x = naive_layer(g, i, x);
        else x = megatron_layer(g, i, x);
    }
    build_tail(g, x);
    moe_tail(g);
    return 0;
}

/* ---- the static parallel-state check ---- */

static const char *ps_name(int s) {
    switch (s) {
    case PS_REPLICATED: return "replicated";
    case PS_SHARD0: return "shard(0)";
    case PS_SHARD1: return "shard(1)";
    case PS_PARTIAL: return "partial";
    }
    return "unwritten";
}

static int compose(int a, int b) {
    if (a == PS_REPLICATED && b == PS_REPLICATED) return PS_REPLICATED;
    if (a == PS_REPLICATED && b == PS_SHARD1) return PS_SHARD1;   /* column-parallel */
    if (a == PS_SHARD1 && b == PS_SHARD0) return PS_PARTIAL;      /* row-parallel */
    return -1;
}

int check_states(Graph *g) {
    int *st = ir_alloc(g, (size_t)g->nt * sizeof *st);
    for (int i = 0; i < g->nt; i++)
        st[i] = (g->t[i].role == TR_PARAM || g->t[i].role == TR_INPUT) ? g->t[i].state : -1;
    int rc = 0;
    for (int n = 0; n < g->nfwd && !rc; n++) {
        Op *o = &g->fwd[n];
        if (ir_coll_kind(o) >= 0 && o->group != CG_TP) {
            /* over dp, ep or edp (the all-to-all moves whole slot rows): the tp state travels along */
            int rd[3], wr[2], nr, nw;
            ir_coll_rw(o, rd, &nr, wr, &nw);
            for (int j = 0; j < nr && !rc; j++)
                if (st[rd[j]] < 0)
                    rc = ir_error(g, "state check (%s): %s of %s, which was never written", o->chunk,
                                  ccat_word(ir_coll_kind(o)), g->t[rd[j]].name);
            for (int j = 0; j < nw && !rc; j++) st[wr[j]] = st[rd[0]];
            continue;
        }
        switch (o->kind) {
        case OP_GEMM: case OP_BATCHED_GEMM: case OP_GROUPED_GEMM: {
            int nm = o->kind == OP_GROUPED_GEMM ? o->nmembers : 1;
            for (int j = 0; j < nm && !rc; j++) {
                Gemm *x = o->kind == OP_GROUPED_GEMM ? &o->members[j] : &o->g;
                int a = st[x->A.t], b = st[x->B.t];
                if (a < 0 || b < 0) {
                    rc = ir_error(g, "state check (%s): gemm reads %s before it is written", o->chunk, g->t[a < 0 ? x->A.t : x->B.t].name);
                    break;
                }
                int c = compose(a, b);
                if (a == PS_PARTIAL || b == PS_PARTIAL)
                    rc = ir_error(g, "state check (%s): gemm consumes the partial sum %s; it needs an all-reduce first",
                              o->chunk, g->t[a == PS_PARTIAL ? x->A.t : x->B.t].name);
                else if (c < 0)
                    rc = ir_error(g, "state check (%s): gemm %s (%s) @ %s (%s): these states do not compose",
                              o->chunk, g->t[x->A.t].name, ps_name(a), g->t[x->B.t].name, ps_name(b));
                else st[x->C.t] = c;
            }
            break;
        }
        case OP_KERNEL:
            for (int j = 0; j < o->nops && !rc; j++) {
                if (o->ostate[j]) continue;
                int s = st[o->ops[j].t];
                if (s < 0) rc = ir_error(g, "state check (%s): %s reads %s before it is written", o->chunk, o->k.kind, g->t[o->ops[j].t].name);
                else if (s == PS_PARTIAL && !(!strcmp(o->k.kind, "copy") && o->ostate[1] == OUT(PS_PARTIAL)))
                    rc = ir_error(g, "state check (%s): %s consumes the partial sum %s as %s; it needs full values "
                              "(all-reduce it first)", o->chunk, o->k.kind, g->t[o->ops[j].t].name, o->opkey[j]);
            }
            for (int j = 0; j < o->nops && !rc; j++) {
                if (!o->ostate[j]) continue;
                int want = o->ostate[j] - 1;
                if (!strcmp(o->k.kind, "online_norm_rescale") && !strcmp(o->opkey[j], "h")) {
                    if (st[o->ops[j].t] != PS_PARTIAL)
                        rc = ir_error(g, "state check (%s): online_norm_rescale expects the partial GEMM output, %s is %s",
                                  o->chunk, g->t[o->ops[j].t].name, ps_name(st[o->ops[j].t]));
                    continue;
                }
                if (o->ops[j].off.base || o->ops[j].off.per_rank) {
                    /* a column slice: the tensor keeps one state, all slices must agree */
                    int s = st[o->ops[j].t];
                    if (s >= 0 && s != want)
                        rc = ir_error(g, "state check (%s): %s writes a %s slice into %s, which is %s",
                                  o->chunk, o->k.kind, ps_name(want), g->t[o->ops[j].t].name, ps_name(s));
                }
                st[o->ops[j].t] = want;
            }
            break;
        case OP_ALLREDUCE:
            if (st[o->buf.t] != PS_PARTIAL)
                rc = ir_error(g, "state check (%s): allreduce of %s, which is %s (only a partial sum is all-reduced)",
                          o->chunk, g->t[o->buf.t].name, ps_name(st[o->buf.t]));
            else if (!(o->buf.off.base == 0 && o->elems == g->t[o->buf.t].rows * g->t[o->buf.t].cols)) {
                /* one contiguous block of a stacked tensor: the tensor is replicated once every block is */
                int last = 1;
                for (int k = n + 1; k < g->nfwd; k++)
                    if (g->fwd[k].kind == OP_ALLREDUCE && g->fwd[k].buf.t == o->buf.t) last = 0;
                if (last) st[o->buf.t] = PS_REPLICATED;
            } else st[o->buf.t] = PS_REPLICATED;
            break;
        case OP_ALLGATHER:
            if (st[o->src.t] != PS_SHARD1)
                rc = ir_error(g, "state check (%s): allgather of %s, which is %s (it gathers column shards)",
                          o->chunk, g->t[o->src.t].name, ps_name(st[o->src.t]));
            else st[o->dst.t] = PS_REPLICATED;
            break;
        case OP_TP_COPY:
            if (st[o->marker_tensor] != PS_REPLICATED)
                rc = ir_error(g, "state check (%s): %s feeds a column-parallel op but is %s (it must be replicated)",
                          o->chunk, g->t[o->marker_tensor].name, ps_name(st[o->marker_tensor]));
            break;
        }
    }
    free(st);
    return rc;
}
