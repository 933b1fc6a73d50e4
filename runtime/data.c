/* data.c: token data (llm.c .bin token shards memory-mapped, raw text tokenised once into a cached
 * shard, the shipped fortunes corpus), the train/validation split and the deterministic shuffled
 * batches, sliced over dp ranks. Every check ends in a message "FILE: what is wrong (what to do)";
 * bad input returns 2. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <signal.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/data.h"   // defines: TokenStream, Batcher, data_*, batcher_*
#include "common/checked.h" // defines: ck_bytes
#include "common/crc32c.h"  // defines: crc32c_file
#include "common/files.h"   // defines: file_read_stream
#include "common/env.h"     // defines: env_repo_root
#include "runtime/tokenize_files.h"  // defines: tokenize_files

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

int data_open_regular(const char *path, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); // a FIFO's open would wait for a writer
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file (a FIFO, a device or a folder): give a file",
                 path);
        close(fd);
        errno = EINVAL;
        return -1;
    }
    if (fcntl(fd, F_SETFL, 0) != 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

FILE *data_open_regular_stream(const char *path, char *err, size_t errlen) {
    int fd = data_open_regular(path, err, errlen);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (fd >= 0 && !f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

/* Reads a whole file; returns its bytes (caller frees) or NULL with a message. */
static unsigned char *read_whole(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = data_open_regular_stream(path, err, errlen);
    if (!f) return NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path); fclose(f); return NULL;
    }
    unsigned char *buf =
        (unsigned char *)file_read_stream(f, path, (size_t)1 << 40, len, err, errlen);
    fclose(f);
    return buf;
}

/* Checks an llm.c header against the file's length: sets *width (bytes per token) and *count.
 * Returns 0, or 2 with "PATH: what is wrong". */
static int check_header(const char *path, const unsigned char *head, size_t headlen, size_t len,
                        int *width, int64_t *count, char *err, size_t errlen) {
    const size_t header_bytes = TOKEN_FILE_HEADER_INTS * sizeof(int32_t);
    if (len < 3 * sizeof(int32_t) || headlen < 3 * sizeof(int32_t)) {
        snprintf(err, errlen,
                 "%s: not a token file (%zu bytes; a token file starts with a %zu-byte header)",
                 path, len, header_bytes);
        return 2;
    }
    int32_t header[3];
    memcpy(header, head, sizeof header);
    if (header[0] != TOKEN_FILE_MAGIC) {
        snprintf(err, errlen, "%s: not a token file (magic %d, expected %d)", path, header[0],
                 TOKEN_FILE_MAGIC);
        return 2;
    }
    if (header[1] != TOKEN_FILE_VERSION && header[1] != TOKEN_FILE_VERSION_U32) {
        snprintf(err, errlen,
                 "%s: token file version %d, this reader knows "
                 "versions %d (uint16 tokens) and %d (uint32)",
                 path, header[1], TOKEN_FILE_VERSION, TOKEN_FILE_VERSION_U32);
        return 2;
    }
    if (len < header_bytes) {
        snprintf(err, errlen, "%s: truncated: %zu bytes, shorter than the %zu-byte header", path,
                 len, header_bytes);
        return 2;
    }
    int w = header[1] == TOKEN_FILE_VERSION ? 2 : 4;
    int64_t n = header[2], need = 0; /* an int32 count: w * n never wraps, checked all the same */
    int64_t body = (int64_t)(len - header_bytes);
    if (n <= 0 || ck_bytes(n, w, 1, &need)) {
        snprintf(err, errlen, "%s: the header says %lld tokens: no data", path, (long long)n);
        return 2;
    }
    if (body < need) {
        snprintf(err, errlen,
                 "%s: truncated: the header says %lld tokens "
                 "(%lld bytes) but only %lld bytes follow it",
                 path, (long long)n, (long long)(w * n), (long long)body);
        return 2;
    }
    if (body > need) {
        snprintf(err, errlen,
                 "%s: %lld bytes follow the header but it says "
                 "%lld tokens (%lld bytes): a damaged file?",
                 path, (long long)body, (long long)n, (long long)(w * n));
        return 2;
    }
    *width = w;
    *count = n;
    return 0;
}

static inline uint32_t token_at(const unsigned char *p, int width, int64_t i) {
    if (width == 2) return (uint32_t)(p[2 * i] | (p[2 * i + 1] << 8));   // little-endian uint16
    uint32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
}

