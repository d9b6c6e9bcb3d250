// The launcher's command line. Every flag takes `--flag=value` or `--flag value`;
// the program's own arguments follow `--`.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../error.hpp"
#include "../launch_options.hpp"

namespace tlaunch::launch {

// A bad command line; what() says which flag and why.
class usage_error : public tlaunch::error {
 public:
  using tlaunch::error::error;
};

// The built-in launchers' own flags, typed; each launcher's parse_flag fills its own
// (launch/entry_points.hpp).
struct ssh_flags {
  std::string identity;                // --ssh-identity ("": ssh-agent, then ~/.ssh/id_*)
  bool accept_new = false;             // --ssh-accept-new
  std::string known_hosts;             // --known-hosts ("": ~/.ssh/known_hosts)
  unsigned parallel = 8;               // --ssh-parallel
  std::string cache_dir;               // --ssh-cache-dir ("": the default)
  std::optional<unsigned> cache_keep;  // --ssh-cache-keep
  bool per_node_exec = false;          // --ssh-per-node-exec
};
struct slurm_flags {
  std::vector<std::string> srun_args;  // --srun-arg, in order
};
// --launch=k8s's flags, with their defaults; k8s_resolved (launch/cluster/k8s.hpp) fills in
// what depends on the binary (the name, the binary's path) and checks the image.
struct k8s_flags {
  std::string out_dir;         // --k8s-out ("": stdout)
  std::string image;           // --k8s-image (required)
  std::string ns = "default";  // --k8s-namespace
  std::string name;            // --k8s-name (default: tlaunch-<binary>)
  std::string binary;          // --k8s-binary: the program's path in the image
  std::uint16_t port = 7070;   // --k8s-port: the coordinator's
  bool volcano = false;        // --k8s-volcano
};

// Every flag as a field: the user's settings (launch_options.hpp, what tlaunch::start
// takes as well) and what only the command line sets: any registered launcher, the
// hosts, ssh's settings, a node process's role.
struct options : tlaunch::launch_settings {
  std::string launch = "local_mt";
  // --terminal=tmux: a tmux window per node process (launch/terminal/tmux.hpp); "" none.
  // --terminal-close: the launcher closes the session when the program ends.
  std::string terminal;
  bool terminal_close = false;
  // placement (launch/placement.hpp)
  std::vector<std::string> hosts;
  std::string hostfile;
  std::map<std::string, std::vector<std::string>> place;
  std::string coordinator_host;  // address remote nodes dial back
  // --metrics=ADDR:PORT: the launcher serves its processes' metrics in Prometheus's format;
  // --dashboard=ADDR:PORT: a live page of the program (launch/observe/); --endpoint-token:
  // the token both require off loopback ("": derived from the launch secret and printed).
  std::string metrics, dashboard, endpoint_token;
  // --trace=FILE: the launcher writes the calls of sampled traces there (Chrome trace
  // events); --trace-sample=FRACTION: the fraction of calls made outside a trace that start
  // one (default 1). A node process gets the fraction alone: it records, the launcher writes.
  std::string trace;
  std::optional<double> trace_sample;
  ssh_flags ssh;
  slurm_flags slurm;
  k8s_flags k8s;
  // Flags of other launchers (registered by a program of its own: launch/registry.hpp),
  // as given ("--flag" -> value; "" for a flag without one), after the launcher's
  // parse_flag accepted them.
  std::map<std::string, std::string> launcher_flags;
  // node process (set by the launcher, never by hand)
  std::string role;
  bool agent = false;  // --tlaunch-agent: start a host's nodes for a launcher (launch/ssh/agent.hpp)
  // --tlaunch-watch: a node process forks a watch that kills it when it stays stopped
  // (launch/process/node_watch.hpp): for nodes that a cluster manager starts.
  bool watch = false;
  // --exec-nodes: local_mp (and ssh's agent) executes the binary for each node process instead of forking
  // it from a copy made at start-up (launch/process/node_forker.hpp).
  bool exec_nodes = false;
  std::string coordinator;
  // --tlaunch-incarnation=N: the launcher's count of this instance's restarts (0 at launch).
  std::uint32_t incarnation = 0;
  bool help = false;
  // SIGINT and SIGTERM stop the program (tlaunch::main). tlaunch::start sets it false: a
  // launch inside a larger program leaves the process's signal dispositions alone.
  bool handle_signals = true;
  // Flags a node process must see to build the same program.
  std::vector<std::string> passthrough;
};

// How long a node process may stay stopped (SIGSTOP) before the process that started it
// (the launcher under local_mp, the host's agent under ssh) kills it as failed: two
// --liveness intervals, the same as a connection's unacknowledged limit (0: never).
inline std::chrono::milliseconds stopped_limit(const options& o) { return o.liveness * 2; }

// A flag's value as parse() reads it, for a launcher's own flags.
class flag_reader {
 public:
  flag_reader(std::function<std::string()> value, std::function<void()> no_value)
      : value_(std::move(value)), no_value_(std::move(no_value)) {}
  // The value (`--flag=value` or `--flag value`); a usage_error when there is none.
  std::string value() const { return value_(); }
  // For a flag without a value: a usage_error when one was given.
  void no_value() const { no_value_(); }

