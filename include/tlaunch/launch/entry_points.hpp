// The launch layer's entry points and its launchers' descriptions (name, --help lines, their
// flags), without their bodies: what --launch, --help and tlaunch::main's dispatch need
// (launch/registry.hpp, impl/run_main.hpp, impl/start.hpp). Each entry point is defined in
// its launcher's header (local_mt.hpp, local_mp.hpp, ssh.hpp, slurm.hpp, k8s.hpp, agent.hpp,
// node_process.hpp): header-only, the files that call them include those (registry.hpp,
// impl/run_main.hpp, impl/start.hpp); with TLAUNCH_SEPARATE_COMPILATION each is compiled once
// in the library's part for it (launch/decl.hpp), and a file that dispatches parses none of
// them. A launcher's run() is a template for the same reason: naming the launcher does not
// need its body, only running it does. Every launcher runs a launch_plan (plan.hpp),
// resolved once before it.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "../program_view.hpp"
#include "decl.hpp"
#include "flags.hpp"
#include "launcher.hpp"
#include "plan.hpp"
#include "terminal/output.hpp"

namespace tlaunch::launch {

// ---- Entry points

// Runs the program in this process until it stops; returns the exit code. hooks
// (launcher.hpp): `started` once every node is constructed and running, before waiting
// (the test launch takes the runtime from it); `publish_stop`, `failed`.
TLAUNCH_DECL int run_local_mt(const launch_plan& plan, output_printer& out,
                              const run_hooks& hooks = {});

// hooks (launcher.hpp): with fork_nodes, each node process is a fork of this one that
// runs run_node_process on the program in memory (tlaunch::start: the caller's code
// before the launch does not run again), not this binary executed with its role.
TLAUNCH_DECL int run_local_mp(const launch_plan& plan, output_printer& out,
                              const run_hooks& hooks = {});

// Launches every node of the plan on the hosts of its options (--hosts, --hostfile, --place) and
// runs the program to its end; returns the launcher's exit code. Throws
// launch_error, naming each host, when a host cannot be reached, refuses the key,
// has an unknown or changed host key, or cannot take the binary.
// TLAUNCH_TIMINGS=1 in the environment prints how long each phase took.
TLAUNCH_DECL int run_ssh(const launch_plan& plan, output_printer& out);

// Runs every node of the plan as a task of one srun step in the current allocation and runs the
// program to its end; returns the launcher's exit code. Throws launch_error outside an
// allocation, inside a step of several tasks, or for a --place host not in the allocation.
TLAUNCH_DECL int run_slurm(const launch_plan& plan, output_printer& out);

// --launch=k8s: writes the manifests of the plan's Job, Service and Secret; the exit code.
TLAUNCH_DECL int run_k8s(const launch_plan& plan, output_printer& out);

// A pod of --launch=k8s's Job (--tlaunch-role=k8s): the coordinator or one node.
TLAUNCH_DECL int run_k8s_pod(const tlaunch::detail::program_view& p, const options& o);

// The agent side: what `<binary> --tlaunch-agent` runs (tlaunch::main calls it).
// stopped_limit: a node stopped that long is killed (local_child_options::stopped_limit).
// fork_tail: the arguments the agent itself was started with after --tlaunch-agent, from
// which its main() built the program. A node whose argv ends with them is forked by this
// process's node forker (node_forker.hpp), when it has one; any other is executed.
TLAUNCH_DECL int run_agent(std::chrono::milliseconds stopped_limit = {},
                           const std::vector<std::string>& fork_tail = {});

// A node process: what `<binary> --tlaunch-role=...` runs.
TLAUNCH_DECL int run_node_process(const tlaunch::detail::program_view& p,
                                  const options& given);

// ---- The launchers (launch/launcher.hpp)

namespace detail {

// A DNS label from `s`: lower case, [a-z0-9-], starting with a letter, at most `max`.
inline std::string dns_label(std::string_view s, std::size_t max = 40) {
  std::string out;
  for (char c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (ok)
      out += c;
    else if (!out.empty() && out.back() != '-')
      out += '-';
  }
  if (out.empty() || !(out[0] >= 'a' && out[0] <= 'z')) out.insert(0, "p-");
  if (out.size() > max) out.resize(max);
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

}  // namespace detail

struct local_mt_launcher {
  static constexpr std::string_view name = "local_mt";
  static constexpr std::string_view summary = "every node in this process";
  static constexpr std::string_view usage = "";
  static constexpr std::string_view no_node_processes = "runs every node in this one process";
  static bool parse_flag(options& o, const std::string& f, const flag_reader& r) {
    return no_flags(o, f, r);
  }
  template <class Plan = launch_plan>
  static int run(const Plan& plan, output_printer& out) {
    return run_local_mt(plan, out);
  }
};
static_assert(launcher<local_mt_launcher>);

struct local_mp_launcher {
  static constexpr std::string_view name = "local_mp";
  static constexpr std::string_view summary = "one process per node on this machine";
  static constexpr std::string_view usage = "";
  static constexpr bool forks_nodes = true;
  static bool parse_flag(options& o, const std::string& f, const flag_reader& r) {
    return no_flags(o, f, r);
  }
  template <class Plan = launch_plan>
  static int run(const Plan& plan, output_printer& out) {
    return run_local_mp(plan, out);
  }
};
static_assert(launcher<local_mp_launcher>);

struct ssh_launcher {
  static constexpr std::string_view name = "ssh";
  static constexpr std::string_view summary = "nodes on the SSH hosts of --hosts / --hostfile";
  static constexpr std::string_view usage = R"(SSH (--launch=ssh):
  --ssh-identity=FILE      private key (default: ssh-agent, then ~/.ssh/id_*)
  --ssh-accept-new         accept and record unknown host keys
  --known-hosts=FILE       known_hosts file (default ~/.ssh/known_hosts)
  --ssh-parallel=N         SSH handshakes at once per host (default 8)
  --ssh-cache-dir=DIR      where each host keeps the binary, one folder per build
                           (default ~/.cache/tlaunch; relative to the remote home)
  --ssh-cache-keep=N       builds each host's cache keeps, the most recently used
                           ones (default 3; 0 keeps all)
  --ssh-per-node-exec      start every node through an SSH exec of its own instead of
                           one agent per host (slower: for comparison)
  --ssh-terminal=tmux      deprecated: the same as --terminal=tmux
)";
  static bool parse_flag(options& o, const std::string& name, const flag_reader& r) {
    if (name == "--ssh-identity") {
      o.ssh.identity = r.value();
    } else if (name == "--ssh-accept-new") {
      r.no_value();
      o.ssh.accept_new = true;
    } else if (name == "--known-hosts") {
      o.ssh.known_hosts = r.value();
    } else if (name == "--ssh-terminal") {  // deprecated: --terminal=tmux
      std::string v = r.value();
      if (v != "tmux") throw usage_error("--ssh-terminal: '" + v + "' is not tmux");
      o.terminal = v;
    } else if (name == "--ssh-per-node-exec") {
      r.no_value();
      o.ssh.per_node_exec = true;
    } else if (name == "--ssh-cache-dir") {
      std::string v = r.value();
      if (v.empty()) throw usage_error("--ssh-cache-dir: empty directory");
      o.ssh.cache_dir = v;
    } else if (name == "--ssh-cache-keep") {
      o.ssh.cache_keep = static_cast<unsigned>(detail::parse_uint(name, r.value(), 1000000));
    } else if (name == "--ssh-parallel") {
      o.ssh.parallel = static_cast<unsigned>(detail::parse_uint(name, r.value(), 64));
      if (o.ssh.parallel == 0) throw usage_error("--ssh-parallel: must be at least 1");
    } else {
      return false;
    }
    return true;
  }
  template <class Plan = launch_plan>
  static int run(const Plan& plan, output_printer& out) {
    return run_ssh(plan, out);
  }
};
static_assert(launcher<ssh_launcher>);

struct slurm_launcher {
  static constexpr std::string_view name = "slurm";
  static constexpr std::string_view summary =
      "nodes as the tasks of one srun step, inside an sbatch or salloc allocation";
  static constexpr std::string_view usage = R"(Slurm (--launch=slurm, inside sbatch or salloc):
  --place NAME=NODE1,NODE2  Slurm nodes of the allocation for NAME's replicas
                           (others round-robin over the allocation's nodes)
  --srun-arg=ARG           one more option for srun (repeatable), e.g.
                           --srun-arg=--cpus-per-task=2
)";
  static bool parse_flag(options& o, const std::string& name, const flag_reader& r) {
    if (name != "--srun-arg") return false;
    std::string v = r.value();
    if (v.find('\n') != std::string::npos) throw usage_error("--srun-arg: no newlines");
    o.slurm.srun_args.push_back(v);  // repeatable
    return true;
  }
  template <class Plan = launch_plan>
  static int run(const Plan& plan, output_printer& out) {
    return run_slurm(plan, out);
  }
};
static_assert(launcher<slurm_launcher>);

struct k8s_launcher {
  static constexpr std::string_view name = "k8s";
  static constexpr std::string_view summary =
      "writes Kubernetes manifests (an Indexed Job, a headless Service, a Secret)";
  static constexpr std::string_view no_node_processes =
      "starts nothing on this machine (it writes manifests; the pods' output is in kubectl "
      "logs)";
  static constexpr std::string_view usage =
      R"(Kubernetes (--launch=k8s; writes manifests, `kubectl apply` runs them):
  --k8s-image=IMAGE        the image the pods run (holds this program; required)
  --k8s-binary=PATH        the program's path in the image (default: its path here)
  --k8s-namespace=NS       the namespace of every object (default: default)
  --k8s-name=NAME          the Job's and Service's name (default: tlaunch-<binary>)
  --k8s-out=DIR            write DIR/{job,service,secret}.yaml (default: stdout)
  --k8s-port=PORT          the coordinator pod's port (default 7070)
  --k8s-volcano            schedule with Volcano: a PodGroup of every pod (gang start)
)";
  static bool parse_flag(options& o, const std::string& f, const flag_reader& r) {
    if (f == "--k8s-volcano") {
      r.no_value();
      o.k8s.volcano = true;
      return true;
    }
    if (f != "--k8s-image" && f != "--k8s-binary" && f != "--k8s-namespace" && f != "--k8s-name" &&
        f != "--k8s-out" && f != "--k8s-port")
      return false;
    std::string v = r.value();
    if (f == "--k8s-port") {
      auto port = detail::parse_uint(f, v, 65535);
      if (port == 0) throw usage_error("--k8s-port: must be at least 1");
      o.k8s.port = static_cast<std::uint16_t>(port);
      return true;
    }
    if (f == "--k8s-namespace" && detail::dns_label(v, 63) != v)
      throw usage_error(fmt::format("--k8s-namespace: '{}' is not a DNS label", v));
    if (v.empty()) throw usage_error(f + " needs a value");
    if (f == "--k8s-image")
      o.k8s.image = v;
    else if (f == "--k8s-binary")
      o.k8s.binary = v;
    else if (f == "--k8s-namespace")
      o.k8s.ns = v;
    else if (f == "--k8s-name")
      o.k8s.name = v;
    else
      o.k8s.out_dir = v;
    return true;
  }
  template <class Plan = launch_plan>
  static int run(const Plan& plan, output_printer& out) {
    return run_k8s(plan, out);
  }
};
static_assert(launcher<k8s_launcher>);

}  // namespace tlaunch::launch

