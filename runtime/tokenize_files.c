/* tokenize_files.c: text files, globs and JSON lines turned into llm.c token shards with a BPE
 * tokenizer (runtime/bpe.h) on worker threads, documents cut into pieces and written in order, so the
 * output does not depend on the thread count. Used by `boost tokenize` and the token cache of runs. */
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
#include "runtime/tokenize_files.h"  // defines: TokenizeJob, TokenizeResult, tokenize_files
#include "runtime/token_file.h"      // defines: TOKEN_FILE_*
#include "common/json.h"     // defines: json_parse

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
    const char *who;           /* the command, for messages */
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
        fprintf(stderr, "%s: %s: write failed: %s\n", w->who, w->path, strerror(errno));
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
        fprintf(stderr, "%s: %s: cannot create: %s\n", w->who, w->tmp, strerror(errno));
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
            fprintf(stderr, "%s: %s: more than %d tokens do not fit one llm.c file: "
                    "use --shard-tokens N\n", w->who, w->path, INT32_MAX);
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
    const char *who;
    const Bpe *bpe; int threads, quiet, tty; int32_t sep;
    Writer wr;
    Piece *pieces; int npieces, cap; size_t bytes;   /* the current batch */
    char **owned; int nowned, ownedcap;              /* JSON-lines texts of the batch */
    size_t total_bytes, done_bytes;   /* input bytes (files as they are) */
    size_t text_bytes; int64_t docs;   /* the documents' text (JSON lines: their "text" only) */
    double t0;
    int split_ok;              /* documents may be cut at "\n" + letter (regex pre-tokenizers) */
} Run;

double tokenize_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void show_progress(const Run *r, size_t done, int final) {
    if (r->quiet || !r->tty) return;
    double dt = tokenize_now_s() - r->t0;
    fprintf(stderr, "\rtokenize: %.1f/%.1f MB, %.1f MB/s, %lld tokens\033[K%s", done / 1e6,
            r->total_bytes / 1e6, dt > 0 ? done / 1e6 / dt : 0, (long long)r->wr.total,
            final ? "\n" : "");
    fflush(stderr);
}

/* Encode the batch on the threads, write it in order, free it. 0, 1 or 2. */
static int run_batch(Run *r) {
    Work w = {.bpe = r->bpe, .pieces = r->pieces, .npieces = r->npieces};
    w.outs = calloc((size_t)r->npieces + 1, sizeof *w.outs);
    if (!w.outs) { fprintf(stderr, "%s: out of memory\n", r->who); return 1; }
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
            if (p->line) fprintf(stderr, "%s: %s:%d: %s\n", r->who, p->file, p->line, o->err);
            else if (!strncmp(o->err, "byte ", 5) &&
                     strchr(o->err, ':')) { /* offsets in the file */
                size_t at = strtoull(o->err + 5, NULL, 10);
                fprintf(stderr, "%s: %s: byte %zu%s\n", r->who, p->file, p->base + at,
                        strchr(o->err, ':'));
            } else fprintf(stderr, "%s: %s: %s\n", r->who, p->file, o->err);
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
        if (!q) { fprintf(stderr, "%s: out of memory\n", r->who); return 1; }
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

int tokenize_is_jsonl(const char *path, int force) {
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
        fprintf(stderr, "%s: %s: cannot open: %s\n", r->who, path, strerror(errno));
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
            fprintf(stderr, "%s: out of memory\n", r->who);
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
        fprintf(stderr, "%s: %s: cannot open: %s\n", r->who, path, strerror(errno));
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
            fprintf(stderr, "%s: %s: cannot map: %s\n", r->who, path, strerror(errno));
            return 1;
        }
    }
    close(fd);
    return add_document(r, *map ? *map : (const unsigned char *)"", *maplen, path, 0, 0);
}

/* Expand the INPUT arguments (globs in sorted order). */
int tokenize_expand_inputs(char **args, int n, glob_t *g) {
    memset(g, 0, sizeof *g);
    for (int i = 0; i < n; i++) {
        int flags = GLOB_NOCHECK | (i ? GLOB_APPEND : 0);
        if (glob(args[i], flags, NULL, g) != 0) return -1;
    }
    return 0;
}

static int encode_files(Run *r, char **inputs, int ninputs, int force_jsonl) {
    glob_t g;
    if (tokenize_expand_inputs(inputs, ninputs, &g)) {
        fprintf(stderr, "%s: cannot expand the inputs\n", r->who);
        return 2;
    }
    struct stat st;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        if (stat(g.gl_pathv[i], &st) != 0) {
            fprintf(stderr, "%s: %s: no such file (or the glob matched nothing)\n", r->who,
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
        rc = tokenize_is_jsonl(g.gl_pathv[i], force_jsonl)
                     ? add_jsonl(r, g.gl_pathv[i])
                     : add_text_file(r, g.gl_pathv[i], &maps[i], &lens[i]);
    if (!rc && r->npieces) rc = run_batch(r);
    for (size_t i = 0; i < g.gl_pathc; i++) if (maps[i]) munmap(maps[i], lens[i]);
    free(maps); free(lens);
    globfree(&g);
    return rc;
}

int tokenize_files(const Bpe *b, char **inputs, int ninputs, const TokenizeJob *job,
                   TokenizeResult *res) {
    Run r = {.who = job->who, .bpe = b, .threads = job->threads > 0 ? job->threads : 1,
             .quiet = job->quiet, .tty = isatty(2), .t0 = tokenize_now_s(), .sep = job->sep};
    r.split_ok = bpe_kind(b) == BPE_BYTE_LEVEL;
    r.wr = (Writer){.who = job->who, .out = job->out, .shard_tokens = job->shard_tokens,
                    .width = bpe_vocab_size(b) <= 65536 ? 2 : 4};
    int rc = encode_files(&r, inputs, ninputs, job->force_jsonl);
    if (!rc && !r.wr.f) rc = writer_open_file(&r.wr);   /* no tokens: an empty file still */
    if (!rc) rc = writer_close_file(&r.wr);
    else if (r.wr.f) { fclose(r.wr.f); remove(r.wr.tmp); }
    show_progress(&r, r.done_bytes, 1);
    free(r.pieces); free(r.owned);
    if (res) *res = (TokenizeResult){.docs = r.docs, .tokens = r.wr.total,
                                     .text_bytes = r.text_bytes, .seconds = tokenize_now_s() - r.t0};
    return rc;
}
