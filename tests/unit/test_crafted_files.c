/* test_crafted_files.c: crafted files that once corrupted memory or misled a run, each now a clear
 * error naming the file and the field (or the right result): plan.txt numbers that wrapped past the
 * bounds checks, safetensors headers with huge shapes and mistyped data_offsets, a sharded index
 * whose shape product wraps, state.json bit flips and unlisted files, a -o path near 1024 bytes,
 * FIFOs given as data or state.json, a token shard truncated under a reader, quoted plan strings.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/unit/testlib.h"
#include "runtime/plan.h"
#include "runtime/safetensors.h"
#include "runtime/checkpoint.h"
#include "runtime/data.h"
#include "common/checked.h"

static char tmp[] = "/tmp/boost-test-crafted.XXXXXX";
static char *plan_text; /* generated/tiny-cola/plan.txt */

/* The shipped plan with the first `find` after the first `after` (NULL: the start) replaced. */
static Plan *plan_with(const char *after, const char *find, const char *repl, char *err,
                       size_t errlen) {
    const char *from = after ? strstr(plan_text, after) : plan_text;
    const char *at = from ? strstr(from, find) : NULL;
    if (!at) {
        snprintf(err, errlen, "test: '%s' not in the plan", find);
        return NULL;
    }
    size_t head = (size_t)(at - plan_text), n = strlen(plan_text) + strlen(repl) + 1;
    char *text = malloc(n);
    memcpy(text, plan_text, head);
    strcpy(text + head, repl);
    strcat(text, at + strlen(find));
    return plan_parse_text("crafted/plan.txt", text, err, errlen);
}

/* Replace the digits after `key` on the first line starting with `line`. */
static Plan *plan_number(const char *line, const char *key, const char *value, char *err,
                         size_t errlen) {
    const char *l = strstr(plan_text, line), *k = l ? strstr(l, key) : NULL;
    if (!k) {
        snprintf(err, errlen, "test: no %s on a '%s' line", key, line);
        return NULL;
    }
    size_t klen = strlen(key), d = strspn(k + klen, "0123456789");
    char find[64], repl[96];
    snprintf(find, sizeof find, "%.*s", (int)(klen + d), k);
    snprintf(repl, sizeof repl, "%s%s", key, value);
    return plan_with(line, find, repl, err, errlen);
}

static void expect_refused(Plan *p, const char *err, const char *name, const char *field) {
    CHECK(!p && strstr(err, "crafted/plan.txt:") && strstr(err, field), name,
          "want an error naming crafted/plan.txt and "
          "'%s', got %s: %s",
          field, p ? "a loaded plan" : "error", err);
    plan_free(p);
}

static void test_plans(void) {
    char err[1024];
    Plan *p = plan_with(NULL, "boost-plan 1", "boost-plan 1", err, sizeof err);
    CHECK(p != NULL, "plan: the shipped plan loads unchanged", "%s", err);
    plan_free(p);
    // the two examples: sums that wrapped past the bounds checks in signed 64-bit
    expect_refused(plan_with("\npart ", "dst=0,0", "dst=0,9223372036854775806", err, sizeof err),
                   err, "plan: part dst=0,9223372036854775806 refused", "dst=");
    expect_refused(plan_number("\nbuffer ", "offset=", "9223372036854775296", err, sizeof err), err,
                   "plan: buffer offset=9223372036854775296 refused", "offset=");
    // in range as numbers, but the block or the buffer ends past its tensor or the arena
    expect_refused(plan_with("\npart ", "dst=0,0", "dst=0,1125899906842623", err, sizeof err), err,
                   "plan: part landing past its param refused", "outside the param");
    expect_refused(plan_number("\nbuffer ", "offset=", "1125899906842620", err, sizeof err), err,
                   "plan: buffer ending past the arena refused", "past the arena");
    expect_refused(plan_with("\nkernel ", " name=", " scale=3000000000 name=", err, sizeof err),
                   err, "plan: kernel integer constant past 2^31 refused", "2^31");
    // a float constant far past any integer: its integer view is taken without an overflowing cast
    p = plan_with("\nkernel ", " name=", " zscale=1e300 name=", err, sizeof err);
    CHECK(p != NULL, "plan: float constant 1e300 loads (no out-of-range conversion)", "%s", err);
    plan_free(p);
    // quoted strings: -D "data=a b.txt" is written quoted and read back whole
    p = plan_with(NULL, "data path=corpus", "data path=\"a b\\\"c\\\\d\\x41.txt\"", err,
                  sizeof err);
    CHECK(p && !strcmp(p->data_path, "a b\"c\\dA.txt"), "plan: quoted data path read back whole",
          "got %s", p ? p->data_path : err);
    plan_free(p);
    expect_refused(plan_with(NULL, "data path=corpus", "data path=\"a b", err, sizeof err), err,
                   "plan: unclosed quote refused", "quoted string");
    char longpath[700];
    memset(longpath, 'x', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = 0;
    char repl[720];
    snprintf(repl, sizeof repl, "data path=%s", longpath);
    expect_refused(plan_with(NULL, "data path=corpus", repl, err, sizeof err), err,
                   "plan: data path longer than the plan holds refused, not truncated", "path=");
}

/* A safetensors file of one header and 4 data bytes. */
static int st_header(const char *name, const char *header, char *err, size_t errlen) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    size_t h = strlen(header);
    unsigned char *b = calloc(1, 8 + h + 4);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    tl_write_file(path, b, 8 + h + 4);
    free(b);
    StFile f;
    int rc = st_open(path, &f, err, errlen);
    if (!rc) st_close(&f);
    return rc;
}

