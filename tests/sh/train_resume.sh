#!/usr/bin/env bash
# train_resume.sh: checkpoints and resume on the CPU backend, with tiny-cola for 20 steps.
# Run A (tp=2) saves at steps 10 and 20. Resumed from A's step 10, a run gives bit-identical
# losses and final tensors; a run killed with SIGKILL part way and resumed from its newest
# checkpoint does too, and so does one stopped by SIGTERM (which saves the step it finished).
# A's tp=2 checkpoint resumed at tp=1 and tp=4, and under the naive layout, gives the same losses
# to ~1e-5. The saved model is read by Python (json + struct; torch and the safetensors package
# when installed): every canon of the plan, with its shape, as F32.
. tests/sh/lib.sh
common=(tiny-cola --backend cpu -D steps=20 -D eval_every=10 --quiet)

# field LOG STEP KEY: the value of KEY on the log line of STEP
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
# same_losses LOG_A LOG_B FIRST LAST: the loss strings (%.9g of a float: exact) agree
same_losses() {
  for s in $(seq "$3" "$4"); do
    local a b; a=$(field "$1" "$s" loss); b=$(field "$2" "$s" loss)
    [ -n "$a" ] && [ "$a" = "$b" ] || { echo "# step $s: loss $a vs $b"; return 1; }
  done
}
# close_losses LOG_A LOG_B FIRST LAST TOL: |a-b| <= TOL * |a| at every step
close_losses() {
  for s in $(seq "$3" "$4"); do
    local a b; a=$(field "$1" "$s" loss); b=$(field "$2" "$s" loss)
    awk -v a="$a" -v b="$b" -v t="$5" 'BEGIN { exit !(a != "" && b != "" && (a - b) ^ 2 <= (t * a) ^ 2) }' \
      || { echo "# step $s: loss $a vs $b"; return 1; }
  done
}

$BOOST train "${common[@]}" -D tp=2 --save-every 10 -o "$TMP/a" --log "$TMP/a.jsonl" >"$TMP/a.out" 2>&1
rc=$?
if [ $rc != 0 ] || [ ! -f "$TMP/a/step-000010/state.json" ] || [ ! -f "$TMP/a/step-000020/model.safetensors" ]; then
  fail run_a_saves_every_10 "exit $rc: $(tail -3 "$TMP/a.out")"; exit 1
fi
ok run_a_saves_every_10
grep -q '"step": 10,' "$TMP/a/step-000010/state.json" && grep -q '"data_position": 10,' "$TMP/a/step-000010/state.json" \
  && grep -q '"tp": 2,' "$TMP/a/step-000010/state.json" && ok state_json_fields \
  || fail state_json_fields "$(head -c 400 "$TMP/a/step-000010/state.json")"

# 1. resume from step 10: the same losses, bit for bit, and the same final files
# (its log starts as a copy of A's, which goes on to step 20: the resumed run drops steps 11..20
# from it and logs them again)
cp "$TMP/a.jsonl" "$TMP/b.jsonl"
$BOOST train "${common[@]}" -D tp=2 --resume "$TMP/a/step-000010" -o "$TMP/b" --log "$TMP/b.jsonl" >"$TMP/b.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "resumed from .*step-000010: step 10" "$TMP/b.out" && ok resume_runs || fail resume_runs "exit $rc: $(tail -3 "$TMP/b.out")"
[ "$(grep -c '"loss":' "$TMP/b.jsonl")" = 20 ] && [ "$(grep -o '"step":[0-9]*,' "$TMP/b.jsonl" | sort | uniq -d | wc -l)" = 0 ] \
  && ok resume_log_drops_repeated_steps || fail resume_log_drops_repeated_steps "$(grep -c '"loss":' "$TMP/b.jsonl") steps logged, expected 1..20 once each"
same_losses "$TMP/a.jsonl" "$TMP/b.jsonl" 11 20 && ok resume_bit_identical_losses \
  || fail resume_bit_identical_losses "losses after resume differ from the uninterrupted run"
[ "$(field "$TMP/a.jsonl" 20 val_loss)" = "$(field "$TMP/b.jsonl" 20 val_loss)" ] && ok resume_same_val_loss \
  || fail resume_same_val_loss "$(field "$TMP/a.jsonl" 20 val_loss) vs $(field "$TMP/b.jsonl" 20 val_loss)"
