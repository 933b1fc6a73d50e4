/* infer.c: the checkpoint -> plan -> engine path shared by `boost eval`, `boost sample` and
 * `boost export` (cli/infer.h). The plan is the training run's own (DIR/plan/plan.txt beside the
 * step folders) when nothing asks for another; otherwise the run spec is regenerated into a
 * temporary folder, with the checkpoint's model and the training plan's seq and data as
 * defaults. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli/infer.h"
#include "gen/gen.h"              // defines: spec_load_run, parse_override, gen_write
#include "runtime/safetensors.h"  // defines: st_open, st_find, st_read_f32
#include "runtime/pipeline.h"     // defines: pipeline_open (a pipelined run's settings)

int infer_int_arg(const char *cmd, const char *flag, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v ? v : "", &end, 10);
    if (!v || end == v || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "%s: %s needs a whole number in [%ld, %ld], got '%s'\n", cmd, flag, lo,
                hi, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

int infer_num_arg(const char *cmd, const char *flag, const char *v, double *out) {
    char *end;
    double x = strtod(v ? v : "", &end);
    if (!v || end == v || *end || !isfinite(x)) {
        fprintf(stderr, "%s: %s needs a number, got '%s'\n", cmd, flag, v ? v : "");
        return -1;
    }
    *out = x;
    return 0;
}

static int user_sets(const InferOptions *o, const char *name) {
    size_t n = strlen(name);
    for (int i = 0; i < o->ndefs; i++)
        if (!strncmp(o->defs[i], name, n) && o->defs[i][n] == '=') return 1;
    return 0;
}

static uint64_t plan_fingerprint(const Plan *p) {
    StEntry *e = calloc((size_t)p->ncanons + 1, sizeof *e);
    if (!e) return 0;
    for (int c = 0; c < p->ncanons; c++) {
        e[c].name = p->canons[c].name;
        e[c].rows = p->canons[c].rows;
        e[c].cols = p->canons[c].cols;
    }
    uint64_t fp = ckpt_fingerprint(e, p->ncanons);
    free(e);
    return fp;
}

/* The same over a pipelined run's stages, in their order (as the training loop lists them). */
static uint64_t pipeline_fingerprint(const Pipeline *pl) {
    int n = pipeline_canon_count(pl);
    StEntry *e = calloc((size_t)n + 1, sizeof *e);
    if (!e) return 0;
    for (int c = 0; c < n; c++) {
        const PlanCanon *pc = pipeline_canon(pl, c);
        e[c] = (StEntry){pc->name, pc->rows, pc->cols};
    }
    uint64_t fp = ckpt_fingerprint(e, n);
    free(e);
    return fp;
}

/* The training run's plan when it still fits the checkpoint (the step folder's parent holds
 * plan/plan.txt when trained with -o): a plain plan in *tp, or a pipelined one in *tpl with its
 * stage 0 (which holds the run's settings) in *tp. Both NULL when there is none. */
static void find_training_plan(Infer *in, const char *train_plan, Plan **tp, Pipeline **tpl) {
    char err[4096];
    *tp = NULL;
    *tpl = NULL;
    if (access(train_plan, R_OK) == 0 && pipeline_plan_is(train_plan) == 1) {
        *tpl = pipeline_open(train_plan, NULL, err, sizeof err);
        if (*tpl && pipeline_fingerprint(*tpl) == in->st.fingerprint)
            *tp = pipeline_stage_plan(*tpl, 0);
    } else if (access(train_plan, R_OK) == 0) {
        *tp = plan_load(train_plan, err, sizeof err);
        if (*tp && plan_fingerprint(*tp) != in->st.fingerprint) { plan_free(*tp); *tp = NULL; }
    }
}

/* names[*n] = name, vals[*n] = the printf of fmt; *n grows by one. */
static void add_setting(const char *names[8], char vals[8][600], int *n, const char *name,
                        const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    names[*n] = name;
    vsnprintf(vals[*n], sizeof vals[0], fmt, ap);
    va_end(ap);
    (*n)++;
}

