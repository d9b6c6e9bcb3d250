// netns_lab: hosts on real network namespaces for tests of faults a network makes. The
// namespaces, each with an sshd, a bridge and a route are made by tests/netns/netns_lab.sh;
// netns_lab makes them once per test run and removes them (and every process left in them)
// at the end, resets them between cases, lists what runs on a host, finds and signals a
// node there, and gives the command line of a launcher over --launch=ssh to them.
// missing_requirement says why the lab cannot be made here (not root, a tool missing).
// line_with: whether one line of a program's output holds every part.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "process.hpp"

namespace tlaunch::test_support {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline int sh(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// Why the lab cannot be made here, or "" when it can.
inline std::string missing_requirement() {
  if (::geteuid() != 0) return "not root";
  for (const char* tool : {"/usr/sbin/ip", "/usr/sbin/nft", "/usr/sbin/sshd"})
    if (::access(tool, X_OK) != 0) return fmt::format("{} is missing", tool);
  if (sh("ip netns add tlnprobe$$ >/dev/null 2>&1 && ip netns del tlnprobe$$") != 0)
    return "cannot create a network namespace";
  if (sh("nft list tables >/dev/null 2>&1") != 0) return "nft cannot list tables";
  return "";
}

inline std::string lab_net(long pid) { return fmt::format("10.213.{}", 20 + pid % 200); }

// Labs of earlier runs whose test process is gone (killed by a timeout, say).
inline void remove_stale_labs(const std::string& lab_script, int hosts) {
  std::set<long> stale;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/run/netns", ec)) {
    auto name = e.path().filename().string();
    if (name.rfind("tln", 0) != 0) continue;
    auto dash = name.find('-');
    if (dash == std::string::npos) continue;
    long pid = std::atol(name.substr(3, dash - 3).c_str());
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.insert(pid);
  }
  for (long pid : stale)
    sh(fmt::format("bash {} down /tmp/tln{}-lab tln{} {} {}", lab_script, pid, pid, lab_net(pid),
                   hosts));
}

// The hosts: made once per test run by the constructor, removed (namespaces, links, route,
// sshd and every process left in them) by the destructor, also when a check failed; each
// case starts from reset() (links up, no partition, nothing but the sshd listeners).
struct netns_lab {
  std::string lab_script;  // netns_lab.sh
  int hosts;
  std::string prefix, net, dir;
  bool up = false;

  netns_lab(std::string script, int host_count) : lab_script(std::move(script)), hosts(host_count) {
    auto why = missing_requirement();
    if (!why.empty()) {
      if (in_ci()) FAIL("the network namespace tests cannot run (CI=true): ", why);
      MESSAGE("skipped: the network namespace tests need root, iproute2, nftables and "
              "openssh-server (tools/install-deps.sh): ",
              why);
      return;
    }
    remove_stale_labs(lab_script, hosts);
    long pid = ::getpid();
    prefix = fmt::format("tln{}", pid);
    net = lab_net(pid);
    dir = fmt::format("/tmp/{}-lab", prefix);
    sh(fmt::format("bash {} down {} {} {} {}", lab_script, dir, prefix, net, hosts));
    up = true;
    REQUIRE(sh(fmt::format("bash {} up {} {} {} {}", lab_script, dir, prefix, net, hosts)) == 0);
  }
  ~netns_lab() {
    if (up) sh(fmt::format("bash {} down {} {} {} {}", lab_script, dir, prefix, net, hosts));
  }
  netns_lab(const netns_lab&) = delete;
  netns_lab& operator=(const netns_lab&) = delete;

  std::string addr(int i) const { return fmt::format("{}.{}", net, 10 + i); }
  std::string ns(int i) const { return fmt::format("{}-{}", prefix, i); }
  int in_ns(int i, const std::string& cmd) const {
    return sh(fmt::format("ip netns exec {} {}", ns(i), cmd));
  }

  // A launcher's command line for exe over --launch=ssh to every host as root.
  std::vector<std::string> ssh_argv(const std::string& exe) const {
    std::string hosts_flag = "--hosts=";
    for (int i = 1; i <= hosts; ++i) hosts_flag += fmt::format("{}root@{}", i > 1 ? "," : "", addr(i));
    return {exe, "--launch=ssh", hosts_flag, fmt::format("--ssh-identity={}/id_ed25519", dir),
            fmt::format("--known-hosts={}/known_hosts", dir)};
  }

  // Every host as it was made: links up, no partition, nothing but the sshd listeners.
  void reset() const {
    for (int i = 1; i <= hosts; ++i) {
      sh(fmt::format("ip -n {} link set eth0 up", ns(i)));
      in_ns(i, "nft delete table inet tlpart 2>/dev/null");
      for (pid_t p : leftovers(i)) ::kill(p, SIGKILL);
    }
  }

  // Processes in host i's namespace other than its sshd listener.
  std::vector<pid_t> leftovers(int i) const {
    auto listener = std::atol(integration::read_file(fmt::format("{}/host{}/sshd.pid.launcher", dir, i)).c_str());
    std::vector<pid_t> out;
    auto dirent = fs::path("/proc");
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dirent, ec)) {
      auto name = e.path().filename().string();
      char* end = nullptr;
      long pid = std::strtol(name.c_str(), &end, 10);
      if (pid <= 0 || *end != '\0' || pid == listener || !integration::alive(static_cast<pid_t>(pid)))
        continue;
      // Same network namespace as host i: the link /proc/PID/ns/net points to the same inode.
      struct stat a {}, b {};
      if (::stat(fmt::format("/proc/{}/ns/net", pid).c_str(), &a) != 0) continue;
      if (::stat(fmt::format("/run/netns/{}", ns(i)).c_str(), &b) != 0) continue;
      if (a.st_ino == b.st_ino && a.st_dev == b.st_dev) out.push_back(static_cast<pid_t>(pid));
    }
    return out;
  }
  // True when, within `bound`, no host holds anything but its sshd listener.
  bool hosts_empty(std::chrono::seconds bound) const {
    auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
      std::string left;
      for (int i = 1; i <= hosts; ++i)
        for (pid_t p : leftovers(i)) left += fmt::format(" {}({}) on host {};", p, integration::cmdline(p), i);
      if (left.empty()) return true;
      if (std::chrono::steady_clock::now() >= deadline) {
        MESSAGE("left on the hosts:", left);
        return false;
      }
      std::this_thread::sleep_for(100ms);
    }
  }
  // The PID of node `role` ("worker/0") in host i's namespace, or 0.
  pid_t node_pid(int i, const std::string& role) const {
    for (pid_t p : leftovers(i))
      if (integration::cmdline(p).find(fmt::format("--tlaunch-role={} ", role)) != std::string::npos) return p;
    return 0;
  }
  // Sends sig to node `role` in host i's namespace; the test fails when there is no such node.
  void signal_node(int i, const std::string& role, int sig) const {
    pid_t p = node_pid(i, role);
    REQUIRE(p > 0);
    ::kill(p, sig);
  }
};

// The lab of this test run, made by the first case that asks and reset for every case; null
// when it cannot be made outside CI (the case then returns).
inline const netns_lab* shared_lab(const std::string& script, int host_count) {
  static netns_lab l(script, host_count);
  if (!l.up) return nullptr;
  l.reset();
  return &l;
}

// True when one line of `out` holds every part.
inline bool line_with(const std::string& out, std::initializer_list<std::string_view> parts) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    bool all = true;
    for (auto part : parts) all = all && line.find(part) != std::string::npos;
    if (all) return true;
  }
  return false;
}

}  // namespace tlaunch::test_support
