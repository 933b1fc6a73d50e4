#!/usr/bin/env bash
# train_shardckpt.sh: sharded checkpoints (--ckpt-format sharded) on the CPU backend with tiny-cola.
# Saved at tp=2 (and dp=2 x tp=2 with zero=1), resumed at other tp/dp: the continued losses equal an
# uninterrupted run's; `boost ckpt merge` gives the full-format checkpoint's tensors bit for bit;
# a run killed (SIGKILL) while saving, at random points (BOOST_TEST_CKPT_SLEEP_MS makes each save
# sleep after every rank file, so most of the run's time is spent inside saves), leaves only step
# folders that verify and a newest one that resumes to the uninterrupted losses; a damaged index
# (a missing file, a slice that does not fit) exits 2 naming the file. Pipeline stages (tiny-cola-pp2,
# ranks as threads): pp=2 x tp=2, interleaved and dp=2 x pp=2 x tp=2 zero=1 rank files hold their
# stage's blocks only, merge equals the full checkpoint, resumes across pp/tp continue the losses, and
# kills during pipelined saves leave folders that verify and resume (tests/sh/mpi_pipeline.sh: the
# same under mpirun). Under mpirun (when installed) each process writes its own rank file and a
# resume at -np 4 reads only its rank's slices.
. tests/sh/lib.sh
common=(tiny-cola --backend cpu -D steps=20 -D eval_every=10 --quiet)

# field LOG STEP KEY: the value of KEY on the log line of STEP
field() { grep "^{\"step\":$2[,}]" "$1" | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2; }
same_losses() {
  for s in $(seq "$3" "$4"); do
    local a b; a=$(field "$1" "$s" loss); b=$(field "$2" "$s" loss)
    [ -n "$a" ] && [ "$a" = "$b" ] || { echo "# step $s: loss $a vs $b"; return 1; }
  done
}
close_losses() {   # LOG_A LOG_B FIRST LAST TOL: |a-b| <= TOL*|a| (NaN or a missing value fails)
  for s in $(seq "$3" "$4"); do
    local a b; a=$(field "$1" "$s" loss); b=$(field "$2" "$s" loss)
    awk -v a="$a" -v b="$b" -v t="$5" 'BEGIN { exit !(a != "" && b != "" && (a - b) ^ 2 <= (t * a) ^ 2) }' \
      || { echo "# step $s: loss $a vs $b"; return 1; }
  done
}
# same_tensors A B...: the tensors of safetensors file A equal those of the files B... together, byte for byte
same_tensors() {
  python3 - "$@" <<'EOF'
import json, struct, sys
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); d = b[8 + n:]
    return {k: (v['dtype'], v['shape'], d[v['data_offsets'][0]:v['data_offsets'][1]]) for k, v in h.items() if k != '__metadata__'}
a = load(sys.argv[1]); b = {}
for p in sys.argv[2:]: b.update(load(p))
bad = [k for k in b if k not in a or a[k] != b[k]] + [k for k in a if k not in b]
if bad or not a: print('# differ: %s' % bad[:5]); sys.exit(1)
EOF
}
# fix_crc DIR: record index.json's new size and CRC-32C in DIR/state.json (the test damages the index
# on purpose and wants the index check, not the checksum, to catch it)
fix_crc() {
  python3 - "$1" <<'EOF'
import json, re, sys
d = sys.argv[1]
t = []
for i in range(256):
    c = i
    for _ in range(8): c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    t.append(c)
b = open(d + '/index.json', 'rb').read()
c = 0xffffffff
for x in b: c = t[(c ^ x) & 0xff] ^ (c >> 8)
c ^= 0xffffffff
s = open(d + '/state.json').read()
s = re.sub(r'"index.json": \{[^}]*\}', '"index.json": {"bytes": %d, "crc32c": "0x%08x"}' % (len(b), c), s)
# state.json's own checksum: the CRC-32C of its text before the line holding it
k = s.rindex(',\n  "state_crc32c": "')
c = 0xffffffff
for x in s[:k].encode(): c = t[(c ^ x) & 0xff] ^ (c >> 8)
s = s[:k] + ',\n  "state_crc32c": "0x%08x"\n}\n' % (c ^ 0xffffffff)
open(d + '/state.json', 'w').write(s)
EOF
}

