#!/usr/bin/env bash
# compile_time.sh's own options, without compiling anything: --help succeeds; a bad
# --methods value or an unknown option is named, the usage is printed and the exit status is
# 2; --dry-run writes the generated programs and prints their commands, with the flags of a
# compile command that has TLAUNCH_SEPARATE_COMPILATION, or flags of its own without one.
#   compile_time_options_test.sh [COMPILE_TIME_SH]
set -uo pipefail
script=${1:-$(dirname "$0")/compile_time.sh}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
check() {  # check WHAT CONDITION...
  local what=$1; shift
  if ! "$@"; then echo "FAIL: $what"; fail=1; fi
}
run() {  # run ARGS...: sets out, err, code
  bash "$script" --build-dir="$dir" "$@" >"$dir/out" 2>"$dir/err"
  code=$?
  out=$(<"$dir/out") err=$(<"$dir/err")
}

run --help
check "--help exits 0 (got $code)" test "$code" -eq 0
check "--help prints the usage" grep -q -- "--methods=N\[,N...\]" <<<"$out"

for bad in --methods=1,x --methods= --methods=0 --methods=1,,8 --methods=-4; do
  run "$bad" --dry-run
  check "$bad exits 2 (got $code)" test "$code" -eq 2
  check "$bad is named" grep -q -- "--methods needs method counts" <<<"$err"
  check "$bad prints the usage" grep -q -- "--methods=N\[,N...\]" <<<"$err"
done
run --methods=1 --bogus
check "an unknown option exits 2 (got $code)" test "$code" -eq 2
check "an unknown option is named" grep -q -- "unknown option --bogus" <<<"$err"
run --methods=1 examples/hello_world.cpp
check "--methods with a file exits 2 (got $code)" test "$code" -eq 2

# No compile_commands.json: the flags written by the script itself; nothing configured.
run --methods=4,1 --dry-run
check "--methods=4,1 --dry-run exits 0 (got $code): $err" test "$code" -eq 0
check "the programs are generated" test -s "$dir/compile-methods/tlaunch_1.cpp" -a \
  -s "$dir/compile-methods/plain_1.cpp" -a -s "$dir/compile-methods/tlaunch_4.cpp"
check "the tlaunch program calls its methods" grep -q "service.call<&Service::m3>" \
  "$dir/compile-methods/tlaunch_4.cpp"
tl=$(grep -F "compile-methods/tlaunch_1.cpp" <<<"$out")
pl=$(grep -F "compile-methods/plain_1.cpp" <<<"$out")
check "a command compiles the tlaunch program" test -n "$tl"
check "a command compiles the plain program" test -n "$pl"
for flag in -DTLAUNCH_SEPARATE_COMPILATION -DASIO_SEPARATE_COMPILATION -DASIO_STANDALONE \
            -DASIO_HAS_CO_AWAIT=1 -std=c++20 -O2; do
  check "the tlaunch command has $flag" grep -q -- " $flag " <<<"$tl"
done
check "the plain command has no tlaunch define" test -z "$(grep -o -- '-DTLAUNCH[A-Z_]*' <<<"$pl")"
check "N is in ascending order" test "$(grep -o 'tlaunch_[0-9]*' <<<"$out" | tr '\n' ' ')" \
  = "tlaunch_1 tlaunch_4 "
check "nothing is compiled or configured" test ! -e "$dir/build.ninja" -a ! -e "$dir/CMakeCache.txt"

# A compile command with TLAUNCH_SEPARATE_COMPILATION: its flags, without the test counters.
root=$(cd "$(dirname "$script")/.." && pwd)
cat >"$dir/compile_commands.json" <<JSON
[{"directory": "$dir", "file": "$root/examples/hello_world.cpp",
  "command": "c++ -DASIO_STANDALONE -DASIO_HAS_CO_AWAIT=1 -I$root/include -O3 -std=c++20 -c $root/examples/hello_world.cpp"},
 {"directory": "$dir", "file": "$root/examples/topologies.cpp",
  "command": "c++ -DASIO_STANDALONE -DASIO_HAS_CO_AWAIT=1 -DTLAUNCH_SEPARATE_COMPILATION -DASIO_SEPARATE_COMPILATION -DTLAUNCH_TEST_COUNTERS -DMARK_FROM_CMAKE -isystem /opt/mark -I$root/include -O3 -std=c++20 -c $root/examples/topologies.cpp"}]
JSON
run --methods=2 --library --dry-run --opt=-O1
check "with compile_commands.json exits 0 (got $code): $err" test "$code" -eq 0
tl=$(grep -F "compile-methods/tlaunch_2.cpp" <<<"$out")
pl=$(grep -F "compile-methods/plain_2.cpp" <<<"$out")
check "the flags come from the separate example" grep -q "examples/topologies.cpp" <<<"$out"
check "the tlaunch command has its defines" grep -q -- " -DMARK_FROM_CMAKE .*-isystem /opt/mark " <<<"$tl"
check "the tlaunch command is at --opt" grep -q -- " -O1 " <<<"$tl"
check "the test counters are left out" test -z "$(grep -F ' -c ' <<<"$out" | grep -F TLAUNCH_TEST_COUNTERS)"
check "the plain command has the same includes" grep -q -- "-isystem /opt/mark " <<<"$pl"
check "the plain command has no tlaunch define" test -z "$(grep -o -- '-DTLAUNCH[A-Z_]*' <<<"$pl")"
for source in "$root"/src/*.cpp; do
  rel=src/${source##*/}
  check "--library compiles $rel" grep -qE -- " -c $rel( |$)" <<<"$out"
done

if ((fail)); then echo "--- last stdout:"; echo "$out"; echo "--- last stderr:"; echo "$err"; exit 1; fi
echo "compile_time.sh options: all checks passed"
