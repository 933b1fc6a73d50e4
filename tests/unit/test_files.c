/* test_files.c: common/files.h's whole-file reader: contents byte for byte (across the buffer's
 * growth), the size cap at and one past its bound, empty files, /proc files whose size reads 0,
 * and the messages for a missing file and a folder; file_commit replacing a file whole or leaving
 * it as it was. */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include "common/files.h"
#include "tests/unit/testlib.h"

int main(void) {
    char dir[] = "/tmp/boost_files_XXXXXX", path[256], err[512];
    if (!mkdtemp(dir)) { printf("FAIL - tmpdir: cannot make one\n"); return 1; }
    snprintf(path, sizeof path, "%s/big.bin", dir);
    size_t n = 200000, len = 0;   /* three growths of the 64 KiB first buffer */
    unsigned char *want = malloc(n);
    for (size_t i = 0; i < n; i++) want[i] = (unsigned char)(i * 7919 % 251);
    FILE *f = fopen(path, "wb");
    fwrite(want, 1, n, f);
    fclose(f);

    char *got = file_read_all(path, n, &len, err, sizeof err);
    CHECK(got && len == n && !memcmp(got, want, n) && got[n] == 0, "whole_file_at_its_cap",
          "len %zu of %zu: %s", len, n, got ? "contents differ" : err);
    free(got);
    errno = 0;
    got = file_read_all(path, n - 1, &len, err, sizeof err);
    CHECK(!got && errno == EFBIG && strstr(err, "big.bin: larger than 199999 bytes"),
          "one_byte_past_the_cap_refused", "errno %d: %s", errno, err);
    free(got);

    snprintf(path, sizeof path, "%s/empty", dir);
    fclose(fopen(path, "wb"));
    len = 99;
    got = file_read_all(path, 16, &len, err, sizeof err);
    CHECK(got && len == 0 && got[0] == 0, "empty_file_is_an_empty_string", "%s", err);
    free(got);

    got = file_read_all("/proc/self/status", 1 << 20, &len, err, sizeof err);
    CHECK(got && len > 20 && strstr(got, "Name:") && strlen(got) == len,
          "proc_file_read_to_its_end", "len %zu: %s", len, got ? "no Name: line" : err);
    free(got);

    snprintf(path, sizeof path, "%s/none", dir);
    got = file_read_all(path, 16, NULL, err, sizeof err);
    CHECK(!got && errno == ENOENT && strstr(err, "none: cannot open: No such file"),
          "missing_file_named_with_reason", "errno %d: %s", errno, err);
    got = file_read_all(dir, 16, NULL, err, sizeof err);
    CHECK(!got && errno == EISDIR && strstr(err, ": cannot read: Is a directory"),
          "folder_named_with_reason", "errno %d: %s", errno, err);

    FILE *s = tmpfile();
    fputs("skipped|kept", s);
    fseek(s, 8, SEEK_SET);
    got = file_read_stream(s, "stream", 64, &len, err, sizeof err);
    CHECK(got && len == 4 && !strcmp(got, "kept"), "stream_read_from_where_it_stands", "%s",
          got ? got : err);
    free(got);
    fclose(s);

    char tmp[300];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    snprintf(tmp, sizeof tmp, "%s/out.txt.tmp", dir);
    FILE *w = fopen(path, "w"); fputs("old", w); fclose(w);
    w = fopen(tmp, "w"); fputs("new text", w);
    int rc = file_commit(w, tmp, path);
    got = file_read_all(path, 64, NULL, err, sizeof err);
    CHECK(rc == 0 && got && !strcmp(got, "new text") && access(tmp, F_OK) != 0,
          "commit_replaces_the_file_whole", "rc %d, %s", rc, got ? got : err);
    free(got);
    char nowhere[300];
    snprintf(nowhere, sizeof nowhere, "%s/no-such-folder/out.txt", dir);
    w = fopen(tmp, "w"); fputs("lost", w);
    rc = file_commit(w, tmp, nowhere);
    CHECK(rc == -1 && errno == ENOENT && access(tmp, F_OK) != 0,
          "failed_rename_removes_the_temporary", "rc %d errno %d", rc, errno);
    w = fopen("/dev/full", "w");
    if (w) {
        FILE *t = fopen(tmp, "w"); fclose(t);   /* stands for the temporary the writes went to */
        fputs("no room", w);
        rc = file_commit(w, tmp, path);
        int why = errno;
        got = file_read_all(path, 64, NULL, err, sizeof err);
        CHECK(rc == -1 && why == ENOSPC && got && !strcmp(got, "new text") &&
              access(tmp, F_OK) != 0, "failed_write_keeps_the_old_file", "rc %d errno %d: %s", rc,
               why, got ? got : err);
        free(got);
    } else printf("ok - failed_write_keeps_the_old_file # SKIP no /dev/full\n");
    unlink(path);

    snprintf(path, sizeof path, "%s/none", dir); unlink(path);
    snprintf(path, sizeof path, "%s/big.bin", dir); unlink(path);
    snprintf(path, sizeof path, "%s/empty", dir); unlink(path);
    rmdir(dir);
    free(want);
    TEST_EXIT();
}
