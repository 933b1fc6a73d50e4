# bench_cpu_vs_torch.sh: bench/cpu_vs_torch.sh (BOOST's CPU backend against PyTorch) parses its
# arguments and lists the same model and batch for both sides (--dry: nothing is timed here; the
# timed run is `bash bench/cpu_vs_torch.sh`, minutes long).
source "$(dirname "$0")/lib.sh"
if ! bash bench/cpu_vs_torch.sh --dry >"$TMP/dry" 2>&1; then fail cpu_vs_torch_dry "$(tail -3 "$TMP/dry")"; exit 1; fi
ok cpu_vs_torch_dry
n=$(grep -c '^\./bin/boost train \|^python3 tests/gpu/torch_model.py --bench ' "$TMP/dry")
[ "$n" = 12 ] && ok cpu_vs_torch_pairs || fail cpu_vs_torch_pairs "$n commands for 3 shapes x 2 tp x 2 sides (want 12)"
# each BOOST command and the PyTorch command after it share the run and every -D
paired=$(awk '/boost train/ {sub(/.*train /, ""); sub(/ -D eval_every.*/, ""); b=$0}
              /torch_model.py/ {sub(/.*--bench /, ""); sub(/ --device.*/, ""); if ($0 == b) n++} END {print n+0}' "$TMP/dry")
[ "$paired" = 6 ] && ok cpu_vs_torch_same_model || fail cpu_vs_torch_same_model "$paired of 6 pairs share run and settings"
bash bench/cpu_vs_torch.sh --bogus >"$TMP/bad" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "unknown argument" "$TMP/bad" && ok cpu_vs_torch_bad_arg || fail cpu_vs_torch_bad_arg "exit $rc: $(cat "$TMP/bad")"
