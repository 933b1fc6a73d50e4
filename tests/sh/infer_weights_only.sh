#!/usr/bin/env bash
# infer_weights_only.sh: eval, export and ckpt merge (without --optimizer) read a checkpoint's
# weights alone. A step folder copied without its optimizer.safetensors (the AdamW moments), or
# with that file damaged, still evaluates to the same loss, exports the same model.safetensors and
# merges to the same file as the whole folder, given as the step folder or as its run folder;
# boost train --resume and ckpt merge --optimizer from either copy are refused naming
# optimizer.safetensors, and a damaged model.safetensors is still refused by eval, export and merge.
. tests/sh/lib.sh

$BOOST train tiny-cola --backend cpu -D steps=2 -D eval_every=0 --quiet -o "$TMP/run" >"$TMP/train.out" 2>&1 \
  || { fail weights_only_train "$(tail -3 "$TMP/train.out")"; exit 0; }
step=$(ls -d "$TMP"/run/step-* | tail -1)
name=$(basename "$step")
# copies of the run folder (the plan beside the steps): one without the optimizer file, one with it damaged
for c in bare damaged; do
  mkdir -p "$TMP/$c" && cp -r "$TMP/run/plan" "$TMP/$c/" && cp -r "$step" "$TMP/$c/"
done
rm "$TMP/bare/$name/optimizer.safetensors"
python3 - "$TMP/damaged/$name/optimizer.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[-5] ^= 0xFF   # a flipped byte inside the moments' data: same size, another checksum
open(p, "wb").write(bytes(b))
PY

loss() { sed -n 's/^ *loss \([0-9.]*\).*/\1/p' "$1" | head -1; }
$BOOST eval "$step" --batches 2 --backend cpu >"$TMP/eval-run.out" 2>&1 \
  || fail weights_only_eval_whole "$(tail -3 "$TMP/eval-run.out")"
$BOOST export "$step" --format hf -o "$TMP/hf-run" >"$TMP/x-run.out" 2>&1 \
  || fail weights_only_export_whole "$(tail -3 "$TMP/x-run.out")"
$BOOST ckpt merge "$step" -o "$TMP/merge-run.safetensors" >"$TMP/m-run.out" 2>&1 \
  || fail weights_only_merge_whole "$(tail -3 "$TMP/m-run.out")"
for c in bare damaged; do
  for arg in "$TMP/$c/$name" "$TMP/$c"; do
    what=$([ "$arg" = "$TMP/$c" ] && echo run_folder || echo step_folder)
    $BOOST eval "$arg" --batches 2 --backend cpu >"$TMP/eval-$c.out" 2>&1 \
      && [ -n "$(loss "$TMP/eval-run.out")" ] && [ "$(loss "$TMP/eval-$c.out")" = "$(loss "$TMP/eval-run.out")" ] \
      && ok "weights_only_eval_${c}_$what" \
      || fail "weights_only_eval_${c}_$what" "$(tail -3 "$TMP/eval-$c.out") (whole: $(loss "$TMP/eval-run.out"))"
    rm -rf "$TMP/hf-$c"
    $BOOST export "$arg" --format hf -o "$TMP/hf-$c" >"$TMP/x-$c.out" 2>&1 \
      && cmp -s "$TMP/hf-run/model.safetensors" "$TMP/hf-$c/model.safetensors" \
      && cmp -s "$TMP/hf-run/config.json" "$TMP/hf-$c/config.json" && ok "weights_only_export_${c}_$what" \
      || fail "weights_only_export_${c}_$what" "$(tail -3 "$TMP/x-$c.out")"
    rm -f "$TMP/merge-$c.safetensors"
    $BOOST ckpt merge "$arg" -o "$TMP/merge-$c.safetensors" >"$TMP/m-$c.out" 2>&1 \
      && [ -s "$TMP/merge-run.safetensors" ] \
      && cmp -s "$TMP/merge-run.safetensors" "$TMP/merge-$c.safetensors" \
      && ok "weights_only_merge_${c}_$what" \
      || fail "weights_only_merge_${c}_$what" "$(tail -3 "$TMP/m-$c.out")"
  done
  # merging the moments needs them: refused, naming the file, nothing written
  $BOOST ckpt merge "$TMP/$c/$name" -o "$TMP/merge-opt-$c.safetensors" --optimizer \
      >"$TMP/m-opt-$c.out" 2>&1
  rc=$?
  [ $rc -ne 0 ] && grep -q 'optimizer.safetensors' "$TMP/m-opt-$c.out" \
    && [ ! -e "$TMP/merge-opt-$c.safetensors" ] && ok "weights_only_merge_optimizer_refused_$c" \
    || fail "weights_only_merge_optimizer_refused_$c" "exit $rc: $(tail -3 "$TMP/m-opt-$c.out")"
  # training needs the moments: resuming from the copy is refused, naming the file
  $BOOST train tiny-cola --backend cpu -D steps=3 -D eval_every=0 --quiet --resume "$TMP/$c/$name" \
      -o "$TMP/resume-$c" >"$TMP/resume-$c.out" 2>&1
  rc=$?
  [ $rc -ne 0 ] && grep -q 'optimizer.safetensors' "$TMP/resume-$c.out" && ok "weights_only_resume_refused_$c" \
    || fail "weights_only_resume_refused_$c" "exit $rc: $(tail -3 "$TMP/resume-$c.out")"
done
# the weights are still checked: a damaged model.safetensors is refused by eval and export
cp -r "$TMP/bare/$name" "$TMP/badmodel"
python3 - "$TMP/badmodel/model.safetensors" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[-5] ^= 0xFF
open(p, "wb").write(bytes(b))
PY
$BOOST eval "$TMP/badmodel" --batches 1 --backend cpu >"$TMP/eval-bad.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q 'model.safetensors: checksum mismatch' "$TMP/eval-bad.out" && ok weights_only_eval_checks_model \
  || fail weights_only_eval_checks_model "exit $rc: $(tail -3 "$TMP/eval-bad.out")"
$BOOST export "$TMP/badmodel" --format hf -o "$TMP/hf-bad" >"$TMP/x-bad.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q 'model.safetensors: checksum mismatch' "$TMP/x-bad.out" && ok weights_only_export_checks_model \
  || fail weights_only_export_checks_model "exit $rc: $(tail -3 "$TMP/x-bad.out")"
$BOOST ckpt merge "$TMP/badmodel" -o "$TMP/merge-bad.safetensors" >"$TMP/m-bad.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q 'model.safetensors: checksum mismatch' "$TMP/m-bad.out" \
  && [ ! -e "$TMP/merge-bad.safetensors" ] && ok weights_only_merge_checks_model \
  || fail weights_only_merge_checks_model "exit $rc: $(tail -3 "$TMP/m-bad.out")"
