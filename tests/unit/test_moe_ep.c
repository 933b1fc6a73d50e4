/* test_moe_ep.c: expert parallelism on the CPU engine (ranks as threads): ep=2 x dp=2 and ep=4 x dp=4
 * against ep=1 at the same dp (the same micro-batches, so the same routing and capacity): loss, every
 * canonical gradient and the params after three AdamW steps within 1e-5 relative, for top-2 experts
 * with full-width dispatch and with shared factors (rank-r dispatch, also at tp=2, ep=2 x dp=4 and
 * grad_accum=2 without checkpointing); the plan's ep steps and their bytes against the closed forms,
 * the report and the cost model, the ep/edp groups of the rank grid, the spec's and the loader's
 * errors, the CUDA refusal. */
#define CASE_DIR "build/tmp/ep"
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "tests/unit/engine_cases.h"
#include "runtime/grid.h"

static char last_dir[256];   /* the output folder of the last case opened */

/* The ep steps of an ep plan: per MoE layer two all-to-alls forward (out, back) and two backward
 * (their duals), all on group=ep; every expert param's gradient reduced once on group=edp with
 * scale 1/dp; every other gradient on group=dp; expert parts tagged with an ep rank. */
static void plan_checks(const Case *c, const char *what, int shared) {
    if (!c->p) return;
    const Plan *p = c->p;
    int fo = 0, fb = 0, bo = 0, bb = 0, edp = 0, dp = 0, bad = 0, eparams = 0;
    int64_t l0 = 0;   /* layer 0's all-to-all elements (every slot at capacity) */
    for (int s = 0; s < p->nsteps; s++) {
        const PlanStep *st = &p->steps_[s];
        if (st->kind == ST_ALLTOALL) {
            if (st->coll.group != GROUP_EP) bad++;
            if (!strncmp(st->coll.tag, "L0.", 3)) l0 += st->coll.experts * st->coll.capacity * st->coll.cols;
            if (!st->coll.bwd) { if (st->coll.way) fb++; else fo++; }
            else { if (st->coll.way) bb++; else bo++; }
        }
        if (st->kind == ST_ALLREDUCE && st->coll.group == GROUP_EDP) {
            edp++;
            if (!(fabs(st->coll.scale * p->dp - 1) < 1e-9) || !st->coll.last_micro) bad++;
        }
        if (st->kind == ST_ALLREDUCE && st->coll.group == GROUP_DP) dp++;
    }
    for (int q = 0; q < p->nparams; q++) {
        int tagged = 0;
        for (int k = 0; k < p->params[q].nparts; k++) tagged += p->parts[p->params[q].first_part + k].ep >= 0;
        if (tagged && tagged != p->params[q].nparts) bad++;
        eparams += tagged > 0;
    }
    char name[400];
    snprintf(name, sizeof name, "%.200s: 2 fwd + 2 bwd all-to-alls per MoE layer on group=ep, expert grads on group=edp (x 1/dp)", what);
    int L = p->layers;
    CHECK(fo == L && fb == L && bo == L && bb == L && edp == eparams && eparams > 0 && dp + edp == p->nparams && !bad, name,
          "fwd out %d back %d, bwd out %d back %d, edp %d (expert params %d), dp %d of %d params, %d bad", fo, fb, bo, bb, edp,
          eparams, dp, p->nparams, bad);
    /* the closed form (docs/moe.md): E*C slots, fwd + bwd, d/tp out and back per rank for full tokens,
       r_g+r_u out and r_d back (r = 32, whole on every tp rank) with all three factors shared;
       E = 4, top-2, C = ceil(1.25 * M * 2 / 4) */
    int64_t M = (int64_t)p->micro_batch * p->seq, C = (int64_t)ceil(1.25 * (double)M * 2 / 4 - 1e-9), dl = p->hidden / p->tp;
    int64_t want = 2 * 4 * C * (shared ? 2 * 32 + 32 : 2 * dl);
    snprintf(name, sizeof name, "%.200s: layer 0's all-to-all elements = 2*E*C*(out + back), the closed form", what);
    CHECK(l0 == want, name, "%lld, want %lld", (long long)l0, (long long)want);
}

