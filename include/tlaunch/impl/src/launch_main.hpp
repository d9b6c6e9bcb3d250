// The library's part 3: the entry points and what a process that a launcher started runs:
// tlaunch::main's body (launch::run_main, impl/run_main.hpp) with the command line, the node
// forker and the node watch; tlaunch::start's (detail::start_view, impl/start.hpp); a node
// process (launch::run_node_process, --tlaunch-role); the ssh launcher's agent on each host
// (launch::run_agent, --tlaunch-agent). The launchers run_main calls are compiled in the
// other launch parts (launch/decl.hpp). Compiled once: src/launch_main.cpp.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/launch_main.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#define TLAUNCH_BUILDING_LAUNCH_MAIN
#define TLAUNCH_BUILDING_LAUNCH_NODE

#include "../../launch/ssh/agent.hpp"
#include "../../launch/process/node_process.hpp"
#include "../run_main.hpp"
#include "../start.hpp"
