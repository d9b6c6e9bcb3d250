#!/usr/bin/env bash
# Measures how long translation units take to compile and how much memory the compiler needs:
# the CPU seconds (user + system, best of --runs; steadier than wall-clock on a shared
# machine) and the peak resident set size of the compiler. Three kinds of run:
#
# Files (the default): one row per translation unit and mode with the wall-clock seconds
# (best and worst of --runs), the CPU seconds, the peak RSS and the project's target for the
# row. Modes: separate (the default build: TLAUNCH_SEPARATE_COMPILATION and
# ASIO_SEPARATE_COMPILATION: the user's translation unit alone), header-only and, once, the
# library as one translation unit, src/tlaunch.cpp (every part in one file, as a program that
# compiles the library itself does; --library measures the parts the build compiles).
#
# --methods=N,...: how a user's file grows with its remote methods. For each N,
# benchmarks/compile/gen_methods.sh writes two programs into BUILD-DIR/compile-methods/: a
# service of N remote methods (four shapes in turn) each called once through a tlaunch
# handle, and the same service and calls on plain Asio coroutines with cereal serialising
# every argument and result once (the floor any RPC pays). The tlaunch one is compiled as a
# user's file against the separately compiled library, the plain one with the same compiler,
# --opt, includes and Asio defines but none of tlaunch's. Prints both per N and their
# CPU ratio, then the cost of one more method: over the whole range of N and, with 3 or
# more N, between the two largest (the shapes repeat every 4 methods, so above N=4 only the
# per-method cost is left).
#
# --library: each library source src/*.cpp with the flags CMake gives it, one row per file,
# and the sum (what building the compiled library costs once).
#
#   benchmarks/compile_time.sh [--runs=N] [--cxx=COMPILER] [--opt=FLAG] [--build-dir=DIR]
#                              [--mode=both|header-only|separate] [--dry-run] [--] [FILE.cpp...]
#   benchmarks/compile_time.sh --methods=N[,N...] [--library] [--runs=N] [--cxx=COMPILER]
#                              [--opt=FLAG] [--build-dir=DIR] [--dry-run]
#   benchmarks/compile_time.sh --library [--runs=N] [--cxx=...] [--opt=...] [--build-dir=DIR]
#                              [--dry-run]
#
# Defaults: g++ -O2 -std=c++20, one run, both modes, examples/hello_world.cpp and the largest
# example. The include directories and defines are those CMake gives each file (from
# compile_commands.json of --build-dir, by default build/compile-time, configured here when
# missing), without the separate-compilation defines; a file CMake does not know gets those
# of examples/hello_world.cpp. --methods takes the flags of an example CMake compiles with
# TLAUNCH_SEPARATE_COMPILATION (linked to the compiled library), or writes them itself
# (-DTLAUNCH_SEPARATE_COMPILATION -DASIO_SEPARATE_COMPILATION -DASIO_STANDALONE
# -DASIO_HAS_CO_AWAIT=1 -Iinclude); TLAUNCH_TEST_COUNTERS, which tlaunch's own test build
# sets, is left out there and in --library. --dry-run writes the generated programs and
# prints the compile commands, compiles nothing and configures nothing (without a
# compile_commands.json it shows the written flags). EXTRA_FLAGS is added to every command.
# The machine should be otherwise idle: the load average is printed before and after. Not
# run by CI (ctest -R compile_time_options checks the options).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
runs=1
cxx=g++
opt=-O2
build_dir=build/compile-time
mode=both
methods=""
methods_given=0
library=0
dry_run=0
files=()

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
}
bad_usage() {
  echo "compile_time.sh: $1" >&2
  usage >&2
  exit 2
}

