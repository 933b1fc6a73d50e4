/* backward.c: the backward section, generated from the forward tape in reverse. Every forward op
 * kind has a rule that emits explicit steps (GEMMs, *_bwd kernels, the collectives that are the
 * duals of the forward ones). Parameter gradients always accumulate (the runtime zeroes them per
 * optimizer step); an activation gradient is written by its first contribution and accumulated by
 * the later ones (tracked per rectangle). With checkpoint=lowrank, the forward values a chunk's
 * rules read are recomputed from the saved tensors just before the chunk's backward. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/ir.h"
#include "gen/backward.h"
#include "common/kernel_catalog.h"

enum { W_NONE, W_FULL, W_MIXED };

typedef struct {
    Graph *g;
    int *fmap;             /* forward tensor -> tensor holding its value now (itself or rc.*) */
    int cur;               /* forward op whose rule is running */
    int rc_failed;
} Bw;

static int bfail(Bw *b, const char *fmt, const char *a, const char *c) {
    snprintf(b->g->err, sizeof b->g->err, fmt, a, c);
    b->rc_failed = 1;
    return 1;
}

static Op *bop(Bw *b, int kind) {
    Graph *g = b->g;
    Op *src = &g->fwd[b->cur];
    Op *o = ir_push(g, &g->steps, &g->nsteps, &g->caps);
    o->kind = kind;
    o->section = SEC_BWD;
    o->layer = src->layer;
    snprintf(o->chunk, sizeof o->chunk, "%s", src->chunk);
    return o;
}

/* A backward kernel step of catalog kind id (common/kernel_catalog.h). */
static Op *bk(Bw *b, int id) {
    Op *o = bop(b, OP_KERNEL);
    snprintf(o->k.kind, sizeof o->k.kind, "%s", kcat_name(id));
    return o;
}

static int gtensor(Graph *g, int t) {
    if (g->t[t].grad >= 0) return g->t[t].grad;
    char nm[110];
    snprintf(nm, sizeof nm, "d.%s", g->t[t].name);
    int role = g->t[t].role == TR_PARAM ? TR_PARAM_GRAD : TR_GRAD;
    int dt = role == TR_PARAM_GRAD ? IR_FP32 : g->t[t].dtype;
    int gt = ir_tensor(g, nm, g->t[t].rows, g->t[t].cols, dt, role, g->t[t].state);
    g->t[t].grad = gt;
    return gt;
}

static int statgrad(Graph *g, int t) {
    if (g->t[t].stat_grad >= 0) return g->t[t].stat_grad;
    char nm[110];
    snprintf(nm, sizeof nm, "d.%s_stat", g->t[t].name);
    int gt = ir_tensor(g, nm, 1, g->t[t].rows, IR_FP32, TR_GRAD, PS_REPLICATED);
    g->t[t].stat_grad = gt;
    return gt;
}

/* The gradient view of a forward view covering `rows x cols`, and its rectangle in the gradient. */
typedef struct { Opnd v; int64_t r0, nr, c0, nc; } GView;

static GView gview(Graph *g, Opnd f, int64_t rows, int64_t cols) {
    GView r;
    int64_t tcols = g->t[f.t].cols;
    if (ir_is_stat_view(g, f)) {   /* the online-norm statistics of an all-reduce buffer */
        int sg = statgrad(g, f.t);
        r.v = opnd(sg, 0, g->t[sg].cols);
        r.r0 = 0; r.nr = 1; r.c0 = 0; r.nc = g->t[sg].cols;
        return r;
    }
    int gt = gtensor(g, f.t);
    r.v = opnd_r(gt, f.off, f.ld ? f.ld : tcols);
    r.r0 = f.off.base / tcols; r.c0 = f.off.base % tcols; r.nr = rows; r.nc = cols;
    return r;
}

static int wstatus(const Tensor *t, const GView *v) {
    int64_t area = 0;
    for (int i = 0; i < t->nwritten; i++) {
        const int64_t *w = t->written[i];
        int64_t r0 = v->r0 > w[0] ? v->r0 : w[0], r1 = (v->r0 + v->nr) < (w[0] + w[1]) ? v->r0 + v->nr : w[0] + w[1];
        int64_t c0 = v->c0 > w[2] ? v->c0 : w[2], c1 = (v->c0 + v->nc) < (w[2] + w[3]) ? v->c0 + v->nc : w[2] + w[3];
        if (r1 > r0 && c1 > c0) area += (r1 - r0) * (c1 - c0);
    }
    if (area == 0) return W_NONE;
    return area == v->nr * v->nc ? W_FULL : W_MIXED;
}

static void wmark(Graph *g, const GView *v) {
    Tensor *t = &g->t[v->v.t];
    if (t->role == TR_PARAM_GRAD) return;
    if (wstatus(t, v) != W_NONE) return;
    void *grown = realloc(t->written, (size_t)(t->nwritten + 1) * sizeof *t->written);
    if (!grown) ir_fail(g, "out of memory (written rectangles of %s)", t->name);
    t->written = grown;
    t->written[t->nwritten][0] = v->r0; t->written[t->nwritten][1] = v->nr;
    t->written[t->nwritten][2] = v->c0; t->written[t->nwritten][3] = v->nc;
    t->nwritten++;
}

/* Status of a gradient view about to be written: 0 write, 1 accumulate; -1 error (mixed). */
static int wacc(Bw *b, const GView *v) {
    const Tensor *t = &b->g->t[v->v.t];
    if (t->role == TR_PARAM_GRAD) return 1;
    int s = wstatus(t, v);
    if (s == W_MIXED) { bfail(b, "backward: %s is partly written when %s accumulates into it", t->name, b->g->fwd[b->cur].chunk); return -1; }
    return s == W_FULL;
}

/* A gradient that must hold its full value before it is read. */
static int need_full(Bw *b, const GView *v) {
    const Tensor *t = &b->g->t[v->v.t];
    if (wstatus(t, v) != W_FULL)
        return bfail(b, "backward: the gradient %s is read before it is complete (%s)", t->name, b->g->fwd[b->cur].chunk);
    return 0;
}

static Opnd FV(Bw *b, Opnd o) { o.t = b->fmap[o.t]; return o; }

