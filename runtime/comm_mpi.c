/* comm_mpi.c: the MPI transport (runtime/comm_mpi.h) over Open MPI loaded at run time. Open MPI's
 * handles (MPI_Comm, MPI_Datatype, MPI_Op, MPI_Errhandler, MPI_Request) are pointers, and the
 * predefined ones are the addresses of exported globals (MPI_COMM_WORLD = &ompi_mpi_comm_world,
 * MPI_FLOAT = &ompi_mpi_float, MPI_SUM = &ompi_mpi_op_sum, ...): they are resolved with dlsym, as
 * are the functions, so no MPI header or library is needed to build. */
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime/comm_mpi.h"   // defines: CommMpi, CommReq, comm_mpi_*

typedef void *Handle;           /* MPI_Comm, MPI_Datatype, MPI_Op, MPI_Errhandler, MPI_Request */
enum { THREAD_SERIALIZED = 2, MAX_ERROR_STRING = 256, MAX_COUNT = 0x7fffffff };

static struct {
    void *lib;
    int (*Init_thread)(int *, char ***, int, int *);
    int (*Finalize)(void);
    int (*Abort)(Handle, int);
    int (*Comm_rank)(Handle, int *);
    int (*Comm_size)(Handle, int *);
    int (*Comm_split)(Handle, int, int, Handle *);
    int (*Comm_free)(Handle *);
    int (*Comm_set_errhandler)(Handle, Handle);
    int (*Allreduce)(const void *, void *, int, Handle, Handle, Handle);
    int (*Reduce_scatter_block)(const void *, void *, int, Handle, Handle, Handle);
    int (*Allgather)(const void *, int, Handle, void *, int, Handle, Handle);
    int (*Alltoallv)(const void *, const int *, const int *, Handle, void *, const int *, const int *, Handle, Handle);
    int (*Isend)(const void *, int, Handle, int, int, Handle, Handle *);
    int (*Irecv)(void *, int, Handle, int, int, Handle, Handle *);
    int (*Wait)(Handle *, void *);
    int (*Barrier)(Handle);
    int (*Bcast)(void *, int, Handle, int, Handle);
    int (*Error_string)(int, char *, int *);
    Handle comm_world, f32, f64, byte, op_sum, errors_return;
} M;

struct CommMpi { Handle comm; int rank, size; };

static CommMpi world;
static int initialised, finished;
static char last_err[600];

const char *comm_mpi_error(void) { return last_err; }

int comm_mpi_launched(void) {
    const char *s = getenv("OMPI_COMM_WORLD_SIZE");
    return s && *s;
}

/* Records "WHAT: MPI's message" and returns -1. */
static int mpi_fail(const char *what, int code) {
    char msg[MAX_ERROR_STRING + 1] = "";
    int len = 0;
    if (M.Error_string && M.Error_string(code, msg, &len) != 0) snprintf(msg, sizeof msg, "error %d", code);
    snprintf(last_err, sizeof last_err, "MPI %s failed on world rank %d: %s", what, world.rank, msg);
    return -1;
}

static Handle type_of(int type) { return type == COMM_F64 ? M.f64 : type == COMM_BYTE ? M.byte : M.f32; }

static int count_ok(int64_t n, const char *what) {
    if (n >= 0 && n <= MAX_COUNT) return 1;
    snprintf(last_err, sizeof last_err, "MPI %s: %lld elements is more than one MPI call carries (%d)", what, (long long)n, MAX_COUNT);
    return 0;
}

