#!/usr/bin/env bash
# nvrtc_tune.sh: `boost tune --dry-run` specialises a plan's kernels under every candidate tuning
# and each candidate compiles for the plan's arch without spills; without a GPU a real tune stops
# with exit 1 and says why; bad arguments exit 2. Also a head-dim-128 plan for sm_80, whose attention
# tiles need more than 48 KiB of dynamic shared memory.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
"$BOOST" gen tiny-llama -D tp=1 -o "$TMP/plan" >"$TMP/gen.log" 2>&1 || fail "generate tiny-llama" "$(tail -2 "$TMP/gen.log")"
"$BOOST" tune "$TMP/plan" --dry-run >"$TMP/dry.log" 2>&1
rc=$?
n=$(grep -c ', 0 spill$' "$TMP/dry.log")
if [ "$rc" = 0 ] && [ "$n" = 6 ]; then ok "tune --dry-run: 6 candidates compile, no spills"
else fail "tune --dry-run" "exit $rc, $n clean candidates: $(head -3 "$TMP/dry.log")"; fi
# head dim 128 on the A100 (sm_80): the attention backward's candidates take up to 88064 B of dynamic
# shared memory (q128k32), above the 48 KiB a kernel gets without opting in; all must compile unspilled
cat >"$TMP/hd128.lua" <<'EOF'
-- hd128: a one-layer model of head dim 128 (nvrtc_tune.sh)
return model "hd128" { hidden = 256, layers = 1, heads = 2, kv_heads = 1, ffn = 352, vocab = 256, lowrank = full {} }
EOF
cat >"$TMP/run128.lua" <<'EOF'
-- run128: the hd128 model on the A100 spec (sm_80)
return run {
  model = "hd128.lua", gpu = "a100",
  parallel = { tp = 1, pp = 1, dp = 1, layout = "megatron" },
  features = { online_rmsnorm = false, group_linears = true, checkpoint = "none" },
  train = { micro_batch = 1, seq = 128, grad_accum = 1, dtype = "bf16", lr = 3e-3, min_lr = 3e-4, warmup = 1,
            steps = 2, seed = 7, eval_every = 50 },
  data = { path = "corpus", val_fraction = 0.1 },
}
EOF
BOOST_SPECS="$PWD/specs" "$BOOST" gen "$TMP/run128.lua" -o "$TMP/p128" >"$TMP/gen128.log" 2>&1 || fail "generate hd128" "$(tail -2 "$TMP/gen128.log")"
"$BOOST" tune "$TMP/p128" --dry-run >"$TMP/dry128.log" 2>&1
rc=$?
n=$(grep -c 'kernels for sm_80, 0 spill$' "$TMP/dry128.log")
if [ "$rc" = 0 ] && [ "$n" = 6 ] && grep -q ' smem=52736 ' "$TMP/p128/plan.txt"; then
  ok "tune --dry-run, head dim 128 on sm_80: 6 candidates compile, no spills (the plan's backward: 52736 B dynamic)"
else fail "tune --dry-run, head dim 128" "exit $rc, $n clean candidates: $(head -3 "$TMP/dry128.log")"; fi
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
