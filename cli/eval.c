/* eval.c: `boost eval CKPT [--data FILE|GLOB] [--batches N|all] [--json]`: the mean cross-entropy,
 * perplexity and (byte-level data) bits per byte of a checkpoint, on the validation split of its
 * training data (the same micro-batches as the training loop's validation, runtime/data.c) or on
 * every window of seq+1 tokens of the given files (windows that do not fill a micro-batch are left
 * out, and said so). A progress bar on stderr when it is a terminal. */
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/commands.h"
#include "cli/infer.h"
#include "runtime/data.h"         // defines: data_load, batcher_init*, TokenStream
#include "runtime/mixture.h"      // defines: batcher_val, batcher_val_batches, batcher_free
#include "runtime/run_tokenizer.h"  // defines: run_data_open
#include "runtime/safetensors.h"  // defines: st_write_f32

static void eval_usage(FILE *f) {
    fprintf(f,
        "usage: boost eval CKPT [--data FILE|GLOB] [--batches N|all] [--json] [--run RUN] [-D name=value ...]\n"
        "                       [--backend cpu|cuda|auto]\n"
        "  CKPT           a checkpoint folder (DIR/step-NNNNNN), or a run's output folder (its newest step)\n"
        "  --data F       evaluate on these files (a text file, an llm.c .bin token file, or a quoted glob):\n"
        "                 every window of seq+1 tokens; default: the validation split of the training data\n"
        "  --batches N    micro-batches to evaluate (default: 8 on the validation split, as the training\n"
        "                 loop's validation does; every window of --data); 'all' for the whole split\n"
        "  --json         one JSON object instead of text\n"
        "  --logits FILE  also write the first micro-batch's tokens and logits [micro_batch*seq, vocab]\n"
        "                 (safetensors, F32) to compare with another implementation\n"
        "  --run RUN, -D  the plan: by default the training run's plan (DIR/plan/plan.txt), else the run in\n"
        "                 the checkpoint's state.json; -D tp=2 -D layout=naive ... evaluate another layout\n"
        "Prints the mean loss (nats per token), the perplexity exp(loss) and, for byte-level data, bits per\n"
        "byte (loss / ln 2).\n");
}

/* One row of the progress bar on stderr. */
static void progress(int64_t done, int64_t total, double loss) {
    int width = 30, fill = total > 0 ? (int)(width * done / total) : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\r[%s] %lld/%lld batches, loss %.4f", bar, (long long)done, (long long)total, loss);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

/* --logits FILE: "tokens" [1, M] (as F32) and "logits" [M, V] of one micro-batch. */
typedef struct { const int32_t *tokens; const float *logits; int64_t M, V; } LogitsCtx;

static int fill_logits(void *ctx, int i, float *out) {
    const LogitsCtx *c = ctx;
    if (i == 0) for (int64_t m = 0; m < c->M; m++) out[m] = (float)c->tokens[m];
    else memcpy(out, c->logits, sizeof(float) * (size_t)(c->M * c->V));
    return 0;
}

static int write_logits(const char *path, Infer *in, const int32_t *tokens) {
    const Plan *p = in->plan;
    int64_t M = (int64_t)p->micro_batch * p->seq, V = p->vocab;
    float *logits = malloc(sizeof(float) * (size_t)(M * V));
    if (!logits) { fprintf(stderr, "boost eval: out of memory\n"); return 1; }
    int32_t *zeros = calloc((size_t)M, sizeof(int32_t));
    float l;
    int rc = zeros && infer_forward(in, tokens, zeros, logits, &l) == 0 ? 0 : 1;
    char err[1024];
    LogitsCtx c = {tokens, logits, M, V};
    StEntry e[2] = {{"tokens", 1, M}, {"logits", M, V}};
    if (!rc && st_write_f32(path, e, 2, NULL, 0, fill_logits, &c, err, sizeof err)) { fprintf(stderr, "boost eval: %s\n", err); rc = 1; }
    free(logits); free(zeros);
    return rc;
}

/* The command line of `boost eval`. */
typedef struct {
    InferOptions o;
    const char *data;          /* --data FILE|GLOB, or NULL: the validation split */
    long batches;              /* --batches: -1 the default, 0 all */
    int json;
    const char *logits_path;
} EvalArgs;

/* -1 to go on, else the exit status (0 after --help, 2 after saying what is wrong). */
static int parse_eval_args(EvalArgs *e, int argc, char **argv) {
    memset(e, 0, sizeof *e);
    e->o.cmd = "boost eval";
    e->o.backend = "auto";
    e->batches = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { eval_usage(stdout); return 0; }
        if (!strncmp(a, "-D", 2)) {
            const char *def = a[2] ? a + 2 : next;
            if (!a[2]) i++;
            if (!def) { fprintf(stderr, "boost eval: -D needs name=value\n"); return 2; }
            if (e->o.ndefs == INFER_MAX_DEFS) {
                fprintf(stderr, "boost eval: too many -D\n");
                return 2;
            }
            e->o.defs[e->o.ndefs++] = def;
            continue;
        }
        int takes = !strcmp(a, "--data") || !strcmp(a, "--batches") || !strcmp(a, "--run") ||
                    !strcmp(a, "--backend") || !strcmp(a, "--logits");
        if (takes && !next) { fprintf(stderr, "boost eval: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--data")) { e->data = next; i++; }
        else if (!strcmp(a, "--batches")) {
            if (!strcmp(next, "all")) e->batches = 0;
            else if (infer_int_arg(e->o.cmd, a, next, 1, 1000000000, &e->batches)) return 2;
            i++;
        } else if (!strcmp(a, "--run")) { e->o.run = next; i++; }
        else if (!strcmp(a, "--logits")) { e->logits_path = next; i++; }
        else if (!strcmp(a, "--backend")) {
            if (strcmp(next, "cpu") && strcmp(next, "cuda") && strcmp(next, "auto")) {
                fprintf(stderr, "boost eval: --backend %s: expected cpu, cuda or auto\n", next);
                return 2;
            }
            e->o.backend = next; i++;
        } else if (!strcmp(a, "--json")) e->json = 1;
        else if (a[0] == '-') {
            fprintf(stderr, "boost eval: unknown option %s\n", a);
            eval_usage(stderr);
            return 2;
        } else if (e->o.ckpt) {
            fprintf(stderr, "boost eval: one checkpoint only (got '%s' and '%s')\n", e->o.ckpt, a);
            return 2;
        } else e->o.ckpt = a;
    }
    if (!e->o.ckpt) { eval_usage(stderr); return 2; }
    return -1;
}

