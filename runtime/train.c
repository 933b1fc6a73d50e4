/* train.c: the training loop. From a loaded plan: load and split the data, create the Engine,
 * initialise or resume from a checkpoint (any tp: canonical tensors built from the checkpoint's
 * full tensors or slices), then
 * per step grad_accum micro-batches, one AdamW step, validation every eval_every steps and at the
 * end, checkpoints every save_every steps and at the end (then --keep's retention). A step whose
 * loss or gradient norm is NaN/inf is skipped (no update; counted, logged); max_bad_steps of them
 * in a row stop the run (exit 1) without saving, naming the last good checkpoint (the newest one a
 * good step followed). A non-finite validation loss stops it at once. SIGINT/SIGTERM stop it after
 * the step under way with a checkpoint (exit 130/143); with several processes the stop is agreed
 * at each step boundary (a sum of the stop flag over the world), so all stop together.
 * Multi-process mode (one process per rank,
 * runtime/world.h): every rank of a tp group reads the same data, each process only its own dp
 * rank's slice of each global micro-batch (runtime/data.h), and takes part in every gather; only
 * rank 0 writes full checkpoints (cli/train.c keeps the other ranks' output quiet), while in a
 * sharded one (--ckpt-format sharded, the default with several processes) every rank writes its own
 * slices and rank 0 the index and the publishing rename (runtime/checkpoint.h). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/train.h"        // defines: TrainOptions, TrainLog, train_with_plan
#include "runtime/runtime.h"      // defines: Engine, engine_*
#include "runtime/data.h"         // defines: TokenSet, Batcher, data_open, batcher_init_set
#include "runtime/mixture.h"      // defines: batcher_global, batcher_val, mixture_*
#include "runtime/run_tokenizer.h"  // defines: run_data_open
#include "runtime/checkpoint.h"   // defines: CkptState, ckpt_*
#include "runtime/ckpt_async.h"   // defines: CkptAsync, ckpt_async_*
#include "runtime/world.h"        // defines: world_rank
#include "runtime/grid.h"         // defines: Grid, grid_make, grid_describe
#include "runtime/pipeline.h"     // defines: Pipeline, pipeline_*
#include "runtime/moe_stats.h"    // defines: MoeStats, moe_stats_*
#include "runtime/comm_mpi.h"     // defines: comm_mpi_agree_status
#include "common/train_settings.h"   // defines: train_setting, train_setting_parse
#include "common/env.h"              // defines: runtime_env
#include "common/test_hooks.h"       // defines: test_hook_spike_batches

typedef struct {
    Plan *plan;
    const TrainOptions *opt;
    Engine *e;
    Pipeline *pl;   /* pp > 1: the stages' engines (then e is NULL); owned by the caller */
    StEntry *canons;          /* [ncanons] names and full shapes, in plan order */
    int ncanons;
    int64_t largest;          /* elements of the largest canon */
    float *buf;               /* [largest] */
    Batcher batcher;
    /* [dp * micro_batch * seq] each: dp rank i's micro-batch at row i*micro_batch*seq */
    int32_t *inputs, *targets;
    /* training windows consumed by all dp ranks together (the batcher's position) */
    int64_t data_seq;
    int step;                 /* optimizer steps done */
    float *losses;            /* [plan->steps] training loss per step (index step-1) */
    float *val_losses; int64_t *val_steps; int nval, val_cap;
    int bad_canon;            /* a non-finite parameter found while saving, or -1 */
    /* updates skipped (non-finite loss or gradient norm), resumed ones included */
    int64_t skipped;
    char last_ckpt[1200];     /* the newest checkpoint saved (or resumed from) */
    int last_step;            /* its step */
    /* the newest checkpoint a good step (finite loss and gradient norm) followed, or "" */
    char good_ckpt[1200];
    int good_step;            /* its step, or -1 */
    /* multi-process mode, rank > 0: gathers for rank 0's checkpoints, writes nothing */
    int follower;
    /* multi-process mode: the one dp rank whose data this process reads; -1: all of them */
    int my_dp;
    int nprocs, proc;         /* processes of the run (1: ranks are threads) and this one's rank */
    CkptSlice *slices;
    int nslices;   /* sharded checkpoints: who writes which slice (ckpt_plan_slices) */
    float *local[3];
    /* per slot: the rank's local param last read (during a save) */
    int local_rank[3], local_param[3], local_stage[3];
    MoeStats moe;             /* MoE routing figures of the current step, for the log */
    double *win_loss, *win_norm;   /* [spike_window] rings: loss, norm of the latest good steps */
    int win_n, win_at;        /* values held (up to spike_window) and the next slot to write */
    int rollbacks;            /* rollbacks after spikes in this process */
    int64_t spikes;           /* steps skipped as spikes in this process */
    TokenSet mix_sets[DATA_MAX_SOURCES];   /* a data mixture: each source's tokens */
    int nmix_sets;
    double *busy;             /* [grid ranks] seconds outside collective waits since step
                               * busy_from + 1 */
    int busy_from;
    CkptAsync *pending;       /* --ckpt-async: the save being written, or NULL */
    struct CkptSnap *snap;    /* its snapshot (kept for the next save) */
} Trainer;
typedef struct CkptSnap CkptSnap;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "NaN", "inf" or the number, for messages about a diverged run. */
static const char *show(double v, char *buf, size_t n) {
    if (isnan(v)) return "NaN";
    if (isinf(v)) return v > 0 ? "inf" : "-inf";
    snprintf(buf, n, "%g", v);
    return buf;
}

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "boost train: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

int train_apply_overrides(Plan *p, const TrainOverride *ov, int nov, char *err, size_t errlen) {
    int set_min_lr = 0, set_lr = 0;
    for (int i = 0; i < nov; i++) {
        const char *k = ov[i].name, *v = ov[i].value;
        if (!strcmp(k, "data")) {   /* one source instead of the plan's data (or mixture) */
            snprintf(p->data_path, sizeof p->data_path, "%s", v);
            p->nsources = 0;
            continue;
        }
        const TrainSetting *s = train_setting(k);
        if (!s) {
            char names[400];
            train_setting_names(names, sizeof names);
            snprintf(err, errlen,
                     "-D %s: with --plan only training settings can change (%s, data); '%s' "
                     "is fixed in the plan: regenerate it with 'boost gen RUN -D %s=%s'",
                     k, names, k, k, v);
            return 2;
        }
        double x;
        char msg[300];
        if (train_setting_parse(s, v, &x, msg, sizeof msg)) {
            snprintf(err, errlen, "-D %s=%s: %s", k, v, msg);
            return 2;
        }
        plan_set_train_setting(p, k, x);
        set_min_lr |= !strcmp(k, "min_lr");
        set_lr |= !strcmp(k, "lr");
    }
    if (p->min_lr > p->lr) {   /* as the spec loader refuses it */
        snprintf(err, errlen, "min_lr (%g) must not exceed lr (%g)%s", p->min_lr, p->lr,
                 set_lr && !set_min_lr ? ": the plan's min_lr stays as written; give -D min_lr= too"
                                       : "");
        return 2;
    }
    return 0;
}

/* The Engine, or the pipeline of stage Engines (pp > 1): the same operations. */
static int t_get_canon(Trainer *t, int c, int slot, float *out) {
    return t->pl ? pipeline_get_canon(t->pl, c, slot, out) : engine_get_canon(t->e, c, slot, out);
}
static int t_set_canon(Trainer *t, int c, int slot, const float *in) {
    return t->pl ? pipeline_set_canon(t->pl, c, slot, in) : engine_set_canon(t->e, c, slot, in);
}
static int t_forward(Trainer *t, float *l, char *err, size_t n) {
    return t->pl ? pipeline_forward(t->pl, t->inputs, t->targets, l, err, n)
                 : engine_forward(t->e, t->inputs, t->targets, l, err, n);
}
static int t_discard(Trainer *t, char *err, size_t n) {
    return t->pl ? pipeline_discard_grads(t->pl, err, n) : engine_discard_grads(t->e, err, n);
}
static int t_optimizer(Trainer *t, float *norm, float *lr, char *err, size_t n) {
    return t->pl ? pipeline_optimizer_step(t->pl, t->step, norm, lr, err, n)
                 : engine_optimizer_step(t->e, t->step, norm, lr, err, n);
}
static const char *t_backend(Trainer *t) {
    if (!t->pl) return engine_backend_name(t->e);
    /* under mpirun a process holds its own stages only */
    for (int s = 0; s < pipeline_stages(t->pl); s++)
        if (pipeline_stage_engine(t->pl, s))
            return engine_backend_name(pipeline_stage_engine(t->pl, s));
    return "cpu";
}

/* ---- checkpoints ---- */

static int fill_from_engine(void *ctx, int slot, int canon, float *out) {
    Trainer *t = ctx;
    static const int slots[3] = {SLOT_PARAM, SLOT_ADAM_M, SLOT_ADAM_V};
    if (t_get_canon(t, canon, slots[slot], out) != 0) return 1;
    int64_t n = t->canons[canon].rows * t->canons[canon].cols;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(out[i])) { t->bad_canon = canon; return 2; }
    return 0;
}

/* A rank > 0 in multi-process mode: the same gathers as rank 0's ckpt_save, in its order (params,
 * then AdamW m, then v, canons in plan order), writing nothing. */
static int follow_checkpoint(Trainer *t) {
    for (int slot = 0; slot < 3; slot++)
        for (int c = 0; c < t->ncanons; c++) {
            int rc = fill_from_engine(t, slot, c, t->buf);
            if (rc == 2)
                return fail(1,
                            "checkpoint at step %d not saved: parameter %s "
                            "holds NaN or inf values (the training diverged)",
                            t->step, t->canons[c].name);
            if (rc)
                return fail(1, "checkpoint at step %d: gathering %s across the processes failed",
                            t->step, t->canons[c].name);
        }
    return 0;
}

/* Sharded checkpoints: the slice's block out of the local param of its rank (read once per rank,
 * param and slot). Parameters are checked to be finite (2 when not). pp > 1: the param is one of
 * stage s->stage's plan, held by that stage's Engine as its rank s->rank mod dp*tp. */
