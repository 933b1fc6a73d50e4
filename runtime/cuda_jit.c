/* cuda_jit.c: the CUDA backend's device context and kernel module, one per process: kernels.cu
 * JIT-compiled with NVRTC for the device's arch (an on-disk cubin cache, common/nvrtc.h), its
 * kernels looked up once and launched by name; the plan check against the catalog; boost tune's
 * extra modules and timed launches. */
#include "runtime/cuda_internal.h"

pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
CudaShared shared;

/* Makes the shared context current on this thread; its failure names the call and what was next. */
int ctx_set(BackendRank *r, const char *what) {
    CUresult rc = api.cuCtxSetCurrent(shared.ctx);
    if (rc) return rfail(r, "cuCtxSetCurrent failed before %s: %s (CUDA error %d)", what, cu_str(rc), (int)rc);
    return 0;
}
int ctx_set_err(char *err, size_t errlen, const char *what) {
    CUresult rc = api.cuCtxSetCurrent(shared.ctx);
    if (rc) snprintf(err, errlen, "cuCtxSetCurrent failed before %s: %s (CUDA error %d)", what, cu_str(rc), (int)rc);
    return rc ? -1 : 0;
}

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

/* Adds (name, fn) to the function cache, taking name (a heap string of any length); under
 * shared_mu. Returns 0, or -1 (name freed) when memory ran out: the kernel is then looked up again
 * at its next launch, nothing worse. */
static int fn_cache_add(char *name, CUfunction fn) {
    if (shared.nfns == shared.capfns) {
        int cap = shared.capfns ? 2 * shared.capfns : 64;
        FnEntry *n = realloc(shared.fns, cap * sizeof *n);
        if (!n) { free(name); return -1; }
        shared.fns = n;
        shared.capfns = cap;
    }
    shared.fns[shared.nfns].name = name;
    shared.fns[shared.nfns].dyn_max = 0;
    shared.fns[shared.nfns++].fn = fn;
    return 0;
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
        if (k == 0) continue;
        char *name = strndup(p, k);
        if (!name) return;
        CUfunction fn = NULL;
        if (api.cuModuleGetFunction(&fn, shared.mod, name) != 0 || !fn) { free(name); continue; }
        if (fn_cache_add(name, fn)) return;
    }
}

/* Make the process's context current; open the device, compile and load kernels.cu once. */
int shared_open(const Plan *p, char *err, size_t errlen) {
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

void shared_close(void) {
    pthread_mutex_lock(&shared_mu);
    if (shared.users > 0 && --shared.users == 0) {
        api.cuModuleUnload(shared.mod);
        for (int i = 0; i < shared.nfns; i++) free(shared.fns[i].name);
        free(shared.fns); shared.fns = NULL; shared.nfns = shared.capfns = 0;
        api.cuDevicePrimaryCtxRelease(shared.dev);
    }
    pthread_mutex_unlock(&shared_mu);
}

CUfunction get_fn(const char *name) {
    CUfunction fn = NULL;
    pthread_mutex_lock(&shared_mu);
    for (int i = 0; i < shared.nfns; i++)
        if (!strcmp(shared.fns[i].name, name)) { fn = shared.fns[i].fn; break; }
    CUfunction found = NULL;
    if (!fn && api.cuModuleGetFunction(&found, shared.mod, name) == 0 && found) {
        char *copy = strdup(name);   /* cached under its whole name, however long */
        if (copy) fn_cache_add(copy, found);
        fn = found;
    }
    pthread_mutex_unlock(&shared_mu);
    return fn;
}

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

int launch_on(BackendRank *r, CUstream s, const char *name, int64_t grid, int64_t block, int64_t smem, void **args) {
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

int launch(BackendRank *r, const char *name, int64_t grid, int64_t block, int64_t smem, void **args) {
    return launch_on(r, r->stream, name, grid, block, smem, args);
}

int kernel_args(BackendRank *r, const KernelArgs *k, void **ops, LaunchArgs *la) {
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
