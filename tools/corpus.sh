#!/usr/bin/env bash
# corpus.sh: builds build/corpus.txt, the English text corpus of the demo and the tests, from
# Debian's fortunes (the plain-text files in /usr/share/games/fortunes; not .dat indexes, not the
# .u8 links, not ascii-art). Fortunes are separated by a blank line; overstrike sequences
# (char BACKSPACE char) and other control characters are removed. Written atomically.
# Usage: bash tools/corpus.sh [OUT]   (default build/corpus.txt, relative to the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/corpus.txt}
src=${FORTUNES_DIR:-/usr/share/games/fortunes}
if [ ! -d "$src" ]; then
  echo "tools/corpus.sh: $src not found: install Debian's 'fortunes' package (make deps, or apt-get install fortunes)" >&2
  exit 1
fi
files=()
for f in "$src"/*; do
  name=$(basename "$f")
  [[ "$name" == *.* ]] && continue          # .dat indexes and .u8 links
  [ -f "$f" ] && [ ! -L "$f" ] || continue
  [ "$name" = ascii-art ] && continue       # pictures, not English
  files+=("$f")
done
if [ ${#files[@]} -eq 0 ]; then
  echo "tools/corpus.sh: no plain-text fortune files in $src: install Debian's 'fortunes' package" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
tmp=$(mktemp "$out.tmp.XXXXXX")
trap 'rm -f "$tmp"' EXIT
# sorted file order keeps the corpus identical on every machine
printf '%s\n' "${files[@]}" | LC_ALL=C sort | while IFS= read -r f; do
  LC_ALL=C sed -e 's/.\x08//g' -e 's/^%$//' "$f"
done | LC_ALL=C tr -d '\000-\010\013-\037\177' | LC_ALL=C cat -s >"$tmp"
bytes=$(wc -c <"$tmp")
if [ "$bytes" -lt 100000 ]; then
  echo "tools/corpus.sh: only $bytes bytes of text from $src: is the 'fortunes' package complete?" >&2
  exit 1
fi
mv "$tmp" "$out"
trap - EXIT
echo "tools/corpus.sh: wrote $out ($bytes bytes from ${#files[@]} files)"
