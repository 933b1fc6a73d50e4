/* plan.c: `boost plan MODEL --gpus N ...`: the fastest feasible layout of a model on a cluster by
 * the cost model: prints the best candidates, draws time against memory (gnuplot), writes the
 * winner as a run spec. The search is gen/planner.c; docs/planner.md says what it assumes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "cli/commands.h"
#include "common/env.h"   // defines: env_specs_dir
#include "common/files.h" // defines: file_commit
#include "cli/plot_moe.h" // defines: find_program, gp_quote
#include "gen/gen.h" // defines: spec_load_run_projection, spec_load_cluster, cluster_apply
#include "gen/planner.h" // defines: planner_search, PlanResult, planner_write_spec

#define GIB 1073741824.0 /* GB in the output: 2^30 bytes, as the GPU files' memory_gb */

static void plan_usage(FILE *f) {
    fprintf(f,
            "usage: boost plan MODEL --gpus N [--cluster NAME] [--gpu NAME] [--gpus-per-node K]\n"
            "                  [--global-batch TOKENS] [--seq S] [--top N] [-o RUN.lua] [--png "
            "FILE] [--kv]\n"
            "  Searches tp, pp (with virtual stages), dp, ep (MoE), layout, ZeRO stage, "
            "checkpointing,\n"
            "  micro-batch and grad_accum for the fastest layout of MODEL on N GPUs that fits in "
            "memory,\n"
            "  by the cost model of `boost project` over the generated schedules.\n"
            "  MODEL          a model name (specs/models) or a run spec (its seq and training "
            "settings kept)\n"
            "  --cluster NAME specs/clusters/NAME.lua: the GPU, GPUs per node and link bandwidths\n"
            "  --gpu NAME     the GPU (specs/gpus; default h100, or the cluster's or run's)\n"
            "  --gpus-per-node K  override the node size\n"
            "  --global-batch TOKENS  tokens per optimizer step (default 4194304, rounded to "
            "sequences)\n"
            "  --seq S        sequence length (default the run's, 4096)\n"
            "  --top N        how many of the best to print (default 5)\n"
            "  -o RUN.lua     write the winner as a run spec for `boost train`\n"
            "  --png FILE     draw seconds per iteration against memory per rank (gnuplot)\n"
            "  --kv           the best candidates as 'key value' lines, for scripts\n"
            "  --brute        price every candidate with the generator (no pruning; slow)\n"
            "  --backend B    cuda (default) or cpu: the backend that trains the plan; cuda\n"
            "                 searches zero=2 at pp 1 only (docs/planner.md)\n"
            "  --threads N    candidates priced side by side (default 1; the result is the same)\n"
            "  --rates PATH   measured GEMM rates (default bench/results), as boost project\n");
}

typedef struct {
    const char *model, *cluster, *gpu, *out, *png, *rates;
    int gpus, per_node, seq, kv, brute, top, backend, threads;
    long long global;
} PlanArgs;

static int parse_int_arg(const char *opt, const char *v, long long lo, long long hi,
                         long long *out) {
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "boost plan: %s wants a whole number in %lld..%lld, got '%s'\n", opt, lo,
                hi, v);
        return 2;
    }
    *out = x;
    return 0;
}

