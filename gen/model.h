/* model.h: the plain C structs a Lua spec evaluates to (gen/spec.c fills them; the Lua state is
 * closed before anything else runs). A Run holds the model, the GPU and the run's own settings.
 * Nothing here knows Lua; nothing in runtime/ includes this file (the plan file is the contract). */
#ifndef BOOST_MODEL_H
#define BOOST_MODEL_H

#include <stdint.h>
#include "common/train_settings.h"   // defines: DATA_MAX_SOURCES

#define MAX_LAYERS 256
#define NAME_LEN 64
#define PATH_LEN 512

/* The seven projections of a decoder layer, in execution order. */
enum Proj { PROJ_Q, PROJ_K, PROJ_V, PROJ_O, PROJ_GATE, PROJ_UP, PROJ_DOWN, NPROJ };

/* How one projection is parametrised. */
enum Factor {
    FACTOR_FULL,   /* dense W (d_in x d_out) */
    FACTOR_COLA,   /* A (d_in x r) -> sigma -> B (r x d_out) */
    FACTOR_SVD,    /* A -> identity -> B (also LORO-style) */
};

enum Act { ACT_NONE, ACT_SILU };
enum Layout { LAYOUT_MEGATRON, LAYOUT_NAIVE, LAYOUT_BTP };
enum Checkpoint { CKPT_NONE, CKPT_LOWRANK };
enum DType { DT_BF16, DT_FP32 };

typedef struct {
    int factor;  /* enum Factor */
    int rank;    /* r; 0 for FACTOR_FULL */
    int act;     /* enum Act: sigma between A and B */
} ProjSpec;

typedef struct {
    char name[NAME_LEN];
    char file[PATH_LEN];      /* spec file it came from, for messages */
    char family[16];          /* "full" | "cola" | "svd" | "lax" */
    int hidden;               /* d */
    int layers;
    int heads;
    int kv_heads;             /* == heads for MHA */
    int head_dim;             /* hidden / heads */
    int ffn;                  /* d_ff */
    int vocab;
    double norm_eps;
    double rope_theta;
    int mlp_gate_act;         /* enum Act on the gate before gate*up: SILU (SwiGLU) for full rank,
                                 NONE for CoLA (the only nonlinearity is sigma inside each factor) */
    int lax;                  /* 1: LaX latent crossing: B_p's input = z_p + z_prev(p), with
                                 prev(o)=v, prev(gate)=prev(up)=o, prev(down)=up (same rank needed) */
    ProjSpec proj[MAX_LAYERS][NPROJ];   /* per layer, per projection */
    double init_std;          /* std of full-rank weights and embeddings (0.02) */
    /* MoE (moe{...} in the spec): the MLP of a layer with moe_layer[i] = 1 is a top-k routed
     * mixture of moe_experts experts, each the gate/up/down MLP with width moe_ffn and the
     * layer's gate/up/down ranks (gen/moe.c). moe_experts = 0: no MoE layer. */
    int moe_experts;          /* E */
    int moe_top_k;            /* k: experts per token */
    int moe_ffn;              /* d_ff of one expert (defaults to ffn) */
    double moe_capacity;      /* capacity factor c: C = ceil(c * M * k / E) slots per expert */
    double moe_aux;           /* weight of the load-balance loss added to the loss */
    double moe_z;             /* weight of the router z-loss (0: none; the aux tensor then has no z entries) */
    unsigned char moe_layer[MAX_LAYERS];
    unsigned moe_shared;      /* MOE_SHARE_* bits: factors shared by all experts of a layer (docs/moe.md) */
} Model;
enum { MOE_SHARE_GATE_A = 1, MOE_SHARE_UP_A = 2, MOE_SHARE_DOWN_B = 4 };