/* The token streams evaluated: the training data's validation split, or each --data file whole. */
typedef struct {
    glob_t g;
    int nfiles;
    TokenStream *ts;           /* [nfiles] */
    int64_t *windows;          /* [nfiles] --data: each file's windows of seq+1 tokens */
    Batcher b;                 /* the validation split */
    TokenSet tokset;           /* the run's tokenized text, when its plan names a tokenizer */
    int64_t total;             /* micro-batches to evaluate */
    int64_t left_out;          /* windows that do not fill a micro-batch */
    int byte_data;             /* bits per byte make sense */
    const char *src_name;      /* for messages */
} EvalData;

/* One file (or, without --data, the run's tokenized text) into d->ts[f]. 0, or the exit status
 * after saying what is wrong; *stop: nothing more to read (the run's token cache is all of it). */
static int eval_load_file(const EvalArgs *e, const Plan *p, EvalData *d, int f, int *stop) {
    char err[4096];
    const char *path = e->data ? (d->g.gl_pathc > 0 ? d->g.gl_pathv[f] : e->data) : p->data_path;
    size_t pl = strlen(path);
    if (p->tokenizer_path[0] && !e->data) {   /* the run's tokenized text (the token cache) */
        int rc = run_data_open(p, NULL, &d->tokset, err, sizeof err);
        if (rc) fprintf(stderr, "boost eval: %s\n", err);
        d->byte_data = 0;
        *stop = 1;
        return rc;
    }
    if (p->tokenizer_path[0] && !(pl >= 4 && !strcmp(path + pl - 4, ".bin"))) {
        fprintf(stderr, "boost eval: --data %s: this model reads %s's tokens: give an llm.c "
                "token file (boost tokenize %s %s -o FILE.bin), or no --data for the run's own "
                "validation split\n", path, p->tokenizer_path, p->tokenizer_path, path);
        return 2;
    }
    TokenStream *ts = &d->ts[f];
    int rc = data_load(path, ts, err, sizeof err);
    if (rc) { fprintf(stderr, "boost eval: %s\n", err); return rc; }
    size_t n = strlen(ts->source);
    if (n >= 4 && !strcmp(ts->source + n - 4, ".bin")) d->byte_data = 0;
    if (ts->max_token >= p->vocab) {
        fprintf(stderr, "boost eval: %s holds token %d, outside the model's vocabulary of %d\n",
                ts->source, ts->max_token, p->vocab);
        return 2;
    }
    if (e->data) {
        d->windows[f] = ts->ntokens > 1 ? (ts->ntokens - 1) / p->seq : 0;
        d->total += d->windows[f] / p->micro_batch;
    }
    return 0;
}

