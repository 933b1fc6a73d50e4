/* sample.c: `boost sample CKPT [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--top-p P]
 * [--seed S] [-D tp=N ...] [--backend cpu|cuda]`: generate a continuation from a checkpoint and print
 * it as it is produced. By default it runs the decode plan with a KV cache (infer.txt,
 * gen/infer_plan.c): the prompt fills the cache (the prefill step, prefill.txt, takes it in chunks of
 * up to 32 tokens, the last token goes through the decode step), then one decode step per token. max_seq = the training seq; when the cache is
 * full the window slides by half: the cache restarts from the last max_seq/2 tokens (re-prefilled),
 * so a token sees between max_seq/2 and max_seq-1 earlier tokens. --no-cache runs the training
 * plan's forward over the whole window of up to seq tokens per token instead (each token sees the
 * last seq). Byte-level
 * models read and write text; token models read ids and print ids, or text with --tokenizer FILE
 * (llm.c's gpt2_tokenizer.bin format). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cli/commands.h"
#include "cli/infer.h"
#include "runtime/data.h" // defines: BYTE_VOCAB, data_splitmix64, data_open_regular
#include "runtime/run_tokenizer.h"   // defines: run_tokenizer_of_checkpoint

#define TOKENIZER_MAGIC 20240328

static void sample_usage(FILE *f) {
    fprintf(f,
        "usage: boost sample CKPT [--prompt TEXT | --prompt-ids \"ID ID ...\"] [--tokens N] [--temperature T]\n"
        "                         [--top-k K] [--top-p P] [--seed S] [--tokenizer FILE] [-D name=value ...]\n"
        "                         [--run RUN] [--backend cpu|cuda|auto]\n"
        "  CKPT            a checkpoint folder (DIR/step-NNNNNN), or a run's output folder (its newest step)\n"
        "  --prompt TEXT   the text to continue (byte-level models, and token models whose run\n"
        "                  named its tokenizer: its copy in the run's folder encodes the prompt\n"
        "                  and decodes the output; default a newline, or its separator)\n"
        "  --prompt-ids L  the prompt as token ids, separated by spaces or commas (token models)\n"
        "  --tokens N      tokens to generate (default 200)\n"
        "  --temperature T 0 picks the most likely token (greedy); default 0.8\n"
        "  --top-k K       sample among the K most likely tokens (default 0: all)\n"
        "  --top-p P       sample among the most likely tokens whose probabilities add up to P, in (0, 1]\n"
        "                  (default 1)\n"
        "  --seed S        the sampling seed (default 1): the same seed gives the same text\n"
        "  --tokenizer F   an llm.c tokenizer file (gpt2_tokenizer.bin) to print text of a token model\n"
        "  -D tp=2 ...     run another tp degree or layout of the same model (the plan is regenerated)\n"
        "  --no-cache      recompute the forward over the whole window for every token (no KV cache)\n"
        "How: the generator's decode step (infer.txt) keeps a KV cache of max_seq = the model's seq\n"
        "positions per layer; the prefill step (prefill.txt) fills it with the prompt in chunks of up to 32\n"
        "tokens, then each new token is one decode step. A prompt longer than seq is refused. When the cache is full the window slides by half:\n"
        "the cache restarts from the last seq/2 tokens, so a token sees between seq/2 and seq-1 earlier\n"
        "tokens. With --no-cache each token recomputes the training forward over the last seq tokens.\n"
        "The text goes to stdout as it is produced, notes to stderr.\n");
}

/* ---- llm.c tokenizer (decoding only): 256 uint32 header (magic 20240328, version 1 or 2, vocab
 * size, v2: end-of-text id), then per token one length byte and that many bytes. */
typedef struct { int n; char **text; unsigned char *len; int eot; } Tokenizer;

