#!/usr/bin/env bash
# train_spikes.sh: loss spikes (train spike_window, spike_z, spike_rollback_after,
# spike_max_rollbacks) on the CPU backend with tiny-cola, 20 or 30 steps a run (seconds).
# BOOST_TEST_SPIKE_BATCHES=N multiplies the loss of the batch a plain run reads at step N by 1000.
# One such batch: the step is skipped (logged "spike":true, a line on the terminal) at the limit
# mean + z*sd of the previous 5 good losses (recomputed here), and the later losses equal those of
# a run resumed from step 11's checkpoint with the step and data position advanced by hand (a run
# that never saw that batch). Three in a row: rolled back to the last good checkpoint (step 10)
# with the data past them, the losses afterwards equal a hand-advanced resume;
# spike_max_rollbacks=0 stops instead. spike_z=0.01: every skip and every update is the decision
# the log's own numbers give (loss and gradient-norm spikes). Under mpirun (2 processes, dp=2) the
# ranks roll back together, with the losses of the same run as threads.
. tests/sh/lib.sh
common=(tiny-cola --backend cpu -D eval_every=0 --quiet -D steps=20 -D spike_window=5)

# field LOG STEP KEY: the value of KEY on the last log line of STEP (a rollback repeats steps)
field() { grep "^{\"step\":$2[,}]" "$1" | tail -1 | grep -o "\"$3\":[^,}]*" | cut -d: -f2; }