static void test_safetensors(void) {
    char err[1024];
    int rc = st_header("ok.safetensors",
                       "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1],\"data_offsets\":[0,4]}}", err,
                       sizeof err);
    CHECK(rc == 0, "safetensors: a well-formed file opens", "%s", err);
    rc = st_header(
        "wrap.safetensors",
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[562949953421313,32768],\"data_offsets\":[0,4]}}", err,
        sizeof err);
    CHECK(rc == 2 && strstr(err, "wrap.safetensors") && strstr(err, "2^50"),
          "safetensors: shape [2^49+1, 32768] refused", "rc %d: %s", rc, err);
    rc = st_header("strofs.safetensors",
                   "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",4]}}", err,
                   sizeof err);
    CHECK(rc == 2 && strstr(err, "data_offsets"), "safetensors: a string in data_offsets refused",
          "rc %d: %s", rc, err);
    rc = st_header("bigofs.safetensors",
                   "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1e30,1e30]}}", err,
                   sizeof err);
    CHECK(rc == 2 && strstr(err, "data_offsets"), "safetensors: data_offsets of 1e30 refused",
          "rc %d: %s", rc, err);
    rc = st_header("bigdim.safetensors",
                   "{\"w\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,4]}}", err,
                   sizeof err);
    CHECK(rc == 2 && strstr(err, "shape"), "safetensors: a shape item of 1e300 refused",
          "rc %d: %s", rc, err);
    rc = st_header("meta.safetensors",
                   "{\"__metadata__\":{\"a\":1},\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_"
                   "offsets\":[0,4]}}",
                   err, sizeof err);
    CHECK(rc == 2 && strstr(err, "__metadata__"), "safetensors: a number in __metadata__ refused",
          "rc %d: %s", rc, err);
}

static int fill_slice(void *ctx, int i, float *out) {
    (void)ctx;
    (void)i;
    for (int k = 0; k < 32768; k++) out[k] = (float)k;
    return 0;
}

/* The sharded index: shape [2^49+1, 32768] wraps its element count to 32768, which one
 * 1 x 32768 slice "covers". */
static void test_index_wrap(void) {
    char dir[PATH_MAX], path[PATH_MAX + 64], err[2048];
    snprintf(dir, sizeof dir, "%s/wrapidx", tmp);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/rank-00000.safetensors", dir);
    StEntry e = {"w[0:1,0:32768]", 1, 32768};
    int rc = st_write_f32(path, &e, 1, NULL, 0, fill_slice, NULL, err, sizeof err);
    const char *index =
        "{\"format\": \"boost-checkpoint-index\", \"tensors\": {\"w\": {\"kind\": \"param\", "
        "\"shape\": [562949953421313, 32768], \"slices\": [{\"file\": \"rank-00000.safetensors\", "
        "\"key\": \"w[0:1,0:32768]\", \"rows\": [0, 1], \"cols\": [0, 32768]}]}}}";
    snprintf(path, sizeof path, "%s/index.json", dir);
    tl_write_file(path, index, strlen(index));
    CkptReader *r = NULL;
    if (!rc) rc = ckpt_reader_open(dir, NULL, 0, &r, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "index.json") && strstr(err, "2^50"),
          "index: shape [2^49+1, 32768] refused", "rc %d: %s", rc, err);
    ckpt_reader_close(r);
}

static const StEntry canons[] = {{"a", 2, 3}, {"b", 1, 4}};

static int fill_canon(void *ctx, int slot, int canon, float *out) {
    (void)ctx;
    for (int k = 0; k < canons[canon].rows * canons[canon].cols; k++)
        out[k] = (float)(slot * 100 + canon * 10 + k);
    return 0;
}

static int save(const char *outdir, char *saved, size_t savedlen, char *err, size_t errlen) {
    CkptState st = {0};
    st.step = 1;
    st.fingerprint = ckpt_fingerprint(canons, 2);
    st.ncanons = 2;
    st.tp = 1;
    snprintf(st.model, sizeof st.model, "crafted");
    return ckpt_save(outdir, &st, canons, 2, fill_canon, NULL, saved, savedlen, err, errlen);
}

