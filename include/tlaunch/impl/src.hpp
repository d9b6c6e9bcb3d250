// The whole compiled library in one translation unit: include this header in exactly one
// .cpp file of a program whose every translation unit is built with
// TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION defined (docs/guide/
// building.md). tlaunch's own builds (the CMake target tlaunch::tlaunch, Meson's
// dependency('tlaunch'), libtlaunch.a) compile the same parts in translation units of their
// own, src/*.cpp, one per part of tlaunch/impl/src/, so that a parallel build spreads them.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

// The non-template members of rpc/connection.hpp, rpc/runtime.hpp and rpc/call_paths.hpp
// are defined only where TLAUNCH_BUILDING_LIBRARY is set (impl/src/rpc.hpp).
#if defined(TLAUNCH_DECLARED_ONLY)
#error "tlaunch/impl/src.hpp must come before any other tlaunch header (best alone in its .cpp file)"
#endif

// Every launch part's entry points (launch/decl.hpp) are defined where its macro is set:
// all of them here, before any launch header is read (each part's header sets its own).
#define TLAUNCH_BUILDING_LAUNCH_MAIN
#define TLAUNCH_BUILDING_LAUNCH_LOCAL
#define TLAUNCH_BUILDING_LAUNCH_NODE
#define TLAUNCH_BUILDING_LAUNCH_SSH
#define TLAUNCH_BUILDING_LAUNCH_CLUSTER
#define TLAUNCH_BUILDING_LAUNCH_PROCESS

#include "src/asio.hpp"
#include "src/rpc.hpp"
#include "src/launch_main.hpp"
#include "src/launch_process.hpp"
#include "src/launch_local_cluster.hpp"
#include "src/launch_ssh.hpp"
