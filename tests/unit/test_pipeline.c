/* test_pipeline.c: pipeline parallelism on the CPU backend (stages' ranks as threads, send/recv as
 * queues): pp=2 and pp=4 with tp=1/2 and dp=1/2 against pp=1 on the same global batch (loss of every
 * micro-batch and every canonical gradient within 1e-5 relative, then AdamW steps), for cola, llama
 * (megatron), gqa, svd and lax; the paper's tp4 x pp2 and tp4 x pp4 grids on a 4-layer tiny model;
 * resume across pp (parameters and AdamW moments of a pp=2 run continue identically at pp=1 and pp=4);
 * MoE (tiny-cola-moe at pp=2, pp=2 x tp=2, dp=2; a 4-layer MoE model with a router z-loss at pp=2,
 * pp=4 and interleaved): each micro-batch's loss, which must include every stage's load-balance and
 * z-loss terms, and every canonical gradient (routers included) equal pp=1's;
 * schedules that do not pair up or deadlock are refused on load. */
#define CASE_DIR "build/tmp/pipeline"
#include <stdio.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "runtime/pipeline.h"

#define CASE_TOL 1e-5

/* Norm-wise relative error ||a - ref|| / ||ref|| (absolute when ref is zero). */
static double rel_err(const float *a, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]); den += (double)ref[i] * ref[i]; }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int32_t *gtok, *gtgt;
static int64_t gn;

