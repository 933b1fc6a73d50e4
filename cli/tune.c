/* tune.c: `boost tune PLAN_DIR [--reps N] [-o FILE] [--dry-run]`: times the plan's fused kernels on
 * the GPU under candidate tunings (threads per block of row and elementwise kernels, attention
 * tiles), picks the fastest per family and writes specs/gpus/GPU.tuning.lua, which the next
 * `boost gen` for that GPU reads. --dry-run only specialises and NVRTC-compiles every candidate for
 * the plan's arch (no GPU needed) and reports spills. Exit 1 without a GPU (use --dry-run). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/commands.h"
#include "common/kernel_catalog.h"   // defines: kcat_find, kcat_kind, KL_*
#include "common/nvrtc.h"
#include "common/files.h"   // defines: file_commit
#include "gen/gen.h"
#include "gen/kernels.h"
#include "runtime/backend.h"
#include "runtime/cuda.h"
#include "runtime/plan.h"

enum { FAM_ROW, FAM_ELEM, FAM_ATTN, NFAM };
static const char *FAM_NAME[NFAM] = {"row kernels", "elementwise kernels", "attention"};

/* Candidates, one per column: candidate i uses ROW[i], ELEM[i], ATTN[i] (each family is timed on
 * its own, so the families' choices are independent). */
static const int ROW[] = {64, 128, 256, 512, 1024, 256};
static const int ELEM[] = {128, 256, 512, 1024, 256, 256};
static const int ATTN_Q[] = {32, 64, 64, 128, 16, 32};
static const int ATTN_K[] = {32, 32, 64, 32, 64, 64};
#define NCAND 6

/* The tuning a kind's launch reads (its row of common/kernel_catalog.h, gen/kernels.c's
 * launch_config): attention tiles, the row block (a block per row, or one block) or the
 * elementwise block. */
static int family(const char *kind) {
    const KernelKind *kk = kcat_kind(kcat_find(kind));
    if (!kk) return FAM_ELEM;
    if (kk->launch == KL_ATTN_FWD || kk->launch == KL_ATTN_BWD) return FAM_ATTN;
    if (kk->launch == KL_ROW || kk->launch == KL_ROW_COLS || kk->launch == KL_SINGLE)
        return FAM_ROW;
    return FAM_ELEM;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: boost tune PLAN_DIR [--reps N] [-o FILE] [--dry-run]\n"
            "  times the plan's kernels on the GPU under "
            "%d candidate tunings and writes the fastest\n"
            "  per family to specs/gpus/GPU.tuning.lua (or "
            "FILE); --dry-run compiles the candidates only\n", NCAND);
}

/* The plan's kernel step as the specialiser's input, with candidate c's tuning. */
static void inst_of(const KernelArgs *a, KernelInst *k) {
    memset(k, 0, sizeof *k);
    snprintf(k->kind, sizeof k->kind, "%s", a->kind);
    for (int i = 0; i < a->nconst && i < KMAX_CONST; i++) {
        snprintf(k->key[i], sizeof k->key[i], "%.15s", a->const_key[i]);
        k->val[i] = a->const_val[i];
        k->per_rank[i] = (double)a->const_int[i].per_rank;
        if (a->const_int[i].per_rank) k->val[i] = (double)a->const_int[i].base;
        k->nconst++;
    }
}

static void run_for(const Plan *p, int c, Run *run) {
    memset(run, 0, sizeof *run);
    snprintf(run->name, sizeof run->name, "%.*s", NAME_LEN - 1, p->run_name);
    snprintf(run->model.name, sizeof run->model.name, "%.*s", NAME_LEN - 1, p->model_name);
    snprintf(run->gpu.name, sizeof run->gpu.name, "%s", p->gpu);
    snprintf(run->gpu.arch, sizeof run->gpu.arch, "%s", p->arch);
    run->gpu.tune_row_block = ROW[c];
    run->gpu.tune_elem_block = ELEM[c];
    run->gpu.tune_attn_block_q = ATTN_Q[c];
    run->gpu.tune_attn_block_k = ATTN_K[c];
}

/* The plan's distinct kernels: rep[0..n-1] are the index of one step of each (rep holds nsteps). */
static int distinct_kernels(const Plan *p, int *rep) {
    int nk = 0;
    for (int s = 0; s < p->nsteps; s++) {
        if (p->steps_[s].kind != ST_KERNEL) continue;
        int seen = 0;
        for (int j = 0; j < nk && !seen; j++)
            seen = !strcmp(p->steps_[rep[j]].kernel->name, p->steps_[s].kernel->name);
        if (!seen) rep[nk++] = s;
    }
    return nk;
}

/* kernels.cu of the nk kernels rep[] under each candidate tuning, into srcs[c]: 0, or 2 (printed).
 */
