# torch_regen.sh: re-runs tests/torch_ref.py into a scratch folder and checks that it reproduces
# every committed reference state tests/data/torch_ref*_v1.bin (determinism of the references).
# Where PyTorch is not importable it prints one skip line (counted as skipped by tests/run.sh).
. tests/sh/lib.sh
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  ok "torch_regen # SKIP PyTorch is not importable here (pip install torch numpy)"
  exit 0
fi
if ! "$PY" tests/torch_ref.py --outdir "$TMP" >"$TMP/log" 2>&1; then
  fail torch_regen "tests/torch_ref.py failed: $(tail -1 "$TMP/log")"
  exit 0
fi
# every file the script writes, and every committed one
for f in $( (ls "$TMP"; ls tests/data) | grep '^torch_ref.*\.bin$' | sort -u); do
  REF=tests/data/$f
  if [ ! -f "$REF" ]; then
    fail "torch_regen $f" "$REF is missing: run 'python3 tests/torch_ref.py' and commit it"
  elif [ ! -f "$TMP/$f" ]; then
    fail "torch_regen $f" "tests/torch_ref.py no longer writes $f: remove it from tests/data"
  elif cmp -s "$REF" "$TMP/$f"; then
    ok "torch_regen reproduces $REF bit for bit"
  elif "$PY" tests/torch_ref.py --compare "$REF" "$TMP/$f" --tol 1e-6 >"$TMP/cmp" 2>&1; then
    # another CPU or torch build may round a float64 reduction differently in the last bit
    ok "torch_regen reproduces $REF within 1e-6 ($(tail -1 "$TMP/cmp"); not bit for bit)"
  else
    fail "torch_regen $f" "regenerated file differs: $(head -3 "$TMP/cmp" | tr '\n' ';') (spec or script changed? regenerate and commit)"
  fi
done
