/* log.h: the training run's output (runtime/log.c): progress lines on the terminal or every N
 * steps, the JSON-lines --log file, TensorBoard scalars, and the number formats they use. */
#ifndef BOOST_LOG_H
#define BOOST_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *json;               /* --log file or NULL */
    int tty;                  /* stdout is a terminal: one updating line */
    int print_every;
    int quiet;
    int line_open;            /* a progress line without its newline is on the terminal */
    int steps;                /* total steps, for "step 12/200" and the ETA */
    double last_val;          /* the latest validation loss on progress lines (-1: none yet) */
    const char *json_path;    /* the --log file's name, for messages */
    char error[600];          /* the first failed write of the log (a full disk), or "" */
    const char *extra;        /* more JSON fields for the next step's line (",\"key\":value..."),
                                 e.g. MoE routing (runtime/moe_stats.h); NULL or "": none */
    struct TbEvents *tb;      /* TensorBoard event file (runtime/tbevents.h) or NULL */
} TrainLog;

/* One optimizer step's numbers; val_loss < 0 when not measured at this step. */
typedef struct {
    int step;                 /* steps done (1-based) */
    double loss, val_loss, lr, grad_norm, tokens_per_s, eta_s;
    double avg_tokens_per_s;  /* since the start of this process: the steadier figure to show */
    int skipped;              /* 1: this step's update was skipped (non-finite loss or grad norm) */
    int64_t skipped_total;    /* skipped updates of the run so far (with the resumed
                               * checkpoint's) */
    int spike;                /* 1: skipped as a loss spike (loss or norm above its limit) */
} StepReport;

/* resume_step >= 0: a resumed run appends to an existing log, first dropping its lines of steps
 * after resume_step (a killed run logged steps that the resumed one repeats). -1: a fresh log. */
int trainlog_open(TrainLog *lg, const char *json_path, int resume_step, int steps, int print_every,
                  int quiet, char *err, size_t errlen);
void trainlog_step(TrainLog *lg, const StepReport *r);
void trainlog_initial_val(TrainLog *lg, double val_loss);   /* the step-0 validation loss */
/* A message line that must not be mixed into an open progress line (to stdout). */
void trainlog_note(TrainLog *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Flush and close the log: 0, or -1 when a write of the log failed (lg->error says which file and
 * why; trainlog_step and trainlog_initial_val record a failed write there too, for the caller to
 * check). */
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
