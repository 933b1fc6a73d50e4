#!/usr/bin/env bash
# mpi_grid.sh: the whole dp x tp rank grid as processes under Open MPI's mpirun (CPU backend), and
# resuming across grids. tiny-cola at dp=2 x tp=2 under -np 4 (zero=0 and zero=1), at dp=2 x tp=1
# under -np 2 and at dp=4 x tp=1 under -np 4 (also ZeRO-1 with a bf16 dp wire, and ZeRO-2; and
# ZeRO-2 at dp=2 x tp=2 with grad_accum 2, also against zero=0 and resumed mid-run) logs the
# same losses, validation losses and gradient norms as the threaded run, bit for bit (so does the
# MoE model at dp=2 x tp=2), and rank 0's checkpoint holds the same bytes. Bit for bit, not merely
# close: a process runs exactly one thread rank's arithmetic, and every sum over a group (tp or dp)
# adds the members' values in index order 0..n-1 as the thread group does (MPI only moves the
# values: an alltoallv reduce-scatter, the owner adds, an all-gather), as does every sum over the
# processes (losses, gradient norm, canonical tensors) in rank order. A world that disagrees with
# the grid exits 2; a rank killed with SIGKILL stops the job, naming it. Resume (threads, fp32): saved
# at dp=2 x tp=2, resumed at dp=1 x tp=4 (grad_accum=2) and at dp=4 x tp=1 (half the micro-batch):
# the same global batches, so the continued losses equal the uninterrupted run's within 1e-5 relative;
# resumed at dp=4 x tp=1 by 4 processes, the same log as the threads' resume, bit for bit.
# Without mpirun the process part prints a skip line.
. tests/sh/lib.sh
export BOOST_THREADS=${BOOST_THREADS:-1}   # 4 processes on a small machine: one thread each (bits do not depend on it)
opts=(--backend cpu -D dtype=fp32 -D steps=8 -D eval_every=4 -D micro_batch=2 -D seq=32 --quiet)
common=(tiny-cola "${opts[@]}")
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
numbers() { grep -o '"\(val_\)\?loss":[^,}]*\|"grad_norm":[^,}]*' "$1"; }
close_losses() {   # FILE_A FILE_B FIRST LAST TOL: training losses of those steps within TOL relative
  for s in $(seq "$3" "$4"); do
    local a b; a=$(field "$1" "$s" loss); b=$(field "$2" "$s" loss)
    awk -v a="$a" -v b="$b" -v t="$5" 'BEGIN { exit !(a != "" && b != "" && (a - b) ^ 2 <= (t * a) ^ 2) }' \
      || { echo "# step $s: loss $a vs $b"; return 1; }
  done
}

# ---- resume across grids (threads) ----
$BOOST train "${common[@]}" -D dp=2 -D tp=2 --save-every 4 -o "$TMP/a" --log "$TMP/a.jsonl" >"$TMP/a.out" 2>&1
rc=$?
if [ $rc != 0 ] || [ ! -f "$TMP/a/step-000004/state.json" ]; then
  fail grid_dp2_tp2_saves "exit $rc: $(tail -3 "$TMP/a.out")"
else
  ok grid_dp2_tp2_saves
  for g in "dp1_tp4:-D dp=1 -D tp=4 -D grad_accum=2" "dp4_tp1:-D dp=4 -D tp=1 -D micro_batch=1"; do
    name=${g%%:*}; read -r -a defs <<<"${g#*:}"
    cp "$TMP/a.jsonl" "$TMP/$name.jsonl"   # the log continues the saved run's
    $BOOST train "${common[@]}" "${defs[@]}" --resume "$TMP/a/step-000004" --log "$TMP/$name.jsonl" >"$TMP/$name.out" 2>&1
    rc=$?
    [ $rc = 0 ] && grep -q "resumed from .*step 4" "$TMP/$name.out" && close_losses "$TMP/a.jsonl" "$TMP/$name.jsonl" 5 8 1e-5 \
      && ok "resume_dp2_tp2_at_$name" || fail "resume_dp2_tp2_at_$name" "exit $rc: $(tail -2 "$TMP/$name.out")"
  done
