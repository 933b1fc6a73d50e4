#!/usr/bin/env bash
# nvrtc_mock_stop.sh: stopping together in a world of one process per GPU (BOOST_WORLD_SIZE/
# BOOST_RANK) on the libcuda/cuBLAS and NCCL stand-ins, tiny-cola at tp=2: SIGTERM to rank 1 only
# stops both ranks after the same step (the stop flag is summed over the world with NCCL), both exit
# 143 within 60 s, and the checkpoint they save together verifies.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log" ||
   ! cc -O1 -shared -fPIC tests/gpu/mock_nccl.c -o "$TMP/mock_nccl.so" -lrt 2>>"$TMP/cc.log"; then
  fail "build the CUDA and NCCL stand-ins" "$(head -3 "$TMP/cc.log")"; exit 0
fi
if ! "$BOOST" gen tiny-cola -D tp=2 -D micro_batch=1 -D seq=16 -o "$TMP/cola2" >"$TMP/gen.log" 2>&1; then
  fail "generate tiny-cola tp=2" "$(tail -2 "$TMP/gen.log")"; exit 0
fi
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_LIBNCCL="$TMP/mock_nccl.so"
export BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}" BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp" BOOST_EMU_SOURCE="$TMP/cola2/kernels.cu"
export BOOST_EMU_CACHE="${BOOST_EMU_CACHE:-$TMP/emu}" BOOST_NCCL_TIMEOUT=120 MOCK_NCCL_TIMEOUT=120
unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE SLURM_PROCID SLURM_NTASKS BOOST_RANK BOOST_WORLD_SIZE BOOST_NCCL_ID_FILE

out=$TMP/w
( launch_world 2 "$out" train --plan "$TMP/cola2" --backend cuda --val-batches 1 -D steps=100000 -D eval_every=0 --quiet
  echo "$rc" >"$TMP/rc" ) &
world=$!
victim=
for _ in $(seq 1200); do
  if grep -q '"step":2' "$out.jsonl" 2>/dev/null; then
    for p in $(pgrep -f "$TMP/cola2"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'BOOST_RANK=1' && [ "$(cat /proc/$p/comm)" = boost ] && victim=$p
    done
    [ -n "$victim" ] && break
  fi
  kill -0 $world 2>/dev/null || break
  sleep 0.1
done
if [ -z "$victim" ]; then
  fail nccl_world_stops_together "rank 1 never reached step 2: $(tail -2 "$out.0.out" "$out.1.out" 2>/dev/null | tr '\n' ' ')"
  wait $world; exit 0
fi
kill -TERM "$victim"
for _ in $(seq 600); do kill -0 $world 2>/dev/null || break; sleep 0.1; done
if kill -0 $world 2>/dev/null; then
  fail nccl_world_stops_together "the ranks still run 60 s after SIGTERM to rank 1"
  kill -9 $(pgrep -f "$TMP/cola2") 2>/dev/null; wait $world; exit 0
fi
wait $world
rc=$(cat "$TMP/rc")
ck=$(ls -d "$out"/step-* 2>/dev/null | tail -1)
if [ "$rc" = "143/143" ] && [ -n "$ck" ] && "$BOOST" ckpt verify "$ck" >"$TMP/v.out" 2>&1; then
  ok nccl_world_stops_together; echo "#   both ranks exit 143; $(basename "$ck") verifies"
else
  fail nccl_world_stops_together "statuses $rc, checkpoint '${ck##*/}': $(tail -1 "$TMP/v.out" 2>/dev/null) $(tail -2 "$out.1.out")"
fi
