/* checkpoint.h: training checkpoints on disk, one folder per saved step (DIR/step-000006/):
 * model.safetensors (every canonical parameter, F32, full shape, canon names), optimizer.safetensors
 * (AdamW moments as "m.NAME" and "v.NAME") and state.json (step, data position, seed, model name,
 * fingerprint of the canon names and shapes, tp, losses, and "files": a map from each file of the
 * folder to its size and CRC-32C). Saving is atomic: a temporary folder, fsync of every file and of
 * the folders, then a rename. Verification recomputes every recorded file's CRC-32C; retention
 * (--keep) removes the oldest complete folders. A sharded folder (ckpt_save_sharded, below) holds
 * one file per rank of the slices it owns plus index.json instead of the two tensor files;
 * ckpt_reader reads either (docs/checkpoints.md). This file knows nothing of the Engine: the caller
 * supplies the tensors through fill callbacks (runtime/train.c does that). */
#ifndef BOOST_CHECKPOINT_H
#define BOOST_CHECKPOINT_H

#include <stdint.h>
#include <stddef.h>
#include "runtime/safetensors.h"   // defines: StEntry, StFile
#include "runtime/plan.h"          // defines: Plan (sharded checkpoints: who owns which slice)

#define CKPT_FORMAT "boost-checkpoint"
#define CKPT_VERSION 1

/* One file of a checkpoint folder as state.json records it ("files": {"NAME": {"bytes": N,
 * "crc32c": "0x1234abcd"}, ...}). CRC-32C: a hardware instruction on x86-64 (common/crc32c.h),
 * so checking costs about what reading the file costs; it catches every burst error up to 32 bits
 * and other damage with probability 1 - 2^-32. Not a defence against deliberate tampering. */
typedef struct { char name[128]; int64_t bytes; uint32_t crc32c; } CkptFile;

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
    int64_t skipped;          /* updates skipped in steps 1..step (non-finite loss or gradient norm) */
    int has_tokenizer;        /* the run's text went through a tokenizer.json (its copy lies in the
                               * run's folder): "tokenizer_crc32c" holds that file's CRC-32C */
    uint32_t tokenizer_crc;
    int nsources;             /* a data mixture: its sources (0: one source) */
    int64_t data_taken[DATA_MAX_SOURCES];   /* sequences each source gave before data_sequences */
    CkptFile *files; int nfiles;   /* read: the "files" record (none in folders saved before it existed) */
    int sharded;              /* "storage": "sharded" (rank files + index.json) or "full" (absent: full) */
    int state_checked; /* read: state.json carried its own checksum ("state_crc32c"), matching */
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

/* Resolve a --resume argument: a step folder (has state.json), taken as it is (ckpt_verify is the
 * caller's next step), or a run's output folder, whose newest step-NNNNNN folder that verifies is
 * taken; each newer one passed over is named with its fault in notes (one line each, "" if none).
 * Returns 0, or 2 with a message (no step folders, or none of them verifies). */
int ckpt_resolve(const char *arg, char *dir, size_t dirlen, char *notes, size_t noteslen, char *err, size_t errlen);

/* What a reader of a checkpoint needs of it: everything (resuming training: the weights and the
 * AdamW moments), or the weights alone (eval, sample, export: a full checkpoint's
 * optimizer.safetensors is neither read nor checked, and may be absent; a sharded folder's rank
 * files hold both, so all of them are checked either way). */
enum { CKPT_NEED_ALL = 0, CKPT_NEED_WEIGHTS = 1 };
/* ckpt_resolve for what `need` reads: a run folder's newest step folder that verifies for it. */
int ckpt_resolve_for(const char *arg, int need, char *dir, size_t dirlen, char *notes,
                     size_t noteslen, char *err, size_t errlen);

/* Step folders under outdir (names step-NNNNNN exactly), newest (highest step) first, in *steps
 * (malloc'ed, free it). Returns their count; 0 when none or outdir cannot be read. */
int ckpt_list(const char *outdir, int64_t **steps);

enum { CKPT_VERIFIED = 0, CKPT_DAMAGED = 2, CKPT_UNCHECKED = 3 };
/* Check a step folder: state.json readable and matching its own checksum ("state_crc32c", its last
 * field), every file its "files" record names present with the recorded size and CRC-32C (read in
 * full), no file in the folder that the record leaves out, the run's plan (../plan/plan.txt, when
 * there) loading with every check of plan_load and describing the same model (fingerprint), and
 * the tensors of the model state.json describes
 * (count and fingerprint of the parameters' names and shapes; each moment of its parameter's
 * shape); a sharded folder's index.json fits its files and covers every tensor (ckpt_reader_open).
 * CKPT_VERIFIED; CKPT_UNCHECKED (state.json has no "files" record or no checksum of its own: saved
 * before those existed); or CKPT_DAMAGED with "DIR/FILE: what is wrong" in err. */