/* Add an operand to a backward kernel op; a full op is marked and graph_build fails naming it. */
static void kop(Op *o, const char *key, Opnd v) {
    if (o->nops >= OP_MAX_OPND) { o->overflow |= OP_OVF_OPERANDS; return; }
    snprintf(o->opkey[o->nops], sizeof o->opkey[0], "%s", key);
    o->ops[o->nops++] = v;
}

static double kconst(const Op *o, const char *key) {
    for (int i = 0; i < o->k.nconst; i++) if (!strcmp(o->k.key[i], key)) return o->k.val[i];
    return 0;
}

static int opi(const Op *o, const char *key) {
    for (int i = 0; i < o->nops; i++) if (!strcmp(o->opkey[i], key)) return i;
    return -1;
}

/* ---- gemm rules: C = A @ B  =>  dA (+)= dC @ B^T, dB += A^T @ dC ---- */

static void gemm_bwd_members(Bw *b, const Gemm *mem, int n) {
    Graph *g = b->g;
    Gemm *da = malloc((size_t)n * sizeof *da), *db = malloc((size_t)n * sizeof *db);   /* MoE: n = experts */
    int nda = 0, ndb = 0;
    if (!da || !db) { free(da); free(db); ir_fail(g, "out of memory (%d gemm members)", n); }
    for (int j = 0; j < n; j++) {
        const Gemm *x = &mem[j];
        GView dc = gview(g, x->C, x->m, x->n);
        if (need_full(b, &dc)) { free(da); free(db); return; }
        int arole = g->t[x->A.t].role;
        if (arole == TR_ACT) {
            GView dav = gview(g, x->A, x->m, x->k);
            int acc = wacc(b, &dav);
            if (acc < 0) { free(da); free(db); return; }
            Gemm d; memset(&d, 0, sizeof d);
            d.ta = 0; d.tb = 1; d.m = x->m; d.n = x->k; d.k = x->n;
            d.A = dc.v; d.B = x->B; d.C = dav.v; d.batch = 1; d.alpha = 1; d.beta = acc;
            da[nda++] = d;
        }
        if (g->t[x->B.t].role == TR_PARAM) {
            GView dbv = gview(g, x->B, x->k, x->n);
            Gemm d; memset(&d, 0, sizeof d);
            d.ta = 1; d.tb = 0; d.m = x->k; d.n = x->n; d.k = x->m;
            d.A = FV(b, x->A); d.B = dc.v; d.C = dbv.v; d.batch = 1; d.alpha = 1; d.beta = 1;
            db[ndb++] = d;
        }
    }
    /* activation grads first (written), then the parameter grads (accumulated) */
    for (int pass = 0; pass < 2; pass++) {
        Gemm *arr = pass ? db : da;
        int cnt = pass ? ndb : nda;
        if (!cnt) continue;
        if (cnt == 1) {
            Op *o = bop(b, OP_GEMM);
            o->g = arr[0];
        } else {
            Op *o = bop(b, OP_GROUPED_GEMM);
            o->members = ir_alloc(g, (size_t)cnt * sizeof *o->members);
            memcpy(o->members, arr, (size_t)cnt * sizeof *arr);
            o->nmembers = cnt;
        }
        if (!pass) for (int j = 0; j < n; j++)
            if (g->t[mem[j].A.t].role == TR_ACT) { GView v = gview(g, mem[j].A, mem[j].m, mem[j].k); wmark(g, &v); }
    }
    free(da); free(db);
}

static void rule_gemm(Bw *b, const Op *f) {
    Graph *g = b->g;
    if (f->kind == OP_GROUPED_GEMM) { gemm_bwd_members(b, f->members, f->nmembers); return; }
    const Gemm *x = &f->g;
    if (x->batch <= 1) { gemm_bwd_members(b, x, 1); return; }
    /* batched: one batched step per direction when every batch member has the same write status */
    int n = (int)x->batch;
    Gemm *mem = malloc((size_t)n * sizeof *mem);   /* MoE experts: any batch */
    if (!mem) ir_fail(g, "out of memory (%d gemm members)", n);
    for (int j = 0; j < n; j++) {
        mem[j] = *x; mem[j].batch = 1;
        mem[j].A.off.base += j * x->sA; mem[j].B.off.base += j * x->sB; mem[j].C.off.base += j * x->sC;
    }
    int same = 1, s0 = -1;
    if (g->t[x->A.t].role == TR_ACT)
        for (int j = 0; j < n; j++) {
            GView v = gview(g, mem[j].A, x->m, x->k);
            int s = wstatus(&g->t[v.v.t], &v);
            if (j == 0) s0 = s; else if (s != s0) same = 0;
            if (s == W_MIXED) same = 0;
        }
    if (!same) { gemm_bwd_members(b, mem, n); free(mem); return; }
    GView dc = gview(g, x->C, x->m, x->n);
    for (int j = 0; j < n; j++) { GView v = gview(g, mem[j].C, x->m, x->n); if (need_full(b, &v)) { free(mem); return; } }
    if (g->t[x->A.t].role == TR_ACT) {
        GView da = gview(g, x->A, x->m, x->k);
        Op *o = bop(b, OP_BATCHED_GEMM);
        o->g.ta = 0; o->g.tb = 1; o->g.m = x->m; o->g.n = x->k; o->g.k = x->n;
        o->g.A = dc.v; o->g.sA = x->sC; o->g.B = x->B; o->g.sB = x->sB; o->g.C = da.v; o->g.sC = x->sA;
        o->g.batch = n; o->g.alpha = 1; o->g.beta = s0 == W_FULL;
        for (int j = 0; j < n; j++) { GView v = gview(g, mem[j].A, x->m, x->k); wmark(g, &v); }
    }
    free(mem);
    if (g->t[x->B.t].role == TR_PARAM) {
        GView db = gview(g, x->B, x->k, x->n);
        Op *o = bop(b, OP_BATCHED_GEMM);
        o->g.ta = 1; o->g.tb = 0; o->g.m = x->k; o->g.n = x->n; o->g.k = x->m;
        o->g.A = FV(b, x->A); o->g.sA = x->sA; o->g.B = dc.v; o->g.sB = x->sC; o->g.C = db.v; o->g.sC = x->sB;
        o->g.batch = n; o->g.alpha = 1; o->g.beta = 1;
    }
}

