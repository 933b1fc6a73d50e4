/* run_tokenizer.h: a run's training data opened with the tokenizer its plan names (text tokenized
 * once into the token cache), the vocabulary checked, the tokenizer copied into the run's folder. */
#ifndef BOOST_RUN_TOKENIZER_H
#define BOOST_RUN_TOKENIZER_H

#include <stddef.h>
#include "runtime/plan.h"   // defines: Plan
#include "runtime/data.h"   // defines: TokenSet

/* The copy of the run's tokenizer in its folder (beside the step folders). */
#define RUN_TOKENIZER_FILE "tokenizer.json"

/* The plan's data as a token set: without a tokenizer, data_open; with one, refused (2) when its
 * bytes changed since the plan was made or it holds more tokens than the model's vocab (both sizes
 * named), else the text tokenized (or the cached tokens reused) and, with outdir, the tokenizer
 * copied to outdir/tokenizer.json. 0, 2 or 1 with err. */
int run_data_open(const Plan *p, const char *outdir, TokenSet *set, char *err, size_t errlen);
/* A mixture's sources (p->nsources of them) into sets[], each as run_data_open opens the data
 * (one tokenizer for all); on failure none stays open. 0, 2 or 1 with err. */
int run_data_open_sources(const Plan *p, const char *outdir, TokenSet *sets, char *err,
                          size_t errlen);
/* The tokenizer of a checkpoint whose state.json records one (crc): the run's copy,
 * STEP_DIR/../tokenizer.json (its path in path), checked against crc and loaded. NULL with err. */
Bpe *run_tokenizer_of_checkpoint(const char *step_dir, uint32_t crc, char *path, size_t pathlen,
                                 char *err, size_t errlen);

#endif
