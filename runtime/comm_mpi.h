/* comm_mpi.h: MPI as a transport for ranks that are processes (the CPU backend under mpirun).
 * Open MPI's library (libmpi.so.40) is loaded with dlopen only when a launcher started the process,
 * so the binary links nothing of MPI and runs where Open MPI is absent. A small API over
 * communicators: init, split, collectives on float/double/bytes, point-to-point, barrier, abort.
 * Every call returns 0, or -1 with the reason in comm_mpi_error(). */
#ifndef BOOST_COMM_MPI_H
#define BOOST_COMM_MPI_H

#include <stddef.h>
#include <stdint.h>

typedef struct CommMpi CommMpi;         /* one communicator: its ranks, this process's rank in it */
typedef struct { void *req; } CommReq;  /* an outstanding isend/irecv */

enum { COMM_F32 = 0, COMM_F64 = 1, COMM_BYTE = 2 };

/* 1 when Open MPI's launcher started this process (OMPI_COMM_WORLD_SIZE in the environment). */
int comm_mpi_launched(void);
/* Load libmpi.so.40 and initialise MPI (once; later calls return the same world). Errors on the
 * communicators return to the caller (MPI_ERRORS_RETURN) instead of aborting inside MPI. */
CommMpi *comm_mpi_init(char *err, size_t errlen);
/* The world after init, NULL before. */
CommMpi *comm_mpi_world(void);
int comm_mpi_rank(const CommMpi *c);
int comm_mpi_size(const CommMpi *c);
/* Split c into groups of equal color, ordered by key (MPI_Comm_split; every rank of c calls it).
 * A pipeline stage's communicator, split from the world, reaches its Engine's groups as an
 * argument (engine_create_stage's StageLink.mpi), never through state here. */
CommMpi *comm_mpi_split(CommMpi *c, int color, int key);
void comm_mpi_free(CommMpi *c);

/* Sum n values (COMM_F32 or COMM_F64) of buf over the ranks, in place (MPI_Allreduce: the order
 * of the additions is the library's). */
int comm_mpi_allreduce(CommMpi *c, void *buf, int64_t n, int type);
/* The same sum, added in rank order 0, 1, ..., size-1 on every rank (an allgather, then the sum
 * here): bit-identical to the thread group's sum. scratch holds size*n values. */
int comm_mpi_allreduce_ordered(CommMpi *c, void *buf, int64_t n, int type, void *scratch);
/* dst[n] = the sum over the ranks of src[rank*n .. rank*n + n) (MPI_Reduce_scatter_block). */
int comm_mpi_reduce_scatter(CommMpi *c, const void *src, void *dst, int64_t n, int type);
/* dst[size*n] = every rank's src[n], in rank order. */
int comm_mpi_allgather(CommMpi *c, const void *src, void *dst, int64_t n, int type);
/* Variable all-to-all of bytes: counts and displacements per rank, in bytes. */
int comm_mpi_alltoallv(CommMpi *c, const void *src, const int *scounts, const int *sdispls,
                       void *dst, const int *rcounts, const int *rdispls);
int comm_mpi_isend(CommMpi *c, const void *buf, int64_t bytes, int peer, int tag, CommReq *req);
int comm_mpi_irecv(CommMpi *c, void *buf, int64_t bytes, int peer, int tag, CommReq *req);
int comm_mpi_wait(CommReq *req);
int comm_mpi_barrier(CommMpi *c);
/* Copy bytes of buf from rank root of c to every rank of c (MPI_Bcast). */
int comm_mpi_bcast(CommMpi *c, void *buf, int64_t bytes, int root);
/* Stop every process of the job (MPI_Abort on the world) after printing why, naming this rank. */
void comm_mpi_abort(int code, const char *why);
/* Every rank of the world agreed to end with status rc (a stop signal seen by any of them, summed
 * over the world at a step boundary): comm_mpi_finish(rc) then finalizes instead of aborting. */
void comm_mpi_agree_status(int rc);
/* At the end of the process: MPI_Finalize after a clean run (rc 0) or with the agreed status,
 * MPI_Abort otherwise, so the other ranks stop instead of waiting in a collective. No-op when MPI
 * was never initialised. */
void comm_mpi_finish(int rc);
const char *comm_mpi_error(void);

#endif
