/* test_dp.c: data parallelism on the CPU engine (ranks as threads): dp=2 x tp=2 against dp=1 x tp=1
 * with grad_accum=2, dp=4 x tp=1 against dp=1 with grad_accum=4 and against dp=2 x tp=2 with
 * grad_accum=2 (the same micro-batches), on the same global batch, for cola, lax and the MoE model: loss, every canonical gradient and three AdamW steps within 1e-5
 * relative; the rank grid's coordinates and groups; dp steps in the plan and their loader checks;
 * ZeRO-1 and ZeRO-2 against zero=0, and ZeRO-2's gradient bytes per rank. */
#define CASE_DIR "build/tmp/dp"
#include <stdio.h>
#include <sys/stat.h>
#include "tests/unit/engine_cases.h"
#include "runtime/grid.h"
#include "runtime/cpu.h"

/* ZeRO-2's memory on the CPU backend: after the optimizer step every rank of c holds its gradients
 * as shards only, 4 ceil(n/dp) bytes per local param of n elements, where ref (zero=0) holds 4 n.
 * Peak: at grad_accum = 1 below zero=0's (the shards plus the full-size d.P live at once); at
 * grad_accum > 1 the plan reduce-scatters every micro-batch, so the peak is grad_accum 1's (the
 * same spec's run before, ga1_peak), not zero=0's plus the shards. */
static void zero2_memory(Case *c, Case *ref, const char *spec, int ga) {
    static struct { const char *spec; size_t peak; } ga1_peak[8];
    size_t *want_peak = NULL;
    for (int i = 0; i < 8 && !want_peak; i++)
        if (!ga1_peak[i].spec || !strcmp(ga1_peak[i].spec, spec)) {
            ga1_peak[i].spec = spec;
            want_peak = &ga1_peak[i].peak;
        }
    int64_t shard = 0, full = 0;
    for (int i = 0; i < c->p->nparams; i++) {
        int64_t n = c->p->params[i].rows * c->p->params[i].cols;
        shard += 4 * ((n + c->p->dp - 1) / c->p->dp);
        full += 4 * n;
    }
    int bad = -1;
    size_t peak = 0, peak0 = 0, now = 0, now0 = 0;
    for (int r = 0; r < c->p->dp * c->p->tp && bad < 0; r++) {
        now = cpu_gradient_bytes(engine_backend_rank(c->e, r), &peak);
        now0 = cpu_gradient_bytes(engine_backend_rank(ref->e, r), &peak0);
        int peak_ok = ga == 1 ? peak < peak0 : *want_peak && peak == *want_peak;
        if ((int64_t)now != shard || (int64_t)now0 != full || !peak_ok) bad = r;
    }
    if (ga == 1 && bad < 0) *want_peak = peak;
    char what[300];
    snprintf(what, sizeof what, "%s zero=2 grad_accum=%d: each rank holds 4 ceil(n/dp) gradient bytes per param "
             "after the step (zero=0: 4 n); peak %s", spec, ga,
             ga == 1 ? "below zero=0's" : "grad_accum 1's");
    CHECK(bad < 0, what, "rank %d: %zu bytes (want %lld), zero=0 %zu (want %lld), peaks %zu vs %zu "
          "(grad_accum 1: %zu)", bad, now, (long long)shard, now0, (long long)full, peak, peak0,
          *want_peak);
    printf("# %s grad_accum=%d: gradient bytes per rank, peak %zu at zero=2 vs %zu at zero=0\n", spec, ga, peak, peak0);
}

/* ZeRO-1 and ZeRO-2: zero=1 or 2 against zero=0 at the same grid (and grad_accum ga): 3 AdamW
 * steps give the same params and the same canonical AdamW moments (gathered from the dp shards);
 * zero=2: the first pass's canonical gradients too (each dp rank holds its shard only). */
