// Per-node environment from the command line: `--env NAME:KEY=VALUE` sets KEY in every
// process of node NAME, "{index}" in VALUE becoming the replica's index. A node process
// sets its variables itself, first thing (before its node is constructed and before any
// thread of its own starts), so every launcher of node processes (local_mp, ssh, slurm)
// applies them alike; local_mt, where one process hosts every node, refuses them.
#pragma once

#include <stdlib.h>

#include <string>
#include <string_view>
#include <vector>

#include "../error.hpp"
#include "../program.hpp"
#include "flags.hpp"

namespace tlaunch::launch {

// VALUE with every "{index}" replaced by `index`.
inline std::string node_env_value(std::string_view value, std::uint32_t index) {
  std::string out;
  constexpr std::string_view token = "{index}";
  for (std::size_t at = 0;;) {
    auto hit = value.find(token, at);
    out.append(value.substr(at, hit == std::string_view::npos ? value.npos : hit - at));
    if (hit == std::string_view::npos) return out;
    out += std::to_string(index);
    at = hit + token.size();
  }
}

// A launch_error when --env names a node the program does not have.
inline void check_env_nodes(const std::vector<tlaunch::detail::node_info>& nodes,
                            const options& o) {
  for (const auto& [name, vars] : o.env) {
    bool known = false;
    std::string names;
    for (const auto& n : nodes) {
      known = known || n.name == name;
      if (!names.empty()) names += ", ";
      names += n.name;
    }
    if (!known)
      throw launch_error("--env names node '" + name + "', which is not in the program (" +
                         names + ")");
  }
}

// Sets node `name`'s variables for replica `index` in this process.
inline void apply_node_env(const options& o, const std::string& name, std::uint32_t index) {
  auto it = o.env.find(name);
  if (it == o.env.end()) return;
  for (const auto& [key, value] : it->second)
    ::setenv(key.c_str(), node_env_value(value, index).c_str(), 1);
}

// local_mt: every node shares this process's environment, so none can have its own.
inline void refuse_node_env(const options& o) {
  if (o.env.empty()) return;
  throw launch_error("--env gives node '" + o.env.begin()->first +
                     "' an environment of its own, which --launch=local_mt (every node in this "
                     "one process) cannot do; use --launch=local_mp");
}

}  // namespace tlaunch::launch
