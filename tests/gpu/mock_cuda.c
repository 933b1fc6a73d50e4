/* mock_cuda.c: a stand-in for libcuda.so.1 and libcublas.so.13 on a machine without a GPU, so the
 * CUDA backend (runtime/cuda.c) runs end to end in tests. Device memory is host memory; cuBLAS GEMMs
 * are plain loops with cuBLAS's column-major semantics (bf16 or fp32 operands, fp32 accumulation;
 * the type mixes cuBLAS's tables refuse answer NOT_SUPPORTED, see types_refused());
 * kernels run on the CPU emulator (tests/gpu/cuda_emu.hpp): a "module load" compiles the kernels.cu
 * files listed in $BOOST_EMU_SOURCE (colon-separated) with g++ and looks kernels up by name there;
 * the NVRTC cubin it is handed is ignored. Only the functions runtime/cuda_api.h loads exist.
 *
 * Streams are modelled so that a missing dependency shows: work is queued per stream and runs only
 * when the host demands it (a synchronize, a blocking copy, a query), in stream order; an event
 * records a position in its stream, and a wait on it runs the other stream up to that position and
 * no further. Everything not demanded stays pending, so a consumer that does not wait for a
 * collective on another stream reads the buffer before the collective ran (a wrong answer), and a
 * step that overwrites a buffer an unwaited collective still has to read changes what it sums. A
 * device-wide drain (blocking copies: the legacy default stream) demands the streams in the order
 * they were created. While a host wait is blocked on a peer (an NCCL stand-in op not ready), the
 * device runs the other streams' queued work too, as a GPU would: pipeline stages in one process
 * feed each other's peers. A wait cycle is reported as a device deadlock. mock_cuda_counters() counts the
 * host waits (synchronizations and copies that block the host) for tests/gpu/check_syncs.c, and
 * mock_cuda_enqueue_hook() lets the NCCL stand-in (tests/gpu/mock_nccl.c) queue collectives on a
 * stream. Device memory is counted: with $MOCK_CUDA_MEM naming a file, the process appends at exit
 * one line "rank R allocated B peak P" (R from $BOOST_RANK, B the bytes of every cuMemAlloc, P the
 * most allocated at once), for tests/sh/nvrtc_mock_dp.sh. Built as a shared library by
 * tests/sh/nvrtc_mock_*.sh. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { OK = 0, ERR_INVALID_VALUE = 1, ERR_ILLEGAL_STATE = 401, ERR_NOT_FOUND = 500, ERR_NOT_READY = 600,
       ERR_LAUNCH = 719 };

/* ---- modules: the emulated kernels, one shared object per source ---- */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;   /* all mock state; ops run under it */
static void *objs[16];
static int nobjs;
static char why[512];

/* A CUfunction: the emulator's launcher, the sizes of the kernel's parameters (to copy them at
 * launch, as the driver does), the emulator's setter of the next launch's dynamic shared memory,
 * and the function's limit on it (48 KiB until cuFuncSetAttribute raises it). */
typedef struct {
    int (*launch)(unsigned, unsigned, void **);
    int (*sizes)(unsigned *);
    void (*set_dyn)(unsigned);
    int max_dyn;
} MockFn;

/* The emulated device's arch ($BOOST_MOCK_ARCH, default sm_90): compute capability and the most
 * shared memory one block may opt in to (CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN;
 * the CUDA C Programming Guide's table of compute capabilities). */
typedef struct { const char *arch; int major, minor, optin; } MockArch;
static const MockArch ARCHS[] = {
    {"sm_80", 8, 0, 163 * 1024}, {"sm_86", 8, 6, 99 * 1024}, {"sm_89", 8, 9, 99 * 1024}, {"sm_90", 9, 0, 227 * 1024},
};
static const MockArch *mock_arch(void) {
    const char *a = getenv("BOOST_MOCK_ARCH");
    for (size_t i = 0; a && i < sizeof ARCHS / sizeof ARCHS[0]; i++) if (!strcmp(ARCHS[i].arch, a)) return &ARCHS[i];
    if (a && *a) fprintf(stderr, "mock_cuda: BOOST_MOCK_ARCH=%s unknown (sm_80, sm_86, sm_89, sm_90): sm_90\n", a);
    return &ARCHS[3];
}

/* FNV-1a of a file's bytes, continuing from h. */
static unsigned long long hash_file(const char *path, unsigned long long h) {
    FILE *f = fopen(path, "rb");
    if (!f) return h;
    int c;
    while ((c = getc(f)) != EOF) { h ^= (unsigned char)c; h *= 0x100000001b3ull; }
    fclose(f);
    return h;
}

