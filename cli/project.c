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
        "  Projects the seconds of one training iteration (forward, backward, optimizer; all\n"
        "  micro-batches and pipeline stages) of RUN for three layouts of the same shapes:\n"
        "  megatron (the full-rank twin), naive and btp (the low-rank model).\n"
        "  -D name=value  override a run field (tp=4, pp=2, micro_batch=4, seq=4096, gpu=a100, ...)\n"
        "  --json         one JSON object (seconds_per_iter.LAYOUT, compute_s.LAYOUT, comm_s.LAYOUT, ...)\n"
        "  --kv           the same numbers as 'key value' lines, for shell scripts\n"
        "  --const NAME=VALUE  set one of the model's constants (coll_eff, gemm_eff_max, hbm_eff,\n"
        "                 attn_fwd_eff, attn_bwd_eff, launch_us, ...; docs/cost-model.md), repeatable\n"
        "  --rates PATH   measured GEMM rates (a results .md file or a folder of them;\n"
        "                 default bench/results when it exists); see docs/cost-model.md\n"
        "  --steps LAYOUT also list every step of layer 0 and of the model's ends with its cost\n"
        "  --gemms        only list the distinct GEMM shapes of each layout's schedule\n"
        "                 (\"LAYOUT m n k batch count\" lines, for bench/gemm_rates.py)\n");
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

