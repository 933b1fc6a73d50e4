/* test_project_pp.c: the cost model's pipeline timeline (gen/project_pp.c) over the schedules gen/pp.c
 * emits: uniform stages without transfer cost give exactly the 1F1B formula (m+pp-1) x stage and the
 * interleaved one's (pp-1)/(v m+pp-1) bubble; a 2-stage 2-micro-batch timeline computed by hand (with
 * and without unequal stages and transfer cost); a transfer's cost moves the time by exactly its
 * count on the critical path; `boost project` at pp > 1 with an unequal explicit split comes out
 * longer than the formula with the mean stage; a mutated schedule is refused, not priced; a model the
 * generator cannot split keeps the formula. */
#include <math.h>
#include <string.h>
#include "gen/gen.h"
#include "gen/ir.h"
#include "gen/pipeline.h"
#include "gen/pp.h"
#include "gen/project.h"
#include "gen/project_pp.h"
#include "tests/unit/testlib.h"

static int close_abs(double a, double b, double tol) { return fabs(a - b) <= tol; }

/* projection: load as `boost project` does (fewer micro-batches than stages allowed) */
static int load(Run *run, const char *spec, const char *const *defs, int ndefs, int projection) {
    Override ov[16];
    char err[1024];
    int n = 0;
    for (int i = 0; i < ndefs; i++) {
        int k = parse_override(defs[i], &ov[n], err, sizeof err);
        if (k < 0) { printf("FAIL - load_%s: %s\n", spec, err); return 1; }
        n += k;
    }
    int rc = projection ? spec_load_run_projection(spec, ov, n, run, err, sizeof err) : spec_load_run(spec, ov, n, run, err, sizeof err);
    if (rc) printf("FAIL - load_%s: %s\n", spec, err);
    return rc;
}

/* The emitted schedule of model (tiny-cola-4l: 4 layers) at pp, m, v, tp=1, 16 tokens. */
static PpPlan *plan_of(const char *model, int pp, int m, int v, Graph **gout) {
    static Run run;
    char dpp[32], dm[32], dv[32], dmodel[64], err[1024];
    snprintf(dpp, sizeof dpp, "pp=%d", pp); snprintf(dm, sizeof dm, "grad_accum=%d", m);
    snprintf(dv, sizeof dv, "virtual_stages=%d", v);
    snprintf(dmodel, sizeof dmodel, "model=%s", model);
    const char *defs[] = {dpp, dm, dv, dmodel, "tp=1", "micro_batch=1", "seq=16"};
    if (load(&run, "tiny-cola-pp2", defs, 7, 0)) return NULL;
    int status = 0;
    Graph *g = graph_build(&run, run.layout, run.checkpoint, err, sizeof err, &status);
    if (!g) { printf("FAIL - graph_build: %s\n", err); return NULL; }
    PpPlan *pl = pp_build(g, err, sizeof err);
    if (!pl) { printf("FAIL - pp_build: %s\n", err); graph_free(g); return NULL; }
    *gout = g;
    return pl;
}

static PpPlan *plan(int pp, int m, int v, Graph **gout) { return plan_of("tiny-cola-4l", pp, m, v, gout); }

static void release(PpPlan *pl, Graph *g) { pp_free(pl); graph_free(g); }

/* forward tf, backward tb on every virtual stage, transfer c on every boundary */
static int uniform(const PpPlan *pl, double tf, double tb, double c, PpTimeline *tl, char *err, size_t errlen) {
    double f[PP_MAX_STAGES], b[PP_MAX_STAGES], p[PP_MAX_STAGES];
    for (int k = 0; k < PP_MAX_STAGES; k++) { f[k] = tf; b[k] = tb; p[k] = c; }
    return pp_timeline(pl, f, b, p, tl, err, errlen);
}

