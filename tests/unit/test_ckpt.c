/* test_ckpt.c: safetensors writer/reader round trip, the file read by Python's json and struct
 * modules (tests/sh/train_resume.sh adds torch on a real checkpoint), damaged files rejected,
 * checkpoint folders saved and read back, the fingerprint, and an atomic save under a simulated
 * full disk (RLIMIT_FSIZE with SIGXFSZ ignored) that leaves the earlier checkpoint byte-identical
 * and no temporary folder behind. CRC-32C against published check values (hardware and table
 * paths), verification catching two flipped bytes in tensor data, retention (--keep) and the
 * resolution of a run folder whose newest checkpoint is damaged. Sharded checkpoints: the slices a
 * synthetic tp=2 x dp=4 zero=1 plan assigns (each element once, by its holder), saved, verified and
 * read back whole and by region. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tests/unit/testlib.h"
#include "runtime/checkpoint.h"    // defines: CkptState, ckpt_*
#include "runtime/safetensors.h"   // defines: st_*, json_*
#include "common/crc32c.h"        // defines: crc32c_update, crc32c_update_table

static char dir[] = "/tmp/boost-test-ckpt.XXXXXX";

/* Value of element (r, c) of tensor i in slot s: a closed form the reader can check. */
static float value_at(int slot, int i, int64_t r, int64_t c) { return (float)(slot * 1000 + i * 100) + (float)r + 0.25f * (float)c; }

static const StEntry canons[] = {
    {"embed", 16, 8}, {"L0.attn_norm", 1, 8}, {"L0.q.A", 8, 3}, {"L0.q.B", 3, 8}, {"final_norm", 1, 8}, {"head", 8, 16},
};
#define NCANON (int)(sizeof canons / sizeof canons[0])

typedef struct { int offset; int fail_at; } FillCtx;

static int fill_closed_form(void *ctx, int slot, int i, float *out) {
    FillCtx *f = ctx;
    if (f && f->fail_at == i) return 1;
    for (int64_t r = 0; r < canons[i].rows; r++)
        for (int64_t c = 0; c < canons[i].cols; c++)
            out[r * canons[i].cols + c] = value_at(slot, i, r, c) + (f ? (float)f->offset : 0.f);
    return 0;
}

static int st_fill(void *ctx, int i, float *out) { return fill_closed_form(ctx, 0, i, out); }

static int file_bytes(const char *path, unsigned char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc(*len + 1);
    size_t got = fread(*out, 1, *len, f);
    fclose(f);
    return got == *len ? 0 : -1;
}

static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static void test_json(void) {
    char err[200];
    const char *text = "{\"a\": [1, 2.5e1, -3], \"b\": {\"c\": \"x\\n\\u00e9\\\"\"}, \"t\": true, \"n\": null}";
    Json *j = json_parse(text, strlen(text), err, sizeof err);
    const Json *a = json_get(j, "a"), *c = json_get(json_get(j, "b"), "c");
    CHECK(j && a && a->n == 3 && a->items[1].num == 25 && a->items[2].num == -3 && c && !strcmp(c->str, "x\n\xc3\xa9\"")
          && json_get(j, "t")->num == 1 && json_get(j, "n")->type == JSON_NULL, "json_parse", "%s", j ? "wrong values" : err);
    json_free(j);
    const char *bad[] = {"{\"a\": }", "{\"a\" 1}", "[1, 2", "{\"a\": 1} x", "\"abc", ""};
    int all = 1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Json *b = json_parse(bad[i], strlen(bad[i]), err, sizeof err);
        if (b || !strstr(err, "byte ")) { all = 0; printf("# accepted: %s\n", bad[i]); }
        json_free(b);
    }
    CHECK(all, "json_rejects_bad_text", "a malformed text was accepted");
}

