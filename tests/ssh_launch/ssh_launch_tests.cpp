// --launch=ssh end to end: the examples and remote_program run as real processes
// against the loopback sshd of tools/sshd-fixture.sh, whose "hosts" are 127.0.0.2 and
// 127.0.0.3 (TLAUNCH_SSHD_ENV names its env file; CTest and the Meson wrapper set it).
// Node processes are found by the cached binary's path in /proc/*/cmdline.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <tlaunch/detail/build_id.hpp>
#include <tlaunch/detail/sanitizers.hpp>

#include "../common/temp_dir.hpp"
#include "../common/process.hpp"

namespace {

namespace fs = std::filesystem;
namespace it = tlaunch::integration;
using it::process;
using namespace std::chrono_literals;

struct fixture_env {
  std::string port, identity, known_hosts, user;
};

const fixture_env& env() {
  static const fixture_env e = [] {
    const char* path = std::getenv("TLAUNCH_SSHD_ENV");
    if (path == nullptr || *path == '\0')
      FAIL("TLAUNCH_SSHD_ENV is not set: run these tests through ctest (fixture sshd) or "
           "`tools/sshd-fixture.sh run DIR -- <test binary>`");
    std::ifstream in(path);
    if (!in) FAIL("cannot read the sshd fixture env file " << path);
    std::map<std::string, std::string> kv;
    for (std::string line; std::getline(in, line);)
      if (auto eq = line.find('='); eq != std::string::npos)
        kv[line.substr(0, eq)] = line.substr(eq + 1);
    return fixture_env{kv.at("PORT"), kv.at("IDENTITY"), kv.at("KNOWN_HOSTS"), kv.at("USER")};
  }();
  return e;
}

// "root@127.0.0.2:PORT": the host as a user writes it, and as the launcher prints it.
std::string host(const char* addr, const std::string& port = env().port) {
  return env().user + "@" + addr + ":" + port;
}
std::string h2() { return host("127.0.0.2"); }
std::string h3() { return host("127.0.0.3"); }

bool has(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// exe --launch=ssh --hosts=... with the fixture's key and known_hosts, then `flags`,
// then `-- args` when there are any. Later flags override the earlier ones.
std::vector<std::string> ssh_launch(const char* exe, const std::vector<std::string>& hosts,
                                    std::vector<std::string> flags = {},
                                    std::vector<std::string> args = {}) {
  std::string list;
  for (auto& h : hosts) list += (list.empty() ? "" : ",") + h;
  std::vector<std::string> a{exe, "--launch=ssh", "--hosts=" + list, "--color=never",
                             "--ssh-identity=" + env().identity,
                             "--known-hosts=" + env().known_hosts};
  a.insert(a.end(), flags.begin(), flags.end());
  if (!args.empty()) {
    a.push_back("--");
    a.insert(a.end(), args.begin(), args.end());
  }
  return a;
}

// Where the launcher caches `exe` on the hosts: ~/.cache/tlaunch/<build-id>/<name> of the
// fixture's user, whose home is on this machine.
std::string cached_path(const char* exe) {
  const passwd* pw = ::getpwnam(env().user.c_str());
  REQUIRE(pw != nullptr);
  return std::string(pw->pw_dir) + "/.cache/tlaunch/" + tlaunch::detail::file_build_id(exe) +
         "/" + fs::path(exe).filename().string();
}

// A port on 127.0.0.2 where nothing listens (bound then released).
std::string closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  ::close(fd);
  return std::to_string(ntohs(a.sin_port));
}

// The parent pid of pid, from /proc.
long parent_of(long pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("PPid:", 0) == 0) return std::stol(line.substr(5));
  return 0;
}

// Whether pid was forked by its agent's node forker: a forked node writes its argv over its
// command line as one string ("... --tlaunch-role=..."); an executed one's arguments are
// separate strings ("...\0--tlaunch-role=...").
bool forked_node(long pid) {
  std::string raw = it::read_file("/proc/" + std::to_string(pid) + "/cmdline");
  return raw.find(" --tlaunch-role=") != std::string::npos;
}

