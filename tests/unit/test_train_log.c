/* test_train_log.c: the training log (runtime/log.c): the number/duration/byte formats of the
 * progress line, the JSON-lines fields (null for NaN, which JSON cannot spell), and a resumed run's
 * log dropping the steps after its checkpoint. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tests/unit/testlib.h"
#include "runtime/train.h"   // defines: TrainLog, StepReport, trainlog_*, format_*

static int read_file(const char *path, char *out, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t got = fread(out, 1, n - 1, f);
    out[got] = 0;
    fclose(f);
    return 0;
}

int main(void) {
    char b[64];
    format_count(999, b, sizeof b);     int ok = !strcmp(b, "999");
    format_count(3100, b, sizeof b);    ok &= !strcmp(b, "3.1k");
    format_count(2.5e6, b, sizeof b);   ok &= !strcmp(b, "2.5M");
    CHECK(ok, "format_count", "last: %s", b);
    format_duration(45, b, sizeof b);   ok = !strcmp(b, "45s");
    format_duration(62, b, sizeof b);   ok &= !strcmp(b, "1m02s");
    format_duration(7500, b, sizeof b); ok &= !strcmp(b, "2h05m");
    format_duration(NAN, b, sizeof b);  ok &= !strcmp(b, "?");
    CHECK(ok, "format_duration", "last: %s", b);
    format_bytes(512, b, sizeof b);             ok = !strcmp(b, "512 B");
    format_bytes(598016, b, sizeof b);          ok &= !strcmp(b, "584.0 KiB");
    format_bytes(1.5 * 1073741824.0, b, sizeof b); ok &= !strcmp(b, "1.50 GiB");
    CHECK(ok, "format_bytes", "last: %s", b);

    char dir[] = "/tmp/boost-test-log.XXXXXX", path[128], err[512], text[4096];
    if (!mkdtemp(dir)) { printf("FAIL - tmpdir: mkdtemp failed\n"); return 1; }
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    TrainLog lg;
    int rc = trainlog_open(&lg, path, -1, 4, 1, 1, err, sizeof err);
    trainlog_initial_val(&lg, 5.5);
    for (int s = 1; s <= 4; s++) {
        StepReport r = {s, 5.0 - s, s == 2 ? 4.25 : -1, 1e-3, 0.5, 1000, 0, 0, 0, 0, 0};
        if (s == 4) r.loss = NAN;
        trainlog_step(&lg, &r);
    }
    trainlog_close(&lg);
    read_file(path, text, sizeof text);
    CHECK(rc == 0 && strstr(text, "{\"step\":0,\"val_loss\":5.5}\n") &&
          strstr(text, "{\"step\":2,\"loss\":3,\"val_loss\":4.25,\"tokens_per_s\":1000,\"lr\":0.001,\"grad_norm\":0.5}\n") &&
          strstr(text, "{\"step\":4,\"loss\":null,"), "json_lines", "log:\n%s", text);

    // resumed at step 2: steps 3 and 4 are dropped, the rest kept, then new lines appended
    rc = trainlog_open(&lg, path, 2, 4, 1, 1, err, sizeof err);
    StepReport r = {3, 1.5, -1, 1e-3, 0.5, 1000, 0, 0, 0, 0, 0};
    trainlog_step(&lg, &r);
    trainlog_close(&lg);
    read_file(path, text, sizeof text);
    CHECK(rc == 0 && strstr(text, "\"step\":0,") && strstr(text, "\"step\":1,") && strstr(text, "\"step\":2,") &&
          strstr(text, "{\"step\":3,\"loss\":1.5,") && !strstr(text, "\"step\":4,") && !strstr(text, "\"loss\":2,"),
          "resume_trims_log", "log:\n%s", text);

    snprintf(path, sizeof path, "%s/missing/log.jsonl", dir);
    rc = trainlog_open(&lg, path, -1, 4, 1, 1, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "cannot open the log"), "log_unwritable", "rc %d: %s", rc, err);

    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    TEST_EXIT();
}
