#!/usr/bin/env bash
# mpi_train.sh: the CPU backend with one process per rank under Open MPI's mpirun (MPI loaded at run
# time; the binary links no MPI). tiny-cola at tp=2 under -np 2 and at tp=4 under -np 4 logs the
# same losses as the threaded run bit for bit (the MPI transport gathers every rank's part and sums
# in rank order 0..tp-1, exactly as the thread group does, so even the order of the fp32 additions
# is the same), and rank 0's checkpoint (--ckpt-format full) holds the same tensors. A rank killed mid-run makes mpirun
# stop the others within 60 s, naming the rank. A world that disagrees with the plan is refused.
# Without mpirun it prints a skip line.
. tests/sh/lib.sh
if ! command -v mpirun >/dev/null; then
  ok "mpi_train # SKIP mpirun is not installed (Debian's openmpi-bin, tools/install-deps.sh)"; exit 0
fi
ldd "$BOOST" | grep -q libmpi && fail binary_links_no_mpi "$(ldd "$BOOST" | grep mpi)" || ok binary_links_no_mpi
mpi=(mpirun --oversubscribe --allow-run-as-root)
common=(tiny-cola --backend cpu -D steps=4 -D eval_every=2 --quiet)
losses() { grep -o '"\(val_\)\?loss":[^,}]*' "$1"; }

for tp in 2 4; do
  $BOOST train "${common[@]}" -D tp=$tp --log "$TMP/thr$tp.jsonl" -o "$TMP/thr$tp" >"$TMP/thr$tp.out" 2>&1 \
    || { fail "mpi_np${tp}_same_losses" "threaded run failed: $(tail -2 "$TMP/thr$tp.out")"; continue; }
  timeout 300 "${mpi[@]}" -np $tp "$BOOST" train "${common[@]}" -D tp=$tp --log "$TMP/mpi$tp.jsonl" -o "$TMP/mpi$tp" \
    --ckpt-format full >"$TMP/mpi$tp.out" 2>&1
  rc=$?
  if [ $rc = 0 ] && [ -s "$TMP/mpi$tp.jsonl" ] && [ "$(losses "$TMP/mpi$tp.jsonl" | wc -l)" -ge 4 ] \
     && cmp -s <(losses "$TMP/thr$tp.jsonl") <(losses "$TMP/mpi$tp.jsonl"); then
    ok "mpi_np${tp}_same_losses"
  else
    fail "mpi_np${tp}_same_losses" "exit $rc: $(losses "$TMP/mpi$tp.jsonl" | head -3 | tr '\n' ' ') vs $(losses "$TMP/thr$tp.jsonl" | head -3 | tr '\n' ' ') $(grep -i 'error\|boost' "$TMP/mpi$tp.out" | head -3)"
  fi
  cmp -s "$TMP/thr$tp/step-000004/model.safetensors" "$TMP/mpi$tp/step-000004/model.safetensors" \
    && cmp -s "$TMP/thr$tp/step-000004/optimizer.safetensors" "$TMP/mpi$tp/step-000004/optimizer.safetensors" \
    && ok "mpi_np${tp}_same_checkpoint" || fail "mpi_np${tp}_same_checkpoint" "step-4 safetensors differ from the threaded run's"
done

# a world that disagrees with the plan
timeout 120 "${mpi[@]}" -np 2 "$BOOST" train "${common[@]}" -D tp=4 >"$TMP/bad.out" 2>&1
rc=$?
[ $rc != 0 ] && grep -q "world of 2 processes but the plan's grid is dp 1 x pp 1 x tp 4 = 4" "$TMP/bad.out" && ok mpi_world_disagrees_with_plan \
  || fail mpi_world_disagrees_with_plan "exit $rc: $(grep -v '^-\|^$' "$TMP/bad.out" | head -2)"

# rank 1 killed mid-run: the job stops, naming it
kill_rank_mid_run mpi_killed_rank_stops_job 1 \
  "${mpi[@]}" -np 2 "$BOOST" train tiny-cola --backend cpu -D tp=2 -D steps=100000 -D eval_every=0 \
  --log "$TMP/kill.jsonl"
