#!/usr/bin/env bash
# infer_eval_runs.sh: `boost eval` of checkpoints of pipelined and data-parallel runs (tiny specs, CPU,
# seconds). A pp=2 run trained on its own text with its own val_fraction and seed is evaluated on that
# run's validation split: eval's loss equals the training loop's last validation loss (its log), and
# names the run's data. A dp=2 checkpoint is read (through a dp=1 plan) with the same agreement.
# Windows that do not fill a micro-batch are said to be left out, as many as Python counts.
. tests/sh/lib.sh
cat README.md docs/*.md >"$TMP/text.txt"
last_val() { grep -o '"val_loss":[^,}]*' "$1" | tail -1 | cut -d: -f2; }
# agree A B: A and B within 1e-5 relative (the same split, another summation order)
agree() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && b != "" && d <= 1e-5 * m) }'; }

# a pipelined run on its own data
$BOOST train tiny-cola-pp2 --backend cpu -D steps=2 -D eval_every=0 -D data="$TMP/text.txt" -D val_fraction=0.3 -D seed=7 \
  --quiet -o "$TMP/pp" --log "$TMP/pp.jsonl" >"$TMP/pp.out" 2>&1 || fail pp2_run "$(tail -2 "$TMP/pp.out")"
$BOOST eval "$TMP/pp" --json >"$TMP/pp.eval" 2>"$TMP/pp.err"
rc=$?
want=$(last_val "$TMP/pp.jsonl"); got=$(grep -o '"loss": [^,]*' "$TMP/pp.eval" | cut -d' ' -f2)
[ $rc = 0 ] && grep -q "\"data\": \"$TMP/text.txt\"" "$TMP/pp.eval" && agree "$got" "$want" \
  && ok eval_pipelined_run_uses_its_data_and_split \
  || fail eval_pipelined_run_uses_its_data_and_split "exit $rc, loss $got vs training's $want: $(cat "$TMP/pp.eval" "$TMP/pp.err" | head -3)"

# a data-parallel run
$BOOST train tiny-cola --backend cpu -D dp=2 -D tp=1 -D steps=2 -D eval_every=0 --quiet -o "$TMP/dp" --log "$TMP/dp.jsonl" \
  >"$TMP/dp.out" 2>&1 || fail dp2_run "$(tail -2 "$TMP/dp.out")"
$BOOST eval "$TMP/dp" --json >"$TMP/dp.eval" 2>"$TMP/dp.err"
rc=$?
want=$(last_val "$TMP/dp.jsonl"); got=$(grep -o '"loss": [^,]*' "$TMP/dp.eval" | cut -d' ' -f2)
[ $rc = 0 ] && agree "$got" "$want" && ok eval_reads_dp2_checkpoint \
  || fail eval_reads_dp2_checkpoint "exit $rc, loss $got vs training's $want: $(cat "$TMP/dp.eval" "$TMP/dp.err" | head -3)"

# windows left out: a file of 3000 bytes at seq 64, micro_batch 4
head -c 3000 "$TMP/text.txt" >"$TMP/small.txt"
expect=$(python3 -c 'import os, sys; n = os.path.getsize(sys.argv[1]); print((n - 1) // 64 % 4)' "$TMP/small.txt")
$BOOST eval "$TMP/dp" --data "$TMP/small.txt" --json >"$TMP/w.eval" 2>"$TMP/w.err"
rc=$?
[ $rc = 0 ] && [ "$expect" -gt 0 ] && grep -q "\"windows_left_out\": $expect}" "$TMP/w.eval" \
  && grep -q "note: $expect windows of seq+1 = 65 tokens left out" "$TMP/w.err" && ok eval_says_windows_left_out \
  || fail eval_says_windows_left_out "exit $rc, want $expect: $(cat "$TMP/w.eval" "$TMP/w.err" | head -3)"
