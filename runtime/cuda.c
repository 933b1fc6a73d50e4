/* cuda.c: backend_cuda, the GPU backend. The driver API (libcuda.so.1), NVRTC and cuBLAS are loaded
 * with dlopen, so bin/boost starts without them and says clearly when there is no GPU. kernels.cu
 * (next to plan.txt) is JIT-compiled for the device's arch with an on-disk cubin cache. Local mode:
 * the tp ranks are shards in one process on one device (one stream and cuBLAS handle each); a
 * collective meets at a barrier and one device kernel sums the ranks' buffers in rank order, so
 * results are deterministic. Multi-process mode (a world in the environment, runtime/world.h): this
 * process holds one rank on device rank % count, and the collectives go through NCCL; with pipeline
 * stages the NCCL world, stage communicators and boundary channels are the CudaPipe's
 * (runtime/cuda_pipe.h). */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "runtime/backend.h"
#include "runtime/cuda_api.h"
#include "runtime/cuda_device.h"
#include "runtime/cuda.h"
#include "runtime/cuda_pipe.h"
#include "common/nvrtc.h"
#include "common/files.h"   // defines: file_read_all
#include "common/env.h"     // defines: runtime_env, runtime_nccl_timeout
#include "runtime/world.h"

#define CUDA_MAX_TP 64
#define ALIGN_ELEMS 64            /* params and grads start on 256-byte boundaries */
#define SUMSQ_BLOCKS 256

/* ---------------- libraries ---------------- */
static CudaApi api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;
static char api_why[512];
static int api_ok;

static void api_load(void) {
    /* one process per GPU: load every kernel at cuModuleLoadData (CUDA 12.2+ loads lazily, at a
     * kernel's first launch, which can then wait behind NCCL kernels spinning on the device) */
    int wr = 0, ws = 1;
    char werr[256];
    if (world_from_env(&wr, &ws, werr, sizeof werr) == 1) setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    api_ok = cuda_api_load(&api, api_why, sizeof api_why) == 0;
}

static NcclApi nccl;                      /* multi-process mode only */
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static char nccl_why[512];
static int nccl_ok;

static void nccl_load(void) { nccl_ok = nccl_api_load(&nccl, nccl_why, sizeof nccl_why) == 0; }

/* ---------------- the shared module (one per process) ---------------- */
typedef struct { char name[96]; CUfunction fn; int64_t dyn_max; } FnEntry;   /* dyn_max: its raised limit (0: 48 KiB) */
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUcontext ctx;
    CUdevice dev;
    CUmodule mod;
    char arch[16];
    int smem_optin;            /* the device's most shared memory a block may opt in to (bytes) */
    int max_pitch;             /* cuMemcpy2D's largest pitch on this device (bytes) */
    char src_path[1100];
    FnEntry *fns; int nfns, capfns;
    int users;
} shared;

/* The ranks of one Engine: an abortable barrier and each rank's published pointer. */
typedef struct {
    int tp;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int count, gen, aborted;
    CUdeviceptr ptr[CUDA_MAX_TP];
    CUdeviceptr dptrs;            /* device copy of ptr[] for the all-reduce kernel */
    BackendRank *ranks[CUDA_MAX_TP];
    CUdeviceptr step_ptrs;        /* [slots][nsteps][tp]: every rank's buffer of each all-reduce step per arena slot, uploaded once */
} CudaGroup;

struct BackendRank {
    const Plan *p;
    int rank, tp;
    CUstream stream;              /* compute: GEMMs, kernels, copies */
    CUstream comm;                /* collectives (multi-process mode; rank 0's for the whole group in local mode) */
    int comm_used;                /* work went to `comm` since the rank last waited for it */
    CUevent *ev_ready, *ev_done;  /* per plan step (collectives): compute reached the issue / the collective is done */
    CUdeviceptr gemm_ptrs;        /* grouped GEMMs: [slots][3 * nmembers] pointer arrays ([B], [A], [C] per step), uploaded once at open */
    CUdeviceptr *gemm_ptrs_host;  /* the same on the host, to check the executor passes these pointers */
    int slot, nslots;             /* pipeline stages: the arena slot the activations are in, of nslots (plan's slots=K; 1 without) */
    size_t slot_bytes;            /* arena bytes per slot (slot k at arena + k * slot_bytes) */
    int64_t *rep_off, *rep_n;     /* ranks > 0: element ranges of grads in replicated (rep=1) blocks, */
    int nrep;                     /* left out of the gradient norm; nrep -1: too many, done on the host */
    void *blas;
    CUdeviceptr arena, io, params, grads, master, adam_m, adam_v, scratch;
    CUdeviceptr blas_ws;          /* cuBLAS's workspace, set before a graph capture (BOOST_CUDA_GRAPH) */
    CUdeviceptr adam_chunks;      /* multi-tensor AdamW: per chunk {element offset, count, flags} (int64); */
    int64_t adam_nchunks;         /* zero=1: {param offset, master offset, m/v offset, count, flags} */
    size_t io_bytes, scratch_bytes;
    int64_t nelems;               /* elements of params/grads (with alignment padding) */
    int64_t *param_off;           /* per param: element offset in params and grads */
    /* ZeRO-1 (zero=1, dp > 1): master and m/v hold this dp rank's shard only (zero_shard over the
     * param's elements, room for the largest shard ceil(n/dp) each); an fp32 param's master is the
     * param itself and stays whole. Else the same offsets and sizes as params/grads. */
    int64_t *master_off, *state_off;   /* per param: element offset in master, in adam_m/adam_v */
    int64_t nmaster, nstate;      /* elements of master, of adam_m and adam_v */
    CUdeviceptr *tptr;            /* per tensor */
    CudaGroup *group;
    ncclComm_t nccl_comm;         /* multi-process mode: the tp group's NCCL communicator (the world's at dp = 1) */
    ncclComm_t world_comm;        /* multi-process mode: the whole world (the same as nccl_comm at dp = 1) */
    ncclComm_t dp_comm;           /* dp > 1: this rank's dp group, split from the world (runtime/grid.h order) */
    int wrank, wsize;             /* multi-process mode: world rank and size (rank and tp at dp = 1) */
    int dp, dp_rank;              /* the dp degree and this rank's index in its dp group (1, 0 without dp) */
    ncclComm_t ep_comm, edp_comm; /* ep > 1: this rank's ep and edp groups, split from the world (runtime/grid.h) */
    int ep, ep_rank;              /* the ep degree and this rank's ep rank (1, 0 without expert parallelism) */
    CUdeviceptr ep_buf;           /* ep > 1: an out all-to-all's send staging (the token side's slots, empty ones zeroed) */
    size_t ep_bytes;
    int zero;                     /* zero=1 at dp > 1 (set at open): AdamW, its state and the gradient norm cover this dp rank's shard */
    CUdeviceptr dp_buf;           /* dp collectives' staging (bf16 wire, shard padding), used on `comm` only */
    size_t dp_bytes;
    CUevent ev_dp_ready, ev_dp_done;   /* a dp step on `comm` in the compute stream's order */
    int64_t *sq_off, *sq_n;       /* zero=1: the gradient norm's element ranges, each added (sq_sign 1) or */
    int *sq_sign, nsq;            /* subtracted (-1: a replicated block that tp rank 0 counts) */
    int world;                    /* multi-process mode */
    int dead;                     /* the communicator was aborted after a failure: no more collectives */
    double nccl_timeout;          /* seconds a host wait may take in multi-process mode (BOOST_NCCL_TIMEOUT) */
    int graphs;                   /* BOOST_CUDA_GRAPH=1 (tp=1): passes replayed as CUDA graphs */
    int graph_seen[2], capturing; /* per pass key (0 forward, 1 forward+backward): passes run so far */
    CUgraphExec graph_exec[2];
    CUdeviceptr coll_buf;         /* multi-process mode: staging for all-gathers and host sums */
    size_t coll_bytes;
    int sync_steps;               /* BOOST_CUDA_SYNC=1: synchronise after every step */
    int opened;                   /* holds a reference on the shared module */
    char err[1024];
};

/* Multi-tensor AdamW (templates/runtime.cu): one launch, a block per chunk of a parameter. */
#define KERNEL_ADAMW_MULTI "adamw_multi_fp32_master_bf16"
#define KERNEL_ADAMW_SHARDED "adamw_multi_sharded"   /* zero=1: the state at its own offsets */
#define ADAMW_CHUNK 65536

static int rfail(BackendRank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rfail(BackendRank *r, const char *fmt, ...) {
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

static const char *cu_str(CUresult rc) {
    const char *s = NULL;
    if (api.cuGetErrorString) api.cuGetErrorString(rc, &s);
    return s ? s : "unknown CUDA error";
}

#define CU(r, call) do { CUresult rc_ = (call); if (rc_ != 0) { \
    char m_[256]; snprintf(m_, sizeof m_, "%s (CUDA error %d) at %s:%d", cu_str(rc_), (int)rc_, __FILE__, __LINE__); \
    return rfail((r), "%s", m_); } } while (0)

/* Makes the shared context current on this thread; its failure names the call and what was next. */
static int ctx_set(BackendRank *r, const char *what) {
    CUresult rc = api.cuCtxSetCurrent(shared.ctx);
    if (rc) return rfail(r, "cuCtxSetCurrent failed before %s: %s (CUDA error %d)", what, cu_str(rc), (int)rc);
    return 0;
}
static int ctx_set_err(char *err, size_t errlen, const char *what) {
    CUresult rc = api.cuCtxSetCurrent(shared.ctx);
    if (rc) snprintf(err, errlen, "cuCtxSetCurrent failed before %s: %s (CUDA error %d)", what, cu_str(rc), (int)rc);
    return rc ? -1 : 0;
}

static int group_barrier(CudaGroup *g) {
    if (!g || g->tp <= 1) return 0;
    pthread_mutex_lock(&g->mu);
    if (g->aborted) { pthread_mutex_unlock(&g->mu); return -1; }
    int gen = g->gen;
    if (++g->count == g->tp) { g->count = 0; g->gen++; pthread_cond_broadcast(&g->cv); }
    else while (gen == g->gen && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
    int ab = g->aborted && gen == g->gen;
    pthread_mutex_unlock(&g->mu);
    return ab ? -1 : 0;
}

/* ---------------- JIT with an on-disk cache (common/nvrtc.h) ---------------- */
/* Compile (or fetch from the cache) the cubin of src for arch. */
static void *jit_cubin(const char *src, const char *arch, size_t *size, char *err, size_t errlen) {
    int maj = 0, min = 0;
    char dir[900], path[1100];
    if (nvrtc_version(&maj, &min) != 0 || nvrtc_cache_path(src, arch, ".cubin", dir, sizeof dir, path, sizeof path) != 0) {
        nvrtc_available(err, errlen);
        return NULL;
    }
    void *bin = nvrtc_cache_get(path, size);
    if (bin) return bin;
    fprintf(stderr, "boost: compiling kernels.cu for %s with NVRTC %d.%d (first run; cached in %s)\n", arch, maj,
            min, dir);
    if (nvrtc_compile(src, arch, &bin, size, NULL, 0, err, errlen) < 0) return NULL;
    nvrtc_cache_put(dir, path, bin, *size);
    return bin;
}

/* The kernels of plan p: kernels.cu next to it, infer-kernels.cu next to a decode or prefill plan
 * (infer.txt, prefill.txt: one file holds both steps' kernels). */
static void kernels_path(const Plan *p, char *out, size_t n) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", p->path);
    char *slash = strrchr(dir, '/');
    const char *base = slash ? slash + 1 : dir;
    int infer = !strcmp(base, "infer.txt") || !strcmp(base, "prefill.txt");
    if (slash) *slash = 0; else snprintf(dir, sizeof dir, ".");
    snprintf(out, n, "%s/%s", dir, infer ? "infer-kernels.cu" : "kernels.cu");
}

/* Every `extern "C" __global__ void [__launch_bounds__(...)] NAME(` of kernels.cu looked up once
 * the module is loaded (under shared_mu), so no kernel is loaded at its first launch, possibly
 * while NCCL kernels occupy the device. A name the module lacks is left to get_fn (the launch
 * then names it). */
static void lookup_all_kernels(const char *src) {
    for (const char *p = src; (p = strstr(p, "__global__ void"));) {
        p += strlen("__global__ void");
        while (*p == ' ' || *p == '\n') p++;
        if (!strncmp(p, "__launch_bounds__", 17)) {
            p = strchr(p, ')');
            if (!p) return;
            p++;
            while (*p == ' ' || *p == '\n') p++;
        }
        size_t k = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
        char name[96];
        if (k == 0 || k >= sizeof name) continue;
        memcpy(name, p, k);
        name[k] = 0;
        CUfunction fn = NULL;
        if (api.cuModuleGetFunction(&fn, shared.mod, name) != 0 || !fn) continue;
        if (shared.nfns == shared.capfns) {
            int cap = shared.capfns ? 2 * shared.capfns : 64;
            FnEntry *n = realloc(shared.fns, cap * sizeof *n);
            if (!n) return;
            shared.fns = n;
            shared.capfns = cap;
        }
        snprintf(shared.fns[shared.nfns].name, sizeof shared.fns[0].name, "%s", name);
        shared.fns[shared.nfns].dyn_max = 0;
        shared.fns[shared.nfns++].fn = fn;
    }
}

/* Make the process's context current; open the device, compile and load kernels.cu once. */
static int shared_open(const Plan *p, char *err, size_t errlen) {
    pthread_mutex_lock(&shared_mu);
    if (shared.users > 0) {
        char want[1100];
        kernels_path(p, want, sizeof want);
        if (strcmp(want, shared.src_path)) {   /* one module per process: one plan at a time */
            snprintf(err, errlen, "%s: the CUDA backend already runs %s in this process; close that engine first",
                     want, shared.src_path);
            pthread_mutex_unlock(&shared_mu);
            return -1;
        }
        if (ctx_set_err(err, errlen, "opening a rank")) { pthread_mutex_unlock(&shared_mu); return -1; }
        shared.users++;
        pthread_mutex_unlock(&shared_mu);
        return 0;
    }
    int count = 0;
    CUresult rc = api.cuInit(0);
    if (rc == 0) rc = api.cuDeviceGetCount(&count);
    if (rc != 0 || count == 0) {
        snprintf(err, errlen, "no CUDA device found (%s): use --backend cpu",
                 rc ? cu_str(rc) : "the driver reports 0 devices");
        pthread_mutex_unlock(&shared_mu);
        return -1;
    }
    int ord = 0;
    char how[512];
    if (cuda_pick_device(count, &ord, how, sizeof how, err, errlen) != 0) {   /* runtime/cuda_device.c */
        pthread_mutex_unlock(&shared_mu);
        return -1;
    }
    int ccmaj = 0, ccmin = 0;
    if ((rc = api.cuDeviceGet(&shared.dev, ord)) != 0 ||
        (rc = api.cuDeviceGetAttribute(&ccmaj, 75 /* COMPUTE_CAPABILITY_MAJOR */, shared.dev)) != 0 ||
        (rc = api.cuDeviceGetAttribute(&ccmin, 76 /* COMPUTE_CAPABILITY_MINOR */, shared.dev)) != 0 ||
        (rc = api.cuDeviceGetAttribute(&shared.smem_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN_, shared.dev)) != 0 ||
        (rc = api.cuDeviceGetAttribute(&shared.max_pitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH_, shared.dev)) != 0 ||
        (rc = api.cuDevicePrimaryCtxRetain(&shared.ctx, shared.dev)) != 0 ||
        (rc = api.cuCtxSetCurrent(shared.ctx)) != 0) {
        snprintf(err, errlen, "CUDA device %d cannot be opened (%s): use --backend cpu", ord, cu_str(rc));
        pthread_mutex_unlock(&shared_mu);
        return -1;
    }
    if (ccmaj < 8) {
        snprintf(err, errlen, "CUDA device %d has compute capability %d.%d; BOOST's kernels need bf16 (8.0+): "
                 "use --backend cpu", ord, ccmaj, ccmin);
        api.cuDevicePrimaryCtxRelease(shared.dev);
        pthread_mutex_unlock(&shared_mu);
        return -1;
    }
    snprintf(shared.arch, sizeof shared.arch, "sm_%d%d", ccmaj, ccmin);
    /* kernels.cu lives next to plan.txt */
    kernels_path(p, shared.src_path, sizeof shared.src_path);
    size_t len = 0;
    char *src = file_read_all(shared.src_path, (size_t)1 << 30, &len, err, errlen);
    if (!src) {
        snprintf(err, errlen, "%s: cannot read the plan's kernels (%s): regenerate with 'boost gen'",
                 shared.src_path, strerror(errno));
        api.cuDevicePrimaryCtxRelease(shared.dev);
        pthread_mutex_unlock(&shared_mu);
        return -1;
    }
    size_t bin_size = 0;
    char cerr[8192];
    void *bin = jit_cubin(src, shared.arch, &bin_size, cerr, sizeof cerr);
    if (!bin) {
        free(src);
        snprintf(err, errlen, "%s: %s", shared.src_path, cerr);
        api.cuDevicePrimaryCtxRelease(shared.dev);
        pthread_mutex_unlock(&shared_mu);
        return -1;
    }
    rc = api.cuModuleLoadData(&shared.mod, bin);
    free(bin);
    if (rc != 0) {
        free(src);
        snprintf(err, errlen, "%s: loading the compiled kernels failed (%s)", shared.src_path, cu_str(rc));
        api.cuDevicePrimaryCtxRelease(shared.dev);
        pthread_mutex_unlock(&shared_mu);
        return -1;
    }
    lookup_all_kernels(src);
    free(src);
    shared.users = 1;
    pthread_mutex_unlock(&shared_mu);
    return 0;
}

static void shared_close(void) {
    pthread_mutex_lock(&shared_mu);
    if (shared.users > 0 && --shared.users == 0) {
        api.cuModuleUnload(shared.mod);
        free(shared.fns); shared.fns = NULL; shared.nfns = shared.capfns = 0;
        api.cuDevicePrimaryCtxRelease(shared.dev);
    }
    pthread_mutex_unlock(&shared_mu);
}

static CUfunction get_fn(const char *name) {
    CUfunction fn = NULL;
    pthread_mutex_lock(&shared_mu);
    for (int i = 0; i < shared.nfns; i++)
        if (!strcmp(shared.fns[i].name, name)) { fn = shared.fns[i].fn; break; }
    if (!fn && api.cuModuleGetFunction(&fn, shared.mod, name) == 0) {
        if (shared.nfns == shared.capfns) {
            int cap = shared.capfns ? 2 * shared.capfns : 64;
            FnEntry *n = realloc(shared.fns, cap * sizeof *n);
            if (n) { shared.fns = n; shared.capfns = cap; }
        }
        if (shared.nfns < shared.capfns) {
            snprintf(shared.fns[shared.nfns].name, sizeof shared.fns[0].name, "%s", name);
            shared.fns[shared.nfns].dyn_max = 0;
            shared.fns[shared.nfns++].fn = fn;
        }
    } else if (!fn) fn = NULL;
    pthread_mutex_unlock(&shared_mu);
    return fn;
}