int data_read_token_file(const char *path, TokenStream *ts, char *err, size_t errlen) {
    memset(ts, 0, sizeof *ts);
    ts->max_token = -1;
    size_t len;
    unsigned char *buf = read_whole(path, &len, err, errlen);
    if (!buf) return 2;
    int width;
    int64_t count;
    if (check_header(path, buf, len, len, &width, &count, err, errlen)) { free(buf); return 2; }
    ts->tokens = malloc((size_t)count * sizeof(int32_t));
    if (!ts->tokens) { snprintf(err, errlen, "%s: out of memory", path); free(buf); return 1; }
    const unsigned char *p = buf + TOKEN_FILE_HEADER_INTS * sizeof(int32_t);
    for (int64_t i = 0; i < count; i++) {
        uint32_t v = token_at(p, width, i);
        if (v > INT32_MAX) {
            snprintf(err, errlen, "%s: token %u at position %lld does not fit any vocabulary", path,
                     v, (long long)i);
            free(buf); data_free(ts); return 2;
        }
        ts->tokens[i] = (int32_t)v;
    }
    ts->ntokens = count;
    free(buf);
    stream_finish(ts, path);
    return 0;
}

int data_write_token_file(const char *path, const int32_t *tokens, int64_t n, char *err,
                          size_t errlen) {
    if (n < 0 || n > INT32_MAX) {
        snprintf(err, errlen, "%s: %lld tokens do not fit a token file", path, (long long)n);
        return 1;
    }
    int32_t header[TOKEN_FILE_HEADER_INTS] = {TOKEN_FILE_MAGIC, TOKEN_FILE_VERSION, (int32_t)n};
    FILE *f = fopen(path, "wb");
    if (!f) { snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno)); return 1; }
    int ok = fwrite(header, sizeof header, 1, f) == 1;
    for (int64_t i = 0; ok && i < n; i++) {
        if (tokens[i] < 0 || tokens[i] > 65535) {
            snprintf(err, errlen, "%s: token %d at %lld does not fit uint16", path, tokens[i],
                     (long long)i);
            fclose(f); remove(path); return 1;
        }
        unsigned char b[2] = {(unsigned char)(tokens[i] & 255), (unsigned char)(tokens[i] >> 8)};
        ok = fwrite(b, 2, 1, f) == 1;
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        remove(path);
        return 1;
    }
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
    return env_repo_root("BOOST_ROOT", "tools/corpus.sh", out, outlen) < 0 ? -1 : 0;
}