static int parse_args(int argc, char **argv, PlanArgs *a) {
    memset(a, 0, sizeof *a);
    a->top = 5;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        long long x;
        if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            plan_usage(stdout);
            return -1;
        }
        if (!strcmp(o, "--kv")) {
            a->kv = 1;
            continue;
        }
        if (!strcmp(o, "--brute")) {
            a->brute = 1;
            continue;
        }
        if (o[0] != '-') {
            if (a->model) {
                fprintf(stderr, "boost plan: one model at a time ('%s' and '%s')\n", a->model, o);
                return 2;
            }
            a->model = o;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "boost plan: %s needs a value\n", o);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(o, "--gpus")) {
            if (parse_int_arg(o, v, 1, 65536, &x)) return 2;
            a->gpus = (int)x;
        } else if (!strcmp(o, "--gpus-per-node")) {
            if (parse_int_arg(o, v, 1, 1024, &x)) return 2;
            a->per_node = (int)x;
        } else if (!strcmp(o, "--seq")) {
            if (parse_int_arg(o, v, 1, 1 << 20, &x)) return 2;
            a->seq = (int)x;
        } else if (!strcmp(o, "--top")) {
            if (parse_int_arg(o, v, 1, PLAN_MAX_TOP, &x)) return 2;
            a->top = (int)x;
        } else if (!strcmp(o, "--global-batch")) {
            if (parse_int_arg(o, v, 1, 1LL << 40, &x)) return 2;
            a->global = x;
        } else if (!strcmp(o, "--threads")) {
            if (parse_int_arg(o, v, 1, PLAN_MAX_THREADS, &x)) return 2;
            a->threads = (int)x;
        } else if (!strcmp(o, "--backend")) {
            if (strcmp(v, "cuda") && strcmp(v, "cpu")) {
                fprintf(stderr, "boost plan: --backend %s: expected cuda or cpu\n", v);
                return 2;
            }
            a->backend = !strcmp(v, "cpu") ? PLAN_BACKEND_CPU : PLAN_BACKEND_CUDA;
        } else if (!strcmp(o, "--cluster"))
            a->cluster = v;
        else if (!strcmp(o, "--gpu"))
            a->gpu = v;
        else if (!strcmp(o, "-o"))
            a->out = v;
        else if (!strcmp(o, "--png"))
            a->png = v;
        else if (!strcmp(o, "--rates"))
            a->rates = v;
        else {
            fprintf(stderr, "boost plan: unknown option '%s'\n", o);
            plan_usage(stderr);
            return 2;
        }
    }
    if (!a->model) {
        plan_usage(stderr);
        return 2;
    }
    if (!a->gpus) {
        fprintf(stderr, "boost plan: --gpus N is required (the GPUs to plan for)\n");
        return 2;
    }
    return 0;
}

/* The base run: a run spec as it is, or a model name wrapped in a one-line run spec. */
static int load_base(const PlanArgs *a, const char *gpu, Run *run, char *err, size_t errlen) {
    Override ov[1];
    int nov = 0;
    if (gpu) {
        ov[0].name = "gpu";
        ov[0].value = gpu;
        nov = 1;
    }
    const char *specs = env_specs_dir();
    char path[1200];
    snprintf(path, sizeof path, "%s/runs/%s.lua", specs, a->model);
    struct stat st;
    if (stat(a->model, &st) == 0 || (!strchr(a->model, '/') && stat(path, &st) == 0))
        return spec_load_run_projection(a->model, ov, nov, run, err, errlen);
    snprintf(path, sizeof path, "%s/models/%s.lua", specs, a->model);
    for (const char *p = a->model; *p; p++)
        if (!(*p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') ||
              ((*p | 32) >= 'a' && (*p | 32) <= 'z'))) {
            snprintf(err, errlen,
                     "%s: not a run spec, and not a model name (letters, digits, '-', '_', '.')",
                     a->model);
            return 2;
        }
    if (stat(path, &st) != 0) {
        snprintf(err, errlen,
                 "%s: no such model (%s) or run spec (%s/runs): see the names in %s/models",
                 a->model, path, specs, specs);
        return 2;
    }
    char dir[] = "/tmp/boost-plan.XXXXXX", file[64];
    if (!mkdtemp(dir)) {
        snprintf(err, errlen, "cannot create a folder in /tmp (%s)", strerror(errno));
        return 1;
    }
    snprintf(file, sizeof file, "%s/plan.lua", dir);
    FILE *f = fopen(file, "w");
    int rc = 1;
    if (f) {
        fprintf(f, "return run { model = \"%s\" }\n", a->model);
        rc = fclose(f) ? 1 : spec_load_run_projection(file, ov, nov, run, err, errlen);
    } else
        snprintf(err, errlen, "cannot write %s (%s)", file, strerror(errno));
    unlink(file);
    rmdir(dir);
    return rc;
}

static const char *ckpt_name(int c) { return c == CKPT_LOWRANK ? "lowrank" : "none"; }

static void print_row(int rank, const PlanCand *c) {
    printf("%3d  %-8s %3d %3d %2d %5d %3d %4d  %-7s %4d %5d  %9.3f %10.0f %5.1f%% %8.1f %5.1f%%\n",
           rank, layout_name(c->layout), c->tp, c->pp, c->v, c->dp, c->ep, c->zero,
           ckpt_name(c->ckpt), c->mb, c->ga, c->seconds, c->tok_s_gpu, 100 * c->mfu,
           c->mem_bytes / GIB, 100 * c->comm_share);
}

