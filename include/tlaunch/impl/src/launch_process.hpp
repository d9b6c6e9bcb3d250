// The library's part 4: the process machinery the launchers share: the coordinator
// (launch/process/coordinator.hpp and launch/coordinator/: the control protocol, the process table
// and restarts, the stop), which local_mp, ssh, slurm and k8s run, and the start of a local
// node process (launch::start_local_child, start_forked_child, start_node_child). Compiled
// once: src/launch_process.cpp.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/launch_process.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#define TLAUNCH_BUILDING_LAUNCH_PROCESS

#include "../../launch/process/coordinator.hpp"
#include "../../launch/process/node_forker.hpp"