static void test_safetensors(void) {
    char path[300], err[600];
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    const char *meta[] = {"format", "pt", "model", "tiny \"quoted\""};
    int rc = st_write_f32(path, canons, NCANON, meta, 2, st_fill, NULL, err, sizeof err);
    CHECK(rc == 0, "safetensors_write", "rc %d: %s", rc, err);

    unsigned char *bytes; size_t len;
    file_bytes(path, &bytes, &len);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)bytes[i] << (8 * i);
    size_t data = 0;
    for (int i = 0; i < NCANON; i++) data += (size_t)(canons[i].rows * canons[i].cols * 4);
    CHECK(hlen % 8 == 0 && 8 + hlen + data == len && bytes[8] == '{', "safetensors_layout",
          "header %llu bytes, file %zu, data %zu", (unsigned long long)hlen, len, data);

    StFile f;
    rc = st_open(path, &f, err, sizeof err);
    int exact = rc == 0 && f.ntensors == NCANON;
    for (int i = 0; exact && i < NCANON; i++) {
        const StTensor *t = st_find(&f, canons[i].name);
        if (!t || strcmp(t->dtype, "F32") || t->ndim != 2 || t->shape[0] != canons[i].rows || t->shape[1] != canons[i].cols) { exact = 0; break; }
        float *v = malloc((size_t)st_numel(t) * sizeof(float));
        st_read_f32(&f, t, v);
        for (int64_t r = 0; r < canons[i].rows; r++)
            for (int64_t c = 0; c < canons[i].cols; c++)
                if (v[r * canons[i].cols + c] != value_at(0, i, r, c)) exact = 0;
        free(v);
    }
    CHECK(exact, "safetensors_round_trip", "rc %d (%s)", rc, err);
    CHECK(rc == 0 && st_meta(&f, "model") && !strcmp(st_meta(&f, "model"), "tiny \"quoted\""), "safetensors_metadata",
          "model metadata %s", rc == 0 && st_meta(&f, "model") ? st_meta(&f, "model") : "(none)");
    st_close(&f);

    // Python reads it: the json module for the header, struct for the values.
    if (system("command -v python3 >/dev/null 2>&1") == 0) {
        double expect = 0;
        for (int i = 0; i < NCANON; i++)
            for (int64_t r = 0; r < canons[i].rows; r++)
                for (int64_t c = 0; c < canons[i].cols; c++) expect += value_at(0, i, r, c);
        char script[300], cmd[1200];
        snprintf(script, sizeof script, "%s/check.py", dir);
        const char *py =
            "import json, struct, sys\n"
            "raw = open(sys.argv[1], 'rb').read()\n"
            "n = struct.unpack('<Q', raw[:8])[0]\n"
            "h = json.loads(raw[8:8 + n])\n"
            "data = raw[8 + n:]\n"
            "assert h['__metadata__']['format'] == 'pt'\n"
            "total = 0.0\n"
            "for name, t in h.items():\n"
            "    if name == '__metadata__': continue\n"
            "    assert t['dtype'] == 'F32', name\n"
            "    b, e = t['data_offsets']\n"
            "    count = 1\n"
            "    for s in t['shape']: count *= s\n"
            "    assert e - b == 4 * count, name\n"
            "    total += sum(struct.unpack('<%df' % count, data[b:e]))\n"
            "assert abs(total - float(sys.argv[2])) < 1e-3 * abs(float(sys.argv[2])), (total, sys.argv[2])\n"
            "print('python: header and values of %d tensors read' % sum(1 for k in h if k != '__metadata__'))\n";
        write_bytes(script, py, strlen(py));
        snprintf(cmd, sizeof cmd, "python3 '%s' '%s' %.17g > '%s/py.out' 2>&1", script, path, expect, dir);
        rc = system(cmd);
        char out[300] = "", outpath[300];
        snprintf(outpath, sizeof outpath, "%s/py.out", dir);
        FILE *o = fopen(outpath, "r");
        if (o) { size_t n = fread(out, 1, sizeof out - 1, o); out[n] = 0; fclose(o); }
        CHECK(rc == 0, "safetensors_python_reads", "python3 failed: %s", out);
        printf("# %s", out);
    } else {
        printf("ok - safetensors_python_reads # SKIP no python3\n");
    }

    // damaged files: truncated data, truncated header, not a safetensors file, bad offsets
    char bad[300];
    snprintf(bad, sizeof bad, "%s/cut.safetensors", dir);
    write_bytes(bad, bytes, len - 10);
    rc = st_open(bad, &f, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "truncated") && strstr(err, bad), "safetensors_truncated_data", "rc %d: %s", rc, err);
    write_bytes(bad, bytes, 100);
    rc = st_open(bad, &f, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "truncated"), "safetensors_truncated_header", "rc %d: %s", rc, err);
    write_bytes(bad, "hello, this is text and not tensors at all", 42);
    rc = st_open(bad, &f, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "not a safetensors file"), "safetensors_not_one", "rc %d: %s", rc, err);
    write_bytes(bad, "", 0);
    rc = st_open(bad, &f, err, sizeof err);
    CHECK(rc == 2, "safetensors_empty_file", "rc %d: %s", rc, err);
    const char *hdr = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}    ";
    unsigned char buf[128] = {0};
    buf[0] = (unsigned char)strlen(hdr);
    memcpy(buf + 8, hdr, strlen(hdr));
    write_bytes(bad, buf, 8 + strlen(hdr) + 16);
    rc = st_open(bad, &f, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "'x'"), "safetensors_offsets_disagree_with_shape", "rc %d: %s", rc, err);
    free(bytes);
}

