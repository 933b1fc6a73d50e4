/* test_cuda_backend.c: what can be checked of the CUDA backend without a GPU: opening a rank fails
 * with the clear "no CUDA device found ... use --backend cpu" message (never a crash), the driver
 * API slice restated in runtime/cuda_api.h matches cuda.h (function signatures, the CUDA_MEMCPY2D
 * layout, the cuBLAS enum values) when the toolkit's headers are installed, and the executor's
 * overlap analysis (where a collective must be waited for) on a hand-made plan: a step writing a
 * different tensor that shares the collective's arena bytes is its first use, not a later reader
 * of the collective's own tensor (plan_overlap_report states the analysis), for an all-reduce and for
 * ZeRO-1's reduce_scatter; and ZeRO-1's gather_shards, issued after the optimizer's update, are
 * waited for right before the first step of the next pass that reads their param. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#if __has_include("/usr/local/cuda/include/cuda.h")
#include "/usr/local/cuda/include/cuda.h"
#include "/usr/local/cuda/include/library_types.h"
#define HAVE_CUDA_H 1
#endif
#include "tests/unit/testlib.h"
#include "runtime/backend.h"
#include "runtime/cuda_api.h"
#include "runtime/runtime.h"

/* A plan of five forward steps (lines 10..14) over activations in one arena, bf16 [4, 8] (64 bytes):
 *   10 gemm  X = V W          (X at arena offset 0)
 *   11 allreduce X (32 elements), or (kind ST_REDUCE_SCATTER) ZeRO-1's reduce_scatter of it
 *   12 gemm  Y = V W          (Y at 64: independent, may overlap the all-reduce)
 *   13 kernel copy src=V dst=Z (Z at z_offset: aliases X when z_offset < 64)
 *   14 kernel copy src=X dst=V
 * Returns the overlap report's line for the collective. */
static void overlap_line(int kind, int64_t z_offset, char *line, size_t n) {
    static PlanTensor T[5];
    static PlanStep S[5];
    static KernelArgs K[2];
    static Plan P;
    memset(T, 0, sizeof T); memset(S, 0, sizeof S); memset(K, 0, sizeof K); memset(&P, 0, sizeof P);
    const char *names[] = {"X", "Y", "Z", "V", "W"};
    int64_t offs[] = {0, 64, z_offset, 128, 0};
    for (int i = 0; i < 5; i++) {
        snprintf(T[i].name, sizeof T[i].name, "%s", names[i]);
        T[i].kind = i == 4 ? TK_PARAM : TK_ACT;
        T[i].dtype = PDT_BF16;
        T[i].rows = i == 4 ? 8 : 4; T[i].cols = 8;
        T[i].offset = offs[i];
        T[i].param = -1;
    }
    enum { X, Y, Z, V, W };
    for (int s = 0; s < 5; s++) { S[s].section = 0; S[s].line = 10 + s; }
    Operand opX = {X, {0, 0}}, opY = {Y, {0, 0}}, opZ = {Z, {0, 0}}, opV = {V, {0, 0}}, opW = {W, {0, 0}};
    GemmArgs g = {0};
    g.m = 4; g.n = 8; g.k = 8; g.lda = 8; g.ldb = 8; g.ldc = 8; g.batch = 1; g.alpha = 1;
    g.A = opV; g.B = opW;
    S[0].kind = ST_GEMM; S[0].gemm = g; S[0].gemm.C = opX;
    S[1].kind = kind; S[1].coll.buf = opX; S[1].coll.elems = 32; S[1].coll.dtype = PDT_BF16;
    snprintf(S[1].coll.tag, sizeof S[1].coll.tag, "t");
    S[2].kind = ST_GEMM; S[2].gemm = g; S[2].gemm.C = opY;
    Operand k0[2] = {opV, opZ}, k1[2] = {opX, opV};
    for (int j = 0; j < 2; j++) {
        snprintf(K[j].kind, sizeof K[j].kind, "copy");
        K[j].nops = 2;
        snprintf(K[j].op_key[0], sizeof K[j].op_key[0], "src"); snprintf(K[j].op_key[1], sizeof K[j].op_key[1], "dst");
        K[j].op[0] = j ? k1[0] : k0[0]; K[j].op[1] = j ? k1[1] : k0[1];
        S[3 + j].kind = ST_KERNEL; S[3 + j].kernel = &K[j];
    }
    snprintf(P.path, sizeof P.path, "hand.txt"); snprintf(P.layout, sizeof P.layout, "btp");
    P.tp = 2; P.tensors = T; P.ntensors = 5; P.steps_ = S; P.nsteps = 5; P.arena_bytes = 192;
    char rep[4096];
    line[0] = 0;
    if (plan_overlap_report(&P, rep, sizeof rep)) return;
    const char *l = strstr(rep, kind == ST_ALLREDUCE ? "line 11 allreduce" : "line 11 reduce_scatter");
    if (l) snprintf(line, n, "%.*s", (int)strcspn(l, "\n"), l);
}