/* ---- MoE rules (the kernels' math: docs/plan-format.md, moe_*) ---- */

static void copy_consts(Op *o, const Op *f, const char *keys) {
    char buf[200];
    snprintf(buf, sizeof buf, "%s", keys);
    char *save = NULL;
    for (char *s = strtok_r(buf, " ", &save); s; s = strtok_r(NULL, " ", &save))
        for (int i = 0; i < f->k.nconst; i++) if (!strcmp(f->k.key[i], s)) k_const(o, s, f->k.val[i]);
}

/* The moe_router op on the forward tape whose operand `key` is tensor t. */
static const Op *moe_router_of(const Graph *g, const char *key, int t) {
    for (int i = 0; i < g->nfwd; i++) {
        const Op *o = &g->fwd[i];
        if (o->kind == OP_KERNEL && kcat_find(o->k.kind) == KK_MOE_ROUTER && opi(o, key) >= 0 &&
            o->ops[opi(o, key)].t == t)
            return o;
    }
    return NULL;
}

#define OPV(key) f->ops[opi(f, key)]

/* moe_combine -> moe_combine_bwd and moe_gates_bwd */
static void rule_moe_combine(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t rows = (int64_t)kconst(f, "rows"), cols = (int64_t)kconst(f, "cols");
    int64_t K = (int64_t)kconst(f, "top_k");
    /* out[m] = sum_k gate[m,k] eo[slot(m,k)]: d eo (slot rows, written whole) and d gates (a
       partial sum over the rank's columns, all-reduced; whole when out is replicated) */
    int64_t E = (int64_t)kconst(f, "experts"), cap = (int64_t)kconst(f, "capacity");
    GView dout = gview(g, OPV("out"), rows, cols);
    GView deo = gview(g, OPV("eo"), E * cap, cols), dg = gview(g, OPV("gates"), rows, K);
    if (need_full(b, &dout)) return;
    if (wacc(b, &deo) || wacc(b, &dg)) {
        if (!b->rc_failed)
            bfail(b, "backward: moe_combine_bwd overwrites %s, which already holds a gradient%s",
                  g->t[deo.v.t].name, "");
        return;
    }
    const Op *router = moe_router_of(g, "sel", OPV("sel").t);
    if (!router) { bfail(b, "backward: internal: no router for %s%s", f->chunk, ""); return; }
    int src = router->ops[opi(router, "src")].t;
    Op *o = bk(b, KK_MOE_COMBINE_BWD);
    kop(o, "dout", dout.v);
    kop(o, "src", FV(b, opnd(src, 0, 0)));
    kop(o, "gates", FV(b, OPV("gates")));
    kop(o, "deo", deo.v);
    k_const(o, "rows", (double)(E * cap));
    k_const(o, "cols", (double)cols);
    k_const(o, "top_k", (double)K);
    k_const(o, "tokens", (double)rows);
    k_const(o, "ldo", (double)dout.v.ld);
    k_const(o, "ldde", (double)deo.v.ld);
    o = bk(b, KK_MOE_GATES_BWD);
    kop(o, "dout", dout.v); kop(o, "eo", FV(b, OPV("eo"))); kop(o, "sel", FV(b, OPV("sel")));
    kop(o, "slot", FV(b, OPV("slot"))); kop(o, "dgates", dg.v);
    k_const(o, "rows", (double)rows);
    k_const(o, "cols", (double)cols);
    k_const(o, "top_k", (double)K);
    k_const(o, "experts", (double)E); k_const(o, "capacity", (double)cap);
    k_const(o, "ldo", (double)dout.v.ld); k_const(o, "lde", kconst(f, "lde"));
    if (g->t[OPV("out").t].state == PS_REPLICATED) { /* rank-space combine (shared down B): whole */
        wmark(g, &deo); wmark(g, &dg);
        return;
    }
    Op *a = bop(b, OP_ALLREDUCE);
    a->buf = dg.v; a->elems = rows * K; a->dtype = g->t[dg.v.t].dtype; a->dir = 1;
    a->reduce = RED_SUM;
    a->bytes = a->elems * (int64_t)ir_dtype_size(a->dtype);
    snprintf(a->tag, sizeof a->tag, "L%d.moe_gates", f->layer);
    a->dual = "identity";
    wmark(g, &deo); wmark(g, &dg);
}

/* moe_dispatch -> moe_dispatch_bwd */
static void rule_moe_dispatch(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t rows = (int64_t)kconst(f, "rows"), cols = (int64_t)kconst(f, "cols");
    int64_t K = (int64_t)kconst(f, "top_k");
    /* out[slot r] = x[token of r]: each token gathers its slots' gradients */
    int64_t M = (int64_t)kconst(f, "tokens");
    GView dout = gview(g, OPV("out"), rows, cols), dx = gview(g, OPV("x"), M, cols);
    if (need_full(b, &dout)) return;
    int acc = wacc(b, &dx);
    if (acc < 0) return;
    const Op *router = moe_router_of(g, "src", OPV("src").t);
    if (!router) { bfail(b, "backward: internal: no router for %s%s", f->chunk, ""); return; }
    int sel = router->ops[opi(router, "sel")].t, slot = router->ops[opi(router, "slot")].t;
    int64_t E = (int64_t)kconst(router, "experts"), cap = (int64_t)kconst(router, "capacity");
    Op *o = bk(b, KK_MOE_DISPATCH_BWD);
    kop(o, "dout", dout.v);
    kop(o, "sel", FV(b, opnd(sel, 0, 0)));
    kop(o, "slot", FV(b, opnd(slot, 0, 0)));
    kop(o, "dx", dx.v);
    k_const(o, "rows", (double)M); k_const(o, "cols", (double)cols); k_const(o, "top_k", (double)K);
    k_const(o, "experts", (double)E); k_const(o, "capacity", (double)cap);
    k_const(o, "ldo", (double)dout.v.ld);
    k_const(o, "lddx", (double)dx.v.ld);
    k_const(o, "acc", acc);
    wmark(g, &dx);
}

