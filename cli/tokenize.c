/* tokenize.c: `boost tokenize TOKENIZER.json INPUT... -o OUT.bin` turns text files, globs or JSON
 * lines into llm.c token shards with a Hugging Face BPE tokenizer (runtime/bpe.h), on all cores and
 * with the same output at any thread count; `--decode SHARD.bin` turns shards back into text;
 * `boost tokenizer train` trains a byte-level BPE and writes its tokenizer.json. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli/commands.h"
#include "runtime/bpe.h"
#include "runtime/data.h"          // defines: TOKEN_FILE_*, data_read_token_file
#include "runtime/safetensors.h"   // defines: json_parse

static void tokenize_usage(FILE *f) {
    fprintf(f,
            "usage: boost tokenize TOKENIZER.json INPUT... -o OUT.bin [--threads N] [--sep "
            "TOKEN|none]\n"
            "                      [--shard-tokens N] [--jsonl] [--quiet]\n"
            "       boost tokenize TOKENIZER.json --text TEXT          (print the ids of TEXT)\n"
            "       boost tokenize TOKENIZER.json --decode SHARD.bin [-o OUT.txt] "
            "[--skip-special]\n"
            "  TOKENIZER.json  a Hugging Face tokenizer: byte-level BPE (GPT-2, LLaMA-3, Qwen) or\n"
            "                  SentencePiece-style BPE with byte fallback (LLaMA-2, Mistral)\n"
            "  INPUT           text files (one document each) or quoted globs; *.jsonl / *.json "
            "files (or\n"
            "                  --jsonl) are JSON lines whose \"text\" field is one document each\n"
            "  -o OUT.bin      llm.c token file: uint16 tokens when the vocabulary fits (version "
            "1), else\n"
            "                  uint32 (version 2); with --shard-tokens N, OUT_000000.bin, "
            "OUT_000001.bin, ...\n"
            "                  of at most N tokens each\n"
            "  --sep TOKEN     the token before every document (default: the tokenizer's bos, else "
            "its\n"
            "                  end-of-text token); 'none' for no separator\n"
            "  --threads N     worker threads (default: every core); the output does not depend on "
            "it\n");
}

/* ---------------- inputs: documents cut into pieces ---------------- */
typedef struct {
    const unsigned char *s; size_t n;
    int cont;                  /* a later piece of a document */
    int json;                  /* a JSON line: its "text" field is the document (parsed by a worker) */
    const char *file; size_t base; int line;   /* where it comes from, for messages */
} Piece;

typedef struct { BpeIds ids; int rc; size_t text_bytes; char err[320]; } PieceOut;

typedef struct {
    const Bpe *bpe;
    Piece *pieces; PieceOut *outs; int npieces;
    int next;                  /* the next piece to take (under lock) */
    size_t done_bytes;
    pthread_mutex_t lock;
} Work;

static void *worker(void *arg) {
    Work *w = arg;
    BpeEncoder *e = bpe_encoder_new(w->bpe);
    for (;;) {
        pthread_mutex_lock(&w->lock);
        int i = w->next < w->npieces ? w->next++ : -1;
        pthread_mutex_unlock(&w->lock);
        if (i < 0) break;
        PieceOut *o = &w->outs[i];
        memset(o, 0, sizeof *o);
        if (!e) { o->rc = 1; snprintf(o->err, sizeof o->err, "out of memory"); continue; }
        const Piece *p = &w->pieces[i];
        if (p->json) {
            Json *j = json_parse((const char *)p->s, p->n, o->err, sizeof o->err);
            const Json *t = j ? json_get(j, "text") : NULL;
            if (t && t->type == JSON_STRING) {
                o->text_bytes = strlen(t->str);
                o->rc = bpe_encode(e, (const unsigned char *)t->str, o->text_bytes, 0, &o->ids,
                                   o->err, sizeof o->err);
            } else {
                if (j) snprintf(o->err, sizeof o->err, "no \"text\" string in this JSON line");
                o->rc = 2;
            }
            json_free(j);
        } else {
            o->text_bytes = p->n;
            o->rc = bpe_encode(e, p->s, p->n, p->cont, &o->ids, o->err, sizeof o->err);
        }
        pthread_mutex_lock(&w->lock);
        w->done_bytes += w->pieces[i].n;
        pthread_mutex_unlock(&w->lock);
    }
    bpe_encoder_free(e);
    return NULL;
}

