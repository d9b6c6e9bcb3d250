// The launchers --launch chooses from. Adding one: its launcher type (see
// launch/launcher.hpp: its name, --help lines, flags and run, and the optional traits that
// say whether it has node processes here and forks them) in launch/entry_points.hpp, its
// body in a header of its own, and one entry in registered_launchers below; --launch,
// --help, the flags that need node processes, the node forker and dispatch follow from
// this list.
#pragma once

#include <string>
#include <string_view>

#include "../error.hpp"
#include "../program_view.hpp"
#include "entry_points.hpp"
#include "flags.hpp"
#include "launcher.hpp"
#include "plan.hpp"
#include "terminal/output.hpp"

// Header-only: the launchers' bodies, which running them needs.
#if !defined(TLAUNCH_SEPARATE_COMPILATION)
#include "cluster/k8s.hpp"
#include "local_mp.hpp"
#include "local_mt.hpp"
#include "cluster/slurm.hpp"
#include "ssh/launcher.hpp"
#endif

namespace tlaunch::launch {

template <launcher... L>
struct launcher_list {
  static launcher_table table() {
    return launcher_table{{launcher_table::entry{L::name, L::summary, L::usage, &L::parse_flag,
                                                 no_node_processes_of<L>(),
                                                 forks_nodes_of<L>()}...}};
  }

  // Runs the plan with the launcher its options' --launch names.
  static int run(const launch_plan& plan, output_printer& out) {
    int code = 0;
    bool found = false;
    const std::string& name = plan.opt.launch;
    (void)((name == L::name ? (found = true, code = L::run(plan, out), true) : false) || ...);
    if (!found) throw launch_error("--launch: no launcher is named '" + name + "'");
    return code;
  }
};

using registered_launchers = launcher_list<local_mt_launcher, local_mp_launcher, ssh_launcher,
                                           slurm_launcher, k8s_launcher>;

// The command line, with every registered launcher's flags.
inline options parse(int argc, const char* const* argv) {
  return parse(argc, argv, registered_launchers::table());
}

// --help: the common flags, then each registered launcher's.
inline std::string usage(std::string_view prog) {
  return usage(prog, registered_launchers::table());
}

}  // namespace tlaunch::launch
