// How the launch layer's entry points (run_local_mt, run_local_mp, run_node_process,
// run_agent, run_ssh, run_slurm, run_k8s, run_k8s_pod) and the process machinery they share
// (the coordinator's members, start_local_child, start_forked_child, start_node_child) are
// compiled. Each is declared in its header with TLAUNCH_DECL, then defined there under a
// guard:
//   - header-only (the default): inline, in every translation unit that uses it;
//   - with TLAUNCH_SEPARATE_COMPILATION: compiled once, in the library's translation unit
//     of its part (tlaunch/impl/src/launch_*.hpp define TLAUNCH_BUILDING_LAUNCH_MAIN, _NODE,
//     _PROCESS, _LOCAL, _CLUSTER and _SSH, the guards of the headers' definitions);
//     every other file, the library's other files included, sees the declaration alone and
//     neither compiles the function nor the helpers only it uses.
#pragma once

#include "../detail/config.hpp"
