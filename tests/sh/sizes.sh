#!/usr/bin/env bash
# sizes.sh: sizes a reader can hold, checked on the C sources (every tracked .c and .h but the
# generator's output in generated/): no function over 120 lines and no line over 100 columns,
# except in the functions and files listed at the end (today's; remove an entry once it complies).
# Prints the functions over the limit and each file's share of long lines.
cd "$(dirname "$0")/../.." || exit 2
. tests/sh/lib.sh
MAX_LINES=120 MAX_COLS=100
export LC_ALL=C

# function_sizes FILE...: "FILE NAME LINES FIRST_LINE" for every function definition: from the
# line its signature starts on to its closing brace (comments, strings and characters stripped
# first, so their braces do not count; a brace block after '=' is an initialiser, not a function)
function_sizes() {
  awk '
  FNR == 1 { depth = 0; incomment = 0; head = ""; fnstart = 0 }
  {
    s = $0; out = ""
    while (length(s) > 0) {
      if (incomment) {
        i = index(s, "*/"); if (i == 0) { s = ""; break }
        s = substr(s, i + 2); incomment = 0; continue
      }
      c = substr(s, 1, 1); c2 = substr(s, 1, 2)
      if (c2 == "//") break
      if (c2 == "/*") { incomment = 1; s = substr(s, 3); continue }
      if (c == "\"" || c == "\047") {
        j = 2
        while (j <= length(s)) {
          d = substr(s, j, 1)
          if (d == "\\") { j += 2; continue }
          if (d == c) break
          j++
        }
        s = substr(s, j + 1); out = out c c; continue
      }
      out = out c; s = substr(s, 2)
    }
    if (out ~ /^[ \t]*#/) next
    if (depth == 0) {
      if (head == "" && out ~ /^[A-Za-z_]/) { start = FNR; head = out }
      else if (head != "") head = head " " out
    }
    n = length(out)
    for (k = 1; k <= n; k++) {
      ch = substr(out, k, 1)
      if (ch == "{") {
        if (depth == 0) {
          before = substr(head, 1, index(head, "{") - 1)
          fnstart = 0
          if ((before ~ /\)[ \t]*$/ || (index(head, "{") == 0 && head ~ /\)[ \t]*$/)) && head !~ /=/) {
            fnstart = start; name = head
            sub(/\(.*/, "", name); sub(/.*[ \t*]/, "", name)
          }
        }
        depth++
      } else if (ch == "}") {
        depth--
        if (depth == 0) {
          if (fnstart) printf "%s %s %d %d\n", FILENAME, name, FNR - fnstart + 1, fnstart
          fnstart = 0; head = ""
        }
      } else if (ch == ";" && depth == 0) head = ""
    }
  }' "$@"
}

# long_lines FILE...: "FILE LONG TOTAL" per file (columns: characters, UTF-8 counted once)
long_lines() {
  awk -v max=$MAX_COLS '
  FNR == 1 && NR > 1 { print f, long, FNR_prev }
  { f = FILENAME; FNR_prev = FNR; if (FNR == 1) long = 0
    line = $0; gsub(/[\200-\277]/, "", line); if (length(line) > max) long++ }
  END { if (NR) print f, long, FNR_prev }' "$@"
}

files=$(git ls-files --cached --others --exclude-standard '*.c' '*.h' | grep -v '^generated/')
allowed_functions=$(sed -n '/^# allowed functions/,/^# end/p' "$0" | grep -v '^#')
allowed_files=$(sed -n '/^# allowed long lines/,/^# end/p' "$0" | grep -v '^#')

# functions over MAX_LINES: listed ones are reported; a new one fails
sizes=$(function_sizes $files)
new="" grown="" listed_ok=""
while read -r f name n first; do
  [ "$n" -gt $MAX_LINES ] || continue
  allow=$(echo "$allowed_functions" | awk -v k="$f:$name" '$1 == k { print $2 }')
  if [ -z "$allow" ]; then new="$new $f:$first $name ($n lines);"
  else
    echo "# over $MAX_LINES lines (listed, $allow then): $f:$first $name $n"
    [ "$n" -gt "$allow" ] && grown="$grown $f:$name $allow -> $n;"
  fi
done <<<"$sizes"
listed_ok=$(echo "$allowed_functions" | awk -v max=$MAX_LINES '
  NR == FNR { if ($3 > max) over[$1 ":" $2] = 1; next }
  !($1 in over) { printf " %s", $1 }' <(echo "$sizes") -)
[ -n "$grown" ] && echo "# listed functions that grew (split them):$grown"
[ -n "$listed_ok" ] && echo "# listed but now within $MAX_LINES lines (drop from the list):$listed_ok"
[ -z "$new" ] && ok "no function over $MAX_LINES lines outside the list" \
  || fail "no function over $MAX_LINES lines outside the list" "split:$new"

# lines over MAX_COLS: the share per file; a file not listed must have none
bad="" all_long=0 all_lines=0
while read -r f long total; do
  all_long=$((all_long + long)) all_lines=$((all_lines + total))
  [ "$long" -gt 0 ] || continue
  echo "# $f: $long of $total lines over $MAX_COLS columns ($((100 * long / total))%)"
  case $'\n'"$allowed_files"$'\n' in *$'\n'"$f"$'\n'*) ;; *) bad="$bad $f ($long lines);" ;; esac
done < <(long_lines $files)
echo "# in all: $all_long of $all_lines lines over $MAX_COLS columns" \
     "($(awk -v a=$all_long -v b=$all_lines 'BEGIN { printf "%.1f", b ? 100 * a / b : 0 }')%)"