static int build_objects(void) {
    if (nobjs) return 0;
    const char *list = getenv("BOOST_EMU_SOURCE");
    const char *hpp = getenv("BOOST_EMU_HPP");
    if (!list || !hpp) { snprintf(why, sizeof why, "BOOST_EMU_SOURCE / BOOST_EMU_HPP not set"); return -1; }
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", list);
    char dir[] = "/tmp/boost-mock.XXXXXX";
    if (!mkdtemp(dir)) return -1;
    char path[600], cmd[3000];
    snprintf(path, sizeof path, "%s/cuda_bf16.h", dir);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    int i = 0;
    for (char *src = strtok(buf, ":"); src && i < 16; src = strtok(NULL, ":"), i++) {
        /* the source plus, per kernel (the name is the line after `extern "C" __global__`), an
         * EMU_ENTRY and a function that reports the sizes of its parameters */
        FILE *in = fopen(src, "r");
        if (!in) { snprintf(why, sizeof why, "%s: cannot read", src); return -1; }
        snprintf(path, sizeof path, "%s/k%d.cu", dir, i);
        FILE *out = fopen(path, "w");
        char line[4096], *names[512];   /* names of any length (a line holds one) */
        int nn = 0, next_is_name = 0;
        while (fgets(line, sizeof line, in)) {
            fputs(line, out);
            if (next_is_name && nn < 512) {
                size_t k = strcspn(line, "( \t");
                if (k > 0 && (names[nn] = strndup(line, k))) nn++;
            }
            next_is_name = strstr(line, "extern \"C\" __global__") != NULL;
        }
        fprintf(out, "template <class... P> static int mock_param_sizes(void (*)(P...), unsigned *out) {\n"
                     "    unsigned s[] = {(unsigned)sizeof(P)..., 0u};\n"
                     "    for (unsigned i = 0; i < sizeof...(P); i++) out[i] = s[i];\n"
                     "    return (int)sizeof...(P);\n}\n");
        for (int j = 0; j < nn; j++) {
            fprintf(out, "EMU_ENTRY(%s)\nextern \"C\" int emusz_%s(unsigned *o) { return mock_param_sizes(%s, o); }\n",
                    names[j], names[j], names[j]);
            free(names[j]);
        }
        fclose(in); fclose(out);
        /* $BOOST_EMU_CACHE: objects keyed on the emitted source and the emulator header, so the
         * processes of one test run compile each kernels.cu once */
        char cached[560] = "";
        const char *cache = getenv("BOOST_EMU_CACHE");
        if (cache && *cache) {
            snprintf(path, sizeof path, "%s/k%d.cu", dir, i);
            unsigned long long h = hash_file(path, hash_file(hpp, 0xcbf29ce484222325ull));
            snprintf(cached, sizeof cached, "%s/%016llx.so", cache, h);
        }
        if (cached[0] && access(cached, R_OK) == 0) {
            snprintf(path, sizeof path, "%s", cached);
        } else {
            snprintf(cmd, sizeof cmd, "g++ -std=c++17 -O1 -fno-strict-aliasing -fPIC -shared -w -I%s -include %s -x c++ "
                     "%s/k%d.cu -o %s/k%d.so -lpthread", dir, hpp, dir, i, dir, i);
            if (system(cmd) != 0) { snprintf(why, sizeof why, "g++ failed on %s", src); return -1; }
            snprintf(path, sizeof path, "%s/k%d.so", dir, i);
            if (cached[0]) {   /* copy in atomically; a failure only costs the next process a compile */
                snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp '%s' '%s.%d' && mv '%s.%d' '%s'", cache, path, cached,
                         (int)getpid(), cached, (int)getpid(), cached);
                if (system(cmd)) {}
            }
        }
        if (!(objs[nobjs++] = dlopen(path, RTLD_NOW | RTLD_LOCAL))) { snprintf(why, sizeof why, "%s", dlerror()); return -1; }
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);   /* the loaded objects stay mapped */
    if (system(cmd)) {}
    return 0;
}

/* ---- streams, events and the queued work ---- */
enum { OP_KERNEL, OP_GEMM, OP_GROUPED, OP_MEMSET32, OP_COPY2D, OP_COPY, OP_WAIT, OP_HOOK };
typedef struct {
    size_t srcXInBytes, srcY; int srcMemoryType; const void *srcHost; CUdeviceptr srcDevice; void *srcArray; size_t srcPitch;
    size_t dstXInBytes, dstY; int dstMemoryType; void *dstHost; CUdeviceptr dstDevice; void *dstArray; size_t dstPitch;
    size_t WidthInBytes, Height;
} Copy2D;

typedef struct Stream Stream;
typedef struct {
    int ta, tb, m, n, k, at, bt, ct, lda, ldb, ldc, batch;
    long long sA, sB, sC;
    float alpha, beta;
    const void *A, *B;
    void *C;
} GemmOp;

typedef struct Op {
    int kind;
    struct Op *next;
    /* kernel */
    MockFn *fn;
    unsigned grid, block, smem;
    void *params[64];
    int nparams;
    unsigned char *argbuf;
    size_t argbytes;
    /* GEMMs: one, or a grouped call (groups in gg[], device pointer arrays read when it runs) */
    GemmOp g;
    int groups, *gsize;
    GemmOp *gg;
    const void *const *gA;
    const void *const *gB;
    void *const *gC;
    /* copies and memsets (OP_COPY: from a host staging copy taken at the call) */
    Copy2D c2;
    void *dst;
    const void *src;
    size_t n;
    unsigned val;
    unsigned char *staged;
    /* wait: run stream dep until dep_target ops of it completed */
    Stream *dep;
    unsigned long long dep_target;
    /* hook (the NCCL stand-in): 0 done, 1 not ready yet */
    int (*hook)(void *);
    void *hook_arg;
    void (*hook_free)(void *);
} Op;

struct Stream {
    Op *head, *tail;
    int capturing, capture_bad;   /* stream capture: submitted work goes to cap_head instead */
    Op *cap_head, *cap_tail;
    unsigned long long enqueued, completed;
    int running;                /* being advanced (further up the call stack): a wait on it is a cycle */
    CUresult error;             /* sticky: a failed launch */
    Stream *next_created;
};

typedef struct { Stream *s; unsigned long long target; } Event;

static Stream *streams_first, *streams_last;
static long long n_host_waits, n_blocking_copies, n_launches;

/* For tests: host waits (synchronize calls, blocking copies and copies to host memory, which block
 * until the copy ran) and, of those, the blocking copies; kernel and GEMM launches. */
void mock_cuda_counters(long long *host_waits, long long *blocking_copies, long long *launches) {
    pthread_mutex_lock(&mu);
    if (host_waits) *host_waits = n_host_waits;
    if (blocking_copies) *blocking_copies = n_blocking_copies;
    if (launches) *launches = n_launches;
    pthread_mutex_unlock(&mu);
}

static void op_free(Op *op) {
    if (op->kind == OP_HOOK && op->hook_free) op->hook_free(op->hook_arg);
    free(op->argbuf); free(op->gg); free(op->gsize); free(op->staged);
    free(op);
}

static void enqueue(Stream *s, Op *op) {   /* under mu */
    op->next = NULL;
    if (s->capturing) {
        if (s->cap_tail) s->cap_tail->next = op; else s->cap_head = op;
        s->cap_tail = op;
        return;
    }
    if (s->tail) s->tail->next = op; else s->head = op;
    s->tail = op;
    s->enqueued++;
}

static float ldv(const void *p, int type, long long i) {
    if (type == 0) return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static void stv(void *p, int type, long long i, float v) {
    if (type == 0) { ((float *)p)[i] = v; return; }
    uint32_t u;
    memcpy(&u, &v, 4);
    u += 0x7fff + ((u >> 16) & 1);
    ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
}

static int gemm_run(const GemmOp *g, const void *A, const void *B, void *C) {
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            float s = 0;
            for (int l = 0; l < g->k; l++) {
                float a = ldv(A, g->at, g->ta ? (long long)l + (long long)i * g->lda : (long long)i + (long long)l * g->lda);
                float b = ldv(B, g->bt, g->tb ? (long long)j + (long long)l * g->ldb : (long long)l + (long long)j * g->ldb);
                s += a * b;
            }
            long long ci = (long long)i + (long long)j * g->ldc;
            float v = g->alpha * s + (g->beta != 0 ? g->beta * ldv(C, g->ct, ci) : 0.f);
            stv(C, g->ct, ci, v);
        }
    return 0;
}

