/* train.c: the training loop. From a loaded plan: load and split the data, create the Engine,
 * initialise or resume from a checkpoint (any tp: tensors travel as full canonical tensors), then
 * per step grad_accum micro-batches, one AdamW step, validation every eval_every steps and at the
 * end, checkpoints every save_every steps and at the end. A NaN/inf loss or gradient norm stops
 * the run (exit 1) before anything is saved over a good checkpoint; SIGINT/SIGTERM stop it after
 * the step under way with a checkpoint (exit 130/143). Multi-process mode (one process per GPU,
 * runtime/world.h): every rank of a tp group reads the same data (dp ranks read their own slice of
 * each global micro-batch, runtime/data.h) and takes part in every gather; only rank 0
 * writes checkpoints (cli/train.c keeps the other ranks' output quiet). */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime/train.h"        // defines: TrainOptions, TrainLog, train_with_plan
#include "runtime/runtime.h"      // defines: Engine, engine_*
#include "runtime/data.h"         // defines: TokenSet, Batcher, data_open, batcher_*
#include "runtime/checkpoint.h"   // defines: CkptState, ckpt_*
#include "runtime/world.h"        // defines: world_rank

typedef struct {
    Plan *plan;
    const TrainOptions *opt;
    Engine *e;
    StEntry *canons;          /* [ncanons] names and full shapes, in plan order */
    int ncanons;
    int64_t largest;          /* elements of the largest canon */
    float *buf;               /* [largest] */
    Batcher batcher;
    int32_t *inputs, *targets;   /* [micro_batch * seq] each */
    int64_t data_seq;         /* training windows consumed by all dp ranks together (the batcher's position) */
    int dp, dp_rank;          /* this process's slice of every global micro-batch (dp 1: all of it) */
    int step;                 /* optimizer steps done */
    float *losses;            /* [plan->steps] training loss per step (index step-1) */
    float *val_losses; int64_t *val_steps; int nval, val_cap;
    int bad_canon;            /* a non-finite parameter found while saving, or -1 */
    char last_ckpt[1200];
    int follower;             /* multi-process mode, rank > 0: gathers for rank 0's checkpoints, writes nothing */
} Trainer;

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
    for (int i = 0; i < nov; i++) {
        const char *k = ov[i].name, *v = ov[i].value;
        char *end;
        double x = strtod(v, &end);
        int numeric = end != v && *end == 0 && isfinite(x);
        int integer = numeric && x == (double)(long long)x && x >= 0 && x <= 2e9;
        if (!strcmp(k, "data")) { snprintf(p->data_path, sizeof p->data_path, "%s", v); continue; }
        if (!numeric) { snprintf(err, errlen, "-D %s=%s: expected a number", k, v); return 2; }
        if (!strcmp(k, "steps") || !strcmp(k, "warmup") || !strcmp(k, "eval_every")) {
            if (!integer || (!strcmp(k, "steps") && x < 1)) { snprintf(err, errlen, "-D %s=%s: expected a whole number%s", k, v, !strcmp(k, "steps") ? " >= 1" : " >= 0"); return 2; }
            if (!strcmp(k, "steps")) p->steps = (int)x;
            else if (!strcmp(k, "warmup")) p->warmup = (int)x;
            else p->eval_every = (int)x;
        } else if (!strcmp(k, "lr")) p->lr = x;
        else if (!strcmp(k, "min_lr")) p->min_lr = x;
        else if (!strcmp(k, "beta1")) p->beta1 = x;
        else if (!strcmp(k, "beta2")) p->beta2 = x;
        else if (!strcmp(k, "adam_eps")) p->adam_eps = x;
        else if (!strcmp(k, "weight_decay")) p->weight_decay = x;
        else if (!strcmp(k, "clip")) p->clip = x;
        else if (!strcmp(k, "val_fraction")) {
            if (!(x >= 0 && x < 1)) { snprintf(err, errlen, "-D val_fraction=%s: must be in [0, 1)", v); return 2; }
            p->val_fraction = x;
        } else {
            snprintf(err, errlen, "-D %s: with --plan only training settings can change (steps, lr, min_lr, warmup, "
                     "eval_every, beta1, beta2, adam_eps, weight_decay, clip, data, val_fraction); '%s' is fixed in "
                     "the plan: regenerate it with 'boost gen RUN -D %s=%s'", k, k, k, v);
            return 2;
        }
    }
    return 0;
}

