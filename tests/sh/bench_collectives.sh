# bench_collectives.sh: the collectives of one decoder layer in the generator's schedule, as
# `boost project --kv` reports them (the numbers bench/run.sh tabulates), equal the closed forms for
# every shipped model and layout: megatron 2bsd forward and backward; naive bs(5d+2d_ff) forward
# (bs(3d+2d_kv+2d_ff) with grouped-query attention, d_kv = kv_heads*head_dim), bs(3d+d_ff)
# backward; btp 7bsr forward and backward at the tp=1 projected here (the online-norm statistics,
# 2bs more forward, ride in the all-reduces only at tp > 1: test_gen_closed); bytes = 2 x elements.
source "$(dirname "$0")/lib.sh"
# a private copy of the binary, so that a rebuild in the tree while this runs cannot break it
for i in $(seq 60); do cp "$BOOST" "$TMP/boost" 2>/dev/null && "$TMP/boost" --help >/dev/null 2>&1 && break; sleep 1; done
BOOST=$TMP/boost
b=2; s=64
run=${BENCH_RUN:-$(ls specs/runs/*.lua 2>/dev/null | head -1)}
[ -n "$run" ] || { fail collectives_setup "no run spec under specs/runs"; exit 1; }
n=0
for mf in specs/models/*.lua; do
  model=$(basename "$mf" .lua)
  # a low-rank model loads with layout btp, a full-rank one only with megatron
  if ! $BOOST project "$run" -D model="$model" -D micro_batch=$b -D seq=$s -D tp=1 -D pp=1 -D checkpoint=none \
       -D layout=btp --kv >"$TMP/kv" 2>"$TMP/err" &&
     ! $BOOST project "$run" -D model="$model" -D micro_batch=$b -D seq=$s -D tp=1 -D pp=1 -D checkpoint=none \
       -D layout=megatron --kv >"$TMP/kv" 2>>"$TMP/err"; then
    if grep -q "has MoE layers" "$TMP/err"; then   # btp only; its closed forms are checked in test_moe
      echo "ok - collectives_$model # SKIP MoE layers: boost project compares megatron/naive/btp, MoE is btp only"
      n=$((n + 1)); continue
    fi
    fail "collectives_$model" "boost project failed: $(head -3 "$TMP/err")"; continue
  fi
  kv() { awk -v k="$1" '$1 == k { print $2; exit }' "$TMP/kv"; }
  d=$(kv hidden); ff=$(kv ffn); r=$(kv rank)
  dkv=$((d / $(kv heads) * $(kv kv_heads)))     # k and v width: d for MHA, less with GQA
  if [ "$(kv moe_experts)" != 0 ]; then   # its closed forms are checked in test_moe and test_moe_layouts
    # every layout is projected, except with expert factors shared across experts (btp only)
    if grep -q 'shared *=' "$mf"; then want="btp"; else want="megatron naive btp"; fi
    miss=""; for l in $want; do [ -n "$(kv layer_fwd_elems.$l)" ] || miss="$miss $l"; done
    [ -z "$miss" ] && ok "collectives_$model: MoE layers projected for $want (closed forms: test_moe)" \
      || fail "collectives_$model" "an MoE model should be projected for $want; missing:$miss"
    n=$((n + 1)); continue
  fi
  if [ "$(kv rank_uniform)" != 1 ]; then
    echo "ok - collectives_$model # SKIP ranks differ between projections or layers: no single closed form"
    n=$((n + 1)); continue
  fi
  for layout in megatron naive btp; do
    fe=$(kv layer_fwd_elems.$layout); be=$(kv layer_bwd_elems.$layout)
    fb=$(kv layer_fwd_bytes.$layout); bb=$(kv layer_bwd_bytes.$layout)
    if [ -z "$fe" ]; then
      # a full-rank model has only the megatron layout
      [ "$layout" != megatron ] && [ "$r" = 0 ] && continue
      # a factorization that does not run in this layout (usv in naive): the generator refuses it
      if $BOOST gen "$run" -D model="$model" -D micro_batch=$b -D seq=$s -D tp=1 -D pp=1 \
           -D checkpoint=none -D layout=$layout -o "$TMP/refused" 2>&1 | grep -q "cannot split"; then
        ok "collectives_${model}_$layout: not projected, the factorization does not run in $layout"
        continue
      fi
      fail "collectives_${model}_$layout" "no numbers for this layout"; continue
    fi
    case $layout in
      megatron) cf=$((2*b*s*d)); cb=$((2*b*s*d)) ;;
      naive) cf=$((b*s*(3*d+2*dkv+2*ff))); cb=$((b*s*(3*d+ff))) ;;
      btp) cf=$((7*b*s*r)); cb=$((7*b*s*r)) ;;
    esac
    if [ "$fe" = $cf ] && [ "$be" = $cb ] && [ "$fb" = $((2*cf)) ] && [ "$bb" = $((2*cb)) ]; then
      ok "collectives_${model}_$layout"
    else
      fail "collectives_${model}_$layout" "d=$d d_ff=$ff r=$r: forward $fe elements ($fb B), closed form $cf; backward $be ($bb B), closed form $cb"
    fi
  done
  n=$((n + 1))
done
[ $n -gt 0 ] && ok collectives_models_found || fail collectives_models_found "no model under specs/models"