static int run_until(Stream *s, unsigned long long target);

/* Runs one op: 0 done, 1 not ready (a hook waiting for its peers), or a CUDA error. */
static int exec_op(Op *op) {
    switch (op->kind) {
    case OP_KERNEL:
        if (op->fn->set_dyn) op->fn->set_dyn(op->smem);
        return op->fn->launch(op->grid, op->block, op->params) ? ERR_LAUNCH : 0;
    case OP_GEMM: {
        size_t ea = op->g.at ? 2 : 4, eb = op->g.bt ? 2 : 4, ec = op->g.ct ? 2 : 4;
        for (int i = 0; i < op->g.batch; i++)
            gemm_run(&op->g, (const char *)op->g.A + i * op->g.sA * ea, (const char *)op->g.B + i * op->g.sB * eb,
                     (char *)op->g.C + i * op->g.sC * ec);
        return 0;
    }
    case OP_GROUPED: {
        int idx = 0;
        for (int g = 0; g < op->groups; g++)
            for (int s = 0; s < op->gsize[g]; s++, idx++) gemm_run(&op->gg[g], op->gA[idx], op->gB[idx], op->gC[idx]);
        return 0;
    }
    case OP_MEMSET32:
        for (size_t i = 0; i < op->n; i++) ((unsigned *)op->dst)[i] = op->val;
        return 0;
    case OP_COPY2D:
        for (size_t r = 0; r < op->c2.Height; r++)
            memmove((char *)(uintptr_t)op->c2.dstDevice + r * op->c2.dstPitch,
                    (const char *)(uintptr_t)op->c2.srcDevice + r * op->c2.srcPitch, op->c2.WidthInBytes);
        return 0;
    case OP_COPY:
        memmove(op->dst, op->staged ? op->staged : op->src, op->n);
        return 0;
    case OP_WAIT: return run_until(op->dep, op->dep_target);
    case OP_HOOK: return op->hook(op->hook_arg);
    }
    return ERR_INVALID_VALUE;
}

/* Advance s until `target` of its ops have completed (under mu). 0, 1 (blocked on a hook), or an
 * error: ERR_ILLEGAL_STATE for a wait cycle (on a GPU: a device that never finishes). */
static int run_until(Stream *s, unsigned long long target) {
    if (s->completed >= target) return 0;
    if (s->running) {
        fprintf(stderr, "mock_cuda: device deadlock: a stream waits (through events) on work queued after that wait\n");
        return ERR_ILLEGAL_STATE;
    }
    s->running = 1;
    int rc = 0;
    while (s->completed < target) {
        Op *op = s->head;
        int r = exec_op(op);
        if (r == 1) { rc = 1; break; }
        if (r == ERR_ILLEGAL_STATE) { rc = r; break; }
        if (r && !s->error) s->error = r;
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        op_free(op);
        s->completed++;
    }
    s->running = 0;
    return rc;
}

/* While the host waits on a stream that is blocked on a peer (an NCCL stand-in hook not ready), the
 * device runs the other streams' queued work, as a GPU would (a peer may need it: another stage's
 * send, or its receive). Until then, nothing runs that the host has not demanded. (Under mu.) */
static void progress_blocked(Stream *except) {
    for (Stream *x = streams_first; x; x = x->next_created)
        if (x != except && !x->running && !x->capturing) run_until(x, x->enqueued);
}

/* The host waits until s has completed target ops (polling while a hook is not ready). */
static CUresult wait_stream(Stream *s, unsigned long long target) {
    useconds_t us = 20;   /* doubling to 0.5 ms: waiting ranks leave the cores to the working ones */
    for (;;) {
        pthread_mutex_lock(&mu);
        int r = run_until(s, target);
        if (r == 1) progress_blocked(s);
        CUresult err = s->error;
        pthread_mutex_unlock(&mu);
        if (r == 0) return err;
        if (r != 1) return r;
        usleep(us);
        if (us < 500) us *= 2;
    }
}

enum { ERR_CAPTURE_UNSUPPORTED = 900, ERR_CAPTURE_INVALIDATED = 901 };

/* During a capture, what needs the host or another stream is not allowed: it breaks the capture. */
static int capture_breaks(Stream *s) {   /* under mu; s NULL: any capturing stream */
    int any = 0;
    for (Stream *x = streams_first; x; x = x->next_created)
        if (x->capturing && (!s || x == s)) { x->capture_bad = 1; any = 1; }
    return any;
}

/* Legacy default stream: everything queued so far, stream by stream in creation order. */
static CUresult drain_all(void) {
    pthread_mutex_lock(&mu);
    if (capture_breaks(NULL)) { pthread_mutex_unlock(&mu); return ERR_CAPTURE_UNSUPPORTED; }
    int n = 0;
    for (Stream *s = streams_first; s; s = s->next_created) n++;
    Stream **list = malloc((n + 1) * sizeof *list);
    unsigned long long *targets = malloc((n + 1) * sizeof *targets);
    n = 0;
    for (Stream *s = streams_first; s; s = s->next_created) { list[n] = s; targets[n++] = s->enqueued; }
    pthread_mutex_unlock(&mu);
    CUresult rc = OK;
    for (int i = 0; i < n && rc == OK; i++) rc = wait_stream(list[i], targets[i]);
    free(list); free(targets);
    return rc;
}

static Op *new_op(int kind) {
    Op *op = calloc(1, sizeof *op);
    if (op) op->kind = kind;
    return op;
}

/* Queue op on stream (NULL: the legacy default stream, which waits for all and runs at once). */
static CUresult submit(void *stream, Op *op) {
    if (!op) return 2;
    if (!stream) {
        CUresult rc = drain_all();
        pthread_mutex_lock(&mu);
        int r = exec_op(op);
        pthread_mutex_unlock(&mu);
        op_free(op);
        return rc ? rc : r == 0 ? OK : r == 1 ? ERR_ILLEGAL_STATE : r;
    }
    pthread_mutex_lock(&mu);
    Stream *s = stream;
    if (s->capturing && (op->kind == OP_HOOK || op->kind == OP_WAIT || (op->kind == OP_COPY && op->staged))) {
        s->capture_bad = 1;   /* not modelled in a capture (host staging, other streams, collectives) */
        pthread_mutex_unlock(&mu);
        op_free(op);
        return ERR_CAPTURE_UNSUPPORTED;
    }
    enqueue(s, op);
    pthread_mutex_unlock(&mu);
    return OK;
}