fi

# ---- zero=2 with grad_accum 2 (threads): the reduce-scatters run on both micro-batches, each
# adding its shard to the shard accumulator; zero=0's losses within 1e-5 relative, and resumed
# from its step-4 checkpoint the same losses as the uninterrupted run
zdefs=(-D dp=2 -D tp=2 -D grad_accum=2 -D micro_batch=1)
$BOOST train "${common[@]}" "${zdefs[@]}" --log "$TMP/g0.jsonl" >"$TMP/g0.out" 2>&1; rc0=$?
$BOOST train "${common[@]}" "${zdefs[@]}" -D zero=2 --save-every 4 -o "$TMP/z" --log "$TMP/z.jsonl" >"$TMP/z.out" 2>&1
rc=$?
if [ $rc = 0 ] && [ $rc0 = 0 ] && close_losses "$TMP/g0.jsonl" "$TMP/z.jsonl" 1 8 1e-5; then
  ok zero2_grad_accum2_same_losses_as_zero0
else fail zero2_grad_accum2_same_losses_as_zero0 "exit $rc0/$rc: $(tail -2 "$TMP/z.out")"; fi
if [ -f "$TMP/z/step-000004/state.json" ]; then
  $BOOST train "${common[@]}" "${zdefs[@]}" -D zero=2 --resume "$TMP/z/step-000004" --log "$TMP/zr.jsonl" >"$TMP/zr.out" 2>&1
  rc=$?
  [ $rc = 0 ] && grep -q "resumed from .*step 4" "$TMP/zr.out" && close_losses "$TMP/z.jsonl" "$TMP/zr.jsonl" 5 8 1e-5 \
    && ok zero2_grad_accum2_resume_at_step4 || fail zero2_grad_accum2_resume_at_step4 "exit $rc: $(tail -2 "$TMP/zr.out")"
else fail zero2_grad_accum2_resume_at_step4 "no step-4 checkpoint: $(tail -2 "$TMP/z.out")"; fi

# ---- processes ----
if ! command -v mpirun >/dev/null; then
  ok "mpi_grid # SKIP mpirun is not installed (Debian's openmpi-bin, tools/install-deps.sh)"; exit 0