cmp -s "$TMP/a/step-000020/model.safetensors" "$TMP/b/step-000020/model.safetensors" \
  && cmp -s "$TMP/a/step-000020/optimizer.safetensors" "$TMP/b/step-000020/optimizer.safetensors" \
  && ok resume_bit_identical_tensors || fail resume_bit_identical_tensors "step-20 safetensors files differ"

# 2. killed part way (SIGKILL), then resumed from the run's folder (its newest checkpoint)
$BOOST train "${common[@]}" -D tp=2 --save-every 3 -o "$TMP/c" --log "$TMP/c.jsonl" >"$TMP/c.out" 2>&1 &
pid=$!
for _ in $(seq 600); do [ -d "$TMP/c/step-000006" ] && break; sleep 0.05; done
kill -9 $pid 2>/dev/null; killed=$?
wait $pid 2>/dev/null
newest=$(ls -d "$TMP"/c/step-* | tail -1)
if [ $killed != 0 ] || [ -d "$TMP/c/step-000020" ]; then
  fail kill_mid_run "the run ended before it could be killed (newest checkpoint $newest)"
else
  ok kill_mid_run
  complete=1
  for d in "$TMP"/c/step-*; do
    for f in model.safetensors optimizer.safetensors state.json; do [ -s "$d/$f" ] || complete=0; done
    tail -c 3 "$d/state.json" | grep -q '}' || complete=0
  done
  [ $complete = 1 ] && ok killed_run_checkpoints_complete || fail killed_run_checkpoints_complete "a step folder is partial"
  from=$(basename "$newest" | sed 's/step-0*//')
  # the same log: the steps the killed run logged after its checkpoint are dropped, then logged again
  $BOOST train "${common[@]}" -D tp=2 --resume "$TMP/c" -o "$TMP/c" --log "$TMP/c.jsonl" >"$TMP/c2.out" 2>&1
  rc=$?
  [ $rc = 0 ] && same_losses "$TMP/a.jsonl" "$TMP/c.jsonl" $((from + 1)) 20 \
    && cmp -s "$TMP/a/step-000020/model.safetensors" "$TMP/c/step-000020/model.safetensors" \
    && ok kill_resume_bit_identical || fail kill_resume_bit_identical "exit $rc, resumed from step $from: $(tail -2 "$TMP/c2.out")"
  [ "$(grep -o '"step":[0-9]*,"loss"' "$TMP/c.jsonl" | sort | uniq -d | wc -l)" = 0 ] \
    && [ "$(grep -c '"loss"' "$TMP/c.jsonl")" = 20 ] && same_losses "$TMP/a.jsonl" "$TMP/c.jsonl" 1 20 \
    && ok kill_resume_log_has_each_step_once || fail kill_resume_log_has_each_step_once "$(grep -c '"loss"' "$TMP/c.jsonl") loss lines"
  ls -A "$TMP/c" | grep -q '^\.' && fail kill_leaves_no_temporary "$(ls -A "$TMP/c")" || ok kill_leaves_no_temporary
fi

# SIGTERM: the step under way ends, a checkpoint of it is saved, exit 143; resuming continues exactly
$BOOST train "${common[@]}" -D tp=2 -o "$TMP/s" --log "$TMP/s.jsonl" >"$TMP/s.out" 2>&1 &
pid=$!
for _ in $(seq 600); do n=$(cat "$TMP/s.jsonl" 2>/dev/null | grep -c '"loss"'); [ "${n:-0}" -ge 3 ] && break; sleep 0.05; done
kill -TERM $pid 2>/dev/null
wait $pid
rc=$?
last=$(grep -o '"step":[0-9]*,"loss"' "$TMP/s.jsonl" | tail -1 | grep -o '[0-9]*')
if [ $rc = 143 ] && [ -n "$last" ] && [ "$last" -lt 20 ] && [ -f "$TMP/s/step-$(printf %06d "$last")/state.json" ] \
   && grep -q "stopped by SIGTERM after step $last" "$TMP/s.out"; then
  ok sigterm_saves_the_last_step
  $BOOST train "${common[@]}" -D tp=2 --resume "$TMP/s" -o "$TMP/s" --log "$TMP/s2.jsonl" >"$TMP/s2.out" 2>&1
  rc=$?
  [ $rc = 0 ] && same_losses "$TMP/a.jsonl" "$TMP/s2.jsonl" $((last + 1)) 20 \
    && ok sigterm_resume_bit_identical || fail sigterm_resume_bit_identical "exit $rc: $(tail -2 "$TMP/s2.out")"
