/* test_planner.c: `boost plan`'s search (gen/planner.c) on toy models and small grids: the pruned
 * search picks the same best candidate as pricing every candidate (brute force), with memory
 * tight enough that some candidates do not fit; every closed-form bound is below what the generator
 * and the cost model give; a GPU count with no grid is refused with counts that work; nothing
 * fitting leaves no winner; the winner written as a run spec loads and prices to the same time;
 * cluster specs load and override the GPU file's figures, and a bad one is refused at its line; the
 * dp reduction of a pipelined run is priced on each stage's own gradients; ZeRO-2 is searched and
 * priced per backend (on cuda at grad_accum 1 and pp 1 only, with its live full-size gradients
 * and its dp reduction unhidden). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gen/dp.h"
#include "gen/gen.h"
#include "gen/planner.h"
#include "gen/project.h"
#include "gen/pipeline.h"
#include "tests/unit/testlib.h"

static int load(Run *run, const char *spec) {
    char err[1024];
    int rc = spec_load_run_projection(spec, NULL, 0, run, err, sizeof err);
    if (rc) printf("FAIL - load_%s: %s\n", spec, err);
    return rc;
}

/* A toy run on nodes of 4 GPUs, 16 sequences of 64 tokens per step, no workspace. */
static void setup(Run *run, PlanOpts *o, int gpus) {
    run->gpu.gpus_per_node = 4;
    run->seq = 64;
    planner_opts_default(o);
    o->gpus = gpus;
    o->global_tokens = 16 * 64;
    o->top = 1;
    o->workspace_bytes = 0;
}

/* A toy run (setup for `gpus` GPUs) and the default cost constants; NULL when the spec does not
 * load (a FAIL line says so). */
static Run *toy(const char *spec, int gpus, PlanOpts *o, CostConsts *c) {
    Run *run = malloc(sizeof *run);
    if (!run || load(run, spec)) {
        free(run);
        return NULL;
    }
    setup(run, o, gpus);
    cost_consts_default(c);
    return run;
}

/* The median memory of all priced candidates (brute force), as the GPU's capacity: about half fit.
 */
static double median_mem(const PlanResult *r) {
    double *m = malloc(r->n * sizeof *m);
    int n = 0;
    for (int i = 0; i < r->n; i++)
        if (r->c[i].state == PC_FITS || r->c[i].state == PC_TOO_BIG) m[n++] = r->c[i].mem_bytes;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && m[j] < m[j - 1]; j--) {
            double t = m[j];
            m[j] = m[j - 1];
            m[j - 1] = t;
        }
    double med = n ? m[n / 2] : 0;
    free(m);
    return med;
}

