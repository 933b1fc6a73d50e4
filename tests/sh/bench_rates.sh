# bench_rates.sh: the measured-rates loop without a GPU: `boost project --gemms` lists the
# schedules' GEMM shapes, bench/gemm_rates.py (on the CPU here) turns them into results rows, and
# `boost project --rates` reads those rows for the GPU they are labelled with (and no other).
source "$(dirname "$0")/lib.sh"
for i in $(seq 60); do cp "$BOOST" "$TMP/boost" 2>/dev/null && "$TMP/boost" --help >/dev/null 2>&1 && break; sleep 1; done
BOOST=$TMP/boost

$BOOST project tiny-cola -D micro_batch=2 -D seq=64 --gemms >"$TMP/shapes" 2>"$TMP/err"
# every line: layout m n k batch count; the btp schedule has the head GEMM m=128 n=vocab/tp k=d
if awk 'NF != 6 || $2 <= 0 || $3 <= 0 || $4 <= 0 { bad = 1 } END { exit bad || NR == 0 }' "$TMP/shapes" &&
   grep -q '^megatron ' "$TMP/shapes" && grep -q '^naive ' "$TMP/shapes" && grep -q '^btp 128 ' "$TMP/shapes"; then
  ok gemms_listed
else fail gemms_listed "$(head -3 "$TMP/shapes") $(cat "$TMP/err")"; fi

head -3 "$TMP/shapes" | python3 bench/gemm_rates.py --gpu h100 --device cpu --min-seconds 0.001 >"$TMP/rates.md" 2>"$TMP/err"
if grep -q 'PyTorch is not installed' "$TMP/err"; then
  echo "ok - gemm_rates_cpu # SKIP PyTorch is not installed here (it is on the GPU machine)"
  exit 0
fi
n=$(grep -c '^| gemm | h100 | [0-9]* | [0-9]* | [0-9]* | [0-9.e+-]* |$' "$TMP/rates.md")
[ "$n" = "$(head -3 "$TMP/shapes" | awk '{print $2, $3, $4}' | sort -u | wc -l)" ] && ok gemm_rates_cpu \
  || fail gemm_rates_cpu "$n rows: $(cat "$TMP/rates.md" "$TMP/err" | tail -3)"

# rows labelled h100 change an h100 projection, not an a100 one
kv() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }
$BOOST project tiny-cola -D gpu=h100 --rates "$TMP/rates.md" --kv >"$TMP/m.kv"
$BOOST project tiny-cola -D gpu=h100 --rates /nonexistent --kv >"$TMP/0.kv"
$BOOST project tiny-cola -D gpu=a100 --rates "$TMP/rates.md" --kv >"$TMP/a.kv"
if [ "$(kv "$TMP/m.kv" gemm_rates)" = measured ] && [ "$(kv "$TMP/0.kv" gemm_rates)" = model ] &&
   [ "$(kv "$TMP/m.kv" gemm_s.btp)" != "$(kv "$TMP/0.kv" gemm_s.btp)" ]; then ok rates_used_for_their_gpu
else fail rates_used_for_their_gpu "measured: $(kv "$TMP/m.kv" gemm_rates) $(kv "$TMP/m.kv" gemm_s.btp) vs $(kv "$TMP/0.kv" gemm_s.btp)"; fi
[ "$(kv "$TMP/a.kv" gemm_rates)" = model ] && ok rates_not_for_other_gpu || fail rates_not_for_other_gpu "a100 used h100 rates"
echo '| gemm | h100 | 0 | 1 | 1 | 5 |' >>"$TMP/rates.md"
$BOOST project tiny-cola -D gpu=h100 --rates "$TMP/rates.md" >/dev/null 2>"$TMP/err"; rc=$?
[ $rc = 2 ] && grep -q "rates.md:[0-9]*: a gemm rate row needs positive" "$TMP/err" && ok rates_bad_row \
  || fail rates_bad_row "exit $rc: $(cat "$TMP/err")"
