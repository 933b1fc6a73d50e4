/* test_tp_equivalence.c: the same model gives the same loss and the same canonical gradients
 * (norm-wise relative error < 1e-5 per tensor) whatever the TP degree, layout (btp, naive,
 * megatron), norm variant (online vs sync) and checkpointing (lowrank vs none), on the CPU backend,
 * with plans written by `boost gen`; and finite differences of the whole model's loss agree with
 * the engine's gradients at tp=1 and tp=2. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tests/unit/testlib.h"
#include "runtime/runtime.h"

#define GRAD_TOL 1e-5
#define LOSS_TOL 1e-5

typedef struct {
    char tag[128];
    Plan *p;
    Engine *e;
    float loss;
    float **grad;      /* per canon */
} Case;

static int32_t *batch_tokens, *batch_targets;
static int batch_n;

static void make_batch(int n, int vocab) {
    if (batch_n == n) return;
    free(batch_tokens); free(batch_targets);
    batch_tokens = malloc((size_t)n * sizeof(int32_t)); batch_targets = malloc((size_t)n * sizeof(int32_t));
    uint64_t s = 42;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        batch_tokens[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        batch_targets[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
    batch_n = n;
}

/* Generate RUN with the -D overrides, load, init, one forward+backward. Keeps the engine open. */
static int open_case(Case *c, const char *run, const char *defs) {
    memset(c, 0, sizeof *c);
    snprintf(c->tag, sizeof c->tag, "%s %s", run, defs);
    char dir[256], cmd[768], err[1024];
    snprintf(dir, sizeof dir, "build/tmp/tp/%s", run);
    for (const char *d = defs; *d; d++) {
        size_t n = strlen(dir);
        if (n + 2 >= sizeof dir) break;
        dir[n] = (*d == ' ' || *d == '=') ? '_' : *d == '-' ? 'D' : *d;
        dir[n + 1] = 0;
    }
    const char *boost = getenv("BOOST") ? getenv("BOOST") : "./bin/boost";   /* as tests/sh/lib.sh */
    snprintf(cmd, sizeof cmd, "%s gen specs/runs/%s.lua %s -o %s >%s.log 2>&1", boost, run, defs, dir, dir);
    if (system(cmd) != 0) {
        char log[600] = "";
        char lp[300];
        snprintf(lp, sizeof lp, "%s.log", dir);
        FILE *f = fopen(lp, "r");
        if (f) { size_t n = fread(log, 1, sizeof log - 1, f); log[n] = 0; fclose(f); }
        CHECK(0, c->tag, "boost gen failed: %s", log);
        return -1;
    }
    char plan[300];
    snprintf(plan, sizeof plan, "%s/plan.txt", dir);
    c->p = plan_load(plan, err, sizeof err);
    if (!c->p) { CHECK(0, c->tag, "plan_load: %s", err); return -1; }
    c->e = engine_create(c->p, "cpu", err, sizeof err);
    if (!c->e || engine_init_params(c->e, err, sizeof err)) { CHECK(0, c->tag, "engine: %s", err); return -1; }
    make_batch(c->p->micro_batch * c->p->seq, c->p->vocab);
    if (engine_forward_backward(c->e, batch_tokens, batch_targets, &c->loss, err, sizeof err)) {
        CHECK(0, c->tag, "forward_backward: %s", err);
        return -1;
    }
    c->grad = calloc((size_t)c->p->ncanons, sizeof *c->grad);
    for (int i = 0; i < c->p->ncanons; i++) {
        c->grad[i] = malloc((size_t)(c->p->canons[i].rows * c->p->canons[i].cols) * sizeof(float));
        engine_get_canon(c->e, i, SLOT_GRAD, c->grad[i]);
    }
    return 0;
}

static void close_case(Case *c) {
    if (c->grad) for (int i = 0; i < c->p->ncanons; i++) free(c->grad[i]);
    free(c->grad);
    if (c->e) engine_free(c->e);
    if (c->p) plan_free(c->p);
    memset(c, 0, sizeof *c);
}

static double rel_err(const float *a, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]); den += (double)ref[i] * ref[i]; }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One verdict: same loss and every canonical gradient within GRAD_TOL of the reference. */
static void compare(const Case *a, const Case *ref, const char *what) {
    if (!a->p || !ref->p) return;
    char name[300];
    snprintf(name, sizeof name, "%s: same loss and canonical gradients", what);
    double dl = fabs((double)a->loss - ref->loss) / fabs((double)ref->loss);
    if (a->p->ncanons != ref->p->ncanons) { CHECK(0, name, "%d canons vs %d", a->p->ncanons, ref->p->ncanons); return; }
    double worst = 0;
    const char *wname = "";
    for (int i = 0; i < ref->p->ncanons; i++) {
        const PlanCanon *rc = &ref->p->canons[i];
        int j = plan_find_canon(a->p, rc->name);
        if (j < 0 || a->p->canons[j].rows != rc->rows || a->p->canons[j].cols != rc->cols) {
            CHECK(0, name, "canon %s missing or reshaped", rc->name);
            return;
        }
        double e = rel_err(a->grad[j], ref->grad[i], rc->rows * rc->cols);
        if (e > worst || e != e) { worst = e; wname = rc->name; }
    }
    CHECK(dl < LOSS_TOL && worst < GRAD_TOL, name, "loss %.9g vs %.9g (rel %.2g), worst gradient %s rel %.3g", a->loss, ref->loss, dl,
          wname, worst);
}

