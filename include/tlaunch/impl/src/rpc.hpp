// The library's RPC layer: the non-template members of rpc/connection.hpp (with its parts
// rpc/connection_*.hpp and rpc/tls.hpp), rpc/runtime.hpp, rpc/call_paths.hpp and
// context.hpp. TLAUNCH_BUILDING_LIBRARY is set here only: every other file of the library and
// of the program sees their declarations alone. The library builds it as two files,
// rpc_connection.hpp and rpc_runtime.hpp (each compiles one group of the definitions,
// detail/config.hpp); tlaunch/impl/src.hpp includes this header, with both groups.
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