/* ---------------- output: llm.c token files ---------------- */
typedef struct {
    const char *out; int64_t shard_tokens; int width;
    FILE *f; char path[1024], tmp[1100]; int shard;
    int64_t in_file, total;
    unsigned char buf[1 << 16]; size_t bn;
} Writer;

static int writer_flush(Writer *w) {
    if (w->bn && fwrite(w->buf, 1, w->bn, w->f) != w->bn) return 1;
    w->bn = 0;
    return 0;
}

static int writer_close_file(Writer *w) {
    if (!w->f) return 0;
    int32_t header[TOKEN_FILE_HEADER_INTS] = {TOKEN_FILE_MAGIC, w->width == 2 ? TOKEN_FILE_VERSION :
                                              TOKEN_FILE_VERSION_U32, (int32_t)w->in_file};
    int ok = !writer_flush(w) && fseek(w->f, 0, SEEK_SET) == 0 &&
             fwrite(header, sizeof header, 1, w->f) == 1;
    ok = fflush(w->f) == 0 && ok && fsync(fileno(w->f)) == 0;
    if (fclose(w->f) != 0) ok = 0;
    w->f = NULL;
    if (!ok || rename(w->tmp, w->path) != 0) {
        fprintf(stderr, "boost tokenize: %s: write failed: %s\n", w->path, strerror(errno));
        remove(w->tmp);
        return 1;
    }
    return 0;
}

static int writer_open_file(Writer *w) {
    if (w->shard_tokens > 0) {
        size_t n = strlen(w->out);
        if (n > 4 && !strcmp(w->out + n - 4, ".bin")) n -= 4;
        snprintf(w->path, sizeof w->path, "%.*s_%06d.bin", (int)n, w->out, w->shard++);
    } else snprintf(w->path, sizeof w->path, "%s", w->out);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp-%d", w->path, (int)getpid());
    w->f = fopen(w->tmp, "wb");
    if (!w->f) {
        fprintf(stderr, "boost tokenize: %s: cannot create: %s\n", w->tmp, strerror(errno));
        return 1;
    }
    static const int32_t zero[TOKEN_FILE_HEADER_INTS];
    w->in_file = 0;
    return fwrite(zero, sizeof zero, 1, w->f) == 1 ? 0 : 1;
}

static int writer_put(Writer *w, const int32_t *ids, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (!w->f || (w->shard_tokens > 0 && w->in_file == w->shard_tokens)) {
            if (writer_close_file(w) || writer_open_file(w)) return 1;
        }
        if (w->in_file == INT32_MAX) {
            fprintf(stderr, "boost tokenize: %s: more than %d tokens do not fit one llm.c file: "
                    "use --shard-tokens N\n", w->path, INT32_MAX);
            return 2;
        }
        if (w->bn + 4 > sizeof w->buf && writer_flush(w)) return 1;
        uint32_t v = (uint32_t)ids[i];
        memcpy(w->buf + w->bn, &v, (size_t)w->width);   /* little-endian machines */
        w->bn += (size_t)w->width;
        w->in_file++; w->total++;
    }
    return 0;
}

/* ---------------- the encoding run ---------------- */
typedef struct {
    const Bpe *bpe; int threads, quiet, tty; int32_t sep;
    Writer wr;
    Piece *pieces; int npieces, cap; size_t bytes;   /* the current batch */
    char **owned; int nowned, ownedcap;              /* JSON-lines texts of the batch */
    size_t total_bytes, done_bytes;   /* input bytes (files as they are) */
    size_t text_bytes; int64_t docs;   /* the documents' text (JSON lines: their "text" only) */
    double t0;
    int split_ok;              /* documents may be cut at "\n" + letter (regex pre-tokenizers) */
} Run;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void show_progress(const Run *r, size_t done, int final) {
    if (r->quiet || !r->tty) return;
    double dt = now_s() - r->t0;
    fprintf(stderr, "\rtokenize: %.1f/%.1f MB, %.1f MB/s, %lld tokens\033[K%s", done / 1e6,
            r->total_bytes / 1e6, dt > 0 ? done / 1e6 / dt : 0, (long long)r->wr.total,
            final ? "\n" : "");
    fflush(stderr);
}