/* The -D settings the regenerated plan gets before the user's own: the checkpoint's model, the
 * training plan's seq, data, val_fraction, seed and micro_batch (tp may be NULL), and pp=dp=1,
 * each unless the user sets it. names[i] = vals[i]; returns how many (at most 8). */
static int default_overrides(const InferOptions *o, const Infer *in, const Plan *tp,
                             const char *names[8], char vals[8][600]) {
    int n = 0;
    if (!o->run && !user_sets(o, "model"))
        add_setting(names, vals, &n, "model", "%s", in->st.model);
    if (tp) {
        if (!user_sets(o, "seq")) add_setting(names, vals, &n, "seq", "%d", tp->seq);
        if (!user_sets(o, "data")) add_setting(names, vals, &n, "data", "%s", tp->data_path);
        if (!user_sets(o, "val_fraction"))
            add_setting(names, vals, &n, "val_fraction", "%.17g", tp->val_fraction);
        if (!user_sets(o, "seed"))
            add_setting(names, vals, &n, "seed", "%llu", (unsigned long long)tp->seed);
        if (!o->one_sequence && !user_sets(o, "micro_batch"))
            add_setting(names, vals, &n, "micro_batch", "%d", tp->micro_batch);
    }
    // inference runs tensor parallel only: a pipelined or data-parallel run's checkpoint (the
    // canonical tensors do not depend on pp or dp) is read by a pp=1 dp=1 plan unless -D says
    if (!user_sets(o, "pp")) add_setting(names, vals, &n, "pp", "1");
    if (!user_sets(o, "dp")) add_setting(names, vals, &n, "dp", "1");
    return n;
}

/* Write run's plans into a new temporary folder (in->tmpdir) and load the one inference reads
 * (infer.txt with its prefill.txt when decoding, else plan.txt) into in->plan (and in->pre).
 * Returns 0, 1 or 2 with the message printed. */
static int write_and_load_plan(const InferOptions *o, Infer *in, Run *run) {
    char err[4096];
    snprintf(in->tmpdir, sizeof in->tmpdir, "/tmp/boost-infer.XXXXXX");
    if (!mkdtemp(in->tmpdir)) {
        fprintf(stderr, "%s: cannot create a temporary folder: %s\n", o->cmd, strerror(errno));
        in->tmpdir[0] = 0;
        return 1;
    }
    char plan_dir[128], plan_file[160];
    snprintf(plan_dir, sizeof plan_dir, "%s/plan", in->tmpdir);
    int rc = gen_write(run, plan_dir, err, sizeof err);
    if (rc) { fprintf(stderr, "%s: %s\n", o->cmd, err); return rc; }
    snprintf(plan_file, sizeof plan_file, "%s/%s", plan_dir, o->decode ? "infer.txt" : "plan.txt");
    if (o->decode && access(plan_file, R_OK) != 0) {
        fprintf(stderr, "%s: model %s has no decode plan with a KV cache (MoE models have none "
                "yet): use --no-cache\n", o->cmd, in->st.model);
        return 2;
    }
    in->plan = plan_load(plan_file, err, sizeof err);
    if (!in->plan) { fprintf(stderr, "%s: %s\n", o->cmd, err); return 2; }
    if (o->decode) {   /* the prefill step, when the generator wrote one */
        snprintf(plan_file, sizeof plan_file, "%s/prefill.txt", plan_dir);
        if (access(plan_file, R_OK) == 0 && !(in->pre = plan_load(plan_file, err, sizeof err))) {
            fprintf(stderr, "%s: %s\n", o->cmd, err);
            return 2;
        }
    }
    return 0;
}

/* Regenerate the plan: the user's run (or the checkpoint's), defaults from the checkpoint and the
 * training plan tp (may be NULL; freed here with tpl), then the user's -D. 0, 1 or 2 (printed). */
