/* env.h: the environment variables the runtime reads, named and parsed in one place and read once
 * per process (runtime_env()), plus the folders the generator and the CLI locate (the repository,
 * specs/). Test-only
 * variables (BOOST_TEST_*) are in common/test_hooks.h; the launcher's (ranks, devices) in
 * runtime/world.h; the CUDA library search's in common/cudalibs.h. */
#ifndef BOOST_ENV_H
#define BOOST_ENV_H

typedef struct {
    double nccl_timeout_s;  /* BOOST_NCCL_TIMEOUT: seconds a collective (and the NCCL id wait) may
                             * take; 0 when unset or not a positive number: the caller's default */
    int cuda_sync;          /* BOOST_CUDA_SYNC=1: synchronise after every step */
    int cuda_graph;         /* BOOST_CUDA_GRAPH=1: capture a pass once and replay it */
    int no_grouped;         /* BOOST_NO_GROUPED set: grouped GEMMs run as loops of single GEMMs */
    int no_overlap;         /* BOOST_NO_OVERLAP=1: wait for each collective once issued */
    int verbose;            /* BOOST_VERBOSE=1: the overlap report */
    int verbose_any;        /* BOOST_VERBOSE set to anything: the training loop's extra notes */
    int profile;            /* BOOST_PROFILE=1: time every step of the plan */
    int threads;            /* BOOST_THREADS: CPU threads in all; 0 (unset): the free cores */
} RuntimeEnv;

/* The variables above, read at the first call (later changes to the environment are not seen). */
const RuntimeEnv *runtime_env(void);

/* BOOST_NCCL_TIMEOUT in seconds, or dflt when it is unset. */
double runtime_nccl_timeout(double dflt);

/* The specs folder: BOOST_SPECS, else "specs" (relative to the working folder). Read at each call:
 * the generator is a library whose callers (and tests) may change it. */
const char *env_specs_dir(void);
/* The BOOST repository's folder, where what the binary needs beside it lies (templates/,
 * tools/): the variable var when set (BOOST_HOME for the templates, BOOST_ROOT for the corpus
 * tools; not checked: 1), else the nearest of the binary's folder and the three above it that
 * holds probe (a path inside the repository, e.g. "templates/prelude.cuh": 0), else -1. */
int env_repo_root(const char *var, const char *probe, char *out, size_t n);

/* Whether BOOST_SPECS names the folder (else the caller may look beside the run's file). */
int env_specs_named(void);

#endif