static void test_fingerprint(void) {
    StEntry shuffled[NCANON], changed[NCANON];
    for (int i = 0; i < NCANON; i++) { shuffled[i] = canons[NCANON - 1 - i]; changed[i] = canons[i]; }
    changed[2].cols = 4;
    uint64_t a = ckpt_fingerprint(canons, NCANON);
    CHECK(a == ckpt_fingerprint(shuffled, NCANON), "fingerprint_ignores_order", "differs by order");
    CHECK(a != ckpt_fingerprint(changed, NCANON), "fingerprint_sees_shapes", "same for another shape");
    CHECK(a != ckpt_fingerprint(canons, NCANON - 1), "fingerprint_sees_names", "same without one canon");
}

static int same_file(const char *a, const char *b) {
    unsigned char *x, *y; size_t nx, ny;
    if (file_bytes(a, &x, &nx) || file_bytes(b, &y, &ny)) return 0;
    int same = nx == ny && !memcmp(x, y, nx);
    free(x); free(y);
    return same;
}

static int count_hidden(const char *outdir) {
    DIR *d = opendir(outdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static CkptState make_state(int64_t step) {
    static float losses[] = {5.5f, 5.25f, 4.125f, 3.0625f, 2.5f, 2.25f};
    static float vl[] = {5.0f, 2.75f};
    static int64_t vs[] = {0, 6};
    CkptState st = {0};
    st.step = step;
    st.data_position = step * 2;
    st.seed = 0xdeadbeefcafef00dULL;
    snprintf(st.model, sizeof st.model, "tiny-test");
    snprintf(st.run, sizeof st.run, "tiny-test-run");
    snprintf(st.layout, sizeof st.layout, "btp");
    snprintf(st.backend, sizeof st.backend, "cpu");
    st.fingerprint = ckpt_fingerprint(canons, NCANON);
    st.ncanons = NCANON;
    st.tp = 2;
    st.losses = losses; st.nlosses = (int)step;
    st.val_losses = vl; st.val_steps = vs; st.nval = 2;
    return st;
}

static void test_checkpoint_folder(void) {
    char outdir[300], saved[1200], err[4096], resolved[1200];
    snprintf(outdir, sizeof outdir, "%s/run/out", dir);
    CkptState st = make_state(6);
    int rc = ckpt_save(outdir, &st, canons, NCANON, fill_closed_form, NULL, saved, sizeof saved, err, sizeof err);
    char expect[400];
    snprintf(expect, sizeof expect, "%s/step-000006", outdir);
    CHECK(rc == 0 && !strcmp(saved, expect), "ckpt_save", "rc %d: %s (%s)", rc, err, saved);
    CHECK(count_hidden(outdir) == 0, "ckpt_save_leaves_no_temporary", "%d hidden entries", count_hidden(outdir));

    CkptState back;
    rc = ckpt_read_state(saved, &back, err, sizeof err);
    CHECK(rc == 0 && back.step == 6 && back.data_position == 12 && back.seed == st.seed && back.tp == 2 &&
          back.fingerprint == st.fingerprint && back.ncanons == NCANON && !strcmp(back.model, "tiny-test") &&
          back.nlosses == 6 && back.losses[3] == 3.0625f && back.nval == 2 && back.val_steps[1] == 6 && back.val_losses[1] == 2.75f,
          "ckpt_state_round_trip", "rc %d: %s", rc, err);
    ckpt_state_free(&back);

    StFile model, optim;
    rc = ckpt_open_tensors(saved, canons, NCANON, &model, &optim, err, sizeof err);
    int exact = rc == 0;
    for (int i = 0; exact && i < NCANON; i++) {
        const char *prefix[3] = {"", "m.", "v."};
        for (int slot = 0; slot < 3; slot++) {
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefix[slot], canons[i].name);
            const StTensor *t = st_find(slot ? &optim : &model, name);
            float *v = malloc((size_t)st_numel(t) * sizeof(float));
            st_read_f32(slot ? &optim : &model, t, v);
            for (int64_t r = 0; r < canons[i].rows; r++)
                for (int64_t c = 0; c < canons[i].cols; c++)
                    if (v[r * canons[i].cols + c] != value_at(slot, i, r, c)) exact = 0;
            free(v);
        }
    }
    CHECK(exact, "ckpt_tensors_round_trip", "rc %d: %s", rc, err);
    if (rc == 0) { st_close(&model); st_close(&optim); }

    // another model's canons are refused with the tensor's name
    StEntry other[NCANON];
    memcpy(other, canons, sizeof other);
    other[2].cols = 5;
    rc = ckpt_open_tensors(saved, other, NCANON, &model, &optim, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "L0.q.A") && strstr(err, "another model"), "ckpt_other_model_refused", "rc %d: %s", rc, err);

    // a second save and resolution of the run folder to its newest step
    CkptState st8 = make_state(6);
    st8.step = 8;
    rc = ckpt_save(outdir, &st8, canons, NCANON, fill_closed_form, NULL, saved, sizeof saved, err, sizeof err);
    rc |= ckpt_resolve(outdir, resolved, sizeof resolved, NULL, 0, err, sizeof err);
    snprintf(expect, sizeof expect, "%s/step-000008", outdir);
    CHECK(rc == 0 && !strcmp(resolved, expect), "ckpt_resolve_newest", "rc %d: %s -> %s", rc, err, resolved);
    rc = ckpt_resolve(dir, resolved, sizeof resolved, NULL, 0, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "not a checkpoint"), "ckpt_resolve_not_a_checkpoint", "rc %d: %s", rc, err);

    // a failing tensor read (fill error) aborts the save and removes the temporary folder
    FillCtx failing = {0, 3};
    CkptState st10 = make_state(6);
    st10.step = 10;
    rc = ckpt_save(outdir, &st10, canons, NCANON, fill_closed_form, &failing, saved, sizeof saved, err, sizeof err);
    struct stat sb;
    CHECK(rc == 1 && strstr(err, "not written") && stat(saved, &sb) != 0 && count_hidden(outdir) == 0,
          "ckpt_fill_failure_cleans_up", "rc %d: %s", rc, err);

    // a damaged state.json is a clear error
    char sp[1300];
    snprintf(sp, sizeof sp, "%s/step-000008/state.json", outdir);
    write_bytes(sp, "{\"format\": \"boost-checkpoint\", \"vers", 36);
    snprintf(sp, sizeof sp, "%s/step-000008", outdir);
    rc = ckpt_read_state(sp, &back, err, sizeof err);
    CHECK(rc == 2 && strstr(err, "state.json") && strstr(err, "truncated"), "ckpt_damaged_state_refused", "rc %d: %s", rc, err);
}

