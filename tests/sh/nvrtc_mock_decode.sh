#!/usr/bin/env bash
# nvrtc_mock_decode.sh: `boost sample` on the CUDA backend without a GPU (the libcuda/cuBLAS stand-in
# tests/gpu/mock_cuda.c running the NVRTC-checked infer-kernels.cu on the CPU emulator): the prefill
# step, the decode steps and a slide of the window run on "cuda" (bf16) and pick the greedy tokens
# of the CPU backend (fp32) for the first 12 bytes after the prompt, from a 300-step tiny-cola at tp=2.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log" \
  || { fail "build the CUDA stand-in" "$(head -3 "$TMP/cc.log")"; exit 0; }
$BOOST train tiny-cola --backend cpu -D tp=2 -D seq=32 -D steps=300 -D warmup=10 -D eval_every=0 --quiet -o "$TMP/run" \
  >"$TMP/train.log" 2>&1 || { fail "train tiny-cola" "$(tail -3 "$TMP/train.log")"; exit 0; }
# the emulator compiles the kernels by name from the same generated file sample regenerates
$BOOST gen tiny-cola -D tp=2 -D seq=32 -D micro_batch=1 -o "$TMP/g" >"$TMP/gen.log" 2>&1 || { fail "generate" "$(tail -2 "$TMP/gen.log")"; exit 0; }
P="The cat sat on the mat and"
$BOOST sample "$TMP/run" --backend cpu --prompt "$P" --temperature 0 --tokens 24 >"$TMP/cpu.txt" 2>"$TMP/cpu.err"
BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_CACHE="$TMP/cache" BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp" \
  BOOST_EMU_SOURCE="$TMP/g/infer-kernels.cu" timeout 600 $BOOST sample "$TMP/run" --backend cuda --prompt "$P" --temperature 0 \
  --tokens 24 >"$TMP/cuda.txt" 2>"$TMP/cuda.err"
rc=$?
if [ $rc = 0 ] && grep -q "backend cuda" "$TMP/cuda.err" && grep -q "window slides" "$TMP/cuda.err" && [ "$(wc -c <"$TMP/cuda.txt")" -ge 50 ]; then
  ok "sample on the CUDA stand-in: prefill, decode steps and a window slide run"
else
  fail "sample on the CUDA stand-in: prefill, decode steps and a window slide run" "exit $rc: $(tail -3 "$TMP/cuda.err")"
fi
a=$(head -c 38 "$TMP/cpu.txt" | od -An -c | tr -s ' '); b=$(head -c 38 "$TMP/cuda.txt" | od -An -c | tr -s ' ')
[ -s "$TMP/cpu.txt" ] && [ "$a" = "$b" ] && ok "CUDA stand-in (bf16) greedy bytes = the CPU backend's for 12 tokens" \
  || fail "CUDA stand-in (bf16) greedy bytes = the CPU backend's for 12 tokens" "cpu '$a' vs cuda '$b'"
