// One agent per host: the binary started once on a host with --tlaunch-agent starts that
// host's node processes itself, so a launch pays the remote login shell once per host, not
// once per node. It is started with the launch flags and program arguments its nodes get,
// builds the same program, and forks the nodes from a copy of itself made at its start
// (node_forker.hpp), as local_mp's launcher does. Both ends of the agent's protocol live here.
//
// The protocol is lines on the agent's stdin and stdout (an SSH exec channel, or pipes in a
// test). Launcher -> agent:
//   start ID HEX(arg) HEX(arg)...   start this binary with these arguments as node ID
//                                   (refused while ID's process runs; allowed after it ended)
//   in ID HEX(bytes)                bytes for node ID's stdin (the launch secret goes this way)
//   close ID                        EOF on node ID's stdin (a tlaunch node stops)
//   kill ID                         SIGKILL to node ID's process group
// Agent -> launcher:
//   ready                           the agent runs (its host's login shell is done)
//   o ID TEXT / e ID TEXT           one line of node ID's stdout / stderr
//   x ID CODE SIGNAL SIGNAME [HEX(cause)]  node ID ended ("-" for no signal name); after
//                                   its lines; the cause when the agent killed it (stopped)
//   f ID HEX(message)               node ID could not be started
// EOF on the agent's stdin (the launcher ended or died, even by SIGKILL) makes the agent
// kill every node it started and exit: nothing is left behind on the host.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../../detail/line_splitter.hpp"
#include "../../detail/secret.hpp"
#include "../../detail/self_exe.hpp"
#include "../process/child.hpp"
#include "../decl.hpp"
#include "../entry_points.hpp"
#include "../process/local_child.hpp"
#include "../process/node_forker.hpp"