else
  fail sigterm_saves_the_last_step "exit $rc, last logged step '$last', folders: $(ls "$TMP/s" | tr '\n' ' ')"
fi

# 3. the tp=2 checkpoint resumed at tp=1 and at tp=4: the same model, summed in another order
for tp in 1 4; do
  $BOOST train "${common[@]}" -D tp=$tp --resume "$TMP/a/step-000010" --log "$TMP/tp$tp.jsonl" >"$TMP/tp$tp.out" 2>&1
  rc=$?
  [ $rc = 0 ] && grep -q "saved at tp=2 btp, now tp=$tp" "$TMP/tp$tp.out" && close_losses "$TMP/a.jsonl" "$TMP/tp$tp.jsonl" 11 20 1e-5 \
    && ok resume_tp2_checkpoint_at_tp$tp || fail resume_tp2_checkpoint_at_tp$tp "exit $rc: $(tail -2 "$TMP/tp$tp.out")"
done

# the same checkpoint under another layout of the same model (naive tensor parallelism)
$BOOST train "${common[@]}" -D tp=2 -D layout=naive --resume "$TMP/a/step-000010" --log "$TMP/naive.jsonl" >"$TMP/naive.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "saved at tp=2 btp, now tp=2 naive" "$TMP/naive.out" && close_losses "$TMP/a.jsonl" "$TMP/naive.jsonl" 11 20 1e-5 \
  && ok resume_btp_checkpoint_as_naive || fail resume_btp_checkpoint_as_naive "exit $rc: $(tail -2 "$TMP/naive.out")"

# 4. Python reads the checkpoint: every canon of the plan with its shape, F32, finite values
if command -v python3 >/dev/null; then
  python3 - "$TMP/a/plan/plan.txt" "$TMP/a/step-000020/model.safetensors" "$TMP/a/step-000020/optimizer.safetensors" \
    >"$TMP/py.out" 2>&1 <<'EOF'
import json, math, struct, sys
canons = {}
for line in open(sys.argv[1]):
    f = line.split()
    if f and f[0] == 'canon':
        shape = dict(kv.split('=', 1) for kv in f[2:])['shape']
        canons[f[1]] = [int(x) for x in shape.split('x')]
def read(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]
h, data = read(sys.argv[2])
names = {k for k in h if k != '__metadata__'}
assert names == set(canons), (sorted(names ^ set(canons)))
for name, shape in canons.items():
    t = h[name]
    assert t['dtype'] == 'F32' and t['shape'] == shape, (name, t, shape)
    b, e = t['data_offsets']
    vals = struct.unpack('<%df' % ((e - b) // 4), data[b:e])
    assert all(math.isfinite(v) for v in vals), name
assert h['__metadata__']['model'] == 'tiny-cola', h['__metadata__']
ho, _ = read(sys.argv[3])
assert {k for k in ho if k != '__metadata__'} == {p + n for n in canons for p in ('m.', 'v.')}
print('python: %d canons checked' % len(canons))
try:
    import warnings; warnings.filterwarnings('ignore')
    import torch
except Exception:
    print('python: torch not installed, json check only'); sys.exit(0)
state = {}
for name in canons:
    b, e = h[name]['data_offsets']
    state[name] = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(h[name]['shape'])
assert state['embed'].shape == (256, 128) and torch.isfinite(state['L0.q.A']).all()
print('python: torch state dict of %d tensors' % len(state))
try:
    from safetensors.torch import load_file
except Exception:
    print('python: the safetensors package is not installed, its loader not run'); sys.exit(0)
loaded = load_file(sys.argv[2])
assert set(loaded) == set(state) and all(torch.equal(loaded[k], state[k]) for k in state)
assert len(load_file(sys.argv[3])) == 2 * len(state)
print('python: safetensors.torch.load_file reads model and optimizer')
EOF
  rc=$?
  sed 's/^/# /' "$TMP/py.out"
  [ $rc = 0 ] && ok checkpoint_python_reads || fail checkpoint_python_reads "$(tail -2 "$TMP/py.out")"
else
  ok "checkpoint_python_reads # SKIP no python3"
fi
