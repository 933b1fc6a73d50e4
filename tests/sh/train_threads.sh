# train_threads.sh: the CPU backend gives the same bits at any thread count: a short tiny-cola run
# (tp=1, and tp=2) logs identical losses and gradient norms (printed to full float precision) and
# writes byte-identical checkpoints (weights and AdamW moments) with BOOST_THREADS=1 and 2 (OpenMP
# rows and GEMM blocks land on different threads, same arithmetic).
source "$(dirname "$0")/lib.sh"
for tp in 1 2; do
  for th in 1 2; do
    # seq 256 makes every kernel big enough to be split over the threads
    if ! BOOST_THREADS=$th "$BOOST" train tiny-cola -D tp=$tp -D steps=2 -D dtype=fp32 -D micro_batch=4 -D seq=256 \
         -D eval_every=100000 --backend cpu --quiet -o "$TMP/ck-tp$tp-th$th" --log "$TMP/tp$tp-th$th.json" >"$TMP/out" 2>&1; then
      fail "threads_tp${tp}_runs" "BOOST_THREADS=$th: $(tail -2 "$TMP/out")"; continue 2
    fi
    grep -o '"\(loss\|grad_norm\)":[-0-9.e+]*' "$TMP/tp$tp-th$th.json" >"$TMP/tp$tp-th$th.vals"
  done
  n=$(wc -l <"$TMP/tp$tp-th1.vals")
  if [ "$n" -lt 4 ]; then fail "threads_tp${tp}_bit_identical" "only $n loss/grad_norm values logged"
  elif ! cmp -s "$TMP/tp$tp-th1.vals" "$TMP/tp$tp-th2.vals"; then
    fail "threads_tp${tp}_bit_identical" "$(diff "$TMP/tp$tp-th1.vals" "$TMP/tp$tp-th2.vals" | head -4 | tr '\n' ' ')"
  elif ! cmp "$TMP/ck-tp$tp-th1/step-000002/model.safetensors" "$TMP/ck-tp$tp-th2/step-000002/model.safetensors" >"$TMP/cmp" 2>&1 ||
       ! cmp "$TMP/ck-tp$tp-th1/step-000002/optimizer.safetensors" "$TMP/ck-tp$tp-th2/step-000002/optimizer.safetensors" >"$TMP/cmp" 2>&1; then
    fail "threads_tp${tp}_bit_identical" "the logs agree but the checkpoints differ: $(head -1 "$TMP/cmp")"
  else ok "threads_tp${tp}_bit_identical"
  fi
done
