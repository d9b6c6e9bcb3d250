// Per-node environment and resource hints.
//
// Environment: node<"x", X>().env(KEY, VALUE) in the program and `--env NAME:KEY=VALUE` on
// the command line (the flag wins for the same KEY); "{index}" in VALUE becomes the
// replica's index. A node process sets its variables itself, first thing (before its node
// is constructed and before any thread of its own starts), so every launcher of node
// processes (local_mp, ssh, slurm, k8s) applies them alike; local_mt, where one process
// hosts every node, refuses them.
//
// Resources: node<"x", X>().resources({.cpus, .gpus, .memory_mb}) are hints; slurm maps
// them onto srun options and k8s onto pod requests/limits (both run one template for every
// instance, so each gets the largest hint); the others ignore them with a warning.
#pragma once

#include <stdlib.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "../error.hpp"
#include "../program.hpp"
#include "flags.hpp"
#include "terminal/output.hpp"

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
inline void check_env_nodes(const std::vector<tlaunch::rpc::node_info>& nodes,
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

// Node n's variables, unexpanded: the program's .env() in order, then --env's; a KEY
// given by both keeps its place and takes the flag's value.
inline std::vector<std::pair<std::string, std::string>> node_env_vars(
    const tlaunch::rpc::node_info& n, const options& o) {
  std::vector<std::pair<std::string, std::string>> vars;
  auto set = [&](std::string_view key, std::string_view value) {
    for (auto& v : vars)
      if (v.first == key) {
        v.second = std::string(value);
        return;
      }
    vars.emplace_back(std::string(key), std::string(value));
  };
  for (const auto& [key, value] : n.env) set(key, value);
  if (auto it = o.env.find(std::string(n.name)); it != o.env.end())
    for (const auto& [key, value] : it->second) set(key, value);
  return vars;
}

// Sets node n's variables for replica `index` in this process.
inline void apply_node_env(const tlaunch::rpc::node_info& n, const options& o,
                           std::uint32_t index) {
  for (const auto& [key, value] : node_env_vars(n, o))
    ::setenv(key.c_str(), node_env_value(value, index).c_str(), 1);
}

// The hint every instance gets when one template serves them all (an srun step, a pod
// template): the largest of each. `differ` is set when the nodes' hints are not all alike.
inline tlaunch::node_resources largest_resources(
    const std::vector<tlaunch::rpc::node_info>& nodes, bool* differ = nullptr) {
  tlaunch::node_resources r;
  bool first = true, unlike = false;
  for (const auto& n : nodes) {
    if (!first && !(n.resources == r)) unlike = true;
    r.cpus = std::max(r.cpus, n.resources.cpus);
    r.gpus = std::max(r.gpus, n.resources.gpus);
    r.memory_mb = std::max(r.memory_mb, n.resources.memory_mb);
    first = false;
  }
  if (differ) *differ = unlike;
  return r;
}

inline std::string describe_resources(const tlaunch::node_resources& r) {
  std::string s;
  auto add = [&](std::string part) { s += (s.empty() ? "" : ", ") + part; };
  if (r.cpus) add(fmt::format("{} cpus", r.cpus));
  if (r.gpus) add(fmt::format("{} gpus", r.gpus));
  if (r.memory_mb) add(fmt::format("{} MB", r.memory_mb));
  return s.empty() ? "none" : s;
}

// For a launcher that cannot honour resource hints: one line naming the nodes that have
// some, or "" when none does.
inline std::string ignored_resources_warning(const std::vector<tlaunch::rpc::node_info>& nodes,
                                             std::string_view launcher) {
  std::string named;
  for (const auto& n : nodes)
    if (n.resources.any())
      named += fmt::format("{}{} ({})", named.empty() ? "" : ", ", n.name,
                           describe_resources(n.resources));
  if (named.empty()) return "";
  return fmt::format("--launch={} ignores the resource hints of {}", launcher, named);
}

inline void warn_ignored_resources(const std::vector<tlaunch::rpc::node_info>& nodes,
                                   std::string_view launcher, output_printer& out) {
  if (auto w = ignored_resources_warning(nodes, launcher); !w.empty())
    out.print("launcher", stream::err, w);
}

// The same warning where one template serves every instance (slurm, k8s), or "".
inline std::string largest_resources_warning(const std::vector<tlaunch::rpc::node_info>& nodes,
                                             std::string_view launcher) {
  bool differ = false;
  auto r = largest_resources(nodes, &differ);
  if (!differ) return "";
  return fmt::format(
      "--launch={} gives every instance the same resources, the largest hint of any node: {}",
      launcher, describe_resources(r));
}

// local_mt runs every node in this one process, so what is about processes does not apply:
// a node's own environment (.env(), --env; every node shares this process's), restart
// policies (a failure stops the program) and resource hints. The program runs anyway (it is
// the launch to debug it in), with this one line naming what does not apply, or "" when all
// of it does. Colocation needs no line: every node shares this process already.
inline std::string one_process_warning(const std::vector<tlaunch::rpc::node_info>& nodes,
                                       const options& o) {
  // "'a'", "'a' and 'b'", "'a', 'b' and 'c'"
  auto names = [](const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i)
      s += (i == 0 ? "" : i + 1 == v.size() ? " and " : ", ") + v[i];
    return s;
  };
  std::vector<std::string> env, restart, resources;
  for (const auto& n : nodes) {
    if (!n.env.empty() || o.env.count(std::string(n.name)))
      env.push_back(fmt::format("'{}'", n.name));
    if (n.restart.max_restarts > 0) restart.push_back(fmt::format("'{}'", n.name));
    if (n.resources.any())
      resources.push_back(fmt::format("'{}' ({})", n.name, describe_resources(n.resources)));
  }
  std::vector<std::string> parts;
  if (!env.empty())
    parts.push_back(fmt::format("the environment of {} (every node shares this process's)",
                                names(env)));
  if (!restart.empty())
    parts.push_back(fmt::format("the restart policy of {} (a failure stops the program)",
                                names(restart)));
  if (!resources.empty()) parts.push_back("the resource hints of " + names(resources));
  if (parts.empty()) return "";
  std::string line = "--launch=local_mt runs every node in this one process and does not apply ";
  for (std::size_t i = 0; i < parts.size(); ++i) line += (i == 0 ? "" : "; ") + parts[i];
  return line;
}

}  // namespace tlaunch::launch
