/* test_mock_nccl_split.c: the NCCL stand-in's data-parallel calls (tests/gpu/mock_nccl.c, compiled
 * in): four processes split their world communicator into tp groups {0,1} {2,3} and dp groups {0,2}
 * {1,3} as runtime/grid.h orders them (dp=2 x tp=2), then a reduce-scatter with ncclAvg and an
 * all-gather on the dp group must give the values worked out by hand below; and the refusals: a
 * reduction other than sum/avg, a reduce-scatter whose output overlaps its input elsewhere than its
 * own block, a split while collectives are queued, NCCL_SPLIT_NOCOLOR (no communicator). Without the
 * CUDA stand-in the collectives run at the call. */
#include <sys/wait.h>
#include "tests/gpu/mock_nccl.c"
#include "tests/unit/testlib.h"

/* Rank r (0..3) of the world: exit code 0 when every check passed, else the number of the first
 * failed check. */
static int world_rank(ncclUniqueId id, int r) {
    Comm *w = NULL, *tp = NULL, *dp = NULL, *none = (Comm *)1;
    if (ncclCommInitRank(&w, 4, id, r) != OK) return 10;
    int tp_first = r / 2 * 2, dp_first = r % 2;   /* grid.h: tp fastest; colour = the group's first member */
    if (ncclCommSplit(w, tp_first, r % 2, &tp, NULL) != OK || !tp) return 11;
    if (ncclCommSplit(w, dp_first, r / 2, &dp, NULL) != OK || !dp) return 12;
    if (tp->nranks != 2 || tp->rank != r % 2 || dp->nranks != 2 || dp->rank != r / 2) return 13;
    if (ncclCommSplit(w, r == 3 ? -1 : 0, 0, &none, NULL) != OK) return 14;
    if ((r == 3) != (none == NULL)) return 15;
    /* reduce-scatter, avg over dp: rank r sends x[i] = 10*r + i, i < 4 (2 per member); member d of
     * the dp group receives elements [2d, 2d+2) of the mean of its two members' x */
    float x[4], got[2];
    for (int i = 0; i < 4; i++) x[i] = (float)(10 * r + i);
    if (ncclReduceScatter(x, got, 2, F32, AVG, dp, NULL) != OK) return 16;
    int peer = dp->rank == 0 ? r + 2 : r - 2, d = dp->rank;
    for (int i = 0; i < 2; i++) {
        float want = ((float)(10 * r + 2 * d + i) + (float)(10 * peer + 2 * d + i)) * 0.5f;
        if (!(got[i] == want)) return 17;
    }
    /* all-gather on the tp group: each member's 3 values, in tp rank order */
    float mine[3] = {(float)r, (float)r + 0.5f, (float)r + 0.25f}, all[6];
    if (ncclAllGather(mine, all, 3, F32, tp, NULL) != OK) return 18;
    for (int q = 0; q < 2; q++)
        for (int i = 0; i < 3; i++)
            if (!(all[3 * q + i] == (float)(tp_first + q) + (i == 1 ? 0.5f : i == 2 ? 0.25f : 0.f))) return 19;
    /* all-reduce, avg over the world in bf16: values 1, 2, 3, 4 -> 2.5 */
    uint16_t h = bf16_out((float)(r + 1));
    if (ncclAllReduce(&h, &h, 1, BF16, AVG, w, NULL) != OK || !(bf16_in(h) == 2.5f)) return 20;
    /* refusals */
    if (ncclAllReduce(x, x, 4, F32, 2 /* max */, w, NULL) != ERR_INVALID) return 21;
    if (ncclReduceScatter(x, x + 1, 2, F32, SUM, dp, NULL) != ERR_INVALID) return 22;   /* not its own block */
    if (ncclCommSplit(NULL, 0, 0, &none, NULL) != ERR_INVALID) return 23;
    if (ncclCommSplit(w, -2, 0, &none, NULL) != ERR_INVALID) return 24;
    return 0;
}

int main(void) {
    setenv("MOCK_NCCL_TIMEOUT", "20", 1);
    unsetenv("BOOST_LIBCUDA");
    ncclUniqueId id;
    CHECK(ncclGetUniqueId(&id) == OK, "a unique id", "ncclGetUniqueId failed");
    pid_t pid[4];
    for (int r = 0; r < 4; r++) {
        pid[r] = fork();
        if (pid[r] == 0) _exit(world_rank(id, r));
    }
    for (int r = 0; r < 4; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 100;
        CHECK(code == 0, "rank of a dp=2 x tp=2 world: split, reduce-scatter (avg), all-gather, bf16 avg and the refusals",
              "rank %d failed check %d (see world_rank; 100: killed by a signal)", r, code);
    }
    /* a split with a collective queued on the parent: refused (through the enqueue hook's bookkeeping) */
    ncclGetUniqueId(&id);
    Comm *c = NULL, *child = NULL;
    CHECK(ncclCommInitRank(&c, 1, id, 0) == OK, "a 1-rank communicator", "refused");
    if (c) {
        c->pending = 1;   /* as while a collective waits on a stream */
        CHECK(ncclCommSplit(c, 0, 0, &child, NULL) == ERR_USAGE, "refused: ncclCommSplit with work queued", "accepted");
        c->pending = 0;
        CHECK(ncclCommSplit(c, 0, 0, &child, NULL) == OK && child && child->nranks == 1, "a split of a 1-rank communicator",
              "refused");
        if (child) ncclCommDestroy(child);
        ncclCommDestroy(c);
    }
    TEST_EXIT();
}
