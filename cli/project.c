/* project.c: `boost project RUN [-D name=value ...] [--json | --kv] [--rates PATH]`: the cost
 * model's seconds per iteration of a run for the megatron (full-rank twin), naive and btp layouts,
 * with compute and communication parts and the collectives of one layer. The model itself is in
 * gen/project_model.c and gen/project_sched.c; docs/cost-model.md says what it assumes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/commands.h"
#include "gen/gen.h"        // defines: spec_load_run, parse_override
#include "gen/project.h"    // defines: project_layout, Projection, gemm_rates_load

#define MAX_OVERRIDES 64

static void project_usage(FILE *f) {
    fprintf(f,
        "usage: boost project RUN [-D name=value ...] [--json | --kv] [--rates PATH]\n"
        "                     [--backend cuda|cpu]\n"
        "  Projects the seconds of one training iteration (forward, backward, optimizer; all\n"
        "  micro-batches and pipeline stages) of RUN for three layouts of the same shapes:\n"
        "  megatron (the full-rank twin), naive and btp (the low-rank model).\n"
        "  -D name=value  override a run field (tp=4, "
        "pp=2, micro_batch=4, seq=4096, gpu=a100, ...)\n"
        "  --json         one JSON object (seconds_per_iter.LAYOUT, "
        "compute_s.LAYOUT, comm_s.LAYOUT, ...)\n"
        "  --kv           the same numbers as 'key value' lines, for shell scripts\n"
        "  --const NAME=VALUE  set one of the model's constants (coll_eff, gemm_eff_max, hbm_eff,\n"
        "                 attn_fwd_eff, attn_bwd_eff, "
        "launch_us, ...; docs/cost-model.md), repeatable\n"
        "  --rates PATH   measured GEMM rates (a results .md file or a folder of them;\n"
        "                 default bench/results when it exists); see docs/cost-model.md\n"
        "  --steps LAYOUT also list every step of layer 0 and of the model's ends with its cost\n"
        "  --gemms        only list the distinct GEMM shapes of each layout's schedule\n"
        "                 (\"LAYOUT m n k batch count\" lines, for bench/gemm_rates.py)\n"
        "  --backend B    cuda (default) or cpu: the backend that trains the run; on cuda at\n"
        "                 zero=2 (grad_accum 1, pp 1) compute waits for each dp reduce-scatter,\n"
        "                 so none of the dp reduction is hidden (as `boost plan` prices it)\n");
}

/* 1 when every factored projection of every layer has the same rank (the closed forms hold). */
static int model_rank_uniform(const Model *m) {
    int r = 0;
    for (int l = 0; l < m->layers; l++)
        for (int p = 0; p < NPROJ; p++) {
            if (m->proj[l][p].factor == FACTOR_FULL) { if (r > 0) return 0; r = -1; continue; }
            if (r == 0) r = m->proj[l][p].rank;
            else if (r != m->proj[l][p].rank) return 0;
        }
    return 1;
}

/* One Projection's numbers as (key, value) pairs, shared by the three output forms. */
typedef struct { const char *key; double val; } Field;

