/* infer.h: what `boost eval`, `boost sample` and `boost export` share: open a checkpoint, find the
 * plan of its model (the training run's DIR/plan/plan.txt, or the run spec regenerated with -D
 * overrides), check that the checkpoint belongs to that model, and run forward passes that return
 * full [micro_batch*seq, vocab] logits (gathered over the tp ranks' vocab slices). */
#ifndef BOOST_CLI_INFER_H
#define BOOST_CLI_INFER_H

#include <stdint.h>
#include <stddef.h>
#include "runtime/plan.h"
#include "runtime/runtime.h"
#include "runtime/checkpoint.h"
#include "runtime/decode.h"

#define INFER_MAX_DEFS 64

typedef struct {
    const char *cmd;          /* "boost sample" ..., for messages */
    const char *ckpt;         /* a step folder, or a run's output folder (its newest step) */
    const char *run;          /* --run RUN, or NULL: the run named in the checkpoint's state.json */
    const char *defs[INFER_MAX_DEFS]; int ndefs;   /* -D name=value */
    int one_sequence;         /* regenerate with micro_batch=1, grad_accum=1 (sampling) */
    const char *backend;      /* cpu | cuda | auto */
    int decode;               /* load the decode step with a KV cache (infer.txt, gen/infer_plan.c) instead:
                                 always regenerated, max_seq = the training plan's seq */
} InferOptions;

typedef struct {
    Plan *plan;
    Engine *e;
    CkptState st;
    char dir[1200];           /* the resolved step folder */
    char plan_source[1300];   /* where the plan came from, for messages */
    char tmpdir[64];          /* a regenerated plan lives here (removed by infer_close) */
    const KernelArgs *xent;   /* the xent_fwd step: the logits buffer and each rank's vocab slice */
    int logits_tensor;
    float *local;             /* [logits buffer elems] */
    Plan *pre;                /* decode: the prefill step (prefill.txt), NULL when absent */
    Engine *pe;
    Decoder dec;              /* decode: prefill + steps over the KV cache (runtime/decode.h) */
} Infer;

/* Resolve the checkpoint, build or load the plan and check the fingerprint. No engine yet.
 * Returns 0, or 2 (bad input) / 1 (failure) with a message already printed to stderr. */
int infer_open_plan(const InferOptions *o, Infer *in);
/* Pin the logits buffer, create the engine and load the checkpoint's parameters. 0, 1 or 2. */
int infer_start_engine(const InferOptions *o, Infer *in);
/* One forward pass of micro_batch*seq tokens; logits [micro_batch*seq, vocab] when not NULL;
 * *loss = the mean cross-entropy against targets. Returns 0 or 1 (message printed). */
int infer_forward(Infer *in, const int32_t *tokens, const int32_t *targets, float *logits, float *loss);
void infer_close(Infer *in);
/* Decode plans: the KV cache's length (attention_decode's max_seq), 0 when the plan has none. */
int infer_max_seq(const Plan *p);
/* Decode plans: restart the cache with tokens tok[0..n-1] (prefill; n <= max_seq), logits [vocab] of
 * the last; then one token at the next position. 0 or 1 (message printed). */
int infer_prefill(Infer *in, const int32_t *tok, int n, float *logits);
int infer_decode_step(Infer *in, int32_t tok, float *logits);

/* Parse a whole number flag value in [lo, hi]; -1 with a message on stderr. */
int infer_int_arg(const char *cmd, const char *flag, const char *v, long lo, long hi, long *out);
int infer_num_arg(const char *cmd, const char *flag, const char *v, double *out);

#endif
