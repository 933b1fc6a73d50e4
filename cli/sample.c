/* sample.c: `boost sample CKPT [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--top-p
 * P]
 * [--seed S] [-D tp=N ...] [--backend cpu|cuda]`: generate a continuation from a checkpoint and
 * print it as it is produced. By default it runs the decode plan with a KV cache (infer.txt,
 * gen/infer_plan.c): the prompt fills the cache (the prefill step, prefill.txt, takes it in chunks
 * of up to 32 tokens, the last token goes through the decode step), then one decode step per token.
 * max_seq = the training seq; when the cache is full the window slides by half: the cache restarts
 * from the last max_seq/2 tokens (re-prefilled), so a token sees between max_seq/2 and max_seq-1
 * earlier tokens. --no-cache runs the training plan's forward over the whole window of up to seq
 * tokens per token instead (each token sees the last seq). Byte-level models read and write text;
 * token models read ids and print ids, or text with --tokenizer FILE (llm.c's gpt2_tokenizer.bin
 * format). */
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
        "usage: boost sample CKPT [--prompt TEXT | --prompt-ids "
        "\"ID ID ...\"] [--tokens N] [--temperature T]\n"
        "                         [--top-k K] [--top-p P] "
        "[--seed S] [--tokenizer FILE] [-D name=value ...]\n"
        "                         [--run RUN] [--backend cpu|cuda|auto]\n"
        "  CKPT            a checkpoint folder (DIR/step-NNNNNN), "
        "or a run's output folder (its newest step)\n"
        "  --prompt TEXT   the text to continue (byte-level models, and token models whose run\n"
        "                  named its tokenizer: its copy in the run's folder encodes the prompt\n"
        "                  and decodes the output; default a newline, or its separator)\n"
        "  --prompt-ids L  the prompt as token ids, separated by spaces or commas (token models)\n"
        "  --tokens N      tokens to generate (default 200)\n"
        "  --temperature T 0 picks the most likely token (greedy); default 0.8\n"
        "  --top-k K       sample among the K most likely tokens (default 0: all)\n"
        "  --top-p P       sample among the most likely "
        "tokens whose probabilities add up to P, in (0, 1]\n"
        "                  (default 1)\n"
        "  --seed S        the sampling seed (default 1): the same seed gives the same text\n"
        "  --tokenizer F   an llm.c tokenizer file "
        "(gpt2_tokenizer.bin) to print text of a token model\n"
        "  -D tp=2 ...     run another tp degree or layout "
        "of the same model (the plan is regenerated)\n"
        "  --no-cache      recompute the forward over "
        "the whole window for every token (no KV cache)\n"
        "How: the generator's decode step (infer.txt) "
        "keeps a KV cache of max_seq = the model's seq\n"
        "positions per layer; the prefill step (prefill.txt) "
        "fills it with the prompt in chunks of up to 32\n"
        "tokens, then each new token is one decode step. A prompt longer than "
        "seq is refused. When the cache is full the window slides by half:\n"
        "the cache restarts from the last seq/2 tokens, "
        "so a token sees between seq/2 and seq-1 earlier\n"
        "tokens. With --no-cache each token recomputes "
        "the training forward over the last seq tokens.\n"
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
    int bad = fread(h, sizeof h, 1, f) != 1 || h[0] != TOKENIZER_MAGIC ||
              (h[1] != 1 && h[1] != 2) || h[2] == 0 || h[2] > 10000000;
    if (bad) {
        fprintf(stderr,
                "boost sample: --tokenizer %s: not an llm.c tokenizer file (expected a "
                "1024-byte header with magic %d and version 1 or 2, as gpt2_tokenizer.bin)\n",
                path, TOKENIZER_MAGIC);
        fclose(f);
        return 2;
    }
    t->n = (int)h[2];
    if (h[1] == 2) t->eot = (int)h[3];
    t->text = calloc((size_t)t->n, sizeof *t->text);
    t->len = calloc((size_t)t->n, 1);
    for (int i = 0; i < t->n; i++) {
        unsigned char len;
        if (fread(&len, 1, 1, f) != 1 || len == 0 || !(t->text[i] = malloc(len)) ||
            fread(t->text[i], 1, len, f) != len) {
            fprintf(stderr,
                    "boost sample: --tokenizer %s: token %d of %d is cut short "
                    "or empty: not an llm.c tokenizer file, or a damaged one\n", path, i, t->n);
            fclose(f);
            return 2;
        }
        t->len[i] = len;
    }
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (extra) {
        fprintf(stderr,
                "boost sample: --tokenizer %s: bytes after the last "
                "of its %d tokens: not an llm.c tokenizer file\n", path, t->n);
        return 2;
    }
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
static double uniform(uint64_t *rng) {
    return (double)(data_splitmix64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

/* The next token from one row of logits [V]: greedy at temperature 0 (the first largest), else
 * softmax(logits / T) restricted to the top-k and then the top-p nucleus. */
static int pick(const float *logits, int V, double temp, int topk, double topp, uint64_t *rng,
                Cand *c, double *prob) {
    if (temp == 0) {
        int best = 0;
        for (int i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
        return best;
    }
    for (int i = 0; i < V; i++) { c[i].logit = logits[i]; c[i].id = i; }
    qsort(c, (size_t)V, sizeof *c, cand_cmp);
    int n = topk > 0 && topk < V ? topk : V;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        prob[i] = exp(((double)c[i].logit - c[0].logit) / temp);
        sum += prob[i];
    }
    if (topp < 1) {
        double acc = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            acc += prob[i] / sum;
            if (acc >= topp) {
                keep = i + 1;
                break;
            }
        }
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

/* The command line of `boost sample`. */
typedef struct {
    InferOptions o;
    const char *prompt, *prompt_ids, *tok_path;
    long ntok, topk, seed;
    double temp, topp;
} SampleArgs;

/* "boost sample: MESSAGE" on stderr; returns 2, the exit status of bad input. */
#define sample_refuse(...) cli_refuse("boost sample", __VA_ARGS__)

/* One option that takes a value (next): 0, or 2 after saying what is wrong. */
static int sample_option(SampleArgs *s, const char *a, const char *next) {
    const char *cmd = s->o.cmd;
    if (!strcmp(a, "--prompt")) s->prompt = next;
    else if (!strcmp(a, "--prompt-ids")) s->prompt_ids = next;
    else if (!strcmp(a, "--tokens"))
        return infer_int_arg(cmd, a, next, 0, 100000000, &s->ntok) ? 2 : 0;
    else if (!strcmp(a, "--top-k"))
        return infer_int_arg(cmd, a, next, 0, 2000000000, &s->topk) ? 2 : 0;
    else if (!strcmp(a, "--seed"))
        return infer_int_arg(cmd, a, next, 0, 0x7fffffffL, &s->seed) ? 2 : 0;
    else if (!strcmp(a, "--temperature")) {
        if (infer_num_arg(cmd, a, next, &s->temp)) return 2;
        if (s->temp < 0)
            return sample_refuse("--temperature %s: must be >= 0 (0 picks the most likely token)",
                                 next);
    } else if (!strcmp(a, "--top-p")) {
        if (infer_num_arg(cmd, a, next, &s->topp)) return 2;
        if (!(s->topp > 0 && s->topp <= 1))
            return sample_refuse("--top-p %s: must be in (0, 1] (1 keeps every token)", next);
    } else if (!strcmp(a, "--tokenizer")) s->tok_path = next;
    else if (!strcmp(a, "--run")) s->o.run = next;
    else if (!strcmp(a, "--backend")) {
        if (strcmp(next, "cpu") && strcmp(next, "cuda") && strcmp(next, "auto"))
            return sample_refuse("--backend %s: expected cpu, cuda or auto", next);
        s->o.backend = next;
    }
    return 0;
}

/* -1 to go on, else the exit status (0 after --help, 2 after saying what is wrong). */
static int parse_sample_args(SampleArgs *s, int argc, char **argv) {
    memset(s, 0, sizeof *s);
    s->o.cmd = "boost sample";
    s->o.backend = "auto";
    s->o.one_sequence = 1;
    s->o.decode = 1;
    s->ntok = 200, s->topk = 0, s->seed = 1;
    s->temp = 0.8, s->topp = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { sample_usage(stdout); return 0; }
        if (!strcmp(a, "--no-cache")) { s->o.decode = 0; continue; }
        if (!strncmp(a, "-D", 2)) {
            const char *def = a[2] ? a + 2 : next;
            if (!a[2]) i++;
            if (!def) return sample_refuse("-D needs name=value");
            if (s->o.ndefs == INFER_MAX_DEFS) return sample_refuse("too many -D");
            s->o.defs[s->o.ndefs++] = def;
            continue;
        }
        int takes = !strcmp(a, "--prompt") || !strcmp(a, "--prompt-ids") ||
                    !strcmp(a, "--tokens") || !strcmp(a, "--temperature") ||
                    !strcmp(a, "--top-k") || !strcmp(a, "--top-p") || !strcmp(a, "--seed") ||
                    !strcmp(a, "--tokenizer") || !strcmp(a, "--run") || !strcmp(a, "--backend");
        if (takes && !next) return sample_refuse("%s needs a value", a);
        if (takes) {
            if (sample_option(s, a, next)) return 2;
            i++;
        } else if (a[0] == '-') {
            fprintf(stderr, "boost sample: unknown option %s\n", a);
            sample_usage(stderr);
            return 2;
        } else if (s->o.ckpt)
            return sample_refuse("one checkpoint only (got '%s' and '%s')", s->o.ckpt, a);
        else s->o.ckpt = a;
    }
    if (!s->o.ckpt) { sample_usage(stderr); return 2; }
    if (s->prompt && s->prompt_ids) return sample_refuse("give --prompt or --prompt-ids, not both");
    return -1;
}

/* One sampling run: the open plan, how its tokens read as text, and the context. */
typedef struct {
    const SampleArgs *a;
    Infer *in;
    int V, S, byte_level;       /* vocabulary; positions per window (the KV cache or seq) */
    Tokenizer tk;               /* --tokenizer's tokens (n 0: none) */
    Bpe *bpe;                   /* the run's own tokenizer, or NULL */
    int32_t *ctx;               /* [cap] the prompt's tokens, then the generated ones */
    int64_t len, cap;
} Sampling;

/* --prompt through the run's BPE tokenizer into s->ctx. 0 or 1 (said). */
static int prompt_from_bpe(Sampling *s) {
    const char *prompt = s->a->prompt;
    BpeEncoder *enc = bpe_encoder_new(s->bpe);
    BpeIds ids = {0};
    char why[320] = "out of memory";
    int rc = enc ? bpe_encode(enc, (const unsigned char *)prompt, strlen(prompt), 0, &ids, why,
                              sizeof why) : 1;
    if (rc) fprintf(stderr, "boost sample: --prompt: %s\n", why);
    if (!rc && ids.n + s->a->ntok + 16 > s->cap) {
        int32_t *grown = realloc(s->ctx, sizeof(int32_t) * (size_t)(ids.n + s->a->ntok + 16));
        if (grown) s->ctx = grown; else rc = 1;
    }
    for (int64_t i = 0; !rc && i < ids.n; i++) s->ctx[s->len++] = ids.v[i];
    free(ids.v);
    bpe_encoder_free(enc);
    return rc;
}

/* --prompt-ids into s->ctx. 0 or 2 (said). */
static int prompt_from_ids(Sampling *s) {
    const char *t = s->a->prompt_ids;
    while (*t) {
        while (*t == ' ' || *t == ',' || *t == '\t' || *t == '\n') t++;
        if (!*t) break;
        char *end;
        long long id = strtoll(t, &end, 10);
        if (end == t) return sample_refuse("--prompt-ids: '%s' is not a token id", t);
        if (id < 0 || id >= s->V)
            return sample_refuse("--prompt-ids: token %lld is outside the vocabulary of model %s "
                                 "(0..%d)", id, s->in->plan->model_name, s->V - 1);
        s->ctx[s->len++] = (int32_t)id;
        t = end;
    }
    return 0;
}

/* The prompt as tokens in s->ctx (a separator or newline when empty). 0, or the exit status. */
static int sample_prompt(Sampling *s) {
    const SampleArgs *a = s->a;
    const Plan *p = s->in->plan;
    s->cap = 16 + (a->prompt ? (int64_t)strlen(a->prompt) : 0) +
             (a->prompt_ids ? (int64_t)strlen(a->prompt_ids) : 0) + a->ntok;
    s->ctx = malloc(sizeof(int32_t) * (size_t)s->cap);
    s->len = 0;
    if (!s->ctx) { fprintf(stderr, "boost sample: out of memory\n"); return 1; }
    int rc = 0;
    if (a->prompt && s->bpe) rc = prompt_from_bpe(s);
    else if (a->prompt) {
        if (!s->byte_level)
            return sample_refuse("model %s reads token ids (vocab %d), not text: give the "
                                 "prompt as --prompt-ids \"ID ID ...\"", p->model_name, s->V);
        s->len = tokenize_bytes((const unsigned char *)a->prompt, strlen(a->prompt), s->ctx);
    } else if (a->prompt_ids) rc = prompt_from_ids(s);
    if (rc) return rc;
    int sep = s->bpe ? bpe_separator(s->bpe) : -1;
    if (s->len == 0 && s->bpe && sep >= 0 && sep < s->V)
        s->ctx[s->len++] = sep;   /* a document starts after the separator */
    if (s->len == 0)
        s->ctx[s->len++] = s->byte_level ? '\n'
                           : (s->tk.eot >= 0 && s->tk.eot < s->V ? s->tk.eot : 0);
    if (s->len > s->S)
        return sample_refuse("the prompt is %lld tokens, longer than model %s's sequence length "
                             "%d: shorten it (generation past %d tokens slides the window, but the "
                             "prompt must fit in one)", (long long)s->len, p->model_name, s->S,
                             s->S);
    return 0;
}

/* The buffers of one window's forward and of picking a token. */
typedef struct {
    float *logits;            /* [S * V] */
    int32_t *tokens, *targets;   /* [S] each */
    Cand *cand;               /* [V] */
    double *prob;             /* [V] */
} SampleBufs;

/* --no-cache: the next token from the forward over the last S tokens of the context */
static int next_by_forward(Sampling *s, SampleBufs *b, uint64_t *rng, int *slid, int *next) {
    const SampleArgs *a = s->a;
    int64_t w = s->len < s->S ? s->len : s->S, start = s->len - w;
    if (start > 0 && !*slid) {
        fprintf(stderr, "\n(boost sample: past %d tokens: the window slides, each new token sees "
                "the last %d)\n", s->S, s->S);
        *slid = 1;
    }
    memcpy(b->tokens, s->ctx + start, sizeof(int32_t) * (size_t)w);
    memset(b->tokens + w, 0, sizeof(int32_t) * (size_t)(s->S - w));
    if (infer_forward(s->in, b->tokens, b->targets, b->logits, NULL)) return 1;
    *next = pick(b->logits + (w - 1) * s->V, s->V, a->temp, (int)a->topk, a->topp, rng, b->cand,
                 b->prob);
    return 0;
}

/* a->ntok tokens after the prompt, each printed as it comes; the timing notes on stderr */
static int sample_generate(Sampling *s, SampleBufs *b) {
    const SampleArgs *a = s->a;
    const int S = s->S, V = s->V;
    int rc = 0;
    uint64_t rng = (uint64_t)a->seed * 0x9E3779B97F4A7C15ull + 0x1234567ull;
    double t0 = now_s(), tp0 = t0;
    int slid = 0;
    /* decode: tokens ctx[base .. base+cached-1] are in the cache at positions 0.. */
    int64_t cached = 0, base = 0;
    /* prefill: the prompt into the cache (chunks through prefill.txt, the last token a step) */
    if (a->o.decode) {
        rc = infer_prefill(s->in, s->ctx, (int)s->len, b->logits);
        cached = s->len;
        tp0 = now_s();
    }
    for (long g = 0; g < a->ntok && !rc; g++) {
        int next;
        if (!a->o.decode) {
            if (next_by_forward(s, b, &rng, &slid, &next)) { rc = 1; break; }
            s->ctx[s->len++] = next;
            emit_any(next, s->byte_level, &s->tk, s->bpe);
            continue;
        }
        next = pick(b->logits, V, a->temp, (int)a->topk, a->topp, &rng, b->cand, b->prob);
        s->ctx[s->len++] = next;
        emit_any(next, s->byte_level, &s->tk, s->bpe);
        if (g == a->ntok - 1) break;   /* its logits are not needed */
        if (cached == S) {             /* full: restart the cache from the last S/2 tokens */
            if (!slid)
                fprintf(stderr, "\n(boost sample: the KV cache of %d positions is full: the window "
                        "slides by half, the cache restarts from the last %d tokens)\n", S, S / 2);
            slid = 1;
            base = s->len - S / 2;   /* the last S/2 tokens, the new one included */
            rc = infer_prefill(s->in, s->ctx + base, S / 2, b->logits);
            cached = S / 2;
            continue;
        }
        rc = infer_decode_step(s->in, next, b->logits);
        cached++;
    }
    if (a->o.decode && !rc)
        fprintf(stderr, "boost sample: prefill of %lld prompt tokens in %.3fs\n",
                (long long)(s->len - a->ntok), tp0 - t0);
    t0 = tp0;
    double dt = now_s() - t0;
    if (!s->byte_level || (s->len > 0 && s->ctx[s->len - 1] != '\n')) fputc('\n', stdout);
    fflush(stdout);
    if (!rc) fprintf(stderr, "boost sample: %ld tokens in %.2fs (%.1f tokens/s)\n", a->ntok, dt,
                     dt > 0 ? a->ntok / dt : 0.0);
    return rc;
}

/* The buffers, the run's header on stderr, the prompt echoed, then the generation. */
static int sample_run(Sampling *s) {
    const SampleArgs *a = s->a;
    const Plan *p = s->in->plan;
    const int S = s->S, V = s->V;
    SampleBufs b;
    b.logits = malloc(sizeof(float) * (size_t)S * V);
    b.tokens = calloc((size_t)S, sizeof(int32_t));
    b.targets = calloc((size_t)S, sizeof(int32_t));
    b.cand = malloc(sizeof(Cand) * (size_t)V);
    b.prob = malloc(sizeof(double) * (size_t)V);
    int rc = 0;
    if (!b.logits || !b.tokens || !b.targets || !b.cand || !b.prob) {
        fprintf(stderr, "boost sample: out of memory\n");
        rc = 1;
    } else {
        fprintf(stderr, "boost sample: %s (step %lld), model %s, tp=%d %s, backend %s; "
                "temperature %g, top-k %ld, top-p %g, seed %ld; ", s->in->dir,
                (long long)s->in->st.step, p->model_name, p->tp, p->layout,
                engine_backend_name(s->in->e), a->temp, a->topk, a->topp, a->seed);
        if (a->o.decode)
            fprintf(stderr, "KV cache of %d positions (prefill, then one decode step per token)\n",
                    S);
        else
            fprintf(stderr, "full forward over the window (up to %d tokens) per token, no KV "
                    "cache\n", S);
        for (int64_t i = 0; i < s->len; i++) emit_any(s->ctx[i], s->byte_level, &s->tk, s->bpe);
        rc = sample_generate(s, &b);
    }
    free(b.logits); free(b.tokens); free(b.targets); free(b.cand); free(b.prob);
    return rc;
}

/* How the model's tokens read as text: --tokenizer's file or the run's own BPE tokenizer (none
 * for byte-level models). 0, or the exit status after saying what is wrong. */
static int sample_open_text(Sampling *s) {
    const char *tok_path = s->a->tok_path;
    Infer *in = s->in;
    int rc;
    memset(&s->tk, 0, sizeof s->tk);
    s->tk.eot = -1;
    if (tok_path && (rc = tokenizer_load(tok_path, &s->tk))) return rc;
    if (!tok_path && in->st.has_tokenizer) {
        char where[1400], why[1600];
        s->bpe = run_tokenizer_of_checkpoint(in->dir, in->st.tokenizer_crc, where, sizeof where,
                                             why, sizeof why);
        if (!s->bpe) return sample_refuse("%s", why);
    }
    if (tok_path && s->byte_level)
        return sample_refuse("--tokenizer: model %s is byte-level (vocab 256, trained on text): "
                             "its text needs no tokenizer", in->plan->model_name);
    return 0;
}

int cmd_sample(int argc, char **argv) {
    SampleArgs a;
    int rc = parse_sample_args(&a, argc, argv);
    if (rc >= 0) return rc;
    Infer in;
    rc = infer_open_plan(&a.o, &in);
    if (rc) { infer_close(&in); return rc; }
    const Plan *p = in.plan;
    Sampling s;
    memset(&s, 0, sizeof s);
    s.a = &a;
    s.in = &in;
    // byte-level: vocab 256 and not trained on an llm.c token file
    size_t dl = strlen(p->data_path);
    s.V = p->vocab;
    s.S = a.o.decode ? infer_max_seq(p) : p->seq;
    s.byte_level = s.V == BYTE_VOCAB && !(dl >= 4 && !strcmp(p->data_path + dl - 4, ".bin"));
    if (a.o.decode && s.S < 2) {
        fprintf(stderr, "boost sample: %s: the decode plan has no KV cache of at least 2 "
                "positions\n", in.plan_source);
        infer_close(&in);
        return 2;
    }
    if (p->micro_batch != 1) {   /* the buffers below hold one sequence */
        fprintf(stderr, "boost sample: the plan has micro_batch %d; sampling runs micro_batch 1\n",
                p->micro_batch);
        infer_close(&in);
        return 2;
    }
    rc = sample_open_text(&s);
    if (!rc) rc = sample_prompt(&s);
    if (!rc) rc = infer_start_engine(&a.o, &in);
    if (!rc) rc = sample_run(&s);
    free(s.ctx);
    tokenizer_free(&s.tk);
    bpe_free(s.bpe);
    infer_close(&in);
    return rc;
}