/* Encode the batch on the threads, write it in order, free it. 0, 1 or 2. */
static int run_batch(Run *r) {
    Work w = {.bpe = r->bpe, .pieces = r->pieces, .npieces = r->npieces};
    w.outs = calloc((size_t)r->npieces + 1, sizeof *w.outs);
    if (!w.outs) { fprintf(stderr, "boost tokenize: out of memory\n"); return 1; }
    pthread_mutex_init(&w.lock, NULL);
    int nt = r->threads < r->npieces ? r->threads : r->npieces, started = 0;
    pthread_t *tid = calloc((size_t)nt + 1, sizeof *tid);
    for (int t = 0; t < nt; t++) if (pthread_create(&tid[t], NULL, worker, &w) == 0) started++;
    if (!started) worker(&w);
    for (;;) {   /* the progress line while the workers run */
        pthread_mutex_lock(&w.lock);
        size_t done = w.done_bytes;
        int all = w.next >= w.npieces;
        pthread_mutex_unlock(&w.lock);
        if (all) break;
        show_progress(r, r->done_bytes + done, 0);
        usleep(100000);
    }
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
    free(tid);
    pthread_mutex_destroy(&w.lock);
    int rc = 0;
    for (int i = 0; i < r->npieces; i++) {
        const Piece *p = &r->pieces[i];
        PieceOut *o = &w.outs[i];
        if (!rc && o->rc) {
            rc = o->rc;
            if (p->line) fprintf(stderr, "boost tokenize: %s:%d: %s\n", p->file, p->line, o->err);
            else if (!strncmp(o->err, "byte ", 5) &&
                     strchr(o->err, ':')) { /* offsets in the file */
                size_t at = strtoull(o->err + 5, NULL, 10);
                fprintf(stderr, "boost tokenize: %s: byte %zu%s\n", p->file, p->base + at,
                        strchr(o->err, ':'));
            } else fprintf(stderr, "boost tokenize: %s: %s\n", p->file, o->err);
        }
        if (!rc && !p->cont && r->sep >= 0) rc = writer_put(&r->wr, &r->sep, 1);
        if (!rc) rc = writer_put(&r->wr, o->ids.v, o->ids.n);
        r->text_bytes += o->text_bytes;
        free(o->ids.v);
    }
    free(w.outs);
    for (int i = 0; i < r->nowned; i++) free(r->owned[i]);
    r->done_bytes += r->bytes;
    r->npieces = 0; r->nowned = 0; r->bytes = 0;
    show_progress(r, r->done_bytes, 0);
    return rc;
}

#define PIECE_BYTES (1u << 16)        /* documents are cut into pieces of about this size */
#define BATCH_BYTES (64u << 20)       /* text encoded between two writes */

static int add_piece(Run *r, Piece p) {
    if (r->npieces == r->cap) {
        int cap = r->cap ? 2 * r->cap : 1024;
        Piece *q = realloc(r->pieces, sizeof *q * (size_t)cap);
        if (!q) { fprintf(stderr, "boost tokenize: out of memory\n"); return 1; }
        r->pieces = q; r->cap = cap;
    }
    r->pieces[r->npieces++] = p;
    r->bytes += p.n;
    return r->bytes >= BATCH_BYTES ? run_batch(r) : 0;
}

/* A place to cut a document for the regex pre-tokenizers: a letter after one line break that
 * follows a visible ASCII character ("x\nT": the pieces end with "\n" whether the text goes on or
 * not; after "\n\n" they would not: "\s+(?!\S)" sees the end of the piece). */