static int has_suffix(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Where the plan's data path lies: "corpus" becomes build/corpus.txt (built on demand), a relative
 * path missing here is tried from the repository root. Returns 0, 2 or 1. */
static int resolve_data_path(const char *path, char *resolved, size_t rlen, char *err,
                             size_t errlen) {
    if (!path || !*path) {
        snprintf(err, errlen,
                 "no training data: set data in the run spec or "
                 "-D data=corpus|FILE.bin|'DIR/*.bin'|FILE.txt");
        return 2;
    }
    char root[PATH_MAX] = "";
    int have_root = repo_root(root, sizeof root) == 0;
    if (!strcmp(path, "corpus")) {
        if (access("build/corpus.txt", R_OK) == 0 || !have_root)
            snprintf(resolved, rlen, "build/corpus.txt");
        else
            snprintf(resolved, rlen, "%s/build/corpus.txt", root);
        if (access(resolved, R_OK) != 0) {
            if (!have_root) {
                snprintf(err, errlen,
                         "corpus: %s is missing and tools/corpus.sh was not found: run "
                         "'bash tools/corpus.sh' in the repository (or set BOOST_ROOT)", resolved);
                return 2;
            }
            fprintf(stderr, "building the corpus %s from Debian's fortunes (tools/corpus.sh)\n",
                    resolved);
            char cmd[3 * PATH_MAX];
            snprintf(cmd, sizeof cmd, "bash '%s/tools/corpus.sh' '%s'", root, resolved);
            int rc = system(cmd);
            if (rc != 0 || access(resolved, R_OK) != 0) {
                snprintf(err, errlen,
                         "corpus: tools/corpus.sh could not build %s (see "
                         "above): install Debian's 'fortunes' package (make "
                         "deps) or give another data file with -D data=FILE", resolved);
                return 1;
            }
        }
        return 0;
    }
    snprintf(resolved, rlen, "%s", path);
    if (access(resolved, F_OK) != 0 && path[0] != '/' && have_root) {
        char alt[PATH_MAX + 600];
        snprintf(alt, sizeof alt, "%s/%s", root, path);
        if ((access(alt, F_OK) == 0 || strpbrk(path, "*?[")) &&
            snprintf(resolved, rlen, "%s", alt) >= (int)rlen) {
            snprintf(err, errlen, "%s: the path is too long", path); return 2;
        }
    }
    return 0;
}

int data_load(const char *path, TokenStream *ts, char *err, size_t errlen) {
    memset(ts, 0, sizeof *ts);
    ts->max_token = -1;
    char resolved[PATH_MAX + 64];
    int rc = resolve_data_path(path, resolved, sizeof resolved, err, errlen);
    if (rc) return rc;
    if (has_suffix(resolved, ".bin")) return data_read_token_file(resolved, ts, err, errlen);
    return data_read_text_file(resolved, ts, err, errlen);
}

/* ---- token sets: memory-mapped shards ---- */

/* ---- a shard truncated under a running job ----
 * Reading a mapped page past a file's new end raises SIGBUS. The mapped shards are noted here, and
 * a SIGBUS inside one of them ends the process with a message naming the file and the newest
 * checkpoint this process saved (data_note_checkpoint), instead of dying without a word. */
#define MAP_NOTES 256
typedef struct {
    const unsigned char *addr;
    size_t len;
    char *path;
} MapNote;
static MapNote map_notes[MAP_NOTES];
static char last_checkpoint[PATH_MAX];

void data_note_checkpoint(const char *dir) {
    snprintf(last_checkpoint, sizeof last_checkpoint, "%s", dir);
}

static void say(const char *s) {
    if (write(2, s, strlen(s)) < 0) return;
}

static void on_sigbus(int sig, siginfo_t *si, void *uctx) {
    (void)uctx;
    const unsigned char *a = si->si_addr;
    for (int i = 0; i < MAP_NOTES; i++) {
        const MapNote *m = &map_notes[i];
        if (!m->path || a < m->addr || a >= m->addr + m->len) continue;
        say("boost: error: the token file ");
        say(m->path);
        say(" was truncated or replaced while this job was reading it (SIGBUS): its data is "
            "gone; ");
        if (last_checkpoint[0]) {
            say("the last checkpoint this process saved is ");
            say(last_checkpoint);
        } else
            say("this process saved no checkpoint");
        say(" (restore the file, then resume with --resume)\n");
        _exit(1);
    }
    signal(sig, SIG_DFL); // not one of ours: the default action, as if no handler were there
    raise(sig);
}

static void note_map(const void *addr, size_t len, const char *path) {
    static int installed;
    if (!installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        installed = sigaction(SIGBUS, &sa, NULL) == 0;
    }
    for (int i = 0; i < MAP_NOTES; i++)
        if (!map_notes[i].path) {
            char *copy = strdup(path);
            if (!copy) return; // not named then: the default SIGBUS, as before
            map_notes[i].addr = addr;
            map_notes[i].len = len;
            map_notes[i].path = copy;
            return;
        }
}

static void forget_map(const void *addr) {
    for (int i = 0; i < MAP_NOTES; i++)
        if (map_notes[i].path && map_notes[i].addr == addr) {
            char *p = map_notes[i].path;
            map_notes[i].path = NULL;
            free(p);
        }
}

void tokenset_close(TokenSet *set) {
    for (int i = 0; i < set->nshards; i++)
        if (set->shards[i].map) {
            forget_map(set->shards[i].map);
            munmap(set->shards[i].map, set->shards[i].map_len);
        }
    free(set->shards);
    memset(set, 0, sizeof *set);
}

/* Maps one shard; its first token is set->ntokens (appended). Returns 0, 2 or 1. */
static int add_shard(TokenSet *set, const char *path, char *err, size_t errlen) {
    int fd = data_open_regular(path, err, errlen);
    if (fd < 0) return 2;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path); close(fd); return 2;
    }
    size_t len = (size_t)st.st_size;
    unsigned char head[3 * sizeof(int32_t)] = {0};
    ssize_t got = pread(fd, head, sizeof head, 0);
    int width;
    int64_t count;
    if (check_header(path, head, got > 0 ? (size_t)got : 0, len, &width, &count, err, errlen)) {
        close(fd);
        return 2;
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        snprintf(err, errlen, "%s: cannot map: %s", path, strerror(errno));
        return 1;
    }
    // windows are read in a shuffled order: no read-ahead into the mapping
    madvise(map, len, MADV_RANDOM);
    TokenShard *grown = realloc(set->shards, (size_t)(set->nshards + 1) * sizeof *grown);
    if (!grown) { munmap(map, len); snprintf(err, errlen, "out of memory"); return 1; }
    set->shards = grown;
    TokenShard *sh = &set->shards[set->nshards++];
    memset(sh, 0, sizeof *sh);
    snprintf(sh->path, sizeof sh->path, "%s", path);
    sh->map = map;
    sh->map_len = len;
    note_map(map, len, path);
    sh->tokens = (const unsigned char *)map + TOKEN_FILE_HEADER_INTS * sizeof(int32_t);
    sh->width = width;
    sh->ntokens = count;
    sh->first = set->ntokens;
    set->ntokens += count;
    return 0;
}

int tokenset_open_file(const char *path, TokenSet *set, char *err, size_t errlen) {
    memset(set, 0, sizeof *set);
    if (snprintf(set->source, sizeof set->source, "%s", path) >= (int)sizeof set->source) {
        snprintf(err, errlen, "%.200s...: the path is too long", path); return 2;
    }
    int rc = add_shard(set, path, err, errlen);
    if (rc) tokenset_close(set);
    return rc;
}

