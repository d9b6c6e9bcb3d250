// Faults on real network namespaces: three hosts (namespaces with an sshd each, made by
// netns_lab.sh through tests/common/netns_lab.hpp), and faulty (tests/integration/faulty.cpp)
// launched over --launch=ssh with target/0 on host 2 and worker/0, worker/1 on hosts 1 and
// 3. Each case injects one fault (a link down, a partition with nftables, SIGSTOP, SIGKILL
// of a node or of the launcher) and checks that the launcher or the caller notices and
// names it, the exit status, and that no process of the program is left in any namespace
// afterwards.
// Needs root, iproute2, nftables and openssh-server (tools/install-deps.sh); without them
// the cases fail when CI=true and are skipped with a message otherwise.
#include <doctest/doctest.h>

#include <signal.h>

#include <string>
#include <vector>

#include <fmt/format.h>

#include "../common/netns_lab.hpp"
#include "../common/process.hpp"

namespace {

namespace it = tlaunch::integration;
using namespace std::chrono_literals;
using tlaunch::test_support::line_with;
using tlaunch::test_support::netns_lab;
using tlaunch::test_support::sh;
using tlaunch::test_support::shared_lab;

constexpr const char* lab_script = TLAUNCH_NETNS_LAB;
constexpr int hosts = 3;
// Every case runs with the default settings (--liveness=1, no --heartbeat): what they must
// notice is noticed within two intervals. The bounds are generous multiples of that, for
// sanitizer builds on a loaded machine.
constexpr auto detect_bound = 20s;
constexpr auto start_bound = 60s;

// The launcher's command line: worker/0 on host 1, target/0 on host 2, worker/1 on host 3.
std::vector<std::string> faulty_argv(const netns_lab& l, const std::string& mode,
                                     std::vector<std::string> extra = {}) {
  auto a = l.ssh_argv(TLAUNCH_FAULTY_EXE);
  a.insert(a.end(), {"--place", fmt::format("worker={},{}", l.addr(1), l.addr(3)), "--place",
                     fmt::format("target={}", l.addr(2)), "--grace=2"});
  a.insert(a.end(), extra.begin(), extra.end());
  a.push_back("--");
  a.push_back(mode);
  return a;
}

// Runs one case on the lab of this run; returns at once when it cannot be made outside CI.
template <class Case>
void with_lab(Case&& run_case) {
  if (const netns_lab* l = shared_lab(lab_script, hosts)) run_case(*l);
}

// Waits for every worker's "ready" line; fails the test (showing the output) otherwise.
void wait_ready(it::process& p) {
  bool ready = p.wait_for_output("ready pid=", start_bound, 2);
  if (!ready) FAIL("the program did not start:\n", p.all());
}

// Starts the program idle, sends `sig` to worker/0 on host 1 and checks that the launcher
// ends on its own, with code 1; returns its output.
std::string fail_worker_with(const netns_lab& l, int sig) {
  it::process p(faulty_argv(l, "idle"));
  wait_ready(p);
  l.signal_node(1, "worker/0", sig);
  int code = p.wait_or_kill(detect_bound);
  INFO(p.all());
  CHECK_FALSE(p.timed_out());
  CHECK(code == 1);
  return p.all();
}

}  // namespace

TEST_SUITE("netns_faults") {
  TEST_CASE("a host whose link goes down is named, and its nodes end with the launcher") {
    with_lab([](const netns_lab& l) {
      it::process p(faulty_argv(l, "idle"));
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
    });
  }

  TEST_CASE("a partition between two hosts fails calls across it, and calls succeed once healed") {
    with_lab([](const netns_lab& l) {
      it::process p(faulty_argv(l, "outage"));
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
    });
  }

  TEST_CASE("a stopped node is named as not answering, killed, and the program fails") {
    // Its host's agent sees the stop (the kernel still acknowledges the node's sockets).
    with_lab([](const netns_lab& l) {
      auto out = fail_worker_with(l, SIGSTOP);
      INFO(out);
      CHECK(line_with(out, {"node worker/0@", "failed: stopped (SIGSTOP) for 2 s: it stopped "
                                              "answering (killed by signal SIGKILL)"}));
      CHECK(l.hosts_empty(detect_bound));
    });
  }

  TEST_CASE("a killed node fails the program without a restart policy") {
    with_lab([](const netns_lab& l) {
      auto out = fail_worker_with(l, SIGKILL);
      INFO(out);
      CHECK(line_with(out, {"node worker/0@", "failed: killed by signal SIGKILL"}));
      CHECK(l.hosts_empty(detect_bound));
    });
  }

  TEST_CASE("a killed node with a restart policy is restarted and its callers recover") {
    with_lab([](const netns_lab& l) {
      it::process p(faulty_argv(l, "outage"));
      REQUIRE(p.wait_for_output("first call served", start_bound));
      l.signal_node(2, "target/0", SIGKILL);
      int code = p.wait_or_kill(detect_bound);
      INFO(p.all());
      CHECK(code == 0);
      CHECK(line_with(p.all(), {"node target/0@", "failed: killed by signal SIGKILL; restart 1 of at most 3"}));
      CHECK(line_with(p.all(), {"node target/0@", "restarted: registered"}));
      CHECK(p.all().find("calls succeed again") != std::string::npos);
      CHECK(l.hosts_empty(detect_bound));
    });
  }

  TEST_CASE("kill -9 of the launcher leaves no node on any host") {
    with_lab([](const netns_lab& l) {
      it::process p(faulty_argv(l, "idle"));
      wait_ready(p);
      REQUIRE(l.node_pid(2, "target/0") > 0);
      p.signal(SIGKILL);
      CHECK(p.wait(detect_bound) == 128 + SIGKILL);
      CHECK(l.hosts_empty(detect_bound));
    });
  }
}
