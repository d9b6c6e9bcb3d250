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

// "name/i" of the instance whose flat index (its place in program order: every replica of
// the first node, then of the second, ...) is `text`, a task rank or a completion index
// read from the variable `var`. Throws launch_error when it names no instance.
inline std::string role_of_flat_index(const std::vector<tlaunch::detail::node_info>& nodes,
                                      const char* var, const std::string& text) {
  std::uint64_t flat = 0;
  try {
    std::size_t pos = 0;
    flat = std::stoull(text, &pos);
    if (pos != text.size() || text.front() == '-')
      throw std::invalid_argument("trailing characters");
  } catch (const std::exception&) {
    throw launch_error(fmt::format("{}='{}' is not an instance index", var, text));
  }
  std::uint64_t at = 0;
  for (const auto& n : nodes) {
    if (flat < at + n.replicas) return fmt::format("{}/{}", n.name, flat - at);
    at += n.replicas;
  }
  throw launch_error(fmt::format(
      "{}={} names no node instance: the program has {} (started with more tasks or pods "
      "than instances?)",
      var, flat, at));
}

// "name/i" of the instance whose flat index is this task's SLURM_PROCID. Throws
// launch_error when the variable is missing or names no instance of the program.
inline std::string slurm_task_role(const std::vector<tlaunch::detail::node_info>& nodes) {
  const char* rank = std::getenv("SLURM_PROCID");
  if (rank == nullptr)
    throw launch_error(
        "--tlaunch-role=slurm outside a Slurm task (no SLURM_PROCID); use --launch=slurm "
        "inside an allocation");
  return role_of_flat_index(nodes, "SLURM_PROCID", rank);
}

}  // namespace tlaunch::launch