static void pruned_vs_brute(const char *spec, int gpus) {
    PlanOpts o;
    CostConsts c;
    Run *run = toy(spec, gpus, &o, &c);
    if (!run) return;
    char name[160], err[1024];
    PlanResult all, pruned;
    o.brute = 1;
    int rc = planner_search(run, &o, &c, NULL, &all, err, sizeof err);
    snprintf(name, sizeof name, "brute_%s_%d", spec, gpus);
    CHECK(rc == 0 && all.generated == all.n - all.invalid, name, "rc %d (%s), %d priced of %d", rc,
          err, all.generated, all.n);
    if (rc) {
        free(run);
        return;
    }
    run->gpu.memory_gb = median_mem(&all) / 1073741824.0; /* then some candidates do not fit */
    planner_free(&all);
    planner_search(run, &o, &c, NULL, &all, err, sizeof err);
    o.brute = 0;
    rc = planner_search(run, &o, &c, NULL, &pruned, err, sizeof err);
    int lb_ok = 1, mem_ok = 1;
    for (int i = 0; i < all.n; i++) {
        const PlanCand *x = &all.c[i];
        if (x->state != PC_FITS && x->state != PC_TOO_BIG) continue;
        if (x->lb_s > x->seconds) {
            lb_ok = 0;
            printf("# time bound %.6g above %.6g: tp%d pp%d v%d dp%d mb%d ga%d\n", x->lb_s,
                   x->seconds, x->tp, x->pp, x->v, x->dp, x->mb, x->ga);
        }
        if (x->mem_lb > x->mem_bytes) {
            mem_ok = 0;
            printf("# memory bound %.6g above %.6g: tp%d pp%d v%d mb%d\n", x->mem_lb, x->mem_bytes,
                   x->tp, x->pp, x->v, x->mb);
        }
    }
    snprintf(name, sizeof name, "time_bounds_below_priced_%s_%d", spec, gpus);
    CHECK(lb_ok, name, "a closed-form time bound is above the priced time (lines above)");
    snprintf(name, sizeof name, "memory_bounds_below_priced_%s_%d", spec, gpus);
    CHECK(mem_ok, name, "a closed-form memory bound is above the generated memory (lines above)");
    snprintf(name, sizeof name, "some_fit_some_not_%s_%d", spec, gpus);
    CHECK(all.too_big > 0 && all.nbest > 0, name, "%d too big, %d best", all.too_big, all.nbest);
    snprintf(name, sizeof name, "pruned_equals_brute_%s_%d", spec, gpus);
    CHECK(rc == 0 && pruned.nbest == 1 && all.nbest == 1 && pruned.best[0] == all.best[0], name,
          "pruned best %d (%.6g s), brute best %d (%.6g s)", pruned.nbest ? pruned.best[0] : -1,
          pruned.nbest ? pruned.c[pruned.best[0]].seconds : 0, all.nbest ? all.best[0] : -1,
          all.nbest ? all.c[all.best[0]].seconds : 0);
    snprintf(name, sizeof name, "pruned_prices_fewer_%s_%d", spec, gpus);
    CHECK(rc == 0 && pruned.generated < all.generated, name, "pruned priced %d, brute %d",
          pruned.generated, all.generated);
    printf(
        "# %s on %d: %d candidates, brute priced %d, pruned priced %d (%d by memory, %d by time)\n",
        spec, gpus, all.n, all.generated, pruned.generated, pruned.pruned_mem, pruned.pruned_time);
    if (!rc) planner_free(&pruned);
    planner_free(&all);
    free(run);
}

/* No grid: 7 GPUs cannot split 16 sequences (dp would be 7); nothing fits: a GPU of 1 kB. */
static void bad_input(void) {
    PlanOpts o;
    CostConsts c;
    Run *run = toy("tiny-cola", 7, &o, &c);
    if (!run) return;
    PlanResult r;
    char err[1024] = "";
    int rc = planner_search(run, &o, &c, NULL, &r, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "GPU counts that work: 8"), "no_grid_lists_counts", "rc %d: %s",
          rc, err);
    setup(run, &o, 4);
    run->gpu.memory_gb = 1e-6;
    rc = planner_search(run, &o, &c, NULL, &r, err, sizeof err);
    CHECK(rc == 0 && r.nbest == 0 && r.min_mem >= 0, "nothing_fits_no_winner", "rc %d, %d best", rc,
          r.nbest);
    if (!rc) planner_free(&r);
    free(run);
}

/* The winner as a run spec: loads as a plan (grad_accum >= pp) and prices to the candidate's time.
 */
static void winner_spec(void) {
    Run *run = malloc(sizeof *run), *back = malloc(sizeof *back);
    if (load(run, "tiny-cola-pp2")) {
        free(run);
        free(back);
        return;
    }
    PlanOpts o;
    setup(run, &o, 8);
    CostConsts c;
    cost_consts_default(&c);
    PlanResult r;
    char err[1024], path[] = "specs/runs/.test-planner-XXXXXX.lua";
    int rc = planner_search(run, &o, &c, NULL, &r, err, sizeof err);
    if (rc || !r.nbest) {
        CHECK(0, "winner_spec", "search: rc %d %s", rc, err);
        free(run);
        free(back);
        return;
    }
    const PlanCand *w = &r.c[r.best[0]];
    int fd = mkstemps(path, 4);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        CHECK(0, "winner_spec", "cannot write %s", path);
        planner_free(&r);
        free(run);
        free(back);
        return;
    }
    planner_write_spec(run, w, NULL, f);
    fclose(f);
    rc = spec_load_run(path, NULL, 0, back, err, sizeof err);
    CHECK(rc == 0 && back->tp == w->tp && back->pp == w->pp && back->dp == w->dp &&
              back->micro_batch == w->mb && back->grad_accum == w->ga &&
              back->checkpoint == w->ckpt && back->zero == w->zero && back->layout == w->layout,
          "winner_spec_loads", "rc %d: %s", rc, err);
    Projection p;
    back->gpu = run->gpu; /* the search's node size (the GPU file's is 8) */
    rc = rc ? rc : project_layout(back, back->layout, &c, NULL, &p, err, sizeof err);
    CHECK(rc == 0 && fabs(p.seconds - w->seconds) <= 1e-12 * w->seconds,
          "winner_spec_prices_the_same", "rc %d, %.9g s vs %.9g s", rc, rc ? 0 : p.seconds,
          w->seconds);
    unlink(path);
    planner_free(&r);
    free(run);
    free(back);
}