/* Uniform stages, no transfer cost: the timeline is the formula, exactly (the times are small integers). */
static void formula_case(const char *model, int pp, int m, int v) {
    Graph *g = NULL;
    PpPlan *pl = plan_of(model, pp, m, v, &g);
    char name[160], err[512] = "";
    snprintf(name, sizeof name, "uniform_zero_p2p_equals_formula %s pp=%d m=%d v=%d", model, pp, m, v);
    if (!pl) { CHECK(0, name, "no plan"); return; }
    PpTimeline tl;
    int rc = uniform(pl, 1, 2, 0, &tl, err, sizeof err);
    double want = ((double)v * m + pp - 1) * 3;   /* (v m + pp - 1) steps of one chunk's forward + backward */
    CHECK(!rc && tl.seconds == want && pp_formula_seconds(3, 0, m, pp, v) == want, name, "rc %d %s: timeline %.17g, want %.17g",
          rc, err, tl.seconds, want);
    double bubble = (double)(pp - 1) / ((double)v * m + pp - 1);
    snprintf(name, sizeof name, "uniform_bubble_from_timeline %s pp=%d m=%d v=%d: (pp-1)/(v m+pp-1)", model, pp, m, v);
    int idle_ok = 1;
    for (int r = 0; r < pp; r++) idle_ok &= tl.busy_s[r] == 3.0 * m * v && tl.idle_s[r] == want - 3.0 * m * v;
    CHECK(!rc && close_abs(tl.bubble, bubble, 1e-12) && idle_ok, name, "bubble %.12f, want %.12f; idle per rank %s",
          tl.bubble, bubble, idle_ok ? "ok" : "wrong");
    release(pl, g);
}

