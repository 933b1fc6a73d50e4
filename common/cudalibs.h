/* cudalibs.h: the one place that finds the CUDA-side libraries (driver, NVRTC, cuBLAS, cuBLASLt,
 * NCCL) where real machines keep them, and opens them with dlopen. Every loader (common/nvrtc.c,
 * runtime/cuda_api.c) and `boost doctor` go through cudalib_open. */
#ifndef BOOST_CUDALIBS_H
#define BOOST_CUDALIBS_H

#include <stddef.h>

typedef enum {
    CUDALIB_DRIVER,
    CUDALIB_NVRTC,
    CUDALIB_CUBLAS,
    CUDALIB_CUBLASLT,
    CUDALIB_NCCL,
    CUDALIB_COUNT
} CudaLib;

typedef struct {
    void *handle; /* dlopen handle; NULL when not found */
    char path[4096]; /* the file opened (as the loader resolved it) */
    char dir[4096]; /* its folder */
    char where[96]; /* how it was found: "BOOST_NVRTC", "CUDA_HOME lib/", "loader path", ... */
} CudaLibFound;

/* Find and open one library. Search order: the explicit file ($BOOST_NVRTC, $BOOST_CUBLAS,
 * $BOOST_CUBLASLT, $BOOST_NCCL, $BOOST_LIBCUDA; older spellings $BOOST_LIBCUBLAS, $BOOST_LIBNCCL),
 * then $BOOST_CUDA_HOME / $CUDA_HOME (lib64/, then lib/), the loader path (LD_LIBRARY_PATH,
 * ldconfig), Python wheels (site-packages/nvidia/{cu13,cublas,cuda_nvrtc,nccl}/lib, the packages
 * found from $PYTHONPATH, $VIRTUAL_ENV, $CONDA_PREFIX and `python3 -c 'import nvidia'`), conda's
 * $CONDA_PREFIX/lib, then the build's default toolkit folder. The driver is searched for by
 * explicit file, loader path and the system folders only (a toolkit's stubs/libcuda.so is a stub).
 * NVRTC: libnvrtc-builtins of the same folder is preloaded (RTLD_GLOBAL) so NVRTC finds it by
 * soname; cuBLAS: libcublasLt of the same folder likewise. Returns 0 with *out filled, or -1 with
 * what was tried and how to fix it in why. */
int cudalib_open(CudaLib lib, CudaLibFound *out, char *why, size_t n);

/* A short name for messages ("NVRTC", "cuBLAS", ...) and the variable naming the file. */
const char *cudalib_name(CudaLib lib);
const char *cudalib_env(CudaLib lib);

/* The include folder that belongs to an NVRTC found in lib_dir: lib_dir/../include when it holds
 * cuda_bf16.h (a toolkit or a wheel), else the wheels' cuda_runtime/include beside it, else the
 * toolkit folder's include/. Written into inc. */
void cudalib_include_for(const char *lib_dir, char *inc, size_t n);

/* The Python site-packages nvidia/ folders (each ending in /nvidia), newline-separated, found
 * once per process; "" when there are none. */
const char *cudalib_wheel_roots(void);

/* The CUDA toolkit folder (BOOST_CUDA_HOME, CUDA_HOME, else the build's default). */
const char *cudalib_cuda_home(void);

#endif