static void clusters(void) {
    Cluster cl;
    char err[1024];
    int rc = spec_load_cluster("polaris", &cl, err, sizeof err);
    CHECK(rc == 0 && !strcmp(cl.gpu, "a100") && cl.gpus_per_node == 4 && cl.net_gbs == 12.5 &&
              cl.memory_gb == 40 && cl.nvlink_latency_us < 0,
          "cluster_polaris_loads", "rc %d: %s", rc, err);
    Gpu g = {.gpus_per_node = 8,
             .net_gbs = 25,
             .nvlink_gbs = 300,
             .nvlink_latency_us = 10,
             .memory_gb = 80};
    if (!rc) cluster_apply(&cl, &g);
    CHECK(g.gpus_per_node == 4 && g.net_gbs == 12.5 && g.memory_gb == 40 &&
              g.nvlink_latency_us == 10,
          "cluster_overrides_given_figures_only", "per node %d, net %g, memory %g, latency %g",
          g.gpus_per_node, g.net_gbs, g.memory_gb, g.nvlink_latency_us);
    char path[] = "/tmp/boost-test-cluster-XXXXXX.lua";
    int fd = mkstemps(path, 4);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        CHECK(0, "cluster_bad", "cannot write %s", path);
        return;
    }
    fprintf(f, "-- a cluster without its node size\nreturn cluster \"x\" {\n  gpu = \"a100\",\n  "
               "net_gbs = -3,\n}\n");
    fclose(f);
    rc = spec_load_cluster(path, &cl, err, sizeof err);
    CHECK(rc == 2 && strstr(err, ".lua:") && strstr(err, "gpus_per_node"),
          "cluster_missing_field_refused", "rc %d: %s", rc, err);
    unlink(path);
    rc = spec_load_cluster("no-such-cluster", &cl, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "polaris"), "cluster_unknown_lists_known", "rc %d: %s", rc, err);
}

/* The dp gradient reduction of a pipelined run is priced per stage: at pp = 2 the busiest stage
 * reduces about half the gradients of pp = 1 (before, every stage's buckets were charged to one). */
static void dp_per_stage(void) {
    Run *run = malloc(sizeof *run);
    if (load(run, "tiny-cola-pp2")) { free(run); return; }
    CostConsts c;
    cost_consts_default(&c);
    Projection p1, p2;
    char err[1024];
    run->dp = 2; run->grad_accum = 4; run->pp = 1;
    run->gpu.gpus_per_node = 64;   /* one link (NVLink) for the dp group at pp = 1 and 2 */
    int rc = project_layout(run, LAYOUT_BTP, &c, NULL, &p1, err, sizeof err);
    run->pp = 2;
    rc = rc ? rc : project_layout(run, LAYOUT_BTP, &c, NULL, &p2, err, sizeof err);
    double ratio = rc ? 0 : p2.dp_total_s / p1.dp_total_s, pratio = rc ? 0 : p2.params_local / p1.params_local;
    CHECK(rc == 0 && ratio > 0.3 && ratio < 0.75 && fabs(ratio - pratio) < 0.2, "dp_reduction_priced_per_stage",
          "rc %d (%s): dp %.6g s at pp=2 vs %.6g s at pp=1 (ratio %.3f, params ratio %.3f)", rc, rc ? err : "",
          rc ? 0 : p2.dp_total_s, rc ? 0 : p1.dp_total_s, ratio, pratio);
    free(run);
}

