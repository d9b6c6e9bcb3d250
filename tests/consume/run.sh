#!/usr/bin/env bash
# Builds and runs a tiny program that uses tlaunch in one of the ways a user would.
#   run.sh install        <source> <work> : install tlaunch into <work>/prefix (fixture for the next two)
#   run.sh find_package   <source> <work> : CMake find_package(tlaunch) against <work>/prefix
#   run.sh pkg_config     <source> <work> : compile with `pkg-config --cflags --libs tlaunch`
#   run.sh add_subdirectory <source> <work> : CMake add_subdirectory(<source>)
#   run.sh meson_subproject <source> <work> : Meson subproject with dependency('tlaunch')
# Environment: CMAKE, CMAKE_GENERATOR, CXX, MESON, PKG_CONFIG (defaults from PATH).
set -euo pipefail

mode=$1
src=$(cd "$2" && pwd)
work=$3
here=$(cd "$(dirname "$0")" && pwd)
cmake=${CMAKE:-cmake}
generator=${CMAKE_GENERATOR:-Ninja}
cxx=${CXX:-c++}
prefix=$work/prefix

# The program's own output line proves it ran, not only that it built.
run_app() {
  local out
  out=$("$1")
  echo "$out"
  if [[ $out != "tlaunch consumer ok:"* ]]; then
    echo "error: $1 did not print the expected line" >&2
    exit 1
  fi
}

case $mode in
  install)
    rm -rf "$work/install-build" "$prefix"
    "$cmake" -S "$src" -B "$work/install-build" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" \
      -DTLAUNCH_BUILD_TESTS=OFF -DTLAUNCH_BUILD_EXAMPLES=OFF -DTLAUNCH_BUILD_BENCHMARKS=OFF \
      -DCMAKE_INSTALL_PREFIX="$prefix"
    "$cmake" --install "$work/install-build"
    test -f "$prefix/include/tlaunch/tlaunch.hpp" ||
      { echo "error: the install has no include/tlaunch/tlaunch.hpp" >&2; exit 1; }
    ;;
  find_package)
    rm -rf "$work/find_package"
    "$cmake" -S "$here/find_package" -B "$work/find_package" -G "$generator" \
      -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix"
    "$cmake" --build "$work/find_package"
    run_app "$work/find_package/app"
    ;;
  pkg_config)
    pc_dir=$(dirname "$(find "$prefix" -name tlaunch.pc -print -quit)")
    flags=$(PKG_CONFIG_PATH="$pc_dir" "${PKG_CONFIG:-pkg-config}" --cflags --libs tlaunch)
    echo "pkg-config --cflags --libs tlaunch: $flags"
    mkdir -p "$work/pkg_config"
    # shellcheck disable=SC2086 # the flags are meant to split into words
    "$cxx" "$here/app.cpp" -o "$work/pkg_config/app" $flags
    run_app "$work/pkg_config/app"
    ;;
  add_subdirectory)
    rm -rf "$work/add_subdirectory"
    "$cmake" -S "$here/add_subdirectory" -B "$work/add_subdirectory" -G "$generator" \
      -DCMAKE_CXX_COMPILER="$cxx" -DTLAUNCH_SOURCE_DIR="$src"
    "$cmake" --build "$work/add_subdirectory"
    run_app "$work/add_subdirectory/app"
    ;;
  meson_subproject)
    project=$work/meson_subproject
    rm -rf "$project"
    mkdir -p "$project/subprojects"
    cp "$here/meson_subproject/meson.build" "$here/app.cpp" "$project/"
    cp "$here/meson_subproject/tlaunch.wrap" "$project/subprojects/"
    ln -s "$src" "$project/subprojects/tlaunch"
    # force-fallback: the subproject is what is under test, even if a tlaunch is installed.
    CXX=$cxx "${MESON:-meson}" setup "$project/build" "$project" --force-fallback-for=tlaunch
    "${MESON:-meson}" compile -C "$project/build"
    run_app "$project/build/app"
    ;;
  *)
    echo "usage: $0 install|find_package|pkg_config|add_subdirectory|meson_subproject <source> <work>" >&2
    exit 2
    ;;
esac
