#!/usr/bin/env bash
# nvrtc_mock_nccl.sh: the CUDA backend's multi-process mode (one process per GPU, NCCL) without a
# GPU. tiny-cola at tp=2 trains as two processes (BOOST_WORLD_SIZE=2, BOOST_RANK=0/1) on the
# libcuda/cuBLAS stand-in (tests/gpu/mock_cuda.c) and an NCCL stand-in (tests/gpu/mock_nccl.c,
# shared memory between the processes); its losses, gradient norms and checkpoint must equal the
# single-process local-mode run at tp=2 on the same stand-in, the checkpoint must resume in one
# process, and the error cases must say what is wrong; when a peer dies in a collective (the stand-in
# kills it), the survivor exits 1 with a message instead of hanging, printing its flight record; without the waits for the
# collectives (BOOST_TEST_SKIP_COLL_WAIT=1) the run goes wrong. The restated NCCL API is checked
# against nccl.h.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
CUDA_INC=${CUDA_HOME:-/usr/local/cuda}/include
if [ -f "$CUDA_INC/nccl.h" ]; then
  if cc -std=gnu11 -Wall -Wextra -Werror -I. -I"$CUDA_INC" -fsyntax-only tests/gpu/check_nccl_api.c 2>"$TMP/api.log"
  then ok "nccl_api_matches_nccl_h"; else fail "nccl_api_matches_nccl_h" "$(grep error "$TMP/api.log" | head -2)"; fi
else echo "ok - nccl_api_matches_nccl_h # SKIP nccl.h is not installed"; fi
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log" ||
   ! cc -O1 -shared -fPIC tests/gpu/mock_nccl.c -o "$TMP/mock_nccl.so" -lrt 2>>"$TMP/cc.log"; then
  fail "build the CUDA and NCCL stand-ins" "$(head -3 "$TMP/cc.log")"; exit 0
fi
if ! "$BOOST" gen tiny-cola -D tp=2 -D micro_batch=1 -D seq=16 -o "$TMP/cola2" >"$TMP/gen.log" 2>&1; then
  fail "generate tiny-cola tp=2" "$(tail -2 "$TMP/gen.log")"; exit 0
fi
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_LIBNCCL="$TMP/mock_nccl.so"
export BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}" BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp" BOOST_EMU_SOURCE="$TMP/cola2/kernels.cu"
export BOOST_NCCL_TIMEOUT=120 MOCK_NCCL_TIMEOUT=120
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS BOOST_RANK BOOST_WORLD_SIZE BOOST_NCCL_ID_FILE
train=(train --plan "$TMP/cola2" --backend cuda --val-batches 1)

# the reference: one process, local mode, 4 steps with a checkpoint after step 3
timeout 600 "$BOOST" "${train[@]}" -D steps=4 --save-every 3 -o "$TMP/local" --log "$TMP/local.jsonl" >"$TMP/local.out" 2>&1
rc=$?
if [ "$rc" != 0 ]; then fail "local mode tp=2 on the stand-in" "exit $rc: $(tail -2 "$TMP/local.out")"; exit 0; fi

# two processes, 3 steps; rank 1 starts first and waits for rank 0's NCCL id
BOOST_WORLD_SIZE=2 BOOST_RANK=1 timeout 600 "$BOOST" "${train[@]}" -D steps=3 -o "$TMP/world" --ckpt-format full --log "$TMP/w1.jsonl" \
  >"$TMP/w1.out" 2>"$TMP/w1.err" &
pid1=$!
BOOST_WORLD_SIZE=2 BOOST_RANK=0 timeout 600 "$BOOST" "${train[@]}" -D steps=3 -o "$TMP/world" --ckpt-format full --log "$TMP/w0.jsonl" \
  >"$TMP/w0.out" 2>&1
rc0=$?
wait $pid1
rc1=$?
if [ "$rc0" = 0 ] && [ "$rc1" = 0 ]; then ok "tiny-cola tp=2 as two processes on the stand-ins"
else fail "tiny-cola tp=2 as two processes" "exit $rc0/$rc1: $(tail -2 "$TMP/w0.out") $(tail -2 "$TMP/w1.err")"; exit 0; fi

# field FIELD of the log line of step N
field() { grep "\"step\":$3[,}]" "$1" | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p"; }
same=1; detail=""
for s in 1 2 3; do
  for f in loss grad_norm; do
    a=$(field "$TMP/local.jsonl" $f $s); b=$(field "$TMP/w0.jsonl" $f $s)
    if [ -z "$a" ] || [ -z "$b" ] || ! awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-4 * (a < 0 ? -a : a) + 1e-6) }'
    then same=0; detail="$detail step $s $f: local $a, two processes $b;"; fi
  done
done
v0=$(field "$TMP/local.jsonl" val_loss 0); w0=$(field "$TMP/w0.jsonl" val_loss 0)
[ -n "$v0" ] && [ "$v0" = "$w0" ] || { same=0; detail="$detail initial val_loss $v0 vs $w0"; }
if [ "$same" = 1 ]; then ok "two processes: losses and gradient norms of 3 steps equal the local-mode run"
else fail "two processes vs local mode" "$detail"; fi