# 1. tp=2: sharded A and full F, the same run
$BOOST train "${common[@]}" -D tp=2 --ckpt-format sharded --save-every 10 -o "$TMP/a" --log "$TMP/a.jsonl" >"$TMP/a.out" 2>&1
rc=$?
d="$TMP/a/step-000010"
if [ $rc = 0 ] && [ -s "$d/rank-00000.safetensors" ] && [ -s "$d/rank-00001.safetensors" ] && [ -s "$d/index.json" ] \
   && [ ! -e "$d/model.safetensors" ] && grep -q '"storage": "sharded"' "$d/state.json" && grep -q '"index.json": {"bytes"' "$d/state.json"; then
  ok sharded_tp2_one_file_per_rank
else fail sharded_tp2_one_file_per_rank "exit $rc: $(ls "$d" 2>&1 | tr '\n' ' ') $(tail -2 "$TMP/a.out")"; exit 0; fi
# each rank file holds about half the tensors: none is the whole
s0=$(stat -c %s "$d/rank-00000.safetensors"); s1=$(stat -c %s "$d/rank-00001.safetensors")
$BOOST train "${common[@]}" -D tp=2 --save-every 10 -o "$TMP/f" --log "$TMP/f.jsonl" >"$TMP/f.out" 2>&1 \
  || { fail full_reference_run "$(tail -2 "$TMP/f.out")"; exit 0; }
full=$(( $(stat -c %s "$TMP/f/step-000010/model.safetensors") + $(stat -c %s "$TMP/f/step-000010/optimizer.safetensors") ))
[ $((s0 * 10)) -lt $((full * 6)) ] && [ $((s1 * 10)) -lt $((full * 6)) ] && [ $((s0 + s1)) -ge $((full * 9 / 10)) ] \
  && ok rank_files_hold_half_each || fail rank_files_hold_half_each "rank files $s0 + $s1 bytes, full checkpoint $full"
echo "# tp=2: rank-00000 $s0 bytes, rank-00001 $s1 bytes; full model+optimizer $full bytes"
same_losses "$TMP/f.jsonl" "$TMP/a.jsonl" 1 20 && ok sharded_run_same_losses_as_full || fail sharded_run_same_losses_as_full "see above"
$BOOST ckpt verify "$TMP/a" >"$TMP/v.out" 2>&1 && [ "$(grep -c verified "$TMP/v.out")" = 2 ] && ok verify_sharded_folders \
  || fail verify_sharded_folders "$(cat "$TMP/v.out")"

# 2. resume A's step 10 at tp=1, tp=2, tp=4: the continued losses equal F's
for tp in 1 2 4; do
  $BOOST train "${common[@]}" -D tp=$tp --resume "$d" --log "$TMP/r$tp.jsonl" >"$TMP/r$tp.out" 2>&1
  rc=$?
  [ $rc = 0 ] && close_losses "$TMP/f.jsonl" "$TMP/r$tp.jsonl" 11 20 1e-5 && ok "resume_sharded_tp2_at_tp$tp" \
    || fail "resume_sharded_tp2_at_tp$tp" "exit $rc: $(tail -2 "$TMP/r$tp.out")"
done
same_losses "$TMP/f.jsonl" "$TMP/r2.jsonl" 11 20 && ok resume_same_tp_bit_identical || fail resume_same_tp_bit_identical "see above"
# another layout: A resumed under naive; a naive run saved sharded (its replicated blocks written
# once, by tp rank 0) resumed under btp at tp=1
$BOOST train "${common[@]}" -D tp=2 -D layout=naive --resume "$d" --log "$TMP/rn.jsonl" >"$TMP/rn.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/f.jsonl" "$TMP/rn.jsonl" 11 20 1e-5 && ok resume_sharded_under_naive_layout \
  || fail resume_sharded_under_naive_layout "exit $rc: $(tail -2 "$TMP/rn.out")"