static void global_batch(int64_t n, int vocab) {
    free(gtok); free(gtgt);
    gtok = malloc((size_t)n * sizeof *gtok); gtgt = malloc((size_t)n * sizeof *gtgt);
    uint64_t s = 11;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        gtok[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        gtgt[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
    gn = n;
}

/* Either a pp=1 Engine or a Pipeline, after one optimizer step's passes. */
typedef struct {
    char tag[300];
    Plan *p; Engine *e;          /* pp = 1 */
    Pipeline *pl;                /* pp > 1 */
    float loss;                  /* mean over the micro-batches */
    float mloss[64];
} Run1;

static int gen(const char *spec, const char *defs, char *plan, size_t n, char *tag) {
    char dir[256], cmd[1200];
    snprintf(dir, sizeof dir, "%s/%s", CASE_DIR, strrchr(spec, '/') ? strrchr(spec, '/') + 1 : spec);   /* a spec file: its name */
    for (const char *d = defs; *d; d++) {
        size_t k = strlen(dir);
        if (k + 2 >= sizeof dir) break;
        dir[k] = (*d == ' ' || *d == '=') ? '_' : *d == '-' ? 'D' : *d;
        dir[k + 1] = 0;
    }
    const char *boost = getenv("BOOST") ? getenv("BOOST") : "./bin/boost";
    snprintf(cmd, sizeof cmd, "%s gen %s %s -o %s >%s.log 2>&1", boost, spec, defs, dir, dir);
    if (system(cmd) != 0) { CHECK(0, tag, "boost gen failed (see %s.log)", dir); return -1; }
    snprintf(plan, n, "%s/plan.txt", dir);
    return 0;
}

static int passes(Run1 *r) {
    char err[1024];
    if (r->pl) {
        if (pipeline_forward_backward(r->pl, gtok, gtgt, r->mloss, err, sizeof err)) { CHECK(0, r->tag, "%s", err); return -1; }
        double s = 0;
        int m = pipeline_micro_batches(r->pl);
        for (int j = 0; j < m; j++) s += r->mloss[j];
        r->loss = (float)(s / m);
        return 0;
    }
    int64_t per = (int64_t)r->p->micro_batch * r->p->seq * r->p->dp;
    double s = 0;
    for (int a = 0; a < r->p->grad_accum; a++) {
        if (engine_forward_backward(r->e, gtok + a * per, gtgt + a * per, &r->mloss[a], err, sizeof err)) { CHECK(0, r->tag, "%s", err); return -1; }
        s += r->mloss[a];
    }
    r->loss = (float)(s / r->p->grad_accum);
    return 0;
}

static int open_run(Run1 *r, const char *spec, const char *defs, int pass) {
    memset(r, 0, sizeof *r);
    snprintf(r->tag, sizeof r->tag, "%s %s", spec, defs);
    char plan[300], err[1024];
    if (gen(spec, defs, plan, sizeof plan, r->tag)) return -1;
    int is = pipeline_plan_is(plan);
    if (is == 1) {
        r->pl = pipeline_open(plan, "cpu", err, sizeof err);
        if (!r->pl || pipeline_init_params(r->pl, err, sizeof err)) { CHECK(0, r->tag, "pipeline: %s", err); return -1; }
    } else {
        r->p = plan_load(plan, err, sizeof err);
        if (!r->p) { CHECK(0, r->tag, "plan_load: %s", err); return -1; }
        r->e = engine_create(r->p, "cpu", err, sizeof err);
        if (!r->e || engine_init_params(r->e, err, sizeof err)) { CHECK(0, r->tag, "engine: %s", err); return -1; }
    }
    return pass ? passes(r) : 0;
}

static void close_run(Run1 *r) {
    if (r->pl) pipeline_free(r->pl);
    if (r->e) engine_free(r->e);
    if (r->p) plan_free(r->p);
    memset(r, 0, sizeof *r);
}

static int ncanon(const Run1 *r) { return r->pl ? pipeline_canon_count(r->pl) : r->p->ncanons; }
static const PlanCanon *canon(const Run1 *r, int i) { return r->pl ? pipeline_canon(r->pl, i) : &r->p->canons[i]; }
static int find_canon(const Run1 *r, const char *name) { return r->pl ? pipeline_find_canon(r->pl, name) : plan_find_canon(r->p, name); }
static int get_canon(Run1 *r, int i, int slot, float *x) { return r->pl ? pipeline_get_canon(r->pl, i, slot, x) : engine_get_canon(r->e, i, slot, x); }
static int set_canon(Run1 *r, int i, int slot, const float *x) { return r->pl ? pipeline_set_canon(r->pl, i, slot, x) : engine_set_canon(r->e, i, slot, x); }
static int opt_step(Run1 *r, int step, float *norm, char *err, size_t n) {
    float lr;
    return r->pl ? pipeline_optimizer_step(r->pl, step, norm, &lr, err, n) : engine_optimizer_step(r->e, step, norm, &lr, err, n);
}

/* The worst relative difference over every canonical tensor of `slot` (names and shapes must match). */
static double worst_canon(Run1 *a, Run1 *ref, int slot, const char **wname, char *why, size_t n) {
    double worst = 0;
    if (ncanon(a) != ncanon(ref)) { snprintf(why, n, "%d canons vs %d", ncanon(a), ncanon(ref)); return NAN; }
    for (int i = 0; i < ncanon(ref); i++) {
        const PlanCanon *rc = canon(ref, i);
        int j = find_canon(a, rc->name);
        if (j < 0 || canon(a, j)->rows != rc->rows || canon(a, j)->cols != rc->cols) { snprintf(why, n, "canon %s missing", rc->name); return NAN; }
        int64_t k = rc->rows * rc->cols;
        float *x = malloc((size_t)k * sizeof *x), *y = malloc((size_t)k * sizeof *y);
        get_canon(a, j, slot, x); get_canon(ref, i, slot, y);
        double e = rel_err(x, y, k);
        free(x); free(y);
        if (e > worst || e != e) { worst = e; *wname = rc->name; }
    }
    return worst;
}

/* Same per-micro-batch losses and canonical gradients; then `steps` AdamW steps give the same norms and params. */
static void compare_runs(Run1 *a, Run1 *ref, const char *what, int steps) {
    char name[800], why[300] = "", err[1024];
    const char *wname = "";
    int m = a->pl ? pipeline_micro_batches(a->pl) : a->p->grad_accum;
    double dl = 0;
    for (int j = 0; j < m; j++) dl = tl_worst(dl, fabs((double)a->mloss[j] - ref->mloss[j]) / fabs((double)ref->mloss[j]));
    /* ZeRO-1: a rank's gradient is reduced on its shard only, so the canonical gradients are not
     * comparable; the losses and the parameters after the steps are */
    int zero = strstr(what, "zero=1") != NULL;
    double wg = zero ? 0 : worst_canon(a, ref, SLOT_GRAD, &wname, why, sizeof why);
    snprintf(name, sizeof name, "%s: same loss of every micro-batch%s", what, zero ? "" : " and every canonical gradient");
    CHECK(dl < CASE_TOL && wg < CASE_TOL, name, "%s loss %.9g vs %.9g (worst micro rel %.2g), worst gradient %s rel %.3g", why,
          a->loss, ref->loss, dl, wname, wg);
    if (!steps) return;
    double wn = 0;
    for (int s = 0; s < steps; s++) {
        float na, nr;
        if (s > 0 && (passes(a) || passes(ref))) return;
        if (opt_step(a, s, &na, err, sizeof err) || opt_step(ref, s, &nr, err, sizeof err)) { CHECK(0, what, "optimizer: %s", err); return; }
        wn = tl_worst(wn, fabs((double)na - nr) / nr);
    }
    double wp = worst_canon(a, ref, SLOT_PARAM, &wname, why, sizeof why);
    snprintf(name, sizeof name, "%s: same gradient norms and params after %d AdamW steps", what, steps);
    CHECK(wn < CASE_TOL && wp < CASE_TOL, name, "%s grad norm rel %.3g, worst param %s rel %.3g", why, wn, wname, wp);
}

static void grid_case(const char *spec, const char *model_defs, int pp, int tp, int dp, int m, int mb, int steps) {
    char defs[400], rdefs[400], what[500];
    Run1 ref, r;
    global_batch((int64_t)mb * 32 * dp * m, 256);
    /* the reference: pp=1 has no virtual stages */
    snprintf(rdefs, sizeof rdefs, "%s -D tp=1 -D pp=1 -D dp=1 -D grad_accum=%d -D micro_batch=%d -D seq=32",
             strstr(model_defs, "virtual_stages") ? "" : model_defs, m * dp, mb);
    snprintf(defs, sizeof defs, "%s -D tp=%d -D pp=%d -D dp=%d -D grad_accum=%d -D micro_batch=%d -D seq=32 -D dp_bucket_mb=0.05",
             model_defs, tp, pp, dp, m, mb);
    if (open_run(&ref, spec, rdefs, 1) == 0 && open_run(&r, spec, defs, 1) == 0) {
        /* dp > 1: the reference's micro-batch j*dp+i is dp rank i's share of block j: compare the block means */
        if (dp > 1) {
            for (int j = 0; j < m; j++) {
                double s = 0;
                for (int i = 0; i < dp; i++) s += ref.mloss[j * dp + i];
                ref.mloss[j] = (float)(s / dp);
            }
        }
        snprintf(what, sizeof what, "%s%s%s pp=%d tp=%d dp=%d m=%d vs pp=1 tp=1", spec, *model_defs ? " " : "", model_defs, pp, tp, dp, m);
        compare_runs(&r, &ref, what, steps);
    }
    close_run(&r);
    close_run(&ref);
}

/* Resume across pp: params and AdamW moments taken from a pp=2 run after two steps are set into fresh
 * runs at pp=1 and pp=4 (and a pp=2 run that keeps going is the reference): one more step agrees. */
static void resume_case(void) {
    const char *spec = "tiny-cola-pp2";
    char d2[300], d1[300], d4[300];
    snprintf(d2, sizeof d2, "-D tp=1 -D pp=2 -D grad_accum=4 -D micro_batch=2 -D seq=32");
    snprintf(d1, sizeof d1, "-D tp=1 -D pp=1 -D grad_accum=4 -D micro_batch=2 -D seq=32");
    snprintf(d4, sizeof d4, "-D tp=2 -D pp=4 -D grad_accum=4 -D micro_batch=2 -D seq=32");
    global_batch(2 * 32 * 4, 256);
    Run1 a, b, c;
    char err[1024];
    float nrm;
    if (open_run(&a, spec, d2, 0) || open_run(&b, spec, d1, 0) || open_run(&c, spec, d4, 0)) { close_run(&a); close_run(&b); close_run(&c); return; }
    for (int s = 0; s < 2; s++)
        if (passes(&a) || opt_step(&a, s, &nrm, err, sizeof err)) { CHECK(0, "resume across pp", "pp=2 steps: %s", err); goto out; }
    /* "save" at pp=2, "load" at pp=1 and pp=4: the canonical tensors by name */
    for (int i = 0; i < ncanon(&a); i++) {
        const PlanCanon *pc = canon(&a, i);
        float *x = malloc(sizeof(float) * (size_t)(pc->rows * pc->cols));
        for (int slot = SLOT_PARAM; slot <= SLOT_ADAM_V; slot++) {
            get_canon(&a, i, slot, x);
            int jb = find_canon(&b, pc->name), jc = find_canon(&c, pc->name);
            if (jb < 0 || jc < 0 || set_canon(&b, jb, slot, x) || set_canon(&c, jc, slot, x)) {
                CHECK(0, "resume across pp", "canon %s: missing or not set", pc->name);
                free(x);
                goto out;
            }
        }
        free(x);
    }
    float na, nb, nc;
    if (passes(&a) || passes(&b) || passes(&c) || opt_step(&a, 2, &na, err, sizeof err) || opt_step(&b, 2, &nb, err, sizeof err) ||
        opt_step(&c, 2, &nc, err, sizeof err)) {
        CHECK(0, "resume across pp", "step 3: %s", err);
        goto out;
    }
    const char *w1 = "", *w4 = "";
    char why[300] = "";
    double e1 = worst_canon(&b, &a, SLOT_PARAM, &w1, why, sizeof why), e4 = worst_canon(&c, &a, SLOT_PARAM, &w4, why, sizeof why);
    double m1 = worst_canon(&b, &a, SLOT_ADAM_V, &w1, why, sizeof why);
    CHECK(e1 < CASE_TOL && e4 < CASE_TOL && m1 < CASE_TOL && fabs(nb - na) / na < CASE_TOL && fabs(nc - na) / na < CASE_TOL,
          "resume across pp: state of a pp=2 run continues at pp=1 and pp=4 (tp=2) with the same step",
          "%s params rel pp1 %.3g pp4 %.3g (worst %s %s), adam v rel %.3g, norms %g %g %g", why, e1, e4, w1, w4, m1, na, nb, nc);
out:
    close_run(&a); close_run(&b); close_run(&c);
}

/* Bad pipeline plans: a schedule whose receives do not pair up, and one that deadlocks. */
static void bad_plans(void) {
    char plan[300], tag[] = "bad pipeline plans";
    if (gen("tiny-cola-pp2", "-D tp=1 -D micro_batch=1 -D seq=16", plan, sizeof plan, tag)) return;
    FILE *f = fopen(plan, "r");
    if (!f) { CHECK(0, tag, "cannot read %s", plan); return; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *t = malloc((size_t)n + 1);
    size_t got = fread(t, 1, (size_t)n, f);
    t[got] = 0;
    fclose(f);
    struct { const char *from, *to, *name, *want; } cases[] = {
        /* stage 1 receives micro-batch 1 first */
        {"recv stage=1 dir=fwd buf=L2.x micro=0 slot=0 peer=0", "recv stage=1 dir=fwd buf=L2.x micro=1 slot=0 peer=0", "receives out of order", "sent first"},
        /* stage 0 waits for micro-batch 0's gradient before sending its forward: nobody can move */
        {"forward stage=0 micro=0 slot=0\nsend stage=0 dir=fwd buf=L2.x micro=0 slot=0 peer=1\n",
         "recv stage=0 dir=bwd buf=d.L4.x micro=0 slot=0 peer=1\nforward stage=0 micro=0 slot=0\nsend stage=0 dir=fwd buf=L2.x micro=0 slot=0 peer=1\n",
         "a stage waiting on itself deadlocks", "forever"},
    };
    for (int k = 0; k < 2; k++) {
        char *p = strstr(t, cases[k].from);
        if (!p) { CHECK(0, cases[k].name, "pattern not in the plan"); continue; }
        char path[320];
        snprintf(path, sizeof path, "%s.bad%d", plan, k);
        FILE *o = fopen(path, "w");
        fwrite(t, 1, (size_t)(p - t), o);
        fputs(cases[k].to, o);
        fputs(p + strlen(cases[k].from), o);
        fclose(o);
        char err[1024] = "";
        Pipeline *pl = pipeline_open(path, "cpu", err, sizeof err);
        char name[200];
        snprintf(name, sizeof name, "bad pipeline plan: %s", cases[k].name);
        CHECK(!pl && strstr(err, cases[k].want) && strstr(err, ".bad"), name, "err: %s", err);
        pipeline_free(pl);
    }
    free(t);
}

/* A 4-layer tiny-cola-moe with a router z-loss, so that a stage holds two MoE layers at pp=2. */
static const char *zloss_spec(void) {
    static const char *path = CASE_DIR "/moe4z.lua";
    FILE *f = fopen(path, "w");
    if (!f) { CHECK(0, "moe4z spec", "cannot write %s", path); return NULL; }
    fputs("-- a test run of test_pipeline.c: a 4-layer tiny-cola-moe with a router z-loss, split over pipeline stages\n"
          "return run {\n"
          "  model = model \"moe4z\" {\n"
          "    hidden = 128, layers = 4, heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 },\n"
          "    moe = moe { experts = 4, top_k = 2, capacity_factor = 1.25, aux_loss = 0.01, expert_ffn = 192, z_loss = 0.001 },\n"
          "  },\n"
          "  gpu = \"h100\",\n"
          "  parallel = { tp = 1, layout = \"btp\" },\n"
          "  features = { online_rmsnorm = true, group_linears = true, checkpoint = \"lowrank\" },\n"
          "  train = { micro_batch = 2, seq = 32 },\n"
          "}\n", f);
    fclose(f);
    return path;
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : "";
    if (system("mkdir -p " CASE_DIR) != 0) { CHECK(0, "mkdir " CASE_DIR, "failed"); TEST_EXIT(); }
    if (!*only || strstr("grids", only)) {
        grid_case("tiny-cola-pp2", "", 2, 1, 1, 4, 2, 3);
        grid_case("tiny-cola-pp2", "", 2, 2, 2, 2, 2, 0);
        grid_case("tiny-cola-pp2", "", 4, 2, 1, 4, 2, 2);
        grid_case("tiny-cola-pp2", "", 4, 1, 2, 4, 2, 0);
        grid_case("tiny-cola-pp2", "-D model=tiny-llama -D layout=megatron -D online_rmsnorm=false -D checkpoint=none", 2, 2, 1, 3, 2, 2);
        grid_case("tiny-cola-pp2", "", 2, 4, 1, 2, 2, 2);   /* the paper's tp4 x pp2 at toy size (low-rank checkpointing) */
        grid_case("tiny-cola-pp2", "-D checkpoint=none -D model=tiny-cola-gqa", 2, 2, 1, 2, 2, 0);
        grid_case("tiny-cola-pp2", "-D model=tiny-svd", 2, 2, 1, 2, 2, 0);
        grid_case("tiny-cola-pp2", "-D model=tiny-lax", 2, 2, 2, 2, 2, 0);
        grid_case("tiny-cola-pp2", "-D checkpoint=none", 4, 4, 1, 4, 1, 0);   /* the paper's tp4 x pp4 at toy size (4 layers) */
        grid_case("tiny-cola-pp2", "-D zero=1", 2, 2, 2, 2, 2, 2);   /* ZeRO-1 per stage */
        /* interleaved 1F1B: two chunks of one layer per rank */
        grid_case("tiny-cola-pp2", "-D virtual_stages=2", 2, 1, 1, 4, 2, 2);
        grid_case("tiny-cola-pp2", "-D virtual_stages=2", 2, 2, 2, 2, 2, 0);
    }
    if (!*only || strstr("moe", only)) {
        grid_case("tiny-cola-moe", "", 2, 1, 1, 2, 2, 2);
        grid_case("tiny-cola-moe", "", 2, 2, 1, 2, 2, 2);   /* pp=2 x tp=2 */
        grid_case("tiny-cola-moe", "", 2, 2, 2, 2, 2, 0);
        const char *z = zloss_spec();
        if (z) {
            grid_case(z, "", 2, 1, 1, 4, 2, 2);
            grid_case(z, "", 4, 2, 1, 4, 1, 0);
            grid_case(z, "-D virtual_stages=2", 2, 1, 1, 4, 2, 0);
        }
    }
    if (!*only || strstr("resume", only)) resume_case();
    if (!*only || strstr("bad", only)) bad_plans();
    free(gtok); free(gtgt);
    TEST_EXIT();
}
