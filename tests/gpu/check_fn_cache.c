/* check_fn_cache.c: the CUDA backend's function cache (runtime/cuda_jit.c) holds kernels of any
 * name length. Opens the process's module on DIR/kernels.cu (tests/sh/nvrtc_mock_fn_cache.sh
 * writes it) through the CUDA stand-in (BOOST_LIBCUDA), then counts the driver lookups
 * (cuModuleGetFunction) that get_fn makes for kernels of any name length: none after the load
 * for the kernels it found, one for a kernel it missed, none for any repeated lookup (and the
 * cache does not grow then).
 * Names that differ only late must resolve to different functions: each is launched to show
 * which it is (it adds its own number to x[0]).
 *   usage: check_fn_cache DIR NAME...   (the kernels of DIR/kernels.cu in order, the I-th from 1
 *   adding I to x[0]; @NAME: one declared so that the load's scan misses it, looked up by hand)
 * Prints "ok - ..." / "FAIL - ..."; exit 1 on a failure, 2 when the module cannot be opened. */
#include "runtime/cuda_internal.h"

static CUresult (*driver_get_function)(CUfunction *, CUmodule, const char *);
static int lookups;

static CUresult counting_get_function(CUfunction *fn, CUmodule mod, const char *name) {
    lookups++;
    return driver_get_function(fn, mod, name);
}

static int failed;
static void check(int cond, const char *what, const char *name, int seen) {
    printf("%s - %s (%zu-character name)", cond ? "ok" : "FAIL", what, strlen(name));
    if (!cond) { printf(": %d lookups", seen); failed = 1; }
    printf("\n");
}

/* x[0] after one launch of fn with x[0] = 0 (-1 when the launch fails) */
static float launch_once(CUfunction fn) {
    CUdeviceptr x = 0;
    float host = 0.f;
    if (api.cuMemAlloc_v2(&x, sizeof host) || api.cuMemcpyHtoD_v2(x, &host, sizeof host)) return -1;
    void *args[] = {&x};
    if (api.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL) ||
        api.cuStreamSynchronize(NULL) || api.cuMemcpyDtoH_v2(&host, x, sizeof host))
        host = -1;
    api.cuMemFree_v2(x);
    return host;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: check_fn_cache DIR NAME...\n"); return 2; }
    pthread_once(&api_once, api_load);
    if (!api_ok) { fprintf(stderr, "the CUDA stand-in does not load: %s\n", api_why); return 2; }
    static Plan plan;
    snprintf(plan.path, sizeof plan.path, "%s/plan.txt", argv[1]);
    char err[8192];
    if (shared_open(&plan, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 2; }
    driver_get_function = api.cuModuleGetFunction;
    api.cuModuleGetFunction = counting_get_function;
    int loaded = shared.nfns;
    CUfunction fns[16] = {0};
    const char *names[16];
    int nnames = argc - 2 < 16 ? argc - 2 : 16;
    for (int i = 0; i < nnames; i++) {
        int by_hand = argv[2 + i][0] == '@';
        const char *name = names[i] = argv[2 + i] + by_hand;
        lookups = 0;
        fns[i] = get_fn(name);
        if (by_hand) {
            check(fns[i] && lookups == 1, "a kernel the load did not see is looked up once", name,
                  lookups);
            loaded++;
        } else {
            check(fns[i] && lookups == 0, "a kernel of the module is cached at load", name,
                  lookups);
        }
        lookups = 0;
        for (int rep = 0; rep < 3; rep++) get_fn(name);
        check(lookups == 0 && shared.nfns == loaded, "repeated lookups are served by the cache",
              name, lookups);
    }
    for (int i = 0; i < nnames; i++)
        for (int j = i + 1; j < nnames; j++)
            if (fns[i] == fns[j]) {
                printf("FAIL - kernels %d and %d resolve to one function\n", i, j);
                failed = 1;
            }
    for (int i = 0; i < nnames; i++) {
        float got = launch_once(fns[i]);
        if (got != (float)(i + 1)) {
            printf("FAIL - kernel %d (%zu-character name) launched: x[0] = %g, want %d\n", i,
                   strlen(names[i]), got, i + 1);
            failed = 1;
        }
    }
    if (!failed) printf("ok - each name launches its own kernel (%d kernels)\n", nnames);
    /* a name the module lacks: one driver lookup a call, nothing cached */
    char missing[400];
    memset(missing, 'q', sizeof missing - 1);
    missing[sizeof missing - 1] = 0;
    lookups = 0;
    CUfunction none = get_fn(missing);
    check(!none && shared.nfns == loaded, "a name the module lacks is not cached", missing,
          lookups);
    shared_close();
    return failed ? 1 : 0;
}