static int load(char *err, size_t errlen) {
    const char *names[] = {"libmpi.so.40", "libmpi.so"};
    for (size_t i = 0; i < 2 && !M.lib; i++) M.lib = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
    if (!M.lib) {
        snprintf(err, errlen, "mpirun started this process but Open MPI's libmpi.so.40 cannot be loaded (%s): install "
                 "Debian's openmpi-bin and libopenmpi-dev (tools/install-deps.sh)", dlerror());
        return -1;
    }
#define SYM(field, name) \
    if (!(*(void **)&M.field = dlsym(M.lib, name))) { snprintf(err, errlen, "libmpi.so.40 lacks %s: not Open MPI 4 or 5?", name); return -1; }
    SYM(Init_thread, "MPI_Init_thread") SYM(Finalize, "MPI_Finalize") SYM(Abort, "MPI_Abort")
    SYM(Comm_rank, "MPI_Comm_rank") SYM(Comm_size, "MPI_Comm_size") SYM(Comm_split, "MPI_Comm_split")
    SYM(Comm_free, "MPI_Comm_free") SYM(Comm_set_errhandler, "MPI_Comm_set_errhandler")
    SYM(Allreduce, "MPI_Allreduce") SYM(Reduce_scatter_block, "MPI_Reduce_scatter_block")
    SYM(Allgather, "MPI_Allgather") SYM(Alltoallv, "MPI_Alltoallv") SYM(Isend, "MPI_Isend") SYM(Irecv, "MPI_Irecv")
    SYM(Wait, "MPI_Wait") SYM(Barrier, "MPI_Barrier") SYM(Bcast, "MPI_Bcast") SYM(Error_string, "MPI_Error_string")
    SYM(comm_world, "ompi_mpi_comm_world") SYM(f32, "ompi_mpi_float") SYM(f64, "ompi_mpi_double")
    SYM(byte, "ompi_mpi_byte") SYM(op_sum, "ompi_mpi_op_sum") SYM(errors_return, "ompi_mpi_errors_return")
#undef SYM
    return 0;
}

CommMpi *comm_mpi_init(char *err, size_t errlen) {
    if (initialised) return &world;
    if (load(err, errlen)) return NULL;
    int provided = 0, rc = M.Init_thread(NULL, NULL, THREAD_SERIALIZED, &provided);
    if (rc != 0) { snprintf(err, errlen, "MPI_Init_thread failed (error %d)", rc); return NULL; }
    initialised = 1;
    if (provided < THREAD_SERIALIZED) {
        snprintf(err, errlen, "Open MPI gives thread level %d, the engine needs MPI_THREAD_SERIALIZED (%d)", provided, THREAD_SERIALIZED);
        return NULL;
    }
    world.comm = M.comm_world;
    M.Comm_set_errhandler(world.comm, M.errors_return);
    M.Comm_rank(world.comm, &world.rank);
    M.Comm_size(world.comm, &world.size);
    return &world;
}

CommMpi *comm_mpi_world(void) { return initialised ? &world : NULL; }
int comm_mpi_rank(const CommMpi *c) { return c->rank; }
int comm_mpi_size(const CommMpi *c) { return c->size; }

CommMpi *comm_mpi_split(CommMpi *c, int color, int key) {
    CommMpi *s = calloc(1, sizeof *s);
    if (!s) { snprintf(last_err, sizeof last_err, "out of memory"); return NULL; }
    int rc = M.Comm_split(c->comm, color, key, &s->comm);
    if (rc) { mpi_fail("Comm_split", rc); free(s); return NULL; }
    M.Comm_set_errhandler(s->comm, M.errors_return);
    M.Comm_rank(s->comm, &s->rank);
    M.Comm_size(s->comm, &s->size);
    return s;
}

void comm_mpi_free(CommMpi *c) {
    if (!c || c == &world) return;
    if (!finished) M.Comm_free(&c->comm);
    free(c);
}

int comm_mpi_allreduce(CommMpi *c, void *buf, int64_t n, int type) {
    if (!count_ok(n, "allreduce")) return -1;
    int rc = M.Allreduce((const void *)1 /* MPI_IN_PLACE */, buf, (int)n, type_of(type), M.op_sum, c->comm);
    return rc ? mpi_fail("Allreduce", rc) : 0;
}

int comm_mpi_allreduce_ordered(CommMpi *c, void *buf, int64_t n, int type, void *scratch) {
    if (comm_mpi_allgather(c, buf, scratch, n, type)) return -1;
    if (type == COMM_F64) {
        double *out = buf;
        const double *all = scratch;
        for (int64_t i = 0; i < n; i++) {
            double s = all[i];
            for (int q = 1; q < c->size; q++) s += all[(int64_t)q * n + i];
            out[i] = s;
        }
    } else {
        float *out = buf;
        const float *all = scratch;
        for (int64_t i = 0; i < n; i++) {
            float s = all[i];
            for (int q = 1; q < c->size; q++) s += all[(int64_t)q * n + i];
            out[i] = s;
        }
    }
    return 0;
}