static int fill_slice(void *ctx, const CkptSlice *s, float *out) {
    Trainer *t = ctx;
    static const int slots[3] = {SLOT_PARAM, SLOT_ADAM_M, SLOT_ADAM_V};
    const Plan *sp = t->pl ? pipeline_stage_plan(t->pl, s->stage) : t->plan;
    Engine *e = t->pl ? pipeline_stage_engine(t->pl, s->stage) : t->e;
    int rank = t->pl ? s->rank % (sp->dp * sp->tp) : s->rank;
    const PlanParam *pp = &sp->params[s->param];
    float *local = t->local[s->slot];
    if (!e) return 1;
    if (!local) {
        int64_t most = 1;
        for (int k = 0; k < (t->pl ? pipeline_stages(t->pl) : 1); k++) {
            const Plan *q = t->pl ? pipeline_stage_plan(t->pl, k) : t->plan;
            for (int i = 0; i < q->nparams; i++)
                if (q->params[i].rows * q->params[i].cols > most)
                    most = q->params[i].rows * q->params[i].cols;
        }
        local = t->local[s->slot] = malloc((size_t)most * sizeof(float));
        if (!local) return 1;
        t->local_rank[s->slot] = -1;
    }
    if (t->local_rank[s->slot] != s->rank || t->local_param[s->slot] != s->param ||
        t->local_stage[s->slot] != s->stage) {
        char err[1024];
        t->local_rank[s->slot] = -1;
        if (engine_read_local(e, rank, s->param, slots[s->slot], local, err, sizeof err)) {
            fprintf(stderr, "boost train: %s\n", err);
            return 1;
        }
        t->local_rank[s->slot] = s->rank;
        t->local_param[s->slot] = s->param;
        t->local_stage[s->slot] = s->stage;
    }
    int64_t nr = s->r1 - s->r0, nc = s->c1 - s->c0;
    for (int64_t i = 0; i < nr; i++) {
        const float *src = local + (s->lr + i) * pp->cols + s->lc;
        memcpy(out + i * nc, src, (size_t)nc * sizeof(float));
        for (int64_t j = 0; s->slot == 0 && j < nc; j++)
            if (!isfinite(src[j])) { t->bad_canon = s->canon; return 2; }
    }
    return 0;
}

static int world_sum(void *ctx, double *vals, int n) {
    Trainer *t = ctx;
    return t->pl ? pipeline_world_sum(t->pl, vals, n) : engine_world_sum(t->e, vals, n);
}

/* Sharded: asked for, or the default with several processes (pipelined or not). */
static int use_sharded(const Trainer *t) {
    return t->opt->ckpt_format == 2 || (t->opt->ckpt_format == 0 && t->nprocs > 1);
}

/* A rank > 0 records the folder rank 0 publishes, as rank 0 does: a rollback after loss spikes
 * reads it on every rank. */
static int followed(Trainer *t, int rc) {
    if (rc) return rc;
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s/step-%06d", t->opt->outdir, t->step);
    t->last_step = t->step;
    return 0;
}

/* The record state.json gets for the step just done (losses, validation: the trainer's arrays). */
static void state_of_step(Trainer *t, CkptState *st) {
    const Plan *p = t->plan;
    memset(st, 0, sizeof *st);
    st->step = t->step;
    st->data_sequences = t->data_seq;
    st->data_position = t->data_seq / p->micro_batch;
    st->seed = p->seed;
    snprintf(st->model, sizeof st->model, "%s", p->model_name);
    snprintf(st->run, sizeof st->run, "%s", p->run_name);
    snprintf(st->layout, sizeof st->layout, "%s", p->layout);
    snprintf(st->backend, sizeof st->backend, "%s", t_backend(t));
    st->fingerprint = ckpt_fingerprint(t->canons, t->ncanons);
    st->ncanons = t->ncanons;
    st->tp = p->tp;
    st->losses = t->losses;
    st->nlosses = t->step;
    st->val_losses = t->val_losses;
    st->val_steps = t->val_steps;
    st->nval = t->nval;
    st->skipped = t->skipped;
    st->has_tokenizer = p->tokenizer_path[0] != 0;
    st->tokenizer_crc = p->tokenizer_crc;
    st->nsources = t->batcher.nsources;
    if (st->nsources) mixture_taken(&t->batcher, t->data_seq, st->data_taken);
}

/* Who writes which slice (planned once), and the sharded save's settings; bytes: [world] out. */
static int shards_of_run(Trainer *t, CkptShards *sh, int64_t **bytes) {
    const Plan *p = t->plan;
    int npp = t->pl ? pipeline_ranks(t->pl) : 1;
    if (!t->slices) {
        Plan *stages[64];
        int nst = t->pl ? pipeline_stages(t->pl) : 0;
        for (int k = 0; k < nst && k < 64; k++) stages[k] = pipeline_stage_plan(t->pl, k);
        t->nslices = t->pl ? ckpt_pipeline_slices(stages, nst, npp, &t->slices)
                           : ckpt_plan_slices(p, &t->slices);
        if (t->nslices < 0) return fail(1, "out of memory planning the checkpoint");
    }
    int world = p->dp * npp * p->tp;
    *bytes = calloc((size_t)world, sizeof **bytes);
    if (!*bytes) return fail(1, "out of memory");
    CkptShards s = {t->slices, t->nslices, world, t->nprocs > 1 ? t->proc : 0,
                    t->nprocs > 1 ? 1 : world, t->nprocs, t->proc, p->dp, p->tp,
                    p->zero && p->dp > 1, fill_slice, world_sum, t, *bytes, npp};
    *sh = s;
    return 0;
}

/* "; sharded, bytes per rank: 0:1353200 1:1351600" (this process's ranks). */
static void shard_note_of(const CkptShards *sh, char *note, size_t n) {
    size_t used = (size_t)snprintf(note, n, "; sharded, bytes per rank:");
    for (int g = sh->first; g < sh->first + sh->count && used < n - 40; g++)
        used += (size_t)snprintf(note + used, n - used, " %d:%lld", g,
                                 (long long)sh->rank_bytes[g]);
}

/* After a save of step `step` published as dir: the log line and --keep's retention (process 0). */
static void after_save(Trainer *t, TrainLog *lg, const char *dir, int64_t step, const char *how) {
    if (!t->opt->quiet || runtime_env()->verbose_any) trainlog_note(lg, "saved %s (%s)", dir, how);
    if (t->opt->keep > 0) {
        char removed[2048];
        // the last good checkpoint stays even when it is not among the newest keep
        int ours = t->good_step >= 0
                   && !strncmp(t->good_ckpt, t->opt->outdir, strlen(t->opt->outdir));
        int64_t protect = ours ? t->good_step : -1;
        int n = ckpt_prune(t->opt->outdir, t->opt->keep, step, protect, removed, sizeof removed);
        if (n > 0 && !t->opt->quiet)
            trainlog_note(lg, "removed %d old checkpoint%s (--keep %d): %s", n, n == 1 ? "" : "s",
                          t->opt->keep, removed);
    }
}

static int save_failed(Trainer *t, const char *saved, const char *err) {
    if (t->bad_canon >= 0)
        return fail(1, "%s: not saved: parameter %s holds NaN or inf values (the training "
                    "diverged); earlier checkpoints are untouched", saved,
                    t->canons[t->bad_canon].name);
    return fail(1, "%s", err);
}

static int save_async(Trainer *t, TrainLog *lg);
static int finish_async(Trainer *t, TrainLog *lg);

static int save_checkpoint(Trainer *t, TrainLog *lg) {
    if (t->pending && finish_async(t, lg)) return 1;   // the next save waits for the previous one
    if (t->opt->ckpt_async) return save_async(t, lg);
    if (t->follower && !use_sharded(t)) return followed(t, follow_checkpoint(t));
    CkptState st;
    state_of_step(t, &st);
    char err[4096], saved[1200], how[700];
    t->bad_canon = -1;
    double t0 = now_s();
    char shard_note[600] = "";
    if (use_sharded(t)) {
        CkptShards sh;
        int64_t *bytes;
        if (shards_of_run(t, &sh, &bytes)) return 1;
        int rc = ckpt_save_sharded(t->opt->outdir, &st, t->canons, t->ncanons, &sh, saved,
                                   sizeof saved, err, sizeof err);
        if (!rc) shard_note_of(&sh, shard_note, sizeof shard_note);   // what each rank wrote
        free(bytes);
        // not held between saves
        for (int k = 0; k < 3; k++) { free(t->local[k]); t->local[k] = NULL; }
        if (rc) return save_failed(t, saved, err);
        if (t->follower) {   // rank 0 keeps the records and the retention
            if (runtime_env()->verbose_any)
                fprintf(stderr, "boost train: rank %d wrote its part of %s%s\n", t->proc, saved,
                        shard_note);
            return followed(t, 0);
        }
    } else if (ckpt_save(t->opt->outdir, &st, t->canons, t->ncanons, fill_from_engine, t, saved,
                         sizeof saved, err, sizeof err))
        return save_failed(t, saved, err);
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", saved);
    t->last_step = t->step;
    snprintf(how, sizeof how, "%.2fs%s", now_s() - t0, shard_note);
    after_save(t, lg, saved, t->step, how);
    return 0;
}

/* ---- asynchronous checkpoints (--ckpt-async): at the step boundary the state goes into host
 * memory (a full save's gathered canons on process 0; a sharded save's slices of this process's
 * ranks), then a background thread writes and publishes it with the same code as a synchronous
 * save (runtime/ckpt_async.h). Its sums over the processes run on this thread: the first at once,
 * the others at the step boundaries where every process has posted it, or when a later save, a
 * stop, a rollback or the end waits for the save. ---- */

struct CkptSnap {
    Trainer *t;
    CkptState st;             /* its losses and validation records: the copies below */
    float *losses, *val_losses; int64_t *val_steps;
    int sharded;
    float *data; int64_t cap; /* the snapshot */
    int64_t *off;             /* full: [3 * ncanons] slot-major; sharded: [nslices] (-1: another
                               * process's slice) */
    int *status;              /* sharded: [nslices] the slice's fill status when it was taken */
    CkptShards sh; int64_t *bytes;
    CkptSumFn sum; void *sum_ctx;   /* the running job's posting sum */
    int bad_canon;            /* a slice with NaN or inf values met by the job, or -1 */
    char saved[1200], err[4096];
    double t0, done_at, lost; /* started, published (the job's clock), the loop's time on it */
    double copy_s;            /* of which taking the snapshot */
};

