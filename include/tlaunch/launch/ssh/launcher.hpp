// ssh: node processes on other hosts. The launcher opens an SSH session to every
// host (in parallel), copies this binary by SFTP into a cache keyed by its build
// id, and starts it once per host as an agent (launch/ssh/agent.hpp), through the login
// shell; the agent forks that host's nodes. The nodes dial back to the coordinator
// on an address of this machine that the host reaches, as with any launcher: the
// agent relays only their output, exit statuses, stdin and kills.
// --ssh-per-node-exec starts each node through an exec channel of its own instead
// (the path before the agent, kept for the launch benchmark's comparison).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "../../detail/build_id.hpp"
#include "../../detail/self_exe.hpp"
#include "../../program_view.hpp"
#include "agent.hpp"
#include "../colocation.hpp"
#include "../process/coordinator.hpp"
#include "../decl.hpp"
#include "../entry_points.hpp"
#include "../flags.hpp"
#include "../launcher.hpp"
#include "../node_env.hpp"
#include "../terminal/output.hpp"
#include "../placement.hpp"
#include "upload_progress.hpp"
#include "session.hpp"

namespace tlaunch::launch {

namespace detail {

// The agent's exec channel opens as soon as a host's session is up, while the binary is
// checked or uploaded: the remote login shell's start-up (~/.bashrc, pyenv, conda: often
// most of an SSH launch) runs meanwhile. The shell execs sh (any login shell can: a
// single-quoted word), which waits for one line on stdin, the agent's command line,
// and execs it; what follows on stdin is the agent's (sh's read takes one line, no more).
constexpr std::string_view agent_gate = R"(exec /bin/sh -c 'IFS= read -r c && eval "exec $c"')";

// Callbacks of a process started before the code that reads it exists: what arrives
// meanwhile (a login shell's own output) is kept and passed on at bind().
class late_callbacks : public std::enable_shared_from_this<late_callbacks> {
 public:
  child_callbacks make() {
    auto self = shared_from_this();
    return {[self](stream s, std::string_view l) { self->line(s, l); },
            [self](const exit_status& es) { self->exit(es); }};
  }
  void bind(child_callbacks cb) {
    std::lock_guard lk(mu_);
    cb_ = std::move(cb);
    bound_ = true;
    for (auto& [s, l] : early_)
      if (cb_.on_line) cb_.on_line(s, l);
    early_.clear();
    if (exited_) finish(status_);
  }

