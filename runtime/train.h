/* train.h: the training loop behind `boost train` (runtime/train.c); its progress/log output is
 * runtime/log.h. The loop starts from a loaded plan (cli/train.c turns a run spec into one) and
 * uses only the Engine API (runtime/runtime.h), the data batcher (runtime/data.h) and checkpoints
 * (runtime/checkpoint.h). */
#ifndef BOOST_TRAIN_H
#define BOOST_TRAIN_H

#include <stdint.h>
#include <stdio.h>
#include "runtime/plan.h"
#include "runtime/log.h"   // defines: TrainLog, StepReport, trainlog_*, format_*

#define TRAIN_MAX_OVERRIDES 64

/* One -D name=value (the same shape as gen/model.h's Override, kept apart so runtime/ does not
 * include the generator's headers). */
typedef struct { const char *name; const char *value; } TrainOverride;

typedef struct {
    const char *backend;      /* "cpu" | "cuda" | "auto" */
    const char *log_path;     /* JSON lines, or NULL */
    const char *tensorboard;  /* --tensorboard: a folder for TensorBoard event files, or NULL */
    const char *outdir;       /* -o: checkpoints (and the generated plan) go here, or NULL */
    const char *resume;       /* --resume: a step folder, a run's output folder, "auto" (outdir's newest
                                 verified checkpoint, or a fresh start when it has none), or NULL */
    int save_every;           /* checkpoint every N steps (and at the end) when outdir is set */
    int keep;                 /* --keep N: after each save keep the newest N complete checkpoints (0: all) */
    int print_every;          /* without a terminal: a progress line every N steps (0: about 20 lines) */
    int val_batches;          /* validation micro-batches per evaluation (0: 8) */
    int quiet;                /* no progress lines (errors and the summary only) */
    int ckpt_format;          /* --ckpt-format: 0 the default (sharded when several processes run, else full),
                               * 1 full, 2 sharded (runtime/checkpoint.h) */
    double straggler_factor;  /* --straggler-factor: name a rank whose time outside collective
                               * waits is above this times the median (0: the default 1.5;
                               * < 0: off) */
    int ckpt_async;           /* --ckpt-async: snapshot to host memory at the step boundary, write
                               * and publish on a background thread while training goes on
                               * (runtime/ckpt_async.h) */
} TrainOptions;

/* Train with a loaded plan: data, engine, init or resume, the loop, validation, checkpoints.
 * Returns the exit status: 0, 1 (a failure while running: I/O, device, max_bad_steps non-finite
 * steps in a row or a non-finite validation loss), 2 (bad input, a damaged checkpoint). */
int train_with_plan(Plan *plan, const TrainOptions *opt);
/* The same for a pipeline plan (pp > 1, runtime/pipeline.h), opened by the caller; -D overrides
 * applied to stage 0's plan carry over to the other stages. */
struct Pipeline;
int train_with_pipeline(struct Pipeline *pl, const TrainOptions *opt);

/* Apply -D overrides of training settings to a loaded plan (with --plan: the model and the layout
 * are fixed in the plan, the training settings are not). Returns 0, or 2 with a message. */
int train_apply_overrides(Plan *plan, const TrainOverride *ov, int nov, char *err, size_t errlen);

#endif