int main(void) {
    formula_case("tiny-cola-4l", 2, 2, 1);
    formula_case("tiny-cola-4l", 2, 4, 1);
    formula_case("tiny-cola-4l", 2, 7, 1);
    formula_case("tiny-cola-4l", 4, 4, 1);
    formula_case("tiny-cola-4l", 4, 9, 1);
    formula_case("tiny-cola-4l", 2, 4, 2);   /* interleaved: 2 chunks of 1 layer per rank */
    formula_case("tiny-cola-4l", 2, 8, 2);
    formula_case("cola-llama-7b", 4, 8, 2);  /* 32 layers: 4 ranks x 2 chunks of 4 */
    formula_case("cola-llama-7b", 4, 12, 4);

    /* pp=2, m=2 by hand. The emitted steps: rank 0 F0 S0 F1 S1 R0 B0 R1 B1; rank 1 R0 F0 B0 S0 R1 F1 B1 S1. */
    Graph *g = NULL;
    PpPlan *pl = plan(2, 2, 1, &g);
    if (!pl) return 1;
    static const int want0[][2] = {{PS_FORWARD, 0}, {PS_SEND_FWD, 0}, {PS_FORWARD, 1}, {PS_SEND_FWD, 1},
                                   {PS_RECV_BWD, 0}, {PS_BACKWARD, 0}, {PS_RECV_BWD, 1}, {PS_BACKWARD, 1}};
    static const int want1[][2] = {{PS_RECV_FWD, 0}, {PS_FORWARD, 0}, {PS_BACKWARD, 0}, {PS_SEND_BWD, 0},
                                   {PS_RECV_FWD, 1}, {PS_FORWARD, 1}, {PS_BACKWARD, 1}, {PS_SEND_BWD, 1}};
    int order_ok = pl->stages[0].nsched == 8 && pl->stages[1].nsched == 8;
    for (int i = 0; i < 8 && order_ok; i++)
        order_ok = pl->stages[0].sched[i].kind == want0[i][0] && pl->stages[0].sched[i].micro == want0[i][1] &&
                   pl->stages[1].sched[i].kind == want1[i][0] && pl->stages[1].sched[i].micro == want1[i][1];
    CHECK(order_ok, "hand_2x2_emitted_order", "the emitted 1F1B steps of pp=2 m=2 are not the ones the hand timeline assumes");
    char err[512] = "";
    PpTimeline tl, tl0;
    /* tf 1, tb 2, transfer 0.25. rank 0: F0 [0,1] F1 [1,2]; rank 1: F0 [1.25,2.25] B0 [2.25,4.25]
       (gradient there at 4.5) F1 [4.25,5.25] B1 [5.25,7.25] (gradient at 7.5); rank 0: B0 [4.5,6.5]
       B1 [7.5,9.5]. 9.5 = 3 tf + 3 tb + 2 c; each rank computes 6 and idles 3.5. */
    int rc = uniform(pl, 1, 2, 0.25, &tl, err, sizeof err);
    CHECK(!rc && tl.seconds == 9.5 && tl.busy_s[0] == 6 && tl.busy_s[1] == 6 && tl.idle_s[0] == 3.5 && tl.idle_s[1] == 3.5 &&
          close_abs(tl.bubble, 7.0 / 19.0, 1e-15), "hand_2x2_timeline",
          "rc %d %s: %.17g s (want 9.5), busy %g %g, idle %g %g (want 3.5 each), bubble %.15f (want 7/19)", rc, err, tl.seconds,
          tl.busy_s[0], tl.busy_s[1], tl.idle_s[0], tl.idle_s[1], tl.bubble);
    /* the transfer cost: one forward and one backward hop on the critical path, so + 2c exactly */
    rc = uniform(pl, 1, 2, 0, &tl0, err, sizeof err) || uniform(pl, 1, 2, 0.125, &tl, err, sizeof err);
    CHECK(!rc && tl0.seconds == 9 && tl.seconds - tl0.seconds == 2 * 0.125, "p2p_cost_on_critical_path_2x2",
          "rc %d %s: %.17g s without transfers (want 9), %.17g with 0.125 (want + 0.25)", rc, err, tl0.seconds, tl.seconds);
    /* a transfer longer than a forward (tf = tb = 1, c = 3): the second forward transfer queues behind
       the first on the link. rank 0 F0 [0,1] F1 [1,2], transfers [1,4] and [4,7]; rank 1 F0 [4,5]
       B0 [5,6] (gradient [6,9]) F1 [7,8] B1 [8,9] (gradient [9,12]); rank 0 B0 [9,10] B1 [12,13] */
    rc = uniform(pl, 1, 1, 3, &tl, err, sizeof err);
    CHECK(!rc && tl.seconds == 13 && tl.wait_s[1] == 4 + 1, "p2p_slow_link_queues_hand_2x2",
          "rc %d %s: %.17g s (want 13), rank 1 waited %g (want 5)", rc, err, tl.seconds, tl.wait_s[1]);
    /* unequal stages, stage 1 twice stage 0 (tf 1/2, tb 2/4), no transfers: rank 1 F0 [1,3] B0 [3,7]
       F1 [7,9] B1 [9,13]; rank 0 B0 [7,9] B1 [13,15]: 15, above the formula with the mean stage
       (3 x 4.5 = 13.5) and below the one with the slowest (3 x 6 = 18) */
    {
        double f[2] = {1, 2}, b[2] = {2, 4}, p[1] = {0};
        rc = pp_timeline(pl, f, b, p, &tl, err, sizeof err);
        CHECK(!rc && tl.seconds == 15 && tl.seconds > pp_formula_seconds(4.5, 0, 2, 2, 1) &&
              tl.seconds < pp_formula_seconds(6, 0, 2, 2, 1) && tl.idle_s[0] == 9 && tl.idle_s[1] == 3,
              "unequal_stages_hand_2x2", "rc %d %s: %.17g s (want 15), idle %g %g (want 9, 3)", rc, err, tl.seconds,
              tl.idle_s[0], tl.idle_s[1]);
    }
    /* mutations: each is refused with the reason, never priced */
    PpStage *r0 = &pl->stages[0], *r1 = &pl->stages[1];
    PpSched keep = r0->sched[1];                        /* rank 0: wait for gradient 0 before sending activation 0 */
    r0->sched[1] = r0->sched[4]; r0->sched[4] = keep;
    rc = uniform(pl, 1, 2, 0.25, &tl, err, sizeof err);
    CHECK(rc && strstr(err, "deadlock"), "mutation_recv_before_send_is_deadlock", "rc %d: %s", rc, err);
    r0->sched[4] = r0->sched[1]; r0->sched[1] = keep;
    keep = r1->sched[0];                                /* rank 1: forward 0 before receiving its input */
    r1->sched[0] = r1->sched[1]; r1->sched[1] = keep;
    rc = uniform(pl, 1, 2, 0.25, &tl, err, sizeof err);
    CHECK(rc && strstr(err, "before receiving"), "mutation_compute_before_recv", "rc %d: %s", rc, err);
    r1->sched[1] = r1->sched[0]; r1->sched[0] = keep;
    r1->sched[0].micro = 1;                             /* rank 1 receives micro-batch 1 first */
    rc = uniform(pl, 1, 2, 0.25, &tl, err, sizeof err);
    CHECK(rc && strstr(err, "sent first"), "mutation_recv_wrong_micro_batch", "rc %d: %s", rc, err);
    r1->sched[0].micro = 0;
    r1->nsched--;                                       /* rank 1 drops its last send */
    rc = uniform(pl, 1, 2, 0.25, &tl, err, sizeof err);
    CHECK(rc && strstr(err, "deadlock"), "mutation_dropped_send_is_deadlock", "rc %d: %s", rc, err);
    r1->nsched++;
    rc = uniform(pl, 1, 2, 0.25, &tl, err, sizeof err);
    CHECK(!rc && tl.seconds == 9.5, "mutations_restored", "rc %d %s: %.17g s", rc, err, tl.seconds);
    release(pl, g);

    /* boost project at pp=2 (CoLA 7B shapes, short sequence; a100: 4-GPU nodes, so at tp=4 each stage is
       a node and the boundary crosses the network) */
    static Run run;
    CostConsts c;
    cost_consts_default(&c);
    Projection p;
    const char *d1[] = {"gpu=a100", "tp=4", "pp=2", "dp=1", "micro_batch=1", "seq=256", "grad_accum=1", "checkpoint=none"};
    if (load(&run, "cola-7b-tp4", d1, 8, 1)) return 1;
    err[0] = 0;
    rc = project_layout(&run, LAYOUT_BTP, &c, NULL, &p, err, sizeof err);
    /* one micro-batch (fewer than the stages: a projection allows it): forward down and backward up
       through both stages, one transfer each way: busy0 + busy1 + 2 x (bytes / (net x coll_eff) + alpha) */
    double bytes = 256.0 * (run.model.hidden / 4) * 2;
    double hop = bytes / (run.gpu.net_gbs * 1e9 * c.coll_eff) + run.gpu.net_latency_us * 1e-6;
    CHECK(!rc && p.pp_simulated && close_abs(p.pipeline_s, p.pp_busy_s[0] + p.pp_busy_s[1] + 2 * hop, 1e-12 * p.pipeline_s),
          "project_m1_sum_of_stages_plus_two_hops", "rc %d %s: simulated %d, %.9g s, want %.9g + %.9g + 2 x %.9g", rc, err,
          p.pp_simulated, p.pipeline_s, p.pp_busy_s[0], p.pp_busy_s[1], hop);
    CHECK(!rc && close_abs(p.seconds, p.pipeline_s + p.optim_s + p.dp_comm_s, 1e-12 * p.seconds) &&
          close_abs(p.seconds_formula, p.pipeline_formula_s + p.optim_s + p.dp_comm_s, 1e-12 * p.seconds) &&
          p.bubble_formula == 0.5, "project_fields", "seconds %g formula %g bubble_formula %g", p.seconds, p.seconds_formula,
          p.bubble_formula);

    /* pp=4 on 8-GPU nodes (h100), tp=4: ranks 0-1 share node 0 and 2-3 node 1, so boundaries 0 and 2
       are NVLink and boundary 1 the network; one micro-batch: the stages' sum plus each boundary's
       hop both ways */
    const char *d8[] = {"gpu=h100", "tp=4", "pp=4", "dp=1", "micro_batch=1", "seq=256", "grad_accum=1", "checkpoint=none"};
    if (load(&run, "cola-7b-tp4", d8, 8, 1)) return 1;
    err[0] = 0;
    rc = project_layout(&run, LAYOUT_BTP, &c, NULL, &p, err, sizeof err);
    {
        double nv_hop = bytes / (run.gpu.nvlink_gbs * 1e9 * c.coll_eff) + run.gpu.nvlink_latency_us * 1e-6;
        double net_hop = bytes / (run.gpu.net_gbs * 1e9 * c.coll_eff) + run.gpu.net_latency_us * 1e-6;
        double busy = p.pp_busy_s[0] + p.pp_busy_s[1] + p.pp_busy_s[2] + p.pp_busy_s[3];
        double want = busy + 2 * (2 * nv_hop + net_hop);
        CHECK(!rc && run.gpu.gpus_per_node == 8 && p.pp_simulated && close_abs(p.pipeline_s, want, 1e-12 * want),
              "project_pp4_links_per_boundary", "rc %d %s: %.12g s, want stages %.12g + 2 x (2 x %.6g NVLink + %.6g network)",
              rc, err, p.pipeline_s, busy, nv_hop, net_hop);
    }

    /* an explicit unequal split (8 + 24 of the 32 layers): the formula with the mean stage undercounts */
    const char *d4[] = {"gpu=a100", "tp=4", "pp=2", "dp=1", "micro_batch=1", "seq=256", "grad_accum=4", "checkpoint=none"};
    if (load(&run, "cola-7b-tp4", d4, 8, 1)) return 1;
    Projection even, skew;
    rc = project_layout(&run, LAYOUT_BTP, &c, NULL, &even, err, sizeof err);
    run.pp_nstages = 2; run.pp_stages[0] = 8; run.pp_stages[1] = 24;
    rc = rc || project_layout(&run, LAYOUT_BTP, &c, NULL, &skew, err, sizeof err);
    double m = 4, mean = (skew.pp_busy_s[0] + skew.pp_busy_s[1]) / (2 * m), slow = skew.pp_busy_s[1] / m;
    double formula_mean = pp_formula_seconds(mean, hop, 4, 2, 1);
    CHECK(!rc && skew.pp_simulated && skew.pipeline_s > formula_mean * 1.2 && skew.pipeline_s >= m * slow &&
          skew.pp_busy_s[1] > 2.5 * skew.pp_busy_s[0], "unequal_split_longer_than_mean_formula",
          "rc %d %s: timeline %.6g s, formula with the mean stage %.6g s, slowest stage x m %.6g s, busy %g / %g", rc, err,
          skew.pipeline_s, formula_mean, m * slow, skew.pp_busy_s[0], skew.pp_busy_s[1]);
    CHECK(!rc && skew.seconds > even.seconds && even.bubble < skew.bubble, "unequal_split_slower_than_balanced",
          "balanced %.6g s (bubble %.4f), 8+24 %.6g s (bubble %.4f)", even.seconds, even.bubble, skew.seconds, skew.bubble);
    /* MoE splits into stages too (each stage's aux terms join the loss): a timeline, not the formula,
       and its bubble no smaller than the formula's (the stages are not perfectly even) */
    const char *dm[] = {"model=tiny-cola-moe", "pp=2", "grad_accum=4", "tp=1", "micro_batch=1", "seq=16"};
    if (load(&run, "tiny-cola-pp2", dm, 6, 1)) return 1;
    err[0] = 0;
    rc = project_layout(&run, LAYOUT_BTP, &c, NULL, &p, err, sizeof err);
    CHECK(!rc && p.pp_simulated && p.pipeline_s > 0 && p.pipeline_s >= p.pp_busy_s[0] && p.pipeline_s >= p.pp_busy_s[1] &&
          p.bubble >= p.bubble_formula - 1e-9 && p.bubble < 1, "moe_pp2_priced_by_timeline",
          "rc %d %s: simulated %d, %g s (busy %g / %g), bubble %g vs formula %g, note '%s'", rc, err, p.pp_simulated,
          p.pipeline_s, p.pp_busy_s[0], p.pp_busy_s[1], p.bubble, p.bubble_formula, p.pp_note);
    TEST_EXIT();
}
