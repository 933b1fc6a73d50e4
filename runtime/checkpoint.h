/* checkpoint.h: training checkpoints on disk, one folder per saved step (DIR/step-000006/):
 * model.safetensors (every canonical parameter, F32, full shape, canon names), optimizer.safetensors
 * (AdamW moments as "m.NAME" and "v.NAME") and state.json (step, data position, seed, model name,
 * fingerprint of the canon names and shapes, tp, losses). Saving is atomic: a temporary folder,
 * fsync of every file and of the folders, then a rename. This file knows nothing of the Engine:
 * the caller supplies the tensors through a fill callback (runtime/train.c does that). */
#ifndef BOOST_CHECKPOINT_H
#define BOOST_CHECKPOINT_H

#include <stdint.h>
#include <stddef.h>
#include "runtime/safetensors.h"   // defines: StEntry, StFile

#define CKPT_FORMAT "boost-checkpoint"
#define CKPT_VERSION 1

typedef struct {
    int64_t step;             /* optimizer steps completed */
    int64_t data_position;    /* training micro-batches consumed (of micro_batch windows, all dp ranks together) */
    int64_t data_sequences;   /* training windows consumed by all dp ranks together (the batcher's
                               * position; the same at any dp); -1 read from a checkpoint without it */
    uint64_t seed;            /* the run's seed (data order and init) */
    char model[96], run[96], layout[16], backend[16];
    uint64_t fingerprint;     /* ckpt_fingerprint of the model's canons */
    int ncanons;
    int tp;                   /* tensor-parallel degree it was saved at */
    float *losses; int nlosses;            /* training loss of steps 1..nlosses */
    float *val_losses; int64_t *val_steps; int nval;   /* validation losses and their steps */
} CkptState;

/* What gets saved: slot 0 = parameters, 1 = AdamW m, 2 = AdamW v, of canon i. */
typedef int (*CkptFillFn)(void *ctx, int slot, int canon, float *out);

/* FNV-1a 64 over "name rows cols\n" of the canons sorted by name: the same for every layout and
 * tp degree of one model, different when any name or shape differs. */
uint64_t ckpt_fingerprint(const StEntry *canons, int n);

/* Folder name of a step: OUTDIR/step-000006. */
void ckpt_step_dir(const char *outdir, int64_t step, char *out, size_t outlen);

/* Save a checkpoint of step st->step under outdir (created if absent). An existing folder for the
 * same step is replaced only once the new one is complete. On any failure the temporary folder is
 * removed, every existing checkpoint is left as it was, and err says what failed.
 * Returns 0 or 1; the final folder in saved_dir. */
int ckpt_save(const char *outdir, const CkptState *st, const StEntry *canons, int n,
              CkptFillFn fill, void *ctx, char *saved_dir, size_t saved_len, char *err, size_t errlen);

/* Resolve a --resume argument: a step folder (has state.json), or a run's output folder, whose
 * highest step-NNNNNN folder is taken. Returns 0, or 2 with a message. */
int ckpt_resolve(const char *arg, char *dir, size_t dirlen, char *err, size_t errlen);

/* Read DIR/state.json. Returns 0, or 2 with "DIR/state.json: what is wrong". */
int ckpt_read_state(const char *dir, CkptState *st, char *err, size_t errlen);
void ckpt_state_free(CkptState *st);

/* Open DIR/model.safetensors and DIR/optimizer.safetensors and check that they hold every canon
 * (and both moments of it) as F32 with the canon's shape. Returns 0, or 2 with a message. */
int ckpt_open_tensors(const char *dir, const StEntry *canons, int n, StFile *model, StFile *optim,
                      char *err, size_t errlen);

/* Remove a folder and everything in it (used for temporary folders). */
int ckpt_remove_tree(const char *path);

#endif