/* ---------------- the catalog's operand order and storage types (runtime/plan.c, docs/plan-format.md) ---------------- */
/* Operand o of kernel kind `kind`: its key (into name) and the dtype the kernel was compiled for: the
 * catalog default, or the "_<operand><dtype>" suffix gen/kernels.c puts in the name kname. Returns -1
 * past the last operand (or for a kind the catalog lacks). */
static int op_spec(const char *kind, int o, const char *kname, char *name, size_t n) {
    int dt;
    if (plan_catalog_operand(kind, o, name, n, &dt, NULL) != 0) return -1;
    static const char *dts[] = {"bf16", "fp32", "i32"};
    for (int d = 0; d < 3; d++) {
        char suffix[64];
        snprintf(suffix, sizeof suffix, "_%s%s", name, dts[d]);
        const char *hit = strstr(kname, suffix);
        if (hit && (hit[strlen(suffix)] == '_' || !hit[strlen(suffix)])) dt = d;
    }
    return dt;
}
static int op_kind_known(const char *kind) { return plan_catalog_operand(kind, 0, NULL, 0, NULL, NULL) >= 0; }

int cuda_plan_check(const Plan *p, const char *const *names, int nnames, char *err, size_t errlen) {
    static const char *dts[] = {"bf16", "fp32", "i32"};
    int problems = 0;
    size_t used = 0;
    if (errlen) err[0] = 0;
#define PROBLEM(...) do { if (problems++ < 8 && used < errlen) used += snprintf(err + used, errlen - used, __VA_ARGS__); } while (0)
    for (int s = 0; s < p->nsteps; s++) {
        const PlanStep *st = &p->steps_[s];
        int ngemm = st->kind == ST_GEMM || st->kind == ST_BATCHED_GEMM ? 1 : st->kind == ST_GROUPED_GEMM ? st->nmembers : 0;
        for (int q = 0; q < ngemm; q++) {
            const GemmArgs *g = st->kind == ST_GROUPED_GEMM ? &p->members[st->first_member + q] : &st->gemm;
            int at = p->tensors[g->A.tensor].dtype, bt = p->tensors[g->B.tensor].dtype;
            if (at != bt || at == PDT_I32)
                PROBLEM("%s:%d: gemm A=%s (%s) and B=%s (%s): cuBLAS needs A and B of one float dtype\n", p->path,
                        st->line, p->tensors[g->A.tensor].name, dts[at], p->tensors[g->B.tensor].name, dts[bt]);
        }
        if (st->kind != ST_KERNEL) continue;
        const KernelArgs *k = st->kernel;
        if (!op_kind_known(k->kind)) { PROBLEM("%s:%d: kernel kind %s is not in the catalog\n", p->path, st->line, k->kind); continue; }
        for (int q = 0; q < k->nops; q++) {
            int known = 0;
            char name[32];
            int want;
            for (int o = 0; o < 10 && (want = op_spec(k->kind, o, k->name, name, sizeof name)) >= 0; o++) {
                if (strcmp(name, k->op_key[q])) continue;
                known = 1;
                const PlanTensor *t = &p->tensors[k->op[q].tensor];
                if (t->dtype != want)
                    PROBLEM("%s:%d: kernel %s operand %s=%s is %s in the plan but the kernel reads %s: regenerate "
                            "with a generator that marks the operand's dtype\n", p->path, st->line, k->kind,
                            name, t->name, dts[t->dtype], dts[want]);
            }
            if (!known) PROBLEM("%s:%d: kernel %s has no operand '%s'\n", p->path, st->line, k->kind, k->op_key[q]);
        }
        if (k->block <= 0 || k->block > 1024 || k->grid <= 0 || k->grid > 0x7fffffff)
            PROBLEM("%s:%d: kernel %s launch grid=%lld block=%lld is out of range\n", p->path, st->line, k->name,
                    (long long)k->grid, (long long)k->block);
        if (names) {
            int found = 0;
            for (int j = 0; j < nnames && !found; j++) found = !strcmp(names[j], k->name);
            if (!found) PROBLEM("%s:%d: kernel %s is not defined in kernels.cu: regenerate both with 'boost gen'\n",
                                p->path, st->line, k->name);
        }
    }
#undef PROBLEM
    return problems;
}

/* ---------------- open / close ---------------- */
static int64_t numel(const PlanTensor *t) { return t->rows * t->cols; }
static int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

static void cuda_rank_close(BackendRank *r) {
    if (!r) return;
    if (api_ok && r->opened) {
        if (api.cuCtxSetCurrent(shared.ctx)) fprintf(stderr, "boost: cuCtxSetCurrent failed while closing a rank\n");
        if (!r->dead) {   /* after an abort the streams may hold work that never ends: do not wait */
            if (r->stream) api.cuStreamSynchronize(r->stream);
            if (r->comm) api.cuStreamSynchronize(r->comm);
        }
        if (r->blas) api.cublasDestroy_v2(r->blas);
        if (r->blas_ws) api.cuMemFree_v2(r->blas_ws);
        if (r->dp_comm) nccl.ncclCommDestroy(r->dp_comm);
        if (r->ep_comm) nccl.ncclCommDestroy(r->ep_comm);
        if (r->edp_comm) nccl.ncclCommDestroy(r->edp_comm);
        if (r->ep_buf) api.cuMemFree_v2(r->ep_buf);
        if (r->nccl_comm && r->nccl_comm != r->world_comm) nccl.ncclCommDestroy(r->nccl_comm);
        if (r->world_comm) nccl.ncclCommDestroy(r->world_comm);
        if (r->coll_buf) api.cuMemFree_v2(r->coll_buf);
        if (r->dp_buf) api.cuMemFree_v2(r->dp_buf);
        if (r->ev_dp_ready) api.cuEventDestroy_v2(r->ev_dp_ready);
        if (r->ev_dp_done) api.cuEventDestroy_v2(r->ev_dp_done);
        CUdeviceptr bufs[] = {r->arena, r->io, r->params, r->grads, r->master, r->adam_m, r->adam_v, r->scratch,
                              r->gemm_ptrs, r->adam_chunks};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) if (bufs[i]) api.cuMemFree_v2(bufs[i]);
        for (int s = 0; r->ev_ready && s < r->p->nsteps; s++) {
            if (r->ev_ready[s]) api.cuEventDestroy_v2(r->ev_ready[s]);
            if (r->ev_done[s]) api.cuEventDestroy_v2(r->ev_done[s]);
        }
        for (int k = 0; k < 2; k++) if (r->graph_exec[k]) api.cuGraphExecDestroy(r->graph_exec[k]);
        if (r->stream) api.cuStreamDestroy_v2(r->stream);
        if (r->comm) api.cuStreamDestroy_v2(r->comm);
        shared_close();
    }
    free(r->ev_ready); free(r->ev_done);
    free(r->rep_off); free(r->rep_n);
    free(r->sq_off); free(r->sq_n); free(r->sq_sign);
    free(r->gemm_ptrs_host);
    free(r->param_off); free(r->master_off); free(r->state_off);
    free(r->tptr);
    free(r);
}

/* Where the executor's operand resolution puts an operand on rank r (runtime/exec.c: the tensor's
 * base plus the rank's element offset at the tensor's dtype). */
static CUdeviceptr operand_ptr(const BackendRank *r, const Operand *op) {
    return r->tptr[op->tensor] + rank_int(op->off, r->rank) * (int64_t)plan_dtype_size(r->p->tensors[op->tensor].dtype);
}

/* Ranks > 0 leave the replicated blocks out of the gradient norm (rank 0 counts them once): their
 * element ranges in grads, one per block, or one per row of a block narrower than its param. More
 * than the scratch holds partial sums for: nrep = -1 and the host does it (many host waits). */
static int rep_ranges(BackendRank *r) {
    const Plan *p = r->p;
    int cap = 0, max = (int)(r->scratch_bytes / (SUMSQ_BLOCKS * sizeof(float))) - 1;
    r->nrep = 0;
    if (r->rank == 0) return 0;
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        for (int q = 0; q < pp->nparts; q++) {
            const PlanPart *pt = &p->parts[pp->first_part + q];
            if (!pt->rep) continue;
            int64_t h = rank_int(pt->r1, r->rank) - rank_int(pt->r0, r->rank);
            int64_t w = rank_int(pt->c1, r->rank) - rank_int(pt->c0, r->rank);
            int64_t lr = rank_int(pt->lr, r->rank), lc = rank_int(pt->lc, r->rank);
            int whole = w == pp->cols;   /* full rows: one contiguous range */
            for (int64_t a = 0; a < (whole ? 1 : h); a++) {
                if (r->nrep == max) { r->nrep = -1; return 0; }
                if (r->nrep == cap) {
                    cap = cap ? 2 * cap : 16;
                    int64_t *o = realloc(r->rep_off, cap * sizeof *o);
                    if (o) r->rep_off = o;
                    int64_t *n = realloc(r->rep_n, cap * sizeof *n);
                    if (n) r->rep_n = n;
                    if (!o || !n) return -1;
                }
                r->rep_off[r->nrep] = r->param_off[i] + (lr + a) * pp->cols + lc;
                r->rep_n[r->nrep++] = whole ? h * w : w;
            }
        }
    }
    return 0;
}

/* The activation buffers' pointers in arena slot k (pipeline stages; k = 0 otherwise). */
static void point_acts(BackendRank *r, int k) {
    for (int t = 0; t < r->p->ntensors; t++)
        if (r->p->tensors[t].kind == TK_ACT) r->tptr[t] = r->arena + (size_t)k * r->slot_bytes + r->p->tensors[t].offset;
}

/* Grouped GEMMs read device arrays of pointers. The plan is static, so each grouped step's arrays
 * ([B], [A], [C] per member, in the order of cuBLAS's swapped operands) are uploaded once here, one
 * table of 3 * nmembers pointers per arena slot (the activations move with the slot). */
static int upload_grouped_ptrs(BackendRank *r) {
    const Plan *p = r->p;
    int any = 0;
    for (int s = 0; s < p->nsteps; s++) any |= p->steps_[s].kind == ST_GROUPED_GEMM;
    if (!any || p->nmembers == 0) return 0;
    size_t n = 3 * (size_t)p->nmembers;
    r->gemm_ptrs_host = calloc(n * (size_t)r->nslots, sizeof *r->gemm_ptrs_host);
    if (!r->gemm_ptrs_host) return rfail(r, "out of memory");
    for (int k = 0; k < r->nslots; k++) {
        point_acts(r, k);
        for (int s = 0; s < p->nsteps; s++) {
            const PlanStep *st = &p->steps_[s];
            if (st->kind != ST_GROUPED_GEMM) continue;
            CUdeviceptr *h = r->gemm_ptrs_host + (size_t)k * n + 3 * (size_t)st->first_member;
            int m = st->nmembers;
            for (int i = 0; i < m; i++) {
                const GemmArgs *g = &p->members[st->first_member + i];
                h[i] = operand_ptr(r, &g->B);
                h[m + i] = operand_ptr(r, &g->A);
                h[2 * m + i] = operand_ptr(r, &g->C);
            }
        }
    }
    point_acts(r, r->slot);
    CU(r, api.cuMemAlloc_v2(&r->gemm_ptrs, n * (size_t)r->nslots * sizeof(CUdeviceptr)));
    CU(r, api.cuMemcpyHtoD_v2(r->gemm_ptrs, r->gemm_ptrs_host, n * (size_t)r->nslots * sizeof(CUdeviceptr)));
    return 0;
}

/* The elements [lo, hi) of an n-element param this rank updates: all, or its zero=1 shard. */
static void own_range(const BackendRank *r, int64_t n, int64_t *lo, int64_t *hi) {
    if (!r->zero) { *lo = 0; *hi = n; return; }
    zero_shard(n, r->dp_rank, r->p->dp, lo, hi);
}

/* Where element j (in own_range) of param i lives: *mi in master, *si in adam_m/adam_v (zero=1: the
 * shard's first element at the param's offset; an fp32 param's master is whole). */
static void state_index(const BackendRank *r, int i, int64_t j, int64_t lo, int64_t *mi, int64_t *si) {
    int whole = !r->zero || r->p->tensors[r->p->params[i].tensor].dtype != PDT_BF16;
    *mi = r->master_off[i] + (whole ? j : j - lo);
    *si = r->state_off[i] + (r->zero ? j - lo : j);
}

/* The multi-tensor AdamW's table: every parameter (zero=1: its shard on this dp rank) cut into
 * chunks of ADAMW_CHUNK elements (zero=1: with the chunk's master and m/v offsets). 0, or -1 (*cu set when the upload failed, else out of memory). */
static int adam_table(BackendRank *r, CUresult *cu) {
    const Plan *p = r->p;
    int64_t nc = 0, lo, hi;
    *cu = 0;
    for (int i = 0; i < p->nparams; i++) {
        own_range(r, p->params[i].rows * p->params[i].cols, &lo, &hi);
        nc += (hi - lo + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
    }
    const int w = r->zero ? 5 : 3;   /* fields per chunk */
    long long *tab = malloc((size_t)(nc ? nc : 1) * w * sizeof *tab);
    if (!tab) return -1;
    int64_t c = 0;
    for (int i = 0; i < p->nparams; i++) {
        own_range(r, p->params[i].rows * p->params[i].cols, &lo, &hi);
        const long long flags = (p->params[i].decay ? 1 : 0) | (p->tensors[p->params[i].tensor].dtype == PDT_BF16 ? 2 : 0);
        for (int64_t o = lo; o < hi; o += ADAMW_CHUNK, c++) {
            long long *t = tab + w * c, count = hi - o < ADAMW_CHUNK ? hi - o : ADAMW_CHUNK;
            t[0] = r->param_off[i] + o;
            if (w == 3) { t[1] = count; t[2] = flags; continue; }
            int64_t mi, si;
            state_index(r, i, o, lo, &mi, &si);
            t[1] = mi; t[2] = si; t[3] = count; t[4] = flags;
        }
    }
    if (r->adam_chunks) { api.cuMemFree_v2(r->adam_chunks); r->adam_chunks = 0; }
    r->adam_nchunks = nc;
    if (nc && ((*cu = api.cuMemAlloc_v2(&r->adam_chunks, (size_t)nc * w * sizeof *tab)) ||
               (*cu = api.cuMemcpyHtoD_v2(r->adam_chunks, tab, (size_t)nc * w * sizeof *tab)))) {
        free(tab);
        return -1;
    }
    free(tab);
    return 0;
}

/* zero=1: the gradient norm's ranges on this rank: each param's shard, less (tp ranks > 0) the
 * replicated blocks in it, which tp rank 0 counts. 0, or -1 out of memory. */
static int sq_ranges(BackendRank *r) {
    const Plan *p = r->p;
    int cap = 0;
    r->nsq = 0;
#define SQ_ADD(o, n, sg) do { \
        if (r->nsq > 0 && r->sq_sign[r->nsq - 1] == (sg) && r->sq_off[r->nsq - 1] + r->sq_n[r->nsq - 1] == (o)) { \
            r->sq_n[r->nsq - 1] += (n); break; }   /* contiguous with the last one: merged */ \
        if (r->nsq == cap) { \
            cap = cap ? 2 * cap : 64; \
            int64_t *o_ = realloc(r->sq_off, cap * sizeof *o_); if (o_) r->sq_off = o_; \
            int64_t *n_ = realloc(r->sq_n, cap * sizeof *n_); if (n_) r->sq_n = n_; \
            int *s_ = realloc(r->sq_sign, cap * sizeof *s_); if (s_) r->sq_sign = s_; \
            if (!o_ || !n_ || !s_) return -1; \
        } \
        r->sq_off[r->nsq] = (o); r->sq_n[r->nsq] = (n); r->sq_sign[r->nsq++] = (sg); } while (0)
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        int64_t lo, hi;
        own_range(r, pp->rows * pp->cols, &lo, &hi);
        if (hi <= lo) continue;
        SQ_ADD(r->param_off[i] + lo, hi - lo, 1);
        for (int q = 0; q < pp->nparts && r->rank > 0; q++) {
            const PlanPart *pt = &p->parts[pp->first_part + q];
            if (!pt->rep) continue;
            int64_t h = rank_int(pt->r1, r->rank) - rank_int(pt->r0, r->rank);
            int64_t w = rank_int(pt->c1, r->rank) - rank_int(pt->c0, r->rank);
            int64_t lr = rank_int(pt->lr, r->rank), lc = rank_int(pt->lc, r->rank);
            for (int64_t a = 0; a < h; a++) {
                int64_t b0 = (lr + a) * pp->cols + lc, b1 = b0 + w;
                if (b0 < lo) b0 = lo;
                if (b1 > hi) b1 = hi;
                if (b1 > b0) SQ_ADD(r->param_off[i] + b0, b1 - b0, -1);
            }
        }
    }
#undef SQ_ADD
    return 0;
}

static CUresult alloc_zero(CUdeviceptr *p, size_t bytes) {
    if (bytes == 0) bytes = 256;
    CUresult rc = api.cuMemAlloc_v2(p, bytes);
    if (rc == 0) rc = api.cuMemsetD8_v2(*p, 0, bytes);
    return rc;
}

