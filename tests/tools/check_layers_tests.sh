#!/usr/bin/env bash
# tools/check_layers.sh: the tree itself passes; fake trees with an include that goes up a
# layer, or a folder without a layer, fail with the file and the include named.
#   check_layers_tests.sh CHECK_LAYERS_SH INCLUDE_DIR
set -uo pipefail
check_layers=$1
include_dir=$2
fail=0
check() {  # check WHAT CONDITION...
  local what=$1; shift
  if ! "$@"; then echo "FAIL: $what"; fail=1; fi
}
run() {  # run ARGS...: sets out, code
  out=$(bash "$check_layers" "$@" 2>&1)
  code=$?
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# fake NAME FILE=CONTENT...: a tree under $tmp/NAME/tlaunch
fake() {
  local name=$1; shift
  local entry
  for entry in "$@"; do
    mkdir -p "$(dirname "$tmp/$name/tlaunch/${entry%%=*}")"
    printf '%b\n' "${entry#*=}" >"$tmp/$name/tlaunch/${entry%%=*}"
  done
}

run --graph "$include_dir"
check "the tree passes (got $code): $out" test "$code" -eq 0
check "--graph prints the edges" grep -q -- "public -> rpc" <<<"$out"
check "the tree has no upward edge" test -z "$(grep -E ' \^$' <<<"$out")"

fake good \
  'detail/leaf.hpp=#pragma once\n#include <vector>' \
  'wire/frame.hpp=#include "../detail/leaf.hpp"' \
  'rpc/call.hpp=#include "../wire/frame.hpp"\n#include "call_table.hpp"' \
  'rpc/call_table.hpp=#pragma once' \
  'handle.hpp=#include "rpc/call.hpp"\n#include <tlaunch/detail/leaf.hpp>' \
  'launch/local.hpp=#include "../handle.hpp"' \
  'main.hpp=#include "launch/local.hpp"'
run --graph "$tmp/good"
check "a downward tree passes (got $code): $out" test "$code" -eq 0
check "edges are counted" grep -Eq -- "rpc -> rpc +1$" <<<"$out"
check "angle-bracket includes are edges" grep -Eq -- "public -> detail +1$" <<<"$out"

cp -r "$tmp/good" "$tmp/up"
printf '#include "../rpc/call.hpp"\n' >>"$tmp/up/tlaunch/detail/leaf.hpp"
run "$tmp/up"
check "a detail header including rpc fails (got $code)" test "$code" -eq 1
check "the file and include are named: $out" \
  grep -qF "tlaunch/detail/leaf.hpp:3 includes ../rpc/call.hpp: detail may not include rpc" <<<"$out"

cp -r "$tmp/good" "$tmp/up2"
printf '#include <tlaunch/launch/local.hpp>\n' >>"$tmp/up2/tlaunch/rpc/call_table.hpp"
run --graph "$tmp/up2"
check "rpc including <tlaunch/launch/...> fails (got $code)" test "$code" -eq 1
check "it is named: $out" grep -qF "tlaunch/rpc/call_table.hpp:2 includes tlaunch/launch/local.hpp" <<<"$out"
check "the graph marks the upward edge" grep -Eq -- "rpc -> launch +1 \^" <<<"$out"

cp -r "$tmp/good" "$tmp/public_up"
printf '#include "main.hpp"\n' >>"$tmp/public_up/tlaunch/handle.hpp"
run "$tmp/public_up"
check "a public header including main.hpp fails (got $code)" test "$code" -eq 1

# The vocabulary (error.hpp, service.hpp, ...) sits below rpc: rpc includes it, never the
# other way round.
cp -r "$tmp/good" "$tmp/vocabulary"
printf '#include "../error.hpp"\n' >>"$tmp/vocabulary/tlaunch/rpc/call_table.hpp"
printf '#pragma once\n' >"$tmp/vocabulary/tlaunch/error.hpp"
run "$tmp/vocabulary"
check "rpc including error.hpp passes (got $code: $out)" test "$code" -eq 0
printf '#include "rpc/call_table.hpp"\n' >>"$tmp/vocabulary/tlaunch/error.hpp"
run "$tmp/vocabulary"
check "error.hpp including rpc fails (got $code)" test "$code" -eq 1
check "it is named: $out" grep -qF "vocabulary may not include rpc" <<<"$out"

cp -r "$tmp/good" "$tmp/folder"
fake folder 'cluster/slurm.hpp=#pragma once'
run "$tmp/folder"
check "a folder without a layer fails (got $code)" test "$code" -eq 1
check "the folder is named: $out" grep -qF "folder tlaunch/cluster has no layer" <<<"$out"

run --bogus
check "an unknown option exits 2 (got $code)" test "$code" -eq 2

exit $fail