/* The files of --data (a glob) or the run's data, loaded into d. 0, or the exit status. */
static int eval_open_data(const EvalArgs *e, const Plan *p, EvalData *d) {
    memset(d, 0, sizeof *d);
    d->nfiles = 1;
    if (e->data) {
        int grc = glob(e->data, 0, NULL, &d->g);
        if (grc == GLOB_NOMATCH && !strpbrk(e->data, "*?[")) { d->g.gl_pathc = 0; }
        else if (grc != 0) {
            fprintf(stderr, "boost eval: --data %s: no file matches\n", e->data);
            return 2;
        }
        d->nfiles = d->g.gl_pathc > 0 ? (int)d->g.gl_pathc : 1;
    }
    d->ts = calloc((size_t)d->nfiles, sizeof *d->ts);
    d->windows = calloc((size_t)d->nfiles, sizeof *d->windows);
    if (!d->ts || !d->windows) { fprintf(stderr, "boost eval: out of memory\n"); return 1; }
    d->byte_data = p->vocab == BYTE_VOCAB;
    int rc = 0, stop = 0;
    for (int f = 0; f < d->nfiles && !rc && !stop; f++) rc = eval_load_file(e, p, d, f, &stop);
    d->src_name = d->tokset.nshards ? d->tokset.source : d->ts[0].source;
    return rc;
}

/* How many micro-batches: the validation split's (--batches of them, default 8) or every whole
 * micro-batch of --data; the windows left out said on stderr. 0, or the exit status. */
static int eval_count_batches(const EvalArgs *e, const Plan *p, EvalData *d) {
    char err[4096];
    int rc = 0;
    long batches = e->batches;
    if (!e->data) {
        rc = p->tokenizer_path[0]
                 ? batcher_init_set(&d->b, &d->tokset, p->val_fraction, p->micro_batch, p->seq,
                                    p->vocab, p->seed, err, sizeof err)
                 : batcher_init(&d->b, &d->ts[0], p->val_fraction, p->micro_batch, p->seq, p->vocab,
                                p->seed, err, sizeof err);
        if (rc) { fprintf(stderr, "boost eval: %s\n", err); return rc; }
        if (d->b.val_windows < p->micro_batch) {
            fprintf(stderr, "boost eval: %s has no validation split (val_fraction %g): give a file "
                    "with --data FILE\n", d->src_name, p->val_fraction);
            return 2;
        }
        d->total = batcher_val_batches(&d->b, batches == 0 ? d->b.val_windows
                                              : batches < 0 ? 8 : batches);
    }
    if (d->total == 0) {
        fprintf(stderr, "boost eval: --data %s holds fewer than micro_batch %d windows of "
                "seq+1 = %d tokens\n", e->data, p->micro_batch, p->seq + 1);
        return 2;
    }
    if (e->data && batches > 0 && batches < d->total) d->total = batches;
    /* windows left out because they do not fill a micro-batch (only when every window was asked
       for) */
    if (e->data && !(batches > 0 && batches < d->total))
        for (int f = 0; f < d->nfiles; f++) d->left_out += d->windows[f] % p->micro_batch;
    if (!e->data && d->total == d->b.val_windows / p->micro_batch)
        d->left_out = d->b.val_windows % p->micro_batch;
    if (d->left_out > 0)
        fprintf(stderr, "boost eval: note: %lld window%s of seq+1 = %d tokens left out: %s not "
                "fill a micro-batch of %d (the loss is over the %lld micro-batches that do)\n",
                (long long)d->left_out, d->left_out == 1 ? "" : "s", p->seq + 1,
                d->left_out == 1 ? "it does" : "they do", p->micro_batch, (long long)d->total);
    return 0;
}