int tokenset_view(const TokenStream *ts, TokenSet *set) {
    memset(set, 0, sizeof *set);
    set->shards = calloc(1, sizeof *set->shards);
    if (!set->shards) return 1;
    set->nshards = 1;
    snprintf(set->shards[0].path, sizeof set->shards[0].path, "%s", ts->source);
    snprintf(set->source, sizeof set->source, "%s", ts->source);
    set->shards[0].tokens = (const unsigned char *)ts->tokens;
    set->shards[0].width = 4;
    set->shards[0].ntokens = ts->ntokens;
    set->ntokens = ts->ntokens;
    return 0;
}

static int shard_of(const TokenSet *set, int64_t pos) {
    int lo = 0, hi = set->nshards - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (set->shards[mid].first <= pos) lo = mid; else hi = mid - 1;
    }
    return lo;
}

static void vocab_message(const TokenShard *sh, uint32_t v, int64_t at, int vocab, char *err,
                          size_t errlen) {
    snprintf(err, errlen,
             "%s: token %u (at position %lld of the file) is outside the model's "
             "vocabulary of %d: this data was tokenized for another model",
             sh->path, v, (long long)at, vocab);
}

int tokenset_read(const TokenSet *set, int64_t start, int64_t n, int vocab, int32_t *out, char *err,
                  size_t errlen) {
    int s = shard_of(set, start);
    int64_t done = 0;
    while (done < n) {
        const TokenShard *sh = &set->shards[s];
        int64_t off = start + done - sh->first;
        int64_t take = sh->ntokens - off < n - done ? sh->ntokens - off : n - done;
        for (int64_t i = 0; i < take; i++) {
            uint32_t v = token_at(sh->tokens, sh->width, off + i);
            if (vocab > 0 && v >= (uint32_t)vocab) {
                vocab_message(sh, v, off + i, vocab, err, errlen);
                return 2;
            }
            out[done + i] = (int32_t)v;
        }
        if (sh->map) {
            // let go of the pages this read mapped, so the process's resident set stays one window
            // wide whatever the data's size (they stay in the page cache)
            uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
            uintptr_t a = (uintptr_t)(sh->tokens + off * sh->width) & ~(page - 1);
            uintptr_t b =
                ((uintptr_t)(sh->tokens + (off + take) * sh->width) + page - 1) & ~(page - 1);
            madvise((void *)a, b - a, MADV_DONTNEED);
        }
        done += take;
        s++;
    }
    return 0;
}

/* Checks tokens [off, off+n) of a shard, through pread for a mapped one (nothing stays mapped). */
static int check_block(const TokenShard *sh, int fd, int64_t off, int64_t n, int vocab,
                       unsigned char *buf, char *err, size_t errlen) {
    const unsigned char *p;
    if (sh->map) {
        size_t bytes = (size_t)n * (size_t)sh->width;
        off_t at = (off_t)(TOKEN_FILE_HEADER_INTS * sizeof(int32_t)) + (off_t)off * sh->width;
        if (pread(fd, buf, bytes, at) != (ssize_t)bytes) {
            snprintf(err, errlen, "%s: read error: %s", sh->path, strerror(errno)); return 2;
        }
        p = buf;
    } else {
        p = sh->tokens + off * sh->width;
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = token_at(p, sh->width, i);
        if (v >= (uint32_t)vocab) { vocab_message(sh, v, off + i, vocab, err, errlen); return 2; }
    }
    return 0;
}

int tokenset_check_vocab(const TokenSet *set, int vocab, char *err, size_t errlen) {
    enum { EDGE = 65536, BLOCK = 4096, NBLOCKS = 64 };
    unsigned char *buf = malloc((size_t)EDGE * 4);
    if (!buf) { snprintf(err, errlen, "out of memory"); return 1; }
    int rc = 0;
    for (int s = 0; s < set->nshards && !rc; s++) {
        const TokenShard *sh = &set->shards[s];
        if (sh->width == 2 && vocab > 65535) continue;   // every uint16 fits
        int fd = -1;
        if (sh->map && (fd = open(sh->path, O_RDONLY)) < 0) {
            snprintf(err, errlen, "%s: cannot open: %s", sh->path, strerror(errno)); rc = 2; break;
        }
        if (!sh->map || sh->ntokens <= 2 * EDGE + NBLOCKS * BLOCK) {
            for (int64_t o = 0; o < sh->ntokens && !rc; o += EDGE)
                rc = check_block(sh, fd, o, sh->ntokens - o < EDGE ? sh->ntokens - o : EDGE, vocab,
                                 buf, err, errlen);
        } else {
            rc = check_block(sh, fd, 0, EDGE, vocab, buf, err, errlen);
            if (!rc) rc = check_block(sh, fd, sh->ntokens - EDGE, EDGE, vocab, buf, err, errlen);
            int64_t stride = (sh->ntokens - 2 * EDGE) / NBLOCKS;
            for (int k = 0; k < NBLOCKS && !rc; k++)
                rc = check_block(sh, fd, EDGE + k * stride, BLOCK, vocab, buf, err, errlen);
        }
        if (fd >= 0) close(fd);
    }
    free(buf);
    return rc;
}

