/* cudalibs.c: finds and opens the CUDA-side libraries (see cudalibs.h for the search order).
 * One table row per library: its file names, the variable naming an explicit file, the wheel
 * folders that carry it, and the library of the same folder to preload before it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/cudalibs.h"

#ifndef BOOST_CUDA_HOME
#define BOOST_CUDA_HOME "/usr/local/cuda"
#endif
#define DEFAULT_HOME (BOOST_CUDA_HOME[0] ? BOOST_CUDA_HOME : "/usr/local/cuda")

typedef struct {
    const char *name, *env, *env_old;
    const char *files[4]; /* NULL-terminated, preferred first */
    const char *wheels[3]; /* sub-folders of site-packages/nvidia */
    const char *companion; /* preloaded from the same folder: prefix of its file name */
    int toolkit; /* searched in CUDA_HOME and the toolkit default */
    const char *fix; /* how to install it */
} LibRow;

static const LibRow rows[CUDALIB_COUNT] = {
    [CUDALIB_DRIVER] = {"CUDA driver",
                        "BOOST_LIBCUDA",
                        NULL,
                        {"libcuda.so.1", "libcuda.so", NULL},
                        {NULL},
                        NULL,
                        0,
                        "install the NVIDIA driver (libcuda.so.1 comes with it)"},
    [CUDALIB_NVRTC] = {"NVRTC",
                       "BOOST_NVRTC",
                       NULL,
                       {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", NULL},
                       {"cu13/lib", "cuda_nvrtc/lib", NULL},
                       "libnvrtc-builtins",
                       1,
                       "install the CUDA toolkit or `pip install nvidia-cuda-nvrtc`"},
    [CUDALIB_CUBLAS] = {"cuBLAS",
                        "BOOST_CUBLAS",
                        "BOOST_LIBCUBLAS",
                        {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL},
                        {"cu13/lib", "cublas/lib", NULL},
                        "libcublasLt",
                        1,
                        "install the CUDA toolkit or `pip install nvidia-cublas`"},
    [CUDALIB_CUBLASLT] = {"cuBLASLt",
                          "BOOST_CUBLASLT",
                          NULL,
                          {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", NULL},
                          {"cu13/lib", "cublas/lib", NULL},
                          NULL,
                          1,
                          "install the CUDA toolkit or `pip install nvidia-cublas`"},
    [CUDALIB_NCCL] = {"NCCL",
                      "BOOST_NCCL",
                      "BOOST_LIBNCCL",
                      {"libnccl.so.2", "libnccl.so", NULL},
                      {"nccl/lib", NULL},
                      NULL,
                      1,
                      "install NCCL or `pip install nvidia-nccl-cu13`"},
};

const char *cudalib_name(CudaLib lib) { return rows[lib].name; }
const char *cudalib_env(CudaLib lib) { return rows[lib].env; }

/* ---- Python wheels: the site-packages/nvidia folders, found once ---- */
static char wheel_roots[4096];
static pthread_once_t wheel_once = PTHREAD_ONCE_INIT;

static void add_root(const char *dir) {
    char real[PATH_MAX];
    if (!realpath(dir, real)) return;
    size_t len = strlen(real);
    for (const char *p = wheel_roots; (p = strstr(p, real)); p += len)
        if ((p == wheel_roots || p[-1] == '\n') && (p[len] == '\n' || !p[len]))
            return; /* have it */
    size_t used = strlen(wheel_roots);
    if (used + len + 2 < sizeof wheel_roots)
        snprintf(wheel_roots + used, sizeof wheel_roots - used, "%s%s", used ? "\n" : "", real);
}

static void add_site_globs(const char *prefix) {
    if (!prefix || !*prefix) return;
    char pat[PATH_MAX];
    snprintf(pat, sizeof pat, "%s/lib/python3*/site-packages/nvidia", prefix);
    glob_t g;
    if (glob(pat, 0, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; i++) add_root(g.gl_pathv[i]);
    globfree(&g);
}

static void find_wheel_roots(void) {
    const char *pp = getenv("PYTHONPATH");
    if (pp && *pp) {
        char buf[4096], dir[PATH_MAX];
        snprintf(buf, sizeof buf, "%s", pp);
        for (char *save = NULL, *e = strtok_r(buf, ":", &save); e; e = strtok_r(NULL, ":", &save)) {
            snprintf(dir, sizeof dir, "%s/nvidia", e);
            add_root(dir);
        }
    }
    add_site_globs(getenv("VIRTUAL_ENV"));
    add_site_globs(getenv("CONDA_PREFIX"));
    /* the python3 on PATH (or $PYTHON): where `import nvidia` finds the wheels */
    const char *py = getenv("PYTHON");
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "'%s' -c 'import nvidia; print(\"\\n\".join(nvidia.__path__))' 2>/dev/null",
             py && *py && !strchr(py, '\'') ? py : "python3");
    FILE *f = popen(cmd, "r");
    if (!f) return;
    char line[PATH_MAX];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0] == '/') add_root(line);
    }
    pclose(f);
}

