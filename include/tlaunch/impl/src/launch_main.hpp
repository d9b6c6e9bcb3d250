// The library's part 3: the entry points: tlaunch::main's body (launch::run_main,
// impl/run_main.hpp) with the command line, the node forker and the node watch, and
// tlaunch::start's (detail::start_view, impl/start.hpp). The launchers and the node process
// they call are compiled in the other launch parts (launch/decl.hpp). Compiled once:
// src/launch_main.cpp.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/launch_main.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#define TLAUNCH_BUILDING_LAUNCH_MAIN

#include "../run_main.hpp"
#include "../start.hpp"