namespace tlaunch::launch {

namespace detail {

inline std::string hex(std::string_view s) {
  return tlaunch::detail::to_hex(
      {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()});
}
inline bool unhex(std::string_view h, std::string& out) {
  auto b = tlaunch::detail::from_hex(h);
  if (!b) return false;
  out.assign(b->begin(), b->end());
  return true;
}
inline std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> w;
  while (!line.empty()) {
    auto sp = line.find(' ');
    if (sp != 0) w.push_back(line.substr(0, sp));
    if (sp == std::string_view::npos) break;
    line.remove_prefix(sp + 1);
  }
  return w;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------
// The agent side: what `<binary> --tlaunch-agent` runs (tlaunch::main calls it).

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_NODE)
TLAUNCH_DECL int run_agent(std::chrono::milliseconds stopped_limit,
                           const std::vector<std::string>& fork_tail) {
  // The launcher's end may vanish: a write to it then fails with EPIPE, never kills us
  // before we kill our nodes. Node processes start with SIGPIPE at its default again.
  ::signal(SIGPIPE, SIG_IGN);
  std::string exe;
  try {
    exe = tlaunch::detail::self_exe();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tlaunch agent: %s\n", e.what());
    return 2;
  }
  auto out_mu = std::make_shared<std::mutex>();
  // One write per line, under a lock: lines of different nodes never interleave.
  auto emit = [out_mu](std::string line) {
    line.push_back('\n');
    std::lock_guard lk(*out_mu);
    std::string_view rest = line;
    while (!rest.empty()) {
      ssize_t n = ::write(1, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the launcher is gone; EOF on stdin follows
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
  };

  std::map<std::string, child_ptr> nodes;
  auto command = [&](std::string_view line) {
    auto w = detail::words(line);
    if (w.size() < 2) return;
    std::string id(w[1]);
    if (w[0] == "start") {
      // A second start of a running id would drop (and wait for) the first node; one
      // whose process ended may start again (a restart).
      if (auto it = nodes.find(id); it != nodes.end()) {
        if (it->second->running())
          return emit("f " + id + " " + detail::hex("already started"));
        nodes.erase(it);
      }
      std::vector<std::string> argv{exe};
      for (std::size_t i = 2; i < w.size(); ++i) {
        std::string a;
        if (!detail::unhex(w[i], a)) return emit("f " + id + " " + detail::hex("garbled start command"));
        argv.push_back(std::move(a));
      }
      child_callbacks cb;
      cb.on_line = [emit, id](stream s, std::string_view l) {
        std::string m(s == stream::out ? "o " : "e ");
        m.append(id).append(" ").append(l);
        emit(std::move(m));
      };
      cb.on_exit = [emit, id](const exit_status& st) {
        std::string m("x ");
        m.append(id).append(" ").append(std::to_string(st.code)).append(" ");
        m.append(std::to_string(st.signal)).append(" ");
        m.append(st.signal_name.empty() ? std::string("-") : st.signal_name);
        if (!st.cause.empty()) m.append(" ").append(detail::hex(st.cause));
        emit(std::move(m));
      };
      try {
        local_child_options opt;
        opt.stopped_limit = stopped_limit;
        bool same_program = argv.size() > fork_tail.size() &&
                            std::equal(fork_tail.begin(), fork_tail.end(),
                                       argv.end() - static_cast<long>(fork_tail.size()));
        nodes[id] = same_program ? start_node_child(argv, std::move(cb), opt)
                                 : start_local_child(argv, std::move(cb), opt);
      } catch (const std::exception& e) {
        emit("f " + id + " " + detail::hex(e.what()));
      }
      return;
    }
    auto it = nodes.find(id);
    if (it == nodes.end()) return;
    if (w[0] == "in" && w.size() == 3) {
      std::string bytes;
      if (detail::unhex(w[2], bytes)) it->second->write_stdin(bytes);
    } else if (w[0] == "close") {
      it->second->close_stdin();
    } else if (w[0] == "kill") {
      it->second->kill();
    }
  };

  emit("ready");
  tlaunch::detail::line_splitter lines;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    lines.feed({buf, static_cast<std::size_t>(n)}, command);
  }
  // The launcher is gone (or done): no node outlives it.
  for (auto& [id, c] : nodes) c->kill();
  nodes.clear();  // each waits for its process and reports its exit, if anyone still reads
  return 0;
}
#endif

// ---------------------------------------------------------------------------------------
// The launcher side: one agent_link per host, and a child per node started through it.

class agent_link : public std::enable_shared_from_this<agent_link> {
 public:
  // Starts the agent through start_agent (an SSH exec channel of `exec <binary>
  // --tlaunch-agent`, or a local process in tests), which is given the callbacks of the
  // agent's own output. agent_line receives what the agent (or the shell before it) prints
  // that is not a node's: its own stderr, say. `host` is what node children report.
  static std::shared_ptr<agent_link> start(
      const std::function<child_ptr(child_callbacks)>& start_agent, std::string host,
      std::function<void(stream, std::string_view)> agent_line) {
    auto link = std::shared_ptr<agent_link>(new agent_link(std::move(host)));
    auto st = link->state_;
    st->agent_line = std::move(agent_line);
    child_callbacks cb;
    cb.on_line = [st](stream s, std::string_view l) { st->line(s, l); };
    cb.on_exit = [st](const exit_status& es) { st->agent_exited(es); };
    link->agent_ = start_agent(std::move(cb));
    return link;
  }

  agent_link(const agent_link&) = delete;
  agent_link& operator=(const agent_link&) = delete;
  ~agent_link() {
    // EOF on the agent's stdin: it kills what is left and exits.
    if (agent_) agent_->close_stdin();
  }

  // Starts a node: this binary with `args` on the agent's host; cb as for any child.
  child_ptr spawn(const std::vector<std::string>& args, child_callbacks cb) {
    std::string id;
    {
      std::lock_guard lk(state_->mu);
      id = std::to_string(state_->next_id++);
      auto& n = state_->nodes[id];
      n.cb = std::move(cb);
      if (state_->agent_done) {  // the agent is gone already: the node ends at once
        n.exited = true;
        auto on_exit = std::move(n.cb.on_exit);
        if (on_exit) on_exit(state_->agent_status);
      }
    }
    std::string cmd = "start " + id;
    for (auto& a : args) cmd.append(" ").append(detail::hex(a));
    send(cmd);
    return std::make_unique<node>(shared_from_this(), id);
  }

  // The agent's own process (tests look at it).
  child& agent() { return *agent_; }

  // When the agent said it runs (the login shell before it done), if it has.
  std::optional<std::chrono::steady_clock::time_point> ready_at() const {
    std::lock_guard lk(state_->mu);
    return state_->ready_at;
  }

 private:
  struct node_entry {
    child_callbacks cb;
    bool exited = false;
  };
  struct state {
    std::recursive_mutex mu;  // a callback may drop a node child, which takes it again
    std::map<std::string, node_entry> nodes;
    std::uint64_t next_id = 0;
    std::string host;
    std::function<void(stream, std::string_view)> agent_line;
    bool agent_done = false;
    exit_status agent_status;
    std::optional<std::chrono::steady_clock::time_point> ready_at;
    std::vector<std::string> agent_err;  // the agent's last stderr lines

    void line(stream s, std::string_view l) {
      if (s == stream::out && l == "ready") {
        std::lock_guard lk(mu);
        if (!ready_at) {
          ready_at = std::chrono::steady_clock::now();
          return;
        }
      } else if (s == stream::out && l.size() >= 3 && l[1] == ' ' &&
          std::string_view("oexf").find(l[0]) != std::string_view::npos) {
        auto sp = l.find(' ', 2);
        std::string id(l.substr(2, sp == std::string_view::npos ? sp : sp - 2));
        std::string_view rest = sp == std::string_view::npos ? std::string_view() : l.substr(sp + 1);
        std::lock_guard lk(mu);
        auto it = nodes.find(id);
        if (it != nodes.end()) return node_line(it->second, l[0], rest);
      } else {
        std::lock_guard lk(mu);
        agent_err.emplace_back(l);
        if (agent_err.size() > 5) agent_err.erase(agent_err.begin());
      }
      if (agent_line) agent_line(s, l);
    }

    void node_line(node_entry& n, char kind, std::string_view rest) {
      if (n.exited) return;
      if (kind == 'o' || kind == 'e') {
        if (n.cb.on_line) n.cb.on_line(kind == 'o' ? stream::out : stream::err, rest);
        return;
      }
      exit_status es;
      if (kind == 'x') {
        std::istringstream in{std::string(rest)};
        std::string name;
        in >> es.code >> es.signal >> name;
        if (name != "-") es.signal_name = name;
        if (std::string cause; in >> cause) detail::unhex(cause, es.cause);
      } else {  // f: could not start
        std::string why;
        if (!detail::unhex(rest, why)) why = "cannot start (agent's report garbled)";
        if (n.cb.on_line) n.cb.on_line(stream::err, why);
        es.code = 127;
      }
      n.exited = true;
      auto on_exit = std::move(n.cb.on_exit);
      n.cb = {};
      if (on_exit) on_exit(es);
    }

    void agent_exited(const exit_status& es) {
      std::lock_guard lk(mu);
      agent_done = true;
      agent_status = es;
      if (agent_status.ok())
        agent_status.unknown = "the agent on " + host + " ended before this node did";
      else if (agent_status.cause.empty() && (es.signal != 0 || !es.signal_name.empty()))
        // A signal that ended the agent, not the node (an exit code of the agent's, a shell
        // that cannot exec it, comes with its last lines).
        agent_status.cause = "its agent on " + host + " died";
      for (auto& [id, n] : nodes) {
        if (n.exited) continue;
        // Its last words (a shell's "Permission denied", a lost connection) say why.
        if (!es.ok() && n.cb.on_line)
          for (auto& l : agent_err) n.cb.on_line(stream::err, l);
        n.exited = true;
        auto on_exit = std::move(n.cb.on_exit);
        n.cb = {};
        if (on_exit) on_exit(agent_status);
      }
    }
  };

  class node final : public child {
   public:
    node(std::shared_ptr<agent_link> link, std::string id)
        : link_(std::move(link)), id_(std::move(id)) {}
    ~node() override {
      bool running = false;
      {
        std::lock_guard lk(link_->state_->mu);  // once this returns, no callback of ours runs
        auto it = link_->state_->nodes.find(id_);
        if (it == link_->state_->nodes.end()) return;
        running = !it->second.exited;
        link_->state_->nodes.erase(it);
      }
      if (running) link_->send("kill " + id_);
    }
    void write_stdin(std::string_view data) override {
      link_->send("in " + id_ + " " + detail::hex(data));
    }
    void close_stdin() override { link_->send("close " + id_); }
    void kill() override { link_->send("kill " + id_); }
    bool running() const override {
      std::lock_guard lk(link_->state_->mu);
      auto it = link_->state_->nodes.find(id_);
      return it != link_->state_->nodes.end() && !it->second.exited;
    }
    std::string host() const override { return link_->state_->host; }
    long pid() const override { return -1; }

   private:
    std::shared_ptr<agent_link> link_;
    std::string id_;
  };

  explicit agent_link(std::string host) : state_(std::make_shared<state>()) {
    state_->host = std::move(host);
  }
  void send(std::string line) {
    line.push_back('\n');
    agent_->write_stdin(line);
  }

  std::shared_ptr<state> state_;
  child_ptr agent_;
};

}  // namespace tlaunch::launch
