#!/usr/bin/env bash
# gen_report_zero.sh: the memory per rank that `boost report` gives for ZeRO stages 0, 1 and 2 at
# dp=2, tp=1 (local parameters P = the sum of the plan's canon shapes) against the closed forms
# 18 P, (6 + 12/dp) P and (2 + 16/dp) P (grad_accum=1, and grad_accum=2 at pp=1, where the
# reduce-scatters run on every micro-batch and carry no micro=last) or (6 + 16/dp) P (grad_accum=2
# at pp=2: micro=last), in --json and in the text report; the plan of a zero=2 run says zero=2 on
# its run and optimizer lines.
. tests/sh/lib.sh
for gp in 1:1 2:1 2:2; do
  ga=${gp%%:*} pp=${gp#*:}
  defs=(-D tp=1 -D dp=2 -D zero=2 -D grad_accum=$ga -D pp=$pp)
  $BOOST gen tiny-cola "${defs[@]}" -o "$TMP/g$gp" >"$TMP/gen$gp.out" 2>&1 \
    || { fail "gen_zero2_ga${ga}_pp$pp" "$(tail -2 "$TMP/gen$gp.out")"; continue; }
  $BOOST report tiny-cola "${defs[@]}" --json >"$TMP/r$gp.json" 2>"$TMP/r$gp.err" \
    && $BOOST report tiny-cola "${defs[@]}" >"$TMP/r$gp.md" 2>>"$TMP/r$gp.err" \
    || { fail "report_zero2_ga${ga}_pp$pp" "$(tail -2 "$TMP/r$gp.err")"; continue; }
  python3 - "$TMP/r$gp.json" "$TMP/r$gp.md" "$TMP/g$gp/plan.txt" "$ga" "$pp" >"$TMP/py$gp.out" 2>&1 <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))['dp']
md, plan = open(sys.argv[2]).read(), open(sys.argv[3]).read()
ga, pp = int(sys.argv[4]), int(sys.argv[5])
P = sum(int(a) * int(b) for a, b in re.findall(r'^canon \S+ shape=(\d+)x(\d+)', plan, re.M))
dp = 2
want = {0: 18 * P, 1: (6 + 12 / dp) * P, 2: ((6 if ga > 1 and pp > 1 else 2) + 16 / dp) * P}
for z, w in want.items():
    got = r['weights_grads_adamw_bytes_per_rank_zero%d' % z]
    assert abs(got - w) < 1, ('zero=%d' % z, got, w)
    row = re.search(r'^\| weights \+ grads \+ AdamW, zero=%d \| ([0-9.]+) MB \|$' % z, md, re.M)
    assert row and abs(float(row.group(1)) - w / 1e6) < 0.06, ('text zero=%d' % z, row and row.group(0), w)
assert re.search(r'^run .* zero=2( |$)', plan, re.M), 'run line without zero=2'
assert re.search(r'^optimizer adamw zero=2$', plan, re.M), 'optimizer line without zero=2'
assert '\nreduce_scatter ' in plan and not re.search(r'^allreduce .*group=dp', plan, re.M), 'dp steps'
rs = re.findall(r'^reduce_scatter .*group=dp.*$', plan, re.M)
every = ga > 1 and pp == 1
assert rs and all(('micro=last' in l) != every for l in rs), ('micro=last', every, rs[0])
PY
  [ $? = 0 ] && ok "report_memory_zero012_closed_form_ga${ga}_pp$pp" \
    || fail "report_memory_zero012_closed_form_ga${ga}_pp$pp" "$(tail -3 "$TMP/py$gp.out")"
done