static void zero_cases(const char *spec, int mb, int zero, int ga) {
    char defs[300], what[300];
    Case ref, c;
    snprintf(defs, sizeof defs, "-D tp=2 -D dp=2 -D micro_batch=%d -D grad_accum=%d -D dp_bucket_mb=0.05", mb, ga);
    if (open_case_pass(&ref, spec, defs, global_pass, NULL) == 0) {
        snprintf(defs, sizeof defs, "-D tp=2 -D dp=2 -D micro_batch=%d -D grad_accum=%d -D dp_bucket_mb=0.05 -D zero=%d",
                 mb, ga, zero);
        if (!open_case_pass(&c, spec, defs, global_pass, NULL)) {
            if (zero == 2) {
                double worst = 0;
                const char *wname = "";
                for (int i = 0; i < ref.p->ncanons; i++) {
                    double e = rel_err(c.grad[i], ref.grad[i], ref.p->canons[i].rows * ref.p->canons[i].cols);
                    if (e > worst || e != e) { worst = e; wname = ref.p->canons[i].name; }
                }
                snprintf(what, sizeof what, "%s zero=2 grad_accum=%d vs zero=0: the same canonical gradients", spec, ga);
                CHECK(worst < CASE_TOL, what, "worst %s rel %.3g", wname, worst);
            }
            int nrs = 0, ngs = 0, nlast = 0;
            for (int s = 0; s < c.p->nsteps; s++) {
                nrs += c.p->steps_[s].kind == ST_REDUCE_SCATTER;
                const PlanStep *st = &c.p->steps_[s];
                nlast += st->kind == ST_REDUCE_SCATTER && st->coll.last_micro;
                ngs += c.p->steps_[s].kind == ST_GATHER_SHARDS;
            }
            /* zero=2 at grad_accum > 1 reduce-scatters every micro-batch; otherwise the last only */
            int every = zero == 2 && ga > 1;
            snprintf(what, sizeof what, "%s zero=%d grad_accum=%d: the reduce_scatters run on %s",
                     spec, zero, ga, every ? "every micro-batch" : "the last micro-batch (micro=last)");
            CHECK(nlast == (every ? 0 : nrs), what, "%d of %d reduce_scatter say micro=last", nlast,
                  nrs);
            snprintf(what, sizeof what, "%s zero=%d plan: a reduce_scatter per gradient, a gather_shards per param", spec, zero);
            CHECK(nrs == c.p->nparams && ngs == c.p->nparams && c.p->zero == zero, what, "%d reduce_scatter, %d gather_shards, %d params",
                  nrs, ngs, c.p->nparams);
            snprintf(what, sizeof what, "%s dp=2 x tp=2 zero=%d grad_accum=%d vs zero=0", spec, zero, ga);
            compare_steps_pass(&c, &ref, what, global_pass);
            if (zero == 2) zero2_memory(&c, &ref, spec, ga);
            double worst = 0;
            const char *wname = "";
            for (int i = 0; i < ref.p->ncanons; i++)
                for (int slot = SLOT_ADAM_M; slot <= SLOT_ADAM_V; slot++) {
                    int64_t n = ref.p->canons[i].rows * ref.p->canons[i].cols;
                    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
                    engine_get_canon(c.e, plan_find_canon(c.p, ref.p->canons[i].name), slot, x);
                    engine_get_canon(ref.e, i, slot, y);
                    double e = rel_err(x, y, n);
                    if (e > worst || e != e) { worst = e; wname = ref.p->canons[i].name; }
                    free(x); free(y);
                }
            snprintf(what, sizeof what, "%s zero=%d grad_accum=%d vs zero=0: the same canonical AdamW moments after 3 steps",
                     spec, zero, ga);
            CHECK(worst < CASE_TOL, what, "worst %s rel %.3g", wname, worst);
        }
        close_case(&c);
    }
    close_case(&ref);
}

