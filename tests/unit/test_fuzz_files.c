/* test_fuzz_files.c: seeded, bounded fuzzing of every file the runtime reads: plan.txt, checkpoint
 * folders (state.json, index.json, the safetensors headers of full and sharded storage) and token
 * shards. Each case mutates a valid file (a number swapped for an extreme one, bytes flipped, the
 * file cut short) and runs the reader on it: an error message or a valid result, never a crash, a
 * hang or (under `make test-sanitize`) a memory or undefined-behaviour fault. Deterministic: the
 * same seed gives the same files. BOOST_FUZZ_ITERS=N scales every loop (default 1). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tests/unit/testlib.h"
#include "runtime/plan.h"
#include "runtime/safetensors.h"
#include "runtime/checkpoint.h"
#include "runtime/data.h"

static char tmp[] = "/tmp/boost-test-fuzz.XXXXXX";
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static int scale = 1;

static uint64_t next(void) { return data_splitmix64(&rng); }

/* Numbers a crafted file would use: 0, signs, the edges of 32 and 64 bits, 2^49+1, 2^50, floats. */
static const char *const EXTREMES[] = {"0",
                                       "-1",
                                       "1",
                                       "2147483647",
                                       "2147483648",
                                       "4294967296",
                                       "562949953421313",
                                       "1125899906842624",
                                       "9223372036854775807",
                                       "9223372036854775808",
                                       "-9223372036854775808",
                                       "18446744073709551615",
                                       "1e30",
                                       "1e308",
                                       "-1e300",
                                       "nan",
                                       "0.5",
                                       "99999999999999999999999"};
#define NEXTREMES ((int)(sizeof EXTREMES / sizeof EXTREMES[0]))

/* A mutant of text[0..len) in a new buffer (*outlen bytes): 1-3 numbers replaced by extremes, or a
 * few bytes flipped, or cut short. Numbers are runs of digits; `from` skips a binary prefix. */
static char *mutate(const char *text, size_t len, size_t from, size_t *outlen) {
    char *out = malloc(len * 2 + 256);
    memcpy(out, text, len);
    size_t n = len;
    int kind = (int)(next() % 4);
    if (kind <= 1) {
        for (int m = 0; m < 1 + (int)(next() % 3); m++) {
            size_t at = from + next() % (n - from), a = at;
            while (a < n && !(out[a] >= '0' && out[a] <= '9')) a++;
            if (a >= n) continue;
            size_t b = a;
            while (b < n && out[b] >= '0' && out[b] <= '9') b++;
            const char *x = EXTREMES[next() % NEXTREMES];
            size_t xl = strlen(x);
            if (n - (b - a) + xl > len * 2 + 200) continue;
            memmove(out + a + xl, out + b, n - b);
            memcpy(out + a, x, xl);
            n = n - (b - a) + xl;
        }
    } else if (kind == 2) {
        for (int m = 0; m < 1 + (int)(next() % 4); m++)
            out[from + next() % (n - from)] ^= (char)(1 << (next() % 8));
    } else {
        n = from + next() % (n - from + 1);
    }
    *outlen = n;
    return out;
}

static void fuzz_plans(void) {
    size_t len;
    char *text = tl_read_file("generated/tiny-cola/plan.txt", &len);
    CHECK(text != NULL, "plans: generated/tiny-cola/plan.txt",
          "cannot read it (run from the repository root)");
    if (!text) return;
    int iters = 400 * scale, loaded = 0;
    for (int it = 0; it < iters; it++) {
        size_t n;
        char *m = mutate(text, len, 0, &n);
        m[n] =
            0; // plan_parse_text takes a C string (a NUL inside cuts it short, as a reader would)
        char err[1024] = "";
        Plan *p = plan_parse_text("fuzz/plan.txt", m, err, sizeof err);
        if (p)
            loaded++;
        else if (!strstr(err, "fuzz/plan.txt")) {
            CHECK(0, "plans: every refusal names the file", "case %d: %s", it, err);
            break;
        }
        plan_free(p);
    }
    free(text);
    CHECK(loaded < iters, "plans: mutants refused with a message naming the file, or loaded",
          "%d of %d loaded", loaded, iters);
    printf("# plans: %d mutants, %d loaded\n", iters, loaded);
}

static const StEntry canons[] = {{"emb", 8, 4}, {"norm", 1, 4}, {"w", 4, 6}};

static int fill_canon(void *ctx, int slot, int canon, float *out) {
    (void)ctx;
    for (int k = 0; k < canons[canon].rows * canons[canon].cols; k++)
        out[k] = (float)(slot + canon * 0.5 + k);
    return 0;
}