/* ZeRO-2 on the cpu backend: searched, its weights + gradients + AdamW bytes per local parameter
 * 2 + 16/dp at pp 1 (any grad_accum: the reduce-scatters run every micro-batch) and 6 + 16/dp at
 * pp > 1 with grad_accum > 1 (zero=1: 6 + 12/dp), so that with the memory between the least any
 * zero=2 candidate needs and the least of the others only zero=2 fits, and the pruned search
 * still picks brute force's winner. On cuda zero=2 is searched at pp 1 only (zero2_cuda). */
static const PlanCand *zero1_twin(const PlanResult *r, const PlanCand *x) {
    for (int i = 0; i < r->n; i++) {
        const PlanCand *y = &r->c[i];
        if (y->zero == 1 && y->layout == x->layout && y->tp == x->tp && y->pp == x->pp &&
            y->v == x->v && y->dp == x->dp && y->ep == x->ep && y->ckpt == x->ckpt &&
            y->mb == x->mb && y->ga == x->ga)
            return y;
    }
    return NULL;
}

static void zero2(void) {
    PlanOpts o;
    CostConsts c;
    Run *run = toy("tiny-cola-pp2", 8, &o, &c);
    if (!run) return;
    char err[1024];
    PlanResult all, pruned;
    int rc = planner_search(run, &o, &c, NULL, &all, err, sizeof err), at_ga1 = 0, at_pp1 = 0;
    int elsewhere = 0;
    for (int i = 0; !rc && i < all.n; i++) {
        const PlanCand *x = &all.c[i];
        if (x->zero == 2 && x->pp == 1 && x->ep == 1) at_pp1++;
        else if (x->zero == 2) elsewhere++;
        at_ga1 += x->zero == 2 && x->ga == 1;
    }
    CHECK(rc == 0 && at_pp1 > at_ga1 && at_ga1 > 0 && elsewhere == 0,
          "zero2_searched_on_cuda_at_pp1_only", "rc %d, zero=2 candidates: %d at pp 1 (%d of them "
          "at grad_accum 1); %d elsewhere", rc, at_pp1, at_ga1, elsewhere);
    if (!rc) planner_free(&all);
    /* one layer (pp = 1: zero=2 at grad_accum 1 is possible) and 8 sequences of 8 tokens: the
       parameters' state outweighs the activations */
    run->model.layers = 1;
    run->seq = 8;
    o.global_tokens = 8 * 8;
    o.backend = PLAN_BACKEND_CPU;
    o.brute = 1;
    rc = planner_search(run, &o, &c, NULL, &all, err, sizeof err);
    int pairs_ga1 = 0, pairs_ga = 0, bad = 0;
    double min2 = -1, min01 = -1;
    for (int i = 0; !rc && i < all.n; i++) {
        const PlanCand *x = &all.c[i];
        if (x->state != PC_FITS && x->state != PC_TOO_BIG) continue;
        double *min = x->zero == 2 ? &min2 : &min01;
        if (*min < 0 || x->mem_bytes < *min) *min = x->mem_bytes;
        const PlanCand *y = x->zero == 2 ? zero1_twin(&all, x) : NULL;
        if (!y || (y->state != PC_FITS && y->state != PC_TOO_BIG)) continue;
        double want = ((x->ga > 1 && x->pp > 1 ? 6.0 : 2.0) + 16.0 / x->dp) / (6.0 + 12.0 / x->dp);
        double got = x->weight_bytes / y->weight_bytes;
        if (fabs(got - want) > 1e-9 * want) {
            bad++;
            printf("# zero=2 / zero=1 state bytes %.9g, want %.9g: dp%d ga%d\n", got, want, x->dp,
                   x->ga);
        }
        if (x->ga > 1) pairs_ga++;
        else pairs_ga1++;
    }
    CHECK(rc == 0 && bad == 0 && pairs_ga1 > 0 && pairs_ga > 0, "zero2_state_bytes_on_cpu",
          "rc %d, %d wrong of %d pairs at grad_accum 1 and %d above", rc, bad, pairs_ga1, pairs_ga);
    CHECK(rc == 0 && min2 > 0 && min2 < min01, "zero2_needs_least_memory_on_cpu",
          "least memory: zero=2 %.6g B, zero 0/1 %.6g B", min2, min01);
    if (rc || !(min2 > 0 && min2 < min01)) {
        if (!rc) planner_free(&all);
        free(run);
        return;
    }
    planner_free(&all);
    run->gpu.memory_gb = (min2 + min01) / 2 / 1073741824.0; /* only zero=2 fits */
    planner_search(run, &o, &c, NULL, &all, err, sizeof err);
    o.brute = 0;
    rc = planner_search(run, &o, &c, NULL, &pruned, err, sizeof err);
    const PlanCand *w = rc == 0 && pruned.nbest ? &pruned.c[pruned.best[0]] : NULL;
    CHECK(w && w->zero == 2 && all.nbest && pruned.best[0] == all.best[0],
          "zero2_only_fit_chosen_on_cpu", "rc %d, winner zero=%d (pruned %d, brute %d)", rc,
          w ? w->zero : -1, w ? pruned.best[0] : -1, all.nbest ? all.best[0] : -1);
    if (!rc) planner_free(&pruned);
    planner_free(&all);
    free(run);
}

