/* coll_probe.c: one forward and backward pass of a plan on one backend, with known inputs in its probe buffers
 * (the activations named P.*) and their contents printed afterwards, for the collective tests on
 * the stand-ins (tests/sh/nvrtc_mock_groups.sh). Usage: coll_probe PLAN_DIR BACKEND. Every rank
 * this process holds (all in one process, one under BOOST_WORLD_SIZE/BOOST_RANK) gets, in probe
 * buffer element i, the value rank*16 + i + 1 (exact in bf16); each output line is
 * "rank R NAME v0 v1 ..." with the buffer's rows*cols values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/plan.h"
#include "runtime/runtime.h"

static int is_probe(const PlanTensor *t) { return t->kind == TK_ACT && !strncmp(t->name, "P.", 2); }

/* Writes (out = 0) or prints (out = 1) the probe buffers of held rank g. */
static int probe_buffers(Engine *e, const Plan *p, int g, int out, float *vals, char *err, size_t n) {
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
    if (argc != 3) { fprintf(stderr, "usage: coll_probe PLAN_DIR BACKEND\n"); return 2; }
    char path[1100], err[2048] = "";
    snprintf(path, sizeof path, "%s/plan.txt", argv[1]);
    Plan *p = plan_load(path, err, sizeof err);
    if (!p) { fprintf(stderr, "coll_probe: %s\n", err); return 1; }
    Engine *e = engine_create(p, argv[2], err, sizeof err);
    if (!e || engine_init_params(e, err, sizeof err)) { fprintf(stderr, "coll_probe: %s\n", err); return 1; }
    int64_t most = 1, ntok = (int64_t)p->dp * p->micro_batch * p->seq;
    for (int t = 0; t < p->ntensors; t++)
        if (is_probe(&p->tensors[t]) && p->tensors[t].rows * p->tensors[t].cols > most)
            most = p->tensors[t].rows * p->tensors[t].cols;
    float *vals = malloc((size_t)most * sizeof *vals), loss = 0;
    int32_t *tok = malloc((size_t)ntok * sizeof *tok), *tgt = malloc((size_t)ntok * sizeof *tgt);
    if (!vals || !tok || !tgt) { fprintf(stderr, "coll_probe: out of memory\n"); return 1; }
    for (int64_t i = 0; i < ntok; i++) { tok[i] = (int32_t)(i * 7 % p->vocab); tgt[i] = (int32_t)((i + 1) * 7 % p->vocab); }
    int nranks = p->dp * p->tp, rc = 0;
    for (int g = 0; g < nranks && !rc; g++)
        if (engine_backend_rank(e, g)) rc = probe_buffers(e, p, g, 0, vals, err, sizeof err);
    if (!rc) rc = engine_forward_backward(e, tok, tgt, &loss, err, sizeof err);
    for (int g = 0; g < nranks && !rc; g++)
        if (engine_backend_rank(e, g)) rc = probe_buffers(e, p, g, 1, vals, err, sizeof err);
    if (rc) fprintf(stderr, "coll_probe: %s\n", err);
    engine_free(e);
    free(vals); free(tok); free(tgt);
    return rc ? 1 : 0;
}
