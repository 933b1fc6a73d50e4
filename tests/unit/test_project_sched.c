/* test_project_sched.c: the cost model over the generator's real schedule (project_layout):
 * GEMM FLOPs equal 6 x tokens x matmul parameters (closed form, every layout), compute + comm =
 * the iteration, more NVLink bandwidth -> less communication, naive communicates more than btp at
 * r = d/4, tp=1 communicates nothing, naive's attention is replicated over the tp ranks, the
 * pipeline's bubble (formula and emitted schedule's timeline) and stage split, recompute without
 * communication. */
#include <math.h>
#include <string.h>
#include "gen/gen.h"
#include "gen/project.h"
#include "tests/unit/testlib.h"

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)); }

static int load(Run *run, const char *spec, const char *const *defs, int ndefs) {
    Override ov[16];
    char err[1024];
    int n = 0;
    for (int i = 0; i < ndefs; i++) {
        int k = parse_override(defs[i], &ov[n], err, sizeof err);
        if (k < 0) { printf("FAIL - load_%s: %s\n", spec, err); return 1; }
        n += k;
    }
    int rc = spec_load_run(spec, ov, n, run, err, sizeof err);
    if (rc) printf("FAIL - load_%s: %s\n", spec, err);
    return rc;
}

static int project3(const Run *run, Projection p[3], const GemmRates *rates) {
    CostConsts c;
    cost_consts_default(&c);
    char err[1024];
    int layouts[3] = {LAYOUT_MEGATRON, LAYOUT_NAIVE, LAYOUT_BTP};
    for (int i = 0; i < 3; i++) {
        int rc = project_layout(run, layouts[i], &c, rates, &p[i], err, sizeof err);
        if (rc) { printf("FAIL - project_%s: %s\n", layout_name(layouts[i]), err); return rc; }
    }
    return 0;
}