int ckpt_verify(const char *dir, char *err, size_t errlen);
/* ckpt_verify of what `need` (CKPT_NEED_*) reads. */
int ckpt_verify_for(const char *dir, int need, char *err, size_t errlen);

/* The newest step folder of outdir below step `below` (INT64_MAX: any) that ckpt_verify accepts
 * (VERIFIED or UNCHECKED), in dir. Returns 0, or 1 when there is none. */
int ckpt_newest_verified(const char *outdir, int64_t below, char *dir, size_t dirlen);

/* ckpt_verify, and on damage the advice to go with it: err then ends with "; the newest earlier
 * checkpoint that verifies is OUT/step-000020 (resume with --resume OUT/step-000020)" or with
 * "; no earlier checkpoint in OUT verifies". Same return values as ckpt_verify. */
int ckpt_verify_advise(const char *dir, char *err, size_t errlen);
int ckpt_verify_advise_for(const char *dir, int need, char *err, size_t errlen);

/* A step folder is complete when its state.json parses and every recorded file is there with its
 * recorded size (no checksums read: cheap). 1 or 0. */
int ckpt_complete(const char *dir);

/* Retention: keep the checkpoint of step `saved` (just written), the one of step `protect` (the last
 * known good one; -1: none) and the newest other complete step folders of outdir up to keep in all;
 * remove the other complete ones (each moved to a hidden name first, so a crash never leaves a
 * half-removed step folder). Incomplete folders and temporary ones (hidden names, such as a save
 * under way) are left alone. keep < 1 keeps everything. The removed folders are listed in removed
 * ("step-000010 step-000020", "" if none). Returns how many were removed. */
int ckpt_prune(const char *outdir, int keep, int64_t saved, int64_t protect, char *removed, size_t removedlen);

/* Read DIR/state.json. Returns 0, or 2 with "DIR/state.json: what is wrong". */
int ckpt_read_state(const char *dir, CkptState *st, char *err, size_t errlen);
void ckpt_state_free(CkptState *st);

/* Open DIR/model.safetensors and DIR/optimizer.safetensors and check that they hold every canon
 * (and both moments of it) as F32 with the canon's shape. Returns 0, or 2 with a message. */
int ckpt_open_tensors(const char *dir, const StEntry *canons, int n, StFile *model, StFile *optim,
                      char *err, size_t errlen);

/* Remove a folder and everything in it (used for temporary folders). */
int ckpt_remove_tree(const char *path);

/* ---- sharded checkpoints ----
 * A sharded step folder holds rank-RRRRR.safetensors (one per grid rank that owns something: its tp
 * blocks of every parameter, written by dp rank 0's tp group; with zero=1 each dp rank's shard of the
 * parameters and of the AdamW moments (the fp32 masters of a shard may exist on its dp rank only);
 * blocks every tp rank holds (rep=1) by tp rank 0 only), index.json (every tensor ->
 * its slices: file, key in that file, rows and cols of the canonical tensor) and state.json with
 * "storage": "sharded" and the CRC-32C of every file. Tensors in a rank file are named
 * "NAME[r0:r1,c0:c1]" ("m.NAME[..]", "v.NAME[..]" for the moments), shape [r1-r0, c1-c0], F32.
 * With pp > 1 every (stage, dp, tp) rank writes the blocks of its stage(s) only. */
#define CKPT_INDEX "index.json"
#define CKPT_INDEX_FORMAT "boost-checkpoint-index"

typedef struct {
    int canon, slot;          /* slot 0 parameters, 1 AdamW m, 2 AdamW v */
    int64_t r0, r1, c0, c1;   /* the block [r0, r1) x [c0, c1) of the canonical tensor */
    int rank;                 /* the grid rank that writes it */
    int param;                /* that rank's local param (index into Plan.params) holding the block */
    int64_t lr, lc;           /* the block's first row and column in that local param */
    int stage;                /* pp > 1: the pipeline stage whose plan `param` indexes (0 otherwise) */
} CkptSlice;

/* The slices each grid rank of plan p owns (see above); every element of every canon and moment is
 * in exactly one slice. *out is malloc'ed (free it). Returns the count, -1 when out of memory. */
int ckpt_plan_slices(const Plan *p, CkptSlice **out);
/* The same over a pipeline's stages (pp > 1): stage s's plan (a dp x tp grid, pp=1) runs on pipeline
 * rank s % pp, whose grid ranks are (s % pp)*dp*tp + d*tp + t (runtime/grid.h), so a rank file holds
 * the blocks of every stage of its pipeline rank (interleaved: several). Stage s's canon c is canon
 * (ncanons of stages 0..s-1) + c of the checkpoint (the pipeline's canon order, runtime/pipeline.h). */
