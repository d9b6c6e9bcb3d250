// Colocation groups: which instances share one node process. The program declares
// groups (program_t::colocate), --colocate adds groups that take their members out of
// the program's, --no-colocate drops the program's. A member is "node" (every replica)
// or "node/INDEX" (one replica). docs/guide/colocation.md.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../error.hpp"
#include "flags.hpp"

namespace tlaunch::launch {

// Instances in one process: flat ids, ascending; the first is the group's leader (its
// place and its process stand for the group).
using colocation_group = std::vector<std::uint32_t>;

namespace detail {

template <class Nodes>
std::vector<std::uint32_t> colocation_member(const Nodes& nodes, const std::string& member,
                                             const std::string& source, bool declared) {
  auto slash = member.find('/');
  std::string name = member.substr(0, slash);
  std::string names;
  std::uint32_t first = 0;  // node_info::first is set by the runtime, not describe()
  for (const auto& n : nodes) {
    names.append(names.empty() ? "" : ", ").append(n.name);
    if (n.name != name) {
      first += n.replicas;
      continue;
    }
    bool elastic = false;
    if constexpr (requires { n.elastic; }) elastic = n.elastic;
    if (elastic)
      throw launch_error(source + " names '" + member + "', a replica of elastic node '" + name +
                         "': elastic nodes run each replica in a process of its own");
    if (slash == std::string::npos) {
      std::vector<std::uint32_t> all;
      for (std::uint32_t r = 0; r < n.replicas; ++r) all.push_back(first + r);
      return all;
    }
    std::string index = member.substr(slash + 1);
    std::uint64_t i = n.replicas;
    if (!index.empty() && index.size() < 10 &&
        std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; }))
      i = std::stoull(index);
    // The program's groups name replicas that --replicas may have removed: those drop out.
    if (i >= n.replicas && declared) return {};
    if (i >= n.replicas)
      throw launch_error(source + " names '" + member + "', but node '" + name + "' has " +
                         std::to_string(n.replicas) + " replica" + (n.replicas == 1 ? "" : "s") +
                         " (0 to " + std::to_string(n.replicas - 1) + ")");
    return {first + static_cast<std::uint32_t>(i)};
  }
  throw launch_error(source + " names node '" + name + "', which is not in the program (nodes: " +
                     names + ")");
}

}  // namespace detail

// The groups of two or more instances, ordered by leader; throws launch_error naming a
// member that is not an instance of the program, or an instance put in two groups.
// `nodes` is a range of things with `name` and `replicas` (node_info), in program order.
template <class Nodes>
std::vector<colocation_group> colocation_groups(const Nodes& nodes,
                                               const std::vector<std::vector<std::string>>& declared,
                                               const options& o) {
  std::uint32_t total = 0;
  for (const auto& n : nodes) total += n.replicas;
  std::vector<int> group_of(total, -1);
  std::vector<colocation_group> groups;
  std::vector<std::string> sources;
  auto add = [&](const std::vector<std::string>& members, const std::string& source,
                 bool declared) {
    colocation_group g;
    for (const auto& m : members)
      for (std::uint32_t f : detail::colocation_member(nodes, m, source, declared)) {
        if (std::find(g.begin(), g.end(), f) != g.end()) continue;
        if (group_of[f] >= 0) {
          if (declared) continue;  // --colocate took it
          throw launch_error(source + " puts '" + m + "' in a second group (it is in " +
                             sources[static_cast<std::size_t>(group_of[f])] + ")");
        }
        g.push_back(f);
      }
    for (std::uint32_t f : g) group_of[f] = static_cast<int>(groups.size());
    groups.push_back(std::move(g));
    sources.push_back(source);
  };
  for (const auto& v : o.colocate) add(detail::split(v, ','), std::string("--colocate ").append(v), false);
  if (!o.no_colocate)
    for (const auto& d : declared) {
      std::string spelled;
      for (const auto& m : d) spelled.append(spelled.empty() ? "\"" : ", \"").append(m).append("\"");
      add(d, std::string("the program's colocate<").append(spelled).append(">"), true);
    }
  std::vector<colocation_group> out;
  for (auto& g : groups) {
    if (g.size() < 2) continue;  // one instance: a process of its own, as without a group
    std::sort(g.begin(), g.end());
    out.push_back(std::move(g));
  }
  std::sort(out.begin(), out.end(),
            [](const colocation_group& a, const colocation_group& b) { return a[0] < b[0]; });
  return out;
}

// For each flat id, the leader of its group (itself when it has none).
inline std::vector<std::uint32_t> colocation_leaders(const std::vector<colocation_group>& groups,
                                                     std::uint32_t total) {
  std::vector<std::uint32_t> leader(total);
  for (std::uint32_t f = 0; f < total; ++f) leader[f] = f;
  for (const auto& g : groups)
    for (std::uint32_t f : g) leader[f] = g[0];
  return leader;
}

// The node processes in start order, each the flat ids it hosts (its leader first): a lone
// instance, or a group at its leader's place. Process p is --launch=slurm's task p and
// --launch=k8s's completion index p; without groups, process p is instance p.
inline std::vector<colocation_group> colocation_processes(
    const std::vector<colocation_group>& groups, std::uint32_t total) {
  auto leader = colocation_leaders(groups, total);
  std::vector<colocation_group> out;
  for (std::uint32_t f = 0; f < total; ++f) {
    if (leader[f] != f) continue;
    auto g = std::find_if(groups.begin(), groups.end(),
                          [f](const colocation_group& x) { return x[0] == f; });
    out.push_back(g == groups.end() ? colocation_group{f} : *g);
  }
  return out;
}

// Whether flat id f starts with the program: every replica of a node, of an elastic node
// the first `initial` (the others start with a resize). `nodes` as for colocation_groups.
template <class Nodes>
bool starts_at_launch(const Nodes& nodes, std::uint32_t f) {
  std::uint32_t first = 0;
  for (const auto& n : nodes) {
    if (f < first + n.replicas) return !n.elastic || f - first < n.initial;
    first += n.replicas;
  }
  return false;
}

// colocation_processes of the processes that start with the program: --launch=slurm's
// first step's tasks, in rank order. (An elastic node is in no group.)
template <class Nodes>
std::vector<colocation_group> launch_processes(const Nodes& nodes,
                                               const std::vector<colocation_group>& groups) {
  std::uint32_t total = 0;
  for (const auto& n : nodes) total += n.replicas;
  auto all = colocation_processes(groups, total);
  std::erase_if(all, [&](const colocation_group& g) { return !starts_at_launch(nodes, g[0]); });
  return all;
}

}  // namespace tlaunch::launch