/* moe_router -> moe_router_bwd */
static void rule_moe_router(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t rows = (int64_t)kconst(f, "rows"), K = (int64_t)kconst(f, "top_k");
    int64_t E = (int64_t)kconst(f, "experts");
    GView dg = gview(g, OPV("gates"), rows, K), dl = gview(g, OPV("logits"), rows, E);
    if (need_full(b, &dg)) return;
    int acc = wacc(b, &dl);
    if (acc < 0) return;
    Op *o = bk(b, KK_MOE_ROUTER_BWD);
    kop(o, "probs", FV(b, OPV("probs")));
    kop(o, "sel", FV(b, OPV("sel")));
    kop(o, "gates", FV(b, OPV("gates")));
    kop(o, "aux", FV(b, OPV("aux"))); kop(o, "dgates", dg.v); kop(o, "dlogits", dl.v);
    copy_consts(o, f, "rows experts top_k norm coef zcoef");
    k_const(o, "scale", 1.0 / (g->run->grad_accum > 0 ? g->run->grad_accum : 1));
    k_const(o, "acc", acc); k_const(o, "lddl", (double)dl.v.ld);
    wmark(g, &dl);
}
#undef OPV

/* ---- kernel rules ---- */

#define OPV(key) f->ops[opi(f, key)]

/* embedding_fwd -> embedding_bwd: the gradient rows scatter-added into the table's */
static void rule_embedding(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t M = g->M;
    GView dout = gview(g, OPV("out"), M, (int64_t)kconst(f, "cols"));
    if (need_full(b, &dout)) return;
    Op *o = bk(b, KK_EMBEDDING_BWD);
    kop(o, "tokens", OPV("tokens")); kop(o, "dout", dout.v);
    kop(o, "dtable", gview(g, OPV("table"), 1, 1).v);
    k_const(o, "rows", kconst(f, "rows")); k_const(o, "cols", kconst(f, "cols")); k_const(o, "vocab", kconst(f, "vocab"));
}

/* rmsnorm_fwd -> rmsnorm_bwd; with a sharded sum of squares, phases 1 and 2 around an
 * all-reduce of the per-row dot */
static void rule_rmsnorm(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t M = g->M;
    int64_t cols = (int64_t)kconst(f, "cols");
    Opnd x = OPV("x");
    GView dout = gview(g, OPV("out"), M, cols), dx = gview(g, x, M, cols);
    if (need_full(b, &dout)) return;
    int acc = wacc(b, &dx);
    if (acc < 0) return;
    Opnd dgamma = gview(g, OPV("gamma"), 1, cols).v;
    int sync = opi(f, "sumsq") >= 0;
    int dot = -1;
    if (sync) {
        char nm[110];
        snprintf(nm, sizeof nm, "%s_dot", g->t[x.t].name);
        dot = ir_tensor(g, nm, 1, M, IR_FP32, TR_GRAD, PS_PARTIAL);
    }
    for (int phase = sync ? 1 : 0; phase <= (sync ? 2 : 0); phase++) {
        Op *o = bk(b, KK_RMSNORM_BWD);
        kop(o, "x", FV(b, x)); kop(o, "gamma", OPV("gamma")); kop(o, "rstd", FV(b, OPV("rstd")));
        kop(o, "dout", dout.v);
        if (sync) kop(o, "dot", opnd(dot, 0, M));
        if (phase != 1) { kop(o, "dx", dx.v); kop(o, "dgamma", dgamma); }
        k_const(o, "rows", (double)M); k_const(o, "cols", (double)cols);
        k_const(o, "ldx", kconst(f, "ldx")); k_const(o, "ldo", kconst(f, "ldo"));
        k_const(o, "divisor", kconst(f, "divisor")); k_const(o, "acc", acc); k_const(o, "phase", phase);
        if (phase == 1) {
            Op *a = bop(b, OP_ALLREDUCE);
            a->buf = opnd(dot, 0, M); a->elems = M; a->dtype = IR_FP32; a->dir = 1;
            a->reduce = RED_SUM;
            a->bytes = M * 4;
            snprintf(a->tag, sizeof a->tag, "%s", g->params[g->t[OPV("gamma").t].param].name);
            a->dual = "allreduce";
        }
    }
    wmark(g, &dx);
}

/* online_norm_fwd -> online_norm_bwd (gradients of xhat and of the statistics) */
static void rule_online_norm(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t M = g->M;
    int64_t cols = (int64_t)kconst(f, "cols");
    Opnd x = OPV("x");
    GView dxhat = gview(g, OPV("xhat"), M, cols), dx = gview(g, x, M, cols);
    GView dstat = gview(g, OPV("stat"), M, 1);
    if (need_full(b, &dxhat) || need_full(b, &dstat)) return;
    int acc = wacc(b, &dx);
    if (acc < 0) return;
    Op *o = bk(b, KK_ONLINE_NORM_BWD);
    kop(o, "x", FV(b, x)); kop(o, "gamma", OPV("gamma")); kop(o, "rho", FV(b, OPV("rho")));
    kop(o, "dxhat", dxhat.v); kop(o, "dstat", dstat.v); kop(o, "dx", dx.v);
    kop(o, "dgamma", gview(g, OPV("gamma"), 1, cols).v);
    k_const(o, "rows", (double)M); k_const(o, "cols", (double)cols); k_const(o, "ldx", kconst(f, "ldx"));
    k_const(o, "acc", acc);
    wmark(g, &dx);
}