/* For the NCCL stand-in: queue fn(arg) on stream; it runs when the stream is advanced to it and
 * returns 0 when done or 1 while it waits for its peers (the stream stays there). */
int mock_cuda_enqueue_hook(void *stream, int (*fn)(void *), void *arg, void (*free_arg)(void *)) {
    Op *op = new_op(OP_HOOK);
    if (!op) return -1;
    op->hook = fn; op->hook_arg = arg; op->hook_free = free_arg;
    return submit(stream, op) == OK ? 0 : -1;
}

/* ---- driver API ---- */
CUresult cuInit(unsigned flags) { (void)flags; return OK; }
/* MOCK_CUDA_DEVICES GPUs on this "host" (default 1); CUDA_VISIBLE_DEVICES shows the process the
 * listed ones only, as the driver does (entries that name no device end the list) */
static int mock_device_count(void) {
    const char *v = getenv("MOCK_CUDA_DEVICES");
    int host = v && atoi(v) > 0 ? atoi(v) : 1;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (!cvd) return host;
    int n = 0;
    for (const char *p = cvd; *p;) {
        char *end;
        long d = strtol(p, &end, 10);
        if (end == p || d < 0 || d >= host) break;
        n++;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' ) break;
    }
    return n;
}
CUresult cuDeviceGetCount(int *n) { *n = mock_device_count(); return OK; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return OK; }
CUresult cuDeviceGetName(char *name, int len, int dev) { snprintf(name, (size_t)len, "BOOST stand-in GPU %d", dev); return OK; }
CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) { (void)dev; *bytes = (size_t)80 << 30; return OK; }
CUresult cuDeviceGet(int *d, int ord) { *d = ord; return ord >= 0 && ord < mock_device_count() ? OK : ERR_INVALID_VALUE; }
/* The device's pitch cap (CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2^31 - 1 bytes on current GPUs;
 * MOCK_CUDA_MAX_PITCH lowers it for a test): a 2D copy with a larger pitch, or a row wider than its
 * pitch, is CUDA_ERROR_INVALID_VALUE, as the driver answers. */
static size_t mock_max_pitch(void) {
    const char *v = getenv("MOCK_CUDA_MAX_PITCH");
    return v && atoll(v) > 0 ? (size_t)atoll(v) : (size_t)2147483647;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    (void)dev;
    const MockArch *a = mock_arch();
    switch (attr) {
    case 75: *v = a->major; return OK;           /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *v = a->minor; return OK;           /* COMPUTE_CAPABILITY_MINOR */
    case 8: *v = 48 * 1024; return OK;           /* MAX_SHARED_MEMORY_PER_BLOCK (without opting in) */
    case 97: *v = a->optin; return OK;           /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    case 11: *v = (int)mock_max_pitch(); return OK;   /* MAX_PITCH */
    default: *v = 0; return OK;
    }
}
static int ctx_token;
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { (void)dev; *ctx = &ctx_token; return OK; }
CUresult cuDevicePrimaryCtxRelease(int dev) { (void)dev; return OK; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return OK; }   /* cuda.h's name since CUDA 11 */
CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; return OK; }
CUresult cuCtxSynchronize(void) {
    pthread_mutex_lock(&mu); n_host_waits++; pthread_mutex_unlock(&mu);
    return drain_all();
}
/* ---- device memory: host memory, counted (bytes as asked for, per live pointer) ---- */
static pthread_mutex_t mem_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { CUdeviceptr p; size_t n; } *mem_live;
static size_t mem_nlive, mem_cap;
static unsigned long long mem_total, mem_now, mem_peak;