static int snap_grow(CkptSnap *s, int64_t n) {
    if (n <= s->cap) return 0;
    float *d = realloc(s->data, (size_t)n * sizeof(float));
    if (!d) return fail(1, "out of memory: the checkpoint's snapshot needs %lld bytes of host "
                        "memory (save without --ckpt-async)", (long long)n * 4);
    s->data = d;
    s->cap = n;
    return 0;
}

/* Full storage: process 0 gathers every canon into host memory; the others take part in the
 * gathers. */
static int snapshot_full(Trainer *t, CkptSnap *s) {
    if (t->follower) return follow_checkpoint(t);
    int64_t n = 0;
    free(s->off);
    s->off = malloc((size_t)(3 * t->ncanons + 1) * sizeof *s->off);
    if (!s->off) return fail(1, "out of memory");
    for (int k = 0; k < 3 * t->ncanons; k++) {
        s->off[k] = n;
        n += t->canons[k % t->ncanons].rows * t->canons[k % t->ncanons].cols;
    }
    if (snap_grow(s, n)) return 1;
    for (int k = 0; k < 3 * t->ncanons; k++) {
        int rc = fill_from_engine(t, k / t->ncanons, k % t->ncanons, s->data + s->off[k]);
        if (rc == 2) return save_failed(t, s->saved, "");
        if (rc)
            return fail(1, "%s: not saved: reading %s failed", s->saved,
                        t->canons[k % t->ncanons].name);
    }
    return 0;
}

/* Sharded storage: the slices of this process's ranks, in the order the writer asks for them. A
 * slice that cannot be read, or a parameter with NaN or inf, keeps its status for the job, which
 * then fails on every process alike (the save's barrier carries it). */
static int snapshot_shards(Trainer *t, CkptSnap *s) {
    free(s->bytes);
    if (shards_of_run(t, &s->sh, &s->bytes)) return 1;
    free(s->off); free(s->status);
    s->off = malloc((size_t)(t->nslices + 1) * sizeof *s->off);
    s->status = calloc((size_t)t->nslices + 1, sizeof *s->status);
    if (!s->off || !s->status) return fail(1, "out of memory");
    int64_t n = 0;
    for (int i = 0; i < t->nslices; i++) s->off[i] = -1;
    for (int g = s->sh.first; g < s->sh.first + s->sh.count; g++)
        for (int i = 0; i < t->nslices; i++)
            if (t->slices[i].rank == g) {
                s->off[i] = n;
                n += (t->slices[i].r1 - t->slices[i].r0) * (t->slices[i].c1 - t->slices[i].c0);
            }
    if (snap_grow(s, n)) return 1;
    for (int g = s->sh.first; g < s->sh.first + s->sh.count; g++)
        for (int i = 0; i < t->nslices; i++)
            if (t->slices[i].rank == g)
                s->status[i] = fill_slice(t, &t->slices[i], s->data + s->off[i]);
    for (int k = 0; k < 3; k++) { free(t->local[k]); t->local[k] = NULL; }
    return 0;
}

static int snap_fill_canon(void *ctx, int slot, int canon, float *out) {
    CkptSnap *s = ctx;
    const StEntry *c = &s->t->canons[canon];
    const float *from = s->data + s->off[slot * s->t->ncanons + canon];
    memcpy(out, from, (size_t)(c->rows * c->cols) * sizeof(float));
    return 0;
}

static int snap_fill_slice(void *ctx, const CkptSlice *sl, float *out) {
    CkptSnap *s = ctx;
    int i = (int)(sl - s->t->slices);
    if (s->status[i]) {
        if (s->status[i] == 2) s->bad_canon = sl->canon;
        return s->status[i];
    }
    int64_t n = (sl->r1 - sl->r0) * (sl->c1 - sl->c0);
    memcpy(out, s->data + s->off[i], (size_t)n * sizeof(float));
    return 0;
}

static int snap_sum(void *ctx, double *vals, int n) {
    CkptSnap *s = ctx;
    return s->sum(s->sum_ctx, vals, n);
}

/* The background thread's part: write and publish; with full storage over several processes, a
 * sum then tells every process process 0's outcome. */
static int save_job(void *job, CkptSumFn sum, void *sum_ctx) {
    CkptSnap *s = job;
    Trainer *t = s->t;
    int rc;
    s->sum = sum;
    s->sum_ctx = sum_ctx;
    if (s->sharded) {
        rc = ckpt_save_sharded(t->opt->outdir, &s->st, t->canons, t->ncanons, &s->sh, s->saved,
                               sizeof s->saved, s->err, sizeof s->err);
    } else {
        rc = t->follower ? 0 : ckpt_save(t->opt->outdir, &s->st, t->canons, t->ncanons,
                                         snap_fill_canon, s, s->saved, sizeof s->saved, s->err,
                                         sizeof s->err);
        double outcome[1] = {rc};
        if (t->nprocs > 1 && (sum(sum_ctx, outcome, 1) || outcome[0] != 0) && !rc) {
            rc = 1;
            snprintf(s->err, sizeof s->err, "%s: checkpoint not written (process 0 could not "
                     "write it, or the sum that tells the outcome failed; the messages above "
                     "say why)", s->saved);
        }
    }
    s->done_at = now_s();
    return rc;
}

/* Copy what the save needs, start the thread, run its first sum (the temporary folder's name). */
static int save_async(Trainer *t, TrainLog *lg) {
    CkptSnap *s = t->snap ? t->snap : (t->snap = calloc(1, sizeof *s));
    if (!s) return fail(1, "out of memory");
    double t0 = now_s();
    s->t = t;
    s->t0 = t0;
    s->bad_canon = t->bad_canon = -1;
    s->err[0] = 0;
    ckpt_step_dir(t->opt->outdir, t->step, s->saved, sizeof s->saved);
    state_of_step(t, &s->st);
    free(s->losses); free(s->val_losses); free(s->val_steps);   // the loop appends to the trainer's
    s->losses = malloc((size_t)(t->step + 1) * sizeof(float));
    s->val_losses = malloc((size_t)(t->nval + 1) * sizeof(float));
    s->val_steps = malloc((size_t)(t->nval + 1) * sizeof(int64_t));
    if (!s->losses || !s->val_losses || !s->val_steps) return fail(1, "out of memory");
    memcpy(s->losses, t->losses, (size_t)t->step * sizeof(float));
    memcpy(s->val_losses, t->val_losses, (size_t)t->nval * sizeof(float));
    memcpy(s->val_steps, t->val_steps, (size_t)t->nval * sizeof(int64_t));
    s->st.losses = s->losses;
    s->st.val_losses = s->val_losses;
    s->st.val_steps = s->val_steps;
    s->sharded = use_sharded(t);
    if (s->sharded ? snapshot_shards(t, s) : snapshot_full(t, s)) return 1;
    s->sh.fill = snap_fill_slice;
    s->sh.sum = snap_sum;
    s->sh.ctx = s;
    t->pending = ckpt_async_start(save_job, s);
    if (!t->pending)
        return fail(1, "%s: cannot start the thread that writes the checkpoint: %s", s->saved,
                    strerror(errno));
    if (t->nprocs > 1 && s->sharded)
        ckpt_async_serve(t->pending, world_sum, t);   // a failure: the job says it
    // its content is decided: a good step after it makes it good
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", s->saved);
    t->last_step = t->step;
    s->lost = s->copy_s = now_s() - t0;
    return 0;
}

/* Wait for the pending save (serving its sums), then as a synchronous save ends: the log line,
 * with the time the save took and the time the step loop lost to it, and the retention. */
static int finish_async(Trainer *t, TrainLog *lg) {
    CkptSnap *s = t->snap;
    double w0 = now_s();
    int rc = ckpt_async_wait(t->pending, t->nprocs > 1 ? world_sum : NULL, t);
    t->pending = NULL;
    s->lost += now_s() - w0;
    if (rc) {
        t->bad_canon = s->bad_canon;
        return save_failed(t, s->saved, s->err);
    }
    char note[600] = "", how[800];
    if (s->sharded) shard_note_of(&s->sh, note, sizeof note);
    if (t->follower) {
        if (runtime_env()->verbose_any)
            fprintf(stderr, "boost train: rank %d wrote its part of %s%s\n", t->proc, s->saved,
                    note);
        return 0;
    }
    snprintf(how, sizeof how, "%.2fs in the background, the step loop lost %.3fs, %.3fs of it "
             "copying%s", s->done_at - s->t0, s->lost, s->copy_s, note);
    after_save(t, lg, s->saved, s->st.step, how);
    if (lg->json) {
        fprintf(lg->json, "{\"checkpoint_step\":%lld,\"ckpt_save_s\":%.6f,\"ckpt_lost_s\":%.6f,"
                "\"ckpt_copy_s\":%.6f,\"ckpt_async\":true}\n", (long long)s->st.step,
                s->done_at - s->t0, s->lost, s->copy_s);
        fflush(lg->json);
    }
    return 0;
}

/* At a step boundary, after the agreed sum (agreed_stop): run the save's posted sum when every
 * process posted it (turn 1), or finish the save when every process's job returned (turn 2). */
static int async_turn(Trainer *t, TrainLog *lg, int turn) {
    if (!t->pending || !turn) return 0;
    if (turn == 2) return finish_async(t, lg);
    double t0 = now_s();
    ckpt_async_serve(t->pending, world_sum, t);   // a failure: the job fails and says so
    t->snap->lost += now_s() - t0;
    return 0;
}

/* The checkpoint's tokenizer (state.json's CRC-32C) must be the plan's: its weights learned that
 * vocabulary. A checkpoint that records none (imported, or trained on token files) is taken with
 * a note. 1 (said) when they differ. */
