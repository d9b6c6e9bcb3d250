#!/usr/bin/env bash
# rpc_bench's own options: --help lists them and succeeds; a bad one is named, the list is
# printed, the exit status is 2, and no node is started.
#   options_test.sh RPC_BENCH
set -uo pipefail
bench=$1
fail=0
check() {  # check WHAT CONDITION...
  local what=$1; shift
  if ! "$@"; then echo "FAIL: $what"; fail=1; fi
}
run() {  # run ARGS...: sets out, err, code
  local o e
  o=$(mktemp) e=$(mktemp)
  "$bench" "$@" >"$o" 2>"$e"
  code=$?
  out=$(<"$o") err=$(<"$e")
  rm -f "$o" "$e"
}

run --launch=local_mp -- --help
check "--help exits 0 (got $code)" test "$code" -eq 0
check "--help prints the options on stdout" grep -q -- "--inflight=K" <<<"$out"
check "--help starts no node" test -z "$(grep -F '[driver/0]' <<<"$out$err")"

run --launch=local_mp -- --count=200 --bogus
check "an unknown option exits 2 (got $code)" test "$code" -eq 2
check "an unknown option is named" grep -q -- "unknown option '--bogus'" <<<"$err"
check "an unknown option prints the options" grep -q -- "--inflight=K" <<<"$err"
check "an unknown option starts no node" test -z "$(grep -F '[driver/0]' <<<"$out$err")"

run --launch=local_mp -- --count=many
check "a bad number exits 2 (got $code)" test "$code" -eq 2
check "a bad number is named" grep -q -- "--count wants a whole number, not 'many'" <<<"$err"

run --launch=local_mp -- --count=0
check "--count=0 exits 2 (got $code)" test "$code" -eq 2
check "--count=0 is refused" grep -q -- "--count must be at least 1" <<<"$err"

if ((fail)); then echo "--- last stdout:"; echo "$out"; echo "--- last stderr:"; echo "$err"; exit 1; fi
echo "rpc_bench options: all checks passed"
