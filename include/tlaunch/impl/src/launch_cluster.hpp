// The library's part 6: the launchers that run inside a cluster manager: launch::run_slurm
// (an srun step) and launch::run_k8s and launch::run_k8s_pod (Kubernetes manifests, and the
// pods they run), both through the coordinator of the process part. Compiled once:
// src/launch_cluster.cpp.
#pragma once

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || !defined(ASIO_SEPARATE_COMPILATION)
#error "tlaunch/impl/src/launch_cluster.hpp needs TLAUNCH_SEPARATE_COMPILATION and ASIO_SEPARATE_COMPILATION"
#endif

#define TLAUNCH_BUILDING_LAUNCH_CLUSTER

#include "../../launch/k8s.hpp"
#include "../../launch/slurm.hpp"
