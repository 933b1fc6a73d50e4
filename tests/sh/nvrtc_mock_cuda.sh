#!/usr/bin/env bash
# nvrtc_mock_cuda.sh: the CUDA backend (runtime/cuda.c) end to end without a GPU. A stand-in for
# libcuda and cuBLAS (tests/gpu/mock_cuda.c: host memory, loop GEMMs with cuBLAS's column-major
# semantics, kernels on the CPU emulator tests/gpu/cuda_emu.hpp) is named by BOOST_LIBCUDA and
# BOOST_LIBCUBLAS; tests/gpu/check_steps.c then runs every step of small plans (CoLA with online
# and sync norms, dense megatron, GQA, LaX, SVD, MoE) on "cuda" and on the CPU backend and compares
# each step's outputs (bf16 tolerance), then AdamW and
# the gradient norm; tests/gpu/check_model.c runs 2 training steps at tp=2 (local-mode collectives)
# against the CPU backend, repeated (bit-identical), and against tp=1 on "cuda".
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! bash tests/gpu/build.sh >"$TMP/build.log" 2>&1; then fail "tests/gpu/build.sh" "$(tail -3 "$TMP/build.log")"; exit 0; fi
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log"; then
  fail "build the CUDA stand-in" "$(head -3 "$TMP/cc.log")"; exit 0
fi
small="-D micro_batch=1 -D seq=16"
gen() {   # gen NAME RUN [-D ...]
  local name=$1; shift
  "$BOOST" gen "$@" $small -o "$TMP/$name" >"$TMP/gen.log" 2>&1 || fail "generate $name" "$(tail -2 "$TMP/gen.log")"
}
gen cola1 tiny-cola -D tp=1
gen cola2 tiny-cola -D tp=2
gen sync1 tiny-cola -D tp=1 -D online_rmsnorm=0 -D group_linears=0
gen sync2 tiny-cola -D tp=2 -D online_rmsnorm=0 -D group_linears=0
gen llama1 tiny-llama -D tp=1 -D layout=megatron
gen gqa1 tiny-cola-gqa -D tp=1
gen lax1 tiny-lax -D tp=1
gen svd1 tiny-svd -D tp=1
gen moe1 tiny-cola-moe -D tp=1
gen moe2 tiny-cola-moe -D tp=2
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}"
export BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp"
# the ten checks are independent: two at a time (one per core), verdicts read in order afterwards
jobs_list() {
  for p in cola1 sync1 llama1 gqa1 lax1 svd1 moe1; do echo "steps $p $TMP/$p/kernels.cu"; done
  for p in cola sync moe; do echo "model $p $TMP/${p}2/kernels.cu:$TMP/${p}1/kernels.cu"; done
}
jobs_list | T="$TMP" xargs -P 2 -L 1 sh -c '
  what=$1 p=$2 src=$3
  if [ "$what" = steps ]; then BOOST_EMU_SOURCE="$src" timeout 600 build/gpu/check steps "$T/$p" >"$T/steps-$p.log" 2>&1
  else BOOST_EMU_SOURCE="$src" timeout 600 build/gpu/check model "$T/${p}2" --tp-ref "$T/${p}1" --steps 2 >"$T/model-$p.log" 2>&1; fi
  echo $? >"$T/$what-$p.rc"' sh
for p in cola1 sync1 llama1 gqa1 lax1 svd1 moe1; do
  log="$TMP/steps-$p.log"; rc=$(cat "$TMP/steps-$p.rc" 2>/dev/null || echo none)
  sed 's/^ok - /#   /' "$log" | grep -v '^FAIL'
  grep '^FAIL' "$log"
  n=$(grep -c '^ok - ' "$log")
  if [ "$rc" = 0 ] && [ "$n" -ge 15 ]; then ok "cuda backend on the stand-in, $p: $n step kinds match the CPU backend"
  else fail "cuda backend on the stand-in, $p" "exit $rc, $n step kinds ok: $(grep -v '^ok' "$log" | head -3)"; fi
done
for p in cola sync moe; do
  log="$TMP/model-$p.log"; rc=$(cat "$TMP/model-$p.rc" 2>/dev/null || echo none)
  sed 's/^ok - /#   /' "$log" | grep -v '^FAIL'
  grep '^FAIL' "$log"
  n=$(grep -c '^ok - ' "$log")
  if [ "$rc" = 0 ] && [ "$n" = 7 ]; then ok "cuda tp=2 local mode on the stand-in, $p: matches cpu and tp=1, repeats bit-identically"
  else fail "cuda tp=2 on the stand-in, $p" "exit $rc, $n of 7 checks ok"; fi
done
