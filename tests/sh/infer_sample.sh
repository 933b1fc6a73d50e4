#!/usr/bin/env bash
# infer_sample.sh: `boost sample` on the CPU backend, from a demo-like checkpoint (tiny-cola, btp,
# tp=2, 400 steps at the spec's lr: about 6 s). The greedy sample is English-like by byte statistics
# (mostly letters and spaces; an untrained or barely trained model fails this); a seed gives the same
# text twice and another seed another text; top-k 1 and a tiny top-p equal greedy; greedy text is
# the same at tp=1/2/4 and in the naive layout, and a full-rank tiny-llama's in the megatron layout at
# tp=1/2/4; past seq tokens the window slides and says so; the KV-cache decode picks --no-cache's tokens.
. tests/sh/lib.sh

$BOOST train tiny-cola --backend cpu -D steps=400 -D warmup=10 -D eval_every=0 --quiet -o "$TMP/run" \
  >"$TMP/train.out" 2>&1 || { fail sample_train "$(tail -3 "$TMP/train.out")"; exit 1; }
S() { $BOOST sample "$TMP/run" --backend cpu --prompt "The " "$@" 2>>"$TMP/sample.err"; }

S --temperature 0 --tokens 120 >"$TMP/greedy.txt"
out=$(python3 - "$TMP/greedy.txt" <<'PY'
import sys
text = open(sys.argv[1], "rb").read()[4:].rstrip(b"\n")
n = len(text)
letters = sum(chr(b).isalpha() and b < 128 for b in text)
spaces = text.count(b" ")
distinct = len({b for b in text if chr(b).isalpha()})
words = [w for w in text.split() if w]
ok = n >= 100 and letters / n >= 0.6 and 0.05 <= spaces / n <= 0.4 and (letters + spaces) / n >= 0.85 and distinct >= 3 \
     and words and 1.5 <= sum(len(w) for w in words) / len(words) <= 12
print(f"{n} bytes, letters {letters / max(n, 1):.2f}, spaces {spaces / max(n, 1):.2f}, {distinct} distinct letters: {text[:60]!r}")
sys.exit(0 if ok else 1)
PY
)
[ $? = 0 ] && ok "sample_greedy_english_like" || fail sample_greedy_english_like "$out"

S --seed 7 --tokens 60 >"$TMP/s7a.txt"; S --seed 7 --tokens 60 >"$TMP/s7b.txt"; S --seed 8 --tokens 60 >"$TMP/s8.txt"
[ -s "$TMP/s7a.txt" ] && cmp -s "$TMP/s7a.txt" "$TMP/s7b.txt" && ok sample_seed_reproducible || fail sample_seed_reproducible "two runs with --seed 7 differ"
cmp -s "$TMP/s7a.txt" "$TMP/s8.txt" && fail sample_seed_changes_text "--seed 7 and --seed 8 gave the same text" || ok sample_seed_changes_text

S --temperature 0 --tokens 60 >"$TMP/g60.txt"
S --top-k 1 --tokens 60 --seed 3 >"$TMP/k1.txt"
cmp -s "$TMP/g60.txt" "$TMP/k1.txt" && ok sample_top_k_1_is_greedy || fail sample_top_k_1_is_greedy "$(cat "$TMP/g60.txt") vs $(cat "$TMP/k1.txt")"
S --top-p 0.0001 --tokens 60 --seed 3 >"$TMP/p0.txt"
cmp -s "$TMP/g60.txt" "$TMP/p0.txt" && ok sample_tiny_top_p_is_greedy || fail sample_tiny_top_p_is_greedy "$(cat "$TMP/p0.txt")"

# the KV-cache decode (the default) and the full recompute per token (--no-cache) pick the same
# greedy tokens while the text fits in seq (4 + 56 < 64)
S --temperature 0 --tokens 56 >"$TMP/kv56.txt"
S --temperature 0 --tokens 56 --no-cache >"$TMP/nc56.txt"
[ -s "$TMP/kv56.txt" ] && cmp -s "$TMP/kv56.txt" "$TMP/nc56.txt" && ok sample_kv_cache_equals_no_cache \
  || fail sample_kv_cache_equals_no_cache "$(cat "$TMP/kv56.txt") vs $(cat "$TMP/nc56.txt")"
grep -q "KV cache of 64 positions" "$TMP/sample.err" && ok sample_says_kv_cache || fail sample_says_kv_cache "$(tail -3 "$TMP/sample.err")"

for v in "tp=1" "tp=4" "layout=naive"; do
  S --temperature 0 --tokens 60 -D $v >"$TMP/g-$v.txt"
  cmp -s "$TMP/g60.txt" "$TMP/g-$v.txt" && ok "sample_greedy_same_at_${v/=/_}" \
    || fail "sample_greedy_same_at_${v/=/_}" "$(cat "$TMP/g-$v.txt") vs $(cat "$TMP/g60.txt")"
done

: >"$TMP/sample.err"
S --temperature 0 --tokens 100 >"$TMP/long.txt"
n=$(wc -c <"$TMP/long.txt")   # prompt 4 + 100 bytes, and a newline unless the text ends with one
{ [ "$n" = 104 ] || [ "$n" = 105 ]; } && grep -q "window slides" "$TMP/sample.err" && ok sample_window_slides \
  || fail sample_window_slides "$(wc -c <"$TMP/long.txt") bytes; $(cat "$TMP/sample.err")"

# the megatron layout (full-rank tiny-llama, 100 steps): greedy text the same at tp=1, 2 and 4
$BOOST train tiny-llama --backend cpu -D steps=100 -D lr=1e-2 -D warmup=10 -D eval_every=0 --quiet -o "$TMP/llama" \
  >"$TMP/llama.out" 2>&1 || fail sample_llama_train "$(tail -3 "$TMP/llama.out")"
for tp in 1 2 4; do
  $BOOST sample "$TMP/llama" --backend cpu --prompt "The " --temperature 0 --tokens 60 -D tp=$tp >"$TMP/ll$tp.txt" 2>>"$TMP/sample.err"
done
[ -s "$TMP/ll1.txt" ] && cmp -s "$TMP/ll1.txt" "$TMP/ll2.txt" && cmp -s "$TMP/ll1.txt" "$TMP/ll4.txt" \
  && ok sample_megatron_greedy_same_at_tp_1_2_4 \
  || fail sample_megatron_greedy_same_at_tp_1_2_4 "$(cat "$TMP/ll1.txt") / $(cat "$TMP/ll2.txt") / $(cat "$TMP/ll4.txt")"
