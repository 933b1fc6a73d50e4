#!/usr/bin/env bash
# generate.sh: writes generated/ from specs/generate.txt (one output a line: `DIR RUN [-D name=value ...]`,
# '#' comments). Each DIR is written all or nothing by `boost gen`, its kernels compiled with NVRTC
# for the report's register/spill table. Byte-for-byte deterministic.
# Usage: bash tools/generate.sh [OUTROOT]   (default: generated; tests pass a temporary folder)
cd "$(dirname "$0")/.." || exit 2
out=${1:-generated}
BOOST=${BOOST:-./bin/boost}
status=0
while read -r dir run rest; do
  [ -z "$dir" ] && continue
  case "$dir" in \#*) continue ;; esac
  # shellcheck disable=SC2086
  if ! "$BOOST" gen "$run" $rest --compile -o "$out/$dir" >/dev/null; then
    echo "generate.sh: $dir ($run $rest) failed" >&2
    status=1
  fi
done < specs/generate.txt
[ "$status" = 0 ] && echo "generated $(grep -cv '^\s*\(#\|$\)' specs/generate.txt) outputs under $out/"
exit $status
