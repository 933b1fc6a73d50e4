/* cuda_libs.c: the CUDA backend's libraries, loaded once per process with dlopen (runtime/cuda_api.h):
 * the driver API and cuBLAS for every rank, NCCL for multi-process mode only; and the driver's
 * error strings. */
#include "runtime/cuda_internal.h"

CudaApi api;
pthread_once_t api_once = PTHREAD_ONCE_INIT;
char api_why[512];
int api_ok;

void api_load(void) {
    /* one process per GPU: load every kernel at cuModuleLoadData (CUDA 12.2+ loads lazily, at a
     * kernel's first launch, which can then wait behind NCCL kernels spinning on the device) */
    int wr = 0, ws = 1;
    char werr[256];
    if (world_from_env(&wr, &ws, werr, sizeof werr) == 1) setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    api_ok = cuda_api_load(&api, api_why, sizeof api_why) == 0;
}

NcclApi nccl;                      /* multi-process mode only */
pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
char nccl_why[512];
int nccl_ok;

void nccl_load(void) { nccl_ok = nccl_api_load(&nccl, nccl_why, sizeof nccl_why) == 0; }

const char *cu_str(CUresult rc) {
    const char *s = NULL;
    if (api.cuGetErrorString) api.cuGetErrorString(rc, &s);
    return s ? s : "unknown CUDA error";
}
