// The body of tlaunch::main, for every program: inline in each translation unit that
// includes main.hpp, or, with TLAUNCH_SEPARATE_COMPILATION, compiled once in the library's
// part impl/src/launch_main.hpp (the launchers it calls are compiled in the other launch
// parts, launch/decl.hpp).
#pragma once

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../detail/config.hpp"
#include "../launch/colocation.hpp"
#include "../launch/entry_points.hpp"
#include "../launch/flags.hpp"
#include "../launch/node_env.hpp"
#include "../launch/process/node_forker.hpp"
#include "../launch/process/node_watch.hpp"
#include "../launch/terminal/output.hpp"
#include "../launch/plan.hpp"
#include "../launch/registry.hpp"
#include "../program_view.hpp"

// Header-only: the bodies of the entry points called here.
#if !defined(TLAUNCH_SEPARATE_COMPILATION)
#include "../launch/ssh/agent.hpp"
#include "../launch/cluster/k8s.hpp"
#include "../launch/process/node_process.hpp"
#endif


namespace tlaunch::launch {

TLAUNCH_DECL int run_main(const tlaunch::detail::program_view& p, int argc,
                          const char* const* argv) {
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
  // Node processes are forked from a copy of this process made now, while it is one
  // thread, rather than executed (launch/process/node_forker.hpp).
  std::unique_ptr<launch::node_forker> forker;
  auto start_forker = [&] {
    if (o.exec_nodes) return;
    forker = launch::node_forker::start([p](const std::vector<std::string>& args) {
      std::vector<const char*> av;
      for (const auto& a : args) av.push_back(a.c_str());
      av.push_back(nullptr);
      return run_main(p, static_cast<int>(args.size()), av.data());
    });
  };
  try {
    // The agent is started with the arguments its nodes get after their role
    // (after --tlaunch-agent, ending with `-- <program arguments>`), so main() built the program
    // the nodes run: it forks its nodes from a copy of itself made now, as local_mp does.
    if (o.agent) {
      start_forker();
      std::vector<std::string> fork_tail;
      for (int i = 1; i < argc; ++i)
        if (std::string_view(argv[i]) == "--tlaunch-agent") {
          fork_tail.assign(argv + i + 1, argv + argc);
          break;
        }
      return launch::run_agent(launch::stopped_limit(o), fork_tail);
    }
    // A node process that a cluster manager started: watched by a parent of its own.
    if (o.watch && !o.role.empty())
      if (auto code = launch::watch_node_process(launch::stopped_limit(o))) return *code;
    // a pod of --launch=k8s's Job, or of its restart Job
    if (o.role == "k8s" || o.role == "k8s-restart") return launch::run_k8s_pod(p, o);
    if (!o.role.empty()) return launch::run_node_process(p, o);
    // Resolved once, before anything starts: --replicas, --restart, --colocate and --env
    // name only nodes and instances of the program.
    auto plan = launch::plan_launch(p, o);
    const auto launchers = launch::registered_launchers::table();
    if (const auto* l = launchers.find(o.launch); l && l->forks_nodes) start_forker();
    launch::output_printer out(o.color, o.log_dir);
    return launch::registered_launchers::run(plan, out);
  } catch (const launch_error& e) {
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", prog, e.what());
    return 1;
  }
}

}  // namespace tlaunch::launch