/* A zero=1 plan's passes and optimizer, every tensor bf16 [4, 8] or a param [8, 8]:
 *   10 gemm X = V U   (forward: U's first reader)
 *   11 gemm Y = V U
 *   12 gemm X = V W   (forward: W's first reader)
 *   13 gemm Y = V Q   (backward: Q's first reader)
 *   14 gather_shards W, 15 U, 16 Q, 17 Z (optimizer section; nothing reads Z)
 * The overlap report (the executor's analysis) in rep. */
static void gather_report(char *rep, size_t n) {
    static PlanTensor T[7];
    static PlanStep S[8];
    static Plan P;
    memset(T, 0, sizeof T); memset(S, 0, sizeof S); memset(&P, 0, sizeof P);
    const char *names[] = {"X", "Y", "V", "W", "U", "Q", "Z"};
    enum { X, Y, V, W, U, Q, Z };
    for (int i = 0; i < 7; i++) {
        snprintf(T[i].name, sizeof T[i].name, "%s", names[i]);
        T[i].kind = i >= W ? TK_PARAM : TK_ACT;
        T[i].dtype = PDT_BF16;
        T[i].rows = i >= W ? 8 : 4; T[i].cols = 8;
        T[i].offset = i >= W ? 0 : 64 * i;
        T[i].param = i >= W ? i - W : -1;
    }
    int C[4] = {X, Y, X, Y}, B[4] = {U, U, W, Q};
    for (int s = 0; s < 4; s++) {
        GemmArgs g = {0};
        g.m = 4; g.n = 8; g.k = 8; g.lda = 8; g.ldb = 8; g.ldc = 8; g.batch = 1; g.alpha = 1;
        g.A = (Operand){V, {0, 0}}; g.B = (Operand){B[s], {0, 0}}; g.C = (Operand){C[s], {0, 0}};
        S[s].kind = ST_GEMM; S[s].gemm = g; S[s].section = s == 3 ? 1 : 0;
    }
    int G[4] = {W, U, Q, Z};
    for (int j = 0; j < 4; j++) {
        PlanStep *st = &S[4 + j];
        st->kind = ST_GATHER_SHARDS; st->section = 2;
        st->coll.buf = (Operand){G[j], {0, 0}}; st->coll.elems = 64; st->coll.dtype = PDT_BF16;
        st->coll.group = GROUP_DP; st->coll.bucket = -1;
    }
    for (int s = 0; s < 8; s++) S[s].line = 10 + s;
    snprintf(P.path, sizeof P.path, "hand-zero.txt"); snprintf(P.layout, sizeof P.layout, "btp");
    P.tp = 1; P.dp = 2; P.zero = 1; P.tensors = T; P.ntensors = 7; P.steps_ = S; P.nsteps = 8; P.arena_bytes = 192;
    rep[0] = 0;
    plan_overlap_report(&P, rep, n);
}

#define SAME_TYPE(field, fn) __builtin_types_compatible_p(__typeof__(((CudaApi *)0)->field), __typeof__(&fn))