/* parallel.dp_dtype = "bf16": the dp reduction rounds each rank's gradient and the mean to bf16
 * (8 significant bits: relative rounding error at most 2^-9 per rounding). Norm-wise, the canonical
 * gradients stay within 2^-7 of the fp32 reduction's, and differ from them (the rounding happens). */
static void bf16_case(void) {
    Case ref, c;
    global_batch(4 * 64 * 2, 256, 7);
    if (open_case_pass(&ref, "tiny-cola", "-D tp=1 -D dp=2 -D micro_batch=4", global_pass, NULL) == 0 &&
        open_case_pass(&c, "tiny-cola", "-D tp=1 -D dp=2 -D micro_batch=4 -D dp_dtype=bf16", global_pass, NULL) == 0) {
        double worst = 0, least = 1;
        const char *wname = "";
        for (int i = 0; i < ref.p->ncanons; i++) {
            double e = rel_err(c.grad[i], ref.grad[i], ref.p->canons[i].rows * ref.p->canons[i].cols);
            if (e > worst || e != e) { worst = e; wname = ref.p->canons[i].name; }
            if (e < least) least = e;
        }
        printf("# bf16 dp reduction: worst canonical gradient %s rel %.3g (fp32 reduction as reference)\n", wname, worst);
        CHECK(worst > 0 && worst <= 1.0 / 128 && c.loss == ref.loss, "dp_dtype=bf16: gradients within 2^-7 of the fp32 reduction, not equal",
              "worst %s rel %.3g, loss %.9g vs %.9g", wname, worst, c.loss, ref.loss);
    }
    close_case(&c);
    close_case(&ref);
}

/* For one model: dp=2 x tp=2 vs dp=1 grad_accum=2, dp=4 x tp=1 vs dp=1 grad_accum=4 (half the
 * micro-batch, so the global batch is the same size), and dp=4 x tp=1 vs dp=2 x tp=2 grad_accum=2 at
 * that micro-batch (the first pass's loss and gradients: the same micro-batches, so the same values
 * even for MoE, whose expert capacity and load-balance loss are per micro-batch). */
static void model_cases(const char *spec, const char *extra, int mb, int steps) {
    char defs[300], what[300];
    Case ref, c, c4;
    snprintf(defs, sizeof defs, "-D tp=1 -D dp=1 -D grad_accum=2 -D micro_batch=%d %s", mb, extra);
    if (open_case_pass(&ref, spec, defs, global_pass, NULL) == 0) {
        snprintf(defs, sizeof defs, "-D tp=2 -D dp=2 -D grad_accum=1 -D micro_batch=%d -D dp_bucket_mb=0.05 %s", mb, extra);
        if (!open_case_pass(&c, spec, defs, global_pass, NULL)) {
            snprintf(what, sizeof what, "%s dp=2 x tp=2 vs dp=1 x tp=1 grad_accum=2", spec);
            compare(&c, &ref, what);
            if (steps) compare_steps_pass(&c, &ref, what, global_pass);
        }
        close_case(&c);
    }
    close_case(&ref);
    snprintf(defs, sizeof defs, "-D tp=1 -D dp=1 -D grad_accum=4 -D micro_batch=%d %s", mb / 2, extra);
    if (open_case_pass(&ref, spec, defs, global_pass, NULL) == 0) {
        snprintf(defs, sizeof defs, "-D tp=1 -D dp=4 -D grad_accum=1 -D micro_batch=%d %s", mb / 2, extra);
        if (!open_case_pass(&c4, spec, defs, global_pass, NULL)) {
            snprintf(what, sizeof what, "%s dp=4 x tp=1 vs dp=1 grad_accum=4", spec);
            compare(&c4, &ref, what);
            if (steps) compare_steps_pass(&c4, &ref, what, global_pass);
        }
        /* grad_accum with dp: only the last micro-batch reduces (micro=last) */
        snprintf(defs, sizeof defs, "-D tp=2 -D dp=2 -D grad_accum=2 -D micro_batch=%d -D dp_bucket_mb=0.05 %s", mb / 2, extra);
        if (!open_case_pass(&c, spec, defs, global_pass, NULL)) {
            snprintf(what, sizeof what, "%s dp=2 x tp=2 x grad_accum=2 vs dp=1 grad_accum=4", spec);
            compare(&c, &ref, what);
            snprintf(what, sizeof what, "%s dp=2 x tp=2 x grad_accum=2 vs dp=4 x tp=1", spec);
            compare(&c, &c4, what);
        }
        close_case(&c);
        close_case(&c4);
    }
    close_case(&ref);
}

