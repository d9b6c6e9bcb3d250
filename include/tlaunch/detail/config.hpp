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
