/* test_gen_collectives.c: collectives as data on the generator side. A hand-made forward with a
 * reduce_scatter on the tp group, an allgather on the dp group and a tp all-reduce (gen/builder.h
 * ir_collective) gives the plan lines docs/plan-format.md describes, read/write sets from the
 * catalog's operand bits and the live ranges memplan derives from them; a layout may not build an
 * all-to-all or an optimizer-only kind; the state check carries the tp state across a dp
 * collective; a zero=1 dp=2 run has one group=dp reduce_scatter per gradient in the backward and
 * an optimizer section of ops (the line, then gather_shards). */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/builder.h"
#include "gen/gen.h"
#include "gen/ir.h"
#include "gen/build.h"
#include "gen/build_fixture.h"
#include "gen/checkpoint.h"
#include "gen/memplan.h"
#include "gen/pipeline.h"
#include "gen/plan_write.h"
#include "tests/unit/testlib.h"

/* plan_write_step's line for op o, in buf (without its newline). */
static void step_text(const Graph *g, const Op *o, char *buf, size_t n) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    plan_write_step(f, g, o);
    fclose(f);
    snprintf(buf, n, "%s", text ? text : "");
    buf[strcspn(buf, "\n")] = 0;
    free(text);
}

static int has(const int *v, int n, int t) {
    for (int i = 0; i < n; i++) if (v[i] == t) return 1;
    return 0;
}

static void test_hand_made(void) {
    Run run;
    run_tiny_cola(&run);   /* tp=2 */
    run.dp = 2;
    run.checkpoint = CKPT_NONE;
    Graph *g = graph_new(&run, LAYOUT_BTP);
    int p = ir_tensor(g, "p", 4, 8, IR_BF16, TR_ACT, PS_PARTIAL);
    int s = ir_tensor(g, "s", 4, 8, IR_BF16, TR_ACT, PS_REPLICATED);
    int full = ir_tensor(g, "full", 4, 16, IR_BF16, TR_ACT, PS_REPLICATED);
    int idle = ir_tensor(g, "idle", 4, 8, IR_BF16, TR_ACT, PS_REPLICATED);
    ir_chunk(g, 0, "L0.x");
    Op *rs = ir_collective(g, CK_REDUCE_SCATTER, CG_TP, p, -1, RED_SUM, "L0.rs");
    rs->no_grad = 1;
    Op *ag = ir_collective(g, CK_ALLGATHER, CG_DP, s, full, RED_NONE, "L0.ag");
    ag->no_grad = 1;
    ir_allreduce(g, full, "L0.ar");
    /* the ops and payloads: buf 4x8 bf16 = 64 bytes; the gather: 4x8 from each of dp=2, 128 */
    const Op *f = g->fwd;
    CHECK(g->nfwd == 3 && f[0].kind == OP_REDUCE_SCATTER &&
          ir_coll_kind(&f[0]) == CK_REDUCE_SCATTER && f[1].kind == OP_ALLGATHER &&
          f[1].group == CG_DP && f[2].kind == OP_ALLREDUCE && f[2].group == CG_TP,
          "collectives_ops", "%d ops, kinds %d %d %d", g->nfwd, f[0].kind, f[1].kind, f[2].kind);
    CHECK(f[0].bytes == 64 && f[1].bytes == 128 && f[2].bytes == 128, "collectives_bytes",
          "%lld %lld %lld", (long long)f[0].bytes, (long long)f[1].bytes, (long long)f[2].bytes);
    int rd[3], wr[2], nr, nw;
    ir_coll_rw(&f[0], rd, &nr, wr, &nw);
    CHECK(nr == 1 && nw == 1 && rd[0] == p && wr[0] == p, "collectives_rw_reduce_scatter",
          "%d reads, %d writes", nr, nw);
    ir_coll_rw(&f[1], rd, &nr, wr, &nw);
    CHECK(nr == 1 && nw == 1 && has(rd, nr, s) && has(wr, nw, full), "collectives_rw_allgather",
          "%d reads, %d writes", nr, nw);
    Op gemm;
    memset(&gemm, 0, sizeof gemm);
    ir_coll_rw(&gemm, rd, &nr, wr, &nw);
    CHECK(nr == 0 && nw == 0 && ir_coll_kind(&gemm) == -1, "collectives_rw_not_collective",
          "%d %d", nr, nw);

    /* the plan lines, as docs/plan-format.md "collectives" spells them: tp is the default group */
    char line[512];
    step_text(g, &f[0], line, sizeof line);
    CHECK(!strcmp(line, "reduce_scatter buf=p elems=32 dtype=bf16 op=sum dir=fwd tag=L0.rs"),
          "collectives_line_reduce_scatter_tp", "%s", line);
    step_text(g, &f[1], line, sizeof line);
    CHECK(!strcmp(line, "allgather src=s dst=full rows=4 cols=8 ld_src=8 ld_dst=16 dtype=bf16 "
                        "dir=fwd group=dp tag=L0.ag"), "collectives_line_allgather_dp", "%s", line);
    step_text(g, &f[2], line, sizeof line);
    CHECK(!strcmp(line, "allreduce buf=full elems=64 dtype=bf16 op=sum dir=fwd tag=L0.ar"),
          "collectives_line_allreduce_tp", "%s", line);

    /* live ranges: steps 0, 1, 2 in tape order; memplan touches what each row reads and writes */
    checkpoint_classify(g);
    emit_forward_steps(g);
    int rc = memplan(g);
    const Tensor *t = g->t;
    CHECK(rc == 0 && t[p].live0 == 0 && t[p].live1 == 0 && t[s].live0 == 1 && t[s].live1 == 1 &&
          t[full].live0 == 1 && t[full].live1 == 2 && t[idle].live0 == -1,
          "collectives_live_ranges", "rc %d: p %d:%d s %d:%d full %d:%d idle %d", rc, t[p].live0,
          t[p].live1, t[s].live0, t[s].live1, t[full].live0, t[full].live1, t[idle].live0);
    CHECK(t[s].offset + 256 <= t[full].offset || t[full].offset + 256 <= t[s].offset,
          "collectives_arena_apart", "s at %lld, full at %lld", (long long)t[s].offset,
          (long long)t[full].offset);

    /* refusals: the all-to-all (gen/moe.c builds it) and an optimizer-section kind */
    jmp_buf fail;
    g->fail = &fail;
    int refused = 0;
    if (!setjmp(fail)) ir_collective(g, CK_ALLTOALL, CG_EP, s, full, RED_NONE, "bad");
    else refused += strstr(g->err, "alltoall") != NULL;
    if (!setjmp(fail)) ir_collective(g, CK_GATHER_SHARDS, CG_DP, s, -1, RED_NONE, "bad");
    else refused += strstr(g->err, "gather_shards") != NULL;
    g->fail = NULL;
    CHECK(refused == 2, "collectives_builder_refusals", "%d of 2 refused, last: %s", refused,
          g->err);
    graph_free(g);
}

