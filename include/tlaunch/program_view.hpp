// A program seen without its node types: all the launch layer needs of it. The
// launchers, node processes and tlaunch::main's body take a view, so they are plain
// functions, compiled once with TLAUNCH_SEPARATE_COMPILATION (docs/guide/
// building.md); only making the view instantiates the program's node types.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "program.hpp"
#include "rpc/runtime.hpp"

namespace tlaunch::detail {

class program_view {
 public:
  using replica_overrides = std::map<std::string, std::uint32_t>;
  using instance_filter = std::function<bool(std::uint32_t)>;

  // Implicit, so that a launch function takes a program as well as a view. The view
  // refers to p, which must outlive it.
  template <class... Nodes>
  program_view(const program_t<Nodes...>& p)  // NOLINT(google-explicit-constructor)
      : program_(&p), describe_(&describe_as<Nodes...>), host_(&host_as<Nodes...>) {
    for (std::size_t g = 0; g < p.group_count; ++g)
      colocated_.emplace_back(p.groups[g].members.begin(),
                              p.groups[g].members.begin() +
                                  static_cast<std::ptrdiff_t>(p.groups[g].size));
  }

  // The nodes, with --replicas overrides applied (describe() in program.hpp).
  std::vector<rpc::node_info> describe(const replica_overrides& overrides) const {
    return describe_(program_, overrides);
  }
  // Constructs on rt every instance whose flat id `want` accepts, in program order.
  void host(rpc::runtime& rt, const instance_filter& want) const { host_(program_, rt, want); }
  // The colocation groups the program declares (program_t::colocate), as written.
  const std::vector<std::vector<std::string>>& colocated() const { return colocated_; }

 private:
  template <class... Nodes>
  static std::vector<rpc::node_info> describe_as(const void* p, const replica_overrides& overrides) {
    return tlaunch::detail::describe(*static_cast<const program_t<Nodes...>*>(p), overrides);
  }
  template <class... Nodes>
  static void host_as(const void* p, rpc::runtime& rt, const instance_filter& want) {
    host_program(rt, *static_cast<const program_t<Nodes...>*>(p), want);
  }

  const void* program_;
  std::vector<rpc::node_info> (*describe_)(const void*, const replica_overrides&);
  void (*host_)(const void*, rpc::runtime&, const instance_filter&);
  std::vector<std::vector<std::string>> colocated_;
};

}  // namespace tlaunch::detail