/* FNV-1a 64 of a file's bytes, read in pieces. Returns 0 or 2. */
static int hash_file(const char *path, uint64_t *hash, int64_t *len, char *err, size_t errlen) {
    FILE *f = data_open_regular_stream(path, err, errlen);
    if (!f) return 2;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path); fclose(f); return 2;
    }
    uint64_t h = 0xcbf29ce484222325ULL;
    unsigned char buf[1 << 16];
    size_t got;
    int64_t n = 0;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        for (size_t i = 0; i < got; i++) { h ^= buf[i]; h *= 0x100000001b3ULL; }
        n += (int64_t)got;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { snprintf(err, errlen, "%s: read error", path); return 2; }
    *hash = h;
    *len = n;
    return 0;
}

/* Tokenises a text file into an llm.c shard (uint16; a token is a byte) at out, through a
 * temporary file and a rename, so concurrent runs never see half a shard. Returns 0, 2 or 1. */
static int text_to_shard(const char *text, const char *out, char *err, size_t errlen) {
    char tmp[PATH_MAX + 160];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", out, (int)getpid());
    FILE *in = data_open_regular_stream(text, err, errlen);
    if (!in) return 2;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
        fclose(in);
        return 1;
    }
    int32_t header[TOKEN_FILE_HEADER_INTS] = {TOKEN_FILE_MAGIC, TOKEN_FILE_VERSION, 0};
    int ok = fwrite(header, sizeof header, 1, f) == 1;
    unsigned char buf[1 << 15], pairs[2 << 15];
    size_t got;
    int64_t n = 0;
    while (ok && (got = fread(buf, 1, sizeof buf, in)) > 0) {
        for (size_t i = 0; i < got; i++) { pairs[2 * i] = buf[i]; pairs[2 * i + 1] = 0; }
        ok = fwrite(pairs, 2, got, f) == got;
        n += (int64_t)got;
    }
    if (ferror(in)) {
        snprintf(err, errlen, "%s: read error while tokenising it: %s", text, strerror(errno));
        ok = 0;
    }
    fclose(in);
    if (n > INT32_MAX) {
        snprintf(err, errlen, "%s: %lld bytes: too large for one token shard", text, (long long)n);
        ok = 0;
    }
    header[2] = (int32_t)n;
    if (ok) ok = fseek(f, 0, SEEK_SET) == 0 && fwrite(header, sizeof header, 1, f) == 1;
    // on disk before the rename publishes it: a crash never leaves a cached shard of zeros
    if (ok) ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, out) != 0) {
        if (!err[0])
            snprintf(err, errlen, "%s: writing the token shard failed: %s", out, strerror(errno));
        remove(tmp);
        return 1;
    }
    return 0;
}

/* The folders a cached shard may live in, best first: the repository's build/tokens,
 * ./build/tokens, $TMPDIR/tokens (each made when missing); a folder that cannot be made is left
 * out. */
static int token_cache_dirs(char dirs[3][PATH_MAX + 64]) {
    char root[PATH_MAX] = "", base[3][PATH_MAX + 32];
    const char *tmpdir = getenv("TMPDIR");
    int nb = 0, nd = 0;
    if (repo_root(root, sizeof root) == 0) snprintf(base[nb++], sizeof base[0], "%s/build", root);
    snprintf(base[nb++], sizeof base[0], "build");
    snprintf(base[nb++], sizeof base[0], "%s", tmpdir && *tmpdir ? tmpdir : "/tmp");
    for (int d = 0; d < nb; d++) {
        if (snprintf(dirs[nd], sizeof dirs[0], "%s/tokens", base[d]) >= (int)sizeof dirs[0])
            continue;
        if (mkdir(base[d], 0777) != 0 && errno != EEXIST) continue;
        if (mkdir(dirs[nd], 0777) != 0 && errno != EEXIST) continue;
        nd++;
    }
    return nd;
}

/* The cached shard of a text file: BUILD/tokens/<hash of the text>-<bytes>.bin, where BUILD is the
 * repository's build/ (else ./build, else $TMPDIR). Made once; later runs (any text file with the
 * same bytes) map it. */
