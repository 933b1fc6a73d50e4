/* train.h: the training loop behind `boost train` (runtime/train.c) and its progress/log output
 * (runtime/log.c). The loop starts from a loaded plan (cli/train.c turns a run spec into one) and
 * uses only the Engine API (runtime/runtime.h), the data batcher (runtime/data.h) and checkpoints
 * (runtime/checkpoint.h). */
#ifndef BOOST_TRAIN_H
#define BOOST_TRAIN_H

#include <stdint.h>
#include <stdio.h>
#include "runtime/plan.h"

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

/* ---- runtime/log.c: progress lines and the JSON-lines log ---- */
typedef struct {
    FILE *json;               /* --log file or NULL */
    int tty;                  /* stdout is a terminal: one updating line */
    int print_every;
    int quiet;
    int line_open;            /* a progress line without its newline is on the terminal */
    int steps;                /* total steps, for "step 12/200" and the ETA */
    double last_val;          /* the latest validation loss, shown on progress lines (-1: none yet) */
    const char *json_path;    /* the --log file's name, for messages */
    char error[600];          /* the first failed write of the log (a full disk), or "" */
    const char *extra;        /* more JSON fields for the next step's line (",\"key\":value..."), e.g. MoE
                                 routing (runtime/moe_stats.h); NULL or "": none */
    struct TbEvents *tb;      /* TensorBoard event file (runtime/tbevents.h) or NULL */
} TrainLog;

/* One optimizer step's numbers; val_loss < 0 when not measured at this step. */
typedef struct {
    int step;                 /* steps done (1-based) */
    double loss, val_loss, lr, grad_norm, tokens_per_s, eta_s;
    double avg_tokens_per_s;  /* since the start of this process: the steadier figure to show */
    int skipped;              /* 1: the update of this step was skipped (non-finite loss or gradient norm) */
    int64_t skipped_total;    /* skipped updates of the whole run so far (with the resumed checkpoint's) */
    int spike;                /* 1: skipped as a loss spike (loss or norm above its limit) */
} StepReport;

/* resume_step >= 0: a resumed run appends to an existing log, first dropping its lines of steps
 * after resume_step (a killed run logged steps that the resumed one repeats). -1: a fresh log. */
int trainlog_open(TrainLog *lg, const char *json_path, int resume_step, int steps, int print_every, int quiet,
                  char *err, size_t errlen);
void trainlog_step(TrainLog *lg, const StepReport *r);
void trainlog_initial_val(TrainLog *lg, double val_loss);   /* the step-0 validation loss */
/* A message line that must not be mixed into an open progress line (to stdout). */
void trainlog_note(TrainLog *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Flush and close the log: 0, or -1 when a write of the log failed (lg->error says which file and why;
 * trainlog_step and trainlog_initial_val record a failed write there too, for the caller to check). */
int trainlog_close(TrainLog *lg);
/* Also write each step's numbers (and the MoE fields of `extra`) as TensorBoard scalars into a new
 * event file in dir. Returns 0, or 1 with a message. */
int trainlog_tensorboard(TrainLog *lg, const char *dir, char *err, size_t errlen);

/* "3.1k", "12.4M" ... */
void format_count(double v, char *out, size_t outlen);
/* "45s", "1m02s", "2h05m" */
void format_duration(double seconds, char *out, size_t outlen);
/* "512 B", "12.3 KiB", "4.0 MiB", "1.50 GiB" */
void format_bytes(double bytes, char *out, size_t outlen);

#endif
