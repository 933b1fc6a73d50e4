/* cuda.c: backend_cuda, the GPU backend. The driver API (libcuda.so.1), NVRTC and cuBLAS are loaded
 * with dlopen, so bin/boost starts without them and says clearly when there is no GPU. kernels.cu
 * (next to plan.txt) is JIT-compiled for the device's arch with an on-disk cubin cache. Local mode:
 * the tp ranks are shards in one process on one device (one stream and cuBLAS handle each); a
 * collective meets at a barrier and one device kernel sums the ranks' buffers in rank order, so
 * results are deterministic. Multi-process mode (a world in the environment, runtime/world.h): this
 * process holds one rank on device rank % count, and the collectives go through NCCL; with pipeline
 * stages the NCCL world, stage communicators and boundary channels are the CudaPipe's
 * (runtime/cuda_pipe.h). This file: the backend's table, a rank's failure, and the kernel step;
 * the rest by job in cuda_libs.c, cuda_jit.c, cuda_mem.c, cuda_world.c, cuda_pipe.c, cuda_coll.c,
 * cuda_gemm.c, cuda_adamw.c and cuda_graph.c (shared types in cuda_internal.h). */
#include "runtime/cuda_internal.h"

int rfail(BackendRank *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    if (r->capturing) {   /* a failure inside a graph capture: end it, or the stream stays capturing */
        CUgraph g = NULL;
        r->capturing = 0;
        r->graphs = 0;
        if (api.cuStreamEndCapture(r->stream, &g) == 0 && g) api.cuGraphDestroy(g);
    }
    if (r->group) {
        pthread_mutex_lock(&r->group->mu);
        r->group->aborted = 1;
        pthread_cond_broadcast(&r->group->cv);
        pthread_mutex_unlock(&r->group->mu);
    }
    return -1;
}

static void *cuda_tensor_ptr(BackendRank *r, int t) { return (void *)(uintptr_t)r->tptr[t]; }

int after_step(BackendRank *r, const char *what) {
    if (!r->sync_steps) return 0;
    CUresult rc = api.cuStreamSynchronize(r->stream);
    if (rc) return rfail(r, "%s failed on the device: %s (BOOST_CUDA_SYNC=1 stops at the first failing step)",
                         what, cu_str(rc));
    return 0;
}

static int cuda_kernel(BackendRank *r, const KernelArgs *k, void **ops) {
    if (ctx_set(r, "a kernel launch")) return -1;
    LaunchArgs la;
    if (kernel_args(r, k, ops, &la)) return -1;
    if (launch(r, k->name, k->grid, k->block, k->smem, la.args)) return -1;
    return after_step(r, k->name);
}

static const char *cuda_last_error(BackendRank *r) { return r->err; }

const Backend backend_cuda = {
    .name = "cuda",
    .elem_bytes_fp32_only = 0,
    .rank_open = cuda_rank_open,
    .rank_close = cuda_rank_close,
    .tensor_ptr = cuda_tensor_ptr,
    .gemm = cuda_gemm,
    .grouped_gemm = cuda_grouped_gemm,
    .kernel = cuda_kernel,
    .coll_kinds = (1u << CK_COUNT) - 1,
    .collective = cuda_collective,
    .to_host = cuda_to_host,
    .from_host = cuda_from_host,
    .set_i32 = cuda_set_i32,
    .adamw = cuda_adamw,
    .grad_sq_norm = cuda_grad_sq_norm,
    .zero_grads = cuda_zero_grads,
    .state_to_host = cuda_state_to_host,
    .state_from_host = cuda_state_from_host,
    .last_error = cuda_last_error,
    .group_init = cuda_group_init,
    .stage_init = cuda_stage_init,
    .world_allreduce_host = cuda_world_allreduce_host,
    .coll_issue_kinds = 1u << CK_ALLREDUCE | 1u << CK_ALLGATHER | 1u << CK_REDUCE_SCATTER |
                        1u << CK_GATHER_SHARDS,
    .collective_issue = cuda_collective_issue,
    .coll_wait = cuda_coll_wait,
    .pass_begin = cuda_pass_begin,
    .pass_end = cuda_pass_end,
    .arena_slot = cuda_arena_slot,
};
