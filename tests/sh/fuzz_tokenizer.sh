#!/usr/bin/env bash
# fuzz_tokenizer.sh: seeded, bounded fuzzing of llm.c tokenizer files given to `boost sample
# --tokenizer`: 24 mutants of a valid file (header fields set to extreme values, length bytes
# changed, bytes flipped, cut short) each exit 0 or 2 with a message, never crash (under the
# sanitizer lane: never a memory or undefined-behaviour report); a FIFO is refused at once.
. tests/sh/lib.sh

python3 - "$TMP" <<'PY'
import struct, sys
d = sys.argv[1]
text = open("build/corpus.txt", "rb").read()[:20000]
with open(f"{d}/tokens.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(text), *([0] * 253)))
    f.write(struct.pack(f"<{len(text)}H", *text))
PY
$BOOST train tiny-cola --backend cpu -D steps=1 -D eval_every=0 -D data="$TMP/tokens.bin" --quiet \
  -o "$TMP/tok" >"$TMP/train.out" 2>&1 || { fail fuzz_tokenizer_train "$(tail -2 "$TMP/train.out")"; exit 1; }
python3 - "$TMP" <<'PY'
import random, struct, sys
d = sys.argv[1]
good = struct.pack("<256I", 20240328, 2, 256, 0, *([0] * 252))
for i in range(256):
    t = f"<{i}>".encode()
    good += bytes([len(t)]) + t
open(f"{d}/good.bin", "wb").write(good)
rng = random.Random(21)   # seeded: the same mutants every run
extremes = [0, 1, 2, 3, 255, 256, 257, 0x7fffffff, 0x80000000, 0xffffffff, 10000000, 10000001]
for k in range(24):
    b = bytearray(good)
    kind = k % 4
    if kind == 0:   # a header field (magic, version, count, eot)
        struct.pack_into("<I", b, 4 * rng.randrange(4), rng.choice(extremes))
    elif kind == 1:   # a token's length byte
        b[1024 + rng.randrange(len(b) - 1024)] = rng.choice([0, 1, 255])
    elif kind == 2:
        for _ in range(4): b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    else:
        b = b[:rng.randrange(len(b))]
    open(f"{d}/m{k:02d}.bin", "wb").write(b)
PY
bad=""
for m in "$TMP"/m*.bin; do
  timeout 60 $BOOST sample "$TMP/tok" --backend cpu --prompt-ids "84 104" --tokens 2 --tokenizer "$m" \
    >"$TMP/s.out" 2>"$TMP/s.err"
  rc=$?
  if { [ $rc != 0 ] && [ $rc != 2 ]; } || grep -qE 'Sanitizer|runtime error:' "$TMP/s.err" \
     || { [ $rc = 2 ] && ! grep -q -- "--tokenizer" "$TMP/s.err"; }; then
    bad="$bad $(basename "$m"):rc=$rc:$(head -c 200 "$TMP/s.err")"
  fi
done
[ -z "$bad" ] && ok fuzz_tokenizer_mutants || fail fuzz_tokenizer_mutants "$bad"
mkfifo "$TMP/fifo.bin"
timeout 20 $BOOST sample "$TMP/tok" --backend cpu --prompt-ids "84" --tokens 1 \
  --tokenizer "$TMP/fifo.bin" >/dev/null 2>"$TMP/f.err"
rc=$?
[ $rc = 2 ] && grep -q "not a regular file" "$TMP/f.err" && ok fuzz_tokenizer_fifo_refused \
  || fail fuzz_tokenizer_fifo_refused "exit $rc (124: it waited on the FIFO): $(cat "$TMP/f.err")"