/* Bytes per local parameter as each backend allocates them: zero=2 keeps only gradient shards at
 * grad_accum 1, and at pp 1 with any grad_accum (2 + 16/dp); at pp > 1 the cuda backend holds
 * zero=1's memory (6 + 12/dp), the cpu backend at grad_accum > 1 a shard accumulator beside the
 * full gradients (6 + 16/dp). */
static void zero2_bytes_per_backend(void) {
    PlanOpts cuda, cpu;
    planner_opts_default(&cuda);
    planner_opts_default(&cpu);
    cpu.backend = PLAN_BACKEND_CPU;
    PlanCand x = {.zero = 2, .dp = 4, .ga = 1, .pp = 1, .ep = 1}, ga4 = x, pp2 = x, z1 = x;
    ga4.ga = 4;
    pp2.pp = 2;
    pp2.ga = 4;
    z1.zero = 1;
    z1.ga = 4;
    double want_shards = 2.0 + 16.0 / 4, want_z1 = 6.0 + 12.0 / 4, want_cpu = 6.0 + 16.0 / 4;
    double got[6] = {
        planner_state_bytes_per_param(&cuda, &x),   planner_state_bytes_per_param(&cpu, &x),
        planner_state_bytes_per_param(&cuda, &ga4), planner_state_bytes_per_param(&cuda, &pp2),
        planner_state_bytes_per_param(&cpu, &ga4),  planner_state_bytes_per_param(&cuda, &z1)};
    CHECK(got[0] == want_shards && got[1] == want_shards, "zero2_ga1_priced_as_shards",
          "cuda %g, cpu %g B/param, want %g", got[0], got[1], want_shards);
    CHECK(got[2] == want_shards && got[4] == want_shards, "zero2_ga4_pp1_priced_as_shards",
          "cuda %g, cpu %g B/param, want %g", got[2], got[4], want_shards);
    CHECK(got[3] == want_z1 && got[5] == want_z1, "zero2_pp2_on_cuda_priced_as_zero1",
          "pp2 %g, zero=1 %g B/param, want %g", got[3], got[5], want_z1);
    double cpu_pp2 = planner_state_bytes_per_param(&cpu, &pp2);
    CHECK(cpu_pp2 == want_cpu, "zero2_pp2_ga4_on_cpu_priced_with_shard_beside",
          "%g B/param, want %g", cpu_pp2, want_cpu);
}

/* 1 when cuda zero=2 candidate x is priced at project_layout's time of its run plus the part of
 * the dp reduction it hides behind the backward (the compute stream waits for each
 * reduce-scatter at zero=2 on cuda), plus grad_accum - 1 more whole dp reductions (at grad_accum
 * > 1 the reduce-scatters run every micro-batch), which is also `boost project`'s cuda time of the
 * run (project_backend_dp_wait); *hidden counts those where that part is above 0. */