/* Central differences of the loss (forward only) wrt the largest-gradient entries of a few canons. */
static void finite_differences(Case *c, const char *what) {
    if (!c->p) return;
    char err[1024];
    double num = 0, den = 0;
    int used = 0;
    for (int i = 0; i < c->p->ncanons && used < 8; i += 1 + c->p->ncanons / 6) {
        const PlanCanon *pc = &c->p->canons[i];
        int64_t n = pc->rows * pc->cols, best = 0;
        for (int64_t k = 1; k < n; k++) if (fabsf(c->grad[i][k]) > fabsf(c->grad[i][best])) best = k;
        float *p = malloc((size_t)n * sizeof *p);
        engine_get_canon(c->e, i, SLOT_PARAM, p);
        float keep = p[best];
        double ss = 0;
        for (int64_t k = 0; k < n; k++) ss += (double)p[k] * p[k];
        double eps = fmin(2e-2, 0.1 * sqrt(ss / (double)n));   /* small against the tensor's scale */
        float lp, lm;
        p[best] = (float)(keep + eps); engine_set_canon(c->e, i, SLOT_PARAM, p);
        engine_forward(c->e, batch_tokens, batch_targets, &lp, err, sizeof err);
        p[best] = (float)(keep - eps); engine_set_canon(c->e, i, SLOT_PARAM, p);
        engine_forward(c->e, batch_tokens, batch_targets, &lm, err, sizeof err);
        p[best] = keep; engine_set_canon(c->e, i, SLOT_PARAM, p);
        free(p);
        double fd = ((double)lp - lm) / (2 * eps), g = c->grad[i][best];
        num += (fd - g) * (fd - g);
        den += fd * fd;
        used++;
    }
    char name[200];
    snprintf(name, sizeof name, "%s: finite differences of the model loss match the gradients (%d entries)", what, used);
    CHECK(den > 0 && sqrt(num / den) < 3e-2, name, "norm-wise rel err %.3g", den > 0 ? sqrt(num / den) : -1.0);
}

/* Another forward+backward on the same batch; the canonical gradients are read again. */
static void again(Case *c) {
    char err[1024];
    if (engine_forward_backward(c->e, batch_tokens, batch_targets, &c->loss, err, sizeof err)) { CHECK(0, c->tag, "%s", err); return; }
    for (int i = 0; i < c->p->ncanons; i++) engine_get_canon(c->e, i, SLOT_GRAD, c->grad[i]);
}

/* A few optimizer steps on both (same batch): the canonical params and the reported grad norms
 * stay equal (replicated parts counted once in the norm, every rank updating its shard alike). */
static void compare_steps(Case *a, Case *ref, const char *what) {
    if (!a->p || !ref->p) return;
    char err[1024], name[300];
    double worst_norm = 0, worst = 0;
    const char *wname = "";
    for (int step = 0; step < 3; step++) {
        float na, nr, lra, lrr, la, lr_;
        if (step > 0 && (engine_forward_backward(a->e, batch_tokens, batch_targets, &la, err, sizeof err) ||
                         engine_forward_backward(ref->e, batch_tokens, batch_targets, &lr_, err, sizeof err))) {
            CHECK(0, what, "forward_backward: %s", err);
            return;
        }
        if (engine_optimizer_step(a->e, step, &na, &lra, err, sizeof err) || engine_optimizer_step(ref->e, step, &nr, &lrr, err, sizeof err)) {
            CHECK(0, what, "optimizer: %s", err);
            return;
        }
        worst_norm = fmax(worst_norm, fabs(na - nr) / nr);
    }
    for (int i = 0; i < ref->p->ncanons; i++) {
        const PlanCanon *rc = &ref->p->canons[i];
        int j = plan_find_canon(a->p, rc->name);
        if (j < 0) continue;
        int64_t n = rc->rows * rc->cols;
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
        engine_get_canon(a->e, j, SLOT_PARAM, x);
        engine_get_canon(ref->e, i, SLOT_PARAM, y);
        double e = rel_err(x, y, n);
        if (e > worst || e != e) { worst = e; wname = rc->name; }
        free(x); free(y);
    }
    snprintf(name, sizeof name, "%s: same grad norms and params after 3 AdamW steps", what);
    CHECK(worst_norm < 1e-5 && worst < 1e-5, name, "grad norm rel %.3g, worst param %s rel %.3g", worst_norm, wname, worst);
}

