/* data.c: token streams (llm.c .bin token files, raw text through the byte tokenizer, the shipped
 * fortunes corpus), the train/validation split and the deterministic shuffled batches.
 * Every check ends in a message "FILE: what is wrong (what to do)"; bad input returns 2. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/data.h"   // defines: TokenStream, Batcher, data_*, batcher_*

uint64_t data_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void data_free(TokenStream *ts) {
    free(ts->tokens);
    memset(ts, 0, sizeof *ts);
    ts->max_token = -1;
}

static void stream_finish(TokenStream *ts, const char *path) {
    ts->max_token = -1;
    for (int64_t i = 0; i < ts->ntokens; i++)
        if (ts->tokens[i] > ts->max_token) ts->max_token = ts->tokens[i];
    snprintf(ts->source, sizeof ts->source, "%s", path);
}

/* Reads a whole file; returns its bytes (caller frees) or NULL with a message. */
static unsigned char *read_whole(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path); fclose(f); return NULL;
    }
    size_t n = (size_t)st.st_size;
    unsigned char *buf = malloc(n ? n : 1);
    if (!buf) { snprintf(err, errlen, "%s: out of memory for %zu bytes", path, n); fclose(f); return NULL; }
    if (fread(buf, 1, n, f) != n) {
        snprintf(err, errlen, "%s: read error: %s", path, ferror(f) ? strerror(errno) : "file shrank");
        free(buf); fclose(f); return NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

int data_read_token_file(const char *path, TokenStream *ts, char *err, size_t errlen) {
    memset(ts, 0, sizeof *ts);
    ts->max_token = -1;
    size_t len;
    unsigned char *buf = read_whole(path, &len, err, errlen);
    if (!buf) return 2;
    const size_t header_bytes = TOKEN_FILE_HEADER_INTS * sizeof(int32_t);
    if (len < 3 * sizeof(int32_t)) {
        snprintf(err, errlen, "%s: not a token file (%zu bytes; a token file starts with a %zu-byte header)",
                 path, len, header_bytes);
        free(buf); return 2;
    }
    int32_t header[3];
    memcpy(header, buf, sizeof header);
    if (header[0] != TOKEN_FILE_MAGIC) {
        snprintf(err, errlen, "%s: not a token file (magic %d, expected %d)", path, header[0], TOKEN_FILE_MAGIC);
        free(buf); return 2;
    }
    if (header[1] != TOKEN_FILE_VERSION) {
        snprintf(err, errlen, "%s: token file version %d, this reader knows version %d (uint16 tokens)",
                 path, header[1], TOKEN_FILE_VERSION);
        free(buf); return 2;
    }
    if (len < header_bytes) {
        snprintf(err, errlen, "%s: truncated: %zu bytes, shorter than the %zu-byte header", path, len, header_bytes);
        free(buf); return 2;
    }
    int64_t count = header[2];
    int64_t body = (int64_t)(len - header_bytes);
    if (count <= 0) {
        snprintf(err, errlen, "%s: the header says %lld tokens: no data", path, (long long)count);
        free(buf); return 2;
    }
    if (body < 2 * count) {
        snprintf(err, errlen, "%s: truncated: the header says %lld tokens (%lld bytes) but only %lld bytes follow it",
                 path, (long long)count, (long long)(2 * count), (long long)body);
        free(buf); return 2;
    }
    if (body > 2 * count) {
        snprintf(err, errlen, "%s: %lld bytes follow the header but it says %lld tokens (%lld bytes): a damaged file?",
                 path, (long long)body, (long long)count, (long long)(2 * count));
        free(buf); return 2;
    }
    ts->tokens = malloc((size_t)count * sizeof(int32_t));
    if (!ts->tokens) { snprintf(err, errlen, "%s: out of memory", path); free(buf); return 1; }
    const unsigned char *p = buf + header_bytes;
    for (int64_t i = 0; i < count; i++) ts->tokens[i] = (int32_t)(p[2 * i] | (p[2 * i + 1] << 8));   // little-endian uint16
    ts->ntokens = count;
    free(buf);
    stream_finish(ts, path);
    return 0;
}

int data_write_token_file(const char *path, const int32_t *tokens, int64_t n, char *err, size_t errlen) {
    if (n < 0 || n > INT32_MAX) { snprintf(err, errlen, "%s: %lld tokens do not fit a token file", path, (long long)n); return 1; }
    int32_t header[TOKEN_FILE_HEADER_INTS] = {TOKEN_FILE_MAGIC, TOKEN_FILE_VERSION, (int32_t)n};
    FILE *f = fopen(path, "wb");
    if (!f) { snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno)); return 1; }
    int ok = fwrite(header, sizeof header, 1, f) == 1;
    for (int64_t i = 0; ok && i < n; i++) {
        if (tokens[i] < 0 || tokens[i] > 65535) {
            snprintf(err, errlen, "%s: token %d at %lld does not fit uint16", path, tokens[i], (long long)i);
            fclose(f); remove(path); return 1;
        }
        unsigned char b[2] = {(unsigned char)(tokens[i] & 255), (unsigned char)(tokens[i] >> 8)};
        ok = fwrite(b, 2, 1, f) == 1;
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) { snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno)); remove(path); return 1; }
    return 0;
}