static int tokenizer_differs(const Plan *p, const CkptState *st, const char *dir) {
    int has = p->tokenizer_path[0] != 0;
    if (!st->has_tokenizer) {
        if (has)
            printf("note: %s records no tokenizer; this run's text goes through %s\n", dir,
                   p->tokenizer_path);
        return 0;
    }
    if (has && st->tokenizer_crc == p->tokenizer_crc) return 0;
    char now[700] = "no tokenizer (bytes or token files)";
    if (has)
        snprintf(now, sizeof now, "tokenizer %s (CRC-32C 0x%08x)", p->tokenizer_path,
                 (unsigned)p->tokenizer_crc);
    fail(2, "%s: the checkpoint was trained with tokenizer CRC-32C 0x%08x (its copy: the run "
         "folder's tokenizer.json), but this plan names %s: its token ids would mean other text; "
         "resume with the plan (and tokenizer.json) of the run it came from, name that tokenizer "
         "in the run's data, or start a new run without --resume", dir,
         (unsigned)st->tokenizer_crc, now);
    return 1;
}

/* A data mixture continues each source's order where the checkpoint left it (its data_taken);
 * a checkpoint of another data (no or other sources) restarts the count by the rule. */
static void resume_mixture(Trainer *t, const CkptState *st) {
    Batcher *b = &t->batcher;
    if (!b->nsources) return;
    int same = st->nsources == b->nsources;
    mixture_seek(b, t->data_seq, same ? st->data_taken : NULL);
    if (!same)
        printf("note: the checkpoint's data had %d mixture sources, this plan has %d: each "
               "source's position is counted by the mixture rule up to sequence %lld\n",
               st->nsources, b->nsources, (long long)t->data_seq);
}

/* `,"data_tokens":[...]`: the training tokens each mixture source gave so far ("" without one). */
static void mixture_log(Trainer *t, char *out, size_t n) {
    Batcher *b = &t->batcher;
    int64_t taken[DATA_MAX_SOURCES];
    out[0] = 0;
    if (!b->nsources) return;
    mixture_taken(b, t->data_seq, taken);
    size_t used = (size_t)snprintf(out, n, ",\"data_tokens\":[");
    for (int i = 0; i < b->nsources && used < n; i++)
        used += (size_t)snprintf(out + used, n - used, "%s%lld", i ? "," : "",
                                 (long long)(taken[i] * b->seq));
    if (used < n) snprintf(out + used, n - used, "]");
}

/* The plan's data into the batcher: one token set (ts), or a mixture of sources (kept in the
 * trainer; ts then stays empty and names the mixture). 0, or the exit status (said). */
static int open_training_data(Trainer *t, TokenSet *ts) {
    const Plan *p = t->plan;
    char err[4096];
    memset(ts, 0, sizeof *ts);
    if (!p->nsources) {
        int rc = run_data_open(p, t->opt->outdir, ts, err, sizeof err);   /* tokenizer= too */
        if (!rc)
            rc = batcher_init_set(&t->batcher, ts, p->val_fraction, p->micro_batch, p->seq,
                                  p->vocab, p->seed, err, sizeof err);
        if (rc) { tokenset_close(ts); return fail(rc, "%s", err); }
        return 0;
    }
    int rc = run_data_open_sources(p, t->opt->outdir, t->mix_sets, err, sizeof err);
    if (rc) return fail(rc, "%s", err);
    t->nmix_sets = p->nsources;
    double w[DATA_MAX_SOURCES];
    for (int i = 0; i < p->nsources; i++) w[i] = p->sources[i].weight;
    rc = batcher_init_mixture(&t->batcher, t->mix_sets, w, p->nsources, p->val_fraction,
                              p->micro_batch, p->seq, p->vocab, p->seed, err, sizeof err);
    if (rc) return fail(rc, "%s", err);
    size_t used = (size_t)snprintf(ts->source, sizeof ts->source, "mixture of");
    for (int i = 0; i < p->nsources && used < sizeof ts->source; i++)
        used += (size_t)snprintf(ts->source + used, sizeof ts->source - used, "%s %s (%.3g)",
                                 i ? "," : "", t->mix_sets[i].source, t->batcher.weights[i]);
    return 0;
}

static int resume_from(Trainer *t, const char *arg) {
    char dir[1200], err[4096], notes[4096];
    if (ckpt_resolve(arg, dir, sizeof dir, notes, sizeof notes, err, sizeof err))
        return fail(2, "%s", err);
    // newer folders of a run that did not verify: said, then passed over
    for (char *line = notes; *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        fprintf(stderr, "boost train: warning: %s\n", line);
        if (!nl) break;
        line = nl + 1;
    }
    if (strcmp(dir, arg))
        printf("--resume %s: the newest checkpoint that verifies is %s\n", arg, dir);
    else {   // a step folder named by the user: verified here (a run folder's pick was above)
        int v = ckpt_verify_advise(dir, err, sizeof err);
        if (v == CKPT_DAMAGED) return fail(2, "cannot resume: %s", err);
        if (v == CKPT_UNCHECKED) printf("note: %s\n", err);
    }
    CkptState st;
    if (ckpt_read_state(dir, &st, err, sizeof err)) return fail(2, "%s", err);
    uint64_t fp = ckpt_fingerprint(t->canons, t->ncanons);
    if (st.fingerprint != fp) {
        int rc = fail(2,
                      "%s: a checkpoint of model '%s' (%d canonical tensors, fingerprint "
                      "0x%016llx), but this run trains model '%s' (%d canonical tensors, "
                      "fingerprint 0x%016llx): resume with the run it came from",
                      dir, st.model, st.ncanons, (unsigned long long)st.fingerprint,
                      t->plan->model_name, t->ncanons, (unsigned long long)fp);
        ckpt_state_free(&st);
        return rc;
    }
    if (tokenizer_differs(t->plan, &st, dir)) { ckpt_state_free(&st); return 2; }
    if (st.step > t->plan->steps) {
        int rc = fail(2, "%s: the checkpoint is at step %lld, past this run's %d steps: raise "
                      "steps (-D steps=N)", dir, (long long)st.step, t->plan->steps);
        ckpt_state_free(&st);
        return rc;
    }
    CkptReader *rd;
    if (ckpt_reader_open(dir, t->canons, t->ncanons, &rd, err, sizeof err)) {
        ckpt_state_free(&st);
        return fail(2, "%s", err);
    }
    /* One process per rank: only the blocks this process's rank holds are read (the rest of the
     * canonical tensor stays zero; engine_set_canon takes this rank's blocks only), and with pp > 1
     * only the canons of its own stages. Threads: all. */
    int partial = t->nprocs > 1;
    int most = t->plan->nparts;
    for (int s = 0; t->pl && s < pipeline_stages(t->pl); s++)
        if (pipeline_stage_plan(t->pl, s)->nparts > most)
            most = pipeline_stage_plan(t->pl, s)->nparts;
    CkptRegion *need = partial ? malloc((size_t)(most + 1) * sizeof *need) : NULL;
    if (partial && !need) {
        ckpt_reader_close(rd); ckpt_state_free(&st);
        return fail(1, "out of memory");
    }
    const int slots[3] = {SLOT_PARAM, SLOT_ADAM_M, SLOT_ADAM_V};
    for (int c = 0; c < t->ncanons; c++) {
        int lc = c, stage = t->pl ? pipeline_canon_stage(t->pl, c, &lc) : 0;
        const Plan *p = t->pl ? pipeline_stage_plan(t->pl, stage) : t->plan;
        if (t->pl && !pipeline_stage_engine(t->pl, stage)) continue;   /* another process's stage */
        int nneed = 0, tr = t->proc % p->tp;
        for (int k = 0; need && k < p->nparts; k++)
            if (p->parts[k].canon == lc)
                need[nneed++] =
                    (CkptRegion){rank_int(p->parts[k].r0, tr), rank_int(p->parts[k].r1, tr),
                                 rank_int(p->parts[k].c0, tr), rank_int(p->parts[k].c1, tr)};
        for (int s = 0; s < 3; s++) {
            if (need)
                memset(t->buf, 0, (size_t)(t->canons[c].rows * t->canons[c].cols) * sizeof(float));
            int rc = ckpt_reader_read(rd, ckpt_reader_find(rd, t->canons[c].name, s), need, nneed,
                                      t->buf, err, sizeof err);
            if (rc) {
                free(need); ckpt_reader_close(rd); ckpt_state_free(&st);
                return fail(2, "%s", err);
            }
            if (t_set_canon(t, c, slots[s], t->buf) != 0) {
                free(need); ckpt_reader_close(rd); ckpt_state_free(&st);
                return fail(1, "%s: the engine refused tensor %s%s", dir,
                            s == 1 ? "m." : s == 2 ? "v." : "", t->canons[c].name);
            }
        }
    }
    free(need);
    int64_t bytes_read = ckpt_reader_bytes_read(rd), bytes_total = ckpt_reader_bytes_total(rd);
    int sharded = ckpt_reader_sharded(rd);
    ckpt_reader_close(rd);
    t->step = (int)st.step;
    // older checkpoints count micro-batches of a dp=1 run only
    t->data_seq =
        st.data_sequences >= 0 ? st.data_sequences : st.data_position * t->plan->micro_batch;
    resume_mixture(t, &st);
    t->skipped = st.skipped;
    for (int i = 0; i < st.nlosses && i < t->plan->steps; i++) t->losses[i] = st.losses[i];
    for (int i = 0; i < st.nval; i++) {
        if (t->nval == t->val_cap) break;
        t->val_steps[t->nval] = st.val_steps[i];
        t->val_losses[t->nval++] = st.val_losses[i];
    }
    printf("resumed from %s: step %lld, data position %lld "
           "(%lld sequences; saved at tp=%d %s, now tp=%d %s)\n",
           dir, (long long)st.step, (long long)st.data_position, (long long)t->data_seq, st.tp,
           st.layout, t->plan->tp, t->plan->layout);
    if (runtime_env()->verbose_any)
        printf("  %s checkpoint: read %lld of its %lld tensor bytes\n",
               sharded ? "sharded" : "full", (long long)bytes_read, (long long)bytes_total);
    if (st.seed != t->plan->seed)
        printf("note: the checkpoint's seed 0x%llx differs from this "
               "run's 0x%llx: the data order changes from here\n",
               (unsigned long long)st.seed, (unsigned long long)t->plan->seed);
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", dir);
    t->last_step = t->step;
    ckpt_state_free(&st);
    return 0;
}

/* ---- loss spikes: a good step's loss and gradient norm go into a window of the latest
 * spike_window good steps; once it is full, a loss or norm above mean + spike_z * sd of the
 * window is a spike, and its step is skipped. Every rank sees the same global loss and norm (the
 * dp mean, the world's sum of squares) and the same window, so all take the same decision. ---- */

