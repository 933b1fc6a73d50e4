#!/usr/bin/env bash
# nvrtc_tune.sh: `boost tune --dry-run` specialises a plan's kernels under every candidate tuning
# and each candidate compiles for the plan's arch without spills; without a GPU a real tune stops
# with exit 1 and says why; bad arguments exit 2.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
"$BOOST" gen tiny-llama -D tp=1 -o "$TMP/plan" >"$TMP/gen.log" 2>&1 || fail "generate tiny-llama" "$(tail -2 "$TMP/gen.log")"
"$BOOST" tune "$TMP/plan" --dry-run >"$TMP/dry.log" 2>&1
rc=$?
n=$(grep -c ', 0 spill$' "$TMP/dry.log")
if [ "$rc" = 0 ] && [ "$n" = 6 ]; then ok "tune --dry-run: 6 candidates compile, no spills"
else fail "tune --dry-run" "exit $rc, $n clean candidates: $(head -3 "$TMP/dry.log")"; fi
if [ -e /dev/nvidiactl ]; then
  ok "no_gpu_message # SKIP a GPU is present: the no-GPU message is not checked"
else
  "$BOOST" tune "$TMP/plan" -o "$TMP/t.lua" >"$TMP/tune.log" 2>&1
  rc=$?
  if [ "$rc" = 1 ] && grep -q 'no CUDA device found' "$TMP/tune.log" && [ ! -e "$TMP/t.lua" ]; then
    ok "tune without a GPU: exit 1, clear message, no file written"
  else fail "tune without a GPU" "exit $rc: $(head -2 "$TMP/tune.log")"; fi
fi
"$BOOST" tune "$TMP/plan" --reps 0 >/dev/null 2>&1; rc=$?
[ "$rc" = 2 ] && ok "tune --reps 0: exit 2" || fail "tune --reps 0" "exit $rc"
"$BOOST" tune "$TMP/nonexistent" >/dev/null 2>&1; rc=$?
[ "$rc" = 2 ] && ok "tune on a missing plan: exit 2" || fail "tune on a missing plan" "exit $rc"