static void mem_report(void) __attribute__((destructor));
static void mem_report(void) {
    const char *path = getenv("MOCK_CUDA_MEM"), *rank = getenv("BOOST_RANK");
    if (!path || !*path || !mem_total) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    fprintf(f, "rank %s allocated %llu peak %llu\n", rank && *rank ? rank : "0", mem_total, mem_peak);
    fclose(f);
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    void *m = aligned_alloc(256, (n + 255) / 256 * 256);
    if (!m) return 2;   /* CUDA_ERROR_OUT_OF_MEMORY */
    memset(m, 0xcd, n);   /* like device memory: not zero until set */
    *p = (CUdeviceptr)(uintptr_t)m;
    pthread_mutex_lock(&mem_mu);
    if (mem_nlive == mem_cap) {
        size_t cap = mem_cap ? 2 * mem_cap : 256;
        void *grown = realloc(mem_live, cap * sizeof *mem_live);
        if (grown) { mem_live = grown; mem_cap = cap; }
    }
    if (mem_nlive < mem_cap) { mem_live[mem_nlive].p = *p; mem_live[mem_nlive++].n = n; }
    mem_total += n; mem_now += n;
    if (mem_now > mem_peak) mem_peak = mem_now;
    pthread_mutex_unlock(&mem_mu);
    return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) {   /* like the driver: waits for the device first */
    CUresult rc = drain_all();
    pthread_mutex_lock(&mem_mu);
    for (size_t i = 0; i < mem_nlive; i++)
        if (mem_live[i].p == p) { mem_now -= mem_live[i].n; mem_live[i] = mem_live[--mem_nlive]; break; }
    pthread_mutex_unlock(&mem_mu);
    free((void *)(uintptr_t)p);
    return rc;
}
static void count_blocking(void) {
    pthread_mutex_lock(&mu); n_host_waits++; n_blocking_copies++; pthread_mutex_unlock(&mu);
}
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
    count_blocking();
    CUresult rc = drain_all();
    memset((void *)(uintptr_t)p, v, n);
    return rc;
}
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, void *s) {
    Op *op = new_op(OP_MEMSET32);
    if (!op) return 2;
    op->dst = (void *)(uintptr_t)p; op->val = v; op->n = n;
    return submit(s, op);
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) {
    count_blocking();
    CUresult rc = drain_all();
    memcpy((void *)(uintptr_t)d, h, n);
    return rc;
}
CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) {
    count_blocking();
    CUresult rc = drain_all();
    memcpy(h, (void *)(uintptr_t)d, n);
    return rc;
}
/* From pageable host memory: the data is staged at the call, the copy runs in stream order. */
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, void *s) {
    Op *op = new_op(OP_COPY);
    if (!op || !(op->staged = malloc(n ? n : 1))) { free(op); return 2; }
    memcpy(op->staged, h, n);
    op->dst = (void *)(uintptr_t)d; op->n = n;
    return submit(s, op);
}
/* To pageable host memory: returns once the copy ran, i.e. after the stream's earlier work. */
CUresult cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, void *s) {
    Op *op = new_op(OP_COPY);
    if (!op) return 2;
    op->dst = h; op->src = (const void *)(uintptr_t)d; op->n = n;
    pthread_mutex_lock(&mu); n_host_waits++; pthread_mutex_unlock(&mu);
    if (!s) return submit(s, op);
    pthread_mutex_lock(&mu);
    if (capture_breaks(s)) { pthread_mutex_unlock(&mu); op_free(op); return ERR_CAPTURE_UNSUPPORTED; }
    enqueue((Stream *)s, op);
    unsigned long long target = ((Stream *)s)->enqueued;
    pthread_mutex_unlock(&mu);
    return wait_stream((Stream *)s, target);
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) {
    Op *op = new_op(OP_COPY);
    if (!op) return 2;
    op->dst = (void *)(uintptr_t)dst; op->src = (const void *)(uintptr_t)src; op->n = n;
    return submit(s, op);
}
CUresult cuMemcpy2DAsync_v2(const Copy2D *c, void *s) {
    size_t cap = mock_max_pitch();
    if (c->srcPitch > cap || c->dstPitch > cap || c->WidthInBytes > c->srcPitch || c->WidthInBytes > c->dstPitch) {
        fprintf(stderr, "mock_cuda: cuMemcpy2DAsync refused: width %zu B, pitches %zu/%zu B, device cap %zu B\n",
                c->WidthInBytes, c->srcPitch, c->dstPitch, cap);
        return ERR_INVALID_VALUE;
    }
    Op *op = new_op(OP_COPY2D);
    if (!op) return 2;
    op->c2 = *c;
    return submit(s, op);
}
CUresult cuStreamCreate(void **out, unsigned flags) {
    (void)flags;
    Stream *s = calloc(1, sizeof *s);
    if (!s) return 2;
    pthread_mutex_lock(&mu);
    if (streams_last) streams_last->next_created = s; else streams_first = s;
    streams_last = s;
    pthread_mutex_unlock(&mu);
    *out = s;
    return OK;
}
CUresult cuStreamDestroy_v2(void *sp) {   /* pending work still runs (as on a GPU); the stream stays listed */
    Stream *s = sp;
    if (!s) return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    unsigned long long target = s->enqueued;
    pthread_mutex_unlock(&mu);
    return wait_stream(s, target);
}
CUresult cuStreamSynchronize(void *sp) {
    Stream *s = sp;
    pthread_mutex_lock(&mu);
    n_host_waits++;
    if (s && capture_breaks(s)) { pthread_mutex_unlock(&mu); return ERR_CAPTURE_UNSUPPORTED; }
    unsigned long long target = s ? s->enqueued : 0;
    pthread_mutex_unlock(&mu);
    return s ? wait_stream(s, target) : drain_all();
}
CUresult cuStreamQuery(void *sp) {
    Stream *s = sp;
    if (!s) return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    int r = run_until(s, s->enqueued);
    if (r == 1) progress_blocked(s);
    CUresult err = s->error;
    pthread_mutex_unlock(&mu);
    return r == 1 ? ERR_NOT_READY : r ? r : err;
}
CUresult cuEventCreate(void **ev, unsigned flags) {
    (void)flags;
    Event *e = calloc(1, sizeof *e);
    if (!e) return 2;
    *ev = e;
    return OK;
}
CUresult cuEventDestroy_v2(void *ev) { free(ev); return OK; }
CUresult cuEventRecord(void *ev, void *s) {
    Event *e = ev;
    if (!e || !s) return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    if (capture_breaks(s)) { pthread_mutex_unlock(&mu); return ERR_CAPTURE_UNSUPPORTED; }   /* not modelled */
    e->s = s;
    e->target = ((Stream *)s)->enqueued;
    pthread_mutex_unlock(&mu);
    return OK;
}
CUresult cuStreamWaitEvent(void *s, void *ev, unsigned flags) {
    Event *e = ev;
    if (!s || !e || flags) return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    Stream *dep = e->s;
    unsigned long long target = e->target;
    pthread_mutex_unlock(&mu);
    if (!dep || dep == s) return OK;   /* never recorded, or the same stream: nothing to wait for */
    Op *op = new_op(OP_WAIT);
    if (!op) return 2;
    op->dep = dep; op->dep_target = target;
    return submit(s, op);
}
CUresult cuEventSynchronize(void *ev) {
    Event *e = ev;
    pthread_mutex_lock(&mu);
    n_host_waits++;
    Stream *s = e->s;
    unsigned long long target = e->target;
    pthread_mutex_unlock(&mu);
    return s ? wait_stream(s, target) : OK;
}
CUresult cuEventQuery(void *ev) {
    Event *e = ev;
    pthread_mutex_lock(&mu);
    int r = e->s ? run_until(e->s, e->target) : 0;
    pthread_mutex_unlock(&mu);
    return r == 1 ? ERR_NOT_READY : r;
}
static int module_token;
CUresult cuModuleLoadData(void **m, const void *image) {
    (void)image;
    pthread_mutex_lock(&mu);
    int rc = build_objects();
    pthread_mutex_unlock(&mu);
    if (rc) { fprintf(stderr, "mock_cuda: %s\n", why); return 200; }   /* CUDA_ERROR_INVALID_IMAGE */
    *m = &module_token;
    return OK;
}
CUresult cuModuleUnload(void *m) { (void)m; return OK; }
CUresult cuModuleGetFunction(void **fn, void *m, const char *name) {
    (void)m;
    size_t n = strlen(name) + 8;   /* "emusz_" NAME: any length, as the driver takes */
    char *sym = malloc(n), *szsym = malloc(n);
    if (!sym || !szsym) { free(sym); free(szsym); return 2; }
    snprintf(sym, n, "emu_%s", name);
    snprintf(szsym, n, "emusz_%s", name);
    for (int i = 0; i < nobjs; i++) {
        void *launch = dlsym(objs[i], sym), *sizes = dlsym(objs[i], szsym);
        if (!launch || !sizes) continue;
        free(sym); free(szsym);
        MockFn *f = malloc(sizeof *f);   /* kept for the process, like a loaded module */
        if (!f) return 2;
        *(void **)&f->launch = launch;
        *(void **)&f->sizes = sizes;
        *(void **)&f->set_dyn = dlsym(objs[i], "emu_set_dynamic_shared");
        f->max_dyn = 48 * 1024;
        *fn = f;
        return OK;
    }
    free(sym); free(szsym);
    return ERR_NOT_FOUND;
}
/* cuFuncSetAttribute: CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (8) raises the function's
 * limit on dynamic shared memory up to the arch's opt-in maximum (more is CUDA_ERROR_INVALID_VALUE,
 * as on the device); the preferred carveout (9) is accepted and ignored; other attributes are
 * read-only or unmodelled. */