/* Run every reader on a folder: verify, state, the tensor reader and a read of every tensor. */
static void read_folder(const char *dir) {
    char err[4096];
    ckpt_verify(dir, err, sizeof err);
    CkptState st;
    if (ckpt_read_state(dir, &st, err, sizeof err) == 0) ckpt_state_free(&st);
    CkptReader *r = NULL;
    if (ckpt_reader_open(dir, canons, 3, &r, err, sizeof err) == 0) {
        for (int i = 0; i < ckpt_reader_count(r); i++) {
            int64_t rows, cols;
            ckpt_reader_tensor(r, i, NULL, &rows, &cols);
            float *buf = malloc((size_t)(rows * cols) * sizeof(float) + 1);
            if (buf) ckpt_reader_read(r, i, NULL, 0, buf, err, sizeof err);
            free(buf);
        }
        ckpt_reader_close(r);
    }
    StFile mf, of;
    if (ckpt_open_tensors(dir, canons, 3, &mf, &of, err, sizeof err) == 0) {
        st_close(&mf);
        st_close(&of);
    }
}

static int fill_zero(void *ctx, int i, float *out) {
    const StEntry *e = ctx;
    memset(out, 0, (size_t)(e[i].rows * e[i].cols) * sizeof(float));
    return 0;
}

static void fuzz_checkpoints(void) {
    char out[PATH_MAX], saved[PATH_MAX], err[4096];
    snprintf(out, sizeof out, "%s/run", tmp);
    CkptState st = {0};
    st.step = 3;
    st.fingerprint = ckpt_fingerprint(canons, 3);
    st.ncanons = 3;
    st.tp = 1;
    snprintf(st.model, sizeof st.model, "fuzz");
    int rc = ckpt_save(out, &st, canons, 3, fill_canon, NULL, saved, sizeof saved, err, sizeof err);
    CHECK(rc == 0, "ckpt: a folder to mutate", "%s", err);
    if (rc) return;
    // the sharded folder: rank files and an index
    char sh[PATH_MAX], path[PATH_MAX + 64];
    snprintf(sh, sizeof sh, "%s/sharded", tmp);
    mkdir(sh, 0777);
    const StEntry r0[] = {{"emb[0:4,0:4]", 4, 4}, {"norm[0:1,0:4]", 1, 4}, {"w[0:4,0:6]", 4, 6}},
                  r1[] = {{"emb[4:8,0:4]", 4, 4}};
    snprintf(path, sizeof path, "%s/rank-00000.safetensors", sh);
    st_write_f32(path, r0, 3, NULL, 0, fill_zero, (void *)r0, err, sizeof err);
    snprintf(path, sizeof path, "%s/rank-00001.safetensors", sh);
    st_write_f32(path, r1, 1, NULL, 0, fill_zero, (void *)r1, err, sizeof err);
    const char *index = "{\"format\": \"boost-checkpoint-index\", \"tensors\": {"
                        "\"emb\": {\"kind\": \"param\", \"shape\": [8, 4], \"slices\": ["
                        "{\"file\": \"rank-00000.safetensors\", \"key\": \"emb[0:4,0:4]\", "
                        "\"rows\": [0, 4], \"cols\": [0, 4]},"
                        "{\"file\": \"rank-00001.safetensors\", \"key\": \"emb[4:8,0:4]\", "
                        "\"rows\": [4, 8], \"cols\": [0, 4]}]},"
                        "\"norm\": {\"kind\": \"param\", \"shape\": [1, 4], \"slices\": ["
                        "{\"file\": \"rank-00000.safetensors\", \"key\": \"norm[0:1,0:4]\", "
                        "\"rows\": [0, 1], \"cols\": [0, 4]}]},"
                        "\"w\": {\"kind\": \"param\", \"shape\": [4, 6], \"slices\": ["
                        "{\"file\": \"rank-00000.safetensors\", \"key\": \"w[0:4,0:6]\", \"rows\": "
                        "[0, 4], \"cols\": [0, 6]}]}}}";
    snprintf(path, sizeof path, "%s/index.json", sh);
    tl_write_file(path, index, strlen(index));
    CkptReader *r = NULL;
    rc = ckpt_reader_open(sh, NULL, 0, &r, err, sizeof err);
    CHECK(rc == 0, "ckpt: the hand-made sharded folder opens", "%s", err);
    ckpt_reader_close(r);
    // files to mutate: (folder, name, binary prefix to skip: 8 for a safetensors length)
    struct {
        const char *dir, *name;
        size_t from;
    } files[] = {{saved, "state.json", 0},
                 {saved, "model.safetensors", 8},
                 {saved, "optimizer.safetensors", 8},
                 {sh, "index.json", 0},
                 {sh, "rank-00000.safetensors", 8},
                 {sh, "rank-00001.safetensors", 8}};
    int nf = (int)(sizeof files / sizeof files[0]);
    int iters = 100 * scale;
    for (int f = 0; f < nf; f++) {
        snprintf(path, sizeof path, "%s/%s", files[f].dir, files[f].name);
        size_t len;
        char *orig = tl_read_file(path, &len);
        if (!orig) {
            CHECK(0, "ckpt: read a file to mutate", "%s", path);
            continue;
        }
        // a safetensors file: mutate inside its JSON header only (the data bytes are any floats)
        size_t hend = len;
        if (files[f].from == 8 && len >= 8) {
            uint64_t h = 0;
            for (int i = 0; i < 8; i++) h |= (uint64_t)(unsigned char)orig[i] << (8 * i);
            if (8 + h <= len) hend = 8 + (size_t)h;
        }
        for (int it = 0; it < iters; it++) {
            size_t n;
            char *m = mutate(orig, hend, files[f].from, &n);
            char *whole = malloc(n + (len - hend) + 1);
            memcpy(whole, m, n);
            memcpy(whole + n, orig + hend, len - hend);
            if (files[f].from == 8 && n >= 8 &&
                it % 2) { // keep the length field true to the mutated header
                uint64_t h = n - 8;
                for (int i = 0; i < 8; i++) whole[i] = (char)(h >> (8 * i));
            }
            tl_write_file(path, whole, n + (len - hend));
            read_folder(files[f].dir);
            free(m);
            free(whole);
        }
        tl_write_file(path, orig, len);
        free(orig);
    }
    // reached without a fault; and the restored folders read as before
    rc = ckpt_verify(saved, err, sizeof err);
    int rs = rc == CKPT_VERIFIED ? ckpt_reader_open(sh, NULL, 0, &r, err, sizeof err) : 2;
    ckpt_reader_close(rs ? NULL : r);
    CHECK(rc == CKPT_VERIFIED && rs == 0,
          "ckpt: mutants read without a fault; the restored folders read again", "%s", err);
    printf("# checkpoints: %d files x %d mutants\n", nf, iters);
}

