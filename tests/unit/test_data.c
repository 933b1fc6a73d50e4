/* test_data.c: the training data path: llm.c token files (good, uint16 and uint32, wrong magic,
 * truncated, too few tokens, tokens outside the vocabulary), memory-mapped shard sets and globs,
 * the byte tokenizer and its cached shard, the train/validation split and the shuffled batches
 * (contiguous windows, each window once per epoch, deterministic in the seed), the dp slices of
 * every global batch (each window of an epoch read by exactly one rank at n = 1, 2, 4) and resume
 * positions that carry over between dp degrees. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "tests/unit/testlib.h"
#include "runtime/data.h"      // defines: TokenStream, Batcher, data_*, tokenize_bytes
#include "runtime/mixture.h"   // defines: batcher_train, batcher_val, batcher_free

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

    header[0] = 20240520; header[1] = 3;
    memcpy(file, header, 1024);
    path_in(path, sizeof path, "badversion.bin");
    write_raw(path, file, sizeof file);
    rc = data_read_token_file(path, &ts, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "version 3"), "token_file_wrong_version", "rc %d: %s", rc, err);
    TokenSet set;
    rc = data_open(path, &set, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "version 3") && strstr(err, path), "shard_wrong_version", "rc %d: %s", rc, err);

    // version 2: uint32 tokens, little-endian
    header[1] = 2; header[2] = 2;
    unsigned char file32[1024 + 8];
    memcpy(file32, header, 1024);
    unsigned char body32[8] = {0x01, 0x00, 0x00, 0x00, 0x78, 0x56, 0x34, 0x12};
    memcpy(file32 + 1024, body32, 8);
    path_in(path, sizeof path, "u32.bin");
    write_raw(path, file32, sizeof file32);
    rc = data_read_token_file(path, &ts, err, sizeof err);
    CHECK(rc == 0 && ts.ntokens == 2 && ts.tokens[0] == 1 && ts.tokens[1] == 0x12345678, "token_file_uint32",
          "rc %d (%s)", rc, err);
    data_free(&ts);
    rc = data_open(path, &set, err, sizeof err);
    int32_t two[2] = {0, 0};
    int rrc = rc == 0 ? tokenset_read(&set, 0, 2, 0x12345679, two, err, sizeof err) : -1;
    CHECK(rc == 0 && rrc == 0 && set.ntokens == 2 && set.shards[0].width == 4 && two[0] == 1 && two[1] == 0x12345678,
          "shard_uint32_mapped", "rc %d/%d (%s)", rc, rrc, err);
    rrc = rc == 0 ? tokenset_read(&set, 0, 2, 50257, two, err, sizeof err) : -1;
    CHECK(rrc == 2 && strstr(err, path) && strstr(err, "305419896") && strstr(err, "vocabulary of 50257"),
          "shard_read_rejects_token_outside_vocab", "rc %d: %s", rrc, err);
    if (rc == 0) tokenset_close(&set);
    header[1] = 2; header[2] = 3;   // 3 uint32 tokens = 12 bytes, 8 there
    memcpy(file32, header, 1024);
    path_in(path, sizeof path, "u32short.bin");
    write_raw(path, file32, sizeof file32);
    rc = data_open(path, &set, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "truncated") && strstr(err, path), "shard_uint32_count_vs_size", "rc %d: %s", rc, err);
    header[1] = 1;

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

/* Writes an llm.c shard of n tokens f(i) (uint16 or uint32). */
static void write_shard(const char *path, int version, int64_t n, int64_t base) {
    FILE *f = fopen(path, "wb");
    int32_t header[256] = {20240520, version, (int32_t)n};
    fwrite(header, sizeof header, 1, f);
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)((base + i) % 60000);
        if (version == 1) { uint16_t h = (uint16_t)v; fwrite(&h, 2, 1, f); }
        else fwrite(&v, 4, 1, f);
    }
    fclose(f);
}

