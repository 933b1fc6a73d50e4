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

#define CASE_DIR "build/tmp/tp"
#include "tests/unit/engine_cases.h"

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
        engine_forward(c->e, case_tokens, case_targets, &lp, err, sizeof err);
        p[best] = (float)(keep - eps); engine_set_canon(c->e, i, SLOT_PARAM, p);
        engine_forward(c->e, case_tokens, case_targets, &lm, err, sizeof err);
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