$BOOST train "${common[@]}" -D tp=2 -D layout=naive --save-every 10 --ckpt-format sharded -o "$TMP/n" >"$TMP/n.out" 2>&1 \
  && $BOOST train "${common[@]}" -D tp=1 --resume "$TMP/n/step-000010" --log "$TMP/rn1.jsonl" >"$TMP/rn1.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/f.jsonl" "$TMP/rn1.jsonl" 11 20 1e-5 && ok sharded_naive_resumes_at_btp_tp1 \
  || fail sharded_naive_resumes_at_btp_tp1 "exit $rc: $(tail -2 "$TMP/n.out") $(tail -2 "$TMP/rn1.out")"

# 3. merge: the full checkpoint's tensors, bit for bit (parameters; with --optimizer also m and v)
$BOOST ckpt merge "$TMP/a/step-000020" -o "$TMP/m.safetensors" >"$TMP/m.out" 2>&1 \
  && same_tensors "$TMP/m.safetensors" "$TMP/f/step-000020/model.safetensors" && ok merge_equals_full_model \
  || fail merge_equals_full_model "$(cat "$TMP/m.out")"
$BOOST ckpt merge "$TMP/a" --optimizer -o "$TMP/mo.safetensors" >"$TMP/mo.out" 2>&1 \
  && grep -q "step 20" "$TMP/mo.out" \
  && same_tensors "$TMP/mo.safetensors" "$TMP/f/step-000020/model.safetensors" "$TMP/f/step-000020/optimizer.safetensors" \
  && ok merge_optimizer_equals_full || fail merge_optimizer_equals_full "$(cat "$TMP/mo.out")"
if python3 -c 'import torch, safetensors' 2>/dev/null; then
  python3 -c "from safetensors.torch import load_file; t = load_file('$TMP/m.safetensors'); assert 'embed' in t and t['embed'].dtype.is_floating_point" \
    && ok merge_loads_in_torch || fail merge_loads_in_torch "safetensors.torch.load_file failed"
else ok "merge_loads_in_torch # SKIP torch or safetensors not installed (the format is checked above with json + struct)"; fi

# boost eval and export (sample shares eval's loader) read a sharded checkpoint like a full one
$BOOST eval "$TMP/a/step-000020" --backend cpu >"$TMP/ea.out" 2>&1; rca=$?
$BOOST eval "$TMP/f/step-000020" --backend cpu >"$TMP/ef.out" 2>&1; rcf=$?
[ $rca = 0 ] && [ $rcf = 0 ] && [ -n "$(grep ' loss ' "$TMP/ea.out")" ] && [ "$(grep ' loss ' "$TMP/ea.out")" = "$(grep ' loss ' "$TMP/ef.out")" ] \
  && ok eval_sharded_equals_full || fail eval_sharded_equals_full "exit $rca/$rcf: $(tail -1 "$TMP/ea.out") vs $(tail -1 "$TMP/ef.out")"

$BOOST export "$TMP/a/step-000020" --format hf -o "$TMP/xa" >"$TMP/xa.out" 2>&1 \
  && $BOOST export "$TMP/f/step-000020" --format hf -o "$TMP/xf" >"$TMP/xf.out" 2>&1 \
  && cmp -s "$TMP/xa/model.safetensors" "$TMP/xf/model.safetensors" && ok export_sharded_equals_full \
  || fail export_sharded_equals_full "$(tail -1 "$TMP/xa.out")"

# 4. dp=2 x tp=2, zero=1: every rank writes its moment shards; resumed at dp=1 x tp=4 (grad_accum=2)
# and at dp=4 x tp=1 (micro_batch 1): the same global batches, so the same losses
z=(tiny-cola --backend cpu -D steps=12 -D eval_every=6 --quiet -D micro_batch=2)
$BOOST train "${z[@]}" -D tp=2 -D dp=2 -D zero=1 --ckpt-format sharded --save-every 6 -o "$TMP/z" --log "$TMP/z.jsonl" >"$TMP/z.out" 2>&1
rc=$?
dz="$TMP/z/step-000006"
n=$(ls "$dz"/rank-*.safetensors 2>/dev/null | wc -l)
[ $rc = 0 ] && [ "$n" = 4 ] && grep -q '"zero": 1' "$dz/index.json" && ok zero1_four_rank_files \
  || fail zero1_four_rank_files "exit $rc, $n rank files: $(tail -2 "$TMP/z.out")"