static int project_main(Run *run, int argc, char **argv) {
    const char *run_arg = NULL, *rates_path = NULL, *steps_layout = NULL;
    const char *consts_set[16];
    int nconsts = 0;
    int json = 0, kv = 0, gemms = 0;
    Override ov[MAX_OVERRIDES];
    int nov = 0;
    char err[1024] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { project_usage(stdout); return 0; }
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--kv")) kv = 1;
        else if (!strcmp(a, "--gemms")) gemms = 1;
        else if (!strcmp(a, "--const")) {
            if (i + 1 >= argc) { fprintf(stderr, "boost project: --const needs NAME=VALUE\n"); return 2; }
            if (nconsts == 16) { fprintf(stderr, "boost project: more than 16 --const\n"); return 2; }
            consts_set[nconsts++] = argv[++i];
        }
        else if (!strcmp(a, "--steps")) {
            if (i + 1 >= argc) { fprintf(stderr, "boost project: --steps needs a layout (megatron, naive or btp)\n"); return 2; }
            steps_layout = argv[++i];
            if (strcmp(steps_layout, "megatron") && strcmp(steps_layout, "naive") && strcmp(steps_layout, "btp")) {
                fprintf(stderr, "boost project: --steps %s: the layouts are megatron, naive and btp\n", steps_layout);
                return 2;
            }
        } else if (!strcmp(a, "--rates") || !strcmp(a, "-D")) {
            if (i + 1 >= argc) { fprintf(stderr, "boost project: %s needs a value\n", a); return 2; }
            if (a[1] == 'D') {
                if (nov == MAX_OVERRIDES) { fprintf(stderr, "boost project: more than %d -D overrides\n", MAX_OVERRIDES); return 2; }
                int n = parse_override(argv[++i], &ov[nov], err, sizeof err);
                if (n < 0) { fprintf(stderr, "boost project: %s\n", err); return 2; }
                nov += n;
            } else rates_path = argv[++i];
        } else if (!strncmp(a, "-D", 2) && a[2]) {
            if (nov == MAX_OVERRIDES) { fprintf(stderr, "boost project: more than %d -D overrides\n", MAX_OVERRIDES); return 2; }
            int n = parse_override(a + 2, &ov[nov], err, sizeof err);
            if (n < 0) { fprintf(stderr, "boost project: %s\n", err); return 2; }
            nov += n;
        } else if (a[0] == '-') {
            fprintf(stderr, "boost project: unknown option '%s'\n", a); project_usage(stderr); return 2;
        } else if (!run_arg) run_arg = a;
        else { fprintf(stderr, "boost project: one run at a time ('%s' and '%s')\n", run_arg, a); return 2; }
    }
    if (!run_arg) { project_usage(stderr); return 2; }
    if (json && kv) { fprintf(stderr, "boost project: choose --json or --kv, not both\n"); return 2; }

    int rc = spec_load_run_projection(run_arg, ov, nov, run, err, sizeof err);
    if (rc) { fprintf(stderr, "%s\n", err); return rc; }

    int layouts[3];
    int nl = project_layouts(&run->model, layouts);   /* megatron, naive, btp; or one of them */
    int lowrank = nl == 3;
    if (gemms) {
        const int *list = layouts;
        for (int i = 0; i < nl; i++) {
            rc = project_list_gemms(run, list[i], stdout, err, sizeof err);
            if (rc) { fprintf(stderr, "%s\n", err); return rc; }
        }
        return 0;
    }
    GemmRates rates;
    if (!rates_path) rates_path = "bench/results";
    if (gemm_rates_load(&rates, rates_path, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 2; }

    CostConsts consts;
    cost_consts_default(&consts);
    for (int i = 0; i < nconsts; i++)
        if (cost_consts_set(&consts, consts_set[i], err, sizeof err)) {
            fprintf(stderr, "boost project: %s\n", err);
            gemm_rates_free(&rates);
            return 2;
        }
    Projection proj[3];
    if (steps_layout && !lowrank && strcmp(steps_layout, layout_name(layouts[0]))) {
        fprintf(stderr, "boost project: --steps %s: %s %s, only %s applies\n", steps_layout, run->model.name,
                run->model.moe_shared ? "shares expert factors" : "is full rank", layout_name(layouts[0]));
        gemm_rates_free(&rates);
        return 2;
    }
    for (int i = 0; i < nl; i++) {
        FILE *trace = steps_layout && !strcmp(steps_layout, layout_name(layouts[i])) && !json && !kv ? stdout : NULL;
        if (trace) printf("steps of %s (layer 0 and the model's ends; one micro-batch):\n"
                          "  %-9s %5s %5s  %-60s %13s\n", layout_name(layouts[i]), "section", "layer", "stage", "step", "time");
        rc = project_layout_trace(run, layouts[i], &consts, &rates, &proj[i], trace, err, sizeof err);
        if (trace) printf("\n");
        if (rc) { fprintf(stderr, "%s\n", err); gemm_rates_free(&rates); return rc; }
    }
    int measured = 0, modelled = 0;
    for (int i = 0; i < nl; i++) { measured += proj[i].gemms_measured; modelled += proj[i].gemms_modelled; }
    char source[160];
    if (measured) snprintf(source, sizeof source, "measured rates (%d rows for %s from %s) scaled by the shape model",
                           rates.n, run->gpu.name, rates_path);
    else snprintf(source, sizeof source, "shape model (no measured rates for %s)", run->gpu.name);
    gemm_rates_free(&rates);

    Field f[3][NFIELDS];
    int nf = 0;
    for (int i = 0; i < nl; i++) nf = projection_fields(&proj[i], f[i]);
    double over_naive = lowrank ? proj[1].seconds / proj[2].seconds : 0;
    double over_megatron = lowrank ? proj[0].seconds / proj[2].seconds : 0;

    if (json) {
        printf("{\n  \"run\": \"%s\", \"model\": \"%s\", \"gpu\": \"%s\",\n", run->name, run->model.name, run->gpu.name);
        printf("  \"tp\": %d, \"pp\": %d, \"dp\": %d, \"micro_batch\": %d, \"seq\": %d, \"grad_accum\": %d,\n",
               run->tp, run->pp, run->dp, run->micro_batch, run->seq, run->grad_accum);
        printf("  \"gemm_rates\": \"%s\",\n", measured ? "measured" : "model");
        for (int k = 0; k < nf; k++) {
            printf("  \"%s\": {", f[0][k].key);
            for (int i = 0; i < nl; i++)
                printf("%s\"%s\": %.15g", i ? ", " : "", layout_name(layouts[i]), f[i][k].val);
            printf("},\n");
        }
        if (run->pp > 1)
            for (int a = 0; a < 2; a++) {   /* per pipeline rank, in the timeline */
                printf("  \"%s\": {", a ? "pp_idle_s" : "pp_busy_s");
                for (int i = 0; i < nl; i++) {
                    printf("%s\"%s\": [", i ? ", " : "", layout_name(layouts[i]));
                    for (int k = 0; k < proj[i].pp_ranks && k < 64; k++)
                        printf("%s%.15g", k ? ", " : "", a ? proj[i].pp_idle_s[k] : proj[i].pp_busy_s[k]);
                    printf("]");
                }
                printf("},\n");
            }
        if (lowrank) printf("  \"speedup\": {\"btp_over_naive\": %.6g, \"btp_over_megatron\": %.6g}\n}\n",
                            over_naive, over_megatron);
        else printf("  \"speedup\": {}\n}\n");
        return 0;
    }
    if (kv) {
        printf("run %s\nmodel %s\ngpu %s\ntp %d\npp %d\ndp %d\nmicro_batch %d\nseq %d\ngrad_accum %d\ngemm_rates %s\n",
               run->name, run->model.name, run->gpu.name, run->tp, run->pp, run->dp, run->micro_batch, run->seq, run->grad_accum,
               measured ? "measured" : "model");
        printf("hidden %d\nffn %d\nheads %d\nkv_heads %d\nlayers %d\nvocab %d\nrank %d\nrank_uniform %d\nfamily %s\nmoe_experts %d\n",
               run->model.hidden, run->model.ffn, run->model.heads, run->model.kv_heads, run->model.layers,
               run->model.vocab, run->model.proj[0][PROJ_Q].rank, model_rank_uniform(&run->model), run->model.family,
               run->model.moe_experts);
        printf("const.gemm_eff_max %g\nconst.gemm_half_dim %g\nconst.hbm_eff %g\nconst.attn_fwd_eff %g\nconst.attn_bwd_eff %g\n"
               "const.launch_us %g\nconst.coll_eff %g\nconst.optim_bytes_per_param %g\n", consts.gemm_eff_max,
               consts.gemm_half_dim, consts.hbm_eff, consts.attn_fwd_eff, consts.attn_bwd_eff, consts.launch_us,
               consts.coll_eff, consts.optim_bytes_per_param);
        for (int i = 0; i < nl; i++)
            for (int k = 0; k < nf; k++) printf("%s.%s %.15g\n", f[i][k].key, layout_name(layouts[i]), f[i][k].val);
        if (run->pp > 1)
            for (int i = 0; i < nl; i++)
                for (int a = 0; a < 2; a++) {
                    printf("%s.%s", a ? "pp_idle_s" : "pp_busy_s", layout_name(layouts[i]));
                    for (int k = 0; k < proj[i].pp_ranks && k < 64; k++) printf(" %.15g", a ? proj[i].pp_idle_s[k] : proj[i].pp_busy_s[k]);
                    printf("\n");
                }
        if (lowrank) printf("speedup.btp_over_naive %.6g\nspeedup.btp_over_megatron %.6g\n", over_naive, over_megatron);
        return 0;
    }
    printf("%s: model %s on %s, tp=%d pp=%d dp=%d, micro-batch %d x seq %d, %d micro-batch(es)\n",
           run->name, run->model.name, run->gpu.name, run->tp, run->pp, run->dp, run->micro_batch, run->seq, run->grad_accum);
    printf("GEMM efficiency: %s\n\n", source);
    printf("%-9s %9s %9s %9s | %8s %8s %8s %8s %8s | %8s %8s %8s %8s\n", "layout", "s/iter", "compute", "comm",
           "gemm", "kernels", "attn", "recomp", "optim", "tp-comm", "pp-send", "dp-comm", "bubble");
    for (int i = 0; i < nl; i++) {
        const Projection *p = &proj[i];
        printf("%-9s %9.4f %9.4f %9.4f | %8.4f %8.4f %8.4f %8.4f %8.4f | %8.4f %8.4f %8.4f %7.1f%%\n",
               layout_name(layouts[i]), p->seconds, p->compute_s, p->comm_s, p->gemm_s, p->kernel_s, p->attn_s,
               p->recompute_s, p->optim_s, p->tp_comm_s, p->pp_send_s, p->dp_comm_s, 100 * p->bubble);
    }
    if (run->pp > 1) {
        printf("\npipeline (pp=%d, %d micro-batch(es)%s): the emitted schedule's timeline vs the formula (m+pp-1) x slowest stage:\n",
               run->pp, run->grad_accum, run->pp_virtual > 1 ? ", interleaved" : "");
        printf("  %-9s %12s %12s %9s %9s   %s\n", "layout", "timeline s", "formula s", "bubble", "formula", "idle per rank (s)");
        for (int i = 0; i < nl; i++) {
            const Projection *p = &proj[i];
            printf("  %-9s %12.4f %12.4f %8.1f%% %8.1f%%  ", layout_name(layouts[i]), p->seconds, p->seconds_formula,
                   100 * p->bubble, 100 * p->bubble_formula);
            if (p->pp_simulated)
                for (int k = 0; k < p->pp_ranks && k < 64; k++) printf(" %.4f", p->pp_idle_s[k]);
            else printf(" %s", p->pp_note);
            printf("\n");
        }
        int all = 1;
        for (int i = 0; i < nl; i++) all &= proj[i].pp_simulated;
        printf("  (s/iter above is the timeline's%s; the formula's is beside it, docs/cost-model.md \"Pipeline\")\n",
               all ? "" : " where there is one, else the formula's");
    }
    if (run->ep > 1)   /* part of comm above: the experts wait for their tokens */
        for (int i = 0; i < nl; i++)
            if (proj[i].ep_comm_s > 0)
                printf("%s ep=%d all-to-alls (the emitted alltoall steps, in comm): %.4f s\n", layout_name(layouts[i]), run->ep,
                       proj[i].ep_comm_s);
    if (run->dp > 1) {
        printf("\ndp gradient reduction, the emitted buckets (dp-comm above is the part not hidden):\n");
        for (int i = 0; i < nl; i++)
            printf("  %-9s %.4f s in all, %.4f s hidden behind the rest of the backward (%.0f%%)\n", layout_name(layouts[i]),
                   proj[i].dp_total_s, proj[i].dp_hidden_s, proj[i].dp_total_s > 0 ? 100 * proj[i].dp_hidden_s / proj[i].dp_total_s : 0);
    }
    printf("\ncollectives of one layer, one micro-batch (elements, bf16 bytes):\n");
    for (int i = 0; i < nl; i++) {
        const Projection *p = &proj[i];
        printf("  %-9s forward %d: %.0f (%.1f MB)   backward %d: %.0f (%.1f MB)\n", layout_name(layouts[i]),
               p->layer_fwd_count, p->layer_fwd_elems, p->layer_fwd_bytes / 1e6,
               p->layer_bwd_count, p->layer_bwd_elems, p->layer_bwd_bytes / 1e6);
    }
    if (lowrank) printf("\nbtp speedup: %.2fx over naive, %.2fx over megatron (the full-rank twin)\n",
                        over_naive, over_megatron);
    else if (run->model.moe_shared)
        printf("\nthe model shares expert factors, built for btp only: megatron and naive are not projected\n");
    else printf("\nthe model is full rank: naive and btp do not apply (only megatron is projected)\n");
    printf("(the model and its assumptions: docs/cost-model.md)\n");
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