/* Save under a file-size limit far below the checkpoint's size (a full disk as write() sees it:
 * EFBIG with SIGXFSZ ignored), in a child process, over an existing checkpoint of the same step
 * and as a new step. */
static void test_full_disk(void) {
    char outdir[300], saved[1200], err[4096], keep[400], cmd[2000];
    snprintf(outdir, sizeof outdir, "%s/full/out", dir);
    CkptState st = make_state(6);
    int rc = ckpt_save(outdir, &st, canons, NCANON, fill_closed_form, NULL, saved, sizeof saved, err, sizeof err);
    snprintf(keep, sizeof keep, "%s/full/copy", dir);
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", saved, keep);
    if (rc != 0 || system(cmd) != 0) { CHECK(0, "full_disk_setup", "rc %d: %s", rc, err); return; }

    for (int replace = 1; replace >= 0; replace--) {
        int pipefd[2];
        if (pipe(pipefd) != 0) { CHECK(0, "full_disk_pipe", "pipe failed"); return; }
        pid_t pid = fork();
        if (pid == 0) {
            close(pipefd[0]);
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit lim = {600, 600};   // bytes: the model file alone is larger
            setrlimit(RLIMIT_FSIZE, &lim);
            CkptState s = make_state(6);
            if (!replace) s.step = 7;
            FillCtx other = {1000, -1};    // different values, so a half-replaced file would show
            char e[4096], out[1200];
            int r = ckpt_save(outdir, &s, canons, NCANON, fill_closed_form, &other, out, sizeof out, e, sizeof e);
            if (write(pipefd[1], e, strlen(e) + 1) < 0) _exit(3);
            _exit(r);
        }
        close(pipefd[1]);
        char msg[4096] = "";
        ssize_t got = read(pipefd[0], msg, sizeof msg - 1);
        if (got > 0) msg[got] = 0;
        close(pipefd[0]);
        int status;
        waitpid(pid, &status, 0);
        int child_rc = WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
        const char *name = replace ? "full_disk_same_step_keeps_old" : "full_disk_new_step_fails_cleanly";
        char a[1300], b[1300];
        int intact = 1;
        const char *files[] = {"model.safetensors", "optimizer.safetensors", "state.json"};
        for (int i = 0; i < 3; i++) {
            snprintf(a, sizeof a, "%s/%s", saved, files[i]);
            snprintf(b, sizeof b, "%s/%s", keep, files[i]);
            if (!same_file(a, b)) intact = 0;
        }
        char step7[1200];
        ckpt_step_dir(outdir, 7, step7, sizeof step7);
        struct stat sb;
        CHECK(child_rc == 1 && strstr(msg, "File too large") && strstr(msg, "untouched") && intact &&
              count_hidden(outdir) == 0 && stat(step7, &sb) != 0,
              name, "child rc %d, intact %d, %d hidden entries, message: %s", child_rc, intact, count_hidden(outdir), msg);
    }
}

/* A save killed part way leaves a temporary folder, or a previous checkpoint moved aside; the next
 * save (another process) removes the first and puts the second back. */
