// ssh: node processes on other hosts. The launcher opens SSH sessions to every
// host (in parallel), copies this binary by SFTP into a cache keyed by its build
// id, and starts each node there with its role; the nodes dial back to the
// coordinator on an address of this machine that the host reaches.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../detail/build_id.hpp"
#include "../detail/self_exe.hpp"
#include "../program.hpp"
#include "coordinator.hpp"
#include "flags.hpp"
#include "output.hpp"
#include "ssh_session.hpp"

namespace tlaunch::launch {

namespace detail {

// Hosts from --hosts and --hostfile; a host with slots=N appears N times in the
// round-robin order.
inline std::vector<std::string> ssh_hosts(const options& o) {
  std::vector<std::string> hosts = o.hosts;
  if (!o.hostfile.empty()) {
    std::ifstream in(o.hostfile);
    if (!in) throw launch_error("--hostfile: cannot read " + o.hostfile);
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
      std::istringstream words(line);
      std::string host, word;
      if (!(words >> host)) continue;
      unsigned slots = 1;
      while (words >> word) {
        if (word.rfind("slots=", 0) == 0) {
          try {
            slots = static_cast<unsigned>(std::stoul(word.substr(6)));
          } catch (...) {
            slots = 0;
          }
          if (slots == 0 || slots > 4096)
            throw launch_error(o.hostfile + ":" + std::to_string(lineno) + ": bad '" + word + "'");
        } else {
          throw launch_error(o.hostfile + ":" + std::to_string(lineno) + ": unknown word '" +
                             word + "' (expected slots=N)");
        }
      }
      for (unsigned i = 0; i < slots; ++i) hosts.push_back(host);
    }
  }
  if (hosts.empty()) throw launch_error("--launch=ssh needs --hosts or --hostfile");
  return hosts;
}

// A --place host as one of the listed hosts: `--hosts=alice@h1:2222 --place x=h1` means
// that same login, not h1 as the local user. A name no listed host has stays as written.
inline std::string listed_host(const std::string& placed, const std::vector<std::string>& hosts) {
  if (std::find(hosts.begin(), hosts.end(), placed) != hosts.end()) return placed;
  std::string match;
  for (const auto& h : hosts) {
    try {
      if (ssh::host_spec::parse(h).host != placed || h == match) continue;
    } catch (const std::exception&) {
      continue;  // reported when the launcher connects to it
    }
    if (!match.empty())
      throw launch_error("--place: host '" + placed + "' is ambiguous (both " + match + " and " +
                         h + " are listed); write it as in --hosts");
    match = h;
  }
  return match.empty() ? placed : match;
}

// Which host each instance runs on: --place for a node, else round-robin.
inline std::vector<placement> place_instances(const std::vector<tlaunch::detail::node_info>& nodes,
                                              const options& o,
                                              const std::vector<std::string>& hosts) {
  for (const auto& entry : o.place) {
    const std::string& name = entry.first;
    bool known = std::any_of(nodes.begin(), nodes.end(), [&](auto& n) { return n.name == name; });
    if (!known) throw launch_error("--place names node '" + name + "', which is not in the program");
  }
  std::vector<placement> out;
  std::size_t rr = 0;
  std::uint32_t flat = 0;
  for (const auto& n : nodes) {
    auto it = o.place.find(std::string(n.name));
    for (std::uint32_t r = 0; r < n.replicas; ++r, ++flat) {
      std::string host = it != o.place.end() ? listed_host(it->second[r % it->second.size()], hosts)
                                             : hosts[rr++ % hosts.size()];
      out.push_back({flat, std::string(n.name) + "/" + std::to_string(r), host});
    }
  }
  return out;
}

}  // namespace detail