static int cut_at(const unsigned char *s, size_t p) {
    return s[p - 1] == '\n' && s[p - 2] > ' ' && s[p - 2] < 127 && (s[p] | 32) >= 'a' &&
           (s[p] | 32) <= 'z';
}

/* One document: cut into pieces at cut_at places when it is long and the tokenizer allows it. */
static int add_document(Run *r, const unsigned char *s, size_t n, const char *file, size_t base,
                        int line) {
    r->docs++;
    size_t start = 0;
    while (r->split_ok && n - start > 2 * PIECE_BYTES) {
        size_t p = start + PIECE_BYTES;
        while (p < n && !cut_at(s, p)) p++;
        if (p >= n) break;
        int rc = add_piece(r, (Piece){s + start, p - start, start > 0, 0, file, base + start, line});
        if (rc) return rc;
        start = p;
    }
    if (n == 0 && r->sep < 0) return 0;
    return add_piece(r, (Piece){s + start, n - start, start > 0, 0, file, base + start, line});
}

static int is_jsonl(const char *path, int force) {
    size_t n = strlen(path);
    return force || (n > 6 && !strcmp(path + n - 6, ".jsonl")) ||
           (n > 5 && !strcmp(path + n - 5, ".json"));
}

static int keep_text(Run *r, char *t) {
    if (r->nowned == r->ownedcap) {
        int cap = r->ownedcap ? 2 * r->ownedcap : 1024;
        char **q = realloc(r->owned, sizeof *q * (size_t)cap);
        if (!q) return 1;
        r->owned = q; r->ownedcap = cap;
    }
    r->owned[r->nowned++] = t;
    return 0;
}

static int add_jsonl(Run *r, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "boost tokenize: %s: cannot open: %s\n", path, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int lineno = 0, rc = 0;
    while (!rc && (got = getline(&line, &cap, f)) >= 0) {   /* the workers parse the lines */
        lineno++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r' || line[got - 1] == ' '))
            got--;
        if (got == 0) continue;
        char *copy = malloc((size_t)got);
        if (!copy || keep_text(r, copy)) {
            free(copy);
            fprintf(stderr, "boost tokenize: out of memory\n");
            rc = 1;
            break;
        }
        memcpy(copy, line, (size_t)got);
        r->docs++;
        rc = add_piece(r, (Piece){(const unsigned char *)copy, (size_t)got, 0, 1, path, 0, lineno});
    }
    free(line);
    fclose(f);
    return rc;
}

static int add_text_file(Run *r, const char *path, void **map, size_t *maplen) {
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "boost tokenize: %s: cannot open: %s\n", path, strerror(errno));
        if (fd >= 0) close(fd);
        return 2;
    }
    *maplen = (size_t)st.st_size;
    *map = NULL;
    if (st.st_size > 0) {
        *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (*map == MAP_FAILED) {
            *map = NULL;
            close(fd);
            fprintf(stderr, "boost tokenize: %s: cannot map: %s\n", path, strerror(errno));
            return 1;
        }
    }
    close(fd);
    return add_document(r, *map ? *map : (const unsigned char *)"", *maplen, path, 0, 0);
}

/* Expand the INPUT arguments (globs in sorted order). */
static int expand_inputs(char **args, int n, glob_t *g) {
    memset(g, 0, sizeof *g);
    for (int i = 0; i < n; i++) {
        int flags = GLOB_NOCHECK | (i ? GLOB_APPEND : 0);
        if (glob(args[i], flags, NULL, g) != 0) return -1;
    }
    return 0;
}

