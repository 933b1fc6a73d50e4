/* test_gen_closed.c: the generator's schedules against closed forms, for every shipped run spec
 * (hence every shipped model) in each applicable layout at the run's tp and at tp=4 where it
 * divides the shapes: per-layer all-reduce counts, elements and bytes forward and backward
 * (megatron 2 x bsd; naive bs(q+k+v+o+gate+up+down outputs); btp bs(sum of ranks + 2, + 0 at tp=1) forward and
 * bs(sum of ranks) backward), and parameter counts (per projection r(d_in+d_out) or d_in d_out,
 * plus r^2 for the core of U S V^T, plus norms, embedding and head); U S V^T is refused by naive.
 * Also the static checks: wrong parallel states are rejected,
 * a recompute that would repeat a collective is rejected, and the memory plan is sound. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "gen/gen.h"
#include "gen/ir.h"
#include "gen/backward.h"
#include "gen/build.h"
#include "gen/build_fixture.h"
#include "gen/checkpoint.h"
#include "gen/pipeline.h"

static int64_t pin(const Model *m, int p) {
    return p == PROJ_O ? (int64_t)m->heads * m->head_dim : p == PROJ_DOWN ? m->ffn : m->hidden;
}
static int64_t pout(const Model *m, int p) {
    if (p == PROJ_Q) return (int64_t)m->heads * m->head_dim;
    if (p == PROJ_K || p == PROJ_V) return (int64_t)m->kv_heads * m->head_dim;
    if (p == PROJ_GATE || p == PROJ_UP) return m->ffn;
    return m->hidden;
}

typedef struct { int64_t n, elems, bytes; } Sum;

static void layer0(const Graph *g, Sum *f, Sum *b) {
    memset(f, 0, sizeof *f); memset(b, 0, sizeof *b);
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        if (o->kind != OP_ALLREDUCE || o->layer != 0) continue;
        Sum *x = s < g->nfwd_steps ? f : b;
        x->n++; x->elems += o->elems; x->bytes += o->bytes;
    }
}

static void check_layout(const char *runname, const Run *r0, int layout, int tp) {
    Run r = *r0;
    r.tp = tp;
    r.layout = layout;
    const Model *m = &r.model;
    char err[600], nm[200];
    int st;
    Graph *g = graph_build(&r, layout, r.checkpoint, err, sizeof err, &st);
    snprintf(nm, sizeof nm, "%s %s tp=%d builds", runname, layout_name(layout), tp);
    CHECK(g != NULL, nm, "%s", err);
    if (!g) return;
    int64_t bs = (int64_t)r.micro_batch * r.seq, dsz = r.dtype == DT_FP32 ? 4 : 2;
    Sum f, b;
    layer0(g, &f, &b);
    int64_t fe, be, fn, bn;
    /* btp's norm statistics ride in the A all-reduce (online) or have their own (sync) at tp > 1;
       at tp = 1 there is nothing to sum over and btp runs the plain norm */
    int online = r.online_rmsnorm && tp > 1, sync = !r.online_rmsnorm && tp > 1;
    const ProjSpec *ps = m->proj[0];
    if (layout == LAYOUT_MEGATRON) {
        fn = 2; fe = 2 * bs * m->hidden; bn = 2; be = 2 * bs * m->hidden;
    } else if (layout == LAYOUT_NAIVE) {
        fn = 7; fe = 0;
        for (int p = 0; p < NPROJ; p++) fe += bs * pout(m, p);
        bn = 4; be = bs * (2 * m->hidden + (int64_t)m->heads * m->head_dim + m->ffn);
    } else {
        int64_t sr = 0;
        for (int p = 0; p < NPROJ; p++) sr += ps[p].rank;
        int norms = online ? 2 : 0;
        if (r.group_linears || !online) {
            fn = r.group_linears ? 4 : 7;
            fe = bs * (sr + norms);
        } else {   /* ungrouped online norm: every A output of a normed input carries the stat */
            fn = 7; fe = bs * (sr + 5);
        }
        bn = r.group_linears ? 4 : 7; be = bs * sr;
        if (sync) { fn += 2; fe += 2 * bs; bn += 2; be += 2 * bs; }   /* sync norm statistics */
    }
    snprintf(nm, sizeof nm, "%s %s tp=%d forward all-reduces per layer", runname, layout_name(layout), tp);
    int64_t fb = fe * dsz;
    if (layout == LAYOUT_BTP && sync) fb = (fe - 2 * bs) * dsz + 2 * bs * 4;   /* fp32 statistics */
    CHECK(f.n == fn && f.elems == fe && f.bytes == fb, nm, "got %lld ops, %lld elements, %lld bytes; closed form %lld, %lld, %lld",
          (long long)f.n, (long long)f.elems, (long long)f.bytes, (long long)fn, (long long)fe, (long long)fb);
    int64_t bb = be * dsz;
    if (layout == LAYOUT_BTP && sync) bb = (be - 2 * bs) * dsz + 2 * bs * 4;
    snprintf(nm, sizeof nm, "%s %s tp=%d backward all-reduces per layer", runname, layout_name(layout), tp);
    CHECK(b.n == bn && b.elems == be && b.bytes == bb, nm, "got %lld ops, %lld elements, %lld bytes; closed form %lld, %lld, %lld",
          (long long)b.n, (long long)b.elems, (long long)b.bytes, (long long)bn, (long long)be, (long long)bb);
    /* parameters: closed form over the model */
    int64_t want = 2LL * m->vocab * m->hidden + m->hidden, got = 0;
    int core = layout != LAYOUT_MEGATRON && !strcmp(m->family, "usv");   /* U S V^T: S is r x r */
    for (int i = 0; i < m->layers; i++) {
        want += 2LL * m->hidden;
        for (int p = 0; p < NPROJ; p++) {
            int64_t rk = m->proj[i][p].rank;
            want += layout == LAYOUT_MEGATRON ? pin(m, p) * pout(m, p)
                                              : rk * (pin(m, p) + pout(m, p));
            if (core) want += rk * rk;
        }
    }
    for (int i = 0; i < g->ncanons; i++) got += g->canons[i].rows * g->canons[i].cols;
    snprintf(nm, sizeof nm, "%s %s tp=%d parameter count", runname, layout_name(layout), tp);
    CHECK(got == want, nm, "canons hold %lld, closed form %lld", (long long)got, (long long)want);
    /* local params times tp covers the canons: replicated blocks counted once per rank */
    int64_t local = 0, rep = 0;
    for (int i = 0; i < g->nparts; i++) {
        const Part *q = &g->parts[i];
        int64_t n = (q->r1.base - q->r0.base) * (q->c1.base - q->c0.base);
        local += n;
        if (q->rep) rep += n;
    }
    snprintf(nm, sizeof nm, "%s %s tp=%d parts cover every canon once", runname, layout_name(layout), tp);
    CHECK(tp == 1 ? local == got : (local - rep) * tp + rep == got, nm, "local %lld (replicated %lld) x tp %d vs %lld",
          (long long)local, (long long)rep, tp, (long long)got);
    graph_free(g);
}