int main(void) {
    char err[1024] = "";
    Plan *p = calloc(1, sizeof *p);
    snprintf(p->path, sizeof p->path, "/nonexistent/plan.txt");
    CudaApi probe;
    char why[512];
    int has_driver = cuda_api_load(&probe, why, sizeof why) == 0;
    int devices = 0;
    if (has_driver && probe.cuInit(0) == 0) probe.cuDeviceGetCount(&devices);
    if (devices == 0) {
        BackendRank *r = backend_cuda.rank_open(p, 0, 1, err, sizeof err);
        CHECK(r == NULL && strstr(err, "no CUDA device found") && strstr(err, "use --backend cpu"),
              "cuda rank_open without a GPU: clear message", "got %s: '%s'", r ? "a rank" : "NULL", err);
    } else {
        BackendRank *r = backend_cuda.rank_open(p, 0, 1, err, sizeof err);
        CHECK(r == NULL && strstr(err, "kernels.cu"), "cuda rank_open with a missing kernels.cu: clear message",
              "'%s'", err);
    }
    char line[512];
    overlap_line(ST_ALLREDUCE, 0, line, sizeof line);   /* Z shares X's bytes: writing Z is the first use */
    CHECK(!strcmp(line, "line 11 allreduce fwd t: 1 steps (512 FLOP) before its first use at line 13"),
          "overlap: a write to a tensor aliasing the collective's arena bytes waits for it", "got '%s'", line);
    overlap_line(ST_ALLREDUCE, 192, line, sizeof line);   /* Z elsewhere: the reader of X two steps on is the first use */
    CHECK(!strcmp(line, "line 11 allreduce fwd t: 2 steps (512 FLOP) before its first use at line 14"),
          "overlap: independent steps overlap until the first reader of the collective's buffer", "got '%s'", line);
    /* ZeRO-1's reduce-scatter is overlapped the same way (issued, waited for before its first use) */
    overlap_line(ST_REDUCE_SCATTER, 192, line, sizeof line);
    CHECK(!strcmp(line, "line 11 reduce_scatter fwd t: 2 steps (512 FLOP) before its first use at line 14"),
          "overlap: a reduce_scatter is waited for at the first reader of its buffer", "got '%s'", line);
    overlap_line(ST_REDUCE_SCATTER, 0, line, sizeof line);
    CHECK(!strcmp(line, "line 11 reduce_scatter fwd t: 1 steps (512 FLOP) before its first use at line 13"),
          "overlap: a reduce_scatter is waited for before a write to bytes aliasing its buffer", "got '%s'", line);
    /* ZeRO-1's gathers: each waited for right before the next pass's first reader of its param */
    char grep_[4096];
    gather_report(grep_, sizeof grep_);
    const struct { const char *want, *name; } gw[] = {
        {"line 14 gather_shards opt W: 2 steps (1024 FLOP) of the next pass before its first use at line 12\n",
         "overlap: gather_shards of W waited for at its first forward reader, after two independent GEMMs"},
        {"line 15 gather_shards opt U: 0 steps (0 FLOP) of the next pass before its first use at line 10\n",
         "overlap: gather_shards of a param the first step reads is waited for before that step"},
        {"line 16 gather_shards opt Q: 3 steps (1536 FLOP) of the next pass before its first use at line 13\n",
         "overlap: gather_shards of a param read first in the backward waits until that step"},
        {"line 17 gather_shards opt Z: not used by the next pass (waited for at its end)\n",
         "overlap: gather_shards of a param no step reads is waited for at the end of the pass"},
        {"  optimizer: 4 gather_shards run into the next pass;", "overlap report: the optimizer's gathers counted"}};
    for (size_t i = 0; i < sizeof gw / sizeof gw[0]; i++)
        CHECK(strstr(grep_, gw[i].want) != NULL, gw[i].name, "no '%.60s' in the report:\n%s", gw[i].want, grep_);
#ifdef HAVE_CUDA_H
    /* cuDeviceGetAttribute and cuStreamBeginCapture_v2 take an enum (int-sized) where cuda_api.h says
     * int: not compared (the capture mode's value is checked below) */
    struct { const char *name; int same; } sig[] = {
        {"cuInit", SAME_TYPE(cuInit, cuInit)}, {"cuDeviceGetCount", SAME_TYPE(cuDeviceGetCount, cuDeviceGetCount)},
        {"cuDeviceGet", SAME_TYPE(cuDeviceGet, cuDeviceGet)},
        {"cuDevicePrimaryCtxRetain", SAME_TYPE(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)},
        {"cuDevicePrimaryCtxRelease", SAME_TYPE(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2)},
        {"cuCtxSetCurrent", SAME_TYPE(cuCtxSetCurrent, cuCtxSetCurrent)},
        {"cuMemAlloc_v2", SAME_TYPE(cuMemAlloc_v2, cuMemAlloc_v2)}, {"cuMemFree_v2", SAME_TYPE(cuMemFree_v2, cuMemFree_v2)},
        {"cuMemsetD8_v2", SAME_TYPE(cuMemsetD8_v2, cuMemsetD8_v2)},
        {"cuMemsetD32Async", SAME_TYPE(cuMemsetD32Async, cuMemsetD32Async)},
        {"cuMemcpyHtoD_v2", SAME_TYPE(cuMemcpyHtoD_v2, cuMemcpyHtoD_v2)},
        {"cuMemcpyDtoH_v2", SAME_TYPE(cuMemcpyDtoH_v2, cuMemcpyDtoH_v2)},
        {"cuStreamCreate", SAME_TYPE(cuStreamCreate, cuStreamCreate)},
        {"cuStreamDestroy_v2", SAME_TYPE(cuStreamDestroy_v2, cuStreamDestroy_v2)},
        {"cuStreamSynchronize", SAME_TYPE(cuStreamSynchronize, cuStreamSynchronize)},
        {"cuStreamQuery", SAME_TYPE(cuStreamQuery, cuStreamQuery)},
        {"cuStreamWaitEvent", SAME_TYPE(cuStreamWaitEvent, cuStreamWaitEvent)},
        {"cuEventCreate", SAME_TYPE(cuEventCreate, cuEventCreate)},
        {"cuEventDestroy_v2", SAME_TYPE(cuEventDestroy_v2, cuEventDestroy_v2)},
        {"cuEventRecord", SAME_TYPE(cuEventRecord, cuEventRecord)},
        {"cuMemcpyHtoDAsync_v2", SAME_TYPE(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2)},
        {"cuMemcpyDtoHAsync_v2", SAME_TYPE(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2)},
        {"cuMemcpyDtoDAsync_v2", SAME_TYPE(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2)},
        {"cuStreamEndCapture", SAME_TYPE(cuStreamEndCapture, cuStreamEndCapture)},
        {"cuGraphInstantiateWithFlags", SAME_TYPE(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags)},
        {"cuGraphLaunch", SAME_TYPE(cuGraphLaunch, cuGraphLaunch)},
        {"cuGraphExecDestroy", SAME_TYPE(cuGraphExecDestroy, cuGraphExecDestroy)},
        {"cuGraphDestroy", SAME_TYPE(cuGraphDestroy, cuGraphDestroy)},
        {"cuModuleLoadData", SAME_TYPE(cuModuleLoadData, cuModuleLoadData)},
        {"cuModuleUnload", SAME_TYPE(cuModuleUnload, cuModuleUnload)},
        {"cuModuleGetFunction", SAME_TYPE(cuModuleGetFunction, cuModuleGetFunction)},
        {"cuLaunchKernel", SAME_TYPE(cuLaunchKernel, cuLaunchKernel)},
        {"cuGetErrorString", SAME_TYPE(cuGetErrorString, cuGetErrorString)},
    };
    char bad[512] = "";
    for (size_t i = 0; i < sizeof sig / sizeof sig[0]; i++)
        if (!sig[i].same) snprintf(bad + strlen(bad), sizeof bad - strlen(bad), " %s", sig[i].name);
    CHECK(!bad[0], "driver API signatures match cuda.h", "differ:%s", bad);
#define SAME_OFF(f) (offsetof(CUDA_MEMCPY2D_, f) == offsetof(CUDA_MEMCPY2D, f))
    CHECK(sizeof(CUDA_MEMCPY2D_) == sizeof(CUDA_MEMCPY2D) && SAME_OFF(srcMemoryType) && SAME_OFF(srcDevice) &&
          SAME_OFF(srcPitch) && SAME_OFF(dstMemoryType) && SAME_OFF(dstDevice) && SAME_OFF(dstPitch) &&
          SAME_OFF(WidthInBytes) && SAME_OFF(Height), "CUDA_MEMCPY2D layout matches cuda.h",
          "size %zu vs %zu", sizeof(CUDA_MEMCPY2D_), sizeof(CUDA_MEMCPY2D));
    CHECK((int)CU_MEMORYTYPE_DEVICE_ == (int)CU_MEMORYTYPE_DEVICE && (int)CU_MEMORYTYPE_HOST_ == (int)CU_MEMORYTYPE_HOST &&
          (int)CUDA_R_16BF_ == (int)CUDA_R_16BF && (int)CUDA_R_32F_ == (int)CUDA_R_32F && CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR == 75 &&
          CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR == 76 && (int)CUDA_ERROR_NOT_READY_ == (int)CUDA_ERROR_NOT_READY &&
          (int)CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES_ == (int)CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES &&
          (int)CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN_ == (int)CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN &&
          (int)CU_EVENT_DISABLE_TIMING_ == (int)CU_EVENT_DISABLE_TIMING &&
          (int)CU_DEVICE_ATTRIBUTE_MAX_PITCH_ == (int)CU_DEVICE_ATTRIBUTE_MAX_PITCH &&
          (int)CU_STREAM_CAPTURE_MODE_THREAD_LOCAL_ == (int)CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
          sizeof(CUstreamCaptureMode) == sizeof(int), "enum values match the CUDA headers", "a constant differs");
#else
    printf("ok - cuda_header_layout # SKIP cuda.h is not installed: layout checks not run\n");
#endif
    free(p);
    TEST_EXIT();
}