static int encode_files(Run *r, char **inputs, int ninputs, int force_jsonl) {
    glob_t g;
    if (expand_inputs(inputs, ninputs, &g)) {
        fprintf(stderr, "boost tokenize: cannot expand the inputs\n");
        return 2;
    }
    struct stat st;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        if (stat(g.gl_pathv[i], &st) != 0) {
            fprintf(stderr, "boost tokenize: %s: no such file (or the glob matched nothing)\n",
                    g.gl_pathv[i]);
            globfree(&g);
            return 2;
        }
        r->total_bytes += (size_t)st.st_size;
    }
    void **maps = calloc(g.gl_pathc + 1, sizeof *maps);
    size_t *lens = calloc(g.gl_pathc + 1, sizeof *lens);
    int rc = 0;
    for (size_t i = 0; !rc && i < g.gl_pathc; i++)
        rc = is_jsonl(g.gl_pathv[i], force_jsonl)
                     ? add_jsonl(r, g.gl_pathv[i])
                     : add_text_file(r, g.gl_pathv[i], &maps[i], &lens[i]);
    if (!rc && r->npieces) rc = run_batch(r);
    for (size_t i = 0; i < g.gl_pathc; i++) if (maps[i]) munmap(maps[i], lens[i]);
    free(maps); free(lens);
    globfree(&g);
    return rc;
}

static int print_ids(const Bpe *b, const char *text) {
    BpeEncoder *e = bpe_encoder_new(b);
    BpeIds ids = {0};
    char err[320];
    int rc = e ? bpe_encode(e, (const unsigned char *)text, strlen(text), 0, &ids, err, sizeof err)
               : 1;
    if (rc) fprintf(stderr, "boost tokenize: --text: %s\n", e ? err : "out of memory");
    for (int64_t i = 0; !rc && i < ids.n; i++) printf("%s%d", i ? " " : "", ids.v[i]);
    if (!rc) printf("\n");
    free(ids.v);
    bpe_encoder_free(e);
    return rc;
}

static int decode_file(const Bpe *b, const char *in, const char *out, int skip_special) {
    TokenStream ts;
    char err[512];
    if (data_read_token_file(in, &ts, err, sizeof err)) {
        fprintf(stderr, "boost tokenize: %s\n", err);
        return 2;
    }
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = bpe_decode(b, ts.tokens, ts.ntokens, skip_special, &buf, &len, &cap, err, sizeof err);
    data_free(&ts);
    if (rc) { fprintf(stderr, "boost tokenize: %s: %s\n", in, err); free(buf); return rc; }
    FILE *f = out ? fopen(out, "wb") : stdout;
    if (!f) {
        fprintf(stderr, "boost tokenize: %s: cannot create: %s\n", out, strerror(errno));
        free(buf);
        return 1;
    }
    int ok = fwrite(buf, 1, len, f) == len;
    if (out && fclose(f) != 0) ok = 0;
    if (!out) fflush(stdout);
    free(buf);
    if (!ok) {
        fprintf(stderr, "boost tokenize: %s: write failed\n", out ? out : "stdout");
        return 1;
    }
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *tok = NULL, *out = NULL, *decode = NULL, *text = NULL, *sep = NULL;
    char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    int ninputs = 0, threads = (int)sysconf(_SC_NPROCESSORS_ONLN), quiet = 0, jsonl = 0,
        skip_special = 0;
    long long shard_tokens = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int takes = !strcmp(a, "-o") || !strcmp(a, "--threads") || !strcmp(a, "--sep") ||
                    !strcmp(a, "--decode") || !strcmp(a, "--text") || !strcmp(a, "--shard-tokens");
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenize_usage(stdout);
            free(inputs);
            return 0;
        }
        if (takes && i + 1 >= argc) {
            fprintf(stderr, "boost tokenize: %s needs a value\n", a);
            free(inputs);
            return 2;
        }
        if (!strcmp(a, "-o")) out = argv[++i];
        else if (!strcmp(a, "--threads")) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--sep")) sep = argv[++i];
        else if (!strcmp(a, "--decode")) decode = argv[++i];
        else if (!strcmp(a, "--text")) text = argv[++i];
        else if (!strcmp(a, "--shard-tokens")) shard_tokens = atoll(argv[++i]);
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--jsonl")) jsonl = 1;
        else if (!strcmp(a, "--skip-special")) skip_special = 1;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "boost tokenize: unknown option %s\n", a);
            tokenize_usage(stderr);
            free(inputs);
            return 2;
        } else if (!tok) tok = a;
        else inputs[ninputs++] = argv[i];
    }
    int rc = 2;
    if (!tok || (!decode && !text && (!ninputs || !out)) || threads < 1 || shard_tokens < 0 ||
        shard_tokens > INT32_MAX) {
        tokenize_usage(stderr);
        free(inputs);
        return 2;
    }
    char err[600];
    Bpe *b = bpe_load(tok, &rc, err, sizeof err);
    if (!b) { fprintf(stderr, "boost tokenize: %s\n", err); free(inputs); return rc; }
    if (text) rc = print_ids(b, text);
    else if (decode) rc = decode_file(b, decode, out, skip_special);
    else {
        Run r = {.bpe = b, .threads = threads, .quiet = quiet, .tty = isatty(2), .t0 = now_s()};
        r.sep = bpe_separator(b);
        if (sep && !strcmp(sep, "none")) r.sep = -1;
        else if (sep && (r.sep = bpe_token_id(b, sep)) < 0) {
            fprintf(stderr, "boost tokenize: --sep %s: no such token in %s\n", sep, tok);
            bpe_free(b); free(inputs);
            return 2;
        }
        r.split_ok = bpe_kind(b) == BPE_BYTE_LEVEL;
        r.wr = (Writer){.out = out,
                        .shard_tokens = shard_tokens,
                        .width = bpe_vocab_size(b) <= 65536 ? 2 : 4};
        rc = encode_files(&r, inputs, ninputs, jsonl);
        if (!rc && !r.wr.f) rc = writer_open_file(&r.wr);   /* no tokens: an empty file still */
        if (!rc) rc = writer_close_file(&r.wr);
        else if (r.wr.f) { fclose(r.wr.f); remove(r.wr.tmp); }
        show_progress(&r, r.done_bytes, 1);
        double dt = now_s() - r.t0;
        if (!rc)
            printf("tokenize: %lld documents, %.1f MB of text -> %lld tokens (%.2f bytes/token, %s) "
                   "in %.2f s (%.1f MB/s, %d threads) -> %s%s\n",
                   (long long)r.docs, r.text_bytes / 1e6, (long long)r.wr.total,
                   r.wr.total ? (double)r.text_bytes / (double)r.wr.total : 0, bpe_describe(b), dt,
                   dt > 0 ? r.text_bytes / 1e6 / dt : 0, threads, out, shard_tokens ? " (shards)" : "");
        free(r.pieces); free(r.owned);
    }
    bpe_free(b);
    free(inputs);
    return rc;
}