static void test_stale_leftovers(void) {
    char outdir[300], p[700], saved[1200], err[4096];
    snprintf(outdir, sizeof outdir, "%s/stale", dir);
    mkdir(outdir, 0777);
    int dead = 4000000;
    while (kill(dead, 0) == 0 || errno != ESRCH) dead++;
    snprintf(p, sizeof p, "%s/.step-000005.tmp-%d", outdir, dead);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/.step-000005.tmp-%d/model.safetensors", outdir, dead);
    write_bytes(p, "partial", 7);
    snprintf(p, sizeof p, "%s/.step-000004.old-%d", outdir, dead);
    mkdir(p, 0777);
    snprintf(p, sizeof p, "%s/.step-000004.old-%d/state.json", outdir, dead);
    write_bytes(p, "{}", 2);
    CkptState st = make_state(6);
    int rc = ckpt_save(outdir, &st, canons, NCANON, fill_closed_form, NULL, saved, sizeof saved, err, sizeof err);
    snprintf(p, sizeof p, "%s/step-000004/state.json", outdir);
    struct stat sb;
    CHECK(rc == 0 && count_hidden(outdir) == 0 && stat(p, &sb) == 0, "ckpt_stale_leftovers_cleaned",
          "rc %d, %d hidden entries left, step-000004 restored: %d", rc, count_hidden(outdir), stat(p, &sb) == 0);
}

/* CRC-32C check values: "123456789" (the catalogue's check value) and the iSCSI test patterns of
 * RFC 3720 B.4 (32 bytes of 0x00, of 0xFF, ascending 0..31). */
