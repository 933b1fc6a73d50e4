/* nvrtc.c: NVRTC loaded with dlopen (see nvrtc.h). Compiles CUDA source to a cubin for one arch
 * with ptxas's verbose report switched on, and parses that report into per-kernel statistics
 * (registers, spill bytes, static shared memory). No CUDA header is needed to build this file. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <errno.h>
#include <stdint.h>
#include <unistd.h>
#include <sys/stat.h>
#include "common/nvrtc.h"
#include "common/cudalibs.h"
#include "common/files.h"   // defines: file_read_all

#ifndef BOOST_CUDA_HOME
#define BOOST_CUDA_HOME "/usr/local/cuda"
#endif

/* The slice of the NVRTC API used here (nvrtcResult is an int, nvrtcProgram a pointer). */
typedef int (*CreateFn)(void **prog, const char *src, const char *name, int nheaders,
                        const char *const *headers, const char *const *include_names);
typedef int (*CompileFn)(void *prog, int nopts, const char *const *opts);
typedef int (*SizeFn)(void *prog, size_t *size);
typedef int (*GetFn)(void *prog, char *out);
typedef int (*DestroyFn)(void **prog);
typedef int (*VersionFn)(int *major, int *minor);
typedef const char *(*ErrStrFn)(int result);

static struct {
    int tried, ok;
    char why[2048];
    char path[4096], where[96], include[1024];   /* the NVRTC opened, how found, its headers */
    void *handle;
    CreateFn create; CompileFn compile; SizeFn log_size; GetFn log; SizeFn cubin_size; GetFn cubin;
    DestroyFn destroy; VersionFn version; ErrStrFn errstr;
} nv;
static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;

static void nv_load(void) {
    if (nv.tried) return;
    nv.tried = 1;
    CudaLibFound f;
    if (cudalib_open(CUDALIB_NVRTC, &f, nv.why, sizeof nv.why) != 0) return;
    void *h = nv.handle = f.handle;
    snprintf(nv.path, sizeof nv.path, "%s", f.path);
    snprintf(nv.where, sizeof nv.where, "%s", f.where);
    cudalib_include_for(f.dir, nv.include, sizeof nv.include);
#define NV_SYM(field, type, sym)                                                                   \
    if (!(nv.field = (type)dlsym(h, sym))) {                                                       \
        snprintf(nv.why, sizeof nv.why,                                                            \
                 "libnvrtc has no symbol %s: NVRTC too old (need CUDA 12+)", sym);                 \
        return;                                                                                    \
    }
    NV_SYM(create, CreateFn, "nvrtcCreateProgram");
    NV_SYM(compile, CompileFn, "nvrtcCompileProgram");
    NV_SYM(log_size, SizeFn, "nvrtcGetProgramLogSize");
    NV_SYM(log, GetFn, "nvrtcGetProgramLog");
    NV_SYM(cubin_size, SizeFn, "nvrtcGetCUBINSize");
    NV_SYM(cubin, GetFn, "nvrtcGetCUBIN");
    NV_SYM(destroy, DestroyFn, "nvrtcDestroyProgram");
    NV_SYM(version, VersionFn, "nvrtcVersion");
    NV_SYM(errstr, ErrStrFn, "nvrtcGetErrorString");
#undef NV_SYM
    nv.ok = 1;
}

int nvrtc_available(char *err, size_t errlen) {
    pthread_mutex_lock(&nv_lock);
    nv_load();
    pthread_mutex_unlock(&nv_lock);
    if (!nv.ok && err) snprintf(err, errlen, "%s", nv.why);
    return nv.ok;
}

int nvrtc_library(char *path, size_t pn, char *where, size_t wn, char *include, size_t in) {
    if (!nvrtc_available(NULL, 0)) return -1;
    if (path) snprintf(path, pn, "%s", nv.path);
    if (where) snprintf(where, wn, "%s", nv.where);
    if (include) snprintf(include, in, "%s", nv.include);
    return 0;
}

