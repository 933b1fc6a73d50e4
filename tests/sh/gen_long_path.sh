#!/usr/bin/env bash
# gen_long_path.sh: `boost gen -o DIR` with long folder names: one 21 folders deep (about 1100
# characters, past the 1024 a path buffer once held) is written whole, at that path and nowhere
# else; one of about 4200 characters (past GEN_OUTDIR_MAX, gen/gen.h) is refused (exit 2) with a
# message that says to choose a shorter -o, leaving nothing behind (never written under a cut-off
# name, nor past a buffer).
cd "$(dirname "$0")/../.." || exit 2
. tests/sh/lib.sh
seg=$(printf 'd%.0s' $(seq 50))   # a folder name of 50 characters

deep="$TMP/long"
for i in $(seq 21); do deep="$deep/$seg"; done
$BOOST gen tiny-cola -o "$deep" >"$TMP/out" 2>&1; rc=$?
if [ $rc = 0 ] && [ -s "$deep/plan.txt" ] && [ -s "$deep/kernels.cu" ] && [ -s "$deep/report.md" ] \
   && [ "$(find "$TMP/long" -name plan.txt | wc -l)" = 1 ]; then
  ok "gen -o a ${#deep}-character folder writes it whole"
else
  fail "gen -o a ${#deep}-character folder" \
    "rc $rc, plan.txt files: $(find "$TMP/long" -name plan.txt | wc -l): $(tail -2 "$TMP/out")"
fi
[ -z "$(find "$TMP/long" -name '*.tmp-*')" ] && ok "no temporary folder left beside it" \
  || fail "no temporary folder left beside it" "$(find "$TMP/long" -name '*.tmp-*' | head -1)"

longer="$TMP/longer"
for i in $(seq 82); do longer="$longer/$seg"; done
$BOOST gen tiny-cola -o "$longer" >"$TMP/out" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "is ${#longer} characters long.*choose a shorter -o" "$TMP/out" \
   && [ ! -e "$TMP/longer" ]; then
  ok "gen -o a ${#longer}-character folder is refused with a message, nothing written"
else
  left=$(find "$TMP/longer" -name plan.txt 2>/dev/null | head -1 | cut -c1-80)
  fail "gen -o a ${#longer}-character folder is refused" \
    "rc $rc, want 2; left: $left...; said: $(head -c 300 "$TMP/out")"
fi