/* The value above which v's next entry is a spike; 0 (no limit) while the window is not full. */
static double spike_limit(const Trainer *t, const double *ring) {
    int n = t->plan->spike_window;
    if (n <= 0 || t->win_n < n) return 0;
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += ring[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (ring[i] - mean) * (ring[i] - mean);
    double sd = sqrt(var / (n > 1 ? n - 1 : 1));
    return mean + t->plan->spike_z * sd;
}

static void spike_window_add(Trainer *t, double loss, double norm) {
    if (!t->win_loss) return;
    t->win_loss[t->win_at] = loss;
    t->win_norm[t->win_at] = norm;
    t->win_at = (t->win_at + 1) % t->plan->spike_window;
    if (t->win_n < t->plan->spike_window) t->win_n++;
}

/* BOOST_TEST_SPIKE_BATCHES=12,13 (tests): the loss of the batches that a run without rollbacks
 * reads at steps 12 and 13 is multiplied by 1000, as a bad batch would raise it. Keyed to the data,
 * not the step, so that a rollback past those batches does not meet them again. */
static double test_spike_scale(const Trainer *t, int64_t seq0) {
    const char *s = test_hook_spike_batches();
    if (!s) return 1;
    int64_t batch = seq0 / ((int64_t)t->plan->dp * t->plan->grad_accum * t->plan->micro_batch) + 1;
    for (char *end; *s; s = *end ? end + 1 : end) {
        long long v = strtoll(s, &end, 10);
        if (end == s) break;
        if (v == batch) return 1000;
    }
    return 1;
}

/* spike_rollback_after spikes in a row: back to the last good checkpoint with the data position
 * kept where it is (past the spikes' batches). 0, or the exit status of a run that stops. */
static int spike_rollback(Trainer *t, TrainLog *lg, int streak) {
    const Plan *p = t->plan;
    char ckpt[1200];
    if (t->rollbacks >= p->spike_max_rollbacks)
        return fail(1, "step %d: %d loss spikes in a row after %d rollback%s "
                    "(spike_max_rollbacks=%d): stopping; the data may hold a bad stretch or the "
                    "run is unstable: try a lower learning rate (lr is %g) or raise spike_z "
                    "(%g)%s%s",
                    t->step, streak, t->rollbacks, t->rollbacks == 1 ? "" : "s",
                    p->spike_max_rollbacks, p->lr, p->spike_z,
                    t->good_ckpt[0] ? "; last good checkpoint: " : "", t->good_ckpt);
    if (!t->good_ckpt[0])
        return fail(1, "step %d: %d loss spikes in a row (spike_rollback_after=%d) and no good "
                    "checkpoint to roll back to: stopping; save checkpoints with -o DIR "
                    "--save-every N", t->step, streak, p->spike_rollback_after);
    if (t->pending && finish_async(t, lg)) return 1;   // it may be the checkpoint being written
    snprintf(ckpt, sizeof ckpt, "%s", t->good_ckpt);
    int64_t past = t->data_seq;
    trainlog_note(lg, "step %d: %d loss spikes in a row: rolling back to %s "
                  "(rollback %d of at most %d)", t->step, streak, ckpt, t->rollbacks + 1,
                  p->spike_max_rollbacks);
    t->nval = 0;   /* the checkpoint's validation record replaces this one */
    int rc = resume_from(t, ckpt);
    if (rc) return rc;
    t->data_seq = past;
    t->rollbacks++;
    trainlog_note(lg, "rolled back to step %d; data position advanced to sequence %lld, past the "
                  "spikes' batches", t->step, (long long)past);
    return 0;
}

/* What a diverged run says after "training diverged": the last good checkpoint and what to try. */
static void divergence_advice(const Trainer *t, char *out, size_t n) {
    const Plan *p = t->plan;
    char where[2600], clip[96];
    if (t->good_ckpt[0])
        snprintf(where, sizeof where, "last good checkpoint: %s (resume with --resume %s)",
                 t->good_ckpt, t->good_ckpt);
    else if (t->last_ckpt[0])
        snprintf(where, sizeof where,
                 "no checkpoint was followed by a good step (the "
                 "newest, %s, may hold the diverged weights)", t->last_ckpt);
    else
        snprintf(where, sizeof where, "no checkpoint was saved%s",
                 t->opt->outdir ? " yet" : " (no -o DIR)");
    if (p->clip > 0)
        snprintf(clip, sizeof clip, "a tighter gradient clip (clip is %g: e.g. -D clip=%g)",
                 p->clip, p->clip / 2);
    else snprintf(clip, sizeof clip, "gradient clipping (clip is off: e.g. -D clip=1)");
    snprintf(out, n, "%s; try a lower learning rate (lr is %g: e.g. -D lr=%g) or %s", where, p->lr,
             p->lr / 10, clip);
}

/* pp > 1: the step's MoE routing rows, gathered by the pipeline over its stages (and processes),
 * into the log's statistics, micro-batch by micro-batch as at pp = 1. 0, or -1 out of memory. */
static int pipeline_moe_stats(Trainer *t) {
    MoeStats *s = &t->moe;
    if (!s->n) return 0;
    int nr = s->ranks * s->n;
    float *buf = malloc(sizeof(float) * (size_t)nr * (size_t)(s->auxn + 1));
    const float **rows = malloc(sizeof *rows * (size_t)nr);
    if (!buf || !rows) { free(buf); free(rows); return -1; }
    for (int j = 0; j < t->plan->grad_accum; j++) {
        for (int d = 0; d < s->ranks; d++)
            for (int q = 0; q < s->n; q++) {
                float *row = buf + (size_t)(d * s->n + q) * (size_t)(s->auxn + 1);
                rows[d * s->n + q] =
                    pipeline_moe_aux(t->pl, j, s->layer[q], d, row, s->auxn) ? NULL : row;
            }
        moe_stats_add_rows(s, rows);
    }
    free(buf); free(rows);
    return 0;
}

/* Mean loss over the validation micro-batches; *loss = -1 when there is no validation part. */
static int validate(Trainer *t, double *loss) {
    int64_t n = batcher_val_batches(&t->batcher, t->opt->val_batches > 0 ? t->opt->val_batches : 8);
    *loss = -1;
    if (n <= 0) return 0;
    double sum = 0;
    char err[1024], num[32];
    int dp = t->plan->dp;
    int64_t mbt = (int64_t)t->plan->micro_batch * t->plan->seq, groups = (n + dp - 1) / dp;
    /* dp batches a pass (wrapping when dp does not divide n) */
    for (int64_t i = 0; i < groups; i++) {
        float l;
        for (int d = 0; d < dp; d++)
            if ((t->my_dp < 0 || d == t->my_dp) &&
                batcher_val(&t->batcher, (i * dp + d) % n, t->inputs + d * mbt,
                            t->targets + d * mbt))
                return fail(2, "%s", t->batcher.err);
        if (t_forward(t, &l, err, sizeof err))
            return fail(1, "validation at step %d: %s", t->step, err);
        sum += l;
    }
    *loss = sum / (double)groups;
    if (!isfinite(*loss)) {
        char advice[3000];
        divergence_advice(t, advice, sizeof advice);
        return fail(1, "step %d: the validation loss is %s: training diverged; stopping without "
                    "saving; %s", t->step, show(*loss, num, sizeof num), advice);
    }
    if (t->nval < t->val_cap) {
        t->val_steps[t->nval] = t->step;
        t->val_losses[t->nval++] = (float)*loss;
    }
    return 0;
}

static void trainer_free(Trainer *t) {
    if (t->e) engine_free(t->e);
    moe_stats_free(&t->moe);
    batcher_free(&t->batcher);
    for (int i = 0; i < t->nmix_sets; i++) tokenset_close(&t->mix_sets[i]);
    free(t->canons); free(t->buf); free(t->inputs); free(t->targets);
    free(t->losses); free(t->val_losses); free(t->val_steps);
    free(t->slices);
    for (int k = 0; k < 3; k++) free(t->local[k]);
    free(t->win_loss); free(t->win_norm); free(t->busy);
    if (t->snap && !t->pending) {   // a save left running by a failed run keeps its memory
        CkptSnap *s = t->snap;
        free(s->losses); free(s->val_losses); free(s->val_steps);
        free(s->data); free(s->off); free(s->status); free(s->bytes);
        free(s);
    }
}

/* SIGINT / SIGTERM: finish the step under way, save a checkpoint (with -o) and stop; a second
 * signal ends the process at once. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) {
    if (stop_signal) { signal(sig, SIG_DFL); raise(sig); return; }
    stop_signal = sig;
}

static void catch_stop_signals(int on) {
    static struct sigaction old_int, old_term;
    static int int_caught;
    if (on) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_stop_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        stop_signal = 0;
        sigaction(SIGTERM, &sa, &old_term);
        sigaction(SIGINT, NULL, &old_int);
        int_caught = old_int.sa_handler != SIG_IGN;   // a background job keeps ignoring SIGINT
        if (int_caught) sigaction(SIGINT, &sa, NULL);
    } else {
        sigaction(SIGTERM, &old_term, NULL);
        if (int_caught) sigaction(SIGINT, &old_int, NULL);
    }
}

/* The stop every rank takes after this step: SIGTERM if any process saw one, else SIGINT if any
 * did, else 0 (asked once a step, after the forward and backward passes, before the update).
 * Several processes (mpirun, srun, one per GPU) sum the two flags over the world, so a signal to
 * one rank, to every rank at slightly different times or to the launcher stops them all after the
 * same step; they save together and end with the same status (comm_mpi_finish then finalizes MPI
 * instead of aborting the job). Ranks as threads share the process's flag. */
/* The per-rank times of the straggler check ([dp * tp], see below), or NULL when it is off. */
static double *busy_times(Trainer *t) {
    double factor = t->opt->straggler_factor == 0 ? 1.5 : t->opt->straggler_factor;
    if (!t->busy && !t->pl && factor > 0)
        t->busy = calloc((size_t)t->plan->dp * t->plan->tp, sizeof *t->busy);
    return t->busy;
}

static int agreed_stop(Trainer *t, int *ckpt_turn) {
    int sig = stop_signal;
    int posted = t->pending && ckpt_async_posted(t->pending);
    int finished = t->pending && ckpt_async_finished(t->pending);
    *ckpt_turn = finished ? 2 : 0;
    if (t->nprocs <= 1) return sig;
    /* --ckpt-async: whether this process's save posted a sum, or returned (async_turn); then the
     * straggler check's times of this step, each process its own rank's (no sum of its own) */
    int nb = busy_times(t) ? t->plan->dp * t->plan->tp : 0;
    double *seen = calloc((size_t)(4 + nb), sizeof *seen);
    if (!seen) return sig;
    seen[0] = sig == SIGTERM;
    seen[1] = sig == SIGINT;
    seen[2] = posted;
    seen[3] = finished;
    if (nb) engine_rank_busy(t->e, seen + 4);
    *ckpt_turn = 0;
    if (world_sum(t, seen, 4 + nb) != 0) {   /* the next collective says it */
        free(seen);
        return sig;
    }
    for (int r = 0; r < nb; r++) t->busy[r] += seen[4 + r];
    *ckpt_turn = seen[2] == t->nprocs ? 1 : seen[3] == t->nprocs ? 2 : 0;
    sig = seen[0] > 0 ? SIGTERM : seen[1] > 0 ? SIGINT : 0;
    free(seen);
    if (sig) comm_mpi_agree_status(128 + sig);
    return sig;
}

/* ---- stragglers: each rank's time in the training passes outside collective waits (the executor
 * measures it, runtime/flight.h), summed over the steps between two progress lines (with several
 * processes gathered each step inside agreed_stop's sum, so no collective of its own: one after
 * the update would wait for the optimizer's overlapped gathers); a rank above --straggler-factor
 * (default 1.5) times the median is named. pp > 1: not measured. ---- */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void straggler_check(Trainer *t, TrainLog *lg, int every) {
    double factor = t->opt->straggler_factor == 0 ? 1.5 : t->opt->straggler_factor;
    if (!busy_times(t)) return;
    int n = t->plan->dp * t->plan->tp;
    double *now = calloc((size_t)n, sizeof *now), *sorted = calloc((size_t)n, sizeof *sorted);
    if (now && sorted && t->nprocs == 1) {   /* several processes: gathered by agreed_stop */
        engine_rank_busy(t->e, now);
        for (int r = 0; r < n; r++) t->busy[r] += now[r];
    }
    if (now && sorted && n > 1 && (t->step % every == 0 || t->step == t->plan->steps)) {
        memcpy(sorted, t->busy, (size_t)n * sizeof *sorted);
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
        double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
        int slow = 0;
        for (int r = 1; r < n; r++) if (t->busy[r] > t->busy[slow]) slow = r;
        if (median > 0 && t->busy[slow] > factor * median) {
            char list[2048];
            size_t used = 0;
            for (int r = 0; r < n && used < sizeof list - 32; r++)
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%d:%.3f", r ? " " : "",
                                         r, t->busy[r]);
            trainlog_note(lg, "steps %d-%d: rank %d is a straggler: %.3f s outside collective "
                          "waits, %.1fx the median %.3f s (--straggler-factor %g); seconds per "
                          "rank: %s", t->busy_from + 1, t->step, slow, t->busy[slow],
                          t->busy[slow] / median, median, factor, list);
            if (lg->json) {
                fprintf(lg->json, "{\"straggler\":%d,\"steps\":[%d,%d],\"factor\":%g,"
                        "\"rank_busy_s\":[", slow, t->busy_from + 1, t->step, factor);
                for (int r = 0; r < n; r++) fprintf(lg->json, "%s%.6f", r ? "," : "", t->busy[r]);
                fprintf(lg->json, "]}\n");
            }
        }
        memset(t->busy, 0, (size_t)n * sizeof *t->busy);
        t->busy_from = t->step;
    }
    free(now);
    free(sorted);
}

