/* run_tokenizer.c: a run's training data with the tokenizer its plan names (data line's
 * tokenizer=): the tokenizer checked against the plan's CRC-32C and the model's vocabulary before
 * anything is tokenized, the text tokenized once into the token cache (data_open_bpe), and the
 * tokenizer.json copied into the run's folder for `boost sample` and `boost eval`. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "runtime/run_tokenizer.h"   // defines: run_data_open
#include "runtime/data.h"            // defines: data_open, data_open_bpe, data_load_tokenizer
#include "common/crc32c.h"           // defines: crc32c_file

/* Copy src to dir/tokenizer.json through a temporary file and a rename. 0, or 1 with err. */
static int copy_tokenizer(const char *src, const char *dir, char *err, size_t errlen) {
    char dst[1200], tmp[1300];
    snprintf(dst, sizeof dst, "%s/%s", dir, RUN_TOKENIZER_FILE);
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", dst, (int)getpid());
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "%s: cannot create the run's folder: %s", dir, strerror(errno));
        return 1;
    }
    FILE *in = fopen(src, "rb"), *out = in ? fopen(tmp, "wb") : NULL;
    int ok = in && out;
    char buf[1 << 15];
    size_t got;
    while (ok && (got = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, got, out) == got;
    if (in && ferror(in)) ok = 0;
    if (in) fclose(in);
    if (out && fclose(out) != 0) ok = 0;
    if (!ok || rename(tmp, dst) != 0) {
        snprintf(err, errlen, "%s: cannot copy the tokenizer %s there: %s", dst, src, strerror(errno));
        remove(tmp);
        return 1;
    }
    return 0;
}

/* The data at path (the plan's, or one source's) with the plan's tokenizer, as run_data_open. */
static int open_data(const Plan *p, const char *path, const char *outdir, TokenSet *set, char *err,
                     size_t errlen) {
    if (!p->tokenizer_path[0]) return data_open(path, set, err, errlen);
    char resolved[4200];
    Bpe *b = data_load_tokenizer(p->tokenizer_path, p->tokenizer_crc, resolved, sizeof resolved,
                                 err, errlen);
    if (!b) return 2;
    int32_t n = bpe_vocab_size(b);
    if (n > p->vocab) {
        snprintf(err, errlen, "tokenizer %s has %d tokens but model %s's vocab is %d: the model "
                 "needs vocab >= %d (set vocab in the model spec, or train a smaller tokenizer)",
                 resolved, n, p->model_name, p->vocab, n);
        bpe_free(b);
        return 2;
    }
    int rc = data_open_bpe(path, b, p->tokenizer_crc, resolved, set, err, errlen);
    bpe_free(b);
    if (!rc && outdir && (rc = copy_tokenizer(resolved, outdir, err, errlen))) tokenset_close(set);
    return rc;
}

int run_data_open(const Plan *p, const char *outdir, TokenSet *set, char *err, size_t errlen) {
    return open_data(p, p->data_path, outdir, set, err, errlen);
}

int run_data_open_sources(const Plan *p, const char *outdir, TokenSet *sets, char *err,
                          size_t errlen) {
    for (int i = 0; i < p->nsources; i++) {
        int rc = open_data(p, p->sources[i].path, i ? NULL : outdir, &sets[i], err, errlen);
        if (rc) {
            while (i-- > 0) tokenset_close(&sets[i]);
            return rc;
        }
    }
    return 0;
}

Bpe *run_tokenizer_of_checkpoint(const char *step_dir, uint32_t crc, char *path, size_t pathlen,
                                 char *err, size_t errlen) {
    snprintf(path, pathlen, "%s/../%s", step_dir, RUN_TOKENIZER_FILE);
    uint32_t have = 0;
    if (crc32c_file(path, &have) != 0) {
        snprintf(err, errlen, "%s: %s (the checkpoint's state.json records a tokenizer, whose copy "
                 "lies in the run's folder beside the step folders)", path, strerror(errno));
        return NULL;
    }
    if (have != crc) {
        snprintf(err, errlen, "%s: CRC-32C 0x%08x, the checkpoint records 0x%08x: it is not the "
                 "tokenizer the model was trained with", path, have, crc);
        return NULL;
    }
    int status;
    return bpe_load(path, &status, err, errlen);
}