static int emit_candidates(const Plan *p, const char *path, const int *rep, int nk,
                           char *srcs[NCAND]) {
    char err[1 << 14];
    KernelInst *ks = calloc(nk + 1, sizeof *ks);
    Run *run = malloc(sizeof *run);
    int status = !ks || !run ? 1 : 0;
    if (status) fprintf(stderr, "boost tune: out of memory\n");
    for (int c = 0; c < NCAND && !status; c++) {
        run_for(p, c, run);
        for (int j = 0; j < nk && !status; j++) {
            inst_of(p->steps_[rep[j]].kernel, &ks[j]);
            if (kernel_specialise(&ks[j], run, err, sizeof err)) {
                fprintf(stderr, "%s: %s\n", path, err);
                status = 2;
            }
        }
        if (status) break;
        size_t len = 0;
        FILE *mem = open_memstream(&srcs[c], &len);
        if (kernels_emit(mem, ks, nk, run, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            status = 2;
        }
        fclose(mem);
    }
    free(ks); free(run);
    return status;
}

/* --dry-run: compile every candidate for the plan's arch (a plan without one: the last of the
 * report's archs, gen_report_archs) and report kernels and spills: 0, or 1. */
static int dry_run(const Plan *p, char *srcs[NCAND]) {
    char err[1 << 14], archs[8][16];
    int narch = p->arch[0] ? 0 : gen_report_archs(NULL, archs, 8, err, sizeof err);
    if (!p->arch[0] && narch <= 0) {
        fprintf(stderr, "boost tune: the plan names no arch and %s\n",
                narch < 0 ? err : "no GPU spec has kernel_report");
        return 1;
    }
    const char *arch = p->arch[0] ? p->arch : archs[narch - 1];
    KernelStat *st = calloc(1024, sizeof *st);
    if (!st) { fprintf(stderr, "boost tune: out of memory\n"); return 1; }
    int status = 0;
    for (int c = 0; c < NCAND; c++) {
        int n = nvrtc_compile(srcs[c], arch, NULL, NULL, st, 1024, err, sizeof err);
        if (n < 0) { fprintf(stderr, "candidate %d: %s\n", c, err); status = 1; continue; }
        int spills = 0;
        for (int i = 0; i < n; i++) spills += st[i].spill_stores > 0 || st[i].spill_loads > 0;
        printf("candidate %d (row_block %d, elem_block %d, "
               "attention %dx%d): %d kernels for %s, %d spill\n",
               c, ROW[c], ELEM[c], ATTN_Q[c], ATTN_K[c], n, arch, spills);
        if (spills) status = 1;
    }
    free(st);
    return status;
}

/* Seconds of candidate c's module for every kernel rep[], weighted by how often the plan launches
 * it, added into total[family]: 0, or 1 (printed). */
static int time_candidate(const Plan *p, BackendRank *r, int c, void *mod, const int *rep, int nk,
                          int reps, double total[NFAM]) {
    char err[1 << 14];
    Run *run = malloc(sizeof *run);
    if (!run) { fprintf(stderr, "boost tune: out of memory\n"); return 1; }
    run_for(p, c, run);
    int status = 0;
    for (int j = 0; j < nk && !status; j++) {
        const KernelArgs *a = p->steps_[rep[j]].kernel;
        KernelInst k;
        inst_of(a, &k);
        kernel_specialise(&k, run, err, sizeof err);
        void *ops[PLAN_MAX_KEYS];
        for (int i = 0; i < a->nops; i++) {
            const PlanTensor *t = &p->tensors[a->op[i].tensor];
            ops[i] = (char *)backend_cuda.tensor_ptr(r, a->op[i].tensor) +
                     rank_int(a->op[i].off, 0) * (int64_t)plan_dtype_size(t->dtype);
        }
        double sec = 0;
        if (cuda_time_kernel(r, mod, k.name, a, ops, k.grid, k.block, k.smem, reps, &sec)) {
            fprintf(stderr, "candidate %d, %s: %s\n", c, k.name, backend_cuda.last_error(r));
            status = 1;
            break;
        }
        /* each distinct kernel counts as often as the plan launches it */
        int uses = 0;
        for (int s = 0; s < p->nsteps; s++)
            uses += p->steps_[s].kind == ST_KERNEL && !strcmp(p->steps_[s].kernel->name, a->name);
        total[family(a->kind)] += sec * uses;
    }
    free(run);
    return status;
}

/* Time every candidate on one rank of the plan (its memory holds the kernels' operands) into
 * total[c][family]: 0, or 1 (printed; no GPU is an error here, --dry-run needs none). */
static int time_candidates(const Plan *p, const int *rep, int nk, int reps, char *srcs[NCAND],
                           double total[NCAND][NFAM]) {
    char err[1 << 14];
    BackendRank *r = backend_cuda.rank_open(p, 0, p->tp, err, sizeof err);
    if (!r) {
        fprintf(stderr, "boost tune: %s (boost tune times kernels on a GPU; --dry-run only "
                "compiles them)\n", err);
        return 1;
    }
    printf("timing %d kernels x %d candidates on %s, %d launches each\n", nk, NCAND,
           cuda_device_arch(), reps);
    int status = 0;
    for (int c = 0; c < NCAND && !status; c++) {
        void *mod = cuda_module_load(srcs[c], err, sizeof err);
        if (!mod) { fprintf(stderr, "candidate %d: %s\n", c, err); status = 1; break; }
        status = time_candidate(p, r, c, mod, rep, nk, reps, total[c]);
        cuda_module_free(mod);
    }
    backend_cuda.rank_close(r);
    return status;
}

/* The fastest candidate of each family into pick[], with the table of all timings printed. */
static void pick_fastest(double total[NCAND][NFAM], int pick[NFAM]) {
    for (int f = 0; f < NFAM; f++) {
        pick[f] = 0;
        for (int c = 1; c < NCAND; c++) if (total[c][f] < total[pick[f]][f]) pick[f] = c;
    }
    printf("%-22s", "family");
    for (int c = 0; c < NCAND; c++) printf("   cand %d", c);
    printf("   (microseconds per forward+backward)\n");
    for (int f = 0; f < NFAM; f++) {
        printf("%-22s", FAM_NAME[f]);
        for (int c = 0; c < NCAND; c++)
            printf(" %8.1f%s", total[c][f] * 1e6, c == pick[f] ? "*" : " ");
        printf("\n");
    }
}

/* specs/gpus/GPU.tuning.lua (or outp) with the picks, written to a temporary file and renamed. */
static int write_tuning(const Plan *p, const char *dir, const char *outp, int reps,
                        const int pick[NFAM]) {
    char defp[1024];
    if (!outp) { snprintf(defp, sizeof defp, "specs/gpus/%s.tuning.lua", p->gpu); outp = defp; }
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", outp);
    FILE *f = fopen(tmp, "w");
    if (!f) { fprintf(stderr, "%s: cannot write: %s\n", tmp, strerror(errno)); return 1; }
    fprintf(f,
            "-- %s.tuning.lua: written by `boost tune %s` on %s (%d launches per kernel); read by\n"
            "-- `boost gen` for gpu \"%s\" over the gpu spec's tune table. Delete it to go back.\n",
            p->gpu, dir, cuda_device_arch(), reps, p->gpu);
    fprintf(f,
        "return tune { row_block = %d, elem_block = %d, attn_block_q = %d, attn_block_k = %d }\n",
        ROW[pick[FAM_ROW]], ELEM[pick[FAM_ELEM]], ATTN_Q[pick[FAM_ATTN]], ATTN_K[pick[FAM_ATTN]]);
    if (file_commit(f, tmp, outp)) {
        fprintf(stderr, "%s: write failed: %s\n", outp, strerror(errno));
        return 1;
    }
    printf("wrote %s\n", outp);
    return 0;
}

int cmd_tune(int argc, char **argv) {
    const char *dir = NULL, *outp = NULL;
    int reps = 20, dry = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        else if (!strcmp(argv[i], "--dry-run")) dry = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) outp = argv[++i];
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else {
            fprintf(stderr, "boost tune: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!dir || reps < 1 || reps > 10000) { usage(stderr); return 2; }
    char path[4096], err[1 << 14];
    struct stat sb;
    if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(path, sizeof path, "%s/plan.txt", dir);
    else snprintf(path, sizeof path, "%s", dir);
    Plan *p = plan_load(path, err, sizeof err);
    if (!p) { fprintf(stderr, "%s\n", err); return 2; }

    int *rep = malloc((p->nsteps + 1) * sizeof *rep);
    char *srcs[NCAND] = {0};
    int status = rep ? 0 : 1, nk = 0;
    if (!rep) fprintf(stderr, "boost tune: out of memory\n");
    if (!status) {
        nk = distinct_kernels(p, rep);
        status = emit_candidates(p, path, rep, nk, srcs);
    }
    if (!status && dry) status = dry_run(p, srcs);
    else if (!status) {
        double total[NCAND][NFAM];
        int pick[NFAM];
        memset(total, 0, sizeof total);
        status = time_candidates(p, rep, nk, reps, srcs, total);
        if (!status) { pick_fastest(total, pick); status = write_tuning(p, dir, outp, reps, pick); }
    }
    for (int c = 0; c < NCAND; c++) free(srcs[c]);
    free(rep);
    plan_free(p);
    return status;
}
