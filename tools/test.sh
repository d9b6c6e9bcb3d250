#!/usr/bin/env bash
# Builds and tests tlaunch with CMake and g++ (build/ci), CMake and clang++ (build/ci-clang),
# g++ with ASan and UBSan (build/ci-asan) and Meson (build/meson).
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

if run_phase cmake-configure cmake -S . -B build/ci -G Ninja -DCMAKE_BUILD_TYPE=Debug &&
   run_phase cmake-build cmake --build build/ci -j "$jobs"; then
  run_phase ctest ctest --test-dir build/ci --output-on-failure -j "$jobs" --timeout 600
else
  skip_phase ctest "the CMake build failed"
fi

# The same tests built with clang (both compilers are supported).
if run_phase clang-configure env CXX=clang++ cmake -S . -B build/ci-clang -G Ninja \
     -DCMAKE_BUILD_TYPE=Debug -DTLAUNCH_BENCH_GRPC=OFF &&
   run_phase clang-build cmake --build build/ci-clang -j "$jobs"; then
  run_phase clang-ctest ctest --test-dir build/ci-clang --output-on-failure -j "$jobs" --timeout 600
else
  skip_phase clang-ctest "the clang build failed"
fi

# AddressSanitizer and UndefinedBehaviorSanitizer over the tests that run code
# (compile_fail and consume only compile, so they are left to the builds above).
asan_flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
if run_phase asan-configure cmake -S . -B build/ci-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
     -DTLAUNCH_BENCH_GRPC=OFF "-DCMAKE_CXX_FLAGS=$asan_flags" \
     "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined" &&
   run_phase asan-build cmake --build build/ci-asan -j "$jobs"; then
  run_phase asan-ctest ctest --test-dir build/ci-asan --output-on-failure -j "$jobs" --timeout 600 \
    -LE "compile_fail|consume"
else
  skip_phase asan-ctest "the sanitizer build failed"
fi

if [[ -d build/meson ]]; then
  meson_setup=(meson setup --reconfigure build/meson)
else
  meson_setup=(meson setup build/meson)
fi
if run_phase meson-setup "${meson_setup[@]}" &&
   run_phase meson-compile meson compile -C build/meson -j "$jobs"; then
  run_phase meson-test meson test -C build/meson --print-errorlogs --num-processes "$jobs"
else
  skip_phase meson-test "the Meson build failed"
fi

echo
echo "=== summary"
printf '%s\n' "${phases[@]}"
exit "$failed"