static void test_crc32c(void) {
    unsigned char zeros[32] = {0}, ones[32], up[32];
    for (int i = 0; i < 32; i++) { ones[i] = 0xff; up[i] = (unsigned char)i; }
    struct { const void *p; size_t n; uint32_t want; const char *what; } cases[] = {
        {"123456789", 9, 0xE3069283u, "123456789"}, {"", 0, 0, "empty"}, {zeros, 32, 0x8A9136AAu, "32 x 0x00"},
        {ones, 32, 0x62A8AB43u, "32 x 0xFF"}, {up, 32, 0x46DD794Eu, "0..31"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t hw = crc32c_update(0, cases[i].p, cases[i].n), tab = crc32c_update_table(0, cases[i].p, cases[i].n);
        CHECK(hw == cases[i].want && tab == cases[i].want, "crc32c_check_value", "%s: 0x%08x (table 0x%08x), expected 0x%08x",
              cases[i].what, (unsigned)hw, (unsigned)tab, (unsigned)cases[i].want);
    }
    // both paths agree at every length and alignment, and pieces chain to the whole
    unsigned char buf[300];
    uint32_t x = 12345;
    for (int i = 0; i < 300; i++) { x = x * 1103515245u + 12345u; buf[i] = (unsigned char)(x >> 16); }
    int same = 1, chained = 1;
    for (int off = 0; off < 8; off++)
        for (int len = 0; len + off <= 300; len += 7)
            if (crc32c_update(0, buf + off, (size_t)len) != crc32c_update_table(0, buf + off, (size_t)len)) same = 0;
    uint32_t whole = crc32c_update(0, buf, 300);
    for (int cut = 0; cut <= 300; cut += 13)
        if (crc32c_update(crc32c_update(0, buf, (size_t)cut), buf + cut, (size_t)(300 - cut)) != whole) chained = 0;
    CHECK(same, "crc32c_hardware_equals_table", "the paths differ (hardware path in use: %d)", crc32c_hardware());
    CHECK(chained, "crc32c_pieces_chain", "a split CRC differs from the whole");
    printf("# crc32c: %s\n", crc32c_hardware() ? "SSE4.2 crc32 instruction" : "slice-by-8 table");
}

/* Flip two bytes of a safetensors file inside its tensor data (past the 8-byte length and header). */
static void flip_in_data(const char *path, size_t into_data) {
    unsigned char *b; size_t n;
    if (file_bytes(path, &b, &n)) return;
    uint64_t h = 0;
    for (int i = 0; i < 8; i++) h |= (uint64_t)b[i] << (8 * i);
    size_t at = 8 + (size_t)h + into_data;
    if (at + 1 < n) { b[at] ^= 0x40; b[at + 1] ^= 0x01; }
    write_bytes(path, b, n);
    free(b);
}

static int exists(const char *outdir, int64_t step) {
    char p[1200];
    struct stat sb;
    ckpt_step_dir(outdir, step, p, sizeof p);
    return stat(p, &sb) == 0;
}

static void test_verify_and_retention(void) {
    char outdir[300], saved[1200], err[4096], p[1400], got[1600], notes[4096];
    snprintf(outdir, sizeof outdir, "%s/ver", dir);
    int rc = 0;
    for (int s = 10; s <= 50 && !rc; s += 10) {
        CkptState st = make_state(6);
        st.step = s;
        rc = ckpt_save(outdir, &st, canons, NCANON, fill_closed_form, NULL, saved, sizeof saved, err, sizeof err);
    }
    CHECK(rc == 0, "verify_setup", "%s", err);
    CkptState back;
    rc = ckpt_read_state(saved, &back, err, sizeof err);
    int recorded = rc == 0 && back.nfiles == 2 && !strcmp(back.files[0].name, "model.safetensors") &&
                   !strcmp(back.files[1].name, "optimizer.safetensors");
    // the record against a CRC computed here over the file's bytes
    if (recorded) {
        unsigned char *b; size_t n;
        snprintf(p, sizeof p, "%s/model.safetensors", saved);
        recorded = file_bytes(p, &b, &n) == 0 && (int64_t)n == back.files[0].bytes && crc32c_update_table(0, b, n) == back.files[0].crc32c;
        if (recorded) free(b);
    }
    CHECK(recorded, "state_json_records_file_checksums", "rc %d: %s, %d files", rc, err, back.nfiles);
    if (rc == 0) ckpt_state_free(&back);
    rc = ckpt_verify(saved, err, sizeof err);
    CHECK(rc == CKPT_VERIFIED, "verify_good_checkpoint", "rc %d: %s", rc, err);

    // two bytes flipped inside step 50's tensor data: named, with the newest earlier one that verifies
    snprintf(p, sizeof p, "%s/model.safetensors", saved);
    flip_in_data(p, 100);
    rc = ckpt_verify_advise(saved, err, sizeof err);
    char want[1300];
    ckpt_step_dir(outdir, 40, want, sizeof want);
    CHECK(rc == CKPT_DAMAGED && strstr(err, p) && strstr(err, "checksum mismatch") && strstr(err, want),
          "verify_flipped_bytes_named", "rc %d: %s", rc, err);
    // a run folder resolves to the newest that verifies, and says which it passed over
    rc = ckpt_resolve(outdir, got, sizeof got, notes, sizeof notes, err, sizeof err);
    CHECK(rc == 0 && !strcmp(got, want) && strstr(notes, saved) && strstr(notes, "checksum mismatch"),
          "resolve_passes_over_damaged_newest", "rc %d: %s -> %s; notes: %s", rc, err, got, notes);
    // step 40 cut short: a size mismatch; the advice then goes back to step 30
    ckpt_step_dir(outdir, 40, p, sizeof p);
    snprintf(got, sizeof got, "%s/optimizer.safetensors", p);
    unsigned char *b; size_t n;
    if (file_bytes(got, &b, &n) == 0) { write_bytes(got, b, n - 4); free(b); }
    rc = ckpt_verify_advise(p, err, sizeof err);
    ckpt_step_dir(outdir, 30, want, sizeof want);
    CHECK(rc == CKPT_DAMAGED && strstr(err, "optimizer.safetensors") && strstr(err, "truncated") && strstr(err, want),
          "verify_truncated_file_named", "rc %d: %s", rc, err);
    // a state.json without the record (an older checkpoint): unchecked, not damaged
    ckpt_step_dir(outdir, 20, p, sizeof p);
    snprintf(got, sizeof got, "%s/state.json", p);
    if (file_bytes(got, &b, &n) == 0) {
        char *f = strstr((char *)b, ",\n  \"files\"");
        if (f) { strcpy(f, "\n}\n"); write_bytes(got, b, strlen((char *)b)); }
        free(b);
    }
    rc = ckpt_verify(p, err, sizeof err);
    CHECK(rc == CKPT_UNCHECKED && strstr(err, "no \"files\" record"), "verify_without_record_is_unchecked", "rc %d: %s", rc, err);

    // retention: keep 2 after saving step 60; step 40 is incomplete (cut short) and left alone
    CkptState st = make_state(6);
    st.step = 60;
    rc = ckpt_save(outdir, &st, canons, NCANON, fill_closed_form, NULL, saved, sizeof saved, err, sizeof err);
    char removed[1000];
    int nrem = ckpt_prune(outdir, 2, 60, -1, removed, sizeof removed);
    CHECK(rc == 0 && nrem == 3 && exists(outdir, 60) && exists(outdir, 50) && exists(outdir, 40) && !exists(outdir, 30) &&
          !exists(outdir, 20) && !exists(outdir, 10) && count_hidden(outdir) == 0,
          "prune_keeps_newest_complete", "removed %d (%s); 60:%d 50:%d 40:%d 30:%d 20:%d 10:%d", nrem, removed, exists(outdir, 60),
          exists(outdir, 50), exists(outdir, 40), exists(outdir, 30), exists(outdir, 20), exists(outdir, 10));
    // keep 1 with a protected (last good) step: both stay
    st.step = 70;
    rc = ckpt_save(outdir, &st, canons, NCANON, fill_closed_form, NULL, saved, sizeof saved, err, sizeof err);
    nrem = ckpt_prune(outdir, 1, 70, 50, removed, sizeof removed);
    CHECK(rc == 0 && nrem == 1 && exists(outdir, 70) && exists(outdir, 50) && !exists(outdir, 60),
          "prune_keeps_protected", "removed %d (%s)", nrem, removed);
}

/* ---- sharded checkpoints ----
 * A synthetic plan: one local param of 6x5 per rank at tp=2, dp=4, zero=1: cols 0..1 hold canon A's
 * (6x4) tp block (cols 2t..2t+1), cols 2..4 canon B (6x3), which every tp rank holds (rep=1). Its 30
 * elements split into dp shards of 8 (0-7, 8-15, 16-23, 24-29) that end mid-row: the moments' slices
 * are partial rows. Every element of every tensor must be in exactly one slice, written by the rank
 * that holds it (rep blocks: tp rank 0; zero=1 parameters and moments: the shard's dp rank). */
static void make_plan(Plan *p, PlanCanon *pc, PlanParam *pp, PlanPart *pt) {
    memset(p, 0, sizeof *p);
    p->tp = 2; p->dp = 4; p->pp = 1; p->zero = 1;
    snprintf(pc[0].name, sizeof pc[0].name, "A"); pc[0].rows = 6; pc[0].cols = 4;
    snprintf(pc[1].name, sizeof pc[1].name, "B"); pc[1].rows = 6; pc[1].cols = 3;
    snprintf(pp[0].name, sizeof pp[0].name, "w"); pp[0].rows = 6; pp[0].cols = 5; pp[0].first_part = 0; pp[0].nparts = 2;
    pt[0] = (PlanPart){0, {0, 0}, {6, 0}, {0, 2}, {2, 2}, {0, 0}, {0, 0}, 0, -1};
    pt[1] = (PlanPart){1, {0, 0}, {6, 0}, {0, 0}, {3, 0}, {0, 0}, {2, 0}, 1, -1};
    p->canons = pc; p->ncanons = 2; p->params = pp; p->nparams = 1; p->parts = pt; p->nparts = 2;
}

static const StEntry shard_canons[] = {{"A", 6, 4}, {"B", 6, 3}};

static int fill_slice_closed(void *ctx, const CkptSlice *s, float *out) {
    (void)ctx;
    for (int64_t i = s->r0; i < s->r1; i++)
        for (int64_t j = s->c0; j < s->c1; j++)
            out[(i - s->r0) * (s->c1 - s->c0) + (j - s->c0)] = value_at(s->slot, s->canon, i, j);
    return 0;
}

static void test_sharded(void) {
    Plan p;
    PlanCanon pc[2];
    PlanParam pp[1];
    PlanPart pt[2];
    memset(pc, 0, sizeof pc); memset(pp, 0, sizeof pp);
    make_plan(&p, pc, pp, pt);
    CkptSlice *sl;
    int n = ckpt_plan_slices(&p, &sl);
    int seen[3][2][6][4];
    memset(seen, 0, sizeof seen);
    int wrong_owner = 0, partial_rows = 0;
    for (int k = 0; k < n; k++) {
        const CkptSlice *s = &sl[k];
        int t = s->rank % 2, d = s->rank / 2;
        if (s->canon == 1 && t != 0) wrong_owner++;
        if (s->c1 - s->c0 < shard_canons[s->canon].cols && s->canon == 1) partial_rows++;
        for (int64_t i = s->r0; i < s->r1; i++)
            for (int64_t j = s->c0; j < s->c1; j++) {
                seen[s->slot][s->canon][i][j]++;
                int64_t flat = (s->lr + i - s->r0) * 5 + s->lc + (j - s->c0), lo, hi;
                zero_shard(30, d, 4, &lo, &hi);
                if (flat < lo || flat >= hi) wrong_owner++;   // zero=1: parameters too (CUDA shards the masters)
            }
    }
    int bad_cover = 0;
    for (int slot = 0; slot < 3; slot++)
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < shard_canons[c].cols; j++) bad_cover += seen[slot][c][i][j] != 1;
    CHECK(n > 0 && bad_cover == 0, "plan_slices_cover_every_element_once", "%d slices, %d elements not covered exactly once", n, bad_cover);
    CHECK(n > 0 && wrong_owner == 0, "plan_slices_written_by_their_holder", "%d elements written by a rank that does not hold them", wrong_owner);
    CHECK(partial_rows > 0, "plan_slices_zero_shards_cut_rows", "no partial-row moment slice: the test plan does not exercise the cut");

    // save the slices as a sharded folder, read them back whole and by region
    char outdir[300], saved[1200], err[4096];
    snprintf(outdir, sizeof outdir, "%s/sharded", dir);
    CkptState st = {0};
    st.step = 7; st.seed = 1; st.ncanons = 2; st.tp = 2;
    snprintf(st.model, sizeof st.model, "synthetic");
    st.fingerprint = ckpt_fingerprint(shard_canons, 2);
    int64_t bytes[8] = {0};
    CkptShards sh = {sl, n, 8, 0, 8, 1, 0, 4, 2, 1, fill_slice_closed, NULL, NULL, bytes, 1};
    int rc = ckpt_save_sharded(outdir, &st, shard_canons, 2, &sh, saved, sizeof saved, err, sizeof err);
    int files = 0;
    for (int g = 0; g < 8; g++) files += bytes[g] > 0;
    CHECK(rc == 0 && files == 8 && ckpt_verify(saved, err, sizeof err) == CKPT_VERIFIED, "sharded_save_verifies",
          "rc %d, %d rank files: %s", rc, files, err);
    CkptReader *r = NULL;
    rc = rc ? rc : ckpt_reader_open(saved, shard_canons, 2, &r, err, sizeof err);
    int bad = rc != 0;
    float buf[24];
    for (int slot = 0; !rc && slot < 3; slot++)
        for (int c = 0; c < 2; c++) {
            int i = ckpt_reader_find(r, shard_canons[c].name, slot);
            if (ckpt_reader_read(r, i, NULL, 0, buf, err, sizeof err)) { bad++; continue; }
            for (int64_t a = 0; a < 6; a++)
                for (int64_t b = 0; b < shard_canons[c].cols; b++) bad += buf[a * shard_canons[c].cols + b] != value_at(slot, c, a, b);
        }
    CHECK(!bad, "sharded_read_back_whole", "%d wrong elements: %s", bad, err);
    bad = rc != 0;
    if (!rc) {   // a region: rows 1..3, cols 1..2 of m.A; everything else keeps the sentinel
        for (int k = 0; k < 24; k++) buf[k] = -1;
        CkptRegion need = {1, 4, 1, 3};
        int64_t before = ckpt_reader_bytes_read(r);
        if (ckpt_reader_read(r, ckpt_reader_find(r, "A", 1), &need, 1, buf, err, sizeof err)) bad++;
        for (int64_t a = 0; a < 6; a++)
            for (int64_t b = 0; b < 4; b++) {
                int inside = a >= 1 && a < 4 && b >= 1 && b < 3;
                bad += buf[a * 4 + b] != (inside ? value_at(1, 0, a, b) : -1.f);
            }
        bad += ckpt_reader_bytes_read(r) - before != 6 * 4;
    }
    CHECK(!bad, "sharded_read_region_only", "%d wrong elements or bytes: %s", bad, err);
    ckpt_reader_close(r);
    free(sl);
}

