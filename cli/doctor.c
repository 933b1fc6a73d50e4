/* doctor.c: `boost doctor`: what a GPU run finds on this machine: the GPUs and the driver, each
 * CUDA library's file, how it was found (common/cudalibs.c) and its version, NCCL and MPI, the
 * compute capability and the arch the kernels are compiled for, the device this process would use,
 * and what is missing with how to fix it. Exit 0 when a GPU run can start, 1 when not, 2 on bad
 * arguments. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/commands.h"
#include "common/cudalibs.h"
#include "common/nvrtc.h"
#include "runtime/cuda_device.h"
#include "runtime/world.h"

typedef struct {
    int n;
    char lines[12][4400];
} Problems;

static void problem(Problems *p, const char *fmt, const char *a, const char *b) {
    if (p->n < 12) snprintf(p->lines[p->n++], sizeof p->lines[0], fmt, a, b);
}

static int builtins_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "libnvrtc-builtins")) {
        snprintf(data, 1024, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

/* The driver and its GPUs. Returns the number of GPUs whose arch NVRTC can compile for. */
static int report_gpus(Problems *pr, int *count_out) {
    char why[4096];
    CudaLibFound f;
    *count_out = 0;
    if (cudalib_open(CUDALIB_DRIVER, &f, why, sizeof why) != 0) {
        printf("GPUs:       none: no CUDA driver (below)\n");
        problem(pr, "CUDA driver: %s", why, "");
        return 0;
    }
    int (*init)(unsigned) = (int (*)(unsigned))dlsym(f.handle, "cuInit");
    int (*count_fn)(int *) = (int (*)(int *))dlsym(f.handle, "cuDeviceGetCount");
    int (*get)(int *, int) = (int (*)(int *, int))dlsym(f.handle, "cuDeviceGet");
    int (*attr)(int *, int, int) =
        (int (*)(int *, int, int))dlsym(f.handle, "cuDeviceGetAttribute");
    int (*version)(int *) = (int (*)(int *))dlsym(f.handle, "cuDriverGetVersion");
    int (*name_fn)(char *, int, int) =
        (int (*)(char *, int, int))dlsym(f.handle, "cuDeviceGetName");
    int (*mem_fn)(size_t *, int) = (int (*)(size_t *, int))dlsym(f.handle, "cuDeviceTotalMem_v2");
    int dv = 0;
    if (version && version(&dv) == 0)
        printf("driver:     %s (%s), CUDA %d.%d\n", f.path, f.where, dv / 1000, dv % 1000 / 10);
    else
        printf("driver:     %s (%s)\n", f.path, f.where);
    int rc = -1, count = 0;
    if (!init || !count_fn || !get || !attr || (rc = init(0)) != 0 ||
        (rc = count_fn(&count)) != 0 || count == 0) {
        char num[32];
        snprintf(num, sizeof num, "%d", rc);
        printf("GPUs:       none (%s)\n",
               rc ? "cuInit/cuDeviceGetCount failed" : "the driver reports 0 devices");
        problem(pr,
                "no GPU visible to this process (CUDA error %s%s): check nvidia-smi and "
                "CUDA_VISIBLE_DEVICES",
                rc ? num : "0 devices", "");
        return 0;
    }
    *count_out = count;
    int archs[64], na = nvrtc_supported_archs(archs, 64), usable = 0;
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    printf("GPUs:       %d visible%s%s%s\n", count, cvd ? " (CUDA_VISIBLE_DEVICES=" : "",
           cvd ? cvd : "", cvd ? ")" : "");
    for (int i = 0; i < count; i++) {
        int dev = 0, maj = 0, min = 0;
        char name[256] = "?";
        size_t mem = 0;
        if (get(&dev, i) != 0 || attr(&maj, 75, dev) != 0 || attr(&min, 76, dev) != 0) {
            printf("  GPU %d:    cannot be queried\n", i);
            continue;
        }
        if (name_fn) name_fn(name, (int)sizeof name, dev);
        if (mem_fn) mem_fn(&mem, dev);
        int arch = maj * 10 + min, known = na <= 0, ok_arch;
        for (int k = 0; k < na; k++) known |= archs[k] == arch;
        ok_arch = maj >= 8 && known;
        usable += ok_arch;
        printf(
            "  GPU %d:    %s, %.1f GiB, compute capability %d.%d -> kernels compiled for sm_%d%s\n",
            i, name, (double)mem / (1 << 30), maj, min, arch,
            maj < 8  ? " (not usable: bf16 kernels need 8.0+)"
            : !known ? " (this NVRTC cannot compile it)"
                     : "");
        char a[64];
        snprintf(a, sizeof a, "GPU %d (sm_%d)", i, arch);
        if (maj >= 8 && !known)
            problem(pr, "%s: this NVRTC does not compile for it: use a newer CUDA toolkit%s", a,
                    "");
    }
    if (usable == 0)
        problem(pr, "no GPU with compute capability 8.0+ that NVRTC compiles for%s%s", "", "");
    return usable;
}