/* ---- checkpoints ---- */

static int fill_from_engine(void *ctx, int slot, int canon, float *out) {
    Trainer *t = ctx;
    static const int slots[3] = {SLOT_PARAM, SLOT_ADAM_M, SLOT_ADAM_V};
    if (engine_get_canon(t->e, canon, slots[slot], out) != 0) return 1;
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
            if (rc == 2) return fail(1, "checkpoint at step %d not saved: parameter %s holds NaN or inf values (the training "
                                     "diverged)", t->step, t->canons[c].name);
            if (rc) return fail(1, "checkpoint at step %d: gathering %s across the processes failed", t->step, t->canons[c].name);
        }
    return 0;
}

static int save_checkpoint(Trainer *t, TrainLog *lg) {
    if (t->follower) return follow_checkpoint(t);
    CkptState st = {0};
    const Plan *p = t->plan;
    st.step = t->step;
    st.data_sequences = t->data_seq;
    st.data_position = t->data_seq / p->micro_batch;
    st.seed = p->seed;
    snprintf(st.model, sizeof st.model, "%s", p->model_name);
    snprintf(st.run, sizeof st.run, "%s", p->run_name);
    snprintf(st.layout, sizeof st.layout, "%s", p->layout);
    snprintf(st.backend, sizeof st.backend, "%s", engine_backend_name(t->e));
    st.fingerprint = ckpt_fingerprint(t->canons, t->ncanons);
    st.ncanons = t->ncanons;
    st.tp = p->tp;
    st.losses = t->losses;
    st.nlosses = t->step;
    st.val_losses = t->val_losses;
    st.val_steps = t->val_steps;
    st.nval = t->nval;
    char err[4096], saved[1200];
    t->bad_canon = -1;
    double t0 = now_s();
    if (ckpt_save(t->opt->outdir, &st, t->canons, t->ncanons, fill_from_engine, t, saved, sizeof saved, err, sizeof err)) {
        if (t->bad_canon >= 0)
            return fail(1, "%s: not saved: parameter %s holds NaN or inf values (the training diverged); earlier "
                        "checkpoints are untouched", saved, t->canons[t->bad_canon].name);
        return fail(1, "%s", err);
    }
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", saved);
    if (!t->opt->quiet) trainlog_note(lg, "saved %s (%.2fs)", saved, now_s() - t0);
    return 0;
}