static int text_shard(const char *text, char *out, size_t outlen, char *err, size_t errlen) {
    uint64_t h;
    int64_t len;
    int rc = hash_file(text, &h, &len, err, errlen);
    if (rc) return rc;
    if (len == 0) { snprintf(err, errlen, "%s: empty text file", text); return 2; }
    char dirs[3][PATH_MAX + 64];
    int nd = token_cache_dirs(dirs);
    for (int d = 0; d < nd; d++) {
        snprintf(out, outlen, "%.4000s/%016llx-%lld.bin", dirs[d], (unsigned long long)h,
                 (long long)len);
        if (access(out, R_OK) == 0) return 0;
        err[0] = 0;
        if (text_to_shard(text, out, err, errlen) == 0) return 0;
    }
    if (!err[0])
        snprintf(err, errlen, "%s: no folder to write its token shard into (build/tokens, $TMPDIR)",
                 text);
    return 1;
}

/* The cached shard of text files tokenized by a BPE tokenizer: BUILD/tokens/<hash>-<bytes>-bpe.bin,
 * the hash over every file's bytes in order and the tokenizer's CRC-32C, so a changed text or
 * tokenizer makes a new shard and anything else reuses it. Made with tokenize_files (the
 * tokenizer's separator before every document). Returns 0, 2 or 1. */
static int bpe_text_shard(char **files, int nfiles, const Bpe *bpe, uint32_t bpe_crc,
                          const char *tokenizer, char *out, size_t outlen, char *err,
                          size_t errlen) {
    uint64_t h = 0xcbf29ce484222325ULL ^ bpe_crc;
    int64_t total = 0;
    for (int i = 0; i < nfiles; i++) {
        uint64_t fh;
        int64_t len;
        int rc = hash_file(files[i], &fh, &len, err, errlen);
        if (rc) return rc;
        h = (h ^ fh) * 0x100000001b3ULL;
        h = (h ^ (uint64_t)len) * 0x100000001b3ULL;
        total += len;
    }
    if (total == 0) { snprintf(err, errlen, "%s: the text is empty", files[0]); return 2; }
    char dirs[3][PATH_MAX + 64];
    int nd = token_cache_dirs(dirs);
    if (!nd) {
        snprintf(err, errlen, "%s: no folder to write its token shard into (build/tokens, $TMPDIR)",
                 files[0]);
        return 1;
    }
    for (int d = 0; d < nd; d++) {   /* made before, in any of the folders */
        snprintf(out, outlen, "%.4000s/%016llx-%lld-bpe.bin", dirs[d], (unsigned long long)h,
                 (long long)total);
        if (access(out, R_OK) == 0) return 0;
    }
    snprintf(out, outlen, "%.4000s/%016llx-%lld-bpe.bin", dirs[0], (unsigned long long)h,
             (long long)total);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    TokenizeJob job = {.who = "boost train: data", .out = out,
                       .threads = cores > 0 ? (int)cores : 1, .sep = bpe_separator(bpe)};
    TokenizeResult res;
    int rc = tokenize_files(bpe, files, nfiles, &job, &res);
    if (rc) {
        snprintf(err, errlen, "%s: tokenizing the text with %s failed (see above)", files[0],
                 tokenizer);
        return rc;
    }
    printf("data: %d text file%s (%.1f MB) tokenized with %s: "
           "%lld tokens (%.2f bytes/token) in %.1f s -> %s\n",
           nfiles, nfiles == 1 ? "" : "s", (double)res.text_bytes / 1e6, tokenizer,
           (long long)res.tokens, res.tokens ? (double)res.text_bytes / (double)res.tokens : 0.0,
           res.seconds, out);
    fflush(stdout);
    return 0;
}

Bpe *data_load_tokenizer(const char *path, uint32_t crc, char *resolved, size_t rlen, char *err,
                         size_t errlen) {
    int rc = resolve_data_path(path, resolved, rlen, err, errlen);
    if (rc) return NULL;
    uint32_t have = 0;
    if (crc32c_file(resolved, &have) != 0) {
        snprintf(err, errlen, "tokenizer %s: %s", resolved, strerror(errno));
        return NULL;
    }
    if (have != crc) {
        snprintf(err, errlen,
                 "tokenizer %s: CRC-32C 0x%08x, the plan records 0x%08x: the file changed "
                 "since the plan was made (regenerate the plan with 'boost gen' to use it)",
                 resolved, have, crc);
        return NULL;
    }
    Bpe *b = bpe_load(resolved, &rc, err, errlen);
    return b;
}

int data_open(const char *path, TokenSet *set, char *err, size_t errlen) {
    return data_open_bpe(path, NULL, 0, NULL, set, err, errlen);
}

