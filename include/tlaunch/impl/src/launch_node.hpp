// The library's part 7: what a process that a launcher started runs: a node process
// (launch::run_node_process, --tlaunch-role) and the ssh launcher's agent on each host
// (launch::run_agent, --tlaunch-agent). Compiled once: src/launch_node.cpp.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/launch_node.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#define TLAUNCH_BUILDING_LAUNCH_NODE

#include "../../launch/agent.hpp"
#include "../../launch/node_process.hpp"
