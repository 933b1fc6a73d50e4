/* world.h: the multi-process world (one process per GPU) as the launcher describes it in the
 * environment: mpirun (OMPI_COMM_WORLD_RANK/SIZE), srun (SLURM_PROCID/SLURM_NTASKS) or by hand
 * (BOOST_RANK/BOOST_WORLD_SIZE). Used by the Engine, the CUDA backend and the training loop. */
#ifndef BOOST_WORLD_H
#define BOOST_WORLD_H

#include <stddef.h>

/* 1 with *rank and *size when the environment gives a world of 2 or more processes; 0 when it gives
 * none (or a world of one); -1 with err when the variables are malformed. */
int world_from_env(int *rank, int *size, char *err, size_t errlen);
/* A launcher's number variable: 1 with *out when NAME holds a number 0..1000000, 0 when it is unset
 * or empty, -1 when it is malformed. */
int world_env_number(const char *name, long *out);

/* This process's rank in the world, 0 without one (or with malformed variables). */
int world_rank(void);

/* A job id the processes of one launch share: SLURM_JOB_ID, OMPI_MCA_orte_ess_jobid, PMIX_NAMESPACE,
 * BOOST_JOB_ID, else "0". Only characters safe in a file name. */
void world_job_id(char *out, size_t n);

#endif