[ -z "$bad" ] && ok "no line over $MAX_COLS columns outside the listed files" \
  || fail "no line over $MAX_COLS columns outside the listed files" "wrap them:$bad"

# the checker itself: a function of 121 lines and a line of 101 columns are seen
printf 'static int f(void) {\n%s\n}\n' "$(printf '    x++;\n%.0s' $(seq 119))" >"$TMP/big.c"
printf '%101s\n' x >"$TMP/wide.c"
n=$(function_sizes "$TMP/big.c" | awk '{ print $3 }')
w=$(long_lines "$TMP/wide.c" | awk '{ print $2 }')
[ "$n" = 121 ] && [ "$w" = 1 ] && ok "the counters see a 121-line function and a 101-column line" \
  || fail "the counters see a 121-line function and a 101-column line" "counted $n lines, $w long lines"
exit 0

# allowed functions (FILE:NAME LINES, today's sizes; remove an entry once it is split)
tests/unit/test_data.c:test_shard_sets 170
tests/unit/test_kernels_emu.c:main 218
tests/unit/test_numerics_engine.c:main 214
tests/unit/test_plan_load.c:main 140
tests/unit/test_project_pp.c:main 145
tests/unit/test_torch_ref.c:run_config 156
# end
# allowed long lines (files that had lines over 100 columns when the rule came)
cli/commands.h
cli/eval.c
cli/infer.h
common/nvrtc.h
common/train_settings.h
gen/backward.c
gen/build.c
gen/build_fixture.c
gen/checkpoint.c
gen/dp.c
gen/gen.h
gen/infer_plan.c
gen/ir.c
gen/ir.h
gen/kernels.c
gen/kernels.h
gen/memplan.c
gen/model.h
gen/moe.c
gen/pipeline.c
gen/plan_write.c
gen/pp.c
gen/pp.h
gen/project.h
gen/project_model.c
gen/project_pp.c
gen/project_pp.h
gen/project_sched.c
gen/report.c
gen/sandbox.c
gen/sandbox.h
gen/spec.c
runtime/backend.h
runtime/checkpoint.h
runtime/comm_mpi.c
runtime/comm_mpi.h
runtime/cpu.c
runtime/cpu_infer.c
runtime/cpu_kernels.c
runtime/cuda.c
runtime/cuda.h
runtime/cuda_adamw.c
runtime/cuda_coll.c
runtime/cuda_gemm.c
runtime/cuda_graph.c
runtime/cuda_internal.h
runtime/cuda_jit.c
runtime/cuda_libs.c
runtime/cuda_mem.c
runtime/cuda_pipe.c
runtime/cuda_world.c
runtime/overlap.c
runtime/cuda_api.c
runtime/cuda_api.h
runtime/cuda_pipe.h
runtime/data.h
runtime/decode.h
runtime/exec.c
runtime/grid.c
runtime/grid.h
runtime/log.c
runtime/moe_stats.c
runtime/moe_stats.h
runtime/pipeline.c
runtime/pipeline.h
runtime/plan.c
runtime/plan.h
runtime/profile.c
runtime/profile.h
runtime/run_tokenizer.c
runtime/run_tokenizer.h
runtime/runtime.h
runtime/safetensors.h
runtime/tokenize_files.c
runtime/tokenize_files.h
runtime/train.h
runtime/world.c
runtime/world.h
tests/gpu/check.c
tests/gpu/check_model.c
tests/gpu/check_nccl_api.c
tests/gpu/check_nccl_p2p.c
tests/gpu/check_steps.c
tests/gpu/check_syncs.c
tests/gpu/mock_cuda.c
tests/gpu/mock_nccl.c
tests/unit/engine_cases.h
tests/unit/moe_cases.h
tests/unit/test_attn_tiles.c
tests/unit/test_catalog.c
tests/unit/test_ckpt.c
tests/unit/test_cpu_fexp.c
tests/unit/test_cpu_kernels.c
tests/unit/test_cuda_backend.c
tests/unit/test_cudalibs.c
tests/unit/test_data.c
tests/unit/test_docs.c
tests/unit/test_dp.c
tests/unit/test_gemm_align.c
tests/unit/test_gen_closed.c
tests/unit/test_gen_load.c
tests/unit/test_gen_numerics.c
tests/unit/test_gen_twice.c
tests/unit/test_kernels.c
tests/unit/test_kernels_emu.c
tests/unit/test_kv_decode.c
tests/unit/test_mock_nccl_refusals.c
tests/unit/test_mock_nccl_split.c
tests/unit/test_mock_refusals.c
tests/unit/test_moe.c
tests/unit/test_moe_ep.c
tests/unit/test_moe_layouts.c
tests/unit/test_moe_log.c
tests/unit/test_moe_shared.c
tests/unit/test_numerics_engine.c
tests/unit/test_pipeline.c
tests/unit/test_plan_bad_files.c
tests/unit/test_plan_load.c
tests/unit/test_plan_tiny.h
tests/unit/test_planner.c
tests/unit/test_pp_schedule.c
tests/unit/test_project_model.c
tests/unit/test_project_pp.c
tests/unit/test_project_sched.c
tests/unit/test_shipped_launches.c
tests/unit/test_spec.c
tests/unit/test_torch_ref.c
tests/unit/test_tp_equivalence.c
tests/unit/test_train_log.c
tests/unit/test_train_settings.c
tests/unit/testlib.h
# end
