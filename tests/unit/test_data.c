/* test_data.c: the training data path: llm.c token files (good, wrong magic, truncated, too few
 * tokens, tokens outside the vocabulary), the byte tokenizer, the train/validation split and the
 * shuffled batches (contiguous windows, each window once per epoch, deterministic in the seed). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tests/unit/testlib.h"
#include "runtime/data.h"   // defines: TokenStream, Batcher, data_*, batcher_*, tokenize_bytes

static char dir[] = "/tmp/boost-test-data.XXXXXX";

static void path_in(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static void write_raw(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
}

static void test_token_files(void) {
    char path[256], err[512];
    int32_t tokens[1000];
    for (int i = 0; i < 1000; i++) tokens[i] = (i * 7919) % 50257;
    path_in(path, sizeof path, "good.bin");
    int rc = data_write_token_file(path, tokens, 1000, err, sizeof err);
    CHECK(rc == 0, "token_file_write", "rc %d: %s", rc, err);

    TokenStream ts;
    rc = data_read_token_file(path, &ts, err, sizeof err);
    int same = rc == 0 && ts.ntokens == 1000;
    for (int i = 0; same && i < 1000; i++) same = ts.tokens[i] == tokens[i];
    CHECK(same, "token_file_round_trip", "rc %d (%s), %lld tokens", rc, err, (long long)ts.ntokens);
    int32_t maxtok = 0;
    for (int i = 0; i < 1000; i++) if (tokens[i] > maxtok) maxtok = tokens[i];
    CHECK(ts.max_token == maxtok, "token_file_max_token", "max %d, expected %d", ts.max_token, maxtok);
    data_free(&ts);

    // the header as llm.c writes it: 256 int32 little-endian, then uint16 tokens
    int32_t header[256] = {20240520, 1, 3};
    unsigned char file[1024 + 6];
    memcpy(file, header, 1024);
    unsigned char body[6] = {0x01, 0x00, 0x34, 0x12, 0xff, 0xff};
    memcpy(file + 1024, body, 6);
    path_in(path, sizeof path, "llmc.bin");
    write_raw(path, file, sizeof file);
    rc = data_read_token_file(path, &ts, err, sizeof err);
    CHECK(rc == 0 && ts.ntokens == 3 && ts.tokens[0] == 1 && ts.tokens[1] == 0x1234 && ts.tokens[2] == 65535,
          "token_file_llmc_layout", "rc %d (%s)", rc, err);
    data_free(&ts);

    header[0] = 12345;
    memcpy(file, header, 1024);
    path_in(path, sizeof path, "badmagic.bin");
    write_raw(path, file, sizeof file);
    rc = data_read_token_file(path, &ts, err, sizeof err);
    char expect[512];
    snprintf(expect, sizeof expect, "%s: not a token file (magic 12345, expected 20240520)", path);
    CHECK(rc == 2 && strstr(err, expect), "token_file_wrong_magic", "rc %d: %s", rc, err);

    header[0] = 20240520; header[1] = 2;
    memcpy(file, header, 1024);
    path_in(path, sizeof path, "badversion.bin");
    write_raw(path, file, sizeof file);
    rc = data_read_token_file(path, &ts, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "version 2"), "token_file_wrong_version", "rc %d: %s", rc, err);

    header[1] = 1; header[2] = 1000;   // says 1000 tokens, holds 3
    memcpy(file, header, 1024);
    path_in(path, sizeof path, "truncated.bin");
    write_raw(path, file, sizeof file);
    rc = data_read_token_file(path, &ts, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "truncated") && strstr(err, path), "token_file_truncated_body", "rc %d: %s", rc, err);

    path_in(path, sizeof path, "shortheader.bin");
    write_raw(path, file, 100);
    rc = data_read_token_file(path, &ts, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "truncated"), "token_file_truncated_header", "rc %d: %s", rc, err);

    path_in(path, sizeof path, "missing.bin");
    rc = data_read_token_file(path, &ts, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "cannot open"), "token_file_missing", "rc %d: %s", rc, err);

    // data_load picks the reader by the name: .bin is a token file even when it holds text
    path_in(path, sizeof path, "text.bin");
    write_raw(path, "hello world", 11);
    rc = data_load(path, &ts, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "not a token file"), "data_load_text_named_bin", "rc %d: %s", rc, err);
}

static void test_tokenizer(void) {
    unsigned char text[256], back[256];
    int32_t tok[256];
    for (int i = 0; i < 256; i++) text[i] = (unsigned char)(255 - i);
    int64_t n = tokenize_bytes(text, 256, tok);
    int ok = n == 256;
    for (int i = 0; ok && i < 256; i++) ok = tok[i] == 255 - i;
    CHECK(ok, "tokenizer_token_is_byte", "n %lld", (long long)n);
    n = detokenize_bytes(tok, 256, back);
    CHECK(n == 256 && !memcmp(text, back, 256), "tokenizer_round_trip", "n %lld", (long long)n);
    tok[10] = 256;
    CHECK(detokenize_bytes(tok, 256, back) == -1, "tokenizer_rejects_out_of_range", "accepted token 256");

    char path[256], err[512];
    path_in(path, sizeof path, "t.txt");
    write_raw(path, "Hi!\n", 4);
    TokenStream ts;
    int rc = data_load(path, &ts, err, sizeof err);
    CHECK(rc == 0 && ts.ntokens == 4 && ts.tokens[0] == 'H' && ts.tokens[1] == 'i' && ts.tokens[2] == '!'
          && ts.tokens[3] == '\n' && ts.max_token == 'i', "text_file_bytes", "rc %d: %s", rc, err);
    data_free(&ts);
    path_in(path, sizeof path, "empty.txt");
    write_raw(path, "", 0);
    rc = data_load(path, &ts, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "empty"), "text_file_empty", "rc %d: %s", rc, err);
}

/* A stream whose token i is i, so every window shows where it came from. */
static TokenStream counting_stream(int64_t n) {
    TokenStream ts = {0};
    ts.tokens = malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) ts.tokens[i] = (int32_t)i;
    ts.ntokens = n;
    ts.max_token = (int32_t)(n - 1);
    snprintf(ts.source, sizeof ts.source, "counting");
    return ts;
}

