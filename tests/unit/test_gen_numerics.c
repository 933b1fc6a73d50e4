/* test_gen_numerics.c: the generator's schedules executed on the CPU backend. The same model must
 * give the same loss and the same gradient of every canonical parameter at tp=1, 2 and 4, in the
 * btp and naive layouts, with and without checkpointing, grouping, online norm, for MHA, GQA and
 * LaX; the full-rank twin under megatron likewise across tp. The reference is the tp=1 schedule. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tests/unit/testlib.h"
#include "gen/ir.h"
#include "gen/build_fixture.h"
#include "gen/pipeline.h"
#include "gen/plan_write.h"
#include "runtime/runtime.h"

typedef struct { int n; char names[64][96]; float *g[64]; int64_t sz[64]; float loss; } Result;

static int32_t tokens[256], targets[256];

/* Central differences of the loss along single parameters against the schedule's gradient. */
static void fd_check(Engine *e, const Plan *p, const char *label) {
    const char *names[] = {"embed", "L0.attn_norm", "L0.q.A", "L0.k.B", "L0.v.A", "L0.o.B", "L0.mlp_norm", "L0.gate.A",
                           "L0.up.B", "L1.down.A", "L1.down.B", "final_norm", "head", "L1.q.W", "L0.down.W"};
    char err[600], nm[200];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int c = plan_find_canon(p, names[i]);
        if (c < 0) continue;
        int64_t n = p->canons[c].rows * p->canons[c].cols;
        float *w = malloc((size_t)n * sizeof *w), *gr = malloc((size_t)n * sizeof *gr);
        engine_get_canon(e, c, SLOT_PARAM, w);
        engine_get_canon(e, c, SLOT_GRAD, gr);
        /* the element with the largest gradient, and one in the middle */
        int64_t best = 0;
        for (int64_t k = 1; k < n; k++) if (fabsf(gr[k]) > fabsf(gr[best])) best = k;
        int64_t idx[2] = {best, n / 2 + 1 < n ? n / 2 + 1 : 0};
        double worst = 0;
        for (int j = 0; j < 2; j++) {
            float keep = w[idx[j]], h = 1e-2f * fmaxf(1.0f, fabsf(keep)), lp, lm;
            w[idx[j]] = keep + h; engine_set_canon(e, c, SLOT_PARAM, w); engine_forward(e, tokens, targets, &lp, err, sizeof err);
            w[idx[j]] = keep - h; engine_set_canon(e, c, SLOT_PARAM, w); engine_forward(e, tokens, targets, &lm, err, sizeof err);
            w[idx[j]] = keep; engine_set_canon(e, c, SLOT_PARAM, w);
            double fd = ((double)lp - lm) / (2.0 * h), an = gr[idx[j]];
            /* tolerance: 5% of the largest gradient plus the rounding of two fp32 losses */
            double noise = 3 * 1.19e-7 * fabs((double)lp) / (2.0 * h);
            double rel = fabs(fd - an) / (fabs(gr[best]) * 0.05 + noise);
            if (getenv("FD_VERBOSE")) printf("# %s %s[%lld] fd %.6g analytic %.6g (max %.3g)\n", label, names[i], (long long)idx[j], fd, an, gr[best]);
            if (!(rel <= worst)) worst = rel;   /* a NaN becomes the worst */
        }
        snprintf(nm, sizeof nm, "%s: finite differences of the loss match d.%s", label, names[i]);
        CHECK(worst < 1, nm, "difference %.3f of the tolerance (5%% of the largest gradient + fp32 rounding)", worst);
        free(w); free(gr);
    }
}

static int run_variant_fd(const Run *r, Result *res, char *why, size_t whylen, const char *fd_label);
static int run_variant(const Run *r, Result *res, char *why, size_t whylen) { return run_variant_fd(r, res, why, whylen, NULL); }

static int run_variant_fd(const Run *r, Result *res, char *why, size_t whylen, const char *fd_label) {
    char err[1024];
    int status;
    Graph *g = graph_build(r, r->layout, r->checkpoint, err, sizeof err, &status);
    if (!g) { snprintf(why, whylen, "gen: %s", err); return 1; }
    char path[64];
    snprintf(path, sizeof path, "/tmp/test_gen_numerics.%d.plan", (int)getpid());
    FILE *f = fopen(path, "w");
    plan_write(g, f);
    fclose(f);
    graph_free(g);
    Plan *p = plan_load(path, err, sizeof err);
    remove(path);
    if (!p) { snprintf(why, whylen, "load: %s", err); return 1; }
    Engine *e = engine_create(p, "cpu", err, sizeof err);
    if (!e) { snprintf(why, whylen, "engine: %s", err); plan_free(p); return 1; }
    int rc = engine_init_params(e, err, sizeof err);
    if (!rc) rc = engine_forward_backward(e, tokens, targets, &res->loss, err, sizeof err);
    if (rc) { snprintf(why, whylen, "run: %s", err); engine_free(e); plan_free(p); return 1; }
    res->n = p->ncanons < 64 ? p->ncanons : 64;
    for (int c = 0; c < res->n; c++) {
        snprintf(res->names[c], sizeof res->names[c], "%s", p->canons[c].name);
        res->sz[c] = p->canons[c].rows * p->canons[c].cols;
        res->g[c] = malloc((size_t)res->sz[c] * sizeof(float));
        engine_get_canon(e, c, SLOT_GRAD, res->g[c]);
    }
    if (fd_label) fd_check(e, p, fd_label);
    engine_free(e);
    plan_free(p);
    return 0;
}

static void free_result(Result *r) { for (int i = 0; i < r->n; i++) free(r->g[i]); r->n = 0; }