static int projection_fields(const Projection *p, Field *f) {
    int n = 0;
    f[n++] = (Field){"seconds_per_iter", p->seconds};
    f[n++] = (Field){"compute_s", p->compute_s};
    f[n++] = (Field){"comm_s", p->comm_s};
    f[n++] = (Field){"gemm_s", p->gemm_s};
    f[n++] = (Field){"kernel_s", p->kernel_s};
    f[n++] = (Field){"attention_s", p->attn_s};
    f[n++] = (Field){"recompute_s", p->recompute_s};
    f[n++] = (Field){"optimizer_s", p->optim_s};
    f[n++] = (Field){"tp_comm_s", p->tp_comm_s};
    f[n++] = (Field){"ep_comm_s", p->ep_comm_s};
    f[n++] = (Field){"pp_send_s", p->pp_send_s};
    f[n++] = (Field){"dp_comm_s", p->dp_comm_s};
    f[n++] = (Field){"dp_total_s", p->dp_total_s};
    f[n++] = (Field){"dp_hidden_s", p->dp_hidden_s};
    f[n++] = (Field){"stage_s", p->stage_s};
    f[n++] = (Field){"bubble", p->bubble};
    f[n++] = (Field){"bubble_formula", p->bubble_formula};
    f[n++] = (Field){"seconds_formula", p->seconds_formula};
    f[n++] = (Field){"pipeline_s", p->pipeline_s};
    f[n++] = (Field){"pipeline_formula_s", p->pipeline_formula_s};
    f[n++] = (Field){"pp_simulated", p->pp_simulated};
    f[n++] = (Field){"gemm_tflop_per_gpu", p->gemm_flops / 1e12};
    f[n++] = (Field){"tp_bytes_fwd", p->tp_bytes_fwd};
    f[n++] = (Field){"tp_bytes_bwd", p->tp_bytes_bwd};
    f[n++] = (Field){"params_per_gpu", p->params_local};
    f[n++] = (Field){"layer_fwd_elems", p->layer_fwd_elems};
    f[n++] = (Field){"layer_bwd_elems", p->layer_bwd_elems};
    f[n++] = (Field){"layer_fwd_bytes", p->layer_fwd_bytes};
    f[n++] = (Field){"layer_bwd_bytes", p->layer_bwd_bytes};
    f[n++] = (Field){"layer_fwd_collectives", p->layer_fwd_count};
    f[n++] = (Field){"layer_bwd_collectives", p->layer_bwd_count};
    return n;
}

#define NFIELDS 32

/* The command line of `boost project`. */
typedef struct {
    const char *run_arg, *rates_path, *steps_layout;
    const char *consts_set[16];
    int nconsts;
    int json, kv, gemms;
    int backend;                     /* PROJECT_BACKEND_*: what the dp reduction overlaps */
    Override ov[MAX_OVERRIDES];
    int nov;
} ProjectArgs;

/* "boost project: MESSAGE" on stderr; returns 2, the exit status of bad input. */
#define project_refuse(...) cli_refuse("boost project", __VA_ARGS__)

/* One -D name=value into a->ov. 0, or 2 after saying what is wrong. */
static int add_override(ProjectArgs *a, const char *text) {
    char err[1024] = "";
    if (a->nov == MAX_OVERRIDES) return project_refuse("more than %d -D overrides", MAX_OVERRIDES);
    int n = parse_override(text, &a->ov[a->nov], err, sizeof err);
    if (n < 0) return project_refuse("%s", err);
    a->nov += n;
    return 0;
}

/* -1 to go on, else the exit status (0 after --help, 2 after saying what is wrong). */
static int parse_project_args(ProjectArgs *pa, int argc, char **argv) {
    memset(pa, 0, sizeof *pa);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { project_usage(stdout); return 0; }
        if (!strcmp(a, "--json")) pa->json = 1;
        else if (!strcmp(a, "--kv")) pa->kv = 1;
        else if (!strcmp(a, "--gemms")) pa->gemms = 1;
        else if (!strcmp(a, "--backend")) {
            const char *v = i + 1 < argc ? argv[++i] : "";
            if (strcmp(v, "cuda") && strcmp(v, "cpu"))
                return project_refuse("--backend '%s': expected cuda or cpu", v);
            pa->backend = !strcmp(v, "cpu") ? PROJECT_BACKEND_CPU : PROJECT_BACKEND_CUDA;
        }
        else if (!strcmp(a, "--const")) {
            if (i + 1 >= argc) return project_refuse("--const needs NAME=VALUE");
            if (pa->nconsts == 16) return project_refuse("more than 16 --const");
            pa->consts_set[pa->nconsts++] = argv[++i];
        }
        else if (!strcmp(a, "--steps")) {
            if (i + 1 >= argc)
                return project_refuse("--steps needs a layout (megatron, naive or btp)");
            const char *l = pa->steps_layout = argv[++i];
            if (strcmp(l, "megatron") && strcmp(l, "naive") && strcmp(l, "btp"))
                return project_refuse("--steps %s: the layouts are megatron, naive and btp", l);
        } else if (!strcmp(a, "--rates") || !strcmp(a, "-D")) {
            if (i + 1 >= argc) return project_refuse("%s needs a value", a);
            if (a[1] == 'D') {
                if (add_override(pa, argv[++i])) return 2;
            } else pa->rates_path = argv[++i];
        } else if (!strncmp(a, "-D", 2) && a[2]) {
            if (add_override(pa, a + 2)) return 2;
        } else if (a[0] == '-') {
            fprintf(stderr, "boost project: unknown option '%s'\n", a);
            project_usage(stderr);
            return 2;
        } else if (!pa->run_arg) pa->run_arg = a;
        else return project_refuse("one run at a time ('%s' and '%s')", pa->run_arg, a);
    }
    if (!pa->run_arg) { project_usage(stderr); return 2; }
    if (pa->json && pa->kv) return project_refuse("choose --json or --kv, not both");
    return -1;
}