# advance CKPT STEP SEQ: the checkpoint's step and data position set by hand (its self-checksum
# dropped: the resume then says the fields are unchecked)
advance() {
  python3 - "$1/state.json" "$2" "$3" <<'PY'
import re, sys
path, step, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
text = open(path).read()
text = text[:text.index(',\n  "state_crc32c"')] + '\n}\n'
text = re.sub(r'"step": \d+', '"step": %d' % step, text)
text = re.sub(r'"data_sequences": \d+', '"data_sequences": %d' % seq, text)
text = re.sub(r'"data_position": \d+', '"data_position": %d' % (seq // 4), text)
text = re.sub(r'"losses": \[([^]]*)\]', lambda m: '"losses": [%s, 0]' % m.group(1), text)
open(path, 'w').write(text)
PY
}

# same_losses LOG1 LOG2 FROM TO: 1 when steps FROM..TO have equal losses in both logs
same_losses() {
  local s
  for s in $(seq "$3" "$4"); do
    local a b
    a=$(field "$1" $s loss); b=$(field "$2" $s loss)
    [ -n "$a" ] && [ "$a" = "$b" ] || { echo 0; return; }
  done
  echo 1
}

# 1. one spike at step 12
BOOST_TEST_SPIKE_BATCHES=12 $BOOST train "${common[@]}" --save-every 1 -o "$TMP/a" \
  --log "$TMP/a.jsonl" >"$TMP/a.out" 2>&1
rc=$?
said="step 12: loss spike: the loss .* is above its window's limit .*: update skipped (1 in a row"
[ $rc = 0 ] && [ "$(grep -c '"spike":true' "$TMP/a.jsonl")" = 1 ] \
  && grep -q '"step":12,.*"skipped":true.*"spike":true' "$TMP/a.jsonl" \
  && grep -q "$said" "$TMP/a.out" \
  && grep -q "1 loss spike skipped, 0 rollbacks" "$TMP/a.out" && ok spike_step_skipped_and_logged \
  || fail spike_step_skipped_and_logged "exit $rc: $(grep -m2 spike "$TMP/a.out")"
# the limit on the terminal is mean + 6 sd (sample) of steps 7..11's losses
python3 - "$TMP/a.jsonl" "$TMP/a.out" >"$TMP/py.out" 2>&1 <<'PY'
import json, re, statistics, sys
steps = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if 'step' in r: steps[r['step']] = r
w = [steps[s]['loss'] for s in range(7, 12)]
limit = statistics.mean(w) + 6 * statistics.stdev(w)
out = open(sys.argv[2]).read()
said = float(re.search(r"step 12: loss spike: .* limit ([0-9.e+-]+):", out).group(1))
assert abs(said - limit) <= 1e-5 * limit, (said, limit)
assert steps[12]['loss'] > limit, steps[12]
print('python: limit %.6g as said' % limit)
PY
rc=$?
sed 's/^/# /' "$TMP/py.out"
[ $rc = 0 ] && ok spike_limit_is_mean_plus_z_sd \
  || fail spike_limit_is_mean_plus_z_sd "$(tail -2 "$TMP/py.out")"
# a run that never saw batch 12: step 11's checkpoint advanced by one step and one batch (4
# sequences)
cp -r "$TMP/a/step-000011" "$TMP/b"
advance "$TMP/b" 12 48
$BOOST train --plan "$TMP/a/plan" --backend cpu --quiet --resume "$TMP/b" --log "$TMP/b.jsonl" \
  >"$TMP/b.out" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(same_losses "$TMP/a.jsonl" "$TMP/b.jsonl" 13 20)" = 1 ] \
  && ok spike_run_equals_run_without_the_batch \
  || fail spike_run_equals_run_without_the_batch "exit $rc: $(tail -2 "$TMP/b.out")"

# 2. three spikes in a row (12, 13, 14): back to step 10 (step 11's good update followed it), the
# data at sequence 56 (past batch 14)
BOOST_TEST_SPIKE_BATCHES=12,13,14 $BOOST train "${common[@]}" --save-every 5 -o "$TMP/r" \
  --log "$TMP/r.jsonl" >"$TMP/r.out" 2>&1
rc=$?
said="step 14: 3 loss spikes in a row: rolling back to $TMP/r/step-000010 (rollback 1 of at most 2)"
[ $rc = 0 ] && grep -qF "$said" "$TMP/r.out" \
  && grep -q "rolled back to step 10; data position advanced to sequence 56" "$TMP/r.out" \
  && [ "$(grep -c '"spike":true' "$TMP/r.jsonl")" = 3 ] \
  && grep -q "3 loss spikes skipped, 1 rollback" "$TMP/r.out" && [ -d "$TMP/r/step-000020" ] \
  && ok three_spikes_roll_back \
  || fail three_spikes_roll_back "exit $rc: $(grep -m3 roll "$TMP/r.out")"
cp -r "$TMP/r/step-000010" "$TMP/c"
advance "$TMP/c" 10 56
$BOOST train --plan "$TMP/r/plan" --backend cpu --quiet --resume "$TMP/c" --log "$TMP/c.jsonl" \
  >"$TMP/c.out" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(same_losses "$TMP/r.jsonl" "$TMP/c.jsonl" 11 20)" = 1 ] \
  && ok rollback_resumes_with_data_advanced \
  || fail rollback_resumes_with_data_advanced "exit $rc: $(tail -2 "$TMP/c.out")"

# no rollback left: stop with a message; no checkpoint to roll back to: the same
BOOST_TEST_SPIKE_BATCHES=12,13,14 $BOOST train "${common[@]}" -D spike_max_rollbacks=0 \
  --save-every 5 -o "$TMP/s" >"$TMP/s.out" 2>"$TMP/s.err"
rc=$?
said="step 14: 3 loss spikes in a row after 0 rollbacks (spike_max_rollbacks=0): stopping"
[ $rc = 1 ] && grep -qF "$said" "$TMP/s.err" \
  && grep -q "last good checkpoint: $TMP/s/step-000010" "$TMP/s.err" \
  && [ ! -d "$TMP/s/step-000015" ] \
  && ok no_rollback_left_stops || fail no_rollback_left_stops "exit $rc: $(cat "$TMP/s.err")"
BOOST_TEST_SPIKE_BATCHES=12,13,14 $BOOST train "${common[@]}" >"$TMP/n.out" 2>"$TMP/n.err"
rc=$?
[ $rc = 1 ] && grep -q "no good checkpoint to roll back to" "$TMP/n.err" \
  && ok no_checkpoint_no_rollback || fail no_checkpoint_no_rollback "exit $rc: $(cat "$TMP/n.err")"

# 3. spike_z=0.01 and no rollbacks, 30 steps: every step's decision recomputed from the log's
# numbers (a loss spike logs no gradient norm: it is not measured)
$BOOST train "${common[@]}" -D steps=30 -D spike_z=0.01 -D spike_rollback_after=0 \
  --log "$TMP/z.jsonl" >"$TMP/z.out" 2>&1
rc=$?
python3 - "$TMP/z.jsonl" >"$TMP/pz.out" 2>&1 <<'PY'
import json, statistics, sys
losses, norms, kinds = [], [], {'loss': 0, 'norm': 0, 'good': 0}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if 'step' not in r or 'loss' not in r: continue
    full = len(losses) >= 5
    lim = lambda v: statistics.mean(v[-5:]) + 0.01 * statistics.stdev(v[-5:])
    by_loss = full and r['loss'] > lim(losses)
    by_norm = full and not by_loss and r['grad_norm'] is not None and r['grad_norm'] > lim(norms)
    assert bool(r.get('spike')) == (by_loss or by_norm), (r, by_loss, by_norm)
    if by_loss: assert r['grad_norm'] is None, r
    kinds['loss' if by_loss else 'norm' if by_norm else 'good'] += 1
    if not r.get('spike'):
        losses.append(r['loss']); norms.append(r['grad_norm'])
assert kinds['loss'] > 0 and kinds['norm'] > 0, kinds
print('python: every decision agrees:', kinds)
PY
prc=$?
sed 's/^/# /' "$TMP/pz.out"
[ $rc = 0 ] && [ $prc = 0 ] && ok spike_decisions_match_the_log \
  || fail spike_decisions_match_the_log "exit $rc: $(tail -2 "$TMP/pz.out")"

# 4. off by default: the plan has no spike settings; bounds checked like the other settings
$BOOST gen tiny-cola -o "$TMP/g" >/dev/null 2>&1
! grep -q spike "$TMP/g/plan.txt" && ok spikes_off_by_default \
  || fail spikes_off_by_default "$(grep '^train' "$TMP/g/plan.txt")"
$BOOST train --plan "$TMP/g" -D spike_z=0 >"$TMP/o" 2>"$TMP/e"; rc=$?
[ $rc = 2 ] && grep -q "spike_z must be a number > 0" "$TMP/e" && ok spike_z_zero_refused \
  || fail spike_z_zero_refused "exit $rc: $(cat "$TMP/e")"

# 5. two processes (mpirun, dp=2, sharded checkpoints): both ranks take the same decisions and roll
# back together; the losses equal those of the same run with the ranks as threads
if command -v mpirun >/dev/null; then
  dp2=(tiny-cola --backend cpu -D dp=2 -D tp=1 -D eval_every=0 --quiet -D steps=20 -D spike_window=5
       --save-every 5)
  export BOOST_TEST_SPIKE_BATCHES=12,13,14
  $BOOST train "${dp2[@]}" -o "$TMP/t" --log "$TMP/t.jsonl" >"$TMP/t.out" 2>&1
  trc=$?
  timeout 120 mpirun --oversubscribe --allow-run-as-root -np 2 -x BOOST_TEST_SPIKE_BATCHES \
    $BOOST train "${dp2[@]}" -o "$TMP/m" --log "$TMP/m.jsonl" >"$TMP/m.out" 2>&1
  rc=$?
  unset BOOST_TEST_SPIKE_BATCHES
  [ $trc = 0 ] && [ $rc = 0 ] && grep -q "rolled back to step 10" "$TMP/m.out" \
    && [ "$(same_losses "$TMP/t.jsonl" "$TMP/m.jsonl" 11 20)" = 1 ] \
    && ok mpi_ranks_roll_back_together \
    || fail mpi_ranks_roll_back_together "exit $trc/$rc: $(tail -3 "$TMP/m.out")"
else
  ok "mpi_ranks_roll_back_together # SKIP mpirun is not installed"
fi
