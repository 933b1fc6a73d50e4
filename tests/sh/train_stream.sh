#!/usr/bin/env bash
# train_stream.sh: training from llm.c token shards that are memory-mapped, not loaded. Sparse
# synthetic shard sets (a header, then a hole of token-0s with a few written tokens) of 1 MiB and of
# 64 MiB train with the same peak resident set (VmHWM, from GNU time) to within 4 MiB, where loading
# the larger set would add well over 64 MiB; uint32 shards train; the position in state.json counts
# sequences; bad shard sets (a glob matching nothing, a damaged header, a token outside the
# vocabulary) stop with exit 2, a message naming the file or flag, and nothing written; a resume
# continues at the saved position (also from a state.json without data_sequences).
# STREAM_BIG_MIB=1024 runs the 1 GiB measurement recorded in bench/results/2026-12-02-streaming.md.
. tests/sh/lib.sh
big_mib=${STREAM_BIG_MIB:-64}
common=(tiny-cola --backend cpu -D tp=1 -D steps=3 -D eval_every=0 --val-batches 2 --quiet)

# le32 N: N as 4 little-endian bytes
le32() { printf "\\x$(printf %02x $(($1 & 255)))\\x$(printf %02x $((($1 >> 8) & 255)))\\x$(printf %02x $((($1 >> 16) & 255)))\\x$(printf %02x $((($1 >> 24) & 255)))"; }
# shard FILE VERSION NTOKENS: a header, NTOKENS tokens as a hole (token 0) with a token 'a' every 64 KiB
shard() {
  local width=$(( $2 == 1 ? 2 : 4 ))
  { le32 20240520; le32 "$2"; le32 "$3"; head -c 1012 /dev/zero; } >"$1"
  truncate -s $((1024 + $3 * width)) "$1"
  local off
  for off in $(seq 1024 65536 $((1024 + $3 * width - 4))); do printf 'a\0\0\0' | dd of="$1" bs=1 seek="$off" count="$width" conv=notrunc status=none; done
}
# peak_kib LOG: the peak resident set GNU time reports
peak_kib() { grep -o 'Maximum resident set size (kbytes): [0-9]*' "$1" | grep -o '[0-9]*$'; }

mkdir -p "$TMP/small" "$TMP/big"
shard "$TMP/small/part_000.bin" 1 $((512 * 1024))                 # 1 MiB
per=$((big_mib / 4))
for i in 0 1 2 3; do shard "$TMP/big/part_00$i.bin" 1 $((per * 512 * 1024)); done
for set in small big; do
  /usr/bin/time -v $BOOST train "${common[@]}" -D data="$TMP/$set/part_*.bin" -o "$TMP/o-$set" >"$TMP/$set.out" 2>&1
  echo $? >"$TMP/$set.rc"
done
ps=$(peak_kib "$TMP/small.out"); pb=$(peak_kib "$TMP/big.out")
echo "# peak RSS: $ps KiB with a 1 MiB shard set, $pb KiB with $big_mib MiB (4 shards)"
if [ "$(cat "$TMP/small.rc")" = 0 ] && [ "$(cat "$TMP/big.rc")" = 0 ] && [ -n "$ps" ] && [ -n "$pb" ]; then
  ok stream_trains_from_globs
  [ $((pb - ps)) -le 4096 ] && ok stream_peak_rss_independent_of_size \
    || fail stream_peak_rss_independent_of_size "$ps KiB (1 MiB) vs $pb KiB ($big_mib MiB)"
else
  fail stream_trains_from_globs "exit $(cat "$TMP/small.rc")/$(cat "$TMP/big.rc"): $(grep -i 'boost\|error' "$TMP/big.out" | head -3)"
fi
grep -q '"data_sequences": 12,' "$TMP/o-big/step-000003/state.json" 2>/dev/null \
  && grep -q '"data_position": 3,' "$TMP/o-big/step-000003/state.json" && ok stream_position_in_state \
  || fail stream_position_in_state "$(grep data_ "$TMP/o-big/step-000003/state.json" 2>&1)"

