#!/usr/bin/env bash
# train_mixture.sh: a data mixture (data = { sources = { {path=, weight=}, ... } }). Three text
# sources with weights 5, 3, 2 at dp=2: the tokens each source gave, logged every step, are those
# of the rule recomputed here in Python (sequence s to the smallest (taken_i + 1) / w_i, weights
# normalised, ties to the lowest index), and TensorBoard holds them as scalars; the checkpoint's
# counts resumed at dp=1 continue identically (counts and losses), and under other weights continue
# from the saved counts; a weight of 0, a missing file or two tokenizers are spec errors at their
# line; a checkpoint resumed under another tokenizer (or none) is refused, one that records none
# is taken with a note.
. tests/sh/lib.sh
PY=${PYTHON:-python3}
[ -f build/corpus.txt ] || bash tools/corpus.sh >/dev/null 2>&1
[ -f build/corpus.txt ] || { ok "train_mixture # SKIP no corpus (Debian's fortunes)"; exit 0; }
if ! $PY -c 'import json' 2>/dev/null; then ok "train_mixture # SKIP no python3"; exit 0; fi
head -c 150000 build/corpus.txt >"$TMP/a.txt"
tail -c 120000 build/corpus.txt | tr 'a-z' 'A-Z' >"$TMP/b.txt"
head -c 400000 build/corpus.txt | tail -c 100000 | rev >"$TMP/c.txt"
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
# tokens LOG STEP: the step's data_tokens as "a,b,c"
tokens() { grep "^{\"step\":$2[,}]" "$1" | grep -o '"data_tokens":\[[0-9,]*' | cut -d'[' -f2; }
# spec FILE W_A W_B W_C [EXTRA]: a tiny-cola run over the three sources
spec() {
  cat >"$1" <<LUA
-- a mixture of three text files
return run {
  model = "tiny-cola", gpu = "h100",
  parallel = { tp = 1, dp = 2 },
  train = { micro_batch = 4, seq = 32, steps = 6, eval_every = 0, lr = 3e-3, warmup = 2 },
  data = {
    val_fraction = 0.1,
    sources = {
      { path = "$TMP/a.txt", weight = $2 },
      { path = "$TMP/b.txt", weight = $3 },
      { path = "$TMP/c.txt", weight = $4 }, $5
    },
  },
}
LUA
}
# expect W_A W_B W_C TAKEN_CSV STEPS: "a,b,c" tokens after each step by the rule
expect() {
  $PY - "$@" <<'PYEOF'
import sys
w = [float(x) for x in sys.argv[1:4]]
total = 0.0
for x in w: total += x
w = [x / total for x in w]
taken = [int(x) for x in sys.argv[4].split(",")]
per_step = 2 * 4                     # dp * micro_batch (grad_accum 1)
for step in range(int(sys.argv[5])):
    for _ in range(per_step):
        keys = [(taken[i] + 1) / w[i] for i in range(3)]
        taken[keys.index(min(keys))] += 1   # index(): the first of equal keys
    print(",".join(str(t * 32) for t in taken))
PYEOF
}

spec "$TMP/mix.lua" 5 3 2
$BOOST train "$TMP/mix.lua" --backend cpu --quiet -o "$TMP/a" --save-every 3 \
  --log "$TMP/a.jsonl" --tensorboard "$TMP/tb" >"$TMP/a.out" 2>&1 ||
  { fail mixture_run "$(tail -3 "$TMP/a.out")"; exit 1; }
ok mixture_run
expect 5 3 2 0,0,0 6 >"$TMP/want"
for s in 1 2 3 4 5 6; do tokens "$TMP/a.jsonl" $s; done >"$TMP/got"
cmp -s "$TMP/want" "$TMP/got" && ok mixture_tokens_per_source_follow_the_rule ||
  fail mixture_tokens_per_source_follow_the_rule "want $(paste -sd' ' "$TMP/want"), got \
$(paste -sd' ' "$TMP/got")"
# over the 48 sequences: 24, 14.4, 9.6 by the weights; the rule keeps each within one
last=$(tail -1 "$TMP/got")
awk -F, -v l="$last" 'BEGIN { split(l, t, ","); w[1] = .5; w[2] = .3; w[3] = .2
  for (i = 1; i <= 3; i++) { d = t[i] / 32 - 48 * w[i]; if (d < -1 || d > 1) exit 1 } }' &&
  ok mixture_proportions_match_weights ||
  fail mixture_proportions_match_weights "$last tokens over 48 sequences of 32"