static void print_kv(const PlanResult *r, const PlanOpts *o, double elapsed) {
    printf("backend %s\nzero_searched 0,1,2\nzero2_searched_at %s\n",
           o->backend == PLAN_BACKEND_CPU ? "cpu" : "cuda",
           o->backend == PLAN_BACKEND_CPU ? "any" : "pp=1");
    printf("candidates %d\ngenerated %d\npruned_mem %d\npruned_time %d\ntoo_big %d\ninvalid "
           "%d\nkeys %d\nelapsed_s %.3f\n",
           r->n, r->generated, r->pruned_mem, r->pruned_time, r->too_big, r->invalid, r->keys,
           elapsed);
    for (int i = 0; i < r->nbest; i++) {
        const PlanCand *c = &r->c[r->best[i]];
        printf("best.%d layout=%s tp=%d pp=%d v=%d dp=%d ep=%d zero=%d checkpoint=%s "
               "micro_batch=%d grad_accum=%d "
               "seconds=%.6g tok_s_gpu=%.6g mfu=%.6g mem_gb=%.6g comm_share=%.6g\n",
               i + 1, layout_name(c->layout), c->tp, c->pp, c->v, c->dp, c->ep, c->zero,
               ckpt_name(c->ckpt), c->mb, c->ga, c->seconds, c->tok_s_gpu, c->mfu,
               c->mem_bytes / GIB, c->comm_share);
    }
}

/* Every priced candidate as a point (GB per rank, s/iteration); the winner and the GPU's memory
 * marked. */
static int draw_png(const PlanResult *r, const Run *base, int gpus, const char *png) {
    char gp_path[4096];
    const char *prog = getenv("GNUPLOT") ? getenv("GNUPLOT") : "gnuplot";
    if (!find_program(prog, gp_path, sizeof gp_path)) {
        printf("no PNG: gnuplot not found (looked for '%s' on PATH; Debian: apt-get install "
               "gnuplot-nox)\n",
               prog);
        return 0;
    }
    char data[] = "/tmp/boost-plan-points.XXXXXX";
    int fd = mkstemp(data);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "boost plan: cannot create a temporary file (%s)\n", strerror(errno));
        return 1;
    }
    for (int i = 0; i < r->n; i++) {
        const PlanCand *c = &r->c[i];
        if (c->state == PC_FITS || c->state == PC_TOO_BIG)
            fprintf(f, "%.6g %.6g %d\n", c->mem_bytes / GIB, c->seconds, c->state == PC_FITS);
    }
    fclose(f);
    char tmp_png[4200], cmd[4300];
    snprintf(tmp_png, sizeof tmp_png, "%s.tmp%ld", png, (long)getpid());
    snprintf(cmd, sizeof cmd, "'%s' 2>&1", gp_path);
    FILE *gp = popen(cmd, "w");
    if (!gp) {
        unlink(data);
        fprintf(stderr, "boost plan: cannot start %s\n", gp_path);
        return 1;
    }
    const PlanCand *w = r->nbest ? &r->c[r->best[0]] : NULL;
    fprintf(gp,
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 900,560 } "
            "else { set terminal png size 900,560 }\nset output ");
    gp_quote(gp, tmp_png);
    fprintf(gp, "\nset title '%s on %d x %s: priced candidates' noenhanced\n", base->model.name,
            gpus, base->gpu.name);
    fprintf(gp, "set xlabel 'memory per rank (GB)'\nset ylabel 'seconds per iteration'\nset "
                "logscale y\nset grid\n");
    fprintf(gp, "set arrow from %.6g, graph 0 to %.6g, graph 1 nohead dt 2 lc rgb 'red'\n",
            r->capacity_bytes / GIB, r->capacity_bytes / GIB);
    fprintf(gp, "plot ");
    gp_quote(gp, data);
    fprintf(gp, " using ($3==1?$1:1/0):2 with points pt 7 ps 0.8 lc rgb '#1f77b4' title 'fits', ");
    gp_quote(gp, data);
    fprintf(gp, " using ($3==0?$1:1/0):2 with points pt 6 ps 0.8 lc rgb '#999999' title 'too big'");
    if (w)
        fprintf(gp,
                ", '-' using 1:2 with points pt 3 ps 2.5 lw 2 lc rgb '#d62728' title "
                "'winner'\n%.6g %.6g\ne\n",
                w->mem_bytes / GIB, w->seconds);
    else
        fprintf(gp, "\n");
    fprintf(gp, "set output\n");
    int status = pclose(gp);
    unlink(data);
    struct stat st;
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) || stat(tmp_png, &st) ||
        !st.st_size || rename(tmp_png, png)) {
        unlink(tmp_png);
        fprintf(stderr, "boost plan: gnuplot failed to draw %s (messages above)\n", png);
        return 1;
    }
    printf("time against memory: %s\n", png);
    return 0;
}

