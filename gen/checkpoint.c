/* checkpoint.c: which forward activations the backward keeps (checkpoint=lowrank: the outputs of
 * collectives, the residual stream, the norm statistics; every other activation is dropped after
 * its last forward use and recomputed in backward, see backward.c), and the forward section of the
 * schedule: the tape plus `save buf=` markers after each kept tensor's last forward write. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/ir.h"
#include "gen/checkpoint.h"

void checkpoint_classify(Graph *g) {
    int ckpt = g->run->checkpoint == CKPT_LOWRANK;
    for (int i = 0; i < g->nt; i++) g->t[i].saved = 1;
    if (!ckpt) return;
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].role == TR_ACT && !g->t[i].keep) g->t[i].saved = 0;
    for (int k = 0; k < g->nfwd; k++) {
        int rd[3], wr[2], nr, nw;   /* a collective's outputs: recomputing them would repeat it */
        ir_coll_rw(&g->fwd[k], rd, &nr, wr, &nw);
        for (int i = 0; i < nw; i++) g->t[wr[i]].saved = 1;
    }
}

static int last_writer(const Graph *g, int t) {
    int last = -1;
    for (int k = 0; k < g->nfwd; k++) {
        const Op *o = &g->fwd[k];
        int w = 0;
        switch (o->kind) {
        case OP_GEMM: case OP_BATCHED_GEMM: w = o->g.C.t == t; break;
        case OP_GROUPED_GEMM: for (int i = 0; i < o->nmembers; i++) w |= o->members[i].C.t == t; break;
        case OP_KERNEL: for (int i = 0; i < o->nops; i++) w |= (o->out_mask >> i & 1) && o->ops[i].t == t; break;
        default: {
            int rd[3], wr[2], nr, nw;
            ir_coll_rw(o, rd, &nr, wr, &nw);
            for (int i = 0; i < nw; i++) w |= wr[i] == t;
        }
        }
        if (w) last = k;
    }
    return last;
}

int emit_forward_steps(Graph *g) {
    int ckpt = g->run->checkpoint == CKPT_LOWRANK;
    int *after = NULL;
    if (ckpt) {
        after = ir_alloc(g, (size_t)g->nt * sizeof *after);
        for (int i = 0; i < g->nt; i++)
            after[i] = (g->t[i].role == TR_ACT && g->t[i].saved) ? last_writer(g, i) : -1;
    }
    for (int k = 0; k < g->nfwd; k++) {
        const Op *f = &g->fwd[k];
        if (f->kind != OP_TP_COPY) {
            Op *o = ir_push(g, &g->steps, &g->nsteps, &g->caps);
            *o = *f;
            if (f->members) {
                o->members = ir_alloc(g, (size_t)f->nmembers * sizeof *f->members);
                memcpy(o->members, f->members, (size_t)f->nmembers * sizeof *f->members);
            }
        }
        if (!ckpt) continue;
        for (int i = 0; i < g->nt; i++) {
            if (after[i] != k) continue;
            Op *o = ir_push(g, &g->steps, &g->nsteps, &g->caps);
            o->kind = OP_SAVE; o->section = SEC_FWD; o->layer = f->layer;
            snprintf(o->chunk, sizeof o->chunk, "%s", f->chunk);
            o->marker_tensor = i;
        }
    }
    free(after);
    g->nfwd_steps = g->nsteps;
    return 0;
}