typedef struct {
    char name[NAME_LEN];      /* "a100" | "h100" | "h200" */
    char file[PATH_LEN];
    char arch[16];            /* "sm_NN" or "sm_NNa" (arch-specific features), from the GPU spec */
    /* the arch's limits (CUDA Programming Guide, compute capabilities); 0: not given */
    int smem_block_kib;       /* shared memory a block may opt in to, KiB (48 when not given) */
    int smem_sm_kib;          /* shared memory of an SM usable by blocks, KiB */
    int regs_sm, threads_sm, blocks_sm;   /* 32-bit registers, resident threads, blocks an SM */
    int kernel_report;        /* 1: every report's kernel table compiles for this arch */
    int sm_count;
    double bf16_tflops;       /* dense bf16 peak (datasheet or measured) */
    double hbm_gbs;           /* HBM bandwidth, GB/s */
    double nvlink_gbs;        /* per-GPU NVLink bandwidth, GB/s, one direction */
    double net_gbs;           /* per-GPU inter-node bandwidth, GB/s */
    double nvlink_latency_us; /* alpha of the alpha-beta all-reduce model, within a node */
    double net_latency_us;    /* across nodes */
    int gpus_per_node;
    double memory_gb;
    /* kernel tuning: threads per block for elementwise/row kernels and attention tile sizes */
    int tune_row_block;       /* threads per block for row-wise kernels (norm, act, xent) */
    int tune_elem_block;      /* threads per block for elementwise kernels */
    int tune_attn_block_q;    /* queries per attention block */
    int tune_attn_block_k;    /* keys per inner tile */
} Gpu;

typedef struct {
    char name[NAME_LEN];
    char file[PATH_LEN];
    Model model;
    Gpu gpu;
    int tp, pp, dp;
    int ep;                   /* parallel.ep: expert-parallel degree (1: every rank holds every expert; > 1: btp, divides dp and the experts) */
    int pp_stages[MAX_LAYERS];   /* parallel.stages: layers per pipeline stage; pp_nstages 0: balanced by cost (gen/pp.c) */
    int pp_nstages;
    int pp_virtual;           /* parallel.virtual_stages: layer chunks per pipeline rank (interleaved 1F1B when > 1) */
    int64_t dp_bucket_bytes;  /* gradient bytes per dp all-reduce bucket (gen/dp.c) */
    int zero;                 /* ZeRO stage 0, 1 or 2 (2: gradients sharded too) */
    int dp_bf16;              /* 1: the dp gradient reduction carries bf16 (parallel.dp_dtype) */
    int layout;               /* enum Layout */
    int micro_batch, seq, grad_accum;
    int dtype;                /* enum DType of activations and weights on the GPU */
    int online_rmsnorm;       /* 1: online (stats ride in the next all-reduce); 0: sync */
    int group_linears;        /* 1: concatenated A's, batched/grouped B's */
    int checkpoint;           /* enum Checkpoint */
    /* training */
    int steps, warmup;
    double lr, min_lr, beta1, beta2, adam_eps, weight_decay, clip;
    int decay_embeddings;     /* weight decay on embedding and LM head too */
    uint64_t seed;
    int eval_every;           /* validation loss every N steps (0: only at the end) */
    int max_bad_steps;        /* skipped (non-finite) updates in a row that stop the run (0: not set, 5) */
    int spike_window;         /* loss-spike window in steps (0: off) */
    double spike_z;           /* z-score above which a loss or gradient norm is a spike */
    int spike_rollback_after;    /* spikes in a row that roll back */
    int spike_max_rollbacks;     /* rollbacks allowed */
    char data[PATH_LEN];      /* "" | "corpus" | a path to a .bin token file or a .txt file */
    double val_fraction;
    char tokenizer[PATH_LEN]; /* "" or a Hugging Face tokenizer.json the text is tokenized with */
    uint32_t tokenizer_crc;   /* CRC-32C of that file's bytes when the spec was read */
    int nsources;             /* a mixture (data.sources): its sources; 0: one source, data above */
    char source_path[DATA_MAX_SOURCES][PATH_LEN];   /* each source's file or glob */
    double source_weight[DATA_MAX_SOURCES];        /* its weight as written (> 0, not normalised) */
} Run;

/* One -D name=value override from the command line. */
typedef struct { const char *name; const char *value; } Override;

const char *layout_name(int layout);
const char *proj_name(int proj);
/* Full (unsharded) input and output widths of projection p (enum Proj). */
int64_t proj_in(const Model *m, int p);
int64_t proj_out(const Model *m, int p);

#endif
