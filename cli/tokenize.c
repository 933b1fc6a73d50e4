/* tokenize.c: `boost tokenize TOKENIZER.json INPUT... -o OUT.bin` turns text files, globs or JSON
 * lines into llm.c token shards with a Hugging Face BPE tokenizer (runtime/bpe.h), on all cores and
 * with the same output at any thread count; `--decode SHARD.bin` turns shards back into text;
 * `boost tokenizer train` trains a byte-level BPE and writes its tokenizer.json. */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli/commands.h"
#include "runtime/bpe.h"
#include "runtime/tokenize_files.h"  // defines: tokenize_files, tokenize_expand_inputs
#include "runtime/data.h"          // defines: TOKEN_FILE_*, data_read_token_file
#include "common/json.h"   // defines: json_parse
#include "common/files.h"  // defines: file_read_stream

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
        TokenizeJob job = {.who = "boost tokenize", .out = out, .shard_tokens = shard_tokens,
                           .threads = threads, .quiet = quiet, .force_jsonl = jsonl};
        job.sep = bpe_separator(b);
        if (sep && !strcmp(sep, "none")) job.sep = -1;
        else if (sep && (job.sep = bpe_token_id(b, sep)) < 0) {
            fprintf(stderr, "boost tokenize: --sep %s: no such token in %s\n", sep, tok);
            bpe_free(b); free(inputs);
            return 2;
        }
        TokenizeResult r;
        rc = tokenize_files(b, inputs, ninputs, &job, &r);
        if (!rc)
            printf("tokenize: %lld documents, %.1f MB of text -> %lld tokens (%.2f bytes/token, "
                   "%s) in %.2f s (%.1f MB/s, %d threads) -> %s%s\n",
                   (long long)r.docs, r.text_bytes / 1e6, (long long)r.tokens,
                   r.tokens ? (double)r.text_bytes / (double)r.tokens : 0, bpe_describe(b),
                   r.seconds, r.seconds > 0 ? r.text_bytes / 1e6 / r.seconds : 0, threads, out,
                   shard_tokens ? " (shards)" : "");
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
    if (tokenize_expand_inputs(args, nargs, &g)) return 2;
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
        int lineno = 0, jl = tokenize_is_jsonl(g.gl_pathv[i], 0);
        if (!jl) {   /* the whole file */
            size_t len = 0;
            line = file_read_stream(f, g.gl_pathv[i], (size_t)1 << 40, &len, why, sizeof why);
            got = line ? (ssize_t)len : -1;
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
    double t0 = tokenize_now_s();
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
                   total / 1e6, n, tokenize_now_s() - t0, out);
    }
    for (int i = 0; i < n; i++) free(texts[i]);
    free(texts); free(lens); free(inputs); free(specials);
    return rc;
}