/* The projections of one run, one per layout, and what the three output forms print of them. */
typedef struct {
    const Run *run;
    int layouts[3], nl, lowrank;     /* megatron, naive, btp, those the model runs in; lowrank:
                                      * btp and megatron both projected */
    Projection proj[3];
    CostConsts consts;
    Field f[3][NFIELDS];
    int nf;
    int measured;                    /* some GEMMs priced from measured rates */
    char source[160];                /* where the GEMM efficiencies came from */
    double over_naive, over_megatron;   /* btp's speedups (0: a layout not projected) */
    int backend;                     /* PROJECT_BACKEND_* (--backend) */
} ProjectOut;

/* The pp_busy_s / pp_idle_s lists of each layout (pp > 1), as JSON members. */
static void print_pp_ranks_json(const ProjectOut *o) {
    for (int a = 0; a < 2; a++) {   /* per pipeline rank, in the timeline */
        printf("  \"%s\": {", a ? "pp_idle_s" : "pp_busy_s");
        for (int i = 0; i < o->nl; i++) {
            const Projection *p = &o->proj[i];
            printf("%s\"%s\": [", i ? ", " : "", layout_name(o->layouts[i]));
            for (int k = 0; k < p->pp_ranks && k < 64; k++)
                printf("%s%.15g", k ? ", " : "", a ? p->pp_idle_s[k] : p->pp_busy_s[k]);
            printf("]");
        }
        printf("},\n");
    }
}

static void print_projection_json(const ProjectOut *o) {
    const Run *run = o->run;
    printf("{\n  \"run\": \"%s\", \"model\": \"%s\", \"gpu\": \"%s\",\n", run->name,
           run->model.name, run->gpu.name);
    printf("  \"tp\": %d, \"pp\": %d, \"dp\": %d, \"micro_batch\": %d, \"seq\": %d, "
           "\"grad_accum\": %d,\n", run->tp, run->pp, run->dp, run->micro_batch, run->seq,
           run->grad_accum);
    printf("  \"gemm_rates\": \"%s\",\n", o->measured ? "measured" : "model");
    for (int k = 0; k < o->nf; k++) {
        printf("  \"%s\": {", o->f[0][k].key);
        for (int i = 0; i < o->nl; i++)
            printf("%s\"%s\": %.15g", i ? ", " : "", layout_name(o->layouts[i]), o->f[i][k].val);
        printf("},\n");
    }
    if (run->pp > 1) print_pp_ranks_json(o);
    printf("  \"speedup\": {");
    if (o->over_naive > 0)
        printf("\"btp_over_naive\": %.6g%s", o->over_naive, o->lowrank ? ", " : "");
    if (o->lowrank) printf("\"btp_over_megatron\": %.6g", o->over_megatron);
    printf("}\n}\n");
}

