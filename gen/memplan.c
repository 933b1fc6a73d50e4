/* memplan.c: the static memory plan of the activation arena. Every activation buffer and
 * activation gradient gets its live range (first and last step that touches it) and a 256-byte
 * aligned offset, chosen greedily (largest first, lowest offset free over its whole live range);
 * then every pair of buffers live at the same time is checked not to overlap (a sweep up the
 * offsets: each buffer against those whose bytes reach its start). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gen/ir.h"
#include "gen/memplan.h"

#define ALIGN 256

static void touch(Graph *g, int t, int step) {
    if (t < 0) return;
    Tensor *x = &g->t[t];
    if (x->role != TR_ACT && x->role != TR_GRAD) return;
    if (x->live0 < 0 || step < x->live0) x->live0 = step;
    if (step > x->live1) x->live1 = step;
}

static int64_t tbytes(const Tensor *t) {
    int64_t b = t->rows * t->cols * (int64_t)ir_dtype_size(t->dtype);
    return (b + ALIGN - 1) / ALIGN * ALIGN;
}

/* A buffer's sort key, copied out so that the comparison needs no context: largest first, then
 * the earliest live, then the lowest tensor index (a total order: the plan is deterministic). */
typedef struct { int64_t bytes; int live0, t; } SortKey;

static int by_size(const void *a, const void *b) {
    const SortKey *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    if (x->live0 != y->live0) return x->live0 < y->live0 ? -1 : 1;
    return x->t - y->t;
}

int memplan(Graph *g) {
    for (int i = 0; i < g->nt; i++) { g->t[i].live0 = g->t[i].live1 = -1; g->t[i].offset = 0; }
    for (int s = 0; s < g->nsteps; s++) {
        const Op *o = &g->steps[s];
        switch (o->kind) {
        case OP_GEMM: case OP_BATCHED_GEMM: touch(g, o->g.A.t, s); touch(g, o->g.B.t, s); touch(g, o->g.C.t, s); break;
        case OP_GROUPED_GEMM:
            for (int i = 0; i < o->nmembers; i++) {
                touch(g, o->members[i].A.t, s); touch(g, o->members[i].B.t, s); touch(g, o->members[i].C.t, s);
            }
            break;
        case OP_KERNEL: for (int i = 0; i < o->nops; i++) touch(g, o->ops[i].t, s); break;
        case OP_SAVE: touch(g, o->marker_tensor, s); break;
        default: {   /* a collective: what its catalog row says it reads and writes */
            int rd[3], wr[2], nr, nw;
            ir_coll_rw(o, rd, &nr, wr, &nw);
            for (int i = 0; i < nr; i++) touch(g, rd[i], s);
            for (int i = 0; i < nw; i++) touch(g, wr[i], s);
        }
        }
    }
    for (int i = 0; i < g->npin; i++) { touch(g, g->pin_t[i], g->pin_lo[i]); touch(g, g->pin_t[i], g->pin_hi[i]); }
    /* the routing statistics of each MoE layer (L{i}.moe_aux) stay live to the end of the pass:
       the trainer reads them after forward+backward for the log (runtime/moe_stats.c) */
    for (int i = 0; i < g->nt; i++) {
        const char *dot = strchr(g->t[i].name, '.');
        if (g->t[i].role == TR_ACT && g->t[i].live0 >= 0 && dot && !strcmp(dot, ".moe_aux")) g->t[i].live1 = g->nsteps - 1;
    }
    int n = 0;
    int *order = malloc((size_t)g->nt * sizeof *order);
    SortKey *key = malloc((size_t)g->nt * sizeof *key);
    int *placed = malloc((size_t)(g->nt + 1) * sizeof *placed);
    int64_t *delta = calloc((size_t)g->nsteps + 2, sizeof *delta);
    if (!order || !key || !placed || !delta) {
        free(order); free(key); free(placed); free(delta);
        snprintf(g->err, sizeof g->err, "memory plan: out of memory (%d tensors)", g->nt);
        return 1;
    }
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].live0 >= 0) { key[n].bytes = tbytes(&g->t[i]); key[n].live0 = g->t[i].live0; key[n].t = i; n++; }
    qsort(key, (size_t)n, sizeof *key, by_size);
    for (int a = 0; a < n; a++) order[a] = key[a].t;
    free(key);
    /* placed buffers kept sorted by offset: first fit is one pass over them */
    int np = 0;
    int64_t top = 0;
    for (int a = 0; a < n; a++) {
        Tensor *x = &g->t[order[a]];
        int64_t off = 0, need = tbytes(x);
        for (int b = 0; b < np; b++) {
            const Tensor *y = &g->t[placed[b]];
            if (y->live1 < x->live0 || x->live1 < y->live0) continue;
            if (y->offset >= off + need) break;
            int64_t hi = y->offset + tbytes(y);
            if (hi > off) off = hi;
        }
        x->offset = off;
        if (off + need > top) top = off + need;
        int pos = np;
        while (pos > 0 && g->t[placed[pos - 1]].offset > off) { placed[pos] = placed[pos - 1]; pos--; }
        placed[pos] = order[a];
        np++;
    }
    g->arena_bytes = top;
    /* lower bound: bytes live at the busiest step (difference array over the steps) */
    for (int a = 0; a < n; a++) {
        const Tensor *x = &g->t[order[a]];
        delta[x->live0] += tbytes(x);
        delta[x->live1 + 1] -= tbytes(x);
    }
    int64_t cur = 0, peak = 0;
    for (int s = 0; s <= g->nsteps; s++) { cur += delta[s]; if (cur > peak) peak = cur; }
    g->arena_lower_bound = peak;
    free(delta);
    /* check: no two buffers live at the same step share bytes. A sweep up the offsets (placed[] is
     * sorted by offset): each buffer meets only the earlier ones whose bytes reach its start */
    int rc = 0, nact = 0;
    int *active = order;   /* order[] is not needed any more */
    for (int a = 0; a < np && !rc; a++) {
        const Tensor *x = &g->t[placed[a]];
        int k = 0;
        for (int b = 0; b < nact; b++)
            if (g->t[active[b]].offset + tbytes(&g->t[active[b]]) > x->offset) active[k++] = active[b];
        nact = k;
        for (int b = 0; b < nact; b++) {
            const Tensor *y = &g->t[active[b]];
            if (y->live1 < x->live0 || x->live1 < y->live0) continue;
            snprintf(g->err, sizeof g->err, "memory plan: %s and %s overlap while both are live", x->name, y->name);
            rc = 1; break;
        }
        active[nact++] = placed[a];
    }
    free(order); free(placed);
    return rc;
}
