// The library's part 2: the non-template members of rpc/connection.hpp (with rpc/tls.hpp),
// rpc/runtime.hpp, rpc/call_paths.hpp and context.hpp, compiled once (src/rpc.cpp;
// tlaunch/impl/src.hpp includes every part). TLAUNCH_BUILDING_LIBRARY is set in this part
// only: every other file of the library and of the program sees their declarations alone.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/rpc.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

// Their definitions are compiled only where this is set, so it must come before any of them.
#if defined(TLAUNCH_DECLARED_ONLY)
#error "tlaunch/impl/src/rpc.hpp must come before any other tlaunch header (best alone in its .cpp file)"
#endif
#define TLAUNCH_BUILDING_LIBRARY

#include "../../rpc/runtime.hpp"  // with rpc/connection.hpp: their definitions
#include "../../rpc/call_paths.hpp"
#include "../../context.hpp"
