#!/usr/bin/env bash
# train_guard.sh: runs that would otherwise go wrong silently (tiny-cola, CPU, seconds). Two runs with
# the same -o: the second refuses (exit 2) naming the first's pid and host, and leaves the first's
# folder alone; a lock left by a killed run (a pid that no longer runs on this host) is taken over;
# a finished run leaves no lock. --log to a full disk (/dev/full) stops with a message naming the
# log and a non-zero exit. -D seed=1e30 is refused quoting what was written, not a wrapped integer.
# `--plan -D` takes the spec's bounds (common/train_settings.h): lr=-1, beta1=2, clip=-1 refused alike.
. tests/sh/lib.sh
common=(tiny-cola --backend cpu -D eval_every=0 --quiet)
host=$(hostname)

# 1. a second run on a folder in use
$BOOST train "${common[@]}" -D steps=100000 -o "$TMP/o" >"$TMP/first.out" 2>&1 &
first=$!
for _ in $(seq 300); do [ -e "$TMP/o/.lock" ] && break; sleep 0.1; done
$BOOST train "${common[@]}" -D steps=2 -o "$TMP/o" >"$TMP/second.out" 2>&1
rc=$?
kill -9 $first 2>/dev/null; { wait $first; } 2>/dev/null
[ $rc = 2 ] && grep -q "in use by another run: pid $first on host $host" "$TMP/second.out" && [ ! -e "$TMP/o/step-000002" ] \
  && ok second_run_same_folder_refused || fail second_run_same_folder_refused "exit $rc: $(tail -2 "$TMP/second.out")"

# 2. the first was killed (-9): its lock names a pid that no longer runs here, and is taken over
$BOOST train "${common[@]}" -D steps=2 -o "$TMP/o" >"$TMP/third.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "taking over the lock of pid $first on $host" "$TMP/third.out" && [ -d "$TMP/o/step-000002" ] \
  && ok stale_lock_taken_over || fail stale_lock_taken_over "exit $rc: $(tail -2 "$TMP/third.out")"
[ ! -e "$TMP/o/.lock" ] && ok finished_run_leaves_no_lock || fail finished_run_leaves_no_lock "$(cat "$TMP/o/.lock")"

# a lock of another host is not taken over
echo "1 another-host.example" >"$TMP/o/.lock"
$BOOST train "${common[@]}" -D steps=3 -o "$TMP/o" >"$TMP/fourth.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "pid 1 on host another-host.example" "$TMP/fourth.out" && [ -e "$TMP/o/.lock" ] \
  && ok other_hosts_lock_refused || fail other_hosts_lock_refused "exit $rc: $(tail -2 "$TMP/fourth.out")"

# 3. --log on a full disk
if [ -w /dev/full ]; then
  $BOOST train "${common[@]}" -D steps=3 --log /dev/full >"$TMP/full.out" 2>&1
  rc=$?
  [ $rc = 1 ] && grep -q "/dev/full: writing the log failed: No space left on device" "$TMP/full.out" \
    && ok log_on_full_disk_fails || fail log_on_full_disk_fails "exit $rc: $(tail -2 "$TMP/full.out")"
else
  ok "log_on_full_disk_fails # SKIP /dev/full is not writable here"
fi

# 4. a seed past the integer range is reported as written
$BOOST gen tiny-cola -D seed=1e30 -o "$TMP/g" >"$TMP/seed.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "seed must be an integer from 0 to 9007199254740992, got 1e30" "$TMP/seed.out" \
  && ok seed_1e30_reported_as_written || fail seed_1e30_reported_as_written "exit $rc: $(cat "$TMP/seed.out")"

# 5. --plan -D is checked by the spec's table: lr=-1, beta1=2, clip=-1 refused with the spec path's words
for kv in lr=-1 beta1=2 clip=-1; do
  $BOOST train tiny-cola --backend cpu -D "$kv" -D steps=1 >"$TMP/spec.out" 2>&1; src=$?
  $BOOST train --plan generated/tiny-cola --backend cpu -D "$kv" -D steps=1 >"$TMP/plan.out" 2>&1; prc=$?
  words=$(grep -o "${kv%%=*} must be .*, got ${kv#*=}" "$TMP/spec.out" | head -1)
  [ $src = 2 ] && [ $prc = 2 ] && [ -n "$words" ] && grep -qF "$words" "$TMP/plan.out" \
    && ok "plan_override_${kv%%=*}_refused_like_spec" \
    || fail "plan_override_${kv%%=*}_refused_like_spec" "spec exit $src '$words', plan exit $prc: $(tail -1 "$TMP/plan.out")"
done