/* bottleneck_act -> bottleneck_act_bwd (norm: also the rho it undoes and the statistics) */
static void rule_bottleneck_act(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t cols = (int64_t)kconst(f, "cols");
    int64_t M = (int64_t)kconst(f, "rows");   /* g->M, or the E*C slot rows of an MoE expert */
    int norm = (int)kconst(f, "norm");
    Opnd h = OPV("h");
    GView dz = gview(g, OPV("z"), M, cols), dh = gview(g, h, M, cols);
    if (need_full(b, &dz)) return;
    int acc = wacc(b, &dh);
    if (acc < 0) return;
    Op *o = bk(b, KK_BOTTLENECK_ACT_BWD);
    kop(o, "h", FV(b, h)); kop(o, "y", FV(b, OPV("y")));
    GView ds;
    if (norm) {
        if (acc) { bfail(b, "backward: %s receives a second gradient%s", g->t[dh.v.t].name, ""); return; }
        kop(o, "rstd", FV(b, OPV("rstd"))); kop(o, "rho", FV(b, opnd(f->aux, 0, M)));
    }
    kop(o, "dz", dz.v); kop(o, "dh", dh.v);
    if (norm) {
        ds = gview(g, OPV("stat"), M, 1);
        kop(o, "dstat", ds.v);
    }
    k_const(o, "rows", (double)M); k_const(o, "cols", (double)cols);
    k_const(o, "ldh", kconst(f, "ldh")); k_const(o, "ldy", kconst(f, "ldy")); k_const(o, "ldz", kconst(f, "ldz"));
    k_const(o, "lddh", (double)dh.v.ld); k_const(o, "act", kconst(f, "act")); k_const(o, "norm", norm);
    k_const(o, "divisor", (double)g->run->model.hidden); k_const(o, "acc", acc);
    wmark(g, &dh);
    if (norm) wmark(g, &ds);
}

/* rope -> rope with inverse = 1, in place on the gradient */
static void rule_rope(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t M = g->M;
    int64_t cols = (int64_t)(kconst(f, "heads") * kconst(f, "head_dim"));
    GView dx = gview(g, OPV("x"), M, cols);
    if (need_full(b, &dx)) return;
    Op *o = bk(b, KK_ROPE);
    kop(o, "x", dx.v);
    for (int i = 0; i < f->k.nconst; i++) k_const(o, f->k.key[i], strcmp(f->k.key[i], "inverse") ? f->k.val[i] : 1);
}

/* attention_fwd -> attention_bwd (dq, dk, dv are written, never accumulated) */
static void rule_attention(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t M = g->M;
    int64_t hl = (int64_t)kconst(f, "heads"), kvl = (int64_t)kconst(f, "kv_heads"), hd = (int64_t)kconst(f, "head_dim");
    GView dout = gview(g, OPV("out"), M, hl * hd);
    GView dq = gview(g, OPV("q"), M, hl * hd), dk = gview(g, OPV("k"), M, kvl * hd), dv = gview(g, OPV("v"), M, kvl * hd);
    if (need_full(b, &dout)) return;
    if (wacc(b, &dq) || wacc(b, &dk) || wacc(b, &dv)) {
        if (!b->rc_failed) bfail(b, "backward: attention_bwd overwrites %s, which already holds a gradient%s", g->t[dq.v.t].name, "");
        return;
    }
    Op *o = bk(b, KK_ATTENTION_BWD);
    kop(o, "q", FV(b, OPV("q"))); kop(o, "k", FV(b, OPV("k"))); kop(o, "v", FV(b, OPV("v")));
    kop(o, "out", FV(b, OPV("out"))); kop(o, "dout", dout.v); kop(o, "lse", FV(b, OPV("lse")));
    kop(o, "dq", dq.v); kop(o, "dk", dk.v); kop(o, "dv", dv.v);
    for (int i = 0; i < f->k.nconst; i++) k_const(o, f->k.key[i], f->k.val[i]);
    wmark(g, &dq); wmark(g, &dk); wmark(g, &dv);
}

/* glu_fwd -> glu_bwd (dgate, dup are written, never accumulated) */
static void rule_glu(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t cols = (int64_t)kconst(f, "cols");
    int64_t M = (int64_t)kconst(f, "rows");   /* g->M, or the E*C slot rows of an MoE expert */
    GView dout = gview(g, OPV("out"), M, cols), dg = gview(g, OPV("gate"), M, cols), du = gview(g, OPV("up"), M, cols);
    if (need_full(b, &dout)) return;
    if (wacc(b, &dg) || wacc(b, &du)) {
        if (!b->rc_failed) bfail(b, "backward: glu_bwd overwrites %s, which already holds a gradient%s", g->t[dg.v.t].name, "");
        return;
    }
    Op *o = bk(b, KK_GLU_BWD);
    kop(o, "gate", FV(b, OPV("gate"))); kop(o, "up", FV(b, OPV("up"))); kop(o, "dout", dout.v);
    kop(o, "dgate", dg.v); kop(o, "dup", du.v);
    k_const(o, "rows", (double)M); k_const(o, "cols", (double)cols);
    k_const(o, "ldg", kconst(f, "ldg")); k_const(o, "ldu", kconst(f, "ldu")); k_const(o, "ldo", kconst(f, "ldo"));
    k_const(o, "lddg", (double)dg.v.ld); k_const(o, "lddu", (double)du.v.ld); k_const(o, "act", kconst(f, "act"));
    wmark(g, &dg); wmark(g, &du);
}

/* An add's input b, whose gradient would share the buffer a's already shares: allowed only if
 * nothing accumulates into a's gradient before b's producer has read it, i.e. every other reader
 * of a (forward tape before the add) comes before b's first writer. */
static int b_may_share(const Bw *b, int bt, int at) {
    const Graph *g = b->g;
    int pb = -1;
    for (int k = 0; k < b->cur && pb < 0; k++) {
        const Op *w = &g->fwd[k];
        if (w->kind == OP_KERNEL) { for (int q = 0; q < w->nops; q++) if ((w->out_mask >> q & 1) && w->ops[q].t == bt) pb = k; }
        else if (w->kind == OP_GEMM || w->kind == OP_BATCHED_GEMM) { if (w->g.C.t == bt) pb = k; }
        else if (w->kind == OP_GROUPED_GEMM) { for (int q = 0; q < w->nmembers; q++) if (w->members[q].C.t == bt) pb = k; }
    }
    for (int k = pb + 1; k < b->cur; k++) {
        const Op *w = &g->fwd[k];
        if (w->kind == OP_KERNEL) { for (int q = 0; q < w->nops; q++) if (w->ops[q].t == at) return 0; }
        else if (w->kind == OP_GEMM || w->kind == OP_BATCHED_GEMM) { if (w->g.A.t == at) return 0; }
        else if (w->kind == OP_GROUPED_GEMM) { for (int q = 0; q < w->nmembers; q++) if (w->members[q].A.t == at) return 0; }
    }
    return 1;
}

