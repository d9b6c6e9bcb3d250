#!/usr/bin/env bash
# Builds and tests tlaunch with CMake and g++ in Release (build/ci), CMake and clang++ in Debug
# with ASan and UBSan (build/ci-asan), g++ with TSan (build/ci-tsan) and Meson with g++ at
# -O0 with assertions (build/meson), and checks the include layers (tools/check_layers.sh, when present).
# Every phase runs even when an earlier one failed (except the tests of a build that failed);
# the exit status is non-zero when any phase failed. JOBS overrides the parallelism.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
jobs=${JOBS:-$(nproc)}
phases=()
failed=0

# run_phase <name> <command...>: runs the command, records its time and status.
run_phase() {
  local name=$1
  shift
  echo
  echo "=== $name: $*"
  local start=$SECONDS status=0
  "$@" || status=$?
  local took=$((SECONDS - start))
  if ((status == 0)); then
    phases+=("$(printf '%-16s %5ds  ok' "$name" "$took")")
  else
    phases+=("$(printf '%-16s %5ds  FAILED (exit %d)' "$name" "$took" "$status")")
    failed=1
  fi
  echo "=== $name took ${took}s (exit $status)"
  return "$status"
}

skip_phase() {
  phases+=("$(printf '%-16s %5s   skipped: %s' "$1" - "$2")")
}

run_phase install-deps bash tools/install-deps.sh || exit 1

# g++ in Release (-O3, NDEBUG): g++ warns about restrict, string overflow, array bounds and
# uninitialised reads only once inlining has run, most of it at -O3, and NDEBUG turns
# assert-only variables into unused ones; clang's warnings come from its front end and barely
# depend on -O. Debug stays covered by clang, the sanitizer builds and Meson.
# Each public header compiling on its own is checked once, by clang below (70 translation
# units, about 200 s of this phase).
if run_phase cmake-configure cmake -S . -B build/ci -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DTLAUNCH_CHECK_HEADERS=OFF &&
   run_phase cmake-build cmake --build build/ci -j "$jobs"; then
  run_phase ctest ctest --test-dir build/ci --output-on-failure -j "$jobs" --timeout 600
else
  skip_phase ctest "the CMake build failed"
fi

# clang in Debug with AddressSanitizer and UndefinedBehaviorSanitizer: both compilers build
# the whole tree with -Werror (g++ above, clang here), and every test runs under ASan and
# UBSan, in one build rather than two (CI time). The benchmarks are built and smoke-tested
# in Release only, and hello_world header-only (TLAUNCH_HEADER_ONLY_EXAMPLE) too: the
# header-only definitions are the compiled library's sources, which run here. -fno-sanitize=function: clang 14 cannot emit
# the function sanitizer's prologue for split coroutine functions ("Cannot represent a
# difference across sections"); the other UBSan checks stay on. -g1 (line tables: the
# reports' stacks still name file and line) instead of -g, as the TSan build below.
asan_flags="-fsanitize=address,undefined -fno-sanitize=function -fno-omit-frame-pointer"
asan_flags+=" -fno-sanitize-recover=undefined"
if run_phase asan-configure env CXX=clang++ cmake -S . -B build/ci-asan -G Ninja \
     -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
     -DTLAUNCH_BENCH_GRPC=OFF -DTLAUNCH_SLURM_TESTS=OFF \
     -DTLAUNCH_BUILD_BENCHMARKS=OFF -DTLAUNCH_HEADER_ONLY_EXAMPLE=OFF \
     "-DCMAKE_CXX_FLAGS=$asan_flags" \
     "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" &&
   run_phase asan-build cmake --build build/ci-asan -j "$jobs"; then
  # -LE netns: the network namespace fault tests (about a minute, mostly waits for what
  # they inject to be noticed) run in the Release ctest and Meson only (CI time).
  # consume (installing and consuming tlaunch, 12-22 s a case) tests packaging, not code
  # that runs under the sanitizers: once, in the g++ Release ctest above, is enough.
  # compile_fail stays: clang's diagnostics differ from g++'s.
  # browser (the dashboard in Chromium) runs in the Release ctest and Meson: under the
  # sanitizers, the launcher's side of it runs in observe_prometheus_tests already.
  # prometheus (a real Prometheus server scraping the launcher: most of their time is the
  # server's) runs in the Release ctest; the endpoint's own cases run here.
  run_phase asan-ctest ctest --test-dir build/ci-asan --output-on-failure -j "$jobs" --timeout 600 \
    -LE "consume|netns|browser|prometheus"
