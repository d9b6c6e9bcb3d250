// Where each node instance runs: the hosts of --hosts and --hostfile (with slots),
// --place for a node, round-robin for the rest. Launcher-neutral: ssh places on its
// hosts with it, and any launcher that is given hosts does the same.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "../error.hpp"

namespace tlaunch::launch {

// Where one node instance runs.
struct placement {
  std::uint32_t flat = 0;
  std::string id;    // "worker/3"
  std::string host;  // "" for this machine, else a host as listed in --hosts
};

// The host of "[user@]host[:port]" ("[::1]:22" -> "::1").
inline std::string host_of_entry(std::string_view entry) {
  if (auto at = entry.rfind('@'); at != std::string_view::npos) entry.remove_prefix(at + 1);
  if (!entry.empty() && entry.front() == '[') {
    auto close = entry.find(']');
    return std::string(entry.substr(1, close == std::string_view::npos ? entry.npos : close - 1));
  }
  // One colon: host:port. More: a bare IPv6 address.
  if (auto colon = entry.find(':');
      colon != std::string_view::npos && entry.find(':', colon + 1) == std::string_view::npos)
    entry = entry.substr(0, colon);
  return std::string(entry);
}

// The lines of a hostfile: one host a line, "slots=N" makes it count N times, '#'
// starts a comment. `name` is used in errors ("FILE:LINE: ...").
inline std::vector<std::string> parse_hostfile(std::istream& in, const std::string& name) {
  std::vector<std::string> hosts;
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
        std::size_t pos = 0;
        try {
          slots = static_cast<unsigned>(std::stoul(word.substr(6), &pos));
        } catch (...) {
          slots = 0;
        }
        if (slots == 0 || slots > 4096 || pos != word.size() - 6)
          throw launch_error(name + ":" + std::to_string(lineno) + ": bad '" + word +
                             "' (slots=N, N from 1 to 4096)");
      } else {
        throw launch_error(name + ":" + std::to_string(lineno) + ": unknown word '" + word +
                           "' (expected slots=N)");
      }
    }
    for (unsigned i = 0; i < slots; ++i) hosts.push_back(host);
  }
  return hosts;
}

// Hosts from --hosts and then --hostfile, in round-robin order. `launch` names the
// launch type in the error when there are none.
inline std::vector<std::string> listed_hosts(const std::vector<std::string>& hosts_flag,
                                             const std::string& hostfile,
                                             std::string_view launch) {
  std::vector<std::string> hosts = hosts_flag;
  if (!hostfile.empty()) {
    std::ifstream in(hostfile);
    if (!in) throw launch_error("--hostfile: cannot read " + hostfile);
    auto more = parse_hostfile(in, hostfile);
    hosts.insert(hosts.end(), more.begin(), more.end());
  }
  if (hosts.empty())
    throw launch_error("--launch=" + std::string(launch) + " needs --hosts or --hostfile");
  return hosts;
}

// A --place host as one of the listed hosts: `--hosts=alice@h1:2222 --place x=h1` means
// that same login, not h1 as the local user. A name no listed host has stays as written.
inline std::string listed_host(const std::string& placed, const std::vector<std::string>& hosts) {
  if (std::find(hosts.begin(), hosts.end(), placed) != hosts.end()) return placed;
  std::string match;
  for (const auto& h : hosts) {
    if (host_of_entry(h) != placed || h == match) continue;
    if (!match.empty())
      throw launch_error("--place: host '" + placed + "' is ambiguous (both " + match + " and " +
                         h + " are listed); write it as in --hosts");
    match = h;
  }
  return match.empty() ? placed : match;
}

// Which host each instance runs on: --place for a node (its replicas go round the
// hosts it names), else round-robin over `hosts`. `nodes` is a range of things with
// `name` and `replicas` (the program's node descriptions), in program order. A
// colocation group is placed as a unit: `leader[flat]` (launch/colocation.hpp; empty:
// no groups) is its first instance, whose host every member takes, counting once in
// the round-robin.
template <class Nodes>
std::vector<placement> place_instances(const Nodes& nodes,
                                       const std::map<std::string, std::vector<std::string>>& place,
                                       const std::vector<std::string>& hosts,
                                       const std::vector<std::uint32_t>& leader = {}) {
  for (const auto& entry : place) {
    bool known = std::any_of(std::begin(nodes), std::end(nodes),
                             [&](const auto& n) { return n.name == entry.first; });
    if (!known)
      throw launch_error("--place names node '" + entry.first + "', which is not in the program");
    if (entry.second.empty()) throw launch_error("--place " + entry.first + "= names no host");
  }
  std::vector<placement> out;
  std::size_t rr = 0;
  std::uint32_t flat = 0;
  for (const auto& n : nodes) {
    auto it = place.find(std::string(n.name));
    for (std::uint32_t r = 0; r < n.replicas; ++r, ++flat) {
      std::string host;
      if (flat < leader.size() && leader[flat] != flat)
        host = out[leader[flat]].host;
      else if (it != place.end())
        host = listed_host(it->second[r % it->second.size()], hosts);
      else if (!hosts.empty())
        host = hosts[rr++ % hosts.size()];
      out.push_back({flat, std::string(n.name) + "/" + std::to_string(r), host});
    }
  }
  return out;
}

}  // namespace tlaunch::launch
