// What a launcher is: one type per launch type (local_mt, local_mp, ssh, ...), listed
// in launch/registry.hpp, from which --launch, --help and dispatch are made.
//
//   struct my_launcher {
//     static constexpr std::string_view name = "mine";            // --launch=mine
//     static constexpr std::string_view summary = "one line for --help";
//     static constexpr std::string_view usage = "";               // its flags' --help lines
//     static bool parse_flag(options&, const std::string& flag, const flag_reader&);
//     static int run(const launch_plan&, output_printer&);
//   };
//
// run() gets the launch resolved once (launch/plan.hpp: the nodes, the colocation
// groups, the options), places the instances (launch/placement.hpp), starts them (a coordinator and a
// spawn function for launchers of node processes, launch/process/coordinator.hpp), and returns
// the exit code that the program's lifecycle (launch/lifecycle.hpp) ended with. It sees the
// program through a program_view (program_view.hpp: the nodes, and hosting them), so a
// launcher is no template and is compiled once with TLAUNCH_SEPARATE_COMPILATION.
#pragma once

#include <concepts>
#include <functional>
#include <string>
#include <string_view>

#include "../program_view.hpp"
#include "flags.hpp"
#include "lifecycle.hpp"
#include "plan.hpp"
#include "terminal/output.hpp"

namespace tlaunch::launch {

template <class L>
concept launcher = requires(options& o, const std::string& flag, const flag_reader& r,
                            const launch_plan& plan, output_printer& out) {
  { L::name } -> std::convertible_to<std::string_view>;
  { L::summary } -> std::convertible_to<std::string_view>;
  { L::usage } -> std::convertible_to<std::string_view>;
  { L::parse_flag(o, flag, r) } -> std::same_as<bool>;
  { L::run(plan, out) } -> std::same_as<int>;
};

// A launcher's optional traits (one without them has neither):
//   L::no_node_processes  why it has no node processes of its own whose output, counts and
//                         calls pass through this launcher ("runs every node in this one
//                         process"); --terminal, --metrics, --dashboard and --trace are
//                         refused with it. Absent or "": it has such processes.
//   L::forks_nodes        true: its node processes are forked from the node forker, which
//                         tlaunch::main starts first thing (launch/process/node_forker.hpp).
template <class L>
constexpr std::string_view no_node_processes_of() {
  if constexpr (requires { L::no_node_processes; })
    return L::no_node_processes;
  else
    return {};
}
template <class L>
constexpr bool forks_nodes_of() {
  if constexpr (requires { L::forks_nodes; })
    return L::forks_nodes;
  else
    return false;
}

// What a launch from inside a program (tlaunch::start, start.hpp) asks of local_mt and
// local_mp besides running the program; tlaunch::main and test_launch leave most empty.
struct run_hooks {
  // local_mt: called once every node is constructed and running (test_launch's handles).
  std::function<void(tlaunch::rpc::runtime&)> started;
  // Receives a function that begins the program's stop (from any thread), and an empty
  // function once that one must no longer be called.
  std::function<void(std::function<void()>)> publish_stop;
  // Receives a function that resizes an elastic node (coordinator::resize; from any
  // thread), and an empty function once that one must no longer be called (local_mp).
  using resize_fn = std::function<void(const std::string& node, std::uint32_t n,
                                       std::function<void(std::string)> done)>;
  std::function<void(resize_fn)> publish_resize;
  // Called when the program ended with a failure, with the one that counted.
  std::function<void(const failure_report&)> failed;
  // local_mp: fork node processes from this process (the program as it is in memory)
  // instead of executing this binary again (local_child.hpp, start_forked_child).
  bool fork_nodes = false;
};

// For launchers without flags of their own.
inline bool no_flags(options&, const std::string&, const flag_reader&) { return false; }

}  // namespace tlaunch::launch
