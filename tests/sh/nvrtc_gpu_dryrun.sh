#!/usr/bin/env bash
# nvrtc_gpu_dryrun.sh: the device script tests/gpu/run.sh, run here with the CPU backend on both
# sides (DUT=cpu, checks only): it builds its check program, generates its plans, and every check
# passes with zero differences. Keeps the script that only runs on a GPU machine from rotting.
cd "$(dirname "$0")/../.." || exit 2
source tests/sh/lib.sh
if ! bash tests/gpu/build.sh >"$TMP/build.log" 2>&1; then
  fail "tests/gpu/build.sh" "$(tail -3 "$TMP/build.log")"
  exit 0
fi
ok "tests/gpu/build.sh builds bin/boost and build/gpu/check"
DUT=cpu GPU_STEPS_ONLY=1 OUT="$TMP/out" bash tests/gpu/run.sh >"$TMP/run.log" 2>&1
rc=$?
passed=$(grep -c '^ok - ' "$TMP/out/run.log")
failed=$(grep -c '^FAIL - ' "$TMP/out/run.log")
if [ "$rc" = 0 ] && [ "$failed" = 0 ] && [ "$passed" -gt 100 ]; then
  ok "tests/gpu/run.sh (cpu vs cpu): $passed checks pass"
else
  fail "tests/gpu/run.sh (cpu vs cpu)" "exit $rc, $passed ok, $failed FAIL: $(grep '^FAIL' "$TMP/out/run.log" | head -3)"
fi
for f in summary.md steps.md model.md; do
  [ -s "$TMP/out/$f" ] && ok "results: $f written" || fail "results: $f" "missing or empty"
done
# cpu against cpu must agree exactly: any non-zero step error means the harness mixes inputs up
if grep -E '^\| [a-z_]+ \| [0-9]+ \| ([^0]|0[^ ])' "$TMP/out/steps.md" >/dev/null; then
  fail "steps.md: zero error cpu vs cpu" "$(grep -E '^\| [a-z_]+ \| [0-9]+ \| [^0]' "$TMP/out/steps.md" | head -2)"
else ok "steps.md: zero error cpu vs cpu"; fi
