#!/usr/bin/env bash
# gen_cli.sh: `boost gen` and `boost report` from the outside: help, outputs, bad input (exit 2,
# no output folder left behind), an unwritable output folder, the 40B spec in under a second,
# and report --json keys with the closed-form btp numbers of the CoLA 7B run.
cd "$(dirname "$0")/../.." || exit 2
. tests/sh/lib.sh

$BOOST gen --help >"$TMP/h" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "usage: boost gen" "$TMP/h" && ok "gen --help" || fail "gen --help" "rc $rc"
# the -o limit that gen --help states is the one gen keeps: a name of that many characters is
# written, one character more is refused (exit 2) and nothing is made
lim=$(sed -n 's/.*at most \([0-9][0-9]*\) characters.*/\1/p' "$TMP/h" | head -1)
name_of() {   # name_of N: a folder name under $TMP of exactly N characters
  local p="$TMP/lim" need
  need=$(($1 - ${#p}))
  while [ $need -gt 150 ]; do p="$p/$(printf '%099d' 0)"; need=$((need - 100)); done
  printf '%s/%s' "$p" "$(printf "%0$((need - 1))d" 0)"
}
if [ -z "$lim" ]; then
  fail "gen --help states the longest -o folder name" "$(grep -- ' -o' "$TMP/h")"
else
  at=$(name_of "$lim"); over=$(name_of $((lim + 1)))
  $BOOST gen tiny-cola -o "$at" >"$TMP/lim.out" 2>&1; rc=$?
  $BOOST gen tiny-cola -o "$over" >"$TMP/over.out" 2>&1; rc2=$?
  if [ ${#at} = "$lim" ] && [ $rc = 0 ] && [ -s "$at/plan.txt" ] && [ $rc2 = 2 ] &&
     grep -q "choose a shorter -o" "$TMP/over.out" && [ ! -e "$over" ]; then
    ok "gen --help's -o limit ($lim characters) is the one gen keeps"
  else
    fail "gen --help's -o limit ($lim characters) is the one gen keeps" \
      "${#at} chars: rc $rc; ${#over} chars: rc $rc2: $(head -c 200 "$TMP/over.out")"
  fi
fi
$BOOST report --help >"$TMP/h" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "usage: boost report" "$TMP/h" && ok "report --help" || fail "report --help" "rc $rc"

$BOOST gen tiny-cola -o "$TMP/out" >/dev/null 2>&1; rc=$?
[ $rc = 0 ] && [ -s "$TMP/out/plan.txt" ] && [ -s "$TMP/out/kernels.cu" ] && [ -s "$TMP/out/report.md" ] \
  && [ "$(head -1 "$TMP/out/plan.txt")" = "boost-plan 1" ] && ok "gen writes plan.txt, kernels.cu, report.md" \
  || fail "gen writes plan.txt, kernels.cu, report.md" "rc $rc"
ls -d "$TMP"/out.* >/dev/null 2>&1 && fail "no temporary folders left" "$(ls -d "$TMP"/out.*)" || ok "no temporary folders left"

# overwrite an existing output in place
$BOOST gen tiny-cola -D tp=1 -o "$TMP/out" >/dev/null 2>&1; rc=$?
[ $rc = 0 ] && grep -q " tp=1 " "$TMP/out/plan.txt" && ok "gen replaces an existing output" || fail "gen replaces an existing output" "rc $rc"

# a trailing slash on -o names the same folder
$BOOST gen tiny-cola -o "$TMP/slash/" >/dev/null 2>&1; rc=$?
[ $rc = 0 ] && [ -s "$TMP/slash/plan.txt" ] && [ "$(ls "$TMP" | grep -c slash)" = 1 ] && ok "gen -o DIR/ writes DIR" || fail "gen -o DIR/ writes DIR" "rc $rc: $(ls "$TMP")"

# bad spec: exit 2, message with file:line, no output folder
mkdir -p "$TMP/specs/runs" "$TMP/specs/models" "$TMP/specs/gpus"
cp specs/models/tiny-cola.lua "$TMP/specs/models/"; cp specs/gpus/*.lua "$TMP/specs/gpus/"
printf 'return run {\n  model = "tiny-cola",\n  parallel = { tp = 3 },\n}\n' >"$TMP/specs/runs/bad.lua"
$BOOST gen "$TMP/specs/runs/bad.lua" -o "$TMP/bad" >/dev/null 2>"$TMP/err"; rc=$?
[ $rc = 2 ] && ok "bad spec exits 2" || fail "bad spec exits 2" "rc $rc: $(cat "$TMP/err")"
grep -q "bad.lua" "$TMP/err" && ok "bad spec message names the file" || fail "bad spec message names the file" "$(cat "$TMP/err")"
[ ! -e "$TMP/bad" ] && ! ls -d "$TMP"/bad.* >/dev/null 2>&1 && ok "bad spec leaves no output folder" || fail "bad spec leaves no output folder" "$(ls -d "$TMP"/bad*)"

$BOOST gen no-such-run -o "$TMP/none" >/dev/null 2>&1; rc=$?
[ $rc = 2 ] && [ ! -e "$TMP/none" ] && ok "unknown run exits 2" || fail "unknown run exits 2" "rc $rc"
$BOOST gen tiny-cola -D nonsense=1 -o "$TMP/none" >/dev/null 2>&1; rc=$?
[ $rc = 2 ] && [ ! -e "$TMP/none" ] && ok "unknown -D exits 2" || fail "unknown -D exits 2" "rc $rc"
$BOOST gen tiny-cola --frobnicate >/dev/null 2>&1; rc=$?
[ $rc = 2 ] && ok "unknown option exits 2" || fail "unknown option exits 2" "rc $rc"

# unwritable place: a path under a regular file
touch "$TMP/afile"
$BOOST gen tiny-cola -o "$TMP/afile/out" >/dev/null 2>"$TMP/err"; rc=$?
[ $rc != 0 ] && grep -q "afile" "$TMP/err" && ok "unwritable -o fails with a message" || fail "unwritable -o fails with a message" "rc $rc: $(cat "$TMP/err")"

# no blow-up at scale: the 40B spec (CoLA and full rank, pp=4: five memory plans) in CPU seconds
# (user + system). A guard against a quadratic pass, not a speed figure: about 0.6 s idle here, and
# CPU time still grows on a busy machine (1.2 s seen beside the other tests), so the bound is 2 s
for run in cola-40b-tp4-pp4 llama-40b-tp4-pp4; do
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "%U %S" -o "$TMP/time" $BOOST gen $run -o "$TMP/big" >/dev/null 2>&1; rc=$?
  else   # bash's own timer: user and system seconds
    { TIMEFORMAT="%U %S"; time $BOOST gen $run -o "$TMP/big" >/dev/null 2>&1; } 2>"$TMP/time"; rc=$?
  fi
  cpu=$(awk '{ printf "%d", ($1 + $2) * 1000 }' "$TMP/time")
  [ $rc = 0 ] && [ "$cpu" -lt 2000 ] && ok "gen $run in ${cpu} ms of CPU" || fail "gen $run under 2 s" "rc $rc, ${cpu} ms of CPU"
done

# report --json: keys and the btp closed forms of CoLA 7B at tp=4 (b=4, s=4096, r=1024)
$BOOST report cola-7b-tp4 --json >"$TMP/r.json" 2>"$TMP/err"; rc=$?
if [ $rc = 0 ] && command -v python3 >/dev/null; then
  python3 - "$TMP/r.json" <<'PY' && ok "report --json keys and btp closed forms" || fail "report --json keys and btp closed forms" "see above"
import json, sys
r = json.load(open(sys.argv[1]))
bs, r_, d, ff = 4 * 4096, 1024, 4096, 11008
L = r["layouts"]
assert r["params"]["total"] > 0 and r["flops_per_token"] > 0
assert r["per_layer"]["forward"]["allreduce_count"] == 4
assert r["per_layer"]["forward"]["allreduce_bytes"] == (7 * bs * r_ + 2 * bs) * 2, r["per_layer"]
assert r["per_layer"]["backward"]["allreduce_bytes"] == 7 * bs * r_ * 2
assert L["btp"]["per_layer"]["forward"]["allreduce_count"] == 4
assert L["naive"]["per_layer"]["forward"]["allreduce_count"] == 7
assert L["naive"]["per_layer"]["forward"]["allreduce_bytes"] == bs * (5 * d + 2 * ff) * 2
assert L["naive"]["per_layer"]["backward"]["allreduce_bytes"] == bs * (3 * d + ff) * 2
assert L["megatron"]["per_layer"]["forward"]["allreduce_bytes"] == 2 * bs * d * 2
assert L["megatron"]["per_layer"]["backward"]["allreduce_count"] == 2
assert r["memory"]["activation_bytes"] < r["memory"]["activation_bytes_no_checkpoint"]
PY
else
  fail "report --json" "rc $rc: $(cat "$TMP/err")"
fi
