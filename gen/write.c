/* write.c: gen_write: one run's outputs (plan.txt, kernels.cu, report.md) into a folder, all or
 * nothing: everything is written into DIR.tmp-PID beside it and renamed into place at the end;
 * on any error the temporary folder is removed and DIR is left as it was. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gen/gen.h"
#include "gen/ir.h"
#include "gen/pipeline.h"
#include "gen/plan_write.h"
#include "gen/report.h"
#include "gen/pp.h"
#include "common/nvrtc.h"
#include "common/files.h"   // defines: file_read_all

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}
static void rm_tree(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }


/* mkdir -p for the parents of path (at most GEN_OUTDIR_MAX characters) */
static int make_parents(const char *path) {
    char buf[GEN_OUTDIR_MAX + 1];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return -1;
        *p = '/';
    }
    return 0;
}

#define MAX_KERNEL_STATS 1024

int gen_report_archs(const char *gpus_dir, char archs[][16], int max, char *err, size_t errlen) {
    Gpu *gpus = calloc(MAX_GPU_SPECS, sizeof *gpus);
    if (!gpus) { snprintf(err, errlen, "out of memory"); return -1; }
    int n = spec_load_gpus(gpus_dir, gpus, MAX_GPU_SPECS, err, errlen), count = 0;
    for (int i = 0; i < n; i++) {
        int seen = !gpus[i].kernel_report;
        for (int j = 0; j < count && !seen; j++) seen = !strcmp(archs[j], gpus[i].arch);
        if (!seen && count < max) snprintf(archs[count++], 16, "%s", gpus[i].arch);
    }
    free(gpus);
    return n < 0 ? -1 : count;
}

/* Append "## Kernels" to report.md: every kernel of kernels.cu compiled by NVRTC for the archs of
 * the GPU specs marked kernel_report (those beside the run's GPU file when it is
 * specs/gpus/NAME.lua, else the default folder), one row per kernel and arch. */
static int append_kernel_table(FILE *report, const char *cu_path, const Gpu *gpu, char *err,
                               size_t errlen) {
    char *src = file_read_all(cu_path, (size_t)1 << 30, NULL, err, errlen);
    if (!src) return 1;
    if (!nvrtc_available(err, errlen)) { free(src); return 1; }
    char archs[8][16];
    char gpus_dir[PATH_LEN];
    snprintf(gpus_dir, sizeof gpus_dir, "%s", gpu->file);
    char *slash = strrchr(gpus_dir, '/');
    int beside = slash && slash - gpus_dir >= 4 && !strncmp(slash - 4, "gpus", 4);
    if (beside) *slash = 0;
    int narch = gen_report_archs(beside ? gpus_dir : NULL, archs, 8, err, errlen);
    if (narch < 0) { free(src); return 1; }
    KernelStat *st = calloc(MAX_KERNEL_STATS, sizeof *st);
    if (!st) { free(src); snprintf(err, errlen, "out of memory"); return 1; }
    fprintf(report, "\n## Kernels (NVRTC, registers per thread, shared memory a block: static + "
                    "dynamic, spills)\n\n"
                    "| kernel | arch | registers | smem (B) | of it dynamic (B) | "
                    "spill stores/loads (B) |\n"
                    "|---|---|---:|---:|---:|---:|\n");
    int spills = 0;
    for (int a = 0; a < narch; a++) {
        char log[1 << 14];
        int k = nvrtc_compile(src, archs[a], NULL, NULL, st, MAX_KERNEL_STATS, log, sizeof log);
        if (k < 0) {
            snprintf(err, errlen, "%s: NVRTC (%s): %s", cu_path, archs[a], log);
            free(src);
            free(st);
            return 1;
        }
        for (int i = 0; i < k; i++) {
            if (!strncmp(st[i].name, "__", 2)) continue;   /* device helpers */
            spills += st[i].spill_stores || st[i].spill_loads;
            const long long dyn = kernels_dynamic_smem(src, st[i].name);
            fprintf(report, "| `%s` | %s | %d | %lld | %lld | %d/%d |\n", st[i].name, archs[a],
                    st[i].registers, st[i].smem_bytes + dyn, dyn, st[i].spill_stores,
                    st[i].spill_loads);
        }
    }
    fprintf(report, "\n%s\n",
            spills ? "Some kernels spill (see the last column): lower the block size or tile in "
                     "the GPU spec's tuning."
                   : "No kernel spills.");
    free(src);
    free(st);
    return 0;
}

