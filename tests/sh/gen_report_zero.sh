#!/usr/bin/env bash
# gen_report_zero.sh: the memory per rank that `boost report` gives for ZeRO stages 0, 1 and 2 at
# dp=2, tp=1 (local parameters P = the sum of the plan's canon shapes) against the closed forms
# 18 P, (6 + 12/dp) P and (2 + 16/dp) P (grad_accum=1) or (6 + 16/dp) P (grad_accum=2), in --json
# and in the text report; the plan of a zero=2 run says zero=2 on its run and optimizer lines.
. tests/sh/lib.sh
for ga in 1 2; do
  defs=(-D tp=1 -D dp=2 -D zero=2 -D grad_accum=$ga)
  $BOOST gen tiny-cola "${defs[@]}" -o "$TMP/g$ga" >"$TMP/gen$ga.out" 2>&1 \
    || { fail "gen_zero2_ga$ga" "$(tail -2 "$TMP/gen$ga.out")"; continue; }
  $BOOST report tiny-cola "${defs[@]}" --json >"$TMP/r$ga.json" 2>"$TMP/r$ga.err" \
    && $BOOST report tiny-cola "${defs[@]}" >"$TMP/r$ga.md" 2>>"$TMP/r$ga.err" \
    || { fail "report_zero2_ga$ga" "$(tail -2 "$TMP/r$ga.err")"; continue; }
  python3 - "$TMP/r$ga.json" "$TMP/r$ga.md" "$TMP/g$ga/plan.txt" "$ga" >"$TMP/py$ga.out" 2>&1 <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))['dp']
md, plan, ga = open(sys.argv[2]).read(), open(sys.argv[3]).read(), int(sys.argv[4])
P = sum(int(a) * int(b) for a, b in re.findall(r'^canon \S+ shape=(\d+)x(\d+)', plan, re.M))
dp = 2
want = {0: 18 * P, 1: (6 + 12 / dp) * P, 2: ((6 if ga > 1 else 2) + 16 / dp) * P}
for z, w in want.items():
    got = r['weights_grads_adamw_bytes_per_rank_zero%d' % z]
    assert abs(got - w) < 1, ('zero=%d' % z, got, w)
    row = re.search(r'^\| weights \+ grads \+ AdamW, zero=%d \| ([0-9.]+) MB \|$' % z, md, re.M)
    assert row and abs(float(row.group(1)) - w / 1e6) < 0.06, ('text zero=%d' % z, row and row.group(0), w)
assert re.search(r'^run .* zero=2( |$)', plan, re.M), 'run line without zero=2'
assert re.search(r'^optimizer adamw zero=2$', plan, re.M), 'optimizer line without zero=2'
assert '\nreduce_scatter ' in plan and not re.search(r'^allreduce .*group=dp', plan, re.M), 'dp steps'
PY
  [ $? = 0 ] && ok "report_memory_zero012_closed_form_ga$ga" \
    || fail "report_memory_zero012_closed_form_ga$ga" "$(tail -3 "$TMP/py$ga.out")"
done