/* add, copy -> the output gradient flows to each input: the same buffer when the views are
 * whole (no step), else a copy step */
static void rule_add_copy(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t M = g->M;
    int64_t cols = (int64_t)kconst(f, "cols");
    int isadd = kcat_find(f->k.kind) == KK_ADD;
    Opnd out = isadd ? OPV("out") : OPV("dst");
    GView dout = gview(g, out, isadd ? M : (int64_t)kconst(f, "rows"), cols);
    if (need_full(b, &dout)) return;
    const char *ins[2] = {isadd ? "a" : "src", "b"};
    int aliased_a = 0;
    for (int j = 0; j < (isadd ? 2 : 1); j++) {
        Opnd in = OPV(ins[j]);
        Tensor *ti = &g->t[in.t], *to = &g->t[out.t];
        int whole = in.off.base == 0 && out.off.base == 0 && ti->rows == to->rows && ti->cols == to->cols &&
                    ti->cols == cols && !ti->has_stat && !to->has_stat && ti->grad < 0 && ti->role == TR_ACT;
        if (whole && j == 1 && aliased_a) whole = b_may_share(b, in.t, OPV("a").t);
        if (whole) {   /* the same gradient: share the buffer, no step */
            ti->grad = dout.v.t;
            if (j == 0) aliased_a = 1;
            continue;
        }
        GView din = gview(g, in, dout.nr, cols);   /* statistics: the [1 x M] gradient vectors */
        int acc = wacc(b, &din);
        if (acc < 0) return;
        Op *o = bk(b, KK_COPY);
        kop(o, "src", dout.v); kop(o, "dst", din.v);
        k_const(o, "rows", (double)dout.nr); k_const(o, "cols", (double)cols);
        k_const(o, "lds", (double)dout.v.ld); k_const(o, "ldd", (double)din.v.ld); k_const(o, "acc", acc);
        wmark(g, &din);
    }
}

/* xent_combine -> xent_bwd on the logits (the scale folds in the micro-batch count) */
static void rule_xent(Bw *b, const Op *f) {
    Graph *g = b->g;
    int64_t M = g->M;
    Opnd logits = opnd(f->aux, 0, 0);
    int64_t vl = g->t[f->aux].cols;
    GView dl = gview(g, logits, M, vl);
    Op *o = bk(b, KK_XENT_BWD);
    kop(o, "logits", FV(b, opnd(f->aux, 0, vl))); kop(o, "targets", opnd(g->targets, 0, M));
    kop(o, "lse", FV(b, OPV("lse"))); kop(o, "dlogits", dl.v);
    k_const(o, "rows", (double)M); k_const(o, "cols", (double)vl); k_const(o, "ldl", (double)vl);
    k_const_r(o, "vocab_offset", 0, (double)vl);
    k_const(o, "scale", 1.0 / ((double)M * (g->run->grad_accum > 0 ? g->run->grad_accum : 1)));
    wmark(g, &dl);
}
#undef OPV

/* The backward rule of each catalog kind whose row says KG_RULE (common/kernel_catalog.h). */
static void (*const kernel_rules[KK_COUNT])(Bw *b, const Op *f) = {
    [KK_EMBEDDING_FWD] = rule_embedding,
    [KK_RMSNORM_FWD] = rule_rmsnorm,
    [KK_ONLINE_NORM_FWD] = rule_online_norm,
    [KK_BOTTLENECK_ACT] = rule_bottleneck_act,
    [KK_ROPE] = rule_rope,
    [KK_ATTENTION_FWD] = rule_attention,
    [KK_GLU_FWD] = rule_glu,
    [KK_ADD] = rule_add_copy,
    [KK_XENT_COMBINE] = rule_xent,
    [KK_COPY] = rule_add_copy,
    [KK_MOE_COMBINE] = rule_moe_combine,
    [KK_MOE_DISPATCH] = rule_moe_dispatch,
    [KK_MOE_ROUTER] = rule_moe_router,
};

static void rule_kernel(Bw *b, const Op *f) {
    int id = kcat_find(f->k.kind);
    if (f->no_grad || (id >= 0 && kcat_kind(id)->grad == KG_STOP)) return;
    if (id >= 0 && kernel_rules[id]) { kernel_rules[id](b, f); return; }
    bfail(b, "backward: no rule for kernel %s (%s)", f->k.kind, f->chunk);
}

/* A backward GEMM that only accumulates a parameter gradient and does not touch tensor `buf`. */
static int weight_grad_gemm(const Graph *g, const Op *o, int buf) {
    if (o->section != SEC_BWD) return 0;
    int n = o->kind == OP_GROUPED_GEMM ? o->nmembers : o->kind == OP_GEMM || o->kind == OP_BATCHED_GEMM ? 1 : 0;
    for (int i = 0; i < n; i++) {
        const Gemm *m = o->kind == OP_GROUPED_GEMM ? &o->members[i] : &o->g;
        if (g->t[m->C.t].role != TR_PARAM_GRAD || m->A.t == buf || m->B.t == buf || m->C.t == buf) return 0;
    }
    return n > 0;
}