static int tokenizer_load(const char *path, Tokenizer *t) {
    memset(t, 0, sizeof *t);
    t->eot = -1;
    char why[PATH_MAX + 128];
    int fd = data_open_regular(path, why, sizeof why); // a FIFO is refused, not waited on
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        fprintf(stderr, "boost sample: --tokenizer %s\n", fd >= 0 ? path : why);
        if (fd >= 0) close(fd);
        return 2;
    }
    uint32_t h[256];
    int bad = fread(h, sizeof h, 1, f) != 1 || h[0] != TOKENIZER_MAGIC || (h[1] != 1 && h[1] != 2) ||
              h[2] == 0 || h[2] > 10000000;
    if (bad) {
        fprintf(stderr, "boost sample: --tokenizer %s: not an llm.c tokenizer file (expected a 1024-byte header with magic "
                "%d and version 1 or 2, as gpt2_tokenizer.bin)\n", path, TOKENIZER_MAGIC);
        fclose(f);
        return 2;
    }
    t->n = (int)h[2];
    if (h[1] == 2) t->eot = (int)h[3];
    t->text = calloc((size_t)t->n, sizeof *t->text);
    t->len = calloc((size_t)t->n, 1);
    for (int i = 0; i < t->n; i++) {
        unsigned char len;
        if (fread(&len, 1, 1, f) != 1 || len == 0 || !(t->text[i] = malloc(len)) || fread(t->text[i], 1, len, f) != len) {
            fprintf(stderr, "boost sample: --tokenizer %s: token %d of %d is cut short or empty: not an llm.c tokenizer "
                    "file, or a damaged one\n", path, i, t->n);
            fclose(f);
            return 2;
        }
        t->len[i] = len;
    }
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (extra) { fprintf(stderr, "boost sample: --tokenizer %s: bytes after the last of its %d tokens: not an llm.c tokenizer file\n", path, t->n); return 2; }
    return 0;
}

static void tokenizer_free(Tokenizer *t) {
    for (int i = 0; i < t->n && t->text; i++) free(t->text[i]);
    free(t->text); free(t->len);
}

/* ---- sampling ---- */
typedef struct { float logit; int id; } Cand;

static int cand_cmp(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id - y->id;
}

/* uniform in [0, 1) from the splitmix64 stream */
static double uniform(uint64_t *rng) { return (double)(data_splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0); }

/* The next token from one row of logits [V]: greedy at temperature 0 (the first largest), else
 * softmax(logits / T) restricted to the top-k and then the top-p nucleus. */
static int pick(const float *logits, int V, double temp, int topk, double topp, uint64_t *rng, Cand *c, double *prob) {
    if (temp == 0) {
        int best = 0;
        for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
        return best;
    }
    for (int i = 0; i < V; i++) { c[i].logit = logits[i]; c[i].id = i; }
    qsort(c, (size_t)V, sizeof *c, cand_cmp);
    int n = topk > 0 && topk < V ? topk : V;
    double sum = 0;
    for (int i = 0; i < n; i++) { prob[i] = exp(((double)c[i].logit - c[0].logit) / temp); sum += prob[i]; }
    if (topp < 1) {
        double acc = 0;
        int keep = n;
        for (int i = 0; i < n; i++) { acc += prob[i] / sum; if (acc >= topp) { keep = i + 1; break; } }
        n = keep;
        sum = 0;
        for (int i = 0; i < n; i++) sum += prob[i];
    }
    double u = uniform(rng) * sum, acc = 0;
    for (int i = 0; i < n; i++) { acc += prob[i]; if (u < acc) return c[i].id; }
    return c[n - 1].id;
}

static void emit(int tok, int byte_level, const Tokenizer *tk) {
    if (byte_level) fputc(tok, stdout);
    else if (tk->n && tok < tk->n) fwrite(tk->text[tok], 1, tk->len[tok], stdout);
    else printf("%s%d", " ", tok);
    fflush(stdout);
}

/* The same for a run's BPE tokenizer when there is one: the token's bytes (a token outside its
 * vocabulary, possible when the model's vocab is larger, as its id). */