/* ep=N x dp=N x tp against ep=1 at the same dp and tp (and grad_accum ga, extra -D settings). */
static void ep_case(const char *spec, int tp, int dp, int ep, int mb, int shared, int ga, const char *extra) {
    char defs[300], what[400];
    Case ref, c;
    global_batch(mb * 64 * dp * ga, 256, 11);
    snprintf(defs, sizeof defs, "-D tp=%d -D dp=%d -D micro_batch=%d -D grad_accum=%d -D dp_bucket_mb=0.05 %s", tp, dp, mb, ga, extra);
    if (open_case_pass(&ref, spec, defs, global_pass, last_dir) == 0) {
        snprintf(defs, sizeof defs, "-D tp=%d -D dp=%d -D ep=%d -D micro_batch=%d -D grad_accum=%d -D dp_bucket_mb=0.05 %s", tp, dp,
                 ep, mb, ga, extra);
        if (!open_case_pass(&c, spec, defs, global_pass, last_dir)) {
            snprintf(what, sizeof what, "%s ep=%d x dp=%d x tp=%d%s%s vs ep=1", spec, ep, dp, tp, ga > 1 ? " grad_accum=2" : "",
                     *extra ? " checkpoint=none" : "");
            plan_checks(&c, what, shared);
            compare(&c, &ref, what);
            compare_steps_pass(&c, &ref, what, global_pass);
        }
        close_case(&c);
    }
    close_case(&ref);
}

static void test_grid(void) {
    Grid g;
    char err[256];
    CHECK(grid_make(&g, 4, 1, 2, err, sizeof err) == 0 && grid_set_ep(&g, 2, err, sizeof err) == 0, "grid: dp4 x tp2 with ep=2", "%s", err);
    /* rank 5 = dp 2, tp 1: ep rank 0 of the ep group {5, 7}; edp group {1, 5} (the same ep rank) */
    GridCoord c = grid_coord(&g, 5);
    CHECK(c.ep_rank == 0 && grid_member(&g, 5, GROUP_EP, 1) == 7 && c.size[GROUP_EP] == 2 && grid_member(&g, 5, GROUP_EDP, 0) == 1 &&
          c.size[GROUP_EDP] == 2 && c.index[GROUP_EDP] == 1, "grid: ep groups are neighbouring dp ranks, edp groups stride ep*tp",
          "ep rank %d, ep member 1 = %d, edp member 0 = %d (index %d)", c.ep_rank, grid_member(&g, 5, GROUP_EP, 1),
          grid_member(&g, 5, GROUP_EDP, 0), c.index[GROUP_EDP]);
    int ok = 1;
    for (int r = 0; r < g.world; r++) {
        GridCoord q = grid_coord(&g, r);
        for (int k = 0; k < GROUP_COUNT; k++)
            if (grid_member(&g, r, k, q.index[k]) != r) ok = 0;
    }
    CHECK(ok, "grid: every rank is member index[k] of its own ep and edp groups", "mismatch");
    CHECK(grid_set_ep(&g, 3, err, sizeof err) != 0 && strstr(err, "divide dp"), "grid: ep=3 at dp=4 is refused", "%s", err);
    CHECK(grid_group_parse("ep") == GROUP_EP && grid_group_parse("edp") == GROUP_EDP, "grid: ep and edp parse", "parse");
}

/* Spec errors at the spec's line, exit status 2, with what to do. */
static void spec_error(const char *parallel, const char *want, const char *what) {
    const char *path = CASE_DIR "/bad-ep.lua";
    FILE *f = fopen(path, "w");
    if (!f) { CHECK(0, what, "cannot write %s", path); return; }
    fprintf(f, "-- a run with a bad ep setting (test_moe_ep)\nreturn run {\n  model = \"tiny-cola-moe\",\n"
               "  parallel = %s,\n  train = { micro_batch = 2, seq = 64 },\n}\n", parallel);
    fclose(f);
    char cmd[600], out[2048] = "";
    const char *boost = getenv("BOOST") ? getenv("BOOST") : "./bin/boost";
    snprintf(cmd, sizeof cmd, "%s gen %s -o " CASE_DIR "/bad-ep >" CASE_DIR "/bad-ep.log 2>&1", boost, path);
    int rc = system(cmd);
    FILE *l = fopen(CASE_DIR "/bad-ep.log", "r");
    if (l) { size_t n = fread(out, 1, sizeof out - 1, l); out[n] = 0; fclose(l); }
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 2 && strstr(out, "bad-ep.lua:4:") && strstr(out, want), what, "status %d: %s",
          WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out);
}

