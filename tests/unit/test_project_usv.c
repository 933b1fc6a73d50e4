/* test_project_usv.c: the cost model counts usv's r x r core (U S V^T: A, sigma, S, B). For btp
 * without recompute, the GEMM FLOPs per GPU of one iteration equal the closed form derived by hand
 *   3 x 2M x [ L x sum_p ( r (d_in,p + d_out,p) / tp + r^2 ) + d V / tp ]
 * (forward, and backward = twice the forward; A row-parallel, B column-parallel, S whole on every
 * rank; the LM head column-parallel over the vocabulary; M tokens per micro-batch) and the local
 * parameters equal
 *   L x [ sum_p ( r (d_in,p + d_out,p) / tp + r^2 ) + 2 d / tp ] + 2 V d / tp + d
 * (norms sharded over tp, the final norm whole). Checked on tiny-usv at tp=1 and tp=2 and on the
 * cola-7b shapes made usv at tp=4; the core's share is the difference to the same model as svd.
 * The planner searches usv in btp alone (naive, which the row does not split, is not enumerated:
 * no candidate the generator refuses). */
#include <math.h>
#include <string.h>
#include "gen/factor.h"
#include "gen/gen.h"
#include "gen/planner.h"
#include "gen/project.h"
#include "tests/unit/testlib.h"

static int close_rel(double a, double b, double tol) {
    return fabs(a - b) <= tol * fmax(fabs(a), fabs(b));
}

/* The run spec at tp, pp = dp = 1, one micro-batch, no activation checkpointing; seq > 0: at that
 * sequence length. 0, or 1 with a FAIL line. */
static int load(Run *run, const char *spec, int tp, int seq) {
    char err[1024];
    if (spec_load_run(spec, NULL, 0, run, err, sizeof err)) {
        printf("FAIL - load_%s: %s\n", spec, err);
        return 1;
    }
    run->tp = tp;
    run->pp = run->dp = run->grad_accum = 1;
    run->checkpoint = CKPT_NONE;
    run->layout = LAYOUT_BTP;
    if (seq > 0) {
        run->seq = seq;
        run->micro_batch = 1;
    }
    return 0;
}

/* sum over the projections of r (d_in + d_out) and of r^2 (the cores), layer 0 */
static void proj_sums(const Model *m, double *outer, double *core) {
    double d = m->hidden, dkv = (double)m->kv_heads * m->head_dim, ff = m->ffn;
    double din[NPROJ], dout[NPROJ];
    din[PROJ_Q] = d; dout[PROJ_Q] = d;
    din[PROJ_K] = d; dout[PROJ_K] = dkv;
    din[PROJ_V] = d; dout[PROJ_V] = dkv;
    din[PROJ_O] = d; dout[PROJ_O] = d;
    din[PROJ_GATE] = d; dout[PROJ_GATE] = ff;
    din[PROJ_UP] = d; dout[PROJ_UP] = ff;
    din[PROJ_DOWN] = ff; dout[PROJ_DOWN] = d;
    *outer = *core = 0;
    for (int p = 0; p < NPROJ; p++) {
        double r = m->proj[0][p].rank;
        *outer += r * (din[p] + dout[p]);
        *core += r * r;
    }
}

/* Project run's btp layout and check it against the closed forms; with_core: usv (else svd). */
static void check(const Run *run, const char *label, int with_core, Projection *out) {
    CostConsts c;
    cost_consts_default(&c);
    char err[1024], name[160];
    int rc = project_layout(run, LAYOUT_BTP, &c, NULL, out, err, sizeof err);
    const Model *m = &run->model;
    double tp = run->tp, M = (double)run->micro_batch * run->seq, L = m->layers, d = m->hidden;
    double V = m->vocab, outer, core;
    proj_sums(m, &outer, &core);
    if (!with_core) core = 0;
    double flops = 3 * 2 * M * (L * (outer / tp + core) + d * V / tp);
    double params = L * (outer / tp + core + 2 * d / tp) + 2 * V * d / tp + d;
    snprintf(name, sizeof name, "usv_core_flops_%s", label);
    CHECK(!rc && close_rel(out->gemm_flops, flops, 1e-12), name,
          "rc %d %s; schedule %.10g, closed form %.10g", rc, rc ? err : "", out->gemm_flops, flops);
    snprintf(name, sizeof name, "usv_core_params_%s", label);
    CHECK(!rc && close_rel(out->params_local, params, 1e-12), name,
          "schedule %.10g, closed form %.10g", out->params_local, params);
}

int main(void) {
    static Run run;
    Projection usv, svd;
    if (load(&run, "tiny-usv", 1, 0)) return 1;
    check(&run, "tiny_usv_tp1", 1, &usv);
    if (load(&run, "tiny-usv", 2, 0)) return 1;
    check(&run, "tiny_usv_tp2", 1, &usv);

    /* the cola-7b shapes (seq 256, one micro-batch) as usv and as svd at the same ranks, tp=4 */
    if (load(&run, "cola-7b-tp4", 4, 256)) return 1;
    int rank = run.model.proj[0][PROJ_Q].rank;
    factorization_apply(factorization_find("usv"), &run.model, rank);
    check(&run, "7b_shapes_tp4", 1, &usv);
    factorization_apply(factorization_find("svd"), &run.model, rank);
    check(&run, "7b_shapes_as_svd_tp4", 0, &svd);
    /* the core's share alone: 3 x 2M x L x 7 r^2 FLOPs, L x 7 r^2 parameters on every rank */
    double M = 256, L = run.model.layers, r = rank;
    CHECK(close_rel(usv.gemm_flops - svd.gemm_flops, 6 * M * L * NPROJ * r * r, 1e-9),
          "usv_core_flops_share", "usv - svd %.10g, 6 M L 7 r^2 %.10g",
          usv.gemm_flops - svd.gemm_flops, 6 * M * L * NPROJ * r * r);
    CHECK(usv.params_local - svd.params_local == L * NPROJ * r * r, "usv_core_params_share",
          "usv - svd %.10g, L 7 r^2 %.10g", usv.params_local - svd.params_local, L * NPROJ * r * r);

    /* boost plan tiny-usv on 2 GPUs of a 4-GPU node, 16 sequences of 64 tokens, by brute force */
    PlanOpts o;
    CostConsts c;
    PlanResult res;
    char err[1024];
    if (load(&run, "tiny-usv", 1, 64)) return 1;
    run.gpu.gpus_per_node = 4;
    run.seq = 64;
    planner_opts_default(&o);
    o.gpus = 2;
    o.global_tokens = 16 * 64;
    o.brute = 1;
    o.workspace_bytes = 0;
    cost_consts_default(&c);
    int rc = planner_search(&run, &o, &c, NULL, &res, err, sizeof err), naive = 0;
    for (int i = 0; !rc && i < res.n; i++) naive += res.c[i].layout == LAYOUT_NAIVE;
    CHECK(rc == 0 && res.n > 0 && naive == 0 && res.invalid == 0 && res.nbest > 0,
          "planner_usv_btp_only", "rc %d (%s): %d candidates, %d naive, %d refused, %d best",
          rc, rc ? err : "", rc ? 0 : res.n, naive, rc ? 0 : res.invalid, rc ? 0 : res.nbest);
    if (!rc) planner_free(&res);
    TEST_EXIT();
}