# uint32 shards: the same tokens as uint16 give the same losses
mkdir -p "$TMP/u16" "$TMP/u32"
shard "$TMP/u16/a.bin" 1 100000; shard "$TMP/u32/a.bin" 2 100000
$BOOST train "${common[@]}" -D data="$TMP/u16/a.bin" --log "$TMP/u16.jsonl" >/dev/null 2>&1; r1=$?
$BOOST train "${common[@]}" -D data="$TMP/u32/a.bin" --log "$TMP/u32.jsonl" >/dev/null 2>&1; r2=$?
[ $r1 = 0 ] && [ $r2 = 0 ] && [ -s "$TMP/u16.jsonl" ] && cmp -s <(grep -o '"loss":[^,]*' "$TMP/u16.jsonl") <(grep -o '"loss":[^,]*' "$TMP/u32.jsonl") \
  && ok stream_uint32_same_as_uint16 || fail stream_uint32_same_as_uint16 "exit $r1/$r2"

# expect NAME PATTERN -- COMMAND...: exit 2, PATTERN in stderr, no output folder
expect() {
  local name=$1 pattern=$2; shift 3
  rm -rf "$TMP/never"
  "$@" -o "$TMP/never" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  if [ $rc = 2 ] && grep -q -- "$pattern" "$TMP/err" && [ ! -e "$TMP/never/step-000001" ]; then ok "$name"; sed 's/^/#   /' "$TMP/err" | head -1
  else fail "$name" "exit $rc (expected 2), stderr: $(head -c 300 "$TMP/err")"; fi
}
expect stream_glob_matches_nothing "data $TMP/none_\*.bin: the glob matches no file" -- $BOOST train "${common[@]}" -D data="$TMP/none_*.bin"
cp "$TMP/small/part_000.bin" "$TMP/big/part_004.bin"; truncate -s -2 "$TMP/big/part_004.bin"
expect stream_bad_shard_named "part_004.bin: truncated: the header says" -- $BOOST train "${common[@]}" -D data="$TMP/big/part_*.bin"
shard "$TMP/vocab.bin" 1 100000
printf '\x2c\x01' | dd of="$TMP/vocab.bin" bs=1 seek=$((1024 + 2 * 5)) conv=notrunc status=none   # token 300 at 5
expect stream_token_outside_vocab "vocab.bin: token 300 (at position 5 of the file) is outside the model's vocabulary of 256" \
  -- $BOOST train "${common[@]}" -D data="$TMP/vocab.bin"

# resume positions: state.json's data_sequences places the resumed run; a checkpoint written before
# the field existed (data_position in micro-batches of a dp=1 run) resumes at the same place
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
run6=(tiny-cola --backend cpu -D tp=1 -D steps=6 -D eval_every=0 --val-batches 2 --quiet -D data="$TMP/u16/a.bin")
$BOOST train "${run6[@]}" --save-every 3 -o "$TMP/r" --log "$TMP/r.jsonl" >/dev/null 2>&1
cp -r "$TMP/r/step-000003" "$TMP/old3"
# (older still: no checksum of its own either; dropping its line leaves the "files" record last)
sed -i '/"data_sequences"/d; /"state_crc32c"/d' "$TMP/old3/state.json"
sed -i -z 's/  },\n}/  }\n}/' "$TMP/old3/state.json"
same=1
for ck in "$TMP/r/step-000003" "$TMP/old3"; do
  $BOOST train "${run6[@]}" --resume "$ck" --log "$TMP/rr.jsonl" >/dev/null 2>&1 || same=0
  for s in 4 5 6; do [ -n "$(field "$TMP/r.jsonl" $s loss)" ] && [ "$(field "$TMP/r.jsonl" $s loss)" = "$(field "$TMP/rr.jsonl" $s loss)" ] || same=0; done
  rm -f "$TMP/rr.jsonl"
done
grep -q '"data_sequences": 12,' "$TMP/r/step-000003/state.json" && [ $same = 1 ] && ok stream_resume_position \
  || fail stream_resume_position "resumed losses differ from the uninterrupted run (or no data_sequences in state.json)"
