/* test_mock_nccl_refusals.c: the NCCL stand-in (tests/gpu/mock_nccl.c, compiled in) refuses what NCCL
 * refuses or cannot run: an unknown datatype or reduction, no communicator, a rank outside the
 * communicator, and collectives that differ between the ranks (two processes here: one all-reduces
 * 8 elements, the other 16; then both the same, which must pass). Without the CUDA stand-in the
 * collectives run at the call. */
#include <sys/wait.h>
#include "tests/gpu/mock_nccl.c"
#include "tests/unit/testlib.h"

/* Two processes on one communicator; rank 1 uses count1. Returns the two exit codes packed:
 * 0 OK, 1 refused (ncclInvalidUsage), 2 anything else. */
static int two_ranks(size_t count0, size_t count1, int *rc0, int *rc1) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != OK) return -1;
    pid_t pid[2];
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            Comm *c = NULL;
            if (ncclCommInitRank(&c, 2, id, r) != OK) _exit(2);
            static float buf[64];
            ncclResult_t rc = ncclAllReduce(buf, buf, r ? count1 : count0, F32, SUM, c, NULL);
            ncclResult_t ae = OK;
            ncclCommGetAsyncError(c, &ae);
            blocking_barrier(c);   /* neither exits before both read the async error (a peer gone is an error) */
            _exit(rc == OK && ae == OK ? 0 : rc == ERR_USAGE && ae == ERR_USAGE ? 1 : 2);
        }
    }
    int st0 = 0, st1 = 0;
    waitpid(pid[0], &st0, 0);
    waitpid(pid[1], &st1, 0);
    *rc0 = WIFEXITED(st0) ? WEXITSTATUS(st0) : 3;
    *rc1 = WIFEXITED(st1) ? WEXITSTATUS(st1) : 3;
    return 0;
}

int main(void) {
    setenv("MOCK_NCCL_TIMEOUT", "20", 1);
    unsetenv("BOOST_LIBCUDA");
    static float buf[8];
    CHECK(ncclAllReduce(buf, buf, 8, F32, SUM, NULL, NULL) == ERR_INVALID, "refused: no communicator", "accepted");
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    Comm *c = NULL;
    CHECK(ncclCommInitRank(&c, 2, id, 2) == ERR_INVALID, "refused: rank 2 of a 2-rank communicator", "accepted");
    CHECK(ncclCommInitRank(&c, 0, id, 0) == ERR_INVALID, "refused: a communicator of 0 ranks", "accepted");
    ncclGetUniqueId(&id);
    CHECK(ncclCommInitRank(&c, 1, id, 0) == OK, "a 1-rank communicator", "refused");
    if (c) {
        CHECK(ncclAllReduce(buf, buf, 8, 3 /* ncclInt64? not supported here */, SUM, c, NULL) == ERR_INVALID,
              "refused: a datatype other than fp32, fp64, bf16", "accepted");
        CHECK(ncclAllReduce(buf, buf, 8, F32, 1 /* prod */, c, NULL) == ERR_INVALID, "refused: a reduction other than sum", "accepted");
        CHECK(ncclAllReduce(buf, buf, 8, F32, SUM, c, NULL) == OK, "a valid all-reduce on 1 rank", "refused");
        ncclCommDestroy(c);
    }
    /* two_ranks runs before CHECK reads a and b (a function's arguments have no evaluation order) */
    int a = -1, b = -1;
    int ran = two_ranks(8, 8, &a, &b);
    CHECK(ran == 0 && a == 0 && b == 0, "2 ranks, the same all-reduce: accepted",
          "two_ranks %d, exit codes %d %d (1 refused, 2 another error, 3 killed by a signal)", ran, a, b);
    a = b = -1;
    ran = two_ranks(8, 16, &a, &b);
    CHECK(ran == 0 && a == 1 && b == 1, "2 ranks, all-reduces of 8 and 16 elements: refused on both",
          "two_ranks %d, exit codes %d %d (1: refused with ncclInvalidUsage)", ran, a, b);
    TEST_EXIT();
}
