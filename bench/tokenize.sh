#!/usr/bin/env bash
# tokenize.sh: tokenize throughput of `boost tokenize` against the `tokenizers` library on the same
# text, tokenizer and thread count, in the same run. The text is the corpus repeated to SIZE MB as
# JSON lines (one fortune a line); tokenizers: byte-level BPE with the GPT-2 pre-tokenizer (8192
# tokens, `boost tokenizer train`) and SentencePiece-style BPE with byte fallback and LLaMA-2's
# normalizers (4096 tokens, trained by the library). The library is timed on encode_batch alone,
# documents already in memory; boost on the whole command (reading and parsing the JSON lines,
# writing the token file). Both produce the same ids (checked). Prints a markdown report.
# Usage: bash bench/tokenize.sh [SIZE_MB] [THREADS...]   (default 10 MB, threads 1 and all cores)
set -u
cd "$(dirname "$0")/.." || exit 2
BOOST=${BOOST:-./bin/boost}
PY=${PYTHON:-python3}
size=${1:-10}; shift || true
threads=${*:-1 $(nproc)}
tmp=$(mktemp -d /tmp/boost-bench-tok.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
[ -f build/corpus.txt ] || bash tools/corpus.sh >/dev/null
$PY -c 'import tokenizers' 2>/dev/null || { echo "bench/tokenize.sh: the tokenizers library is not importable" >&2; exit 1; }
$PY - build/corpus.txt "$tmp" "$size" <<'PYEOF'
import json, sys
from tokenizers import Tokenizer, models, normalizers, trainers
corpus, out, size = sys.argv[1], sys.argv[2], float(sys.argv[3])
text = open(corpus, encoding="utf-8").read()
docs = [d for d in text.split("\n\n") if d.strip()]
with open(out + "/docs.jsonl", "w") as f:
    n = 0
    while n < size * 1e6:
        for d in docs:
            f.write(json.dumps({"text": d}) + "\n")
            n += len(d.encode())
tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
trainer = trainers.BpeTrainer(vocab_size=4096, show_progress=False,
                              special_tokens=["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)])
tok.train_from_iterator(docs, trainer)
tok.save(out + "/sp.json")
PYEOF
$BOOST tokenizer train build/corpus.txt --vocab 8192 -o "$tmp/bl.json" >/dev/null || exit 1
mb=$(stat -c %s "$tmp/docs.jsonl")
echo "# Tokenize throughput: boost tokenize vs the tokenizers library"
echo
echo "\`bash bench/tokenize.sh $size $threads\` on $(hostname) ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null), tokenizers $($PY -c 'import tokenizers; print(tokenizers.__version__)')."
echo "Text: build/corpus.txt repeated to $(awk "BEGIN{printf \"%.1f\", $mb/1e6}") MB of JSON lines (text bytes below count the documents' UTF-8 only)."
echo
echo "| tokenizer | threads | boost MB/s | library MB/s | boost / library | same ids |"
echo "|---|---|---|---|---|---|"
for kind in bl sp; do
  sep="<|endoftext|>"; name="byte-level, GPT-2 regex, 8192"
  [ $kind = sp ] && { sep="<s>"; name="SentencePiece-style, byte fallback, 4096"; }
  for t in $threads; do
    t0=$(date +%s.%N)
    $BOOST tokenize "$tmp/$kind.json" "$tmp/docs.jsonl" -o "$tmp/$kind.bin" --sep "$sep" --threads $t --quiet >"$tmp/out" || exit 1
    t1=$(date +%s.%N)
    RAYON_NUM_THREADS=$t $PY - "$tmp/$kind.json" "$tmp/docs.jsonl" "$tmp/$kind.bin" "$sep" "$t0" "$t1" "$name" "$t" <<'PYEOF'
import json, struct, sys, time
from tokenizers import Tokenizer
path, docs_path, ours, sep, t0, t1, name, threads = sys.argv[1:9]
tok = Tokenizer.from_file(path)
docs = [json.loads(l)["text"] for l in open(docs_path)]
nbytes = sum(len(d.encode()) for d in docs)
s = time.perf_counter()
encs = tok.encode_batch(docs, add_special_tokens=False)
lib_s = time.perf_counter() - s
sep_id = tok.token_to_id(sep)
ids = []
for e in encs:
    ids.append(sep_id); ids.extend(e.ids)
d = open(ours, "rb").read()
n = struct.unpack("<3i", d[:12])[2]
same = list(struct.unpack("<%dH" % n, d[1024:])) == ids
boost_s = float(t1) - float(t0)
print("| %s | %s | %.2f | %.2f | %.2fx | %s |" % (name, threads, nbytes / 1e6 / boost_s, nbytes / 1e6 / lib_s,
      lib_s / boost_s, "yes" if same else "NO"))
PYEOF
  done
done