static void report_library(CudaLib lib, Problems *pr, int needed, int *found) {
    char why[4096], ver[64] = "";
    CudaLibFound f;
    *found = cudalib_open(lib, &f, why, sizeof why) == 0;
    if (!*found) {
        printf("%-11s not found%s\n", cudalib_name(lib),
               needed ? "" : " (only needed for several processes)");
        if (needed)
            problem(pr, "%s", why, "");
        else
            printf("            %s\n", why);
        return;
    }
    if (lib == CUDALIB_CUBLAS) {
        int (*prop)(int, int *) = (int (*)(int, int *))dlsym(f.handle, "cublasGetProperty");
        int a = 0, b = 0, c = 0;
        if (prop && !prop(0, &a) && !prop(1, &b) && !prop(2, &c))
            snprintf(ver, sizeof ver, "%d.%d.%d", a, b, c);
    } else if (lib == CUDALIB_CUBLASLT) {
        size_t (*lv)(void) = (size_t(*)(void))dlsym(f.handle, "cublasLtGetVersion");
        if (lv) {
            size_t v = lv();
            snprintf(ver, sizeof ver, "%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
        }
    } else if (lib == CUDALIB_NCCL) {
        int (*nv)(int *) = (int (*)(int *))dlsym(f.handle, "ncclGetVersion");
        int v = 0;
        if (nv && nv(&v) == 0)
            snprintf(ver, sizeof ver, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    }
    printf("%-11s %s (%s)%s%s\n", cudalib_name(lib), f.path, f.where, ver[0] ? ", version " : "",
           ver);
}

static int doctor_usage(FILE *o, int rc) {
    fprintf(o, "usage: boost doctor\n"
               "  what a GPU run finds here: GPUs, driver, NVRTC, cuBLAS, cuBLASLt, NCCL, MPI, the "
               "device of\n"
               "  this process; what is missing and how to fix it. Exit 0: a GPU run can start; 1: "
               "it cannot.\n"
               "  Libraries: BOOST_NVRTC, BOOST_CUBLAS, BOOST_CUBLASLT, BOOST_NCCL, BOOST_LIBCUDA "
               "(files),\n"
               "  CUDA_HOME (lib64/, lib/), the loader path, Python wheels (nvidia/*/lib), conda "
               "(docs/cuda.md).\n");
    return rc;
}

int cmd_doctor(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return doctor_usage(stdout, 0);
        fprintf(stderr, "boost doctor: unknown argument '%s'\n", argv[i]);
        return doctor_usage(stderr, 2);
    }
    Problems pr = {0};
    printf("boost doctor: what a GPU run finds on this machine\n\n");
    /* NVRTC first: the GPUs' lines say whether it compiles for their arch */
    char why[4096], path[4096], where[96], include[1024];
    int maj = 0, min = 0, have_nvrtc = nvrtc_available(why, sizeof why);
    int count = 0, usable = report_gpus(&pr, &count);
    printf("\n");
    if (have_nvrtc &&
        nvrtc_library(path, sizeof path, where, sizeof where, include, sizeof include) == 0) {
        nvrtc_version(&maj, &min);
        char builtins[1024] = "not loaded";
        dl_iterate_phdr(builtins_cb, builtins);
        printf("%-11s %s (%s), version %d.%d\n            builtins %s\n            headers  %s\n",
               "NVRTC", path, where, maj, min, builtins, include);
        int archs[64], na = nvrtc_supported_archs(archs, 64);
        if (na > 0) printf("            compiles sm_%d .. sm_%d\n", archs[0], archs[na - 1]);
    } else {
        printf("%-11s not found\n", "NVRTC");
        problem(&pr, "%s", why, "");
    }
    int have_blas = 0, have_lt = 0, have_nccl = 0;
    report_library(CUDALIB_CUBLAS, &pr, 1, &have_blas);
    report_library(CUDALIB_CUBLASLT, &pr, 0, &have_lt);
    int wr = 0, ws = 1;
    char werr[256];
    int world = world_from_env(&wr, &ws, werr, sizeof werr);
    if (world < 0) problem(&pr, "launcher environment: %s", werr, "");
    report_library(CUDALIB_NCCL, &pr, world == 1, &have_nccl);
    const char *mpi_names[] = {"libmpi.so.40", "libmpi.so"};
    void *mpi = NULL;
    for (int i = 0; i < 2 && !mpi; i++) mpi = dlopen(mpi_names[i], RTLD_LAZY | RTLD_LOCAL);
    struct link_map *lm = NULL;
    if (mpi && dlinfo(mpi, RTLD_DI_LINKMAP, &lm) == 0 && lm)
        printf(
            "%-11s %s (Open MPI: mpirun of CPU processes; GPU ranks share the NCCL id by file)\n",
            "MPI", lm->l_name);
    else
        printf("%-11s not found (only mpirun of CPU processes needs Open MPI; GPU ranks share the "
               "NCCL id by file)\n",
               "MPI");
    printf("\n");
    if (count > 0) {
        int ord = 0;
        char how[600], err[1200];
        if (cuda_pick_device(count, &ord, how, sizeof how, err, sizeof err) == 0)
            printf("this process: %s\n", how);
        else {
            printf("this process: refused: %s\n", err);
            problem(&pr, "%s", err, "");
        }
    }
    if (world == 1)
        printf("world:      rank %d of %d (NCCL %s)\n", wr, ws, have_nccl ? "found" : "missing");
    int can_run = have_nvrtc && have_blas && usable > 0 && pr.n == 0;
    if (pr.n) {
        printf("\nmissing or wrong:\n");
        for (int i = 0; i < pr.n; i++) printf("  - %s\n", pr.lines[i]);
    }
    printf("\n%s\n",
           can_run
               ? "verdict: a GPU run can start here (--backend cuda)"
               : "verdict: a GPU run cannot start here (see above; --backend cpu runs everywhere)");
    return can_run ? 0 : 1;
}