static BackendRank *cuda_rank_open(const Plan *p, int rank, int tp, char *err, size_t errlen) {
    pthread_once(&api_once, api_load);
    if (!api_ok) { snprintf(err, errlen, "no CUDA device found (%s): use --backend cpu", api_why); return NULL; }
    if (tp > CUDA_MAX_TP) { snprintf(err, errlen, "tp=%d: the CUDA backend runs at most %d local ranks", tp, CUDA_MAX_TP); return NULL; }
    char nerr[512];
    if (!nvrtc_available(nerr, sizeof nerr)) {
        snprintf(err, errlen, "the CUDA backend needs NVRTC to compile kernels.cu: %s", nerr);
        return NULL;
    }
    if (shared_open(p, err, errlen) != 0) return NULL;
    if (cuda_plan_check(p, NULL, 0, err, errlen) != 0) { shared_close(); return NULL; }
    BackendRank *r = calloc(1, sizeof *r);
    if (!r) { shared_close(); snprintf(err, errlen, "out of memory"); return NULL; }
    r->opened = 1;
    r->p = p; r->rank = rank; r->tp = tp;
    r->sync_steps = runtime_env()->cuda_sync;
    r->tptr = calloc(p->ntensors, sizeof *r->tptr);
    r->param_off = calloc(p->nparams + 1, sizeof *r->param_off);
    r->master_off = calloc(p->nparams + 1, sizeof *r->master_off);
    r->state_off = calloc(p->nparams + 1, sizeof *r->state_off);
    CUresult rc = 0;
    const char *what = "";
    if (!r->tptr || !r->param_off || !r->master_off || !r->state_off) { snprintf(err, errlen, "out of memory"); goto fail_nostream; }
    if ((rc = api.cuStreamCreate(&r->stream, 0)) != 0) { what = "creating a stream"; goto fail_cu; }
    if ((rc = api.cuStreamCreate(&r->comm, 0)) != 0) { what = "creating the collectives' stream"; goto fail_cu; }
    r->ev_ready = calloc(p->nsteps + 1, sizeof *r->ev_ready);
    r->ev_done = calloc(p->nsteps + 1, sizeof *r->ev_done);
    if (!r->ev_ready || !r->ev_done) { snprintf(err, errlen, "out of memory"); goto fail; }
    r->nccl_timeout = runtime_nccl_timeout(600);
    if (runtime_env()->cuda_graph) {
        r->graphs = tp == 1 && p->dp == 1 && p->arena_slots <= 1 && !r->sync_steps && api.cuGraphLaunch != NULL;
        if (!r->graphs && rank == 0)
            fprintf(stderr, "boost: BOOST_CUDA_GRAPH=1 is for tp=1 and dp=1 without pipeline stages or BOOST_CUDA_SYNC, with "
                    "a driver that has CUDA graphs; running without graphs\n");
    }
    if (api.cublasCreate_v2(&r->blas) != 0) {
        snprintf(err, errlen, "cuBLAS could not be initialised on rank %d", rank);
        goto fail;
    }
    if (api.cublasSetStream_v2(r->blas, r->stream) != 0) {
        snprintf(err, errlen, "cublasSetStream failed on rank %d", rank);
        goto fail;
    }
    if (r->graphs && api.cublasSetWorkspace_v2) {   /* a graph capture must not allocate: cuBLAS's workspace first */
        size_t ws = (size_t)(atoi(shared.arch + 3) >= 90 ? 32 : 4) << 20;   /* Hopper on: 32 MiB */
        if (api.cuMemAlloc_v2(&r->blas_ws, ws) != 0 || api.cublasSetWorkspace_v2(r->blas, (void *)(uintptr_t)r->blas_ws, ws) != 0) {
            snprintf(err, errlen, "rank %d: cuBLAS's %zu MiB workspace for BOOST_CUDA_GRAPH=1 could not be set: run without "
                     "BOOST_CUDA_GRAPH", rank, ws >> 20);
            goto fail;
        }
    }
    /* params: element offsets, 256-byte aligned; zero=1: the master and AdamW state of a shard */
    r->zero = p->zero && p->dp > 1;
    for (int i = 0; i < p->nparams; i++) {
        int64_t n = p->params[i].rows * p->params[i].cols, s = r->zero ? (n + p->dp - 1) / p->dp : n;
        r->param_off[i] = r->nelems;
        r->nelems = align_up(r->nelems + n, ALIGN_ELEMS);
        r->master_off[i] = r->nmaster;
        r->nmaster = align_up(r->nmaster + (p->tensors[p->params[i].tensor].dtype == PDT_BF16 ? s : n), ALIGN_ELEMS);
        r->state_off[i] = r->nstate;
        r->nstate = align_up(r->nstate + s, ALIGN_ELEMS);
        if (p->tensors[p->params[i].grad].dtype != PDT_FP32) {
            snprintf(err, errlen, "%s: gradient d.%s is not fp32; the CUDA backend keeps gradients in fp32 "
                     "(docs/plan-format.md): regenerate the plan", p->path, p->params[i].name);
            goto fail;
        }
    }
    r->io_bytes = 0;
    for (int t = 0; t < p->ntensors; t++)
        if (p->tensors[t].kind == TK_INPUT || p->tensors[t].kind == TK_OUTPUT)
            r->io_bytes = align_up(r->io_bytes + numel(&p->tensors[t]) * plan_dtype_size(p->tensors[t].dtype), 256);
    r->scratch_bytes = 1 << 20;
    r->nslots = p->arena_slots > 1 ? p->arena_slots : 1;
    r->slot_bytes = (size_t)align_up(p->arena_bytes, 256);
    if ((rc = alloc_zero(&r->arena, r->slot_bytes * (size_t)r->nslots)) || (rc = alloc_zero(&r->io, r->io_bytes)) ||
        (rc = alloc_zero(&r->params, r->nelems * 2)) || (rc = alloc_zero(&r->grads, r->nelems * 4)) ||
        (rc = alloc_zero(&r->master, r->nmaster * 4)) || (rc = alloc_zero(&r->adam_m, r->nstate * 4)) ||
        (rc = alloc_zero(&r->adam_v, r->nstate * 4)) || (rc = alloc_zero(&r->scratch, r->scratch_bytes))) {
        what = "allocating device memory (arena, params, grads, AdamW state)";
        goto fail_cu;
    }
    r->dp = 1;
    if (adam_table(r, &rc)) {
        if (rc) { what = "uploading the AdamW chunk table"; goto fail_cu; }
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    size_t io_off = 0;
    for (int t = 0; t < p->ntensors; t++) {
        const PlanTensor *T = &p->tensors[t];
        switch (T->kind) {
        case TK_ACT: r->tptr[t] = r->arena + T->offset; break;   /* slot 0 (point_acts) */
        case TK_INPUT: case TK_OUTPUT:
            r->tptr[t] = r->io + io_off;
            io_off = align_up(io_off + numel(T) * plan_dtype_size(T->dtype), 256);
            break;
        case TK_PARAM:   /* bf16 params: the bf16 copy; fp32 params: the master weights themselves */
            r->tptr[t] = T->dtype == PDT_BF16 ? r->params + r->param_off[T->param] * 2 : r->master + r->master_off[T->param] * 4;
            break;
        case TK_GRAD: r->tptr[t] = r->grads + r->param_off[T->param] * 4; break;
        }
    }
    if (upload_grouped_ptrs(r)) { snprintf(err, errlen, "rank %d: %s", rank, r->err); goto fail; }
    if (rep_ranges(r)) { snprintf(err, errlen, "out of memory"); goto fail; }
    return r;
fail_cu:
    snprintf(err, errlen, "rank %d: %s failed: %s", rank, what, cu_str(rc));
fail:
fail_nostream:
    cuda_rank_close(r);
    return NULL;
}

/* ---------------- multi-process mode: NCCL ---------------- */
static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Where the ranks of one launch exchange the NCCL id: $BOOST_NCCL_ID_FILE, else a file in /tmp keyed
 * by the plan's folder name and the job id (boost train sets BOOST_NCCL_ID_FILE under -o). */
static void nccl_id_path(const Plan *p, char *out, size_t n) {
    const char *env = getenv("BOOST_NCCL_ID_FILE");
    if (env && *env) { snprintf(out, n, "%s", env); return; }
    char dir[1024], job[128];
    snprintf(dir, sizeof dir, "%s", p->path);
    char *sl = strrchr(dir, '/');
    if (sl) *sl = 0; else snprintf(dir, sizeof dir, ".");
    sl = strrchr(dir, '/');
    const char *name = sl ? sl + 1 : dir;
    world_job_id(job, sizeof job);
    snprintf(out, n, "/tmp/boost-nccl-%.200s-%.100s.id", name, job);
}

/* Rank 0 writes the id atomically (temp file + rename); the others poll for a fresh file. */
static int nccl_exchange_id(const Plan *p, int rank, ncclUniqueId *id, char *path, size_t pathlen, char *err, size_t errlen) {
    nccl_id_path(p, path, pathlen);
    if (rank == 0) {
        ncclResult_t rc = nccl.ncclGetUniqueId(id);
        if (rc != 0) { snprintf(err, errlen, "ncclGetUniqueId failed: %s", nccl.ncclGetErrorString(rc)); return -1; }
        char tmp[1200];
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
        FILE *f = fopen(tmp, "wb");
        int ok = f && fwrite(id, sizeof *id, 1, f) == 1;
        if (f && fclose(f) != 0) ok = 0;
        if (!ok || rename(tmp, path) != 0) {
            snprintf(err, errlen, "%s: cannot write the NCCL id for the other ranks (%s): set BOOST_NCCL_ID_FILE to a "
                     "writable file all ranks see", path, strerror(errno));
            unlink(tmp);
            return -1;
        }
        return 0;
    }
    double timeout = runtime_nccl_timeout(300);
    double start = wall_s();
    for (;;) {
        struct stat st;
        /* a file older than this wait (minus a minute of launch skew) is left over from an earlier run */
        if (stat(path, &st) == 0 && st.st_size == (off_t)sizeof *id && (double)st.st_mtime >= start - 60) {
            FILE *f = fopen(path, "rb");
            int ok = f && fread(id, sizeof *id, 1, f) == 1;
            if (f) fclose(f);
            if (ok) return 0;
        }
        if (wall_s() - start > timeout) {
            snprintf(err, errlen, "%s: rank %d waited %.0f s for rank 0's NCCL id and none appeared: start rank 0 "
                     "with the same run and job id, or point every rank at one file all of them see with "
                     "BOOST_NCCL_ID_FILE (BOOST_NCCL_TIMEOUT sets the wait)", path, rank, timeout);
            return -1;
        }
        usleep(20000);
    }
}

/* Pipeline stages with one process per GPU (runtime/cuda_pipe.h, below): while the pipeline opens
 * its stages' Engines, pipe_scope is set and their communicators split from its stage communicator. */
struct CudaPipe {
    const Plan *plan;             /* stage 0's: where the world's NCCL id is exchanged */
    int wrank, wsize, me, r0, nlocal;   /* world rank and size; pipeline rank; stage rank of nlocal = dp*tp */
    ncclComm_t world, stage;      /* every process; the processes of pipeline rank me (made at the first Engine) */
    /* channel c = 2b (forward, stage b to b+1) or 2b+1 (backward): this (dp, tp) rank's pair of
     * processes on boundary b (NULL when not on it), and the stream of its transfers here */
    ncclComm_t chan[CUDA_PIPE_MAX_CHANS];
    CUstream chan_stream[CUDA_PIPE_MAX_CHANS];
    int nchans;
    CUstream stream;              /* sums and broadcasts over the world */
    CUdeviceptr buf;              /* their staging */
    size_t buf_bytes;
    struct { BackendRank *r; int slot; CUevent done; } *out;   /* transfers a compute step of (r, slot) must wait for */
    int nout, cap_out;
    CUevent *evs;                 /* this pass's events, recycled at cuda_pipe_flush */
    int nevs, cap_evs;
    int dead, held;               /* dead: aborted after a failure; held: a reference on the shared module */
    double timeout;
    char err[1024];
};
static CudaPipe *pipe_scope, *live_pipe;   /* live_pipe: its world's errors end the ranks' host waits too */
static int pipe_world(CudaPipe *cp, char *err, size_t errlen);

/* The world's communicator, and at dp > 1 its split into the rank grid's groups (runtime/grid.h: tp
 * fastest, then dp): one ncclCommSplit per group kind, colour = the group's first member, key = the
 * rank's index in it, so NCCL's rank in each group is the grid's. nccl_comm is then the tp group's. */
static int world_group_init(BackendRank *r, int rank, int size, char *err, size_t errlen) {
    pthread_once(&nccl_once, nccl_load);
    if (!nccl_ok) { snprintf(err, errlen, "rank %d of %d: %s", rank, size, nccl_why); return -1; }
    const Plan *p = r ? r->p : NULL;
    if (!r || r->tp != p->tp || size != p->dp * p->tp || r->rank != rank % p->tp) {
        snprintf(err, errlen, "multi-process mode: rank %d of %d is not open in this process", rank, size);
        return -1;
    }
    r->wrank = rank; r->wsize = size; r->dp = p->dp;
    if (p->dp > 1 && !nccl.ncclCommSplit) {
        snprintf(err, errlen, "rank %d of %d: dp=%d needs ncclCommSplit (NCCL 2.18 or newer) to make the tp and dp groups; "
                 "this libnccl lacks it: install a newer NCCL (or point BOOST_LIBNCCL at one)", rank, size, p->dp);
        return -1;
    }
    ncclResult_t rc;
    if (pipe_scope) {   /* a pipeline stage: its world is a copy of the stage's communicator */
        if (pipe_world(pipe_scope, err, errlen)) return -1;
        rc = nccl.ncclCommSplit(pipe_scope->stage, 0, rank, &r->world_comm, NULL);
        if (rc != 0 || !r->world_comm) {
            r->world_comm = NULL;
            snprintf(err, errlen, "rank %d of the stage's %d: ncclCommSplit of the stage communicator failed: %s", rank, size,
                     rc ? nccl.ncclGetErrorString(rc) : "no communicator returned");
            return -1;
        }
    } else {
        ncclUniqueId id;
        char path[1100];
        if (nccl_exchange_id(r->p, rank, &id, path, sizeof path, err, errlen)) return -1;
        if (ctx_set_err(err, errlen, "creating the NCCL communicator")) return -1;
        rc = nccl.ncclCommInitRank(&r->world_comm, size, id, rank);
        if (rank == 0) unlink(path);   /* every rank has joined: the id is used up */
        if (rc != 0) {
            r->world_comm = NULL;
            snprintf(err, errlen, "rank %d of %d: ncclCommInitRank failed: %s", rank, size, nccl.ncclGetErrorString(rc));
            return -1;
        }
    }
    r->nccl_comm = r->world_comm;
    r->world = 1;
    if (p->dp > 1) {
        Grid g;
        if (grid_make(&g, p->dp, 1, p->tp, err, errlen)) return -1;
        GridCoord gc = grid_coord(&g, rank);
        r->dp_rank = gc.dp_rank;
        ncclComm_t tpc = NULL, dpc = NULL;
        rc = nccl.ncclCommSplit(r->world_comm, gc.first[GROUP_TP], gc.index[GROUP_TP], &tpc, NULL);
        if (rc == 0) r->nccl_comm = tpc;
        if (rc == 0) rc = nccl.ncclCommSplit(r->world_comm, gc.first[GROUP_DP], gc.index[GROUP_DP], &dpc, NULL);
        if (rc == 0) r->dp_comm = dpc;
        if (rc != 0 || !tpc || !dpc) {
            snprintf(err, errlen, "rank %d of %d: ncclCommSplit into the tp group {%d..%d} and dp group (from %d, stride %d) "
                     "failed: %s", rank, size, gc.first[GROUP_TP], gc.first[GROUP_TP] + p->tp - 1, gc.first[GROUP_DP],
                     gc.stride[GROUP_DP], rc ? nccl.ncclGetErrorString(rc) : "no communicator returned");
            return -1;
        }
        if (p->ep > 1) {   /* expert parallelism: the ep group (all-to-all) and the edp group (expert gradients) */
            if (!nccl.ncclSend || !nccl.ncclRecv || !nccl.ncclGroupStart || !nccl.ncclGroupEnd) {
                snprintf(err, errlen, "rank %d of %d: ep=%d needs ncclSend/ncclRecv and ncclGroupStart/End (NCCL 2.7 or newer) "
                         "for the all-to-all; this libnccl lacks them: install a newer NCCL (or point BOOST_LIBNCCL at one)",
                         rank, size, p->ep);
                return -1;
            }
            if (grid_set_ep(&g, p->ep, err, errlen)) return -1;
            gc = grid_coord(&g, rank);
            r->ep = p->ep; r->ep_rank = gc.ep_rank;
            ncclComm_t epc = NULL, edpc = NULL;
            rc = nccl.ncclCommSplit(r->world_comm, gc.first[GROUP_EP], gc.index[GROUP_EP], &epc, NULL);
            if (rc == 0) r->ep_comm = epc;
            if (rc == 0) rc = nccl.ncclCommSplit(r->world_comm, gc.first[GROUP_EDP], gc.index[GROUP_EDP], &edpc, NULL);
            if (rc == 0) r->edp_comm = edpc;
            if (rc != 0 || !epc || !edpc) {
                snprintf(err, errlen, "rank %d of %d: ncclCommSplit into the ep group (from %d, stride %d) and edp group (from %d, "
                         "stride %d) failed: %s", rank, size, gc.first[GROUP_EP], gc.stride[GROUP_EP], gc.first[GROUP_EDP],
                         gc.stride[GROUP_EDP], rc ? nccl.ncclGetErrorString(rc) : "no communicator returned");
                return -1;
            }
        }
        CUresult cu = 0;   /* r->zero (the state's layout) was set at open: the tables for this dp rank's shards */
        if (r->zero && (adam_table(r, &cu) || sq_ranges(r))) {
            snprintf(err, errlen, "rank %d of %d: the zero=1 shard tables: %s", rank, size, cu ? cu_str(cu) : "out of memory");
            return -1;
        }
    }
    /* the all-gathers' staging, once for the largest (freeing device memory later would wait for the
     * device); at dp > 1 the dp steps' staging: a bf16 copy of an all-reduce, a reduce-scatter's
     * padded input and output (dp*s + s elements, s = ceil(n/dp)), an all-gather's padded output */
    size_t need = 256, dp_need = 0, ep_need = 0;
    for (int s = 0; s < p->nsteps; s++) {
        const PlanStep *st = &p->steps_[s];
        if (st->kind == ST_ALLTOALL && (size_t)(st->coll.rows * st->coll.cols) * plan_dtype_size(st->coll.dtype) > ep_need)
            ep_need = (size_t)(st->coll.rows * st->coll.cols) * plan_dtype_size(st->coll.dtype);
        size_t b = st->kind == ST_ALLGATHER ? (size_t)(st->coll.rows * st->coll.cols) * plan_dtype_size(st->coll.dtype) * (p->tp + 1) : 0;
        if (b > need) need = b;
        size_t sh = (size_t)((st->coll.elems + p->dp - 1) / p->dp), d = 0;
        if (st->kind == ST_ALLREDUCE && st->coll.group == GROUP_DP && st->coll.dtype == PDT_BF16) d = (size_t)st->coll.elems * 2;
        if (st->kind == ST_REDUCE_SCATTER) d = (sh * p->dp + sh) * 4;
        if (st->kind == ST_GATHER_SHARDS) d = sh * p->dp * 4;
        if (d > dp_need) dp_need = d;
    }
    if (api.cuMemAlloc_v2(&r->coll_buf, need) != 0) {
        snprintf(err, errlen, "rank %d of %d: allocating %zu bytes for the all-gathers failed", rank, size, need);
        return -1;
    }
    r->coll_bytes = need;
    if (dp_need && api.cuMemAlloc_v2(&r->dp_buf, dp_need) != 0) {
        snprintf(err, errlen, "rank %d of %d: allocating %zu bytes for the dp collectives' staging failed", rank, size, dp_need);
        return -1;
    }
    r->dp_bytes = dp_need;
    if (ep_need && r->ep > 1 && api.cuMemAlloc_v2(&r->ep_buf, ep_need) != 0) {
        snprintf(err, errlen, "rank %d of %d: allocating %zu bytes for the all-to-all's staging failed", rank, size, ep_need);
        return -1;
    }
    r->ep_bytes = r->ep > 1 ? ep_need : 0;
    return 0;
}

/* Every distinct communicator of this rank (world, tp, dp, ep, edp; at pp > 1 the pipeline's world), n of them. */
static int rank_comms(BackendRank *r, ncclComm_t out[6]) {
    int n = 0;
    if (live_pipe && live_pipe->world && !live_pipe->dead) out[n++] = live_pipe->world;   /* a pipeline stage: the other stages */
    if (r->world_comm) out[n++] = r->world_comm;
    if (r->nccl_comm && r->nccl_comm != r->world_comm) out[n++] = r->nccl_comm;
    if (r->dp_comm) out[n++] = r->dp_comm;
    if (r->ep_comm) out[n++] = r->ep_comm;
    if (r->edp_comm) out[n++] = r->edp_comm;
    return n;
}

/* Multi-process mode: NCCL failed or a wait ran past the timeout. Abort the communicator (its
 * queued work ends instead of waiting for a peer that is gone), refuse further collectives, and
 * say which rank stopped and what to do. */
static int world_abort(BackendRank *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int world_abort(BackendRank *r, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    ncclComm_t cs[6];
    int nc = rank_comms(r, cs);
    for (int i = 0; i < nc && !r->dead; i++) nccl.ncclCommAbort(cs[i]);
    if (live_pipe && nc && cs[0] == live_pipe->world) live_pipe->dead = 1;   /* aborted with the rest */
    r->nccl_comm = r->world_comm = r->dp_comm = r->ep_comm = r->edp_comm = NULL;
    r->dead = 1;
    return rfail(r, "rank %d of %d: %s; NCCL was aborted and this rank stops. Another rank has probably died or "
                 "failed: look at its output (its own error comes first), then restart all %d ranks "
                 "(--resume from the last checkpoint)", r->wrank, r->wsize, what, r->wsize);
}

/* The host polls stream s until it is done, watching NCCL's asynchronous error on cs[0..nc) and a
 * timeout (seconds), so a peer that died ends the wait instead of hanging in a collective forever.
 * 0 when done; else -1 with *cu_err (a CUDA error) or, *cu_err 0, why (NCCL's error or the timeout). */
static int poll_stream(CUstream s, const ncclComm_t *cs, int nc, double timeout, const char *what, CUresult *cu_err,
                       char *why, size_t n) {
    double t0 = wall_s();
    unsigned nap = 1;
    *cu_err = 0;
    for (;;) {
        CUresult q = api.cuStreamQuery(s);
        if (q == 0) return 0;
        if (q != CUDA_ERROR_NOT_READY_) { *cu_err = q; return -1; }
        ncclResult_t async_err = NCCL_SUCCESS_;
        for (int i = 0; i < nc && (async_err == NCCL_SUCCESS_ || async_err == NCCL_IN_PROGRESS_); i++) {
            ncclResult_t qr = nccl.ncclCommGetAsyncError(cs[i], &async_err);
            if (qr != NCCL_SUCCESS_) async_err = qr;
        }
        if (async_err != NCCL_SUCCESS_ && async_err != NCCL_IN_PROGRESS_) {
            /* a peer that finished the same collective and exited in the meantime is no failure:
             * the work may have completed between the query above and the error check */
            if (api.cuStreamQuery(s) == 0) return 0;
            snprintf(why, n, "NCCL reports '%s' while waiting for %s", nccl.ncclGetErrorString(async_err), what);
            return -1;
        }
        if (wall_s() - t0 > timeout) {
            snprintf(why, n, "%s did not finish within %.0f s (BOOST_NCCL_TIMEOUT; raise it if steps are legitimately that "
                     "slow)", what, timeout);
            return -1;
        }
        usleep(nap);
        if (nap < 200) nap *= 2;   /* at most 0.2 ms late */
    }
}

/* The host waits for stream s. Local mode: a plain synchronize. Multi-process mode: poll the stream
 * and NCCL's asynchronous error, so a peer that died ends the wait (ncclCommAbort, an error naming
 * this rank) instead of hanging in the next collective forever; BOOST_NCCL_TIMEOUT (default 600 s)
 * bounds the wait when nothing reports an error. */
static int host_wait(BackendRank *r, CUstream s, const char *what) {
    if (!r->world) {
        CU(r, api.cuStreamSynchronize(s));
        return 0;
    }
    if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->rank);
    ncclComm_t cs[6];
    int nc = rank_comms(r, cs);
    CUresult q = 0;
    char why[512];
    if (!poll_stream(s, cs, nc, r->nccl_timeout, what, &q, why, sizeof why)) return 0;
    if (q) CU(r, q);
    return world_abort(r, "%s", why);
}

/* Everything this rank queued is done (both streams). */
static int rank_idle(BackendRank *r, const char *what) {
    if (host_wait(r, r->stream, what)) return -1;
    if (r->comm_used) {
        if (host_wait(r, r->comm, what)) return -1;
        r->comm_used = 0;
    }
    return 0;
}

#define NCCL(r, call) do { ncclResult_t nrc_ = (call); if (nrc_ != 0) \
    return world_abort((r), "%s failed: %s (NCCL error %d)", #call, nccl.ncclGetErrorString(nrc_), (int)nrc_); } while (0)

static int nccl_dtype(int dt) { return dt == PDT_FP32 ? NCCL_FLOAT32_ : NCCL_BFLOAT16_; }

/* Copies of [rows, cols] blocks with row pitches, on stream s. */
static int copy_2d(BackendRank *r, CUstream s, CUdeviceptr dst, size_t dpitch, CUdeviceptr src, size_t spitch,
                   size_t width, size_t rows) {
    /* one row, or rows back to back: a plain copy (cuMemcpy2D caps its pitches at the device's
     * MAX_PITCH, which one row of a large parameter exceeds); rows with a pitch above the cap: one
     * plain copy a row */
    if (rows == 1 || (dpitch == width && spitch == width)) {
        CU(r, api.cuMemcpyDtoDAsync_v2(dst, src, width * rows, s));
        return 0;
    }
    if (dpitch > (size_t)shared.max_pitch || spitch > (size_t)shared.max_pitch) {
        for (size_t i = 0; i < rows; i++) CU(r, api.cuMemcpyDtoDAsync_v2(dst + i * dpitch, src + i * spitch, width, s));
        return 0;
    }
    CUDA_MEMCPY2D_ m;
    memset(&m, 0, sizeof m);
    m.srcMemoryType = CU_MEMORYTYPE_DEVICE_;
    m.srcDevice = src;
    m.srcPitch = spitch;
    m.dstMemoryType = CU_MEMORYTYPE_DEVICE_;
    m.dstDevice = dst;
    m.dstPitch = dpitch;
    m.WidthInBytes = width;
    m.Height = rows;
    CU(r, api.cuMemcpy2DAsync_v2(&m, s));
    return 0;
}

/* src [rows, cols] with row pitch ld_src -> dst [rows, tp*cols] with pitch ld_dst, rank q's block at
 * column q*cols: packed into coll_buf's last slot, gathered into slots 0..tp-1, then placed; all on
 * stream s, which must be the only one using coll_buf. */
static int world_allgather_on(BackendRank *r, CUstream s, const CollArgs *c, void *src, void *dst) {
    size_t es = plan_dtype_size(c->dtype), block = (size_t)(c->rows * c->cols) * es;
    if (block * (r->tp + 1) > r->coll_bytes) return rfail(r, "all-gather of %zu bytes exceeds the staging", block);
    CUdeviceptr packed = r->coll_buf + block * r->tp;
    if (copy_2d(r, s, packed, c->cols * es, (CUdeviceptr)(uintptr_t)src, c->ld_src * es, c->cols * es, c->rows)) return -1;
    NCCL(r, nccl.ncclAllGather((void *)(uintptr_t)packed, (void *)(uintptr_t)r->coll_buf, (size_t)(c->rows * c->cols),
                               nccl_dtype(c->dtype), r->nccl_comm, s));
    for (int q = 0; q < r->tp; q++)
        if (copy_2d(r, s, (CUdeviceptr)(uintptr_t)dst + q * c->cols * es, c->ld_dst * es, r->coll_buf + block * q,
                    c->cols * es, c->cols * es, c->rows)) return -1;
    return 0;
}

static int cuda_world_allreduce_host(BackendRank *r, void *host, int64_t n, int is_f64) {
    if (!r->world) return rfail(r, "sums across processes need the multi-process mode");
    if (ctx_set(r, "a host all-reduce")) return -1;
    size_t bytes = (size_t)n * (is_f64 ? 8 : 4);
    if (n <= 0) return 0;
    if (rank_idle(r, "the work before a sum across the processes")) return -1;
    if (bytes > r->coll_bytes) {   /* not in a training step: canonical tensors for checkpoints */
        if (r->coll_buf) CU(r, api.cuMemFree_v2(r->coll_buf));
        r->coll_buf = 0; r->coll_bytes = 0;
        CU(r, api.cuMemAlloc_v2(&r->coll_buf, bytes));
        r->coll_bytes = bytes;
    }
    CU(r, api.cuMemcpyHtoDAsync_v2(r->coll_buf, host, bytes, r->stream));
    NCCL(r, nccl.ncclAllReduce((void *)(uintptr_t)r->coll_buf, (void *)(uintptr_t)r->coll_buf, (size_t)n,
                               is_f64 ? NCCL_FLOAT64_ : NCCL_FLOAT32_, NCCL_SUM_, r->world_comm, r->stream));
    if (host_wait(r, r->stream, "a sum across the processes")) return -1;
    CU(r, api.cuMemcpyDtoHAsync_v2(host, r->coll_buf, bytes, r->stream));
    return 0;
}

static int cuda_group_init(BackendRank **ranks, int tp, char *err, size_t errlen) {
    int wrank = 0, wsize = 1;
    char werr[256];
    /* multi-process mode: ranks[] is indexed by world rank, only this process's rank set */
    if (pipe_scope) {   /* a pipeline stage's Engine: this process holds stage rank r0 of the stage's dp x tp */
        if (!ranks[pipe_scope->r0] || pipe_scope->nlocal != ranks[pipe_scope->r0]->p->dp * tp) {
            snprintf(err, errlen, "pipeline stage: rank %d of %d is not the one this process holds", pipe_scope->r0, pipe_scope->nlocal);
            return -1;
        }
        return world_group_init(ranks[pipe_scope->r0], pipe_scope->r0, pipe_scope->nlocal, err, errlen);
    }
    if (world_from_env(&wrank, &wsize, werr, sizeof werr) == 1 && wrank >= 0 && wrank < wsize && ranks[wrank] &&
        wsize == ranks[wrank]->p->dp * tp)
        return world_group_init(ranks[wrank], wrank, wsize, err, errlen);
    CudaGroup *g = calloc(1, sizeof *g);
    if (!g) { snprintf(err, errlen, "out of memory"); return -1; }
    g->tp = tp;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (ctx_set_err(err, errlen, "setting up the rank group")) { free(g); return -1; }
    /* every rank's buffer of every all-reduce step in every arena slot, for the summing kernel: the
     * plan is static */
    const Plan *p = ranks[0]->p;
    int nslots = ranks[0]->nslots;
    size_t nptr = (size_t)p->nsteps * tp * nslots;
    CUdeviceptr *h = calloc(nptr ? nptr : 1, sizeof *h);
    if (!h || api.cuMemAlloc_v2(&g->dptrs, CUDA_MAX_TP * sizeof(CUdeviceptr)) != 0 ||
        api.cuMemAlloc_v2(&g->step_ptrs, (nptr ? nptr : 1) * sizeof(CUdeviceptr)) != 0) {
        snprintf(err, errlen, "allocating the all-reduce pointer tables failed");
        free(h); free(g);
        return -1;
    }
    for (int k = 0; k < nslots; k++) {
        for (int q = 0; q < tp; q++) point_acts(ranks[q], k);
        for (int s = 0; s < p->nsteps; s++)
            if (p->steps_[s].kind == ST_ALLREDUCE)
                for (int q = 0; q < tp; q++)
                    h[((size_t)k * p->nsteps + s) * tp + q] = operand_ptr(ranks[q], &p->steps_[s].coll.buf);
    }
    for (int q = 0; q < tp; q++) point_acts(ranks[q], ranks[q]->slot);
    CUresult rc = api.cuMemcpyHtoD_v2(g->step_ptrs, h, (nptr ? nptr : 1) * sizeof *h);
    free(h);
    if (rc != 0) { snprintf(err, errlen, "uploading the all-reduce pointer tables failed: %s", cu_str(rc)); free(g); return -1; }
    for (int i = 0; i < tp; i++) { g->ranks[i] = ranks[i]; ranks[i]->group = g; }
    /* the group is freed with the process: ranks close in their own threads in any order */
    return 0;
}

/* ---------------- pipeline stages, one process per GPU (runtime/cuda_pipe.h) ---------------- */
static int pipe_fail(CudaPipe *cp, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int pipe_fail(CudaPipe *cp, char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cp->err, sizeof cp->err, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "pipeline rank %d (world rank %d of %d): %s", cp->me, cp->wrank, cp->wsize, cp->err);
    return -1;
}

/* NCCL failed or a wait ran past the timeout: abort every communicator of the pipeline (queued
 * transfers end instead of waiting for a process that is gone) and say what to do. */
static int pipe_abort(CudaPipe *cp, char *err, size_t errlen, const char *what) {
    if (!cp->dead) {
        for (int c = 0; c < cp->nchans; c++) if (cp->chan[c]) nccl.ncclCommAbort(cp->chan[c]);
        if (cp->stage) nccl.ncclCommAbort(cp->stage);
        if (cp->world) nccl.ncclCommAbort(cp->world);
    }
    cp->dead = 1;
    return pipe_fail(cp, err, errlen, "%s; NCCL was aborted and this process stops. Another process has probably died or "
                     "failed: look at its output (its own error comes first), then restart all %d processes (--resume from "
                     "the last checkpoint)", what, cp->wsize);
}

#define PIPE_CU(call, what) do { CUresult rc_ = (call); if (rc_ != 0) \
    return pipe_fail(cp, err, errlen, "%s: %s (CUDA error %d)", what, cu_str(rc_), (int)rc_); } while (0)
#define PIPE_NCCL(call) do { ncclResult_t nrc_ = (call); if (nrc_ != 0) { char w_[300]; \
    snprintf(w_, sizeof w_, "%s failed: %s (NCCL error %d)", #call, nccl.ncclGetErrorString(nrc_), (int)nrc_); \
    return pipe_abort(cp, err, errlen, w_); } } while (0)

