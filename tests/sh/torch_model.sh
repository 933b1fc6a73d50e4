#!/usr/bin/env bash
# torch_model.sh: tests/gpu/torch_model.py (the PyTorch side of the device session) on the CPU in
# float32: for tiny-cola, tiny-llama, tiny-cola-gqa, tiny-lax, tiny-svd and tiny-usv its --check
# (BOOST's initial weights and first batch: loss, gradient norm, every gradient, the weights after
# one AdamW step) agrees with BOOST's CPU backend; four deliberate mistakes are each caught by the
# check that should catch them; the first batch of the shipped corpus is BOOST's (the loader's
# shuffled order); the JSON records hold what tests/gpu/run.sh reads; a --bench smoke runs.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  ok "torch_model # SKIP PyTorch is not importable here"
  exit 0
fi
if [ ! -x "$BOOST" ]; then
  fail torch_model "$BOOST is missing: run 'make bin/boost'"
  exit 0
fi
TM="$PY tests/gpu/torch_model.py --threads 1"

# 1. every tiny model, at its run's own tp and layout, against BOOST's CPU backend
models="tiny-cola tiny-llama tiny-cola-gqa tiny-lax tiny-svd tiny-usv"
$TM --check $models --tensors --json "$TMP/check.jsonl" >"$TMP/check.out" 2>&1
rc=$?
for m in $models; do
  n_ok=$(grep -c "^ok - torch_model $m (fp32" "$TMP/check.out")
  if [ "$n_ok" = 5 ]; then
    ok "torch_model $m matches BOOST's CPU backend: $(grep "^ok - torch_model $m (fp32.*: gradients:" "$TMP/check.out" | sed 's/.*gradients: //')"
  else
    fail "torch_model $m" "$n_ok of 5 checks pass: $(grep -E "^FAIL - torch_model $m|Error|error" "$TMP/check.out" | head -2)"
  fi
done
[ "$rc" = 0 ] && ok "torch_model --check exits 0 when every check passes" || fail "torch_model --check exit" "exit $rc"
# the JSON records: one per model, every canonical tensor with its gradient norms
if "$PY" - "$TMP/check.jsonl" $models <<'PY'
import json, sys
recs = {r["run"]: r for r in map(json.loads, open(sys.argv[1]))}
for m in sys.argv[2:]:
    r = recs[m]
    assert r["pass"] is True, m
    t = r["tensors"]
    assert "embed" in t and "head" in t and "final_norm" in t, m
    assert all(v["grad_norm"] > 0 and v["grad_norm_boost"] > 0 for v in t.values()), m
    # the tensors' norms add up to the global norm BOOST logged
    total = sum(v["grad_norm_boost"] ** 2 for v in t.values()) ** 0.5
    assert abs(total - r["grad_norm_boost_log"]) <= 1e-4 * total, (m, total, r["grad_norm_boost_log"])
PY
then ok "torch_model --check JSON: per-tensor gradient norms that add up to BOOST's logged norm"
else fail "torch_model --check JSON" "missing or inconsistent fields in $(head -c 300 "$TMP/check.jsonl")"; fi

# the first batch from the shipped corpus: torch_model.py's copy of the data loader's shuffled order
if [ -f build/corpus.txt ]; then
  $TM --check tiny-cola -D tp=1 --data corpus >"$TMP/corpus.out" 2>&1
  rc=$?
  if [ "$rc" = 0 ] && [ "$(grep -c '^ok - ' "$TMP/corpus.out")" = 5 ]; then
    ok "torch_model tiny-cola on the corpus: the same first batch as BOOST's loader ($(grep -o 'loss: BOOST [0-9.]*' "$TMP/corpus.out"))"
  else
    fail "torch_model tiny-cola on the corpus" "exit $rc: $(grep -E '^FAIL|rror' "$TMP/corpus.out" | head -2)"
  fi
else
  ok "torch_model on the corpus # SKIP build/corpus.txt is not built (tools/corpus.sh)"
fi

# 2. the check must fail when the model or the optimizer differs
$TM --check tiny-cola --mutant rope_interleaved,no_final_norm,gate_silu,decay_all >"$TMP/mut.out" 2>&1
rc=$?
for pair in "rope_interleaved|gradients" "no_final_norm|gradients" "gate_silu|gradients" \
            "decay_all|AdamW on BOOST's gradients"; do
  m=${pair%%|*} want=${pair#*|}
  if grep -q "^FAIL - torch_model tiny-cola \[mutant $m\] (fp32, BOOST cpu): $want:" "$TMP/mut.out"; then
    ok "torch_model mutant $m caught by '$want'"
  else
    fail "torch_model mutant $m" "no 'FAIL ... $want' line: $(grep "mutant $m" "$TMP/mut.out" | head -2)"
  fi
done
[ "$rc" = 1 ] && ok "torch_model --check exits 1 when a check fails" || fail "torch_model --check exit with mutants" "exit $rc, want 1"

# 3. bad input: an unknown run is exit 2 with BOOST's message
$TM --check no-such-run >"$TMP/bad.out" 2>&1
rc=$?
if [ "$rc" = 2 ] && grep -q "no-such-run" "$TMP/bad.out"; then ok "torch_model: an unknown run exits 2 and names it"
else fail "torch_model unknown run" "exit $rc: $(tail -1 "$TMP/bad.out")"; fi

# 4. --bench smoke (not timed): a JSON line with tokens/s and the report's FLOPs per token
$TM --bench tiny-cola --mode eager --steps 3 --warmup-steps 1 >"$TMP/bench.out" 2>&1
rc=$?
fpt=$($BOOST report tiny-cola --json 2>/dev/null | "$PY" -c "import json,sys; print(int(json.load(sys.stdin)['flops_per_token']))")
if [ "$rc" = 0 ] && "$PY" - "$TMP/bench.out" "$fpt" <<'PY'
import json, math, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
assert r["mode"] == "eager" and r["steps"] == 3 and r["tokens_per_step"] == r["micro_batch"] * r["seq"]
assert r["tokens_per_s"] > 0 and math.isfinite(r["loss_last"]) and r["flops_per_token"] == int(sys.argv[2])
assert r["mfu"] is None     # no MFU against a GPU's peak for a CPU run
PY
then ok "torch_model --bench: a JSON line with tokens/s and the report's FLOPs per token"
else fail "torch_model --bench" "exit $rc: $(tail -2 "$TMP/bench.out")"; fi
