#!/usr/bin/env bash
# Builds and runs a tiny program that uses tlaunch in one of the ways a user would.
#   run.sh install        <source> <work> : install tlaunch into <work>/prefix (fixture for the
#                                           find_package and pkg_config cases)
#   run.sh find_package   <source> <work> : CMake find_package(tlaunch), tlaunch::tlaunch
#   run.sh find_package_header_only <source> <work> : the same with tlaunch::header_only
#   run.sh pkg_config     <source> <work> : `pkg-config --cflags --libs tlaunch`
#   run.sh pkg_config_header_only <source> <work> : `pkg-config ... tlaunch-header-only`
#   run.sh add_subdirectory <source> <work> : CMake add_subdirectory(<source>), tlaunch::tlaunch
#   run.sh meson_subproject <source> <work> : Meson subproject, dependency('tlaunch') and
#                                             dependency('tlaunch-header-only')
#   run.sh header_only_gxx <source> <work> : one g++ command against <source>/include
# Compiled (tlaunch::tlaunch, tlaunch.pc, dependency('tlaunch')): the app's own object file
# must not contain the launch layer, which comes from libtlaunch.a; header-only: it must.
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

# The program's own output line proves it ran, not only that it built; the node's line, that
# tlaunch::main ran its program (a call from one node to the other).
run_app() {
  local out
  out=$("$1")
  echo "$out"
  if [[ $out != "tlaunch consumer ok:"* ]]; then
    echo "error: $1 did not print the expected line" >&2
    exit 1
  fi
  if [[ $out != *"call answered 2"* ]]; then
    echo "error: $1 did not run its tlaunch program (no 'call answered 2')" >&2
    exit 1
  fi
}

# check_object <object file> compiled|header-only: whether the app's own object holds the
# launch layer (tlaunch::launch::run_main and the rest, Asio's scheduler loop). Compiled, it must
# only refer to run_main; header-only, it must define it.
check_object() {
  local obj=$1 mode=$2 defined undefined
  [[ -f $obj ]] || { echo "error: no object file $obj" >&2; exit 1; }
  defined=$(nm -C --defined-only "$obj")
  undefined=$(nm -C --undefined-only "$obj")
  if [[ $mode == compiled ]]; then
    # Asio's small inline members (scheduler::work_started ...) may be emitted anywhere;
    # scheduler::run and do_run_one are compiled with Asio's sources only.
    if grep -E 'tlaunch::launch::|asio::detail::scheduler::(run|do_run_one)\(' <<<"$defined"; then
      echo "error: $obj (compiled library) defines the launch layer or Asio's scheduler" \
           "(above): it should come from libtlaunch.a" >&2
      exit 1
    fi
    if ! grep -q 'tlaunch::launch::run_main' <<<"$undefined"; then
      echo "error: $obj does not call tlaunch::launch::run_main from the library" >&2
      exit 1
    fi
    echo "$obj: no launch layer of its own (run_main comes from the library)"
  else
    if ! grep -q 'tlaunch::launch::run_main' <<<"$defined"; then
      echo "error: $obj (header-only) does not define tlaunch::launch::run_main" >&2
      exit 1
    fi
    echo "$obj: defines the launch layer itself (header-only)"
  fi
}

case $mode in
  install)
    rm -rf "$work/install-build" "$prefix"
    "$cmake" -S "$src" -B "$work/install-build" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" \
      -DTLAUNCH_BUILD_TESTS=OFF -DTLAUNCH_BUILD_EXAMPLES=OFF -DTLAUNCH_BUILD_BENCHMARKS=OFF \
      -DCMAKE_INSTALL_PREFIX="$prefix"
    "$cmake" --build "$work/install-build"  # libtlaunch.a
    "$cmake" --install "$work/install-build"
    test -f "$prefix/include/tlaunch/tlaunch.hpp" ||
      { echo "error: the install has no include/tlaunch/tlaunch.hpp" >&2; exit 1; }
    [[ -n $(find "$prefix" -name libtlaunch.a) ]] ||
      { echo "error: the install has no libtlaunch.a" >&2; exit 1; }
    ;;
  find_package | find_package_header_only)
    rm -rf "$work/$mode"
    "$cmake" -S "$here/$mode" -B "$work/$mode" -G "$generator" \
      -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix"
    "$cmake" --build "$work/$mode"
    obj=$(find "$work/$mode" -name 'app.cpp.o' -print -quit)
    if [[ $mode == find_package ]]; then
      check_object "$obj" compiled
    else
      check_object "$obj" header-only
    fi
    run_app "$work/$mode/app"
    ;;
  pkg_config | pkg_config_header_only)
    package=tlaunch
    [[ $mode == pkg_config_header_only ]] && package=tlaunch-header-only
    pc_dir=$(dirname "$(find "$prefix" -name "$package.pc" -print -quit)")
    cflags=$(PKG_CONFIG_PATH="$pc_dir" "${PKG_CONFIG:-pkg-config}" --cflags "$package")
    libs=$(PKG_CONFIG_PATH="$pc_dir" "${PKG_CONFIG:-pkg-config}" --libs "$package")
    echo "pkg-config --cflags --libs $package: $cflags $libs"
    rm -rf "$work/$mode"
    mkdir -p "$work/$mode"
    # shellcheck disable=SC2086 # the flags are meant to split into words
    "$cxx" -c "$here/app.cpp" -o "$work/$mode/app.o" $cflags
    # shellcheck disable=SC2086
    "$cxx" "$work/$mode/app.o" -o "$work/$mode/app" $libs
    if [[ $mode == pkg_config ]]; then
      check_object "$work/$mode/app.o" compiled
    else
      check_object "$work/$mode/app.o" header-only
    fi
    run_app "$work/$mode/app"
    ;;
  add_subdirectory)
    rm -rf "$work/add_subdirectory"
    "$cmake" -S "$here/add_subdirectory" -B "$work/add_subdirectory" -G "$generator" \
      -DCMAKE_CXX_COMPILER="$cxx" -DTLAUNCH_SOURCE_DIR="$src"
    "$cmake" --build "$work/add_subdirectory"
    check_object "$(find "$work/add_subdirectory" -name 'app.cpp.o' -print -quit)" compiled
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
    # -Ddebug=false: no debug information (a quarter of each compile; nothing reads it).
    CXX=$cxx "${MESON:-meson}" setup "$project/build" "$project" --force-fallback-for=tlaunch \
      -Ddebug=false
    "${MESON:-meson}" compile -C "$project/build"
    check_object "$(find "$project/build/app.p" -name '*.o' -print -quit)" compiled
    check_object "$(find "$project/build/app_header_only.p" -name '*.o' -print -quit)" header-only
    run_app "$project/build/app"
    run_app "$project/build/app_header_only"
    ;;
  header_only_gxx)
    # The plainest use: one g++ command, the source tree's include/ and the libraries.
    rm -rf "$work/$mode"
    mkdir -p "$work/$mode"
    "$cxx" -std=c++20 -I"$src/include" -DASIO_STANDALONE -c "$here/app.cpp" -o "$work/$mode/app.o"
    "$cxx" "$work/$mode/app.o" -o "$work/$mode/app" -lssh -lcrypto -lssl -lfmt
    check_object "$work/$mode/app.o" header-only
    run_app "$work/$mode/app"
    ;;
  *)
    echo "usage: $0 install|find_package|find_package_header_only|pkg_config|" \
         "pkg_config_header_only|add_subdirectory|meson_subproject|header_only_gxx <source> <work>" >&2
    exit 2
    ;;
esac
