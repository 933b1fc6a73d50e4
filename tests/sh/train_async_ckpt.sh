#!/usr/bin/env bash
# train_async_ckpt.sh: asynchronous checkpoints (boost train --ckpt-async) on the CPU backend with
# tiny-cola. Saving every step on a background thread gives step folders byte for byte those of
# synchronous saves (full at tp=2, sharded at dp=2 x tp=2 zero=1) and the losses of a run that never
# saves; --keep keeps the same folders; each save logs the time it took and the time the step loop
# lost to it. A run killed (SIGKILL) while a save is written (BOOST_TEST_CKPT_SLEEP_MS widens the
# window) leaves folders that verify and resumes to the uninterrupted losses; SIGTERM waits for the
# pending save; a failed background save stops the run. Under mpirun (when installed) async saves
# (sharded at -np 4, full at -np 2) equal the threads' synchronous ones.
. tests/sh/lib.sh
common=(tiny-cola --backend cpu -D steps=8 -D eval_every=4 --quiet)

# field LOG STEP KEY: the value of KEY on the log line of STEP
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
same_losses() {   # LOG_A LOG_B FIRST LAST: the training losses of those steps are equal
  for s in $(seq "$3" "$4"); do
    local a b; a=$(field "$1" "$s" loss); b=$(field "$2" "$s" loss)
    [ -n "$a" ] && [ "$a" = "$b" ] || { echo "# step $s: loss $a vs $b"; return 1; }
  done
}
# same_folders A B: the same step folders with the same files, byte for byte
same_folders() {
  [ "$(ls "$1" | grep '^step-')" = "$(ls "$2" | grep '^step-')" ] && [ -n "$(ls "$1" | grep '^step-')" ] || return 1
  local s; for s in $(ls "$1" | grep '^step-'); do diff -r "$1/$s" "$2/$s" >/dev/null || { echo "# $s differs"; return 1; }; done
}

# 1. save every step, full storage at tp=2: async == sync folders, losses == never saving
$BOOST train "${common[@]}" -D tp=2 --log "$TMP/n.jsonl" >"$TMP/n.out" 2>&1
$BOOST train "${common[@]}" -D tp=2 --save-every 1 -o "$TMP/s" --log "$TMP/s.jsonl" >"$TMP/s.out" 2>&1
rs=$?
$BOOST train tiny-cola --backend cpu -D steps=8 -D eval_every=4 -D tp=2 --save-every 1 --ckpt-async -o "$TMP/a" \
  --log "$TMP/a.jsonl" >"$TMP/a.out" 2>&1
ra=$?
[ $rs = 0 ] && [ $ra = 0 ] && same_folders "$TMP/s" "$TMP/a" && ok async_full_every_step_equals_sync \
  || fail async_full_every_step_equals_sync "exit $rs/$ra: $(tail -2 "$TMP/a.out")"
same_losses "$TMP/n.jsonl" "$TMP/a.jsonl" 1 8 && [ "$(field "$TMP/n.jsonl" 8 val_loss)" = "$(field "$TMP/a.jsonl" 8 val_loss)" ] \
  && ok async_losses_equal_never_saving || fail async_losses_equal_never_saving "see above"
$BOOST ckpt verify "$TMP/a" >"$TMP/av.out" 2>&1 && ok async_full_verifies || fail async_full_verifies "$(head -3 "$TMP/av.out")"
# the log: one record per save, with the save's time and the (smaller) time lost by the step loop
n=$(grep -c '^{"checkpoint_step":' "$TMP/a.jsonl")
bad=$(grep '^{"checkpoint_step":' "$TMP/a.jsonl" | awk -F'[:,]' '{ if ($4 == "" || $6 == "" || $6 < 0 || $4 < 0) print }' | wc -l)
[ "$n" = 8 ] && [ "$bad" = 0 ] && grep -q 'saved .*/step-000008 (.*s in the background, the step loop lost .*s, .*s of it copying)' "$TMP/a.out" \
  && ok async_logs_time_lost_per_save || fail async_logs_time_lost_per_save "$n records, $bad bad: $(grep saved "$TMP/a.out" | head -2)"
