#!/usr/bin/env bash
# nvrtc_mock_refusals.sh: a launch the device cannot take reaches the user as a message naming the
# plan line, the step and the kernel. A tiny-cola plan whose second kernel line asks for 240000 B of
# dynamic shared memory (above the 232448 B an sm_90 block may opt in to, which the CUDA stand-in
# tests/gpu/mock_cuda.c reports) must stop `boost train --backend cuda` on the stand-in with exit 1
# and "plan.txt:LINE: kernel step failed ... kernel NAME needs 240000 B". One training step at most.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! command -v g++ >/dev/null; then ok "stand-in refusal message # SKIP g++ missing"; exit 0; fi
if [ ! -x "$BOOST" ]; then make -s bin/boost >"$TMP/make.log" 2>&1 || { fail "build bin/boost" "$(tail -2 "$TMP/make.log")"; exit 0; }; fi
if ! cc -O1 -shared -fPIC tests/gpu/mock_cuda.c -o "$TMP/mock_cuda.so" -ldl -lpthread 2>"$TMP/cc.log"; then
  fail "build the CUDA stand-in" "$(head -3 "$TMP/cc.log")"; exit 0
fi
"$BOOST" gen tiny-cola -D tp=1 -D micro_batch=1 -D seq=16 -o "$TMP/bad" >"$TMP/gen.log" 2>&1 || { fail "generate" "$(tail -2 "$TMP/gen.log")"; exit 0; }
line=$(grep -n '^kernel ' "$TMP/bad/plan.txt" | sed -n 2p | cut -d: -f1)
name=$(sed -n "${line}p" "$TMP/bad/plan.txt" | grep -o 'name=[^ ]*' | cut -d= -f2)
sed -i "${line}s/smem=0/smem=240000/" "$TMP/bad/plan.txt"
export BOOST_LIBCUDA="$TMP/mock_cuda.so" BOOST_LIBCUBLAS="$TMP/mock_cuda.so" BOOST_CACHE="${BOOST_CACHE:-$TMP/cache}"
export BOOST_EMU_HPP="$PWD/tests/gpu/cuda_emu.hpp" BOOST_EMU_SOURCE="$TMP/bad/kernels.cu"
timeout 600 "$BOOST" train --plan "$TMP/bad" -D steps=1 --backend cuda --quiet >"$TMP/out.txt" 2>&1
rc=$?
if grep -q "NVRTC\|no CUDA device\|libnvrtc" "$TMP/out.txt" && [ "$rc" != 0 ] && ! grep -q 'kernel step failed' "$TMP/out.txt"; then
  ok "stand-in refusal message # SKIP the CUDA backend does not start here: $(grep -m1 -i 'nvrtc\|device' "$TMP/out.txt")"; exit 0
fi
if [ "$rc" = 1 ] && grep -q "plan.txt:$line: kernel step failed on rank 0: kernel $name needs 240000 B of shared memory a block, but this device (sm_90) allows at most 232448 B" "$TMP/out.txt"; then
  ok "a launch above the device's opt-in (240000 B of dynamic shared memory) stops training with the plan line and the kernel named"
else
  fail "stand-in refusal message" "exit $rc, want 1 and 'plan.txt:$line: kernel step failed ... $name': $(grep -v '^ ' "$TMP/out.txt" | tail -2)"
fi
