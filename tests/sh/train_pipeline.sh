#!/usr/bin/env bash
# train_pipeline.sh: `boost train` of a pp > 1 plan on the CPU backend (tiny-cola-4l, 1F1B over
# 4 micro-batches): the losses of 6 steps at pp=2 equal those at pp=1 (same global batches) to
# 1e-5; a pp=2 checkpoint of step 3 resumed at pp=1 and at pp=4 x tp=2 gives the losses of the
# uninterrupted pp=2 run; bad pipeline input (grad_accum < pp) exits 2 with a message.
. tests/sh/lib.sh
common=(tiny-cola-pp2 --backend cpu -D seq=32 -D steps=6 -D eval_every=3 --quiet)

field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
# close_losses LOG_A LOG_B FIRST LAST TOL: |a-b| <= TOL * |a| at every step
close_losses() {
  for s in $(seq "$3" "$4"); do
    local a b; a=$(field "$1" "$s" loss); b=$(field "$2" "$s" loss)
    awk -v a="$a" -v b="$b" -v t="$5" 'BEGIN { exit !(a != "" && b != "" && (a - b) ^ 2 <= (t * a) ^ 2) }' \
      || { echo "# step $s: loss $a vs $b"; return 1; }
  done
}

$BOOST train "${common[@]}" -D tp=1 -D pp=2 --save-every 3 -o "$TMP/p2" --log "$TMP/p2.jsonl" >"$TMP/p2.out" 2>&1
rc=$?
[ $rc = 0 ] && [ -f "$TMP/p2/step-000003/model.safetensors" ] && grep -q "pipeline: pp=2" "$TMP/p2.out" \
  && ok train_pp2_saves || { fail train_pp2_saves "exit $rc: $(tail -3 "$TMP/p2.out")"; exit 1; }
$BOOST train "${common[@]}" -D tp=1 -D pp=1 --log "$TMP/p1.jsonl" >"$TMP/p1.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/p2.jsonl" "$TMP/p1.jsonl" 1 6 1e-5 && ok train_pp2_losses_equal_pp1 \
  || fail train_pp2_losses_equal_pp1 "exit $rc: $(tail -2 "$TMP/p1.out")"

# resume the pp=2 checkpoint of step 3 at pp=1 and at pp=4 x tp=2
$BOOST train "${common[@]}" -D tp=1 -D pp=1 --resume "$TMP/p2/step-000003" --log "$TMP/r1.jsonl" >"$TMP/r1.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/p2.jsonl" "$TMP/r1.jsonl" 4 6 1e-5 && ok resume_pp2_at_pp1 \
  || fail resume_pp2_at_pp1 "exit $rc: $(tail -2 "$TMP/r1.out")"
$BOOST train "${common[@]}" -D tp=2 -D pp=4 --resume "$TMP/p2/step-000003" --log "$TMP/r4.jsonl" >"$TMP/r4.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/p2.jsonl" "$TMP/r4.jsonl" 4 6 1e-5 && ok resume_pp2_at_pp4_tp2 \
  || fail resume_pp2_at_pp4_tp2 "exit $rc: $(tail -2 "$TMP/r4.out")"

# bad input: fewer micro-batches than stages
$BOOST gen tiny-cola-pp2 -D pp=4 -D grad_accum=2 -o "$TMP/bad" >"$TMP/bad.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "grad_accum (2) is less than pp (4)" "$TMP/bad.out" && ok gen_pp_grad_accum_error \
  || fail gen_pp_grad_accum_error "exit $rc: $(cat "$TMP/bad.out")"
