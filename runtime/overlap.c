/* overlap.c: where the executor waits for each collective (runtime/exec.c issues them early and
 * waits before the first step that touches their memory), and the report of how much compute each
 * collective can overlap that BOOST_VERBOSE=1 prints when an engine is created. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/overlap.h"

/* A byte range a step reads or writes: space 0 is the activation arena (tensors there alias by
 * offset), space 1+t the separate memory of tensor t (inputs, outputs, params, grads). */
typedef struct { int64_t space, lo, hi; int write; } Access;

static int64_t tensor_bytes(const PlanTensor *t) { return t->rows * t->cols * (int64_t)plan_dtype_size(t->dtype); }

/* From the operand's first element (the lowest over the ranks) to the end of its tensor: kernels
 * and GEMMs do not know their exact extent here, so this bound is on the safe side. */
static Access operand_access(const Plan *p, const Operand *op, int write) {
    const PlanTensor *t = &p->tensors[op->tensor];
    int64_t es = (int64_t)plan_dtype_size(t->dtype);
    int64_t off0 = rank_int(op->off, 0), off1 = rank_int(op->off, p->tp - 1);
    int64_t base = t->kind == TK_ACT ? t->offset : 0;
    Access a = {t->kind == TK_ACT ? 0 : 1 + op->tensor, base + (off0 < off1 ? off0 : off1) * es, base + tensor_bytes(t),
                write};
    return a;
}

/* The accesses of a compute step (collectives and markers: none; the collectives run in order on
 * one stream, so they never wait for each other). Kernel operands count as written: the plan does
 * not say which are outputs. Returns the count (at most max). */
static int step_accesses(const Plan *p, const PlanStep *st, Access *out, int max) {
    int n = 0;
#define ADD(op, w) do { if (n < max) out[n++] = operand_access(p, &(op), (w)); } while (0)
    switch (st->kind) {
    case ST_GEMM: case ST_BATCHED_GEMM: ADD(st->gemm.A, 0); ADD(st->gemm.B, 0); ADD(st->gemm.C, 1); break;
    case ST_GROUPED_GEMM:
        for (int i = 0; i < st->nmembers; i++) {
            const GemmArgs *g = &p->members[st->first_member + i];
            ADD(g->A, 0); ADD(g->B, 0); ADD(g->C, 1);
        }
        break;
    case ST_KERNEL:
        for (int i = 0; i < st->kernel->nops; i++) ADD(st->kernel->op[i], 1);
        break;
    default: break;
    }
#undef ADD
    return n;
}

/* The memory a collective reads and writes, by its catalog row's operands: buf its `elems`
 * elements (read and written), src and map read, dst written. Returns the count (<= COLL_ACCESS). */
#define COLL_ACCESS 4
static int coll_accesses(const Plan *p, const PlanStep *st, Access *out) {
    const CollArgs *c = &st->coll;
    unsigned ops = ccat_kind(c->kind) ? ccat_kind(c->kind)->operands : 0;
    int n = 0;
    if (ops & CO_BUF) {
        const PlanTensor *t = &p->tensors[c->buf.tensor];
        int64_t es = (int64_t)plan_dtype_size(t->dtype);
        int64_t off0 = rank_int(c->buf.off, 0), off1 = rank_int(c->buf.off, p->tp - 1);
        int64_t base = t->kind == TK_ACT ? t->offset : 0;
        Access a = {t->kind == TK_ACT ? 0 : 1 + c->buf.tensor, base + (off0 < off1 ? off0 : off1) * es,
                    base + ((off0 > off1 ? off0 : off1) + c->elems) * es, 1};
        out[n++] = a;
    }
    if (ops & CO_SRC) out[n++] = operand_access(p, &c->src, 0);
    if (ops & CO_MAP) out[n++] = operand_access(p, &c->map, 0);
    if (ops & CO_DST) out[n++] = operand_access(p, &c->dst, 1);
    return n;
}

static int accesses_conflict(const Access *a, int na, const Access *b, int nb) {
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++)
            if (a[i].space == b[j].space && a[i].lo < b[j].hi && b[j].lo < a[i].hi && (a[i].write || b[j].write))
                return 1;
    return 0;
}

#define MAX_ACCESS (3 * 64 + PLAN_MAX_KEYS)

/* first_use[s] for every collective step s in [0, end): the first later step in [s+1, end) whose
 * accesses conflict with the collective's, or `end`; -1 for other steps. With no_overlap, s+1.
 * A gather_shards step s (after `end`: the optimizer's, issued after the update) runs into the
 * next pass: its first use is the first step in [0, end) that touches its param, or `end` (with
 * no_overlap 0, the pass's first step). */
