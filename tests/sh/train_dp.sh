#!/usr/bin/env bash
# train_dp.sh: data parallelism in `boost train` on the CPU backend (ranks as threads), tiny-cola,
# 12 steps. A run at dp=2 x tp=2 saves at step 6; resumed at dp=1 x tp=2 with grad_accum=2 (the same
# global batch, the same data order) its losses match the uninterrupted dp=2 run's to 1e-5; the start
# prints the rank grid; zero=1 and zero=2 train and resume like zero=0 (zero=2 <-> zero=0 both
# ways); bad input (a launcher world that does not hold the grid, dp=0) exits 2 with a message;
# zero=1 at dp=1 is allowed (nothing to shard).
. tests/sh/lib.sh
common=(tiny-cola --backend cpu -D steps=12 -D eval_every=6 -D micro_batch=2 -D seq=32 --quiet)

field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
close_losses() {
  for s in $(seq "$3" "$4"); do
    local a b; a=$(field "$1" "$s" loss); b=$(field "$2" "$s" loss)
    awk -v a="$a" -v b="$b" -v t="$5" 'BEGIN { exit !(a != "" && b != "" && (a - b) ^ 2 <= (t * a) ^ 2) }' \
      || { echo "# step $s: loss $a vs $b"; return 1; }
  done
}

$BOOST train "${common[@]}" -D tp=2 -D dp=2 --save-every 6 -o "$TMP/a" --log "$TMP/a.jsonl" >"$TMP/a.out" 2>&1
rc=$?
if [ $rc != 0 ] || [ ! -f "$TMP/a/step-000006/state.json" ]; then
  fail dp2_tp2_run_saves "exit $rc: $(tail -3 "$TMP/a.out")"; exit 1
fi
ok dp2_tp2_run_saves
grep -q "rank 3: tp=1 dp=1 pp=0; tp group {2,3} dp group {1,3}" "$TMP/a.out" && ok prints_rank_grid \
  || fail prints_rank_grid "$(grep -A5 'rank grid' "$TMP/a.out" | head -6)"
# a step consumes dp micro-batches: the data position at step 6 is 12
grep -q '"data_position": 12,' "$TMP/a/step-000006/state.json" && ok data_position_counts_dp_micro_batches \
  || fail data_position_counts_dp_micro_batches "$(grep data_position "$TMP/a/step-000006/state.json")"

# the same global batch at dp=1 x grad_accum=2, uninterrupted: the same losses
$BOOST train "${common[@]}" -D tp=2 -D dp=1 -D grad_accum=2 --log "$TMP/b.jsonl" >"$TMP/b.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/a.jsonl" "$TMP/b.jsonl" 1 12 1e-5 && ok dp2_equals_dp1_grad_accum2 \
  || fail dp2_equals_dp1_grad_accum2 "exit $rc: $(tail -2 "$TMP/b.out")"

# saved at dp=2 x tp=2, resumed at dp=1 x tp=2 (grad_accum=2): the continued losses
cp "$TMP/a.jsonl" "$TMP/c.jsonl"
$BOOST train "${common[@]}" -D tp=2 -D dp=1 -D grad_accum=2 --resume "$TMP/a/step-000006" --log "$TMP/c.jsonl" >"$TMP/c.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "step 6" "$TMP/c.out" && close_losses "$TMP/a.jsonl" "$TMP/c.jsonl" 7 12 1e-5 && ok resume_dp2_at_dp1 \
  || fail resume_dp2_at_dp1 "exit $rc: $(tail -2 "$TMP/c.out")"

# ZeRO-1: the same losses as zero=0; its checkpoint (canonical AdamW moments gathered from the dp
# shards) resumes at dp=1 like the zero=0 one
$BOOST train "${common[@]}" -D tp=2 -D dp=2 -D zero=1 --save-every 6 -o "$TMP/z" --log "$TMP/z.jsonl" >"$TMP/z.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/a.jsonl" "$TMP/z.jsonl" 1 12 1e-5 && ok zero1_same_losses_as_zero0 \
  || fail zero1_same_losses_as_zero0 "exit $rc: $(tail -2 "$TMP/z.out")"
cp "$TMP/a.jsonl" "$TMP/zr.jsonl"
$BOOST train "${common[@]}" -D tp=2 -D dp=1 -D grad_accum=2 --resume "$TMP/z/step-000006" --log "$TMP/zr.jsonl" >"$TMP/zr.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/a.jsonl" "$TMP/zr.jsonl" 7 12 1e-5 && ok resume_zero1_dp2_at_dp1 \
  || fail resume_zero1_dp2_at_dp1 "exit $rc: $(tail -2 "$TMP/zr.out")"

# ZeRO-2 (gradients sharded too): the same losses as zero=0; its checkpoint resumes at zero=0 and
# zero=0's resumes at zero=2, both continuing the uninterrupted zero=0 run
$BOOST train "${common[@]}" -D tp=2 -D dp=2 -D zero=2 --save-every 6 -o "$TMP/z2" --log "$TMP/z2.jsonl" >"$TMP/z2.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/a.jsonl" "$TMP/z2.jsonl" 1 12 1e-5 && ok zero2_same_losses_as_zero0 \
  || fail zero2_same_losses_as_zero0 "exit $rc: $(tail -2 "$TMP/z2.out")"
cp "$TMP/a.jsonl" "$TMP/z20.jsonl"
$BOOST train "${common[@]}" -D tp=2 -D dp=2 --resume "$TMP/z2/step-000006" --log "$TMP/z20.jsonl" >"$TMP/z20.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/a.jsonl" "$TMP/z20.jsonl" 7 12 1e-5 && ok resume_zero2_at_zero0 \
  || fail resume_zero2_at_zero0 "exit $rc: $(tail -2 "$TMP/z20.out")"
cp "$TMP/a.jsonl" "$TMP/z02.jsonl"
$BOOST train "${common[@]}" -D tp=2 -D dp=2 -D zero=2 --resume "$TMP/a/step-000006" --log "$TMP/z02.jsonl" \
  >"$TMP/z02.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/a.jsonl" "$TMP/z02.jsonl" 7 12 1e-5 && ok resume_zero0_at_zero2 \
  || fail resume_zero0_at_zero2 "exit $rc: $(tail -2 "$TMP/z02.out")"

# bad input: exit 2 with a message naming the problem
BOOST_RANK=0 BOOST_WORLD_SIZE=3 $BOOST train "${common[@]}" -D tp=2 -D dp=2 >"$TMP/w.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "world of 3 processes but the plan's grid is dp 2 x pp 1 x tp 2 = 4" "$TMP/w.out" && ok launcher_world_mismatch_exit2 \
  || fail launcher_world_mismatch_exit2 "exit $rc: $(tail -2 "$TMP/w.out")"
$BOOST train "${common[@]}" -D tp=1 -D dp=1 -D zero=1 -D steps=1 >"$TMP/z1.out" 2>&1
rc=$?
[ $rc = 0 ] && ok zero1_dp1_is_a_no_op || fail zero1_dp1_is_a_no_op "exit $rc: $(tail -2 "$TMP/z1.out")"
$BOOST train "${common[@]}" -D dp=0 >"$TMP/d0.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "dp" "$TMP/d0.out" && ok dp0_exit2 || fail dp0_exit2 "exit $rc: $(tail -2 "$TMP/d0.out")"
