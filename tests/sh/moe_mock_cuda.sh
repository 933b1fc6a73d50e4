#!/usr/bin/env bash
# moe_mock_cuda.sh: the MoE variants of this branch on the CUDA backend without a GPU (the stand-in
# of nvrtc_mock_cuda.sh: libcuda/cuBLAS in host memory, kernels on the CPU emulator): every step of
# shared-factor experts, a router z-loss and the naive-layout MoE block against the CPU backend, and
# two training steps of shared-factor experts at tp=2 (local mode) against the CPU backend and tp=1.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! bash tests/gpu/build.sh >"$TMP/build.log" 2>&1; then fail "tests/gpu/build.sh" "$(tail -3 "$TMP/build.log")"; exit 0; fi
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log"; then
  fail "build the CUDA stand-in" "$(head -3 "$TMP/cc.log")"; exit 0
fi
small="-D micro_batch=1 -D seq=16"
gen() {   # gen NAME SPEC [-D ...]
  local name=$1; shift
  "$BOOST" gen "$@" $small -o "$TMP/$name" >"$TMP/gen.log" 2>&1 || fail "generate $name" "$(tail -2 "$TMP/gen.log")"
}
cat >"$TMP/z.lua" <<'LUA'
-- tiny-cola-moe with a router z-loss (moe_mock_cuda.sh)
return run {
  model = model "zloss-moe" {
    hidden = 128, layers = 2, heads = 4, ffn = 352, vocab = 256, lowrank = cola { rank = 32 },
    moe = moe { experts = 4, top_k = 2, capacity_factor = 1.25, expert_ffn = 192, z_loss = 0.01 },
  },
  gpu = "h100",
  parallel = { tp = 1, layout = "btp" },
}
LUA
gen shared1 tiny-cola-moe-shared -D tp=1
gen shared2 tiny-cola-moe-shared -D tp=2
gen z1 "$TMP/z.lua"
gen naive1 tiny-cola-moe -D tp=1 -D layout=naive
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}"
export BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp"
for p in shared1 z1 naive1; do
  BOOST_EMU_SOURCE="$TMP/$p/kernels.cu" timeout 600 build/gpu/check steps "$TMP/$p" >"$TMP/steps-$p.log" 2>&1; rc=$?
  grep '^FAIL' "$TMP/steps-$p.log"
  n=$(grep -c '^ok - ' "$TMP/steps-$p.log")
  if [ "$rc" = 0 ] && [ "$n" -ge 15 ]; then ok "cuda backend on the stand-in, moe $p: $n step kinds match the CPU backend"
  else fail "cuda backend on the stand-in, moe $p" "exit $rc, $n step kinds ok: $(grep -v '^ok' "$TMP/steps-$p.log" | head -3)"; fi
done
BOOST_EMU_SOURCE="$TMP/shared2/kernels.cu:$TMP/shared1/kernels.cu" timeout 600 build/gpu/check model "$TMP/shared2" --tp-ref "$TMP/shared1" --steps 2 >"$TMP/model.log" 2>&1; rc=$?
grep '^FAIL' "$TMP/model.log"
n=$(grep -c '^ok - ' "$TMP/model.log")
if [ "$rc" = 0 ] && [ "$n" = 7 ]; then ok "cuda tp=2 local mode on the stand-in, shared-factor moe: matches cpu and tp=1, repeats bit-identically"
else fail "cuda tp=2 on the stand-in, shared-factor moe" "exit $rc, $n of 7 checks ok: $(grep -v '^ok' "$TMP/model.log" | head -3)"; fi
