/* mock_cuda.c: a stand-in for libcuda.so.1 and libcublas.so.13 on a machine without a GPU, so the
 * CUDA backend (runtime/cuda.c) runs end to end in tests: device memory is host memory, streams are
 * synchronous, cuBLAS GEMMs are plain loops with cuBLAS's column-major semantics (bf16 or fp32
 * operands, fp32 accumulation), and kernels run on the CPU emulator (tests/gpu/cuda_emu.hpp): a
 * "module load" compiles the kernels.cu files listed in $BOOST_EMU_SOURCE (colon-separated) with g++
 * and looks kernels up by name there; the NVRTC cubin it is handed is ignored. Only the functions
 * runtime/cuda_api.h loads exist. Built as a shared library by tests/sh/nvrtc_mock_cuda.sh. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { OK = 0, ERR_INVALID_VALUE = 1, ERR_NOT_FOUND = 500, ERR_LAUNCH = 719 };

/* ---- modules: the emulated kernels, one shared object per source ---- */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *objs[16];
static int nobjs;
static char why[512];

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
        /* the source plus an EMU_ENTRY per kernel: the name is the line after `extern "C" __global__` */
        FILE *in = fopen(src, "r");
        if (!in) { snprintf(why, sizeof why, "%s: cannot read", src); return -1; }
        snprintf(path, sizeof path, "%s/k%d.cu", dir, i);
        FILE *out = fopen(path, "w");
        char line[4096], names[512][128];
        int nn = 0, next_is_name = 0;
        while (fgets(line, sizeof line, in)) {
            fputs(line, out);
            if (next_is_name && nn < 512) {
                size_t k = strcspn(line, "( \t");
                if (k > 0 && k < sizeof names[0]) { memcpy(names[nn], line, k); names[nn++][k] = 0; }
            }
            next_is_name = strstr(line, "extern \"C\" __global__") != NULL;
        }
        for (int j = 0; j < nn; j++) fprintf(out, "EMU_ENTRY(%s)\n", names[j]);
        fclose(in); fclose(out);
        snprintf(cmd, sizeof cmd, "g++ -std=c++17 -O1 -fno-strict-aliasing -fPIC -shared -w -I%s -include %s -x c++ "
                 "%s/k%d.cu -o %s/k%d.so -lpthread", dir, hpp, dir, i, dir, i);
        if (system(cmd) != 0) { snprintf(why, sizeof why, "g++ failed on %s", src); return -1; }
        snprintf(path, sizeof path, "%s/k%d.so", dir, i);
        if (!(objs[nobjs++] = dlopen(path, RTLD_NOW | RTLD_LOCAL))) { snprintf(why, sizeof why, "%s", dlerror()); return -1; }
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);   /* the loaded objects stay mapped */
    if (system(cmd)) {}
    return 0;
}

CUresult cuInit(unsigned flags) { (void)flags; return OK; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return OK; }
CUresult cuDeviceGet(int *d, int ord) { *d = ord; return ord == 0 ? OK : ERR_INVALID_VALUE; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
    (void)dev;
    *v = attr == 75 ? 9 : attr == 76 ? 0 : 0;   /* compute capability 9.0 */
    return OK;
}
static int ctx_token;
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { (void)dev; *ctx = &ctx_token; return OK; }
CUresult cuDevicePrimaryCtxRelease(int dev) { (void)dev; return OK; }
CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; return OK; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    void *m = aligned_alloc(256, (n + 255) / 256 * 256);
    if (!m) return 2;   /* CUDA_ERROR_OUT_OF_MEMORY */
    memset(m, 0xcd, n);   /* like device memory: not zero until set */
    *p = (CUdeviceptr)(uintptr_t)m;
    return OK;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return OK; }
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) { memset((void *)(uintptr_t)p, v, n); return OK; }
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, void *s) {
    (void)s;
    for (size_t i = 0; i < n; i++) ((unsigned *)(uintptr_t)p)[i] = v;
    return OK;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) { memcpy((void *)(uintptr_t)d, h, n); return OK; }