CudaPipe *cuda_pipe_open(const Plan *plan, int wrank, int wsize, int me, int r0, int nlocal, char *err, size_t errlen) {
    if (pipe_scope || live_pipe) { snprintf(err, errlen, "a pipeline is already open in this process"); return NULL; }
    CudaPipe *cp = calloc(1, sizeof *cp);
    if (!cp) { snprintf(err, errlen, "out of memory"); return NULL; }
    cp->plan = plan; cp->wrank = wrank; cp->wsize = wsize; cp->me = me; cp->r0 = r0; cp->nlocal = nlocal;
    cp->timeout = runtime_nccl_timeout(600);
    pipe_scope = live_pipe = cp;
    return cp;
}

void cuda_pipe_scope_end(void) { pipe_scope = NULL; }

/* At the first stage Engine's group set-up (the device context is current): the world and this
 * pipeline rank's stage communicator, the transfer stream, a reference on the shared module. */
static int pipe_world(CudaPipe *cp, char *err, size_t errlen) {
    if (cp->world) return 0;
    pthread_once(&nccl_once, nccl_load);
    if (!nccl_ok) return pipe_fail(cp, err, errlen, "%s", nccl_why);
    if (!nccl.ncclCommSplit || !nccl.ncclSend || !nccl.ncclRecv || !nccl.ncclGroupStart || !nccl.ncclGroupEnd)
        return pipe_fail(cp, err, errlen, "pipeline stages need ncclCommSplit (NCCL 2.18 or newer) and ncclSend/ncclRecv; this "
                         "libnccl lacks them: install a newer NCCL (or point BOOST_LIBNCCL at one)");
    ncclUniqueId id;
    char path[1100];
    if (nccl_exchange_id(cp->plan, cp->wrank, &id, path, sizeof path, err, errlen)) return -1;
    if (ctx_set_err(err, errlen, "creating the pipeline's NCCL communicator")) return -1;
    ncclResult_t rc = nccl.ncclCommInitRank(&cp->world, cp->wsize, id, cp->wrank);
    if (cp->wrank == 0) unlink(path);
    if (rc != 0) { cp->world = NULL; return pipe_fail(cp, err, errlen, "ncclCommInitRank failed: %s", nccl.ncclGetErrorString(rc)); }
    rc = nccl.ncclCommSplit(cp->world, cp->me, cp->r0, &cp->stage, NULL);
    if (rc != 0 || !cp->stage)
        return pipe_fail(cp, err, errlen, "ncclCommSplit into the stage groups failed: %s", rc ? nccl.ncclGetErrorString(rc) : "no communicator");
    PIPE_CU(api.cuStreamCreate(&cp->stream, 0), "creating the sums' stream");
    pthread_mutex_lock(&shared_mu);
    shared.users++;
    pthread_mutex_unlock(&shared_mu);
    cp->held = 1;
    return 0;
}

int cuda_pipe_links(CudaPipe *cp, int nv, int pp, char *err, size_t errlen) {
    if (!cp->world) return pipe_fail(cp, err, errlen, "no stage Engine opened on the cuda backend before the links");
    if (2 * (nv - 1) > CUDA_PIPE_MAX_CHANS) return pipe_fail(cp, err, errlen, "%d stage boundaries: at most %d", nv - 1, CUDA_PIPE_MAX_CHANS / 2);
    if (ctx_set_err(err, errlen, "making the stage boundaries' communicators")) return -1;
    for (int c = 0; c < 2 * (nv - 1); c++) {
        int b = c / 2, lo = b % pp, hi = (b + 1) % pp, in = cp->me == lo || cp->me == hi;
        ncclComm_t comm = NULL;
        /* colour: the (dp, tp) rank, so each pair is that rank's two processes; key 0: stage b's side */
        ncclResult_t rc = nccl.ncclCommSplit(cp->world, in ? cp->r0 : -1 /* NCCL_SPLIT_NOCOLOR */, cp->me == lo ? 0 : 1, &comm, NULL);
        if (rc != 0 || (in && !comm))
            return pipe_fail(cp, err, errlen, "ncclCommSplit for the %s channel between stages %d and %d failed: %s",
                             c % 2 ? "backward" : "forward", b, b + 1, rc ? nccl.ncclGetErrorString(rc) : "no communicator");
        cp->chan[c] = comm;
        cp->nchans = c + 1;
        if (in) PIPE_CU(api.cuStreamCreate(&cp->chan_stream[c], 0), "creating a transfer stream");
    }
    return 0;
}

