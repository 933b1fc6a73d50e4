/* check_syncs.c: how often a training step of the CUDA backend makes the host wait for the device,
 * counted by the CUDA stand-in (tests/gpu/mock_cuda.c, named by BOOST_LIBCUDA, which counts every
 * synchronize, every blocking copy and every copy to host memory). One warm-up step first (it may
 * upload what is cached per plan; --warmup N for more), then STEPS steps of forward+backward and the
 * optimizer. Also prints the launches per step (a CUDA graph replay counts once) and the last loss.
 *   usage: check_syncs PLAN_DIR [--steps N] [--warmup N] [--max-waits W]
 * A step must read back two values: the loss (for the log) and the global gradient norm (for
 * clipping); everything else (the batch upload, GEMMs, kernels, collectives, AdamW, zeroing the
 * grads) goes in stream order. So the default bound is W = 2 host waits per step, none of them a
 * blocking copy. Prints "ok - ..." / "FAIL - ..."; exit 1 on a failure, 2 on bad usage. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/runtime.h"

typedef void (*CountersFn)(long long *, long long *, long long *);

int main(int argc, char **argv) {
    const char *dir = NULL;
    int steps = 2, warmup = 1;
    long long max_waits = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max-waits") && i + 1 < argc) max_waits = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else { fprintf(stderr, "usage: check_syncs PLAN_DIR [--steps N] [--warmup N] [--max-waits W]\n"); return 2; }
    }
    if (!dir || steps < 1 || warmup < 1) {
        fprintf(stderr, "usage: check_syncs PLAN_DIR [--steps N] [--warmup N] [--max-waits W]\n");
        return 2;
    }
    const char *lib = getenv("BOOST_LIBCUDA");
    char path[1024], err[4096];
    snprintf(path, sizeof path, "%s/plan.txt", dir);
    Plan *p = plan_load(path, err, sizeof err);
    if (!p) { fprintf(stderr, "%s\n", err); return 2; }
    Engine *e = engine_create(p, "cuda", err, sizeof err);
    if (!e) { printf("FAIL - cuda engine: %s\n", err); return 1; }
    void *h = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
    CountersFn counters = NULL;
    if (h) *(void **)&counters = dlsym(h, "mock_cuda_counters");
    if (!counters) { printf("FAIL - BOOST_LIBCUDA (%s) is not the counting CUDA stand-in\n", lib ? lib : "unset"); return 1; }
    if (engine_init_params(e, err, sizeof err)) { printf("FAIL - init: %s\n", err); return 1; }
    int64_t M = (int64_t)p->micro_batch * p->seq;
    int32_t *tok = malloc(M * sizeof *tok), *tgt = malloc(M * sizeof *tgt);
    long long w0 = 0, b0 = 0, l0 = 0, w1 = 0, b1 = 0, l1 = 0;
    int rc = 0;
    float last_loss = 0;
    for (int s = 0; s < warmup + steps && !rc; s++) {
        if (s == warmup) counters(&w0, &b0, &l0);   /* after the warm-up steps */
        for (int64_t i = 0; i < M; i++) { tok[i] = (int32_t)((i * 7 + s) % p->vocab); tgt[i] = (int32_t)((i * 13 + s + 1) % p->vocab); }
        float loss = 0, gn = 0, lr = 0;
        if (engine_forward_backward(e, tok, tgt, &loss, err, sizeof err) || engine_optimizer_step(e, s, &gn, &lr, err, sizeof err)) {
            printf("FAIL - step %d: %s\n", s, err);
            rc = 1;
        }
        last_loss = loss;
    }
    counters(&w1, &b1, &l1);
    if (!rc) {
        double waits = (double)(w1 - w0) / steps, blocking = (double)(b1 - b0) / steps, launches = (double)(l1 - l0) / steps;
        if (waits <= max_waits && blocking == 0)
            printf("ok - %s: %.1f host waits per training step (at most %lld: the loss and the gradient norm), no blocking "
                   "copies, %.0f launches\n# launches %.0f loss %.9g\n", dir, waits, max_waits, launches, launches, last_loss);
        else {
            printf("FAIL - %s: %.1f host waits per training step (%.1f of them blocking copies); a step needs at most %lld "
                   "(the loss and the gradient norm) and no blocking copy\n", dir, waits, blocking, max_waits);
            rc = 1;
        }
    }
    free(tok); free(tgt);
    engine_free(e);
    plan_free(p);
    return rc;
}
