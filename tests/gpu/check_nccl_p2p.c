/* check_nccl_p2p.c: the NCCL stand-in's point-to-point (tests/gpu/mock_nccl.c: ncclSend/ncclRecv,
 * ncclGroupStart/End), loaded with dlopen as the CUDA backend loads NCCL, in 3 forked processes:
 * grouped exchanges in opposite directions (as a pipeline stage sends its activation forward while
 * receiving a gradient backward), messages kept in order, ungrouped pairs, and a receive whose count
 * differs from the send refused with ncclInvalidUsage.
 *   usage: check_nccl_p2p MOCK_NCCL_SO      prints "ok - ..." / "FAIL - ..."; exit 1 on a failure */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct { char internal[128]; } Id;
typedef struct Comm Comm;
enum { F32 = 7, USAGE = 5 };
static int (*get_id)(Id *);
static int (*init_rank)(Comm **, int, Id, int);
static int (*nsend)(const void *, size_t, int, int, Comm *, void *);
static int (*nrecv)(void *, size_t, int, int, Comm *, void *);
static int (*gstart)(void), (*gend)(void);

#define N 1000
static float value(int from, int to, int msg, int i) { return (float)(from * 1000000 + to * 100000 + msg * 1000 + i); }

/* Rank r of 3 in a chain 0 - 1 - 2: 4 rounds, each a group of a send forward and a receive
 * backward (and the reverse on the other side), checked element by element. Then rank 0 sends N to
 * rank 1 which expects N/2: rank 1 must get ncclInvalidUsage. Exit status: failed checks. */
static int rank_main(Id id, int r) {
    Comm *c = NULL;
    if (init_rank(&c, 3, id, r)) { printf("FAIL - rank %d: ncclCommInitRank\n", r); return 1; }
    float *out = malloc(sizeof(float) * N * 2), *in = malloc(sizeof(float) * N * 2);
    int bad = 0;
    for (int m = 0; m < 4; m++) {
        if (gstart()) bad++;
        if (r + 1 < 3) {   /* forward to r+1, backward from r+1 */
            for (int i = 0; i < N; i++) out[i] = value(r, r + 1, m, i);
            if (nsend(out, N, F32, r + 1, c, NULL) || nrecv(in, N, F32, r + 1, c, NULL)) bad++;
        }
        if (r > 0) {       /* backward to r-1, forward from r-1 */
            for (int i = 0; i < N; i++) out[N + i] = value(r, r - 1, m, i);
            if (nsend(out + N, N, F32, r - 1, c, NULL) || nrecv(in + N, N, F32, r - 1, c, NULL)) bad++;
        }
        if (gend()) { printf("FAIL - rank %d round %d: ncclGroupEnd failed\n", r, m); return 1; }
        for (int i = 0; i < N; i++) {
            if (r + 1 < 3 && in[i] != value(r + 1, r, m, i)) bad++;
            if (r > 0 && in[N + i] != value(r - 1, r, m, i)) bad++;
        }
    }
    if (bad) printf("FAIL - rank %d: grouped exchanges: %d wrong values or calls\n", r, bad);
    int rc = 0;
    if (r == 0) rc = nsend(out, N, F32, 1, c, NULL);
    if (r == 1) {
        rc = nrecv(in, N / 2, F32, 0, c, NULL);
        if (rc != USAGE) { printf("FAIL - a receive of %d elements against a send of %d returned %d, not ncclInvalidUsage\n", N / 2, N, rc); bad++; }
        rc = 0;
    }
    if (rc) { printf("FAIL - rank %d: the mismatched send returned %d\n", r, rc); bad++; }
    return bad ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: check_nccl_p2p MOCK_NCCL_SO\n"); return 2; }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { printf("FAIL - dlopen %s: %s\n", argv[1], dlerror()); return 1; }
    *(void **)&get_id = dlsym(h, "ncclGetUniqueId"); *(void **)&init_rank = dlsym(h, "ncclCommInitRank");
    *(void **)&nsend = dlsym(h, "ncclSend"); *(void **)&nrecv = dlsym(h, "ncclRecv");
    *(void **)&gstart = dlsym(h, "ncclGroupStart"); *(void **)&gend = dlsym(h, "ncclGroupEnd");
    if (!get_id || !init_rank || !nsend || !nrecv || !gstart || !gend) { printf("FAIL - the stand-in lacks the p2p symbols\n"); return 1; }
    Id id;
    if (get_id(&id)) { printf("FAIL - ncclGetUniqueId\n"); return 1; }
    fflush(stdout);
    pid_t pid[3];
    for (int r = 0; r < 3; r++)
        if ((pid[r] = fork()) == 0) { int rc = rank_main(id, r); fflush(stdout); _exit(rc); }
    int failed = 0;
    for (int r = 0; r < 3; r++) {
        int st = 0;
        if (pid[r] < 0 || waitpid(pid[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) failed++;
    }
    if (!failed) printf("ok - stand-in NCCL send/recv: grouped exchanges both ways over 3 ranks, in order; a count mismatch refused\n");
    else printf("FAIL - stand-in NCCL send/recv: %d of 3 ranks failed\n", failed);
    return failed ? 1 : 0;
}
