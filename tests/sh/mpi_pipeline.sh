#!/usr/bin/env bash
# mpi_pipeline.sh: pipeline parallelism with one process per grid rank under Open MPI's mpirun (CPU
# backend; world = dp x pp x tp, tp fastest, then dp, then pp), send/recv over MPI point-to-point.
# tiny-cola-pp2 (the 4-layer tiny-cola, 1F1B over 4 micro-batches) at dp=2 x pp=2 x tp=2 (-np 8),
# pp=2 x tp=2 and pp=4 x tp=1 (-np 4), interleaved (virtual_stages=2) and ZeRO-1 logs the same losses,
# validation losses and gradient norms as the same grid run as threads, bit for bit, and the
# checkpoints hold the same bytes: the default sharded one (each process writes its rank file; the
# threads' --ckpt-format sharded folder is the same, file for file) and, for the first grid, the full
# one (--ckpt-format full, gathered to rank 0). Bit for bit, not merely close: a process runs one thread
# rank's arithmetic, the boundary tensors are copied unchanged, the tp/dp sums add in the thread
# group's order (as mpi_grid.sh checks), and the loss and gradient norm are gathered over the job
# and added in stage then rank order, exactly as the threads add them. A pp=2 x tp=2 checkpoint of
# the threads resumed by 4 processes at pp=4 x tp=1 logs what the threads' resume logs, and the
# processes' checkpoint resumed at pp=1 by 2 processes logs what the threads' resume there logs. A
# rank killed (SIGKILL) during a sharded save stops the job and leaves step folders that verify, from
# which the threads finish the run with its uninterrupted log. A world that does not hold the grid,
# another backend and a world without mpirun exit 2; a rank killed mid-run stops the job. MoE layers
# on both stages (tiny-cola-moe, pp=2 x tp=2) log the losses and routing statistics of pp=1, as
# threads and as processes. Without mpirun it prints a skip line.
. tests/sh/lib.sh
if ! command -v mpirun >/dev/null; then
  ok "mpi_pipeline # SKIP mpirun is not installed (Debian's openmpi-bin, tools/install-deps.sh)"; exit 0
