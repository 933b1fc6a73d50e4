#!/usr/bin/env bash
# crafted_run.sh: the issue's crafted files through the commands users run: a run folder whose
# plan/plan.txt has a part's dst=0,9223372036854775806 or a buffer's offset=9223372036854775296 is
# refused by eval, ckpt verify and train --plan (exit 2 or DAMAGED, naming the file and the field);
# -D "data=a b.txt" trains on that file, not on "a"; a -o folder path of 1015 bytes (its step
# folders 1027) gets its checkpoint under its own name.
. tests/sh/lib.sh

run=(tiny-cola --backend cpu -D tp=1 -D steps=1 -D eval_every=0 --quiet)
$BOOST train "${run[@]}" -o "$TMP/run" >"$TMP/train.out" 2>&1 \
  || { fail crafted_train "$(tail -2 "$TMP/train.out")"; exit 1; }
plan="$TMP/run/plan/plan.txt"
cp "$plan" "$TMP/plan.orig"
craft() {   # NAME SED-EXPRESSION FIELD: the plan crafted, then eval, verify and train --plan on it
  local name=$1 expr=$2 field=$3
  cp "$TMP/plan.orig" "$plan"
  sed -i "$expr" "$plan"
  cmp -s "$plan" "$TMP/plan.orig" && { fail "$name" "the sed expression changed nothing"; return; }
  $BOOST eval "$TMP/run" --backend cpu >"$TMP/e.out" 2>&1; local e=$?
  $BOOST ckpt verify "$TMP/run/step-000001" >"$TMP/v.out" 2>&1; local v=$?
  $BOOST train --plan "$plan" --backend cpu --quiet >"$TMP/t.out" 2>&1; local t=$?
  if [ $e = 2 ] && grep -q "plan.txt:[0-9]*: .*$field" "$TMP/e.out" \
     && [ $v = 1 ] && grep -q "DAMAGED.*plan.txt.*$field" "$TMP/v.out" \
     && [ $t = 2 ] && grep -q "plan.txt:[0-9]*: .*$field" "$TMP/t.out"; then ok "$name"
  else
    fail "$name" "eval $e: $(tail -1 "$TMP/e.out") | verify $v: $(tail -1 "$TMP/v.out") |
      train $t: $(tail -1 "$TMP/t.out")"
  fi
}
craft crafted_part_dst_refused '0,/^part /s/dst=0,0/dst=0,9223372036854775806/' 'dst='
craft crafted_buffer_offset_refused '0,/^buffer /s/offset=[0-9]*/offset=9223372036854775296/' \
  'offset='
cp "$TMP/plan.orig" "$plan"

# a data path with a space: written quoted in the plan, trained on whole
mkdir -p "$TMP/d"
head -c 40000 build/corpus.txt >"$TMP/d/a b.txt"
printf 'x' >"$TMP/d/a"   # the file a split path would name: one byte, far too short to train on
B=$(cd "$(dirname "$BOOST")" && pwd)/$(basename "$BOOST")
(cd "$TMP/d" && $B gen "$OLDPWD/specs/runs/tiny-cola.lua" -D "data=a b.txt" -D tp=1 -D steps=1 \
  -D eval_every=0 -o g >/dev/null 2>&1 && $B train --plan g/plan.txt --backend cpu --quiet) \
  >"$TMP/q.out" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^data path="a b.txt"' "$TMP/d/g/plan.txt"; then ok crafted_data_path_with_space
else fail crafted_data_path_with_space "exit $rc: $(tail -2 "$TMP/q.out") $(grep '^data' "$TMP/d/g/plan.txt")"
fi

# a -o folder of about 1030 bytes: the checkpoint under its own name, not a truncated one
long="$TMP"
while [ ${#long} -lt 700 ]; do long="$long/$(printf 'o%.0s' $(seq 200))"; done
long="$long/$(printf 'p%.0s' $(seq $(( 1014 - 1 - ${#long} ))))"   # 1015 bytes
$BOOST train "${run[@]}" -o "$long" >"$TMP/l.out" 2>&1
rc=$?
if [ $rc = 0 ] && [ -f "$long/step-000001/state.json" ] \
   && $BOOST ckpt verify "$long/step-000001" >/dev/null 2>&1; then ok crafted_long_output_path
else fail crafted_long_output_path "exit $rc (${#long} bytes): $(tail -2 "$TMP/l.out")"
fi