fi
mpi=(mpirun --oversubscribe --allow-run-as-root)
i=0
# (dp=4: a group of more than 2, where a different order of the additions would change the bits)
for g in "tiny-cola:4:-D dp=2 -D tp=2" "tiny-cola:4:-D dp=2 -D tp=2 -D zero=1" "tiny-cola:2:-D dp=2 -D tp=1" \
         "tiny-cola:4:-D dp=4 -D tp=1" "tiny-cola:4:-D dp=4 -D tp=1 -D zero=1 -D dp_dtype=bf16" \
         "tiny-cola:4:-D dp=4 -D tp=1 -D zero=2" "tiny-cola:4:-D dp=2 -D tp=2 -D zero=2 -D grad_accum=2" \
         "specs/runs/tiny-cola-moe.lua:4:-D dp=2 -D tp=2"; do
  run=${g%%:*}; g=${g#*:}; np=${g%%:*}; read -r -a defs <<<"${g#*:}"; i=$((i + 1))
  name="mpi_$(basename "$run" .lua)_np${np}_$(echo "${g#*:}" | sed 's/-D //g; s/ /_/g; s/=//g')"
  $BOOST train "$run" "${opts[@]}" "${defs[@]}" -D steps=4 -D eval_every=2 --ckpt-format sharded --log "$TMP/t$i.jsonl" -o "$TMP/t$i" >"$TMP/t$i.out" 2>&1 \
    || { fail "${name}_same_as_threads" "threaded run failed: $(tail -2 "$TMP/t$i.out")"; continue; }
  timeout 300 "${mpi[@]}" -np "$np" "$BOOST" train "$run" "${opts[@]}" "${defs[@]}" -D steps=4 -D eval_every=2 \
    --ckpt-format sharded --log "$TMP/m$i.jsonl" -o "$TMP/m$i" >"$TMP/m$i.out" 2>&1
  rc=$?
  if [ $rc = 0 ] && [ "$(numbers "$TMP/m$i.jsonl" | wc -l)" -ge 10 ] && cmp -s <(numbers "$TMP/t$i.jsonl") <(numbers "$TMP/m$i.jsonl"); then
    ok "${name}_same_as_threads"
  else
    fail "${name}_same_as_threads" "exit $rc: $(numbers "$TMP/m$i.jsonl" | head -3 | tr '\n' ' ') vs $(numbers "$TMP/t$i.jsonl" | head -3 | tr '\n' ' ') $(grep -i 'boost' "$TMP/m$i.out" | head -3)"
  fi
  # sharded checkpoints: the processes' rank files and index equal the threads' byte for byte
  same=1; nf=0
  for f in "$TMP/t$i"/step-000004/rank-*.safetensors "$TMP/t$i/step-000004/index.json"; do
    [ -f "$f" ] || { same=0; break; }
    nf=$((nf + 1)); cmp -s "$f" "$TMP/m$i/step-000004/$(basename "$f")" || { same=0; break; }
  done
  [ "$same" = 1 ] && [ "$nf" -ge 2 ] && ok "${name}_same_checkpoint" \
    || fail "${name}_same_checkpoint" "step-4 sharded checkpoint ($nf files compared) differs from the threaded run's"
done

# the threads' dp=2 x tp=2 checkpoint resumed by 4 processes at dp=4 x tp=1: every process reads it;
# the continued log equals the threaded resume's bit for bit
if [ -f "$TMP/a/step-000004/state.json" ] && [ -s "$TMP/dp4_tp1.jsonl" ]; then
  cp "$TMP/a.jsonl" "$TMP/mr.jsonl"
  timeout 300 "${mpi[@]}" -np 4 "$BOOST" train "${common[@]}" -D dp=4 -D tp=1 -D micro_batch=1 --resume "$TMP/a/step-000004" \
    --log "$TMP/mr.jsonl" >"$TMP/mr.out" 2>&1
  rc=$?
  [ $rc = 0 ] && [ "$(numbers "$TMP/mr.jsonl" | wc -l)" -ge 14 ] && cmp -s <(numbers "$TMP/dp4_tp1.jsonl") <(numbers "$TMP/mr.jsonl") \
    && ok mpi_np4_resume_dp2_tp2_at_dp4_tp1_same_as_threads \
    || fail mpi_np4_resume_dp2_tp2_at_dp4_tp1_same_as_threads "exit $rc: $(grep -i 'boost' "$TMP/mr.out" | head -3)"
fi

# a launcher world that does not hold the grid: exit 2, naming both
timeout 120 "${mpi[@]}" -np 3 "$BOOST" train "${common[@]}" -D dp=2 -D tp=2 >"$TMP/bad.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "world of 3 processes but the plan's grid is dp 2 x pp 1 x tp 2 = 4 ranks" "$TMP/bad.out" \
  && ok mpi_world_disagrees_with_grid_exit2 || fail mpi_world_disagrees_with_grid_exit2 "exit $rc: $(grep -v '^-\|^$' "$TMP/bad.out" | head -2)"

# rank 2 (dp rank 1, tp rank 0) killed mid-run: the job stops, naming it
kill_rank_mid_run mpi_grid_killed_rank_stops_job 2 \
  "${mpi[@]}" -np 4 "$BOOST" train tiny-cola --backend cpu -D dp=2 -D tp=2 -D steps=100000 -D eval_every=0 \
  --log "$TMP/kill.jsonl"
