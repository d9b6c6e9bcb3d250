// The library's part 6: the ssh launcher, launch::run_ssh (sessions, the binary cache, one
// agent link per host), which runs the coordinator of the process part (launch_process.hpp);
// the agent it starts on each host is compiled in part 3 (launch_main.hpp). Compiled once:
// src/launch_ssh.cpp.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/launch_ssh.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#define TLAUNCH_BUILDING_LAUNCH_SSH

#include "../../launch/ssh/launcher.hpp"