if cmp -s "$TMP/local/step-000003/model.safetensors" "$TMP/world/step-000003/model.safetensors" &&
   cmp -s "$TMP/local/step-000003/optimizer.safetensors" "$TMP/world/step-000003/optimizer.safetensors"
then ok "two processes: rank 0's checkpoint (gathered over NCCL) equals the local-mode checkpoint byte for byte"
else fail "two processes: checkpoint" "step-000003 differs from the local-mode one (or is missing)"; fi

if [ ! -s "$TMP/w1.out" ] && [ ! -e "$TMP/w1.jsonl" ] && grep -q '^step 3/3' "$TMP/w0.out" && [ ! -e "$TMP/world/.nccl-0.id" ]
then ok "two processes: only rank 0 prints and logs; the NCCL id file is gone"
else fail "two processes: output" "rank 1 wrote $(wc -c <"$TMP/w1.out") bytes, log $( [ -e "$TMP/w1.jsonl" ] && echo present || echo absent); id file $(ls -a "$TMP/world" | tr '\n' ' ')"; fi

# the 2-process checkpoint resumes in one process: step 4 as in the uninterrupted local run
timeout 600 "$BOOST" "${train[@]}" -D steps=4 --resume "$TMP/world" --log "$TMP/resumed.jsonl" >"$TMP/resumed.out" 2>&1
rc=$?
a=$(field "$TMP/local.jsonl" loss 4); b=$(field "$TMP/resumed.jsonl" loss 4)
if [ "$rc" = 0 ] && [ -n "$a" ] && [ "$a" = "$b" ]; then ok "the two-process checkpoint resumes in one process (step 4 loss $b as uninterrupted)"
else fail "resume the two-process checkpoint" "exit $rc, step 4 loss $b vs uninterrupted $a: $(tail -2 "$TMP/resumed.out")"; fi

# the default storage with two processes is sharded: each process writes its own rank file (no
# gather), the barriers and the CRC exchange go over NCCL; merged, it holds the local run's tensors
BOOST_WORLD_SIZE=2 BOOST_RANK=1 timeout 600 "$BOOST" "${train[@]}" -D steps=3 -o "$TMP/sworld" >"$TMP/s1.out" 2>&1 &
pid1=$!
BOOST_WORLD_SIZE=2 BOOST_RANK=0 timeout 600 "$BOOST" "${train[@]}" -D steps=3 -o "$TMP/sworld" >"$TMP/s0.out" 2>&1
rc0=$?
wait $pid1
rc1=$?
"$BOOST" ckpt merge "$TMP/sworld/step-000003" --optimizer -o "$TMP/smerged.safetensors" >"$TMP/smerge.out" 2>&1
rcm=$?
if [ "$rc0$rc1$rcm" = 000 ] && grep -q '"storage": "sharded"' "$TMP/sworld/step-000003/state.json" && python3 - "$TMP" <<'EOF'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
    return {k: d[v['data_offsets'][0]:v['data_offsets'][1]] for k, v in h.items() if k != '__metadata__'}
t = sys.argv[1]
a = load(t + '/smerged.safetensors')
b = load(t + '/local/step-000003/model.safetensors'); b.update(load(t + '/local/step-000003/optimizer.safetensors'))
sys.exit(0 if a and a == b else 1)
EOF
then ok "two processes, sharded checkpoint: merged, the local-mode checkpoint's tensors bit for bit"
else fail "two processes, sharded checkpoint" "exit $rc0/$rc1/merge $rcm: $(tail -2 "$TMP/s0.out") $(tail -2 "$TMP/s1.out") $(cat "$TMP/smerge.out")"; fi

# errors
BOOST_WORLD_SIZE=3 BOOST_RANK=0 "$BOOST" "${train[@]}" -D steps=1 >"$TMP/e1.out" 2>&1
rc=$?
if [ "$rc" = 2 ] && grep -q "world of 3 processes but the plan's grid is dp 1 x pp 1 x tp 2 = 2" "$TMP/e1.out"; then ok "world size != tp: clear error"
else fail "world size != tp" "exit $rc: $(tail -2 "$TMP/e1.out")"; fi
BOOST_WORLD_SIZE=2 BOOST_RANK=0 "$BOOST" train --plan "$TMP/cola2" --backend cpu -D steps=1 >"$TMP/e2.out" 2>&1
rc=$?
if [ "$rc" = 1 ] && grep -q 'cpu backend runs one process per rank only under Open MPI.s mpirun; launch with mpirun, or one process' "$TMP/e2.out"
then ok "a world with --backend cpu: clear error"; else fail "a world with --backend cpu" "exit $rc: $(tail -2 "$TMP/e2.out")"; fi
start=$(date +%s)
BOOST_WORLD_SIZE=2 BOOST_RANK=1 BOOST_NCCL_TIMEOUT=2 BOOST_NCCL_ID_FILE="$TMP/never.id" \
  timeout 300 "$BOOST" "${train[@]}" -D steps=1 >"$TMP/e3.out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