static void test_spec_errors(void) {
    spec_error("{ dp = 2, ep = 3 }", "must divide the 4 experts", "spec: ep not dividing the experts stops at its line");
    spec_error("{ dp = 6, ep = 4 }", "must divide dp (6)", "spec: ep not dividing dp stops at its line");
    spec_error("{ dp = 2, ep = 2, layout = \"naive\" }", "layout \"btp\" only", "spec: ep under layout naive stops at its line");
    spec_error("{ dp = 2, ep = 2, zero = 1 }", "zero = 1 is not supported", "spec: ep with zero=1 stops at its line");
}

/* The loader's checks of ep lines, on a copy of a good ep plan with one line changed. */
static void loader_error(const char *plan, const char *from, const char *to, const char *want, const char *what) {
    FILE *f = fopen(plan, "rb");
    if (!f) { CHECK(0, what, "cannot read %s", plan); return; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + strlen(to) + 1);
    size_t got = fread(text, 1, (size_t)n, f);
    text[got] = 0;
    fclose(f);
    char *at = strstr(text, from), err[1024] = "";
    if (!at) { CHECK(0, what, "'%s' not in the plan", from); free(text); return; }
    memmove(at + strlen(to), at + strlen(from), strlen(at + strlen(from)) + 1);
    memcpy(at, to, strlen(to));
    Plan *p = plan_parse_text(plan, text, err, sizeof err);   /* takes text */
    CHECK(!p && strstr(err, want), what, "%s", p ? "loaded" : err);
    if (p) plan_free(p);
}

static void test_loader_and_cuda(void) {
    Case c;
    global_batch(2 * 64 * 2, 256, 11);
    if (open_case_pass(&c, "specs/runs/tiny-cola-moe.lua", "-D tp=1 -D dp=2 -D ep=2 -D micro_batch=2 -D steps=3", global_pass, last_dir) != 0) return;
    char plan[300];
    snprintf(plan, sizeof plan, "%s/plan.txt", last_dir);
    loader_error(plan, "group=ep dir=fwd", "group=tp dir=fwd", "runs on group=ep only", "loader: an all-to-all off group=ep is refused");
    loader_error(plan, "way=out", "way=sideways", "way=sideways is not out or back", "loader: an unknown way is refused");
    loader_error(plan, "rep=1 ep=1", "rep=1 ep=2", "ep=2 is not an ep rank", "loader: a part of a missing ep rank is refused");
    loader_error(plan, "rep=1 ep=1", "rep=1 ep=0", "two parts overlap", "loader: ep parts that overlap on one ep rank are refused");
    loader_error(plan, " ep=2\n", " ep=3\n", "ep=3 must be at least 1 and divide dp=2", "loader: ep not dividing dp is refused");
    char err[1024] = "";
    Engine *e = engine_create(c.p, "cuda", err, sizeof err);
    CHECK(!e && strstr(err, "one process per GPU") && strstr(err, "--backend cpu"),
          "cuda: an ep plan in one process is refused with how to launch it (one process per GPU)", "%s", e ? "opened" : err);
    if (e) engine_free(e);
    close_case(&c);
}

/* The report of an ep run: its own dispatch bytes (this run's row) from its all-to-all steps, per rank:
 * tiny-cola-moe at tp=2, micro_batch 4 x seq 64: M = 256, C = 160, E*C = 640 slots, d/tp = 64, bf16:
 * 2 (fwd, bwd) * 640 * (64 + 64) * 2 B. */