grep -q '"checkpoint_step"' "$TMP/s.jsonl" && fail sync_log_unchanged "a synchronous run logged a checkpoint record" \
  || ok sync_log_unchanged

# 2. sharded, dp=2 x tp=2 zero=1, with --keep 3
z=(tiny-cola --backend cpu -D steps=8 -D eval_every=4 --quiet -D dp=2 -D tp=2 -D zero=1 --ckpt-format sharded --save-every 1 --keep 3)
$BOOST train "${z[@]}" -o "$TMP/zs" --log "$TMP/zs.jsonl" >"$TMP/zs.out" 2>&1
rs=$?
$BOOST train "${z[@]}" --ckpt-async -o "$TMP/za" --log "$TMP/za.jsonl" >"$TMP/za.out" 2>&1
ra=$?
[ $rs = 0 ] && [ $ra = 0 ] && same_folders "$TMP/zs" "$TMP/za" && [ "$(ls "$TMP/za" | grep -c '^step-')" = 3 ] \
  && grep -q '"storage": "sharded"' "$TMP/za/step-000008/state.json" && same_losses "$TMP/zs.jsonl" "$TMP/za.jsonl" 1 8 \
  && ok async_sharded_keep3_equals_sync || fail async_sharded_keep3_equals_sync "exit $rs/$ra: $(ls "$TMP/za" | tr '\n' ' ') $(tail -2 "$TMP/za.out")"

# 3. killed (SIGKILL) while an async save is written: the earlier folders verify and --resume
# continues to the uninterrupted run's losses
$BOOST train tiny-cola --backend cpu -D steps=16 -D eval_every=8 --quiet -D tp=2 --log "$TMP/n16.jsonl" >/dev/null 2>&1
hit=0
for trial in 1 2; do
  k="$TMP/k$trial"
  # after the first save, at a random point
  kill_during_save "async_kill_$trial" "$k" 1 0.2 1.5 env BOOST_TEST_CKPT_SLEEP_MS=200 $BOOST train tiny-cola \
    --backend cpu -D steps=16 -D eval_every=8 --quiet -D tp=2 --save-every 1 --ckpt-async -o "$k" --log "$k.jsonl"
  [ $killed = 0 ] && [ "$tmpleft" -gt 0 ] && hit=$((hit + 1))
  [ $verified = 1 ] || continue
  $BOOST train tiny-cola --backend cpu -D steps=16 -D eval_every=8 --quiet -D tp=2 --save-every 4 --ckpt-async \
    --resume auto -o "$k" --log "$k.jsonl" >"$k.r" 2>&1
  rc=$?
  [ $rc = 0 ] && same_losses "$TMP/n16.jsonl" "$k.jsonl" 1 16 && [ "$(ls -a "$k" | grep -c '^\.step-')" = 0 ] \
    && ok "async_kill_${trial}_resumes" || fail "async_kill_${trial}_resumes" "exit $rc: $(tail -2 "$k.r")"
done
[ $hit -gt 0 ] && ok async_kill_landed_inside_a_save || fail async_kill_landed_inside_a_save "no trial left a temporary folder"

# 4. SIGTERM while saves run in the background: the stop waits for the pending save, then saves
# the stop's step; every folder verifies and the log says where to resume
k="$TMP/term"
BOOST_TEST_CKPT_SLEEP_MS=300 $BOOST train tiny-cola --backend cpu -D steps=100000 -D eval_every=0 -D tp=2 \
  --save-every 1 --ckpt-async -o "$k" >"$k.out" 2>&1 &
