#!/usr/bin/env bash
# gen_layers.sh: the generator's house rules, checked on the source. gen/ir.c is the IR's base and
# includes nothing of gen/ but gen/ir.h; gen/ includes nothing of runtime/; gen/ is a library (no exit(), no subcommands, no
# static mutable state); every file cli/commands.h names exists and defines its command.
cd "$(dirname "$0")/../.." || exit 2
. tests/sh/lib.sh

inc=$(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' gen/ir.c | grep -v '"gen/ir.h"')
[ -z "$inc" ] && ok "gen/ir.c includes no project header but gen/ir.h" \
  || fail "gen/ir.c includes no project header but gen/ir.h" "found: $inc (the pipeline belongs in gen/pipeline.c)"

rt=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"runtime/' gen/*.c gen/*.h)
[ -z "$rt" ] && ok "gen/ includes nothing of runtime/" \
  || fail "gen/ includes nothing of runtime/" "the plan is the contract (docs/plan-format.md): $(echo "$rt" | head -3)"

calls=$(grep -nE '(^|[^_[:alnum:]])(exit|_Exit|quick_exit)[[:space:]]*\(' gen/*.c)
[ -z "$calls" ] && ok "no gen/*.c calls exit()" \
  || fail "no gen/*.c calls exit()" "return an error instead: $(echo "$calls" | head -3)"

cmds=$(grep -nE '^int cmd_|#include "cli/' gen/*.c gen/*.h)
[ -z "$cmds" ] && ok "gen/ holds no subcommands" || fail "gen/ holds no subcommands" "move to cli/: $(echo "$cmds" | head -3)"

# a static variable that is not const, at file or function scope (functions have '(' before ';', '=' or '[')
statics=$(grep -nP '^\s*static\s+(?!const\b|inline\b)[^(;=]*[;=\[]' gen/*.c | grep -vP '^\S+:\d+:\s*static\s[^;=\[]*\(')
[ -z "$statics" ] && ok "gen/*.c has no static mutable state" \
  || fail "gen/*.c has no static mutable state" "keep it in the caller's structs: $(echo "$statics" | head -3)"

missing="" parsed=0
while read -r cmd file; do
  parsed=$((parsed + 1))
  [ -f "$file" ] && grep -qE "^int $cmd\(" "$file" || missing="$missing $cmd@$file"
done < <(sed -nE 's|^int (cmd_[a-z]+)\(.*/\* ([a-z]+/[a-z_]+\.c):.*|\1 \2|p' cli/commands.h)
n=$(grep -c '^int cmd_' cli/commands.h)
[ -z "$missing" ] && [ "$n" -gt 0 ] && [ "$parsed" = "$n" ] && ok "cli/commands.h names the file of each of its $n commands" \
  || fail "cli/commands.h names the file of each of its commands" "$parsed of $n lines name a file; wrong:$missing"