CUresult cuFuncSetAttribute(void *fnp, int attr, int value) {
    MockFn *fn = fnp;
    if (!fn) return ERR_INVALID_VALUE;
    if (attr == 9) return value >= -1 && value <= 100 ? OK : ERR_INVALID_VALUE;
    if (attr != 8) {
        fprintf(stderr, "mock_cuda: cuFuncSetAttribute: attribute %d not modelled\n", attr);
        return ERR_INVALID_VALUE;
    }
    const MockArch *a = mock_arch();
    if (value < 0 || value > a->optin) {
        fprintf(stderr, "mock_cuda: cuFuncSetAttribute refused: %d B of dynamic shared memory above %s's opt-in "
                "maximum of %d B\n", value, a->arch, a->optin);
        return ERR_INVALID_VALUE;
    }
    pthread_mutex_lock(&mu); fn->max_dyn = value; pthread_mutex_unlock(&mu);
    return OK;
}

/* The driver's launch limits (compute capability 8.0 / 9.0): at most 1024 threads a block (x, y <=
 * 1024, z <= 64), grid x < 2^31, y and z <= 65535, and dynamic shared memory above 48 KiB only
 * after cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) raised the function's limit to at least
 * the launch's (max_dyn). The emulator runs one-dimensional launches only, so y = z = 1 is asked too. */
static CUresult launch_refused(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem,
                               int max_dyn) {
    const char *w = NULL;
    if ((unsigned long long)bx * by * bz > 1024 || bx > 1024 || by > 1024 || bz > 64) w = "more than 1024 threads a block";
    else if (!bx || !by || !bz || !gx || !gy || !gz) w = "a zero grid or block dimension";
    else if (gx > 0x7fffffffu || gy > 65535 || gz > 65535) w = "grid dimensions above the device's limits";
    else if (smem > (unsigned)max_dyn) {
        static char lim[160];
        snprintf(lim, sizeof lim, "dynamic shared memory above the function's limit of %d B (48 KiB unless "
                 "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) raised it)", max_dyn);
        w = lim;
    }
    else if (gy != 1 || gz != 1 || by != 1 || bz != 1) w = "a multi-dimensional launch (the emulator runs x only)";
    if (!w) return OK;
    fprintf(stderr, "mock_cuda: cuLaunchKernel refused: %s (grid %u,%u,%u block %u,%u,%u shared %u B)\n", w, gx, gy, gz,
            bx, by, bz, smem);
    return ERR_INVALID_VALUE;
}

CUresult cuLaunchKernel(void *fnp, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, void *stream, void **params, void **extra) {
    (void)extra;
    MockFn *fn = fnp;
    if (!fn) return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    const int max_dyn = fn->max_dyn;
    pthread_mutex_unlock(&mu);
    CUresult lim = launch_refused(gx, gy, gz, bx, by, bz, smem, max_dyn);
    if (lim) return lim;
    unsigned sizes[64];
    int np = fn->sizes(sizes);
    if (np < 0 || np > 64) return ERR_INVALID_VALUE;
    Op *op = new_op(OP_KERNEL);
    size_t total = 0;
    for (int i = 0; i < np; i++) total += (sizes[i] + 7) / 8 * 8;
    if (!op || !(op->argbuf = malloc(total ? total : 8))) { free(op); return 2; }
    size_t off = 0;   /* the argument values as they are now: the caller's variables may change */
    for (int i = 0; i < np; i++) {
        memcpy(op->argbuf + off, params[i], sizes[i]);
        op->params[i] = op->argbuf + off;
        off += (sizes[i] + 7) / 8 * 8;
    }
    op->fn = fn; op->grid = gx; op->block = bx; op->smem = smem; op->nparams = np; op->argbytes = total;
    pthread_mutex_lock(&mu); n_launches++; pthread_mutex_unlock(&mu);
    return submit(stream, op);
}
/* ---- CUDA graphs: a capture records the stream's work; a launch queues a copy of it ---- */
typedef struct { Op *head; } Graph;

static Op *op_clone(const Op *o) {
    Op *c = malloc(sizeof *c);
    if (!c) return NULL;
    *c = *o;
    c->next = NULL; c->argbuf = NULL; c->gg = NULL; c->gsize = NULL; c->staged = NULL;
    if (o->argbuf) {
        if (!(c->argbuf = malloc(o->argbytes ? o->argbytes : 8))) { free(c); return NULL; }
        memcpy(c->argbuf, o->argbuf, o->argbytes);
        for (int i = 0; i < o->nparams; i++) c->params[i] = c->argbuf + ((unsigned char *)o->params[i] - o->argbuf);
    }
    if (o->gg) {
        c->gg = malloc(o->groups * sizeof *c->gg);
        c->gsize = malloc(o->groups * sizeof *c->gsize);
        if (!c->gg || !c->gsize) { op_free(c); return NULL; }
        memcpy(c->gg, o->gg, o->groups * sizeof *c->gg);
        memcpy(c->gsize, o->gsize, o->groups * sizeof *c->gsize);
    }
    return c;
}

static void list_free(Op *op) {
    while (op) { Op *n = op->next; op_free(op); op = n; }
}

static Op *list_clone(const Op *op) {
    Op *head = NULL, *tail = NULL;
    for (; op; op = op->next) {
        Op *c = op_clone(op);
        if (!c) { list_free(head); return NULL; }
        if (tail) tail->next = c; else head = c;
        tail = c;
    }
    return head;
}

