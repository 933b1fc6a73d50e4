/* tokenize_files.h: text files, globs or JSON lines (a "text" field per line) turned into llm.c
 * token shards with a BPE tokenizer on worker threads; the output is the same at any thread count.
 * Shared by `boost tokenize` (cli/tokenize.c) and the token cache of a run's text data (data.c). */
#ifndef BOOST_TOKENIZE_FILES_H
#define BOOST_TOKENIZE_FILES_H

#include <stddef.h>
#include <stdint.h>
#include <glob.h>
#include "runtime/bpe.h"   // defines: Bpe

typedef struct {
    const char *who;          /* the command, the prefix of messages ("boost tokenize") */
    const char *out;          /* OUT.bin; with shard_tokens > 0, OUT_000000.bin, OUT_000001.bin, ... */
    int64_t shard_tokens;     /* at most this many tokens per file (0: one file) */
    int threads;              /* worker threads (the output does not depend on it) */
    int quiet;                /* no progress line (it is shown only on a terminal anyway) */
    int32_t sep;              /* the token written before every document, -1 for none */
    int force_jsonl;          /* every input is JSON lines (else *.jsonl / *.json files are) */
} TokenizeJob;

typedef struct {
    int64_t docs, tokens;     /* documents read, tokens written (separators included) */
    size_t text_bytes;        /* the documents' text (JSON lines: their "text" only) */
    double seconds;
} TokenizeResult;

/* Tokenize the inputs (paths or globs, expanded in sorted order; a text file is one document) into
 * job->out, written through a temporary file and a rename. Messages go to stderr as
 * "WHO: FILE: what is wrong". Returns 0, 2 (bad input: a missing file, text the tokenizer refuses)
 * or 1 (I/O, memory). res may be NULL. */
int tokenize_files(const Bpe *b, char **inputs, int ninputs, const TokenizeJob *job,
                   TokenizeResult *res);

/* Helpers shared with `boost tokenizer train`: the inputs as paths (globs expanded in sorted
 * order, a pattern matching nothing kept as is; -1 when glob fails), whether a path is read as JSON
 * lines (*.jsonl, *.json, or force), a monotonic clock in seconds. */
int tokenize_expand_inputs(char **args, int n, glob_t *g);
int tokenize_is_jsonl(const char *path, int force);
double tokenize_now_s(void);

#endif