/* The state check: a collective over dp passes the tp state of what it reads to what it writes (a
 * column shard gathered over dp is still a column shard: a tp allgather then makes it replicated),
 * and refuses to read what was never written. */
static void test_states(void) {
    Run run;
    run_tiny_cola(&run);
    run.dp = 2;
    Graph *g = graph_new(&run, LAYOUT_BTP);
    int x = ir_tensor(g, "x", 4, 8, IR_BF16, TR_INPUT, PS_SHARD1);
    int xd = ir_tensor(g, "xd", 4, 16, IR_BF16, TR_ACT, PS_SHARD1);
    int xf = ir_tensor(g, "xf", 4, 32, IR_BF16, TR_ACT, PS_REPLICATED);
    ir_collective(g, CK_ALLGATHER, CG_DP, x, xd, RED_NONE, "dp")->no_grad = 1;
    ir_allgather(g, xd, xf, "tp", 1);
    int rc = check_states(g);
    CHECK(rc == 0, "collectives_state_dp_keeps_shard", "rc %d: %s", rc, g->err);
    int never = ir_tensor(g, "never", 4, 8, IR_BF16, TR_ACT, PS_REPLICATED);
    ir_collective(g, CK_REDUCE_SCATTER, CG_DP, never, -1, RED_AVG, "bad")->no_grad = 1;
    rc = check_states(g);
    CHECK(rc == 2 && strstr(g->err, "reduce_scatter of never, which was never written"),
          "collectives_state_unwritten", "rc %d: %s", rc, g->err);
    graph_free(g);
}

/* zero=1 at dp=2: the dp reduction is reduce_scatter ops, the optimizer section is data. */
static void test_zero_ops(void) {
    Run run;
    run_tiny_cola(&run);
    run.dp = 2;
    run.zero = 1;
    char err[512] = "";
    int st = 0;
    Graph *g = graph_build(&run, LAYOUT_BTP, run.checkpoint, err, sizeof err, &st);
    CHECK(g != NULL, "collectives_zero_build", "%s", err);
    if (!g) return;
    int rs = 0, ar_dp = 0, grads = 0;
    for (int i = 0; i < g->nparams; i++) grads += g->t[g->params[i].tensor].grad >= 0;
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        rs += o->kind == OP_REDUCE_SCATTER && o->group == CG_DP && o->reduce == RED_AVG &&
              ir_dp_bucket(o);
        ar_dp += o->kind == OP_ALLREDUCE && o->group == CG_DP;
    }
    CHECK(rs == grads && ar_dp == 0, "collectives_zero_reduce_scatter_ops",
          "%d reduce_scatter, %d dp allreduce, %d grads", rs, ar_dp, grads);
    int gathers = 0;
    for (int i = 1; i < g->nopt; i++)
        gathers += g->opt[i].kind == OP_GATHER_SHARDS && g->opt[i].group == CG_DP;
    CHECK(g->nopt == g->nparams + 1 && g->opt[0].kind == OP_OPTIMIZER && gathers == g->nparams,
          "collectives_zero_optimizer_ops", "%d ops for %d params, %d gathers", g->nopt, g->nparams,
          gathers);
    char line[512], want[512];
    step_text(g, &g->opt[0], line, sizeof line);
    CHECK(!strcmp(line, "optimizer adamw zero=1"), "collectives_zero_optimizer_line", "%s", line);
    const Tensor *t = &g->t[g->params[0].tensor];
    snprintf(want, sizeof want, "gather_shards buf=%s elems=%lld dtype=%s group=dp", t->name,
             (long long)(t->rows * t->cols), t->dtype == IR_BF16 ? "bf16" : "fp32");
    step_text(g, &g->opt[1], line, sizeof line);
    CHECK(!strcmp(line, want), "collectives_zero_gather_shards_line", "%s, want %s", line, want);
    graph_free(g);
}

int main(void) {
    test_hand_made();
    test_states();
    test_zero_ops();
    TEST_EXIT();
}
