// Faults on real network namespaces: three hosts (namespaces with an sshd each, made by
// netns_lab.sh), and faulty (tests/integration/faulty.cpp) launched over --launch=ssh with
// target/0 on host 2 and worker/0, worker/1 on hosts 1 and 3. Each case injects one fault
// (a link down, a partition with nftables, SIGSTOP, SIGKILL of a node or of the launcher)
// and checks that the launcher or the caller notices and names it, the exit status, and
// that no process of the program is left in any namespace afterwards.
// Needs root, iproute2, nftables and openssh-server (tools/install-deps.sh); without them
// the cases fail when CI=true and are skipped with a message otherwise.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../common/process.hpp"

namespace {

namespace it = tlaunch::integration;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* lab_script = TLAUNCH_NETNS_LAB;
constexpr int hosts = 3;
// Every case runs with the default settings (--liveness=1, no --heartbeat): what they must
// notice is noticed within two intervals. The bounds are generous multiples of that, for
// sanitizer builds on a loaded machine.
constexpr auto detect_bound = 20s;
constexpr auto start_bound = 60s;

int sh(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// Why the lab cannot be made here, or "" when it can.
std::string missing_requirement() {
  if (::geteuid() != 0) return "not root";
  for (const char* tool : {"/usr/sbin/ip", "/usr/sbin/nft", "/usr/sbin/sshd"})
    if (::access(tool, X_OK) != 0) return fmt::format("{} is missing", tool);
  if (sh("ip netns add tlnprobe$$ >/dev/null 2>&1 && ip netns del tlnprobe$$") != 0)
    return "cannot create a network namespace";
  if (sh("nft list tables >/dev/null 2>&1") != 0) return "nft cannot list tables";
  return "";
}

std::string lab_net(long pid) { return fmt::format("10.213.{}", 20 + pid % 200); }

// Labs of earlier runs whose test process is gone (killed by a timeout, say).
void remove_stale_labs() {
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
struct lab {
  std::string prefix, net, dir;
  bool up = false;

  lab() {
    auto why = missing_requirement();
    if (!why.empty()) {
      if (in_ci()) FAIL("the network namespace tests cannot run (CI=true): ", why);
      MESSAGE("skipped: the network namespace tests need root, iproute2, nftables and "
              "openssh-server (tools/install-deps.sh): ",
              why);
      return;
    }
    remove_stale_labs();
    long pid = ::getpid();
    prefix = fmt::format("tln{}", pid);
    net = lab_net(pid);
    dir = fmt::format("/tmp/{}-lab", prefix);
    sh(fmt::format("bash {} down {} {} {} {}", lab_script, dir, prefix, net, hosts));
    up = true;
    REQUIRE(sh(fmt::format("bash {} up {} {} {} {}", lab_script, dir, prefix, net, hosts)) == 0);
  }
  ~lab() {
    if (up) sh(fmt::format("bash {} down {} {} {} {}", lab_script, dir, prefix, net, hosts));
  }
  lab(const lab&) = delete;
  lab& operator=(const lab&) = delete;

  std::string addr(int i) const { return fmt::format("{}.{}", net, 10 + i); }
  std::string ns(int i) const { return fmt::format("{}-{}", prefix, i); }
  int in_ns(int i, const std::string& cmd) const {
    return sh(fmt::format("ip netns exec {} {}", ns(i), cmd));
  }

  // The launcher's command line: worker/0 on host 1, target/0 on host 2, worker/1 on host 3.
  std::vector<std::string> argv(const std::string& mode, std::vector<std::string> extra = {}) const {
    std::vector<std::string> a = {
        TLAUNCH_FAULTY_EXE,
        "--launch=ssh",
        fmt::format("--hosts=root@{},root@{},root@{}", addr(1), addr(2), addr(3)),
        fmt::format("--ssh-identity={}/id_ed25519", dir),
        fmt::format("--known-hosts={}/known_hosts", dir),
        "--place",
        fmt::format("worker={},{}", addr(1), addr(3)),
        "--place",
        fmt::format("target={}", addr(2)),
        "--grace=2"};
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back("--");
    a.push_back(mode);
    return a;
  }

  void reset() const {
    for (int i = 1; i <= hosts; ++i) {
      sh(fmt::format("ip -n {} link set eth0 up", ns(i)));
      in_ns(i, "nft delete table inet tlpart 2>/dev/null");
      for (pid_t p : leftovers(i)) ::kill(p, SIGKILL);
    }
  }

  // Processes in host i's namespace other than its sshd listener.
  std::vector<pid_t> leftovers(int i) const {
    auto listener = std::atol(it::read_file(fmt::format("{}/host{}/sshd.pid.launcher", dir, i)).c_str());
    std::vector<pid_t> out;
    auto dirent = fs::path("/proc");
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dirent, ec)) {
      auto name = e.path().filename().string();
      char* end = nullptr;
      long pid = std::strtol(name.c_str(), &end, 10);
      if (pid <= 0 || *end != '\0' || pid == listener || !it::alive(static_cast<pid_t>(pid)))
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
        for (pid_t p : leftovers(i)) left += fmt::format(" {}({}) on host {};", p, it::cmdline(p), i);
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
      if (it::cmdline(p).find(fmt::format("--tlaunch-role={} ", role)) != std::string::npos) return p;
    return 0;
  }
};

// The lab of this run, made by the first case that asks; null (the case returns) when it
// cannot be made outside CI.
const lab* the_lab() {
  static lab l;
  if (!l.up) return nullptr;
  l.reset();
  return &l;
}

// True when one line of `out` holds every part.
bool line_with(const std::string& out, std::initializer_list<std::string_view> parts) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    bool all = true;
    for (auto part : parts) all = all && line.find(part) != std::string::npos;
    if (all) return true;
  }
  return false;
}

