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
run_one() {
  local name=$1; shift
  local log=build/test-logs/$name.log
  local t0=$(date +%s)
  "$@" >"$log" 2>&1
  local rc=$?
  local p f
  local k
  k=$(grep -E '^ok - ' "$log" | grep -ciE '# *skip|\(skipped\)')
  p=$(( $(grep -c '^ok - ' "$log") - k )); f=$(grep -c '^FAIL - ' "$log")
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    echo "FAIL - $name: exited $rc without a verdict (last lines below)" >>"$log"; f=1
    tail -5 "$log" | sed 's/^/    /'
  fi
  grep '^FAIL - ' "$log"
  printf '%-28s %3d passed %3d failed%s  (%ds)\n' "$name" "$p" "$f" "$([ "$k" != 0 ] && echo " $k skipped")" $(( $(date +%s) - t0 ))
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + k))
}
for t in build/tests/*; do
  [ -x "$t" ] || continue
  n=$(basename "$t"); [ -n "$filter" ] && [[ "$n" != *"$filter"* ]] && continue
  run_one "$n" "$t"
done
for s in tests/sh/*.sh; do
  [ "$(basename "$s")" = lib.sh ] && continue
  [ -f "$s" ] || continue
  n=$(basename "$s" .sh); [ -n "$filter" ] && [[ "$n" != *"$filter"* ]] && continue
  run_one "$n" bash "$s"
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
