#!/usr/bin/env bash
# nvrtc_mock_overlap.sh: the CUDA backend's collectives on a stream of their own and its host waits,
# without a GPU, on the libcuda/cuBLAS stand-in (tests/gpu/mock_cuda.c). The stand-in runs queued
# work only when the host demands it, stream by stream, so a step that does not wait for a collective
# reads its buffer before the collective ran. Checks: a tp=1 training step of tiny-cola makes the host
# wait at most twice (the loss and the gradient norm; tests/gpu/check_syncs.c), with no blocking
# copy; tiny-cola at tp=2 (local mode) matches the CPU backend with the overlap, with
# BOOST_NO_OVERLAP=1 and with BOOST_CUDA_SYNC=1, and does not when the executor leaves the waits out
# (BOOST_TEST_SKIP_COLL_WAIT=1): the stand-in catches a missing wait.
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
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_CACHE="$TMP/cache"
export BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp"
unset BOOST_NO_OVERLAP BOOST_CUDA_SYNC BOOST_TEST_SKIP_COLL_WAIT

BOOST_EMU_SOURCE="$TMP/cola1/kernels.cu" timeout 300 build/gpu/check_syncs "$TMP/cola1" --steps 2 >"$TMP/syncs.log" 2>&1
rc=$?
if [ "$rc" = 0 ] && grep -q '^ok - ' "$TMP/syncs.log"; then ok "host waits per step: $(sed -n 's/^ok - [^:]*: //p' "$TMP/syncs.log")"
else fail "host waits per tp=1 training step" "exit $rc: $(grep -v '^boost: compiling' "$TMP/syncs.log" | head -3)"; fi

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