static int pipe_event(CudaPipe *cp, CUevent *ev, char *err, size_t errlen) {
    if (cp->nevs == cp->cap_evs) {
        int cap = cp->cap_evs ? 2 * cp->cap_evs : 32;
        CUevent *e = realloc(cp->evs, sizeof *e * (size_t)cap);
        if (!e) return pipe_fail(cp, err, errlen, "out of memory");
        memset(e + cp->cap_evs, 0, sizeof *e * (size_t)(cap - cp->cap_evs));
        cp->evs = e; cp->cap_evs = cap;
    }
    if (!cp->evs[cp->nevs]) PIPE_CU(api.cuEventCreate(&cp->evs[cp->nevs], CU_EVENT_DISABLE_TIMING_), "creating an event");
    *ev = cp->evs[cp->nevs++];
    return 0;
}

static int pipe_check(CudaPipe *cp, const CudaPipeOp *op, char *err, size_t errlen) {
    if (cp->dead) return pipe_fail(cp, err, errlen, "NCCL was aborted after an earlier failure");
    if (op->chan < 0 || op->chan >= cp->nchans || !cp->chan[op->chan] || (op->peer != 0 && op->peer != 1) || op->elems < 0)
        return pipe_fail(cp, err, errlen, "a transfer on channel %d to side %d: this process is not on that channel", op->chan, op->peer);
    return ctx_set_err(err, errlen, "a pipeline transfer");
}

static int pipe_out(CudaPipe *cp, BackendRank *r, int slot, CUevent done, char *err, size_t errlen) {
    if (cp->nout == cp->cap_out) {
        int cap = cp->cap_out ? 2 * cp->cap_out : 32;
        void *o = realloc(cp->out, sizeof *cp->out * (size_t)cap);
        if (!o) return pipe_fail(cp, err, errlen, "out of memory");
        cp->out = o; cp->cap_out = cap;
    }
    cp->out[cp->nout].r = r; cp->out[cp->nout].slot = slot; cp->out[cp->nout++].done = done;
    return 0;
}

/* One transfer on its channel's stream: after the work issued so far on op->r (a send: the tensor
 * is written; a receive: the slot's earlier readers are done), then ncclSend or ncclRecv. The
 * channel carries one direction between two processes, so its stream holds only sends on one side
 * and only receives on the other, matched in order: a send waits for its receive only. */
static int pipe_transfer(CudaPipe *cp, const CudaPipeOp *op, int send, char *err, size_t errlen) {
    if (pipe_check(cp, op, err, errlen)) return -1;
    CUstream st = cp->chan_stream[op->chan];
    CUevent after, done;
    if (pipe_event(cp, &after, err, errlen) || pipe_event(cp, &done, err, errlen)) return -1;
    PIPE_CU(api.cuEventRecord(after, op->r->stream), "ordering a transfer after the stage's work");
    PIPE_CU(api.cuStreamWaitEvent(st, after, 0), "ordering a transfer after the stage's work");
    if (send) PIPE_NCCL(nccl.ncclSend(op->ptr, (size_t)op->elems, nccl_dtype(op->dtype), op->peer, cp->chan[op->chan], st));
    else PIPE_NCCL(nccl.ncclRecv(op->ptr, (size_t)op->elems, nccl_dtype(op->dtype), op->peer, cp->chan[op->chan], st));
    PIPE_CU(api.cuEventRecord(done, st), "recording a transfer");
    return pipe_out(cp, op->r, op->slot, done, err, errlen);
}

int cuda_pipe_send(CudaPipe *cp, const CudaPipeOp *op, char *err, size_t errlen) { return pipe_transfer(cp, op, 1, err, errlen); }
int cuda_pipe_recv(CudaPipe *cp, const CudaPipeOp *op, char *err, size_t errlen) { return pipe_transfer(cp, op, 0, err, errlen); }

int cuda_pipe_settle(CudaPipe *cp, BackendRank *r, int slot, char *err, size_t errlen) {
    if (ctx_set_err(err, errlen, "waiting for a pipeline transfer")) return -1;
    for (int i = 0; i < cp->nout;) {
        if (cp->out[i].r == r && cp->out[i].slot == slot) {
            PIPE_CU(api.cuStreamWaitEvent(r->stream, cp->out[i].done, 0), "waiting for a pipeline transfer");
            cp->out[i] = cp->out[--cp->nout];
        } else i++;
    }
    return 0;
}

/* The host waits for stream st (a channel's, or the sums'), watching the pipeline's NCCL errors and
 * the timeout. */
static int pipe_host_wait(CudaPipe *cp, CUstream st, const char *what, char *err, size_t errlen) {
    ncclComm_t cs[CUDA_PIPE_MAX_CHANS + 1];
    int nc = 0;
    cs[nc++] = cp->world;
    for (int c = 0; c < cp->nchans; c++) if (cp->chan[c]) cs[nc++] = cp->chan[c];
    CUresult q = 0;
    char why[512];
    if (!poll_stream(st, cs, nc, cp->timeout, what, &q, why, sizeof why)) return 0;
    if (q) return pipe_fail(cp, err, errlen, "%s: %s (CUDA error %d)", what, cu_str(q), (int)q);
    return pipe_abort(cp, err, errlen, why);
}

int cuda_pipe_flush(CudaPipe *cp, BackendRank *const *ranks, int n, char *err, size_t errlen) {
    if (cp->dead) return pipe_fail(cp, err, errlen, "NCCL was aborted after an earlier failure");
    if (ctx_set_err(err, errlen, "finishing the pipeline's transfers")) return -1;
    for (int c = 0; c < cp->nchans; c++)
        if (cp->chan_stream[c] && pipe_host_wait(cp, cp->chan_stream[c], "the pipeline's transfers", err, errlen)) return -1;
    for (int i = 0; i < n; i++)
        if (rank_idle(ranks[i], "the stage's work at the end of the schedule")) {
            snprintf(err, errlen, "%s", ranks[i]->err);
            return -1;
        }
    cp->nout = 0;   /* all done on the device: later work comes after them */
    cp->nevs = 0;
    return 0;
}

/* n values of esize bytes through the world's all-reduce (sum), on the transfer stream. */
static int pipe_allreduce_host(CudaPipe *cp, void *vals, int64_t n, int f64, char *err, size_t errlen) {
    if (cp->dead) return pipe_fail(cp, err, errlen, "NCCL was aborted after an earlier failure");
    if (n <= 0) return 0;
    size_t bytes = (size_t)n * (f64 ? 8 : 4);
    if (ctx_set_err(err, errlen, "a sum over the pipeline's processes")) return -1;
    if (bytes > cp->buf_bytes) {
        if (cp->buf && pipe_host_wait(cp, cp->stream, "the sums before a larger one", err, errlen)) return -1;
        if (cp->buf) api.cuMemFree_v2(cp->buf);
        cp->buf = 0; cp->buf_bytes = 0;
        PIPE_CU(api.cuMemAlloc_v2(&cp->buf, bytes), "allocating the sums' staging");
        cp->buf_bytes = bytes;
    }
    PIPE_CU(api.cuMemcpyHtoDAsync_v2(cp->buf, vals, bytes, cp->stream), "staging a sum");
    PIPE_NCCL(nccl.ncclAllReduce((void *)(uintptr_t)cp->buf, (void *)(uintptr_t)cp->buf, (size_t)n, f64 ? NCCL_FLOAT64_ : NCCL_FLOAT32_,
                                 NCCL_SUM_, cp->world, cp->stream));
    if (pipe_host_wait(cp, cp->stream, "a sum over the pipeline's processes", err, errlen)) return -1;
    PIPE_CU(api.cuMemcpyDtoHAsync_v2(vals, cp->buf, bytes, cp->stream), "reading a sum");
    return pipe_host_wait(cp, cp->stream, "reading a sum", err, errlen);
}

int cuda_pipe_world_sum(CudaPipe *cp, double *vals, int64_t n, char *err, size_t errlen) {
    return pipe_allreduce_host(cp, vals, n, 1, err, errlen);
}

int cuda_pipe_bcast(CudaPipe *cp, float *vals, int64_t n, int root, char *err, size_t errlen) {
    if (cp->wrank != root) memset(vals, 0, sizeof *vals * (size_t)(n > 0 ? n : 0));
    return pipe_allreduce_host(cp, vals, n, 0, err, errlen);
}

void cuda_pipe_close(CudaPipe *cp) {
    if (!cp) return;
    if (pipe_scope == cp) pipe_scope = NULL;
    if (live_pipe == cp) live_pipe = NULL;
    if (cp->held) {
        if (api.cuCtxSetCurrent(shared.ctx)) fprintf(stderr, "boost: cuCtxSetCurrent failed while closing the pipeline\n");
        if (!cp->dead) {   /* after an abort the stream may hold transfers that never end: do not wait */
            if (cp->stream) api.cuStreamSynchronize(cp->stream);
            for (int c = 0; c < cp->nchans; c++) if (cp->chan_stream[c]) api.cuStreamSynchronize(cp->chan_stream[c]);
            for (int c = 0; c < cp->nchans; c++) if (cp->chan[c]) nccl.ncclCommDestroy(cp->chan[c]);
            if (cp->stage) nccl.ncclCommDestroy(cp->stage);
            if (cp->world) nccl.ncclCommDestroy(cp->world);
        }
        for (int i = 0; i < cp->cap_evs; i++) if (cp->evs[i]) api.cuEventDestroy_v2(cp->evs[i]);
        if (cp->buf) api.cuMemFree_v2(cp->buf);
        if (cp->stream) api.cuStreamDestroy_v2(cp->stream);
        for (int c = 0; c < cp->nchans; c++) if (cp->chan_stream[c]) api.cuStreamDestroy_v2(cp->chan_stream[c]);
        shared_close();
    }
    free(cp->out); free(cp->evs);
    free(cp);
}

/* ---------------- collectives on their own stream ---------------- */
static int step_event(BackendRank *r, CUevent *evs, int step, CUevent *out) {
    if (step < 0 || step >= r->p->nsteps) return rfail(r, "collective step %d is outside the plan", step);
    if (!evs[step]) CU(r, api.cuEventCreate(&evs[step], CU_EVENT_DISABLE_TIMING_));
    *out = evs[step];
    return 0;
}

static int launch_on(BackendRank *r, CUstream s, const char *name, int64_t grid, int64_t block, int64_t smem, void **args);
static int dp_begin(BackendRank *r);
static int dp_end(BackendRank *r, const char *what);

/* Local mode, on rank 0's collective stream for the whole group: wait until every rank's compute
 * stream has reached the collective, run it, record the done event that the ranks' compute streams
 * wait on before the first step that touches the memory. The host threads meet twice (to see each
 * other's events); the device is not synchronised with the host. */
static int local_issue(BackendRank *r, int step, const CollArgs *c, int gather) {
    CudaGroup *g = r->group;
    CUevent ready, done;
    if (step_event(r, r->ev_ready, step, &ready)) return -1;
    CU(r, api.cuEventRecord(ready, r->stream));
    if (group_barrier(g)) return rfail(r, "collective abandoned: another rank failed");
    int rc = 0;
    if (r->rank == 0) {
        BackendRank *r0 = r;
        for (int q = 0; q < g->tp && !rc; q++) {
            CUresult e = api.cuStreamWaitEvent(r0->comm, g->ranks[q]->ev_ready[step], 0);
            if (e) rc = rfail(r, "collective: waiting for rank %d failed: %s", q, cu_str(e));
        }
        const PlanStep *st = &r->p->steps_[step];
        if (!rc && !gather) {
            CUdeviceptr table = g->step_ptrs + ((size_t)r->slot * r->p->nsteps + step) * g->tp * sizeof(CUdeviceptr);
            long long n = c->elems;
            int tpv = g->tp;
            void *args[] = {&table, &tpv, &n};
            int64_t blocks = (n + 255) / 256;
            if (blocks > 4096) blocks = 4096;
            rc = launch_on(r, r0->comm, c->dtype == PDT_FP32 ? "boost_allreduce_fp32" : "boost_allreduce_bf16", blocks,
                           256, 0, args);
        }
        size_t es = plan_dtype_size(c->dtype);
        for (int dst = 0; !rc && gather && dst < g->tp; dst++)
            for (int q = 0; !rc && q < g->tp; q++)
                rc = copy_2d(r, r0->comm, operand_ptr(g->ranks[dst], &st->coll.dst) + q * c->cols * es, c->ld_dst * es,
                             operand_ptr(g->ranks[q], &st->coll.src), c->ld_src * es, c->cols * es, c->rows);
        if (!rc && step_event(r, r->ev_done, step, &done) == 0) {
            CUresult e = api.cuEventRecord(done, r0->comm);
            if (e) rc = rfail(r, "collective: recording its end failed: %s", cu_str(e));
        } else if (!rc) rc = -1;
        r0->comm_used = 1;
        if (!rc && r->sync_steps && api.cuStreamSynchronize(r0->comm) != 0)
            rc = rfail(r, "%s failed on the device (BOOST_CUDA_SYNC=1)", gather ? "all-gather" : "all-reduce");
    }
    if (group_barrier(g)) return rc ? rc : rfail(r, "collective abandoned: another rank failed");
    return rc;
}

/* group=edp (expert parallelism): the expert gradient summed over the ranks that hold the same
 * experts, then times scale= (1/dp); a group of one applies the scale alone. */
static int world_edp_allreduce_on(BackendRank *r, CUstream s, const CollArgs *c, void *buf) {
    if (r->p->tensors[c->buf.tensor].dtype != PDT_FP32 || c->dtype != PDT_FP32)
        return rfail(r, "all-reduce of %s over group=edp: only fp32 gradients with an fp32 wire are supported on cuda",
                     r->p->tensors[c->buf.tensor].name);
    long long n = c->elems;
    if (r->dp / (r->ep > 1 ? r->ep : 1) > 1) {
        if (!r->edp_comm) return rfail(r, "rank %d: no NCCL communicator for the edp group", r->wrank);
        NCCL(r, nccl.ncclAllReduce(buf, buf, (size_t)n, NCCL_FLOAT32_, c->avg ? NCCL_AVG_ : NCCL_SUM_, r->edp_comm, s));
    }
    if (!(c->scale > 0)) return 0;
    CUdeviceptr x = (CUdeviceptr)(uintptr_t)buf;
    float sc = (float)c->scale;
    int64_t blocks = (n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256;
    void *args[] = {&x, &sc, &n};
    return launch_on(r, s, "boost_scale_fp32", blocks, 256, 0, args);
}

/* Multi-process mode: all-reduce buf on stream s over the group the step names (group=dp: the dp
 * communicator; op=avg: ncclAvg). A bf16 wire on an fp32 buffer (parallel.dp_dtype = "bf16") goes
 * through dp_buf: rounded to bf16, reduced in bf16, widened back, as the CPU backend's rounding. */
static int world_allreduce_on(BackendRank *r, CUstream s, const CollArgs *c, void *buf) {
    if (c->group == GROUP_EDP) return world_edp_allreduce_on(r, s, c, buf);
    ncclComm_t comm = c->group == GROUP_DP ? r->dp_comm : r->nccl_comm;
    if (c->group == GROUP_DP && r->dp <= 1) return 0;
    if (!comm) return rfail(r, "rank %d: no NCCL communicator for the %s group", r->wrank, grid_group_name(c->group));
    int op = c->avg ? NCCL_AVG_ : NCCL_SUM_, bufdt = r->p->tensors[c->buf.tensor].dtype;
    long long n = c->elems;
    if (c->dtype == bufdt) {
        NCCL(r, nccl.ncclAllReduce(buf, buf, (size_t)n, nccl_dtype(c->dtype), op, comm, s));
        return 0;
    }
    if (c->dtype != PDT_BF16 || bufdt != PDT_FP32 || (size_t)n * 2 > r->dp_bytes)
        return rfail(r, "all-reduce of %s: a %s wire on a %s buffer is not supported (only bf16 on fp32 dp gradients)",
                     r->p->tensors[c->buf.tensor].name, c->dtype == PDT_BF16 ? "bf16" : "fp32", bufdt == PDT_BF16 ? "bf16" : "fp32");
    CUdeviceptr x = (CUdeviceptr)(uintptr_t)buf, w = r->dp_buf;
    int64_t blocks = (n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256;
    void *narrow[] = {&x, &w, &n}, *widen[] = {&w, &x, &n};
    if (launch_on(r, s, "boost_fp32_to_bf16", blocks, 256, 0, narrow)) return -1;
    NCCL(r, nccl.ncclAllReduce((void *)(uintptr_t)w, (void *)(uintptr_t)w, (size_t)n, NCCL_BFLOAT16_, op, comm, s));
    return launch_on(r, s, "boost_bf16_to_fp32", blocks, 256, 0, widen);
}

/* Multi-process mode: the same on this rank's collective stream with NCCL. */
static int world_issue(BackendRank *r, int step, const CollArgs *c, void *buf, void *src, void *dst) {
    if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->rank);
    CUevent ready, done;
    if (step_event(r, r->ev_ready, step, &ready) || step_event(r, r->ev_done, step, &done)) return -1;
    CU(r, api.cuEventRecord(ready, r->stream));
    CU(r, api.cuStreamWaitEvent(r->comm, ready, 0));
    if (buf) { if (world_allreduce_on(r, r->comm, c, buf)) return -1; }
    else if (world_allgather_on(r, r->comm, c, src, dst)) return -1;
    CU(r, api.cuEventRecord(done, r->comm));
    r->comm_used = 1;
    if (r->sync_steps) return host_wait(r, r->comm, buf ? "an all-reduce (BOOST_CUDA_SYNC=1)" : "an all-gather (BOOST_CUDA_SYNC=1)");
    return 0;
}

static int cuda_allreduce_issue(BackendRank *r, int step, const CollArgs *c, void *buf) {
    if (ctx_set(r, "issuing an all-reduce")) return -1;
    if (r->world) return world_issue(r, step, c, buf, NULL, NULL);
    if (!r->group || r->group->tp <= 1) return 0;
    return local_issue(r, step, c, 0);
}

static int cuda_allgather_issue(BackendRank *r, int step, const CollArgs *c, void *src, void *dst) {
    if (ctx_set(r, "issuing an all-gather")) return -1;
    if (r->world) return world_issue(r, step, c, NULL, src, dst);
    if (!r->group || r->group->tp <= 1) {   /* one rank: a copy in stream order */
        size_t es = plan_dtype_size(c->dtype);
        return copy_2d(r, r->stream, (CUdeviceptr)(uintptr_t)dst, c->ld_dst * es, (CUdeviceptr)(uintptr_t)src,
                       c->ld_src * es, c->cols * es, c->rows);
    }
    return local_issue(r, step, c, 1);
}

/* The compute stream waits (on the device) for collective `step`: this rank's own done event in
 * multi-process mode, rank 0's in local mode. A collective that was not issued (one rank) has no
 * event and nothing to wait for. */
static int cuda_coll_wait(BackendRank *r, int step) {
    if (step < 0 || step >= r->p->nsteps) return rfail(r, "collective step %d is outside the plan", step);
    CUevent done = r->world ? r->ev_done[step] : r->group && r->group->tp > 1 ? r->group->ranks[0]->ev_done[step] : NULL;
    if (!done) return 0;
    if (ctx_set(r, "waiting for a collective")) return -1;
    CU(r, api.cuStreamWaitEvent(r->stream, done, 0));
    return 0;
}

/* Expert parallelism (docs/plan-format.md "alltoall"): the routed slots between the ep ranks of a
 * group, one process per GPU. Fixed counts: each (member, local expert) block of C slots travels
 * whole, as grouped ncclSend/ncclRecv on the ep communicator (peer order q = 0..N-1, expert order
 * j = 0..El-1 on both sides, so the k-th send to a peer meets its k-th receive). Empty slots carry
 * zeros: the token side zeroes them with its own map, before sending (out: staged in ep_buf) or
 * after receiving (back). Token side: expert e at rows e*C; owner p: member q's slots of its local
 * expert j at rows (j*N + q)*C. Runs on the compute stream, in its order. */
static int cuda_alltoall(BackendRank *r, const CollArgs *c, void *src, void *dst, const void *map) {
    if (ctx_set(r, "an all-to-all")) return -1;
    int n = r->ep > 1 ? r->ep : 1;
    int64_t E = c->experts, C = c->capacity, w = c->cols;
    if (E % n) return rfail(r, "alltoall: experts=%lld do not divide over the ep group of %d", (long long)E, n);
    int64_t El = E / n;
    size_t es = plan_dtype_size(c->dtype), blk = (size_t)(C * w), row_bytes = (size_t)w * es, all = (size_t)(E * C) * row_bytes;
    CUdeviceptr s = (CUdeviceptr)(uintptr_t)src, d = (CUdeviceptr)(uintptr_t)dst, m = (CUdeviceptr)(uintptr_t)map;
    long long rows = (long long)(E * C), rb = (long long)row_bytes;
    int64_t blocks = ((int64_t)all + 255) / 256 > 4096 ? 4096 : ((int64_t)all + 255) / 256;
    if (n == 1) {   /* one member: both layouts are expert-major */
        if (copy_2d(r, r->stream, d, row_bytes, s, row_bytes, row_bytes, (size_t)rows)) return -1;
        void *args[] = {&d, &m, &rows, &rb};
        if (launch_on(r, r->stream, "boost_ep_mask_rows", blocks, 256, 0, args)) return -1;
        return r->sync_steps ? host_wait(r, r->stream, "an all-to-all (BOOST_CUDA_SYNC=1)") : 0;
    }
    if (!r->world) return rfail(r, "alltoall: ep=%d on the cuda backend runs one process per GPU (BOOST_WORLD_SIZE/BOOST_RANK, "
                                "mpirun or srun)", n);
    if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->rank);
    if (!r->ep_comm) return rfail(r, "rank %d: no NCCL communicator for the ep group", r->wrank);
    if (!c->way) {   /* out: my slots, empty ones zeroed, from the staging */
        if (all > r->ep_bytes) return rfail(r, "alltoall of %zu bytes exceeds the staging of %zu", all, r->ep_bytes);
        if (copy_2d(r, r->stream, r->ep_buf, row_bytes, s, row_bytes, row_bytes, (size_t)rows)) return -1;
        CUdeviceptr x = r->ep_buf;
        void *args[] = {&x, &m, &rows, &rb};
        if (launch_on(r, r->stream, "boost_ep_mask_rows", blocks, 256, 0, args)) return -1;
        s = r->ep_buf;
    }
    int dt = nccl_dtype(c->dtype);
    NCCL(r, nccl.ncclGroupStart());
    for (int q = 0; q < n; q++)
        for (int64_t j = 0; j < El; j++) {
            int64_t tok = (q * El + j) * C, own = (j * n + q) * C;   /* rows: on the token side, on the owner */
            int64_t from = c->way ? own : tok, to = c->way ? tok : own;
            ncclResult_t a = nccl.ncclSend((const void *)(uintptr_t)(s + (size_t)from * row_bytes), blk, dt, q, r->ep_comm, r->stream);
            ncclResult_t b = a ? a : nccl.ncclRecv((void *)(uintptr_t)(d + (size_t)to * row_bytes), blk, dt, q, r->ep_comm, r->stream);
            if (a || b) {
                nccl.ncclGroupEnd();
                return world_abort(r, "the ep all-to-all's ncclSend/ncclRecv with rank %d failed: %s", q,
                                   nccl.ncclGetErrorString(a ? a : b));
            }
        }
    NCCL(r, nccl.ncclGroupEnd());
    if (c->way) {   /* back: my own map says which of the returned slots are filled */
        void *args[] = {&d, &m, &rows, &rb};
        if (launch_on(r, r->stream, "boost_ep_mask_rows", blocks, 256, 0, args)) return -1;
    }
    if (r->sync_steps) return host_wait(r, r->stream, "an all-to-all (BOOST_CUDA_SYNC=1)");
    return 0;
}