static int divides(const Model *m, int t) {
    if (m->hidden % t || m->ffn % t || m->vocab % t || m->heads % t || m->kv_heads % t) return 0;
    return 1;
}

static int naive_ok(const Model *m, int t) {
    for (int i = 0; i < m->layers; i++) for (int p = 0; p < NPROJ; p++) if (m->proj[i][p].rank % t) return 0;
    return 1;
}

/* U S V^T has no naive layout (its core would sit on a rank-split latent): the generator says
 * so. */
static void naive_refused(const Run *r0, int tp) {
    Run r = *r0;
    r.tp = tp;
    r.layout = LAYOUT_NAIVE;
    char err[600], nm[200];
    int st;
    Graph *g = graph_build(&r, LAYOUT_NAIVE, r.checkpoint, err, sizeof err, &st);
    snprintf(nm, sizeof nm, "%s naive tp=%d refused: usv runs in btp only", r.name, tp);
    CHECK(!g && strstr(err, "layout naive cannot split") && strstr(err, "btp"), nm, "%s",
          g ? "built" : err);
    if (g) graph_free(g);
}

/* ---- static checks on hand-made tapes ---- */

static void state_checks(void) {
    static Run r;
    run_tiny_cola(&r);
    r.tp = 2;
    /* 1: a kernel fed the partial output of a row-parallel GEMM */
    Graph *g = graph_new(&r, LAYOUT_BTP);
    int x = ir_tensor(g, "x", 8, 4, IR_BF16, TR_ACT, PS_SHARD1);
    int w = ir_tensor(g, "w", 4, 4, IR_BF16, TR_PARAM, PS_SHARD0);
    int wc = ir_tensor(g, "wc", 4, 4, IR_BF16, TR_PARAM, PS_SHARD1);
    int y = ir_tensor(g, "y", 8, 4, IR_BF16, TR_ACT, PS_PARTIAL);
    int z = ir_tensor(g, "z", 8, 4, IR_BF16, TR_ACT, PS_SHARD1);
    Op *o = k_begin(g, "add");   /* writes x */
    k_op(g, o, "a", opnd(x, 0, 0), PS_SHARD1 + 1, 0);
    o = fwd_op(g, OP_GEMM);
    o->g.A = opnd(x, 0, 4); o->g.B = opnd(w, 0, 4); o->g.C = opnd(y, 0, 4); o->g.m = 8; o->g.n = 4; o->g.k = 4; o->g.batch = 1;
    o = k_begin(g, "glu_fwd");
    k_op(g, o, "gate", opnd(y, 0, 0), 0, 0); k_op(g, o, "up", opnd(y, 0, 0), 0, 0); k_op(g, o, "out", opnd(z, 0, 0), PS_SHARD1 + 1, 0);
    int rc = check_states(g);
    CHECK(rc == 2 && strstr(g->err, "partial"), "state check rejects a kernel reading a partial sum", "rc %d: %s", rc, g->err);
    graph_free(g);
    /* 2: a gemm whose operand states do not compose (column shard @ column shard) */
    g = graph_new(&r, LAYOUT_BTP);
    x = ir_tensor(g, "x", 8, 4, IR_BF16, TR_ACT, PS_SHARD1);
    wc = ir_tensor(g, "wc", 4, 4, IR_BF16, TR_PARAM, PS_SHARD1);
    y = ir_tensor(g, "y", 8, 4, IR_BF16, TR_ACT, PS_SHARD1);
    o = k_begin(g, "add"); k_op(g, o, "a", opnd(x, 0, 0), PS_SHARD1 + 1, 0);
    o = fwd_op(g, OP_GEMM);
    o->g.A = opnd(x, 0, 4); o->g.B = opnd(wc, 0, 4); o->g.C = opnd(y, 0, 4); o->g.m = 8; o->g.n = 4; o->g.k = 4; o->g.batch = 1;
    rc = check_states(g);
    CHECK(rc == 2 && strstr(g->err, "do not compose"), "state check rejects non-composing gemm states", "rc %d: %s", rc, g->err);
    graph_free(g);
    /* 3: an all-reduce of a tensor that is already replicated */
    g = graph_new(&r, LAYOUT_BTP);
    x = ir_tensor(g, "x", 8, 4, IR_BF16, TR_ACT, PS_REPLICATED);
    o = k_begin(g, "add"); k_op(g, o, "a", opnd(x, 0, 0), PS_REPLICATED + 1, 0);
    o = fwd_op(g, OP_ALLREDUCE); o->buf = opnd(x, 0, 4); o->elems = 32;
    rc = check_states(g);
    CHECK(rc == 2 && strstr(g->err, "allreduce"), "state check rejects an all-reduce of a replicated tensor", "rc %d: %s", rc, g->err);
    graph_free(g);
    /* 4: a column-parallel op fed a partial sum (the identity/allreduce dual needs replicated input) */
    g = graph_new(&r, LAYOUT_BTP);
    x = ir_tensor(g, "x", 8, 4, IR_BF16, TR_ACT, PS_PARTIAL);
    o = k_begin(g, "add"); k_op(g, o, "a", opnd(x, 0, 0), PS_PARTIAL + 1, 0);
    o = fwd_op(g, OP_TP_COPY); o->marker_tensor = x;
    rc = check_states(g);
    CHECK(rc == 2 && strstr(g->err, "replicated"), "state check rejects a partial input to a column-parallel op", "rc %d: %s", rc, g->err);
    graph_free(g);
    (void)wc;
    /* 5: the real btp tape passes; dropping an all-reduce output makes the recompute repeat a
       collective, which the generator refuses */
    r.checkpoint = CKPT_LOWRANK;
    g = graph_new(&r, LAYOUT_BTP);
    rc = build_forward(g);
    if (!rc) rc = check_states(g);
    CHECK(rc == 0, "state check accepts the btp tape", "%s", g->err);
    checkpoint_classify(g);
    int ar = ir_find(g, "L0.o_ar");
    if (ar >= 0) g->t[ar].saved = 0;
    emit_forward_steps(g);
    rc = build_backward(g);
    CHECK(rc == 2 && strstr(g->err, "collective"), "a recompute that would repeat a collective is rejected", "rc %d: %s", rc, g->err);
    graph_free(g);
}

