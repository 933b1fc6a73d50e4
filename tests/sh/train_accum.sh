#!/usr/bin/env bash
# train_accum.sh: gradient accumulation. micro_batch 2 x grad_accum 2 and micro_batch 4 x
# grad_accum 1 see the same four windows per step (the shuffled window order depends only on the
# seed and the data position), average the loss over the same tokens and scale gradients by
# 1/(rows*grad_accum); so their losses agree to float rounding, step after step.
. tests/sh/lib.sh
common=(tiny-cola --backend cpu -D tp=1 -D steps=8 -D eval_every=0 --quiet)
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }

$BOOST train "${common[@]}" -D micro_batch=4 -D grad_accum=1 --log "$TMP/one.jsonl" >"$TMP/one.out" 2>&1 || { fail accum_runs "$(tail -2 "$TMP/one.out")"; exit 1; }
$BOOST train "${common[@]}" -D micro_batch=2 -D grad_accum=2 --log "$TMP/two.jsonl" >"$TMP/two.out" 2>&1 || { fail accum_runs "$(tail -2 "$TMP/two.out")"; exit 1; }
ok accum_runs
grep -q "micro_batch 2 x seq 64 x grad_accum 2 = 256 tokens per step" "$TMP/two.out" && ok accum_header \
  || fail accum_header "$(grep micro_batch "$TMP/two.out")"
same=1
for s in $(seq 1 8); do
  a=$(field "$TMP/one.jsonl" $s loss); b=$(field "$TMP/two.jsonl" $s loss)
  echo "# step $s: $a vs $b"
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(a != "" && b != "" && (a - b) ^ 2 <= (1e-5 * a) ^ 2) }' || same=0
done
[ $same = 1 ] && ok accum_matches_one_big_batch || fail accum_matches_one_big_batch "losses differ by more than 1e-5"
# and they are not trivially equal: the loss moves from step to step
[ "$(field "$TMP/one.jsonl" 1 loss)" != "$(field "$TMP/one.jsonl" 8 loss)" ] && ok accum_losses_move || fail accum_losses_move "constant loss"