 private:
  std::function<std::string()> value_;
  std::function<void()> no_value_;
};

// What parse() and usage() know of the launchers; launch/registry.hpp builds it from
// the registered launchers.
struct launcher_table {
  struct entry {
    std::string_view name;     // the --launch value
    std::string_view summary;  // one line for --help
    std::string_view usage;    // its own flags, as lines of --help ("" if none)
    // Takes one of its own flags into `o` and returns true; false for a flag it does not
    // know. Throws usage_error for a bad value.
    bool (*parse_flag)(options& o, const std::string& name, const flag_reader& r);
    // Its traits (launch/launcher.hpp): why it has no node processes here ("": it has), and
    // whether it forks them from tlaunch::main's node forker.
    std::string_view no_node_processes = {};
    bool forks_nodes = false;
  };
  std::vector<entry> entries;
  // The entry named `name`; null when there is none.
  const entry* find(std::string_view name) const {
    for (const auto& e : entries)
      if (e.name == name) return &e;
    return nullptr;
  }
};

inline std::string usage(std::string_view prog, const launcher_table& launchers) {
  std::string types;
  for (const auto& l : launchers.entries)
    types += "                           " + std::string(l.name) + ": " + std::string(l.summary) +
             "\n";
  std::string u = "usage: " + std::string(prog) + R"( [flags] [-- program arguments]

Launch:
  --launch=TYPE            how to run the nodes (default local_mt):
)" + types + R"(  --replicas NAME=N[,...]  override a node's replica count (repeatable)
  --restart NAME=N[,...]   restart a failed instance of node NAME in a fresh process
                           up to N times within its policy's window (default 60 s;
                           0: never); local_mp, ssh, slurm and k8s (repeatable)
  --colocate NAME[,NAME...]  host these nodes (all their replicas) or replicas
                           (NAME/INDEX) in one process, replacing the program's
                           groups that name them (local_mp, ssh, slurm, k8s;
                           repeatable)
  --no-colocate            ignore the program's colocation groups
  --threads=N              io threads per process (default: 2 for local_mt, 1 per
                           node process, where the thread that reads also replies)
  --busy-poll=MICROSECONDS  io threads poll this long for work before they sleep,
                           and connections poll their sockets as long after their
                           last bytes: lower latency, a busy core per process
                           (default 0: off)
  --grace=SECONDS          time nodes get to stop before they are killed (default 5)
  --start-timeout=SECONDS  time for every node to register (default 60)
  --log-dir=DIR            also write each node's output to DIR/<node>.<i>.log
  --color=auto|always|never  color the [node/i] prefixes (default auto)
  --terminal=tmux          also show every node process's output live in a tmux
                           session on this machine, one window each (its name is
                           printed: tmux attach -t NAME); closing the session stops
                           the program (exit 143); when the program ends the
                           windows stay until closed (local_mp, ssh, slurm)
  --terminal-close         close that session when the program ends
  --exec-nodes             local_mp and ssh's agents execute this binary for each
                           node process instead of forking it from a copy of the
                           process made at start-up
  --force-wire             local_mt: calls between nodes go over TCP (for tests)
  --max-frame=BYTES        largest frame accepted on a connection (default 268435456);
                           a connection whose peer leaves 4 times as much (at least
                           64 MiB) unread is closed
  --handshake-timeout=SECONDS  an accepted connection that has not completed its hello
                           exchange by then is closed (default 5; 0: no deadline)
  --max-unauthenticated=N  accepted connections that may be in their hello
                           exchange at once, per process; more are closed at once
                           (default 256, at least the program's instances + 64)
  --heartbeat=SECONDS      every connection sends a heartbeat that often and is
                           closed when its peer sends nothing for three times as
                           long: calls in flight on it fail as unavailable
                           (default 0: off)
  --liveness=SECONDS       TCP keepalive that often on every connection (also
                           ssh's), which fails when its peer's host acknowledges
                           nothing for twice as long, and a node process stopped
                           (SIGSTOP) that long is killed as failed; a busy process
                           is never taken as gone (default 1; 0: kernel defaults)
  --tls                    encrypt every connection between processes (TLS 1.3,
                           keyed from the launch's secret: no files to manage);
                           local_mt makes no connections unless --force-wire
Observe:
  --metrics=ADDR:PORT      serve every node process's metrics (calls, errors and
                           latency per edge, calls served, CPU, memory, the nodes'
                           own) in Prometheus's text format at
                           http://ADDR:PORT/metrics, gathered every second (port 0:
                           any free one, printed; local_mp, ssh, slurm)
  --dashboard=ADDR:PORT    serve a live page of the program at http://ADDR:PORT/:
                           its graph with calls per second and p99 on each edge,
                           its processes (host, pid, state, restarts, memory, CPU,
                           last output), each method's rate and latency, and the
                           launcher's events (local_mp, ssh, slurm)
  --endpoint-token=TOKEN   the token --metrics and --dashboard require off
                           loopback (Authorization: Bearer TOKEN, or ?token=TOKEN);
                           default: derived from the launch secret and printed
  --trace=FILE             write the calls of sampled traces to FILE as Chrome trace
                           events (open it in Perfetto or chrome://tracing): caller,
                           callee, method, start, duration, bytes and outcome of each
                           call and of each call it made in turn, across processes
                           and hosts, on the launcher's clock (local_mp, ssh, slurm)
  --trace-sample=FRACTION  the fraction of calls made outside a trace that start one
                           (0 to 1, default 1); calls made while serving a traced call
                           are always in its trace
State (docs/guide/state.md):
  --state-dir=DIR          nodes with state write snapshots under DIR/NODE/INDEX on
                           their host (periodic, on demand, and at a graceful stop;
                           each keeps its newest 3, or its policy's .keep); a
                           restarted instance loads its latest
  --resume=DIR             like --state-dir=DIR, and every node loads its latest
                           snapshot there first: a new launch goes on from where a
                           stopped or killed one was
  --snapshot-every=SECONDS  snapshot every node with state this often, in place of
                           each node's own .snapshot({.every = ...}) (0: never)
Placement (launchers that run nodes on other hosts):
  --hosts=H1,[USER@]H2[:PORT],...   hosts to run nodes on (round-robin by default)
  --hostfile=FILE          one host per line, optional "slots=N"
  --place NAME=H1,H2       put node NAME's replicas on these hosts (repeatable)
  --coordinator-host=ADDR  address the hosts reach this machine at
                           (default: the local address of each host's connection)
  --env NAME:KEY=VALUE     set KEY in node NAME's processes ("{index}" in VALUE
                           becomes the replica's index; repeatable; local_mt
                           warns that it does not apply)
)";
  for (const auto& l : launchers.entries)
    if (!l.usage.empty())
      u += std::string(l.usage);
  u += "  --help                   this text\n";
  return u;
}

namespace detail {

inline std::uint64_t parse_uint(std::string_view flag, const std::string& v, std::uint64_t max) {
  std::size_t pos = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(v, &pos);
  } catch (...) {
    pos = 0;
  }
  if (v.empty() || pos != v.size() || v[0] == '-' || n > max)
    throw usage_error(std::string(flag) + ": '" + v + "' is not a number from 0 to " +
                      std::to_string(max));
  return n;
}

inline std::chrono::milliseconds parse_seconds(std::string_view flag, const std::string& v) {
  std::size_t pos = 0;
  double s = -1;
  try {
    s = std::stod(v, &pos);
  } catch (...) {
  }
  if (pos != v.size() || !(s >= 0) || s > 1e6)
    throw usage_error(std::string(flag) + ": '" + v + "' is not a number of seconds");
  return std::chrono::milliseconds(static_cast<long long>(s * 1000));
}

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

}  // namespace detail

// --terminal, --metrics, --dashboard and --trace need node processes whose output, counts
// and calls pass through this launcher: the launcher --launch names must have them.
inline void check_watchable(const options& o, const launcher_table& launchers) {
  if (o.terminal_close && o.terminal.empty())
    throw usage_error("--terminal-close: there is no --terminal=tmux session to close");
  const auto* l = launchers.find(o.launch);
  if (!l || l->no_node_processes.empty()) return;
  const std::string why = "--launch=" + o.launch + " " + std::string(l->no_node_processes) +
                          ", so there are no node processes whose ";
  const std::string instead = "; use --launch=local_mp (or ssh, slurm)";
  if (!o.terminal.empty())
    throw usage_error("--terminal=" + o.terminal + ": " + why + "output a window could follow" +
                      instead);
  for (const auto& [flag, value] : {std::pair<std::string, std::string>{"--metrics", o.metrics},
                                     {"--dashboard", o.dashboard}, {"--trace", o.trace}})
    if (!value.empty())
      throw usage_error(flag + "=" + value + ": " + why +
                        (flag == "--trace" ? "calls" : "counts") +
                        " the launcher could gather" + instead);
}

// Parses the command line; the launchers' own flags go to their parse_flag.
inline options parse(int argc, const char* const* argv, const launcher_table& launchers) {
  options o;
  std::vector<std::string> a(argv + 1, argv + argc);
  for (std::size_t i = 0; i < a.size(); ++i) {
    std::string arg = a[i];
    if (arg == "--") {
      o.user_args.assign(a.begin() + static_cast<long>(i) + 1, a.end());
      o.passthrough.push_back("--");
      o.passthrough.insert(o.passthrough.end(), o.user_args.begin(), o.user_args.end());
      break;
    }
    if (arg.rfind("--", 0) != 0)
      throw usage_error("unexpected argument '" + arg +
                        "' (program arguments go after `--`)");
    std::string name = arg, value;
    bool has_value = false;
    if (auto eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto need = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= a.size() || a[i + 1].rfind("--", 0) == 0)
        throw usage_error(name + " needs a value");
      return a[++i];
    };
    auto flag_only = [&] {
      if (has_value) throw usage_error(name + " takes no value");
    };
    if (name == "--help" || name == "-h") {
      o.help = true;
    } else if (name == "--launch") {
      o.launch = need();
      std::string names;
      bool known = false;
      for (const auto& l : launchers.entries) {
        names += (names.empty() ? "" : ", ") + std::string(l.name);
        known = known || l.name == o.launch;
      }
      if (!known) throw usage_error("--launch: '" + o.launch + "' is not one of " + names);
    } else if (name == "--replicas") {
      std::string v = need();
      for (const auto& item : detail::split(v, ',')) {
        auto eq = item.find('=');
        if (eq == std::string::npos || eq == 0)
          throw usage_error("--replicas: '" + item + "' is not NAME=N");
        o.replicas[item.substr(0, eq)] = static_cast<std::uint32_t>(
            detail::parse_uint("--replicas", item.substr(eq + 1), 100000));
      }
      o.passthrough.push_back("--replicas=" + v);
    } else if (name == "--restart") {
      for (const auto& item : detail::split(need(), ',')) {
        auto eq = item.find('=');
        if (eq == std::string::npos || eq == 0)
          throw usage_error("--restart: '" + item + "' is not NAME=N");
        o.restart[item.substr(0, eq)] = static_cast<std::uint32_t>(
            detail::parse_uint("--restart", item.substr(eq + 1), 1000000));
      }
    } else if (name == "--colocate") {
      std::string v = need();
      auto members = detail::split(v, ',');
      for (const auto& m : members)
        if (m.empty()) throw usage_error("--colocate: '" + v + "' has an empty member");
      if (members.size() < 2 && v.find('/') != std::string::npos)
        throw usage_error("--colocate: '" + v + "' names one replica; a group needs two instances");
      o.colocate.push_back(v);
    } else if (name == "--no-colocate") {
      flag_only();
      o.no_colocate = true;
    } else if (name == "--threads") {
      std::string v = need();
      o.threads = static_cast<unsigned>(detail::parse_uint(name, v, 256));
      if (o.threads == 0) throw usage_error("--threads: must be at least 1");
      o.passthrough.push_back("--threads=" + v);
    } else if (name == "--busy-poll") {
      std::string v = need();
      o.busy_poll = std::chrono::microseconds(detail::parse_uint(name, v, 1000000));
      o.passthrough.push_back("--busy-poll=" + v);
    } else if (name == "--grace") {
      std::string v = need();
      o.grace = detail::parse_seconds(name, v);
      o.passthrough.push_back("--grace=" + v);
    } else if (name == "--start-timeout") {
      o.start_timeout = detail::parse_seconds(name, need());
    } else if (name == "--log-dir") {
      o.log_dir = need();
    } else if (name == "--color") {
      std::string v = need();
      if (v == "auto")
        o.color = output_color::automatic;
      else if (v == "always")
        o.color = output_color::always;
      else if (v == "never")
        o.color = output_color::never;
      else
        throw usage_error("--color: '" + v + "' is not one of auto, always, never");
    } else if (name == "--terminal") {
      o.terminal = need();
      if (o.terminal != "tmux") throw usage_error("--terminal: '" + o.terminal + "' is not tmux");
    } else if (name == "--terminal-close") {
      flag_only();
      o.terminal_close = true;
    } else if (name == "--force-wire") {
      flag_only();
      o.force_wire = true;
    } else if (name == "--max-frame") {
      std::string v = need();
      o.max_frame = static_cast<std::uint32_t>(detail::parse_uint(name, v, 0xffffffffu));
      if (o.max_frame < 1024) throw usage_error("--max-frame: must be at least 1024");
      o.passthrough.push_back("--max-frame=" + v);
    } else if (name == "--handshake-timeout") {
      std::string v = need();
      o.handshake_timeout = detail::parse_seconds(name, v);
      o.passthrough.push_back("--handshake-timeout=" + v);
    } else if (name == "--max-unauthenticated") {
      std::string v = need();
      o.max_unauthenticated = static_cast<std::uint32_t>(detail::parse_uint(name, v, 1000000));
      if (o.max_unauthenticated == 0) throw usage_error("--max-unauthenticated: must be at least 1");
      o.passthrough.push_back("--max-unauthenticated=" + v);
    } else if (name == "--heartbeat") {
      std::string v = need();
      o.heartbeat = detail::parse_seconds(name, v);
      o.passthrough.push_back("--heartbeat=" + v);
    } else if (name == "--liveness") {
      std::string v = need();
      o.liveness = detail::parse_seconds(name, v);
      if (o.liveness.count() > 0 && o.liveness < std::chrono::milliseconds(100))
        throw usage_error("--liveness: '" + v + "' is below 0.1 s (0 turns it off)");
      o.passthrough.push_back("--liveness=" + v);
    } else if (name == "--tls") {
      flag_only();
      o.tls = true;
      o.passthrough.push_back("--tls");
    } else if (name == "--metrics") {
      o.metrics = need();
      if (o.metrics.find(':') == std::string::npos)
        throw usage_error("--metrics: '" + o.metrics + "' is not ADDR:PORT (e.g. 127.0.0.1:9100)");
    } else if (name == "--trace") {
      o.trace = need();
      if (o.trace.empty()) throw usage_error("--trace: the file name is empty");
    } else if (name == "--trace-sample") {
      std::string v = need();
      std::size_t pos = 0;
      double f = -1;
      try {
        f = std::stod(v, &pos);
      } catch (...) {
      }
      if (pos != v.size() || !(f >= 0 && f <= 1))
        throw usage_error("--trace-sample: '" + v + "' is not a fraction from 0 to 1");
      o.trace_sample = f;
    } else if (name == "--dashboard") {
      o.dashboard = need();
      if (o.dashboard.find(':') == std::string::npos)
        throw usage_error("--dashboard: '" + o.dashboard + "' is not ADDR:PORT (e.g. 127.0.0.1:8080)");
    } else if (name == "--endpoint-token") {
      o.endpoint_token = need();
      if (o.endpoint_token.empty()) throw usage_error("--endpoint-token: the token is empty");
    } else if (name == "--hosts") {
      for (auto& h : detail::split(need(), ',')) o.hosts.push_back(h);
    } else if (name == "--hostfile") {
      o.hostfile = need();
    } else if (name == "--place") {
      std::string v = need();
      auto eq = v.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
        throw usage_error("--place: '" + v + "' is not NAME=HOST[,HOST...]");
      o.place[v.substr(0, eq)] = detail::split(v.substr(eq + 1), ',');
    } else if (name == "--coordinator-host") {
      o.coordinator_host = need();
    } else if (name == "--env") {
      std::string v = need();
      auto colon = v.find(':');
      auto eq = v.find('=', colon == std::string::npos ? 0 : colon);
      if (colon == std::string::npos || colon == 0 || eq == std::string::npos || eq == colon + 1)
        throw usage_error("--env: '" + v + "' is not NAME:KEY=VALUE");
      o.env[v.substr(0, colon)].emplace_back(v.substr(colon + 1, eq - colon - 1), v.substr(eq + 1));
      o.passthrough.push_back("--env=" + v);
    } else if (name == "--state-dir" || name == "--resume") {
      std::string v = need();
      if (v.empty()) throw usage_error(name + ": needs a directory");
      if (!o.state_dir.empty() && o.state_dir != v)
        throw usage_error(name + "=" + v + ": the state directory is already " + o.state_dir);
      o.state_dir = v;
      if (name == "--resume") o.resume = true;
      o.passthrough.push_back(name + "=" + v);
    } else if (name == "--snapshot-every") {
      std::string v = need();
      o.snapshot_every = detail::parse_seconds(name, v);
      o.passthrough.push_back("--snapshot-every=" + v);
    } else if (name == "--tlaunch-incarnation") {
      o.incarnation = static_cast<std::uint32_t>(detail::parse_uint(name, need(), 1u << 30));
    } else if (name == "--tlaunch-role") {
      o.role = need();
    } else if (name == "--tlaunch-agent") {
      flag_only();
      o.agent = true;
    } else if (name == "--tlaunch-watch") {
      flag_only();
      o.watch = true;
    } else if (name == "--exec-nodes") {
      flag_only();
      o.exec_nodes = true;
    } else if (name == "--tlaunch-coordinator") {
      o.coordinator = need();
    } else {
      flag_reader r(need, flag_only);
      bool taken = false;
      for (const auto& l : launchers.entries)
        if (!taken && l.parse_flag) taken = l.parse_flag(o, name, r);
      if (!taken) throw usage_error("unknown flag '" + name + "'");
    }
  }
  if (!o.role.empty() && o.coordinator.empty())
    throw usage_error("--tlaunch-role needs --tlaunch-coordinator");
  check_watchable(o, launchers);
  if (o.trace_sample && o.trace.empty() && o.role.empty() && !o.agent)  // a launcher
    throw usage_error("--trace-sample: there is no --trace=FILE to write the traces to");
  if (!o.trace.empty()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", o.trace_sample.value_or(1.0));
    // Before the program's own arguments ("--" and what follows), which are passed on too.
    auto at = std::find(o.passthrough.begin(), o.passthrough.end(), std::string("--"));
    o.passthrough.insert(at, std::string("--trace-sample=") + buf);
  }
  if (o.snapshot_every.count() >= 0 && o.state_dir.empty())
    throw usage_error("--snapshot-every: there is no --state-dir=DIR to write the snapshots to");
  if (!o.endpoint_token.empty() && o.metrics.empty() && o.dashboard.empty())
    throw usage_error("--endpoint-token: there is no --metrics or --dashboard endpoint to protect");
  return o;
}

// The options of a launch from inside a program (tlaunch::start): its settings and the
// launcher's name.
inline options to_options(const tlaunch::launch_options& l) {
  options o;
  static_cast<tlaunch::launch_settings&>(o) = l;
  o.launch = l.launch == tlaunch::launcher::local_mp ? "local_mp" : "local_mt";
  return o;
}

// Applies --restart to the program's nodes (anything with `name` and `restart`, the
// node_info of rpc/runtime.hpp); a launch_error names a node that is not in the program.
template <class NodeInfos>
void apply_restart_flags(NodeInfos& nodes, const options& o) {
  for (const auto& [name, n] : o.restart) {
    bool found = false;
    for (auto& i : nodes)
      if (i.name == name) {
        i.restart.max_restarts = n;
        found = true;
      }
    if (!found) {
      std::string names;
      for (auto& i : nodes) names += (names.empty() ? "" : ", ") + std::string(i.name);
      throw launch_error("--restart names node '" + name +
                         "', which is not in the program (nodes: " + names + ")");
    }
  }
}

}  // namespace tlaunch::launch