/* Text files named by a glob (sorted) tokenized into one cached shard and mapped. */
static int open_text_glob(glob_t *g, const Bpe *bpe, uint32_t crc, const char *tokenizer,
                          const char *resolved, TokenSet *set, char *err, size_t errlen) {
    char shard[PATH_MAX + 128];
    int rc = bpe_text_shard(g->gl_pathv, (int)g->gl_pathc, bpe, crc, tokenizer, shard,
                            sizeof shard, err, errlen);
    if (!rc) rc = tokenset_open_file(shard, set, err, errlen);
    if (!rc) snprintf(set->source, sizeof set->source, "%s", resolved);
    return rc;
}

int data_open_bpe(const char *path, const Bpe *bpe, uint32_t bpe_crc, const char *tokenizer,
                  TokenSet *set, char *err, size_t errlen) {
    memset(set, 0, sizeof *set);
    char resolved[PATH_MAX + 64];
    int rc = resolve_data_path(path, resolved, sizeof resolved, err, errlen);
    if (rc) return rc;
    /* text (one file or a glob) through the tokenizer */
    if (bpe && !has_suffix(resolved, ".bin")) {
        glob_t g;
        int grc = glob(resolved, 0, NULL, &g);
        if (grc != 0 || g.gl_pathc == 0) {
            snprintf(err, errlen, "data %s: no such file (or the glob matches no file)", resolved);
            if (grc == 0) globfree(&g);
            return 2;
        }
        rc = open_text_glob(&g, bpe, bpe_crc, tokenizer, resolved, set, err, errlen);
        globfree(&g);
        return rc;
    }
    if (strpbrk(resolved, "*?[")) {
        glob_t g;
        int grc = glob(resolved, 0, NULL, &g);
        if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
            snprintf(err, errlen,
                     "data %s: the glob matches no file (check the folder and the pattern)",
                     resolved);
            if (grc == 0) globfree(&g);
            return 2;
        }
        if (grc != 0) {
            snprintf(err, errlen, "data %s: the glob could not be read (%d)", resolved, grc);
            return 2;
        }
        for (size_t i = 0; i < g.gl_pathc && !rc; i++)
            rc = add_shard(set, g.gl_pathv[i], err, errlen);
        globfree(&g);
        snprintf(set->source, sizeof set->source, "%s", resolved);
        if (rc) tokenset_close(set);
        return rc;
    }
    if (has_suffix(resolved, ".bin")) return tokenset_open_file(resolved, set, err, errlen);
    char shard[PATH_MAX + 128];
    rc = text_shard(resolved, shard, sizeof shard, err, errlen);
    if (rc) return rc;
    rc = tokenset_open_file(shard, set, err, errlen);
    if (!rc) snprintf(set->source, sizeof set->source, "%s", resolved);
    return rc;
}

/* ---- batches ---- */

void batcher_one_free(Batcher *b) {
    if (b->set == &b->own) tokenset_close(&b->own);
    free(b->window);
    b->window = NULL;
    b->set = NULL;
}

static int batcher_setup(Batcher *b, double val_fraction, int micro_batch, int seq, int vocab,
                         uint64_t seed, char *err, size_t errlen) {
    const TokenSet *set = b->set;
    int64_t nval = (int64_t)((double)set->ntokens * val_fraction);
    int64_t need = (int64_t)micro_batch * seq + 1;
    b->vocab = vocab;
    b->train_begin = 0;
    b->train_len = set->ntokens - nval;
    b->val_begin = b->train_len;
    b->val_len = nval;
    b->micro_batch = micro_batch;
    b->seq = seq;
    b->seed = seed;
    b->train_windows = b->train_len > 1 ? (b->train_len - 1) / seq : 0;
    b->val_windows = b->val_len > 1 ? (b->val_len - 1) / seq : 0;
    if (b->train_windows < micro_batch) {
        snprintf(err, errlen,
                 "%s: %lld training tokens (of %lld, val_fraction %g), fewer than one batch of "
                 "micro_batch*seq+1 = %lld: give more data or a smaller micro_batch/seq",
                 set->source, (long long)b->train_len, (long long)set->ntokens, val_fraction,
                 (long long)need);
        return 2;
    }
    if (val_fraction > 0 && b->val_windows < micro_batch) {
        snprintf(err, errlen,
                 "%s: %lld validation tokens (val_fraction %g of %lld), "
                 "fewer than one batch of micro_batch*seq+1 = %lld: raise "
                 "val_fraction, give more data, or set val_fraction=0",
                 set->source, (long long)b->val_len, val_fraction, (long long)set->ntokens,
                 (long long)need);
        return 2;
    }
    b->window = malloc((size_t)(seq + 1) * sizeof(int32_t));
    if (!b->window) { snprintf(err, errlen, "out of memory"); return 1; }
    return 0;
}