int comm_mpi_reduce_scatter(CommMpi *c, const void *src, void *dst, int64_t n, int type) {
    if (!count_ok(n, "reduce_scatter")) return -1;
    int rc = M.Reduce_scatter_block(src, dst, (int)n, type_of(type), M.op_sum, c->comm);
    return rc ? mpi_fail("Reduce_scatter_block", rc) : 0;
}

int comm_mpi_allgather(CommMpi *c, const void *src, void *dst, int64_t n, int type) {
    if (!count_ok(n * c->size, "allgather")) return -1;
    int rc = M.Allgather(src, (int)n, type_of(type), dst, (int)n, type_of(type), c->comm);
    return rc ? mpi_fail("Allgather", rc) : 0;
}

int comm_mpi_alltoallv(CommMpi *c, const void *src, const int *scounts, const int *sdispls,
                       void *dst, const int *rcounts, const int *rdispls) {
    int rc = M.Alltoallv(src, scounts, sdispls, M.byte, dst, rcounts, rdispls, M.byte, c->comm);
    return rc ? mpi_fail("Alltoallv", rc) : 0;
}

int comm_mpi_isend(CommMpi *c, const void *buf, int64_t bytes, int peer, int tag, CommReq *req) {
    if (!count_ok(bytes, "isend")) return -1;
    int rc = M.Isend(buf, (int)bytes, M.byte, peer, tag, c->comm, &req->req);
    return rc ? mpi_fail("Isend", rc) : 0;
}

int comm_mpi_irecv(CommMpi *c, void *buf, int64_t bytes, int peer, int tag, CommReq *req) {
    if (!count_ok(bytes, "irecv")) return -1;
    int rc = M.Irecv(buf, (int)bytes, M.byte, peer, tag, c->comm, &req->req);
    return rc ? mpi_fail("Irecv", rc) : 0;
}

int comm_mpi_wait(CommReq *req) {
    int rc = M.Wait(&req->req, NULL /* MPI_STATUS_IGNORE */);
    return rc ? mpi_fail("Wait", rc) : 0;
}

int comm_mpi_barrier(CommMpi *c) {
    int rc = M.Barrier(c->comm);
    return rc ? mpi_fail("Barrier", rc) : 0;
}

int comm_mpi_bcast(CommMpi *c, void *buf, int64_t bytes, int root) {
    if (!count_ok(bytes, "bcast")) return -1;
    int rc = M.Bcast(buf, (int)bytes, M.byte, root, c->comm);
    return rc ? mpi_fail("Bcast", rc) : 0;
}

void comm_mpi_abort(int code, const char *why) {
    fprintf(stderr, "boost: rank %d of %d stops the job: %s\n", world.rank, world.size, why);
    fflush(stderr);
    if (initialised && !finished) { finished = 1; M.Abort(world.comm, code); }
    exit(code);
}

static int agreed_status;        /* comm_mpi_agree_status's rc; 0: none */
static volatile sig_atomic_t finish_status;
enum { FINALIZE_WAIT_S = 2 };   /* how long an agreed stop waits in MPI_Finalize */

static void end_with_status(int sig) { (void)sig; _exit(finish_status); }

void comm_mpi_agree_status(int rc) { agreed_status = rc; }

void comm_mpi_finish(int rc) {
    if (!initialised || finished) return;
    if (rc != 0 && rc != agreed_status) {
        char why[64];
        snprintf(why, sizeof why, "it failed (exit %d; its message is above)", rc);
        comm_mpi_abort(rc, why);
    }
    finished = 1;
    if (rc != 0) {   /* the agreed stop: a signalled launcher tears the job down and may never let */
        finish_status = rc;                   /* MPI_Finalize return: end with the status after a while */
        signal(SIGALRM, end_with_status);
        alarm(FINALIZE_WAIT_S);
    }
    M.Finalize();
    alarm(0);
}
