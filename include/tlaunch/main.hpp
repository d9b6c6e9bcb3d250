// tlaunch::main: one entry point that is the launcher and every node.
#pragma once

#include <cstdio>
#include <exception>
#include <string>

#include "launch/agent.hpp"
#include "launch/flags.hpp"
#include "launch/node_env.hpp"
#include "launch/node_process.hpp"
#include "launch/output.hpp"
#include "launch/registry.hpp"
#include "program.hpp"

namespace tlaunch {

// Parses the command line, then runs the program with the launcher --launch names
// (launch/registry.hpp), or as one node when started with --tlaunch-role. Returns the process exit code:
// 0 when the program stopped normally, 1 when a node failed, 2 on bad usage.
template <class... Nodes>
int main(const program_t<Nodes...>& p, int argc, const char* const* argv) {
  const char* prog = argc > 0 ? argv[0] : "tlaunch-program";
  launch::options o;
  try {
    o = launch::parse(argc, argv);
  } catch (const launch::usage_error& e) {
    std::fprintf(stderr, "%s: %s\n\n%s", prog, e.what(), launch::usage(prog).c_str());
    return 2;
  }
  if (o.help) {
    std::fputs(launch::usage(prog).c_str(), stdout);
    return 0;
  }
  try {
    if (o.agent) return launch::run_agent();
    if (o.role == "k8s") return launch::run_k8s_pod(p, o);  // a pod of --launch=k8s's Job
    if (!o.role.empty()) return launch::run_node_process(p, o);
    launch::check_env_nodes(tlaunch::detail::describe(p, o.replicas), o);
    launch::output_printer out(launch::parse_color_mode(o.color), o.log_dir);
    return launch::registered_launchers::run(p, o, out);
  } catch (const launch_error& e) {
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return 1;
  }
}

template <class... Nodes>
int main(const program_t<Nodes...>& p, int argc, char** argv) {
  return tlaunch::main(p, argc, const_cast<const char* const*>(argv));
}

}  // namespace tlaunch