static int check_args(int micro_batch, int seq, double val_fraction, char *err, size_t errlen) {
    if (micro_batch < 1 || seq < 1) {
        snprintf(err, errlen, "micro_batch (%d) and seq (%d) must be positive", micro_batch, seq);
        return 2;
    }
    if (!(val_fraction >= 0 && val_fraction < 1)) {
        snprintf(err, errlen, "val_fraction %g must be in [0, 1)", val_fraction); return 2;
    }
    return 0;
}

int batcher_init(Batcher *b, const TokenStream *ts, double val_fraction, int micro_batch, int seq,
                 int vocab, uint64_t seed, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    if (check_args(micro_batch, seq, val_fraction, err, errlen)) return 2;
    if (ts->max_token >= vocab) {   // in memory: the whole stream is checked
        int64_t at = 0;
        while (at < ts->ntokens && ts->tokens[at] < vocab) at++;
        snprintf(err, errlen,
                 "%s: token %d (at position %lld) is outside the model's "
                 "vocabulary of %d: this data was tokenized for another model",
                 ts->source, ts->tokens[at], (long long)at, vocab);
        return 2;
    }
    if (tokenset_view(ts, &b->own)) { snprintf(err, errlen, "out of memory"); return 1; }
    b->set = &b->own;
    return batcher_setup(b, val_fraction, micro_batch, seq, vocab, seed, err, errlen);
}

int batcher_init_set(Batcher *b, const TokenSet *set, double val_fraction, int micro_batch, int seq,
                     int vocab, uint64_t seed, char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    if (check_args(micro_batch, seq, val_fraction, err, errlen)) return 2;
    int rc = tokenset_check_vocab(set, vocab, err, errlen);
    if (rc) return rc;
    b->set = set;
    return batcher_setup(b, val_fraction, micro_batch, seq, vocab, seed, err, errlen);
}

/* The permutation of one epoch without a table: a 4-round Feistel network over the smallest even
 * number of bits that holds n (keys from seed and epoch), cycle-walked back into [0, n). */
static int64_t permute(int64_t x, int64_t n, uint64_t seed, int64_t epoch) {
    int bits = 2;
    while (bits < 62 && ((int64_t)1 << bits) < n) bits++;
    bits += bits & 1;
    const int half = bits / 2;
    const uint64_t mask = ((uint64_t)1 << half) - 1;
    uint64_t keys[4], state = seed ^ (0xd1b54a32d192ed03ULL * (uint64_t)(epoch + 1));
    for (int r = 0; r < 4; r++) keys[r] = data_splitmix64(&state);
    uint64_t y = (uint64_t)x;
    do {
        uint64_t l = y >> half, r = y & mask;
        for (int k = 0; k < 4; k++) {
            uint64_t st = r ^ keys[k];
            uint64_t f = data_splitmix64(&st) & mask;
            uint64_t nl = r;
            r = l ^ f;
            l = nl;
        }
        y = (l << half) | r;
    } while (y >= (uint64_t)n);
    return (int64_t)y;
}

int64_t batcher_window_at(const Batcher *b, int64_t k) {
    int64_t epoch = k / b->train_windows, idx = k % b->train_windows;
    return permute(idx, b->train_windows, b->seed, epoch);
}

/* Window starting at token `start`: inputs = tokens start..start+seq-1, targets = one later. */
static int fill_window(Batcher *b, int64_t start, int32_t *inputs, int32_t *targets) {
    if (tokenset_read(b->set, start, b->seq + 1, b->vocab, b->window, b->err, sizeof b->err))
        return 2;
    memcpy(inputs, b->window, (size_t)b->seq * sizeof(int32_t));
    memcpy(targets, b->window + 1, (size_t)b->seq * sizeof(int32_t));
    return 0;
}

int batcher_window(Batcher *b, int64_t k, int32_t *inputs, int32_t *targets) {
    return fill_window(b, b->train_begin + batcher_window_at(b, k) * b->seq, inputs, targets);
}

int batcher_one_global(Batcher *b, int64_t pos, int rank, int32_t *inputs, int32_t *targets) {
    for (int i = 0; i < b->micro_batch; i++) {
        int64_t w = batcher_window_at(b, pos + (int64_t)rank * b->micro_batch + i);
        if (fill_window(b, b->train_begin + w * b->seq, inputs + (size_t)i * b->seq,
                        targets + (size_t)i * b->seq))
            return 2;
    }
    return 0;
}

int64_t batcher_one_val_batches(const Batcher *b, int64_t max_batches) {
    int64_t n = b->val_windows / b->micro_batch;
    return n < max_batches ? n : max_batches;
}

int batcher_one_val(Batcher *b, int64_t i, int32_t *inputs, int32_t *targets) {
    for (int j = 0; j < b->micro_batch; j++) {
        int64_t w = i * b->micro_batch + j;
        if (fill_window(b, b->val_begin + w * b->seq, inputs + (size_t)j * b->seq,
                        targets + (size_t)j * b->seq))
            return 2;
    }
    return 0;
}