static void print_projection_kv(const ProjectOut *o) {
    const Run *run = o->run;
    const Model *m = &run->model;
    const CostConsts *c = &o->consts;
    printf("run %s\nmodel %s\ngpu %s\ntp %d\npp %d\ndp %d\nmicro_batch %d\nseq %d\ngrad_accum %d\n"
           "gemm_rates %s\n", run->name, m->name, run->gpu.name, run->tp, run->pp, run->dp,
           run->micro_batch, run->seq, run->grad_accum, o->measured ? "measured" : "model");
    printf("backend %s\nzero %d\n", o->backend == PROJECT_BACKEND_CPU ? "cpu" : "cuda", run->zero);
    printf("hidden %d\nffn %d\nheads %d\nkv_heads %d\nlayers %d\nvocab %d\nrank %d\n"
           "rank_uniform %d\nfamily %s\nmoe_experts %d\n", m->hidden, m->ffn, m->heads,
           m->kv_heads, m->layers, m->vocab, m->proj[0][PROJ_Q].rank, model_rank_uniform(m),
           m->family, m->moe_experts);
    printf("const.gemm_eff_max %g\nconst.gemm_half_dim %g\nconst.hbm_eff %g\n"
           "const.attn_fwd_eff %g\nconst.attn_bwd_eff %g\nconst.launch_us %g\nconst.coll_eff %g\n"
           "const.optim_bytes_per_param %g\n", c->gemm_eff_max, c->gemm_half_dim, c->hbm_eff,
           c->attn_fwd_eff, c->attn_bwd_eff, c->launch_us, c->coll_eff, c->optim_bytes_per_param);
    for (int i = 0; i < o->nl; i++)
        for (int k = 0; k < o->nf; k++)
            printf("%s.%s %.15g\n", o->f[i][k].key, layout_name(o->layouts[i]), o->f[i][k].val);
    if (run->pp > 1)
        for (int i = 0; i < o->nl; i++)
            for (int a = 0; a < 2; a++) {
                const Projection *p = &o->proj[i];
                printf("%s.%s", a ? "pp_idle_s" : "pp_busy_s", layout_name(o->layouts[i]));
                for (int k = 0; k < p->pp_ranks && k < 64; k++)
                    printf(" %.15g", a ? p->pp_idle_s[k] : p->pp_busy_s[k]);
                printf("\n");
            }
    if (o->over_naive > 0) printf("speedup.btp_over_naive %.6g\n", o->over_naive);
    if (o->lowrank) printf("speedup.btp_over_megatron %.6g\n", o->over_megatron);
}

/* pp > 1: the emitted schedule's timeline against the formula, with each rank's idle time */
static void print_pipeline_table(const ProjectOut *o) {
    const Run *run = o->run;
    printf("\npipeline (pp=%d, %d micro-batch(es)%s): the emitted schedule's timeline vs the "
           "formula (m+pp-1) x slowest stage:\n", run->pp, run->grad_accum,
           run->pp_virtual > 1 ? ", interleaved" : "");
    printf("  %-9s %12s %12s %9s %9s   %s\n", "layout", "timeline s", "formula s", "bubble",
           "formula", "idle per rank (s)");
    for (int i = 0; i < o->nl; i++) {
        const Projection *p = &o->proj[i];
        printf("  %-9s %12.4f %12.4f %8.1f%% %8.1f%%  ", layout_name(o->layouts[i]), p->seconds,
               p->seconds_formula, 100 * p->bubble, 100 * p->bubble_formula);
        if (p->pp_simulated)
            for (int k = 0; k < p->pp_ranks && k < 64; k++) printf(" %.4f", p->pp_idle_s[k]);
        else printf(" %s", p->pp_note);
        printf("\n");
    }
    int all = 1;
    for (int i = 0; i < o->nl; i++) all &= o->proj[i].pp_simulated;
    printf("  (s/iter above is the timeline's%s; the formula's is beside it, docs/cost-model.md "
           "\"Pipeline\")\n", all ? "" : " where there is one, else the formula's");
}

/* The parts of the time after the main table: ep all-to-alls, the dp reduction, one layer's
 * collectives and the speedups. */