const char *cudalib_wheel_roots(void) {
    pthread_once(&wheel_once, find_wheel_roots);
    return wheel_roots;
}

/* ---- opening ---- */
typedef struct {
    char tried[2048];
} Trail;

static void trail_add(Trail *t, const char *fmt, const char *a, const char *b) {
    size_t used = strlen(t->tried);
    if (used + 8 >= sizeof t->tried) return;
    if (used) snprintf(t->tried + used, sizeof t->tried - used, "; ");
    used = strlen(t->tried);
    snprintf(t->tried + used, sizeof t->tried - used, fmt, a, b);
}

static void fill_found(CudaLibFound *out, void *h, const char *fallback_path, const char *where) {
    out->handle = h;
    struct link_map *lm = NULL;
    const char *p = dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0]
                        ? lm->l_name
                        : fallback_path;
    snprintf(out->path, sizeof out->path, "%s",
             p); /* as opened: a symlinked folder keeps its name */
    snprintf(out->dir, sizeof out->dir, "%s", out->path);
    char *slash = strrchr(out->dir, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(out->dir, sizeof out->dir, ".");
    snprintf(out->where, sizeof out->where, "%s", where);
}

/* Preload the companion of `file` (in dir) whose name is prefix + file's ".so..." suffix. */
static void preload_companion(const LibRow *r, const char *dir, const char *file) {
    if (!r->companion) return;
    const char *so = strstr(file, ".so");
    char pat[PATH_MAX];
    snprintf(pat, sizeof pat, "%s/%s%s*", dir, r->companion, so ? so : ".so");
    glob_t g;
    if (glob(pat, 0, NULL, &g) == 0 && g.gl_pathc > 0)
        dlopen(g.gl_pathv[g.gl_pathc - 1], RTLD_NOW | RTLD_GLOBAL); /* the longest version last */
    globfree(&g);
}

/* Open the first of the row's files present in dir. */
static void *open_in(const LibRow *r, const char *dir, Trail *t, char *path, size_t pn) {
    for (int i = 0; r->files[i]; i++) {
        snprintf(path, pn, "%s/%s", dir, r->files[i]);
        if (access(path, F_OK) != 0) continue;
        preload_companion(r, dir, r->files[i]);
        void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (h) return h;
        const char *e = dlerror();
        trail_add(t, "%s: %s", path, e ? e : "dlopen failed");
    }
    return NULL;
}

static int open_home(const LibRow *r, const char *home, const char *label, CudaLibFound *out,
                     Trail *t) {
    const char *subs[] = {"lib64", "lib"};
    char dir[PATH_MAX], path[PATH_MAX];
    for (int s = 0; s < 2; s++) {
        snprintf(dir, sizeof dir, "%s/%s", home, subs[s]);
        void *h = open_in(r, dir, t, path, sizeof path);
        if (h) {
            char w[96];
            snprintf(w, sizeof w, "%s %s/", label, subs[s]);
            fill_found(out, h, path, w);
            return 1;
        }
    }
    trail_add(t, "%s=%s (lib64/, lib/)", label, home);
    return 0;
}