static void test_shard_sets(void) {
    char path[256], err[1024];
    // three shards, mixed widths: one stream 0..n-1 (mod 60000)
    const int64_t n0 = 1000, n1 = 777, n2 = 1500, n = n0 + n1 + n2;
    path_in(path, sizeof path, "sh_000.bin"); write_shard(path, 1, n0, 0);
    path_in(path, sizeof path, "sh_001.bin"); write_shard(path, 2, n1, n0);
    path_in(path, sizeof path, "sh_002.bin"); write_shard(path, 1, n2, n0 + n1);
    char pattern[256];
    path_in(pattern, sizeof pattern, "sh_*.bin");
    TokenSet set;
    int rc = data_open(pattern, &set, err, sizeof err);
    CHECK(rc == 0 && set.nshards == 3 && set.ntokens == n && set.shards[1].first == n0 && set.shards[1].width == 4,
          "glob_opens_shards_in_name_order", "rc %d (%s), %d shards, %lld tokens", rc, err, set.nshards, (long long)set.ntokens);
    if (rc) return;
    int32_t got[100];
    rc = tokenset_read(&set, n0 - 50, 100, 60000, got, err, sizeof err);   // across the first boundary
    int across = rc == 0;
    for (int i = 0; across && i < 100; i++) across = got[i] == n0 - 50 + i;
    CHECK(across, "read_across_shards", "rc %d (%s)", rc, err);

    // the same tokens in memory batch identically (the split and the order depend only on the stream)
    TokenStream ts = {0};
    ts.tokens = malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) ts.tokens[i] = (int32_t)(i % 60000);
    ts.ntokens = n; ts.max_token = (int32_t)(n - 1);
    snprintf(ts.source, sizeof ts.source, "memory");
    const int mb = 2, seq = 16;
    Batcher a, b;
    rc = batcher_init_set(&a, &set, 0.1, mb, seq, 60000, 7, err, sizeof err);
    int rc2 = batcher_init(&b, &ts, 0.1, mb, seq, 60000, 7, err, sizeof err);
    CHECK(rc == 0 && rc2 == 0 && a.val_begin == b.val_begin && a.val_begin == n - (int64_t)(n * 0.1)
          && a.train_windows == b.train_windows, "shard_split_as_in_memory", "rc %d/%d: %s", rc, rc2, err);
    int same = 1;
    int32_t ia[mb * seq], ta[mb * seq], ib[mb * seq], tb[mb * seq];
    for (int64_t pos = 0; pos < 200 && same; pos++) {
        same = batcher_train(&a, pos, ia, ta) == 0 && batcher_train(&b, pos, ib, tb) == 0
               && !memcmp(ia, ib, sizeof ia) && !memcmp(ta, tb, sizeof ta);
    }
    for (int64_t i = 0; i < batcher_val_batches(&a, 100) && same; i++)
        same = batcher_val(&a, i, ia, ta) == 0 && batcher_val(&b, i, ib, tb) == 0 && !memcmp(ia, ib, sizeof ia);
    CHECK(same, "shard_batches_as_in_memory", "a batch differs between the mapped shards and memory");
    batcher_free(&b);
    data_free(&ts);

    // dp slices: over one epoch of global micro-batches, every window is read by exactly one rank
    int64_t W = a.train_windows;
    int *seen = calloc((size_t)W, sizeof(int));
    int32_t in[mb * seq], tg[mb * seq];
    for (int nr = 1; nr <= 4; nr *= 2) {
        memset(seen, 0, (size_t)W * sizeof(int));
        int64_t pos = 0, batches = 0;
        int ok_reads = 1, distinct_ranks = 1;
        while (pos + nr * mb <= W) {
            int32_t first_of_rank[4];
            for (int r = 0; r < nr; r++) {
                ok_reads &= batcher_global(&a, pos, r, nr, in, tg) == 0;
                for (int i = 0; i < mb; i++) seen[in[i * seq] / seq]++;
                first_of_rank[r] = in[0];
                for (int q = 0; q < r; q++) if (first_of_rank[q] == in[0]) distinct_ranks = 0;
            }
            pos = batcher_next(&a, pos, nr);
            batches++;
        }
        int once = 1, covered = 0;
        for (int64_t w = 0; w < W; w++) { if (seen[w] > 1) once = 0; covered += seen[w] == 1; }
        char name[64];
        snprintf(name, sizeof name, "dp%d_each_window_read_by_one_rank", nr);
        // the epoch's last W mod (nr*mb) windows start the next global batch
        CHECK(ok_reads && once && distinct_ranks && covered == batches * nr * mb && W - covered < nr * mb, name,
              "%d of %lld windows read once (%lld global batches), reads ok %d", covered, (long long)W,
              (long long)batches, ok_reads);
    }
    // n=1 is today's micro-batch order; a position saved at dp=2 resumes at dp=4 (and dp=1) with the
    // windows not yet seen: the stream of windows does not depend on dp
    int n1ok = 1;
    for (int64_t pos = 0; pos < 10 && n1ok; pos++) {
        batcher_global(&a, pos * mb, 0, 1, ia, ta);
        batcher_train(&a, pos, ib, tb);
        n1ok = !memcmp(ia, ib, sizeof ia);
    }
    CHECK(n1ok, "dp1_is_batcher_train", "batcher_global(pos*mb, 0, 1) differs from batcher_train(pos)");
    memset(seen, 0, (size_t)W * sizeof(int));
    int64_t pos = 0;
    for (int k = 0; k < 5; k++) {   // 5 global batches at dp=2
        for (int r = 0; r < 2; r++) { batcher_global(&a, pos, r, 2, in, tg); for (int i = 0; i < mb; i++) seen[in[i * seq] / seq]++; }
        pos = batcher_next(&a, pos, 2);
    }
    int64_t saved = pos;   // what state.json keeps
    while (pos + 4 * mb <= W) {
        for (int r = 0; r < 4; r++) { batcher_global(&a, pos, r, 4, in, tg); for (int i = 0; i < mb; i++) seen[in[i * seq] / seq]++; }
        pos = batcher_next(&a, pos, 4);
    }
    int once = 1, covered = 0;
    for (int64_t w = 0; w < W; w++) { if (seen[w] > 1) once = 0; covered += seen[w] == 1; }
    CHECK(saved == 5 * 2 * mb && once && covered == pos, "resume_dp2_to_dp4_reads_the_rest",
          "saved %lld, %d windows once of %lld read", (long long)saved, covered, (long long)pos);
    // the same windows in the same order at dp=1 from the saved position
    batcher_global(&a, saved, 1, 2, ia, ta);           // dp=2 rank 1 of global batch `saved`
    batcher_global(&a, saved + mb, 0, 1, ib, tb);      // dp=1 one micro-batch later
    CHECK(!memcmp(ia, ib, sizeof ia), "dp_slices_are_positions_in_one_stream", "rank 1 of dp=2 != the next dp=1 micro-batch");
    free(seen);
    batcher_free(&a);
    tokenset_close(&set);

    // a glob that matches nothing; a damaged shard in a glob is named
    path_in(pattern, sizeof pattern, "none_*.bin");
    rc = data_open(pattern, &set, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "matches no file") && strstr(err, pattern), "glob_matches_nothing", "rc %d: %s", rc, err);
    path_in(path, sizeof path, "sh_003.bin");
    write_raw(path, "not a shard at all", 18);
    path_in(pattern, sizeof pattern, "sh_*.bin");
    rc = data_open(pattern, &set, err, sizeof err);
    CHECK(rc == 2 && strstr(err, path) && strstr(err, "not a token file"), "glob_names_bad_shard", "rc %d: %s", rc, err);
    remove(path);

    // tokens outside the vocabulary: near the start, found by the sampled check at init; deep in a
    // large shard (between sampled blocks), found when the batch that holds it is read
    const int64_t big = 400000;
    path_in(path, sizeof path, "vocab.bin");
    FILE *f = fopen(path, "wb");
    int32_t header[256] = {20240520, 1, (int32_t)big};
    fwrite(header, sizeof header, 1, f);
    uint16_t *tok = malloc((size_t)big * 2);
    for (int64_t i = 0; i < big; i++) tok[i] = (uint16_t)(i % 200);
    tok[69700] = 300;   // between sampled blocks [65536, 69632) and [69738, ...)
    fwrite(tok, 2, (size_t)big, f);
    fclose(f);
    rc = data_open(path, &set, err, sizeof err);
    int irc = rc ? -1 : batcher_init_set(&a, &set, 0.0, 4, 64, 256, 1, err, sizeof err);
    int bad = 0, found = 0;
    for (int64_t p = 0; irc == 0 && p < a.train_windows / 4 && !found; p++) {
        int32_t bi[4 * 64], bt[4 * 64];
        if (batcher_train(&a, p, bi, bt)) { found = 1; bad = strstr(a.err, "token 300") && strstr(a.err, "69700") && strstr(a.err, path); }
    }
    CHECK(irc == 0 && found && bad, "vocab_checked_per_batch", "init rc %d, found %d: %s", irc, found, a.err);
    if (irc == 0) batcher_free(&a);
    if (rc == 0) tokenset_close(&set);
    tok[69700] = 0; tok[10] = 300;
    f = fopen(path, "wb");
    fwrite(header, sizeof header, 1, f);
    fwrite(tok, 2, (size_t)big, f);
    fclose(f);
    free(tok);
    rc = data_open(path, &set, err, sizeof err);
    irc = rc ? -1 : batcher_init_set(&a, &set, 0.0, 4, 64, 256, 1, err, sizeof err);
    CHECK(irc == 2 && strstr(err, "token 300") && strstr(err, "position 10 ") && strstr(err, path),
          "vocab_sampled_at_init", "rc %d: %s", irc, err);
    if (rc == 0) tokenset_close(&set);

    // text: tokenised once into a shard named by its bytes, reused by the next open
    path_in(path, sizeof path, "words.txt");
    write_raw(path, "streamed words\n", 15);
    rc = data_open(path, &set, err, sizeof err);
    char shard[1100] = "";
    struct stat st1 = {0}, st2 = {0};
    if (rc == 0) { snprintf(shard, sizeof shard, "%s", set.shards[0].path); stat(shard, &st1); }
    int32_t w[15];
    int text_ok = rc == 0 && set.ntokens == 15 && strstr(shard, "/tokens/") && tokenset_read(&set, 0, 15, 256, w, err, sizeof err) == 0
                  && w[0] == 's' && w[14] == '\n' && !strcmp(set.source, path);
    if (rc == 0) tokenset_close(&set);
    CHECK(text_ok, "text_tokenised_into_a_shard", "rc %d (%s), shard %s", rc, err, shard);
    path_in(path, sizeof path, "words-copy.txt");
    write_raw(path, "streamed words\n", 15);
    rc = data_open(path, &set, err, sizeof err);
    if (rc == 0) stat(set.shards[0].path, &st2);
    CHECK(rc == 0 && !strcmp(set.shards[0].path, shard) && st1.st_ino == st2.st_ino, "text_shard_reused_by_content",
          "rc %d (%s): %s vs %s", rc, err, rc == 0 ? set.shards[0].path : "", shard);
    if (rc == 0) tokenset_close(&set);
    if (shard[0]) remove(shard);   // the cache entry of this test's text
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
    test_shard_sets();
    test_corpus();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    TEST_EXIT();
}
