#!/usr/bin/env bash
# sanitize.sh: the sanitizer lane (`make test-sanitize`, after building build/san/): runs the file
# readers' unit tests and their seeded fuzzers (tests/unit/test_fuzz_files.c, scaled up here) built
# with AddressSanitizer + UndefinedBehaviorSanitizer, then a few shell tests with
# BOOST=build/san/boost and a seeded fuzz of tokenizer files through `boost sample`. Any sanitizer
# report fails its program.
# Prints one "ok - sanitize NAME" or "FAIL - sanitize NAME: why" per program, then the closing line
# "sanitize: N passed, N failed, N skipped (T s)" (N: the checks inside the programs). Budget: under
# 200 s on 2 cores; the programs are chosen by cost (each one's seconds are printed).
# Usage: SAN_TESTS="test_a test_b" bash tests/sanitize.sh   (the Makefile passes its list)
cd "$(dirname "$0")/.." || exit 2
SAN=build/san
SAN_TESTS=${SAN_TESTS:-test_crafted_files test_fuzz_files test_plan_bad_files test_ckpt test_data}
SAN_SHELL=${SAN_SHELL:-infer_errors train_data train_errors}
# leaks are not faults here (the CLI exits without freeing); everything else is, at once
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:abort_on_error=0:allow_user_segv_handler=1
ASAN_OPTIONS+=:handle_sigbus=0   # the shard reader's own SIGBUS message is under test
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export BOOST_FUZZ_ITERS=${BOOST_FUZZ_ITERS:-3}
mkdir -p build/test-logs/san
pass=0; fail=0; skip=0
t_all=$(date +%s)

# verdict NAME LOG RC SECONDS: count the program's checks, print the lane's line for it
verdict() {
  local name=$1 log=$2 rc=$3 secs=$4 p f k why
  k=$(grep -E '^ok - ' "$log" | grep -ciE '# *skip|\(skipped\)')
  p=$(( $(grep -c '^ok - ' "$log") - k )); f=$(grep -c '^FAIL - ' "$log")
  why=$(grep -m1 -E '^FAIL - |ERROR: AddressSanitizer|runtime error:' "$log")
  if grep -qE 'ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer' "$log" && [ "$f" = 0 ]
  then f=1; fi
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    f=1; why=${why:-"exited $rc without a verdict: $(tail -1 "$log")"}
  fi
  pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + k))
  if [ "$f" = 0 ]; then echo "ok - sanitize $name ($p checks, ${secs}s)"
  else
    echo "FAIL - sanitize $name: $why (log: $log)"
    grep -E '^FAIL - ' "$log" | head -5 | sed 's/^/    /'
  fi
}

run_one() {   # NAME TIMEOUT COMMAND...
  local name=$1 limit=$2; shift 2
  local log=build/test-logs/san/$name.log t0 rc
  t0=$(date +%s)
  timeout "$limit" "$@" >"$log" 2>&1; rc=$?
  verdict "$name" "$log" "$rc" $(( $(date +%s) - t0 ))
}

for t in $SAN_TESTS; do
  if [ ! -x "$SAN/tests/$t" ]; then
    echo "FAIL - sanitize $t: $SAN/tests/$t is not built (make test-sanitize)"; fail=$((fail + 1)); continue
  fi
  run_one "$t" 120 "$SAN/tests/$t"
done
for s in $SAN_SHELL; do
  run_one "$s" 120 env BOOST="$SAN/boost" bash "tests/sh/$s.sh"
done
run_one fuzz_tokenizer 120 env BOOST="$SAN/boost" bash tests/sh/fuzz_tokenizer.sh
echo "sanitize: $pass passed, $fail failed, $skip skipped ($(( $(date +%s) - t_all )) s)"
[ "$fail" = 0 ]