int nvrtc_supported_archs(int *archs, int max) {
    if (!nvrtc_available(NULL, 0)) return -1;
    int (*num)(int *) = (int (*)(int *))dlsym(nv.handle, "nvrtcGetNumSupportedArchs");
    int (*get)(int *) = (int (*)(int *))dlsym(nv.handle, "nvrtcGetSupportedArchs");
    int n = 0;
    if (!num || !get || num(&n) != 0 || n <= 0) return -1;
    int *all = calloc((size_t)n, sizeof *all);
    if (!all || get(all) != 0) { free(all); return -1; }
    for (int i = 0; i < n && i < max; i++) archs[i] = all[i];
    free(all);
    return n < max ? n : max;
}

int nvrtc_version(int *major, int *minor) {
    if (!nvrtc_available(NULL, 0)) return -1;
    return nv.version(major, minor) == 0 ? 0 : -1;
}

/* Find or add the stat for kernel `name`. */
static KernelStat *stat_for(KernelStat *stats, int max, int *n, const char *name) {
    for (int i = 0; i < *n; i++) if (!strcmp(stats[i].name, name)) return &stats[i];
    if (*n >= max) return NULL;
    KernelStat *s = &stats[(*n)++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

/* ptxas -v writes, per kernel:
 *   ptxas info    : Compiling entry function 'NAME' for 'sm_90'
 *   ptxas info    : Function properties for NAME
 *       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
 *   ptxas info    : Used 30 registers, used 0 barriers, 384 bytes cmem[0], 8 bytes smem
 * The "Used" line follows the entry it belongs to. */
int nvrtc_parse_ptxas(const char *log, KernelStat *stats, int max) {
    int n = 0;
    KernelStat *cur = NULL;
    char name[128];
    for (const char *line = log; line && *line; ) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[1024];
        if (len >= sizeof buf) len = sizeof buf - 1;
        memcpy(buf, line, len); buf[len] = 0;
        const char *p;
        if ((p = strstr(buf, "Compiling entry function '"))) {
            p += strlen("Compiling entry function '");
            size_t k = strcspn(p, "'");
            if (k >= sizeof name) k = sizeof name - 1;
            memcpy(name, p, k); name[k] = 0;
            cur = stat_for(stats, max, &n, name);
        } else if ((p = strstr(buf, "Function properties for "))) {
            p += strlen("Function properties for ");
            size_t k = strcspn(p, " \r");
            if (k >= sizeof name) k = sizeof name - 1;
            memcpy(name, p, k); name[k] = 0;
            cur = stat_for(stats, max, &n, name);
        } else if (cur && (p = strstr(buf, "bytes spill stores"))) {
            const char *q = strstr(buf, "stack frame,");
            int st = 0, ld = 0;
            if (q && sscanf(q, "stack frame, %d bytes spill stores, %d bytes spill loads", &st,
                            &ld) == 2) {
                cur->spill_stores = st; cur->spill_loads = ld;
            }
        } else if (cur && (p = strstr(buf, "Used "))) {
            sscanf(p, "Used %d registers", &cur->registers);
            const char *s = strstr(p, "bytes smem");
            if (s) {   /* walk back over the number before " bytes smem" */
                const char *b = s - 1;
                while (b > p && *b == ' ') b--;
                while (b > p && b[-1] >= '0' && b[-1] <= '9') b--;
                cur->smem_bytes = atoi(b);
            }
        }
        line = end ? end + 1 : NULL;
    }
    return n;
}

/* ---- the on-disk cache: compile results keyed on source, options, arch, NVRTC version, headers
 * ---- */
static uint64_t fnv1a64(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}

/* What every compile passes besides -arch and the include path (both hashed separately). */
#define NVRTC_FIXED_OPTS "-default-device -std=c++17 --ptxas-options=-v -lineinfo"

int nvrtc_cache_path(const char *src, const char *arch, const char *ext, char *dir, size_t dn,
                     char *path, size_t pn) {
    int maj = 0, min = 0;
    if (nvrtc_version(&maj, &min) != 0) return -1;
    const char *home = nv.include, *opts = NVRTC_FIXED_OPTS;   /* the headers compiled against */
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv1a64(h, src, strlen(src));
    h = fnv1a64(h, opts, strlen(opts));
    h = fnv1a64(h, arch, strlen(arch));
    h = fnv1a64(h, home, strlen(home));
    h = fnv1a64(h, &maj, sizeof maj);
    h = fnv1a64(h, &min, sizeof min);
    const char *c = getenv("BOOST_CACHE"), *user = getenv("HOME");
    if (c && *c) snprintf(dir, dn, "%s", c);
    else snprintf(dir, dn, "%s/.cache/boost", user && *user ? user : "/tmp");
    snprintf(path, pn, "%s/%016llx-%s%s", dir, (unsigned long long)h, arch, ext);
    return 0;
}

void *nvrtc_cache_get(const char *path, size_t *len) {
    char why[600];
    size_t n = 0;
    char *s = file_read_all(path, (size_t)1 << 30, &n, why, sizeof why);
    if (s && n == 0) { free(s); s = NULL; }   /* an empty entry is a miss */
    if (s && len) *len = n;
    return s;
}

void nvrtc_cache_put(const char *dir, const char *path, const void *data, size_t len) {
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s", dir);
    for (char *s = tmp + 1; *s; s++)
        if (*s == '/') { *s = 0; mkdir(tmp, 0755); *s = '/'; }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return;       /* no cache: not an error */
    /* atomically: a temp file, then rename */
    snprintf(tmp, sizeof tmp, "%s.tmp%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    int ok = fwrite(data, 1, len, f) == len;
    ok = (fclose(f) == 0) && ok;
    if (ok) rename(tmp, path); else unlink(tmp);
}

int nvrtc_compile(const char *src, const char *arch, void **cubin, size_t *cubin_size,
                  KernelStat *stats, int max, char *err, size_t errlen) {
    if (cubin) *cubin = NULL;
    if (cubin_size) *cubin_size = 0;
    if (!nvrtc_available(err, errlen)) return -1;
    if (strncmp(arch, "sm_", 3) != 0) {
        snprintf(err, errlen, "arch '%s' is not of the form sm_XX (e.g. sm_80, sm_90)", arch);
        return -1;
    }
    /* only the statistics: a report compiled before from the same source is read back */
    char cdir[900], cpath[1100];
    int cacheable =
        !cubin && stats &&
        nvrtc_cache_path(src, arch, ".ptxas.txt", cdir, sizeof cdir, cpath, sizeof cpath) == 0;
    if (cacheable) {
        char *cached = nvrtc_cache_get(cpath, NULL);
        if (cached) {
            int n = nvrtc_parse_ptxas(cached, stats, max);
            free(cached);
            return n;
        }
    }
    char opt_arch[64], opt_inc[1100];
    snprintf(opt_arch, sizeof opt_arch, "-arch=%s", arch);
    snprintf(opt_inc, sizeof opt_inc, "-I%s", nv.include);
    /* the arch, NVRTC_FIXED_OPTS and the include folder */
    const char *opts[] = {opt_arch, "-default-device", "-std=c++17", opt_inc,
                          "--ptxas-options=-v", "-lineinfo"};
    void *prog = NULL;
    int rc = nv.create(&prog, src, "kernels.cu", 0, NULL, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "nvrtcCreateProgram: %s", nv.errstr(rc));
        return -1;
    }
    int crc = nv.compile(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    size_t logn = 0;
    int lrc = nv.log_size(prog, &logn);
    if (lrc != 0) logn = 0;   /* no log: the compile verdict below still holds */
    char *log = calloc(logn + 1, 1);
    if (!log) { nv.destroy(&prog); snprintf(err, errlen, "out of memory"); return -1; }
    if (logn && nv.log(prog, log) != 0) log[0] = 0;
    if (crc != 0) {
        snprintf(err, errlen, "NVRTC failed to compile kernels.cu for %s (%s):\n%s", arch,
                 nv.errstr(crc), log);
        free(log); nv.destroy(&prog);
        return -1;
    }
    int n = stats ? nvrtc_parse_ptxas(log, stats, max) : 0;
    if (cacheable && logn > 1) nvrtc_cache_put(cdir, cpath, log, strlen(log));
    if (cubin) {
        size_t sz = 0;
        int src_ = nv.cubin_size(prog, &sz);
        void *bin = src_ == 0 && sz ? malloc(sz) : NULL;
        if (!bin || nv.cubin(prog, bin) != 0) {
            free(bin); free(log); nv.destroy(&prog);
            snprintf(err, errlen, "nvrtcGetCUBINSize/nvrtcGetCUBIN failed for %s (size %zu)", arch,
                     sz);
            return -1;
        }
        *cubin = bin;
        if (cubin_size) *cubin_size = sz;
    }
    free(log);
    nv.destroy(&prog);
    return n;
}
