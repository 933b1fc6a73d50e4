/* cuda_api.c: fills a CudaApi (cuda_api.h) with dlopen/dlsym: the driver from libcuda.so.1, cuBLAS
 * from libcublas.so.13 / .12 (or the toolkit's lib64), or the files $BOOST_LIBCUDA / $BOOST_LIBCUBLAS
 * name. Nothing here touches a device. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cuda_api.h"
#include "common/nvrtc.h"

static void *open_first(const char *const *names, int n, const char *home) {
    void *h = NULL;
    for (int i = 0; i < n && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    char path[1024];
    for (int i = 0; i < n && !h && home; i++) {
        snprintf(path, sizeof path, "%s/lib64/%s", home, names[i]);
        h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    }
    return h;
}

int cuda_api_load(CudaApi *a, char *why, size_t n) {
    memset(a, 0, sizeof *a);
    /* BOOST_LIBCUDA / BOOST_LIBCUBLAS: explicit library paths (another install, or a test's stand-in) */
    const char *env_drv = getenv("BOOST_LIBCUDA"), *env_blas = getenv("BOOST_LIBCUBLAS");
    const char *drv[] = {"libcuda.so.1", "libcuda.so"};
    void *hd = env_drv && *env_drv ? dlopen(env_drv, RTLD_NOW | RTLD_LOCAL) : open_first(drv, 2, NULL);
    if (!hd) {
        if (env_drv && *env_drv) snprintf(why, n, "BOOST_LIBCUDA=%s cannot be loaded: %s", env_drv, dlerror());
        else snprintf(why, n, "the CUDA driver libcuda.so.1 is not installed");
        return -1;
    }
#define SYM(h, name) \
    if (!(*(void **)&a->name = dlsym(h, #name))) { snprintf(why, n, "%s lacks %s: driver or toolkit too old", \
                                                            h == hd ? "libcuda.so.1" : "libcublas", #name); return -1; }
    SYM(hd, cuInit); SYM(hd, cuDeviceGetCount); SYM(hd, cuDeviceGet); SYM(hd, cuDeviceGetAttribute);
    SYM(hd, cuDevicePrimaryCtxRetain); SYM(hd, cuDevicePrimaryCtxRelease); SYM(hd, cuCtxSetCurrent);
    SYM(hd, cuMemAlloc_v2); SYM(hd, cuMemFree_v2); SYM(hd, cuMemsetD8_v2); SYM(hd, cuMemsetD32Async);
    SYM(hd, cuMemcpyHtoD_v2); SYM(hd, cuMemcpyDtoH_v2); SYM(hd, cuMemcpy2DAsync_v2);
    SYM(hd, cuStreamCreate); SYM(hd, cuStreamDestroy_v2); SYM(hd, cuStreamSynchronize);
    SYM(hd, cuStreamQuery); SYM(hd, cuStreamWaitEvent); SYM(hd, cuEventCreate); SYM(hd, cuEventDestroy_v2);
    SYM(hd, cuEventRecord); SYM(hd, cuMemcpyHtoDAsync_v2); SYM(hd, cuMemcpyDtoHAsync_v2);
    SYM(hd, cuModuleLoadData); SYM(hd, cuModuleUnload); SYM(hd, cuModuleGetFunction); SYM(hd, cuLaunchKernel);
    SYM(hd, cuFuncSetAttribute);
    SYM(hd, cuGetErrorString);
    const char *blas[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    void *hb = env_blas && *env_blas ? dlopen(env_blas, RTLD_NOW | RTLD_LOCAL) : open_first(blas, 3, nvrtc_cuda_home());
    if (!hb) {
        snprintf(why, n, "cuBLAS (libcublas.so.13 or .12) not found, also not in %s/lib64: install the CUDA toolkit "
                 "or set CUDA_HOME", nvrtc_cuda_home());
        return -1;
    }
    SYM(hb, cublasCreate_v2); SYM(hb, cublasDestroy_v2); SYM(hb, cublasSetStream_v2);
    SYM(hb, cublasGemmEx); SYM(hb, cublasGemmStridedBatchedEx);
#undef SYM
    *(void **)&a->cublasGemmGroupedBatchedEx = dlsym(hb, "cublasGemmGroupedBatchedEx");
    const char *graph_syms[] = {"cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuGraphInstantiateWithFlags",
                                "cuGraphLaunch", "cuGraphExecDestroy", "cuGraphDestroy"};
    void **graph_fns[] = {(void **)&a->cuStreamBeginCapture_v2, (void **)&a->cuStreamEndCapture,
                          (void **)&a->cuGraphInstantiateWithFlags, (void **)&a->cuGraphLaunch,
                          (void **)&a->cuGraphExecDestroy, (void **)&a->cuGraphDestroy};
    int all = 1;
    for (int i = 0; i < 6; i++) all &= (*graph_fns[i] = dlsym(hd, graph_syms[i])) != NULL;
    if (!all) for (int i = 0; i < 6; i++) *graph_fns[i] = NULL;   /* all or none */
    return 0;
}

int nccl_api_load(NcclApi *a, char *why, size_t n) {
    memset(a, 0, sizeof *a);
    const char *env = getenv("BOOST_LIBNCCL");
    const char *names[] = {"libnccl.so.2", "libnccl.so"};
    void *h = env && *env ? dlopen(env, RTLD_NOW | RTLD_LOCAL) : open_first(names, 2, nvrtc_cuda_home());
    if (!h) {
        if (env && *env) snprintf(why, n, "BOOST_LIBNCCL=%s cannot be loaded: %s", env, dlerror());
        else snprintf(why, n, "NCCL (libnccl.so.2) not found, also not in %s/lib64: install NCCL or set CUDA_HOME "
                      "(one process per GPU needs it)", nvrtc_cuda_home());
        return -1;
    }
#define SYM(name) \
    if (!(*(void **)&a->name = dlsym(h, #name))) { snprintf(why, n, "libnccl lacks %s: NCCL too old", #name); return -1; }
    SYM(ncclGetUniqueId); SYM(ncclCommInitRank); SYM(ncclAllReduce); SYM(ncclAllGather); SYM(ncclCommDestroy);
    SYM(ncclGetErrorString); SYM(ncclCommGetAsyncError); SYM(ncclCommAbort);
    SYM(ncclReduceScatter);
#undef SYM
    *(void **)&a->ncclCommSplit = dlsym(h, "ncclCommSplit");   /* NCCL 2.18+; only dp > 1 needs it (checked there) */
    *(void **)&a->ncclSend = dlsym(h, "ncclSend");             /* point-to-point: only ep > 1 needs them (checked there) */
    *(void **)&a->ncclRecv = dlsym(h, "ncclRecv");
    *(void **)&a->ncclGroupStart = dlsym(h, "ncclGroupStart");
    *(void **)&a->ncclGroupEnd = dlsym(h, "ncclGroupEnd");
    return 0;
}