static void test_grid(void) {
    Grid g;
    char err[256];
    CHECK(grid_make(&g, 2, 2, 2, err, sizeof err) == 0 && g.world == 8, "grid: dp2 x pp2 x tp2 is a world of 8", "%s", err);
    /* rank = pp*(dp*tp) + dp*tp + tp: rank 5 = pp 1, dp 0, tp 1 */
    GridCoord c = grid_coord(&g, 5);
    CHECK(c.tp_rank == 1 && c.dp_rank == 0 && c.pp_rank == 1, "grid: rank 5 of dp2 x pp2 x tp2 is tp 1 dp 0 pp 1",
          "tp %d dp %d pp %d", c.tp_rank, c.dp_rank, c.pp_rank);
    CHECK(grid_member(&g, 5, GROUP_TP, 0) == 4 && grid_member(&g, 5, GROUP_DP, 1) == 7 && grid_member(&g, 5, GROUP_PP, 0) == 1,
          "grid: tp neighbours, dp stride tp, pp stride dp*tp", "tp0 %d dp1 %d pp0 %d", grid_member(&g, 5, GROUP_TP, 0),
          grid_member(&g, 5, GROUP_DP, 1), grid_member(&g, 5, GROUP_PP, 0));
    int ok = 1;   /* every rank is in exactly one group of each kind, and its own group holds it */
    for (int r = 0; r < g.world; r++) {
        GridCoord q = grid_coord(&g, r);
        for (int k = 0; k < GROUP_COUNT; k++)
            if (grid_member(&g, r, k, q.index[k]) != r) ok = 0;
    }
    CHECK(ok, "grid: every rank is member index[k] of its own groups", "mismatch");
    CHECK(grid_make(&g, 0, 1, 2, err, sizeof err) != 0 && strstr(err, "at least 1"), "grid: dp=0 is refused", "%s", err);
    CHECK(grid_group_parse("dp") == GROUP_DP && grid_group_parse("tp") == GROUP_TP && grid_group_parse("xx") < 0,
          "grid: group names parse", "parse");
}

/* The plan of a dp run: dp steps on every param gradient, in the backward, before its end. */
static char dp_plan_path[600];

static void test_plan_steps(void) {
    Case c;
    global_batch(4 * 64 * 2, 256, 7);
    if (open_case_pass(&c, "tiny-cola", "-D tp=2 -D dp=2 -D micro_batch=4 -D dp_bucket_mb=0.05", global_pass, NULL) == 0) {
        int ndp = 0, bad = 0, last_bwd = -1, maxb = -1;
        for (int s = 0; s < c.p->nsteps; s++) {
            const PlanStep *st = &c.p->steps_[s];
            if (st->section == 1) last_bwd = s;
            if (st->kind != ST_ALLREDUCE || st->coll.group != GROUP_DP) continue;
            ndp++;
            if (!st->coll.avg || !st->coll.last_micro || c.p->tensors[st->coll.buf.tensor].kind != TK_GRAD) bad++;
            if (st->coll.bucket > maxb) maxb = st->coll.bucket;
        }
        CHECK(ndp == c.p->nparams && !bad, "plan: one dp all-reduce (op=avg micro=last) per param gradient",
              "%d dp steps for %d params, %d malformed", ndp, c.p->nparams, bad);
        snprintf(dp_plan_path, sizeof dp_plan_path, "%s", c.p->path);
        CHECK(maxb >= 1, "plan: dp_bucket_mb=0.05 gives several buckets", "last bucket %d", maxb);
        /* the first bucket is issued before the backward's last compute step: it overlaps */
        int first_dp = -1;
        for (int s = 0; s < c.p->nsteps && first_dp < 0; s++)
            if (c.p->steps_[s].kind == ST_ALLREDUCE && c.p->steps_[s].coll.group == GROUP_DP) first_dp = s;
        CHECK(first_dp >= 0 && first_dp < last_bwd - 1, "plan: the first dp bucket is issued before the backward ends",
              "first dp step %d, last backward step %d", first_dp, last_bwd);
    }
    close_case(&c);
}