static int zero2_time_exposed(const Run *base, const PlanCand *x, const CostConsts *c,
                              int *hidden) {
    Run *r = malloc(sizeof *r);
    Projection p;
    char err[1024];
    if (!r) return 0;
    planner_run(base, x, r);
    int rc = project_layout(r, x->layout, c, NULL, &p, err, sizeof err);
    Projection q = p;   /* as `boost project` prices it on cuda */
    if (!rc) project_backend_dp_wait(r, PROJECT_BACKEND_CUDA, &q);
    free(r);
    if (rc) return 0;
    *hidden += p.dp_hidden_s > 0;
    double want = p.seconds + p.dp_hidden_s + (x->ga - 1) * p.dp_total_s;
    return fabs(x->seconds - want) <= 1e-9 * want && q.seconds == x->seconds &&
           q.dp_hidden_s == 0;
}

/* The live full-size gradients the planner prices for cuda zero=2 on tiny-cola at dp=2 x tp=2
 * with 10 kB buckets: the 65,792 bytes the cuda backend shares among them there, as the
 * CUDA stand-ins count its allocations (tests/sh/nvrtc_mock_dp.sh, docs/cuda.md). */
static void zero2_live_as_backend(void) {
    Override ov[] = {{"micro_batch", "1"}, {"seq", "16"}, {"dp", "2"},
                     {"tp", "2"}, {"zero", "2"}, {"dp_bucket_mb", "0.01"}};
    Run *run = malloc(sizeof *run);
    char err[1024];
    int status = 0;
    Graph *g = NULL;
    if (run && !spec_load_run("tiny-cola", ov, 6, run, err, sizeof err))
        g = graph_build(run, run->layout, run->checkpoint, err, sizeof err, &status);
    int64_t live = g ? dp_zero2_live_grad_bytes(g) : -1;
    CHECK(live == 65792, "zero2_live_gradients_as_the_cuda_backend_shares",
          "%lld bytes, want 65792 (%s)", (long long)live, g ? "" : err);
    if (g) graph_free(g);
    free(run);
}

/* ZeRO-2 on cuda: a one-layer model on 8 GPUs of one per node (tp 1, pp 1, dp 8) and 16
 * sequences: micro-batches of 2 at grad_accum 1 or of 1 at grad_accum 2. zero=2 is searched at
 * both (pp 1); with small dp buckets (the full-size gradients live about one bucket at a
 * time) its candidates need less than any other, each priced at 2 + 16/dp bytes per local
 * parameter plus its live full-size gradients (more than none, less than all of them); with the
 * memory between the two only zero=2 fits, and both searches pick it. Its time is project's with
 * none of the dp reduction hidden, which runs grad_accum times. */
