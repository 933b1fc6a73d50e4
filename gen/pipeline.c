/* pipeline.c: the generator's pipeline, above the passes: a Run and a layout in, a finished Graph
 * out (forward tape -> parallel-state check -> checkpoint -> backward -> memory plan -> kernel
 * specialisation). The only file in gen/ that calls every pass. */
#include <stdio.h>
#include <stdlib.h>
#include "gen/ir.h"

Graph *graph_build(const Run *run, int layout, int checkpoint, char *err, size_t errlen, int *status) {
    Run local = *run;
    local.layout = layout;
    local.checkpoint = checkpoint;
    Run *copy = malloc(sizeof *copy);
    if (!copy) { snprintf(err, errlen, "out of memory"); *status = 1; return NULL; }
    *copy = local;
    Graph *g = graph_new(copy, layout);
    if (!g) { free(copy); snprintf(err, errlen, "out of memory"); *status = 1; return NULL; }
    g->owned_run = copy;
    int rc = build_forward(g);
    if (!rc) rc = check_states(g);
    if (!rc) { checkpoint_classify(g); rc = emit_forward_steps(g); }
    if (!rc) rc = build_backward(g);
    if (!rc) rc = memplan(g);
    for (int s = 0; s < g->nsteps && !rc; s++) {
        Op *o = &g->steps[s];
        if (o->kind != OP_KERNEL) continue;
        char kerr[256] = "";
        if (kernel_specialise(&o->k, copy, kerr, sizeof kerr)) {
            snprintf(g->err, sizeof g->err, "kernel %s: %s", o->k.kind, kerr);
            rc = 2;
        }
    }
    if (rc) {
        snprintf(err, errlen, "%s", g->err);
        *status = rc;
        graph_free(g);
        return NULL;
    }
    *status = 0;
    return g;
}
