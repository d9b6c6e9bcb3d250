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

#include "../../error.hpp"
#include "../../program.hpp"
#include "../colocation.hpp"

namespace tlaunch::launch {

// The role of process `text` (colocation_processes: a task rank or a completion index read
// from the variable `var`): "name/i" of a lone instance, "name/i,other/j,..." of a group.
// Throws launch_error when it names no process.
inline std::string role_of_process_index(const std::vector<tlaunch::rpc::node_info>& nodes,
                                         const std::vector<colocation_group>& groups,
                                         const char* var, const std::string& text) {
  std::uint64_t index = 0;
  try {
    std::size_t pos = 0;
    index = std::stoull(text, &pos);
    if (pos != text.size() || text.front() == '-')
      throw std::invalid_argument("trailing characters");
  } catch (const std::exception&) {
    throw launch_error(fmt::format("{}='{}' is not a process index", var, text));
  }
  auto processes = launch_processes(nodes, groups);
  if (index >= processes.size())
    throw launch_error(fmt::format(
        "{}={} names no node process: the program has {} (started with more tasks or pods "
        "than processes?)",
        var, index, processes.size()));
  std::string role;
  for (std::uint32_t f : processes[index]) {
    std::uint32_t at = 0;
    for (const auto& n : nodes) {
      if (f < at + n.replicas) {
        role.append(role.empty() ? "" : ",").append(fmt::format("{}/{}", n.name, f - at));
        break;
      }
      at += n.replicas;
    }
  }
  return role;
}

// The role of the process whose index is this task's SLURM_PROCID (role_of_process_index).
// Throws launch_error when the variable is missing or names no process of the program.
inline std::string slurm_task_role(const std::vector<tlaunch::rpc::node_info>& nodes,
                                   const std::vector<colocation_group>& groups = {}) {
  const char* rank = std::getenv("SLURM_PROCID");
  if (rank == nullptr)
    throw launch_error(
        "--tlaunch-role=slurm outside a Slurm task (no SLURM_PROCID); use --launch=slurm "
        "inside an allocation");
  return role_of_process_index(nodes, groups, "SLURM_PROCID", rank);
}

}  // namespace tlaunch::launch