static int write_files(const Run *run, Graph *g, const char *dir, int compile_kernels, char *err,
                       size_t errlen) {
    char path[GEN_OUT_PATH + 64];
    snprintf(path, sizeof path, "%s/plan.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) { snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno)); return 1; }
    PpPlan *pl = NULL;   /* pp > 1: one plan section per pipeline stage (gen/pp.c) */
    if (run->pp > 1 && !(pl = pp_build(g, err, errlen))) {   /* a model pp cannot split yet */
        fclose(f);
        return 2;
    }
    int rc = pl ? pp_write_plan(g, pl, f) : plan_write(g, f);
    if (fclose(f) || rc) {
        pp_free(pl);
        snprintf(err, errlen, "%s: write failed (disk full?)", path);
        return 1;
    }

    snprintf(path, sizeof path, "%s/kernels.cu", dir);
    f = fopen(path, "w");
    if (!f) {
        pp_free(pl);
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return 1;
    }
    int nk = 0;
    for (int s = 0; s < g->nsteps; s++) nk += g->steps[s].kind == OP_KERNEL;
    KernelInst *ks = malloc((size_t)(nk + 1) * sizeof *ks);
    nk = 0;
    for (int s = 0; s < g->nsteps; s++) if (g->steps[s].kind == OP_KERNEL) ks[nk++] = g->steps[s].k;
    char kerr[512] = "";
    rc = kernels_emit(f, ks, nk, run, kerr, sizeof kerr);
    free(ks);
    if (fclose(f) || rc) {
        pp_free(pl);
        snprintf(err, errlen, "%s: %s", path, kerr[0] ? kerr : "write failed (disk full?)");
        return rc == 2 ? 2 : 1;
    }

    if ((rc = infer_files_write(run, dir, err, errlen))) return rc;

    snprintf(path, sizeof path, "%s/report.md", dir);
    f = fopen(path, "w");
    if (!f) {
        pp_free(pl);
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return 1;
    }
    rc = report_write(run, f, 0, err, errlen);   /* with its Pipeline section when pp > 1 */
    pp_free(pl);
    if (!rc && compile_kernels) {
        char cu[GEN_OUT_PATH + 64];
        snprintf(cu, sizeof cu, "%s/kernels.cu", dir);
        rc = append_kernel_table(f, cu, &run->gpu, err, errlen);
    }
    if (fclose(f) && !rc) {
        snprintf(err, errlen, "%s: write failed (disk full?)", path);
        return 1;
    }
    return rc;
}

int gen_write(const Run *run, const char *outdir_arg, char *err, size_t errlen) {
    return gen_write_ex(run, outdir_arg, 0, err, errlen);
}

int gen_write_ex(const Run *run, const char *outdir_arg, int compile_kernels, char *err,
                 size_t errlen) {
    int status = 0;
    size_t len = strlen(outdir_arg);
    if (len > GEN_OUTDIR_MAX) {
        snprintf(err, errlen, "the output folder name %.40s... is %zu characters long; boost gen "
                 "takes at most %d: choose a shorter -o DIR (or a folder nearer the current one)",
                 outdir_arg, len, GEN_OUTDIR_MAX);
        return 2;
    }
    /* no trailing slashes: the temporary folder sits beside it */
    char outdir[GEN_OUTDIR_MAX + 1];
    snprintf(outdir, sizeof outdir, "%s", outdir_arg);
    for (size_t n = strlen(outdir); n > 1 && outdir[n - 1] == '/'; n--) outdir[n - 1] = 0;
    if (!outdir[0]) { snprintf(err, errlen, "the output folder name is empty"); return 2; }
    Graph *g = graph_build(run, run->layout, run->checkpoint, err, errlen, &status);
    if (!g) return status ? status : 1;
    char tmp[GEN_OUT_PATH + 32], old[GEN_OUT_PATH + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", outdir, (int)getpid());
    snprintf(old, sizeof old, "%s.old-%d", outdir, (int)getpid());
    if (make_parents(outdir) || (mkdir(tmp, 0777) && errno != EEXIST)) {
        snprintf(err, errlen,
                 "%s: cannot create the output folder: %s (choose another place with -o DIR)",
                 outdir, strerror(errno));
        graph_free(g);
        return 1;
    }
    int rc = write_files(run, g, tmp, compile_kernels, err, errlen);
    graph_free(g);
    if (!rc) {
        struct stat st;
        int had = stat(outdir, &st) == 0;
        if (had && rename(outdir, old)) {
            snprintf(err, errlen, "%s: cannot replace it: %s", outdir, strerror(errno));
            rc = 1;
        } else if (rename(tmp, outdir)) {
            snprintf(err, errlen, "%s: cannot rename the new output into place: %s", outdir,
                     strerror(errno));
            if (had) rename(old, outdir);
            rc = 1;
        } else if (had) rm_tree(old);
    }
    if (rc) rm_tree(tmp);
    return rc;
}