pid=$!
t=0; while [ ! -d "$k/step-000002" ] && [ $t -lt 600 ]; do sleep 0.1; t=$((t + 1)); done
kill -TERM $pid; wait $pid; rc=$?
last=$(ls "$k" | grep '^step-' | tail -1)
[ $rc = 143 ] && [ "$(ls -a "$k" | grep -c '^\.step-')" = 0 ] && $BOOST ckpt verify "$k" >/dev/null 2>&1 \
  && grep -q "resume with: --resume $k/$last" "$k.out" && ok async_sigterm_waits_for_the_save \
  || fail async_sigterm_waits_for_the_save "exit $rc, $last: $(ls -a "$k" | tr '\n' ' ') $(tail -2 "$k.out")"

# 5. a save that fails in the background (a file size limit of 200 KiB, SIGXFSZ ignored: write()
# fails with EFBIG) stops the run as a synchronous one does: exit 1, the same message, the temporary
# folder removed, and the run does not go on to its end
k="$TMP/xfsz"
(trap '' XFSZ; ulimit -f 200; exec $BOOST train tiny-cola --backend cpu -D steps=6 -D eval_every=0 -D tp=2 --save-every 2 \
  --ckpt-async --quiet -o "$k" --log "$k.jsonl") >"$k.out" 2>"$k.err"
rc=$?
[ $rc = 1 ] && grep -q "step-000002: checkpoint not written (.*File too large); the temporary folder was removed and earlier" \
  "$k.err" && [ -z "$(ls -A "$k" | grep -v '^plan$')" ] && [ "$(grep -c '^{"step":[1-9]' "$k.jsonl")" -lt 6 ] \
  && ok async_failed_save_stops_the_run || fail async_failed_save_stops_the_run "exit $rc: $(head -c 300 "$k.err") $(ls -A "$k")"

# 6. bad input: --ckpt-async without -o
$BOOST train "${common[@]}" --ckpt-async >"$TMP/e.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--ckpt-async needs -o DIR" "$TMP/e.out" && ok async_needs_outdir || fail async_needs_outdir "exit $rc"

# 7. under mpirun -np 4 (dp=2 x tp=2, zero=1): every process writes its rank file on its own
# thread; the sums of the save run between steps; the folders equal the threads' synchronous ones
if ! command -v mpirun >/dev/null; then ok "mpi_async_sharded # SKIP mpirun is not installed"; exit 0; fi
mpi=(timeout 300 mpirun --oversubscribe --allow-run-as-root)
BOOST_TEST_CKPT_SLEEP_MS=100 "${mpi[@]}" -np 4 "$BOOST" train "${z[@]}" --ckpt-async -o "$TMP/zm" --log "$TMP/zm.jsonl" \
  >"$TMP/zm.out" 2>&1
rc=$?
[ $rc = 0 ] && same_folders "$TMP/zs" "$TMP/zm" && same_losses "$TMP/zs.jsonl" "$TMP/zm.jsonl" 1 8 \
  && [ "$(grep -c '^{"checkpoint_step":' "$TMP/zm.jsonl")" = 8 ] && ok mpi_async_sharded_equals_threads_sync \
  || fail mpi_async_sharded_equals_threads_sync "exit $rc: $(ls "$TMP/zm" | tr '\n' ' ') $(grep -i 'boost\|error' "$TMP/zm.out" | head -3)"
# full storage under mpirun: process 0 writes, every process learns the outcome
"${mpi[@]}" -np 2 "$BOOST" train "${common[@]}" -D tp=2 --save-every 1 --ckpt-format full --ckpt-async -o "$TMP/fm" \
  --log "$TMP/fm.jsonl" >"$TMP/fm.out" 2>&1
rc=$?
[ $rc = 0 ] && same_folders "$TMP/s" "$TMP/fm" && ok mpi_async_full_equals_threads_sync \
  || fail mpi_async_full_equals_threads_sync "exit $rc: $(grep -i 'boost\|error' "$TMP/fm.out" | head -3)"
