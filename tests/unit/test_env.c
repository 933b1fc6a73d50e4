/* test_env.c: common/env.h and common/test_hooks.h: the runtime's variables parsed as documented
 * and read once (a later change is not seen), the repository found from the binary or named by a
 * variable, the specs folder's default, and the test hooks' values. Run from the repository
 * root. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/env.h"
#include "common/test_hooks.h"
#include "tests/unit/testlib.h"

int main(void) {
    setenv("BOOST_NCCL_TIMEOUT", "42.5", 1);
    setenv("BOOST_CUDA_SYNC", "1", 1);
    setenv("BOOST_CUDA_GRAPH", "0", 1);
    setenv("BOOST_NO_GROUPED", "", 1);
    setenv("BOOST_VERBOSE", "yes", 1);
    setenv("BOOST_PROFILE", "12", 1);
    setenv("BOOST_THREADS", "-3", 1);
    unsetenv("BOOST_NO_OVERLAP");
    const RuntimeEnv *e = runtime_env();
    CHECK(e->nccl_timeout_s == 42.5 && runtime_nccl_timeout(600) == 42.5, "nccl_timeout_parsed",
          "%g", e->nccl_timeout_s);
    CHECK(e->cuda_sync == 1 && e->cuda_graph == 0 && e->no_grouped == 1 && e->no_overlap == 0,
          "switches_parsed", "sync %d graph %d grouped %d overlap %d", e->cuda_sync, e->cuda_graph,
          e->no_grouped, e->no_overlap);
    CHECK(e->verbose == 0 && e->verbose_any == 1 && e->profile == 0 && e->threads == 0,
          "only_the_documented_values_count", "verbose %d/%d profile %d threads %d", e->verbose,
          e->verbose_any, e->profile, e->threads);
    setenv("BOOST_NCCL_TIMEOUT", "7", 1);
    setenv("BOOST_THREADS", "5", 1);
    CHECK(runtime_env()->nccl_timeout_s == 42.5 && runtime_env()->threads == 0,
          "read_once_per_process", "timeout %g threads %d", runtime_env()->nccl_timeout_s,
          runtime_env()->threads);

    char cwd[PATH_MAX], root[PATH_MAX], real[PATH_MAX];
    int rc = env_repo_root(NULL, "tests/unit/test_env.c", root, sizeof root);
    CHECK(getcwd(cwd, sizeof cwd) && rc == 0 && realpath(root, real) && !strcmp(real, cwd),
          "repository_found_above_the_binary", "rc %d: '%s' against '%s'", rc, root, cwd);
    rc = env_repo_root(NULL, "no/such/file-in-any-folder", root, sizeof root);
    CHECK(rc == -1, "nothing_found_is_minus_one", "rc %d: %s", rc, root);
    setenv("BOOST_ROOT", "/somewhere/else", 1);
    rc = env_repo_root("BOOST_ROOT", "tests/unit/test_env.c", root, sizeof root);
    CHECK(rc == 1 && !strcmp(root, "/somewhere/else"), "variable_names_the_repository",
          "rc %d: %s", rc, root);
    unsetenv("BOOST_ROOT");

    unsetenv("BOOST_SPECS");
    CHECK(!strcmp(env_specs_dir(), "specs") && !env_specs_named(), "specs_default", "%s",
          env_specs_dir());
    setenv("BOOST_SPECS", "/tmp/my-specs", 1);
    CHECK(!strcmp(env_specs_dir(), "/tmp/my-specs") && env_specs_named(), "specs_read_at_each_call",
          "%s", env_specs_dir());

    unsetenv("BOOST_TEST_SKIP_COLL_WAIT");
    int none = test_hook_skip_coll_wait();
    setenv("BOOST_TEST_SKIP_COLL_WAIT", "gather", 1);
    int gather = test_hook_skip_coll_wait();
    setenv("BOOST_TEST_SKIP_COLL_WAIT", "1", 1);
    CHECK(none == 0 && gather == 2 && test_hook_skip_coll_wait() == 1, "skip_coll_wait_values",
          "%d %d %d", none, gather, test_hook_skip_coll_wait());
    setenv("BOOST_TEST_CKPT_SLEEP_MS", "-5", 1);
    long neg = test_hook_ckpt_sleep_ms();
    setenv("BOOST_TEST_CKPT_SLEEP_MS", "150", 1);
    CHECK(neg == 0 && test_hook_ckpt_sleep_ms() == 150, "ckpt_sleep_values", "%ld %ld", neg,
          test_hook_ckpt_sleep_ms());
    TEST_EXIT();
}
