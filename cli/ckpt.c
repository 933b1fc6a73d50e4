/* ckpt.c: `boost ckpt verify DIR...`: check checkpoint folders against the CRC-32C and size that
 * their state.json records for each file (and a sharded folder's index.json against its rank
 * files). DIR is a step folder, or a run's output folder (then every step-NNNNNN folder in it).
 * Exit 0 when all verify, 1 when one is damaged or cannot be verified (saved before checksums were
 * recorded), 2 on bad arguments. `boost ckpt merge DIR -o FILE [--optimizer]`: one safetensors file
 * of full canonical tensors (from a sharded or a full checkpoint) for PyTorch's safetensors loader.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cli/commands.h"
#include "runtime/checkpoint.h"   // defines: ckpt_verify_advise, ckpt_list, ckpt_read_state
#include "runtime/train.h"        // defines: format_bytes

static void ckpt_usage(FILE *f) {
    fprintf(f,
        "usage: boost ckpt verify DIR...\n"
        "       boost ckpt merge DIR -o FILE [--optimizer]\n"
        "  DIR   a checkpoint folder (OUT/step-000100) or "
        "a run's output folder (verify: every step folder\n"
        "        in it; merge: its newest one that verifies)\n"
        "verify recomputes the CRC-32C of every file that "
        "the folder's state.json records and compares it\n"
        "and the size, and state.json's own checksum; no "
        "file may be left out of the record; the tensors\n"
        "must be the model state.json names (names and "
        "shapes), the run's plan (../plan/plan.txt) must\n"
        "load; a sharded folder's index.json must name "
        "only files that are there, with slices that\n"
        "fit them and cover every tensor. Exit 0 when all verify, 1 when one is damaged or has no\n"
        "checksums, 2 on bad arguments.\n"
        "merge writes FILE: every parameter as one full F32 tensor under its canonical name (with\n"
        "--optimizer also the AdamW moments, m.NAME and "
        "v.NAME), from a sharded or a full checkpoint; without --optimizer a full checkpoint's\n"
        "optimizer.safetensors is neither read nor checked (it may be missing);\n"
        "load it with safetensors.torch.load_file(FILE). "
        "Exit 0, 1 when writing fails, 2 on a damaged\n"
        "checkpoint or bad arguments.\n");
}

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One step folder: a line saying verified (files, bytes, time) or what is wrong. 0 or 1. */
static int verify_one(const char *dir) {
    char err[4096];
    double t0 = seconds();
    int rc = ckpt_verify_advise(dir, err, sizeof err);
    double dt = seconds() - t0;
    if (rc == CKPT_DAMAGED) { printf("%s: DAMAGED: %s\n", dir, err); return 1; }
    if (rc == CKPT_UNCHECKED) { printf("%s: NOT VERIFIED: %s\n", dir, err); return 1; }
    CkptState st;
    if (ckpt_read_state(dir, &st, err, sizeof err)) {
        printf("%s: DAMAGED: %s\n", dir, err);
        return 1;
    }
    int64_t total = 0;
    for (int i = 0; i < st.nfiles; i++) total += st.files[i].bytes;
    char size[32];
    format_bytes((double)total, size, sizeof size);
    printf("%s: verified: step %lld, %d files, %s, CRC-32C match (%.2fs)\n", dir,
           (long long)st.step, st.nfiles, size, dt);
    ckpt_state_free(&st);
    return 0;
}

typedef struct { CkptReader *r; const int *which; char err[2048]; } MergeFill;

static int merge_fill(void *ctx, int i, float *out) {
    MergeFill *m = ctx;
    return ckpt_reader_read(m->r, m->which[i], NULL, 0, out, m->err, sizeof m->err) ? 2 : 0;
}

