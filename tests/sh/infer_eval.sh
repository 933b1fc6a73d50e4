#!/usr/bin/env bash
# infer_eval.sh: `boost eval` on the CPU backend. tiny-cola trains 20 steps (validation every 10,
# checkpoints at 10 and 20); eval of each checkpoint gives the validation loss the training log
# printed at that step, and the same at tp=1 and in the naive layout (regenerated plans). Perplexity
# is exp(loss), bits per byte loss/ln 2; --data FILE and a glob evaluate every window of the files;
# no progress bar without a terminal.
. tests/sh/lib.sh

field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
jget() { grep -o "\"$2\": [^,}]*" "$1" | head -1 | cut -d' ' -f2; }
# close A B TOL: |a-b| <= TOL * |a|, both numbers
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { exit !(a != "" && b != "" && (a - b) ^ 2 <= (t * a) ^ 2) }'; }

$BOOST train tiny-cola --backend cpu -D steps=20 -D eval_every=10 --save-every 10 --quiet -o "$TMP/run" \
  --log "$TMP/run.jsonl" >"$TMP/train.out" 2>&1 || { fail eval_train "$(tail -3 "$TMP/train.out")"; exit 1; }

for s in 10 20; do
  $BOOST eval "$TMP/run/step-0000$s" --json --backend cpu >"$TMP/e$s.json" 2>"$TMP/e$s.err"
  rc=$?
  logged=$(field "$TMP/run.jsonl" $s val_loss); got=$(jget "$TMP/e$s.json" loss)
  [ $rc = 0 ] && close "$logged" "$got" 1e-6 && ok eval_equals_logged_val_loss_step_$s \
    || fail eval_equals_logged_val_loss_step_$s "exit $rc, eval $got, training log $logged: $(cat "$TMP/e$s.err")"
done
logged=$(field "$TMP/run.jsonl" 20 val_loss)
for v in "tp=1" "layout=naive"; do
  got=$($BOOST eval "$TMP/run" -D $v --json --backend cpu 2>"$TMP/v.err" | grep -o '"loss": [^,}]*' | cut -d' ' -f2)
  close "$logged" "$got" 1e-5 && ok "eval_same_at_${v/=/_}" || fail "eval_same_at_${v/=/_}" "eval $got vs $logged: $(tail -2 "$TMP/v.err")"
done

loss=$(jget "$TMP/e20.json" loss); ppl=$(jget "$TMP/e20.json" perplexity); bpb=$(jget "$TMP/e20.json" bits_per_byte)
close "$(awk -v l="$loss" 'BEGIN{printf "%.12g", exp(l)}')" "$ppl" 1e-6 && close "$(awk -v l="$loss" 'BEGIN{printf "%.12g", l/log(2)}')" "$bpb" 1e-6 \
  && ok eval_perplexity_and_bits_per_byte || fail eval_perplexity_and_bits_per_byte "loss $loss perplexity $ppl bits/byte $bpb"
[ ! -s "$TMP/e20.err" ] && ok eval_no_progress_bar_without_tty || fail eval_no_progress_bar_without_tty "stderr: $(head -c 200 "$TMP/e20.err")"

# --data: a text file (every window), and a glob over two files
head -c 3000 build/corpus.txt >"$TMP/a.txt"; tail -c 3000 build/corpus.txt >"$TMP/b.txt"
$BOOST eval "$TMP/run" --data "$TMP/a.txt" --json --backend cpu >"$TMP/d1.json" 2>"$TMP/d1.err"
# 3000 bytes: 46 windows of 65 tokens, 11 micro-batches of 4
[ "$(jget "$TMP/d1.json" batches)" = 11 ] && [ -n "$(jget "$TMP/d1.json" bits_per_byte)" ] && ok eval_data_file \
  || fail eval_data_file "$(cat "$TMP/d1.json" "$TMP/d1.err")"
$BOOST eval "$TMP/run" --data "$TMP/*.txt" --json --backend cpu >"$TMP/d2.json" 2>"$TMP/d2.err"
[ "$(jget "$TMP/d2.json" batches)" = 22 ] && ok eval_data_glob || fail eval_data_glob "$(cat "$TMP/d2.json" "$TMP/d2.err")"
$BOOST eval "$TMP/run" --data "$TMP/a.txt" --batches 3 --json --backend cpu 2>/dev/null | grep -q '"batches": 3,' \
  && ok eval_batches_limit || fail eval_batches_limit "--batches 3 not honoured"
# on a terminal (script(1) gives it one): a progress bar that reaches the last batch
if command -v script >/dev/null; then
  script -qec "$BOOST eval '$TMP/run' --backend cpu --batches 3" /dev/null >"$TMP/tty.out" 2>&1
  grep -q '\] 3/3 batches' "$TMP/tty.out" && ok eval_progress_bar_on_tty || fail eval_progress_bar_on_tty "$(head -c 300 "$TMP/tty.out")"
else
  ok "eval_progress_bar_on_tty # SKIP script(1) is not installed"
fi
