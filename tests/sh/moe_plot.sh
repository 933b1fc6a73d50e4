# moe_plot.sh: `boost plot LOG --experts` draws the expert load of an MoE training log (the
# moe_load arrays `boost train --log` writes) into a PNG, one panel per MoE layer; a log without
# MoE fields is refused with exit 2 and no picture.
source "$(dirname "$0")/lib.sh"

log=$TMP/moe.jsonl
$BOOST train tiny-cola-moe --backend cpu -D steps=6 -D eval_every=0 --log "$log" --quiet >"$TMP/train.out" 2>&1 \
  || fail moe_plot_train "$(tail -3 "$TMP/train.out")"
if ! command -v gnuplot >/dev/null; then
  echo "ok - moe_plot_png # SKIP gnuplot is not installed (make deps installs it)"
else
  out=$($BOOST plot "$log" --experts -o "$TMP/load.png" 2>&1); rc=$?
  sig=$(head -c 8 "$TMP/load.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')
  if [ $rc = 0 ] && [ "$sig" = 89504e470d0a1a0a ]; then ok moe_plot_png; else fail moe_plot_png "rc=$rc sig='$sig': $out"; fi
  case $out in *"2 MoE layer(s) x 4 experts at 6 steps"*) ok moe_plot_counts ;; *) fail moe_plot_counts "$out" ;; esac
  $BOOST plot "$log" --experts >/dev/null 2>&1 && [ -s "$TMP/moe-experts.png" ] && ok moe_plot_default_name \
    || fail moe_plot_default_name "no $TMP/moe-experts.png"
  printf '{"step":1,"loss":3.5}\n{"step":2,"loss":3.1}\n' >"$TMP/dense.jsonl"
  $BOOST plot "$TMP/dense.jsonl" --experts -o "$TMP/d.png" 2>"$TMP/err"; rc=$?
  if [ $rc = 2 ] && grep -q 'no line has "moe_load"' "$TMP/err" && [ ! -e "$TMP/d.png" ]; then ok moe_plot_dense_refused
  else fail moe_plot_dense_refused "rc=$rc: $(cat "$TMP/err")"; fi
fi