echo "# dp=2 x tp=2 zero=1: bytes per rank file $(stat -c %s "$dz"/rank-*.safetensors | tr '\n' ' ')"
$BOOST train "${z[@]}" -D tp=2 -D dp=2 -D zero=1 --save-every 6 -o "$TMP/zf" --log "$TMP/zf.jsonl" >"$TMP/zf.out" 2>&1
$BOOST ckpt merge "$dz" --optimizer -o "$TMP/zm.safetensors" >"$TMP/zm.out" 2>&1 \
  && same_tensors "$TMP/zm.safetensors" "$TMP/zf/step-000006/model.safetensors" "$TMP/zf/step-000006/optimizer.safetensors" \
  && ok zero1_merge_equals_full || fail zero1_merge_equals_full "$(cat "$TMP/zm.out")"
$BOOST train "${z[@]}" -D tp=4 -D dp=1 -D grad_accum=2 --resume "$dz" --log "$TMP/z14.jsonl" >"$TMP/z14.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/z.jsonl" "$TMP/z14.jsonl" 7 12 1e-5 && ok resume_dp2tp2_zero1_at_dp1_tp4 \
  || fail resume_dp2tp2_zero1_at_dp1_tp4 "exit $rc: $(tail -2 "$TMP/z14.out")"
$BOOST train "${z[@]}" -D tp=1 -D dp=4 -D micro_batch=1 -D zero=1 --resume "$dz" --log "$TMP/z41.jsonl" >"$TMP/z41.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/z.jsonl" "$TMP/z41.jsonl" 7 12 1e-5 && ok resume_dp2tp2_zero1_at_dp4_tp1 \
  || fail resume_dp2tp2_zero1_at_dp4_tp1 "exit $rc: $(tail -2 "$TMP/z41.out")"

# 5. killed while saving, at random points: every step folder left verifies, no half folder has a
# step name, and resuming the run's folder ends with the uninterrupted run's losses
hit=0
for trial in 1 2 3; do
  k="$TMP/k$trial"
  kill_during_save "kill_during_save_$trial" "$k" 1 0 3 env BOOST_TEST_CKPT_SLEEP_MS=150 $BOOST train "${z[@]}" \
    -D tp=2 -D dp=2 -D zero=1 --ckpt-format sharded --save-every 1 -o "$k" --log "$k.jsonl"
  [ $killed = 0 ] && [ "$tmpleft" -gt 0 ] && hit=$((hit + 1))
  [ $verified = 1 ] || continue
  $BOOST train "${z[@]}" -D tp=2 -D dp=2 -D zero=1 --ckpt-format sharded --resume auto -o "$k" --log "$k.jsonl" >"$k.r" 2>&1
  rc=$?
  [ $rc = 0 ] && same_losses "$TMP/z.jsonl" "$k.jsonl" 1 12 && [ "$(ls -a "$k" | grep -c '^\.step-')" = 0 ] \
    && ok "kill_during_save_${trial}_resumes" || fail "kill_during_save_${trial}_resumes" "exit $rc: $(tail -2 "$k.r") $(ls -a "$k" | tr '\n' ' ')"
done
[ $hit -gt 0 ] && ok kill_landed_inside_a_save || fail kill_landed_inside_a_save "no trial left a temporary folder: no kill hit a save"

