// The library's part 3: the non-template members of the runtime (rpc/runtime.hpp), the call
// paths (rpc/call_paths.hpp) and a node's context (context.hpp), compiled once:
// src/rpc_runtime.cpp.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/rpc_runtime.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#define TLAUNCH_BUILDING_RPC_RUNTIME

#include "rpc.hpp"
