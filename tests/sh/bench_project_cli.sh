# bench_project_cli.sh: `boost project` as a command: --json is valid JSON with the keys tools rely
# on (seconds_per_iter, compute_s, comm_s per layout; parts that add up), --kv agrees with it,
# a full-rank model gets only megatron, and bad input exits 2 with a message naming the problem.
source "$(dirname "$0")/lib.sh"
for i in $(seq 60); do cp "$BOOST" "$TMP/boost" 2>/dev/null && "$TMP/boost" --help >/dev/null 2>&1 && break; sleep 1; done
BOOST=$TMP/boost

if $BOOST project cola-7b-tp4 -D seq=512 --json >"$TMP/p.json" 2>"$TMP/err"; then
  if python3 - "$TMP/p.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
for k in ("seconds_per_iter", "compute_s", "comm_s"):
    for l in ("megatron", "naive", "btp"):
        assert j[k][l] > 0, (k, l)
for l in ("megatron", "naive", "btp"):
    assert abs(j["compute_s"][l] + j["comm_s"][l] - j["seconds_per_iter"][l]) <= 1e-9 * j["seconds_per_iter"][l], l
assert abs(j["speedup"]["btp_over_naive"] - j["seconds_per_iter"]["naive"] / j["seconds_per_iter"]["btp"]) < 1e-5
assert j["tp"] == 4 and j["seq"] == 512 and j["gpu"] == "a100"
PY
  then ok project_json; else fail project_json "JSON missing keys or parts do not add up: $(head -c 300 "$TMP/p.json")"; fi
else fail project_json "exit $?: $(cat "$TMP/err")"; fi

$BOOST project cola-7b-tp4 -D seq=512 --kv >"$TMP/p.kv"
a=$(awk '$1 == "seconds_per_iter.btp" { print $2 }' "$TMP/p.kv")
b=$(python3 -c "import json; print(repr(json.load(open('$TMP/p.json'))['seconds_per_iter']['btp']))")
python3 -c "import sys; sys.exit(0 if abs($a - $b) <= 1e-12 * $b else 1)" && ok project_kv_matches_json \
  || fail project_kv_matches_json "kv $a json $b"

$BOOST project llama-7b-tp4 -D seq=512 --kv >"$TMP/f.kv" 2>"$TMP/err"
if grep -q '^seconds_per_iter.megatron ' "$TMP/f.kv" && ! grep -q '^seconds_per_iter.btp' "$TMP/f.kv"; then ok project_full_rank_only_megatron
else fail project_full_rank_only_megatron "$(cat "$TMP/err") $(grep seconds "$TMP/f.kv")"; fi

$BOOST project cola-7b-tp4 -D seq=512 --steps btp >"$TMP/steps" 2>&1
grep -q 'allreduce .* L0.qkv' "$TMP/steps" && grep -q 'attention_fwd' "$TMP/steps" && ok project_steps \
  || fail project_steps "$(head -5 "$TMP/steps")"

expect2() { # name, pattern, command...
  local name=$1 pat=$2; shift 2
  "$@" >"$TMP/o" 2>"$TMP/e"; local rc=$?
  if [ $rc = 2 ] && grep -q -- "$pat" "$TMP/e" && [ ! -s "$TMP/o" ]; then ok "$name"
  else fail "$name" "exit $rc, stderr: $(head -2 "$TMP/e")"; fi
}
expect2 project_no_run "usage" $BOOST project
expect2 project_bad_option "unknown option '--fast'" $BOOST project cola-7b-tp4 --fast
expect2 project_bad_layout "the layouts are" $BOOST project cola-7b-tp4 --steps fancy
expect2 project_bad_override "tp" $BOOST project cola-7b-tp4 -D tp=3
expect2 project_missing_run "nosuchrun" $BOOST project nosuchrun
expect2 project_json_and_kv "not both" $BOOST project cola-7b-tp4 --json --kv
printf 'return run {\n  model = "cola-llama-7b",\n  gpu = "a100",\n  parallel = { tp = 4, pp = 99 },\n}\n' >"$TMP/bad.lua"
$BOOST project "$TMP/bad.lua" >"$TMP/o" 2>"$TMP/e"; rc=$?
[ $rc = 2 ] && grep -q 'pp' "$TMP/e" && ok project_pp_too_deep || fail project_pp_too_deep "exit $rc: $(cat "$TMP/e")"
# --const: a constant of the model set by name; a wrong name or value is exit 2 with the reason
expect2 project_const_unknown "no such constant" $BOOST project cola-7b-tp4 --const coll_effx=0.7
expect2 project_const_range "coll_eff wants a fraction" $BOOST project cola-7b-tp4 --const coll_eff=1.5
$BOOST project cola-7b-tp4 --kv >"$TMP/c0.kv" && $BOOST project cola-7b-tp4 --const coll_eff=0.37 --kv >"$TMP/c1.kv"
t0=$(awk '$1 == "tp_comm_s.btp" { print $2 }' "$TMP/c0.kv"); t1=$(awk '$1 == "tp_comm_s.btp" { print $2 }' "$TMP/c1.kv")
e0=$(awk '$1 == "const.coll_eff" { print $2 }' "$TMP/c0.kv"); e1=$(awk '$1 == "const.coll_eff" { print $2 }' "$TMP/c1.kv")
# half the efficiency: the bandwidth part of every TP collective doubles (latency unchanged), so more than 1.5x
awk -v a="$t0" -v b="$t1" -v e1="$e1" 'BEGIN { exit !(e1 == 0.37 && b > 1.5 * a && b < 2.0 * a + 1e-12) }' && [ "$e0" = 0.74 ] \
  && ok "project --const coll_eff=0.37: TP communication $t0 -> $t1 s" || fail project_const "tp_comm_s $t0 -> $t1, const.coll_eff $e0 -> $e1"
# a model with MoE layers is projected for all three layouts (megatron: full-rank experts, naive: low-rank
# experts Megatron-style, btp); one whose experts share factors for btp alone
$BOOST project cola-7b-tp4 -D model=tiny-cola-moe -D layout=btp --kv >"$TMP/moe.kv" 2>"$TMP/moe.err"; rc=$?
$BOOST project cola-7b-tp4 -D model=tiny-cola-moe-shared -D layout=btp --kv >"$TMP/moes.kv" 2>>"$TMP/moe.err"; rc2=$?
if [ $rc = 0 ] && [ $rc2 = 0 ] && grep -q '^moe_experts [1-9]' "$TMP/moe.kv" \
   && grep -q '^seconds_per_iter.btp [0-9]' "$TMP/moe.kv" && grep -q '^seconds_per_iter.naive [0-9]' "$TMP/moe.kv" \
   && grep -q '^seconds_per_iter.megatron [0-9]' "$TMP/moe.kv" \
   && grep -q '^seconds_per_iter.btp [0-9]' "$TMP/moes.kv" && ! grep -q 'megatron\|naive' "$TMP/moes.kv"
then ok "project: an MoE model is projected for megatron, naive and btp; shared expert factors for btp alone"
else fail project_moe "exit $rc: $(head -2 "$TMP/moe.err") $(grep -c . "$TMP/moe.kv") kv lines"; fi