fi
export BOOST_THREADS=${BOOST_THREADS:-1}   # up to 8 processes on a small machine (the bits do not depend on it)
mpi=(mpirun --oversubscribe --allow-run-as-root)
opts=(--backend cpu -D steps=4 -D eval_every=2 --save-every 2 --quiet)
numbers() { grep -o '"\(val_\)\?loss":[^,}]*\|"grad_norm":[^,}]*' "$1"; }
same_ckpt() {   # A B: the same files with the same bytes (full: model + optimizer; sharded: rank files, index, state)
  [ -n "$(ls "$1" 2>/dev/null)" ] && [ "$(ls "$1")" = "$(ls "$2" 2>/dev/null)" ] || return 1
  for f in "$1"/*; do cmp -s "$f" "$2/$(basename "$f")" || return 1; done
}

i=0
for g in "8:-D dp=2 -D pp=2 -D tp=2" "4:-D dp=1 -D pp=2 -D tp=2" "4:-D dp=1 -D pp=4 -D tp=1" \
         "4:-D dp=1 -D pp=2 -D tp=2 -D virtual_stages=2" "8:-D dp=2 -D pp=2 -D tp=2 -D zero=1"; do
  np=${g%%:*}; read -r -a defs <<<"${g#*:}"; i=$((i + 1))
  name="mpi_pp_np${np}_$(echo "${g#*:}" | sed 's/-D //g; s/ /_/g; s/=//g; s/virtual_stages/v/')"
  fmt=sharded mfmt=()   # the processes' default
  [ $i = 1 ] && fmt=full mfmt=(--ckpt-format full)
  $BOOST train tiny-cola-pp2 "${opts[@]}" "${defs[@]}" --ckpt-format $fmt --log "$TMP/t$i.jsonl" -o "$TMP/t$i" >"$TMP/t$i.out" 2>&1 \
    || { fail "${name}_same_as_threads" "threaded run failed: $(tail -2 "$TMP/t$i.out")"; continue; }
  timeout 300 "${mpi[@]}" -np "$np" "$BOOST" train tiny-cola-pp2 "${opts[@]}" "${defs[@]}" "${mfmt[@]}" --log "$TMP/m$i.jsonl" \
    -o "$TMP/m$i" >"$TMP/m$i.out" 2>&1
  rc=$?
  if [ $rc = 0 ] && grep -q "send/recv over MPI" "$TMP/m$i.out" && [ "$(numbers "$TMP/m$i.jsonl" | wc -l)" -ge 11 ] \
     && cmp -s <(numbers "$TMP/t$i.jsonl") <(numbers "$TMP/m$i.jsonl"); then
    ok "${name}_same_as_threads"
  else
    fail "${name}_same_as_threads" "exit $rc: $(numbers "$TMP/m$i.jsonl" | head -3 | tr '\n' ' ') vs $(numbers "$TMP/t$i.jsonl" | head -3 | tr '\n' ' ') $(grep -i 'boost' "$TMP/m$i.out" | head -3)"
  fi
  grep -q "\"storage\": \"$fmt\"" "$TMP/m$i/step-000004/state.json" 2>/dev/null \
    && same_ckpt "$TMP/t$i/step-000004" "$TMP/m$i/step-000004" && ok "${name}_same_${fmt}_checkpoint" \
    || fail "${name}_same_${fmt}_checkpoint" "step-4 folder differs from the threaded run's (or is missing or not $fmt): $(ls "$TMP/m$i/step-000004" 2>&1 | tr '\n' ' ')"
done

# resume across pp: the threads' pp=2 x tp=2 checkpoint of step 2 continued at pp=4 x tp=1, by threads
# and by 4 processes (each reads the tensors of its own stages): the same log
if [ -f "$TMP/t2/step-000002/state.json" ]; then
  $BOOST train tiny-cola-pp2 "${opts[@]}" -D pp=4 -D tp=1 --resume "$TMP/t2/step-000002" --log "$TMP/rt.jsonl" >"$TMP/rt.out" 2>&1
  timeout 300 "${mpi[@]}" -np 4 "$BOOST" train tiny-cola-pp2 "${opts[@]}" -D pp=4 -D tp=1 --resume "$TMP/t2/step-000002" \
    --log "$TMP/rm.jsonl" >"$TMP/rm.out" 2>&1
  rc=$?
  [ $rc = 0 ] && grep -q "resumed from .*step 2" "$TMP/rm.out" && [ "$(numbers "$TMP/rm.jsonl" | wc -l)" -ge 4 ] \
    && cmp -s <(numbers "$TMP/rt.jsonl") <(numbers "$TMP/rm.jsonl") && ok mpi_pp_resume_pp2_tp2_at_pp4_same_as_threads \
    || fail mpi_pp_resume_pp2_tp2_at_pp4_same_as_threads "exit $rc: $(grep -i 'boost\|resumed' "$TMP/rm.out" | head -3)"
else
  fail mpi_pp_resume_pp2_tp2_at_pp4_same_as_threads "the threads' pp=2 x tp=2 run left no step-2 checkpoint"
fi
# and back: the processes' sharded pp=2 x tp=2 checkpoint continued at pp=1 x tp=2 by 2 processes logs
# what the threads log from their own (the same bytes) at pp=1 x tp=2
if [ -f "$TMP/m2/step-000002/index.json" ]; then
  $BOOST train tiny-cola-pp2 "${opts[@]}" -D pp=1 -D tp=2 --resume "$TMP/t2/step-000002" --log "$TMP/rt1.jsonl" >"$TMP/rt1.out" 2>&1
  timeout 300 "${mpi[@]}" -np 2 "$BOOST" train tiny-cola-pp2 "${opts[@]}" -D pp=1 -D tp=2 --resume "$TMP/m2/step-000002" \
    --log "$TMP/rm1.jsonl" >"$TMP/rm1.out" 2>&1
  rc=$?
  [ $rc = 0 ] && [ "$(numbers "$TMP/rm1.jsonl" | wc -l)" -ge 4 ] && cmp -s <(numbers "$TMP/rt1.jsonl") <(numbers "$TMP/rm1.jsonl") \
    && ok mpi_pp_sharded_pp2_resumed_at_pp1_same_as_threads \
    || fail mpi_pp_sharded_pp2_resumed_at_pp1_same_as_threads "exit $rc: $(grep -i 'boost\|resumed' "$TMP/rm1.out" | head -3)"
else
  fail mpi_pp_sharded_pp2_resumed_at_pp1_same_as_threads "the processes' pp=2 x tp=2 run left no sharded step-2 checkpoint"
fi

# rank 3 killed (SIGKILL) while a sharded save is under way (every process sleeps 300 ms after its
# rank file): the job stops, the step folders left verify, and the threads finish the run from the
# newest one with the uninterrupted run's log
k="$TMP/kill-save"
BOOST_TEST_CKPT_SLEEP_MS=300 "${mpi[@]}" -np 4 "$BOOST" train tiny-cola-pp2 "${opts[@]}" -D pp=2 -D tp=2 --save-every 1 \
  -o "$k" --log "$k.jsonl" >"$k.out" 2>&1 &
launcher=$!
victim=
for _ in $(seq 1500); do   # after step 1's folder is published, at the next save's temporary folder
  if [ -d "$k/step-000001" ] && ls -a "$k" | grep -q '^\.step-.*\.tmp-'; then
    for pid in $(pgrep -P $launcher); do
      tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=3' && victim=$pid
    done
    [ -n "$victim" ] && kill -9 "$victim" && break
  fi
  sleep 0.02
done
for _ in $(seq 600); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
kill $launcher 2>/dev/null
wait $launcher
rc=$?
if [ -z "$victim" ]; then fail mpi_pp_killed_during_sharded_save "no save caught under way (exit $rc)"
else
  echo "# rank 3 killed during a save; newest folder left: $(ls "$k" | grep "^step-" | tail -1); mpirun exit $rc"
  $BOOST ckpt verify "$k" >"$k.v" 2>&1; vrc=$?
  $BOOST train tiny-cola-pp2 "${opts[@]}" -D pp=2 -D tp=2 --ckpt-format sharded --resume auto -o "$k" --log "$k.jsonl" >"$k.r" 2>&1
  rrc=$?
  [ $rc != 0 ] && [ $vrc = 0 ] && [ $rrc = 0 ] && cmp -s <(numbers "$TMP/t2.jsonl") <(numbers "$k.jsonl") \
    && ok mpi_pp_killed_during_sharded_save \
    || fail mpi_pp_killed_during_sharded_save "mpirun exit $rc, verify $vrc, resume $rrc: $(grep -v verified "$k.v" | head -2) $(tail -2 "$k.r")"
fi

# MoE over stages: tiny-cola-moe (2 MoE layers, one per stage) at pp=2 x tp=2 logs the same losses,
# gradient norms and routing statistics (moe_load, moe_dropped, moe_aux_loss, moe_z_loss) as pp=1 x
# tp=2, as threads and under mpirun -np 4: the aux terms of both stages reach each micro-batch's loss
moe=(tiny-cola-moe --backend cpu -D steps=3 -D eval_every=3 -D grad_accum=2 --quiet)
strip_rate() { sed 's/"tokens_per_s":[^,]*,//; s/"avg_tokens_per_s":[^,]*,//' "$1"; }
$BOOST train "${moe[@]}" -D pp=1 -D tp=2 --log "$TMP/moe1.jsonl" >"$TMP/moe1.out" 2>&1
$BOOST train "${moe[@]}" -D pp=2 -D tp=2 --log "$TMP/moet.jsonl" >"$TMP/moet.out" 2>&1
timeout 300 "${mpi[@]}" -np 4 "$BOOST" train "${moe[@]}" -D pp=2 -D tp=2 --save-every 2 -o "$TMP/moem" --log "$TMP/moem.jsonl" \
  >"$TMP/moem.out" 2>&1
rc=$?
[ $rc = 0 ] && [ "$(grep -c '"moe_load":\[\[' "$TMP/moe1.jsonl")" = 3 ] && cmp -s <(strip_rate "$TMP/moe1.jsonl") <(strip_rate "$TMP/moet.jsonl") \
  && cmp -s <(strip_rate "$TMP/moet.jsonl") <(strip_rate "$TMP/moem.jsonl") && ok mpi_pp_moe_pp2_tp2_logs_as_pp1_threads_and_processes \
  || fail mpi_pp_moe_pp2_tp2_logs_as_pp1_threads_and_processes "exit $rc: $(diff <(strip_rate "$TMP/moe1.jsonl") <(strip_rate "$TMP/moem.jsonl") | head -3) $(grep -i boost "$TMP/moem.out" | head -2)"
# the processes' sharded MoE checkpoint of step 2 continued by threads at pp=1 x tp=2: step 3 as pp=1's
$BOOST train "${moe[@]}" -D pp=1 -D tp=2 --resume "$TMP/moem/step-000002" --log "$TMP/moer.jsonl" >"$TMP/moer.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q '"storage": "sharded"' "$TMP/moem/step-000002/state.json" && grep -q '^{"step":3' "$TMP/moer.jsonl" \
  && cmp -s <(strip_rate "$TMP/moe1.jsonl" | grep '^{"step":3') <(strip_rate "$TMP/moer.jsonl" | grep '^{"step":3') \
  && ok mpi_pp_moe_sharded_pp2_resumed_at_pp1 || fail mpi_pp_moe_sharded_pp2_resumed_at_pp1 "exit $rc: $(tail -2 "$TMP/moer.out")"

# bad input: exit 2 with what to do, never a hang
expect2() {   # NAME PATTERN COMMAND...: exit 2 and PATTERN in the output
  local name=$1 pat=$2; shift 2
  timeout 120 "$@" >"$TMP/$name.out" 2>&1
  local rc=$?
  [ $rc = 2 ] && grep -q -- "$pat" "$TMP/$name.out" && ok "$name" || fail "$name" "exit $rc: $(grep -v '^-\|^$' "$TMP/$name.out" | head -2)"
}
small=(tiny-cola-pp2 --backend cpu -D steps=2 --quiet)
expect2 mpi_pp_world_disagrees_exit2 "world of 6 processes but the plan's grid is dp 2 x pp 2 x tp 2 = 8 ranks: launch mpirun -np 8" \
  "${mpi[@]}" -np 6 "$BOOST" train "${small[@]}" -D dp=2 -D pp=2 -D tp=2
expect2 mpi_pp_cuda_backend_exit2 "use --backend cpu" "${mpi[@]}" -np 4 "$BOOST" train "${small[@]}" -D pp=2 -D tp=2 --backend cuda
expect2 mpi_pp_world_without_mpirun_exit2 "only under Open MPI's mpirun" \
  env BOOST_WORLD_SIZE=4 BOOST_RANK=0 "$BOOST" train "${small[@]}" -D pp=2 -D tp=2

# rank 2 (pipeline rank 1) killed mid-run: its neighbours wait on it in MPI; the job stops, naming it
kill_rank_mid_run mpi_pp_killed_rank_stops_job 2 \
  "${mpi[@]}" -np 4 "$BOOST" train tiny-cola-pp2 --backend cpu -D pp=2 -D tp=2 -D steps=100000 -D eval_every=0 \
  --log "$TMP/kill.jsonl"