/* Independent check of the memory plan: live ranges recomputed from the steps contain every use,
   and no two buffers live at the same step overlap. */
static void memory_checks(void) {
    static Run r;
    run_tiny_cola(&r);
    char err[600];
    int st;
    for (int ck = 0; ck < 2; ck++) {
        r.checkpoint = ck ? CKPT_LOWRANK : CKPT_NONE;
        Graph *g = graph_build(&r, LAYOUT_BTP, r.checkpoint, err, sizeof err, &st);
        if (!g) { CHECK(0, "memory plan builds", "%s", err); return; }
        int bad = 0;
        char why[300] = "";
        for (int s = 0; s < g->nsteps && !bad; s++) {
            const Op *o = &g->steps[s];
            int ts[40], n = 0;
            if (o->kind == OP_GEMM || o->kind == OP_BATCHED_GEMM) { ts[n++] = o->g.A.t; ts[n++] = o->g.B.t; ts[n++] = o->g.C.t; }
            if (o->kind == OP_KERNEL) for (int i = 0; i < o->nops; i++) ts[n++] = o->ops[i].t;
            if (o->kind == OP_ALLREDUCE) ts[n++] = o->buf.t;
            for (int i = 0; i < n; i++) {
                const Tensor *t = &g->t[ts[i]];
                if ((t->role == TR_ACT || t->role == TR_GRAD) && (s < t->live0 || s > t->live1)) {
                    bad = 1; snprintf(why, sizeof why, "step %d uses %s outside live=%d:%d", s, t->name, t->live0, t->live1);
                }
            }
        }
        for (int a = 0; a < g->nt && !bad; a++)
            for (int b = a + 1; b < g->nt && !bad; b++) {
                const Tensor *x = &g->t[a], *y = &g->t[b];
                if (x->live0 < 0 || y->live0 < 0) continue;
                if (x->live1 < y->live0 || y->live1 < x->live0) continue;
                int64_t xe = x->offset + x->rows * x->cols * (int64_t)ir_dtype_size(x->dtype);
                int64_t ye = y->offset + y->rows * y->cols * (int64_t)ir_dtype_size(y->dtype);
                if (x->offset < ye && y->offset < xe) { bad = 1; snprintf(why, sizeof why, "%s and %s overlap", x->name, y->name); }
                if (xe > g->arena_bytes || ye > g->arena_bytes) { bad = 1; snprintf(why, sizeof why, "%s past the arena", x->name); }
                if (x->offset % 256 || y->offset % 256) { bad = 1; snprintf(why, sizeof why, "%s not 256-byte aligned", x->name); }
            }
        CHECK(!bad, ck ? "memory plan sound (checkpoint)" : "memory plan sound", "%s", why);
        graph_free(g);
    }
}