static int merge(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    int optimizer = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "-o")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "boost ckpt merge: -o needs a file name\n");
                return 2;
            }
            out = argv[++i];
        } else if (!strcmp(argv[i], "--optimizer")) optimizer = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "boost ckpt merge: unknown option %s\n", argv[i]);
            ckpt_usage(stderr);
            return 2;
        } else if (in) {
            fprintf(stderr, "boost ckpt merge: one checkpoint folder only (got '%s' and '%s')\n",
                    in, argv[i]);
            return 2;
        } else in = argv[i];
    }
    if (!in || !out) {
        fprintf(stderr, "boost ckpt merge: give a checkpoint folder and -o FILE\n");
        ckpt_usage(stderr);
        return 2;
    }
    char dir[1200], notes[4096], err[4096];
    /* without --optimizer only the weights are read, and checked (as eval and export do) */
    int need = optimizer ? CKPT_NEED_ALL : CKPT_NEED_WEIGHTS;
    if (ckpt_resolve_for(in, need, dir, sizeof dir, notes, sizeof notes, err, sizeof err)) {
        fprintf(stderr, "boost ckpt merge: %s\n", err);
        return 2;
    }
    if (notes[0]) fprintf(stderr, "boost ckpt merge: warning: %s\n", notes);
    int v = ckpt_verify_advise_for(dir, need, err, sizeof err);
    if (v == CKPT_DAMAGED) { fprintf(stderr, "boost ckpt merge: %s\n", err); return 2; }
    if (v == CKPT_UNCHECKED) fprintf(stderr, "boost ckpt merge: note: %s\n", err);
    CkptState st;
    if (ckpt_read_state(dir, &st, err, sizeof err)) {
        fprintf(stderr, "boost ckpt merge: %s\n", err);
        return 2;
    }
    CkptReader *r;
    if ((optimizer ? ckpt_reader_open(dir, NULL, 0, &r, err, sizeof err)
                   : ckpt_reader_open_weights(dir, &r, err, sizeof err)) ||
        (ckpt_reader_check_model(r, &st, err, sizeof err) && (ckpt_reader_close(r), 1))) {
        fprintf(stderr, "boost ckpt merge: %s\n", err);
        ckpt_state_free(&st);
        return 2;
    }
    int nt = ckpt_reader_count(r), n = 0;
    int *which = calloc((size_t)nt + 1, sizeof *which);
    StEntry *ents = calloc((size_t)nt + 1, sizeof *ents);
    int rc = which && ents ? 0 : 1;
    int64_t elems = 0;
    // parameters first, then m, then v, in the checkpoint's order
    for (int i = 0; !rc && i < nt; i++) {
        int slot;
        int64_t rows, cols;
        const char *name = ckpt_reader_tensor(r, i, &slot, &rows, &cols);
        if (slot != 0 && !optimizer) continue;
        which[n] = i;
        ents[n].name = name; ents[n].rows = rows; ents[n].cols = cols;
        elems += rows * cols;
        n++;
    }
    char step_text[32], fp_text[32], tp_text[16];
    snprintf(step_text, sizeof step_text, "%lld", (long long)st.step);
    snprintf(fp_text, sizeof fp_text, "0x%016llx", (unsigned long long)st.fingerprint);
    snprintf(tp_text, sizeof tp_text, "%d", st.tp);
    const char *meta[] = {"format",      "pt",    "model",   st.model,          "run",
                          st.run,        "step",  step_text, "fingerprint",     fp_text,
                          "saved_at_tp", tp_text, "writer",  "boost ckpt merge"};
    char tmp[PATH_MAX + 32];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-%d", out, (int)getpid()) >= (int)sizeof tmp) {
        fprintf(stderr,
                "boost ckpt merge: -o %.100s...: the path is longer than this system's paths (%d "
                "bytes)\n",
                out, PATH_MAX);
        rc = 2;
    }
    MergeFill mf = {r, which, ""};
    double t0 = seconds();
    if (!rc && st_write_f32(tmp, ents, n, meta, (int)(sizeof meta / sizeof meta[0]) / 2, merge_fill,
                            &mf, err, sizeof err)) {
        fprintf(stderr, "boost ckpt merge: %s\n", mf.err[0] ? mf.err : err);
        rc = mf.err[0] ? 2 : 1;
    } else if (!rc && rename(tmp, out) != 0) {
        fprintf(stderr, "boost ckpt merge: cannot rename %s to %s: %s\n", tmp, out,
                strerror(errno));
        remove(tmp);
        rc = 1;
    } else if (rc && !(which && ents)) fprintf(stderr, "boost ckpt merge: out of memory\n");
    if (!rc) {
        char size[32];
        format_bytes((double)elems * 4, size, sizeof size);
        printf("wrote %s: %d tensors (%s), step %lld of %s, from a %s checkpoint (%.2fs)\n", out, n,
               size, (long long)st.step, st.model, ckpt_reader_sharded(r) ? "sharded" : "full",
               seconds() - t0);
    }
    free(which); free(ents);
    ckpt_reader_close(r);
    ckpt_state_free(&st);
    return rc;
}

int cmd_ckpt(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        ckpt_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "merge")) return merge(argc, argv);
    if (strcmp(argv[1], "verify")) {
        fprintf(stderr, "boost ckpt: unknown action '%s' (there are: verify, merge)\n", argv[1]);
        ckpt_usage(stderr);
        return 2;
    }
    if (argc < 3) {
        fprintf(stderr, "boost ckpt verify: give a checkpoint folder\n");
        ckpt_usage(stderr);
        return 2;
    }
    int bad = 0;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        char probe[1200];
        snprintf(probe, sizeof probe, "%s/state.json", arg);
        if (access(probe, F_OK) == 0) { bad |= verify_one(arg); continue; }
        int64_t *steps;
        int n = ckpt_list(arg, &steps);
        if (n == 0) {
            fprintf(stderr,
                    "boost ckpt verify: %s: not a checkpoint: no "
                    "state.json and no step-NNNNNN folders in it\n", arg);
            free(steps);
            return 2;
        }
        char dir[1200];
        for (int k = 0; k < n; k++) {
            ckpt_step_dir(arg, steps[k], dir, sizeof dir);
            bad |= verify_one(dir);
        }
        free(steps);
    }
    return bad ? 1 : 0;
}
