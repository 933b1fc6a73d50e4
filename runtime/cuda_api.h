/* cuda_api.h: the slice of the CUDA driver API and cuBLAS that backend_cuda uses, as function
 * pointers filled by dlopen/dlsym (cuda_api.c), with the few types and constants restated here so
 * that bin/boost builds without CUDA headers and starts on machines without a GPU. */
#ifndef BOOST_CUDA_API_H
#define BOOST_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

#ifndef __cuda_cuda_h__   /* with cuda.h included first (the layout test), its own types are used */
typedef int CUresult;                 /* 0 = CUDA_SUCCESS */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;
typedef unsigned long long CUdeviceptr;
#endif

enum { CU_MEMORYTYPE_HOST_ = 1, CU_MEMORYTYPE_DEVICE_ = 2 };
/* dynamic shared memory above 48 KiB: the function's limit (cuFuncSetAttribute) and the device's most */
enum { CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES_ = 8, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN_ = 97,
       CU_DEVICE_ATTRIBUTE_MAX_PITCH_ = 11 };
enum { CUDA_ERROR_NOT_READY_ = 600, CU_EVENT_DISABLE_TIMING_ = 2, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL_ = 1 };

/* Same layout as cuda.h's CUDA_MEMCPY2D (checked against the header in tests/unit/test_cuda_backend.c). */
typedef struct {
    size_t srcXInBytes, srcY;
    int srcMemoryType;
    const void *srcHost;
    CUdeviceptr srcDevice;
    void *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    int dstMemoryType;
    void *dstHost;
    CUdeviceptr dstDevice;
    void *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} CUDA_MEMCPY2D_;

/* cuBLAS enums (cublas_api.h, library_types.h) */
enum { CUDA_R_32F_ = 0, CUDA_R_16BF_ = 14 };
enum { CUBLAS_COMPUTE_32F_ = 68 };
enum { CUBLAS_GEMM_DEFAULT_ = -1 };

typedef struct {
    /* driver */
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree_v2)(CUdeviceptr);
    CUresult (*cuMemsetD8_v2)(CUdeviceptr, unsigned char, size_t);
    CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
    CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
    CUresult (*cuMemcpy2DAsync_v2)(const CUDA_MEMCPY2D_ *, CUstream);
    CUresult (*cuMemcpyDtoDAsync_v2)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*cuStreamCreate)(CUstream *, unsigned);
    CUresult (*cuStreamDestroy_v2)(CUstream);
    CUresult (*cuStreamSynchronize)(CUstream);
    /* streams and events: the collectives run on a stream of their own (runtime/cuda.c) */
    CUresult (*cuStreamQuery)(CUstream);
    CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
    CUresult (*cuEventCreate)(CUevent *, unsigned);
    CUresult (*cuEventDestroy_v2)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*cuMemcpyDtoHAsync_v2)(void *, CUdeviceptr, size_t, CUstream);
    /* optional (NULL when the driver lacks them): CUDA graphs for BOOST_CUDA_GRAPH=1 */
    CUresult (*cuStreamBeginCapture_v2)(CUstream, int);
    CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
    CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
    CUresult (*cuGraphExecDestroy)(CUgraphExec);
    CUresult (*cuGraphDestroy)(CUgraph);
    CUresult (*cuModuleLoadData)(CUmodule *, const void *);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               CUstream, void **, void **);
    CUresult (*cuGetErrorString)(CUresult, const char **);
    /* cuBLAS (status 0 = success; handles are opaque) */
    int (*cublasCreate_v2)(void **);
    int (*cublasDestroy_v2)(void *);
    int (*cublasSetStream_v2)(void *, CUstream);
    int (*cublasSetWorkspace_v2)(void *, void *, size_t);   /* optional (NULL): the handle's workspace */
    int (*cublasGemmEx)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *, int, int,
                        const void *, void *, int, int, int, int);
    int (*cublasGemmStridedBatchedEx)(void *, int, int, int, int, int, const void *, const void *, int, int, long long,
                                      const void *, int, int, long long, const void *, void *, int, int, long long, int,
                                      int, int);
    /* optional (cuBLAS 12.5+); NULL: grouped GEMMs run as a loop */
    int (*cublasGemmGroupedBatchedEx)(void *, const int *, const int *, const int *, const int *, const int *,
                                      const void *, const void *const *, int, const int *, const void *const *, int,
                                      const int *, const void *, void *const *, int, const int *, int, const int *, int);
} CudaApi;

/* Load the driver and cuBLAS where common/cudalibs.c finds them. 0, or -1 with why. */
int cuda_api_load(CudaApi *api, char *why, size_t n);

/* NCCL (nccl.h), for the multi-process mode: one process per GPU. Restated like the driver API;
 * checked against nccl.h by tests/gpu/check_nccl_api.c. */
#ifndef NCCL_H_   /* with nccl.h included first (the signature check), its own types are used */
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct ncclComm *ncclComm_t;
typedef int ncclResult_t;             /* 0 = ncclSuccess */
typedef int NcclDtype_;
typedef int NcclOp_;
typedef void NcclConfig_;
#else
typedef ncclDataType_t NcclDtype_;
typedef ncclRedOp_t NcclOp_;
typedef ncclConfig_t NcclConfig_;
#endif
enum { NCCL_SUM_ = 0, NCCL_AVG_ = 4, NCCL_FLOAT32_ = 7, NCCL_FLOAT64_ = 8, NCCL_BFLOAT16_ = 9 };
enum { NCCL_SUCCESS_ = 0, NCCL_IN_PROGRESS_ = 7 };   /* ncclResult_t values */

typedef struct {
    ncclResult_t (*ncclGetUniqueId)(ncclUniqueId *);
    ncclResult_t (*ncclCommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*ncclAllReduce)(const void *, void *, size_t, NcclDtype_, NcclOp_, ncclComm_t, CUstream);
    ncclResult_t (*ncclAllGather)(const void *, void *, size_t, NcclDtype_, ncclComm_t, CUstream);
    ncclResult_t (*ncclCommDestroy)(ncclComm_t);
    /* the rank grid (dp > 1): the world split into its tp and dp groups; ZeRO-1's gradient reduction */
    ncclResult_t (*ncclCommSplit)(ncclComm_t, int, int, ncclComm_t *, NcclConfig_ *);
    ncclResult_t (*ncclReduceScatter)(const void *, void *, size_t, NcclDtype_, NcclOp_, ncclComm_t, CUstream);
    /* point-to-point (NCCL 2.7+), optional, all four or none: expert parallelism's all-to-all and
     * transfers between pipeline stages (NULL: refused there); grouped between GroupStart and End */
    ncclResult_t (*ncclSend)(const void *, size_t, NcclDtype_, int, ncclComm_t, CUstream);
    ncclResult_t (*ncclRecv)(void *, size_t, NcclDtype_, int, ncclComm_t, CUstream);
    ncclResult_t (*ncclGroupStart)(void);
    ncclResult_t (*ncclGroupEnd)(void);
    /* a failed or vanished peer: poll for the error while the host waits, then abort */
    ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*ncclCommAbort)(ncclComm_t);
    const char *(*ncclGetErrorString)(ncclResult_t);
} NcclApi;

/* Load NCCL where common/cudalibs.c finds it ($BOOST_NCCL, CUDA_HOME, wheels, ...). 0, or -1 with why. */
int nccl_api_load(NcclApi *api, char *why, size_t n);

#endif