// Launches every node of p on the hosts of o (--hosts, --hostfile, --place) and
// runs the program to its end; returns the launcher's exit code. Throws
// launch_error, naming each host, when a host cannot be reached, refuses the key,
// has an unknown or changed host key, or cannot take the binary.
// TLAUNCH_TIMINGS=1 in the environment prints how long each phase took.
template <class... Nodes>
int run_ssh(const program_t<Nodes...>& p, const options& o, output_printer& out) {
  const auto began = std::chrono::steady_clock::now();
  auto nodes = tlaunch::detail::describe(p, o.replicas);
  auto hosts = detail::ssh_hosts(o);
  auto places = detail::place_instances(nodes, o, hosts);

  // sshd allows 10 sessions (channels) per connection by default: 8 nodes a connection.
  constexpr std::size_t nodes_per_session = 8;
  std::map<std::string, std::size_t> per_host;
  for (auto& pl : places) ++per_host[pl.host];

  ssh::session_options so;
  so.identity = o.ssh_identity;
  so.accept_new = o.ssh_accept_new;
  so.known_hosts = o.known_hosts;

  struct host_sessions {
    std::vector<std::unique_ptr<ssh::session>> sessions;
    std::string remote_path, error;
    std::size_t next = 0, used = 0;
  };
  std::map<std::string, host_sessions> by_host;
  for (auto& [h, n] : per_host) by_host[h];

  std::string exe = tlaunch::detail::self_exe<launch_error>();
  std::string build_id = tlaunch::detail::file_build_id(exe);

  // Every host at once; per host at most ssh_parallel handshakes at a time.
  std::vector<std::thread> workers;
  std::mutex mu;
  for (auto& [h, count] : per_host) {
    workers.emplace_back([&, h = h, count = count] {
      auto& hs = by_host[h];
      try {
        auto spec = ssh::host_spec::parse(h);
        std::size_t want = (count + nodes_per_session - 1) / nodes_per_session;
        std::vector<std::unique_ptr<ssh::session>> got(want);
        for (std::size_t base = 0; base < want; base += o.ssh_parallel) {
          std::vector<std::future<void>> batch;
          for (std::size_t i = base; i < std::min(want, base + o.ssh_parallel); ++i)
            batch.push_back(std::async(std::launch::async, [&, i] {
              got[i] = std::make_unique<ssh::session>(ssh::session::connect(spec, so));
            }));
          for (auto& f : batch) f.get();
        }
        // upload_cached reports (0, total) only when it really copies; a cached
        // binary reports (total, total) alone and gets the "already cached" line.
        bool copying = false;
        std::uint64_t last_pct = 101;
        hs.remote_path = got[0]->upload_cached(exe, build_id, [&](std::uint64_t done, std::uint64_t total) {
          if (done == 0) copying = true;
          if (!copying) return;
          std::uint64_t pct = total ? done * 100 / total : 100;
          if (pct / 25 != last_pct / 25 || done == total) {
            last_pct = pct;
            out.print("launcher", stream::err,
                      "uploading to " + h + ": " + std::to_string(done >> 10) + " / " +
                          std::to_string(total >> 10) + " KiB");
          }
        });
        if (got[0]->last_upload_skipped())
          out.print("launcher", stream::err, h + ": binary already cached (" + build_id + ")");
        std::lock_guard lk(mu);
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
  // The nodes dial the local address of their SSH connection: when one of those is IPv6,
  // listen on "::" (dual-stack on Linux) so that IPv4 and IPv6 hosts both reach us.
  bool any_v6 = false;
  for (auto& [h, hs] : by_host)
    for (auto& s : hs.sessions) any_v6 = any_v6 || s->local_address().find(':') != std::string::npos;
  coord.listen(!o.coordinator_host.empty() ? o.coordinator_host : any_v6 ? "::" : "0.0.0.0");
  int code = coord.run(places, [&](const placement& pl, std::uint16_t port,
                                   const std::vector<std::string>& tail, child_callbacks cb) {
    auto& hs = by_host[pl.host];
    auto& s = *hs.sessions[(hs.used++ / nodes_per_session) % hs.sessions.size()];
    std::string dial = o.coordinator_host.empty() ? s.local_address() : o.coordinator_host;
    if (dial.find(':') != std::string::npos) dial = "[" + dial + "]";
    // Launch flags first: the tail ends with `-- <program arguments>`.
    std::string cmd = "exec " + ssh::shell_quote(hs.remote_path) + " " +
                      ssh::shell_quote("--tlaunch-coordinator=" + dial + ":" + std::to_string(port));
    for (auto& a : tail) cmd += " " + ssh::shell_quote(a);
    return s.exec(cmd, std::move(cb));
  });
  if (const char* t = std::getenv("TLAUNCH_TIMINGS"); t != nullptr && std::string_view(t) == "1") {
    auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
    out.print("launcher", stream::err,
              "timings: " + std::to_string(places.size()) + " nodes on " +
                  std::to_string(by_host.size()) + " hosts; ssh sessions and upload " +
                  std::to_string(ms(launched - began)) + " ms; start of the nodes to all registered " +
                  std::to_string(coord.time_to_registered().count()) + " ms; stop " +
                  std::to_string(coord.time_to_stop().count()) + " ms; total " +
                  std::to_string(ms(std::chrono::steady_clock::now() - began)) + " ms");
  }
  return code;
}

}  // namespace tlaunch::launch