static int resume_from(Trainer *t, const char *arg) {
    char dir[1200], err[4096];
    if (ckpt_resolve(arg, dir, sizeof dir, err, sizeof err)) return fail(2, "%s", err);
    CkptState st;
    if (ckpt_read_state(dir, &st, err, sizeof err)) return fail(2, "%s", err);
    uint64_t fp = ckpt_fingerprint(t->canons, t->ncanons);
    if (st.fingerprint != fp) {
        int rc = fail(2, "%s: a checkpoint of model '%s' (%d canonical tensors, fingerprint 0x%016llx), but this run "
                      "trains model '%s' (%d canonical tensors, fingerprint 0x%016llx): resume with the run it came from",
                      dir, st.model, st.ncanons, (unsigned long long)st.fingerprint, t->plan->model_name, t->ncanons,
                      (unsigned long long)fp);
        ckpt_state_free(&st);
        return rc;
    }
    if (st.step > t->plan->steps) {
        int rc = fail(2, "%s: the checkpoint is at step %lld, past this run's %d steps: raise steps (-D steps=N)",
                      dir, (long long)st.step, t->plan->steps);
        ckpt_state_free(&st);
        return rc;
    }
    StFile model, optim;
    if (ckpt_open_tensors(dir, t->canons, t->ncanons, &model, &optim, err, sizeof err)) {
        ckpt_state_free(&st);
        return fail(2, "%s", err);
    }
    char name[160];
    const char *prefix[3] = {"", "m.", "v."};
    const int slots[3] = {SLOT_PARAM, SLOT_ADAM_M, SLOT_ADAM_V};
    for (int c = 0; c < t->ncanons; c++)
        for (int s = 0; s < 3; s++) {
            snprintf(name, sizeof name, "%s%s", prefix[s], t->canons[c].name);
            const StFile *f = s ? &optim : &model;
            st_read_f32(f, st_find(f, name), t->buf);
            if (engine_set_canon(t->e, c, slots[s], t->buf) != 0) {
                st_close(&model); st_close(&optim); ckpt_state_free(&st);
                return fail(1, "%s: the engine refused tensor %s", dir, name);
            }
        }
    st_close(&model);
    st_close(&optim);
    t->step = (int)st.step;
    // older checkpoints count micro-batches of a dp=1 run only
    t->data_seq = st.data_sequences >= 0 ? st.data_sequences : st.data_position * t->plan->micro_batch;
    for (int i = 0; i < st.nlosses && i < t->plan->steps; i++) t->losses[i] = st.losses[i];
    for (int i = 0; i < st.nval; i++) {
        if (t->nval == t->val_cap) break;
        t->val_steps[t->nval] = st.val_steps[i];
        t->val_losses[t->nval++] = st.val_losses[i];
    }
    printf("resumed from %s: step %lld, data position %lld (%lld sequences; saved at tp=%d %s, now tp=%d %s)\n", dir,
           (long long)st.step, (long long)st.data_position, (long long)t->data_seq, st.tp, st.layout, t->plan->tp, t->plan->layout);
    if (st.seed != t->plan->seed)
        printf("note: the checkpoint's seed 0x%llx differs from this run's 0x%llx: the data order changes from here\n",
               (unsigned long long)st.seed, (unsigned long long)t->plan->seed);
    snprintf(t->last_ckpt, sizeof t->last_ckpt, "%s", dir);
    ckpt_state_free(&st);
    return 0;
}

/* Mean loss over the validation micro-batches; *loss = -1 when there is no validation part. */
static int validate(Trainer *t, double *loss) {
    int64_t n = batcher_val_batches(&t->batcher, t->opt->val_batches > 0 ? t->opt->val_batches : 8);
    *loss = -1;
    if (n <= 0) return 0;
    double sum = 0;
    char err[1024], num[32];
    for (int64_t i = 0; i < n; i++) {
        float l;
        if (batcher_val(&t->batcher, i, t->inputs, t->targets)) return fail(2, "%s", t->batcher.err);
        if (engine_forward(t->e, t->inputs, t->targets, &l, err, sizeof err))
            return fail(1, "validation at step %d: %s", t->step, err);
        sum += l;
    }
    *loss = sum / (double)n;
    if (!isfinite(*loss))
        return fail(1, "step %d: the validation loss is %s: training diverged (lr %g); stopping without saving%s%s",
                    t->step, show(*loss, num, sizeof num), t->plan->lr, t->last_ckpt[0] ? "; latest checkpoint: " : "", t->last_ckpt);
    if (t->nval < t->val_cap) {
        t->val_steps[t->nval] = t->step;
        t->val_losses[t->nval++] = (float)*loss;
    }
    return 0;
}

