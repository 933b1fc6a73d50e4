#!/usr/bin/env bash
# mpi_stop.sh: stopping together under mpirun --oversubscribe (tiny-cola, tp=2, 2 processes). The
# ranks agree at each step boundary on a stop (one sum of a stop flag over the world), save one
# checkpoint together and end with the same status. Three ways a stop arrives: SIGINT to rank 1 only,
# SIGTERM to both ranks 10 ms apart, SIGTERM to mpirun. Each must end within 60 s, every rank with
# 128+signal and mpirun too, without MPI_ABORT, leaving a checkpoint that `boost ckpt verify`
# passes; the first one's checkpoint also resumes. A signalled mpirun (Open MPI 4) sends SIGCONT,
# waits odls_base_sigkill_timeout seconds, sends SIGTERM, waits as long again, sends SIGKILL, and
# exits 1 whatever its ranks said: there the ranks must still exit 143 within that time (the run
# gives 10 s; the default 1 s is too short to save a real model, and 3 s was on a loaded machine). Skip line without mpirun.
. tests/sh/lib.sh
if ! command -v mpirun >/dev/null; then
  ok "mpi_stop # SKIP mpirun is not installed (Debian's openmpi-bin, tools/install-deps.sh)"; exit 0
fi
mpi=(mpirun --oversubscribe --allow-run-as-root -np 2)
run=(tiny-cola --backend cpu -D tp=2 -D steps=100000 -D eval_every=0 --quiet)

# descendants PID: every process below PID
descendants() { local c; for c in $(pgrep -P "$1"); do echo "$c"; descendants "$c"; done; }
# rank_pid LAUNCHER R: the boost process of world rank R
rank_pid() {
  local p
  for p in $(descendants "$1"); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = boost ] || continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}

# A wrapper between mpirun and boost that writes boost's exit status to PREFIX.rc.RANK. It ignores
# SIGINT/SIGTERM itself (mpirun signals each rank's whole process group) and gives boost the default
# handling back, so that only boost sees a signal and the wrapper outlives it.
cat >"$TMP/status.py" <<'PY'
import os, signal, subprocess, sys
for s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_IGN)
def dfl():
    for s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_DFL)
rc = subprocess.call(sys.argv[2:], preexec_fn=dfl)
rc = 128 - rc if rc < 0 else rc
open('%s.rc.%s' % (sys.argv[1], os.environ['OMPI_COMM_WORLD_RANK']), 'w').write('%d\n' % rc)
sys.exit(rc)
PY

# stop_case NAME SIGNAL WHO: start a world, wait for step 2, signal WHO (rank1 | ranks | launcher),
# then check how it ended.
stop_case() {
  local name=$1 sig=$2 who=$3 d=$TMP/$1 want launcher_want
  want=$((128 + $(kill -l "$sig"))); launcher_want=$want
  local more=()
  [ "$who" = launcher ] && more=(--mca odls_base_sigkill_timeout 10) && launcher_want=1
  "${mpi[@]}" "${more[@]}" python3 "$TMP/status.py" "$d" "$BOOST" train "${run[@]}" \
    -o "$d" --log "$d.jsonl" >"$d.out" 2>&1 &
  local launcher=$! r0= r1= t=0
  while [ $t -lt 600 ]; do
    grep -q '"step":2' "$d.jsonl" 2>/dev/null && r0=$(rank_pid $launcher 0) && r1=$(rank_pid $launcher 1) \
      && [ -n "$r0" ] && [ -n "$r1" ] && break
    sleep 0.1; t=$((t + 1))
  done
  if [ -z "$r0" ] || [ -z "$r1" ]; then
    fail "$name" "the ranks never reached step 2: $(tail -3 "$d.out")"; kill $launcher 2>/dev/null; wait $launcher; return
  fi
  case $who in
    rank1) kill -"$sig" "$r1" ;;
    ranks) kill -"$sig" "$r0"; sleep 0.01; kill -"$sig" "$r1" ;;
    launcher) kill -"$sig" $launcher ;;
  esac
  local t0=$(date +%s%N)
  for _ in $(seq 600); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
  if kill -0 $launcher 2>/dev/null; then
    fail "$name" "mpirun still runs 60 s after $sig to $who"
    kill -9 $(descendants $launcher) $launcher 2>/dev/null; wait $launcher; return
  fi
  wait $launcher
  local rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  local rcs="$(cat "$d.rc.0" 2>/dev/null)/$(cat "$d.rc.1" 2>/dev/null)" ck
  ck=$(ls -d "$d"/step-* 2>/dev/null | tail -1)
  if [ "$rcs" = "$want/$want" ] && [ $rc = $launcher_want ] && ! grep -qi 'MPI_ABORT' "$d.out" && [ -n "$ck" ] \
     && $BOOST ckpt verify "$ck" >"$d.verify" 2>&1; then
    ok "$name"; echo "#   $sig to $who: ranks exit $rcs, mpirun $rc, after ${ms} ms; $(basename "$ck") verifies"
  else
    fail "$name" "ranks exit $rcs, mpirun $rc (want $want, mpirun $launcher_want), checkpoint '${ck##*/}' ($(tail -1 "$d.verify" 2>/dev/null)): $(grep -v '^-*$' "$d.out" | tail -4 | tr '\n' ' ')"
  fi
}

stop_case mpi_stop_sigint_one_rank INT rank1
stop_case mpi_stop_sigterm_all_ranks_skewed TERM ranks
stop_case mpi_stop_sigterm_launcher TERM launcher

# the first case's checkpoint resumes: one more step from it, under mpirun
d=$TMP/mpi_stop_sigint_one_rank
ck=$(ls -d "$d"/step-* 2>/dev/null | tail -1)
if [ -n "$ck" ]; then
  n=$((10#${ck##*step-}))
  timeout 120 "${mpi[@]}" "$BOOST" train "${run[@]}" -D steps=$((n + 1)) --resume auto -o "$d" >"$d.resume" 2>&1
  rc=$?
  [ $rc = 0 ] && [ -d "$d/step-$(printf %06d $((n + 1)))" ] && ok mpi_stop_checkpoint_resumes \
    || fail mpi_stop_checkpoint_resumes "exit $rc: $(grep -v '^-*$' "$d.resume" | tail -3 | tr '\n' ' ')"
else
  fail mpi_stop_checkpoint_resumes "no checkpoint to resume"
fi
