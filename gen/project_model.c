/* project_model.c: the formulas of the cost model (docs/cost-model.md): GEMM roofline with a
 * shape-dependent efficiency (simple model, corrected by measured rates when bench/results has
 * them), HBM-bound kernels, flash attention, ring all-reduce/all-gather (alpha-beta), pipeline
 * bubble. No schedule here: project_sched.c walks the schedule and calls these. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "common/collective_catalog.h"
#include "gen/project.h"

void cost_consts_default(CostConsts *c) {
    c->gemm_eff_max = 0.80;
    c->gemm_half_dim = 64;
    c->hbm_eff = 0.80;
    c->attn_fwd_eff = 0.60;
    c->attn_bwd_eff = 0.45;
    c->launch_us = 4;
    c->coll_eff = 0.74;
    c->optim_bytes_per_param = 30;
}

int cost_consts_set(CostConsts *c, const char *assign, char *err, size_t errlen) {
    static const struct { const char *name; size_t off; int is_eff; } fields[] = {
        {"gemm_eff_max", offsetof(CostConsts, gemm_eff_max), 1}, {"gemm_half_dim", offsetof(CostConsts, gemm_half_dim), 0},
        {"hbm_eff", offsetof(CostConsts, hbm_eff), 1}, {"attn_fwd_eff", offsetof(CostConsts, attn_fwd_eff), 1},
        {"attn_bwd_eff", offsetof(CostConsts, attn_bwd_eff), 1}, {"launch_us", offsetof(CostConsts, launch_us), 0},
        {"coll_eff", offsetof(CostConsts, coll_eff), 1},
        {"optim_bytes_per_param", offsetof(CostConsts, optim_bytes_per_param), 0},
    };
    const char *eq = strchr(assign, '=');
    size_t len = eq ? (size_t)(eq - assign) : strlen(assign);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (strlen(fields[i].name) != len || strncmp(fields[i].name, assign, len)) continue;
        char *end = NULL;
        double v = eq ? strtod(eq + 1, &end) : 0;
        if (!eq || end == eq + 1 || *end || !(v >= 0) || (fields[i].is_eff && !(v > 0 && v <= 1))) {
            snprintf(err, errlen, "--const %s: %s wants %s", assign, fields[i].name,
                     fields[i].is_eff ? "a fraction in (0, 1]" : "a number >= 0");
            return 2;
        }
        *(double *)((char *)c + fields[i].off) = v;
        return 0;
    }
    snprintf(err, errlen, "--const %s: no such constant (gemm_eff_max, gemm_half_dim, hbm_eff, attn_fwd_eff, "
             "attn_bwd_eff, launch_us, coll_eff, optim_bytes_per_param)", assign);
    return 2;
}

double gemm_eff_model(const CostConsts *c, double m, double n, double k) {
    double h = c->gemm_half_dim;
    return c->gemm_eff_max * (m / (m + h)) * (n / (n + h)) * (k / (k + h));
}

double gemm_eff(const CostConsts *c, const GemmRates *rates, const Gpu *gpu,
                double m, double n, double k, int *measured) {
    double model = gemm_eff_model(c, m, n, k);
    if (measured) *measured = 0;
    if (!rates || rates->n == 0 || gpu->bf16_tflops <= 0) return model;
    const GemmRate *best = NULL;
    double best_d = 0;
    for (int i = 0; i < rates->n; i++) {
        const GemmRate *g = &rates->rows[i];
        if (strcmp(g->gpu, gpu->name)) continue;
        double d = fabs(log(m / g->m)) + fabs(log(n / g->n)) + fabs(log(k / g->k));
        if (!best || d < best_d) { best = g; best_d = d; }
    }
    if (!best) return model;
    double eff_measured = best->tflops / gpu->bf16_tflops;
    double eff = model * eff_measured / gemm_eff_model(c, best->m, best->n, best->k);
    if (measured) *measured = 1;
    return eff > 1 ? 1 : eff;
}

double gemm_seconds(const CostConsts *c, const GemmRates *rates, const Gpu *gpu,
                    double m, double n, double k, double batch) {
    if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return 0;
    double flops = 2 * m * n * k * batch;
    double bytes = 2 * (m * k + k * n + m * n) * batch;           /* bf16 operands, one pass */
    double eff = gemm_eff(c, rates, gpu, m, n, k, NULL);
    double t_flops = flops / (gpu->bf16_tflops * 1e12 * eff);
    double t_bytes = bytes / (gpu->hbm_gbs * 1e9);
    return fmax(t_flops, t_bytes) + c->launch_us * 1e-6;
}

