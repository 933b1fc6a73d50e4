/* check_model.c: whole training steps of a plan on the CUDA backend against the CPU backend, through
 * the Engine (runtime/runtime.h): the same TP-invariant init and batches, STEPS optimizer steps;
 * per step the loss, and after the first backward every canonical gradient (relative L2 error).
 * Also: the CUDA run repeated gives bit-identical losses (determinism), and, with --tp-ref, a
 * plan of another TP degree (local mode: shards in one process) gives the same loss and gradients.
 *   usage: check_model PLAN_DIR [--against cpu|cuda] [--tp-ref PLAN_DIR] [--steps N] [--tol X]
 * Prints "ok - ..." / "FAIL - ..." lines; exit 1 on a failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t next_u32(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 11); }

typedef struct { float loss[16]; float *grads; int64_t ngrad; const Plan *p; } RunOut;

static Plan *load(const char *dir) {
    char path[1024], err[4096];
    snprintf(path, sizeof path, "%s/plan.txt", dir);
    Plan *p = plan_load(path, err, sizeof err);
    if (!p) fprintf(stderr, "%s\n", err);
    return p;
}

static int64_t canon_elems(const Plan *p) {
    int64_t n = 0;
    for (int c = 0; c < p->ncanons; c++) n += p->canons[c].rows * p->canons[c].cols;
    return n;
}

/* steps optimizer steps on backend; the gradients of the first step are gathered into out->grads. */
static int train(const Plan *p, const char *backend, int steps, uint64_t seed, RunOut *out) {
    char err[4096];
    Engine *e = engine_create(p, backend, err, sizeof err);
    if (!e) { printf("FAIL - %s engine: %s\n", backend, err); return -1; }
    if (engine_init_params(e, err, sizeof err)) { printf("FAIL - %s init: %s\n", backend, err); engine_free(e); return -1; }
    int64_t M = (int64_t)p->micro_batch * p->seq;
    int32_t *tok = malloc(M * sizeof *tok), *tgt = malloc(M * sizeof *tgt);
    rng = seed;
    out->ngrad = canon_elems(p);
    out->p = p;
    out->grads = malloc(out->ngrad * sizeof *out->grads);
    int rc = 0;
    for (int s = 0; s < steps && !rc; s++) {
        for (int64_t i = 0; i < M; i++) { tok[i] = next_u32() % p->vocab; tgt[i] = next_u32() % p->vocab; }
        float loss = 0, gn = 0, lr = 0;
        if (engine_forward_backward(e, tok, tgt, &loss, err, sizeof err)) { printf("FAIL - %s step %d: %s\n", backend, s, err); rc = -1; break; }
        out->loss[s] = loss;
        if (s == 0) {
            int64_t off = 0;
            for (int c = 0; c < p->ncanons; c++) {
                engine_get_canon(e, c, SLOT_GRAD, out->grads + off);
                off += p->canons[c].rows * p->canons[c].cols;
            }
        }
        if (engine_optimizer_step(e, s, &gn, &lr, err, sizeof err)) { printf("FAIL - %s optimizer: %s\n", backend, err); rc = -1; }
    }
    free(tok); free(tgt);
    engine_free(e);
    return rc;
}

/* Element offset of canon `name` in a run's gathered gradients; -1 when its plan lacks it. */
static int64_t canon_offset(const Plan *p, const char *name) {
    int64_t off = 0;
    for (int c = 0; c < p->ncanons; c++) {
        if (!strcmp(p->canons[c].name, name)) return off;
        off += p->canons[c].rows * p->canons[c].cols;
    }
    return -1;
}

