/* kernels.c: `boost kernels DIR|kernels.cu [--arch ARCH,...] [--md]`: compiles a generated
 * kernels.cu with NVRTC for each arch (default: those of the GPU specs marked kernel_report) and
 * prints one row per kernel (registers, shared memory a block: static plus the dynamic bytes its
 * launches ask for, spill bytes, and occupancy: resident blocks per SM from the block size,
 * registers and shared memory against the arch's limits). Given a folder with plan.txt, also checks
 * that every kernel the plan launches is defined and reads the dtypes the plan gives its operands.
 * Exit 1 on a compile error (the log is shown), a spill, a plan mismatch or shared memory above the
 * arch's opt-in maximum, 2 on bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/commands.h"
#include "common/nvrtc.h"
#include "common/files.h"   // defines: file_read_all
#include "runtime/plan.h"
#include "runtime/cuda.h"
#include "gen/gen.h"
#include "gen/kernels.h"

#define MAX_STATS 1024

/* Resident blocks per SM of a kernel with `block` threads, `regs` registers a thread and `smem`
 * bytes of shared memory a block on an arch with limits L (arch_limits: the GPU spec's figures);
 * -1 when they or the block size are unknown. Registers are allocated per warp in units of 256,
 * shared memory with 1 KiB reserved per block. */
static int blocks_per_sm(const Gpu *L, int block, int regs, int smem) {
    if (!L->threads_sm || !L->blocks_sm || !L->regs_sm || !L->smem_sm_kib || block <= 0) return -1;
    int warps = (block + 31) / 32, n = L->blocks_sm;
    if (L->threads_sm / (warps * 32) < n) n = L->threads_sm / (warps * 32);
    if (regs > 0) {
        int per_warp = (regs * 32 + 255) / 256 * 256, warps_sm = L->regs_sm / per_warp;
        if (warps_sm / warps < n) n = warps_sm / warps;
    }
    int by_smem = smem > 0 ? L->smem_sm_kib * 1024 / (smem + 1024) : n;
    if (by_smem < n) n = by_smem;
    return n;
}

/* The default arch list: the report's archs (gen_report_archs), comma-separated; -1 none. */
static int default_archs(char *out, size_t n) {
    char archs[8][16], err[1024];
    int count = gen_report_archs(NULL, archs, 8, err, sizeof err);
    if (count < 0) fprintf(stderr, "boost kernels: %s\n", err);
    out[0] = 0;
    for (int i = 0; i < count; i++) {
        size_t len = strlen(out);
        snprintf(out + len, n - len, "%s%s", i ? "," : "", archs[i]);
    }
    return count > 0 ? 0 : -1;
}

/* The threads a block of kernel `name`: the plan's launch when it has one, else the source's
 * __launch_bounds__(N) on that kernel; 0 unknown. */
static int kernel_block(const Plan *plan, const char *src, const char *name) {
    for (int s = 0; plan && s < plan->nsteps; s++) {
        const PlanStep *st = &plan->steps_[s];
        if (st->kind == ST_KERNEL && !strcmp(st->kernel->name, name)) return (int)st->kernel->block;
    }
    size_t nl = strlen(name);
    for (const char *p = strstr(src, name); p; p = strstr(p + 1, name)) {
        if ((p > src &&
             (p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= '0' && p[-1] <= '9'))) ||
            p[nl] != '(')
            continue;   /* not the whole name, or not a definition/call */
        /* the nearest __launch_bounds__ before it, within its declaration */
        const char *lb = NULL;
        for (const char *q = src; (q = strstr(q, "__launch_bounds__(")) && q < p; q++) lb = q;
        if (lb && p - lb < 400 && !memchr(lb, ';', (size_t)(p - lb)) &&
            !memchr(lb, '}', (size_t)(p - lb)))
            return atoi(lb + strlen("__launch_bounds__("));
    }
    return 0;
}

/* The dynamic shared memory (bytes) a launch of kernel `name` asks for: the plan's smem= when the
 * plan launches it, else the "// boost:dynamic_smem NAME BYTES" line gen/kernels.c writes before
 * it; 0. */
static long long kernel_dyn_smem(const Plan *plan, const char *src, const char *name) {
    for (int s = 0; plan && s < plan->nsteps; s++) {
        const PlanStep *st = &plan->steps_[s];
        if (st->kind == ST_KERNEL && !strcmp(st->kernel->name, name))
            return (long long)st->kernel->smem;
    }
    return kernels_dynamic_smem(src, name);
}

static void usage(FILE *f) {
    fprintf(f, "usage: boost kernels DIR|kernels.cu [--arch ARCH,...] [--md]\n"
               "  compiles the kernels with NVRTC (no GPU needed) "
               "for each arch (default: those of the GPU\n"
               "  specs with kernel_report = true) and reports registers, shared memory\n"
               "  (static + dynamic), spills and blocks per SM "
               "per kernel; exit 1 on a compile error, any\n"
               "  spill, a plan mismatch or shared memory above the arch's opt-in maximum\n");
}