/* ---------------- boost tokenizer train ---------------- */
static void tokenizer_usage(FILE *f) {
    fprintf(f, "usage: boost tokenizer train INPUT... --vocab N -o tokenizer.json [--special "
               "TOKEN]...\n"
               "  INPUT        text files or quoted globs; *.jsonl / *.json: JSON lines with a "
               "\"text\" field\n"
               "  --vocab N    tokens in all: the 256 bytes, the special tokens, then merges\n"
               "  --special T  a special token (ids 0, 1, ... in order; default <|endoftext|>)\n"
               "Trains a byte-level BPE (GPT-2 pre-tokenization) and writes a Hugging Face "
               "tokenizer.json.\n");
}

/* Every input as texts in memory: a text file is one text, a JSON-lines file one per line. */
static int load_texts(char **args, int nargs, unsigned char ***texts, size_t **lens, int *n) {
    glob_t g;
    if (expand_inputs(args, nargs, &g)) return 2;
    int cap = 0, rc = 0;
    for (size_t i = 0; i < g.gl_pathc && !rc; i++) {
        FILE *f = fopen(g.gl_pathv[i], "rb");
        if (!f) {
            fprintf(stderr, "boost tokenizer: %s: cannot open: %s\n", g.gl_pathv[i],
                    strerror(errno));
            rc = 2;
            break;
        }
        char *line = NULL, why[256];
        size_t lcap = 0;
        ssize_t got = -1;
        int lineno = 0, jl = is_jsonl(g.gl_pathv[i], 0);
        if (!jl) {   /* the whole file */
            fseek(f, 0, SEEK_END);
            long len = ftell(f);
            fseek(f, 0, SEEK_SET);
            line = malloc((size_t)len + 1);
            got = line && len >= 0 ? (ssize_t)fread(line, 1, (size_t)len, f) : -1;
        }
        for (;;) {
            if (jl && (got = getline(&line, &lcap, f)) < 0) break;
            if (!line || got < 0) { rc = 1; break; }
            lineno++;
            unsigned char *text = NULL;
            size_t tn = 0;
            if (jl) {
                Json *j = got > 1 ? json_parse(line, (size_t)got, why, sizeof why) : NULL;
                const Json *t = j ? json_get(j, "text") : NULL;
                if (got > 1 && (!t || t->type != JSON_STRING)) {
                    fprintf(stderr, "boost tokenizer: %s:%d: %s\n", g.gl_pathv[i], lineno,
                            j ? "no \"text\" string" : why);
                    json_free(j);
                    rc = 2;
                    break;
                }
                if (t) { tn = strlen(t->str); text = (unsigned char *)strdup(t->str); }
                json_free(j);
            } else { text = (unsigned char *)line; tn = (size_t)got; line = NULL; }
            if (text) {
                if (*n == cap) {
                    cap = cap ? 2 * cap : 256;
                    *texts = realloc(*texts, sizeof **texts * (size_t)cap);
                    *lens = realloc(*lens, sizeof **lens * (size_t)cap);
                    if (!*texts || !*lens) { rc = 1; break; }
                }
                (*texts)[*n] = text; (*lens)[(*n)++] = tn;
            }
            if (!jl) break;
        }
        free(line);
        fclose(f);
    }
    globfree(&g);
    return rc;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "train")) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            tokenizer_usage(stdout);
            return 0;
        }
        tokenizer_usage(stderr);
        return 2;
    }
    const char *out = NULL;
    int vocab = 0, ninputs = 0, nspecial = 0;
    char **inputs = calloc((size_t)argc + 1, sizeof *inputs);
    const char **specials = calloc((size_t)argc + 2, sizeof *specials);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int takes = !strcmp(a, "-o") || !strcmp(a, "--vocab") || !strcmp(a, "--special");
        if (takes && i + 1 >= argc) {
            fprintf(stderr, "boost tokenizer: %s needs a value\n", a);
            free(inputs);
            free(specials);
            return 2;
        }
        if (!strcmp(a, "-o")) out = argv[++i];
        else if (!strcmp(a, "--vocab")) vocab = atoi(argv[++i]);
        else if (!strcmp(a, "--special")) specials[nspecial++] = argv[++i];
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tokenizer_usage(stdout);
            free(inputs);
            free(specials);
            return 0;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "boost tokenizer: unknown option %s\n", a);
            free(inputs);
            free(specials);
            return 2;
        } else inputs[ninputs++] = argv[i];
    }
    if (!nspecial) specials[nspecial++] = "<|endoftext|>";
    if (!out || !ninputs || vocab <= 0) {
        tokenizer_usage(stderr);
        free(inputs);
        free(specials);
        return 2;
    }
    unsigned char **texts = NULL;
    size_t *lens = NULL, total = 0;
    int n = 0;
    double t0 = now_s();
    int rc = load_texts(inputs, ninputs, &texts, &lens, &n);
    char err[600];
    for (int i = 0; i < n; i++) total += lens[i];
    if (!rc && !total) { fprintf(stderr, "boost tokenizer: the inputs hold no text\n"); rc = 2; }
    if (!rc) {
        rc = bpe_train((const unsigned char *const *)texts, lens, n, vocab, specials, out, err,
                       sizeof err);
        if (rc) fprintf(stderr, "boost tokenizer: %s\n", err);
        else
            printf("tokenizer: %d tokens trained on %.1f MB (%d texts) in %.2f s -> %s\n", vocab,
                   total / 1e6, n, now_s() - t0, out);
    }
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts); free(lens); free(inputs); free(specials);
    return rc;
}
