/* data.h: training data for `boost train`: a token stream read from an llm.c .bin token file or
 * from raw text through the byte-level tokenizer (token = byte, vocab 256), split into train and
 * validation parts, and cut into batches of contiguous windows of seq+1 tokens in a shuffled order
 * that depends only on the run's seed and the data position (so a checkpoint can resume it). */
#ifndef BOOST_DATA_H
#define BOOST_DATA_H

#include <stdint.h>
#include <stddef.h>

#define TOKEN_FILE_MAGIC 20240520
#define TOKEN_FILE_VERSION 1
#define TOKEN_FILE_HEADER_INTS 256
#define BYTE_VOCAB 256

/* A whole token stream in memory: tokens[0 .. ntokens-1]. */
typedef struct {
    int32_t *tokens;
    int64_t ntokens;
    int32_t max_token;        /* largest token id in the stream (-1 when empty) */
    char source[512];         /* the file it came from, for messages */
} TokenStream;

/* Byte-level tokenizer (runtime/tokenizer.c): every byte is one token 0..255. */
int64_t tokenize_bytes(const unsigned char *text, size_t len, int32_t *out);   /* returns len */
/* Decodes tokens back to bytes; returns -1 (and stops) at a token outside 0..255. */
int64_t detokenize_bytes(const int32_t *tokens, int64_t n, unsigned char *out);

/* Read an llm.c token file: 256 int32 header (magic 20240520, version 1, token count), then the
 * tokens as uint16. Checks the magic, the version and that the size matches the count.
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

/* Where the train and validation parts lie in a stream: validation is the last
 * floor(ntokens * val_fraction) tokens. Windows are seq+1 tokens starting every seq tokens. */
typedef struct {
    const int32_t *tokens;
    int64_t train_begin, train_len;   /* [train_begin, train_begin + train_len) */
    int64_t val_begin, val_len;
    int micro_batch, seq;
    int64_t train_windows;            /* windows that fit in the train part */
    int64_t val_windows;
    uint64_t seed;
    /* the shuffled window order of the current epoch, rebuilt when the epoch changes */
    int64_t *order; int64_t order_epoch;
} Batcher;

/* Check that the stream fits the model (every token < vocab) and holds at least one micro-batch of
 * training windows (and one of validation windows when val_fraction > 0). Returns 0 or 2. */
int batcher_init(Batcher *b, const TokenStream *ts, double val_fraction, int micro_batch, int seq,
                 int vocab, uint64_t seed, char *err, size_t errlen);
void batcher_free(Batcher *b);
/* Fill one training micro-batch (micro_batch*seq inputs and targets) for data position `pos`
 * (counted in micro-batches since the start of training): windows pos*micro_batch .. of the
 * shuffled order, which is a fresh permutation per epoch derived from (seed, epoch). */
void batcher_train(Batcher *b, int64_t pos, int32_t *inputs, int32_t *targets);
/* Number of validation micro-batches used for one validation pass (at most max_batches). */
int64_t batcher_val_batches(const Batcher *b, int64_t max_batches);
/* Fill validation micro-batch i: consecutive windows, in order, from the start of the val part. */
void batcher_val(const Batcher *b, int64_t i, int32_t *inputs, int32_t *targets);

/* splitmix64 step, shared with the shuffle; exposed for tests. */
uint64_t data_splitmix64(uint64_t *state);

#endif
