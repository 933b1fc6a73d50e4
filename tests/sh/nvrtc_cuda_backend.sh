#!/usr/bin/env bash
# nvrtc_cuda_backend.sh: on a machine without a GPU, `boost train --backend cuda` stops at once with
# the clear message (exit 1, no crash, nothing written), and `--backend auto` falls back to the
# CPU backend and trains. With a GPU present the first check is skipped (tests/gpu/ covers it).
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if [ -e /dev/nvidiactl ] || [ -e /dev/nvidia0 ]; then
  ok "no_gpu_message # SKIP a GPU is present: the no-GPU message is not checked"
else
  "$BOOST" train tiny-cola -D steps=1 --backend cuda -o "$TMP/cuda" >"$TMP/cuda.log" 2>&1
  rc=$?
  if [ "$rc" = 1 ] && grep -q 'no CUDA device found' "$TMP/cuda.log" && grep -q 'use --backend cpu' "$TMP/cuda.log"; then
    ok "train --backend cuda without a GPU: exit 1, clear message"
  else
    fail "train --backend cuda without a GPU" "exit $rc: $(head -3 "$TMP/cuda.log")"
  fi
  if [ -z "$(ls -A "$TMP/cuda" 2>/dev/null | grep step-)" ]; then ok "no checkpoint written after the failure"
  else fail "no checkpoint written after the failure" "found $(ls "$TMP/cuda")"; fi
fi
"$BOOST" train tiny-cola -D steps=2 -D eval_every=0 --backend auto --quiet >"$TMP/auto.log" 2>&1
rc=$?
if [ "$rc" = 0 ]; then ok "train --backend auto runs (cpu fallback without a GPU)"
else fail "train --backend auto" "exit $rc: $(tail -3 "$TMP/auto.log")"; fi
