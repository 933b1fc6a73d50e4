#!/usr/bin/env bash
# train_faults.sh: checkpoint integrity, retention and a run that goes bad, on the CPU backend with
# tiny-cola. --save-every 10 --keep 2 over 50 steps leaves step 40 and 50; state.json's CRC-32C of
# each file agrees with one computed by Python; two bytes flipped in the tensor data of the newest
# checkpoint make `boost ckpt verify` and an explicit --resume fail naming the file and step 40,
# while --resume DIR and --resume auto pass over it to step 40 (and train on bit-identically). A
# diverging run (lr=10, weight_decay=10) skips its non-finite steps, logs them, and stops after
# max_bad_steps in a row with exit 1 naming the step, the last good checkpoint and what to try.
. tests/sh/lib.sh
common=(tiny-cola --backend cpu -D eval_every=0 --quiet)

# field LOG STEP KEY: the value of KEY on the log line of STEP
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }

# 1. retention: 50 steps, a checkpoint every 10, keep 2
$BOOST train "${common[@]}" -D steps=50 --save-every 10 --keep 2 -o "$TMP/r" --log "$TMP/r.jsonl" >"$TMP/r.out" 2>&1
rc=$?
left=$(cd "$TMP/r" && ls -d step-* 2>/dev/null | tr '\n' ' ')
[ $rc = 0 ] && [ "$left" = "step-000040 step-000050 " ] && ! ls -A "$TMP/r" | grep -q '^\.' \
  && ok keep_2_leaves_the_newest_two || fail keep_2_leaves_the_newest_two "exit $rc, left: '$left' ($(tail -2 "$TMP/r.out"))"
cp -r "$TMP/r" "$TMP/r-orig"

# 2. the recorded checksums are CRC-32C of the files' bytes (computed here independently)
python3 - "$TMP/r/step-000050" >"$TMP/py.out" 2>&1 <<'PY'
import json, os, sys
d = sys.argv[1]
table = []
for n in range(256):
    c = n
    for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    table.append(c)
