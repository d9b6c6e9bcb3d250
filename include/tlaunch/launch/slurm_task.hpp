// The node side of --launch=slurm: a task of the launcher's srun step is started with
// --tlaunch-role=slurm and takes its role from its rank, SLURM_PROCID, which Slurm sets
// in every task's environment. Rank r is the program's instance r in program order
// (every replica of the first node, then of the second, ...), as the launcher placed it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../error.hpp"
#include "../program.hpp"

namespace tlaunch::launch {

// "name/i" of the instance whose flat index is this task's SLURM_PROCID. Throws
// launch_error when the variable is missing or names no instance of the program.
inline std::string slurm_task_role(const std::vector<tlaunch::detail::node_info>& nodes) {
  const char* rank = std::getenv("SLURM_PROCID");
  if (rank == nullptr)
    throw launch_error(
        "--tlaunch-role=slurm outside a Slurm task (no SLURM_PROCID); use --launch=slurm "
        "inside an allocation");
  std::uint64_t flat = 0;
  try {
    std::size_t pos = 0;
    flat = std::stoull(rank, &pos);
    if (rank[pos] != '\0') throw std::invalid_argument("trailing characters");
  } catch (const std::exception&) {
    throw launch_error(std::string("SLURM_PROCID='") + rank + "' is not a task rank");
  }
  std::uint64_t at = 0;
  for (const auto& n : nodes) {
    if (flat < at + n.replicas) return fmt::format("{}/{}", n.name, flat - at);
    at += n.replicas;
  }
  throw launch_error(fmt::format(
      "Slurm task {} has no node instance: the program has {} (was the step started with more "
      "tasks than instances?)",
      flat, at));
}

}  // namespace tlaunch::launch