else
  skip_phase asan-ctest "the clang sanitizer build failed"
fi

# ThreadSanitizer over the tests that run code (compile_fail and consume only compile, so they
# are left to the builds above; the benchmarks are measured in Release, not here). -O1 keeps
# the instrumented tests fast enough; -g1 (line tables only, enough for the reports' stacks)
# instead of -g takes 40 % off each translation unit's compile time.
# wire (the codecs: one thread) and readme (the README's snippets, whose runtime paths the
# other tests run here too) are left out: TLAUNCH_SKIP_TEST_FOLDERS (about 80 s of build).
# None is needed today; a report that lies outside tlaunch's code would go, with its reason,
# into tools/tsan.supp, which is used when it exists.
tsan_flags="-fsanitize=thread -O1 -fno-omit-frame-pointer"
tsan_options="halt_on_error=1 second_deadlock_stack=1"
[[ -f tools/tsan.supp ]] && tsan_options+=" suppressions=$PWD/tools/tsan.supp"
if run_phase tsan-configure cmake -S . -B build/ci-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
     -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
     -DTLAUNCH_BUILD_BENCHMARKS=OFF -DTLAUNCH_CHECK_HEADERS=OFF -DTLAUNCH_SLURM_TESTS=OFF \
     -DTLAUNCH_HEADER_ONLY_EXAMPLE=OFF "-DTLAUNCH_SKIP_TEST_FOLDERS=readme;wire" \
     "-DCMAKE_CXX_FLAGS=$tsan_flags" \
     "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread" &&
   run_phase tsan-build cmake --build build/ci-tsan -j "$jobs"; then
  run_phase tsan-ctest env "TSAN_OPTIONS=$tsan_options" \
    ctest --test-dir build/ci-tsan --output-on-failure -j "$jobs" --timeout 600 \
    -LE "compile_fail|consume|netns|browser|prometheus"
else
  skip_phase tsan-ctest "the ThreadSanitizer build failed"
fi

# Headers include only downward through the layers (the script comes with the layer split).
if [[ -f tools/check_layers.sh ]]; then
  run_phase check-layers bash tools/check_layers.sh
else
  skip_phase check-layers "tools/check_layers.sh does not exist yet"
fi

# Meson with g++ at -O0 with assertions; without debug information (-g costs a quarter of
# each translation unit's compile time, and nothing here reads it).
# -Dheader_only_example=false: hello_world header-only is built and run by the Release
# ctest, and Meson's header-only dependency is built by its consume_meson_subproject case.
if [[ -d build/meson ]]; then
  meson_setup=(meson setup --reconfigure -Ddebug=false -Dheader_only_example=false build/meson)
else
  meson_setup=(meson setup -Ddebug=false -Dheader_only_example=false build/meson)
fi
# compile_fail runs g++ -fsyntax-only over the same cases as the g++ Release ctest above
# (10-12 s each, nothing Meson-specific): run once per compiler, not per build. consume
# exists in CMake only (its meson_subproject case tests consuming through Meson).
# ssh, netns and observe (end to end through a real sshd, network namespaces, Prometheus
# and Chromium: most of this phase's time) run in the CMake ctests above (CI time).
# Only what the tests that run here need is compiled (tools/meson-test-targets.py): the
# executables of the suites left out are built and run by CMake above.
# benchmarks: built and smoke-tested in the Release ctest, where they are measured.
# readme: the README's snippets compile and run in both CMake builds (g++ and clang).
meson_skip=(--no-suite compile_fail --no-suite ssh --no-suite netns --no-suite observe
            --no-suite benchmarks --no-suite readme)
meson_compile() {
  local outputs
  outputs=$(python3 tools/meson-test-targets.py build/meson "${meson_skip[@]}") || return 1
  # shellcheck disable=SC2086 # one output path a line, none with spaces
  ninja -C build/meson -j "$jobs" $outputs
}
if run_phase meson-setup "${meson_setup[@]}" &&
   run_phase meson-compile meson_compile; then
  run_phase meson-test meson test -C build/meson --no-rebuild --print-errorlogs \
    --num-processes "$jobs" "${meson_skip[@]}"
else
  skip_phase meson-test "the Meson build failed"
fi

echo
echo "=== summary"
printf '%s\n' "${phases[@]}"
exit "$failed"
