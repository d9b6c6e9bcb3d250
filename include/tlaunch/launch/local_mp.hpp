// local_mp: one process per node instance (or colocation group) on this machine,
// each this same binary started again with its role.
#pragma once

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string_view>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../detail/self_exe.hpp"
#include "../program_view.hpp"
#include "colocation.hpp"
#include "process/coordinator.hpp"
#include "decl.hpp"
#include "entry_points.hpp"
#include "flags.hpp"
#include "launcher.hpp"
#include "process/local_child.hpp"
#include "node_env.hpp"
#include "plan.hpp"
#include "process/node_forker.hpp"
#include "process/node_process.hpp"
#include "terminal/output.hpp"

namespace tlaunch::launch {

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_LOCAL)
TLAUNCH_DECL int run_local_mp(const launch_plan& plan, output_printer& out,
                              const run_hooks& hooks) {
  const auto& p = plan.program;
  const options& o = plan.opt;
  const auto& nodes = plan.nodes;
  warn_ignored_resources(nodes, "local_mp", out);
  coordinator coord(nodes, o, out);
  coord.colocate(plan.groups);
  coord.listen("127.0.0.1");
  std::vector<placement> places;
  std::uint32_t flat = 0;
  for (auto& n : nodes)
    for (std::uint32_t r = 0; r < n.replicas; ++r, ++flat)
      places.push_back({flat, std::string(n.name) + "/" + std::to_string(r), ""});
  std::string exe = hooks.fork_nodes ? "" : tlaunch::detail::self_exe<launch_error>();
  if (hooks.publish_stop)
    hooks.publish_stop([&coord] { coord.request_stop("stop() called by the launching process"); });
  if (hooks.publish_resize)
    hooks.publish_resize([&coord](const std::string& node, std::uint32_t n,
                                  std::function<void(std::string)> done) {
      coord.resize(node, n, std::move(done));
    });
  struct unpublish {
    const std::function<void(std::function<void()>)>& f;
    const std::function<void(run_hooks::resize_fn)>& r;
    ~unpublish() {
      if (f) f({});
      if (r) r({});
    }
  } unpublish_on_return{hooks.publish_stop, hooks.publish_resize};
  local_child_options child_opt;
  child_opt.stopped_limit = stopped_limit(o);  // a stopped node is failed (--liveness)
  int code = coord.run(places, [&](const placement& place, std::uint16_t port,
                                   const std::vector<std::string>& tail, child_callbacks cb) {
    if (hooks.fork_nodes) {
      // The node's options are the launch's own, with its role; the child has no argv.
      options node_o = o;
      node_o.role = place.id;
      // The coordinator's role flag names every member of a colocation group.
      constexpr std::string_view role_flag = "--tlaunch-role=";
      if (!tail.empty() && tail.front().starts_with(role_flag))
        node_o.role = tail.front().substr(role_flag.size());
      node_o.coordinator = "127.0.0.1:" + std::to_string(port);
      return start_forked_child([&p, node_o] { return run_node_process(p, node_o); },
                                std::move(cb), child_opt);
    }
    // Launch flags first: the tail ends with `-- <program arguments>`.
    std::vector<std::string> argv{exe, "--tlaunch-coordinator=127.0.0.1:" + std::to_string(port)};
    argv.insert(argv.end(), tail.begin(), tail.end());
    return start_node_child(argv, std::move(cb), child_opt);
  });
  if (const char* t = std::getenv("TLAUNCH_TIMINGS"); t != nullptr && std::string_view(t) == "1")
    out.print("launcher", stream::err,
              fmt::format("timings: {} nodes; start of the nodes to all registered {} ms; stop {} ms",
                          places.size(), coord.time_to_registered().count(),
                          coord.time_to_stop().count()));
  if (auto f = coord.failure(); f && hooks.failed) hooks.failed(*f);
  return code;
}
#endif


}  // namespace tlaunch::launch
