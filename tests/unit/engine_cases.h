/* engine_cases.h: one generated plan on the CPU engine as a test case, for the tests that compare
 * runs of one model (TP degrees, layouts, features): `boost gen` into CASE_DIR, load, initialise,
 * one forward+backward on a fixed random batch with the canonical gradients kept; then comparisons
 * of the loss, every canonical gradient and three AdamW steps (relative 1e-5). Define CASE_DIR
 * before including it. */
#ifndef BOOST_ENGINE_CASES_H
#define BOOST_ENGINE_CASES_H
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "runtime/runtime.h"

#define CASE_TOL 1e-5

typedef struct {
    char tag[256];
    Plan *p;
    Engine *e;
    float loss;
    float **grad;      /* per canon */
} Case;

/* The batch every case runs on: [micro_batch*seq] tokens and targets, drawn for the plan's size. */
static int32_t *case_tokens, *case_targets;
static int case_n, case_vocab;

static void case_batch(int n, int vocab) {
    if (case_n == n && case_vocab == vocab) return;
    free(case_tokens); free(case_targets);
    case_tokens = malloc((size_t)n * sizeof(int32_t)); case_targets = malloc((size_t)n * sizeof(int32_t));
    uint64_t s = 42;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        case_tokens[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        case_targets[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
    case_n = n; case_vocab = vocab;
}

/* The global batch of the grid cases: [n] tokens and targets, n = micro_batch*seq*dp*grad_accum
 * (dp rank i takes the i-th micro-batch of each pass), drawn from `seed`. */
static int32_t *global_tok, *global_tgt;
static int global_n;

__attribute__((unused)) static void global_batch(int n, int vocab, uint64_t seed) {
    free(global_tok); free(global_tgt);
    global_tok = malloc((size_t)n * sizeof *global_tok); global_tgt = malloc((size_t)n * sizeof *global_tgt);
    uint64_t s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        global_tok[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        global_tgt[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
    global_n = n;
}

/* One optimizer step's passes on the global batch: grad_accum calls, each taking the next dp
 * micro-batches; *loss their mean. */
__attribute__((unused)) static int global_pass(Case *c, float *loss) {
    char err[1024];
    int64_t per = (int64_t)c->p->micro_batch * c->p->seq * c->p->dp;
    if (per * c->p->grad_accum != global_n) {
        CHECK(0, c->tag, "global batch %lld != %d", (long long)(per * c->p->grad_accum), global_n);
        return -1;
    }
    double sum = 0;
    for (int a = 0; a < c->p->grad_accum; a++) {
        float l;
        if (engine_forward_backward(c->e, global_tok + a * per, global_tgt + a * per, &l, err, sizeof err)) {
            CHECK(0, c->tag, "%s", err);
            return -1;
        }
        sum += l;
    }
    *loss = (float)(sum / c->p->grad_accum);
    return 0;
}

/* Generate SPEC (a run name or a spec file) with the -D overrides into dir_out (when not NULL, 256
 * bytes), load, init, one forward+backward: `pass` (e.g. global_pass), or with NULL one on the
 * shared batch. Keeps the engine open; -1 (with a FAIL line) when any of it fails. */
static int open_case_pass(Case *c, const char *spec, const char *defs, int (*pass)(Case *c, float *loss), char *dir_out) {
    memset(c, 0, sizeof *c);
    snprintf(c->tag, sizeof c->tag, "%s %s", spec, defs);
    char dir[256], cmd[900], err[1024];
    const char *base = strrchr(spec, '/') ? strrchr(spec, '/') + 1 : spec;
    snprintf(dir, sizeof dir, "%s/%.*s", CASE_DIR, (int)strcspn(base, "."), base);
    for (const char *d = defs; *d; d++) {
        size_t n = strlen(dir);
        if (n + 2 >= sizeof dir) break;
        dir[n] = (*d == ' ' || *d == '=') ? '_' : *d == '-' ? 'D' : *d;
        dir[n + 1] = 0;
    }
    if (dir_out) snprintf(dir_out, 256, "%s", dir);
    const char *boost = getenv("BOOST") ? getenv("BOOST") : "./bin/boost";   /* as tests/sh/lib.sh */
    snprintf(cmd, sizeof cmd, "%s gen %s %s -o %s >%s.log 2>&1", boost, spec, defs, dir, dir);
    if (system(cmd) != 0) {
        char log[600] = "", lp[300];
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
    if (pass) {
        if (pass(c, &c->loss)) return -1;
    } else {
        case_batch(c->p->micro_batch * c->p->seq, c->p->vocab);
        if (engine_forward_backward(c->e, case_tokens, case_targets, &c->loss, err, sizeof err)) {
            CHECK(0, c->tag, "forward_backward: %s", err);
            return -1;
        }
    }
    c->grad = calloc((size_t)c->p->ncanons, sizeof *c->grad);
    for (int i = 0; i < c->p->ncanons; i++) {
        c->grad[i] = malloc((size_t)(c->p->canons[i].rows * c->p->canons[i].cols) * sizeof(float));
        engine_get_canon(c->e, i, SLOT_GRAD, c->grad[i]);
    }
    return 0;
}

static int open_case(Case *c, const char *spec, const char *defs) { return open_case_pass(c, spec, defs, NULL, NULL); }

static void close_case(Case *c) {
    if (c->grad) for (int i = 0; i < c->p->ncanons; i++) free(c->grad[i]);
    free(c->grad);
    if (c->e) engine_free(c->e);
    if (c->p) plan_free(c->p);
    memset(c, 0, sizeof *c);
}

/* Norm-wise relative error ||a - ref|| / ||ref|| (absolute when ref is zero). */
static double rel_err(const float *a, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) { num += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]); den += (double)ref[i] * ref[i]; }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One verdict: same loss and every canonical gradient (same names and shapes) within CASE_TOL. */
static void compare(const Case *a, const Case *ref, const char *what) {
    if (!a->p || !ref->p) return;
    char name[300];
    snprintf(name, sizeof name, "%.200s: same loss and every canonical gradient", what);
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
    CHECK(dl < CASE_TOL && worst < CASE_TOL, name, "loss %.9g vs %.9g (rel %.2g), worst gradient %s rel %.3g", a->loss,
          ref->loss, dl, wname, worst);
}

/* Another forward+backward on the same batch; the canonical gradients are read again. */
static void again(Case *c) {
    char err[1024];
    if (engine_forward_backward(c->e, case_tokens, case_targets, &c->loss, err, sizeof err)) { CHECK(0, c->tag, "%s", err); return; }
    for (int i = 0; i < c->p->ncanons; i++) engine_get_canon(c->e, i, SLOT_GRAD, c->grad[i]);
}

/* Three optimizer steps on both (same batch): the canonical params and the reported grad norms
 * stay equal (replicated parts counted once in the norm, every rank updating its shard alike).
 * pass: how a case runs one forward + backward (its own batch layout), or NULL for the shared
 * batch through engine_forward_backward; with a pass of its own every canon of ref must be in a. */
static void compare_steps_pass(Case *a, Case *ref, const char *what, int (*pass)(Case *c, float *loss)) {
    if (!a->p || !ref->p) return;
    char err[1024], name[300];
    double worst_norm = 0, worst = 0;
    const char *wname = "";
    for (int step = 0; step < 3; step++) {
        float na, nr, lra, lrr, la, lr_;
        if (step > 0 && pass && (pass(a, &la) || pass(ref, &lr_))) return;
        if (step > 0 && !pass && (engine_forward_backward(a->e, case_tokens, case_targets, &la, err, sizeof err) ||
                                  engine_forward_backward(ref->e, case_tokens, case_targets, &lr_, err, sizeof err))) {
            CHECK(0, what, "forward_backward: %s", err);
            return;
        }
        if (engine_optimizer_step(a->e, step, &na, &lra, err, sizeof err) || engine_optimizer_step(ref->e, step, &nr, &lrr, err, sizeof err)) {
            CHECK(0, what, "optimizer: %s", err);
            return;
        }
        worst_norm = tl_worst(worst_norm, fabs(na - nr) / nr);
    }
    for (int i = 0; i < ref->p->ncanons; i++) {
        const PlanCanon *rc = &ref->p->canons[i];
        int j = plan_find_canon(a->p, rc->name);
        if (j < 0 && pass) { CHECK(0, what, "canon %s missing", rc->name); return; }
        if (j < 0) continue;
        int64_t n = rc->rows * rc->cols;
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
        engine_get_canon(a->e, j, SLOT_PARAM, x);
        engine_get_canon(ref->e, i, SLOT_PARAM, y);
        double e = rel_err(x, y, n);
        if (e > worst || e != e) { worst = e; wname = rc->name; }
        free(x); free(y);
    }
    snprintf(name, sizeof name, "%.200s: same grad norms and params after 3 AdamW steps", what);
    CHECK(worst_norm < CASE_TOL && worst < CASE_TOL, name, "grad norm rel %.3g, worst param %s rel %.3g", worst_norm, wname, worst);
}

static void compare_steps(Case *a, Case *ref, const char *what) { compare_steps_pass(a, ref, what, NULL); }
#endif
