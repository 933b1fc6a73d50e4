# plot_loss.sh: `boost plot` draws a PNG from a small JSON-lines training log, writes nothing and
# exits 2 for a missing or empty log, and says so clearly when gnuplot is not on PATH.
source "$(dirname "$0")/lib.sh"

log=$TMP/train.jsonl
for i in 1 2 3 4 5 6 7 8; do
  if [ $((i % 4)) = 0 ]; then echo "{\"step\":$i,\"loss\":$((10 - i)).5,\"val_loss\":$((11 - i)).25,\"lr\":0.001}"
  else echo "{\"step\":$i,\"loss\":$((10 - i)).5,\"lr\":0.001}"; fi
done >"$log"

if ! command -v gnuplot >/dev/null; then
  echo "ok - plot_png # SKIP gnuplot is not installed (make deps installs it)"
else
  out=$($BOOST plot "$log" -o "$TMP/curve.png" 2>&1); rc=$?
  # a PNG starts with the 8-byte signature 89 50 4E 47 0D 0A 1A 0A
  sig=$(head -c 8 "$TMP/curve.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')
  if [ $rc = 0 ] && [ -s "$TMP/curve.png" ] && [ "$sig" = 89504e470d0a1a0a ]; then ok plot_png
  else fail plot_png "rc=$rc signature='$sig' output: $out"; fi
  case $out in *"8 loss and 2 val_loss points"*) ok plot_counts_points ;;
    *) fail plot_counts_points "expected 8 loss and 2 val_loss points, got: $out" ;; esac
  # default output name: the log's name with .png
  $BOOST plot "$log" >/dev/null 2>&1 && [ -s "$TMP/train.png" ] && ok plot_default_name \
    || fail plot_default_name "no $TMP/train.png"
  ls "$TMP" | grep -q 'tmp' && fail plot_no_temp_left "$(ls "$TMP")" || ok plot_no_temp_left
fi

# a diverged step (loss null) is left out with a warning naming its line
printf '{"step":1,"loss":3.5}\n{"step":2,"loss":null}\n{"step":3,"loss":3.1}\n' >"$TMP/nan.jsonl"
if command -v gnuplot >/dev/null; then
  out=$($BOOST plot "$TMP/nan.jsonl" -o "$TMP/nan.png" 2>&1); rc=$?
  case $out in *"nan.jsonl:2: warning: 1 line(s) have a loss that is not a number"*"2 loss and 0 val_loss points"*)
    [ $rc = 0 ] && ok plot_null_loss_warned || fail plot_null_loss_warned "rc=$rc" ;;
    *) fail plot_null_loss_warned "$out" ;; esac
fi

$BOOST plot "$TMP/missing.jsonl" -o "$TMP/m.png" 2>"$TMP/err"; rc=$?
if [ $rc = 2 ] && grep -q 'missing.jsonl: cannot open' "$TMP/err" && [ ! -e "$TMP/m.png" ]; then ok plot_missing_log
else fail plot_missing_log "rc=$rc: $(cat "$TMP/err")"; fi

echo '{"event":"start"}' >"$TMP/empty.jsonl"
$BOOST plot "$TMP/empty.jsonl" -o "$TMP/e.png" 2>"$TMP/err"; rc=$?
if [ $rc = 2 ] && grep -q 'no line has' "$TMP/err" && [ ! -e "$TMP/e.png" ]; then ok plot_no_points
else fail plot_no_points "rc=$rc: $(cat "$TMP/err")"; fi

PATH=/nonexistent $BOOST plot "$log" -o "$TMP/n.png" 2>"$TMP/err"; rc=$?
if [ $rc = 1 ] && grep -q 'gnuplot not found' "$TMP/err" && [ ! -e "$TMP/n.png" ]; then ok plot_no_gnuplot
else fail plot_no_gnuplot "rc=$rc: $(cat "$TMP/err")"; fi