// Each test's scratch directory.
struct temp_dir : tlaunch::test_support::temp_dir {
  temp_dir() : tlaunch::test_support::temp_dir("tlaunch-ssh-launch") {}
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh ed25519 key pair in dir (private key path returned; the public key beside it).
std::string fresh_key(const fs::path& dir) {
  auto key = (dir / "other_key").string();
  auto r = it::run({"/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key}, 20s);
  REQUIRE(r.code == 0);
  return key;
}

}  // namespace

TEST_SUITE("ssh_launch") {
  TEST_CASE("hello_world across two hosts: every producer's line, total 400, exit 0") {
    auto r = it::run(ssh_launch(TLAUNCH_HELLO_WORLD_EXE, {h2(), h3()}), 60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    // Round-robin in program order: counter/0 on h2, then producers on h3, h2, h3, h2.
    CHECK(has(r.out, "[producer/0@" + h3() + "] added 100"));
    CHECK(has(r.out, "[producer/1@" + h2() + "] added 100"));
    CHECK(has(r.out, "[producer/2@" + h3() + "] added 100"));
    CHECK(has(r.out, "[producer/3@" + h2() + "] added 100"));
    CHECK(process::occurrences(r.out, "] added 100, total now ") == 4);
    CHECK(has(r.out, "total now 400\n"));
    CHECK(it::node_pids(cached_path(TLAUNCH_HELLO_WORLD_EXE)).empty());
  }

  TEST_CASE("--coordinator-host=::1: the nodes register over IPv6") {
    // The coordinator listens on that address only, so nodes that dialed anything
    // else would never register.
    auto r = it::run(ssh_launch(TLAUNCH_HELLO_WORLD_EXE, {h2(), h3()}, {"--coordinator-host=::1"}),
                     60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(process::occurrences(r.out, "] added 100, total now ") == 4);
    CHECK(has(r.out, "total now 400\n"));
  }

  TEST_CASE("consumer_producers across two hosts: the consumer gets every producer's result") {
    auto r = it::run(ssh_launch(TLAUNCH_CONSUMER_PRODUCERS_EXE, {h2(), h3()}), 60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    // producer/0..2 on h2, h3, h2; the consumer on h3.
    CHECK(has(r.out, "[consumer/0@" + h3() + "] sum of 3 results: 14\n"));  // 1 + 4 + 9
    CHECK(has(r.out, "[consumer/0@" + h3() + "] broadcast work(10) to 3 producers: 300\n"));
    CHECK(has(r.out, "[producer/1@" + h3() + "] served 2 calls, produced 104\n"));
    CHECK(it::node_pids(cached_path(TLAUNCH_CONSUMER_PRODUCERS_EXE)).empty());
  }

  TEST_CASE("--tls: consumer_producers across two hosts, every connection under TLS, exit 0") {
    auto r = it::run(ssh_launch(TLAUNCH_CONSUMER_PRODUCERS_EXE, {h2(), h3()}, {"--tls"}), 60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(has(r.out, "[consumer/0@" + h3() + "] sum of 3 results: 14\n"));
    CHECK(has(r.out, "[consumer/0@" + h3() + "] broadcast work(10) to 3 producers: 300\n"));
    CHECK_FALSE(has(r.all, "TLS"));  // no handshake failed, nothing refused
    CHECK(it::node_pids(cached_path(TLAUNCH_CONSUMER_PRODUCERS_EXE)).empty());
  }

#if defined(TLAUNCH_STOP_RACE_EXE)
  TEST_CASE("a call in flight when its callee stops first ends with the stop, plain and --tls: exit 0") {
    // stop_race (tests/launch): store/0 never answers worker/1's call, worker/0 stops the
    // program once store/0 serves it, and worker/1's stop is held back until it reports:
    // store/0 always stops first, on another host, with the call in flight.
    for (std::vector<std::string> flags : {std::vector<std::string>{},
                                           std::vector<std::string>{"--tls"}}) {
      CAPTURE(flags.size());
      auto r = it::run(ssh_launch(TLAUNCH_STOP_RACE_EXE, {h2(), h3()}, flags, {"in_flight"}), 60s);
      CAPTURE(r.all);
      CHECK(r.code == 0);
      CHECK(has(r.out, "] worker/1's call is in flight: stopping the program"));
      CHECK(has(r.out, "] in flight: tlaunch::stopping: store/0 Store::hang ended by the "
                       "program's stop: "));
      CHECK_FALSE(has(r.all, "ended with an error"));
      CHECK_FALSE(has(r.all, "failed"));
      CHECK_FALSE(has(r.all, "exited with code"));
      CHECK(it::node_pids(cached_path(TLAUNCH_STOP_RACE_EXE)).empty());
    }
  }
#endif

  TEST_CASE("the second launch finds the binary cached and skips the upload") {
    const std::string cached = cached_path(TLAUNCH_REMOTE_PROGRAM_EXE);
    std::error_code ec;
    fs::remove_all(fs::path(cached).parent_path(), ec);

    auto first = it::run(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2()}, {}, {"where"}), 60s);
    CAPTURE(first.all);
    CHECK(first.code == 0);
    // not a terminal: no running progress, one line when the copy is done
    CHECK(has(first.err, "[launcher] uploaded "));
    CHECK(has(first.err, " to " + h2() + " in "));
    CHECK_FALSE(has(first.err, "uploading to"));
    CHECK_FALSE(has(first.err, "already cached"));
    CHECK(fs::is_regular_file(cached));

    auto second = it::run(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2()}, {}, {"where"}), 60s);
    CAPTURE(second.all);
    CHECK(second.code == 0);
    CHECK(has(second.err, "[launcher] " + h2() + ": binary already cached"));
    CHECK_FALSE(has(second.err, "uploaded "));
    CHECK(process::occurrences(second.out, "] reached at 127.0.0.2\n") == 2);

    // --ssh-cache-dir: another cache, where the binary is copied again
    temp_dir other;
    auto third = it::run(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2()},
                                    {"--ssh-cache-dir=" + other.path.string()}, {"where"}), 60s);
    CAPTURE(third.all);
    CHECK(third.code == 0);
    CHECK(has(third.err, "[launcher] uploaded "));
    CHECK(fs::is_regular_file(other.path / tlaunch::detail::file_build_id(TLAUNCH_REMOTE_PROGRAM_EXE) /
                              fs::path(TLAUNCH_REMOTE_PROGRAM_EXE).filename()));
  }