/* One step's forward and backward passes over its grad_accum micro-batches (with pp > 1 the 1F1B
 * schedule over all of them); *sum: their losses added. 0, or fail's status. */
static int step_forward_backward(Trainer *t, double *sum) {
    const Plan *p = t->plan;
    char err[1024];
    for (int a = 0; a < p->grad_accum; a++) {
        float l;
        /* pp > 1: all micro-batches first */
        int64_t mbt = (int64_t)p->micro_batch * p->seq, blk = t->pl ? a * mbt * p->dp : 0;
        for (int d = 0; d < p->dp; d++)   /* dp rank d reads slice d of the global micro-batch */
            if ((t->my_dp < 0 || d == t->my_dp)
                && batcher_global(&t->batcher, t->data_seq, d, p->dp, t->inputs + blk + d * mbt,
                                  t->targets + blk + d * mbt))
                return fail(2, "step %d: %s; stopping without saving", t->step + 1, t->batcher.err);
        t->data_seq = batcher_next(&t->batcher, t->data_seq, p->dp);
        if (t->pl) continue;
        if (engine_forward_backward(t->e, t->inputs, t->targets, &l, err, sizeof err))
            return fail(1, "step %d: %s", t->step + 1, err);
        moe_stats_add(&t->moe, t->e);
        *sum += l;
    }
    if (t->pl) {   /* the 1F1B schedule over the grad_accum micro-batches */
        float ml[1024];
        if (p->grad_accum > 1024)
            return fail(2, "step %d: grad_accum %d: at most 1024 micro-batches with pp > 1",
                        t->step + 1, p->grad_accum);
        if (pipeline_forward_backward(t->pl, t->inputs, t->targets, ml, err, sizeof err))
            return fail(1, "step %d: %s", t->step + 1, err);
        for (int a = 0; a < p->grad_accum; a++) *sum += ml[a];
        if (pipeline_moe_stats(t)) return fail(1, "out of memory");
    }
    return 0;
}

/* The update of a step whose mean loss is loss, or none: a non-finite loss or gradient norm, or a
 * spike (a loss above loss_limit, a norm above its window's limit), sets *skipped (and *spike).
 * *grad_norm: the measured norm (NAN: not measured); *lr: the rate used. 0, or fail's status. */
static int step_update(Trainer *t, double loss, double loss_limit, float *grad_norm, float *lr,
                       int *skipped, int *spike) {
    char err[1024];
    int orc;
    t->plan->norm_skip_above = spike_limit(t, t->win_norm);
    if (!isfinite(loss) || (loss_limit > 0 && loss > loss_limit)) {
        if (t_discard(t, err, sizeof err)) return fail(1, "step %d: %s", t->step + 1, err);
        *grad_norm = NAN;   // not measured
        *skipped = 1;
        *spike = isfinite(loss);
    } else if ((orc = t_optimizer(t, grad_norm, lr, err, sizeof err)) > 0) {
        *skipped = *spike = 1;   // the gradient norm is a spike: the engine skipped the update
    } else if (orc) {
        if (isfinite(*grad_norm)) return fail(1, "step %d: optimizer: %s", t->step + 1, err);
        *skipped = 1;       // the engine skipped the update and zeroed the gradients
    }
    return 0;
}

/* The log's line for a spike step (update skipped), spike_streak of them in a row. */
static void note_spike(Trainer *t, TrainLog *lg, double loss, float grad_norm, double loss_limit,
                       int spike_streak) {
    const Plan *p = t->plan;
    int by_loss = !isfinite(grad_norm);
    char num[32], num2[32], then[64] = "";
    double limit = by_loss ? loss_limit : t->plan->norm_skip_above;
    if (p->spike_rollback_after > 0)
        snprintf(then, sizeof then, "; a rollback at %d", p->spike_rollback_after);
    trainlog_note(lg, "step %d: loss spike: the %s %s is above its window's limit %s: "
                  "update skipped (%d in a row%s)", t->step,
                  by_loss ? "loss" : "gradient norm",
                  show(by_loss ? loss : grad_norm, num, sizeof num),
                  show(limit, num2, sizeof num2), spike_streak, then);
}

/* The log's line for a step whose loss or gradient norm is not finite, streak of them in a row. */
static void note_skipped(Trainer *t, TrainLog *lg, double loss, float grad_norm, int streak) {
    char num[32], num2[32];
    trainlog_note(lg, "step %d: the %s is %s: update skipped (%d in a row; the run stops at %d)",
                  t->step, isfinite(loss) ? "gradient norm" : "loss",
                  isfinite(loss) ? show(grad_norm, num, sizeof num) : show(loss, num2, sizeof num2),
                  streak, t->plan->max_bad_steps);
}

/* The log's "done" line: done steps in train_time seconds at tok_per_s, the loss from first to
 * last. */
static void note_done(Trainer *t, TrainLog *lg, double tok_per_s, int done, double train_time,
                      double first_loss, double last_loss) {
    char tok[32], dur[32];
    int should_save = t->opt->outdir != NULL;
    format_count(tok_per_s, tok, sizeof tok);
    format_duration(train_time, dur, sizeof dur);
    if (done > 0)
        trainlog_note(lg, "done: %d steps in %s (%s tok/s); loss %.4g -> %.4g%s%s", done, dur, tok,
                      first_loss, last_loss, should_save ? "; checkpoint " : "",
                      should_save ? t->last_ckpt : "");
}

/* The step's extra log fields: the MoE statistics and the data mixture (JSON, in a static
 * buffer). */
static const char *step_extra_json(Trainer *t) {
    static char moe_json[1 << 16];
    moe_stats_json(&t->moe, moe_json, sizeof moe_json);
    size_t json_len = strlen(moe_json);
    mixture_log(t, moe_json + json_len, sizeof moe_json - json_len);
    return moe_json;
}

/* The checkpoint of the step just done, if one is due (*due) with -o: every save_every steps and
 * at the end; one falling on a skipped step waits for the next good update (*pending_save).
 * 0, or 1 (the save failed). */
static int save_if_due(Trainer *t, TrainLog *lg, int skipped, int *pending_save, int *due) {
    const Plan *p = t->plan;
    const int should_save = t->opt->outdir != NULL;
    *due = should_save
        && ((t->opt->save_every > 0 && t->step % t->opt->save_every == 0) || t->step == p->steps);
    if (*due && skipped && t->step < p->steps) {   // not over a good one: after the next good one
        *due = 0;
        if (!*pending_save)
            trainlog_note(lg, "checkpoint of step %d postponed until an update is not skipped",
                          t->step);
        *pending_save = 1;
    } else if (*pending_save && !skipped && should_save) *due = 1;
    if (*due) {
        if (save_checkpoint(t, lg)) return 1;
        *pending_save = 0;
    }
    return 0;
}