void overlap_first_use(const Plan *p, int end, int no_overlap, int *first_use) {
    Access ca[COLL_ACCESS], sa[MAX_ACCESS];
    for (int s = 0; s < p->nsteps; s++) first_use[s] = -1;
    for (int s = 0; s < p->nsteps; s++) {
        const PlanStep *st = &p->steps_[s];
        int gather = st->kind == ST_GATHER_SHARDS && s >= end;
        if (!gather && (s >= end || (st->kind != ST_ALLREDUCE && st->kind != ST_ALLGATHER && st->kind != ST_REDUCE_SCATTER)))
            continue;
        int nc = coll_accesses(p, st, ca);
        first_use[s] = end;
        for (int t = gather ? 0 : s + 1; t < end; t++) {
            int ns = step_accesses(p, &p->steps_[t], sa, MAX_ACCESS);
            if (no_overlap || accesses_conflict(ca, nc, sa, ns)) { first_use[s] = t; break; }
        }
    }
}

static int is_compute(const PlanStep *st) { return st->kind <= ST_KERNEL; }

/* Steps after `from` (up to the section's next collective) that could run before step `from`: a
 * compute step t that does not touch collective c's memory and has no read/write dependence on any
 * step in [from, t). Adds their count and GEMM FLOPs. */
static void movable_after(const Plan *p, int c, int from, int end, int *nsteps, double *flops) {
    Access ca[COLL_ACCESS], ta[MAX_ACCESS], ua[MAX_ACCESS];
    int nc = coll_accesses(p, &p->steps_[c], ca);
    for (int t = from + 1; t < end; t++) {
        const PlanStep *st = &p->steps_[t];
        if (st->kind == ST_ALLREDUCE || st->kind == ST_ALLGATHER) break;
        if (!is_compute(st)) continue;
        int nt = step_accesses(p, st, ta, MAX_ACCESS);
        if (accesses_conflict(ca, nc, ta, nt)) continue;
        int free_ = 1;
        for (int u = from; u < t && free_; u++) {
            int nu = step_accesses(p, &p->steps_[u], ua, MAX_ACCESS);
            if (accesses_conflict(ta, nt, ua, nu)) free_ = 0;
        }
        if (free_) { (*nsteps)++; *flops += plan_step_flops(p, st); }
    }
}

/* Compute steps right before collective c (back to the step that writes its memory) that do not
 * feed it and that nothing after them up to c depends on: they could follow the collective's issue
 * and overlap it (e.g. a weight-gradient GEMM emitted between an input gradient and its all-reduce). */
static void movable_before(const Plan *p, int c, int *nsteps, double *flops) {
    Access ca[COLL_ACCESS], ta[MAX_ACCESS], ua[MAX_ACCESS];
    int nc = coll_accesses(p, &p->steps_[c], ca);
    for (int t = c - 1; t >= 0 && p->steps_[t].section == p->steps_[c].section; t--) {
        const PlanStep *st = &p->steps_[t];
        if (st->kind == ST_ALLREDUCE || st->kind == ST_ALLGATHER) break;
        if (!is_compute(st)) continue;
        int nt = step_accesses(p, st, ta, MAX_ACCESS);
        if (accesses_conflict(ca, nc, ta, nt)) break;   /* the producer: what comes before feeds it */
        int free_ = 1;
        for (int u = t + 1; u < c && free_; u++) {
            int nu = step_accesses(p, &p->steps_[u], ua, MAX_ACCESS);
            if (accesses_conflict(ta, nt, ua, nu)) free_ = 0;
        }
        if (free_) { (*nsteps)++; *flops += plan_step_flops(p, st); }
    }
}

static void fmt_flops(double f, char *out, size_t n) {
    if (f >= 1e12) snprintf(out, n, "%.2f TFLOP", f / 1e12);
    else if (f >= 1e9) snprintf(out, n, "%.2f GFLOP", f / 1e9);
    else if (f >= 1e6) snprintf(out, n, "%.2f MFLOP", f / 1e6);
    else snprintf(out, n, "%.0f FLOP", f);
}