int cudalib_open(CudaLib lib, CudaLibFound *out, char *why, size_t n) {
    memset(out, 0, sizeof *out);
    if ((int)lib < 0 || lib >= CUDALIB_COUNT) {
        snprintf(why, n, "unknown library %d", (int)lib);
        return -1;
    }
    const LibRow *r = &rows[lib];
    char path[PATH_MAX];
    /* 1. an explicit file: it or nothing */
    const char *env_name = r->env, *file = getenv(r->env);
    if ((!file || !*file) && r->env_old) {
        env_name = r->env_old;
        file = getenv(r->env_old);
    }
    if (file && *file) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", file);
        char *slash = strrchr(dir, '/');
        if (slash) {
            *slash = 0;
            preload_companion(r, dir, slash + 1);
        }
        void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            snprintf(why, n, "%s=%s cannot be loaded: %s (point it at an existing %s, or unset it)",
                     env_name, file, e ? e : "dlopen failed", r->files[0]);
            return -1;
        }
        fill_found(out, h, file, env_name);
        return 0;
    }
    Trail t = {{0}};
    /* 2. the toolkit the user named */
    const char *home = getenv("BOOST_CUDA_HOME"), *label = "BOOST_CUDA_HOME";
    if (!home || !*home) {
        home = getenv("CUDA_HOME");
        label = "CUDA_HOME";
    }
    if (r->toolkit && home && *home && open_home(r, home, label, out, &t)) return 0;
    /* 3. the loader path */
    for (int i = 0; r->files[i]; i++) {
        void *h = dlopen(r->files[i], RTLD_NOW | RTLD_GLOBAL);
        if (h) {
            fill_found(out, h, r->files[i], "loader path");
            return 0;
        }
    }
    trail_add(&t, "%s%s", "the loader path (LD_LIBRARY_PATH, ldconfig)", "");
    /* 4. Python wheels */
    if (r->wheels[0]) {
        const char *roots = cudalib_wheel_roots();
        char buf[4096], dir[PATH_MAX];
        snprintf(buf, sizeof buf, "%s", roots);
        for (char *save = NULL, *root = strtok_r(buf, "\n", &save); root;
             root = strtok_r(NULL, "\n", &save))
            for (int w = 0; r->wheels[w]; w++) {
                snprintf(dir, sizeof dir, "%s/%s", root, r->wheels[w]);
                void *h = open_in(r, dir, &t, path, sizeof path);
                if (h) {
                    fill_found(out, h, path, "Python wheel");
                    return 0;
                }
            }
        trail_add(&t, "Python wheels (%s)",
                  roots[0] ? "site-packages/nvidia: none has it" : "none found", "");
    }
    /* 5. conda */
    const char *conda = getenv("CONDA_PREFIX");
    if (r->toolkit && conda && *conda) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s/lib", conda);
        void *h = open_in(r, dir, &t, path, sizeof path);
        if (h) {
            fill_found(out, h, path, "conda");
            return 0;
        }
        trail_add(&t, "conda %s/lib", conda, "");
    }
    /* 6. the build's default toolkit folder; the driver: the system folders */
    if (r->toolkit && (!home || !*home || strcmp(home, DEFAULT_HOME) != 0) &&
        open_home(r, DEFAULT_HOME, "toolkit default", out, &t))
        return 0;
    if (!r->toolkit) {
        const char *sys[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib64",
                             "/usr/lib/aarch64-linux-gnu", "/usr/lib/wsl/lib", NULL};
        for (int i = 0; sys[i]; i++) {
            void *h = open_in(r, sys[i], &t, path, sizeof path);
            if (h) {
                fill_found(out, h, path, "system folder");
                return 0;
            }
        }
        trail_add(&t, "%s%s", "the system library folders", "");
    }
    snprintf(why, n, "%s (%s) not found; tried %s: %s, or set %s=/path/to/%s", r->name, r->files[0],
             t.tried, r->fix, r->env, r->files[0]);
    return -1;
}

void cudalib_include_for(const char *lib_dir, char *inc, size_t n) {
    char cand[PATH_MAX], hdr[PATH_MAX + 16];
    if (lib_dir && *lib_dir) {
        const char *rel[] = {"../include", "../../cuda_runtime/include", "../../cu13/include"};
        for (int i = 0; i < 3; i++) {
            snprintf(cand, sizeof cand, "%s/%s", lib_dir, rel[i]);
            snprintf(hdr, sizeof hdr, "%s/cuda_bf16.h", cand);
            char real[PATH_MAX];
            if (access(hdr, R_OK) == 0 && realpath(cand, real)) {
                snprintf(inc, n, "%s", real);
                return;
            }
        }
    }
    snprintf(inc, n, "%s/include", cudalib_cuda_home());
}

/* The CUDA toolkit folder: BOOST_CUDA_HOME, CUDA_HOME, then the build-time default. */
const char *cudalib_cuda_home(void) {
    const char *h = getenv("BOOST_CUDA_HOME");
    if (h && *h) return h;
    h = getenv("CUDA_HOME");
    if (h && *h) return h;
    return BOOST_CUDA_HOME[0] ? BOOST_CUDA_HOME : "/usr/local/cuda";
}