/* Worst per-canon relative L2 error of a's gradients against b's (canons matched by name). */
static double grad_error(const RunOut *a, const RunOut *b, char *where, size_t n) {
    double worst = 0;
    for (int c = 0; c < b->p->ncanons; c++) {
        const PlanCanon *pc = &b->p->canons[c];
        int64_t k = pc->rows * pc->cols, oa = canon_offset(a->p, pc->name), ob = canon_offset(b->p, pc->name);
        if (oa < 0) { snprintf(where, n, "%s missing", pc->name); return INFINITY; }
        double d2 = 0, b2 = 0;
        for (int64_t i = 0; i < k; i++) {
            double d = (double)a->grads[oa + i] - b->grads[ob + i];
            d2 += d * d; b2 += (double)b->grads[ob + i] * b->grads[ob + i];
        }
        double rel = b2 > 0 ? sqrt(d2 / b2) : sqrt(d2);
        if (!isfinite(rel)) rel = INFINITY;
        if (rel > worst || !isfinite(rel)) { worst = rel; snprintf(where, n, "%s", pc->name); }
    }
    return worst;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *against = "cuda", *tpref = NULL;
    int steps = 3;
    double tol = 0.05;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--against") && i + 1 < argc) against = argv[++i];
        else if (!strcmp(argv[i], "--tp-ref") && i + 1 < argc) tpref = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tol") && i + 1 < argc) tol = atof(argv[++i]);
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else { fprintf(stderr, "usage: check_model PLAN_DIR [--against cpu|cuda] [--tp-ref DIR] [--steps N] [--tol X]\n"); return 2; }
    }
    if (!dir || steps < 1 || steps > 16) { fprintf(stderr, "usage: check_model PLAN_DIR [--against cpu|cuda] [--tp-ref DIR] [--steps 1..16]\n"); return 2; }
    Plan *p = load(dir);
    if (!p) return 2;
    int failed = 0;
    char where[256] = "";
    RunOut ref = {0}, dut = {0}, again = {0};
    if (train(p, "cpu", steps, 7, &ref) || train(p, against, steps, 7, &dut)) return 1;
    for (int s = 0; s < steps; s++) {
        double d = fabs(dut.loss[s] - ref.loss[s]);
        int ok = d <= tol * 0.2 * fabs(ref.loss[s]) + 1e-3 && isfinite(dut.loss[s]);
        printf("%s - %s tp=%d step %d loss: %s %.6f vs cpu %.6f (diff %.2g)\n", ok ? "ok" : "FAIL", dir, p->tp, s,
               against, dut.loss[s], ref.loss[s], d);
        failed |= !ok;
    }
    double ge = grad_error(&dut, &ref, where, sizeof where);
    printf("%s - %s tp=%d gradients: worst relative L2 error %.3g (%s) vs cpu\n", ge <= tol ? "ok" : "FAIL", dir, p->tp, ge, where);
    failed |= !(ge <= tol);
    if (train(p, against, steps, 7, &again)) return 1;
    int same = !memcmp(again.loss, dut.loss, sizeof dut.loss) && !memcmp(again.grads, dut.grads, dut.ngrad * sizeof *dut.grads);
    printf("%s - %s tp=%d %s run repeated: bit-identical losses and gradients\n", same ? "ok" : "FAIL", dir, p->tp, against);
    failed |= !same;
    if (tpref) {
        Plan *q = load(tpref);
        RunOut other = {0};
        if (!q || train(q, against, steps, 7, &other)) return 1;
        for (int s = 0; s < steps; s++) {
            double d = fabs(other.loss[s] - dut.loss[s]);
            int ok = d <= tol * 0.2 * fabs(dut.loss[s]) + 1e-3;
            printf("%s - %s tp=%d vs tp=%d step %d loss: %.6f vs %.6f\n", ok ? "ok" : "FAIL", against, q->tp, p->tp, s,
                   other.loss[s], dut.loss[s]);
            failed |= !ok;
        }
        double te = grad_error(&other, &dut, where, sizeof where);
        printf("%s - %s tp=%d vs tp=%d gradients: worst relative L2 error %.3g (%s)\n", te <= tol ? "ok" : "FAIL",
               against, q->tp, p->tp, te, where);
        failed |= !(te <= tol);
        free(other.grads);
        plan_free(q);
    }
    free(ref.grads); free(dut.grads); free(again.grads);
    plan_free(p);
    return failed;
}
