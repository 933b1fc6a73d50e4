/* env.c: runtime_env() reads the runtime's environment variables once per process (common/env.h);
 * env_repo_root() and env_specs_dir() locate the repository and the specs folder at each call. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/env.h"   // defines: RuntimeEnv, runtime_env, env_specs_dir, ...

static RuntimeEnv env_read;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static int is_one(const char *name) {
    const char *v = getenv(name);
    return v && *v == '1';
}

static void env_load(void) {
    const char *t = getenv("BOOST_NCCL_TIMEOUT");
    env_read.nccl_timeout_s = t && atof(t) > 0 ? atof(t) : 0;
    env_read.cuda_sync = is_one("BOOST_CUDA_SYNC");
    env_read.cuda_graph = is_one("BOOST_CUDA_GRAPH");
    env_read.no_grouped = getenv("BOOST_NO_GROUPED") != NULL;
    env_read.no_overlap = is_one("BOOST_NO_OVERLAP");
    env_read.verbose = is_one("BOOST_VERBOSE");
    env_read.verbose_any = getenv("BOOST_VERBOSE") != NULL;
    const char *p = getenv("BOOST_PROFILE");
    env_read.profile = p && p[0] == '1' && p[1] == 0;
    const char *n = getenv("BOOST_THREADS");
    env_read.threads = n && *n && atoi(n) > 0 ? atoi(n) : 0;
}

const RuntimeEnv *runtime_env(void) {
    pthread_once(&env_once, env_load);
    return &env_read;
}

double runtime_nccl_timeout(double dflt) {
    double t = runtime_env()->nccl_timeout_s;
    return t > 0 ? t : dflt;
}

int env_repo_root(const char *var, const char *probe, char *out, size_t n) {
    const char *v = var ? getenv(var) : NULL;
    if (v && *v) { snprintf(out, n, "%s", v); return 1; }
    char dir[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (len <= 0) return -1;
    dir[len] = 0;
    for (int up = 0; up < 4; up++) {
        char *slash = strrchr(dir, '/');
        if (!slash) return -1;
        *slash = 0;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir[0] ? dir : "", probe);
        if (access(path, R_OK) == 0) { snprintf(out, n, "%s", dir[0] ? dir : "/"); return 0; }
    }
    return -1;
}

int env_specs_named(void) {
    const char *s = getenv("BOOST_SPECS");
    return s && *s;
}

const char *env_specs_dir(void) {
    const char *s = getenv("BOOST_SPECS");
    return s && *s ? s : "specs";
}