/* Loader checks of the dp keys (a plan edited by hand). */
static void test_plan_bad(void) {
    const char *src = dp_plan_path;
    if (!*src) return;
    static const struct { const char *from, *to, *want; } cases[] = {
        {"group=dp", "group=pp", "group=pp is not tp or dp"},
        {"micro=last", "micro=first", "micro=first"},
        {"op=avg", "op=max", "op=max is not supported"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[1200], out[300], err[1024], name[200];
        snprintf(out, sizeof out, "build/tmp/dp/bad%zu.txt", i);
        snprintf(cmd, sizeof cmd, "sed '0,/%s/s//%s/' %s > %s", cases[i].from, cases[i].to, src, out);
        snprintf(name, sizeof name, "plan loader: %s is refused with a clear message", cases[i].to);
        if (system(cmd) != 0) { CHECK(0, name, "sed failed"); continue; }
        Plan *p = plan_load(out, err, sizeof err);
        CHECK(!p && strstr(err, cases[i].want), name, "%s", p ? "loaded" : err);
        if (p) plan_free(p);
    }
}

int main(void) {
    mkdir("build", 0755); mkdir("build/tmp", 0755); mkdir("build/tmp/dp", 0755);
    (void)open_case; (void)again; (void)compare_steps;   /* engine_cases.h's one-pass helpers: not used here */
    test_grid();
    test_plan_steps();
    test_plan_bad();
    global_batch(4 * 64 * 2, 256, 7);
    model_cases("tiny-cola", "", 4, 1);
    global_batch(4 * 64 * 2, 256, 7);
    model_cases("tiny-lax", "", 4, 0);
    global_batch(4 * 64 * 2, 256, 7);
    model_cases("specs/runs/tiny-cola-moe.lua", "", 4, 1);
    bf16_case();
    global_batch(4 * 64 * 2, 256, 7);
    zero_cases("tiny-cola", 4, 1, 1);
    global_batch(4 * 64 * 2, 256, 7);
    zero_cases("tiny-lax", 4, 1, 1);
    global_batch(4 * 64 * 2, 256, 7);
    zero_cases("specs/runs/tiny-cola-moe.lua", 4, 1, 1);
    for (int zero = 2, ga = 1; ga <= 2; ga++) {   /* ZeRO-2, also with accumulation (half the micro-batch) */
        global_batch(4 * 64 * 2, 256, 7);
        zero_cases("tiny-cola", 4 / ga, zero, ga);
        global_batch(4 * 64 * 2, 256, 7);
        zero_cases("tiny-lax", 4 / ga, zero, ga);
        global_batch(4 * 64 * 2, 256, 7);
        zero_cases("specs/runs/tiny-cola-moe.lua", 4 / ga, zero, ga);
    }
    global_batch(1 * 64 * 2 * 3, 256, 7);   /* grad_accum 3: three micro-batches of one sequence */
    zero_cases("tiny-cola", 1, 2, 3);
    free(global_tok); free(global_tgt);
    TEST_EXIT();
}