// Waits for every worker's "ready" line; fails the test (showing the output) otherwise.
void wait_ready(it::process& p) {
  bool ready = p.wait_for_output("ready pid=", start_bound, 2);
  if (!ready) FAIL("the program did not start:\n", p.all());
}

}  // namespace

TEST_SUITE("netns_faults") {
  TEST_CASE("a host whose link goes down is named, and its nodes end with the launcher") {
    auto* lp = the_lab();
    if (lp == nullptr) return;
    const lab& l = *lp;
    it::process p(l.argv("idle"));
    wait_ready(p);
    REQUIRE(sh(fmt::format("ip -n {} link set eth0 down", l.ns(1))) == 0);
    int code = p.wait_or_kill(detect_bound);
    INFO(p.all());
    CHECK_FALSE(p.timed_out());
    CHECK(code == 1);
    // Named by whichever notices first: the node's connection to the launcher, or the ssh
    // connection to its host's agent.
    CHECK((line_with(p.all(), {"node worker/0@", "failed: lost its connection: no answer from "
                                                 "worker/0's host for 2 s: host down or network cut"}) ||
           line_with(p.all(), {"node worker/0@", "failed: ssh connection to", "lost"})));
    // The cut host cleans up on its own too: sshd drops the silent client, the agent then
    // kills its nodes.
    CHECK(l.hosts_empty(detect_bound));
  }

  TEST_CASE("a partition between two hosts fails calls across it, and calls succeed once healed") {
    auto* lp = the_lab();
    if (lp == nullptr) return;
    const lab& l = *lp;
    it::process p(l.argv("outage"));
    REQUIRE(p.wait_for_output("first call served", start_bound));
    // Host 1 and host 2 drop what comes from each other; both still reach the launcher.
    auto drop_from = [&](int i, int from) {
      return l.in_ns(i, fmt::format("nft add table inet tlpart \\; "
                                    "add chain inet tlpart in '{{ type filter hook input priority 0 ; }}' \\; "
                                    "add rule inet tlpart in ip saddr {} drop",
                                    l.addr(from)));
    };
    REQUIRE(drop_from(1, 2) == 0);
    REQUIRE(drop_from(2, 1) == 0);
    bool failed = p.wait_for_output("call failed after", detect_bound);
    INFO(p.all());
    CHECK(failed);
    CHECK(line_with(p.all(), {"[worker/0@", "call failed after", "target/0 Target::process_id unavailable: no answer from target/0's host"}));
    // Nothing else noticed: the launcher still reaches every node.
    CHECK(p.all().find("[launcher] node") == std::string::npos);
    REQUIRE(l.in_ns(1, "nft delete table inet tlpart") == 0);
    REQUIRE(l.in_ns(2, "nft delete table inet tlpart") == 0);
    CHECK(p.wait_for_output("calls succeed again", detect_bound));
    CHECK(p.wait_or_kill(detect_bound) == 0);
    CHECK(l.hosts_empty(detect_bound));
  }

  TEST_CASE("a stopped node is named as not answering, killed, and the program fails") {
    // Its host's agent sees the stop (the kernel still acknowledges the node's sockets).
    auto* lp = the_lab();
    if (lp == nullptr) return;
    const lab& l = *lp;
    it::process p(l.argv("idle"));
    wait_ready(p);
    pid_t worker = l.node_pid(1, "worker/0");
    REQUIRE(worker > 0);
    ::kill(worker, SIGSTOP);
    int code = p.wait_or_kill(detect_bound);
    INFO(p.all());
    CHECK_FALSE(p.timed_out());
    CHECK(code == 1);
    CHECK(line_with(p.all(), {"node worker/0@", "failed: stopped (SIGSTOP) for 2 s: it stopped "
                                                "answering (killed by signal SIGKILL)"}));
    CHECK(l.hosts_empty(detect_bound));
  }

  TEST_CASE("a killed node fails the program without a restart policy") {
    auto* lp = the_lab();
    if (lp == nullptr) return;
    const lab& l = *lp;
    it::process p(l.argv("idle"));
    wait_ready(p);
    pid_t worker = l.node_pid(1, "worker/0");
    REQUIRE(worker > 0);
    ::kill(worker, SIGKILL);
    int code = p.wait_or_kill(detect_bound);
    INFO(p.all());
    CHECK(code == 1);
    CHECK(line_with(p.all(), {"node worker/0@", "failed: killed by signal SIGKILL"}));
    CHECK(l.hosts_empty(detect_bound));
  }

  TEST_CASE("a killed node with a restart policy is restarted and its callers recover") {
    auto* lp = the_lab();
    if (lp == nullptr) return;
    const lab& l = *lp;
    it::process p(l.argv("outage"));
    REQUIRE(p.wait_for_output("first call served", start_bound));
    pid_t target = l.node_pid(2, "target/0");
    REQUIRE(target > 0);
    ::kill(target, SIGKILL);
    int code = p.wait_or_kill(detect_bound);
    INFO(p.all());
    CHECK(code == 0);
    CHECK(line_with(p.all(), {"node target/0@", "failed: killed by signal SIGKILL; restart 1 of at most 3"}));
    CHECK(line_with(p.all(), {"node target/0@", "restarted: registered"}));
    CHECK(p.all().find("calls succeed again") != std::string::npos);
    CHECK(l.hosts_empty(detect_bound));
  }

  TEST_CASE("kill -9 of the launcher leaves no node on any host") {
    auto* lp = the_lab();
    if (lp == nullptr) return;
    const lab& l = *lp;
    it::process p(l.argv("idle"));
    wait_ready(p);
    REQUIRE(l.node_pid(2, "target/0") > 0);
    p.signal(SIGKILL);
    CHECK(p.wait(detect_bound) == 128 + SIGKILL);
    CHECK(l.hosts_empty(detect_bound));
  }
}
