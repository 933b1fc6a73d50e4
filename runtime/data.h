/* data.h: training data for `boost train`: llm.c token shards (.bin, one file or a glob), memory-
 * mapped and read a window at a time (the process never holds the dataset), or raw text through the
 * byte-level tokenizer (token = byte, vocab 256; tokenised once into a cached shard under build/).
 * The shards are one token stream, split into train and validation parts and cut into windows of
 * seq+1 tokens in a shuffled order that depends only on the run's seed and the position (counted in
 * windows, so a checkpoint resumes at any dp); dp rank i of n reads its own slice of every global batch. */
#ifndef BOOST_DATA_H
#define BOOST_DATA_H

#include <stdint.h>
#include <stddef.h>
#include <stdio.h>          // defines: FILE
#include "runtime/bpe.h"   // defines: Bpe

#include "runtime/token_file.h"   // defines: TOKEN_FILE_*
#include "runtime/tokenizer.h"    // defines: BYTE_VOCAB, tokenize_bytes, detokenize_bytes

/* A whole token stream in memory: tokens[0 .. ntokens-1]. */
typedef struct {
    int32_t *tokens;
    int64_t ntokens;
    int32_t max_token;        /* largest token id in the stream (-1 when empty) */
    char source[512];         /* the file it came from, for messages */
} TokenStream;

/* Read an llm.c token file into memory: 256 int32 header (magic 20240520, version 1 or 2, token
 * count), then the tokens as uint16 (version 1) or uint32 (version 2). Checks the magic, the
 * version and that the size matches the count. (Tools and tests; training maps shards instead.)
 * Returns 0, or 2 with "FILE: what is wrong" in err. */
int data_read_token_file(const char *path, TokenStream *ts, char *err, size_t errlen);
/* Write a token file (tools and tests). Tokens must be 0..65535. Returns 0 or 1 (I/O). */
int data_write_token_file(const char *path, const int32_t *tokens, int64_t n, char *err, size_t errlen);
/* Read a text file through the byte-level tokenizer. Returns 0 or 2. */
int data_read_text_file(const char *path, TokenStream *ts, char *err, size_t errlen);

/* Resolve and load the plan's data path: "corpus" (build/corpus.txt, built with tools/corpus.sh
 * when missing), a .bin token file, or any other file as text. Relative paths are tried from the
 * current folder, then from the repository root (the folder above the binary's bin/).
 * Returns 0, 2 (bad input) or 1 (could not build the corpus). */
int data_load(const char *path, TokenStream *ts, char *err, size_t errlen);
void data_free(TokenStream *ts);

/* One shard of a token set: a memory-mapped llm.c token file (or a view of tokens in memory). */
typedef struct {
    char path[512];
    const unsigned char *tokens;   /* the first token (after the header) */
    void *map; size_t map_len;     /* the mapping (NULL for a view of memory) */
    int width;                     /* bytes per token: 2 (version 1), 4 (version 2 or an int32 view) */
    int64_t ntokens, first;        /* its tokens are [first, first + ntokens) of the set */
} TokenShard;

/* The training data as one stream of tokens over one or more shards, in the order of their names. */
typedef struct {
    TokenShard *shards; int nshards;
    int64_t ntokens;
    char source[512];              /* the file or glob it came from, for messages */
} TokenSet;

/* Open the plan's data path as a token set: "corpus" (build/corpus.txt, built with
 * tools/corpus.sh when missing), a .bin token file, a glob of .bin shards ("dir/train_*.bin"), or any
 * other file as text. Text is tokenised once into a shard under the repository's build/tokens/
 * (named by a hash of the text's bytes, reused by every later run). Every shard's header and size
 * are checked here; tokens are checked against the vocabulary as they are read (batcher_*) and, at
 * start, by tokenset_check_vocab on a sample. Returns 0, 2 (bad input) or 1 (I/O). */
int data_open(const char *path, TokenSet *set, char *err, size_t errlen);
/* The same with a BPE tokenizer (bpe NULL: data_open): the text (one file, or a glob of text files
 * in sorted order) is tokenized once, on every core, into BUILD/tokens/<hash>-<bytes>-bpe.bin, the
 * hash over the texts and the tokenizer's CRC-32C (bpe_crc), and reused by every later run;
 * .bin token files are opened as they are. tokenizer: its path, for messages. 0, 2 or 1. */
int data_open_bpe(const char *path, const Bpe *bpe, uint32_t bpe_crc, const char *tokenizer,
                  TokenSet *set, char *err, size_t errlen);
/* Load the plan's tokenizer.json (path resolved as the data path; its resolved path in resolved),
 * refusing a file whose CRC-32C is not crc (changed since the plan was made). NULL with err. */
Bpe *data_load_tokenizer(const char *path, uint32_t crc, char *resolved, size_t rlen, char *err,
                         size_t errlen);
/* Open path for reading only when it is a regular file, without blocking on a FIFO or a device
 * (the open itself does not wait; reads then block as usual). The fd, or -1 with "PATH: why" in
 * err and errno set (EINVAL: not a regular file). */
int data_open_regular(const char *path, char *err, size_t errlen);
/* The same as a buffered stdio stream ("rb"). NULL with "PATH: why" in err. */
FILE *data_open_regular_stream(const char *path, char *err, size_t errlen);
/* The newest checkpoint folder this process saved: named when a mapped token shard is truncated
 * under the running job (SIGBUS), which then ends the process with that message. */
