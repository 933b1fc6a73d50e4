#!/usr/bin/env bash
# nvrtc_mock_ep.sh: the CUDA backend's expert parallelism without a GPU. tiny-cola-moe at dp=2 x ep=2
# (tp=1: 2 processes; tp=2: 4), dp=4 x ep=2 x tp=1 (edp groups of two) and dp=2 x ep=2 x pp=2 (each
# stage's ep groups; NCCL send/recv between the stages) train as one process per rank on the
# libcuda/cuBLAS and NCCL stand-ins
# (the ep all-to-all as grouped ncclSend/ncclRecv on the ep communicator, the expert gradients summed
# over the edp group); losses and gradient norms must match the CPU backend's threaded run of the same
# plan within the bf16 tolerances of nvrtc_mock_dp.sh. The NCCL stand-in's point-to-point calls are
# checked directly: grouped sends and receives arrive in issue order, a mismatched count is refused.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log" ||
   ! cc -O1 -shared -fPIC tests/gpu/mock_nccl.c -o "$TMP/mock_nccl.so" -lrt 2>>"$TMP/cc.log"; then
  fail "build the CUDA and NCCL stand-ins" "$(head -3 "$TMP/cc.log")"; exit 0
fi

# ---- the stand-in's ncclSend/ncclRecv, two processes (no CUDA stand-in: the calls run at once) ----
cat >"$TMP/p2p.c" <<'C'
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
typedef struct { char internal[128]; } Id;
typedef struct Comm Comm;
static int (*get_id)(Id *), (*init)(Comm **, int, Id, int), (*gs)(void), (*ge)(void);
static int (*snd)(const void *, size_t, int, int, Comm *, void *), (*rcv)(void *, size_t, int, int, Comm *, void *);
/* mode 0: each rank sends two blocks to each rank (itself too) in one group and receives two from each;
 * mode 1: rank 0 sends 10 floats, rank 1 receives 12. Exit 0 when the data (mode 0) or the refusal (mode 1) is right. */
static int rank_main(Id id, int me, int mode) {
    Comm *c;
    if (init(&c, 2, id, me)) return 10;
    if (mode == 1) {
        float x[12] = {0};
        if (me == 0) return snd(x, 10, 7, 1, c, NULL) != 0;
        return rcv(x, 12, 7, 0, c, NULL) == 0;   /* must fail */
    }
    float out[2][2][4], in[2][2][4];
    for (int q = 0; q < 2; q++) for (int j = 0; j < 2; j++) for (int k = 0; k < 4; k++) out[q][j][k] = 100 * me + 10 * q + j + 0.25f * k;
    gs();
    for (int q = 0; q < 2; q++) for (int j = 0; j < 2; j++) {
        if (snd(out[q][j], 4, 7, q, c, NULL) || rcv(in[q][j], 4, 7, q, c, NULL)) return 11;
    }
    if (ge()) return 12;
    for (int q = 0; q < 2; q++) for (int j = 0; j < 2; j++) for (int k = 0; k < 4; k++)
        if (in[q][j][k] != 100 * q + 10 * me + j + 0.25f * k) return 13;   /* q's j-th block for me */
    return 0;
}
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) return 20;
    *(void **)&get_id = dlsym(h, "ncclGetUniqueId"); *(void **)&init = dlsym(h, "ncclCommInitRank");
    *(void **)&gs = dlsym(h, "ncclGroupStart"); *(void **)&ge = dlsym(h, "ncclGroupEnd");
    *(void **)&snd = dlsym(h, "ncclSend"); *(void **)&rcv = dlsym(h, "ncclRecv");
    if (!get_id || !init || !gs || !ge || !snd || !rcv) return 21;
    int mode = atoi(argv[2]);
    Id id;
    get_id(&id);
    pid_t pid = fork();
    if (pid == 0) _exit(rank_main(id, 1, mode));
    int rc0 = rank_main(id, 0, mode), st = 0;
    waitpid(pid, &st, 0);
    printf("rank0 %d rank1 %d\n", rc0, WIFEXITED(st) ? WEXITSTATUS(st) : 99);
    return rc0 || !WIFEXITED(st) || WEXITSTATUS(st);
}
C
if ! cc -O1 "$TMP/p2p.c" -o "$TMP/p2p" -ldl 2>"$TMP/p2p.cc"; then
  fail "build the point-to-point check" "$(head -3 "$TMP/p2p.cc")"
