// How tlaunch's functions that are not templates are compiled, in one place (as Asio's
// ASIO_DECL):
//   - header-only (the default): TLAUNCH_DECL is `inline` and every header defines its
//     functions where it declares them (TLAUNCH_HEADER_DEFINITIONS is 1);
//   - with TLAUNCH_SEPARATE_COMPILATION: TLAUNCH_DECL is empty, the functions are compiled
//     once in the library (tlaunch/impl/src/*.hpp, which define TLAUNCH_BUILDING_LIBRARY),
//     and a program's own files see the declarations alone (TLAUNCH_HEADER_DEFINITIONS is
//     0 there): they neither parse the definitions nor the headers only those need.
// The launch layer's entry points have one more guard each, so that each of the library's
// launch files compiles only its own (launch/decl.hpp).
#pragma once

#if defined(TLAUNCH_SEPARATE_COMPILATION)
#define TLAUNCH_DECL
#else
#define TLAUNCH_DECL inline
#endif

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LIBRARY)
#define TLAUNCH_HEADER_DEFINITIONS 1
#else
#define TLAUNCH_HEADER_DEFINITIONS 0
// impl/src.hpp checks that it came first (the library's definitions would be missing).
#define TLAUNCH_DECLARED_ONLY
#endif

// The RPC layer's definitions in two groups, so that the library compiles them in two files:
// the connection (rpc/connection*.hpp, connection_api.hpp, batch.hpp, instance.hpp) where
// TLAUNCH_BUILDING_RPC_CONNECTION is set (impl/src/rpc_connection.hpp), the runtime
// (rpc/runtime.hpp, call_paths.hpp, context.hpp) where TLAUNCH_BUILDING_RPC_RUNTIME is
// (impl/src/rpc_runtime.hpp); both where the library is one file (impl/src.hpp) or
// header-only; neither in a program's files.
#if TLAUNCH_HEADER_DEFINITIONS && !defined(TLAUNCH_BUILDING_RPC_RUNTIME)
#define TLAUNCH_CONNECTION_DEFINITIONS 1
#else
#define TLAUNCH_CONNECTION_DEFINITIONS 0
#endif
#if TLAUNCH_HEADER_DEFINITIONS && !defined(TLAUNCH_BUILDING_RPC_CONNECTION)
#define TLAUNCH_RUNTIME_DEFINITIONS 1
#else
#define TLAUNCH_RUNTIME_DEFINITIONS 0
#endif