static void copy_folder(const char *from, const char *to) {
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", from, to);
    if (system(cmd) != 0) fprintf(stderr, "cp failed\n");
}

static void test_state(void) {
    char out[PATH_MAX], saved[PATH_MAX], err[4096], path[PATH_MAX + 64];
    snprintf(out, sizeof out, "%s/run", tmp);
    int rc = save(out, saved, sizeof saved, err, sizeof err);
    CHECK(rc == 0 && ckpt_verify(saved, err, sizeof err) == CKPT_VERIFIED,
          "state: a fresh folder verifies", "%s", err);
    // one bit of the step flipped ("step": 1 -> 3)
    char bad[PATH_MAX];
    snprintf(bad, sizeof bad, "%s/flip", tmp);
    copy_folder(saved, bad);
    snprintf(path, sizeof path, "%s/state.json", bad);
    char *text = tl_read_file(path, NULL);
    char *at = text ? strstr(text, "\"step\": 1,") : NULL;
    if (at) {
        at[8] ^= 2;
        tl_write_file(path, text, strlen(text));
    }
    free(text);
    rc = ckpt_verify(bad, err, sizeof err);
    CHECK(at && rc == CKPT_DAMAGED && strstr(err, "state.json") && strstr(err, "checksum"),
          "state: a one-bit flip of the step is damage", "rc %d: %s", rc, err);
    CkptState st;
    rc = ckpt_read_state(bad, &st, err, sizeof err);
    CHECK(rc == 2, "state: a reader of the flipped state.json refuses it", "rc %d", rc);
    if (!rc) ckpt_state_free(&st);
    // a file the "files" record does not list
    snprintf(bad, sizeof bad, "%s/extra", tmp);
    copy_folder(saved, bad);
    snprintf(path, sizeof path, "%s/index.json", bad);
    tl_write_file(path, "{}", 2);
    rc = ckpt_verify(bad, err, sizeof err);
    CHECK(rc == CKPT_DAMAGED && strstr(err, "index.json") && strstr(err, "not in state.json"),
          "state: a file missing from the record is damage", "rc %d: %s", rc, err);
    // the tensors against the model state.json describes (what ckpt merge checks)
    CkptReader *r = NULL;
    rc = ckpt_read_state(saved, &st, err, sizeof err) ||
         ckpt_reader_open(saved, NULL, 0, &r, err, sizeof err);
    if (!rc) {
        CHECK(ckpt_reader_check_model(r, &st, err, sizeof err) == 0,
              "model: the saved tensors match", "%s", err);
        StEntry other[] = {{"a", 3, 2}, {"b", 1, 4}}; // the same element counts, another shape
        st.fingerprint = ckpt_fingerprint(other, 2);
        rc = ckpt_reader_check_model(r, &st, err, sizeof err);
        CHECK(rc == 2 && strstr(err, "model.safetensors"), "model: another model's shapes refused",
              "rc %d: %s", rc, err);
        ckpt_state_free(&st);
    } else
        CHECK(0, "model: open", "%s", err);
    ckpt_reader_close(r);
    // the run's plan beside the step folders must load
    snprintf(bad, sizeof bad, "%s/planrun", tmp);
    rc = save(bad, saved, sizeof saved, err, sizeof err);
    snprintf(path, sizeof path, "%s/plan", bad);
    mkdir(path, 0777);
    snprintf(path, sizeof path, "%s/plan/plan.txt", bad);
    tl_write_file(path, "boost-plan 1\nrun tp=banana\n", 27);
    rc = rc ? rc : ckpt_verify(saved, err, sizeof err);
    CHECK(rc == CKPT_DAMAGED && strstr(err, "plan.txt"), "state: verify covers the run's plan",
          "rc %d: %s", rc, err);
}

/* A -o path near 1024 bytes is saved under its own name; one past PATH_MAX is refused. */
static void test_long_path(void) {
    char out[PATH_MAX + 600], saved[PATH_MAX + 64], err[8192], path[PATH_MAX + 128];
    snprintf(out, sizeof out, "%s", tmp);
    while (strlen(out) < 1030) {
        size_t n = strlen(out);
        snprintf(out + n, sizeof out - n, "/%.*s", 200,
                 "ddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
                 "ddddddddddddddddd"
                 "ddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
                 "ddddddddddddddddddd");
    }
    int rc = save(out, saved, sizeof saved, err, sizeof err);
    snprintf(path, sizeof path, "%s/step-000001/state.json", out);
    struct stat sb;
    char want[PATH_MAX + 64];
    snprintf(want, sizeof want, "%s/step-000001", out);
    CHECK(rc == 0 && stat(path, &sb) == 0 && !strcmp(saved, want),
          "path: a 1030-byte -o folder saves under its own name", "rc %d (%zu bytes): %s", rc,
          strlen(out), err);
    CHECK(rc == 0 && ckpt_verify(saved, err, sizeof err) == CKPT_VERIFIED, "path: and verifies",
          "%s", err);
    memset(out, 'e', PATH_MAX + 10);
    out[0] = '/';
    out[PATH_MAX + 10] = 0;
    rc = save(out, saved, sizeof saved, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "PATH_MAX"),
          "path: a folder past PATH_MAX is refused with a message", "rc %d: %s", rc, err);
}