# 6. a damaged index: a file that is not there, a slice that does not fit, a rank file removed
cp -r "$d" "$TMP/bad1"
sed -i '0,/"file": "rank-00001.safetensors"/s//"file": "rank-00007.safetensors"/' "$TMP/bad1/index.json"
fix_crc "$TMP/bad1"
$BOOST train "${common[@]}" -D tp=2 --resume "$TMP/bad1" >"$TMP/b1.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "rank-00007.safetensors: missing" "$TMP/b1.out" && ok bad_index_missing_file_exit2 \
  || fail bad_index_missing_file_exit2 "exit $rc: $(tail -2 "$TMP/b1.out")"
$BOOST ckpt verify "$TMP/bad1" >"$TMP/b1v.out" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "DAMAGED.*rank-00007.safetensors" "$TMP/b1v.out" && ok verify_bad_index || fail verify_bad_index "exit $rc: $(cat "$TMP/b1v.out")"
$BOOST ckpt merge "$TMP/bad1" -o "$TMP/b1.safetensors" >"$TMP/b1m.out" 2>&1
rc=$?
[ $rc = 2 ] && [ ! -e "$TMP/b1.safetensors" ] && ok merge_bad_index_exit2 || fail merge_bad_index_exit2 "exit $rc: $(cat "$TMP/b1m.out")"
cp -r "$d" "$TMP/bad2"
sed -i '0,/"rows": \[0, 256\]/s//"rows": [0, 300]/' "$TMP/bad2/index.json"
fix_crc "$TMP/bad2"
$BOOST train "${common[@]}" -D tp=2 --resume "$TMP/bad2" >"$TMP/b2.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "rank-0000[01].safetensors does not fit" "$TMP/b2.out" && ok bad_index_slice_does_not_fit_exit2 \
  || fail bad_index_slice_does_not_fit_exit2 "exit $rc: $(tail -2 "$TMP/b2.out")"
cp -r "$d" "$TMP/bad3"
rm "$TMP/bad3/rank-00001.safetensors"
$BOOST train "${common[@]}" -D tp=2 --resume "$TMP/bad3" >"$TMP/b3.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "rank-00001.safetensors: missing" "$TMP/b3.out" && ok rank_file_removed_exit2 \
  || fail rank_file_removed_exit2 "exit $rc: $(tail -2 "$TMP/b3.out")"
$BOOST train "${common[@]}" --ckpt-format half >"$TMP/b4.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "expected full or sharded" "$TMP/b4.out" && ok bad_ckpt_format_flag_exit2 || fail bad_ckpt_format_flag_exit2 "exit $rc"