/* Pipeline stages: three stage plans (dp 4 x tp 2 each) over pp = 2 pipeline ranks (stage 2 runs on
 * rank 0, as in an interleaved schedule): stage s's slices are its own plan's, with its canons moved
 * past the earlier stages' and its ranks to pipeline rank s % 2's block of the grid. */
static void test_pipeline_slices(void) {
    Plan p[3];
    PlanCanon pc[3][2];
    PlanParam pp[3][1];
    PlanPart pt[3][2];
    memset(pc, 0, sizeof pc); memset(pp, 0, sizeof pp);
    for (int s = 0; s < 3; s++) make_plan(&p[s], pc[s], pp[s], pt[s]);
    Plan *stages[3] = {&p[0], &p[1], &p[2]};
    CkptSlice *one, *all;
    int n1 = ckpt_plan_slices(&p[0], &one), n = ckpt_pipeline_slices(stages, 3, 2, &all);
    int bad = n != 3 * n1;
    for (int k = 0; !bad && k < n; k++) {
        int s = k / n1;
        const CkptSlice *w = &one[k % n1], *g = &all[k];
        bad += g->canon != w->canon + 2 * s || g->rank != w->rank + (s % 2) * 8 || g->stage != s || g->slot != w->slot ||
               g->param != w->param || g->r0 != w->r0 || g->r1 != w->r1 || g->c0 != w->c0 || g->c1 != w->c1 ||
               g->lr != w->lr || g->lc != w->lc;
    }
    CHECK(n1 > 0 && !bad, "pipeline_slices_per_stage", "%d slices for 3 stages of %d: %d differ from the stage plan's, moved to "
          "its canons and pipeline rank", n, n1, bad);
    free(one); free(all);
}

int main(void) {
    if (!mkdtemp(dir)) { printf("FAIL - tmpdir: mkdtemp failed\n"); return 1; }
    test_crc32c();
    test_json();
    test_safetensors();
    test_fingerprint();
    test_checkpoint_folder();
    test_full_disk();
    test_stale_leftovers();
    test_verify_and_retention();
    test_sharded();
    test_pipeline_slices();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    TEST_EXIT();
}
