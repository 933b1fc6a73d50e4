/* gen.c: the `boost gen` and `boost report` subcommands: parse RUN, -D overrides and options, load
 * the spec, then write the outputs (gen_write) or print the report (text or JSON).
 * Exit status: 0 success, 1 failure (I/O), 2 bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/commands.h"
#include "gen/gen.h"
#include "gen/report.h"

#define MAX_OV 64

static void gen_usage(FILE *f) {
    fprintf(f,
        "usage: boost gen RUN [-D name=value ...] [-o DIR] [--compile]\n"
        "  RUN   a run spec: a path, or NAME for specs/runs/NAME.lua\n"
        "  -D    override a spec setting, e.g. -D tp=4 -D layout=naive -D checkpoint=none\n"
        "  -o    output folder (default generated/<run name>), at most %d characters (a longer\n"
        "        name is refused: choose a folder nearer the current one); written all or nothing\n"
        "  --compile  also compile kernels.cu with NVRTC (no GPU needed) for the archs of the GPU\n"
        "        specs with kernel_report = true, and add registers, shared memory and spills per\n"
        "        kernel to report.md\n"
        "Writes plan.txt (the schedule the runtime executes), kernels.cu and report.md.\n",
        GEN_OUTDIR_MAX);
}

static void report_usage(FILE *f) {
    fprintf(f, "usage: boost report RUN [-D name=value ...] [--json]\n"
               "  prints parameters, FLOPs per token, per-layer collectives of the three layouts,\n"
               "  GEMM shapes and arithmetic intensity, and memory; --json for tools.\n");
}

/* Shared argument parsing: returns 0 and fills the run, or an exit status. */
static int parse_args(int argc, char **argv, int is_gen, Run *run, const char **outdir, int *json,
                      int *compile) {
    const char *run_arg = NULL;
    Override ov[MAX_OV];
    int nov = 0;
    char err[1024];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            is_gen ? gen_usage(stdout) : report_usage(stdout);
            return -1;
        }
        if (!strcmp(a, "-D") || !strncmp(a, "-D", 2)) {
            const char *v = a[2] ? a : (i + 1 < argc ? argv[++i] : NULL);
            if (!v) { fprintf(stderr, "boost %s: -D needs name=value\n", argv[0]); return 2; }
            if (nov >= MAX_OV) {
                fprintf(stderr, "boost %s: too many -D overrides (at most %d)\n", argv[0], MAX_OV);
                return 2;
            }
            if (parse_override(v, &ov[nov], err, sizeof err) < 0) {
                fprintf(stderr, "boost %s: %s\n", argv[0], err);
                return 2;
            }
            nov++;
        } else if (is_gen && !strcmp(a, "-o")) {
            if (i + 1 >= argc) { fprintf(stderr, "boost gen: -o needs a folder\n"); return 2; }
            *outdir = argv[++i];
        } else if (is_gen && !strcmp(a, "--compile")) {
            *compile = 1;
        } else if (!is_gen && !strcmp(a, "--json")) {
            *json = 1;
        } else if (a[0] == '-') {
            fprintf(stderr, "boost %s: unknown option '%s'\n", argv[0], a);
            is_gen ? gen_usage(stderr) : report_usage(stderr);
            return 2;
        } else if (!run_arg) {
            run_arg = a;
        } else {
            fprintf(stderr, "boost %s: one run at a time ('%s' and '%s')\n", argv[0], run_arg, a);
            return 2;
        }
    }
    if (!run_arg) { is_gen ? gen_usage(stderr) : report_usage(stderr); return 2; }
    if (spec_load_run(run_arg, ov, nov, run, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    return 0;
}

static int gen_main(Run *run, int argc, char **argv) {
    const char *outdir = NULL;
    int json = 0, compile = 0;
    int rc = parse_args(argc, argv, 1, run, &outdir, &json, &compile);
    if (rc) return rc < 0 ? 0 : rc;
    char def[PATH_LEN + 16], err[1024] = "";
    if (!outdir) { snprintf(def, sizeof def, "generated/%s", run->name); outdir = def; }
    rc = gen_write_ex(run, outdir, compile, err, sizeof err);
    if (rc) { fprintf(stderr, "boost gen: %s\n", err); return rc; }
    printf("wrote %s/plan.txt, kernels.cu, report.md\n", outdir);
    return 0;
}

static int report_main(Run *run, int argc, char **argv) {
    const char *outdir = NULL;
    int json = 0, compile = 0;
    int rc = parse_args(argc, argv, 0, run, &outdir, &json, &compile);
    if (rc) return rc < 0 ? 0 : rc;
    char err[1024] = "";
    rc = report_write(run, stdout, json, err, sizeof err);
    if (rc) { fprintf(stderr, "boost report: %s\n", err); return rc; }
    return 0;
}

/* The Run is large (per-layer tables): it lives on the heap for the command's length. */
int cmd_gen(int argc, char **argv) {
    Run *run = calloc(1, sizeof *run);
    if (!run) { fprintf(stderr, "boost gen: out of memory\n"); return 1; }
    int rc = gen_main(run, argc, argv);
    free(run);
    return rc;
}

int cmd_report(int argc, char **argv) {
    Run *run = calloc(1, sizeof *run);
    if (!run) { fprintf(stderr, "boost report: out of memory\n"); return 1; }
    int rc = report_main(run, argc, argv);
    free(run);
    return rc;
}
