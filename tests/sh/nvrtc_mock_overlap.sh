#!/usr/bin/env bash
# nvrtc_mock_overlap.sh: the CUDA backend's collectives on a stream of their own and its host waits,
# without a GPU, on the libcuda/cuBLAS stand-in (tests/gpu/mock_cuda.c). The stand-in runs queued
# work only when the host demands it, stream by stream, so a step that does not wait for a collective
# reads its buffer before the collective ran. Checks: a tp=1 training step of tiny-cola makes the host
# wait at most twice (the loss and the gradient norm; tests/gpu/check_syncs.c), with no blocking
# copy; tiny-cola at tp=2 (local mode) matches the CPU backend with the overlap, with
# BOOST_NO_OVERLAP=1 and with BOOST_CUDA_SYNC=1, and does not when the executor leaves the waits out
# (BOOST_TEST_SKIP_COLL_WAIT=1): the stand-in catches a missing wait. BOOST_CUDA_GRAPH=1 at tp=1
# (passes replayed as CUDA graphs; the stand-in records a capture and replays copies of it, and a
# host wait inside a capture breaks it): the same loss bit for bit with far fewer launches per step,
# and 3 steps against the CPU backend.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! bash tests/gpu/build.sh >"$TMP/build.log" 2>&1; then fail "tests/gpu/build.sh" "$(tail -3 "$TMP/build.log")"; exit 0; fi
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log"; then
  fail "build the CUDA stand-in" "$(head -3 "$TMP/cc.log")"; exit 0
fi
for tp in 1 2; do
  if ! "$BOOST" gen tiny-cola -D tp=$tp -D micro_batch=1 -D seq=16 -o "$TMP/cola$tp" >"$TMP/gen.log" 2>&1; then
    fail "generate tiny-cola tp=$tp" "$(tail -2 "$TMP/gen.log")"; exit 0
  fi
done
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}"
export BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp"
unset BOOST_NO_OVERLAP BOOST_CUDA_SYNC BOOST_TEST_SKIP_COLL_WAIT

BOOST_EMU_SOURCE="$TMP/cola1/kernels.cu" timeout 300 build/gpu/check_syncs "$TMP/cola1" --steps 2 >"$TMP/syncs.log" 2>&1
rc=$?
if [ "$rc" = 0 ] && grep -q '^ok - ' "$TMP/syncs.log"; then ok "host waits per step: $(sed -n 's/^ok - [^:]*: //p' "$TMP/syncs.log")"
else fail "host waits per tp=1 training step" "exit $rc: $(grep -v '^boost: compiling' "$TMP/syncs.log" | head -3)"; fi

# CUDA graphs at tp=1: two warm-up steps (plain, then captured), then replays
graph_run() {   # graph_run 0|1: sets glaunch and gloss
  BOOST_CUDA_GRAPH=$1 BOOST_EMU_SOURCE="$TMP/cola1/kernels.cu" timeout 300 build/gpu/check_syncs "$TMP/cola1" --warmup 2 \
    --steps 2 >"$TMP/graph$1.log" 2>&1
  glaunch=$(sed -n 's/^# launches \([0-9]*\) loss .*/\1/p' "$TMP/graph$1.log")
  gloss=$(sed -n 's/^# launches [0-9]* loss \(.*\)/\1/p' "$TMP/graph$1.log")
}
graph_run 0; plain_launch=$glaunch; plain_loss=$gloss
graph_run 1
if [ -n "$glaunch" ] && [ -n "$plain_launch" ] && [ -n "$gloss" ] && [ "$gloss" = "$plain_loss" ] &&
   [ "$glaunch" -lt $(( plain_launch / 3 )) ] && grep -q '^ok - ' "$TMP/graph1.log"
then ok "BOOST_CUDA_GRAPH=1: loss $gloss as without graphs, $glaunch launches per step instead of $plain_launch, host waits as before"
else fail "BOOST_CUDA_GRAPH=1" "launches $glaunch vs $plain_launch, loss $gloss vs $plain_loss: $(grep -v '^boost: compiling' "$TMP/graph1.log" | head -2)"; fi
BOOST_CUDA_GRAPH=1 BOOST_EMU_SOURCE="$TMP/cola1/kernels.cu" timeout 300 build/gpu/check model "$TMP/cola1" --steps 3 \
  >"$TMP/graphmodel.log" 2>&1
rc=$?
n=$(grep -c '^ok - ' "$TMP/graphmodel.log")
if [ "$rc" = 0 ] && [ "$n" -ge 5 ]; then ok "BOOST_CUDA_GRAPH=1 at tp=1: 3 training steps match the CPU backend, repeat bit-identically"
else fail "BOOST_CUDA_GRAPH=1 against cpu" "exit $rc, $n checks ok: $(grep '^FAIL' "$TMP/graphmodel.log" | head -2)"; fi

# tp=2 against the CPU backend (losses, gradients, a repeat bit-identical)
model() {   # model NAME STEPS [ENV=VALUE ...]: check model, sets rc and n (the number of ok lines)
  local name=$1 steps=$2; shift 2
  env "$@" BOOST_EMU_SOURCE="$TMP/cola2/kernels.cu" timeout 300 build/gpu/check model "$TMP/cola2" --steps $steps \
    >"$TMP/$name.log" 2>&1
  rc=$?
  n=$(grep -c '^ok - ' "$TMP/$name.log")
}
model overlap 2
if [ "$rc" = 0 ] && [ "$n" -ge 4 ]; then ok "tp=2 with the collectives overlapped matches the CPU backend ($n checks)"
else fail "tp=2 with the collectives overlapped" "exit $rc: $(grep '^FAIL' "$TMP/overlap.log" | head -2)"; fi
model nooverlap 1 BOOST_NO_OVERLAP=1
if [ "$rc" = 0 ] && [ "$n" -ge 3 ]; then ok "tp=2 with BOOST_NO_OVERLAP=1 (each collective waited for at once) matches the CPU backend"
else fail "tp=2 with BOOST_NO_OVERLAP=1" "exit $rc: $(grep '^FAIL' "$TMP/nooverlap.log" | head -2)"; fi
model sync 1 BOOST_CUDA_SYNC=1
if [ "$rc" = 0 ] && [ "$n" -ge 3 ]; then ok "tp=2 with BOOST_CUDA_SYNC=1 (a synchronisation after every step) matches the CPU backend"
else fail "tp=2 with BOOST_CUDA_SYNC=1" "exit $rc: $(grep '^FAIL' "$TMP/sync.log" | head -2)"; fi
model skip 1 BOOST_TEST_SKIP_COLL_WAIT=1
if [ "$rc" != 0 ] && grep -q '^FAIL' "$TMP/skip.log"; then ok "without the waits for the collectives the stand-in gives a wrong answer: $(grep '^FAIL' "$TMP/skip.log" | head -1 | cut -c1-120)"
else fail "a missing wait goes unnoticed" "exit $rc with BOOST_TEST_SKIP_COLL_WAIT=1: the stand-in must catch it ($n checks passed)"; fi
