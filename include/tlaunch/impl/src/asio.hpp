// The library's part 1: Asio's own sources (ASIO_SEPARATE_COMPILATION), compiled once
// (src/asio.cpp; tlaunch/impl/src.hpp includes every part).
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/asio.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#include <asio/impl/src.hpp>