CUresult cuStreamBeginCapture_v2(void *sp, int mode) {
    Stream *s = sp;
    if (!s || (mode != 0 && mode != 1 && mode != 2)) return ERR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    CUresult rc = s->capturing ? ERR_ILLEGAL_STATE : OK;
    if (!rc) { s->capturing = 1; s->capture_bad = 0; s->cap_head = s->cap_tail = NULL; }
    pthread_mutex_unlock(&mu);
    return rc;
}
CUresult cuStreamEndCapture(void *sp, void **graph) {
    Stream *s = sp;
    pthread_mutex_lock(&mu);
    if (!s || !s->capturing) { pthread_mutex_unlock(&mu); return ERR_ILLEGAL_STATE; }
    s->capturing = 0;
    Op *list = s->cap_head;
    s->cap_head = s->cap_tail = NULL;
    int bad = s->capture_bad;
    pthread_mutex_unlock(&mu);
    *graph = NULL;
    if (bad) { list_free(list); return ERR_CAPTURE_INVALIDATED; }
    Graph *g = malloc(sizeof *g);
    if (!g) { list_free(list); return 2; }
    g->head = list;
    *graph = g;
    return OK;
}
CUresult cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    (void)flags;
    Graph *g = graph, *x = malloc(sizeof *x);
    if (!g || !x) { free(x); return ERR_INVALID_VALUE; }
    x->head = list_clone(g->head);
    if (g->head && !x->head) { free(x); return 2; }
    *exec = x;
    return OK;
}
CUresult cuGraphLaunch(void *exec, void *sp) {
    Graph *x = exec;
    Stream *s = sp;
    if (!x || !s) return ERR_INVALID_VALUE;
    Op *list = list_clone(x->head);
    if (x->head && !list) return 2;
    pthread_mutex_lock(&mu);
    if (s->capturing) { pthread_mutex_unlock(&mu); list_free(list); return ERR_CAPTURE_UNSUPPORTED; }
    n_launches++;
    while (list) { Op *n = list->next; enqueue(s, list); list = n; }
    pthread_mutex_unlock(&mu);
    return OK;
}
CUresult cuGraphExecDestroy(void *exec) { Graph *x = exec; if (x) { list_free(x->head); free(x); } return OK; }
CUresult cuGraphDestroy(void *graph) { Graph *g = graph; if (g) { list_free(g->head); free(g); } return OK; }

CUresult cuGetErrorString(CUresult rc, const char **s) {
    *s = rc == OK ? "no error" : rc == ERR_NOT_FOUND ? "named symbol not found (mock)" :
         rc == ERR_ILLEGAL_STATE ? "device deadlock: a stream waits on itself (mock)" :
         rc == ERR_NOT_READY ? "not ready (mock)" : rc == ERR_CAPTURE_UNSUPPORTED ? "operation not permitted when stream is capturing (mock)" :
         rc == ERR_CAPTURE_INVALIDATED ? "the stream capture was invalidated by an operation not permitted in it (mock)" :
         "mock CUDA error";
    return OK;
}

/* ---- cuBLAS: column-major GEMMs, queued on the handle's stream ---- */
typedef struct { void *stream; } Handle;
int cublasCreate_v2(void **h) { *h = calloc(1, sizeof(Handle)); return *h ? 0 : 3; }
int cublasDestroy_v2(void *h) { free(h); return 0; }
int cublasSetStream_v2(void *h, void *s) { ((Handle *)h)->stream = s; return 0; }
int cublasSetWorkspace_v2(void *h, void *ws, size_t bytes) { (void)h; (void)ws; (void)bytes; return 0; }

/* The type mixes cuBLAS runs, from the tables "supports the following Compute Type, Scale Type,
 * Atype/Btype, and Ctype" of the cuBLAS Library documentation, chapter "BLAS-like Extension",
 * sections cublasGemmEx(), cublasGemmStridedBatchedEx() and cublasGemmGroupedBatchedEx(),
 * limited to what the stand-in computes: CUDA_R_32F (0) and CUDA_R_16BF (14), compute
 * CUBLAS_COMPUTE_32F (68) or CUBLAS_COMPUTE_32F_PEDANTIC (69), scale type fp32. A and B share one
 * type (one Atype/Btype column), so bf16 x fp32 is refused everywhere.
 *   cublasGemmEx, cublasGemmStridedBatchedEx (32F and 32F_PEDANTIC alike):
 *     bf16 -> bf16, bf16 -> fp32, fp32 -> fp32   (fp32 inputs never give a bf16 output)
 *   cublasGemmGroupedBatchedEx: 32F: bf16 -> bf16, fp32 -> fp32 (no bf16 -> fp32);
 *     32F_PEDANTIC: fp32 -> fp32 only
 * Anything else answers CUBLAS_STATUS_NOT_SUPPORTED (15), once noted on stderr per call and mix.
 * Mixes cuBLAS runs but the stand-in does not compute (fp16, int8, complex, fp64, the FAST and
 * 16F/32I/64F compute types) answer 15 as well, noted as not modelled. */
static int types_refused(const char *call, int grouped, int at, int bt, int ct, int compute) {
    int known = (at == 0 || at == 14) && (bt == 0 || bt == 14) && (ct == 0 || ct == 14) &&
                (compute == 68 || compute == 69);
    int ok = known && at == bt;
    if (ok && !grouped) ok = !(at == 0 && ct == 14);
    if (ok && grouped) ok = at == ct && (compute == 68 || at == 0);
    if (ok) return 0;
    static unsigned char seen[3][64];
    int key = (at == 14) << 5 | (bt == 14) << 4 | (ct == 14) << 3 | (compute == 69) << 2 | !known;
    int which = grouped ? 2 : !strcmp(call, "cublasGemmEx") ? 0 : 1;
    pthread_mutex_lock(&mu);
    int fresh = !seen[which][key];
    seen[which][key] = 1;
    pthread_mutex_unlock(&mu);
    if (fresh)
        fprintf(stderr, "mock_cuda: %s refused (CUBLAS_STATUS_NOT_SUPPORTED): Atype %d, Btype %d, "
                "Ctype %d, computeType %d %s\n", call, at, bt, ct, compute,
                known ? "is not in cuBLAS's table of supported types"
                      : "is not modelled by the stand-in");
    return 15;
}

/* What cuBLAS refuses with CUBLAS_STATUS_INVALID_VALUE (7): an operation other than N, T, C;
 * m, n or k below 0; a leading dimension below the rows of the operand as stored (lda >= m for
 * op(A) = A, else >= k; ldb >= k, else >= n; ldc >= m; each at least 1); a batch count below 0.
 * Also counted, not refused (cuBLAS then leaves the tensor cores for a slower kernel): a pointer or
 * leading dimension that breaks 16-byte alignment of a bf16 operand (mock_cublas_misaligned()). */