static void *cuda_tensor_ptr(BackendRank *r, int t) { return (void *)(uintptr_t)r->tptr[t]; }

static int after_step(BackendRank *r, const char *what) {
    if (!r->sync_steps) return 0;
    CUresult rc = api.cuStreamSynchronize(r->stream);
    if (rc) return rfail(r, "%s failed on the device: %s (BOOST_CUDA_SYNC=1 stops at the first failing step)",
                         what, cu_str(rc));
    return 0;
}

/* ---------------- GEMMs ---------------- */
static int dtype_of(const BackendRank *r, const Operand *op) { return r->p->tensors[op->tensor].dtype; }
static int cublas_type(int dt) { return dt == PDT_FP32 ? CUDA_R_32F_ : CUDA_R_16BF_; }

/* Row-major C = alpha op(A) op(B) + beta C as column-major C^T = op(B)^T op(A)^T. */
static int gemm_one(BackendRank *r, const GemmArgs *g, void *A, void *B, void *C, int batched) {
    int ta = g->tb ? 1 : 0, tb = g->ta ? 1 : 0;       /* swapped */
    int at = dtype_of(r, &g->A), bt = dtype_of(r, &g->B), ct = dtype_of(r, &g->C);
    if (at != bt) return rfail(r, "gemm with A and B of different dtypes (%s, %s): the CUDA backend needs one "
                               "dtype for both", r->p->tensors[g->A.tensor].name, r->p->tensors[g->B.tensor].name);
    float alpha = (float)g->alpha, beta = (float)g->beta;
    int st;
    if (batched && g->batch > 1)
        st = api.cublasGemmStridedBatchedEx(r->blas, ta, tb, (int)g->n, (int)g->m, (int)g->k, &alpha,
                                            B, cublas_type(bt), (int)g->ldb, g->sB,
                                            A, cublas_type(at), (int)g->lda, g->sA, &beta,
                                            C, cublas_type(ct), (int)g->ldc, g->sC, (int)g->batch,
                                            CUBLAS_COMPUTE_32F_, CUBLAS_GEMM_DEFAULT_);
    else
        st = api.cublasGemmEx(r->blas, ta, tb, (int)g->n, (int)g->m, (int)g->k, &alpha,
                              B, cublas_type(bt), (int)g->ldb, A, cublas_type(at), (int)g->lda, &beta,
                              C, cublas_type(ct), (int)g->ldc, CUBLAS_COMPUTE_32F_, CUBLAS_GEMM_DEFAULT_);
    if (st != 0) {
        char m[400];
        snprintf(m, sizeof m, "row-major m=%lld n=%lld k=%lld ta=%d tb=%d lda=%lld ldb=%lld ldc=%lld batch=%lld; "
                 "A=%.60s B=%.60s C=%.60s", (long long)g->m, (long long)g->n, (long long)g->k, g->ta, g->tb,
                 (long long)g->lda, (long long)g->ldb, (long long)g->ldc, (long long)g->batch,
                 r->p->tensors[g->A.tensor].name, r->p->tensors[g->B.tensor].name, r->p->tensors[g->C.tensor].name);
        return rfail(r, "%s failed with cuBLAS status %d%s (%s)", batched && g->batch > 1 ? "cublasGemmStridedBatchedEx" : "cublasGemmEx",
                     st, st == 7 ? " (INVALID_VALUE: a leading dimension, size or transpose cuBLAS refuses)" : "", m);
    }
    return 0;
}

static int cuda_gemm(BackendRank *r, const GemmArgs *g, void *A, void *B, void *C) {
    if (ctx_set(r, "a GEMM")) return -1;
    if (gemm_one(r, g, A, B, C, 1)) return -1;
    return after_step(r, "gemm");
}

/* The first refusal of cublasGemmGroupedBatchedEx per (A/B type, C type) is printed once: those
 * grouped GEMMs then run as a loop of cublasGemmEx, which is correct but slower. */
static void grouped_refusal_note(int ab_type, int c_type, int status) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int seen[16][2], nseen;
    int fresh = 1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nseen; i++) fresh &= !(seen[i][0] == ab_type && seen[i][1] == c_type);
    if (fresh && nseen < 16) { seen[nseen][0] = ab_type; seen[nseen][1] = c_type; nseen++; }
    pthread_mutex_unlock(&mu);
    if (fresh)
        fprintf(stderr, "boost: cublasGemmGroupedBatchedEx refused A/B %s, C %s (cuBLAS status %d): those grouped GEMMs "
                "run as a loop of cublasGemmEx (printed once per type combination; BOOST_NO_GROUPED=1 skips the try)\n",
                ab_type == CUDA_R_16BF_ ? "bf16" : "fp32", c_type == CUDA_R_16BF_ ? "bf16" : "fp32", status);
}

static int cuda_grouped_gemm(BackendRank *r, int n, const GemmArgs *g, void **A, void **B, void **C) {
    if (ctx_set(r, "a grouped GEMM")) return -1;
    /* cuBLAS's grouped call takes C of the inputs' type only (its table of supported types:
     * bf16 -> bf16, fp32 -> fp32 under CUBLAS_COMPUTE_32F): bf16 GEMMs into fp32 grads loop */
    int same = api.cublasGemmGroupedBatchedEx != NULL && !runtime_env()->no_grouped &&
               n >= 1 && n <= 64 && dtype_of(r, &g[0].C) == dtype_of(r, &g[0].A);
    for (int i = 1; i < n && same; i++)
        same = dtype_of(r, &g[i].A) == dtype_of(r, &g[0].A) && dtype_of(r, &g[i].B) == dtype_of(r, &g[0].B) &&
               dtype_of(r, &g[i].C) == dtype_of(r, &g[0].C) && dtype_of(r, &g[i].A) == dtype_of(r, &g[i].B);
    if (!same) {   /* a loop of GEMMs on the same stream */
        for (int i = 0; i < n; i++) if (gemm_one(r, &g[i], A[i], B[i], C[i], 0)) return -1;
        return after_step(r, "grouped_gemm");
    }
    int transa[64], transb[64], m[64], nn[64], k[64], lda[64], ldb[64], ldc[64], size[64];
    float alpha[64], beta[64];
    CUdeviceptr hp[3 * 64];
    for (int i = 0; i < n; i++) {
        transa[i] = g[i].tb ? 1 : 0; transb[i] = g[i].ta ? 1 : 0;
        m[i] = (int)g[i].n; nn[i] = (int)g[i].m; k[i] = (int)g[i].k;
        lda[i] = (int)g[i].ldb; ldb[i] = (int)g[i].lda; ldc[i] = (int)g[i].ldc;
        alpha[i] = (float)g[i].alpha; beta[i] = (float)g[i].beta; size[i] = 1;
        hp[i] = (CUdeviceptr)(uintptr_t)B[i]; hp[n + i] = (CUdeviceptr)(uintptr_t)A[i]; hp[2 * n + i] = (CUdeviceptr)(uintptr_t)C[i];
    }
    /* the pointer arrays of a plan step were uploaded at open (g points into the plan's members);
     * other callers' arrays go through scratch, after the previous grouped call has read it */
    CUdeviceptr dp = 0;
    ptrdiff_t first = g - r->p->members, at0 = (ptrdiff_t)r->slot * 3 * r->p->nmembers + 3 * first;   /* this slot's table */
    if (r->gemm_ptrs && first >= 0 && first + n <= r->p->nmembers &&
        !memcmp(r->gemm_ptrs_host + at0, hp, 3 * n * sizeof *hp))
        dp = r->gemm_ptrs + at0 * sizeof(CUdeviceptr);
    else {
        CU(r, api.cuStreamSynchronize(r->stream));
        CU(r, api.cuMemcpyHtoD_v2(r->scratch, hp, 3 * n * sizeof *hp));
        dp = r->scratch;
    }
    int at = cublas_type(dtype_of(r, &g[0].A)), ct = cublas_type(dtype_of(r, &g[0].C));
    int st = api.cublasGemmGroupedBatchedEx(r->blas, transa, transb, m, nn, k, alpha,
                                            (const void *const *)(uintptr_t)dp, at, lda,
                                            (const void *const *)(uintptr_t)(dp + n * sizeof(CUdeviceptr)), at, ldb,
                                            beta, (void *const *)(uintptr_t)(dp + 2 * n * sizeof(CUdeviceptr)), ct, ldc,
                                            n, size, CUBLAS_COMPUTE_32F_);
    if (st != 0) {   /* e.g. a type combination the grouped call does not support: loop instead */
        grouped_refusal_note(at, ct, st);
        for (int i = 0; i < n; i++) if (gemm_one(r, &g[i], A[i], B[i], C[i], 0)) return -1;
    }
    return after_step(r, "grouped_gemm");
}

/* ---------------- fused kernels ---------------- */
/* Dynamic shared memory above the 48 KiB every function gets (the attention tiles, gen/kernels.c):
 * the device's opt-in maximum must hold it, and the function's limit is raised with
 * cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) before its first such launch (once per size). */
static int raise_dyn_smem(BackendRank *r, const char *name, CUfunction fn, int64_t smem) {
    if (smem <= 48 * 1024) return 0;
    int64_t have = 0;
    pthread_mutex_lock(&shared_mu);
    for (int i = 0; i < shared.nfns; i++) if (shared.fns[i].fn == fn) have = shared.fns[i].dyn_max;
    pthread_mutex_unlock(&shared_mu);
    if (have >= smem) return 0;
    if (smem > shared.smem_optin)
        return rfail(r, "kernel %s needs %lld B of shared memory a block, but this device (%s) allows at most %d B: "
                     "regenerate the plan with a GPU spec of arch \"%s\" (boost gen then picks attention tiles within "
                     "%d B), or lower tune.attn_block_q / attn_block_k in the plan's GPU spec",
                     name, (long long)smem, shared.arch, shared.smem_optin, shared.arch, shared.smem_optin);
    CUresult rc = api.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES_, (int)smem);
    if (rc)
        return rfail(r, "cuFuncSetAttribute(kernel %s, MAX_DYNAMIC_SHARED_SIZE_BYTES, %lld) failed on %s (opt-in maximum "
                     "%d B): %s (CUDA error %d)", name, (long long)smem, shared.arch, shared.smem_optin, cu_str(rc), (int)rc);
    pthread_mutex_lock(&shared_mu);
    for (int i = 0; i < shared.nfns; i++) if (shared.fns[i].fn == fn) shared.fns[i].dyn_max = smem;
    pthread_mutex_unlock(&shared_mu);
    return 0;
}

static int launch_on(BackendRank *r, CUstream s, const char *name, int64_t grid, int64_t block, int64_t smem, void **args) {
    CUfunction fn = get_fn(name);
    if (!fn) return rfail(r, "kernel %s is not in %s: regenerate the plan and kernels with 'boost gen'", name, shared.src_path);
    if (grid <= 0 || grid > 0x7fffffff || block <= 0 || block > 1024)
        return rfail(r, "kernel %s: launch configuration out of range (grid %lld, block %lld)", name, (long long)grid,
                     (long long)block);
    if (smem < 0 || smem > 0x7fffffff) return rfail(r, "kernel %s: dynamic shared memory %lld B out of range", name, (long long)smem);
    if (raise_dyn_smem(r, name, fn, smem)) return -1;
    CUresult rc = api.cuLaunchKernel(fn, (unsigned)grid, 1, 1, (unsigned)block, 1, 1, (unsigned)smem, s, args, NULL);
    if (rc) return rfail(r, "cuLaunchKernel of kernel %s (grid %lld, block %lld, dynamic shared %lld B) failed: %s (CUDA error %d)",
                         name, (long long)grid, (long long)block, (long long)smem, cu_str(rc), (int)rc);
    return 0;
}

static int launch(BackendRank *r, const char *name, int64_t grid, int64_t block, int64_t smem, void **args) {
    return launch_on(r, r->stream, name, grid, block, smem, args);
}

/* The launch parameters of kernel step k: pointers in catalog order (NULL when absent), then the
 * rank-dependent constants as long long. */
typedef struct { CUdeviceptr ptrs[10]; long long consts[PLAN_MAX_KEYS]; void *args[10 + PLAN_MAX_KEYS]; } LaunchArgs;

static int kernel_args(BackendRank *r, const KernelArgs *k, void **ops, LaunchArgs *la) {
    if (!op_kind_known(k->kind)) return rfail(r, "kernel kind %s is not in the catalog", k->kind);
    CUdeviceptr *ptrs = la->ptrs;
    long long *consts = la->consts;
    void **args = la->args;
    int na = 0;
    char name[32];
    for (int o = 0; o < 10 && op_spec(k->kind, o, k->name, name, sizeof name) >= 0; o++) {
        ptrs[o] = 0;
        for (int i = 0; i < k->nops; i++)
            if (!strcmp(k->op_key[i], name)) ptrs[o] = (CUdeviceptr)(uintptr_t)ops[i];
        args[na++] = &ptrs[o];
    }
    int nc = 0;
    for (int i = 0; i < k->nconst; i++)
        if (k->const_int[i].per_rank != 0) {
            consts[nc] = (long long)rank_int(k->const_int[i], r->rank);
            args[na++] = &consts[nc++];
        }
    return 0;
}

static int cuda_kernel(BackendRank *r, const KernelArgs *k, void **ops) {
    if (ctx_set(r, "a kernel launch")) return -1;
    LaunchArgs la;
    if (kernel_args(r, k, ops, &la)) return -1;
    if (launch(r, k->name, k->grid, k->block, k->smem, la.args)) return -1;
    return after_step(r, k->name);
}