CUresult cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) { memcpy(h, (void *)(uintptr_t)d, n); return OK; }
typedef struct {
    size_t srcXInBytes, srcY; int srcMemoryType; const void *srcHost; CUdeviceptr srcDevice; void *srcArray; size_t srcPitch;
    size_t dstXInBytes, dstY; int dstMemoryType; void *dstHost; CUdeviceptr dstDevice; void *dstArray; size_t dstPitch;
    size_t WidthInBytes, Height;
} Copy2D;
CUresult cuMemcpy2DAsync_v2(const Copy2D *c, void *s) {
    (void)s;
    for (size_t r = 0; r < c->Height; r++)
        memmove((char *)(uintptr_t)c->dstDevice + r * c->dstPitch, (const char *)(uintptr_t)c->srcDevice + r * c->srcPitch,
                c->WidthInBytes);
    return OK;
}
static int stream_token;
CUresult cuStreamCreate(void **s, unsigned flags) { (void)flags; *s = &stream_token; return OK; }
CUresult cuStreamDestroy_v2(void *s) { (void)s; return OK; }
CUresult cuStreamSynchronize(void *s) { (void)s; return OK; }
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
    char sym[256];
    snprintf(sym, sizeof sym, "emu_%s", name);
    for (int i = 0; i < nobjs; i++) if ((*fn = dlsym(objs[i], sym))) return OK;
    return ERR_NOT_FOUND;
}
CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, void *stream, void **params, void **extra) {
    (void)smem; (void)stream; (void)extra;
    if (gy != 1 || gz != 1 || by != 1 || bz != 1 || bx == 0 || bx > 1024) return ERR_INVALID_VALUE;
    int (*launch)(unsigned, unsigned, void **) = (int (*)(unsigned, unsigned, void **))fn;
    pthread_mutex_lock(&mu);   /* the emulator runs one launch at a time */
    int rc = launch(gx, bx, params);
    pthread_mutex_unlock(&mu);
    return rc ? ERR_LAUNCH : OK;
}
CUresult cuGetErrorString(CUresult rc, const char **s) {
    *s = rc == OK ? "no error" : rc == ERR_NOT_FOUND ? "named symbol not found (mock)" : "mock CUDA error";
    return OK;
}

/* ---- cuBLAS: column-major GEMMs ---- */
static int handle_token;
int cublasCreate_v2(void **h) { *h = &handle_token; return 0; }
int cublasDestroy_v2(void *h) { (void)h; return 0; }
int cublasSetStream_v2(void *h, void *s) { (void)h; (void)s; return 0; }

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

static int gemm(int ta, int tb, int m, int n, int k, float alpha, const void *A, int at, int lda, const void *B, int bt,
                int ldb, float beta, void *C, int ct, int ldc) {
    if ((at != 0 && at != 14) || (bt != 0 && bt != 14) || (ct != 0 && ct != 14)) return 15;   /* NOT_SUPPORTED */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0;
            for (int l = 0; l < k; l++) {
                float a = ldv(A, at, ta ? (long long)l + (long long)i * lda : (long long)i + (long long)l * lda);
                float b = ldv(B, bt, tb ? (long long)j + (long long)l * ldb : (long long)l + (long long)j * ldb);
                s += a * b;
            }
            long long ci = (long long)i + (long long)j * ldc;
            float v = alpha * s + (beta != 0 ? beta * ldv(C, ct, ci) : 0.f);
            stv(C, ct, ci, v);
        }
    return 0;
}

int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at, int lda,
                 const void *B, int bt, int ldb, const void *beta, void *C, int ct, int ldc, int compute, int algo) {
    (void)h; (void)algo;
    if (compute != 68) return 15;
    return gemm(ta, tb, m, n, k, *(const float *)alpha, A, at, lda, B, bt, ldb, *(const float *)beta, C, ct, ldc);
}

int cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at,
                               int lda, long long sA, const void *B, int bt, int ldb, long long sB, const void *beta,
                               void *C, int ct, int ldc, long long sC, int batch, int compute, int algo) {
    (void)h; (void)algo;
    if (compute != 68) return 15;
    size_t ea = at ? 2 : 4, eb = bt ? 2 : 4, ec = ct ? 2 : 4;
    for (int i = 0; i < batch; i++) {
        int rc = gemm(ta, tb, m, n, k, *(const float *)alpha, (const char *)A + i * sA * ea, at, lda,
                      (const char *)B + i * sB * eb, bt, ldb, *(const float *)beta, (char *)C + i * sC * ec, ct, ldc);
        if (rc) return rc;
    }
    return 0;
}

int cublasGemmGroupedBatchedEx(void *h, const int *ta, const int *tb, const int *m, const int *n, const int *k,
                               const void *alpha, const void *const *A, int at, const int *lda, const void *const *B,
                               int bt, const int *ldb, const void *beta, void *const *C, int ct, const int *ldc,
                               int groups, const int *size, int compute) {
    (void)h;
    if (compute != 68) return 15;
    int idx = 0;
    for (int g = 0; g < groups; g++)
        for (int s = 0; s < size[g]; s++, idx++) {
            int rc = gemm(ta[g], tb[g], m[g], n[g], k[g], ((const float *)alpha)[g], A[idx], at, lda[g], B[idx], bt, ldb[g],
                          ((const float *)beta)[g], C[idx], ct, ldc[g]);
            if (rc) return rc;
        }
    return 0;
}
