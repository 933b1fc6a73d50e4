/* test_project_model.c: the cost model's formulas against their closed forms and sanity laws
 * (docs/cost-model.md): ring all-reduce alpha-beta, pipeline bubble, GEMM roofline, the shape-
 * dependent efficiency, and measured GEMM rates read from a results file. No schedule needed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gen/project.h"
#include "tests/unit/testlib.h"

static int close_rel(double a, double b, double tol) { return fabs(a - b) <= tol * fmax(fabs(a), fabs(b)); }

static Gpu test_gpu(void) {
    Gpu g;
    memset(&g, 0, sizeof g);
    strcpy(g.name, "testgpu");
    g.bf16_tflops = 300; g.hbm_gbs = 2000; g.nvlink_gbs = 200; g.net_gbs = 25;
    g.nvlink_latency_us = 5; g.net_latency_us = 10; g.gpus_per_node = 4;
    return g;
}

int main(void) {
    CostConsts c;
    cost_consts_default(&c);
    Gpu g = test_gpu();

    /* all-reduce: t=1 costs nothing; t=2: 2*(1/2) * bytes/bw + 2 alpha; t=4: 1.5 bytes/bw + 6 alpha */
    CHECK(allreduce_seconds(1e9, 1, 200, 5) == 0, "allreduce_tp1_free", "got %g", allreduce_seconds(1e9, 1, 200, 5));
    CHECK(close_rel(allreduce_seconds(1e9, 2, 200, 5), 1e9 / 200e9 + 10e-6, 1e-12), "allreduce_tp2_closed_form",
          "got %g", allreduce_seconds(1e9, 2, 200, 5));
    CHECK(close_rel(allreduce_seconds(4e8, 4, 100, 3), 1.5 * 4e8 / 100e9 + 18e-6, 1e-12), "allreduce_tp4_closed_form",
          "got %g", allreduce_seconds(4e8, 4, 100, 3));
    CHECK(close_rel(allgather_seconds(4e8, 4, 100, 3), 0.75 * 4e8 / 100e9 + 9e-6, 1e-12), "allgather_tp4_closed_form",
          "got %g", allgather_seconds(4e8, 4, 100, 3));
    /* more bandwidth -> less time; more latency -> more time; more ranks -> more time per byte */
    int mono = 1;
    for (double bw = 10; bw < 1000; bw *= 1.5)
        mono &= allreduce_seconds(1e8, 4, bw * 1.5, 5) < allreduce_seconds(1e8, 4, bw, 5);
    CHECK(mono, "allreduce_bandwidth_monotone", "time did not fall with bandwidth");
    CHECK(allreduce_seconds(1e6, 4, 200, 10) > allreduce_seconds(1e6, 4, 200, 5), "allreduce_latency_monotone", "");
    CHECK(allreduce_seconds(1e8, 8, 200, 5) > allreduce_seconds(1e8, 4, 200, 5), "allreduce_ranks_monotone", "");

    /* links: tp within a node uses NVLink, beyond it the network; pp crosses nodes past 4 GPUs */
    double bw, al;
    tp_link(&g, 4, &bw, &al);
    CHECK(bw == 200 && al == 5, "tp_link_nvlink_in_node", "bw %g alpha %g", bw, al);
    tp_link(&g, 8, &bw, &al);
    CHECK(bw == 25 && al == 10, "tp_link_network_across_nodes", "bw %g alpha %g", bw, al);
    pp_link(&g, 4, 2, &bw, &al);
    CHECK(bw == 25, "pp_link_network_across_nodes", "bw %g", bw);
    pp_link(&g, 2, 2, &bw, &al);
    CHECK(bw == 200, "pp_link_nvlink_in_node", "bw %g", bw);

    /* pipeline: bubble (pp-1)/(m+pp-1): busy share m/(m+pp-1) of the total */
    double stage = 0.5;
    double tot = pipeline_seconds(stage, 0, 6, 3);
    CHECK(close_rel(tot, 8 * 0.5, 1e-12), "pipeline_bubble_closed_form", "got %g want 4", tot);
    CHECK(close_rel(1 - 6 * stage / tot, 2.0 / 8.0, 1e-12), "pipeline_bubble_fraction", "got %g", 1 - 6 * stage / tot);
    CHECK(pipeline_seconds(stage, 0, 6, 1) == 3.0, "pipeline_pp1_no_bubble", "got %g", pipeline_seconds(stage, 0, 6, 1));
    CHECK(close_rel(pipeline_seconds(stage, 0.01, 1, 2), 2 * 0.52, 1e-12), "pipeline_send_on_path", "got %g",
          pipeline_seconds(stage, 0.01, 1, 2));

    /* efficiency: in (0, eff_max), rising in each dimension, falling for small k or n */
    double e_big = gemm_eff_model(&c, 16384, 4096, 4096), e_k256 = gemm_eff_model(&c, 16384, 4096, 256);
    double e_n256 = gemm_eff_model(&c, 16384, 256, 4096);
    CHECK(e_big < c.gemm_eff_max && e_big > 0.9 * c.gemm_eff_max, "gemm_eff_large_near_max", "got %g", e_big);
    CHECK(e_k256 < e_big && e_n256 < e_big, "gemm_eff_falls_small_k_n", "k256 %g n256 %g big %g", e_k256, e_n256, e_big);
    CHECK(close_rel(gemm_eff_model(&c, 1e12, 1e12, c.gemm_half_dim), c.gemm_eff_max / 2, 1e-6), "gemm_eff_half_dim",
          "a dimension of gemm_half_dim should halve the efficiency");

    /* GEMM roofline: a large square GEMM is compute bound: 2mnk/(peak*eff) + launch */
    double m = 8192, n = 8192, k = 8192;
    double want = 2 * m * n * k / (300e12 * gemm_eff_model(&c, m, n, k)) + c.launch_us * 1e-6;
    CHECK(close_rel(gemm_seconds(&c, NULL, &g, m, n, k, 1), want, 1e-12), "gemm_compute_bound", "got %g want %g",
          gemm_seconds(&c, NULL, &g, m, n, k, 1), want);
    /* a matrix-vector product is bandwidth bound: bytes/HBM */
    want = 2 * (m * k + k * 1 + m * 1) / 2000e9 + c.launch_us * 1e-6;
    CHECK(close_rel(gemm_seconds(&c, NULL, &g, m, 1, k, 1), want, 1e-12), "gemm_memory_bound", "got %g want %g",
          gemm_seconds(&c, NULL, &g, m, 1, k, 1), want);
    CHECK(close_rel(gemm_seconds(&c, NULL, &g, 4096, 1024, 1024, 3) - c.launch_us * 1e-6,
                    3 * (gemm_seconds(&c, NULL, &g, 4096, 1024, 1024, 1) - c.launch_us * 1e-6), 1e-12),
          "gemm_batch_linear", "a batch of 3 should cost 3 GEMMs plus one launch");
    CHECK(close_rel(hbm_seconds(&c, &g, 1.6e9), 1.6e9 / (2000e9 * 0.8) + c.launch_us * 1e-6, 1e-12), "hbm_closed_form", "");

    /* measured rates: a results file with one row for this GPU rescales the model so that the
       measured shape gets exactly its measured efficiency, and leaves other GPUs alone */
    char dir[] = "/tmp/boost-rates.XXXXXX";
    if (!mkdtemp(dir)) { printf("FAIL - rates_fixture: mkdtemp\n"); return 1; }
    char path[256];
    snprintf(path, sizeof path, "%s/2026-01-01-test.md", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "# results\n| kind | gpu | m | n | k | tflops |\n|---|---|---|---|---|---|\n"
               "| gemm | testgpu | 16384 | 1024 | 1024 | 150 |\n| gemm | othergpu | 16384 | 1024 | 1024 | 10 |\n");
    fclose(f);
    GemmRates rates;
    char err[512] = "";
    int rc = gemm_rates_load(&rates, dir, err, sizeof err);
    CHECK(rc == 0 && rates.n == 2 && rates.files == 1, "rates_load", "rc %d rows %d files %d %s", rc, rates.n, rates.files, err);
    int measured = 0;
    double e = gemm_eff(&c, &rates, &g, 16384, 1024, 1024, &measured);
    CHECK(measured && close_rel(e, 0.5, 1e-12), "rates_exact_at_measured_shape", "eff %g measured %d", e, measured);
    double e2 = gemm_eff(&c, &rates, &g, 16384, 1024, 256, &measured);
    CHECK(close_rel(e2 / e, gemm_eff_model(&c, 16384, 1024, 256) / gemm_eff_model(&c, 16384, 1024, 1024), 1e-12),
          "rates_scale_model_elsewhere", "eff %g", e2);
    Gpu other = g;
    strcpy(other.name, "thirdgpu");
    gemm_eff(&c, &rates, &other, 16384, 1024, 1024, &measured);
    CHECK(!measured, "rates_only_same_gpu", "a rate of another GPU was used");
    gemm_rates_free(&rates);
    /* a malformed row is an error with file:line */
    f = fopen(path, "a");
    fprintf(f, "| gemm | testgpu | 0 | 1 | 1 | 5 |\n");
    fclose(f);
    rc = gemm_rates_load(&rates, dir, err, sizeof err);
    CHECK(rc == 1 && strstr(err, ":6:"), "rates_bad_row_file_line", "rc %d err '%s'", rc, err);
    gemm_rates_free(&rates);
    rc = gemm_rates_load(&rates, "/nonexistent/results", err, sizeof err);
    CHECK(rc == 0 && rates.n == 0, "rates_missing_dir_is_model", "rc %d", rc);
    unlink(path);
    rmdir(dir);
    TEST_EXIT();
}