static char *slurp(const char *path, char *err, size_t errlen) {
    return file_read_all(path, (size_t)1 << 30, NULL, err, errlen);
}

/* plan.txt against kernels.cu built into st[0..n): its kernels must exist there, and each launch's
 * dynamic shared memory must be what kernels.cu declares. Each mismatch said on stderr; their
 * count. */
static int check_plan_kernels(const Plan *plan, const char *plan_path, const char *src,
                              const KernelStat *st, int n) {
    const size_t errlen = (size_t)1 << 16;
    char *err = malloc(errlen);
    const char **names = malloc(n * sizeof *names);
    for (int i = 0; names && i < n; i++) names[i] = st[i].name;
    int plan_bad = err ? cuda_plan_check(plan, names, names ? n : 0, err, errlen) : 0;
    if (plan_bad) fprintf(stderr, "%s", err);
    free(names);
    free(err);
    for (int p = 0; p < plan->nsteps; p++) {
        const PlanStep *ps = &plan->steps_[p];
        if (ps->kind != ST_KERNEL) continue;
        long long want = kernels_dynamic_smem(src, ps->kernel->name);
        if ((long long)ps->kernel->smem != want) {
            fprintf(stderr,
                    "%s:%d: kernel %s launches with smem=%lld but kernels.cu declares %lld "
                    "B of dynamic shared memory for it: regenerate both with 'boost gen'\n",
                    plan_path, ps->line, ps->kernel->name, (long long)ps->kernel->smem, want);
            plan_bad++;
        }
    }
    return plan_bad;
}

/* The command line of `boost kernels`: the input (a folder or its kernels.cu), --arch and --md.
 * -1 to go on, or the exit status (after --help, or with the message printed). */
static int kernels_args(int argc, char **argv, const char **input, const char **archs, int *md) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        else if (!strcmp(argv[i], "--md")) *md = 1;
        else if (!strcmp(argv[i], "--arch")) {
            if (++i >= argc) {
                fprintf(stderr, "boost kernels: --arch needs a value such as sm_100a,sm_86\n");
                return 2;
            }
            *archs = argv[i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "boost kernels: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (*input) {
            fprintf(stderr, "boost kernels: one input only ('%s' and '%s')\n", *input, argv[i]);
            return 2;
        } else *input = argv[i];
    }
    if (!*input) { usage(stderr); return 2; }
    return -1;
}

/* plan.txt next to kernels.cu at path (its name into plan_path): loaded into *plan when it is
 * there (else *plan = NULL). 0, or 2 with the message printed. */
static int load_neighbour_plan(const char *path, char *plan_path, size_t plan_len, Plan **plan) {
    char err[1 << 16];
    snprintf(plan_path, plan_len, "%s", path);
    char *slash = strrchr(plan_path, '/');
    if (slash) snprintf(slash + 1, plan_path + plan_len - slash - 1, "plan.txt");
    else snprintf(plan_path, plan_len, "plan.txt");
    *plan = NULL;
    if (access(plan_path, R_OK) != 0) return 0;
    *plan = plan_load(plan_path, err, sizeof err);
    if (!*plan) { fprintf(stderr, "%s\n", err); return 2; }
    return 0;
}

/* What the kernel rows found, for the verdict. */
typedef struct {
    int failed, spilling, total, too_big;
} KernelTally;