while (($#)); do
  case $1 in
    --runs=*) runs=${1#*=} ;;
    --cxx=*) cxx=${1#*=} ;;
    --opt=*) opt=${1#*=} ;;
    --build-dir=*) build_dir=${1#*=} ;;
    --mode=*) mode=${1#*=} ;;
    --methods=*) methods=${1#*=} methods_given=1 ;;
    --library) library=1 ;;
    --dry-run) dry_run=1 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; files+=("$@"); break ;;
    -*) bad_usage "unknown option $1" ;;
    *) files+=("$1") ;;
  esac
  shift
done
if ! [[ $runs =~ ^[1-9][0-9]*$ ]]; then
  bad_usage "--runs needs a positive number, got '$runs'"
fi
case $mode in
  both | header-only | separate) ;;
  *) bad_usage "--mode is both, header-only or separate, got '$mode'" ;;
esac
method_counts=()
if ((methods_given)); then
  [[ $methods =~ ^[1-9][0-9]{0,3}(,[1-9][0-9]{0,3})*$ ]] ||
    bad_usage "--methods needs method counts from 1 to 9999 separated by commas (e.g. --methods=1,8,32), got '$methods'"
  mapfile -t method_counts < <(tr , '\n' <<<"$methods" | sort -n -u)
fi
if ((methods_given || library)) && ((${#files[@]})); then
  bad_usage "--methods and --library take no files, got ${files[*]}"
fi

if ((!methods_given && !library)); then
  if ((${#files[@]} == 0)); then
    largest=$(wc -l examples/*.cpp | grep -v ' total$' | sort -n | tail -1 | awk '{print $2}')
    files=(examples/hello_world.cpp)
    [[ $largest != examples/hello_world.cpp ]] && files+=("$largest")
  fi
  for file in "${files[@]}"; do
    [[ -f $file ]] || { echo "compile_time.sh: no such file: $file" >&2; exit 2; }
  done
fi

if [[ ! -f $build_dir/compile_commands.json ]] && ((!dry_run)); then
  echo "configuring $build_dir for its compile_commands.json" >&2
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTLAUNCH_BENCH_GRPC=OFF \
    -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
fi

# compile_flags <kind> [file]: the flags to compile with, one a line, after a first line that
# says where they came from. Kinds:
#   file F      the -D, -I and -isystem flags CMake compiles F with (or examples/hello_world.cpp)
#               without the separate-compilation defines (the mode adds them);
#   separate    those of a user's file linked to the compiled library;
#   library F   those of library source F.
compile_flags() {
  python3 - "$build_dir/compile_commands.json" "$root" "$@" <<'EOF'
import json, os, shlex, sys
commands, root, kind = sys.argv[1], sys.argv[2], sys.argv[3]
entries = json.load(open(commands)) if os.path.exists(commands) else []
rel = lambda p: os.path.relpath(p, root)
SEPARATE = ["-DTLAUNCH_SEPARATE_COMPILATION", "-DASIO_SEPARATE_COMPILATION"]
BASE = ["-DASIO_STANDALONE", "-DASIO_HAS_CO_AWAIT=1"]

def path_of(e):
    return os.path.realpath(os.path.join(e["directory"], e["file"]))

def flags_of(e):
    args = e.get("arguments") or shlex.split(e["command"])
    out, i = [], 0
    while i < len(args):
        a = args[i]
        if a in ("-isystem", "-I", "-D", "-include"):
            out += [a, args[i + 1]] if a != "-D" else ["-D" + args[i + 1]]
            i += 2
            continue
        if a.startswith(("-D", "-I", "-isystem", "-pthread")):
            out.append(a)
        i += 1
    return out

def entry_for(path):
    return next((e for e in entries if path_of(e) == os.path.realpath(path)), None)

def without(flags, drop):
    return [f for f in flags if f not in drop]

def separate_flags():
    """A user's file linked to the compiled library: an example's command when one has
    TLAUNCH_SEPARATE_COMPILATION (whatever the library target is called), else written."""
    found = [e for e in entries if "-DTLAUNCH_SEPARATE_COMPILATION" in flags_of(e)
             and not rel(path_of(e)).startswith("src/")]
    found.sort(key=lambda e: (not rel(path_of(e)).startswith("examples/"),
                              rel(path_of(e)) != "examples/hello_world.cpp"))
    if found:
        e = found[0]
        where = f"the flags of {rel(path_of(e))} in {commands}"
        flags = without(flags_of(e), ("-DTLAUNCH_TEST_COUNTERS", "-DTLAUNCH_BUILDING_LIBRARY"))
    else:
        where = (f"flags written here (no command in {commands} has TLAUNCH_SEPARATE_COMPILATION)"
                 if entries else f"flags written here (no {commands})")
        flags = ["-I" + os.path.join(root, "include")]
    for f in SEPARATE + BASE:
        if f not in flags:
            flags.append(f)
    return where, flags

if kind == "file":
    e = entry_for(os.path.join(root, sys.argv[4])) or \
        entry_for(os.path.join(root, "examples/hello_world.cpp"))
    if e is not None:
        where, flags = f"CMake's, from {commands}", without(flags_of(e), SEPARATE)
    elif not entries:
        where, flags = "written here (no " + commands + ")", \
                       ["-I" + os.path.join(root, "include")] + BASE
    else:
        sys.exit("compile_time.sh: neither file is in compile_commands.json")
elif kind == "separate":
    where, flags = separate_flags()
elif kind == "library":
    source = os.path.join(root, sys.argv[4])
    e = entry_for(source)
    if e is not None:
        where = f"those of its command in {commands}"
        flags = without(flags_of(e), ("-DTLAUNCH_TEST_COUNTERS",))
    else:
        where, flags = separate_flags()
        where = "not in compile_commands.json: a user's file's flags, " + where
        # tlaunch/impl/src.hpp defines TLAUNCH_BUILDING_LIBRARY itself.
        if "tlaunch/impl/src.hpp" not in open(source).read():
            flags.append("-DTLAUNCH_BUILDING_LIBRARY")
            where += ", and -DTLAUNCH_BUILDING_LIBRARY"
else:
    sys.exit("compile_flags: unknown kind " + kind)
print(where)
print("\n".join(flags))
EOF
}

# flags_for <file>: the -D, -I and -isystem flags CMake compiles <file> with, one a line.
flags_for() {
  compile_flags file "$1" | tail -n +2
}

out_dir=$(mktemp -d)
trap 'rm -rf "$out_dir"' EXIT

separate_defines=(-DTLAUNCH_SEPARATE_COMPILATION -DASIO_SEPARATE_COMPILATION)

# compile <file> <flags...>: compiles <file> --runs times with --cxx, --opt and <flags>; sets
# tu_best and tu_worst (wall-clock s), tu_cpu (user + system s, best run) and tu_mb (peak
# RSS, largest run). With --dry-run it prints the command instead, and the figures are 0.
compile() {
  local file=$1
  shift
  # shellcheck disable=SC2206  # EXTRA_FLAGS is a list of flags
  local cmd=("$cxx" $opt -std=c++20 "$@" ${EXTRA_FLAGS:-} -c "$file" -o "$out_dir/tu.o")
  local run seconds user sys kb used peak=0
  tu_best="" tu_worst="" tu_cpu=""
  if ((dry_run)); then
    printf '%q ' "${cmd[@]}"
    echo
    tu_best=0 tu_worst=0 tu_cpu=0 tu_mb=0
    return
  fi
  for ((run = 1; run <= runs; run++)); do
    if ! /usr/bin/time -f '%e %U %S %M' -o "$out_dir/time" "${cmd[@]}" 2>"$out_dir/err"; then
      cat "$out_dir/err" >&2
      echo "compile_time.sh: $file failed to compile" >&2
      exit 1
    fi
    read -r seconds user sys kb < <(tail -1 "$out_dir/time")
    used=$(awk -v u="$user" -v s="$sys" 'BEGIN { print u + s }')
    tu_cpu=$(awk -v a="$used" -v b="${tu_cpu:-$used}" 'BEGIN { print (a < b ? a : b) }')
    tu_best=$(awk -v a="$seconds" -v b="${tu_best:-$seconds}" 'BEGIN { print (a < b ? a : b) }')
    tu_worst=$(awk -v a="$seconds" -v b="${tu_worst:-$seconds}" 'BEGIN { print (a > b ? a : b) }')
    ((kb > peak)) && peak=$kb
  done
  tu_mb=$((peak / 1024))
}

# target <file> <mode>: the project's target for that row (header-only has none).
target() {
  case "$1:$2" in
    examples/hello_world.cpp:separate) echo "<= 4 s, 450 MB" ;;
    *) echo "-" ;;
  esac
}

# measure <label file> <mode> <file> <extra flags...>: one row of the files table.
measure() {
  local label=$1 row_mode=$2 file=$3
  shift 3
  local flags
  mapfile -t flags < <(flags_for "$file")
  compile "$file" "${flags[@]}" "$@"
  ((dry_run)) && return
  printf '%-32s %-12s %7.1f %8.1f %6.1f %12d  %s\n' "$label" "$row_mode" "$tu_best" "$tu_worst" \
    "$tu_cpu" "$tu_mb" "$(target "$label" "$row_mode")"
}

# per_method <label> <n1> <n2>: one row of the marginal costs, from tl_cpu, tl_mb, pl_cpu and
# pl_mb, indexed by method count.
per_method() {
  local label=$1 a=$2 b=$3
  awk -v label="$label" -v d=$((b - a)) \
      -v tc="${tl_cpu[$b]}" -v tc0="${tl_cpu[$a]}" -v tm="${tl_mb[$b]}" -v tm0="${tl_mb[$a]}" \
      -v pc="${pl_cpu[$b]}" -v pc0="${pl_cpu[$a]}" -v pm="${pl_mb[$b]}" -v pm0="${pl_mb[$a]}" \
      'BEGIN { printf "%-28s  %13.3f  %10.2f  %11.3f  %8.2f  %15.3f\n", label, (tc - tc0) / d,
               (tm - tm0) / d, (pc - pc0) / d, (pm - pm0) / d, ((tc - tc0) - (pc - pc0)) / d }'
}

# The methods table: both programs per N, then the cost of one more method.
run_methods() {
  local gen_dir=$build_dir/compile-methods n tl_flags pl_flags where
  declare -gA tl_cpu=() tl_mb=() pl_cpu=() pl_mb=()
  mkdir -p "$gen_dir"
  mapfile -t tl_flags < <(compile_flags separate)
  where=${tl_flags[0]}
  tl_flags=("${tl_flags[@]:1}")
  pl_flags=()
  for flag in "${tl_flags[@]}"; do
    [[ $flag == -DTLAUNCH_* ]] || pl_flags+=("$flag")
  done
  echo "methods: the tlaunch program against the compiled library, with $where;"
  echo "         the plain program with the same flags without tlaunch's defines;"
  echo "         generated into $gen_dir/"
  echo
  ((dry_run)) ||
    printf '%6s  %13s  %10s  %11s  %8s  %9s\n' N "tlaunch cpu s" "tlaunch MB" "plain cpu s" \
      "plain MB" "cpu ratio"
  for n in "${method_counts[@]}"; do
    bash benchmarks/compile/gen_methods.sh "$n" tlaunch >"$gen_dir/tlaunch_$n.cpp"
    bash benchmarks/compile/gen_methods.sh "$n" plain >"$gen_dir/plain_$n.cpp"
    compile "$gen_dir/tlaunch_$n.cpp" "${tl_flags[@]}"
    tl_cpu[$n]=$tu_cpu tl_mb[$n]=$tu_mb
    compile "$gen_dir/plain_$n.cpp" "${pl_flags[@]}"
    pl_cpu[$n]=$tu_cpu pl_mb[$n]=$tu_mb
    ((dry_run)) ||
      awk -v n="$n" -v tc="${tl_cpu[$n]}" -v tm="${tl_mb[$n]}" -v pc="${pl_cpu[$n]}" \
          -v pm="${pl_mb[$n]}" 'BEGIN { printf "%6d  %13.1f  %10d  %11.1f  %8d  %9s\n", n, tc, tm,
                                        pc, pm, (pc > 0 ? sprintf("%.2f", tc / pc) : "-") }'
  done
  ((dry_run)) && return
  local count=${#method_counts[@]}
  echo
  if ((count < 2)); then
    echo "(one N: no cost per method; give two or more, e.g. --methods=1,8,32)"
    return
  fi
  local lo=${method_counts[0]} hi=${method_counts[count - 1]}
  printf '%-28s  %13s  %10s  %11s  %8s  %15s\n' "cost of one more method" "tlaunch cpu s" \
    "tlaunch MB" "plain cpu s" "plain MB" "tlaunch - plain"
  per_method "N=$lo to $hi" "$lo" "$hi"
  if ((count >= 3)); then
    per_method "N=${method_counts[count - 2]} to $hi (two largest)" \
      "${method_counts[count - 2]}" "$hi"
  fi
}

# The library table: each src/*.cpp once, and the sum.
run_library() {
  local source flags sum_cpu=0 sum_mb=0 max_mb=0
  echo "library: each source with the flags of its command in $build_dir/compile_commands.json"
  echo "         (without TLAUNCH_TEST_COUNTERS; a source it lacks is named below with its flags)"
  echo
  ((dry_run)) || printf '%-32s %7s %8s %6s %12s\n' "library source" "best s" "worst s" "cpu s" \
    "peak RSS MB"
  for source in src/*.cpp; do
    mapfile -t flags < <(compile_flags library "$source")
    [[ ${flags[0]} == "those of its command"* ]] || echo "$source: ${flags[0]}"
    compile "$source" "${flags[@]:1}"
    ((dry_run)) && continue
    printf '%-32s %7.1f %8.1f %6.1f %12d\n' "$source" "$tu_best" "$tu_worst" "$tu_cpu" "$tu_mb"
    sum_cpu=$(awk -v a="$sum_cpu" -v b="$tu_cpu" 'BEGIN { print a + b }')
    sum_mb=$((sum_mb + tu_mb))
    ((tu_mb > max_mb)) && max_mb=$tu_mb
  done
  ((dry_run)) && return
  printf '%-32s %7s %8s %6.1f %12d  (largest alone: %d MB)\n' "sum" "" "" "$sum_cpu" "$sum_mb" \
    "$max_mb"
}

echo "compiler: $("$cxx" --version | head -1)"
echo "flags:    $opt -std=c++20 (+ CMake's includes and defines${EXTRA_FLAGS:+, $EXTRA_FLAGS})"
echo "commit:   $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)')"
echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) on $(nproc) cores, runs: $runs"
((dry_run)) && echo "dry run:  the commands only, nothing is compiled"
echo
if ((methods_given || library)); then
  if ((library)); then
    run_library
    echo
  fi
  if ((methods_given)); then
    run_methods
    echo
  fi
else
  ((dry_run)) ||
    printf '%-32s %-12s %7s %8s %6s %12s  %s\n' "translation unit" "mode" "best s" "worst s" \
      "cpu s" "peak RSS MB" "target"
  for file in "${files[@]}"; do
    [[ $mode == separate ]] || measure "$file" header-only "$file"
    [[ $mode == header-only ]] || measure "$file" separate "$file" "${separate_defines[@]}"
  done
  # The library's translation unit: compiled once per program, not once per user file.
  [[ $mode == header-only ]] ||
    measure "src/tlaunch.cpp (library, once)" separate src/tlaunch.cpp "${separate_defines[@]}"
  echo
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