static void print_projection_details(const ProjectOut *o) {
    const Run *run = o->run;
    if (run->ep > 1)   /* part of comm above: the experts wait for their tokens */
        for (int i = 0; i < o->nl; i++)
            if (o->proj[i].ep_comm_s > 0)
                printf("%s ep=%d all-to-alls (the emitted alltoall steps, in comm): %.4f s\n",
                       layout_name(o->layouts[i]), run->ep, o->proj[i].ep_comm_s);
    if (run->dp > 1) {
        printf("\ndp gradient reduction, the emitted buckets (dp-comm above is the part not "
               "hidden):\n");
        if (o->backend == PROJECT_BACKEND_CUDA && run->zero == 2 &&
            project_cuda_zero2_shards(run->grad_accum, run->pp, run->ep))
            printf("  (cuda, zero=2: compute waits for each reduce-scatter, so none is hidden; "
                   "--backend cpu overlaps it)\n");
        for (int i = 0; i < o->nl; i++) {
            const Projection *p = &o->proj[i];
            printf("  %-9s %.4f s in all, %.4f s hidden behind the rest of the backward (%.0f%%)\n",
                   layout_name(o->layouts[i]), p->dp_total_s, p->dp_hidden_s,
                   p->dp_total_s > 0 ? 100 * p->dp_hidden_s / p->dp_total_s : 0);
        }
    }
    printf("\ncollectives of one layer, one micro-batch (elements, bf16 bytes):\n");
    for (int i = 0; i < o->nl; i++) {
        const Projection *p = &o->proj[i];
        printf("  %-9s forward %d: %.0f (%.1f MB)   backward %d: %.0f (%.1f MB)\n",
               layout_name(o->layouts[i]), p->layer_fwd_count, p->layer_fwd_elems,
               p->layer_fwd_bytes / 1e6, p->layer_bwd_count, p->layer_bwd_elems,
               p->layer_bwd_bytes / 1e6);
    }
    if (o->lowrank && o->over_naive > 0)
        printf("\nbtp speedup: %.2fx over naive, %.2fx over megatron (the full-rank twin)\n",
               o->over_naive, o->over_megatron);
    else if (o->lowrank)
        printf("\nbtp speedup: %.2fx over megatron (the full-rank twin); naive does not apply: "
               "the model's factorization runs in btp only\n", o->over_megatron);
    else if (run->model.moe_shared)
        printf("\nthe model shares expert factors, built for btp only: megatron and naive are not "
               "projected\n");
    else
        printf("\nthe model is full rank: naive and btp do not apply (only megatron is "
               "projected)\n");
    printf("(the model and its assumptions: docs/cost-model.md)\n");
}

static void print_projection_table(const ProjectOut *o) {
    const Run *run = o->run;
    printf("%s: model %s on %s, tp=%d pp=%d dp=%d, micro-batch %d x seq %d, %d micro-batch(es)\n",
           run->name, run->model.name, run->gpu.name, run->tp, run->pp, run->dp, run->micro_batch,
           run->seq, run->grad_accum);
    printf("GEMM efficiency: %s\n\n", o->source);
    printf("%-9s %9s %9s %9s | %8s %8s %8s %8s %8s | %8s %8s %8s %8s\n", "layout", "s/iter",
           "compute", "comm", "gemm", "kernels", "attn", "recomp", "optim", "tp-comm", "pp-send",
           "dp-comm", "bubble");
    for (int i = 0; i < o->nl; i++) {
        const Projection *p = &o->proj[i];
        printf("%-9s %9.4f %9.4f %9.4f | %8.4f %8.4f %8.4f %8.4f %8.4f | "
               "%8.4f %8.4f %8.4f %7.1f%%\n",
               layout_name(o->layouts[i]), p->seconds, p->compute_s, p->comm_s, p->gemm_s,
               p->kernel_s, p->attn_s, p->recompute_s, p->optim_s, p->tp_comm_s, p->pp_send_s,
               p->dp_comm_s, 100 * p->bubble);
    }
    if (run->pp > 1) print_pipeline_table(o);
    print_projection_details(o);
}

/* Every layout projected into o (with --steps LAYOUT, that layout's steps printed on the way).
 * 0, or the exit status after saying what is wrong. */
static int project_layouts_all(const ProjectArgs *pa, ProjectOut *o, const GemmRates *rates) {
    char err[1024] = "";
    const Run *run = o->run;
    const char *steps = pa->steps_layout;
    if (steps && o->nl == 1 && strcmp(steps, layout_name(o->layouts[0])))
        return project_refuse("--steps %s: %s %s, only %s applies", steps, run->model.name,
                              run->model.moe_shared ? "shares expert factors" : "is full rank",
                              layout_name(o->layouts[0]));
    int listed = !steps;
    for (int i = 0; i < o->nl; i++) listed |= steps && !strcmp(steps, layout_name(o->layouts[i]));
    if (!listed)
        return project_refuse("--steps %s: model %s does not run in %s (projected: %s%s%s%s%s)",
                              steps, run->model.name, steps, layout_name(o->layouts[0]),
                              o->nl > 1 ? ", " : "", o->nl > 1 ? layout_name(o->layouts[1]) : "",
                              o->nl > 2 ? ", " : "", o->nl > 2 ? layout_name(o->layouts[2]) : "");
    for (int i = 0; i < o->nl; i++) {
        const char *name = layout_name(o->layouts[i]);
        FILE *trace = steps && !strcmp(steps, name) && !pa->json && !pa->kv ? stdout : NULL;
        if (trace) printf("steps of %s (layer 0 and the model's ends; one micro-batch):\n"
                          "  %-9s %5s %5s  %-60s %13s\n", name, "section", "layer", "stage", "step",
                          "time");
        int rc = project_layout_trace(run, o->layouts[i], &o->consts, rates, &o->proj[i], trace,
                                      err, sizeof err);
        if (trace) printf("\n");
        if (rc) { fprintf(stderr, "%s\n", err); return rc; }
    }
    return 0;
}