int plan_overlap_report(const Plan *p, char *out, size_t n) {
    if (!n) return -1;
    out[0] = 0;
    int *fu = malloc((size_t)(p->nsteps + 1) * sizeof *fu);
    if (!fu) { snprintf(out, n, "out of memory"); return -1; }
    int end = 0;
    while (end < p->nsteps && p->steps_[end].section <= 1) end++;
    overlap_first_use(p, end, 0, fu);
    size_t used = 0;
#define OUT(...) do { if (used < n) used += snprintf(out + used, n - used, __VA_ARGS__); } while (0)
    OUT("%s: overlap of the collectives with compute (%s layout, tp=%d): steps and GEMM FLOPs between a collective's "
        "issue and the first step that touches its memory\n", p->path, p->layout, p->tp);
    for (int sec = 0; sec <= 1; sec++) {
        int ncoll = 0, nover = 0, steps_between = 0, nmov = 0, nmov_colls = 0, nbefore = 0, nbefore_colls = 0;
        double flops_between = 0, flops_total = 0, flops_mov = 0, flops_before = 0;
        for (int s = 0; s < end; s++) {
            const PlanStep *st = &p->steps_[s];
            if (st->section != sec) continue;
            flops_total += plan_step_flops(p, st);
            if (fu[s] < 0) continue;
            ncoll++;
            int k = 0;
            double f = 0;
            for (int t = s + 1; t < fu[s] && t < end; t++)
                if (is_compute(&p->steps_[t])) { k++; f += plan_step_flops(p, &p->steps_[t]); }
            if (k) nover++;
            steps_between += k; flops_between += f;
            if (fu[s] < end) {
                int m = 0;
                double mf = 0;
                movable_after(p, s, fu[s], end, &m, &mf);
                if (m) { nmov_colls++; nmov += m; flops_mov += mf; }
            }
            int mb = 0;
            double mbf = 0;
            movable_before(p, s, &mb, &mbf);
            if (mb) { nbefore_colls++; nbefore += mb; flops_before += mbf; }
        }
        char fb[32], ft[32], fm[32], fbe[32];
        fmt_flops(flops_between, fb, sizeof fb); fmt_flops(flops_total, ft, sizeof ft); fmt_flops(flops_mov, fm, sizeof fm);
        fmt_flops(flops_before, fbe, sizeof fbe);
        OUT("  %s: %d collectives; %d have work before their first use (%d steps, %s of GEMMs = %.1f%% of the %s's %s)",
            sec ? "backward" : "forward", ncoll, nover, steps_between, fb,
            flops_total > 0 ? 100.0 * flops_between / flops_total : 0.0, sec ? "backward" : "forward", ft);
        if (nbefore) OUT("; right before %d of them, %d steps (%s of GEMMs, e.g. weight gradients) do not feed the collective "
                         "and could follow its issue", nbefore_colls, nbefore, fbe);
        if (nmov) OUT("; after the first use of %d of them come %d steps (%s of GEMMs) that do not need the collective "
                      "and could be issued before that use", nmov_colls, nmov, fm);
        OUT("\n");
    }
    /* zero=1: the optimizer's gathers run into the next pass, up to the first step touching the param */
    int ngather = 0, gover = 0, gsteps = 0;
    double gflops = 0;
    for (int s = end; s < p->nsteps; s++) {
        if (fu[s] < 0) continue;
        ngather++;
        int k = 0;
        for (int t = 0; t < fu[s] && t < end; t++)
            if (is_compute(&p->steps_[t])) { k++; gflops += plan_step_flops(p, &p->steps_[t]); }
        if (k) gover++;
        gsteps += k;
    }
    if (ngather) {
        char fg[32];
        fmt_flops(gflops, fg, sizeof fg);
        OUT("  optimizer: %d gather_shards run into the next pass; %d have work before their first use (%d steps, %s of GEMMs)\n",
            ngather, gover, gsteps, fg);
    }
    /* per collective: layer 0 and those outside the layers (the other layers repeat layer 0) */
    for (int s = 0; s < end; s++) {
        const PlanStep *st = &p->steps_[s];
        if (fu[s] < 0) continue;
        const char *tag = st->coll.tag;
        if (tag[0] == 'L' && tag[1] >= '0' && tag[1] <= '9' && strncmp(tag, "L0.", 3)) continue;
        int k = 0;
        double f = 0;
        for (int t = s + 1; t < fu[s] && t < end; t++)
            if (is_compute(&p->steps_[t])) { k++; f += plan_step_flops(p, &p->steps_[t]); }
        char fb[32];
        fmt_flops(f, fb, sizeof fb);
        if (fu[s] < end)
            OUT("    line %d %s %s %s: %d steps (%s) before its first use at line %d\n", st->line,
                plan_step_kind_name(st->kind), st->coll.bwd ? "bwd" : "fwd", tag, k, fb, p->steps_[fu[s]].line);
        else
            OUT("    line %d %s %s %s: %d steps (%s) before the end of the pass\n", st->line,
                plan_step_kind_name(st->kind), st->coll.bwd ? "bwd" : "fwd", tag, k, fb);
    }
    for (int s = end; s < p->nsteps; s++) {
        if (fu[s] < 0) continue;
        const char *name = p->tensors[p->steps_[s].coll.buf.tensor].name;
        if (name[0] == 'L' && name[1] >= '0' && name[1] <= '9' && strncmp(name, "L0.", 3)) continue;
        int k = 0;
        double f = 0;
        for (int t = 0; t < fu[s] && t < end; t++)
            if (is_compute(&p->steps_[t])) { k++; f += plan_step_flops(p, &p->steps_[t]); }
        char fb[32];
        fmt_flops(f, fb, sizeof fb);
        if (fu[s] < end)
            OUT("    line %d gather_shards opt %s: %d steps (%s) of the next pass before its first use at line %d\n",
                p->steps_[s].line, name, k, fb, p->steps_[fu[s]].line);
        else
            OUT("    line %d gather_shards opt %s: not used by the next pass (waited for at its end)\n", p->steps_[s].line, name);
    }
#undef OUT
    free(fu);
    return 0;
}
