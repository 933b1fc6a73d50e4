/* test_cudalibs.c: the library search of common/cudalibs.c on a wheel-style folder made here from
 * the toolkit's files (lib/ without lib64/, include/): CUDA_HOME pointing at it wins over the
 * loader path, NVRTC's builtins are preloaded from that same folder, cuda_bf16.h comes from its include/,
 * and a kernel using bf16 compiles; an explicit file that does not exist is refused with its name;
 * the Python wheel folders are found from PYTHONPATH. */
#define _GNU_SOURCE
#include <dirent.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/unit/testlib.h"
#include "common/cudalibs.h"
#include "common/nvrtc.h"

static char tmp[256];

/* Symlink every file of src whose name starts with one of the prefixes into dst. */
static int link_files(const char *src, const char *dst, const char *const *prefixes) {
    DIR *d = opendir(src);
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        for (int i = 0; prefixes[i]; i++)
            if (!strncmp(e->d_name, prefixes[i], strlen(prefixes[i]))) {
                char a[1024], b[1024];
                snprintf(a, sizeof a, "%s/%s", src, e->d_name);
                snprintf(b, sizeof b, "%s/%s", dst, e->d_name);
                n += symlink(a, b) == 0;
                break;
            }
    closedir(d);
    return n;
}

static int builtins_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    if (info->dlpi_name && strstr(info->dlpi_name, "libnvrtc-builtins.so")) {
        snprintf(data, 1024, "%s", info->dlpi_name);
        return 1;
    }
    return 0;
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/boost-cudalibs.XXXXXX");
    if (!mkdtemp(tmp)) {
        printf("FAIL - mkdtemp\n");
        return 1;
    }
    char site[512], nv[512];
    snprintf(site, sizeof site, "%s/site", tmp);
    snprintf(nv, sizeof nv, "%s/site/nvidia", tmp);
    mkdir(site, 0755);
    mkdir(nv, 0755);
    setenv("PYTHONPATH", site, 1);
    const char *roots = cudalib_wheel_roots();
    CHECK(strstr(roots, "/site/nvidia") != NULL, "wheel_roots_from_pythonpath", "roots: '%s'",
          roots);

    setenv("BOOST_NCCL", "/nonexistent/libnccl.so.2", 1);
    CudaLibFound f;
    char why[4096];
    int rc = cudalib_open(CUDALIB_NCCL, &f, why, sizeof why);
    CHECK(rc == -1 && strstr(why, "BOOST_NCCL=/nonexistent/libnccl.so.2 cannot be loaded"),
          "explicit_file_refused", "rc %d, why: %s", rc, why);
    unsetenv("BOOST_NCCL");

    const char *toolkit = "/usr/local/cuda";
    char tk_lib[512], tk_inc[512];
    snprintf(tk_lib, sizeof tk_lib, "%s/lib64", toolkit);
    snprintf(tk_inc, sizeof tk_inc, "%s/include/cuda_bf16.h", toolkit);
    if (access(tk_inc, R_OK) != 0) {
        printf("ok - wheel_style_cuda_home # SKIP no CUDA toolkit at %s\n", toolkit);
        TEST_EXIT();
    }
    char lib[512], inc[512];
    snprintf(lib, sizeof lib, "%s/home/lib", tmp);
    snprintf(inc, sizeof inc, "%s/home/include", tmp);
    char home[512];
    snprintf(home, sizeof home, "%s/home", tmp);
    mkdir(home, 0755);
    mkdir(lib, 0755);
    mkdir(inc, 0755);
    const char *lib_files[] = {"libnvrtc.so", "libnvrtc-builtins.so", NULL}, *all[] = {"", NULL};
    char tk_include[512];
    snprintf(tk_include, sizeof tk_include, "%s/include", toolkit);
    int nl = link_files(tk_lib, lib, lib_files), ni = link_files(tk_include, inc, all);
    CHECK(nl >= 2 && ni > 10, "wheel_style_folder_made", "%d library links, %d headers", nl, ni);
    setenv("CUDA_HOME", home, 1);
    unsetenv("BOOST_CUDA_HOME");
    unsetenv("BOOST_NVRTC");
    rc = cudalib_open(CUDALIB_NVRTC, &f, why, sizeof why);
    CHECK(rc == 0 && !strncmp(f.dir, lib, strlen(lib)) && !strcmp(f.where, "CUDA_HOME lib/"),
          "nvrtc_from_cuda_home_lib", "rc %d, %s from '%s' (%s)", rc, f.path, f.where,
          rc ? why : "");
    char builtins[1024] = "";
    dl_iterate_phdr(builtins_cb, builtins);
    CHECK(!strncmp(builtins, lib, strlen(lib)), "nvrtc_builtins_preloaded_from_same_folder",
          "loaded: '%s'", builtins);
    char path[4096], where[96], include[1024];
    rc = nvrtc_library(path, sizeof path, where, sizeof where, include, sizeof include);
    CHECK(rc == 0 && strstr(include, "/home/include") && !strncmp(path, lib, strlen(lib)),
          "nvrtc_include_matches", "rc %d, library %s, include %s", rc, path, include);
    const char *src = "#include <cuda_bf16.h>\nextern \"C\" __global__ void k(__nv_bfloat16 *x) "
                      "{ x[threadIdx.x] = __float2bfloat16(1.0f); }\n";
    KernelStat st[4];
    char err[8192];
    setenv("BOOST_CACHE", tmp, 1);
    int n = nvrtc_compile(src, "sm_90", NULL, NULL, st, 4, err, sizeof err);
    CHECK(n == 1 && !strcmp(st[0].name, "k"), "bf16_kernel_compiles_with_those_headers",
          "n %d: %.300s", n, err);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("# could not remove %s\n", tmp);
    TEST_EXIT();
}
