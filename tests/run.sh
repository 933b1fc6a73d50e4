#!/usr/bin/env bash
# run.sh: runs every test (the C programs built from tests/unit/*.c and the scripts tests/sh/*.sh)
# from the repository root. Each test prints lines "ok - NAME" or "FAIL - NAME: why"; a program
# that exits non-zero without printing FAIL counts as one failure. A check that cannot run on this
# machine (a tool or package missing) prints "ok - NAME # SKIP why" and counts as skipped, not passed.
# Ends with "N passed, N failed, N skipped".
# Usage: bash tests/run.sh [FILTER]   (FILTER: substring of the test file names to run)
cd "$(dirname "$0")/.." || exit 2
filter=${1:-}
pass=0; fail=0; skip=0
mkdir -p build/test-logs
# compile caches shared by the tests of one run (NVRTC reports and cubins, emulator objects), keyed
# on the source; a whole-suite run starts them empty, so every kernel is compiled at least once
export BOOST_CACHE=${BOOST_CACHE:-$PWD/build/test-cache/nvrtc} BOOST_EMU_CACHE=${BOOST_EMU_CACHE:-$PWD/build/test-cache/emu}
[ -z "$filter" ] && rm -rf build/test-cache
# A test runs with its output in build/test-logs/NAME.log (exit status in NAME.rc, seconds in NAME.t);
# BOOST_TEST_JOBS of them at a time (default 2: most tests use one core; the caches are written
# atomically and every test works in its own temporary folder). Verdicts are read and printed in
# the tests' order once all have finished.
jobs_max=${BOOST_TEST_JOBS:-2}
names=()
start_one() {
  local name=$1; shift
  names+=("$name")
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n 2>/dev/null || true; done
  ( t0=$(date +%s); "$@" >"build/test-logs/$name.log" 2>&1; echo $? >"build/test-logs/$name.rc"
    echo $(( $(date +%s) - t0 )) >"build/test-logs/$name.t" ) &
}
verdict() {
  local name=$1
  local log=build/test-logs/$name.log
  local rc; rc=$(cat "build/test-logs/$name.rc" 2>/dev/null || echo 255)
  local p f k
  k=$(grep -E '^ok - ' "$log" | grep -ciE '# *skip|\(skipped\)')
  p=$(( $(grep -c '^ok - ' "$log") - k )); f=$(grep -c '^FAIL - ' "$log")
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    echo "FAIL - $name: exited $rc without a verdict (last lines below)" >>"$log"; f=1
    tail -5 "$log" | sed 's/^/    /'
  fi
  grep '^FAIL - ' "$log"
  printf '%-28s %3d passed %3d failed%s  (%ss)\n' "$name" "$p" "$f" "$([ "$k" != 0 ] && echo " $k skipped")" \
    "$(cat "build/test-logs/$name.t" 2>/dev/null || echo '?')"
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + k))
}
t_all=$(date +%s)
# build/gpu/ (the CUDA stand-in checks) once, before the lanes start: tests running side by side
# would otherwise rebuild it while another executes it. A failure shows in the tests that need it.
bash tests/gpu/build.sh >build/test-logs/gpu-build.txt 2>&1 || true
for t in build/tests/*; do
  [ -x "$t" ] || continue
  n=$(basename "$t"); [ -n "$filter" ] && [[ "$n" != *"$filter"* ]] && continue
  rm -f "build/test-logs/$n.rc" "build/test-logs/$n.t"
  start_one "$n" "$t"
done
for s in tests/sh/*.sh; do
  [ "$(basename "$s")" = lib.sh ] && continue
  [ -f "$s" ] || continue
  n=$(basename "$s" .sh); [ -n "$filter" ] && [[ "$n" != *"$filter"* ]] && continue
  rm -f "build/test-logs/$n.rc" "build/test-logs/$n.t"
  start_one "$n" bash "$s"
done
wait
for n in "${names[@]}"; do verdict "$n"; done
echo "(wall time $(( $(date +%s) - t_all )) s, $jobs_max tests at a time)"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