if [ "$rc" = 1 ] && grep -q "never.id: rank 1 waited 2 s for rank 0's NCCL id and none appeared" "$TMP/e3.out"
then ok "no NCCL id file: rank 1 gives up after BOOST_NCCL_TIMEOUT with a clear message"
else fail "no NCCL id file" "exit $rc after ${took}s: $(tail -2 "$TMP/e3.out")"; fi
BOOST_WORLD_SIZE=2 BOOST_RANK=2 "$BOOST" "${train[@]}" -D steps=1 >"$TMP/e4.out" 2>&1
rc=$?
if [ "$rc" = 1 ] && grep -q 'BOOST_RANK=2 BOOST_WORLD_SIZE=2: expected a rank 0..size-1' "$TMP/e4.out"
then ok "a rank outside the world: clear error"; else fail "a rank outside the world" "exit $rc: $(tail -2 "$TMP/e4.out")"; fi

# a peer dies in a collective: the survivor must end (exit 1, naming its rank and what to do) instead
# of hanging in the next collective; MOCK_NCCL_KILL_AT=3 kills rank 1 as its third collective starts
peer_dies() {   # peer_dies NAME [ENV=VALUE ...] (for both ranks): runs the pair, sets rc0 and took
  local name=$1; shift
  local start=$(date +%s)
  env "$@" BOOST_WORLD_SIZE=2 BOOST_RANK=1 MOCK_NCCL_KILL_AT=3 timeout 60 "$BOOST" "${train[@]}" -D steps=2 \
    -o "$TMP/$name" >/dev/null 2>"$TMP/$name.1.err" &
  local pid=$!
  env "$@" BOOST_WORLD_SIZE=2 BOOST_RANK=0 timeout 60 "$BOOST" "${train[@]}" -D steps=2 -o "$TMP/$name" \
    >"$TMP/$name.0.out" 2>&1
  rc0=$?
  took=$(( $(date +%s) - start ))
  wait $pid 2>/dev/null
}
peer_dies dies
if [ "$rc0" = 1 ] && [ "$took" -lt 20 ] && grep -q "rank 0 of 2: NCCL reports .* NCCL was aborted and this rank stops. Another rank has probably died" "$TMP/dies.0.out"
then ok "a peer dies in a collective: rank 0 notices through ncclCommGetAsyncError, aborts and exits 1 in ${took}s"
else fail "a peer dies in a collective" "exit $rc0 after ${took}s (want 1 within 20 s): $(tail -2 "$TMP/dies.0.out")"; fi
peer_dies silent MOCK_NCCL_SILENT_DEATH=1 BOOST_NCCL_TIMEOUT=3
if [ "$rc0" = 1 ] && [ "$took" -lt 20 ] && grep -q "rank 0 of 2: .* did not finish within 3 s (BOOST_NCCL_TIMEOUT" "$TMP/silent.0.out"
then ok "a peer dies and NCCL reports nothing: rank 0 gives up after BOOST_NCCL_TIMEOUT=3 s, aborts and exits 1 (${took}s)"
else fail "a peer dies silently" "exit $rc0 after ${took}s (want 1 within 20 s): $(tail -2 "$TMP/silent.0.out")"; fi

# the survivor prints its flight record (runtime/flight.h): its last collectives and steps, and the
# one it waited on when the peer was gone
for name in dies silent; do
  if grep -q "flight record of rank 0 of 2: its last" "$TMP/$name.0.out" \
     && grep -q "rank 0 of 2 waited on .* (group [a-z]*, [0-9]* bytes), started" "$TMP/$name.0.out" \
     && grep -q "NOT DONE after .* <- waiting on this one" "$TMP/$name.0.out"
  then ok "$name: the survivor's flight record names the collective it waited on ($(grep -o 'waited on [^(]*' "$TMP/$name.0.out" | head -1))"
  else fail "$name: the survivor's flight record" "$(grep -i 'flight\|waited' "$TMP/$name.0.out" | head -3)"; fi
done

# the stand-ins catch a missing wait for a collective in this mode too (the executor leaves them out)
BOOST_TEST_SKIP_COLL_WAIT=1 BOOST_WORLD_SIZE=2 BOOST_RANK=1 timeout 120 "$BOOST" "${train[@]}" -D steps=2 -o "$TMP/skip" \
  >/dev/null 2>&1 &
pid=$!
BOOST_TEST_SKIP_COLL_WAIT=1 BOOST_WORLD_SIZE=2 BOOST_RANK=0 timeout 120 "$BOOST" "${train[@]}" -D steps=2 -o "$TMP/skip" \
  --log "$TMP/skip.jsonl" >"$TMP/skip.out" 2>&1
rc=$?
wait $pid 2>/dev/null
a=$(field "$TMP/local.jsonl" loss 1); b=$( [ -e "$TMP/skip.jsonl" ] && field "$TMP/skip.jsonl" loss 1)
if [ "$rc" != 0 ] || [ "$a" != "$b" ]; then ok "two processes without the waits for the collectives: caught (exit $rc, step 1 loss '$b' vs $a)"
else fail "a missing wait in the two-process mode goes unnoticed" "exit 0 and step 1 loss $b as with the waits"; fi