/* ---------------- for boost tune: extra modules and timed launches ---------------- */
void *cuda_module_load(const char *src, char *err, size_t errlen) {
    pthread_mutex_lock(&shared_mu);
    int open = shared.users > 0;
    pthread_mutex_unlock(&shared_mu);
    if (!open) { snprintf(err, errlen, "no CUDA rank is open"); return NULL; }
    if (ctx_set_err(err, errlen, "loading a module")) return NULL;
    size_t size = 0;
    void *bin = jit_cubin(src, shared.arch, &size, err, errlen);
    if (!bin) return NULL;
    CUmodule mod = NULL;
    CUresult rc = api.cuModuleLoadData(&mod, bin);
    free(bin);
    if (rc) { snprintf(err, errlen, "loading a candidate module failed: %s", cu_str(rc)); return NULL; }
    return mod;
}

void cuda_module_free(void *module) {
    if (module) { if (api.cuCtxSetCurrent(shared.ctx) || api.cuModuleUnload((CUmodule)module)) fprintf(stderr, "boost: unloading a tuning module failed\n"); }
}

const char *cuda_device_arch(void) { return shared.arch; }

int cuda_device_present(void) {
    pthread_once(&api_once, api_load);
    int count = 0;
    return api_ok && api.cuInit(0) == 0 && api.cuDeviceGetCount(&count) == 0 && count > 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cuda_time_kernel(BackendRank *r, void *module, const char *name, const KernelArgs *k, void **ops,
                     int64_t grid, int64_t block, int64_t smem, int reps, double *seconds) {
    if (ctx_set(r, "timing a kernel")) return -1;
    CUfunction fn = NULL;
    CU(r, api.cuModuleGetFunction(&fn, (CUmodule)module, name));
    LaunchArgs la;
    if (kernel_args(r, k, ops, &la)) return -1;
    if (grid <= 0 || grid > 0x7fffffff || block <= 0 || block > 1024 || smem < 0 || smem > shared.smem_optin)
        return rfail(r, "%s: launch out of range (grid %lld, block %lld, dynamic shared %lld B)", name, (long long)grid,
                     (long long)block, (long long)smem);
    if (smem > 48 * 1024)   /* a candidate module's own function: raised here, not cached */
        CU(r, api.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES_, (int)smem));
    CU(r, api.cuLaunchKernel(fn, (unsigned)grid, 1, 1, (unsigned)block, 1, 1, (unsigned)smem, r->stream, la.args, NULL));   /* warm-up */
    CU(r, api.cuStreamSynchronize(r->stream));
    double t0 = now_s();
    for (int i = 0; i < reps; i++)
        CU(r, api.cuLaunchKernel(fn, (unsigned)grid, 1, 1, (unsigned)block, 1, 1, (unsigned)smem, r->stream, la.args, NULL));
    CU(r, api.cuStreamSynchronize(r->stream));
    *seconds = (now_s() - t0) / (reps > 0 ? reps : 1);
    return 0;
}

/* ---------------- collectives that complete before returning (without the executor's overlap) ---------------- */
static int cuda_allreduce(BackendRank *r, const CollArgs *c, void *buf) {
    if (r->world) {
        if (ctx_set(r, "an all-reduce")) return -1;
        if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->rank);
        if (c->group == GROUP_DP || c->group == GROUP_EDP) {   /* dp_buf belongs to the collectives' stream */
            if (dp_begin(r)) return -1;
            if (world_allreduce_on(r, r->comm, c, buf)) return -1;
            return dp_end(r, "a dp all-reduce");
        }
        return world_allreduce_on(r, r->stream, c, buf);
    }
    CudaGroup *g = r->group;
    if (!g || g->tp <= 1) return 0;
    if (ctx_set(r, "an all-reduce")) return -1;
    g->ptr[r->rank] = (CUdeviceptr)(uintptr_t)buf;
    CU(r, api.cuStreamSynchronize(r->stream));           /* this rank's buffer is complete */
    if (group_barrier(g)) return rfail(r, "all-reduce abandoned: another rank failed");
    int rc = 0;
    if (r->rank == 0) {
        CUresult e = api.cuMemcpyHtoD_v2(g->dptrs, g->ptr, g->tp * sizeof(CUdeviceptr));
        long long n = c->elems;
        int tpv = g->tp;
        CUdeviceptr d = g->dptrs;
        void *args[] = {&d, &tpv, &n};
        int64_t blocks = (n + 255) / 256;
        if (blocks > 4096) blocks = 4096;
        if (e == 0)
            rc = launch(r, c->dtype == PDT_FP32 ? "boost_allreduce_fp32" : "boost_allreduce_bf16", blocks, 256, 0, args);
        else rc = rfail(r, "all-reduce: pointer table upload failed: %s", cu_str(e));
        if (rc == 0 && api.cuStreamSynchronize(r->stream) != 0) rc = rfail(r, "all-reduce kernel failed");
    }
    if (group_barrier(g)) return rfail(r, "all-reduce abandoned: another rank failed");
    return rc;
}

static int cuda_allgather(BackendRank *r, const CollArgs *c, void *src, void *dst) {
    if (r->world) {
        if (ctx_set(r, "an all-gather")) return -1;
        if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->rank);
        if (rank_idle(r, "the collectives before an all-gather")) return -1;   /* coll_buf is free */
        return world_allgather_on(r, r->stream, c, src, dst);
    }
    CudaGroup *g = r->group;
    int tp = g ? g->tp : 1;
    if (ctx_set(r, "an all-gather")) return -1;
    size_t es = plan_dtype_size(c->dtype);
    if (g) g->ptr[r->rank] = (CUdeviceptr)(uintptr_t)src;
    CU(r, api.cuStreamSynchronize(r->stream));
    if (group_barrier(g)) return rfail(r, "all-gather abandoned: another rank failed");
    for (int q = 0; q < tp; q++)
        if (copy_2d(r, r->stream, (CUdeviceptr)(uintptr_t)dst + q * c->cols * es, c->ld_dst * es,
                    g ? g->ptr[q] : (CUdeviceptr)(uintptr_t)src, c->ld_src * es, c->cols * es, c->rows)) return -1;
    CU(r, api.cuStreamSynchronize(r->stream));           /* done reading the others' src */
    if (group_barrier(g)) return rfail(r, "all-gather abandoned: another rank failed");
    return 0;
}

/* ---------------- data parallelism, ZeRO-1 (multi-process mode) ---------------- */
/* A dp step runs on the collectives' stream in the compute stream's order, and the compute stream
 * waits for it (on the device): dp_buf is touched by that stream only, and the step is ordered after
 * the tp collectives queued there before it. */
static int dp_begin(BackendRank *r) {
    if (!r->ev_dp_ready) CU(r, api.cuEventCreate(&r->ev_dp_ready, CU_EVENT_DISABLE_TIMING_));
    if (!r->ev_dp_done) CU(r, api.cuEventCreate(&r->ev_dp_done, CU_EVENT_DISABLE_TIMING_));
    CU(r, api.cuEventRecord(r->ev_dp_ready, r->stream));
    CU(r, api.cuStreamWaitEvent(r->comm, r->ev_dp_ready, 0));
    return 0;
}
static int dp_end(BackendRank *r, const char *what) {
    CU(r, api.cuEventRecord(r->ev_dp_done, r->comm));
    CU(r, api.cuStreamWaitEvent(r->stream, r->ev_dp_done, 0));
    r->comm_used = 1;
    if (r->sync_steps) {
        char w[128];
        snprintf(w, sizeof w, "%s (BOOST_CUDA_SYNC=1)", what);
        return host_wait(r, r->comm, w);
    }
    return 0;
}

static int64_t blocks_for(int64_t n) { int64_t b = (n + 255) / 256; return b < 1 ? 1 : b > 4096 ? 4096 : b; }

/* ZeRO-1: buf (an fp32 gradient, elems n) averaged over the dp group, this member receiving its
 * shard [lo, hi) (zero_shard); the rest of buf keeps its local values. NCCL's reduce-scatter needs
 * equal blocks: the input is staged in dp_buf padded to dp*s (s = ceil(n/dp); the padding's results
 * are not used), the shard comes back from dp_buf[dp*s ..]. A bf16 wire stages bf16. All of it on
 * the collectives' stream, after what that stream was made to wait for (the callers below). */
static int reduce_scatter_on_comm(BackendRank *r, const CollArgs *c, void *buf) {
    int bufdt = r->p->tensors[c->buf.tensor].dtype, wire16 = c->dtype == PDT_BF16;
    long long n = c->elems, s = (n + r->dp - 1) / r->dp, cnt;
    int64_t lo, hi;
    zero_shard(n, r->dp_rank, r->dp, &lo, &hi);
    size_t es = wire16 ? 2 : 4;
    if (bufdt != PDT_FP32 || (c->dtype != PDT_FP32 && !wire16) || (size_t)(s * r->dp + s) * 4 > r->dp_bytes)
        return rfail(r, "reduce_scatter of %s: needs an fp32 buffer with an fp32 or bf16 wire within the staging",
                     r->p->tensors[c->buf.tensor].name);
    CUdeviceptr x = (CUdeviceptr)(uintptr_t)buf, in = r->dp_buf, out = r->dp_buf + (size_t)(s * r->dp) * es;
    if (wire16) {
        void *narrow[] = {&x, &in, &n};
        if (launch_on(r, r->comm, "boost_fp32_to_bf16", blocks_for(n), 256, 0, narrow)) return -1;
    } else if (copy_2d(r, r->comm, in, (size_t)n * 4, x, (size_t)n * 4, (size_t)n * 4, 1)) return -1;
    NCCL(r, nccl.ncclReduceScatter((void *)(uintptr_t)in, (void *)(uintptr_t)out, (size_t)s, wire16 ? NCCL_BFLOAT16_ : NCCL_FLOAT32_,
                                   c->avg ? NCCL_AVG_ : NCCL_SUM_, r->dp_comm, r->comm));
    cnt = hi - lo;
    if (cnt > 0) {
        CUdeviceptr dst = x + (size_t)lo * 4;
        if (wire16) {
            void *widen[] = {&out, &dst, &cnt};
            if (launch_on(r, r->comm, "boost_bf16_to_fp32", blocks_for(cnt), 256, 0, widen)) return -1;
        } else if (copy_2d(r, r->comm, dst, (size_t)cnt * 4, out, (size_t)cnt * 4, (size_t)cnt * 4, 1)) return -1;
    }
    return 0;
}

static int reduce_scatter_check(BackendRank *r) {
    if (!r->world) return rfail(r, "zero=1 on the cuda backend runs one process per GPU (BOOST_WORLD_SIZE, mpirun, srun)");
    if (ctx_set(r, "a reduce-scatter")) return -1;
    if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->wrank);
    return 0;
}

/* The reduce-scatter, and the compute stream waits for it at once (BOOST_NO_OVERLAP=1 and
 * backends' callers without the overlap). */
static int cuda_reduce_scatter(BackendRank *r, const CollArgs *c, void *buf) {
    if (r->world && r->dp <= 1) return 0;
    if (reduce_scatter_check(r) || dp_begin(r) || reduce_scatter_on_comm(r, c, buf)) return -1;
    return dp_end(r, "a reduce-scatter");
}

/* Overlapped: issued on the collectives' stream after the work issued so far (the gradient is
 * final), its end recorded in ev_done[step]; the compute stream goes on, and waits for it in
 * cuda_coll_wait before the gradient's next use (the executor puts that wait at the end of the
 * backward: the gradient norm and AdamW read it). */
static int cuda_reduce_scatter_issue(BackendRank *r, int step, const CollArgs *c, void *buf) {
    if (r->world && r->dp <= 1) return 0;
    if (reduce_scatter_check(r)) return -1;
    CUevent ready, done;
    if (step_event(r, r->ev_ready, step, &ready) || step_event(r, r->ev_done, step, &done)) return -1;
    CU(r, api.cuEventRecord(ready, r->stream));
    CU(r, api.cuStreamWaitEvent(r->comm, ready, 0));
    if (reduce_scatter_on_comm(r, c, buf)) return -1;
    CU(r, api.cuEventRecord(done, r->comm));
    r->comm_used = 1;
    if (r->sync_steps) return host_wait(r, r->comm, "a reduce-scatter (BOOST_CUDA_SYNC=1)");
    return 0;
}

/* ZeRO-1, after AdamW updated this rank's shard: every dp member's shard of param buf to all
 * members (an all-gather into dp_buf, padded to dp*s elements). A bf16 param's bf16 copy travels
 * (AdamW wrote the shard's copy from the shard's fp32 masters; the masters stay sharded: each rank
 * holds s of them), 2 bytes an element; an fp32 param is its own master, whole on every rank, and
 * travels as fp32. All of it on the collectives' stream, after what that stream was made to wait
 * for (the callers below). */
static int gather_shards_check(BackendRank *r, const CollArgs *c) {
    if (!r->world) return rfail(r, "zero=1 on the cuda backend runs one process per GPU (BOOST_WORLD_SIZE, mpirun, srun)");
    if (ctx_set(r, "gathering the updated shards")) return -1;
    if (r->dead) return rfail(r, "rank %d: NCCL was aborted after an earlier failure", r->wrank);
    const PlanTensor *T = &r->p->tensors[c->buf.tensor];
    long long n = c->elems, s = (n + r->dp - 1) / r->dp;
    if (T->kind != TK_PARAM || n != numel(T) || (size_t)(s * r->dp) * 4 > r->dp_bytes)
        return rfail(r, "gather_shards of %s: needs a whole parameter (%lld elements) within the staging", T->name, n);
    return 0;
}

static int gather_shards_on_comm(BackendRank *r, const CollArgs *c, void *buf) {
    const PlanTensor *T = &r->p->tensors[c->buf.tensor];
    long long n = c->elems, s = (n + r->dp - 1) / r->dp, cnt;
    int64_t lo, hi;
    zero_shard(n, r->dp_rank, r->dp, &lo, &hi);
    /* the param as it is used: the bf16 copy, or the whole fp32 master of an fp32 param */
    size_t es = T->dtype == PDT_BF16 ? 2 : 4;
    CUdeviceptr whole = T->dtype == PDT_BF16 ? (CUdeviceptr)(uintptr_t)buf : r->master + r->master_off[T->param] * 4;
    CUdeviceptr mine = r->dp_buf + (size_t)(r->dp_rank * s) * es;
    cnt = hi - lo;
    if (cnt > 0 && copy_2d(r, r->comm, mine, (size_t)cnt * es, whole + (size_t)lo * es, (size_t)cnt * es, (size_t)cnt * es, 1)) return -1;
    NCCL(r, nccl.ncclAllGather((void *)(uintptr_t)mine, (void *)(uintptr_t)r->dp_buf, (size_t)s, es == 2 ? NCCL_BFLOAT16_ : NCCL_FLOAT32_,
                               r->dp_comm, r->comm));
    return copy_2d(r, r->comm, whole, (size_t)n * es, r->dp_buf, (size_t)n * es, (size_t)n * es, 1);
}

/* The gather, and the compute stream waits for it at once (BOOST_NO_OVERLAP=1, callers without
 * the overlap). */
static int cuda_gather_shards(BackendRank *r, const CollArgs *c, void *buf) {
    if (r->world && r->dp <= 1) return 0;
    if (gather_shards_check(r, c) || dp_begin(r) || gather_shards_on_comm(r, c, buf)) return -1;
    return dp_end(r, "gathering the updated shards");
}

/* Overlapped: issued on the collectives' stream after the AdamW update (the work issued so far),
 * its end recorded in ev_done[step]; the compute stream waits for it in cuda_coll_wait before the
 * next pass's first step that reads the param (the executor places that wait, runtime/exec.c). The
 * dp staging is used by the collectives' stream only, so the gathers and the next backward's
 * reduce-scatters reuse it in that stream's order. */
static int cuda_gather_shards_issue(BackendRank *r, int step, const CollArgs *c, void *buf) {
    if (r->world && r->dp <= 1) return 0;
    if (gather_shards_check(r, c)) return -1;
    CUevent ready, done;
    if (step_event(r, r->ev_ready, step, &ready) || step_event(r, r->ev_done, step, &done)) return -1;
    CU(r, api.cuEventRecord(ready, r->stream));
    CU(r, api.cuStreamWaitEvent(r->comm, ready, 0));
    if (gather_shards_on_comm(r, c, buf)) return -1;
    CU(r, api.cuEventRecord(done, r->comm));
    r->comm_used = 1;
    if (r->sync_steps) return host_wait(r, r->comm, "gathering the updated shards (BOOST_CUDA_SYNC=1)");
    return 0;
}

/* ---------------- CUDA graphs (BOOST_CUDA_GRAPH=1, tp=1) ---------------- */
/* The plan is static, so a pass issues the same launches with the same arguments every time: the
 * second pass of a kind is captured (the first one looks the kernels up and fills what is cached),
 * the third and later ones replay the graph with one launch. The batch upload and the AdamW
 * step, whose scalars change, stay outside. */
static int cuda_pass_begin(BackendRank *r, int key) {
    if (!r->graphs || key < 0 || key > 1) return 0;
    if (ctx_set(r, "a pass")) return -1;
    if (r->graph_exec[key]) {
        CU(r, api.cuGraphLaunch(r->graph_exec[key], r->stream));
        return 1;
    }
    if (r->graph_seen[key]++ == 0) return 0;
    CU(r, api.cuStreamBeginCapture_v2(r->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL_));
    r->capturing = 1;
    return 0;
}

static int cuda_pass_end(BackendRank *r, int key) {
    if (!r->capturing) return 0;
    r->capturing = 0;
    CUgraph graph = NULL;
    CUresult rc = api.cuStreamEndCapture(r->stream, &graph);
    if (rc == 0) rc = api.cuGraphInstantiateWithFlags(&r->graph_exec[key], graph, 0);
    if (graph) api.cuGraphDestroy(graph);
    if (rc) {
        r->graphs = 0;
        r->graph_exec[key] = NULL;
        return rfail(r, "BOOST_CUDA_GRAPH=1: capturing the %s pass as a CUDA graph failed (%s): run without "
                     "BOOST_CUDA_GRAPH", key ? "training" : "forward", cu_str(rc));
    }
    CU(r, api.cuGraphLaunch(r->graph_exec[key], r->stream));   /* capturing ran nothing: run it now */
    return 0;
}

/* ---------------- host copies ---------------- */
static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);   /* NaN stays NaN */
    u += 0x7fff + ((u >> 16) & 1);                                           /* round to nearest even */
    return (uint16_t)(u >> 16);
}
static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Device -> host after the compute stream's work so far: the one host wait of a read-back (the
 * copy to pageable memory returns when it is done). Multi-process mode polls first (host_wait), so
 * a dead peer ends the wait instead of hanging in it. */