int main(void) {
    mkdir("build", 0755); mkdir("build/tmp", 0755); mkdir("build/tmp/tp", 0755);
    Case ref, c;

    /* CoLA, btp: tp = 1, 2, 4 */
    if (open_case(&ref, "tiny-cola", "-D tp=1") == 0) {
        finite_differences(&ref, "tiny-cola btp tp=1");
        if (!open_case(&c, "tiny-cola", "-D tp=2")) { compare(&c, &ref, "tiny-cola btp tp=2 vs tp=1"); finite_differences(&c, "tiny-cola btp tp=2"); }
        close_case(&c);
        if (!open_case(&c, "tiny-cola", "-D tp=4")) {
            compare(&c, &ref, "tiny-cola btp tp=4 vs tp=1");
            compare_steps(&c, &ref, "tiny-cola btp tp=4 vs tp=1");
        }
        close_case(&c);
        if (!open_case(&c, "tiny-cola", "-D tp=2 -D grad_accum=2")) {
            again(&c);
            compare(&c, &ref, "tiny-cola btp tp=2 grad_accum=2, the same micro-batch twice, vs tp=1 once");
        }
        close_case(&c);
        if (!open_case(&c, "tiny-cola", "-D tp=2 -D online_rmsnorm=false")) compare(&c, &ref, "tiny-cola btp tp=2 sync norm vs online norm tp=1");
        close_case(&c);
        if (!open_case(&c, "tiny-cola", "-D tp=4 -D online_rmsnorm=false -D checkpoint=none"))
            compare(&c, &ref, "tiny-cola btp tp=4 sync norm, no checkpointing vs tp=1");
        close_case(&c);
        if (!open_case(&c, "tiny-cola", "-D tp=2 -D checkpoint=none")) compare(&c, &ref, "tiny-cola btp tp=2 checkpoint=none vs lowrank");
        close_case(&c);
        if (!open_case(&c, "tiny-cola", "-D tp=1 -D layout=naive")) compare(&c, &ref, "tiny-cola naive tp=1 vs btp tp=1");
        close_case(&c);
        if (!open_case(&c, "tiny-cola", "-D tp=2 -D layout=naive")) compare(&c, &ref, "tiny-cola naive tp=2 vs btp tp=1");
        close_case(&c);
        if (!open_case(&c, "tiny-cola", "-D tp=4 -D layout=naive")) compare(&c, &ref, "tiny-cola naive tp=4 vs btp tp=1");
        close_case(&c);
        if (!open_case(&c, "tiny-cola", "-D tp=2 -D group_linears=false")) compare(&c, &ref, "tiny-cola btp tp=2 ungrouped linears vs tp=1");
        close_case(&c);
    }
    close_case(&ref);

    /* full-rank LLaMA, megatron: tp = 1, 2, 4 */
    if (open_case(&ref, "tiny-llama", "-D tp=1") == 0) {
        finite_differences(&ref, "tiny-llama megatron tp=1");
        if (!open_case(&c, "tiny-llama", "-D tp=2")) { compare(&c, &ref, "tiny-llama megatron tp=2 vs tp=1"); finite_differences(&c, "tiny-llama megatron tp=2"); }
        close_case(&c);
        if (!open_case(&c, "tiny-llama", "-D tp=4")) {
            compare(&c, &ref, "tiny-llama megatron tp=4 vs tp=1");
            compare_steps(&c, &ref, "tiny-llama megatron tp=4 vs tp=1");
        }
        close_case(&c);
    }
    close_case(&ref);

    static const char *others[] = {"tiny-cola-gqa", "tiny-lax", "tiny-svd"};
    for (int k = 0; k < 3; k++) {
        char what[128];
        if (open_case(&ref, others[k], "-D tp=1") == 0) {
            if (!open_case(&c, others[k], "-D tp=2")) {
                snprintf(what, sizeof what, "%s tp=2 vs tp=1", others[k]);
                compare(&c, &ref, what);
                snprintf(what, sizeof what, "%s tp=2", others[k]);
                finite_differences(&c, what);
            }
            close_case(&c);
            if (k > 0 && !open_case(&c, others[k], "-D tp=4")) {
                snprintf(what, sizeof what, "%s tp=4 vs tp=1", others[k]);
                compare(&c, &ref, what);
            }
            close_case(&c);
        }
        close_case(&ref);
    }
    TEST_EXIT();
}
