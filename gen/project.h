/* project.h: the cost model behind `boost project`: seconds for one training iteration (forward,
 * backward, optimizer; pipeline stages and micro-batches) of a run, per layout, from the
 * generator's schedule (every GEMM shape, kernel, attention and collective). The formulas and
 * their constants are documented in docs/cost-model.md; this header is their C form. */
#ifndef BOOST_PROJECT_H
#define BOOST_PROJECT_H

#include <stddef.h>
#include <stdio.h>
#include "gen/model.h"

/* Constants of the model that are not in the GPU file (docs/cost-model.md says why each). */
typedef struct {
    double gemm_eff_max;      /* fraction of bf16 peak a large GEMM reaches (0.80) */
    double gemm_half_dim;     /* a dimension of this size halves the efficiency factor (64) */
    double hbm_eff;           /* fraction of HBM bandwidth elementwise kernels reach (0.80) */
    double attn_fwd_eff;      /* flash-attention forward, fraction of bf16 peak (0.60) */
    double attn_bwd_eff;      /* flash-attention backward (0.45) */
    double launch_us;         /* fixed cost per kernel or GEMM launch (4 us) */
    double coll_eff;          /* fraction of the GPU file's link bandwidth a collective reaches
                                 (0.74: fitted to the paper's per-layer all-reduce times) */
    double optim_bytes_per_param; /* AdamW HBM traffic per local parameter (fp32 master, m, v,
                                     grad read; master, m, v and bf16 weight written: 30 B) */
} CostConsts;

void cost_consts_default(CostConsts *c);

/* Set one constant from "NAME=VALUE" (NAME: a CostConsts field, e.g. coll_eff=0.67), for the
 * bench's sensitivity table. Returns 0, or 2 with a message in err (unknown name, value not a
 * positive number, an efficiency above 1). */
int cost_consts_set(CostConsts *c, const char *assign, char *err, size_t errlen);

/* One measured GEMM rate (the .md files of bench/results, "| gemm | GPU | M | N | K | TFLOPS |" rows). */
typedef struct { char gpu[16]; double m, n, k, tflops; } GemmRate;

typedef struct {
    GemmRate *rows;
    int n, cap;
    int files;                /* how many result files were read */
} GemmRates;

/* Read every *.md under dir (or the one file path) for "| gemm | ..." rows; a missing dir is no
 * error (no measured rates). Returns 0, or 1 with a message in err. */
int gemm_rates_load(GemmRates *r, const char *path, char *err, size_t errlen);
void gemm_rates_free(GemmRates *r);

/* The shape-dependent efficiency of the simple model: eff_max * f(m) f(n) f(k), f(x) = x/(x+h). */
double gemm_eff_model(const CostConsts *c, double m, double n, double k);

/* The efficiency used: the model, scaled by measured/model at the nearest measured shape of the
 * same GPU (log distance) when rates has any; *measured set to 1 when a measurement was used. */
double gemm_eff(const CostConsts *c, const GemmRates *rates, const Gpu *gpu,
                double m, double n, double k, int *measured);

/* Roofline of one GEMM (batch GEMMs of m x n x k, bf16 operands): max(FLOPs/(peak*eff), bytes/HBM)
 * plus one launch. */
double gemm_seconds(const CostConsts *c, const GemmRates *rates, const Gpu *gpu,
                    double m, double n, double k, double batch);

/* Memory-bound kernel: bytes over HBM at hbm_eff, plus one launch. */
double hbm_seconds(const CostConsts *c, const Gpu *gpu, double bytes);

/* Flash attention: max(flops/(peak*eff), bytes/HBM) plus one launch; backward=1 uses attn_bwd_eff. */
double attention_seconds(const CostConsts *c, const Gpu *gpu, double flops, double bytes, int backward);

/* Ring all-reduce of `bytes` over t ranks: 2(t-1)/t * bytes / bw + 2(t-1) * alpha; 0 when t = 1.
 * bw_gbs in GB/s (1e9 bytes/s), alpha_us in microseconds. */
double allreduce_seconds(double bytes, int t, double bw_gbs, double alpha_us);

/* Ring all-gather of `bytes` (the gathered size) over t ranks: (t-1)/t * bytes / bw + (t-1) alpha. */
double allgather_seconds(double bytes, int t, double bw_gbs, double alpha_us);

/* All-to-all of `bytes` (a rank's whole send buffer, its own share included) over t ranks:
 * (t-1)/t * bytes / bw + (t-1) alpha (one message to each other member); 0 when t = 1. */
double alltoall_seconds(double bytes, int t, double bw_gbs, double alpha_us);

/* Point-to-point send between pipeline stages: bytes / bw + alpha. */
double send_seconds(double bytes, double bw_gbs, double alpha_us);

/* The TP group's link: NVLink when tp <= gpus_per_node (TP groups sit within a node), else the
 * network. Pipeline stages cross nodes when tp*pp > gpus_per_node. */
void tp_link(const Gpu *gpu, int tp, double *bw_gbs, double *alpha_us);
void pp_link(const Gpu *gpu, int tp, int pp, double *bw_gbs, double *alpha_us);

/* Pipeline (1F1B): m micro-batches through pp stages of (slowest) time stage_s each, with one
 * stage-to-stage send of send_s forward and one backward per step: (m + pp - 1)(stage_s + 2 send_s)
 * when pp > 1, else m * stage_s. The bubble fraction is (pp-1)/(m+pp-1). */
double pipeline_seconds(double stage_s, double send_s, int micro_batches, int pp);