static void trainer_free(Trainer *t) {
    if (t->e) engine_free(t->e);
    batcher_free(&t->batcher);
    free(t->canons); free(t->buf); free(t->inputs); free(t->targets);
    free(t->losses); free(t->val_losses); free(t->val_steps);
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

static int run_loop(Trainer *t, TrainLog *lg) {
    const Plan *p = t->plan;
    const int64_t tokens_per_step = (int64_t)p->micro_batch * p->seq * p->grad_accum;
    const int should_save = t->opt->outdir != NULL;
    char err[1024], num[32];
    double train_time = 0, first_loss = -1, first_val = -1, last_val = -1, last_loss = -1;
    int first_step = t->step;
    if (t->nval > 0) first_val = t->val_losses[0];

    if (t->step == 0) {
        double v;
        if (validate(t, &v)) return 1;
        if (v >= 0) { trainlog_initial_val(lg, v); first_val = v; }
    }
    while (t->step < p->steps) {
        double t0 = now_s(), sum = 0;
        for (int a = 0; a < p->grad_accum; a++) {
            float l;
            if (batcher_global(&t->batcher, t->data_seq, t->dp_rank, t->dp, t->inputs, t->targets))
                return fail(2, "step %d: %s; stopping without saving", t->step + 1, t->batcher.err);
            t->data_seq = batcher_next(&t->batcher, t->data_seq, t->dp);
            if (engine_forward_backward(t->e, t->inputs, t->targets, &l, err, sizeof err))
                return fail(1, "step %d: %s", t->step + 1, err);
            sum += l;
        }
        double loss = sum / p->grad_accum;
        if (!isfinite(loss))
            return fail(1, "step %d: the loss is %s: training diverged (lr %g); stopping without saving%s%s",
                        t->step + 1, show(loss, num, sizeof num), p->lr, t->last_ckpt[0] ? "; latest checkpoint: " : "", t->last_ckpt);
        float grad_norm, lr;
        if (engine_optimizer_step(t->e, t->step, &grad_norm, &lr, err, sizeof err))
            return fail(1, "step %d: optimizer: %s", t->step + 1, err);
        if (!isfinite(grad_norm))
            return fail(1, "step %d: the gradient norm is %s: training diverged (lr %g); stopping without saving%s%s",
                        t->step + 1, show(grad_norm, num, sizeof num), p->lr, t->last_ckpt[0] ? "; latest checkpoint: " : "", t->last_ckpt);
        double dt = now_s() - t0;
        train_time += dt;
        t->losses[t->step] = (float)loss;
        t->step++;
        if (first_loss < 0) first_loss = loss;
        last_loss = loss;

        StepReport r = {t->step, loss, -1, lr, grad_norm, (double)tokens_per_step / (dt > 0 ? dt : 1e-9), 0, 0};
        r.eta_s = train_time / (t->step - first_step) * (p->steps - t->step);
        r.avg_tokens_per_s = (double)tokens_per_step * (t->step - first_step) / (train_time > 0 ? train_time : 1e-9);
        if ((p->eval_every > 0 && t->step % p->eval_every == 0) || t->step == p->steps) {
            if (validate(t, &r.val_loss)) return 1;
            if (r.val_loss >= 0) last_val = r.val_loss;
        }
        trainlog_step(lg, &r);
        int saved_now = should_save && ((t->opt->save_every > 0 && t->step % t->opt->save_every == 0) || t->step == p->steps);
        if (saved_now && save_checkpoint(t, lg)) return 1;
        if (stop_signal && t->step < p->steps) {
            int sig = stop_signal;
            trainlog_note(lg, "stopped by %s after step %d%s", sig == SIGINT ? "SIGINT" : "SIGTERM", t->step,
                          should_save ? "" : " (no -o: nothing saved)");
            if (should_save && !saved_now && save_checkpoint(t, lg)) return 1;
            if (should_save) trainlog_note(lg, "resume with: --resume %s", t->last_ckpt);
            return 128 + sig;
        }
    }
    char tok[32], dur[32];
    int done = t->step - first_step;
    format_count(done > 0 ? (double)tokens_per_step * done / train_time : 0, tok, sizeof tok);
    format_duration(train_time, dur, sizeof dur);
    if (done > 0)
        trainlog_note(lg, "done: %d steps in %s (%s tok/s); loss %.4g -> %.4g%s%s", done, dur, tok, first_loss, last_loss,
                      should_save ? "; checkpoint " : "", should_save ? t->last_ckpt : "");
    if (first_val >= 0 && last_val >= 0) trainlog_note(lg, "validation loss %.4g -> %.4g", first_val, last_val);
    return 0;
}

int train_with_plan(Plan *p, const TrainOptions *opt) {
    char err[4096];
    Trainer t;
    memset(&t, 0, sizeof t);
    t.plan = p;
    t.opt = opt;
    t.bad_canon = -1;
    t.follower = world_rank() > 0;
    if (opt->resume && !opt->outdir)
        printf("note: resuming without -o: no checkpoints will be saved\n");

    // every process reads its own slice of each global micro-batch; the dp engine sets dp/dp_rank
    t.dp = 1;
    t.dp_rank = 0;
    TokenSet ts;
    int rc = data_open(p->data_path, &ts, err, sizeof err);
    if (rc) return fail(rc, "%s", err);
    rc = batcher_init_set(&t.batcher, &ts, p->val_fraction, p->micro_batch, p->seq, p->vocab, p->seed, err, sizeof err);
    if (rc) { tokenset_close(&ts); return fail(rc, "%s", err); }

    // the canonical tensors: what checkpoints hold, whatever the layout and tp
    t.ncanons = p->ncanons;
    t.canons = calloc((size_t)p->ncanons + 1, sizeof(StEntry));
    int64_t nparams = 0;
    for (int c = 0; c < p->ncanons; c++) {
        t.canons[c].name = p->canons[c].name;
        t.canons[c].rows = p->canons[c].rows;
        t.canons[c].cols = p->canons[c].cols;
        int64_t n = p->canons[c].rows * p->canons[c].cols;
        nparams += n;
        if (n > t.largest) t.largest = n;
    }
    size_t mbt = (size_t)p->micro_batch * p->seq;
    t.buf = malloc((size_t)(t.largest > 0 ? t.largest : 1) * sizeof(float));
    t.inputs = malloc(mbt * sizeof(int32_t));
    t.targets = malloc(mbt * sizeof(int32_t));
    t.losses = calloc((size_t)p->steps + 1, sizeof(float));
    t.val_cap = p->steps + 2;
    t.val_losses = calloc((size_t)t.val_cap, sizeof(float));
    t.val_steps = calloc((size_t)t.val_cap, sizeof(int64_t));
    if (!t.canons || !t.buf || !t.inputs || !t.targets || !t.losses || !t.val_losses || !t.val_steps) {
        tokenset_close(&ts); trainer_free(&t);
        return fail(1, "out of memory");
    }

    t.e = engine_create(p, opt->backend ? opt->backend : "auto", err, sizeof err);
    if (!t.e) { tokenset_close(&ts); trainer_free(&t); return fail(1, "%s", err); }

    char count[32], coll[32], tok[32], ntrain[32], nval[32];
    format_count((double)nparams, count, sizeof count);
    format_count((double)t.batcher.train_len, ntrain, sizeof ntrain);
    format_count((double)t.batcher.val_len, nval, sizeof nval);
    int64_t coll_bytes = engine_collective_bytes(t.e) * p->grad_accum;
    format_bytes((double)coll_bytes, coll, sizeof coll);
    format_count((double)((int64_t)p->micro_batch * p->seq * p->grad_accum), tok, sizeof tok);
    printf("boost train: run %s, model %s (%s, %d layers, hidden %d), %s parameters\n", p->run_name, p->model_name,
           p->family, p->layers, p->hidden, count);
    printf("  layout %s, tp=%d, backend %s; micro_batch %d x seq %d x grad_accum %d = %s tokens per step; %d steps\n",
           p->layout, p->tp, engine_backend_name(t.e), p->micro_batch, p->seq, p->grad_accum, tok, p->steps);
    printf("  data %s: %s training tokens, %s validation tokens", ts.source, ntrain, nval);
    if (ts.nshards > 1) printf(" (%d shards)", ts.nshards);
    printf("\n");
    printf("  collective bytes per step: %s per rank (%lld bytes, %s layout, tp=%d%s)\n", coll, (long long)coll_bytes,
           p->layout, p->tp, p->tp == 1 ? ": the collectives are no-ops at tp=1, this is what they would carry" : "");
    fflush(stdout);

    if (opt->resume) rc = resume_from(&t, opt->resume);
    else if (engine_init_params(t.e, err, sizeof err)) rc = fail(1, "%s", err);
    if (rc) { tokenset_close(&ts); trainer_free(&t); return rc; }
    if (t.step >= p->steps) {
        printf("nothing to do: the checkpoint is at step %d of %d (raise steps with -D steps=N)\n", t.step, p->steps);
        tokenset_close(&ts); trainer_free(&t);
        return 0;
    }

    TrainLog lg;
    if (trainlog_open(&lg, opt->log_path, opt->resume ? t.step : -1, p->steps, opt->print_every, opt->quiet, err, sizeof err)) {
        tokenset_close(&ts); trainer_free(&t);
        return fail(1, "%s", err);
    }
    catch_stop_signals(1);
    rc = run_loop(&t, &lg);
    catch_stop_signals(0);
    trainlog_close(&lg);
    tokenset_close(&ts);
    trainer_free(&t);
    return rc;
}
