#!/usr/bin/env bash
# nvrtc_mock_fn_cache.sh: the CUDA backend's function cache takes kernel names of any length. A
# kernels.cu of five kernels named with 40, 96, 150, 150 (the two alike in their first 140
# characters) and 300 characters, the last declared so that the load's scan of the source misses
# it, is loaded on the CUDA stand-in (tests/gpu/mock_cuda.c) by tests/gpu/check_fn_cache.c, which
# counts the driver's function lookups and launches each kernel once (see that file).
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! command -v g++ >/dev/null; then
  ok "function cache on the stand-in # SKIP g++ missing"; exit 0
fi
make -s build/libruntime.a build/libcommon.a >"$TMP/make.log" 2>&1 || {
  fail "build the runtime" "$(tail -2 "$TMP/make.log")"; exit 0; }
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread \
     2>"$TMP/cc.log"; then
  fail "build the CUDA stand-in" "$(head -3 "$TMP/cc.log")"; exit 0
fi
libs=/usr/lib/x86_64-linux-gnu
BLAS=$(ls $libs/openblas-pthread/libopenblas.a $libs/libopenblas.a 2>/dev/null | head -1)
if ! cc -O1 -g -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-sign-compare -pthread -I. \
     tests/gpu/check_fn_cache.c build/libruntime.a build/libcommon.a $BLAS \
     "$(cc -print-file-name=libgomp.a)" -lm -lpthread -ldl -o "$TMP/check_fn_cache" \
     2>"$TMP/cc.log"; then
  fail "build tests/gpu/check_fn_cache.c" "$(head -3 "$TMP/cc.log")"; exit 0
fi
# name LENGTH STEM: STEM padded with x to LENGTH characters
name() { local s=$2; while [ ${#s} -lt "$1" ]; do s="${s}x"; done; echo "$s"; }
alike=$(name 140 k_alike_)
names=("$(name 40 k_short_)" "$(name 96 k_over_ninety_five_)" "${alike}_one_$(name 5 a)"
       "${alike}_two_$(name 5 b)" "$(name 300 k_very_long_)")
if [ ${#names[2]} != 150 ] || [ ${#names[3]} != 150 ]; then
  fail "the test's names" "${#names[2]} and ${#names[3]} characters, want 150"; exit 0
fi
mkdir -p "$TMP/plan"
for i in 0 1 2 3 4; do
  # the fifth: two spaces before void, so the load's scan for "__global__ void" passes it over
  [ $i = 4 ] && decl='extern "C" __global__  void' || decl='extern "C" __global__ void'
  printf '%s\n%s(float *x) { x[0] += %d.0f; }\n' "$decl" "${names[$i]}" $((i + 1))
done >"$TMP/plan/kernels.cu"
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so"
export BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}"
export BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp" BOOST_EMU_SOURCE="$TMP/plan/kernels.cu"
timeout 300 "$TMP/check_fn_cache" "$TMP/plan" "${names[@]:0:4}" "@${names[4]}" \
  >"$TMP/out.txt" 2>&1
rc=$?
if [ "$rc" = 2 ] && grep -qi "nvrtc" "$TMP/out.txt"; then
  ok "function cache on the stand-in # SKIP no module here: $(grep -m1 -i nvrtc "$TMP/out.txt")"
  exit 0
fi
sed -n 's/^ok - /#   /p' "$TMP/out.txt"
n=$(grep -c '^ok - ' "$TMP/out.txt")
if [ "$rc" = 0 ] && [ "$n" = 12 ]; then
  ok "function cache on the stand-in: kernel names of 40 to 300 characters looked up once"
else
  fail "function cache on the stand-in" \
    "exit $rc, $n of 12 checks ok: $(grep -v '^ok' "$TMP/out.txt" | head -3)"
fi
