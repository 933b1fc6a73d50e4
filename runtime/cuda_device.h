/* cuda_device.h: which GPU this process uses, from BOOST_DEVICE or the launcher's local rank
 * (one process per GPU on each host), honouring CUDA_VISIBLE_DEVICES. Pure: reads the environment
 * and the visible device count, touches no device; used by the CUDA backend and `boost doctor`. */
#ifndef BOOST_CUDA_DEVICE_H
#define BOOST_CUDA_DEVICE_H

#include <stddef.h>

/* count: the devices the driver reports (CUDA_VISIBLE_DEVICES already applied). Picks, in order:
 * BOOST_DEVICE=N; else, in a world of several processes, the local rank
 * (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK, MPI_LOCALRANKID) as the ordinal, except
 * that one visible device with CUDA_VISIBLE_DEVICES set is the launcher's per-rank binding
 * (ordinal 0); without a local rank, world rank % count; else 0. Returns 0 with *ordinal and a
 * sentence saying why in how, or -1 with err when the host has more ranks than visible GPUs
 * (the numbers, and how to launch), or a value is malformed. */
int cuda_pick_device(int count, int *ordinal, char *how, size_t hn, char *err, size_t en);

#endif