static void emit_any(int tok, int byte_level, const Tokenizer *tk, const Bpe *bpe) {
    if (!bpe) { emit(tok, byte_level, tk); return; }
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    char why[160];
    int32_t id = tok;
    if (bpe_decode(bpe, &id, 1, 0, &buf, &len, &cap, why, sizeof why) == 0)
        fwrite(buf, 1, len, stdout);
    else printf(" %d", tok);
    free(buf);
    fflush(stdout);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cmd_sample(int argc, char **argv) {
    InferOptions o;
    memset(&o, 0, sizeof o);
    o.cmd = "boost sample";
    o.backend = "auto";
    o.one_sequence = 1;
    o.decode = 1;
    const char *prompt = NULL, *prompt_ids = NULL, *tok_path = NULL;
    long ntok = 200, topk = 0, seed = 1;
    double temp = 0.8, topp = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { sample_usage(stdout); return 0; }
        if (!strcmp(a, "--no-cache")) { o.decode = 0; continue; }
        if (!strncmp(a, "-D", 2)) {
            const char *def = a[2] ? a + 2 : next;
            if (!a[2]) i++;
            if (!def) { fprintf(stderr, "boost sample: -D needs name=value\n"); return 2; }
            if (o.ndefs == INFER_MAX_DEFS) { fprintf(stderr, "boost sample: too many -D\n"); return 2; }
            o.defs[o.ndefs++] = def;
            continue;
        }
        int takes = !strcmp(a, "--prompt") || !strcmp(a, "--prompt-ids") || !strcmp(a, "--tokens") ||
                    !strcmp(a, "--temperature") || !strcmp(a, "--top-k") || !strcmp(a, "--top-p") ||
                    !strcmp(a, "--seed") || !strcmp(a, "--tokenizer") || !strcmp(a, "--run") || !strcmp(a, "--backend");
        if (takes && !next) { fprintf(stderr, "boost sample: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--prompt")) prompt = next;
        else if (!strcmp(a, "--prompt-ids")) prompt_ids = next;
        else if (!strcmp(a, "--tokens")) { if (infer_int_arg(o.cmd, a, next, 0, 100000000, &ntok)) return 2; }
        else if (!strcmp(a, "--top-k")) { if (infer_int_arg(o.cmd, a, next, 0, 2000000000, &topk)) return 2; }
        else if (!strcmp(a, "--seed")) { if (infer_int_arg(o.cmd, a, next, 0, 0x7fffffffL, &seed)) return 2; }
        else if (!strcmp(a, "--temperature")) {
            if (infer_num_arg(o.cmd, a, next, &temp)) return 2;
            if (temp < 0) { fprintf(stderr, "boost sample: --temperature %s: must be >= 0 (0 picks the most likely token)\n", next); return 2; }
        } else if (!strcmp(a, "--top-p")) {
            if (infer_num_arg(o.cmd, a, next, &topp)) return 2;
            if (!(topp > 0 && topp <= 1)) { fprintf(stderr, "boost sample: --top-p %s: must be in (0, 1] (1 keeps every token)\n", next); return 2; }
        } else if (!strcmp(a, "--tokenizer")) tok_path = next;
        else if (!strcmp(a, "--run")) o.run = next;
        else if (!strcmp(a, "--backend")) {
            if (strcmp(next, "cpu") && strcmp(next, "cuda") && strcmp(next, "auto")) {
                fprintf(stderr, "boost sample: --backend %s: expected cpu, cuda or auto\n", next); return 2;
            }
            o.backend = next;
        } else if (a[0] == '-') { fprintf(stderr, "boost sample: unknown option %s\n", a); sample_usage(stderr); return 2; }
        else if (o.ckpt) { fprintf(stderr, "boost sample: one checkpoint only (got '%s' and '%s')\n", o.ckpt, a); return 2; }
        else { o.ckpt = a; continue; }
        i++;
    }
    if (!o.ckpt) { sample_usage(stderr); return 2; }
    if (prompt && prompt_ids) { fprintf(stderr, "boost sample: give --prompt or --prompt-ids, not both\n"); return 2; }

    Infer in;
    int rc = infer_open_plan(&o, &in);
    if (rc) { infer_close(&in); return rc; }
    const Plan *p = in.plan;
    // byte-level: vocab 256 and not trained on an llm.c token file
    size_t dl = strlen(p->data_path);
    const int V = p->vocab, S = o.decode ? infer_max_seq(p) : p->seq, byte_level = V == BYTE_VOCAB && !(dl >= 4 && !strcmp(p->data_path + dl - 4, ".bin"));
    if (o.decode && S < 2) {
        fprintf(stderr, "boost sample: %s: the decode plan has no KV cache of at least 2 positions\n", in.plan_source);
        infer_close(&in); return 2;
    }
    if (p->micro_batch != 1) {   /* the buffers below hold one sequence */
        fprintf(stderr, "boost sample: the plan has micro_batch %d; sampling runs micro_batch 1\n", p->micro_batch);
        infer_close(&in); return 2;
    }
    Tokenizer tk;
    memset(&tk, 0, sizeof tk);
    tk.eot = -1;
    if (tok_path && (rc = tokenizer_load(tok_path, &tk))) { tokenizer_free(&tk); infer_close(&in); return rc; }
    Bpe *bpe = NULL;   /* a run that named its tokenizer: prompt and output are text through it */
    if (!tok_path && in.st.has_tokenizer) {
        char where[1400], why[1600];
        bpe = run_tokenizer_of_checkpoint(in.dir, in.st.tokenizer_crc, where, sizeof where, why,
                                          sizeof why);
        if (!bpe) { fprintf(stderr, "boost sample: %s\n", why); infer_close(&in); return 2; }
    }
    if (tok_path && byte_level) {
        fprintf(stderr, "boost sample: --tokenizer: model %s is byte-level (vocab 256, trained on text): its text needs no tokenizer\n", p->model_name);
        tokenizer_free(&tk); infer_close(&in); return 2;
    }

    // the prompt as tokens
    int64_t cap = 16 + (prompt ? (int64_t)strlen(prompt) : 0) + (prompt_ids ? (int64_t)strlen(prompt_ids) : 0) + ntok;
    int32_t *ctx = malloc(sizeof(int32_t) * (size_t)cap);
    int64_t len = 0;
    if (!ctx) { fprintf(stderr, "boost sample: out of memory\n"); rc = 1; }
    if (!rc && prompt && bpe) {
        BpeEncoder *enc = bpe_encoder_new(bpe);
        BpeIds ids = {0};
        char why[320] = "out of memory";
        rc = enc ? bpe_encode(enc, (const unsigned char *)prompt, strlen(prompt), 0, &ids, why,
                              sizeof why) : 1;
        if (rc) fprintf(stderr, "boost sample: --prompt: %s\n", why);
        if (!rc && ids.n + ntok + 16 > cap) {
            int32_t *grown = realloc(ctx, sizeof(int32_t) * (size_t)(ids.n + ntok + 16));
            if (grown) ctx = grown; else rc = 1;
        }
        for (int64_t i = 0; !rc && i < ids.n; i++) ctx[len++] = ids.v[i];
        free(ids.v);
        bpe_encoder_free(enc);
    } else if (!rc && prompt) {
        if (!byte_level) {
            fprintf(stderr, "boost sample: model %s reads token ids (vocab %d), not text: give the prompt as --prompt-ids "
                    "\"ID ID ...\"\n", p->model_name, V);
            rc = 2;
        } else len = tokenize_bytes((const unsigned char *)prompt, strlen(prompt), ctx);
    } else if (!rc && prompt_ids) {
        const char *s = prompt_ids;
        while (*s && !rc) {
            while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') s++;
            if (!*s) break;
            char *end;
            long long id = strtoll(s, &end, 10);
            if (end == s) { fprintf(stderr, "boost sample: --prompt-ids: '%s' is not a token id\n", s); rc = 2; break; }
            if (id < 0 || id >= V) {
                fprintf(stderr, "boost sample: --prompt-ids: token %lld is outside the vocabulary of model %s (0..%d)\n", id,
                        p->model_name, V - 1);
                rc = 2; break;
            }
            ctx[len++] = (int32_t)id;
            s = end;
        }
    }
    if (!rc && len == 0 && bpe && bpe_separator(bpe) >= 0 && bpe_separator(bpe) < V)
        ctx[len++] = bpe_separator(bpe);   /* a document starts after the separator */
    if (!rc && len == 0) ctx[len++] = byte_level ? '\n' : (tk.eot >= 0 && tk.eot < V ? tk.eot : 0);
    if (!rc && len > S) {
        fprintf(stderr, "boost sample: the prompt is %lld tokens, longer than model %s's sequence length %d: shorten it "
                "(generation past %d tokens slides the window, but the prompt must fit in one)\n", (long long)len,
                p->model_name, S, S);
        rc = 2;
    }
    if (!rc) rc = infer_start_engine(&o, &in);

    float *logits = NULL;
    int32_t *tokens = NULL, *targets = NULL;
    Cand *cand = NULL;
    double *prob = NULL;
    if (!rc) {
        logits = malloc(sizeof(float) * (size_t)S * V);
        tokens = calloc((size_t)S, sizeof(int32_t));
        targets = calloc((size_t)S, sizeof(int32_t));
        cand = malloc(sizeof(Cand) * (size_t)V);
        prob = malloc(sizeof(double) * (size_t)V);
        if (!logits || !tokens || !targets || !cand || !prob) { fprintf(stderr, "boost sample: out of memory\n"); rc = 1; }
    }
    if (!rc) {
        if (o.decode)
            fprintf(stderr, "boost sample: %s (step %lld), model %s, tp=%d %s, backend %s; temperature %g, top-k %ld, top-p %g, "
                    "seed %ld; KV cache of %d positions (prefill, then one decode step per token)\n", in.dir,
                    (long long)in.st.step, p->model_name, p->tp, p->layout, engine_backend_name(in.e), temp, topk, topp, seed, S);
        else
            fprintf(stderr, "boost sample: %s (step %lld), model %s, tp=%d %s, backend %s; temperature %g, top-k %ld, top-p %g, "
                    "seed %ld; full forward over the window (up to %d tokens) per token, no KV cache\n", in.dir,
                    (long long)in.st.step, p->model_name, p->tp, p->layout, engine_backend_name(in.e), temp, topk, topp, seed, S);
        for (int64_t i = 0; i < len; i++) emit_any(ctx[i], byte_level, &tk, bpe);
        uint64_t rng = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
        double t0 = now_s(), tp0 = t0;
        int slid = 0;
        int64_t cached = 0;   /* decode: tokens ctx[base .. base+cached-1] are in the cache at positions 0.. */
        int64_t base = 0;
        if (o.decode) {       /* prefill: the prompt into the cache (chunks through prefill.txt, the last token a step) */
            rc = infer_prefill(&in, ctx, (int)len, logits);
            cached = len;
            tp0 = now_s();
        }
        for (long g = 0; g < ntok && !rc; g++) {
            int next;
            if (o.decode) {
                next = pick(logits, V, temp, (int)topk, topp, &rng, cand, prob);
                ctx[len++] = next;
                emit_any(next, byte_level, &tk, bpe);
                if (g == ntok - 1) break;   /* its logits are not needed */
                if (cached == S) {          /* full: restart the cache from the last S/2 tokens */
                    if (!slid) fprintf(stderr, "\n(boost sample: the KV cache of %d positions is full: the window slides by half, "
                                               "the cache restarts from the last %d tokens)\n", S, S / 2);
                    slid = 1;
                    base = len - S / 2;   /* the last S/2 tokens, the new one included */
                    rc = infer_prefill(&in, ctx + base, S / 2, logits);
                    cached = S / 2;
                    continue;
                }
                rc = infer_decode_step(&in, next, logits);
                cached++;
                continue;
            }
            int64_t w = len < S ? len : S, start = len - w;
            if (start > 0 && !slid) {
                fprintf(stderr, "\n(boost sample: past %d tokens: the window slides, each new token sees the last %d)\n", S, S);
                slid = 1;
            }
            memcpy(tokens, ctx + start, sizeof(int32_t) * (size_t)w);
            memset(tokens + w, 0, sizeof(int32_t) * (size_t)(S - w));
            if (infer_forward(&in, tokens, targets, logits, NULL)) { rc = 1; break; }
            next = pick(logits + (w - 1) * V, V, temp, (int)topk, topp, &rng, cand, prob);
            ctx[len++] = next;
            emit_any(next, byte_level, &tk, bpe);
        }
        if (o.decode && !rc) fprintf(stderr, "boost sample: prefill of %lld prompt tokens in %.3fs\n", (long long)(len - ntok), tp0 - t0);
        t0 = tp0;
        double dt = now_s() - t0;
        if (!byte_level || (len > 0 && ctx[len - 1] != '\n')) fputc('\n', stdout);
        fflush(stdout);
        if (!rc) fprintf(stderr, "boost sample: %ld tokens in %.2fs (%.1f tokens/s)\n", ntok, dt, dt > 0 ? ntok / dt : 0.0);
    }
    free(logits); free(tokens); free(targets); free(cand); free(prob); free(ctx);
    tokenizer_free(&tk);
    bpe_free(bpe);
    infer_close(&in);
    return rc;
}
