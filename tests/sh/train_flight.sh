#!/usr/bin/env bash
# train_flight.sh: flight records and stragglers on the CPU backend, tiny-cola at dp=2 x tp=2 (four
# ranks as threads). A rank that stops answering (BOOST_TEST_SLOW_RANK=3:6000 sleeps 6 s in each
# pass) makes its group's collective time out (BOOST_COLL_TIMEOUT=1): the run stops with exit 1
# naming the timeout, and every other rank prints its flight record naming the collective it
# waited on (a plan line that is a collective of the plan). A slower rank (a 150 ms sleep per pass)
# is named as a straggler, whichever it is, also under mpirun; --straggler-factor off silences it.
. tests/sh/lib.sh
run=(tiny-cola --backend cpu -D dp=2 -D tp=2 -D eval_every=0 --quiet)
$BOOST gen tiny-cola -D dp=2 -D tp=2 -o "$TMP/plan" >/dev/null 2>&1 || { fail gen "boost gen tiny-cola failed"; exit 0; }

# 1. a hang: rank 3 sleeps 6 s, its tp partner rank 2 gives up after 1 s, every rank stops
start=$(date +%s)
BOOST_TEST_SLOW_RANK=3:6000 BOOST_COLL_TIMEOUT=1 timeout 120 $BOOST train --plan "$TMP/plan" --backend cpu -D steps=2 \
  -D eval_every=0 --quiet >"$TMP/hang.out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
[ $rc = 1 ] && grep -q "did not finish within 1 s (BOOST_COLL_TIMEOUT)" "$TMP/hang.out" && [ $took -lt 60 ] \
  && ok "hang_times_out_exit1 (${took}s)" || fail hang_times_out_exit1 "exit $rc after ${took}s: $(tail -3 "$TMP/hang.out")"
for r in 0 1 2; do
  line=$(grep -o "rank $r of 4 waited on plan line [0-9]* [a-z_]*" "$TMP/hang.out" | head -1)
  n=$(echo "$line" | awk '{ print $9 }'); kind=$(echo "$line" | awk '{ print $10 }')
  # the named line of the plan is that collective
  if grep -q "flight record of rank $r of 4" "$TMP/hang.out" && [ -n "$n" ] \
     && sed -n "${n}p" "$TMP/plan/plan.txt" | grep -q "^ *$kind\b"; then
    ok "rank_${r}_flight_record_names_its_wait ($kind at plan line $n)"
  else fail "rank_${r}_flight_record_names_its_wait" "'$line': $(sed -n "${n:-1}p" "$TMP/plan/plan.txt") $(grep -c flight "$TMP/hang.out")"; fi
done
# rank 2 (the sleeper's tp partner) waited on a tp collective of the forward pass, not done
grep -q "rank 2 of 4 waited on plan line [0-9]* [a-z_]* (group tp" "$TMP/hang.out" \
  && grep -A100 "flight record of rank 2 of 4" "$TMP/hang.out" | grep -q "NOT DONE after .* <- waiting on this one" \
  && ok rank2_waited_on_tp_group || fail rank2_waited_on_tp_group "$(grep "rank 2 of 4 waited" "$TMP/hang.out")"

# 2. a straggler: rank 2 (then rank 1) 150 ms slower per pass is named; off: nothing said
for slow in 2 1; do
  BOOST_TEST_SLOW_RANK=$slow:150 timeout 300 $BOOST train "${run[@]}" -D steps=6 --print-every 3 --log "$TMP/s$slow.jsonl" \
    >"$TMP/s$slow.out" 2>&1
  rc=$?
  [ $rc = 0 ] && grep -q "steps 1-3: rank $slow is a straggler: .* outside collective waits, .*x the median" "$TMP/s$slow.out" \
    && grep -q "^{\"straggler\":$slow,\"steps\":\[4,6\]" "$TMP/s$slow.jsonl" \
    && [ "$(grep -c 'is a straggler' "$TMP/s$slow.out")" = "$(grep -c "rank $slow is a straggler" "$TMP/s$slow.out")" ] \
    && ok "straggler_rank_${slow}_named" || fail "straggler_rank_${slow}_named" "exit $rc: $(grep -i 'straggler\|boost' "$TMP/s$slow.out" | head -3)"
done
BOOST_TEST_SLOW_RANK=2:150 timeout 300 $BOOST train "${run[@]}" -D steps=6 --print-every 3 --straggler-factor off \
  >"$TMP/off.out" 2>&1
rc=$?
[ $rc = 0 ] && ! grep -q straggler "$TMP/off.out" && ok straggler_check_off || fail straggler_check_off "exit $rc"
$BOOST train "${run[@]}" -D steps=1 --straggler-factor 0.5 >"$TMP/bad.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "straggler-factor 0.5: expected a number above 1 or off" "$TMP/bad.out" && ok straggler_factor_checked \
  || fail straggler_factor_checked "exit $rc"

# 3. under mpirun -np 4 (one process per rank): the ranks' times are summed over the processes at
# log time and rank 2 is named on rank 0's output
if ! command -v mpirun >/dev/null; then ok "mpi_straggler # SKIP mpirun is not installed"; exit 0; fi
BOOST_TEST_SLOW_RANK=2:150 timeout 300 mpirun --oversubscribe --allow-run-as-root -np 4 -x BOOST_TEST_SLOW_RANK \
  "$BOOST" train "${run[@]}" -D steps=6 --print-every 3 --log "$TMP/m.jsonl" >"$TMP/m.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q "steps 4-6: rank 2 is a straggler" "$TMP/m.out" && grep -q '^{"straggler":2,"steps":\[1,3\]' "$TMP/m.jsonl" \
  && ok mpi_straggler_rank_2_named || fail mpi_straggler_rank_2_named "exit $rc: $(grep -i 'straggler\|boost\|error' "$TMP/m.out" | head -3)"