static void test_split_and_batches(void) {
    char err[512];
    const int mb = 2, seq = 8;
    TokenStream ts = counting_stream(1000);
    Batcher b;
    int rc = batcher_init(&b, &ts, 0.1, mb, seq, 100000, 42, err, sizeof err);
    CHECK(rc == 0, "batcher_init", "rc %d: %s", rc, err);
    CHECK(b.train_len == 900 && b.val_begin == 900 && b.val_len == 100, "split_val_is_the_last_part",
          "train %lld, val %lld+%lld", (long long)b.train_len, (long long)b.val_begin, (long long)b.val_len);
    // windows of seq+1 tokens start every seq tokens: (900-1)/8 = 112 train windows, (100-1)/8 = 12 val
    CHECK(b.train_windows == 112 && b.val_windows == 12, "split_window_counts", "%lld train, %lld val windows",
          (long long)b.train_windows, (long long)b.val_windows);

    int32_t in[mb * seq], tg[mb * seq];
    int contiguous = 1, inside = 1;
    int64_t per_epoch = b.train_windows / mb;   // 56 micro-batches
    int *seen = calloc((size_t)b.train_windows, sizeof(int));
    for (int64_t pos = 0; pos < per_epoch; pos++) {
        batcher_train(&b, pos, in, tg);
        for (int w = 0; w < mb; w++) {
            int32_t start = in[w * seq];
            if (start % seq != 0) contiguous = 0;
            else seen[start / seq]++;
            for (int j = 0; j < seq; j++) {
                if (in[w * seq + j] != start + j || tg[w * seq + j] != start + j + 1) contiguous = 0;
                if (tg[w * seq + j] >= 900) inside = 0;
            }
        }
    }
    int once = 1;
    for (int64_t w = 0; w < b.train_windows; w++) if (seen[w] != 1) once = 0;
    CHECK(contiguous, "batches_are_contiguous_windows", "a window is not tokens start..start+seq");
    CHECK(inside, "batches_stay_in_train_part", "a training target reached the validation part");
    CHECK(once, "epoch_visits_every_window_once", "some window seen 0 or 2+ times");

    // shuffled, deterministic in the seed, and a new order in the next epoch
    int32_t first[mb * seq], again[mb * seq], next_epoch[mb * seq];
    batcher_train(&b, 0, first, tg);
    int in_order = first[0] == 0 && first[seq] == seq;
    CHECK(!in_order, "batches_are_shuffled", "first batch is windows 0 and 1");
    Batcher b2;
    batcher_init(&b2, &ts, 0.1, mb, seq, 100000, 42, err, sizeof err);
    batcher_train(&b2, 0, again, tg);
    CHECK(!memcmp(first, again, sizeof first), "batches_deterministic_in_seed", "same seed, different batch");
    // random access: position 3 after visiting position 60 (another epoch) equals a fresh read
    batcher_train(&b2, 60, next_epoch, tg);
    batcher_train(&b2, 3, again, tg);
    batcher_train(&b, 3, first, tg);
    CHECK(!memcmp(first, again, sizeof first), "batches_random_access_by_position", "position 3 differs");
    batcher_train(&b, 0, first, tg);
    batcher_train(&b, per_epoch, next_epoch, tg);
    CHECK(memcmp(first, next_epoch, sizeof first) != 0, "epochs_reshuffle", "epoch 1 starts like epoch 0");
    batcher_free(&b2);
    batcher_init(&b2, &ts, 0.1, mb, seq, 100000, 43, err, sizeof err);
    batcher_train(&b2, 0, again, tg);
    batcher_train(&b, 0, first, tg);
    CHECK(memcmp(first, again, sizeof first) != 0, "batches_depend_on_seed", "seeds 42 and 43 agree");
    batcher_free(&b2);

    // validation: consecutive windows from the start of the validation part
    int64_t nval = batcher_val_batches(&b, 100);
    CHECK(nval == 6 && batcher_val_batches(&b, 4) == 4, "val_batch_count", "%lld", (long long)nval);
    batcher_val(&b, 1, in, tg);
    CHECK(in[0] == 900 + 2 * seq && tg[0] == 900 + 2 * seq + 1 && in[seq] == 900 + 3 * seq,
          "val_batches_in_order", "val batch 1 starts at %d", in[0]);
    free(seen);
    batcher_free(&b);

    // too few tokens for one batch of micro_batch*seq+1
    rc = batcher_init(&b, &ts, 0.0, 8, 128, 100000, 1, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "fewer than one batch") && strstr(err, "1025"), "too_few_tokens", "rc %d: %s", rc, err);
    batcher_free(&b);
    rc = batcher_init(&b, &ts, 0.01, 2, 8, 100000, 1, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "validation"), "too_few_val_tokens", "rc %d: %s", rc, err);
    batcher_free(&b);
    rc = batcher_init(&b, &ts, 0.1, 2, 8, 256, 1, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "token 256") && strstr(err, "vocabulary of 256"), "token_outside_vocab", "rc %d: %s", rc, err);
    batcher_free(&b);
    data_free(&ts);
}