/* The GEMM rates and the cost model's constants, then every layout priced into o. 0, or the exit
 * status after saying what is wrong. */
static int project_priced(const ProjectArgs *pa, ProjectOut *o) {
    char err[1024] = "";
    const char *rates_path = pa->rates_path ? pa->rates_path : "bench/results";
    GemmRates rates;
    if (gemm_rates_load(&rates, rates_path, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    cost_consts_default(&o->consts);
    for (int i = 0; i < pa->nconsts; i++)
        if (cost_consts_set(&o->consts, pa->consts_set[i], err, sizeof err)) {
            gemm_rates_free(&rates);
            return project_refuse("%s", err);
        }
    int rc = project_layouts_all(pa, o, &rates);
    if (rc) { gemm_rates_free(&rates); return rc; }
    for (int i = 0; i < o->nl; i++) project_backend_dp_wait(o->run, pa->backend, &o->proj[i]);
    for (int i = 0; i < o->nl; i++) o->measured += o->proj[i].gemms_measured;
    if (o->measured)
        snprintf(o->source, sizeof o->source,
                 "measured rates (%d rows for %s from %s) scaled by the shape model", rates.n,
                 o->run->gpu.name, rates_path);
    else snprintf(o->source, sizeof o->source, "shape model (no measured rates for %s)",
                  o->run->gpu.name);
    gemm_rates_free(&rates);
    return 0;
}

static int project_main(Run *run, int argc, char **argv) {
    ProjectArgs pa;
    int rc = parse_project_args(&pa, argc, argv);
    if (rc >= 0) return rc;
    char err[1024] = "";
    rc = spec_load_run_projection(pa.run_arg, pa.ov, pa.nov, run, err, sizeof err);
    if (rc) { fprintf(stderr, "%s\n", err); return rc; }

    ProjectOut o;
    memset(&o, 0, sizeof o);
    o.run = run;
    o.backend = pa.backend;
    o.nl = project_layouts(&run->model, o.layouts);   /* megatron, naive, btp; or one of them */
    int at[3] = {-1, -1, -1};   /* the index of megatron, naive, btp in o.layouts, or -1 */
    for (int i = 0; i < o.nl; i++)
        at[o.layouts[i] == LAYOUT_MEGATRON ? 0 : o.layouts[i] == LAYOUT_NAIVE ? 1 : 2] = i;
    o.lowrank = at[0] >= 0 && at[2] >= 0;
    if (pa.gemms) {
        for (int i = 0; i < o.nl; i++) {
            rc = project_list_gemms(run, o.layouts[i], stdout, err, sizeof err);
            if (rc) { fprintf(stderr, "%s\n", err); return rc; }
        }
        return 0;
    }
    rc = project_priced(&pa, &o);
    if (rc) return rc;
    for (int i = 0; i < o.nl; i++) o.nf = projection_fields(&o.proj[i], o.f[i]);
    o.over_naive = at[1] >= 0 && at[2] >= 0 ? o.proj[at[1]].seconds / o.proj[at[2]].seconds : 0;
    o.over_megatron = o.lowrank ? o.proj[at[0]].seconds / o.proj[at[2]].seconds : 0;
    if (pa.json) print_projection_json(&o);
    else if (pa.kv) print_projection_kv(&o);
    else print_projection_table(&o);
    return 0;
}

/* The Run is large (per-layer projection table): it lives on the heap for the command's length. */
int cmd_project(int argc, char **argv) {
    Run *run = calloc(1, sizeof *run);
    if (!run) { fprintf(stderr, "boost project: out of memory\n"); return 1; }
    int rc = project_main(run, argc, argv);
    free(run);
    return rc;
}