/* The forward over every micro-batch: *sum of their losses over *done of them. 0 or 1 (said). */
static int eval_batches(const EvalArgs *e, Infer *in, EvalData *d, double *sum, int64_t *done) {
    const Plan *p = in->plan;
    size_t mbt = (size_t)p->micro_batch * p->seq;
    int32_t *inputs = malloc(mbt * sizeof(int32_t)), *targets = malloc(mbt * sizeof(int32_t));
    int rc = 0;
    if (!inputs || !targets) { fprintf(stderr, "boost eval: out of memory\n"); rc = 1; }
    int tty = isatty(2) && !e->json;
    for (int f = 0; f < d->nfiles && !rc && *done < d->total; f++) {
        int64_t nb = e->data ? d->windows[f] / p->micro_batch : d->total;
        for (int64_t i = 0; i < nb && *done < d->total && !rc; i++) {
            if (e->data) {
                for (int r = 0; r < p->micro_batch; r++) {
                    const int32_t *w = d->ts[f].tokens + (i * p->micro_batch + r) * p->seq;
                    memcpy(inputs + (size_t)r * p->seq, w, sizeof(int32_t) * (size_t)p->seq);
                    memcpy(targets + (size_t)r * p->seq, w + 1, sizeof(int32_t) * (size_t)p->seq);
                }
            } else batcher_val(&d->b, i, inputs, targets);
            float l;
            if (infer_forward(in, inputs, targets, NULL, &l)) { rc = 1; break; }
            if (e->logits_path && *done == 0) rc = write_logits(e->logits_path, in, inputs);
            *sum += l;
            (*done)++;
            if (tty) progress(*done, d->total, *sum / (double)*done);
        }
    }
    free(inputs); free(targets);
    return rc;
}

/* The loss, perplexity and bits per byte, as text or one JSON object. 0, or 1 when not finite. */
static int eval_report(const EvalArgs *e, const Infer *in, const EvalData *d, double sum,
                       int64_t done) {
    const Plan *p = in->plan;
    const char *data = e->data;
    double loss = sum / (double)done, ppl = exp(loss), bpb = loss / log(2.0);
    if (!isfinite(loss)) {
        fprintf(stderr, "boost eval: the loss is not finite (%g): the checkpoint holds a diverged "
                "model\n", loss);
        return 1;
    }
    if (e->json) {
        printf("{\"checkpoint\": ");
        json_write_string(stdout, in->dir);
        printf(", \"step\": %lld, \"model\": ", (long long)in->st.step);
        json_write_string(stdout, p->model_name);
        printf(", \"data\": ");
        json_write_string(stdout, data ? data : d->src_name);
        printf(", \"split\": \"%s\", \"batches\": %lld, \"tokens\": %lld, \"loss\": %.9g, "
               "\"perplexity\": %.9g", data ? "all" : "validation", (long long)done,
               (long long)(done * (int64_t)p->micro_batch * p->seq), loss, ppl);
        if (d->byte_data) printf(", \"bits_per_byte\": %.9g", bpb);
        printf(", \"windows_left_out\": %lld}\n", (long long)d->left_out);
        return 0;
    }
    printf("%s (step %lld, model %s, tp=%d %s)\n", in->dir, (long long)in->st.step, p->model_name,
           p->tp, p->layout);
    printf("  data %s: %s, %lld micro-batches of %d x %d tokens\n", data ? data : d->src_name,
           data ? "every window" : "validation split", (long long)done, p->micro_batch, p->seq);
    if (d->left_out > 0)
        printf("  %lld window%s left out (not a whole micro-batch)\n", (long long)d->left_out,
               d->left_out == 1 ? "" : "s");
    printf("  loss %.6f  perplexity %.4f", loss, ppl);
    if (d->byte_data) printf("  bits per byte %.4f", bpb);
    printf("\n");
    return 0;
}

static void eval_data_free(const EvalArgs *e, EvalData *d) {
    batcher_free(&d->b);
    for (int f = 0; f < d->nfiles && d->ts; f++) data_free(&d->ts[f]);
    tokenset_close(&d->tokset);
    free(d->ts); free(d->windows);
    if (e->data) globfree(&d->g);
}

int cmd_eval(int argc, char **argv) {
    EvalArgs e;
    int rc = parse_eval_args(&e, argc, argv);
    if (rc >= 0) return rc;
    Infer in;
    rc = infer_open_plan(&e.o, &in);
    if (rc) { infer_close(&in); return rc; }
    EvalData d;
    rc = eval_open_data(&e, in.plan, &d);
    if (!rc) rc = eval_count_batches(&e, in.plan, &d);
    if (!rc) rc = infer_start_engine(&e.o, &in);
    double sum = 0;
    int64_t done = 0;
    if (!rc) rc = eval_batches(&e, &in, &d, &sum, &done);
    if (!rc) rc = eval_report(&e, &in, &d, sum, done);
    eval_data_free(&e, &d);
    infer_close(&in);
    return rc;
}