static void rule_collective(Bw *b, const Op *f) {
    Graph *g = b->g;
    if (f->no_grad || (f->kind == OP_ALLREDUCE && f->group == CG_TP)) return;   /* identity */
    if (f->kind == OP_ALLGATHER && f->group == CG_TP) {   /* dual: each rank's column block */
        GView dd = gview(g, f->dst, f->rows, f->cols * g->tp);
        if (need_full(b, &dd)) return;
        GView ds = gview(g, f->src, f->rows, f->cols);
        int acc = wacc(b, &ds);
        if (acc < 0) return;
        Op *o = bk(b, KK_COPY);
        Opnd src = dd.v; src.off = rint_r(dd.v.off.base, f->cols);
        kop(o, "src", src); kop(o, "dst", ds.v);
        k_const(o, "rows", (double)f->rows); k_const(o, "cols", (double)f->cols);
        k_const(o, "lds", (double)dd.v.ld); k_const(o, "ldd", (double)ds.v.ld); k_const(o, "acc", acc);
        wmark(g, &ds);
        return;
    }
    if (f->kind == OP_ALLTOALL) {    /* dual: the reverse all-to-all of the gradient (back for out, out for back) */
        GView dd = gview(g, f->dst, g->t[f->dst.t].rows, g->t[f->dst.t].cols);
        if (need_full(b, &dd)) return;
        GView ds = gview(g, f->src, g->t[f->src.t].rows, g->t[f->src.t].cols);
        int acc = wacc(b, &ds);
        if (acc < 0) return;
        if (acc) { bfail(b, "backward: the all-to-all %s would accumulate into %s (its source has another reader)", f->tag,
                         g->t[ds.v.t].name); return; }
        Op *o = bop(b, OP_ALLTOALL);
        o->src = dd.v; o->dst = ds.v;
        o->map = b->fmap[f->map];
        o->experts = f->experts; o->rows = f->rows; o->cols = f->cols;
        o->dtype = g->t[ds.v.t].dtype;
        o->bytes = f->bytes;
        o->group = f->group;
        o->way = !f->way;
        o->dir = 1;
        snprintf(o->tag, sizeof o->tag, "%s", f->tag);
        o->dual = "alltoall";
        wmark(g, &ds);
        return;
    }
    if (f->kind == OP_TP_COPY) {     /* dual: all-reduce of the input gradient */
        int t = f->marker_tensor;
        GView dv = gview(g, opnd(t, 0, 0), g->t[t].rows, g->t[t].cols);
        if (need_full(b, &dv)) return;
        Op *o = bop(b, OP_ALLREDUCE);
        o->buf = dv.v;
        o->elems = g->t[t].rows * g->t[t].cols;
        o->dtype = g->t[dv.v.t].dtype;
        o->bytes = o->elems * (int64_t)ir_dtype_size(o->dtype);
        o->dir = 1;
        snprintf(o->tag, sizeof o->tag, "%s", f->tag);
        o->reduce = RED_SUM;
        o->dual = "identity";
        /* issue the all-reduce before the weight-gradient GEMMs emitted just before it: they do not
         * need it, so on a device they run while it is in flight (the runtime waits for a
         * collective only at the first step that touches its memory) */
        for (int i = g->nsteps - 1; i > 0 && weight_grad_gemm(g, &g->steps[i - 1], o->buf.t); i--) {
            Op tmp = g->steps[i - 1];
            g->steps[i - 1] = g->steps[i];
            g->steps[i] = tmp;
            o = &g->steps[i - 1];
        }
        return;
    }
    if (ir_coll_kind(f) >= 0)   /* a kind (or group) with no dual here: say so, no wrong gradient */
        bfail(b, "backward: the forward %s (%s) has no backward rule on its group: mark it no_grad "
              "or give it a dual in gen/backward.c rule_collective", ccat_word(ir_coll_kind(f)),
              f->tag);
}

/* ---- recompute (checkpoint=lowrank) ---- */

static void op_inputs(const Op *o, int *out, int *n) {
    *n = 0;
    switch (o->kind) {
    case OP_GEMM: case OP_BATCHED_GEMM: out[(*n)++] = o->g.A.t; out[(*n)++] = o->g.B.t; break;
    case OP_GROUPED_GEMM: for (int i = 0; i < o->nmembers; i++) { out[(*n)++] = o->members[i].A.t; out[(*n)++] = o->members[i].B.t; } break;
    case OP_KERNEL:
        for (int i = 0; i < o->nops; i++) if (!(o->out_mask >> i & 1)) out[(*n)++] = o->ops[i].t;
        if (o->aux >= 0) out[(*n)++] = o->aux;
        break;
    default: {   /* a collective: the operands its catalog row reads */
        int wr[2], nw;
        ir_coll_rw(o, out, n, wr, &nw);
    }
    }
}

/* Forward values the backward rule of op f reads. */
static void op_needs(const Op *o, int *out, int *n) {
    *n = 0;
    switch (o->kind) {
    case OP_GEMM: case OP_BATCHED_GEMM: out[(*n)++] = o->g.A.t; break;
    case OP_GROUPED_GEMM: for (int i = 0; i < o->nmembers; i++) out[(*n)++] = o->members[i].A.t; break;
    case OP_KERNEL:
        for (int i = 0; i < o->nops; i++) if (o->bwd_needs >> i & 1) out[(*n)++] = o->ops[i].t;
        if (o->aux >= 0) out[(*n)++] = o->aux;
        break;
    }
}

static Opnd remap(Bw *b, Opnd o) { o.t = b->fmap[o.t]; return o; }

static int rc_tensor(Bw *b, int t) {
    Graph *g = b->g;
    char nm[110];
    snprintf(nm, sizeof nm, "rc.%s", g->t[t].name);
    int r = ir_tensor(g, nm, g->t[t].rows, g->t[t].cols, g->t[t].dtype, TR_ACT, g->t[t].state);
    g->t[r].recompute_of = t;
    b->fmap[t] = r;
    return r;
}