# 7. pipeline stages (pp > 1, ranks as threads): each (stage, dp, tp) rank writes its stage's blocks
# and the index names each tensor's stage; merge gives the full checkpoint of the same run; resumed at
# another pp/tp (pp2 -> pp1, pp2 x tp2 -> pp4 x tp1, pp1 -> pp2, dp2 x pp2 x tp2 zero=1 -> pp4) the
# losses continue as the uninterrupted run's; killed during saves, the newest folder resumes
pc=(tiny-cola-pp2 --backend cpu -D steps=8 -D eval_every=4 --quiet)
# stages_ok DIR: every slice of every tensor is in a rank file of its stage's pipeline rank
stages_ok() {
  python3 - "$1" <<'EOF2'
import json, sys
x = json.load(open(sys.argv[1] + '/index.json')); g = x['grid']; per = g['dp'] * g['tp']
bad = [n for n, t in x['tensors'].items() for s in t['slices'] if int(s['file'][5:10]) // per != t['stage'] % g['pp']]
stages = {t['stage'] for t in x['tensors'].values()}
if bad or len(stages) < 2: print('# %s: stages %s, misplaced %s' % (sys.argv[1], sorted(stages), bad[:3])); sys.exit(1)
EOF2
}
$BOOST train "${pc[@]}" -D pp=2 -D tp=2 --ckpt-format sharded --save-every 4 -o "$TMP/ps" --log "$TMP/ps.jsonl" >"$TMP/ps.out" 2>&1
rc=$?
$BOOST train "${pc[@]}" -D pp=2 -D tp=2 --save-every 4 -o "$TMP/pf" --log "$TMP/pf.jsonl" >"$TMP/pf.out" 2>&1
dp4="$TMP/ps/step-000004"
n=$(ls "$dp4"/rank-*.safetensors 2>/dev/null | wc -l)
[ $rc = 0 ] && [ "$n" = 4 ] && grep -q '"pp": 2' "$dp4/index.json" && stages_ok "$dp4" && ok pp2_tp2_sharded_rank_file_per_stage_rank \
  || fail pp2_tp2_sharded_rank_file_per_stage_rank "exit $rc, $n rank files: $(tail -2 "$TMP/ps.out")"
echo "# pp=2 x tp=2: bytes per rank file $(stat -c %s "$dp4"/rank-*.safetensors 2>/dev/null | tr '\n' ' ')"
same_losses "$TMP/pf.jsonl" "$TMP/ps.jsonl" 1 8 && ok pp2_sharded_run_same_losses_as_full || fail pp2_sharded_run_same_losses_as_full "see above"
$BOOST ckpt verify "$TMP/ps" >"$TMP/pv.out" 2>&1 && [ "$(grep -c verified "$TMP/pv.out")" = 2 ] && ok pp2_verify_sharded \
  || fail pp2_verify_sharded "$(cat "$TMP/pv.out")"
$BOOST ckpt merge "$TMP/ps" --optimizer -o "$TMP/pm.safetensors" >"$TMP/pm.out" 2>&1 \
  && same_tensors "$TMP/pm.safetensors" "$TMP/pf/step-000008/model.safetensors" "$TMP/pf/step-000008/optimizer.safetensors" \
  && $BOOST ckpt merge "$TMP/ps/step-000008" -o "$TMP/pm1.safetensors" >>"$TMP/pm.out" 2>&1 \
  && same_tensors "$TMP/pm1.safetensors" "$TMP/pf/step-000008/model.safetensors" \
  && ok pp2_merge_equals_full || fail pp2_merge_equals_full "$(cat "$TMP/pm.out")"
# eval and export regenerate a pp=1 plan for a pipelined run's checkpoint: sharded = full
$BOOST eval "$TMP/ps/step-000008" --backend cpu >"$TMP/pea.out" 2>&1; rca=$?
$BOOST eval "$TMP/pf/step-000008" --backend cpu >"$TMP/pef.out" 2>&1; rcf=$?
$BOOST export "$TMP/ps/step-000008" --format hf -o "$TMP/pxa" >"$TMP/pxa.out" 2>&1 \
  && $BOOST export "$TMP/pf/step-000008" --format hf -o "$TMP/pxf" >>"$TMP/pxa.out" 2>&1; rcx=$?
[ $rca = 0 ] && [ $rcf = 0 ] && [ $rcx = 0 ] && [ -n "$(grep ' loss ' "$TMP/pea.out")" ] \
  && [ "$(grep ' loss ' "$TMP/pea.out")" = "$(grep ' loss ' "$TMP/pef.out")" ] && cmp -s "$TMP/pxa/model.safetensors" "$TMP/pxf/model.safetensors" \
  && ok pp2_eval_export_sharded_equal_full || fail pp2_eval_export_sharded_equal_full "exit $rca/$rcf/$rcx: $(tail -1 "$TMP/pea.out") $(tail -1 "$TMP/pxa.out")"
for g in "1 1" "4 1" "2 2"; do
  read -r rpp rtp <<<"$g"
  $BOOST train "${pc[@]}" -D pp=$rpp -D tp=$rtp --resume "$dp4" --log "$TMP/pr$rpp$rtp.jsonl" >"$TMP/pr$rpp$rtp.out" 2>&1
  rc=$?
  [ $rc = 0 ] && close_losses "$TMP/pf.jsonl" "$TMP/pr$rpp$rtp.jsonl" 5 8 1e-5 && ok "resume_sharded_pp2_tp2_at_pp${rpp}_tp$rtp" \
    || fail "resume_sharded_pp2_tp2_at_pp${rpp}_tp$rtp" "exit $rc: $(tail -2 "$TMP/pr$rpp$rtp.out")"
done
# pp=1 x tp=2 saved sharded, resumed at pp=2 x tp=2 and at interleaved pp=2 (virtual_stages=2)
$BOOST train "${pc[@]}" -D pp=1 -D tp=2 --ckpt-format sharded --save-every 4 -o "$TMP/p1" --log "$TMP/p1.jsonl" >"$TMP/p1.out" 2>&1
for v in 1 2; do
  $BOOST train "${pc[@]}" -D pp=2 -D tp=2 -D virtual_stages=$v --resume "$TMP/p1/step-000004" --log "$TMP/p1r$v.jsonl" >"$TMP/p1r$v.out" 2>&1
  rc=$?
  [ $rc = 0 ] && close_losses "$TMP/p1.jsonl" "$TMP/p1r$v.jsonl" 5 8 1e-5 && ok "resume_sharded_pp1_at_pp2_v$v" \
    || fail "resume_sharded_pp1_at_pp2_v$v" "exit $rc: $(tail -2 "$TMP/p1.out") $(tail -2 "$TMP/p1r$v.out")"
done
# interleaved: a rank file holds two stages' blocks
$BOOST train "${pc[@]}" -D pp=2 -D tp=1 -D virtual_stages=2 --ckpt-format sharded --save-every 4 -o "$TMP/pvs" >"$TMP/pvs.out" 2>&1 \
  && $BOOST train "${pc[@]}" -D pp=2 -D tp=1 -D virtual_stages=2 --save-every 4 -o "$TMP/pvf" >>"$TMP/pvs.out" 2>&1 \
  && [ "$(ls "$TMP/pvs/step-000008"/rank-*.safetensors | wc -l)" = 2 ] && stages_ok "$TMP/pvs/step-000008" \
  && $BOOST ckpt merge "$TMP/pvs" --optimizer -o "$TMP/pvm.safetensors" >>"$TMP/pvs.out" 2>&1 \
  && same_tensors "$TMP/pvm.safetensors" "$TMP/pvf/step-000008/model.safetensors" "$TMP/pvf/step-000008/optimizer.safetensors" \
  && ok interleaved_v2_sharded_merge_equals_full || fail interleaved_v2_sharded_merge_equals_full "$(tail -3 "$TMP/pvs.out")"
# dp=2 x pp=2 x tp=2, zero=1: 8 rank files (moment shards on every dp rank); resumed at dp=1 x pp=4 x tp=1
pz=(tiny-cola-pp2 --backend cpu -D steps=6 -D eval_every=3 --quiet -D micro_batch=2 -D grad_accum=4)
$BOOST train "${pz[@]}" -D dp=2 -D pp=2 -D tp=2 -D zero=1 --ckpt-format sharded --save-every 3 -o "$TMP/pz" --log "$TMP/pz.jsonl" >"$TMP/pz.out" 2>&1
rc=$?
$BOOST train "${pz[@]}" -D dp=2 -D pp=2 -D tp=2 -D zero=1 --save-every 3 -o "$TMP/pzf" >"$TMP/pzf.out" 2>&1
n=$(ls "$TMP/pz/step-000003"/rank-*.safetensors 2>/dev/null | wc -l)
[ $rc = 0 ] && [ "$n" = 8 ] && stages_ok "$TMP/pz/step-000003" \
  && $BOOST ckpt merge "$TMP/pz/step-000003" --optimizer -o "$TMP/pzm.safetensors" >"$TMP/pzm.out" 2>&1 \
  && same_tensors "$TMP/pzm.safetensors" "$TMP/pzf/step-000003/model.safetensors" "$TMP/pzf/step-000003/optimizer.safetensors" \
  && ok dp2_pp2_tp2_zero1_sharded_merge_equals_full || fail dp2_pp2_tp2_zero1_sharded_merge_equals_full "exit $rc, $n rank files: $(tail -2 "$TMP/pz.out") $(cat "$TMP/pzm.out" 2>/dev/null)"
$BOOST train "${pz[@]}" -D dp=1 -D pp=4 -D tp=1 -D grad_accum=8 --resume "$TMP/pz/step-000003" --log "$TMP/pz4.jsonl" >"$TMP/pz4.out" 2>&1
rc=$?
[ $rc = 0 ] && close_losses "$TMP/pz.jsonl" "$TMP/pz4.jsonl" 4 6 1e-5 && ok resume_dp2_pp2_tp2_zero1_at_dp1_pp4 \
  || fail resume_dp2_pp2_tp2_zero1_at_dp1_pp4 "exit $rc: $(tail -2 "$TMP/pz4.out")"
# killed (SIGKILL) during pipelined saves: the step folders left verify, the run resumes to the same losses
hit=0
for trial in 1 2; do
  k="$TMP/pk$trial"
  # from the first folder on (a loaded machine may take seconds to reach it), at a random point
  kill_during_save "pp2_kill_during_save_$trial" "$k" 1 0 2 env BOOST_TEST_CKPT_SLEEP_MS=150 \
    $BOOST train "${pc[@]}" -D pp=2 -D tp=2 --ckpt-format sharded --save-every 1 -o "$k" --log "$k.jsonl"
  [ $killed = 0 ] && [ "$tmpleft" -gt 0 ] && hit=$((hit + 1))
  [ $verified = 1 ] || continue
  $BOOST train "${pc[@]}" -D pp=2 -D tp=2 --ckpt-format sharded --resume auto -o "$k" --log "$k.jsonl" >"$k.r" 2>&1
  rc=$?
  [ $rc = 0 ] && same_losses "$TMP/ps.jsonl" "$k.jsonl" 1 8 && ok "pp2_kill_during_save_${trial}_verifies_and_resumes" \
    || fail "pp2_kill_during_save_${trial}_verifies_and_resumes" "exit $rc: $(tail -2 "$k.r")"
done
[ $hit -gt 0 ] && ok pp2_kill_landed_inside_a_save || fail pp2_kill_landed_inside_a_save "no trial left a temporary folder"

# 8. under mpirun: sharded by default, each process writes its own file (the same bytes as the
# threads' files); -np 4 resumes the tp=2 checkpoint reading a quarter of it per process
if ! command -v mpirun >/dev/null; then ok "mpi_sharded # SKIP mpirun is not installed"; exit 0; fi
mpi=(timeout 300 mpirun --oversubscribe --allow-run-as-root)
"${mpi[@]}" -np 2 "$BOOST" train "${common[@]}" -D tp=2 --save-every 10 -o "$TMP/mp" --log "$TMP/mp.jsonl" >"$TMP/mp.out" 2>&1
rc=$?
[ $rc = 0 ] && grep -q '"storage": "sharded"' "$TMP/mp/step-000010/state.json" \
  && cmp -s "$d/rank-00000.safetensors" "$TMP/mp/step-000010/rank-00000.safetensors" \
  && cmp -s "$d/rank-00001.safetensors" "$TMP/mp/step-000010/rank-00001.safetensors" \
  && ok mpi_np2_sharded_same_rank_files || fail mpi_np2_sharded_same_rank_files "exit $rc: $(grep -i error "$TMP/mp.out" | head -2)"
"${mpi[@]}" -np 4 env BOOST_VERBOSE=1 "$BOOST" train "${common[@]}" -D tp=4 --resume "$d" --log "$TMP/mp4.jsonl" >"$TMP/mp4.out" 2>&1
rc=$?
read -r got total < <(sed -n 's/.*sharded checkpoint: read \([0-9]*\) of its \([0-9]*\) tensor bytes.*/\1 \2/p' "$TMP/mp4.out" | head -1)
echo "# mpirun -np 4 resume of the tp=2 checkpoint: rank 0 read ${got:-?} of ${total:-?} tensor bytes"
[ $rc = 0 ] && close_losses "$TMP/f.jsonl" "$TMP/mp4.jsonl" 11 20 1e-5 && [ -n "$got" ] && [ $((got * 3)) -lt "$total" ] \
  && ok mpi_np4_resume_reads_its_slices_only || fail mpi_np4_resume_reads_its_slices_only "exit $rc, read $got of $total: $(tail -2 "$TMP/mp4.out")"
