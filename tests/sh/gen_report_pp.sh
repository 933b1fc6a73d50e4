#!/usr/bin/env bash
# gen_report_pp.sh: `boost report` of a pipelined run (tiny-cola-pp2) has the Pipeline section that
# report.md has: the text report ends with the same section, and --json carries the split (every
# layer in one stage, in order), the point-to-point bytes per micro-batch against the closed form
# micro_batch x seq x hidden/tp x 2 bytes (bf16) and the bubble formula (pp-1)/(v*m+pp-1).
. tests/sh/lib.sh
$BOOST gen tiny-cola-pp2 -o "$TMP/g" >"$TMP/gen.out" 2>&1 || { fail gen_pp2 "$(tail -2 "$TMP/gen.out")"; exit 0; }
$BOOST report tiny-cola-pp2 >"$TMP/r.md" 2>&1
rc=$?
section() { sed -n '/^## Pipeline/,$p' "$1"; }
[ $rc = 0 ] && [ -n "$(section "$TMP/r.md")" ] && cmp -s <(section "$TMP/r.md") <(section "$TMP/g/report.md") \
  && ok report_text_has_pipeline_section || fail report_text_has_pipeline_section "exit $rc: $(section "$TMP/r.md" | head -2)"
$BOOST report tiny-cola-pp2 --json >"$TMP/r.json" 2>&1
python3 - "$TMP/r.json" "$TMP/g/plan.txt" >"$TMP/py.out" 2>&1 <<'PY'
import json, re, sys
r = json.load(open(sys.argv[1]))
head = open(sys.argv[2]).read()
run = dict(kv.split('=', 1) for kv in re.search(r'^run (.*)$', head, re.M).group(1).split())
model = dict(kv.split('=', 1) for kv in re.search(r'^model (.*)$', head, re.M).group(1).split())
p = r['pipeline']
pp, m, tp = int(run['pp']), int(run['grad_accum']), int(run['tp'])
mb, seq, hidden, layers = int(run['micro_batch']), int(run['seq']), int(model['hidden']), int(model['layers'])
assert p['pp'] == pp and p['micro_batches'] == m, p
covered = [l for s in p['stages'] for l in range(s['layers'][0], s['layers'][1] + 1)]
assert covered == list(range(layers)), covered
want = mb * seq * (hidden // tp) * 2
assert p['p2p_bytes_per_microbatch'] == want, (p['p2p_bytes_per_microbatch'], want)
v = p['virtual_stages']
assert abs(p['bubble_formula'] - (pp - 1) / (v * m + pp - 1)) < 1e-9, p
assert 0 < p['bubble'] < 1, p
print('pipeline: %d stages, %d p2p bytes, bubble %.4g' % (len(p['stages']), want, p['bubble']))
PY
rc=$?
sed 's/^/# /' "$TMP/py.out" | tail -2
[ $rc = 0 ] && ok report_json_has_pipeline || fail report_json_has_pipeline "$(tail -2 "$TMP/py.out")"