int ckpt_pipeline_slices(Plan *const *stages, int nstages, int pp, CkptSlice **out);

/* Fill a slice's (r1-r0)*(c1-c0) floats, row-major; 0, or non-zero to abort (2: not finite). */
typedef int (*CkptSliceFn)(void *ctx, const CkptSlice *s, float *out);
/* Sum n doubles over the processes of the run, every process getting the sum (a barrier). 0 or -1. */
typedef int (*CkptSumFn)(void *ctx, double *vals, int n);

typedef struct {
    const CkptSlice *slices; int nslices;   /* ckpt_plan_slices: all ranks' (the index lists them all) */
    int world;                /* grid ranks */
    int first, count;         /* the grid ranks whose files this process writes */
    int nprocs, proc;         /* processes of the run, this one's index (0 writes the index and publishes) */
    int dp, tp, zero;         /* recorded in index.json */
    CkptSliceFn fill;
    CkptSumFn sum;            /* needed when nprocs > 1 */
    void *ctx;
    int64_t *rank_bytes;      /* optional out [world]: bytes of each rank's file (0: it owns nothing) */
    int pp;                   /* pipeline ranks (0 or 1: none); pp > 1 adds "pp" to the index's grid and
                               * each tensor's "stage" (world = dp x pp x tp) */
} CkptShards;

/* Save step st->step as a sharded folder: each process writes its ranks' files into the temporary
 * folder OUTDIR/.step-NNNNNN.tmp-PID (PID of process 0, handed to the others by sh->sum), then a
 * barrier that also brings every file's size and CRC-32C to process 0, which writes index.json and
 * state.json and publishes with one rename; a last barrier tells every process the outcome. A
 * failure anywhere removes the temporary folder; earlier checkpoints are untouched. BOOST_TEST_CKPT_
 * SLEEP_MS=N (tests) sleeps N ms after each rank file, so a test can kill a save part way. 0 or 1. */
int ckpt_save_sharded(const char *outdir, const CkptState *st, const StEntry *canons, int n, const CkptShards *sh,
                      char *saved_dir, size_t saved_len, char *err, size_t errlen);

/* Reading canonical tensors from a step folder of either storage. Tensors are params (slot 0) and
 * AdamW moments (slot 1 "m.NAME", 2 "v.NAME"); reads go straight to the bytes needed (pread), so a
 * rank resuming a sharded checkpoint reads only the slices overlapping what it holds. */
typedef struct CkptReader CkptReader;
typedef struct { int64_t r0, r1, c0, c1; } CkptRegion;

/* Open DIR's tensors: full (model.safetensors, optimizer.safetensors) or sharded (index.json; every
 * file it names opened and its header checked: each slice's key present, F32, of the slice's shape,
 * inside the file; the slices of a tensor cover it exactly once). With canons (n of them), every
 * canon and both its moments must be there with the canon's shape. 0, or 2 with a message naming the
 * file at fault. */
int ckpt_reader_open(const char *dir, const StEntry *canons, int n, CkptReader **out, char *err, size_t errlen);
/* The same for the weights alone (CKPT_NEED_WEIGHTS): a full checkpoint's AdamW moments are not
 * opened (slot 0 only). */
int ckpt_reader_open_weights(const char *dir, CkptReader **out, char *err, size_t errlen);
void ckpt_reader_close(CkptReader *r);
int ckpt_reader_sharded(const CkptReader *r);
int ckpt_reader_count(const CkptReader *r);
/* Tensor i's name (as in a full checkpoint: "NAME", "m.NAME", "v.NAME"), slot and shape. */
const char *ckpt_reader_tensor(const CkptReader *r, int i, int *slot, int64_t *rows, int64_t *cols);
/* Index of the tensor of canon `name` in `slot`, -1 when absent. */
int ckpt_reader_find(const CkptReader *r, const char *name, int slot);
/* Read tensor i into out (rows*cols floats, row-major): only the elements inside the nneed regions
 * (need NULL: all of it); the other elements of out are left as they are. 0, or 2 with a message. */
int ckpt_reader_read(CkptReader *r, int i, const CkptRegion *need, int nneed, float *out, char *err, size_t errlen);
/* The reader's tensors against the model st (state.json) describes: the parameters' count and the
 * fingerprint of their names and whole shapes, each AdamW moment of its parameter's shape. 0, or 2
 * with a message naming the file. */
int ckpt_reader_check_model(const CkptReader *r, const CkptState *st, char *err, size_t errlen);
/* Tensor bytes read so far, and the tensor bytes the folder holds. */
int64_t ckpt_reader_bytes_read(const CkptReader *r);
int64_t ckpt_reader_bytes_total(const CkptReader *r);

#endif
