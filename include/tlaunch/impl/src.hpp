// Compiles tlaunch's launch layer, and Asio's own sources, once: include this header in
// exactly one .cpp file of a program whose every translation unit is built with
// TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION defined (the CMake target
// tlaunch::compiled and Meson's tlaunch_compiled_dep do this; README, "Separate
// compilation").
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

// The non-template members of rpc/connection.hpp, rpc/runtime.hpp and rpc/call_paths.hpp
// are defined only where this is set (a program's files see their declarations alone).
#if defined(TLAUNCH_RPC_CONNECTION_DECLARED_ONLY) || defined(TLAUNCH_RPC_RUNTIME_DECLARED_ONLY) || \
    defined(TLAUNCH_RPC_CALL_PATHS_DECLARED_ONLY)
#error "tlaunch/impl/src.hpp must come before any other tlaunch header (best alone in its .cpp file)"
#endif
#define TLAUNCH_BUILDING_LIBRARY

#include <asio/impl/src.hpp>

#include "../rpc/runtime.hpp"  // with rpc/connection.hpp: their definitions
#include "../rpc/call_paths.hpp"

#include "run_main.hpp"
#include "start.hpp"