/* Max over canons of max|a-b| / max|ref|. */
static double compare(const Result *ref, const Result *x, char *worst, size_t wl) {
    double w = 0;
    for (int i = 0; i < ref->n; i++) {
        int j = -1;
        for (int k = 0; k < x->n; k++) if (!strcmp(ref->names[i], x->names[k])) j = k;
        if (j < 0 || x->sz[j] != ref->sz[i]) { snprintf(worst, wl, "%s missing", ref->names[i]); return 1e9; }
        double mx = 1e-12, md = 0;
        for (int64_t e = 0; e < ref->sz[i]; e++) {
            mx = fmax(mx, fabs(ref->g[i][e]));
            md = tl_worst(md, fabs(ref->g[i][e] - x->g[j][e]));
        }
        if (!(md / mx <= w)) { w = md / mx; snprintf(worst, wl, "%s", ref->names[i]); }
    }
    return w;
}

static void variant(const char *name, const Result *ref, Run *r) {
    Result x = {0};
    char why[1200], worst[128] = "";
    if (run_variant(r, &x, why, sizeof why)) { CHECK(0, name, "%s", why); return; }
    double gd = compare(ref, &x, worst, sizeof worst);
    double ld = fabs(x.loss - ref->loss) / fabs(ref->loss);
    CHECK(ld < 1e-5 && gd < 2e-4, name, "loss %.7f vs reference %.7f; worst gradient %s off by %.2e (relative to its max)",
          x.loss, ref->loss, worst, gd);
    free_result(&x);
}

static int uneven;   /* a different rank per projection (rank functions in specs) */

static void reset(Run *r, int lax, int kv, int full) {
    run_tiny_cola(r);
    static const int ranks[NPROJ] = {32, 16, 24, 32, 40, 24, 16};
    if (uneven)
        for (int i = 0; i < r->model.layers; i++)
            for (int p = 0; p < NPROJ; p++) r->model.proj[i][p].rank = ranks[p] + 8 * i;
    r->checkpoint = CKPT_NONE;
    r->tp = 1;
    r->model.lax = lax;
    r->model.kv_heads = kv;
    if (full) {
        strcpy(r->model.family, "full");
        r->model.mlp_gate_act = ACT_SILU;
        for (int i = 0; i < r->model.layers; i++)
            for (int p = 0; p < NPROJ; p++) { r->model.proj[i][p].factor = FACTOR_FULL; r->model.proj[i][p].rank = 0; }
        r->layout = LAYOUT_MEGATRON;
    }
}

int main(void) {
    uint64_t s = 12345;
    for (int i = 0; i < 256; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull; tokens[i] = (int32_t)(s >> 33) % 256;
        s = s * 6364136223846793005ull + 1442695040888963407ull; targets[i] = (int32_t)(s >> 33) % 256;
    }
    static Run r;
    for (int model = 0; model < 5; model++) {
        int lax = model == 1, kv = model == 2 ? 2 : 4, full = model == 3;
        uneven = model == 4;
        const char *mname = model == 0 ? "cola" : model == 1 ? "lax" : model == 2 ? "gqa" : model == 3 ? "full" : "uneven-ranks";
        reset(&r, lax, kv, full);
        Result ref = {0};
        char why[1200], nm[128];
        snprintf(nm, sizeof nm, "%s reference tp=1 runs", mname);
        char fdl[64];
        snprintf(fdl, sizeof fdl, "%s tp=1", mname);
        if (run_variant_fd(&r, &ref, why, sizeof why, fdl)) { CHECK(0, nm, "%s", why); continue; }
        CHECK(isfinite(ref.loss) && fabs(ref.loss - logf(256)) < 0.5, nm, "loss %f (expected near ln 256)", ref.loss);
        int maxtp = kv == 4 ? 4 : 2;
        for (int tp = 1; tp <= maxtp; tp *= 2)
            for (int ck = 0; ck < 2; ck++) {
                if (tp == 1 && ck == 0) continue;
                reset(&r, lax, kv, full); r.tp = tp; r.checkpoint = ck ? CKPT_LOWRANK : CKPT_NONE;
                snprintf(nm, sizeof nm, "%s %s tp=%d checkpoint=%s matches tp=1", mname, layout_name(r.layout), tp, ck ? "lowrank" : "none");
                variant(nm, &ref, &r);
            }
        if (full) { free_result(&ref); continue; }
        reset(&r, lax, kv, full); r.tp = 2; r.online_rmsnorm = 0;
        snprintf(nm, sizeof nm, "%s btp tp=2 sync norm matches", mname); variant(nm, &ref, &r);
        reset(&r, lax, kv, full); r.tp = 2; r.group_linears = 0;
        snprintf(nm, sizeof nm, "%s btp tp=2 ungrouped matches", mname); variant(nm, &ref, &r);
        reset(&r, lax, kv, full); r.tp = 2; r.group_linears = 0; r.online_rmsnorm = 0; r.checkpoint = CKPT_LOWRANK;
        snprintf(nm, sizeof nm, "%s btp tp=2 ungrouped sync lowrank matches", mname); variant(nm, &ref, &r);
        for (int tp = 1; tp <= maxtp; tp *= 2) {
            reset(&r, lax, kv, full); r.tp = tp; r.layout = LAYOUT_NAIVE;
            snprintf(nm, sizeof nm, "%s naive tp=%d matches", mname, tp); variant(nm, &ref, &r);
        }
        reset(&r, lax, kv, full); r.tp = 2; r.layout = LAYOUT_NAIVE; r.group_linears = 0; r.checkpoint = CKPT_LOWRANK;
        snprintf(nm, sizeof nm, "%s naive tp=2 ungrouped lowrank matches", mname); variant(nm, &ref, &r);
        free_result(&ref);
    }
    TEST_EXIT();
}
