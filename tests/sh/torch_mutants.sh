# torch_mutants.sh: the PyTorch comparison must be able to fail. For each deliberate mistake that
# tests/torch_ref.py --mutant can put into a reference (norm eps, an extra SiLU on the gate, RoPE
# pairs, weight decay on embed/head, no Adam bias correction, LaX crossing before sigma, GQA heads
# mapped round-robin), test_torch_ref run against that reference must report the comparison that
# should catch it. Where PyTorch is not importable it prints one skip line (counted as skipped).
. tests/sh/lib.sh
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  ok "torch_mutants # SKIP PyTorch is not importable here (pip install torch numpy)"
  exit 0
fi
T=build/tests/test_torch_ref
if [ ! -x "$T" ]; then
  fail torch_mutants "$T is not built: run 'make tests-build'"
  exit 0
fi
if ! "$PY" tests/torch_ref.py --mutant all --outdir "$TMP" >"$TMP/gen.log" 2>&1; then
  fail torch_mutants "could not write the mutants: $(tail -1 "$TMP/gen.log")"
  exit 0
fi
# mutant | the check that must fail
for pair in "norm_eps|tp2_btp logits" "gate_silu|tp2_btp logits" "rope_interleaved|tp2_btp logits" \
            "decay_all|tp2_btp distance each weight moved" "no_bias_correction|tp2_btp loss after step 0" \
            "lax_pre_act|lax_tp2_btp logits" "gqa_kv_tiled|gqa_tp2_btp logits"; do
  m=${pair%%|*}; want="FAIL - ${pair#*|}"
  if [ ! -f "$TMP/$m.bin" ]; then
    fail "torch_mutants $m" "tests/torch_ref.py wrote no $m.bin"
    continue
  fi
  BOOST_TORCH_REF="$TMP/$m.bin" "$T" >"$TMP/$m.out" 2>&1
  rc=$?
  if [ "$rc" != 0 ] && grep -q "^$want" "$TMP/$m.out"; then
    ok "torch_mutants $m caught by '${pair#*|}' ($(grep -c '^FAIL' "$TMP/$m.out") checks failed)"
  else
    fail "torch_mutants $m" "test_torch_ref (exit $rc) did not report '$want'"
  fi
done