 private:
  void line(stream s, std::string_view l) {
    std::lock_guard lk(mu_);
    if (bound_) {
      if (cb_.on_line) cb_.on_line(s, l);
    } else if (early_.size() < 100) {
      early_.emplace_back(s, std::string(l));
    }
  }
  void exit(const exit_status& es) {
    std::lock_guard lk(mu_);
    if (bound_) return finish(es);
    exited_ = true;
    status_ = es;
  }
  void finish(const exit_status& es) {
    auto f = std::move(cb_.on_exit);
    cb_ = {};
    if (f) f(es);
  }
  std::mutex mu_;
  child_callbacks cb_;
  bool bound_ = false, exited_ = false;
  exit_status status_;
  std::vector<std::pair<stream, std::string>> early_;
};

}  // namespace detail

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_SSH)
TLAUNCH_DECL int run_ssh(const launch_plan& plan, output_printer& out) {
  const auto began = std::chrono::steady_clock::now();
  const options& o = plan.opt;
  const auto& nodes = plan.nodes;
  const auto& groups = plan.groups;
  warn_ignored_resources(nodes, "ssh", out);
  auto hosts = listed_hosts(o.hosts, o.hostfile, "ssh");
  const std::uint32_t instances = plan.instances();
  auto places = place_instances(nodes, o.place, hosts, colocation_leaders(groups, instances));

  // Per-node exec: sshd allows 10 sessions (channels) per connection by default, so 8
  // nodes a connection. With agents: one connection, one channel per host.
  const bool per_node = o.ssh.per_node_exec;
  constexpr std::size_t nodes_per_session = 8;
  std::map<std::string, std::size_t> per_host;
  for (auto& pl : places) ++per_host[pl.host];

  ssh::session_options so;
  so.identity = o.ssh.identity;
  so.accept_new = o.ssh.accept_new;
  so.known_hosts = o.ssh.known_hosts;
  so.liveness_ms = static_cast<long>(o.liveness.count());
  if (!o.ssh.cache_dir.empty()) so.cache_dir = o.ssh.cache_dir;
  if (o.ssh.cache_keep) so.cache_keep = *o.ssh.cache_keep;

  struct host_sessions {
    std::vector<std::unique_ptr<ssh::session>> sessions;
    std::string remote_path, error;
    std::size_t next = 0, used = 0;
    // The agent's login shell, started while the binary uploads (agent_gate).
    std::shared_ptr<detail::late_callbacks> agent_cb;
    child_ptr agent_shell;
  };
  std::map<std::string, host_sessions> by_host;
  for (auto& [h, n] : per_host) by_host[h];

  std::string exe = tlaunch::detail::self_exe<launch_error>();
  std::string build_id = tlaunch::detail::file_build_id(exe);

  // Every host at once; per host at most --ssh-parallel handshakes at a time.
  std::vector<std::thread> workers;
  std::mutex mu;
  auto sessions_up = began;  // when the last host's sessions were logged in
  for (auto& [h, count] : per_host) {
    workers.emplace_back([&, h = h, count = count] {
      auto& hs = by_host[h];
      try {
        auto spec = ssh::host_spec::parse(h);
        std::size_t want = per_node ? (count + nodes_per_session - 1) / nodes_per_session : 1;
        std::vector<std::unique_ptr<ssh::session>> got(want);
        for (std::size_t base = 0; base < want; base += o.ssh.parallel) {
          std::vector<std::future<void>> batch;
          for (std::size_t i = base; i < std::min(want, base + o.ssh.parallel); ++i)
            batch.push_back(std::async(std::launch::async, [&, i] {
              got[i] = std::make_unique<ssh::session>(ssh::session::connect(spec, so));
            }));
          for (auto& f : batch) f.get();
        }
        {
          std::lock_guard lk(mu);
          sessions_up = std::max(sessions_up, std::chrono::steady_clock::now());
        }
        // Destroyed before the sessions (`got`) when the upload fails.
        std::shared_ptr<detail::late_callbacks> agent_cb;
        child_ptr agent_shell;
        if (!per_node) {
          agent_cb = std::make_shared<detail::late_callbacks>();
          agent_shell = got[0]->exec(std::string(detail::agent_gate), agent_cb->make());
        }
        ssh::upload_progress progress(h, ::isatty(STDERR_FILENO) == 1);
        hs.remote_path = got[0]->upload_cached(exe, build_id, [&](std::uint64_t done, std::uint64_t total) {
          if (auto line = progress.update(done, total, ssh::upload_progress::clock::now()))
            out.print("launcher", stream::err, *line);
        });
        if (got[0]->last_upload_skipped())
          out.print("launcher", stream::err, h + ": binary already cached (" + build_id + ")");
        auto [removed, prune_error] = got[0]->last_upload_pruned();
        if (!removed.empty())
          out.print("launcher", stream::err,
                    fmt::format("{}: removed {} older build{} from the cache (--ssh-cache-keep={})",
                                h, removed.size(), removed.size() == 1 ? "" : "s", so.cache_keep));
        if (!prune_error.empty())
          out.print("launcher", stream::err, h + ": could not prune the binary cache: " + prune_error);
        std::lock_guard lk(mu);
        hs.agent_cb = std::move(agent_cb);
        hs.agent_shell = std::move(agent_shell);
        hs.sessions = std::move(got);
      } catch (const std::exception& e) {
        std::lock_guard lk(mu);
        hs.error = e.what();
      }
    });
  }
  for (auto& w : workers) w.join();
  std::string errors;
  for (auto& [h, hs] : by_host)
    if (!hs.error.empty()) errors += "\n  " + hs.error;
  if (!errors.empty()) throw launch_error("cannot start nodes over ssh:" + errors);

  const auto launched = std::chrono::steady_clock::now();
  coordinator coord(nodes, o, out);
  coord.colocate(groups);
  // The nodes dial the local address of their SSH connection: when one of those is IPv6,
  // listen on "::" (dual-stack on Linux) so that IPv4 and IPv6 hosts both reach us.
  bool any_v6 = false;
  for (auto& [h, hs] : by_host)
    for (auto& s : hs.sessions) any_v6 = any_v6 || s->local_address().find(':') != std::string::npos;
  coord.listen(!o.coordinator_host.empty() ? o.coordinator_host : any_v6 ? "::" : "0.0.0.0");
  // Agent mode: each host's agent starts with the first node placed there.
  std::map<std::string, std::shared_ptr<agent_link>> agents;
  auto dial_address = [&](ssh::session& s, std::uint16_t port) {
    std::string dial = o.coordinator_host.empty() ? s.local_address() : o.coordinator_host;
    if (dial.find(':') != std::string::npos) dial = "[" + dial + "]";
    return "--tlaunch-coordinator=" + dial + ":" + std::to_string(port);
  };
  int code = coord.run(places, [&](const placement& pl, std::uint16_t port,
                                   const std::vector<std::string>& tail, child_callbacks cb) {
    auto& hs = by_host[pl.host];
    if (!per_node) {
      auto& s = *hs.sessions[0];
      auto& link = agents[pl.host];
      if (!link) {
        link = agent_link::start(
            [&](child_callbacks acb) {
              // The agent kills a node stopped for two --liveness intervals. After
              // --tlaunch-agent come the arguments every node gets after its role (the
              // same for every node of the launch, and for restarts): the agent's main()
              // builds the program from them, and forks nodes from it (agent.hpp).
              std::string cmd = ssh::shell_quote(hs.remote_path);
              cmd += fmt::format(" --liveness={:g}", o.liveness.count() / 1000.0);
              if (o.exec_nodes) cmd += " --exec-nodes";
              cmd += " --tlaunch-agent";
              constexpr std::string_view role_flag = "--tlaunch-role=";
              for (std::size_t i = 0; i < tail.size(); ++i)
                if (i != 0 || !tail[i].starts_with(role_flag)) cmd += " " + ssh::shell_quote(tail[i]);
              if (!hs.agent_shell) return s.exec("exec " + cmd, std::move(acb));
              // The shell started at the upload (agent_gate) is waiting for this line.
              hs.agent_cb->bind(std::move(acb));
              hs.agent_shell->write_stdin(cmd + "\n");
              return std::move(hs.agent_shell);
            },
            pl.host,
            [&out, where = "agent@" + pl.host](stream st, std::string_view line) {
              out.print(where, st, line);
            });
      }
      // Launch flags first: the tail ends with `-- <program arguments>`.
      std::vector<std::string> args{dial_address(s, port)};
      args.insert(args.end(), tail.begin(), tail.end());
      return link->spawn(args, std::move(cb));
    }
    auto& s = *hs.sessions[(hs.used++ / nodes_per_session) % hs.sessions.size()];
    // Launch flags first: the tail ends with `-- <program arguments>`.
    // No agent beside the node to see it stop: it watches itself (node_watch.hpp).
    std::string cmd = "exec " + ssh::shell_quote(hs.remote_path) + " " +
                      ssh::shell_quote(dial_address(s, port)) + " --tlaunch-watch";
    for (auto& a : tail) cmd += " " + ssh::shell_quote(a);
    return s.exec(cmd, std::move(cb));
  });
  // When the last host's agent ran, from the start of the nodes (its login shell, mostly).
  std::string agents_up;
  if (!agents.empty()) {
    auto last = coord.run_started();
    bool all = true;
    for (auto& [h, link] : agents) {
      auto r = link->ready_at();
      all = all && r.has_value();
      if (r) last = std::max(last, *r);
    }
    if (all)
      agents_up = fmt::format("agents up {} ms; ", std::chrono::duration_cast<std::chrono::milliseconds>(
                                                      last - coord.run_started()).count());
  }
  agents.clear();  // EOF to each agent: it exits
  if (const char* t = std::getenv("TLAUNCH_TIMINGS"); t != nullptr && std::string_view(t) == "1") {
    auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
    out.print("launcher", stream::err,
              fmt::format("timings: {} nodes on {} hosts{}; ssh sessions {} ms; upload {} ms; "
                          "{}start of the nodes to all registered {} ms; stop {} ms; total {} ms",
                          places.size(), by_host.size(), per_node ? " (per-node exec)" : "",
                          ms(sessions_up - began), ms(launched - sessions_up), agents_up,
                          coord.time_to_registered().count(), coord.time_to_stop().count(),
                          ms(std::chrono::steady_clock::now() - began)));
  }
  return code;
}
#endif


}  // namespace tlaunch::launch
