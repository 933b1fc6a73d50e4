# lib.sh: helpers for shell tests (sourced, not run): ok/fail verdict lines and a scratch folder.
BOOST=${BOOST:-./bin/boost}
TMP=$(mktemp -d /tmp/boost-test.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
ok()   { echo "ok - $1"; }
fail() { echo "FAIL - $1: $2"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name" "command failed: $*"; fi; }
