/* kernels.c: `boost kernels DIR|kernels.cu [--arch sm_80,sm_90] [--md]`: compiles a generated
 * kernels.cu with NVRTC for each arch and prints one row per kernel (registers, static shared
 * memory, spill bytes). Given a folder with plan.txt, also checks that every kernel the plan launches
 * is defined and reads the dtypes the plan gives its operands. Exit 1 on a compile error (the log is
 * shown), a spill or a plan mismatch, 2 on bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/commands.h"
#include "common/nvrtc.h"
#include "runtime/plan.h"
#include "runtime/cuda.h"

#define MAX_STATS 1024

static void usage(FILE *f) {
    fprintf(f, "usage: boost kernels DIR|kernels.cu [--arch sm_80,sm_90] [--md]\n"
               "  compiles the kernels with NVRTC (no GPU needed) and reports registers, shared memory\n"
               "  and spills per kernel; exit 1 on a compile error or any spill\n");
}

static char *slurp(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open", path); return NULL; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc(n + 1);
    if (!s || fread(s, 1, n, f) != (size_t)n) { free(s); fclose(f); snprintf(err, errlen, "%s: read failed", path); return NULL; }
    s[n] = 0;
    fclose(f);
    return s;
}

int cmd_kernels(int argc, char **argv) {
    const char *input = NULL, *archs = "sm_80,sm_90";
    int md = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        else if (!strcmp(argv[i], "--md")) md = 1;
        else if (!strcmp(argv[i], "--arch")) {
            if (++i >= argc) { fprintf(stderr, "boost kernels: --arch needs a value such as sm_80,sm_90\n"); return 2; }
            archs = argv[i];
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "boost kernels: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (input) {
            fprintf(stderr, "boost kernels: one input only ('%s' and '%s')\n", input, argv[i]);
            return 2;
        } else input = argv[i];
    }
    if (!input) { usage(stderr); return 2; }
    char path[4096], err[1 << 16];
    struct stat sb;
    if (stat(input, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(path, sizeof path, "%s/kernels.cu", input);
    else snprintf(path, sizeof path, "%s", input);
    char *src = slurp(path, err, sizeof err);
    if (!src) { fprintf(stderr, "%s: run 'boost gen' to write it\n", err); return 2; }
    if (!nvrtc_available(err, sizeof err)) { fprintf(stderr, "boost kernels: %s\n", err); free(src); return 1; }

    /* plan.txt next to kernels.cu: its kernels must exist and match (names from the first arch) */
    char plan_path[4200];
    snprintf(plan_path, sizeof plan_path, "%s", path);
    char *slash = strrchr(plan_path, '/');
    if (slash) snprintf(slash + 1, plan_path + sizeof plan_path - slash - 1, "plan.txt");
    else snprintf(plan_path, sizeof plan_path, "plan.txt");
    Plan *plan = NULL;
    if (access(plan_path, R_OK) == 0) {
        plan = plan_load(plan_path, err, sizeof err);
        if (!plan) { fprintf(stderr, "%s\n", err); free(src); return 2; }
    }
    int plan_checked = 0, plan_bad = 0;

    char list[256];
    snprintf(list, sizeof list, "%s", archs);
    int failed = 0, spilling = 0, total = 0;
    if (md) printf("| kernel | arch | registers | smem (B) | spill st/ld (B) |\n|---|---|---:|---:|---:|\n");
    else printf("%-88s %-6s %5s %7s %s\n", "kernel", "arch", "regs", "smem", "spill st/ld");
    for (char *arch = strtok(list, ","); arch; arch = strtok(NULL, ",")) {
        if (strncmp(arch, "sm_", 3) || !arch[3]) {
            fprintf(stderr, "boost kernels: arch '%s' is not of the form sm_XX (e.g. sm_80)\n", arch);
            free(src);
            return 2;
        }
        static KernelStat st[MAX_STATS];
        int n = nvrtc_compile(src, arch, NULL, NULL, st, MAX_STATS, err, sizeof err);
        if (n < 0) { fprintf(stderr, "%s: %s\n", path, err); failed = 1; continue; }
        if (plan && !plan_checked) {
            const char **names = malloc(n * sizeof *names);
            for (int i = 0; names && i < n; i++) names[i] = st[i].name;
            plan_bad = cuda_plan_check(plan, names, names ? n : 0, err, sizeof err);
            if (plan_bad) fprintf(stderr, "%s", err);
            free(names);
            plan_checked = 1;
        }
        for (int i = 0; i < n; i++) {
            if (!strncmp(st[i].name, "__", 2)) continue;    /* device helpers, not kernels */
            total++;
            int spill = st[i].spill_stores || st[i].spill_loads;
            if (spill) {
                spilling++;
                fprintf(stderr, "%s: kernel %s spills on %s (%d bytes stored, %d loaded): lower its block "
                        "size or tile in the GPU spec's tuning\n", path, st[i].name, arch,
                        st[i].spill_stores, st[i].spill_loads);
            }
            if (md) printf("| `%s` | %s | %d | %d | %d/%d |\n", st[i].name, arch, st[i].registers,
                           st[i].smem_bytes, st[i].spill_stores, st[i].spill_loads);
            else printf("%-88s %-6s %5d %7d %d/%d%s\n", st[i].name, arch, st[i].registers, st[i].smem_bytes,
                        st[i].spill_stores, st[i].spill_loads, spill ? "  SPILL" : "");
        }
    }
    free(src);
    if (plan) plan_free(plan);
    if (failed) return 1;
    if (plan_bad) { fprintf(stderr, "%s: %d mismatches between plan.txt and kernels.cu\n", path, plan_bad); return 1; }
    if (spilling) { fprintf(stderr, "%s: %d kernel builds spill\n", path, spilling); return 1; }
    fprintf(stderr, "%s: %d kernel builds, no spills%s\n", path, total, plan_checked ? "; plan.txt matches" : "");
    return 0;
}
