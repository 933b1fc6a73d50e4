/* mock_nccl.c: a stand-in for libnccl.so.2 on a machine without GPUs, next to tests/gpu/mock_cuda.c
 * (whose device memory is host memory), so the CUDA backend's multi-process mode runs in tests. The
 * processes of one communicator meet in a POSIX shared-memory segment named from the unique id;
 * each collective copies this rank's data into its slot, waits at a barrier, and every rank sums
 * (in rank order, bf16 through fp32 like the local-mode kernel) or gathers all slots, then a second
 * barrier frees the slots. A barrier that waits more than $MOCK_NCCL_TIMEOUT s (default 120) fails. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef int ncclResult_t;
typedef struct { char internal[128]; } ncclUniqueId;
enum { OK = 0, ERR_SYSTEM = 2, ERR_INTERNAL = 3, ERR_INVALID = 4 };
enum { SUM = 0, F32 = 7, F64 = 8, BF16 = 9 };
#define MAX_RANKS 16
#define SLOT_BYTES ((size_t)32 << 20)

typedef struct {
    int count, gen;                   /* barrier: arrivals, generation */
} Header;

typedef struct ncclComm {
    int rank, nranks;
    char name[128];
    Header *hdr;
    unsigned char *slots;             /* [nranks][SLOT_BYTES] */
    size_t map_bytes;
} Comm;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int barrier(Comm *c) {
    int gen = __atomic_load_n(&c->hdr->gen, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&c->hdr->count, 1, __ATOMIC_ACQ_REL) == c->nranks) {
        __atomic_store_n(&c->hdr->count, 0, __ATOMIC_RELEASE);
        __atomic_add_fetch(&c->hdr->gen, 1, __ATOMIC_ACQ_REL);
        return 0;
    }
    const char *tv = getenv("MOCK_NCCL_TIMEOUT");
    double limit = tv && atof(tv) > 0 ? atof(tv) : 120, t0 = now_s();
    while (__atomic_load_n(&c->hdr->gen, __ATOMIC_ACQUIRE) == gen) {
        if (now_s() - t0 > limit) {
            fprintf(stderr, "mock nccl: rank %d waited %.0f s at a barrier: another rank is gone\n", c->rank, limit);
            return -1;
        }
        usleep(20);
    }
    return 0;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case OK: return "no error";
    case ERR_SYSTEM: return "mock: shared memory failed";
    case ERR_INTERNAL: return "mock: a peer did not arrive";
    case ERR_INVALID: return "mock: invalid argument";
    }
    return "mock: unknown error";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(id->internal, sizeof id->internal, "/boost-mock-nccl-%d-%lld", (int)getpid(),
             (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    return OK;
}

ncclResult_t ncclCommInitRank(Comm **out, int nranks, ncclUniqueId id, int rank) {
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks || id.internal[0] != '/') return ERR_INVALID;
    Comm *c = calloc(1, sizeof *c);
    if (!c) return ERR_SYSTEM;
    c->rank = rank; c->nranks = nranks;
    snprintf(c->name, sizeof c->name, "%s", id.internal);
    c->map_bytes = 4096 + SLOT_BYTES * nranks;
    int fd = shm_open(c->name, O_CREAT | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)c->map_bytes) != 0) { if (fd >= 0) close(fd); free(c); return ERR_SYSTEM; }
    void *m = mmap(NULL, c->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) { free(c); return ERR_SYSTEM; }
    c->hdr = m;
    c->slots = (unsigned char *)m + 4096;
    if (barrier(c)) { munmap(m, c->map_bytes); free(c); return ERR_INTERNAL; }
    if (rank == 0) shm_unlink(c->name);   /* all ranks have it mapped */
    *out = c;
    return OK;
}

ncclResult_t ncclCommDestroy(Comm *c) {
    if (!c) return OK;
    munmap(c->hdr, c->map_bytes);
    free(c);
    return OK;
}

static size_t dsize(int dt) { return dt == F64 ? 8 : dt == F32 ? 4 : dt == BF16 ? 2 : 0; }

static float bf16_in(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t bf16_out(float f) {   /* round to nearest even, as the kernels' __float2bfloat16 */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int dt, int op, Comm *c, void *stream) {
    size_t es = dsize(dt);
    if (!c || !es || op != SUM || count * es > SLOT_BYTES) return ERR_INVALID;
    memcpy(c->slots + SLOT_BYTES * c->rank, send, count * es);
    if (barrier(c)) return ERR_INTERNAL;
    for (size_t i = 0; i < count; i++) {
        if (dt == F64) {
            double s = 0;
            for (int q = 0; q < c->nranks; q++) s += ((const double *)(c->slots + SLOT_BYTES * q))[i];
            ((double *)recv)[i] = s;
        } else if (dt == F32) {
            float s = 0;
            for (int q = 0; q < c->nranks; q++) s += ((const float *)(c->slots + SLOT_BYTES * q))[i];
            ((float *)recv)[i] = s;
        } else {
            float s = 0;
            for (int q = 0; q < c->nranks; q++) s += bf16_in(((const uint16_t *)(c->slots + SLOT_BYTES * q))[i]);
            ((uint16_t *)recv)[i] = bf16_out(s);
        }
    }
    return barrier(c) ? ERR_INTERNAL : OK;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, int dt, Comm *c, void *stream) {
    size_t es = dsize(dt);
    if (!c || !es || count * es > SLOT_BYTES) return ERR_INVALID;
    memcpy(c->slots + SLOT_BYTES * c->rank, send, count * es);
    if (barrier(c)) return ERR_INTERNAL;
    for (int q = 0; q < c->nranks; q++) memcpy((unsigned char *)recv + q * count * es, c->slots + SLOT_BYTES * q, count * es);
    return barrier(c) ? ERR_INTERNAL : OK;
}