/* A stop signal sig agreed after a step: a checkpoint (with -o, unless due already saved one), then
 * the status 128 + sig, or 1 if the save failed. */
static int stop_by_signal(Trainer *t, TrainLog *lg, int sig, int due) {
    const int should_save = t->opt->outdir != NULL;
    trainlog_note(lg, "stopped by %s after step %d%s", sig == SIGINT ? "SIGINT" : "SIGTERM",
                  t->step, should_save ? "" : " (no -o: nothing saved)");
    if (should_save && !due && save_checkpoint(t, lg)) return 1;
    if (t->pending && finish_async(t, lg)) return 1;   // the stop waits for the save
    if (should_save) trainlog_note(lg, "resume with: --resume %s", t->last_ckpt);
    return 128 + sig;
}

static int run_loop(Trainer *t, TrainLog *lg) {
    const Plan *p = t->plan;
    const int64_t tokens_per_step = (int64_t)p->micro_batch * p->seq * p->grad_accum * p->dp;
    char err[1024], num[32];
    double train_time = 0, first_loss = -1, first_val = -1, last_val = -1, last_loss = -1;
    int first_step = t->step;
    int streak = 0;           /* skipped updates in a row */
    int skipped_here = 0;     /* skipped updates in this process */
    int pending_save = 0;   /* a checkpoint fell on a skipped step: saved after the next good one */
    int spike_streak = 0;     /* spike steps in a row */
    if (t->nval > 0) first_val = t->val_losses[0];

    if (t->step == 0) {
        double v;
        if (validate(t, &v)) return 1;
        if (v >= 0) { trainlog_initial_val(lg, v); first_val = v; }
        if (lg->error[0]) return fail(1, "%s; stopping before step 1", lg->error);
    }
    while (t->step < p->steps) {
        double t0 = now_s(), sum = 0;
        const int64_t seq0 = t->data_seq;   /* the step's first sequence */
        int rc = step_forward_backward(t, &sum);
        if (rc) return rc;
        /* the stop, agreed before the update: the device is idle here anyway (the update needs the
         * reduced gradients), so the sum does not hold back the optimizer's overlapped gathers */
        int ckpt_turn, stop = agreed_stop(t, &ckpt_turn);
        if (async_turn(t, lg, ckpt_turn)) return 1;
        double loss = sum / p->grad_accum * test_spike_scale(t, seq0);
        // a non-finite loss or gradient norm: no update (the gradients are dropped), the step
        // counts; so does a spike (a loss or norm above its window's limit)
        float grad_norm = 0, lr = engine_lr_at(p, t->step);
        double loss_limit = spike_limit(t, t->win_loss);
        int skipped = 0, spike = 0;
        if ((rc = step_update(t, loss, loss_limit, &grad_norm, &lr, &skipped, &spike))) return rc;
        double dt = now_s() - t0;
        train_time += dt;
        t->losses[t->step] = (float)loss;
        t->step++;
        spike_streak = spike ? spike_streak + 1 : 0;
        if (spike) {
            t->skipped++;
            t->spikes++;
        } else if (skipped) {
            streak++;
            t->skipped++;
            skipped_here++;
        } else {
            streak = 0;
            spike_window_add(t, loss, grad_norm);
            // a good step after the newest checkpoint: that checkpoint is good
            snprintf(t->good_ckpt, sizeof t->good_ckpt, "%s", t->last_ckpt);
            t->good_step = t->last_ckpt[0] ? t->last_step : -1;
            if (first_loss < 0) first_loss = loss;
            last_loss = loss;
        }

        StepReport r = {t->step, loss, -1, lr, grad_norm,
                        (double)tokens_per_step / (dt > 0 ? dt : 1e-9), 0, 0, skipped, t->skipped,
                        spike};
        r.eta_s = train_time / (t->step - first_step) * (p->steps - t->step);
        r.avg_tokens_per_s =
            (double)tokens_per_step * (t->step - first_step) / (train_time > 0 ? train_time : 1e-9);
        lg->extra = step_extra_json(t);
        if ((p->eval_every > 0 && t->step % p->eval_every == 0) || t->step == p->steps) {
            if (validate(t, &r.val_loss)) return 1;
            if (r.val_loss >= 0) last_val = r.val_loss;
        }
        trainlog_step(lg, &r);
        if (!t->pl) engine_flight_step(t->e, t->step);
        straggler_check(t, lg, lg->print_every > 0 ? lg->print_every : 1);
        /* a full disk: said at once, not a run that looks fine with an empty log */
        if (lg->error[0]) {
            if (t->last_ckpt[0])
                return fail(1, "%s; stopping after step %d (the newest checkpoint: %s)", lg->error,
                            t->step, t->last_ckpt);
            return fail(1, "%s; stopping after step %d (no checkpoint saved yet)", lg->error,
                        t->step);
        }
        if (spike) note_spike(t, lg, loss, grad_norm, loss_limit, spike_streak);
        else if (skipped) note_skipped(t, lg, loss, grad_norm, streak);
        if (streak >= p->max_bad_steps) {
            char advice[3000];
            divergence_advice(t, advice, sizeof advice);
            return fail(1,
                        "step %d: %d updates in a row skipped (loss %s, gradient "
                        "norm %s): training diverged; stopping without saving; %s",
                        t->step, streak, show(loss, num, sizeof num),
                        isfinite(loss) ? show(grad_norm, err, sizeof err) : "not measured", advice);
        }
        if (p->spike_rollback_after > 0 && spike_streak >= p->spike_rollback_after) {
            if ((rc = spike_rollback(t, lg, spike_streak))) return rc;
            spike_streak = 0;
            pending_save = 0;
            first_step = t->step;   /* the rates and the ETA from here */
            train_time = 0;
            continue;
        }
        int due;
        if (save_if_due(t, lg, skipped, &pending_save, &due)) return 1;
        if (stop && t->step < p->steps) return stop_by_signal(t, lg, stop, due);
    }
    if (t->pending && finish_async(t, lg)) return 1;   // the end waits for the last save
    int done = t->step - first_step;
    note_done(t, lg, done > 0 ? (double)tokens_per_step * done / train_time : 0, done, train_time,
              first_loss, last_loss);
    if (first_val >= 0 && last_val >= 0)
        trainlog_note(lg, "validation loss %.4g -> %.4g", first_val, last_val);
    if (skipped_here > 0)
        trainlog_note(
            lg, "%d update%s skipped (non-finite loss or gradient norm); %lld in the whole run",
            skipped_here, skipped_here == 1 ? " was" : "s were", (long long)t->skipped);
    if (t->spikes > 0)
        trainlog_note(lg, "%lld loss spike%s skipped, %d rollback%s", (long long)t->spikes,
                      t->spikes == 1 ? "" : "s", t->rollbacks, t->rollbacks == 1 ? "" : "s");
    return 0;
}

/* the trainer's process identity: rank 0 or a follower, and the processes of the run */
static void trainer_identify(Trainer *t, Plan *p, Pipeline *pl, const TrainOptions *opt) {
    memset(t, 0, sizeof *t);
    t->plan = p;
    t->pl = pl;
    t->opt = opt;
    t->bad_canon = -1;
    t->good_step = -1;
    t->follower = world_rank() > 0;
    int wr = 0, ws = 1;
    char werr[256];
    t->nprocs = world_from_env(&wr, &ws, werr, sizeof werr) == 1 ? ws : 1;
    t->proc = t->nprocs > 1 ? wr : 0;
}

/* the canonical tensors (what checkpoints hold, whatever the layout and tp) and the step's buffers;
 * *nparams: the parameters of the model. 0, or 1 when out of memory (nothing printed) */
static int trainer_alloc(Trainer *t, int64_t *nparams) {
    const Plan *p = t->plan;
    Pipeline *pl = t->pl;
    /* pp > 1: the union of the stages' canons */
    t->ncanons = pl ? pipeline_canon_count(pl) : p->ncanons;
    t->canons = calloc((size_t)t->ncanons + 1, sizeof(StEntry));
    *nparams = 0;
    for (int c = 0; c < t->ncanons && t->canons; c++) {
        const PlanCanon *pc = pl ? pipeline_canon(pl, c) : &p->canons[c];
        t->canons[c].name = pc->name;
        t->canons[c].rows = pc->rows;
        t->canons[c].cols = pc->cols;
        int64_t n = pc->rows * pc->cols;
        *nparams += n;
        if (n > t->largest) t->largest = n;
    }
    size_t mbt = (size_t)p->micro_batch * p->seq * p->dp * (pl ? (size_t)p->grad_accum : 1);
    t->buf = malloc((size_t)(t->largest > 0 ? t->largest : 1) * sizeof(float));
    t->inputs = calloc(mbt, sizeof(int32_t));
    t->targets = calloc(mbt, sizeof(int32_t));
    t->losses = calloc((size_t)p->steps + 1, sizeof(float));
    t->val_cap = p->steps + 2;
    t->val_losses = calloc((size_t)t->val_cap, sizeof(float));
    t->val_steps = calloc((size_t)t->val_cap, sizeof(int64_t));
    if (p->spike_window > 0) {
        t->win_loss = calloc((size_t)p->spike_window, sizeof(double));
        t->win_norm = calloc((size_t)p->spike_window, sizeof(double));
        if (!t->win_loss || !t->win_norm) return 1;
    }
    return !t->canons || !t->buf || !t->inputs || !t->targets || !t->losses || !t->val_losses ||
           !t->val_steps;
}

/* a launcher's world must hold the plan's grid (bad input: exit 2 before anything runs); sets the
 * dp rank this process reads. 0, or the exit status after saying what is wrong */
