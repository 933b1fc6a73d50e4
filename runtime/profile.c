/* profile.c: BOOST_PROFILE=1 (runtime/profile.h). Seconds per plan step accumulated by the Engine on
 * one rank, summed at print time into rows "section kind" (kernels by catalog kind, e.g. "bwd
 * attention_bwd"; GEMMs by step kind with the GFLOP/s they reached), sorted by time. */
#include "runtime/profile.h"
#include "common/env.h"   // defines: runtime_env
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct StepProfile {
    const Plan *p;
    char backend[16];
    char label[32];       /* "stage 1" for a pipeline stage's Engine, else empty */
    double *seconds;      /* [nsteps] */
    int64_t *calls;       /* [nsteps] */
    double opt_seconds;
    int64_t opt_calls, passes;
};

StepProfile *profile_open(const Plan *p, const char *backend_name) {
    if (!runtime_env()->profile) return NULL;
    StepProfile *pf = calloc(1, sizeof *pf);
    if (!pf) return NULL;
    pf->p = p;
    snprintf(pf->backend, sizeof pf->backend, "%s", backend_name ? backend_name : "?");
    pf->seconds = calloc((size_t)p->nsteps + 1, sizeof *pf->seconds);
    pf->calls = calloc((size_t)p->nsteps + 1, sizeof *pf->calls);
    if (!pf->seconds || !pf->calls) { profile_free(pf); return NULL; }
    return pf;
}

double profile_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void profile_step(StepProfile *pf, int step, double seconds) {
    if (!pf || step < 0 || step >= pf->p->nsteps) return;
    pf->seconds[step] += seconds;
    pf->calls[step]++;
}

void profile_optimizer(StepProfile *pf, double seconds) {
    if (!pf) return;
    pf->opt_seconds += seconds;
    pf->opt_calls++;
}

void profile_pass(StepProfile *pf) {
    if (pf) pf->passes++;
}

void profile_label(StepProfile *pf, const char *label) {
    if (pf) snprintf(pf->label, sizeof pf->label, "%s", label ? label : "");
}

typedef struct { char label[64]; double seconds, flops; int64_t calls; } Row;

static int row_cmp(const void *a, const void *b) {
    double x = ((const Row *)a)->seconds, y = ((const Row *)b)->seconds;
    return x < y ? 1 : x > y ? -1 : strcmp(((const Row *)a)->label, ((const Row *)b)->label);
}

int profile_print(const StepProfile *pf, FILE *out) {
    if (!pf || !out) return 0;
    static const char *SECTION[] = {"fwd", "bwd", "opt"};
    const Plan *p = pf->p;
    Row *rows = calloc((size_t)p->nsteps + 2, sizeof *rows);
    if (!rows) return 0;
    int nrows = 0;
    double total = pf->opt_seconds;
    for (int s = 0; s < p->nsteps; s++) {
        if (!pf->calls[s]) continue;
        const PlanStep *st = &p->steps_[s];
        char label[64];
        snprintf(label, sizeof label, "%s %s", SECTION[st->section >= 0 && st->section < 3 ? st->section : 2],
                 st->kind == ST_KERNEL ? st->kernel->kind : plan_step_kind_name(st->kind));
        int r = 0;
        while (r < nrows && strcmp(rows[r].label, label)) r++;
        if (r == nrows) snprintf(rows[nrows++].label, sizeof rows[0].label, "%s", label);
        rows[r].seconds += pf->seconds[s];
        rows[r].calls += pf->calls[s];
        rows[r].flops += plan_step_flops(p, st) * (double)pf->calls[s];
        total += pf->seconds[s];
    }
    if (pf->opt_calls) {
        snprintf(rows[nrows].label, sizeof rows[0].label, "opt adamw (+ zero grads)");
        rows[nrows].seconds = pf->opt_seconds;
        rows[nrows++].calls = pf->opt_calls;
    }
    qsort(rows, (size_t)nrows, sizeof *rows, row_cmp);
    /* per training step (an optimizer step and its grad_accum passes), or per pass when no step ran */
    double per = (double)(pf->opt_calls > 0 ? pf->opt_calls : pf->passes > 0 ? pf->passes : 1);
    fprintf(out, "boost profile (%s backend, one rank%s%s, %lld training passes, %lld optimizer steps%s): %.3f s in steps, "
            "%.3f ms per %s\n", pf->backend, pf->label[0] ? " of " : "", pf->label, (long long)pf->passes, (long long)pf->opt_calls,
            strcmp(pf->backend, "cpu") ? "; asynchronous backend: host time of the launches, set BOOST_CUDA_SYNC=1" : "",
            total, 1e3 * total / per, pf->opt_calls > 0 ? "step" : "pass");
    fprintf(out, "%7s %11s %11s %9s  %s\n", "share", pf->opt_calls > 0 ? "ms/step" : "ms/pass",
            pf->opt_calls > 0 ? "calls/step" : "calls/pass", "GFLOP/s", "section kind");
    for (int r = 0; r < nrows; r++) {
        char rate[16] = "-";
        if (rows[r].flops > 0 && rows[r].seconds > 0) snprintf(rate, sizeof rate, "%.1f", rows[r].flops / rows[r].seconds * 1e-9);
        fprintf(out, "%6.1f%% %11.3f %11.1f %9s  %s\n", total > 0 ? 100.0 * rows[r].seconds / total : 0.0,
                1e3 * rows[r].seconds / per, (double)rows[r].calls / per, rate, rows[r].label);
    }
    free(rows);
    return nrows;
}

void profile_free(StepProfile *pf) {
    if (!pf) return;
    free(pf->seconds);
    free(pf->calls);
    free(pf);
}
