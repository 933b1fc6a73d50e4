#!/usr/bin/env bash
# decode.sh: decode speed on the CPU backend. For tiny-cola and cola-llama-60m (seq 256, a 1-step
# checkpoint: speed does not depend on the weights), `boost sample` greedy tokens/s at tp=1 and tp=2
# with the KV cache (the decode plan, infer.txt) and without it (--no-cache: a full forward over the
# window per token), against the same exported model in PyTorch (tools/boost_hf.py, float32, with a
# KV cache) on this machine in the same run; and the per-token decode collective bytes per layout
# of CoLA-LLaMA-7B at tp=4 (the inference section of `boost report`). Prints Markdown.
# Usage: bash bench/decode.sh [TINY_TOKENS] [M60_TOKENS] [M60_NOCACHE_TOKENS] > bench/results/DATE-decode.md
set -u
cd "$(dirname "$0")/.." || exit 2
BOOST=${BOOST:-./bin/boost}
NT=${1:-200}; NM=${2:-64}; NMN=${3:-8}
TMP=$(mktemp -d /tmp/boost-decode.XXXXXX); trap 'rm -rf "$TMP"' EXIT
echo "# Decode speed on the CPU backend ($(date -u +%F), $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg) at the start)"
echo
echo "Command: \`bash bench/decode.sh $NT $NM $NMN\` at $(git rev-parse --short HEAD 2>/dev/null). BOOST samples greedily with"
echo "\`boost sample --temperature 0\`: with the KV cache (infer.txt and prefill.txt: the prompt through the prefill step,"
echo "then one decode step per token; the rate counts the generated tokens after the prefill, past seq tokens the re-prefills"
echo "of the sliding window included) and with \`--no-cache\` (every token runs the whole forward over its window of up to"
echo "seq tokens). The prompt is 4 tokens."
echo "PyTorch runs the exported model (\`boost export\`, \`tools/boost_hf.py\`, float32, one thread) with a KV cache."
echo
echo "| model | seq | tokens (cache / no cache) | BOOST tp=1 KV cache | tp=1 no cache | BOOST tp=2 KV cache | tp=2 no cache | PyTorch KV cache |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for spec in "tiny-cola:tiny-cola:64:$NT:$NT" "cola-llama-60m:cola-60m-h100:256:$NM:$NMN"; do
  IFS=: read -r model run seq n nn <<<"$spec"
  $BOOST train "$run" --backend cpu -D tp=1 -D steps=1 -D micro_batch=1 -D seq="$seq" -D eval_every=0 -D data=corpus \
    --quiet -o "$TMP/$model" >"$TMP/$model.train" 2>&1 || { echo "| $model | training failed: $(tail -1 "$TMP/$model.train") |"; continue; }
  rates=()
  for tp in 1 2; do
    for mode in cache nocache; do
      k=$n; flag=""; [ $mode = nocache ] && { k=$nn; flag=--no-cache; }
      $BOOST sample "$TMP/$model" --backend cpu -D tp=$tp --temperature 0 --tokens "$k" --prompt-ids "84 104 101 32" $flag >/dev/null 2>"$TMP/s.err"
      rates+=("$(grep -o '([0-9.]* tokens/s)' "$TMP/s.err" | tr -d '(' | cut -d' ' -f1)")
    done
  done
  $BOOST export "$TMP/$model" --format hf -o "$TMP/$model-hf" >/dev/null 2>&1
  pt=$(python3 - "$TMP/$model-hf" "$n" <<'PY' 2>/dev/null
import sys, time, torch
sys.path.insert(0, "tools")
import boost_hf
torch.set_num_threads(1)          # one thread: on a shared, loaded machine more threads only contend
m = boost_hf.load(sys.argv[1])
n = int(sys.argv[2])
boost_hf.generate(m, list(b"The "), 2)            # warm-up
t = time.perf_counter()
boost_hf.generate(m, list(b"The "), n)
print(f"{n / (time.perf_counter() - t):.1f}")
PY
)
  echo "| $model | $seq | $n / $nn | ${rates[0]:-?} | ${rates[1]:-?} | ${rates[2]:-?} | ${rates[3]:-?} | ${pt:-n/a (no torch)} |"
done
echo
echo "Per-token decode collectives per rank, CoLA-LLaMA-7B at tp=4 (bf16, every layer plus the head; \`boost report cola-7b-tp4\`, its inference section):"
echo
$BOOST report cola-7b-tp4 2>/dev/null | sed -n '/^## Inference/,$p' | sed -n '/^| layout | collectives/,/^$/p'
echo
echo "KV cache per rank of one sequence, CoLA-LLaMA-7B at tp=4 (the same report):"
echo
echo "| KV cache per rank | bytes |"
echo "|---|---:|"
$BOOST report cola-7b-tp4 2>/dev/null | sed -n '/^## Inference/,$p' | grep -E '^\| (all|per token)'
