#!/usr/bin/env bash
# nvrtc_mock_cuda.sh: the CUDA backend (runtime/cuda.c) end to end without a GPU. A stand-in for
# libcuda and cuBLAS (tests/gpu/mock_cuda.c: host memory, loop GEMMs with cuBLAS's column-major
# semantics, kernels on the CPU emulator tests/gpu/cuda_emu.hpp) is named by BOOST_LIBCUDA and
# BOOST_LIBCUBLAS; tests/gpu/check_steps.c then runs every step of a small tiny-cola plan on
# "cuda" and on the CPU backend and compares each step's outputs (bf16 tolerance), then AdamW and
# the gradient norm; tests/gpu/check_model.c runs 2 training steps at tp=2 (local-mode collectives)
# against the CPU backend, repeated (bit-identical), and against tp=1 on "cuda".
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! bash tests/gpu/build.sh >"$TMP/build.log" 2>&1; then fail "tests/gpu/build.sh" "$(tail -3 "$TMP/build.log")"; exit 0; fi
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log"; then
  fail "build the CUDA stand-in" "$(head -3 "$TMP/cc.log")"; exit 0
fi
for tp in 1 2; do
  "$BOOST" gen tiny-cola -D tp=$tp -D micro_batch=1 -D seq=16 -o "$TMP/p$tp" >"$TMP/gen.log" 2>&1 ||
    fail "generate tiny-cola tp=$tp" "$(tail -2 "$TMP/gen.log")"
done
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_CACHE="$TMP/cache"
export BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp" BOOST_EMU_SOURCE="$TMP/p1/kernels.cu:$TMP/p2/kernels.cu"
timeout 600 build/gpu/check steps "$TMP/p1" >"$TMP/steps.log" 2>&1
rc=$?
sed 's/^ok - /#   /' "$TMP/steps.log" | grep -v '^FAIL'
grep '^FAIL' "$TMP/steps.log"
n=$(grep -c '^ok - ' "$TMP/steps.log")
if [ "$rc" = 0 ] && [ "$n" -ge 20 ]; then ok "cuda backend on the stand-in: $n step kinds match the CPU backend"
else fail "cuda backend on the stand-in" "exit $rc, $n step kinds ok: $(grep -v '^ok' "$TMP/steps.log" | head -3)"; fi
timeout 600 build/gpu/check model "$TMP/p2" --tp-ref "$TMP/p1" --steps 2 >"$TMP/model.log" 2>&1
rc=$?
sed 's/^ok - /#   /' "$TMP/model.log" | grep -v '^FAIL'
grep '^FAIL' "$TMP/model.log"
n=$(grep -c '^ok - ' "$TMP/model.log")
if [ "$rc" = 0 ] && [ "$n" = 7 ]; then ok "cuda tp=2 local mode on the stand-in: loss and gradients match cpu and tp=1, runs repeat bit-identically"
else fail "cuda tp=2 on the stand-in" "exit $rc, $n of 7 checks ok"; fi
