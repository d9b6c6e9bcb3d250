// Compiles tlaunch's launch layer, and Asio's own sources, once: include this header in
// exactly one .cpp file of a program whose every translation unit is built with
// TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION defined (the CMake target
// tlaunch::compiled and Meson's tlaunch_compiled_dep do this; README, "Separate
// compilation").
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#include <asio/impl/src.hpp>

#include "run_main.hpp"
#include "start.hpp"