static int regenerate_plan(const InferOptions *o, Infer *in, Plan *tp, Pipeline *tpl) {
    char err[4096];
    char vals[8][600];
    const char *names[8];
    int nextra = default_overrides(o, in, tp, names, vals);
    if (tpl) pipeline_free(tpl);
    else if (tp) plan_free(tp);
    Override ov[INFER_MAX_DEFS + 8];
    int nov = 0;
    for (int i = 0; i < nextra; i++) { ov[nov].name = names[i]; ov[nov++].value = vals[i]; }
    for (int i = 0; i < o->ndefs; i++)
        if (parse_override(o->defs[i], &ov[nov++], err, sizeof err) < 0) {
            fprintf(stderr, "%s: %s\n", o->cmd, err);
            return 2;
        }
    if (o->one_sequence) {   // last, so that no -D changes them: sampling feeds one sequence
        ov[nov].name = "micro_batch"; ov[nov++].value = "1";
        ov[nov].name = "grad_accum"; ov[nov++].value = "1";
    }
    const char *run_arg = o->run ? o->run : in->st.run;
    if (!run_arg[0]) {
        fprintf(stderr, "%s: %s/state.json names no run: give the run spec with --run RUN\n",
                o->cmd, in->dir);
        return 2;
    }
    Run *run = calloc(1, sizeof *run);
    if (!run) { fprintf(stderr, "%s: out of memory\n", o->cmd); return 1; }
    int rc = spec_load_run(run_arg, ov, nov, run, err, sizeof err);
    if (rc) {
        fprintf(stderr, "%s\n%s: could not build a plan for the checkpoint's model from run "
                "'%s'%s\n", err, o->cmd, run_arg,
                o->run ? "" : " (named in its state.json): give the run spec with --run RUN");
        free(run);
        return 2;
    }
    rc = write_and_load_plan(o, in, run);
    free(run);
    if (rc) return rc;
    snprintf(in->plan_source, sizeof in->plan_source, "run %s regenerated", run_arg);
    return 0;
}

/* The plan must hold the checkpoint's model (same canonical tensors, same names) and run tensor
 * parallel only. 0, or 2 with the message printed. */
static int check_plan_fits(const InferOptions *o, const Infer *in) {
    uint64_t fp = plan_fingerprint(in->plan);
    // the names too: CoLA and SVD factors of one rank have the same tensors but another sigma
    if (fp != in->st.fingerprint || strcmp(in->st.model, in->plan->model_name)) {
        fprintf(stderr, "%s: %s holds model '%s' (%d canonical tensors, fingerprint 0x%016llx), "
                "but the plan (%s) is model '%s' (%d canonical tensors, fingerprint 0x%016llx): "
                "use the run the checkpoint was trained with (leave out --run and -D model=)\n",
                o->cmd, in->dir, in->st.model, in->st.ncanons,
                (unsigned long long)in->st.fingerprint, in->plan_source, in->plan->model_name,
                in->plan->ncanons, (unsigned long long)fp);
        return 2;
    }
    if (in->plan->pp != 1 || in->plan->dp != 1) {
        fprintf(stderr, "%s: the plan has pp=%d dp=%d; inference runs tensor parallel only: add "
                "-D pp=1 -D dp=1\n", o->cmd, in->plan->pp, in->plan->dp);
        return 2;
    }
    return 0;
}