saved=$(tr -d ' \n' <"$TMP/a/step-000003/state.json" | grep -o '"data_taken":\[[0-9,]*')
saved=${saved#*[}
want3=$(sed -n 3p "$TMP/want" | awk -F, '{ printf "%d,%d,%d", $1 / 32, $2 / 32, $3 / 32 }')
[ "$saved" = "$want3" ] && ok mixture_counts_in_checkpoint ||
  fail mixture_counts_in_checkpoint "saved '$saved', want $want3"

if $PY -c 'import tensorboard' 2>/dev/null; then
  $PY - "$TMP/tb" "$TMP/want" >"$TMP/tb.out" 2>&1 <<'PYEOF'
import sys
from tensorboard.backend.event_processing import event_accumulator
acc = event_accumulator.EventAccumulator(sys.argv[1], size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
want = [[int(x) for x in line.split(",")] for line in open(sys.argv[2])]
for i in range(3):
    got = {e.step: e.value for e in acc.Scalars("data_tokens/%d" % i)}
    for step, row in enumerate(want, 1):
        assert got.get(step) == row[i], ("data_tokens/%d step %d: %s, want %d"
                                         % (i, step, got.get(step), row[i]))
PYEOF
  [ $? = 0 ] && ok mixture_tokens_in_tensorboard ||
    fail mixture_tokens_in_tensorboard "$(tail -2 "$TMP/tb.out")"
else
  ok "mixture_tokens_in_tensorboard # SKIP the tensorboard package is not importable"
fi

# the dp=2 checkpoint of step 3 resumed at dp=1 (grad_accum 2: the same global batch)
$BOOST train "$TMP/mix.lua" --backend cpu --quiet -D dp=1 -D grad_accum=2 \
  --resume "$TMP/a/step-000003" --log "$TMP/r.jsonl" >"$TMP/r.out" 2>&1
rc=$?
same=1
for s in 4 5 6; do
  [ "$(tokens "$TMP/r.jsonl" $s)" = "$(sed -n ${s}p "$TMP/want")" ] || same=0
  a=$(field "$TMP/a.jsonl" $s loss); b=$(field "$TMP/r.jsonl" $s loss)
  awk -v a="$a" -v b="$b" 'BEGIN { exit !(a != "" && b != "" && (a - b) ^ 2 <= (1e-5 * a) ^ 2) }' ||
    same=0
done
[ $rc = 0 ] && [ $same = 1 ] && ok mixture_resume_dp2_at_dp1_continues ||
  fail mixture_resume_dp2_at_dp1_continues "exit $rc: $(tail -2 "$TMP/r.out")"

# other weights from step 3: each source goes on from its saved count, not from a recount
spec "$TMP/even.lua" 1 1 1
$BOOST train "$TMP/even.lua" --backend cpu --quiet --resume "$TMP/a/step-000003" -D steps=4 \
  --log "$TMP/e.jsonl" >"$TMP/e.out" 2>&1
rc=$?
want=$(expect 1 1 1 "$saved" 1)
[ $rc = 0 ] && [ "$(tokens "$TMP/e.jsonl" 4)" = "$want" ] && ok mixture_resume_from_saved_counts ||
  fail mixture_resume_from_saved_counts "exit $rc: step 4 '$(tokens "$TMP/e.jsonl" 4)', want $want"

# spec errors at their line
spec "$TMP/zero.lua" 5 0 2
line=$(grep -n 'b.txt' "$TMP/zero.lua" | cut -d: -f1)
$BOOST gen "$TMP/zero.lua" -o "$TMP/g0" >"$TMP/z.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "zero.lua:$line: weight must be a number > 0" "$TMP/z.out" &&
  ok mixture_weight_zero_names_line ||
  fail mixture_weight_zero_names_line "exit $rc: $(cat "$TMP/z.out")"
spec "$TMP/gone.lua" 5 3 2 "{ path = \"$TMP/missing-*.txt\", weight = 1 },"
line=$(grep -n 'missing-' "$TMP/gone.lua" | cut -d: -f1)
$BOOST gen "$TMP/gone.lua" -o "$TMP/g1" >"$TMP/m.out" 2>&1
rc=$?
grep -q "gone.lua:$line: data.sources\[4\]: .*missing-\*.txt matches no file" "$TMP/m.out" &&
  [ $rc = 2 ] && ok mixture_missing_file_names_line ||
  fail mixture_missing_file_names_line "exit $rc: $(cat "$TMP/m.out")"

# tokenizers: one per run; a checkpoint resumes only under the tokenizer it was trained with
$BOOST tokenizer train "$TMP/a.txt" --vocab 300 -o "$TMP/tok1.json" >/dev/null 2>&1 &&
  $BOOST tokenizer train "$TMP/b.txt" --vocab 300 -o "$TMP/tok2.json" >/dev/null 2>&1 ||
  { fail mixture_tokenizer_setup "boost tokenizer train failed"; exit 1; }
mkdir -p "$TMP/tk/specs/models" "$TMP/tk/specs/gpus"
cp specs/gpus/h100.lua "$TMP/tk/specs/gpus/"
cat >"$TMP/tk/specs/models/tokm.lua" <<'LUA'
return model "tokm" { hidden = 64, layers = 1, heads = 2, kv_heads = 2, ffn = 128, vocab = 320,
                      lowrank = cola { rank = 16 } }
LUA
tokspec() {   # tokspec FILE TOK_A TOK_B
  cat >"$1" <<LUA
return run {
  model = "tokm", gpu = "h100", parallel = { tp = 1 },
  train = { micro_batch = 2, seq = 32, steps = 2, eval_every = 0, lr = 1e-3, warmup = 1 },
  data = { sources = {
    { path = "$TMP/a.txt", weight = 2, tokenizer = "$2" },
    { path = "$TMP/b.txt", weight = 1, tokenizer = "$3" },
  } },
}
LUA
}
case "$BOOST" in /*) ;; *) BOOST="$PWD/$BOOST" ;; esac
cd "$TMP/tk" || exit 1
export BOOST_ROOT="$TMP/tk"   # the token cache goes to $TMP/tk/build/tokens
tokspec two.lua "$TMP/tok1.json" "$TMP/tok2.json"
line=$(grep -n 'tok2.json' two.lua | cut -d: -f1)
$BOOST gen two.lua -o g2 >two.out 2>&1
rc=$?
grep -q "two.lua:$line: data.sources\[2\] names tokenizer .*tok2.json.*one tokenizer" two.out &&
  [ $rc = 2 ] && ok mixture_two_tokenizers_refused ||
  fail mixture_two_tokenizers_refused "exit $rc: $(cat two.out)"
tokspec t1.lua "$TMP/tok1.json" ""
$BOOST train t1.lua --backend cpu --quiet -o run1 >t1.out 2>&1 ||
  { fail mixture_tokenizer_run "$(tail -3 t1.out)"; exit 1; }
tokspec t2.lua "$TMP/tok2.json" ""
$BOOST train t2.lua --backend cpu --quiet --resume run1 -D steps=3 >t2.out 2>&1
rc=$?
crc1=$(grep -o '"tokenizer_crc32c": "0x[0-9a-f]*' run1/step-000002/state.json | cut -d'"' -f4)
grep -q "trained with tokenizer CRC-32C $crc1 .*, but this plan names tokenizer .*tok2" t2.out &&
  grep -q "resume with the plan (and tokenizer.json) of the run it came from" t2.out &&
  [ $rc = 2 ] && ok mixture_resume_other_tokenizer_refused ||
  fail mixture_resume_other_tokenizer_refused "exit $rc: $(tail -2 t2.out)"
sed "s|tokenizer = \"[^\"]*\"|tokenizer = \"\"|" t1.lua >bytes.lua
$BOOST train bytes.lua --backend cpu --quiet --resume run1 -D steps=3 >t3.out 2>&1
rc=$?
grep -q "trained with tokenizer CRC-32C $crc1 .*, but this plan names no tokenizer" t3.out &&
  [ $rc = 2 ] && ok mixture_resume_without_tokenizer_refused ||
  fail mixture_resume_without_tokenizer_refused "exit $rc: $(tail -2 t3.out)"
$BOOST train t1.lua --backend cpu --quiet --resume run1 -D steps=3 >t4.out 2>&1
rc=$?
[ $rc = 0 ] && ok mixture_resume_same_tokenizer ||
  fail mixture_resume_same_tokenizer "exit $rc: $(tail -2 t4.out)"
# a checkpoint that records no tokenizer (bytes here; an import's step 0 alike) is taken, said
$BOOST train bytes.lua --backend cpu --quiet -o run0 >t5.out 2>&1
$BOOST train t1.lua --backend cpu --quiet --resume run0 -D steps=3 >t6.out 2>&1
rc=$?
[ $rc = 0 ] && grep -q "records no tokenizer; this run's text goes through .*tok1.json" t6.out &&
  ok mixture_resume_unrecorded_tokenizer_noted ||
  fail mixture_resume_unrecorded_tokenizer_noted "exit $rc: $(tail -2 t6.out)"
