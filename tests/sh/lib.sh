# lib.sh: helpers for shell tests (sourced, not run): ok/fail verdict lines and a scratch folder.
BOOST=${BOOST:-./bin/boost}
TMP=$(mktemp -d /tmp/boost-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
ok()   { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name" "command failed: $*"; fi; }
# launch_world N OUT ARGS...: `boost ARGS -o OUT` as N processes of one world (BOOST_WORLD_SIZE,
# BOOST_RANK; the CUDA and NCCL stand-ins come from the caller's environment): rank 0 first, the
# others once its NCCL id is in OUT (meanwhile it compiles kernels.cu into the caches). Rank 0 logs
# to OUT.jsonl; rank R's output goes to OUT.R.out. WORLD_RANK_ENV="R:VAR=VALUE" sets VAR for rank R
# only. Sets rc: "0" when every rank succeeded, else rank 0's status and the others' joined by "/".
launch_world() {
  local n=$1 out=$2; shift 2
  local pids=() t=0 r extra
  rm -rf "$out"; mkdir -p "$out"
  extra() { [ "${WORLD_RANK_ENV%%:*}" = "$1" ] && [ -n "$WORLD_RANK_ENV" ] && echo "${WORLD_RANK_ENV#*:}"; }
  env $(extra 0) BOOST_WORLD_SIZE=$n BOOST_RANK=0 timeout 400 "$BOOST" "$@" -o "$out" --log "$out.jsonl" >"$out.0.out" 2>&1 &
  local pid0=$!
  while [ ! -e "$out/.nccl-0.id" ] && [ $t -lt 3000 ] && kill -0 $pid0 2>/dev/null; do sleep 0.1; t=$((t + 1)); done
  for ((r = 1; r < n; r++)); do
    env $(extra $r) BOOST_WORLD_SIZE=$n BOOST_RANK=$r timeout 400 "$BOOST" "$@" -o "$out" >"$out.$r.out" 2>&1 &
    pids+=($!)
  done
  { wait $pid0; } 2>/dev/null; rc=$?   # (a rank killed on purpose: no "Killed" line from bash)
  for p in "${pids[@]}"; do { wait $p; } 2>/dev/null || rc="$rc/$?"; done
  [ "${rc//[\/0]/}" = "" ] && rc=0
}
# kill_during_save NAME DIR FIRST MIN SPAN CMD...: a training run that saves into DIR, killed
# (SIGKILL) MIN + SPAN * rand seconds after its start (FIRST=0) or after its first checkpoint
# folder appears (FIRST=1); its output in DIR.out. Then checks that the folders left verify (check
# NAME_folders_verify). Sets: killed (0: the kill found the run alive), delay, tmpleft (temporary
# folders the kill left), verified (1 when the check passed).
kill_during_save() {
  local name=$1 dir=$2 first=$3 min=$4 span=$5 pid t=0; shift 5
  verified=0
  "$@" >"$dir.out" 2>&1 &
  pid=$!
  # a busy machine may take seconds to reach the first save
  while [ "$first" = 1 ] && [ ! -d "$dir/step-000001" ] && [ $t -lt 600 ] && kill -0 $pid 2>/dev/null; do
    sleep 0.1; t=$((t + 1))
  done
  delay=$(awk -v s=$RANDOM -v a="$min" -v b="$span" 'BEGIN { srand(s); printf "%.2f", a + b * rand() }')
  sleep "$delay"
  kill -9 $pid 2>/dev/null; killed=$?
  wait $pid 2>/dev/null
  if [ $killed != 0 ]; then fail "$name" "the run ended before the kill at ${delay}s"; return; fi
  tmpleft=$(ls -a "$dir" | grep -c '^\.step-.*\.tmp-')
  echo "# $name: killed ${delay}s after the $([ "$first" = 1 ] && echo "first save" || echo start)," \
       "$(ls "$dir" | grep -c '^step-') step folders, temporary folder left: $tmpleft"
  if ls "$dir" | grep -q '^step-' && $BOOST ckpt verify "$dir" >"$dir.v" 2>&1; then
    ok "${name}_folders_verify"; verified=1
  else fail "${name}_folders_verify" "$(grep -v verified "$dir.v" | head -2)"; fi
}
# kill_rank_mid_run NAME RANK CMD...: CMD (an mpirun job whose `boost train` logs to
# $TMP/kill.jsonl) runs in the background, its output in $TMP/kill.out; once the log reaches step
# 2, rank RANK's process is killed with SIGKILL. Verdict NAME: the job stops within 60 s, fails,
# and its output names the rank ("process rank RANK ").
kill_rank_mid_run() {
  local name=$1 rank=$2; shift 2
  "$@" >"$TMP/kill.out" 2>&1 &
  local launcher=$! victim= pid t0 rc dt
  for _ in $(seq 600); do
    if grep -q '"step":2' "$TMP/kill.jsonl" 2>/dev/null; then
      for pid in $(pgrep -P $launcher); do
        tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank" && victim=$pid
      done
      [ -n "$victim" ] && break
    fi
    sleep 0.1
  done
  if [ -z "$victim" ]; then
    fail "$name" "rank $rank's process not found (training never reached step 2?)"
    kill $launcher 2>/dev/null; wait $launcher 2>/dev/null
    return
  fi
  t0=$(date +%s)
  kill -9 "$victim"
  for _ in $(seq 600); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
  if kill -0 $launcher 2>/dev/null; then
    fail "$name" "mpirun still runs 60 s after rank $rank was killed"
    kill $launcher 2>/dev/null
  fi
  wait $launcher
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  [ $rc != 0 ] && grep -q "process rank $rank " "$TMP/kill.out" && ok "$name" \
    && grep "process rank $rank" "$TMP/kill.out" | head -1 | sed "s/^/#   after ${dt}s: /" \
    || fail "$name" "exit $rc after ${dt}s: $(grep -v '^-*$' "$TMP/kill.out" | tail -3)"
}
