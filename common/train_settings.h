/* train_settings.h: the one table of training settings (name, bounds, default, help) that both the
 * spec loader (gen/spec.c: train = {...}, data = {...} and -D) and the runtime (runtime/plan.c's
 * train/data lines, `boost train --plan PLAN -D key=value`) check and default by. A setting is
 * added here, as one row, and both paths take it. */
#ifndef BOOST_TRAIN_SETTINGS_H
#define BOOST_TRAIN_SETTINGS_H

#include <stddef.h>

#define TRAIN_SETTING_BIG 1e9

/* X(name, integer, lo, hi, open_lo, default, help): integer 1 for whole numbers; the value must lie
 * in [lo, hi] ((lo, hi] when open_lo); default as text, NULL for min_lr (lr/10). The `train` table
 * of a spec and the plan's `train` line: */
#define TRAIN_SETTING_ROWS(X) \
    X(lr, 0, 0, 10, 1, "3e-4", "peak learning rate") \
    X(min_lr, 0, 0, 10, 0, NULL, "final learning rate of the cosine decay (default lr/10)") \
    X(warmup, 1, 0, TRAIN_SETTING_BIG, 0, "100", "linear warmup steps") \
    X(steps, 1, 1, TRAIN_SETTING_BIG, 0, "1000", "optimizer steps") \
    X(beta1, 0, 0, 0.999999, 0, "0.9", "AdamW beta1, in [0, 1)") \
    X(beta2, 0, 0, 0.999999999, 0, "0.95", "AdamW beta2, in [0, 1)") \
    X(adam_eps, 0, 0, 1, 1, "1e-8", "AdamW epsilon") \
    X(weight_decay, 0, 0, 10, 0, "0.1", "AdamW weight decay") \
    X(clip, 0, 0, 1e9, 0, "1.0", "gradient-norm clip (0: off)") \
    X(eval_every, 1, 0, TRAIN_SETTING_BIG, 0, "50", "validation every N steps (0: at the end only)") \
    X(max_bad_steps, 1, 1, 1000000, 0, "5", \
      "a step with a non-finite loss or gradient norm is skipped; this many in a row stop the run") \
    X(spike_window, 1, 0, 100000, 0, "0", \
      "loss spikes: steps in the running window of good steps (0: spike detection off)") \
    X(spike_z, 0, 0, 1e6, 1, "6", \
      "a step whose loss or gradient norm lies this many standard deviations above the " \
      "window's mean is skipped") \
    X(spike_rollback_after, 1, 0, 1000000, 0, "3", \
      "this many spike steps in a row roll back to the last good checkpoint (0: never)") \
    X(spike_max_rollbacks, 1, 0, 1000000, 0, "2", \
      "rollbacks after which further spikes stop the run")
/* Sources of one data mixture at most (a spec's data.sources, the plan's `source` lines). */
#define DATA_MAX_SOURCES 16

/* the `data` table of a spec and the plan's `data` line: */
#define DATA_SETTING_ROWS(X) \
    X(val_fraction, 0, 0, 0.9, 0, "0.1", "share of the data held out for validation")

typedef struct {
    const char *name;
    int integer;              /* 1: a whole number */
    double lo, hi;
    int open_lo;              /* 1: lo itself is refused */
    const char *dflt;         /* the default as text; NULL: derived (min_lr = lr/10) */
    const char *help;
    int data;                 /* 1: a `data` setting (val_fraction), 0: a `train` one */
} TrainSetting;

/* Every row above, then a row with name NULL. */
extern const TrainSetting TRAIN_SETTINGS[];

/* The row of name, or NULL. */
const TrainSetting *train_setting(const char *name);
/* "an integer from 1 to 1000000", "a number > 0 and <= 10": what a value must be. */
void train_setting_bounds(int integer, double lo, double hi, int open_lo, char *buf, size_t n);
/* Whether v is a value the row accepts (finite, whole if integer, within the bounds). */
int train_setting_ok(const TrainSetting *s, double v);
/* text as the row's value: 0 with *out, or 2 with msg "NAME must be ..., got TEXT". */
int train_setting_parse(const TrainSetting *s, const char *text, double *out, char *msg, size_t n);
/* The default of the row (min_lr: lr / 10). */
double train_setting_default(const TrainSetting *s, double lr);
/* "lr, min_lr, warmup, ...": every name, for messages. */
void train_setting_names(char *buf, size_t n);

#endif
