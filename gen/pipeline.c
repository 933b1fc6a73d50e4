/* pipeline.c: the generator's pipeline, above the passes: a Run and a layout in, a finished Graph
 * out (forward tape -> parallel-state check -> checkpoint -> backward -> dp reduction -> memory plan -> kernel
 * specialisation). The only file in gen/ that calls every pass. */
#include <stdio.h>
#include <stdlib.h>
#include "gen/ir.h"
#include "gen/pipeline.h"
#include "gen/backward.h"
#include "gen/build.h"
#include "gen/checkpoint.h"
#include "gen/dp.h"
#include "gen/memplan.h"

/* 0, or 1 with g->err naming the first kernel op that had no room for an operand or a constant. */
static int check_overflow(Graph *g, const Op *ops, int n) {
    for (int i = 0; i < n; i++) {
        if (!ops[i].overflow) continue;
        if (ops[i].overflow & OP_OVF_CONSTS)
            snprintf(g->err, sizeof g->err, "kernel %s: more than the %d constants an op holds (raise KMAX_CONST in gen/kernels.h)",
                     ops[i].k.kind, KMAX_CONST);
        else snprintf(g->err, sizeof g->err, "kernel %s: more than the %d operands an op holds (raise OP_MAX_OPND in gen/ir.h)",
                      ops[i].k.kind, OP_MAX_OPND);
        return 1;
    }
    return 0;
}

/* The passes in order: 0, or the first failing pass's status with g->err set. */
static int run_passes(Graph *g, const Run *run) {
    int rc = build_forward(g);
    if (!rc) rc = check_overflow(g, g->fwd, g->nfwd);
    if (!rc) rc = check_states(g);
    if (!rc) { checkpoint_classify(g); rc = emit_forward_steps(g); }
    if (!rc) rc = build_backward(g);
    if (!rc) rc = check_overflow(g, g->steps, g->nsteps);
    if (!rc) rc = dp_emit_reduction(g);
    if (!rc) dp_emit_optimizer(g);
    if (!rc) rc = memplan(g);
    for (int s = 0; s < g->nsteps && !rc; s++) {
        Op *o = &g->steps[s];
        if (o->kind != OP_KERNEL) continue;
        char kerr[256] = "";
        if (kernel_specialise(&o->k, run, kerr, sizeof kerr)) {
            snprintf(g->err, sizeof g->err, "kernel %s: %s", o->k.kind, kerr);
            rc = 2;
        }
    }
    return rc;
}

Graph *graph_build(const Run *run, int layout, int checkpoint, char *err, size_t errlen, int *status) {
    Run *copy = malloc(sizeof *copy);
    if (!copy) { snprintf(err, errlen, "out of memory"); *status = 1; return NULL; }
    *copy = *run;
    copy->layout = layout;
    copy->checkpoint = checkpoint;
    Graph *g = graph_new(copy, layout);
    if (!g) { free(copy); snprintf(err, errlen, "out of memory"); *status = 1; return NULL; }
    g->owned_run = copy;
    jmp_buf fail;
    int rc;
    g->fail = &fail;
    if (setjmp(fail)) rc = 1;   /* ir_fail: out of memory or an internal error, message in g->err */
    else rc = run_passes(g, copy);
    g->fail = NULL;
    if (rc) {
        snprintf(err, errlen, "%s", g->err);
        *status = rc;
        graph_free(g);
        return NULL;
    }
    *status = 0;
    return g;
}