int main(void) {
    static Run run, run2;
    Projection p[3], q[3];
    const char *names[3] = {"megatron", "naive", "btp"};
    char name[96];

    /* CoLA 7B shapes at a small sequence so the test stays quick */
    const char *d_tp1[] = {"tp=1", "pp=1", "micro_batch=1", "seq=256", "grad_accum=1", "checkpoint=none"};
    if (load(&run, "cola-7b-tp4", d_tp1, 6) || project3(&run, p, NULL)) return 1;
    const Model *m = &run.model;
    double d = m->hidden, ff = m->ffn, r = m->proj[0][PROJ_Q].rank, V = m->vocab, L = m->layers, M = 256;
    /* forward + backward GEMMs = 3 x forward = 6 x M x (matmul parameters); the LM head included */
    double full_params = L * (4 * d * d + 3 * d * ff) + d * V;
    double low_params = L * (8 * d * r + 3 * r * (d + ff)) + d * V;
    CHECK(close_rel(p[0].gemm_flops, 6 * M * full_params, 1e-9), "flops_megatron_6MN",
          "schedule %.6g, closed form %.6g", p[0].gemm_flops, 6 * M * full_params);
    CHECK(close_rel(p[1].gemm_flops, 6 * M * low_params, 1e-9), "flops_naive_6MN",
          "schedule %.6g, closed form %.6g", p[1].gemm_flops, 6 * M * low_params);
    CHECK(close_rel(p[2].gemm_flops, 6 * M * low_params, 1e-9), "flops_btp_6MN",
          "schedule %.6g, closed form %.6g", p[2].gemm_flops, 6 * M * low_params);
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "tp1_no_comm_%s", names[i]);
        CHECK(p[i].comm_s == 0, name, "comm %g s at tp=1", p[i].comm_s);
        snprintf(name, sizeof name, "parts_sum_%s", names[i]);
        CHECK(close_rel(p[i].compute_s + p[i].comm_s, p[i].seconds, 1e-12) && p[i].seconds > 0, name,
              "compute %g + comm %g != %g", p[i].compute_s, p[i].comm_s, p[i].seconds);
    }
    CHECK(p[2].seconds < p[0].seconds, "lowrank_faster_than_full_tp1", "btp %g s, megatron %g s", p[2].seconds, p[0].seconds);

    /* tp=4 on one node */
    const char *d_tp4[] = {"tp=4", "pp=1", "micro_batch=1", "seq=256", "grad_accum=1", "checkpoint=none"};
    if (load(&run, "cola-7b-tp4", d_tp4, 6) || project3(&run, p, NULL)) return 1;
    CHECK(p[1].comm_s > p[2].comm_s, "naive_comm_above_btp", "naive %g s, btp %g s", p[1].comm_s, p[2].comm_s);
    CHECK(p[1].tp_bytes_fwd > 5 * p[2].tp_bytes_fwd, "naive_bytes_5x_btp", "naive %g B, btp %g B",
          p[1].tp_bytes_fwd, p[2].tp_bytes_fwd);
    CHECK(close_rel(p[2].gemm_flops * 4, 6 * M * low_params, 1e-9), "flops_btp_split_by_tp",
          "per GPU %.6g, a quarter of %.6g expected", p[2].gemm_flops, 6 * M * low_params);
    /* attention: megatron and btp run the local heads (h/t), naive runs all heads on every GPU */
    CHECK(close_rel(p[0].attn_s, p[2].attn_s, 1e-12), "attention_megatron_equals_btp", "megatron %g s, btp %g s",
          p[0].attn_s, p[2].attn_s);
    {   /* FLOPs and bytes both scale by t, so apart from the 2 launches per layer it is exactly 4x */
        CostConsts c;
        cost_consts_default(&c);
        double launches = 2 * L * c.launch_us * 1e-6;
        CHECK(close_rel(p[1].attn_s - launches, 4 * (p[2].attn_s - launches), 1e-9), "attention_naive_replicated_x_tp",
              "naive %g s, 4 x btp %g s (launches %g s)", p[1].attn_s, 4 * p[2].attn_s, launches);
    }
    /* more NVLink bandwidth -> less communication, same compute */
    run2 = run;
    run2.gpu.nvlink_gbs = run.gpu.nvlink_gbs * 2;
    if (project3(&run2, q, NULL)) return 1;
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "bandwidth_monotone_%s", names[i]);
        CHECK(q[i].comm_s < p[i].comm_s && close_rel(q[i].compute_s, p[i].compute_s, 1e-12), name,
              "comm %g -> %g s, compute %g -> %g s", p[i].comm_s, q[i].comm_s, p[i].compute_s, q[i].compute_s);
    }
    /* more latency -> more communication */
    run2 = run;
    run2.gpu.nvlink_latency_us = run.gpu.nvlink_latency_us + 50;
    if (project3(&run2, q, NULL)) return 1;
    CHECK(q[2].comm_s > p[2].comm_s && q[1].comm_s - p[1].comm_s > q[2].comm_s - p[2].comm_s,
          "latency_hurts_more_collectives", "naive +%g s, btp +%g s (naive has more collectives)",
          q[1].comm_s - p[1].comm_s, q[2].comm_s - p[2].comm_s);
    /* a faster GPU computes faster */
    run2 = run;
    run2.gpu.bf16_tflops = run.gpu.bf16_tflops * 2;
    run2.gpu.hbm_gbs = run.gpu.hbm_gbs * 2;
    if (project3(&run2, q, NULL)) return 1;
    CHECK(q[2].compute_s < p[2].compute_s && q[2].comm_s == p[2].comm_s, "peak_monotone",
          "compute %g -> %g s", p[2].compute_s, q[2].compute_s);

    /* pipeline: pp=2 with 3 micro-batches: bubble 1/4, each stage has half the layers */
    const char *d_pp[] = {"tp=4", "pp=2", "micro_batch=1", "seq=256", "grad_accum=3", "checkpoint=none"};
    if (load(&run2, "cola-7b-tp4", d_pp, 6) || project3(&run2, q, NULL)) return 1;
    CHECK(close_rel(q[2].bubble_formula, 0.25, 1e-12), "pipeline_bubble", "formula's bubble %g, want (pp-1)/(m+pp-1) = 0.25",
          q[2].bubble_formula);
    /* the emitted schedule's timeline: stages of unequal cost (embedding, head) and transfers only add idle */
    CHECK(q[2].pp_simulated && q[2].bubble >= 0.25 - 1e-12 && q[2].bubble < 0.5, "pipeline_bubble_timeline",
          "simulated %d, bubble %g (want at least the formula's 0.25)", q[2].pp_simulated, q[2].bubble);
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "pipeline_parts_sum_%s", names[i]);
        CHECK(close_rel(q[i].compute_s + q[i].comm_s, q[i].seconds, 1e-12), name, "compute %g + comm %g != %g",
              q[i].compute_s, q[i].comm_s, q[i].seconds);
    }
    CHECK(q[2].stage_s < 0.6 * p[2].stage_s && q[2].stage_s > 0.4 * p[2].stage_s, "pipeline_half_layers",
          "stage %g s vs the whole model %g s", q[2].stage_s, p[2].stage_s);
    CHECK(q[2].pp_send_s > 0 && q[1].pp_send_s > q[2].pp_send_s, "pipeline_send_btp_sharded",
          "sends: naive %g s, btp %g s (btp sends d/t)", q[1].pp_send_s, q[2].pp_send_s);

    /* low-rank checkpointing adds recompute to btp and no communication */
    const char *d_ck[] = {"tp=4", "pp=1", "micro_batch=1", "seq=256", "grad_accum=1", "checkpoint=lowrank"};
    if (load(&run2, "cola-7b-tp4", d_ck, 6) || project3(&run2, q, NULL)) return 1;
    CHECK(q[2].recompute_s > 0 && close_rel(q[2].tp_comm_s, p[2].tp_comm_s, 1e-12), "checkpoint_recompute_no_comm",
          "recompute %g s, comm %g vs %g s", q[2].recompute_s, q[2].tp_comm_s, p[2].tp_comm_s);
    TEST_EXIT();
}