else
  export MOCK_NCCL_TIMEOUT=20
  timeout 60 "$TMP/p2p" "$TMP/mock_nccl.so" 0 >"$TMP/p2p0.out" 2>&1 && ok "stand-in ncclSend/ncclRecv: a group of 2 sends and 2 receives per peer (self too) arrives in issue order" \
    || fail "stand-in grouped ncclSend/ncclRecv" "$(tail -2 "$TMP/p2p0.out")"
  timeout 60 "$TMP/p2p" "$TMP/mock_nccl.so" 1 >"$TMP/p2p1.out" 2>&1
  if grep -q "rank0 0 rank1 0" "$TMP/p2p1.out" && grep -q "ncclRecv of 12 elements (datatype 7) from rank 0 met its ncclSend of 10 elements" "$TMP/p2p1.out"
  then ok "stand-in ncclSend/ncclRecv: a receive of 12 elements meeting a send of 10 is refused with a message"
  else fail "stand-in mismatched ncclSend/ncclRecv" "$(tail -3 "$TMP/p2p1.out")"; fi
fi

# ---- training: the CUDA backend on the stand-ins against the CPU backend's threads ----
gen() {   # gen NAME -D ...: a tiny-cola-moe plan
  local name=$1; shift
  "$BOOST" gen specs/runs/tiny-cola-moe.lua -D micro_batch=1 -D seq=16 "$@" -o "$TMP/$name" >"$TMP/gen.log" 2>&1 ||
    { fail "generate tiny-cola-moe $*" "$(tail -2 "$TMP/gen.log")"; exit 0; }
}
gen e2t1 -D dp=2 -D ep=2 -D tp=1
gen e2p2 -D dp=2 -D ep=2 -D tp=1 -D pp=2 -D grad_accum=4
gen e2t2 -D dp=2 -D ep=2 -D tp=2
gen d4e2 -D dp=4 -D ep=2 -D tp=1
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_LIBNCCL="$TMP/mock_nccl.so"
export BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}" BOOST_EMU_CACHE="${BOOST_EMU_CACHE:-$TMP/emu}" BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp"
export BOOST_NCCL_TIMEOUT=120 MOCK_NCCL_TIMEOUT=120
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS BOOST_RANK BOOST_WORLD_SIZE BOOST_NCCL_ID_FILE
steps=2   # step 1's loss and gradient norm (all-to-alls both ways, the edp reduction), step 2's after the update

# world PLAN N: N processes on the stand-ins (lib.sh's launch_world), logging to $TMP/PLAN.w.jsonl
world() {
  BOOST_EMU_SOURCE="$TMP/$1/kernels.cu" launch_world $2 "$TMP/$1.w" train --plan "$TMP/$1" --backend cuda --val-batches 1 -D steps=$steps
}
field() { grep "\"step\":$3[,}]" "$1" | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p"; }
# close A.jsonl B.jsonl FIELD RELTOL: every step's FIELD within RELTOL relative (empty or NaN fails)
close() {
  detail=""
  for s in $(seq 1 $steps); do
    local a b; a=$(field "$1" "$3" $s); b=$(field "$2" "$3" $s)
    awk -v a="$a" -v b="$b" -v t="$4" 'BEGIN { d = a - b; if (d < 0) d = -d; m = a < 0 ? -a : a
      exit !(a != "" && b != "" && d <= t * m) }' || detail="$detail step $s $3: $a vs $b;"
  done
  [ -z "$detail" ]
}
for spec in "e2t1 2 dp=2 x ep=2 x tp=1" "e2t2 4 dp=2 x ep=2 x tp=2" "d4e2 4 dp=4 x ep=2 x tp=1" "e2p2 4 dp=2 x ep=2 x pp=2"; do
  set -- $spec
  plan=$1 n=$2; shift 2
  "$BOOST" train --plan "$TMP/$plan" --backend cpu --val-batches 1 -D steps=$steps --log "$TMP/$plan.cpu.jsonl" \
    >"$TMP/$plan.cpu.out" 2>&1 || { fail "cpu reference $plan" "$(tail -2 "$TMP/$plan.cpu.out")"; continue; }
  start=$(date +%s)
  world $plan $n
  took=$(( $(date +%s) - start ))
  if [ "$rc" != 0 ]; then fail "tiny-cola-moe $* as $n processes on the stand-ins" "exit $rc: $(tail -2 "$TMP/$plan.w.0.out") $(tail -1 "$TMP/$plan.w.1.out")"; continue; fi
  if close "$TMP/$plan.cpu.jsonl" "$TMP/$plan.w.jsonl" loss 2e-3 && close "$TMP/$plan.cpu.jsonl" "$TMP/$plan.w.jsonl" grad_norm 2e-2
  then ok "tiny-cola-moe $* as $n processes on the stand-ins: losses and gradient norms match the cpu backend's threads (${took}s)"
  else fail "tiny-cola-moe $* as $n processes vs the cpu backend" "$detail"; fi
done
