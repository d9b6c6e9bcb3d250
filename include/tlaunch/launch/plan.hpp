// One launch, resolved once: the program's nodes with --replicas and --restart applied,
// its colocation groups with --colocate and --no-colocate, and --env checked against
// it. tlaunch::main and tlaunch::start make the plan (plan_launch) before any launcher
// runs, so options that do not fit the program are refused, naming what was wrong,
// before anything starts; every launcher (launch/registry.hpp) then runs the plan it is
// given and resolves nothing again. A node process resolves its own program once as
// well (launch/process/node_process.hpp).
//
// The settings every process's connections share and a process's runtime are made
// from the options here too, in one place.
#pragma once

#include <cstdint>
#include <vector>

#include "../program_view.hpp"
#include "../rpc/runtime.hpp"
#include "colocation.hpp"
#include "decl.hpp"
#include "flags.hpp"

namespace tlaunch::launch {

struct launch_plan {
  // The program (the view refers to the program, which outlives the launch) and the
  // options it runs with.
  tlaunch::detail::program_view program;
  options opt;
  // In program order; replicas and restart policies as the options say.
  std::vector<tlaunch::rpc::node_info> nodes;
  // Instances sharing one process (launch/colocation.hpp), ordered by leader.
  std::vector<colocation_group> groups;

  // Every instance of every node.
  std::uint32_t instances() const { return rpc::instance_count(nodes); }
};

// Resolves p with o; throws launch_error naming a node or an instance of --replicas,
// --restart, --colocate or --env that is not in the program.
TLAUNCH_DECL launch_plan plan_launch(const tlaunch::detail::program_view& p, options o);

// What the options tell every connection, in every process of the launch.
inline rpc::connection_settings connection_settings_of(const tlaunch::launch_settings& s) {
  rpc::connection_settings c;
  c.max_frame = s.max_frame;
  c.handshake_timeout = s.handshake_timeout;
  c.max_unauthenticated = s.max_unauthenticated;
  c.heartbeat = s.heartbeat;
  c.liveness = s.liveness;
  c.tls = s.tls;
  return c;
}

// A process's runtime under the options: `default_threads` io threads unless --threads
// says otherwise (2 under local_mt, 1 in a node process).
inline tlaunch::rpc::runtime_options runtime_options_of(const tlaunch::launch_settings& s,
                                                           unsigned default_threads) {
  tlaunch::rpc::runtime_options r;
  static_cast<rpc::connection_settings&>(r) = connection_settings_of(s);
  r.threads = s.threads ? s.threads : default_threads;
  r.force_wire = s.force_wire;
  r.grace = s.grace;
  r.busy_poll = s.busy_poll;
  r.user_args = s.user_args;
  r.state_dir = s.state_dir;
  r.resume = s.resume;
  r.snapshot_every = s.snapshot_every;
  return r;
}

}  // namespace tlaunch::launch

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_MAIN)
#include "node_env.hpp"

namespace tlaunch::launch {

TLAUNCH_DECL launch_plan plan_launch(const tlaunch::detail::program_view& p, options o) {
  auto nodes = p.describe(o.replicas);
  check_env_nodes(nodes, o);
  apply_restart_flags(nodes, o);
  auto groups = colocation_groups(nodes, p.colocated(), o);
  return launch_plan{p, std::move(o), std::move(nodes), std::move(groups)};
}

}  // namespace tlaunch::launch
#endif
