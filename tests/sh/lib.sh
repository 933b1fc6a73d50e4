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