static void test_corpus(void) {
    if (access("/usr/share/games/fortunes", R_OK) != 0) {
        printf("ok - corpus_loads # SKIP Debian's fortunes is not installed\n");
        return;
    }
    char err[512];
    TokenStream ts;
    int rc = data_load("corpus", &ts, err, sizeof err);
    CHECK(rc == 0 && ts.ntokens > 1000000 && ts.max_token < 256, "corpus_loads",
          "rc %d (%s), %lld tokens, max %d", rc, err, (long long)ts.ntokens, ts.max_token);
    // English text: mostly lowercase letters and spaces
    int64_t letters = 0;
    for (int64_t i = 0; i < ts.ntokens; i++) letters += (ts.tokens[i] >= 'a' && ts.tokens[i] <= 'z') || ts.tokens[i] == ' ';
    CHECK(rc == 0 && letters > ts.ntokens * 6 / 10, "corpus_is_text", "%lld of %lld are a-z or space",
          (long long)letters, (long long)ts.ntokens);
    data_free(&ts);
}

int main(void) {
    if (!mkdtemp(dir)) { printf("FAIL - tmpdir: mkdtemp failed\n"); return 1; }
    test_token_files();
    test_tokenizer();
    test_split_and_batches();
    test_corpus();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    TEST_EXIT();
}