/* Nothing fits: the least memory any candidate needs, and the nearest GPU count where one fits. */
static void nothing_fits(const PlanResult *r, const Run *base, const PlanOpts *o,
                         const CostConsts *c, const GemmRates *rates) {
    printf("nothing fits in the %s's %.0f GB per GPU on %d GPU(s).\n", base->gpu.name,
           base->gpu.memory_gb, o->gpus);
    if (r->min_mem >= 0) {
        const PlanCand *m = &r->c[r->min_mem];
        int priced = m->state == PC_FITS || m->state == PC_TOO_BIG;
        printf("the smallest memory any candidate needs: %.1f GB per rank (%s: %s tp=%d pp=%d "
               "dp=%d zero=%d checkpoint=%s "
               "micro_batch=%d)\n",
               (priced ? m->mem_bytes : m->mem_lb) / GIB,
               priced ? "generated" : "closed-form bound", layout_name(m->layout), m->tp, m->pp,
               m->dp, m->zero, ckpt_name(m->ckpt), m->mb);
    }
    for (int g = 2 * o->gpus; g <= 64 * o->gpus && g <= 65536; g *= 2) {
        PlanOpts o2 = *o;
        o2.gpus = g;
        o2.top = 1;
        PlanResult r2;
        char err[512];
        if (planner_search(base, &o2, c, rates, &r2, err, sizeof err)) continue;
        if (r2.nbest) {
            const PlanCand *b = &r2.c[r2.best[0]];
            printf("nearest feasible: --gpus %d (%s tp=%d pp=%d dp=%d zero=%d checkpoint=%s "
                   "micro_batch=%d: %.3f s/iteration, "
                   "%.1f GB per rank)\n",
                   g, layout_name(b->layout), b->tp, b->pp, b->dp, b->zero, ckpt_name(b->ckpt),
                   b->mb, b->seconds, b->mem_bytes / GIB);
            planner_free(&r2);
            return;
        }
        planner_free(&r2);
    }
    printf("nearest feasible: none up to %d GPUs: use a GPU with more memory or a shorter --seq\n",
           64 * o->gpus);
}

static int write_spec(const char *path, const Run *base, const PlanCand *w, const char *cluster) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "boost plan: cannot write %s (%s)\n", path, strerror(errno));
        return 1;
    }
    planner_write_spec(base, w, cluster, f);
    if (file_commit(f, tmp, path)) {
        fprintf(stderr, "boost plan: cannot write %s (%s)\n", path, strerror(errno));
        return 1;
    }
    printf("winner written to %s (boost train %s)\n", path, path);
    return 0;
}

static void print_header(const Run *base, const PlanArgs *a, const PlanOpts *o, const PlanResult *r,
                         double elapsed) {
    const Gpu *g = &base->gpu;
    printf("%s on %d x %s%s%s (%d per node, NVLink %.0f GB/s, network %.1f GB/s, %.0f GB), global "
           "batch %lld x %d tokens\n",
           base->model.name, o->gpus, g->name, a->cluster ? ", cluster " : "",
           a->cluster ? a->cluster : "", g->gpus_per_node, g->nvlink_gbs, g->net_gbs, g->memory_gb,
           (long long)(o->global_tokens / base->seq), base->seq);
    printf("%d candidates; closed forms ruled out %d by memory and %d by time; %d generated and "
           "priced (%d too big, "
           "%d refused) in %.2f s\n",
           r->n, r->pruned_mem, r->pruned_time, r->generated, r->too_big, r->invalid, elapsed);
    printf("checkpointing searched: none, lowrank (btp); the generator has no whole-layer "
           "recomputation\n");
    if (o->backend == PLAN_BACKEND_CPU)
        printf("ZeRO searched: 0, 1, 2 (cpu backend: zero=2 shards the gradients too)\n");
    else
        printf("ZeRO searched: 0, 1, and 2 at pp 1 only: at pp > 1 the cuda "
               "backend runs zero=2 with zero=1's memory (full-size gradients)\n");
}

