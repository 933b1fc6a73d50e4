/* nvrtc.h: NVRTC loaded at run time (dlopen), so bin/boost starts on machines without CUDA.
 * Used by the generator (compile kernels.cu for the report: registers, shared memory, spills)
 * and by the CUDA backend (JIT with an on-disk cache). */
#ifndef BOOST_NVRTC_H
#define BOOST_NVRTC_H

#include <stddef.h>

typedef struct {
    char name[128];      /* kernel function name */
    int registers;       /* per thread */
    int spill_stores, spill_loads;   /* bytes */
    int smem_bytes;      /* static shared memory */
} KernelStat;

/* 1 when libnvrtc could be loaded (message in err otherwise). */
int nvrtc_available(char *err, size_t errlen);

/* Compile CUDA source for arch ("sm_80", "sm_90") to a cubin, parse ptxas's per-kernel report.
 * cubin/cubin_size may be NULL. Returns the number of stats filled (<= max), or -1 with the
 * compile log in err. */
int nvrtc_compile(const char *src, const char *arch, void **cubin, size_t *cubin_size,
                  KernelStat *stats, int max, char *err, size_t errlen);

/* The NVRTC file opened, how it was found (common/cudalibs.h) and the include folder that goes
 * with it (cuda_bf16.h); 0, or -1 when NVRTC cannot be loaded. Any pointer may be NULL. */
int nvrtc_library(char *path, size_t pn, char *where, size_t wn, char *include, size_t in);
/* The archs this NVRTC compiles for (52, ..., 90, 100, ...): up to max filled, the count returned;
 * -1 when NVRTC cannot be loaded or does not say. */
int nvrtc_supported_archs(int *archs, int max);
/* NVRTC's version; 0 on success, -1 when NVRTC cannot be loaded. */
int nvrtc_version(int *major, int *minor);
/* The on-disk cache ($BOOST_CACHE, else ~/.cache/boost) shared by the report and the runtime's JIT:
 * the file for src compiled for arch, keyed on the source, the options, the arch, the toolkit folder
 * and NVRTC's version, with extension ext (".cubin", ".ptxas.txt"); dir gets the folder. -1 when
 * NVRTC cannot be loaded. get: the file's bytes (NUL-terminated, malloc'd) or NULL; put: written
 * atomically (temp file, rename), silently nothing when the folder cannot be written. A statistics-
 * only nvrtc_compile (cubin NULL) reads and writes the ptxas report there. */
int nvrtc_cache_path(const char *src, const char *arch, const char *ext, char *dir, size_t dn, char *path, size_t pn);
void *nvrtc_cache_get(const char *path, size_t *len);
void nvrtc_cache_put(const char *dir, const char *path, const void *data, size_t len);
/* Parse ptxas -v output (the NVRTC program log) into stats; returns the number filled. */
int nvrtc_parse_ptxas(const char *log, KernelStat *stats, int max);

#endif