void data_note_checkpoint(const char *dir);
/* Map one token file as a one-shard set (checks as data_read_token_file). Returns 0 or 2. */
int tokenset_open_file(const char *path, TokenSet *set, char *err, size_t errlen);
/* A one-shard set viewing a stream in memory (no copy; ts must outlive it). Returns 0 or 1. */
int tokenset_view(const TokenStream *ts, TokenSet *set);
void tokenset_close(TokenSet *set);
/* Copy tokens [start, start+n) of the set into out as int32, checking each is < vocab. Returns 0, or
 * 2 with "FILE: token T at position P ... vocabulary" in err. */
int tokenset_read(const TokenSet *set, int64_t start, int64_t n, int vocab, int32_t *out, char *err, size_t errlen);
/* A start-up check that the data fits the vocabulary without reading it all: the first and last
 * 64 Ki tokens of every shard and 64 spread blocks of 4 Ki tokens each (read with pread, so nothing stays
 * mapped). Every batch is checked again when it is read. Returns 0 or 2. */
int tokenset_check_vocab(const TokenSet *set, int vocab, char *err, size_t errlen);

/* One source's batcher (the trainer reads through runtime/mixture.h, which also mixes sources):
 * where the train and validation parts lie in a stream: validation is the last
 * floor(ntokens * val_fraction) tokens. Windows are seq+1 tokens starting every seq tokens.
 * A mixture (runtime/mixture.c) holds one batcher per source and reads through them. */
typedef struct Batcher {
    const TokenSet *set;              /* the data (borrowed, or &own) */
    TokenSet own;                     /* the view batcher_init makes of a TokenStream */
    int vocab;
    int64_t train_begin, train_len;   /* [train_begin, train_begin + train_len) */
    int64_t val_begin, val_len;
    int micro_batch, seq;
    int64_t train_windows;            /* windows that fit in the train part */
    int64_t val_windows;
    uint64_t seed;
    int32_t *window;                  /* [seq + 1] scratch */
    char err[1024];                   /* why the last batcher_train/val failed */
    struct Batcher *sources;          /* a mixture: [nsources] batchers, one per source */
    int nsources;                     /* 0: no mixture */
    double *weights;                  /* [nsources] normalised to sum 1 */
    int64_t *taken, *base_taken;      /* [nsources] sequences each gave before cursor, base */
    int64_t cursor, base;             /* global sequences: where taken stands, where it starts */
} Batcher;

/* Check that the stream fits the model (every token < vocab) and holds at least one micro-batch of
 * training windows (and one of validation windows when val_fraction > 0). Returns 0 or 2. */
int batcher_init(Batcher *b, const TokenStream *ts, double val_fraction, int micro_batch, int seq,
                 int vocab, uint64_t seed, char *err, size_t errlen);
/* The same over a token set (borrowed: it must outlive the batcher); the vocabulary is checked
 * on a sample here (tokenset_check_vocab) and on every batch read. Returns 0, 2 or 1. */
int batcher_init_set(Batcher *b, const TokenSet *set, double val_fraction, int micro_batch, int seq,
                     int vocab, uint64_t seed, char *err, size_t errlen);

/* The training stream is the sequence of windows of epoch 0's order, then epoch 1's, ...; each
 * epoch's order is a permutation of all train windows derived from (seed, epoch) and computed per
 * window (no table: memory does not grow with the data). A position counts windows (sequences)
 * consumed, by all dp ranks together; a global micro-batch of n dp ranks is windows
 * [pos, pos + n*micro_batch), of which dp rank i reads [pos + i*micro_batch,
 * pos + (i+1)*micro_batch). */
/* The position of the next global micro-batch of n ranks. */
static inline int64_t batcher_next(const Batcher *b, int64_t pos, int nranks) {
    return pos + (int64_t)nranks * b->micro_batch;
}
/* Window w (0 <= w < train_windows) read at stream position k: the epoch's permutation. */
int64_t batcher_window_at(const Batcher *b, int64_t k);
/* Training window at stream position k (batcher_window_at) into one row of inputs and targets
 * (seq each). Returns 0 or 2 with b->err. */
int batcher_window(Batcher *b, int64_t k, int32_t *inputs, int32_t *targets);

/* One source alone (b->nsources == 0; runtime/mixture.h's batcher_global, batcher_val_batches,
 * batcher_val and batcher_free call these for such a batcher):
 * fill dp rank `rank`'s micro_batch*seq inputs and targets of the global micro-batch at pos (the
 * slice of rank i is the same whatever the number of ranks). Returns 0, or 2 with b->err (a token
 * outside the vocabulary: it never reaches the model). */
int batcher_one_global(Batcher *b, int64_t pos, int rank, int32_t *inputs, int32_t *targets);
/* Number of validation micro-batches used for one validation pass (at most max_batches). */
int64_t batcher_one_val_batches(const Batcher *b, int64_t max_batches);
/* Fill validation micro-batch i: consecutive windows, in order, from the start of the val part.
 * Returns 0 or 2 with b->err. */
int batcher_one_val(Batcher *b, int64_t i, int32_t *inputs, int32_t *targets);
/* Free what batcher_init or batcher_init_set allocated. */
void batcher_one_free(Batcher *b);

/* splitmix64 step, shared with the shuffle; exposed for tests. */
uint64_t data_splitmix64(uint64_t *state);

#endif
