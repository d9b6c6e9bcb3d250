#!/usr/bin/env bash
# Measures how long translation units take to compile and how much memory the compiler needs:
# prints one row per translation unit and mode with the wall-clock seconds (best and worst of
# --runs), the CPU seconds (user + system, best run; steadier than wall-clock on a shared
# machine), the peak resident set size of the compiler, and issue 20's target for the row.
# Modes: header-only (the default build), separate (TLAUNCH_SEPARATE_COMPILATION and
# ASIO_SEPARATE_COMPILATION: the user's translation unit alone) and, once, the library's
# translation unit src/tlaunch.cpp that separate compilation adds (built once per program).
#
#   benchmarks/compile_time.sh [--runs=N] [--cxx=COMPILER] [--opt=FLAG] [--build-dir=DIR]
#                              [--mode=both|header-only|separate] [--] [FILE.cpp...]
#
# Defaults: g++ -O2 -std=c++20, one run, both modes, examples/hello_world.cpp and the largest
# example. The include directories and defines are those CMake gives each file (from
# compile_commands.json of --build-dir, by default build/compile-time, configured here when
# missing), without the separate-compilation defines; a file CMake does not know gets those
# of examples/hello_world.cpp. EXTRA_FLAGS is added to every command. The machine should be
# otherwise idle: the load average is printed before and after. Not run by CI.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
runs=1
cxx=g++
opt=-O2
build_dir=build/compile-time
mode=both
files=()

usage() {
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
}

while (($#)); do
  case $1 in
    --runs=*) runs=${1#*=} ;;
    --cxx=*) cxx=${1#*=} ;;
    --opt=*) opt=${1#*=} ;;
    --build-dir=*) build_dir=${1#*=} ;;
    --mode=*) mode=${1#*=} ;;
    -h | --help) usage; exit 0 ;;
    --) shift; files+=("$@"); break ;;
    -*) echo "compile_time.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) files+=("$1") ;;
  esac
  shift
done
if ! [[ $runs =~ ^[1-9][0-9]*$ ]]; then
  echo "compile_time.sh: --runs needs a positive number, got '$runs'" >&2
  exit 2
fi

case $mode in
  both | header-only | separate) ;;
  *) echo "compile_time.sh: --mode is both, header-only or separate, got '$mode'" >&2; exit 2 ;;
esac

if ((${#files[@]} == 0)); then
  largest=$(wc -l examples/*.cpp | grep -v ' total$' | sort -n | tail -1 | awk '{print $2}')
  files=(examples/hello_world.cpp)
  [[ $largest != examples/hello_world.cpp ]] && files+=("$largest")
fi
for file in "${files[@]}"; do
  [[ -f $file ]] || { echo "compile_time.sh: no such file: $file" >&2; exit 2; }
done

if [[ ! -f $build_dir/compile_commands.json ]]; then
  echo "configuring $build_dir for its compile_commands.json" >&2
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTLAUNCH_BENCH_GRPC=OFF \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
fi

# flags_for <file>: the -D, -I and -isystem flags CMake compiles <file> with, one a line.
flags_for() {
  python3 - "$build_dir/compile_commands.json" "$root/$1" "$root/examples/hello_world.cpp" <<'EOF'
import json, os, shlex, sys
entries = json.load(open(sys.argv[1]))
def flags(path):
    for e in entries:
        if os.path.realpath(os.path.join(e["directory"], e["file"])) == os.path.realpath(path):
            args = e.get("arguments") or shlex.split(e["command"])
            out, i = [], 0
            while i < len(args):
                a = args[i]
                if a in ("-isystem", "-I", "-D", "-include"):
                    out += [a, args[i + 1]]; i += 2; continue
                if a in ("-DTLAUNCH_SEPARATE_COMPILATION", "-DASIO_SEPARATE_COMPILATION"):
                    i += 1; continue  # the mode decides
                if a.startswith(("-D", "-I", "-isystem", "-pthread")):
                    out.append(a)
                i += 1
            return out
    return None
found = flags(sys.argv[2])
if found is None:
    found = flags(sys.argv[3])
if found is None:
    sys.exit("compile_time.sh: neither file is in compile_commands.json")
print("\n".join(found))
EOF
}

out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT

separate_defines=(-DTLAUNCH_SEPARATE_COMPILATION -DASIO_SEPARATE_COMPILATION)

# target <file> <mode>: issue 20's target for that row.
target() {
  case "$1:$2" in
    examples/hello_world.cpp:header-only) echo "<= 15 s" ;;
    examples/hello_world.cpp:separate) echo "<= 10 s, 500 MB" ;;
    *) echo "-" ;;
  esac
}

# measure <label file> <mode> <file> <extra flags...>: one row.
measure() {
  local label=$1 row_mode=$2 file=$3
  shift 3
  local flags best="" worst="" cpu="" peak=0 seconds user sys kb used
  mapfile -t flags < <(flags_for "$file")
  for ((run = 1; run <= runs; run++)); do
    # shellcheck disable=SC2086  # EXTRA_FLAGS is a list of flags
    if ! /usr/bin/time -f '%e %U %S %M' -o "$out_dir/time" \
         "$cxx" $opt -std=c++20 "${flags[@]}" "$@" ${EXTRA_FLAGS:-} -c "$file" -o "$out_dir/tu.o" \
         2>"$out_dir/err"; then
      cat "$out_dir/err" >&2
      echo "compile_time.sh: $file ($row_mode) failed to compile" >&2
      exit 1
    fi
    read -r seconds user sys kb < <(tail -1 "$out_dir/time")
    used=$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')
    cpu=$(awk -v a="$used" -v b="${cpu:-$used}" 'BEGIN { print (a < b ? a : b) }')
    best=$(awk -v a="$seconds" -v b="${best:-$seconds}" 'BEGIN { print (a < b ? a : b) }')
    worst=$(awk -v a="$seconds" -v b="${worst:-$seconds}" 'BEGIN { print (a > b ? a : b) }')
    ((kb > peak)) && peak=$kb
  done
  printf '%-32s %-12s %7.1f %8.1f %6.1f %12d  %s\n' "$label" "$row_mode" "$best" "$worst" "$cpu" \
    $((peak / 1024)) "$(target "$label" "$row_mode")"
}

echo "compiler: $("$cxx" --version | head -1)"
echo "flags:    $opt -std=c++20 (+ CMake's includes and defines${EXTRA_FLAGS:+, $EXTRA_FLAGS})"
echo "commit:   $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) on $(nproc) cores, runs: $runs"
echo
printf '%-32s %-12s %7s %8s %6s %12s  %s\n' "translation unit" "mode" "best s" "worst s" "cpu s" \
  "peak RSS MB" "target (issue 20)"
for file in "${files[@]}"; do
  [[ $mode == separate ]] || measure "$file" header-only "$file"
  [[ $mode == header-only ]] || measure "$file" separate "$file" "${separate_defines[@]}"
done
# The library's translation unit: compiled once per program, not once per user file.
[[ $mode == header-only ]] ||
  measure "src/tlaunch.cpp (library, once)" separate src/tlaunch.cpp "${separate_defines[@]}"
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
