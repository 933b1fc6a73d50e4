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
#include "runtime/data.h"         // defines: data_load, batcher_*, TokenStream
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

int cmd_eval(int argc, char **argv) {
    InferOptions o;
    memset(&o, 0, sizeof o);
    o.cmd = "boost eval";
    o.backend = "auto";
    const char *data = NULL;
    long batches = -1;
    int json = 0;
    const char *logits_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { eval_usage(stdout); return 0; }
        if (!strncmp(a, "-D", 2)) {
            const char *def = a[2] ? a + 2 : next;
            if (!a[2]) i++;
            if (!def) { fprintf(stderr, "boost eval: -D needs name=value\n"); return 2; }
            if (o.ndefs == INFER_MAX_DEFS) { fprintf(stderr, "boost eval: too many -D\n"); return 2; }
            o.defs[o.ndefs++] = def;
            continue;
        }
        int takes = !strcmp(a, "--data") || !strcmp(a, "--batches") || !strcmp(a, "--run") || !strcmp(a, "--backend") ||
                    !strcmp(a, "--logits");
        if (takes && !next) { fprintf(stderr, "boost eval: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--data")) { data = next; i++; }
        else if (!strcmp(a, "--batches")) {
            if (!strcmp(next, "all")) batches = 0;
            else if (infer_int_arg(o.cmd, a, next, 1, 1000000000, &batches)) return 2;
            i++;
        } else if (!strcmp(a, "--run")) { o.run = next; i++; }
        else if (!strcmp(a, "--logits")) { logits_path = next; i++; }
        else if (!strcmp(a, "--backend")) {
            if (strcmp(next, "cpu") && strcmp(next, "cuda") && strcmp(next, "auto")) {
                fprintf(stderr, "boost eval: --backend %s: expected cpu, cuda or auto\n", next); return 2;
            }
            o.backend = next; i++;
        } else if (!strcmp(a, "--json")) json = 1;
        else if (a[0] == '-') { fprintf(stderr, "boost eval: unknown option %s\n", a); eval_usage(stderr); return 2; }
        else if (o.ckpt) { fprintf(stderr, "boost eval: one checkpoint only (got '%s' and '%s')\n", o.ckpt, a); return 2; }
        else o.ckpt = a;
    }
    if (!o.ckpt) { eval_usage(stderr); return 2; }

    Infer in;
    int rc = infer_open_plan(&o, &in);
    if (rc) { infer_close(&in); return rc; }
    const Plan *p = in.plan;
    char err[4096];

    // the token streams: the training data's validation split, or each --data file whole
    glob_t g;
    memset(&g, 0, sizeof g);
    int nfiles = 1;
    if (data) {
        int grc = glob(data, 0, NULL, &g);
        if (grc == GLOB_NOMATCH && !strpbrk(data, "*?[")) { g.gl_pathc = 0; }
        else if (grc != 0) { fprintf(stderr, "boost eval: --data %s: no file matches\n", data); infer_close(&in); return 2; }
        nfiles = g.gl_pathc > 0 ? (int)g.gl_pathc : 1;
    }
    TokenStream *ts = calloc((size_t)nfiles, sizeof *ts);
    int64_t *windows = calloc((size_t)nfiles, sizeof *windows);
    Batcher b;
    memset(&b, 0, sizeof b);
    TokenSet tokset;   /* the run's tokenized text, when its plan names a tokenizer */
    memset(&tokset, 0, sizeof tokset);
    int64_t total = 0;
    int byte_data = p->vocab == BYTE_VOCAB;
    for (int f = 0; f < nfiles && !rc; f++) {
        const char *path = data ? (g.gl_pathc > 0 ? g.gl_pathv[f] : data) : p->data_path;
        size_t pl = strlen(path);
        if (p->tokenizer_path[0] && !data) {   /* the run's tokenized text (the token cache) */
            rc = run_data_open(p, NULL, &tokset, err, sizeof err);
            if (rc) fprintf(stderr, "boost eval: %s\n", err);
            byte_data = 0;
            break;
        }
        if (p->tokenizer_path[0] && !(pl >= 4 && !strcmp(path + pl - 4, ".bin"))) {
            fprintf(stderr, "boost eval: --data %s: this model reads %s's tokens: give an llm.c "
                    "token file (boost tokenize %s %s -o FILE.bin), or no --data for the run's own "
                    "validation split\n", path, p->tokenizer_path, p->tokenizer_path, path);
            rc = 2;
            break;
        }
        rc = data_load(path, &ts[f], err, sizeof err);
        if (rc) { fprintf(stderr, "boost eval: %s\n", err); break; }
        size_t n = strlen(ts[f].source);
        if (n >= 4 && !strcmp(ts[f].source + n - 4, ".bin")) byte_data = 0;
        if (ts[f].max_token >= p->vocab) {
            fprintf(stderr, "boost eval: %s holds token %d, outside the model's vocabulary of %d\n", ts[f].source,
                    ts[f].max_token, p->vocab);
            rc = 2;
            break;
        }
        if (data) {
            windows[f] = ts[f].ntokens > 1 ? (ts[f].ntokens - 1) / p->seq : 0;
            total += windows[f] / p->micro_batch;
        }
    }
    const char *src_name = tokset.nshards ? tokset.source : ts[0].source;   /* for messages */
    if (!rc && !data) {
        rc = p->tokenizer_path[0]
                 ? batcher_init_set(&b, &tokset, p->val_fraction, p->micro_batch, p->seq, p->vocab,
                                    p->seed, err, sizeof err)
                 : batcher_init(&b, &ts[0], p->val_fraction, p->micro_batch, p->seq, p->vocab,
                                p->seed, err, sizeof err);
        if (rc) fprintf(stderr, "boost eval: %s\n", err);
        else if (b.val_windows < p->micro_batch) {
            fprintf(stderr, "boost eval: %s has no validation split (val_fraction %g): give a file with --data FILE\n",
                    src_name, p->val_fraction);
            rc = 2;
        } else total = batcher_val_batches(&b, batches == 0 ? b.val_windows : batches < 0 ? 8 : batches);
    }
    if (!rc && total == 0) {
        fprintf(stderr, "boost eval: --data %s holds fewer than micro_batch %d windows of seq+1 = %d tokens\n", data,
                p->micro_batch, p->seq + 1);
        rc = 2;
    }
    if (!rc && data && batches > 0 && batches < total) total = batches;
    /* windows left out because they do not fill a micro-batch (only when every window was asked for) */
    int64_t left_out = 0;
    if (!rc && data && !(batches > 0 && batches < total))
        for (int f = 0; f < nfiles; f++) left_out += windows[f] % p->micro_batch;
    if (!rc && !data && total == b.val_windows / p->micro_batch) left_out = b.val_windows % p->micro_batch;
    if (!rc && left_out > 0)
        fprintf(stderr, "boost eval: note: %lld window%s of seq+1 = %d tokens left out: %s not fill a micro-batch of %d "
                "(the loss is over the %lld micro-batches that do)\n", (long long)left_out, left_out == 1 ? "" : "s",
                p->seq + 1, left_out == 1 ? "it does" : "they do", p->micro_batch, (long long)total);
    if (!rc) rc = infer_start_engine(&o, &in);

    size_t mbt = (size_t)p->micro_batch * p->seq;
    int32_t *inputs = malloc(mbt * sizeof(int32_t)), *targets = malloc(mbt * sizeof(int32_t));
    if (!rc && (!inputs || !targets)) { fprintf(stderr, "boost eval: out of memory\n"); rc = 1; }
    int tty = isatty(2) && !json;
    double sum = 0;
    int64_t done = 0;
    for (int f = 0; f < nfiles && !rc && done < total; f++) {
        int64_t nb = data ? windows[f] / p->micro_batch : total;
        for (int64_t i = 0; i < nb && done < total && !rc; i++) {
            if (data) {
                for (int r = 0; r < p->micro_batch; r++) {
                    const int32_t *w = ts[f].tokens + (i * p->micro_batch + r) * p->seq;
                    memcpy(inputs + (size_t)r * p->seq, w, sizeof(int32_t) * (size_t)p->seq);
                    memcpy(targets + (size_t)r * p->seq, w + 1, sizeof(int32_t) * (size_t)p->seq);
                }
            } else batcher_val(&b, i, inputs, targets);
            float l;
            if (infer_forward(&in, inputs, targets, NULL, &l)) { rc = 1; break; }
            if (logits_path && done == 0) rc = write_logits(logits_path, &in, inputs);
            sum += l;
            done++;
            if (tty) progress(done, total, sum / (double)done);
        }
    }
    if (!rc) {
        double loss = sum / (double)done, ppl = exp(loss), bpb = loss / log(2.0);
        if (!isfinite(loss)) { fprintf(stderr, "boost eval: the loss is not finite (%g): the checkpoint holds a diverged model\n", loss); rc = 1; }
        else if (json) {
            printf("{\"checkpoint\": ");
            json_write_string(stdout, in.dir);
            printf(", \"step\": %lld, \"model\": ", (long long)in.st.step);
            json_write_string(stdout, p->model_name);
            printf(", \"data\": ");
            json_write_string(stdout, data ? data : src_name);
            printf(", \"split\": \"%s\", \"batches\": %lld, \"tokens\": %lld, \"loss\": %.9g, \"perplexity\": %.9g",
                   data ? "all" : "validation", (long long)done, (long long)(done * (int64_t)mbt), loss, ppl);
            if (byte_data) printf(", \"bits_per_byte\": %.9g", bpb);
            printf(", \"windows_left_out\": %lld}\n", (long long)left_out);
        } else {
            printf("%s (step %lld, model %s, tp=%d %s)\n", in.dir, (long long)in.st.step, p->model_name, p->tp, p->layout);
            printf("  data %s: %s, %lld micro-batches of %d x %d tokens\n", data ? data : src_name,
                   data ? "every window" : "validation split", (long long)done, p->micro_batch, p->seq);
            if (left_out > 0)
                printf("  %lld window%s left out (not a whole micro-batch)\n", (long long)left_out,
                       left_out == 1 ? "" : "s");
            printf("  loss %.6f  perplexity %.4f", loss, ppl);
            if (byte_data) printf("  bits per byte %.4f", bpb);
            printf("\n");
        }
    }
    free(inputs); free(targets);
    batcher_free(&b);
    for (int f = 0; f < nfiles; f++) data_free(&ts[f]);
    tokenset_close(&tokset);
    free(ts); free(windows);
    if (data) globfree(&g);
    infer_close(&in);
    return rc;
}
