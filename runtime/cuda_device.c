/* cuda_device.c: the device of this process (see cuda_device.h): BOOST_DEVICE, else the local rank
 * that the launcher (Open MPI, Slurm, torchrun, MPICH/Intel MPI) sets, checked against the GPUs
 * this host shows the process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/cuda_device.h"
#include "runtime/world.h"

/* world_env_number into an int (the range it checks fits one). */
static int env_num(const char *name, int *out) {
    long x = 0;
    int h = world_env_number(name, &x);
    if (h > 0) *out = (int)x;
    return h;
}

int cuda_pick_device(int count, int *ordinal, char *how, size_t hn, char *err, size_t en) {
    *ordinal = 0;
    int v = 0, h = env_num("BOOST_DEVICE", &v);
    if (h < 0) {
        snprintf(err, en, "BOOST_DEVICE=%s: expected a device number 0..%d", getenv("BOOST_DEVICE"),
                 count - 1);
        return -1;
    }
    if (h > 0) {
        if (v >= count) {
            snprintf(err, en, "BOOST_DEVICE=%d but this process sees %d GPU%s (0..%d%s%s)", v,
                     count, count == 1 ? "" : "s", count - 1,
                     getenv("CUDA_VISIBLE_DEVICES") ? ", CUDA_VISIBLE_DEVICES=" : "",
                     getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
            return -1;
        }
        *ordinal = v;
        snprintf(how, hn, "device %d from BOOST_DEVICE", v);
        return 0;
    }
    int wr = 0, ws = 1;
    char werr[256];
    if (world_from_env(&wr, &ws, werr, sizeof werr) != 1) {
        snprintf(how, hn, "device 0 (one process: BOOST_DEVICE=N picks another)");
        return 0;
    }
    static const char *const LOCAL_RANK[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                                             "LOCAL_RANK", "MPI_LOCALRANKID"};
    static const char *const LOCAL_SIZE[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE",
                                             "LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS"};
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    char cvd_note[200] = "";
    if (cvd) snprintf(cvd_note, sizeof cvd_note, " (CUDA_VISIBLE_DEVICES=%.150s)", cvd);
    for (int i = 0; i < 4; i++) {
        int lr = 0, hr = env_num(LOCAL_RANK[i], &lr);
        if (hr == 0) continue;
        if (hr < 0) {
            snprintf(err, en, "%s=%s: expected a local rank >= 0", LOCAL_RANK[i],
                     getenv(LOCAL_RANK[i]));
            return -1;
        }
        int ls = 0, hs = env_num(LOCAL_SIZE[i], &ls);
        if (count == 1 && cvd && *cvd &&
            !strchr(cvd, ',')) { /* the launcher bound one GPU to this rank */
            snprintf(how, hn,
                     "device 0: the one GPU CUDA_VISIBLE_DEVICES=%s gives local rank %d (%s)", cvd,
                     lr, LOCAL_RANK[i]);
            return 0;
        }
        int ranks_here = hs > 0 && ls > lr ? ls : lr + 1;
        if (ranks_here > count) {
            snprintf(err, en,
                     "rank %d of %d is local rank %d (%s) and this host runs %s%d ranks, but it "
                     "shows this process "
                     "%d GPU%s%s: start at most %d rank%s per host (mpirun --map-by ppr:%d:node, "
                     "srun --ntasks-per-node=%d), "
                     "or give each rank its own GPU with CUDA_VISIBLE_DEVICES",
                     wr, ws, lr, LOCAL_RANK[i], hs > 0 ? "" : "at least ", ranks_here, count,
                     count == 1 ? "" : "s", cvd_note, count, count == 1 ? "" : "s", count, count);
            return -1;
        }
        *ordinal = lr;
        snprintf(how, hn, "device %d: local rank %d (%s) of rank %d of %d, %d GPU%s here%s", lr, lr,
                 LOCAL_RANK[i], wr, ws, count, count == 1 ? "" : "s", cvd_note);
        return 0;
    }
    *ordinal = wr % count;
    snprintf(how, hn,
             "device %d: world rank %d %% %d GPUs (no local rank from the launcher: set LOCAL_RANK "
             "when ranks "
             "span several hosts)",
             *ordinal, wr, count);
    return 0;
}