static void test_report(void) {
    char cmd[600], out[1 << 15] = "";
    const char *boost = getenv("BOOST") ? getenv("BOOST") : "./bin/boost";
    snprintf(cmd, sizeof cmd, "%s report specs/runs/tiny-cola-moe.lua -D tp=2 -D dp=2 -D ep=2 --json 2>&1", boost);
    FILE *f = popen(cmd, "r");
    if (f) { size_t n = fread(out, 1, sizeof out - 1, f); out[n] = 0; pclose(f); }
    const char *r = strstr(out, "\"ep_run\"");
    long long ep = -1, bytes = -1;
    if (r) sscanf(r, "\"ep_run\": {\"ep\": %lld, \"bytes\": %lld", &ep, &bytes);
    CHECK(ep == 2 && bytes == 2LL * 640 * (64 + 64) * 2, "report: an ep=2 run's dispatch bytes per layer from its all-to-all steps",
          "ep %lld, bytes %lld (want %lld): %.200s", ep, bytes, 2LL * 640 * 128 * 2, r ? r : out);
}

/* The cost model prices the emitted all-to-alls: none at ep=1; at ep=2 a positive time that is part of
 * the iteration's communication; 8 ranks of tp=4 x ep=2 span two 8-GPU h100 nodes only at ep=4, where
 * the same bytes per rank cross the network and take longer. */
static double project_key(const char *defs, const char *key) {
    char cmd[600], line[256];
    const char *boost = getenv("BOOST") ? getenv("BOOST") : "./bin/boost";
    snprintf(cmd, sizeof cmd, "%s project specs/runs/tiny-cola-moe.lua %s --kv 2>&1", boost, defs);
    FILE *f = popen(cmd, "r");
    double v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ' ') v = atof(line + n + 1);
    if (f) pclose(f);
    return v;
}

static void test_project(void) {
    double e1 = project_key("-D tp=1 -D dp=2 -D ep=1", "ep_comm_s.btp"), e2 = project_key("-D tp=1 -D dp=2 -D ep=2", "ep_comm_s.btp");
    double c2 = project_key("-D tp=1 -D dp=2 -D ep=2", "comm_s.btp");
    CHECK(e1 == 0 && e2 > 0 && c2 >= e2, "project: the ep all-to-all steps are priced (0 at ep=1, part of comm at ep=2)",
          "ep=1 %g s, ep=2 %g s (comm %g s)", e1, e2, c2);
    /* the same capacity per rank (micro_batch fixed): 2 ranks in one node vs tp=4 x ep=4 = 16 GPUs */
    double in = project_key("-D tp=4 -D dp=4 -D ep=2", "ep_comm_s.btp"), out = project_key("-D tp=4 -D dp=4 -D ep=4", "ep_comm_s.btp");
    CHECK(in > 0 && out > in, "project: an ep group past one node pays the network", "tp4 x ep2 %g s, tp4 x ep4 %g s", in, out);
}

int main(void) {
    mkdir("build", 0755); mkdir("build/tmp", 0755); mkdir(CASE_DIR, 0755);
    (void)open_case; (void)again; (void)compare_steps;   /* engine_cases.h's one-pass helpers: not used here */
    test_grid();
    test_spec_errors();
    test_loader_and_cuda();
    test_report();
    test_project();
    ep_case("specs/runs/tiny-cola-moe.lua", 1, 2, 2, 2, 0, 1, "");          /* top-2, full-width dispatch */
    ep_case("specs/runs/tiny-cola-moe.lua", 1, 4, 4, 1, 0, 1, "");
    ep_case("specs/runs/tiny-cola-moe.lua", 2, 2, 2, 1, 0, 1, "");          /* each tp rank dispatches its d/tp shard */
    ep_case("specs/runs/tiny-cola-moe.lua", 1, 2, 2, 1, 0, 2, "-D checkpoint=none");   /* micro=last on group=edp */
    ep_case("specs/runs/tiny-cola-moe-shared.lua", 1, 2, 2, 2, 1, 1, "");   /* shared factors: rank-r dispatch */
    ep_case("specs/runs/tiny-cola-moe-shared.lua", 2, 2, 2, 2, 1, 1, "");   /* ... the latents whole on each tp rank */
    ep_case("specs/runs/tiny-cola-moe-shared.lua", 1, 4, 4, 1, 1, 1, "");
    ep_case("specs/runs/tiny-cola-moe-shared.lua", 1, 4, 2, 1, 1, 2, "-D checkpoint=none");   /* edp groups of 2 */
    free(global_tok); free(global_tgt);
    TEST_EXIT();
}