static int emit_recompute(Bw *b, const char *chunk, int first, int last) {
    Graph *g = b->g;
    int nt = g->nt;
    char *want = calloc((size_t)nt, 1), *replay = calloc((size_t)g->nfwd, 1);
    if (!want || !replay) { free(want); free(replay); ir_fail(g, "out of memory (recompute of %s)", chunk); }
    int buf[64], n;
    int any = 0;
    for (int k = first; k <= last; k++) {
        op_needs(&g->fwd[k], buf, &n);
        for (int j = 0; j < n; j++) {
            int t = buf[j];
            if (t < nt && g->t[t].role == TR_ACT && !g->t[t].saved && b->fmap[t] == t) { want[t] = 1; any = 1; }
        }
    }
    /* closure: every writer of a wanted tensor is replayed; its dropped inputs are wanted too */
    for (int changed = any; changed;) {
        changed = 0;
        for (int k = g->nfwd - 1; k >= 0; k--) {
            if (replay[k]) continue;
            const Op *o = &g->fwd[k];
            int hit = 0;
            switch (o->kind) {
            case OP_GEMM: case OP_BATCHED_GEMM: hit = want[o->g.C.t]; break;
            case OP_GROUPED_GEMM: for (int i = 0; i < o->nmembers; i++) hit |= want[o->members[i].C.t]; break;
            case OP_KERNEL: for (int i = 0; i < o->nops; i++) if (o->out_mask >> i & 1) hit |= want[o->ops[i].t]; break;
            default: {   /* a collective: the operands its catalog row writes */
                int rd[3], wr[2], nr, nw;
                ir_coll_rw(o, rd, &nr, wr, &nw);
                for (int i = 0; i < nw; i++) hit |= want[wr[i]];
            }
            }
            if (!hit) continue;
            replay[k] = 1; changed = 1;
            op_inputs(o, buf, &n);
            for (int j = 0; j < n; j++) {
                int t = buf[j];
                if (g->t[t].role == TR_ACT && !g->t[t].saved && b->fmap[t] == t) want[t] = 1;
            }
        }
    }
    int rc = 0;
    if (any) {
        Op *o = ir_push(g, &g->steps, &g->nsteps, &g->caps);
        o->kind = OP_RC_BEGIN; o->section = SEC_RECOMPUTE; o->layer = g->fwd[first].layer;
        snprintf(o->chunk, sizeof o->chunk, "%s", chunk);
        for (int t = 0; t < nt; t++) if (want[t]) rc_tensor(b, t);
        for (int k = 0; k < g->nfwd; k++) {
            if (!replay[k]) continue;
            const Op *f = &g->fwd[k];
            if (ir_coll_kind(f) >= 0) {
                snprintf(g->err, sizeof g->err, "checkpoint: recomputing %s would repeat the collective %s; "
                         "its output must be saved", chunk, f->tag);
                rc = 2; break;
            }
            if (f->kind == OP_TP_COPY) continue;
            if (rc) break;
            Op *o2 = ir_push(g, &g->steps, &g->nsteps, &g->caps);
            *o2 = *f;
            o2->section = SEC_RECOMPUTE;
            if (f->members) {
                o2->members = ir_alloc(g, (size_t)f->nmembers * sizeof *f->members);
                memcpy(o2->members, f->members, (size_t)f->nmembers * sizeof *f->members);
                for (int i = 0; i < o2->nmembers; i++) {
                    o2->members[i].A = remap(b, o2->members[i].A); o2->members[i].C = remap(b, o2->members[i].C);
                }
            }
            o2->g.A = remap(b, o2->g.A); o2->g.C = remap(b, o2->g.C);
            for (int i = 0; i < o2->nops; i++) o2->ops[i] = remap(b, o2->ops[i]);
            for (int i = 0; i < o2->nops && o2->kind == OP_KERNEL; i++) {
                const Tensor *w = &g->t[o2->ops[i].t];
                if ((o2->out_mask >> i & 1) && w->role == TR_ACT && w->recompute_of < 0 && w->saved && !w->keep && strcmp(o2->opkey[i], "stat")) {
                    snprintf(g->err, sizeof g->err, "checkpoint: recomputing %s would overwrite the saved tensor %s", chunk, w->name);
                    rc = 2;
                }
            }
            if (o2->kind == OP_KERNEL && kcat_find(o2->k.kind) == KK_ONLINE_NORM_FWD) {
                /* the statistics of the saved all-reduce buffer hold the summed values: the
                   replay writes its local share to a scratch vector instead */
                int si = -1;
                for (int i = 0; i < o2->nops; i++) if (!strcmp(o2->opkey[i], "stat")) si = i;
                if (si >= 0) {
                    char nm[110];
                    snprintf(nm, sizeof nm, "rc.%s_stat", g->t[o2->ops[si].t].name);
                    int sc = ir_tensor(g, nm, g->M, 1, g->t[o2->ops[si].t].dtype, TR_ACT, PS_PARTIAL);
                    g->t[sc].recompute_of = o2->ops[si].t;
                    o2 = &g->steps[g->nsteps - 1];   /* ir_tensor does not move steps, but be explicit */
                    o2->ops[si] = opnd(sc, 0, 1);
                    for (int i = 0; i < o2->k.nconst; i++) if (!strcmp(o2->k.key[i], "ldstat")) o2->k.val[i] = 1;
                }
            }
        }
        o = ir_push(g, &g->steps, &g->nsteps, &g->caps);
        o->kind = OP_RC_END; o->section = SEC_RECOMPUTE; o->layer = g->fwd[first].layer;
        snprintf(o->chunk, sizeof o->chunk, "%s", chunk);
    }
    free(want); free(replay);
    return rc;
}

int build_backward(Graph *g) {
    Bw b = {g, NULL, 0, 0};
    /* tensors created below (gradients, rc.* copies, dots) number at most a few per forward one */
    int cap = 6 * g->nt + 1024;
    b.fmap = ir_alloc(g, (size_t)cap * sizeof *b.fmap);
    for (int i = 0; i < cap; i++) b.fmap[i] = i;
    int ckpt = g->run->checkpoint == CKPT_LOWRANK;
    int rc = 0;
    for (int k = g->nfwd - 1; k >= 0 && !rc; k--) {
        if (ckpt && (k == g->nfwd - 1 || strcmp(g->fwd[k].chunk, g->fwd[k + 1].chunk))) {
            int first = k;
            while (first > 0 && !strcmp(g->fwd[first - 1].chunk, g->fwd[k].chunk)) first--;
            rc = emit_recompute(&b, g->fwd[k].chunk, first, k);
            if (rc) break;
        }
        b.cur = k;
        const Op *f = &g->fwd[k];
        switch (f->kind) {
        case OP_GEMM: case OP_BATCHED_GEMM: case OP_GROUPED_GEMM: rule_gemm(&b, f); break;
        case OP_KERNEL: rule_kernel(&b, f); break;
        default: rule_collective(&b, f); break;
        }
        if (g->nt >= cap) { snprintf(g->err, sizeof g->err, "backward: internal: tensor table overflow"); rc = 1; }
        if (b.rc_failed) rc = 2;
    }
    free(b.fmap);
    return rc;
}