  TEST_CASE("--place puts a node's replicas on the named host") {
    // Written as in --hosts, or by its name alone: the listed login (user, port) is used.
    for (const std::string& placed : {h3(), std::string("127.0.0.3")}) {
      CAPTURE(placed);
      auto r = it::run(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()},
                                  {"--replicas", "worker=3", "--place", "worker=" + placed},
                                  {"where"}),
                       60s);
      CAPTURE(r.all);
      CHECK(r.code == 0);
      // SSH_CONNECTION in each node says which address its session reached.
      for (const char* w : {"worker/0", "worker/1", "worker/2"})
        CHECK(has(r.out, fmt::format("[{}@{}] reached at 127.0.0.3\n", w, h3())));
      CHECK_FALSE(has(r.out, "127.0.0.2"));
    }
  }

  TEST_CASE("--hostfile: slots=N gives a host N places in the round-robin order") {
    temp_dir tmp;
    auto file = (tmp.path / "hosts").string();
    std::ofstream(file) << "# two places on the first host\n"
                        << h2() << " slots=2\n\n"
                        << h3() << "  # one here\n";
    auto a = ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {}, {"--hostfile=" + file, "--replicas",
                                                         "worker=3"},
                        {"where"});
    a.erase(a.begin() + 2);  // no --hosts
    auto r = it::run(a, 60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(has(r.out, "[worker/0@" + h2() + "] reached at 127.0.0.2\n"));
    CHECK(has(r.out, "[worker/1@" + h2() + "] reached at 127.0.0.2\n"));
    CHECK(has(r.out, "[worker/2@" + h3() + "] reached at 127.0.0.3\n"));
  }

  TEST_CASE("Ctrl-C stops the nodes on every host and exits 130") {
    const std::string cached = cached_path(TLAUNCH_REMOTE_PROGRAM_EXE);
    process p(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()}, {"--replicas", "worker=4"},
                         {"idle"}));
    REQUIRE(p.wait_for_output("ready pid=", 60s, 4));
    auto pids = it::node_pids(cached);
    REQUIRE(pids.size() == 4);
    p.signal(SIGINT);
    int code = p.wait_or_kill(20s);
    CAPTURE(p.all());
    CHECK(code == 130);
    CHECK(has(p.err(), "[launcher] interrupted: stopping every node"));
    CHECK_FALSE(has(p.err(), "killing it"));  // every node stopped within the grace period
    CHECK(it::all_gone(pids, 5s));
  }

  TEST_CASE("a node that crashes on a remote host stops the program and is named") {
    const std::string cached = cached_path(TLAUNCH_REMOTE_PROGRAM_EXE);
    process p(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()}, {"--grace=3"}, {"abort"}));
    int code = p.wait_or_kill(60s);
    CAPTURE(p.all());
    CHECK(code == 1);
    // worker/1 runs on the second host and aborts; worker/0 is stopped.
    CHECK(has(p.err(), "[launcher] node worker/1@" + h3() + " failed: killed by signal SIGABRT"));
    CHECK(has(p.err(), "last output of worker/1@" + h3()));
    CHECK(it::node_pids(cached).empty());
  }

  TEST_CASE("--restart: a node that crashes on a remote host is restarted there; exit 0") {
    // The host's agent starts worker/1 again; the new process registers and gets the
    // directory; it stops the program. The file is on this machine: the hosts are loopback.
    const std::string cached = cached_path(TLAUNCH_REMOTE_PROGRAM_EXE);
    std::string once = "/tmp/" + it::unique_marker("ssh-restart");
    process p(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()}, {"--restart=worker=2"},
                         {"restart", once}));
    int code = p.wait_or_kill(60s);
    CAPTURE(p.all());
    ::unlink(once.c_str());
    CHECK(code == 0);
    CHECK(has(p.err(), "[launcher] node worker/1@" + h3() +
                           " failed: killed by signal SIGABRT; restart 1 of at most 2"));
    CHECK(has(p.err(), "[launcher] node worker/1@" + h3() + " restarted: registered "));
    CHECK(has(p.out(), "[worker/1@" + h3() + "] back after a restart"));
    CHECK(it::node_pids(cached).empty());
  }

  TEST_CASE("--colocate: a group is one process on one host; calls within it are direct") {
    // worker/0 and worker/1 in one process, worker/2 alone. The group is placed as a unit
    // (it counts once in the round-robin), so worker/2 goes to the second host.
    auto r = it::run(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()},
                                {"--replicas", "worker=3", "--colocate", "worker/0,worker/1"},
                                {"colocation"}),
                     60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    // (caller, callee) -> their pids, how often the argument was serialized, caller's host
    struct call {
      long pid = -1, peer_pid = -2, saves = -1;
      std::string at;
    };
    std::map<std::pair<int, int>, call> calls;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      auto pos = line.find("colocation index=");
      if (pos == std::string::npos) continue;
      int i = -1, j = -1;
      call c;
      char at[64] = {};
      if (std::sscanf(line.c_str() + pos, "colocation index=%d peer=%d pid=%ld peer_pid=%ld "
                      "saves=%ld at=%63s", &i, &j, &c.pid, &c.peer_pid, &c.saves, at) == 6) {
        c.at = at;
        calls[{i, j}] = c;
      }
    }
    REQUIRE(calls.size() == 9);
    CHECK(calls[{0, 0}].pid == calls[{1, 1}].pid);
    CHECK(calls[{0, 0}].pid != calls[{2, 2}].pid);
    for (const auto& entry : calls) {
      int caller = entry.first.first, callee = entry.first.second;
      const call& c = entry.second;
      CAPTURE(caller);
      CAPTURE(callee);
      bool together = caller == callee || (caller < 2 && callee < 2);
      CHECK((c.pid == c.peer_pid) == together);
      CHECK(c.saves == (together ? 0 : 1));
      CHECK(c.at == (caller < 2 ? "127.0.0.2" : "127.0.0.3"));
    }
    CHECK(has(r.out, "[worker/0+worker/1@" + h2() + "] colocation index=1"));
  }

  TEST_CASE("a host whose connection dies mid-run: named, the program stops, no node is left") {
    const std::string cached = cached_path(TLAUNCH_REMOTE_PROGRAM_EXE);
    process p(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()},
                         {"--replicas", "worker=4", "--grace=3"}, {"idle"}));
    REQUIRE(p.wait_for_output("ready pid=", 60s, 4));
    auto pids = it::node_pids(cached);
    REQUIRE(pids.size() == 4);
    // worker/1 runs on the second host; its parent is that host's agent, whose parent is
    // sshd's process for the connection. Killing that process is the host dying.
    auto w1 = it::node_pids(cached, "worker/1");
    REQUIRE(w1.size() == 1);
    long agent_pid = parent_of(w1[0]);
    CHECK(has(it::cmdline(static_cast<pid_t>(agent_pid)), "--tlaunch-agent"));
    long sshd_pid = parent_of(agent_pid);
    std::string name;
    std::ifstream("/proc/" + std::to_string(sshd_pid) + "/comm") >> name;
    REQUIRE(name == "sshd");
    REQUIRE(::kill(static_cast<pid_t>(sshd_pid), SIGKILL) == 0);
    int code = p.wait_or_kill(30s);
    CAPTURE(p.all());
    CHECK(code == 1);
    CHECK(has(p.err(), "[launcher] node worker/1@" + h3() + " failed: ssh connection to " + h3() +
                           " lost ("));
    CHECK_FALSE(has(p.err(), "node worker/0@" + h2() + " failed"));  // the good host is not blamed
    CHECK(it::all_gone(pids, cached, 10s));
  }

  TEST_CASE("an agent killed mid-run: its nodes fail naming the agent and its signal, none is left") {
    const std::string cached = cached_path(TLAUNCH_REMOTE_PROGRAM_EXE);
    process p(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()}, {"--replicas", "worker=2"},
                         {"idle"}));
    REQUIRE(p.wait_for_output("ready pid=", 60s, 2));
    auto pids = it::node_pids(cached);
    auto w1 = it::node_pids(cached, "worker/1");
    REQUIRE(w1.size() == 1);
    long agent_pid = parent_of(w1[0]);
    REQUIRE(has(it::cmdline(static_cast<pid_t>(agent_pid)), "--tlaunch-agent"));
    REQUIRE(::kill(static_cast<pid_t>(agent_pid), SIGKILL) == 0);
    int code = p.wait_or_kill(30s);
    CAPTURE(p.all());
    CHECK(code == 1);
    CHECK(has(p.err(), "[launcher] node worker/1@" + h3() + " failed: its agent on " + h3() +
                           " died (killed by signal SIGKILL)"));
    CHECK(it::all_gone(pids, 10s));
  }

  TEST_CASE("SIGKILL of the launcher: no node process is left on any host within seconds") {
    const std::string cached = cached_path(TLAUNCH_REMOTE_PROGRAM_EXE);
    process p(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()}, {"--replicas", "worker=4"},
                         {"idle"}));
    REQUIRE(p.wait_for_output("ready pid=", 60s, 4));
    auto pids = it::node_pids(cached);
    CAPTURE(p.all());
    REQUIRE(pids.size() == 4);
    p.signal(SIGKILL);
    CHECK(p.wait(5s) == 128 + SIGKILL);
    CHECK(it::all_gone(pids, cached, 5s));
  }

  TEST_CASE("a host where nothing listens is named in the error") {
    const std::string dead = host("127.0.0.2", closed_port());
    auto r = it::run(ssh_launch(TLAUNCH_HELLO_WORLD_EXE, {h3(), dead}), 60s);
    CAPTURE(r.all);
    CHECK(r.code == 2);
    CHECK(has(r.err, "cannot start nodes over ssh"));
    CHECK(has(r.err, "ssh " + dead + ": cannot connect"));
    CHECK_FALSE(has(r.err, "ssh " + h3() + ":"));  // the good host is not blamed
  }

  TEST_CASE("a key the host refuses is named with the host and the key file") {
    temp_dir tmp;
    auto key = fresh_key(tmp.path);
    auto r = it::run(ssh_launch(TLAUNCH_HELLO_WORLD_EXE, {h2()}, {"--ssh-identity=" + key}), 60s);
    CAPTURE(r.all);
    CHECK(r.code == 2);
    CHECK(has(r.err, "ssh " + h2() + ": "));
    CHECK(has(r.err, "authentication refused for user root"));
    CHECK(has(r.err, key));
  }

  TEST_CASE("an unknown host key is refused with its fingerprint; --ssh-accept-new records it") {
    temp_dir tmp;
    auto known = (tmp.path / "known_hosts").string();
    std::ofstream(known).flush();
    auto r = it::run(ssh_launch(TLAUNCH_HELLO_WORLD_EXE, {h2()}, {"--known-hosts=" + known}), 60s);
    CAPTURE(r.all);
    CHECK(r.code == 2);
    CHECK(has(r.err, "ssh " + h2() + ": "));
    CHECK(has(r.err, "host key unknown"));
    CHECK(has(r.err, "SHA256:"));

    auto ok = it::run(ssh_launch(TLAUNCH_HELLO_WORLD_EXE, {h2()},
                                 {"--known-hosts=" + known, "--ssh-accept-new"}),
                      60s);
    CAPTURE(ok.all);
    CHECK(ok.code == 0);
    CHECK(has(ok.out, "total now 400\n"));
    CHECK(has(read_all(known), "[127.0.0.2]:" + env().port + " "));
  }

  TEST_CASE("a changed host key is refused even with --ssh-accept-new") {
    temp_dir tmp;
    auto key = fresh_key(tmp.path);
    auto pub = read_all(key + ".pub");
    auto known = (tmp.path / "known_hosts").string();
    std::ofstream(known) << "[127.0.0.2]:" << env().port << " " << pub;
    auto r = it::run(ssh_launch(TLAUNCH_HELLO_WORLD_EXE, {h2()},
                                {"--known-hosts=" + known, "--ssh-accept-new"}),
                     60s);
    CAPTURE(r.all);
    CHECK(r.code == 2);
    CHECK(has(r.err, "ssh " + h2() + ": "));
    CHECK(has(r.err, "HOST KEY CHANGED"));
  }

  TEST_CASE("run_cmd: one runner per host, and the display prints every host's rows") {
    auto r = it::run(ssh_launch(TLAUNCH_RUN_CMD_EXE, {h2(), h3()}, {"--replicas", "runner=2"}),
                     60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    // runner/0 on h2, runner/1 on h3, display/0 on h2.
    const std::string display = "[display/0@" + h2() + "] ";
    CHECK(has(r.out, display + "runner "));
    auto row = [&](const char* runner, const char* address, const char* command) {
      for (std::string_view rest = r.out; !rest.empty();) {
        auto nl = rest.find('\n');
        std::string line(rest.substr(0, nl));
        rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
        if (line.rfind(display + runner + " ", 0) == 0 && has(line, std::string(" ") + address + " ") &&
            has(line, std::string(" ") + command + " "))
          return line;
      }
      return std::string();
    };
    for (auto [runner, address] : {std::pair{"runner/0", "127.0.0.2"}, {"runner/1", "127.0.0.3"}}) {
      auto nproc = row(runner, address, "nproc");
      CAPTURE(nproc);
      CHECK(nproc.find_last_of("0123456789") == nproc.size() - 1);
    }
    CHECK(process::occurrences(r.out, " uptime ") == 2);
    CHECK(process::occurrences(r.out, " nvidia-smi -L ") == 2);
  }

#ifdef TLAUNCH_ACTOR_LEARNER_EXE
  // The newer examples, once each across the two hosts (round-robin in program order).
  TEST_CASE("actor_learner across two hosts: replay, actors and learner; the curve improves") {
    auto r = it::run(ssh_launch(TLAUNCH_ACTOR_LEARNER_EXE, {h2(), h3()}), 60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    // replay/0 on h2, actor/0..3 on h3, h2, h3, h2, learner/0 on h3.
    const std::string learner = "[learner/0@" + h3() + "] ";
    CHECK(process::occurrences(r.out, learner + "steps ") == 10);
    double first = 1, last = 0;
    auto at = r.out.find(learner + "learning curve: first window ");
    REQUIRE(at != std::string::npos);
    REQUIRE(std::sscanf(r.out.c_str() + at + learner.size(),
                        "learning curve: first window %lf, last window %lf", &first, &last) == 2);
    CHECK(last > 0.65);
    CHECK(last > first + 0.1);
    CHECK(it::node_pids(cached_path(TLAUNCH_ACTOR_LEARNER_EXE)).empty());
  }

  TEST_CASE("topologies --shape=tree across two hosts: fan-out and reduction check out") {
    auto r = it::run(ssh_launch(TLAUNCH_TOPOLOGIES_EXE, {h2(), h3()}, {}, {"--shape=tree"}), 60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    // leaf/0..3 on h2, h3, h2, h3; mid/0 on h2, mid/1 on h3; root/0 on h2.
    const std::string root = "[root/0@" + h2() + "] ";
    CHECK(process::occurrences(r.out, " numbers; back: sum of squares ") == 4);
    CHECK(has(r.out, root + "mid/1 -> root: 2 partial sums, total 292041750\n"));
    CHECK(has(r.out, root + "tree: sum of squares of 1..1000 = 333833500, expected 333833500: ok\n"));
    CHECK(!has(r.out, "MISMATCH"));
  }

  TEST_CASE("data_parallel across two hosts: the loss falls") {
    auto r = it::run(ssh_launch(TLAUNCH_DATA_PARALLEL_EXE, {h2(), h3()}), 60s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    // server/0 on h2, worker/0..3 on h3, h2, h3, h2.
    const std::string worker = "[worker/0@" + h3() + "] ";
    CHECK(has(r.out, worker + "step    1: loss 0.6931 "));
    double first = 0, last = 1;
    auto at = r.out.find(worker + "loss on its shard fell from ");
    REQUIRE(at != std::string::npos);
    REQUIRE(std::sscanf(r.out.c_str() + at + worker.size(), "loss on its shard fell from %lf to %lf",
                        &first, &last) == 2);
    CHECK(last < 0.4);
    CHECK(last < first);
  }
#endif

  TEST_CASE("TLAUNCH_TIMINGS=1: 16 nodes on two hosts, time to registered and to stop") {
    ::setenv("TLAUNCH_TIMINGS", "1", 1);
    auto r = it::run(ssh_launch(TLAUNCH_HELLO_WORLD_EXE, {h2(), h3()}, {"--replicas", "producer=15"}),
                     120s);
    ::unsetenv("TLAUNCH_TIMINGS");
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(has(r.out, "total now 1500\n"));
    CHECK(it::missing(r.err, {"[launcher] timings: 16 nodes on 2 hosts; ssh sessions ", " ms; upload ",
                              " ms; start of the nodes to all registered "}) == "");
    MESSAGE(r.err.substr(r.err.find("timings:")));
  }

  TEST_CASE("the agent refuses a second start of an id it runs, and ends at EOF on stdin") {
    // The agent's protocol over plain pipes (no sshd): "start ID HEX(args)..." twice with the
    // same id. The second is answered "f ID HEX(already started)" instead of replacing (and
    // waiting for) the first node; EOF then ends the agent and its node.
    auto r = it::run({"/bin/sh", "-c",
                      fmt::format("printf 'start a 2d2d68656c70\\nstart a 2d2d68656c70\\n' | "
                                  "'{}' --tlaunch-agent",
                                  TLAUNCH_REMOTE_PROGRAM_EXE)},
                     30s);
    CAPTURE(r.all);
    CHECK(!r.timed_out);
    CHECK(r.code == 0);
    CHECK(has(r.out, "f a 616c72656164792073746172746564"));  // hex("already started")
  }

  TEST_CASE("the agent starts an id again once its process has ended (a restart)") {
    auto r = it::run({"/bin/sh", "-c",
                      fmt::format("(printf 'start a 2d2d68656c70\\n'; sleep 1; "
                                  "printf 'start a 2d2d68656c70\\n'; sleep 1) | '{}' --tlaunch-agent",
                                  TLAUNCH_REMOTE_PROGRAM_EXE)},
                     30s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(!has(r.out, "f a "));
    CHECK(process::occurrences(r.out, "x a 0 0 -") == 2);
  }

  TEST_CASE("64 instances on three hosts: one agent per host starts them all, every one runs") {
    // 127.0.0.1 is not in the fixture's known_hosts: a copy, and its key accepted.
    temp_dir tmp;
    auto known = (tmp.path / "known_hosts").string();
    std::ofstream(known) << read_all(env().known_hosts);
    const std::string h1 = host("127.0.0.1");
    process p(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h1, h2(), h3()},
                         {"--replicas", "worker=64", "--known-hosts=" + known, "--ssh-accept-new"},
                         {"idle"}));
    REQUIRE(p.wait_for_output("ready pid=", 120s, 64));
    const std::string cached = cached_path(TLAUNCH_REMOTE_PROGRAM_EXE);
    auto pids = it::node_pids(cached);
    CHECK(pids.size() == 64);
    // The nodes' parents: one agent per host, each started once through the login shell.
    std::set<long> agents;
    for (auto pid : pids) agents.insert(parent_of(pid));
    CHECK(agents.size() == 3);
    for (long a : agents) CHECK(has(it::cmdline(static_cast<pid_t>(a)), "--tlaunch-agent"));
    // Each agent forked its nodes (it was given the program's arguments), none executed;
    // under ThreadSanitizer nodes are always executed.
    for (auto pid : pids) CHECK(forked_node(pid) == !tlaunch::detail::thread_sanitizer);
    p.signal(SIGINT);
    int code = p.wait_or_kill(60s);
    CAPTURE(p.all());
    CHECK(code == 130);
    // Round-robin: worker/i on the (i mod 3)-th host, each one's line prefixed with it.
    const std::string hosts[] = {h1, h2(), h3()};
    for (int i = 0; i < 64; ++i)
      CHECK(has(p.out(), fmt::format("[worker/{}@{}] ready pid=", i, hosts[i % 3])));
    CHECK(process::occurrences(p.out(), "] ready pid=") == 64);
    CHECK(it::all_gone(pids, 10s));
    CHECK(it::all_gone(std::vector<pid_t>(agents.begin(), agents.end()), 10s));
  }

  TEST_CASE("--exec-nodes: the agent executes its nodes instead of forking them") {
    const std::string cached = cached_path(TLAUNCH_REMOTE_PROGRAM_EXE);
    process p(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()},
                         {"--replicas", "worker=2", "--exec-nodes"}, {"idle"}));
    REQUIRE(p.wait_for_output("ready pid=", 60s, 2));
    auto pids = it::node_pids(cached);
    CAPTURE(p.all());
    REQUIRE(pids.size() == 2);
    for (auto pid : pids) {
      CHECK(!forked_node(pid));
      CHECK(has(it::cmdline(static_cast<pid_t>(parent_of(pid))), "--exec-nodes --tlaunch-agent"));
    }
    p.signal(SIGINT);
    CHECK(p.wait_or_kill(60s) == 130);
    CHECK(it::all_gone(pids, 10s));
  }

  TEST_CASE("--ssh-per-node-exec: the path without agents (for the benchmark) still runs, and its nodes watch themselves") {
    ::setenv("TLAUNCH_TIMINGS", "1", 1);
    auto r = it::run(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()}, {"--ssh-per-node-exec"},
                                {"where"}),
                     60s);
    ::unsetenv("TLAUNCH_TIMINGS");
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(has(r.out, "[worker/0@" + h2() + "] reached at 127.0.0.2\n"));
    CHECK(has(r.out, "[worker/1@" + h3() + "] reached at 127.0.0.3\n"));
    CHECK(has(r.err, "2 nodes on 2 hosts (per-node exec); "));

    // No agent watches these nodes: each watches itself (--tlaunch-watch), and a node
    // stopped for two --liveness intervals is killed and named.
    process p(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2()},
                         {"--ssh-per-node-exec", "--replicas", "worker=1"}, {"idle"}));
    REQUIRE(p.wait_for_output("ready pid=", 60s, 1));
    long node = 0;
    auto at = p.out().find("ready pid=");
    node = std::stol(p.out().substr(at + 10));
    long watch = parent_of(node);
    CHECK(has(it::cmdline(static_cast<pid_t>(watch)), "--tlaunch-watch"));
    REQUIRE(::kill(static_cast<pid_t>(node), SIGSTOP) == 0);
    int code = p.wait_or_kill(60s);
    CAPTURE(p.all());
    CHECK(code == 1);
    CHECK(has(p.all(), "[worker/0@" + h2() + "] tlaunch: node process stopped (SIGSTOP) for 2 s: it "
                       "stopped answering; killed"));
    CHECK(has(p.err(), "node worker/0@" + h2() + " failed"));
    CHECK(it::all_gone({static_cast<pid_t>(node), static_cast<pid_t>(watch)}, 10s));
  }

  TEST_CASE("--terminal=tmux: a window per node shows its output; closing it stops all; nothing outlives kill -9") {
    if (::access("/usr/bin/tmux", X_OK) != 0) {
      MESSAGE("skipped: no tmux");
      return;
    }
    // What a window shows; its tail may lag the launcher's own output by a moment.
    auto shows = [](const std::string& session, const std::string& window, const char* text) {
      for (int i = 0; i < 50; ++i) {
        auto r = it::run({"/usr/bin/tmux", "capture-pane", "-p", "-t", session + ":" + window}, 10s);
        if (has(r.out, text)) return true;
        std::this_thread::sleep_for(100ms);
      }
      return false;
    };
    // A tmux server of this test's own: TMUX_TMPDIR holds its socket.
    temp_dir tmp;
    ::setenv("TMUX_TMPDIR", tmp.path.c_str(), 1);
    process p(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()}, {"--terminal=tmux"},
                         {"idle"}));
    REQUIRE(p.wait_for_output("ready pid=", 60s, 2));
    auto pids = it::node_pids(cached_path(TLAUNCH_REMOTE_PROGRAM_EXE));
    const std::string session = fmt::format("tlaunch-{}", p.pid());
    CHECK(has(p.err(), "[launcher] tmux session " + session));
    CHECK(shows(session, "worker/0", "ready pid="));
    CHECK(shows(session, "worker/1", "ready pid="));
    // Closing the session stops the program.
    CHECK(it::run({"/usr/bin/tmux", "kill-session", "-t", session}, 10s).code == 0);
    int code = p.wait_or_kill(30s);
    ::unsetenv("TMUX_TMPDIR");
    CAPTURE(p.all());
    CHECK(code == 143);
    CHECK(it::all_gone(pids, 10s));
    CHECK_FALSE(fs::exists(fs::temp_directory_path() / session));  // the windows' files

    // A program that ends by itself leaves its windows readable until the session is closed;
    // a restarted instance (worker/1 crashes once, its new process stops the program) keeps
    // its window: both processes' lines in it, and no third window. (--ssh-terminal=tmux:
    // the deprecated alias of --terminal=tmux.)
    ::setenv("TMUX_TMPDIR", tmp.path.c_str(), 1);
    std::string once = "/tmp/" + it::unique_marker("tmux-restart");
    auto r = it::run(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2(), h3()},
                                {"--ssh-terminal=tmux", "--restart=worker=1"}, {"restart", once}),
                     60s);
    ::unlink(once.c_str());
    CAPTURE(r.all);
    CHECK(r.code == 0);
    auto at = r.err.find("[launcher] tmux session ");
    REQUIRE(at != std::string::npos);
    const std::string ended = r.err.substr(at + 24, r.err.find(',', at) - at - 24);
    CHECK(shows(ended, "worker/1", "back after a restart"));
    CHECK(shows(ended, "worker/1", "--- restarted ---"));
    auto windows = it::run({"/usr/bin/tmux", "list-windows", "-t", ended, "-F", "#W"}, 10s);
    CHECK(windows.out == "worker/0\nworker/1\n");
    CHECK(it::run({"/usr/bin/tmux", "kill-session", "-t", ended}, 10s).code == 0);

    // kill -9 of the launcher: the session (its windows' commands), the windows' files and
    // the nodes are gone within seconds; the tmux server is no child of the launcher.
    process k(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2()}, {"--terminal=tmux"}, {"idle"}));
    REQUIRE(k.wait_for_output("ready pid=", 60s, 1));
    auto killed_pids = it::node_pids(cached_path(TLAUNCH_REMOTE_PROGRAM_EXE));
    const std::string orphan = fmt::format("tlaunch-{}", k.pid());
    REQUIRE(it::run({"/usr/bin/tmux", "has-session", "-t", "=" + orphan}, 10s).code == 0);
    k.signal(SIGKILL);
    CHECK(k.wait(5s) == 128 + SIGKILL);
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
      gone = it::run({"/usr/bin/tmux", "has-session", "-t", "=" + orphan}, 10s).code != 0;
      if (!gone) std::this_thread::sleep_for(100ms);
    }
    CHECK(gone);
    CHECK(it::all_gone(killed_pids, 10s));
    CHECK_FALSE(fs::exists(fs::temp_directory_path() / orphan));
    ::unsetenv("TMUX_TMPDIR");
  }

  TEST_CASE("a binary that cannot run there fails the launch naming node and host") {
    // The cache folder of remote_program becomes a noexec tmpfs: the upload works, exec fails.
    const std::string cached = cached_path(TLAUNCH_REMOTE_PROGRAM_EXE);
    const auto dir = fs::path(cached).parent_path();
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir);
    if (::mount("tlaunch-noexec", dir.c_str(), "tmpfs", MS_NOEXEC | MS_NOSUID | MS_NODEV,
                "size=64m") != 0) {
      MESSAGE("skipped: cannot mount a noexec tmpfs here (" << std::strerror(errno) << ")");
      return;
    }
    struct unmount {
      fs::path d;
      ~unmount() {
        ::umount2(d.c_str(), MNT_DETACH);
        std::error_code ec;
        fs::remove_all(d, ec);
      }
    } cleanup{dir};
    auto r = it::run(ssh_launch(TLAUNCH_REMOTE_PROGRAM_EXE, {h2()}, {"--replicas", "worker=1"},
                                {"idle"}),
                     60s);
    CAPTURE(r.all);
    CHECK(r.code == 1);
    CHECK(has(r.err, "[launcher] node worker/0@" + h2() + " failed: exited with code 126"));
    CHECK(has(r.err, "Permission denied"));
  }
}
