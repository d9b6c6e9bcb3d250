// The library's part 2: the non-template members of the connection (rpc/connection.hpp and
// its parts, rpc/tls.hpp, the batching of frames and jobs in rpc/batch.hpp,
// rpc/instance.hpp), compiled once: src/rpc_connection.cpp.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/rpc_connection.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#define TLAUNCH_BUILDING_RPC_CONNECTION

#include "rpc.hpp"
