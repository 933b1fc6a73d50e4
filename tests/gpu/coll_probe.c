/* coll_probe.c: one forward and backward pass of a plan on one backend, with known inputs in its
 * probe buffers (the activations named P.*) and their contents printed afterwards, for the
 * collective tests on the stand-ins (tests/sh/nvrtc_mock_groups.sh). Usage: coll_probe PLAN_DIR
 * BACKEND [direct]; direct: no pass, but the backend's `collective` (complete at once, not
 * issued) on each held rank, a thread each, for every reduce_scatter, allgather and allreduce
 * step on probe buffers. Every
 * rank this process holds (all in one process, one under BOOST_WORLD_SIZE and BOOST_RANK) gets,
 * in probe buffer element i, the value rank*16 + i + 1 (exact in bf16); each output line is
 * "rank R NAME v0 v1 ..." with the buffer's rows*cols values. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/backend.h"
#include "runtime/plan.h"
#include "runtime/runtime.h"

static int is_probe(const PlanTensor *t) { return t->kind == TK_ACT && !strncmp(t->name, "P.", 2); }

typedef struct {
    Engine *e;
    const Plan *p;
    const Backend *be;
    int rank, rc;
    char err[1024];
} Direct;

/* The pointer of operand op on held rank d->rank (its offset taken at the rank's tp index). */
static void *operand(Direct *d, const Operand *op) {
    BackendRank *br;
    void *ptr;
    int64_t elems;
    int dtype;
    const PlanTensor *T = &d->p->tensors[op->tensor];
    if (engine_tensor_span(d->e, d->rank, T->name, &br, &ptr, &elems, &dtype, d->err,
                           sizeof d->err))
        return NULL;
    return (char *)ptr + rank_int(op->off, d->rank % d->p->tp) * plan_dtype_size(dtype);
}

/* Every collective step on probe buffers, in plan order, through the backend's `collective`. */
static void *direct_rank(void *arg) {
    Direct *d = arg;
    for (int s = 0; s < d->p->nsteps && !d->rc; s++) {
        const PlanStep *st = &d->p->steps_[s];
        const CollArgs *c = &st->coll;
        int k = step_coll_kind(st->kind);
        if (k != CK_REDUCE_SCATTER && k != CK_ALLGATHER && k != CK_ALLREDUCE) continue;
        const Operand *first = k == CK_ALLGATHER ? &c->src : &c->buf;
        if (!is_probe(&d->p->tensors[first->tensor])) continue;
        CollPtrs ptrs = {0};
        if (k == CK_ALLGATHER) { ptrs.src = operand(d, &c->src); ptrs.dst = operand(d, &c->dst); }
        else ptrs.buf = operand(d, &c->buf);
        BackendRank *br = engine_backend_rank(d->e, d->rank);
        if ((!ptrs.buf && !ptrs.src) || d->be->collective(br, c, &ptrs)) {
            if (!d->err[0])
                snprintf(d->err, sizeof d->err, "rank %d: line %d failed", d->rank, st->line);
            d->rc = -1;
        }
    }
    return NULL;
}

/* The held ranks' direct_rank at once (local mode: the group's ranks meet in the collectives). */
static int run_direct(Engine *e, const Plan *p, const Backend *be, char *err, size_t n) {
    int nranks = p->dp * p->tp, rc = 0;
    Direct *d = calloc((size_t)nranks, sizeof *d);
    pthread_t *th = calloc((size_t)nranks, sizeof *th);
    char *started = calloc((size_t)nranks, 1);
    if (!d || !th || !started) { snprintf(err, n, "out of memory"); rc = -1; }
    for (int g = 0; !rc && g < nranks; g++) {
        if (!engine_backend_rank(e, g)) continue;
        d[g] = (Direct){e, p, be, g, 0, ""};
        started[g] = pthread_create(&th[g], NULL, direct_rank, &d[g]) == 0;
        if (!started[g]) { snprintf(err, n, "rank %d: no thread", g); rc = -1; }
    }
    for (int g = 0; g < nranks && started; g++) {
        if (!started[g]) continue;
        pthread_join(th[g], NULL);
        if (d[g].rc && !rc) { snprintf(err, n, "%s", d[g].err); rc = -1; }
    }
    free(d); free(th); free(started);
    return rc;
}

