/* mixture.c: training data as a weighted mixture of sources (the plan's `source` lines): one
 * batcher per source, and the rule that gives each global training sequence to a source, a
 * function of the sequence's index alone, so any dp and any resume read the same tokens.
 * The rule and the per-source window orders are described in runtime/mixture.h, with the batcher
 * calls that read either a mixture or one source (runtime/data.h's batcher_one_*). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/mixture.h"
#include "runtime/data.h"   // defines: Batcher, batcher_init_set, batcher_window, batcher_one_*
#include "common/train_settings.h"   // defines: DATA_MAX_SOURCES

/* Source i's window order: the run's seed for source 0, a different one for each other source. */
static uint64_t source_seed(uint64_t seed, int i) {
    return seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL;
}

int mixture_pick(const double *w, const int64_t *taken, int n) {
    int best = 0;
    double best_key = ((double)taken[0] + 1) / w[0];
    for (int i = 1; i < n; i++) {
        double key = ((double)taken[i] + 1) / w[i];
        if (key < best_key) { best = i; best_key = key; }   /* strict: ties keep the lower index */
    }
    return best;
}

void mixture_free(Batcher *b) {
    for (int i = 0; i < b->nsources; i++) batcher_one_free(&b->sources[i]);
    free(b->sources); free(b->weights); free(b->taken); free(b->base_taken);
    b->sources = NULL; b->weights = NULL; b->taken = b->base_taken = NULL;
    b->nsources = 0;
}

int batcher_init_mixture(Batcher *b, const TokenSet *sets, const double *weights, int n,
                         double val_fraction, int micro_batch, int seq, int vocab, uint64_t seed,
                         char *err, size_t errlen) {
    memset(b, 0, sizeof *b);
    if (n < 1 || n > DATA_MAX_SOURCES) {
        snprintf(err, errlen, "a mixture of %d sources: want 1 to %d", n, DATA_MAX_SOURCES);
        return 2;
    }
    double sum = 0;
    for (int i = 0; i < n; i++) {
        if (!(weights[i] > 0)) {
            snprintf(err, errlen, "%s: mixture weight %g: every source needs a weight > 0 (fix "
                     "the run spec's data.sources and regenerate the plan)", sets[i].source,
                     weights[i]);
            return 2;
        }
        sum += weights[i];
    }
    b->sources = calloc((size_t)n, sizeof *b->sources);
    b->weights = calloc((size_t)n, sizeof *b->weights);
    b->taken = calloc((size_t)n, sizeof *b->taken);
    b->base_taken = calloc((size_t)n, sizeof *b->base_taken);
    b->nsources = n;
    if (!b->sources || !b->weights || !b->taken || !b->base_taken) {
        mixture_free(b);
        snprintf(err, errlen, "out of memory");
        return 1;
    }
    b->micro_batch = micro_batch;
    b->seq = seq;
    b->vocab = vocab;
    b->seed = seed;
    for (int i = 0; i < n; i++) {
        b->weights[i] = weights[i] / sum;
        int rc = batcher_init_set(&b->sources[i], &sets[i], val_fraction, micro_batch, seq, vocab,
                                  source_seed(seed, i), err, errlen);
        if (rc) { mixture_free(b); return rc; }
        b->train_len += b->sources[i].train_len;
        b->val_len += b->sources[i].val_len;
        b->train_windows += b->sources[i].train_windows;
        b->val_windows += b->sources[i].val_windows;
    }
    return 0;
}

void mixture_seek(Batcher *b, int64_t s, const int64_t *taken) {
    b->base = taken ? s : 0;
    for (int i = 0; i < b->nsources; i++) b->base_taken[i] = taken ? taken[i] : 0;
    b->cursor = b->base;
    memcpy(b->taken, b->base_taken, (size_t)b->nsources * sizeof *b->taken);
}

/* Move the count to global sequence s: forward from the cursor, or again from the base (from 0
 * when s lies before the base). */
static void advance_to(Batcher *b, int64_t s) {
    if (s < b->base) mixture_seek(b, 0, NULL);
    if (s < b->cursor) {
        b->cursor = b->base;
        memcpy(b->taken, b->base_taken, (size_t)b->nsources * sizeof *b->taken);
    }
    for (; b->cursor < s; b->cursor++) b->taken[mixture_pick(b->weights, b->taken, b->nsources)]++;
}

void mixture_taken(Batcher *b, int64_t s, int64_t *taken) {
    advance_to(b, s);
    memcpy(taken, b->taken, (size_t)b->nsources * sizeof *taken);
}

int mixture_global(Batcher *b, int64_t pos, int rank, int32_t *inputs, int32_t *targets) {
    int64_t first = pos + (int64_t)rank * b->micro_batch;
    for (int j = 0; j < b->micro_batch; j++) {
        advance_to(b, first + j);
        int i = mixture_pick(b->weights, b->taken, b->nsources);
        Batcher *src = &b->sources[i];
        size_t row = (size_t)j * (size_t)b->seq;
        if (batcher_window(src, b->taken[i], inputs + row, targets + row)) {
            snprintf(b->err, sizeof b->err, "%s", src->err);
            return 2;
        }
    }
    return 0;
}

int64_t mixture_val_batches(const Batcher *b, int64_t max_batches) {
    int64_t n = 0;
    for (int i = 0; i < b->nsources; i++) n += batcher_one_val_batches(&b->sources[i], max_batches);
    return n < max_batches ? n : max_batches;
}

int mixture_val(Batcher *b, int64_t j, int32_t *inputs, int32_t *targets) {
    int64_t taken[DATA_MAX_SOURCES] = {0};
    for (int64_t k = 0; k < j; k++) taken[mixture_pick(b->weights, taken, b->nsources)]++;
    int i = mixture_pick(b->weights, taken, b->nsources);
    Batcher *src = &b->sources[i];
    int64_t n = batcher_one_val_batches(src, INT64_MAX);
    if (n <= 0) {
        snprintf(b->err, sizeof b->err, "%s: no validation micro-batch in this source",
                 src->set->source);
        return 2;
    }
    if (batcher_one_val(src, taken[i] % n, inputs, targets)) {
        snprintf(b->err, sizeof b->err, "%s", src->err);
        return 2;
    }
    return 0;
}

/* ---- any batcher: a mixture reads through its sources, one source through runtime/data.c ---- */

int batcher_global(Batcher *b, int64_t pos, int rank, int nranks, int32_t *inputs,
                   int32_t *targets) {
    (void)nranks;   // the slice of rank i is the same whatever n; n only moves batcher_next
    if (b->nsources) return mixture_global(b, pos, rank, inputs, targets);
    return batcher_one_global(b, pos, rank, inputs, targets);
}

int batcher_train(Batcher *b, int64_t pos, int32_t *inputs, int32_t *targets) {
    return batcher_global(b, pos * b->micro_batch, 0, 1, inputs, targets);
}

int64_t batcher_val_batches(const Batcher *b, int64_t max_batches) {
    if (b->nsources) return mixture_val_batches(b, max_batches);
    return batcher_one_val_batches(b, max_batches);
}

int batcher_val(Batcher *b, int64_t i, int32_t *inputs, int32_t *targets) {
    if (b->nsources) return mixture_val(b, i, inputs, targets);
    return batcher_one_val(b, i, inputs, targets);
}

void batcher_free(Batcher *b) {
    if (b->nsources) mixture_free(b);
    batcher_one_free(b);
}