static void on_alarm(int sig) {
    (void)sig;
    const char *m = "FAIL - fifo: an open blocked on a FIFO (10 s)\n";
    if (write(1, m, strlen(m)) < 0) _exit(1);
    _exit(1);
}

static void test_fifo(void) {
    char fifo[PATH_MAX], dir[PATH_MAX], path[PATH_MAX + 64], err[1024];
    snprintf(fifo, sizeof fifo, "%s/fifo", tmp);
    CHECK(mkfifo(fifo, 0600) == 0, "fifo: made", "%s", strerror(errno));
    signal(SIGALRM, on_alarm);
    alarm(10);
    TokenStream ts;
    memset(&ts, 0, sizeof ts);
    int rc = data_load(fifo, &ts, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "not a regular file"), "fifo: data from a FIFO refused at once",
          "rc %d: %s", rc, err);
    if (!rc) data_free(&ts);
    snprintf(dir, sizeof dir, "%s/fifockpt", tmp);
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/state.json", dir);
    mkfifo(path, 0600);
    CkptState st;
    rc = ckpt_read_state(dir, &st, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "not a regular file"), "fifo: a FIFO state.json refused at once",
          "rc %d: %s", rc, err);
    alarm(0);
}

/* A shard truncated while mapped: the reader dies with a message naming it, not a bare SIGBUS. */
static void test_truncated_shard(void) {
    char path[PATH_MAX], log[PATH_MAX], err[1024];
    snprintf(path, sizeof path, "%s/shard.bin", tmp);
    snprintf(log, sizeof log, "%s/sigbus.txt", tmp);
    enum { N = 200000 };
    int32_t *tok = malloc(N * sizeof *tok);
    for (int i = 0; i < N; i++) tok[i] = i % 200;
    int rc = data_write_token_file(path, tok, N, err, sizeof err);
    free(tok);
    CHECK(rc == 0, "shard: written", "%s", err);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        TokenSet set;
        if (tokenset_open_file(path, &set, err, sizeof err)) _exit(3);
        data_note_checkpoint("runs/x/step-000010");
        if (truncate(path, 12) != 0) _exit(4);
        int32_t out[64];
        tokenset_read(&set, N - 1000, 64, 256, out, err, sizeof err);
        _exit(0); // not reached when the pages are gone
    }
    int status = 0;
    waitpid(pid, &status, 0);
    char *text = tl_read_file(log, NULL);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1 && text && strstr(text, path) &&
              strstr(text, "runs/x/step-000010"),
          "shard: truncated under a reader: a message naming the file and the last checkpoint",
          "status %s %d: %s", WIFSIGNALED(status) ? "signal" : "exit",
          WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
          text ? text : "(no output)");
    free(text);
}

static void test_checked(void) {
    int64_t v = 0;
    int64_t wrap[2] = {((int64_t)1 << 49) + 1, 32768};
    CHECK(ck_numel(wrap, 2, &v) == -1, "checked: [2^49+1, 32768] does not fit", "got %lld",
          (long long)v);
    CHECK(ck_span(9223372036854775296LL, 4096, INT64_MAX) == -1,
          "checked: a span that wraps is outside", "accepted");
    CHECK(ck_whole(1e30, &v) == -1 && ck_whole(-1, &v) == -1 && ck_whole(0.5, &v) == -1 &&
              ck_whole(12, &v) == 0 && v == 12,
          "checked: whole numbers from doubles", "v %lld", (long long)v);
}

int main(void) {
    if (!mkdtemp(tmp)) {
        printf("FAIL - setup: mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    plan_text = tl_read_file("generated/tiny-cola/plan.txt", NULL);
    CHECK(plan_text != NULL, "setup: generated/tiny-cola/plan.txt",
          "cannot read it (run from the repository root)");
    test_checked();
    if (plan_text) test_plans();
    test_safetensors();
    test_index_wrap();
    test_state();
    test_long_path();
    test_fifo();
    test_truncated_shard();
    free(plan_text);
    ckpt_remove_tree(tmp);
    TEST_EXIT();
}