static int trainer_check_world(Trainer *t) {
    const Plan *p = t->plan;
    Pipeline *pl = t->pl;
    char err[256];
    int wr = 0, ws = 1, w = world_from_env(&wr, &ws, err, sizeof err);
    int pp = pl ? pipeline_ranks(pl) : p->pp;   /* a stage's plan says pp=1 */
    int grid = p->dp * pp * p->tp;
    t->my_dp = w == 1 ? (wr / p->tp) % p->dp : -1;
    if (w == 1 && ws != grid)
        return fail(2, "%s: the launcher gives a world of %d processes but the plan's grid is "
                    "dp %d x pp %d x tp %d = %d ranks: launch %d processes or regenerate with "
                    "-D dp= -D pp= -D tp= that multiply to %d", p->path, ws,
                    p->dp, pp, p->tp, grid, grid, ws);
    return 0;
}

/* the MoE statistics over the MoE layers of every stage (pp > 1) or of the one plan */
static int trainer_init_moe_stats(Trainer *t) {
    const Plan *p = t->plan;
    Pipeline *pl = t->pl;
    const Plan *stages[64] = {p};
    int nst = pl ? pipeline_stages(pl) : 1;
    for (int s = 0; pl && s < nst && s < 64; s++) stages[s] = pipeline_stage_plan(pl, s);
    return moe_stats_init_stages(&t->moe, stages, nst < 64 ? nst : 64, p->dp, p->tp);
}

/* the plan's group=dp steps: what one optimizer step reduces over dp */
static void print_dp_reduction(const Plan *p) {
    int64_t dpb = 0;
    int nb = 0;
    for (int s = 0; s < p->nsteps; s++) {
        const PlanStep *st = &p->steps_[s];
        int reduction = st->kind == ST_ALLREDUCE || st->kind == ST_REDUCE_SCATTER;
        if (!reduction || (st->coll.group != GROUP_DP && st->coll.group != GROUP_EDP)) continue;
        dpb += st->coll.elems * (int64_t)plan_dtype_size(st->coll.dtype);
        if (st->coll.bucket + 1 > nb) nb = st->coll.bucket + 1;
    }
    char dpbs[32];
    format_bytes((double)dpb, dpbs, sizeof dpbs);
    printf("  dp gradient reduction per step: %s per rank in %d bucket%s (%s%s)\n", dpbs, nb,
           nb == 1 ? "" : "s", p->zero ? "reduce_scatter + gather_shards, ZeRO-1" : "allreduce",
           p->grad_accum > 1 ? ", last micro-batch only" : "");
}

/* the plan's alltoall steps, every slot at capacity */
static void print_expert_parallelism(const Plan *p) {
    int64_t b = 0;
    int n = 0;
    for (int s = 0; s < p->nsteps; s++) {
        const PlanStep *st = &p->steps_[s];
        if (st->kind != ST_ALLTOALL) continue;
        b += st->coll.experts * st->coll.capacity * st->coll.cols
             * (int64_t)plan_dtype_size(st->coll.dtype);
        n++;
    }
    char bs[32];
    format_bytes((double)b, bs, sizeof bs);
    printf("  expert parallelism: ep=%d, %d all-to-all steps per micro-batch, %s per rank at "
           "capacity (only filled slots travel)\n", p->ep, n, bs);
}

/* the run's header: model, layout, grid, data and the collectives' bytes per step */
static void print_run_summary(Trainer *t, const TokenSet *ts, int64_t nparams) {
    const Plan *p = t->plan;
    Pipeline *pl = t->pl;
    char err[256];
    char count[32], coll[32], tok[32], ntrain[32], nval[32];
    format_count((double)nparams, count, sizeof count);
    format_count((double)t->batcher.train_len, ntrain, sizeof ntrain);
    format_count((double)t->batcher.val_len, nval, sizeof nval);
    int64_t coll_bytes = 0;
    for (int s = 0; s < (pl ? pipeline_stages(pl) : 1); s++)
        coll_bytes += (pl ? plan_collective_bytes(pipeline_stage_plan(pl, s))
                          : engine_collective_bytes(t->e)) * p->grad_accum;
    format_bytes((double)coll_bytes, coll, sizeof coll);
    int64_t step_tokens = (int64_t)p->micro_batch * p->seq * p->grad_accum * p->dp;
    format_count((double)step_tokens, tok, sizeof tok);
    printf("boost train: run %s, model %s (%s, %d layers, hidden %d), %s parameters\n",
           p->run_name, p->model_name, p->family, p->layers, p->hidden, count);
    char dps[32] = "";
    if (p->dp > 1) snprintf(dps, sizeof dps, " x dp %d", p->dp);
    printf("  layout %s, tp=%d, dp=%d, backend %s; micro_batch %d x seq %d x grad_accum %d%s = "
           "%s tokens per step; %d steps\n", p->layout, p->tp, p->dp, t_backend(t), p->micro_batch,
           p->seq, p->grad_accum, dps, tok, p->steps);
    if (pl) printf("  pipeline: pp=%d ranks, %d stages, %s over %d micro-batches (%s)\n",
                   pipeline_ranks(pl), pipeline_stages(pl),
                   pipeline_stages(pl) > pipeline_ranks(pl) ? "interleaved 1F1B" : "1F1B",
                   p->grad_accum, pipeline_transport(pl));
    Grid grid;
    if (grid_make(&grid, p->dp, pl ? pipeline_ranks(pl) : p->pp, p->tp, err, sizeof err) == 0 &&
        grid_set_ep(&grid, p->ep > 1 ? p->ep : 1, err, sizeof err) == 0) {
        char gd[4096];
        grid_describe(&grid, gd, sizeof gd);
        printf("  %s", gd);
    }
    printf("  data %s: %s training tokens, %s validation tokens", ts->source, ntrain, nval);
    if (ts->nshards > 1) printf(" (%d shards)", ts->nshards);
    printf("\n");
    printf("  collective bytes per step: %s per rank (%lld bytes, %s layout, tp=%d%s)\n", coll,
           (long long)coll_bytes, p->layout, p->tp,
           p->tp == 1 ? ": the collectives are no-ops at tp=1, this is what they would carry" : "");
    if (p->dp > 1) print_dp_reduction(p);
    if (p->ep > 1) print_expert_parallelism(p);
    fflush(stdout);
}

/* the parameters: resumed from a checkpoint (--resume auto: the newest verified one of -o DIR, or
 * a fresh start) or initialised. *resumed: whether a checkpoint was read. 0 or the exit status */
static int trainer_start_params(Trainer *t, int *resumed) {
    const TrainOptions *opt = t->opt;
    const char *resume = opt->resume;
    char err[4096];
    if (resume && !strcmp(resume, "auto")) {
        int64_t *steps = NULL;
        int n = ckpt_list(opt->outdir, &steps);
        free(steps);
        resume = n > 0 ? opt->outdir : NULL;
        if (!resume)
            printf("--resume auto: no checkpoint in %s yet: starting at step 0\n", opt->outdir);
    }
    *resumed = resume != NULL;
    if (resume) return resume_from(t, resume);
    int bad = t->pl ? pipeline_init_params(t->pl, err, sizeof err)
                    : engine_init_params(t->e, err, sizeof err);
    if (bad) return fail(1, "%s", err);
    return 0;
}

/* the trainer set up over open data: checks, engine, summary, parameters, log; then the loop */
static int train_prepared(Trainer *t, const TokenSet *ts) {
    Plan *p = t->plan;
    const TrainOptions *opt = t->opt;
    char err[4096];
    int64_t nparams = 0;
    if (trainer_alloc(t, &nparams)) return fail(1, "out of memory");
    int rc = trainer_check_world(t);
    if (rc) return rc;
    if (!t->pl) {
        t->e = engine_create(p, opt->backend ? opt->backend : "auto", err, sizeof err);
        if (!t->e) return fail(1, "%s", err);
    }
    if (trainer_init_moe_stats(t)) return fail(1, "out of memory");
    print_run_summary(t, ts, nparams);
    int resumed = 0;
    rc = trainer_start_params(t, &resumed);
    if (rc) return rc;
    if (t->step >= p->steps) {
        printf("nothing to do: the checkpoint is at step %d of %d (raise steps with -D steps=N)\n",
               t->step, p->steps);
        return 0;
    }
    TrainLog lg;
    if (trainlog_open(&lg, opt->log_path, resumed ? t->step : -1, p->steps, opt->print_every,
                      opt->quiet, err, sizeof err) ||
        (opt->tensorboard && trainlog_tensorboard(&lg, opt->tensorboard, err, sizeof err)))
        return fail(1, "%s", err);
    catch_stop_signals(1);
    rc = run_loop(t, &lg);
    if (t->pending && t->nprocs == 1) finish_async(t, &lg);   // a failed run still publishes it
    catch_stop_signals(0);
    if (trainlog_close(&lg) && rc == 0) rc = fail(1, "%s", lg.error);
    return rc;
}

static int train_run(Plan *p, Pipeline *pl, const TrainOptions *opt) {
    Trainer t;
    trainer_identify(&t, p, pl, opt);
    if (opt->resume && !strcmp(opt->resume, "auto") && !opt->outdir)
        return fail(2, "--resume auto resumes from the run's own checkpoints: it needs -o DIR");
    if (opt->resume && !opt->outdir)
        printf("note: resuming without -o: no checkpoints will be saved\n");

    TokenSet ts;
    int rc = open_training_data(&t, &ts);
    if (rc) { trainer_free(&t); return rc; }
    rc = train_prepared(&t, &ts);
    tokenset_close(&ts);
    trainer_free(&t);
    return rc;
}

int train_with_plan(Plan *p, const TrainOptions *opt) { return train_run(p, NULL, opt); }

int train_with_pipeline(Pipeline *pl, const TrainOptions *opt) {
    Plan *p = pipeline_stage_plan(pl, 0);
    /* -D overrides went to stage 0's plan: the others follow */
    for (int s = 1; s < pipeline_stages(pl); s++) {
        Plan *q = pipeline_stage_plan(pl, s);
        q->steps = p->steps; q->warmup = p->warmup; q->eval_every = p->eval_every;
        q->max_bad_steps = p->max_bad_steps;
        q->lr = p->lr; q->min_lr = p->min_lr; q->beta1 = p->beta1; q->beta2 = p->beta2;
        q->adam_eps = p->adam_eps;
        q->weight_decay = p->weight_decay; q->clip = p->clip; q->val_fraction = p->val_fraction;
        memcpy(q->data_path, p->data_path, sizeof q->data_path);
    }
    return train_run(p, pl, opt);
}