double hbm_seconds(const CostConsts *c, const Gpu *gpu, double bytes) {
    return bytes / (gpu->hbm_gbs * 1e9 * c->hbm_eff) + c->launch_us * 1e-6;
}

double attention_seconds(const CostConsts *c, const Gpu *gpu, double flops, double bytes, int backward) {
    double eff = backward ? c->attn_bwd_eff : c->attn_fwd_eff;
    return fmax(flops / (gpu->bf16_tflops * 1e12 * eff), bytes / (gpu->hbm_gbs * 1e9)) + c->launch_us * 1e-6;
}

/* The ring collectives: the catalog's cost (common/collective_catalog.h), by kind. */
double allreduce_seconds(double bytes, int t, double bw_gbs, double alpha_us) {
    return ccat_seconds(CK_ALLREDUCE, bytes, t, bw_gbs, alpha_us);
}

double allgather_seconds(double bytes, int t, double bw_gbs, double alpha_us) {
    return ccat_seconds(CK_ALLGATHER, bytes, t, bw_gbs, alpha_us);
}

double alltoall_seconds(double bytes, int t, double bw_gbs, double alpha_us) {
    return ccat_seconds(CK_ALLTOALL, bytes, t, bw_gbs, alpha_us);
}

double send_seconds(double bytes, double bw_gbs, double alpha_us) {
    if (bytes <= 0) return 0;
    return bytes / (bw_gbs * 1e9) + alpha_us * 1e-6;
}

void tp_link(const Gpu *gpu, int tp, double *bw_gbs, double *alpha_us) {
    int per_node = gpu->gpus_per_node > 0 ? gpu->gpus_per_node : 1;
    if (tp <= per_node) { *bw_gbs = gpu->nvlink_gbs; *alpha_us = gpu->nvlink_latency_us; }
    else { *bw_gbs = gpu->net_gbs; *alpha_us = gpu->net_latency_us; }
}

void pp_link(const Gpu *gpu, int tp, int pp, double *bw_gbs, double *alpha_us) {
    int per_node = gpu->gpus_per_node > 0 ? gpu->gpus_per_node : 1;
    if ((long)tp * pp <= per_node) { *bw_gbs = gpu->nvlink_gbs; *alpha_us = gpu->nvlink_latency_us; }
    else { *bw_gbs = gpu->net_gbs; *alpha_us = gpu->net_latency_us; }
}

double pipeline_seconds(double stage_s, double send_s, int micro_batches, int pp) {
    if (micro_batches < 1) micro_batches = 1;
    if (pp <= 1) return micro_batches * stage_s;
    return (micro_batches + pp - 1) * (stage_s + 2 * send_s);
}

/* ---- measured GEMM rates ------------------------------------------------------------------- */

static int rates_push(GemmRates *r, const GemmRate *g) {
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        GemmRate *rows = realloc(r->rows, cap * sizeof *rows);
        if (!rows) return 1;
        r->rows = rows; r->cap = cap;
    }
    r->rows[r->n++] = *g;
    return 0;
}

/* Rows "| gemm | GPU | M | N | K | TFLOPS |" (extra columns after TFLOPS are ignored). */
static int rates_read_file(GemmRates *r, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) { snprintf(err, errlen, "%s: cannot read (%s)", path, strerror(errno)); return 1; }
    char line[1024];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        GemmRate g;
        memset(&g, 0, sizeof g);
        if (sscanf(line, " | gemm | %15s | %lf | %lf | %lf | %lf |", g.gpu, &g.m, &g.n, &g.k, &g.tflops) != 5)
            continue;
        if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.tflops <= 0) {
            snprintf(err, errlen, "%s:%d: a gemm rate row needs positive M, N, K and TFLOPS", path, lineno);
            fclose(f);
            return 1;
        }
        if (rates_push(r, &g)) { fclose(f); snprintf(err, errlen, "out of memory"); return 1; }
    }
    fclose(f);
    r->files++;
    return 0;
}

int gemm_rates_load(GemmRates *r, const char *path, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    struct stat st;
    if (!path || stat(path, &st) != 0) return 0;          /* no results yet: the simple model */
    if (!S_ISDIR(st.st_mode)) return rates_read_file(r, path, err, errlen);
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".md")) continue;
        char file[1024];
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        rc = rates_read_file(r, file, err, errlen);
    }
    closedir(d);
    return rc;
}

void gemm_rates_free(GemmRates *r) {
    free(r->rows);
    memset(r, 0, sizeof *r);
}