/* The projection of one layout. Times are seconds per iteration on the slowest rank. */
typedef struct {
    int layout;               /* enum Layout */
    double seconds;           /* the whole iteration */
    double compute_s;         /* GEMMs + kernels + attention (incl. recompute), all micro-batches
                                 and the pipeline's idle share of them */
    double comm_s;            /* TP collectives + ep all-to-alls + pipeline sends + DP gradient all-reduce */
    double ep_comm_s;         /* the ep all-to-alls (expert parallelism), all micro-batches */
    double gemm_s, kernel_s, attn_s, recompute_s, tp_comm_s, pp_send_s, dp_comm_s, optim_s;
    double dp_total_s;        /* the emitted dp buckets' time (dp_comm_s: the part not hidden) */
    double dp_hidden_s;       /* the part of it that overlaps the rest of the backward */
    double bubble;            /* pp > 1: the idle share of the pipeline ranks in the emitted schedule's
                                 timeline (pp_simulated), else the formula's */
    double bubble_formula;    /* (pp-1)/(v m+pp-1) */
    double seconds_formula;   /* the iteration with the pipeline priced by the formula (= seconds at pp = 1) */
    double pipeline_s;        /* the m micro-batches through the pipeline (seconds less optimizer and dp) */
    double pipeline_formula_s;/* the formula's: (v m + pp - 1)(stage_s / v + 2 send) */
    int pp_simulated;         /* 1: pipeline_s is the emitted schedule's timeline (gen/project_pp.c) */
    int pp_ranks;             /* pp */
    double pp_busy_s[64], pp_idle_s[64];  /* per pipeline rank in the timeline: computing, idle */
    char pp_note[256];        /* pp > 1 without a timeline: why (the formula is used) */
    double stage_s;           /* one micro-batch forward+backward through the slowest stage */
    double gemm_flops;        /* per iteration per GPU */
    double tp_bytes_fwd, tp_bytes_bwd;   /* TP all-reduce/all-gather payload per iteration per GPU */
    double params_local;      /* parameters on one GPU (largest stage) */
    double act_bytes;         /* activation arena of the busiest pipeline rank: each of its (virtual)
                                 stages' generated arena times its slots (micro-batches in flight);
                                 pp = 1: the whole model's arena (one micro-batch at a time) */
    int gemms_measured, gemms_modelled;  /* GEMM shapes costed from measured rates vs the model */
    /* the collectives of one decoder layer, one micro-batch (layer 0 of the schedule) */
    double layer_fwd_elems, layer_bwd_elems;    /* all-reduced elements */
    double layer_fwd_bytes, layer_bwd_bytes;    /* the same in bytes (bf16 payload) */
    int layer_fwd_count, layer_bwd_count;       /* how many collectives */
} Projection;

/* The backend that trains the run: how much of the dp reduction overlaps the backward depends
 * on it (project_backend_dp_wait). */
enum { PROJECT_BACKEND_CUDA, PROJECT_BACKEND_CPU };

/* 1 when the cuda backend keeps only gradient shards at zero=2 on this grid: pp 1, no ep
 * (runtime/cuda_zero2.c grad_work_layout; at grad_accum > 1 the reduce-scatters run every
 * micro-batch); elsewhere it runs zero=2 as zero=1. */
int project_cuda_zero2_shards(int grad_accum, int pp, int ep);

/* Prices into p (project_layout's projection of run) what the backend does with the dp reduction:
 * on cuda at zero=2 where only the shards are kept, the compute stream waits for each
 * reduce-scatter where it is issued (the gradient's memory goes to a later one,
 * runtime/cuda_coll.c), so none of it is hidden: dp_hidden_s moves into dp_comm_s; and at zero=2
 * reducing every micro-batch (gen/dp.h dp_zero2_every_micro, any backend) grad_accum - 1 more
 * reductions, each as exposed as the one priced. Both go into dp_comm_s, comm_s and seconds
 * (and seconds_formula). Returns the seconds added. `boost project` and `boost plan` both price a
 * run through this. */
double project_backend_dp_wait(const Run *run, int backend, Projection *p);

/* Project one layout of a run: layout is LAYOUT_MEGATRON (the full-rank twin of the run's model,
 * same d, d_ff, heads, layers), LAYOUT_NAIVE or LAYOUT_BTP. Returns 0, 2 (the run cannot be laid
 * out so) or 1, with a message in err. */
int project_layout(const Run *run, int layout, const CostConsts *c, const GemmRates *rates,
                   Projection *out, char *err, size_t errlen);

/* The same, writing every step of layer 0 and of the model's ends (embedding, head, loss) with
 * its seconds to trace (the other layers repeat layer 0): "section layer stage what seconds". */
int project_layout_trace(const Run *run, int layout, const CostConsts *c, const GemmRates *rates,
                         Projection *out, FILE *trace, char *err, size_t errlen);

/* The layouts a model is projected for, in the order megatron, naive, btp: all three for a low-rank
 * model, megatron alone for a full-rank one, btp alone for a model with MoE layers (the generator
 * builds MoE blocks for btp only, and a dense twin would not be the same model). Returns how many. */
int project_layouts(const Model *m, int layouts[3]);

/* The distinct GEMM shapes of a layout's schedule, one line each: "LAYOUT m n k batch count"
 * (count = how many steps of one micro-batch have that shape). Returns 0, 1 or 2 with err. */
int project_list_gemms(const Run *run, int layout, FILE *f, char *err, size_t errlen);

#endif