int data_read_text_file(const char *path, TokenStream *ts, char *err, size_t errlen) {
    memset(ts, 0, sizeof *ts);
    ts->max_token = -1;
    size_t len;
    unsigned char *buf = read_whole(path, &len, err, errlen);
    if (!buf) return 2;
    if (len == 0) { snprintf(err, errlen, "%s: empty text file", path); free(buf); return 2; }
    ts->tokens = malloc(len * sizeof(int32_t));
    if (!ts->tokens) { snprintf(err, errlen, "%s: out of memory", path); free(buf); return 1; }
    ts->ntokens = tokenize_bytes(buf, len, ts->tokens);
    free(buf);
    stream_finish(ts, path);
    return 0;
}

/* The repository root: $BOOST_ROOT, else the nearest folder above the binary that holds
 * tools/corpus.sh. Returns 0 and the path, or -1. */
static int repo_root(char *out, size_t outlen) {
    const char *env = getenv("BOOST_ROOT");
    if (env && *env) { snprintf(out, outlen, "%s", env); return 0; }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -1;
    exe[n] = 0;
    for (int up = 0; up < 4; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash) return -1;
        *slash = 0;
        char probe[PATH_MAX + 32];
        snprintf(probe, sizeof probe, "%s/tools/corpus.sh", exe[0] ? exe : "/");
        if (access(probe, R_OK) == 0) { snprintf(out, outlen, "%s", exe[0] ? exe : "/"); return 0; }
    }
    return -1;
}