/* Writes (out = 0) or prints (out = 1) the probe buffers of held rank g. */
static int probe_buffers(Engine *e, const Plan *p, int g, int out, float *vals, char *err,
                         size_t n) {
    for (int t = 0; t < p->ntensors; t++) {
        const PlanTensor *T = &p->tensors[t];
        if (!is_probe(T)) continue;
        int64_t elems = T->rows * T->cols;
        if (!out) {
            for (int64_t i = 0; i < elems; i++) vals[i] = (float)(g * 16 + i + 1);
            if (engine_write_tensor(e, g, T->name, vals, err, n)) return -1;
            continue;
        }
        if (engine_read_tensor(e, g, T->name, vals, err, n)) return -1;
        printf("rank %d %s", g, T->name);
        for (int64_t i = 0; i < elems; i++) printf(" %.9g", vals[i]);
        printf("\n");
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 4 || (argc == 4 && strcmp(argv[3], "direct"))) {
        fprintf(stderr, "usage: coll_probe PLAN_DIR BACKEND [direct]\n");
        return 2;
    }
    const Backend *be = !strcmp(argv[2], "cuda") ? &backend_cuda : &backend_cpu;
    char path[1100], err[2048] = "";
    snprintf(path, sizeof path, "%s/plan.txt", argv[1]);
    Plan *p = plan_load(path, err, sizeof err);
    if (!p) { fprintf(stderr, "coll_probe: %s\n", err); return 1; }
    Engine *e = engine_create(p, argv[2], err, sizeof err);
    if (!e || engine_init_params(e, err, sizeof err)) {
        fprintf(stderr, "coll_probe: %s\n", err);
        return 1;
    }
    int64_t most = 1, ntok = (int64_t)p->dp * p->micro_batch * p->seq;
    for (int t = 0; t < p->ntensors; t++)
        if (is_probe(&p->tensors[t]) && p->tensors[t].rows * p->tensors[t].cols > most)
            most = p->tensors[t].rows * p->tensors[t].cols;
    float *vals = malloc((size_t)most * sizeof *vals), loss = 0;
    int32_t *tok = malloc((size_t)ntok * sizeof *tok), *tgt = malloc((size_t)ntok * sizeof *tgt);
    if (!vals || !tok || !tgt) { fprintf(stderr, "coll_probe: out of memory\n"); return 1; }
    for (int64_t i = 0; i < ntok; i++) {
        tok[i] = (int32_t)(i * 7 % p->vocab);
        tgt[i] = (int32_t)((i + 1) * 7 % p->vocab);
    }
    int nranks = p->dp * p->tp, rc = 0;
    for (int g = 0; g < nranks && !rc; g++)
        if (engine_backend_rank(e, g)) rc = probe_buffers(e, p, g, 0, vals, err, sizeof err);
    if (!rc && argc == 4) rc = run_direct(e, p, be, err, sizeof err);
    else if (!rc) rc = engine_forward_backward(e, tok, tgt, &loss, err, sizeof err);
    for (int g = 0; g < nranks && !rc; g++)
        if (engine_backend_rank(e, g)) rc = probe_buffers(e, p, g, 1, vals, err, sizeof err);
    /* direct: the processes met only in the probe's collectives, so one that is done could exit
     * while a peer still waits for its own (a peer's exit is an NCCL error there); a sum over all
     * of them first, after which every one has read its buffers */
    double one = 1;
    if (!rc && argc == 4 && engine_world_sum(e, &one, 1)) {
        snprintf(err, sizeof err, "the closing sum over the processes failed");
        rc = 1;
    }
    if (rc) fprintf(stderr, "coll_probe: %s\n", err);
    engine_free(e);
    free(vals); free(tok); free(tgt);
    return rc ? 1 : 0;
}