static void print_table_head(int md) {
    if (md)
        printf("| kernel | arch | registers | smem (B) | spill st/ld (B) | block | blocks/SM "
               "| of it dynamic (B) |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
    else
        printf("%-88s %-6s %5s %7s %-11s %5s %9s %s\n", "kernel", "arch", "regs", "smem",
               "spill st/ld", "block", "blocks/SM", "dynamic");
}

/* One kernel's row for arch (limits: its GPU spec's), with a spill or a shared memory above what
 * the arch allows said on stderr and counted in t. */
static void report_kernel(const KernelStat *s, const char *arch, const Gpu *limits,
                          const char *path, const Plan *plan, const char *src, int md,
                          KernelTally *t) {
    const long long optin = (long long)limits->smem_block_kib * 1024;
    t->total++;
    int spill = s->spill_stores || s->spill_loads;
    if (spill) {
        t->spilling++;
        fflush(stdout);
        fprintf(stderr, "%s: kernel %s spills on %s (%d bytes stored, %d loaded): lower its block "
                "size or tile in the GPU spec's tuning\n", path, s->name, arch,
                s->spill_stores, s->spill_loads);
    }
    int block = kernel_block(plan, src, s->name);
    long long dyn = kernel_dyn_smem(plan, src, s->name), smem = s->smem_bytes + dyn;
    if (smem > optin && (dyn > 0 || smem > KERNEL_SMEM_DEFAULT)) {
        t->too_big++;
        fflush(stdout);
        fprintf(stderr, "%s: kernel %s needs %lld B of shared memory a block (%lld dynamic), above "
                "the %lld B %s allows: generate the plan for %s (a GPU spec with that arch) or "
                "lower its attention tiles\n", path, s->name, smem, dyn, optin, arch, arch);
    }
    int occ = blocks_per_sm(limits, block, s->registers, (int)smem);
    char bs[16] = "-", os[16] = "-", sp[32];
    if (block > 0) snprintf(bs, sizeof bs, "%d", block);
    if (occ >= 0) snprintf(os, sizeof os, "%d", occ);
    snprintf(sp, sizeof sp, "%d/%d", s->spill_stores, s->spill_loads);
    if (md)
        printf("| `%s` | %s | %d | %lld | %s | %s | %s | %lld |\n", s->name, arch, s->registers,
               smem, sp, bs, os, dyn);
    else
        printf("%-88s %-6s %5d %7lld %-11s %5s %9s %lld%s\n", s->name, arch, s->registers, smem,
               sp, bs, os, dyn, spill ? "  SPILL" : "");
}

/* The exit status and its line on stderr, after the table. */
static int kernels_verdict(const char *path, const KernelTally *t, int plan_bad, int plan_checked) {
    fflush(stdout);   /* the table before the verdict, also when both go to one file */
    if (t->failed) return 1;
    if (plan_bad) {
        fprintf(stderr, "%s: %d mismatches between plan.txt and kernels.cu\n", path, plan_bad);
        return 1;
    }
    if (t->spilling) {
        fprintf(stderr, "%s: %d kernel builds spill\n", path, t->spilling);
        return 1;
    }
    if (t->too_big) {
        fprintf(stderr, "%s: %d kernel builds need more shared memory than their arch allows\n",
                path, t->too_big);
        return 1;
    }
    fprintf(stderr, "%s: %d kernel builds, no spills%s\n", path, t->total,
            plan_checked ? "; plan.txt matches" : "");
    return 0;
}

int cmd_kernels(int argc, char **argv) {
    const char *input = NULL, *archs = NULL;
    int md = 0;
    int rc = kernels_args(argc, argv, &input, &archs, &md);
    if (rc >= 0) return rc;
    char path[4096], err[1 << 16];
    struct stat sb;
    if (stat(input, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(path, sizeof path, "%s/kernels.cu", input);
    else snprintf(path, sizeof path, "%s", input);
    char *src = slurp(path, err, sizeof err);
    if (!src) { fprintf(stderr, "%s: run 'boost gen' to write it\n", err); return 2; }
    if (!nvrtc_available(err, sizeof err)) {
        fprintf(stderr, "boost kernels: %s\n", err);
        free(src);
        return 1;
    }

    /* plan.txt next to kernels.cu: its kernels must exist and match (names from the first arch) */
    char plan_path[4200];
    Plan *plan;
    if (load_neighbour_plan(path, plan_path, sizeof plan_path, &plan)) { free(src); return 2; }
    int plan_checked = 0, plan_bad = 0;

    char list[256];
    if (archs) snprintf(list, sizeof list, "%s", archs);
    else if (default_archs(list, sizeof list)) {
        fprintf(stderr, "boost kernels: no GPU spec with kernel_report = true: "
                        "name the archs with --arch\n");
        free(src);
        return 2;
    }
    KernelTally tally = {0};
    print_table_head(md);
    for (char *arch = strtok(list, ","); arch; arch = strtok(NULL, ",")) {
        if (strncmp(arch, "sm_", 3) || !arch[3]) {
            fprintf(stderr, "boost kernels: arch '%s' is not of the form sm_XX (e.g. sm_86, "
                    "sm_100a)\n", arch);
            free(src);
            return 2;
        }
        Gpu limits;   /* the arch's opt-in and per-SM limits, from its GPU spec */
        arch_limits(arch, &limits);
        static KernelStat st[MAX_STATS];
        int n = nvrtc_compile(src, arch, NULL, NULL, st, MAX_STATS, err, sizeof err);
        if (n < 0) { fprintf(stderr, "%s: %s\n", path, err); tally.failed = 1; continue; }
        if (plan && !plan_checked) {
            plan_bad = check_plan_kernels(plan, plan_path, src, st, n);
            plan_checked = 1;
        }
        for (int i = 0; i < n; i++)
            if (strncmp(st[i].name, "__", 2))   /* device helpers (__*) are not kernels */
                report_kernel(&st[i], arch, &limits, path, plan, src, md, &tally);
    }
    free(src);
    if (plan) plan_free(plan);
    return kernels_verdict(path, &tally, plan_bad, plan_checked);
}