static long long n_misaligned;
long long mock_cublas_misaligned(void) { return n_misaligned; }
static int gemm_refused(const char *call, int ta, int tb, int m, int n, int k, const void *A, int at, int lda,
                        const void *B, int bt, int ldb, const void *C, int ct, int ldc, long long batch) {
    const char *w = NULL;
    char b[160];
    if (ta < 0 || ta > 2 || tb < 0 || tb > 2) w = "transa/transb is not N, T or C";
    else if (m < 0 || n < 0 || k < 0) w = "m, n or k is negative";
    else if (batch < 0) w = "the batch count is negative";
    else if (lda < (ta ? k : m) || lda < 1) { snprintf(b, sizeof b, "lda=%d is below %d (the rows of A as stored)", lda, ta ? k : m); w = b; }
    else if (ldb < (tb ? n : k) || ldb < 1) { snprintf(b, sizeof b, "ldb=%d is below %d (the rows of B as stored)", ldb, tb ? n : k); w = b; }
    else if (ldc < m || ldc < 1) { snprintf(b, sizeof b, "ldc=%d is below m=%d", ldc, m); w = b; }
    if (w) {
        fprintf(stderr, "mock_cuda: %s refused (CUBLAS_STATUS_INVALID_VALUE): %s (m=%d n=%d k=%d)\n", call, w, m, n, k);
        return 7;
    }
    const void *ptr[3] = {A, B, C};
    const int type[3] = {at, bt, ct}, ld[3] = {lda, ldb, ldc};
    for (int i = 0; i < 3; i++)
        if (type[i] == 14 && ptr[i] && (((uintptr_t)ptr[i] & 15u) || (ld[i] * 2) % 16)) {
            pthread_mutex_lock(&mu); n_misaligned++; pthread_mutex_unlock(&mu);
            break;
        }
    return 0;
}

static int submit_gemm(void *h, const GemmOp *g) {
    Op *op = new_op(OP_GEMM);
    if (!op) return 3;
    op->g = *g;
    pthread_mutex_lock(&mu); n_launches++; pthread_mutex_unlock(&mu);
    return submit(((Handle *)h)->stream, op) == OK ? 0 : 13;   /* EXECUTION_FAILED */
}

int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at, int lda,
                 const void *B, int bt, int ldb, const void *beta, void *C, int ct, int ldc, int compute, int algo) {
    (void)algo;
    if (types_refused("cublasGemmEx", 0, at, bt, ct, compute)) return 15;   /* NOT_SUPPORTED */
    int bad = gemm_refused("cublasGemmEx", ta, tb, m, n, k, A, at, lda, B, bt, ldb, C, ct, ldc, 1);
    if (bad) return bad;
    GemmOp g = {ta, tb, m, n, k, at, bt, ct, lda, ldb, ldc, 1, 0, 0, 0, *(const float *)alpha, *(const float *)beta,
                A, B, C};
    return submit_gemm(h, &g);
}

int cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at,
                               int lda, long long sA, const void *B, int bt, int ldb, long long sB, const void *beta,
                               void *C, int ct, int ldc, long long sC, int batch, int compute, int algo) {
    (void)algo;
    if (types_refused("cublasGemmStridedBatchedEx", 0, at, bt, ct, compute)) return 15;
    int bad = gemm_refused("cublasGemmStridedBatchedEx", ta, tb, m, n, k, A, at, lda, B, bt, ldb, C, ct, ldc, batch);
    if (bad) return bad;
    GemmOp g = {ta, tb, m, n, k, at, bt, ct, lda, ldb, ldc, batch, sA, sB, sC, *(const float *)alpha,
                *(const float *)beta, A, B, C};
    return submit_gemm(h, &g);
}

/* The per-group arrays are host memory, read at the call; A, B, C are device arrays of pointers,
 * read when the GEMMs run (so overwriting them before that changes what runs, as on a GPU). */
int cublasGemmGroupedBatchedEx(void *h, const int *ta, const int *tb, const int *m, const int *n, const int *k,
                               const void *alpha, const void *const *A, int at, const int *lda, const void *const *B,
                               int bt, const int *ldb, const void *beta, void *const *C, int ct, const int *ldc,
                               int groups, const int *size, int compute) {
    if (types_refused("cublasGemmGroupedBatchedEx", 1, at, bt, ct, compute)) return 15;
    if (groups <= 0) return 15;
    /* a test's knob: MOCK_CUBLAS_GROUPED_REFUSE=1 answers every grouped call NOT_SUPPORTED (15), as
     * cuBLAS does for a type combination it lacks, so the backend's fallback and its note run */
    if (getenv("MOCK_CUBLAS_GROUPED_REFUSE") && *getenv("MOCK_CUBLAS_GROUPED_REFUSE") == '1') return 15;
    for (int g = 0; g < groups; g++) {
        if (size[g] < 0) { fprintf(stderr, "mock_cuda: cublasGemmGroupedBatchedEx refused: group %d size %d\n", g, size[g]); return 7; }
        int bad = gemm_refused("cublasGemmGroupedBatchedEx", ta[g], tb[g], m[g], n[g], k[g], NULL, at, lda[g], NULL, bt,
                               ldb[g], NULL, ct, ldc[g], size[g]);
        if (bad) return bad;
    }
    Op *op = new_op(OP_GROUPED);
    if (!op || !(op->gg = calloc(groups, sizeof *op->gg)) || !(op->gsize = calloc(groups, sizeof *op->gsize))) {
        if (op) op_free(op);
        return 3;
    }
    for (int g = 0; g < groups; g++) {
        GemmOp x = {ta[g], tb[g], m[g], n[g], k[g], at, bt, ct, lda[g], ldb[g], ldc[g], 1, 0, 0, 0,
                    ((const float *)alpha)[g], ((const float *)beta)[g], NULL, NULL, NULL};
        op->gg[g] = x;
        op->gsize[g] = size[g];
    }
    op->groups = groups; op->gA = A; op->gB = B; op->gC = C;
    pthread_mutex_lock(&mu); n_launches++; pthread_mutex_unlock(&mu);
    return submit(((Handle *)h)->stream, op) == OK ? 0 : 13;
}