def crc32c(data):
    c = 0xFFFFFFFF
    for b in data: c = (c >> 8) ^ table[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF
assert crc32c(b'123456789') == 0xE3069283
files = json.load(open(os.path.join(d, 'state.json')))['files']
assert set(files) == {'model.safetensors', 'optimizer.safetensors'}, files
for name, rec in files.items():
    raw = open(os.path.join(d, name), 'rb').read()
    assert rec['bytes'] == len(raw), (name, rec, len(raw))
    assert int(rec['crc32c'], 16) == crc32c(raw), (name, rec['crc32c'], hex(crc32c(raw)))
print('python: %d files match their CRC-32C' % len(files))
PY
rc=$?
sed 's/^/# /' "$TMP/py.out"
[ $rc = 0 ] && ok state_json_crc32c_matches_python || fail state_json_crc32c_matches_python "$(tail -2 "$TMP/py.out")"
$BOOST ckpt verify "$TMP/r/step-000050" >"$TMP/v.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "step-000050: verified" "$TMP/v.out" && ok ckpt_verify_good_exits_0 || fail ckpt_verify_good_exits_0 "exit $rc: $(cat "$TMP/v.out")"

# 3. two bytes flipped inside the tensor data of step 50's model.safetensors
python3 - "$TMP/r/step-000050/model.safetensors" <<'PY'
import struct, sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
at = 8 + struct.unpack('<Q', b[:8])[0] + 4096      # past the length and the JSON header
b[at] ^= 0x20; b[at + 1] ^= 0x01
open(p, 'wb').write(b)
PY
$BOOST ckpt verify "$TMP/r/step-000050" >"$TMP/v.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "step-000050/model.safetensors: checksum mismatch" "$TMP/v.out" && grep -q "earlier checkpoint that verifies is $TMP/r/step-000040" "$TMP/v.out" \
  && ok ckpt_verify_flipped_bytes_fails || fail ckpt_verify_flipped_bytes_fails "exit $rc: $(cat "$TMP/v.out")"
$BOOST ckpt verify "$TMP/r" >"$TMP/v.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "step-000040: verified" "$TMP/v.out" && grep -q "step-000050: DAMAGED" "$TMP/v.out" \
  && ok ckpt_verify_run_folder || fail ckpt_verify_run_folder "exit $rc: $(cat "$TMP/v.out")"
$BOOST train "${common[@]}" -D steps=60 --resume "$TMP/r/step-000050" -o "$TMP/r" >"$TMP/e.out" 2>"$TMP/e.err"
rc=$?
[ $rc = 2 ] && grep -q "step-000050/model.safetensors: checksum mismatch" "$TMP/e.err" \
  && grep -q "newest earlier checkpoint that verifies is $TMP/r/step-000040" "$TMP/e.err" && [ ! -e "$TMP/r/step-000060" ] \
  && ok resume_damaged_step_fails_naming_file_and_earlier || fail resume_damaged_step_fails_naming_file_and_earlier "exit $rc: $(head -c 400 "$TMP/e.err")"
sed 's/^/#   /' "$TMP/e.err" | head -2

# --resume on the run folder and --resume auto: step 40, with a warning naming step 50; the losses of
# steps 41..50 are the uninterrupted run's, bit for bit
for how in folder auto; do
  rm -rf "$TMP/a-$how"; cp -r "$TMP/r" "$TMP/a-$how"
  arg=$TMP/a-$how; [ $how = auto ] && arg=auto
  cp "$TMP/r.jsonl" "$TMP/a-$how.jsonl"
  $BOOST train "${common[@]}" -D steps=50 --resume "$arg" -o "$TMP/a-$how" --log "$TMP/a-$how.jsonl" >"$TMP/a.out" 2>"$TMP/a.err"
  rc=$?
  same=1
  for s in $(seq 41 50); do [ -n "$(field "$TMP/r.jsonl" $s loss)" ] && [ "$(field "$TMP/r.jsonl" $s loss)" = "$(field "$TMP/a-$how.jsonl" $s loss)" ] || same=0; done
  [ $rc = 0 ] && grep -q "resumed from $TMP/a-$how/step-000040: step 40" "$TMP/a.out" && grep -q "warning: .*step-000050: passed over: .*checksum mismatch" "$TMP/a.err" \
    && [ $same = 1 ] && cmp -s "$TMP/r-orig/step-000050/model.safetensors" "$TMP/a-$how/step-000050/model.safetensors" \
    && ok resume_${how}_picks_newest_verified || fail resume_${how}_picks_newest_verified "exit $rc, same losses $same: $(tail -2 "$TMP/a.out") $(head -c 300 "$TMP/a.err")"
done

# every checkpoint damaged: --resume auto refuses instead of starting over
cp -r "$TMP/r" "$TMP/all-bad"
printf 'x' >>"$TMP/all-bad/step-000040/optimizer.safetensors"
$BOOST train "${common[@]}" -D steps=60 --resume auto -o "$TMP/all-bad" >"$TMP/b.out" 2>"$TMP/b.err"
rc=$?
[ $rc = 2 ] && grep -q "none of its 2 checkpoint folders verifies" "$TMP/b.err" && [ ! -e "$TMP/all-bad/step-000060" ] \
  && ok resume_auto_all_damaged_fails || fail resume_auto_all_damaged_fails "exit $rc: $(head -c 300 "$TMP/b.err")"
# an empty -o folder: --resume auto starts at step 0
$BOOST train "${common[@]}" -D steps=3 --resume auto -o "$TMP/fresh" >"$TMP/f.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "no checkpoint in $TMP/fresh yet: starting at step 0" "$TMP/f.out" && [ -f "$TMP/fresh/step-000003/state.json" ] \
  && ok resume_auto_fresh_start || fail resume_auto_fresh_start "exit $rc: $(tail -2 "$TMP/f.out")"
$BOOST train "${common[@]}" -D steps=3 --resume auto >"$TMP/o" 2>"$TMP/e"; rc=$?
[ $rc = 2 ] && grep -q "needs -o DIR" "$TMP/e" && ok resume_auto_needs_o || fail resume_auto_needs_o "exit $rc: $(cat "$TMP/e")"
$BOOST train "${common[@]}" -D steps=3 --keep 2 >"$TMP/o" 2>"$TMP/e"; rc=$?
[ $rc = 2 ] && grep -q "needs -o DIR" "$TMP/e" && ok keep_needs_o || fail keep_needs_o "exit $rc: $(cat "$TMP/e")"
$BOOST ckpt verify "$TMP/nowhere" >"$TMP/o" 2>"$TMP/e"; rc=$?
[ $rc = 2 ] && grep -q "not a checkpoint" "$TMP/e" && ok ckpt_verify_not_a_checkpoint || fail ckpt_verify_not_a_checkpoint "exit $rc: $(cat "$TMP/e")"

# 4. a run that goes bad from a checkpoint at step 3: lr=10 with weight_decay=10 (the largest the
# settings allow) multiplies the weights by 1 - lr*wd = -99 each update, so a few updates later they
# overflow and every loss is NaN (first at step B): skipped, logged, and max_bad_steps=3 in a row stop
# the run at step B+2; the last good checkpoint is the one of step B-2 (step B-1's good update followed it)
bad=(-D lr=10 -D min_lr=10 -D warmup=0 -D weight_decay=10 -D steps=30)
$BOOST train "${common[@]}" -D steps=3 -D max_bad_steps=3 -o "$TMP/d" >"$TMP/d.out" 2>&1
grep -q "^train .* max_bad_steps=3" "$TMP/d/plan/plan.txt" && ok max_bad_steps_in_the_plan || fail max_bad_steps_in_the_plan "$(grep '^train' "$TMP/d/plan/plan.txt")"
cp -r "$TMP/d/step-000003" "$TMP/d-keep"
$BOOST train --plan "$TMP/d/plan" "${bad[@]}" --resume "$TMP/d" -o "$TMP/d" --save-every 1 --log "$TMP/d.jsonl" >"$TMP/d2.out" 2>"$TMP/d2.err"
rc=$?
sed 's/^/#   /' "$TMP/d2.err"
B=$(grep -m1 '"loss":null' "$TMP/d.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2)
B=${B:-0}
[ $rc = 1 ] && [ "$B" -gt 4 ] && grep -q "step $((B + 2)): 3 updates in a row skipped" "$TMP/d2.err" \
  && grep -q "last good checkpoint: $TMP/d/step-$(printf %06d $((B - 2)))" "$TMP/d2.err" \
  && grep -q "lower learning rate" "$TMP/d2.err" && grep -q "clip" "$TMP/d2.err" \
  && ok diverging_run_stops_after_k || fail diverging_run_stops_after_k "exit $rc, first NaN at step $B: $(head -c 400 "$TMP/d2.err")"
nskip=$(grep -c '"skipped":true' "$TMP/d.jsonl")
[ "$nskip" = 3 ] && [ "$(field "$TMP/d.jsonl" $((B + 2)) skipped_total)" = 3 ] && [ "$(field "$TMP/d.jsonl" $((B + 1)) loss)" = null ] \
  && [ "$(grep -c 'update skipped' "$TMP/d2.out")" = 3 ] && ok skipped_steps_logged || fail skipped_steps_logged "$nskip skipped lines: $(tail -2 "$TMP/d.jsonl")"
# no checkpoint at a skipped step; the one it resumed from is untouched
[ ! -e "$TMP/d/step-$(printf %06d $B)" ] && [ ! -e "$TMP/d/step-$(printf %06d $((B + 2)))" ] && cmp -s "$TMP/d-keep/model.safetensors" "$TMP/d/step-000003/model.safetensors" \
  && ok no_checkpoint_at_skipped_steps || fail no_checkpoint_at_skipped_steps "$(ls "$TMP/d")"
# a plan without the key (written before it existed): the default, 5
sed 's/ max_bad_steps=[0-9]*//' "$TMP/d/plan/plan.txt" >"$TMP/old-plan.txt"
$BOOST train --plan "$TMP/old-plan.txt" "${bad[@]}" --resume "$TMP/d-keep" --quiet >"$TMP/o" 2>"$TMP/e"
rc=$?
[ $rc = 1 ] && grep -q "step $((B + 4)): 5 updates in a row skipped" "$TMP/e" && ok max_bad_steps_default_5 || fail max_bad_steps_default_5 "exit $rc: $(head -c 300 "$TMP/e")"
$BOOST train --plan "$TMP/d/plan" -D max_bad_steps=0 >"$TMP/o" 2>"$TMP/e"; rc=$?
[ $rc = 2 ] && grep -q "max_bad_steps=0: max_bad_steps must be an integer from 1 to 1000000, got 0" "$TMP/e" && ok max_bad_steps_zero_refused || fail max_bad_steps_zero_refused "exit $rc: $(cat "$TMP/e")"
