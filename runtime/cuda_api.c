/* cuda_api.c: fills a CudaApi and an NcclApi (cuda_api.h) with dlsym from the driver, cuBLAS and
 * NCCL that common/cudalibs.c finds (explicit files, CUDA_HOME, the loader path, Python wheels,
 * conda). Nothing here touches a device. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cuda_api.h"
#include "common/cudalibs.h"

int cuda_api_load(CudaApi *a, char *why, size_t n) {
    memset(a, 0, sizeof *a);
    /* common/cudalibs.c searches (BOOST_LIBCUDA / BOOST_CUBLAS name explicit files: a test's stand-in) */
    CudaLibFound fd, fb;
    if (cudalib_open(CUDALIB_DRIVER, &fd, why, n) != 0) return -1;
    void *hd = fd.handle;
#define SYM(h, name) \
    if (!(*(void **)&a->name = dlsym(h, #name))) { snprintf(why, n, "%s lacks %s: driver or toolkit too old", \
                                                            h == hd ? "libcuda.so.1" : "libcublas", #name); return -1; }
    SYM(hd, cuInit); SYM(hd, cuDeviceGetCount); SYM(hd, cuDeviceGet); SYM(hd, cuDeviceGetAttribute);
    SYM(hd, cuDevicePrimaryCtxRetain); SYM(hd, cuCtxSetCurrent);
    /* cuda.h maps cuDevicePrimaryCtxRelease to the _v2 entry point (CUDA 11+): look that one up */
    if (!(*(void **)&a->cuDevicePrimaryCtxRelease = dlsym(hd, "cuDevicePrimaryCtxRelease_v2"))) {
        snprintf(why, n, "libcuda.so.1 lacks cuDevicePrimaryCtxRelease_v2: driver too old (need CUDA 11+)");
        return -1;
    }
    SYM(hd, cuMemAlloc_v2); SYM(hd, cuMemFree_v2); SYM(hd, cuMemsetD8_v2); SYM(hd, cuMemsetD32Async);
    SYM(hd, cuMemcpyHtoD_v2); SYM(hd, cuMemcpyDtoH_v2); SYM(hd, cuMemcpy2DAsync_v2); SYM(hd, cuMemcpyDtoDAsync_v2);
    SYM(hd, cuStreamCreate); SYM(hd, cuStreamDestroy_v2); SYM(hd, cuStreamSynchronize);
    SYM(hd, cuStreamQuery); SYM(hd, cuStreamWaitEvent); SYM(hd, cuEventCreate); SYM(hd, cuEventDestroy_v2);
    SYM(hd, cuEventRecord); SYM(hd, cuMemcpyHtoDAsync_v2); SYM(hd, cuMemcpyDtoHAsync_v2);
    SYM(hd, cuModuleLoadData); SYM(hd, cuModuleUnload); SYM(hd, cuModuleGetFunction); SYM(hd, cuLaunchKernel);
    SYM(hd, cuFuncSetAttribute);
    SYM(hd, cuGetErrorString);
    if (cudalib_open(CUDALIB_CUBLAS, &fb, why, n) != 0) return -1;
    void *hb = fb.handle;
    SYM(hb, cublasCreate_v2); SYM(hb, cublasDestroy_v2); SYM(hb, cublasSetStream_v2);
    SYM(hb, cublasGemmEx); SYM(hb, cublasGemmStridedBatchedEx);
#undef SYM
    *(void **)&a->cublasGemmGroupedBatchedEx = dlsym(hb, "cublasGemmGroupedBatchedEx");
    *(void **)&a->cublasSetWorkspace_v2 = dlsym(hb, "cublasSetWorkspace_v2");
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
    CudaLibFound f;
    if (cudalib_open(CUDALIB_NCCL, &f, why, n) != 0) return -1;
    void *h = f.handle;
#define SYM(name) \
    if (!(*(void **)&a->name = dlsym(h, #name))) { snprintf(why, n, "libnccl lacks %s: NCCL too old", #name); return -1; }
    SYM(ncclGetUniqueId); SYM(ncclCommInitRank); SYM(ncclAllReduce); SYM(ncclAllGather); SYM(ncclCommDestroy);
    SYM(ncclGetErrorString); SYM(ncclCommGetAsyncError); SYM(ncclCommAbort);
    SYM(ncclReduceScatter);
#undef SYM
    *(void **)&a->ncclCommSplit = dlsym(h, "ncclCommSplit");   /* NCCL 2.18+; only dp > 1 needs it (checked there) */
    void **p2p[] = {(void **)&a->ncclSend, (void **)&a->ncclRecv, (void **)&a->ncclGroupStart, (void **)&a->ncclGroupEnd};
    const char *p2p_syms[] = {"ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd"};
    int all = 1;
    for (int i = 0; i < 4; i++) all &= (*p2p[i] = dlsym(h, p2p_syms[i])) != NULL;
    if (!all) for (int i = 0; i < 4; i++) *p2p[i] = NULL;   /* all or none */
    return 0;
}
