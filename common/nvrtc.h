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

/* The CUDA toolkit folder (BOOST_CUDA_HOME, CUDA_HOME, else the build's default). */
const char *nvrtc_cuda_home(void);
/* NVRTC's version; 0 on success, -1 when NVRTC cannot be loaded. */
int nvrtc_version(int *major, int *minor);
/* Parse ptxas -v output (the NVRTC program log) into stats; returns the number filled. */
int nvrtc_parse_ptxas(const char *log, KernelStat *stats, int max);

#endif