static int has_suffix(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int data_load(const char *path, TokenStream *ts, char *err, size_t errlen) {
    memset(ts, 0, sizeof *ts);
    ts->max_token = -1;
    if (!path || !*path) {
        snprintf(err, errlen, "no training data: set data in the run spec or -D data=corpus|FILE.bin|FILE.txt");
        return 2;
    }
    char root[PATH_MAX] = "";
    int have_root = repo_root(root, sizeof root) == 0;
    char resolved[PATH_MAX + 64];
    if (!strcmp(path, "corpus")) {
        if (access("build/corpus.txt", R_OK) == 0 || !have_root)
            snprintf(resolved, sizeof resolved, "build/corpus.txt");
        else
            snprintf(resolved, sizeof resolved, "%s/build/corpus.txt", root);
        if (access(resolved, R_OK) != 0) {
            if (!have_root) {
                snprintf(err, errlen, "corpus: %s is missing and tools/corpus.sh was not found: run 'bash tools/corpus.sh' "
                         "in the repository (or set BOOST_ROOT)", resolved);
                return 2;
            }
            fprintf(stderr, "building the corpus %s from Debian's fortunes (tools/corpus.sh)\n", resolved);
            char cmd[3 * PATH_MAX];
            snprintf(cmd, sizeof cmd, "bash '%s/tools/corpus.sh' '%s'", root, resolved);
            int rc = system(cmd);
            if (rc != 0 || access(resolved, R_OK) != 0) {
                snprintf(err, errlen, "corpus: tools/corpus.sh could not build %s (see above): install Debian's "
                         "'fortunes' package (make deps) or give another data file with -D data=FILE", resolved);
                return 1;
            }
        }
        return data_read_text_file(resolved, ts, err, errlen);
    }
    snprintf(resolved, sizeof resolved, "%s", path);
    if (access(resolved, F_OK) != 0 && path[0] != '/' && have_root) {
        char alt[sizeof resolved];
        snprintf(alt, sizeof alt, "%s/%s", root, path);
        if (access(alt, F_OK) == 0) snprintf(resolved, sizeof resolved, "%s", alt);
    }
    if (has_suffix(resolved, ".bin")) return data_read_token_file(resolved, ts, err, errlen);
    return data_read_text_file(resolved, ts, err, errlen);
}

void batcher_free(Batcher *b) {
    free(b->order);
    b->order = NULL;
}

int batcher_init(Batcher *b, const TokenStream *ts, double val_fraction, int micro_batch, int seq,
                 int vocab, uint64_t seed, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    b->order_epoch = -1;
    if (micro_batch < 1 || seq < 1) { snprintf(err, errlen, "micro_batch (%d) and seq (%d) must be positive", micro_batch, seq); return 2; }
    if (!(val_fraction >= 0 && val_fraction < 1)) {
        snprintf(err, errlen, "val_fraction %g must be in [0, 1)", val_fraction); return 2;
    }
    if (ts->max_token >= vocab) {
        int64_t at = 0;
        while (at < ts->ntokens && ts->tokens[at] < vocab) at++;
        snprintf(err, errlen, "%s: token %d (at position %lld) is outside the model's vocabulary of %d: "
                 "this data was tokenized for another model", ts->source, ts->tokens[at], (long long)at, vocab);
        return 2;
    }
    int64_t nval = (int64_t)((double)ts->ntokens * val_fraction);
    int64_t need = (int64_t)micro_batch * seq + 1;
    b->tokens = ts->tokens;
    b->train_begin = 0;
    b->train_len = ts->ntokens - nval;
    b->val_begin = b->train_len;
    b->val_len = nval;
    b->micro_batch = micro_batch;
    b->seq = seq;
    b->seed = seed;
    b->train_windows = b->train_len > 1 ? (b->train_len - 1) / seq : 0;
    b->val_windows = b->val_len > 1 ? (b->val_len - 1) / seq : 0;
    if (b->train_windows < micro_batch) {
        snprintf(err, errlen, "%s: %lld training tokens (of %lld, val_fraction %g), fewer than one batch of "
                 "micro_batch*seq+1 = %lld: give more data or a smaller micro_batch/seq",
                 ts->source, (long long)b->train_len, (long long)ts->ntokens, val_fraction, (long long)need);
        return 2;
    }
    if (val_fraction > 0 && b->val_windows < micro_batch) {
        snprintf(err, errlen, "%s: %lld validation tokens (val_fraction %g of %lld), fewer than one batch of "
                 "micro_batch*seq+1 = %lld: raise val_fraction, give more data, or set val_fraction=0",
                 ts->source, (long long)b->val_len, val_fraction, (long long)ts->ntokens, (long long)need);
        return 2;
    }
    b->order = malloc((size_t)b->train_windows * sizeof(int64_t));
    if (!b->order) { snprintf(err, errlen, "out of memory for %lld windows", (long long)b->train_windows); return 1; }
    return 0;
}

/* The window order of one epoch: a Fisher-Yates shuffle seeded from (seed, epoch). */
static void build_order(Batcher *b, int64_t epoch) {
    int64_t n = b->train_windows;
    for (int64_t i = 0; i < n; i++) b->order[i] = i;
    uint64_t state = b->seed ^ (0xd1b54a32d192ed03ULL * (uint64_t)(epoch + 1));
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(data_splitmix64(&state) % (uint64_t)(i + 1));
        int64_t t = b->order[i]; b->order[i] = b->order[j]; b->order[j] = t;
    }
    b->order_epoch = epoch;
}

static void fill_window(const int32_t *tokens, int64_t start, int seq, int32_t *inputs, int32_t *targets) {
    memcpy(inputs, tokens + start, (size_t)seq * sizeof(int32_t));
    memcpy(targets, tokens + start + 1, (size_t)seq * sizeof(int32_t));
}

void batcher_train(Batcher *b, int64_t pos, int32_t *inputs, int32_t *targets) {
    int64_t per_epoch = b->train_windows / b->micro_batch;
    int64_t epoch = pos / per_epoch, idx = pos % per_epoch;
    if (epoch != b->order_epoch) build_order(b, epoch);
    for (int i = 0; i < b->micro_batch; i++) {
        int64_t w = b->order[idx * b->micro_batch + i];
        fill_window(b->tokens, b->train_begin + w * b->seq, b->seq,
                    inputs + (size_t)i * b->seq, targets + (size_t)i * b->seq);
    }
}

int64_t batcher_val_batches(const Batcher *b, int64_t max_batches) {
    int64_t n = b->val_windows / b->micro_batch;
    return n < max_batches ? n : max_batches;
}

void batcher_val(const Batcher *b, int64_t i, int32_t *inputs, int32_t *targets) {
    for (int j = 0; j < b->micro_batch; j++) {
        int64_t w = i * b->micro_batch + j;
        fill_window(b->tokens, b->val_begin + w * b->seq, b->seq,
                    inputs + (size_t)j * b->seq, targets + (size_t)j * b->seq);
    }
}
