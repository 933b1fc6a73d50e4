/* test_mixture.c: data mixtures (runtime/mixture.c). Two sources whose tokens tell them apart
 * (source 0: 0..999, source 1: 10000..10999): the sequence-to-source rule against a pattern worked
 * out by hand (ties to the lower index), each source's own window order, a dp=2 run resumed at
 * dp=1 from its counts reading exactly the tokens of an uninterrupted run, saved counts that the
 * rule would not give continuing as saved, validation batches, and bad weights refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/unit/testlib.h"
#include "runtime/data.h"      // defines: Batcher, TokenSet, tokenset_view
#include "runtime/mixture.h"   // defines: batcher_*, mixture_*

enum { MB = 2, SEQ = 8, NTOK = 1000, VOCAB = 20000, NSEQ = 24 };
static const uint64_t SEED = 42;

/* Token i of source k is k * 10000 + i. */
static TokenStream stream_of(int k) {
    TokenStream ts = {0};
    ts.tokens = malloc(NTOK * sizeof(int32_t));
    for (int i = 0; i < NTOK; i++) ts.tokens[i] = k * 10000 + i;
    ts.ntokens = NTOK;
    ts.max_token = k * 10000 + NTOK - 1;
    snprintf(ts.source, sizeof ts.source, "source%d", k);
    return ts;
}

/* The first input token of every sequence of n global micro-batches read at dp ranks, from
 * global sequence `from` on, into first[]. */
static int read_firsts(Batcher *b, int64_t from, int n, int dp, int32_t *first) {
    int32_t in[MB * SEQ], tg[MB * SEQ];
    int64_t pos = from;
    for (int g = 0; g < n; g++) {
        for (int d = 0; d < dp; d++) {
            if (batcher_global(b, pos, d, dp, in, tg)) return -1;
            for (int j = 0; j < MB; j++) first[(g * dp + d) * MB + j] = in[j * SEQ];
        }
        pos = batcher_next(b, pos, dp);
    }
    return 0;
}

static void test_rule(void) {
    double w[2] = {0.5, 0.5};
    int64_t t0[2] = {0, 0}, t1[2] = {1, 0}, t2[2] = {3, 0};
    CHECK(mixture_pick(w, t0, 2) == 0 && mixture_pick(w, t1, 2) == 1, "mixture_tie_to_lower_index",
          "picked %d and %d", mixture_pick(w, t0, 2), mixture_pick(w, t1, 2));
    double w3[3] = {0.2, 0.2, 0.6};
    int picked = mixture_pick(w3, t2, 2);
    CHECK(picked == 1, "mixture_pick_smallest_key", "picked %d", picked);
}

static void test_mixture(void) {
    char err[512];
    TokenStream ts[2] = {stream_of(0), stream_of(1)};
    TokenSet sets[2];
    Batcher mix, own[2];
    double weights[2] = {3, 1};   /* normalised: 0.75 and 0.25 */
    int rc = tokenset_view(&ts[0], &sets[0]) || tokenset_view(&ts[1], &sets[1]);
    rc = rc ? 1 : batcher_init_mixture(&mix, sets, weights, 2, 0.1, MB, SEQ, VOCAB, SEED, err,
                                       sizeof err);
    CHECK(rc == 0, "mixture_init", "rc %d: %s", rc, err);
    if (rc) return;
    // each source alone, with the seed data.h gives it: source i's k-th sequence is window k of it
    batcher_init_set(&own[0], &sets[0], 0.1, MB, SEQ, VOCAB, SEED, err, sizeof err);
    batcher_init_set(&own[1], &sets[1], 0.1, MB, SEQ, VOCAB, SEED + 0x9e3779b97f4a7c15ULL, err,
                     sizeof err);

    // by hand: keys (t0+1)/0.75 and (t1+1)/0.25 give 0,0,0(tie 4 = 4),1, then again
    static const int pattern[4] = {0, 0, 0, 1};
    int32_t ref[NSEQ], got[NSEQ];
    rc = read_firsts(&mix, 0, NSEQ / MB, 1, ref);
    int follows = rc == 0, own_order = rc == 0;
    int64_t k[2] = {0, 0};
    for (int s = 0; s < NSEQ && follows; s++) {
        int src = ref[s] >= 10000;
        follows = src == pattern[s % 4];
        int32_t in[SEQ], tg[SEQ];
        batcher_window(&own[src], k[src]++, in, tg);
        own_order &= in[0] == ref[s];
    }
    CHECK(follows, "mixture_sequences_follow_the_rule", "rc %d: not the pattern 0,0,0,1", rc);
    CHECK(own_order, "mixture_each_source_its_own_order", "a k-th sequence is not its window k");
    int64_t taken[2];
    mixture_taken(&mix, NSEQ, taken);
    CHECK(taken[0] == NSEQ * 3 / 4 && taken[1] == NSEQ / 4, "mixture_taken_counts", "%lld, %lld",
          (long long)taken[0], (long long)taken[1]);

    // a dp=2 run for half the sequences, its counts saved, resumed at dp=1 in a new batcher
    Batcher resumed;
    rc = read_firsts(&mix, 0, NSEQ / 2 / (2 * MB), 2, got);
    mixture_taken(&mix, NSEQ / 2, taken);
    rc |= batcher_init_mixture(&resumed, sets, weights, 2, 0.1, MB, SEQ, VOCAB, SEED, err,
                               sizeof err);
    mixture_seek(&resumed, NSEQ / 2, taken);
    rc |= read_firsts(&resumed, NSEQ / 2, NSEQ / 2 / MB, 1, got + NSEQ / 2);
    CHECK(rc == 0 && !memcmp(ref, got, sizeof ref), "mixture_resume_dp2_at_dp1_same_tokens",
          "rc %d: the resumed run read other sequences", rc);

    // saved counts the rule would not give (other weights before): continued as saved
    int64_t saved[2] = {5, 7};
    mixture_seek(&resumed, NSEQ / 2, saved);
    int32_t one[MB];
    int32_t in[SEQ], tg[SEQ];
    rc = read_firsts(&resumed, NSEQ / 2, 1, 1, one);
    batcher_window(&own[0], 5, in, tg);   /* keys 6/0.75 = 8 < 8/0.25 = 32: source 0, window 5 */
    CHECK(rc == 0 && one[0] == in[0], "mixture_resume_continues_saved_counts", "got %d, want %d",
          one[0], in[0]);
    batcher_free(&resumed);

    // validation micro-batch j goes to a source by the rule over j: 0, 0, 0, then source 1's first
    int32_t v[MB * SEQ], want[MB * SEQ], vt[MB * SEQ];
    rc = batcher_val(&mix, 3, v, vt) || batcher_val(&own[1], 0, want, vt);
    CHECK(rc == 0 && !memcmp(v, want, sizeof v) && mixture_val_batches(&mix, 100) == 12,
          "mixture_validation_batches", "rc %d, first %d vs %d, %lld batches", rc, v[0], want[0],
          (long long)mixture_val_batches(&mix, 100));

    double bad[2] = {1, 0};
    Batcher no;
    rc = batcher_init_mixture(&no, sets, bad, 2, 0.1, MB, SEQ, VOCAB, SEED, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "source1") && strstr(err, "> 0"), "mixture_weight_zero_refused",
          "rc %d: %s", rc, err);
    batcher_free(&mix);
    batcher_free(&own[0]);
    batcher_free(&own[1]);
    for (int i = 0; i < 2; i++) { tokenset_close(&sets[i]); data_free(&ts[i]); }
}

int main(void) {
    test_rule();
    test_mixture();
    TEST_EXIT();
}
