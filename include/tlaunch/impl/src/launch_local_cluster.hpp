// The library's part 5: the launchers that run on this machine or inside a cluster manager:
// launch::run_local_mt (every node in this process), launch::run_local_mp (a process per
// node), launch::run_slurm (an srun step), launch::run_k8s and launch::run_k8s_pod
// (Kubernetes manifests, and the pods they run); all but local_mt run the coordinator of the
// process part (launch_process.hpp). Compiled once: src/launch_local_cluster.cpp.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/launch_local_cluster.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#define TLAUNCH_BUILDING_LAUNCH_LOCAL
#define TLAUNCH_BUILDING_LAUNCH_CLUSTER

#include "../../launch/cluster/k8s.hpp"
#include "../../launch/local_mp.hpp"
#include "../../launch/local_mt.hpp"
#include "../../launch/cluster/slurm.hpp"