static void zero2_cuda(void) {
    PlanOpts o;
    CostConsts c;
    Run *run = toy("tiny-cola-pp2", 8, &o, &c);
    if (!run) return;
    run->model.layers = 1;
    run->seq = 8;
    run->gpu.gpus_per_node = 1;
    run->dp_bucket_bytes = 4096;
    o.global_tokens = 16 * 8;
    o.brute = 1;
    char err[1024];
    PlanResult all, pruned;
    int rc = planner_search(run, &o, &c, NULL, &all, err, sizeof err), pairs = 0, bad = 0;
    int wrong = 0, ga2 = 0, n2 = 0, exposed_right = 0, hidden = 0;
    double min2 = -1, min01 = -1;
    for (int i = 0; !rc && i < all.n; i++) {
        const PlanCand *x = &all.c[i];
        ga2 += x->ga > 1 && x->state == PC_FITS;
        wrong += x->zero == 2 && x->ga > 1;
        if (x->state != PC_FITS && x->state != PC_TOO_BIG) continue;
        double *min = x->zero == 2 ? &min2 : &min01;
        if (*min < 0 || x->mem_bytes < *min) *min = x->mem_bytes;
        if (x->zero == 2) {
            n2++;
            exposed_right += zero2_time_exposed(run, x, &c, &hidden);
        }
        const PlanCand *y = x->zero == 2 ? zero1_twin(&all, x) : NULL;
        if (!y || (y->state != PC_FITS && y->state != PC_TOO_BIG)) continue;
        double params = y->weight_bytes / (6.0 + 12.0 / y->dp);
        double live = x->weight_bytes - (2.0 + 16.0 / x->dp) * params;
        pairs++;
        if (!(live > 0 && live < 4 * params)) {
            bad++;
            printf("# zero=2 live gradients %.6g B of %.6g B: dp%d tp%d mb%d\n", live, 4 * params,
                   x->dp, x->tp, x->mb);
        }
    }
    CHECK(rc == 0 && ga2 > 0 && wrong > 0, "zero2_searched_on_cuda_at_ga_gt1_pp1",
          "rc %d, %d zero=2 candidates at grad_accum > 1 (%d others priced there)", rc, wrong, ga2);
    CHECK(rc == 0 && pairs > 0 && bad == 0, "zero2_cuda_prices_live_gradients",
          "rc %d, %d of %d zero=2 candidates outside (0, all gradients)", rc, bad, pairs);
    CHECK(rc == 0 && n2 > 0 && exposed_right == n2 && hidden > 0,
          "zero2_cuda_dp_reduction_not_hidden",
          "rc %d, %d of %d zero=2 candidates priced with their dp reduction exposed (%d hide some)",
          rc, exposed_right, n2, hidden);
    CHECK(rc == 0 && min2 > 0 && min2 < min01, "zero2_needs_least_memory_on_cuda",
          "least memory: zero=2 %.6g B, zero 0/1 %.6g B", min2, min01);
    if (!rc) planner_free(&all);
    if (rc || !(min2 > 0 && min2 < min01)) {
        free(run);
        return;
    }
    run->gpu.memory_gb = (min2 + min01) / 2 / 1073741824.0; /* only zero=2 fits */
    rc = planner_search(run, &o, &c, NULL, &all, err, sizeof err);
    o.brute = 0;
    rc = rc ? rc : planner_search(run, &o, &c, NULL, &pruned, err, sizeof err);
    const PlanCand *w = rc == 0 && pruned.nbest ? &pruned.c[pruned.best[0]] : NULL;
    CHECK(w && w->zero == 2 && all.nbest && pruned.best[0] == all.best[0],
          "zero2_only_fit_chosen_on_cuda", "rc %d, winner zero=%d ga=%d (pruned %d, brute %d)", rc,
          w ? w->zero : -1, w ? w->ga : -1, w ? pruned.best[0] : -1, all.nbest ? all.best[0] : -1);
    if (!rc) {
        planner_free(&pruned);
        planner_free(&all);
    }
    free(run);
}

/* Pricing side by side gives what one at a time gives: the same candidates priced, the same
 * states and the same winners, bit for bit. */
static void threads_same(void) {
    PlanOpts o;
    CostConsts c;
    Run *run = toy("tiny-cola-pp2", 8, &o, &c);
    if (!run) return;
    o.top = 5;
    char err[1024];
    PlanResult one, many;
    run->gpu.memory_gb = 1e9;
    o.threads = 1;
    int rc = planner_search(run, &o, &c, NULL, &one, err, sizeof err);
    o.threads = 3;
    rc = rc ? rc : planner_search(run, &o, &c, NULL, &many, err, sizeof err);
    int same = rc == 0 && one.n == many.n && one.generated == many.generated &&
               one.pruned_time == many.pruned_time && one.nbest == many.nbest && one.nbest > 0;
    for (int i = 0; same && i < one.nbest; i++) same = one.best[i] == many.best[i];
    for (int i = 0; same && i < one.n; i++)
        same = one.c[i].state == many.c[i].state && one.c[i].seconds == many.c[i].seconds &&
               one.c[i].mem_bytes == many.c[i].mem_bytes;
    CHECK(same, "threads_price_the_same", "rc %d: %d and %d priced, %d and %d best", rc,
          rc ? 0 : one.generated, rc ? 0 : many.generated, rc ? 0 : one.nbest,
          rc ? 0 : many.nbest);
    if (!rc) {
        planner_free(&one);
        planner_free(&many);
    }
    free(run);
}

int main(void) {
    dp_per_stage();
    pruned_vs_brute("tiny-cola-pp2", 4);
    pruned_vs_brute("tiny-cola-pp2", 8);
    pruned_vs_brute("tiny-llama", 8);
    pruned_vs_brute("tiny-cola-moe", 4);
    bad_input();
    winner_spec();
    clusters();
    zero2();
    zero2_bytes_per_backend();
    zero2_cuda();
    zero2_live_as_backend();
    threads_same();
    TEST_EXIT();
}
