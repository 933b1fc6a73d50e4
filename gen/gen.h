/* gen.h: the generator's public API, used by the CLI (cli/) and the tests: load a run spec (Lua,
 * sandboxed) into a Run, and write a run's outputs (plan.txt, kernels.cu, report.md) to a folder.
 * Errors come back as "file:line: what is wrong (what to do)"; status 2 means bad input. */
#ifndef BOOST_GEN_H
#define BOOST_GEN_H

#include <stddef.h>
#include <stdio.h>
#include "gen/model.h"

/* run_arg: a path to a run spec, or a name found as specs/runs/NAME.lua. The specs folder is
 * $BOOST_SPECS, else the "specs" folder that holds the run file's folder, else ./specs.
 * Overrides are applied after the spec is evaluated and checked like spec fields.
 * Returns 0, or 2 with a message in err. */
int spec_load_run(const char *run_arg, const Override *ov, int nov, Run *run, char *err, size_t errlen);
/* The same for the cost model (boost project): a pipeline run with fewer micro-batches than stages is
 * priced (its bubble is large) instead of refused; plans still need grad_accum >= pp. */
int spec_load_run_projection(const char *run_arg, const Override *ov, int nov, Run *run, char *err, size_t errlen);

/* Parse "-D name=value" style arguments: returns the number of overrides stored in ov (at most
 * max), or -1 with a message when one is malformed. */
int parse_override(const char *arg, Override *ov, char *err, size_t errlen);

/* Write plan.txt, kernels.cu and report.md for a run into outdir (created if absent). All or
 * nothing: files are written to a temporary folder beside outdir and renamed into place, so a
 * failure never leaves a partial output. Returns 0, 2 (bad input) or 1 (I/O). */
/* gen/infer_plan.c: the decode step with a KV cache. infer_files_write writes infer.txt (one token),
 * prefill.txt (a chunk of up to 32 prompt tokens into the same caches) and infer-kernels.cu into dir (nothing for an MoE model); infer_report_write appends the report's
 * inference section (KV-cache memory, per-token decode collectives of every layout). */
int infer_files_write(const Run *run, const char *dir, char *err, size_t errlen);
int infer_report_write(const Run *run, FILE *f);

/* A cluster spec (specs/clusters/NAME.lua, `cluster "NAME" { gpu = ..., gpus_per_node = ..., ... }`):
 * the GPU it is made of and the figures that override the GPU file's (-1: not given, the GPU's
 * stays). spec_load_cluster takes a name in $BOOST_SPECS/clusters (else ./specs/clusters) or a
 * path; 0, or 2 with "file:line: message" in err. cluster_apply overrides g's figures. */
typedef struct {
    char name[NAME_LEN], gpu[NAME_LEN];
    int gpus_per_node, nodes;                 /* nodes 0: no limit */
    double nvlink_gbs, net_gbs, nvlink_latency_us, net_latency_us, memory_gb;
} Cluster;
int spec_load_cluster(const char *arg, Cluster *out, char *err, size_t errlen);
void cluster_apply(const Cluster *cl, Gpu *g);

/* Every GPU spec in gpus_dir (NULL: $BOOST_SPECS/gpus, else ./specs/gpus), sorted by name,
 * NAME.tuning.lua not applied: up to max into out. The count, or -1 with "file:line: message". */
int spec_load_gpus(const char *gpus_dir, Gpu *out, int max, char *err, size_t errlen);
#define MAX_GPU_SPECS 32
/* The archs of the GPU specs in gpus_dir (as spec_load_gpus) marked kernel_report, each once, in
 * the specs' name order (the report's kernel table, `boost kernels` without --arch): their count
 * (up to max), or -1 with the error. */
int gen_report_archs(const char *gpus_dir, char archs[][16], int max, char *err, size_t errlen);

/* The longest output folder name (characters) gen_write takes: the paths of the files it writes
 * (DIR.tmp-PID/infer-kernels.cu and the others) fit GEN_OUT_PATH + 64 bytes, here and in
 * gen/infer_plan.c; a longer one is refused up front, never cut. */
#define GEN_OUT_PATH 4096
#define GEN_OUTDIR_MAX (GEN_OUT_PATH - 64)
int gen_write(const Run *run, const char *outdir, char *err, size_t errlen);

/* gen_write, and with compile_kernels set also compile kernels.cu with NVRTC for the archs of the
 * GPU specs marked kernel_report (spec_load_gpus; each arch once, in name order) and add a table of registers, static shared memory and spills per kernel to report.md
 * (NVRTC missing or a compile error: status 1 with the log; nothing is written). */
int gen_write_ex(const Run *run, const char *outdir, int compile_kernels, char *err, size_t errlen);

#endif
