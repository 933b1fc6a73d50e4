#!/usr/bin/env bash
# train_tensorboard.sh: `boost train --tensorboard DIR` writes event files that the `tensorboard`
# package's own reader accepts (its record reader checks both masked CRC-32Cs), holding per step
# the numbers of the JSON log: loss, val_loss, lr, grad_norm, tokens_per_s, skipped updates and the
# MoE expert loads, equal to float32 precision.
. tests/sh/lib.sh
PY=${PYTHON:-python3}
$BOOST train tiny-cola-moe --backend cpu -D tp=1 -D steps=4 -D eval_every=2 --quiet --log "$TMP/log.jsonl" \
  --tensorboard "$TMP/tb/run1" >"$TMP/out" 2>&1 || { fail tensorboard_run "$(tail -3 "$TMP/out")"; exit 1; }
n=$(ls "$TMP"/tb/run1/events.out.tfevents.* 2>/dev/null | wc -l)
[ "$n" = 1 ] && ok tensorboard_event_file_written || { fail tensorboard_event_file_written "$n files"; exit 1; }
if ! $PY -c 'import tensorboard' 2>/dev/null; then
  ok "tensorboard_read_back # SKIP the tensorboard package is not importable (pip install tensorboard)"; exit 0
fi
$PY - "$TMP/tb/run1" "$TMP/log.jsonl" >"$TMP/py.out" 2>&1 <<'PYEOF'
import json, math, sys
from tensorboard.backend.event_processing import event_accumulator
acc = event_accumulator.EventAccumulator(sys.argv[1], size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
got = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
want = {}
for line in open(sys.argv[2]):
    rec = json.loads(line)
    step = rec.pop("step")
    for key, v in rec.items():
        if key == "skipped":
            continue
        if isinstance(v, list):
            for i, x in enumerate(v):
                for j, y in enumerate(x if isinstance(x, list) else [x]):
                    want.setdefault(key + "/%d" % i + ("/%d" % j if isinstance(x, list) else ""), {})[step] = y
        elif v is not None:
            want.setdefault(key, {})[step] = v
bad = []
for tag, steps in want.items():
    for step, v in steps.items():
        g = got.get(tag, {}).get(step)
        if g is None or not math.isclose(g, v, rel_tol=1e-6, abs_tol=1e-6):
            bad.append("%s step %d: %s, log %s" % (tag, step, g, v))
for tag in ("loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "skipped_total", "moe_load/1/3"):
    if tag not in got:
        bad.append("no %s" % tag)
print("%d tags, %d values compared" % (len(got), sum(len(s) for s in want.values())))
print("\n".join(bad[:5]))
sys.exit(1 if bad else 0)
PYEOF
[ $? = 0 ] && ok tensorboard_scalars_match_log || fail tensorboard_scalars_match_log "$(tail -5 "$TMP/py.out")"
$BOOST train tiny-cola --backend cpu -D tp=1 -D steps=1 --quiet --tensorboard /proc/no/such >"$TMP/out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "/proc/no/such: cannot create the folder" "$TMP/out" && ok tensorboard_bad_folder_refused ||
  fail tensorboard_bad_folder_refused "exit $rc: $(tail -2 "$TMP/out")"