static int read_back(BackendRank *r, void *host, CUdeviceptr src, size_t bytes, const char *what) {
    if (r->world) {
        char w[160];
        snprintf(w, sizeof w, "the steps before reading %.100s", what);
        if (host_wait(r, r->stream, w)) return -1;
    }
    CU(r, api.cuMemcpyDtoHAsync_v2(host, src, bytes, r->stream));
    return 0;
}

/* The fp32 view of tensor t: params read their master weights (zero=1, a bf16 param: the bf16
 * copy, then cuda_to_host puts the shard's masters over it). */
static CUdeviceptr fp32_source(BackendRank *r, int t, int *is_bf16) {
    const PlanTensor *T = &r->p->tensors[t];
    *is_bf16 = 0;
    if (T->kind == TK_PARAM && !(r->zero && T->dtype == PDT_BF16)) return r->master + r->master_off[T->param] * 4;
    *is_bf16 = T->dtype == PDT_BF16;
    return r->tptr[t];
}

/* zero=1, a bf16 param: the masters of this rank's shard into host[lo, hi). */
static int shard_masters_to_host(BackendRank *r, const PlanTensor *T, float *host) {
    int64_t lo, hi, mi, si;
    own_range(r, numel(T), &lo, &hi);
    state_index(r, T->param, lo, lo, &mi, &si);
    return hi > lo ? read_back(r, host + lo, r->master + mi * 4, (size_t)(hi - lo) * 4, T->name) : 0;
}

static int cuda_to_host(BackendRank *r, int t, float *host) {
    if (ctx_set(r, "a copy to the host")) return -1;
    const PlanTensor *T = &r->p->tensors[t];
    int64_t n = numel(T);
    int bf;
    CUdeviceptr src = fp32_source(r, t, &bf);
    if (T->dtype == PDT_I32 && T->kind != TK_PARAM) {
        int32_t *tmp = malloc(n * 4);
        if (!tmp) return rfail(r, "out of memory");
        int rc = read_back(r, tmp, src, n * 4, T->name);
        for (int64_t i = 0; i < n; i++) host[i] = (float)tmp[i];
        free(tmp);
        return rc;
    }
    if (!bf) return read_back(r, host, src, n * 4, T->name);
    uint16_t *tmp = malloc(n * 2);
    if (!tmp) return rfail(r, "out of memory");
    int rc = read_back(r, tmp, src, n * 2, T->name);
    for (int64_t i = 0; i < n; i++) host[i] = bf16_to_f32(tmp[i]);
    free(tmp);
    if (!rc && T->kind == TK_PARAM) rc = shard_masters_to_host(r, T, host);   /* zero=1: exact in the shard */
    return rc;
}

/* Host -> device in the compute stream's order: the host data is staged at the call (pageable
 * memory), so the caller may reuse it at once, and nothing waits for the device. */
static int upload(BackendRank *r, CUdeviceptr dst, const float *host, int64_t n, int as_bf16) {
    if (!as_bf16) { CU(r, api.cuMemcpyHtoDAsync_v2(dst, host, n * 4, r->stream)); return 0; }
    uint16_t *tmp = malloc(n * 2);
    if (!tmp) return rfail(r, "out of memory");
    for (int64_t i = 0; i < n; i++) tmp[i] = f32_to_bf16(host[i]);
    CUresult rc = api.cuMemcpyHtoDAsync_v2(dst, tmp, n * 2, r->stream);
    free(tmp);
    CU(r, rc);
    return 0;
}

static int cuda_from_host(BackendRank *r, int t, const float *host) {
    if (ctx_set(r, "a copy from the host")) return -1;
    const PlanTensor *T = &r->p->tensors[t];
    int64_t n = numel(T);
    if (T->kind == TK_PARAM) {   /* master weights (zero=1, bf16 params: the shard's) and, for bf16 params, the bf16 copy */
        int64_t lo = 0, hi = n, mi = r->master_off[T->param], si;
        if (r->zero && T->dtype == PDT_BF16) {
            own_range(r, n, &lo, &hi);
            state_index(r, T->param, lo, lo, &mi, &si);
        }
        if (hi > lo && upload(r, r->master + mi * 4, host + lo, hi - lo, 0)) return -1;
        if (T->dtype == PDT_BF16 && upload(r, r->tptr[t], host, n, 1)) return -1;
        return 0;
    }
    if (T->dtype == PDT_I32) {
        int32_t *tmp = malloc(n * 4);
        if (!tmp) return rfail(r, "out of memory");
        for (int64_t i = 0; i < n; i++) tmp[i] = (int32_t)host[i];
        CUresult rc = api.cuMemcpyHtoDAsync_v2(r->tptr[t], tmp, n * 4, r->stream);
        free(tmp);
        CU(r, rc);
        return 0;
    }
    return upload(r, r->tptr[t], host, n, T->dtype == PDT_BF16);
}

static int cuda_set_i32(BackendRank *r, int t, const int32_t *host) {
    if (ctx_set(r, "a copy of int32 data")) return -1;
    CU(r, api.cuMemcpyHtoDAsync_v2(r->tptr[t], host, numel(&r->p->tensors[t]) * 4, r->stream));
    return 0;
}

/* ---------------- optimizer ---------------- */
static int cuda_adamw(BackendRank *r, float lr, float grad_scale, int t_step) {
    if (ctx_set(r, "the AdamW update")) return -1;
    const Plan *p = r->p;
    float b1 = (float)p->beta1, b2 = (float)p->beta2, eps = (float)p->adam_eps;
    float bias1 = (float)(1.0 - pow(p->beta1, t_step)), bias2 = (float)(1.0 - pow(p->beta2, t_step));
    if (r->zero && r->adam_nchunks > 0 && get_fn(KERNEL_ADAMW_SHARDED)) {   /* every shard in one launch */
        float wd = (float)p->weight_decay;
        void *args[] = {&r->master, &r->params, &r->grads, &r->adam_m, &r->adam_v, &r->adam_chunks,
                        &lr, &b1, &b2, &eps, &wd, &grad_scale, &bias1, &bias2};
        if (launch(r, KERNEL_ADAMW_SHARDED, r->adam_nchunks, 256, 0, args)) return -1;
        return after_step(r, "adamw");
    }
    if (!r->zero && r->adam_nchunks > 0 && get_fn(KERNEL_ADAMW_MULTI)) {   /* every parameter in one launch */
        float wd = (float)p->weight_decay;
        void *args[] = {&r->master, &r->params, &r->grads, &r->adam_m, &r->adam_v, &r->adam_chunks,
                        &lr, &b1, &b2, &eps, &wd, &grad_scale, &bias1, &bias2};
        if (launch(r, KERNEL_ADAMW_MULTI, r->adam_nchunks, 256, 0, args)) return -1;
        return after_step(r, "adamw");
    }
    for (int i = 0; i < p->nparams; i++) {   /* a kernels.cu from before the multi-tensor kernels */
        const PlanParam *pp = &p->params[i];
        int64_t lo, hi, mi, si;
        own_range(r, pp->rows * pp->cols, &lo, &hi);   /* zero=1: this dp rank's shard */
        state_index(r, i, lo, lo, &mi, &si);
        int64_t off = r->param_off[i] + lo;
        long long n = hi - lo;
        if (n <= 0) continue;
        CUdeviceptr master = r->master + mi * 4, grad = r->grads + off * 4, m = r->adam_m + si * 4, v = r->adam_v + si * 4;
        CUdeviceptr param = p->tensors[pp->tensor].dtype == PDT_BF16 ? r->params + off * 2 : 0;
        float wd = pp->decay ? (float)p->weight_decay : 0.f;
        void *args[] = {&master, &param, &grad, &m, &v, &n, &lr, &b1, &b2, &eps, &wd, &grad_scale, &bias1, &bias2};
        int64_t blocks = (n + 255) / 256;
        if (blocks > 4096) blocks = 4096;
        if (launch(r, "adamw_fp32_master_bf16", blocks, 256, 0, args)) return -1;
    }
    return after_step(r, "adamw");   /* in stream order: the next step's work needs no host wait */
}

/* Sum of squares of n fp32 values at x (device), added in double on the host in a fixed order. */
static int dev_sumsq(BackendRank *r, CUdeviceptr x, long long n, double *out) {
    CUdeviceptr part = r->scratch;
    void *args[] = {&x, &n, &part};
    if (launch(r, "boost_sumsq_fp32", SUMSQ_BLOCKS, 256, 0, args)) return -1;
    float h[SUMSQ_BLOCKS];
    if (read_back(r, h, part, sizeof h, "the gradient norm")) return -1;
    double s = 0;
    for (int i = 0; i < SUMSQ_BLOCKS; i++) s += h[i];
    *out = s;
    return 0;
}

static int sq_blocks(int64_t n) { return n >= (int64_t)SUMSQ_BLOCKS * 256 ? SUMSQ_BLOCKS : (int)((n + 255) / 256); }

/* zero=1: the sum of squares over this rank's ranges (sq_ranges), on the device when their partial
 * sums fit the scratch, else from a read-back of the gradients. */
static double zero_sq_norm(BackendRank *r) {
    int max = (int)(r->scratch_bytes / (SUMSQ_BLOCKS * sizeof(float)));
    double total = 0;
    if (r->nsq <= max) {   /* range i's partial sums at scratch[i*SUMSQ_BLOCKS ..], as many as its blocks */
        for (int i = 0; i < r->nsq; i++) {
            CUdeviceptr x = r->grads + r->sq_off[i] * 4, part = r->scratch + (size_t)i * SUMSQ_BLOCKS * sizeof(float);
            long long n = r->sq_n[i];
            void *args[] = {&x, &n, &part};
            if (launch(r, "boost_sumsq_fp32", sq_blocks(n), 256, 0, args)) return NAN;
        }
        float *h = malloc((size_t)(r->nsq ? r->nsq : 1) * SUMSQ_BLOCKS * sizeof *h);
        if (!h || (r->nsq && read_back(r, h, r->scratch, (size_t)r->nsq * SUMSQ_BLOCKS * sizeof *h, "the gradient norm"))) {
            free(h);
            return NAN;
        }
        for (int i = 0; i < r->nsq; i++) {
            double part = 0;
            for (int b = 0; b < sq_blocks(r->sq_n[i]); b++) part += h[(size_t)i * SUMSQ_BLOCKS + b];
            total += r->sq_sign[i] * part;
        }
        free(h);
        return total < 0 ? 0 : total;
    }
    float *g = malloc((size_t)r->nelems * sizeof *g);
    if (!g || read_back(r, g, r->grads, (size_t)r->nelems * 4, "the gradients for their norm")) { free(g); return NAN; }
    for (int i = 0; i < r->nsq; i++) {
        double part = 0;
        for (int64_t j = 0; j < r->sq_n[i]; j++) part += (double)g[r->sq_off[i] + j] * g[r->sq_off[i] + j];
        total += r->sq_sign[i] * part;
    }
    free(g);
    return total < 0 ? 0 : total;
}

/* Expert parallelism, dp ranks 1..ep-1 of the first ep group (the executor asks only those and dp
 * rank 0): the expert params' gradients, which this ep rank alone holds there (dp rank 0 counts
 * everything else). A replicated (rep=1) block counts on tp rank 0 only, summed on the host. */
static double ep_sq_norm(BackendRank *r) {
    const Plan *p = r->p;
    double total = 0;
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        int expert = 0, rep = 0;
        for (int q = 0; q < pp->nparts; q++) {
            expert |= p->parts[pp->first_part + q].ep >= 0;
            rep |= p->parts[pp->first_part + q].rep;
        }
        if (!expert) continue;
        if (!rep || r->rank == 0) {
            double x = 0;
            if (dev_sumsq(r, r->grads + r->param_off[i] * 4, (long long)(pp->rows * pp->cols), &x)) return NAN;
            total += x;
            continue;
        }
        float *g = malloc((size_t)(pp->rows * pp->cols) * sizeof *g);
        if (!g || read_back(r, g, r->grads + r->param_off[i] * 4, (size_t)(pp->rows * pp->cols) * 4, pp->name)) {
            free(g);
            return NAN;
        }
        for (int q = 0; q < pp->nparts; q++) {
            const PlanPart *pt = &p->parts[pp->first_part + q];
            if (pt->rep || pt->ep < 0) continue;
            int64_t h = rank_int(pt->r1, r->rank) - rank_int(pt->r0, r->rank);
            int64_t w = rank_int(pt->c1, r->rank) - rank_int(pt->c0, r->rank);
            int64_t lr = rank_int(pt->lr, r->rank), lc = rank_int(pt->lc, r->rank);
            for (int64_t a = 0; a < h; a++)
                for (int64_t b = 0; b < w; b++) {
                    double v = g[(lr + a) * pp->cols + lc + b];
                    total += v * v;
                }
        }
        free(g);
    }
    return total;
}

static double cuda_grad_sq_norm(BackendRank *r) {
    if (ctx_set(r, "the gradient norm")) return NAN;
    if (r->zero) return zero_sq_norm(r);
    if (r->ep > 1 && r->dp_rank > 0) return ep_sq_norm(r);
    const Plan *p = r->p;
    double total = 0;
    if (r->nrep > 0) {   /* all grads, then each replicated range, into scratch; one read-back */
        int nr = 1 + r->nrep;
        for (int i = 0; i < nr; i++) {
            CUdeviceptr x = i ? r->grads + r->rep_off[i - 1] * 4 : r->grads;
            long long n = i ? (long long)r->rep_n[i - 1] : (long long)r->nelems;
            CUdeviceptr part = r->scratch + (size_t)i * SUMSQ_BLOCKS * sizeof(float);
            void *args[] = {&x, &n, &part};
            if (launch(r, "boost_sumsq_fp32", SUMSQ_BLOCKS, 256, 0, args)) return NAN;
        }
        float *h = malloc((size_t)nr * SUMSQ_BLOCKS * sizeof *h);
        if (!h || read_back(r, h, r->scratch, (size_t)nr * SUMSQ_BLOCKS * sizeof *h, "the gradient norm")) {
            free(h);
            return NAN;
        }
        double rep = 0;
        for (int i = 0; i < SUMSQ_BLOCKS; i++) total += h[i];
        for (int i = SUMSQ_BLOCKS; i < nr * SUMSQ_BLOCKS; i++) rep += h[i];
        free(h);
        total -= rep;
        return total < 0 ? 0 : total;
    }
    if (dev_sumsq(r, r->grads, (long long)r->nelems, &total)) return NAN;   /* padding is zero */
    if (r->rank == 0 || r->nrep == 0) return total;
    /* too many replicated ranges for the scratch: read back and summed on the host */
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        float *g = NULL;
        for (int q = 0; q < pp->nparts; q++) {
            const PlanPart *pt = &p->parts[pp->first_part + q];
            if (!pt->rep) continue;
            if (!g) {
                g = malloc(pp->rows * pp->cols * sizeof *g);
                if (!g || read_back(r, g, r->grads + r->param_off[i] * 4, pp->rows * pp->cols * 4, pp->name)) {
                    free(g);
                    return NAN;
                }
            }
            int64_t h = rank_int(pt->r1, r->rank) - rank_int(pt->r0, r->rank);
            int64_t w = rank_int(pt->c1, r->rank) - rank_int(pt->c0, r->rank);
            int64_t lr = rank_int(pt->lr, r->rank), lc = rank_int(pt->lc, r->rank);
            for (int64_t a = 0; a < h; a++)
                for (int64_t b = 0; b < w; b++) {
                    double x = g[(lr + a) * pp->cols + lc + b];
                    total -= x * x;
                }
        }
        free(g);
    }
    return total < 0 ? 0 : total;
}

static int cuda_zero_grads(BackendRank *r) {
    if (ctx_set(r, "zeroing the gradients")) return -1;
    CU(r, api.cuMemsetD32Async(r->grads, 0, r->nelems, r->stream));
    return 0;
}

static int cuda_state_to_host(BackendRank *r, int param, int slot, float *host) {
    if (ctx_set(r, "reading optimizer state")) return -1;
    const PlanParam *pp = &r->p->params[param];
    int64_t n = pp->rows * pp->cols, lo, hi, mi, si;
    own_range(r, n, &lo, &hi);   /* zero=1: this dp rank's shard, zeros elsewhere (the Engine sums over dp) */
    state_index(r, param, lo, lo, &mi, &si);
    CUdeviceptr src = (slot == 1 ? r->adam_m : r->adam_v) + si * 4;
    if (hi > lo && read_back(r, host + lo, src, (size_t)(hi - lo) * 4, pp->name)) return -1;
    for (int64_t i = 0; i < n; i++) if (i < lo || i >= hi) host[i] = 0;
    return 0;
}

static int cuda_state_from_host(BackendRank *r, int param, int slot, const float *host) {
    if (ctx_set(r, "writing optimizer state")) return -1;
    const PlanParam *pp = &r->p->params[param];
    int64_t lo, hi, mi, si;
    own_range(r, pp->rows * pp->cols, &lo, &hi);   /* zero=1: the shard's part of the full tensor in host */
    state_index(r, param, lo, lo, &mi, &si);
    CUdeviceptr dst = (slot == 1 ? r->adam_m : r->adam_v) + si * 4;
    if (hi > lo) CU(r, api.cuMemcpyHtoDAsync_v2(dst, host + lo, (size_t)(hi - lo) * 4, r->stream));
    return 0;
}

static const char *cuda_last_error(BackendRank *r) { return r->err; }

/* Pipeline stages: the activation buffers in arena slot `slot` from now on. Only host-side pointers
 * move (the grouped GEMMs' and the local all-reduce's tables have one copy per slot); work already
 * issued keeps its own slot's memory, in stream order. */
static int cuda_arena_slot(BackendRank *r, int slot) {
    if (slot < 0 || slot >= r->nslots) return rfail(r, "arena slot %d is outside the plan's %d", slot, r->nslots);
    if (slot == r->slot) return 0;
    r->slot = slot;
    point_acts(r, slot);
    return 0;
}

const Backend backend_cuda = {
    .name = "cuda",
    .elem_bytes_fp32_only = 0,
    .rank_open = cuda_rank_open,
    .rank_close = cuda_rank_close,
    .tensor_ptr = cuda_tensor_ptr,
    .gemm = cuda_gemm,
    .grouped_gemm = cuda_grouped_gemm,
    .kernel = cuda_kernel,
    .allreduce = cuda_allreduce,
    .allgather = cuda_allgather,
    .reduce_scatter = cuda_reduce_scatter,
    .reduce_scatter_issue = cuda_reduce_scatter_issue,
    .gather_shards = cuda_gather_shards,
    .gather_shards_issue = cuda_gather_shards_issue,
    .alltoall = cuda_alltoall,
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
    .world_allreduce_host = cuda_world_allreduce_host,
    .allreduce_issue = cuda_allreduce_issue,
    .allgather_issue = cuda_allgather_issue,
    .coll_wait = cuda_coll_wait,
    .pass_begin = cuda_pass_begin,
    .pass_end = cuda_pass_end,
    .arena_slot = cuda_arena_slot,
};
