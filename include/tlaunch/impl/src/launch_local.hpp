// The library's part 5: the launchers that run every node on this machine:
// launch::run_local_mt (every node in this process) and launch::run_local_mp (a process per
// node, through the coordinator of the process part). Compiled once: src/launch_local.cpp.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/launch_local.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#define TLAUNCH_BUILDING_LAUNCH_LOCAL

#include "../../launch/local_mp.hpp"
#include "../../launch/local_mt.hpp"
