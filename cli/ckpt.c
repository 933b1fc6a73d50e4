/* ckpt.c: `boost ckpt verify DIR...`: check checkpoint folders against the CRC-32C and size that
 * their state.json records for each file. DIR is a step folder, or a run's output folder (then
 * every step-NNNNNN folder in it). Exit 0 when all verify, 1 when one is damaged or cannot be
 * verified (saved before checksums were recorded), 2 on bad arguments. */
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
        "  DIR   a checkpoint folder (OUT/step-000100) or a run's output folder (every step folder in it)\n"
        "Recomputes the CRC-32C of every file that the folder's state.json records and compares it and\n"
        "the size. Exit 0 when all verify, 1 when one is damaged or has no checksums, 2 on bad arguments.\n");
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
    if (ckpt_read_state(dir, &st, err, sizeof err)) { printf("%s: DAMAGED: %s\n", dir, err); return 1; }
    int64_t total = 0;
    for (int i = 0; i < st.nfiles; i++) total += st.files[i].bytes;
    char size[32];
    format_bytes((double)total, size, sizeof size);
    printf("%s: verified: step %lld, %d files, %s, CRC-32C match (%.2fs)\n", dir, (long long)st.step, st.nfiles, size, dt);
    ckpt_state_free(&st);
    return 0;
}

int cmd_ckpt(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        ckpt_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "verify")) {
        fprintf(stderr, "boost ckpt: unknown action '%s' (the one there is: verify)\n", argv[1]);
        ckpt_usage(stderr);
        return 2;
    }
    if (argc < 3) { fprintf(stderr, "boost ckpt verify: give a checkpoint folder\n"); ckpt_usage(stderr); return 2; }
    int bad = 0;
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        char probe[1200];
        snprintf(probe, sizeof probe, "%s/state.json", arg);
        if (access(probe, F_OK) == 0) { bad |= verify_one(arg); continue; }
        int64_t *steps;
        int n = ckpt_list(arg, &steps);
        if (n == 0) {
            fprintf(stderr, "boost ckpt verify: %s: not a checkpoint: no state.json and no step-NNNNNN folders in it\n", arg);
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