static int plan_main(const PlanArgs *a, Run *base) {
    char err[2048];
    Cluster cl;
    const char *gpu = a->gpu;
    if (a->cluster) {
        if (spec_load_cluster(a->cluster, &cl, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 2;
        }
        if (gpu && strcmp(gpu, cl.gpu)) {
            fprintf(stderr,
                    "boost plan: --gpu %s, but cluster %s is made of %s: drop one of them\n", gpu,
                    cl.name, cl.gpu);
            return 2;
        }
        gpu = cl.gpu;
        if (cl.nodes > 0 && a->gpus > (long long)cl.nodes * cl.gpus_per_node) {
            fprintf(stderr,
                    "boost plan: cluster %s has %d nodes of %d GPUs (%d in all), fewer than --gpus "
                    "%d\n",
                    cl.name, cl.nodes, cl.gpus_per_node, cl.nodes * cl.gpus_per_node, a->gpus);
            return 2;
        }
    }
    int rc = load_base(a, gpu, base, err, sizeof err);
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return rc;
    }
    if (a->cluster) cluster_apply(&cl, &base->gpu);
    if (a->per_node) base->gpu.gpus_per_node = a->per_node;
    if (a->seq) base->seq = a->seq;
    PlanOpts o;
    planner_opts_default(&o);
    o.gpus = a->gpus;
    o.top = a->top;
    o.brute = a->brute;
    o.backend = a->backend;
    o.threads = a->threads;
    o.global_tokens =
        a->global ? a->global : (4194304LL / base->seq > 0 ? 4194304LL / base->seq : 1) * base->seq;
    GemmRates rates;
    if (gemm_rates_load(&rates, a->rates ? a->rates : "bench/results", err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    CostConsts c;
    cost_consts_default(&c);
    PlanResult r;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = planner_search(base, &o, &c, &rates, &r, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double elapsed = (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec);
    if (rc) {
        fprintf(stderr, "boost plan: %s\n", err);
        gemm_rates_free(&rates);
        return rc;
    }
    if (a->kv)
        print_kv(&r, &o, elapsed);
    else {
        print_header(base, a, &o, &r, elapsed);
        if (r.nbest) {
            printf("\n  #  layout    tp  pp  v    dp  ep zero  ckpt      mb    ga     s/iter  "
                   "tok/s/GPU    MFU  GB/rank  comm\n");
            for (int i = 0; i < r.nbest; i++) print_row(i + 1, &r.c[r.best[i]]);
            printf("\n(cost model of docs/cost-model.md; memory = weights, grads and AdamW + the "
                   "generated activation arena "
                   "of the busiest pipeline rank + %.1f GB workspace; docs/planner.md)\n",
                   o.workspace_bytes / GIB);
        }
    }
    rc = 0;
    if (!r.nbest) {
        nothing_fits(&r, base, &o, &c, &rates);
        rc = 2;
    }
    if (!rc && a->out)
        rc = write_spec(a->out, base, &r.c[r.best[0]], a->cluster ? cl.name : NULL);
    else if (!rc && !a->kv)
        printf("write the winner as a run spec with -o FILE.lua\n");
    if (a->png && (r.nbest || r.generated)) {
        int prc = draw_png(&r, base, o.gpus, a->png);
        if (!rc) rc = prc;
    }
    planner_free(&r);
    gemm_rates_free(&rates);
    return rc;
}

int cmd_plan(int argc, char **argv) {
    PlanArgs a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    Run *base = calloc(1, sizeof *base); /* large (per-layer projection table): on the heap */
    if (!base) {
        fprintf(stderr, "boost plan: out of memory\n");
        return 1;
    }
    rc = plan_main(&a, base);
    free(base);
    return rc;
}