int infer_open_plan(const InferOptions *o, Infer *in) {
    char err[4096];
    memset(in, 0, sizeof *in);
    in->logits_tensor = -1;
    char notes[4096];
    /* the weights alone: the AdamW moments are for resuming training (boost train --resume) */
    if (ckpt_resolve_for(o->ckpt, CKPT_NEED_WEIGHTS, in->dir, sizeof in->dir, notes, sizeof notes,
                         err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", o->cmd, err);
        return 2;
    }
    /* newer checkpoints passed over */
    if (notes[0]) fprintf(stderr, "%s: warning: %s\n", o->cmd, notes);
    if (ckpt_verify_advise_for(in->dir, CKPT_NEED_WEIGHTS, err, sizeof err) == CKPT_DAMAGED ||
        ckpt_read_state(in->dir, &in->st, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", o->cmd, err);
        return 2;
    }
    char train_plan[1300];
    snprintf(train_plan, sizeof train_plan, "%s/../plan/plan.txt", in->dir);
    Plan *tp;
    Pipeline *tpl;
    find_training_plan(in, train_plan, &tp, &tpl);
    /* the run's own plan as it is: a tensor-parallel one (pp = dp = 1) */
    if (tp && !tpl && tp->pp == 1 && tp->dp == 1 && !o->run && o->ndefs == 0 && !o->decode &&
        !(o->one_sequence && (tp->micro_batch != 1 || tp->grad_accum != 1))) {
        in->plan = tp;
        snprintf(in->plan_source, sizeof in->plan_source, "%s", train_plan);
    } else {
        int rc = regenerate_plan(o, in, tp, tpl);
        if (rc) return rc;
    }
    return check_plan_fits(o, in);
}

int infer_start_engine(const InferOptions *o, Infer *in) {
    char err[4096];
    Plan *p = in->plan;
    for (int s = 0; s < p->nsteps && !in->xent; s++)
        if (p->steps_[s].kind == ST_KERNEL && !strcmp(p->steps_[s].kernel->kind, "xent_fwd"))
            in->xent = p->steps_[s].kernel;
    int op = in->xent ? kernel_op(in->xent, "logits") : -1;
    if (op < 0) {
        fprintf(stderr, "%s: %s: no xent_fwd step with a logits operand\n", o->cmd,
                in->plan_source);
        return 2;
    }
    in->logits_tensor = in->xent->op[op].tensor;
    PlanTensor *t = &p->tensors[in->logits_tensor];
    if (t->kind == TK_ACT) {
        // the arena reuses the logits' memory after the cross-entropy: move them past its end so
        // they survive the pass (only an address changes; every step computes what it did)
        int64_t offset = (p->arena_bytes + 255) / 256 * 256;
        t->offset = offset;
        p->arena_bytes = offset + t->rows * t->cols * (int64_t)plan_dtype_size(t->dtype);
    }
    in->local = malloc(sizeof(float) * (size_t)(t->rows * t->cols));
    if (!in->local) { fprintf(stderr, "%s: out of memory\n", o->cmd); return 1; }
    in->e = engine_create(p, o->backend ? o->backend : "auto", err, sizeof err);
    if (!in->e) { fprintf(stderr, "%s: %s\n", o->cmd, err); return 1; }
    if (in->pre) {
        decoder_keep_logits(in->pre);
        in->pe = engine_create(in->pre, o->backend ? o->backend : "auto", err, sizeof err);
        if (!in->pe) { fprintf(stderr, "%s: %s\n", o->cmd, err); return 1; }
    }

    // the parameters, from a full or a sharded checkpoint (runtime/checkpoint.h)
    CkptReader *rd;
    int64_t largest = 1;
    for (int c = 0; c < p->ncanons; c++)
        if (p->canons[c].rows * p->canons[c].cols > largest)
            largest = p->canons[c].rows * p->canons[c].cols;
    if (ckpt_reader_open_weights(in->dir, &rd, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", o->cmd, err);
        return 2;
    }
    float *buf = malloc(sizeof(float) * (size_t)largest);
    int rc = buf ? 0 : 1;
    for (int c = 0; c < p->ncanons && !rc; c++) {
        int64_t rows = 0, cols = 0;
        int i = ckpt_reader_find(rd, p->canons[c].name, 0);
        if (i >= 0) ckpt_reader_tensor(rd, i, NULL, &rows, &cols);
        if (i < 0 || rows * cols != p->canons[c].rows * p->canons[c].cols) {
            fprintf(stderr, "%s: %s: tensor %s is %s; expected F32 with %lldx%lld elements: the "
                    "checkpoint is damaged or of another model\n", o->cmd, in->dir,
                    p->canons[c].name, i < 0 ? "missing" : "of another shape",
                    (long long)p->canons[c].rows, (long long)p->canons[c].cols);
            rc = 2;
            break;
        }
        if (ckpt_reader_read(rd, i, NULL, 0, buf, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", o->cmd, err);
            rc = 2;
            break;
        }
        if (engine_set_canon(in->e, c, SLOT_PARAM, buf) ||
            (in->pe && engine_set_canon(in->pe, c, SLOT_PARAM, buf))) {
            fprintf(stderr, "%s: the engine refused %s\n", o->cmd, p->canons[c].name);
            rc = 1;
        }
    }
    free(buf);
    ckpt_reader_close(rd);
    if (!rc && o->decode && decoder_init(&in->dec, p, in->e, in->pre, in->pe, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", o->cmd, err);
        rc = 2;
    }
    return rc;
}

int infer_forward(Infer *in, const int32_t *tokens, const int32_t *targets, float *logits,
                  float *loss) {
    char err[2048];
    float l;
    if (engine_forward(in->e, tokens, targets, &l, err, sizeof err)) {
        fprintf(stderr, "forward pass: %s\n", err);
        return 1;
    }
    if (loss) *loss = l;
    if (!logits) return 0;
    const Plan *p = in->plan;
    const KernelArgs *k = in->xent;
    int op = kernel_op(k, "logits");
    const PlanTensor *t = &p->tensors[in->logits_tensor];
    int64_t M = (int64_t)p->micro_batch * p->seq, V = p->vocab;
    for (int rank = 0; rank < p->tp; rank++) {
        int64_t rows = kernel_int(k, "rows", rank, -1), cols = kernel_int(k, "cols", rank, -1);
        int64_t ld = kernel_int(k, "ldl", rank, cols);
        int64_t voff = kernel_int(k, "vocab_offset", rank, 0);
        int64_t off = rank_int(k->op[op].off, rank);
        if (rows != M || cols <= 0 || voff < 0 || voff + cols > V ||
            off + (rows - 1) * ld + cols > t->rows * t->cols) {
            fprintf(stderr, "forward pass: the xent_fwd step of rank %d (rows=%lld cols=%lld "
                    "vocab_offset=%lld) does not cover [%lld, %lld] logits\n", rank,
                    (long long)rows, (long long)cols, (long long)voff, (long long)M, (long long)V);
            return 1;
        }
        if (engine_read_tensor(in->e, rank, t->name, in->local, err, sizeof err)) {
            fprintf(stderr, "forward pass: %s\n", err);
            return 1;
        }
        for (int64_t m = 0; m < M; m++)
            memcpy(logits + m * V + voff, in->local + off + m * ld, sizeof(float) * (size_t)cols);
    }
    return 0;
}

void infer_close(Infer *in) {
    decoder_release(&in->dec);
    if (in->pe) engine_free(in->pe);
    if (in->pre) plan_free(in->pre);
    if (in->e) engine_free(in->e);
    if (in->plan) plan_free(in->plan);
    free(in->local);
    ckpt_state_free(&in->st);
    if (in->tmpdir[0]) ckpt_remove_tree(in->tmpdir);
    memset(in, 0, sizeof *in);
}

int infer_max_seq(const Plan *p) {
    for (int s = 0; s < p->nsteps; s++)
        if (p->steps_[s].kind == ST_KERNEL &&
            !strcmp(p->steps_[s].kernel->kind, "attention_decode"))
            return (int)kernel_int(p->steps_[s].kernel, "max_seq", 0, 0);
    return 0;
}

int infer_prefill(Infer *in, const int32_t *tok, int n, float *logits) {
    char err[1024];
    if (decoder_prefill(&in->dec, tok, n, logits, err, sizeof err)) {
        fprintf(stderr, "prefill: %s\n", err);
        return 1;
    }
    return 0;
}

int infer_decode_step(Infer *in, int32_t tok, float *logits) {
    char err[1024];
    if (decoder_step(&in->dec, tok, logits, err, sizeof err)) {
        fprintf(stderr, "decode step: %s\n", err);
        return 1;
    }
    return 0;
}
