#!/usr/bin/env bash
# tokenize_nfc.sh: the C NFC normalizer (runtime/nfc.c, through build/tests/test_bpe_nfc --lines)
# gives Python's unicodedata.normalize('NFC', ...) on every character that has a canonical
# decomposition or a combining class (alone and after a letter), random sequences of letters and
# combining marks, and Hangul jamo sequences. The two must agree on the Unicode version, which
# runtime/unicode_nfc.h states in its first line.
. tests/sh/lib.sh
PY=${PYTHON:-python3}
command -v $PY >/dev/null || { ok "tokenize_nfc_matches_python # SKIP python3 is missing"; exit 0; }
want=$(sed -n 's/.*Unicode \([0-9.]*\) data.*/\1/p' runtime/unicode_nfc.h | head -1)
have=$($PY -c 'import unicodedata; print(unicodedata.unidata_version)')
if [ "$want" != "$have" ]; then
  ok "tokenize_nfc_matches_python # SKIP Python has Unicode $have, the tables $want"; exit 0
fi
$PY - "$TMP/in.txt" "$TMP/want.txt" <<'PYEOF'
import random, sys, unicodedata
rng = random.Random(23)
chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
marked = [c for c in chars if unicodedata.decomposition(c) and not unicodedata.decomposition(c).startswith("<")
          or unicodedata.combining(c)]
marks = [c for c in chars if unicodedata.combining(c)]
seconds = [chr(int(unicodedata.decomposition(c).split()[1], 16)) for c in marked
           if unicodedata.decomposition(c) and len(unicodedata.decomposition(c).split()) == 2]
lines = []
for c in marked:
    lines.append(c)
    lines.append("a" + c + "b")
    lines.append(unicodedata.normalize("NFD", c) + "x")
firsts = [unicodedata.normalize("NFD", c)[0] for c in marked] + list("aeiouAEIOU ")
for _ in range(20000):
    s = ""
    for _ in range(rng.randint(1, 12)):
        r = rng.random()
        s += rng.choice(firsts) if r < 0.3 else rng.choice(marks) if r < 0.6 else \
             rng.choice(seconds) if r < 0.8 else rng.choice(marked)
    lines.append(s)
jamo = [chr(c) for c in list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) +
        list(range(0x11A7, 0x11C3)) + [0xAC00, 0xAC01, 0xD7A3, 0xB098]] + ["\u0301", "a"]
for _ in range(20000):
    lines.append("".join(rng.choice(jamo) for _ in range(rng.randint(1, 8))))
lines = [l.replace("\n", " ") for l in lines]
with open(sys.argv[1], "w", encoding="utf-8", newline="\n") as f:
    f.write("".join(l + "\n" for l in lines))
with open(sys.argv[2], "w", encoding="utf-8", newline="\n") as f:
    f.write("".join(unicodedata.normalize("NFC", l) + "\n" for l in lines))
PYEOF
n=$(wc -l <"$TMP/in.txt")
build/tests/test_bpe_nfc --lines <"$TMP/in.txt" >"$TMP/got.txt" 2>"$TMP/err"
if [ "$n" -gt 40000 ] && cmp -s "$TMP/got.txt" "$TMP/want.txt"; then ok "tokenize_nfc_matches_python_${n}_strings"
else
  line=$(cmp "$TMP/got.txt" "$TMP/want.txt" 2>&1 | sed -n 's/.*line \([0-9]*\).*/\1/p')
  fail tokenize_nfc_matches_python "$n strings; first difference at line ${line:-?}: input $(sed -n "${line:-1}p" "$TMP/in.txt" | od -An -tx1 | head -2 | tr -d '\n') $(cat "$TMP/err")"
fi