static void fuzz_shards(void) {
    char path[PATH_MAX], err[1024];
    snprintf(path, sizeof path, "%s/tokens.bin", tmp);
    enum { N = 3000 };
    int32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (i * 7) % 256;
    int rc = data_write_token_file(path, tok, N, err, sizeof err);
    CHECK(rc == 0, "shards: a token file to mutate", "%s", err);
    size_t len;
    char *orig = tl_read_file(path, &len);
    if (!orig) return;
    int iters = 300 * scale, opened = 0;
    for (int it = 0; it < iters; it++) {
        char *m = malloc(len + 16);
        memcpy(m, orig, len);
        size_t n = len;
        int kind = (int)(next() % 3);
        if (kind == 0) { // a header field (magic, version, count) set to an extreme 32-bit value
            static const uint32_t X[] = {0,           1,           2,     3,     0x7fffffff,
                                         0x80000000u, 0xffffffffu, N + 1, N - 1, 20240520};
            uint32_t v = X[next() % (sizeof X / sizeof X[0])];
            memcpy(m + 4 * (next() % 3), &v, 4);
        } else if (kind == 1) {
            n = next() % (len + 1); // cut short
        } else {
            for (int k = 0; k < 4; k++) m[next() % len] ^= (char)(1 << (next() % 8));
        }
        tl_write_file(path, m, n);
        free(m);
        TokenSet set;
        if (tokenset_open_file(path, &set, err, sizeof err) == 0) {
            opened++;
            int32_t out[64];
            if (set.ntokens >= 64)
                tokenset_read(&set, set.ntokens - 64, 64, 256, out, err, sizeof err);
            tokenset_check_vocab(&set, 256, err, sizeof err);
            tokenset_close(&set);
        }
        TokenStream ts;
        memset(&ts, 0, sizeof ts);
        if (data_load(path, &ts, err, sizeof err) == 0) data_free(&ts);
    }
    tl_write_file(path, orig, len);
    free(orig);
    TokenSet set;
    rc = tokenset_open_file(path, &set, err, sizeof err);
    CHECK(rc == 0 && set.ntokens == N && opened < iters,
          "shards: mutants opened or refused without a fault; the restored "
          "file opens with its count",
          "rc %d, %d of %d mutants opened: %s", rc, opened, iters, err);
    if (!rc) tokenset_close(&set);
    printf("# shards: %d mutants, %d opened\n", iters, opened);
}

int main(void) {
    const char *s = getenv("BOOST_FUZZ_ITERS");
    if (s && atoi(s) > 0) scale = atoi(s);
    if (!mkdtemp(tmp)) {
        printf("FAIL - setup: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    fuzz_plans();
    fuzz_checkpoints();
    fuzz_shards();
    ckpt_remove_tree(tmp);
    TEST_EXIT();
}