int main(void) {
    state_checks();
    memory_checks();
    DIR *d = opendir("specs/runs");
    if (!d) { CHECK(0, "specs/runs readable", "run from the repository root"); TEST_EXIT(); }
    char names[128][256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 128) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".lua")) snprintf(names[n++], sizeof names[0], "specs/runs/%s", e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    static Run r;
    char err[1024];
    static char seen[128][NAME_LEN];
    int nseen = 0;
    for (int i = 0; i < n; i++) {
        if (spec_load_run(names[i], NULL, 0, &r, err, sizeof err)) { CHECK(0, names[i], "spec: %s", err); continue; }
        const Model *m = &r.model;
        if (nseen < 128) snprintf(seen[nseen++], NAME_LEN, "%s", m->name);
        if (m->moe_experts) continue;   /* MoE runs: their closed forms are checked in test_moe */
        int lowrank = m->proj[0][0].factor != FACTOR_FULL;
        int tps[2] = {r.tp, 4};
        for (int k = 0; k < 2; k++) {
            int t = tps[k];
            if (k == 1 && (t == r.tp || !divides(m, t))) continue;
            if (!lowrank) { check_layout(r.name, &r, LAYOUT_MEGATRON, t); continue; }
            check_layout(r.name, &r, LAYOUT_BTP, t);
            if (!strcmp(m->family, "usv")) { naive_refused(&r, t); continue; }
            if (naive_ok(m, t)) check_layout(r.name, &r, LAYOUT_NAIVE, t);
        }
    }
    /* every shipped model is covered: each must be named by some run spec */
    d = opendir("specs/models");
    int uncovered = 0;
    char first[300] = "";
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l <= 4 || strcmp(e->d_name + l - 4, ".lua")) continue;
        int found = 0;
        for (int i = 0; i < nseen; i++) if (strlen(seen[i]) == l - 4 && !strncmp(seen[i], e->d_name, l - 4)) found = 1;
        if (!found) { if (!uncovered) snprintf(first, sizeof first, "%.250s", e->d_name); uncovered++; }
    }
    if (d) closedir(d);
    CHECK(!uncovered, "every shipped model is checked through a run spec", "%d models have no run, e.g. %s (add one to specs/runs)", uncovered, first);
    TEST_EXIT();
}
