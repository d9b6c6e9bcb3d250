// Failures and stops of a multi-process program: a node that throws, aborts,
// exits or ignores the stop; SIGTERM, SIGINT and SIGKILL to the launcher. After
// each, no node process may be left (found by a marker in their argv).
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <tlaunch/launch/process/node_forker.hpp>

#include "../common/process.hpp"

namespace it = tlaunch::integration;
using it::process;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& s, std::string_view needle) {
  return s.find(needle) != std::string::npos;
}

// faulty with launcher flags, then `-- mode [param] marker`.
std::vector<std::string> faulty(std::vector<std::string> flags, std::vector<std::string> args,
                                const std::string& marker) {
  std::vector<std::string> a{TLAUNCH_FAULTY_EXE};
  a.insert(a.end(), flags.begin(), flags.end());
  a.push_back("--");
  a.insert(a.end(), args.begin(), args.end());
  a.push_back(marker);
  return a;
}

// Starts faulty under local_mp, waits until both workers run; the three node pids.
std::vector<pid_t> started_nodes(process& p, const std::string& marker) {
  REQUIRE(p.wait_for_output("ready pid=", 20s, 2));
  auto pids = it::node_pids(marker);
  CAPTURE(p.all());
  REQUIRE(pids.size() == 3);  // target/0, worker/0, worker/1
  return pids;
}

// The fields of faulty's "colocation index=I pid=P target_pid=T saves=S" line of worker/I.
struct colocation_line {
  long pid = -1, target_pid = -2, saves = -1;
};
colocation_line colocation_of(const std::string& out, int index) {
  colocation_line c;
  auto at = out.find("colocation index=" + std::to_string(index) + " ");
  if (at != std::string::npos)
    std::sscanf(out.c_str() + at, "colocation index=%*d pid=%ld target_pid=%ld saves=%ld", &c.pid,
                &c.target_pid, &c.saves);
  return c;
}

// --terminal=tmux: a tmux server of the test's own (TMUX_TMPDIR holds its socket), for the
// test's lifetime; tmux(...) runs the tmux command line given.
struct private_tmux {
  std::string dir;
  private_tmux() {
    char tmpl[] = "/tmp/tlaunch-tmux-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    ::setenv("TMUX_TMPDIR", dir.c_str(), 1);
  }
  ~private_tmux() {
    run({"kill-server"});
    ::unsetenv("TMUX_TMPDIR");
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  static it::finished run(std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/tmux");
    return it::run(std::move(args), 10s);
  }
  // True once window `window` of `session` shows `text` (its tail may lag the launcher's
  // own output by a moment).
  static bool shows(const std::string& session, const std::string& window, std::string_view text) {
    for (int i = 0; i < 50; ++i) {
      if (has(run({"capture-pane", "-p", "-t", fmt::format("={}:{}", session, window)}).out, text)) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
};

// The session the launcher named in its "[launcher] tmux session NAME, ..." line.
std::string tmux_session_of(const std::string& err) {
  const std::string intro = "[launcher] tmux session ";
  auto at = err.find(intro);
  if (at == std::string::npos) return {};
  at += intro.size();
  return err.substr(at, err.find(',', at) - at);
}

}  // namespace

TEST_SUITE("faults") {
  TEST_CASE("a node that throws: the launcher exits 1 and names the node and its message") {
    for (std::string launch : {"local_mt", "local_mp"}) {
      CAPTURE(launch);
      auto marker = it::unique_marker("throw");
      process p(faulty({"--launch=" + launch}, {"throw"}, marker));
      int code = p.wait_or_kill(20s);
      CAPTURE(p.all());
      CHECK(code == 1);
      CHECK(has(p.err(), "node worker/0 failed"));
      CHECK(has(p.err(), "faulty worker gave up on purpose"));
      CHECK(it::node_pids(marker).empty());
    }
  }

  TEST_CASE("a node that aborts: named, with its signal; the other nodes are stopped") {
    auto marker = it::unique_marker("abort");
    process p(faulty({"--launch=local_mp"}, {"abort"}, marker));
    auto pids = started_nodes(p, marker);
    int code = p.wait_or_kill(20s);
    CAPTURE(p.all());
    CHECK(code == 1);
    CHECK(has(p.err(), "node worker/0 failed: killed by signal SIGABRT"));
    CHECK(it::all_gone(pids, marker, 3s));
  }

  TEST_CASE("a node process that exits with a code of its own stops the program") {
    auto marker = it::unique_marker("exit");
    process p(faulty({"--launch=local_mp"}, {"exit", "3"}, marker));
    int code = p.wait_or_kill(20s);
    CAPTURE(p.all());
    CHECK(code == 1);
    CHECK(has(p.err(), "node worker/0 failed: exited with code 3"));
    CHECK(it::node_pids(marker).empty());
  }

  TEST_CASE("a node that ignores the stop is killed after --grace; the launcher still exits") {
    for (std::string launch : {"local_mt", "local_mp"}) {
      CAPTURE(launch);
      auto marker = it::unique_marker("hang");
      auto t0 = std::chrono::steady_clock::now();
      process p(faulty({"--launch=" + launch, "--grace=1"}, {"hang"}, marker));
      int code = p.wait_or_kill(20s);
      auto took = std::chrono::steady_clock::now() - t0;
      CAPTURE(p.all());
      CHECK(!p.timed_out());
      CHECK(code == 1);
      CHECK(has(p.all(), "ignoring the stop from now on"));
      CHECK(has(p.err(), "grace period"));
      // 1 s of grace plus start-up and the launcher's margin, far from the 5 s default.
      CHECK(took < 4500ms);
      CHECK(it::node_pids(marker).empty());
    }
  }

  TEST_CASE("a node process that cannot even exit by itself is killed, and that is a failure") {
    // SIGSTOP freezes the node's own grace-period exit too: only the launcher's kill ends it.
    auto marker = it::unique_marker("freeze");
    process p(faulty({"--launch=local_mp", "--grace=1"}, {"freeze"}, marker));
    auto pids = started_nodes(p, marker);
    int code = p.wait_or_kill(20s);
    CAPTURE(p.all());
    CHECK(!p.timed_out());
    CHECK(code == 1);
    CHECK(has(p.err(), "[worker/0] did not stop within the grace period; killing it"));
    CHECK(has(p.err(), "node worker/0 failed: did not stop within the grace period; killed"));
    CHECK(it::all_gone(pids, marker, 3s));
  }

  TEST_CASE("--heartbeat: a node that stops answering is named, and the program stops") {
    // worker/0 freezes itself (SIGSTOP) without closing anything; nobody stops the program.
    // Heartbeats every second: its silence is noticed after three intervals (--liveness=0:
    // the launcher's own watch of stopped processes would notice first). The bound below
    // is a generous multiple of that; the launcher kills the frozen process after --grace.
    auto marker = it::unique_marker("stall");
    process p(faulty({"--launch=local_mp", "--heartbeat=1", "--liveness=0", "--grace=1"},
                     {"stall"}, marker));
    auto pids = started_nodes(p, marker);
    int code = p.wait_or_kill(30s);
    CAPTURE(p.all());
    CHECK(!p.timed_out());
    CHECK(code == 1);
    CHECK(has(p.err(), "node worker/0 failed"));
    CHECK(has(p.err(), "stopped answering"));
    CHECK(it::all_gone(pids, marker, 5s));
  }

  TEST_CASE("restart: a node that crashes on its 3rd call is restarted; calls reach it; exit 0") {
    // target's policy (3 restarts within 60 s) is in faulty's program. worker/0 makes 6
    // calls, retrying every 50 ms one that fails as unavailable: the 3rd, in flight when
    // target aborts, fails so; the calls made while target restarts (a second at least)
    // wait for it, and the same handle reaches the new process.
    auto marker = it::unique_marker("restart");
    std::string once = "/tmp/" + marker + ".once";
    ::setenv("FAULTY_TARGET_CRASH", "3", 1);
    ::setenv("FAULTY_ONCE", once.c_str(), 1);
    process p(faulty({"--launch=local_mp", "--color=never"}, {"calls", "6"}, marker));
    ::unsetenv("FAULTY_TARGET_CRASH");
    ::unsetenv("FAULTY_ONCE");
    int code = p.wait_or_kill(30s);
    CAPTURE(p.all());
    ::unlink(once.c_str());
    CHECK(code == 0);
    CHECK(has(p.err(), "node target/0 failed: killed by signal SIGABRT; restart 1 of at most 3 "
                       "within 60 s, in 100 ms"));
    CHECK(has(p.err(), "node target/0 restarted: registered "));
    CHECK(has(p.out(), "[worker/0] call 3 failed: target/0 Target::ping unavailable"));
    CHECK(has(p.out(), "[worker/0] call 6 -> 7"));
    CHECK(process::occurrences(p.err(), "restart 1 of") == 1);
    // Calls failing at once during the restart would be about 20; the count allows a
    // late directory update from the launcher.
    auto pos = p.out().find("6 good calls, ");
    REQUIRE(pos != std::string::npos);
    CHECK(std::stoi(p.out().substr(pos + 14)) <= 5);
    CHECK(!has(p.err(), "restart 2 of"));
    CHECK(it::node_pids(marker).empty());
  }

  TEST_CASE("restart: a crash loop spends the budget; the program fails naming node and count") {
    auto marker = it::unique_marker("crash-loop");
    ::setenv("FAULTY_TARGET_CRASH", "1", 1);  // every process of target aborts at once
    process p(faulty({"--launch=local_mp", "--color=never"}, {"calls", "6"}, marker));
    ::unsetenv("FAULTY_TARGET_CRASH");
    int code = p.wait_or_kill(60s);
    CAPTURE(p.all());
    CHECK(!p.timed_out());
    CHECK(code == 1);
    CHECK(process::occurrences(p.err(), "node target/0 restarted: registered") == 3);
    CHECK(has(p.err(), "restart 3 of at most 3 within 60 s, in 400 ms"));  // backoff doubles
    CHECK(has(p.err(), "[launcher] node target/0 failed: killed by signal SIGABRT; restarted 3 "
                       "times within 60 s, the limit of its restart policy"));
    CHECK(it::node_pids(marker).empty());
  }

  TEST_CASE("restart: --restart: a stopped node is killed and restarted by default, exit 0") {
    // worker/0 stops itself with SIGSTOP once; the launcher, its parent, sees it stopped for
    // two --liveness intervals (default 1 s), kills it and starts it again; the new
    // worker/0 stops the program.
    auto marker = it::unique_marker("stall-restart");
    std::string once = "/tmp/" + marker + ".once";
    ::setenv("FAULTY_ONCE", once.c_str(), 1);
    process p(faulty({"--launch=local_mp", "--color=never", "--restart", "worker=1"}, {"stall"},
                     marker));
    ::unsetenv("FAULTY_ONCE");
    int code = p.wait_or_kill(40s);
    CAPTURE(p.all());
    ::unlink(once.c_str());
    CHECK(!p.timed_out());
    CHECK(code == 0);
    CHECK(has(p.err(), "node worker/0 failed: stopped (SIGSTOP) for 2 s: it stopped answering "
                       "(killed by signal SIGKILL); restart 1 of at most 1"));
    CHECK(has(p.out(), "[worker/0] restarted after a stall"));
    CHECK(it::node_pids(marker).empty());
  }

  TEST_CASE("by default a node computing for 4 s without a co_await is not taken as gone") {
    // target's only io thread computes for 4 s in a call from worker/0, which meanwhile
    // sends it 8 calls of 256 KiB (more than target's socket takes unread: its receive
    // window closes); worker/1 computes in run() as long. Liveness (keepalive, the
    // unanswered-data check, the watch of stopped processes) sees hosts and stops, not a
    // busy process: the calls complete and the program ends with 0.
    auto marker = it::unique_marker("busy");
    process p(faulty({"--launch=local_mp", "--color=never"}, {"busy", "4000", "256"}, marker));
    int code = p.wait_or_kill(60s);
    CAPTURE(p.all());
    CHECK(!p.timed_out());
    CHECK(code == 0);
    CHECK(has(p.out(), "[worker/0] busy calls done after "));
    CHECK(!has(p.all(), "failed"));
    CHECK(it::node_pids(marker).empty());
  }

  TEST_CASE("--restart names a node that is not in the program: exit 2") {
    process p(faulty({"--launch=local_mp", "--restart=wroker=1"}, {"idle"},
                     it::unique_marker("restart-typo")));
    CHECK(p.wait_or_kill(20s) == 2);
    CAPTURE(p.all());
    CHECK(has(p.err(), "--restart names node 'wroker', which is not in the program"));
  }

  TEST_CASE("SIGTERM and SIGINT to the launcher stop every node") {
    for (int sig : {SIGTERM, SIGINT}) {
      CAPTURE(sig);
      auto marker = it::unique_marker("signal");
      process p(faulty({"--launch=local_mp"}, {"idle"}, marker));
      auto pids = started_nodes(p, marker);
      p.signal(sig);
      int code = p.wait_or_kill(15s);
      CAPTURE(p.all());
      CHECK(code == 128 + sig);
      CHECK(has(p.err(), "stopping every node"));
      CHECK(it::all_gone(pids, 3s));
      // Stopped, not killed: nobody needed the grace period.
      CHECK(!has(p.err(), "killing it"));
    }
  }

  TEST_CASE("a signal while the program stops kills every node at once; its exit code is the signal's") {
    // worker/1 stops the program, worker/0 ignores the stop: Ctrl-C cuts the 30 s grace
    // period short, and the launcher does not report success with a node it had to kill.
    auto marker = it::unique_marker("stopping-signal");
    process p(faulty({"--launch=local_mp", "--grace=30"}, {"hang"}, marker));
    REQUIRE(p.wait_for_output("ready pid=", 20s, 2));
    REQUIRE(p.wait_for_output("ignoring the stop from now on", 20s));
    std::this_thread::sleep_for(1s);  // the stop has begun: worker/1 asks 300 ms after ready
    auto pids = it::node_pids(marker);
    REQUIRE(!pids.empty());  // worker/0 at least
    p.signal(SIGINT);
    int code = p.wait_or_kill(15s);
    CAPTURE(p.all());
    CHECK(code == 128 + SIGINT);
    CHECK(has(p.err(), "[launcher] interrupted while stopping: killing every node now"));
    CHECK(it::all_gone(pids, marker, 3s));
  }

  TEST_CASE("SIGTERM to one node: it stops by itself, and the launcher's report names the signal") {
    auto marker = it::unique_marker("node-sigterm");
    process p(faulty({"--launch=local_mp"}, {"idle"}, marker));
    auto pids = started_nodes(p, marker);
    auto at = p.out().find("[worker/0] ready pid=");
    REQUIRE(at != std::string::npos);
    REQUIRE(::kill(static_cast<pid_t>(std::stol(p.out().substr(at + 21))), SIGTERM) == 0);
    int code = p.wait_or_kill(15s);
    CAPTURE(p.all());
    CHECK(code == 1);
    // Its exit or its closed connection, whichever the launcher notices first, is the
    // failure; the report's last output names the signal either way.
    CHECK((has(p.err(), "node worker/0 failed: exited before the program stopped") ||
           has(p.err(), "node worker/0 failed: lost its connection: closed by worker/0")));
    CHECK(has(p.err(), "[launcher]   tlaunch: SIGTERM received: stopping"));  // its last output
    CHECK(it::all_gone(pids, 3s));
  }

  TEST_CASE("SIGINT before every node registered: nobody waits out the grace period") {
    // The workers register at once; target only after its constructor's 3 s. A stop in
    // between reaches workers whose run() never started: they exit at once, rather than
    // wait --grace for a body that will not run and be killed.
    auto marker = it::unique_marker("early-stop");
    ::setenv("FAULTY_SLOW_TARGET", "3", 1);
    process p(faulty({"--launch=local_mp", "--grace=30"}, {"idle"}, marker));
    ::unsetenv("FAULTY_SLOW_TARGET");
    std::vector<pid_t> pids;
    for (int i = 0; i < 200 && pids.size() < 3; ++i) {
      std::this_thread::sleep_for(20ms);
      pids = it::node_pids(marker);
    }
    REQUIRE(pids.size() == 3);
    std::this_thread::sleep_for(500ms);
    p.signal(SIGINT);
    int code = p.wait_or_kill(20s);
    CAPTURE(p.all());
    CHECK(code == 128 + SIGINT);
    CHECK(!has(p.all(), "ready pid="));  // no run() started
    CHECK(!has(p.err(), "killing it"));
    CHECK(!has(p.err(), "grace period"));
    CHECK(it::all_gone(pids, 10s));
  }

  TEST_CASE("SIGINT under local_mt stops the program with 130") {
    auto marker = it::unique_marker("mt-signal");
    process p(faulty({}, {"idle"}, marker));
    REQUIRE(p.wait_for_output("ready pid=", 20s, 2));
    p.signal(SIGINT);
    int code = p.wait_or_kill(15s);
    CAPTURE(p.all());
    CHECK(code == 130);
  }

  TEST_CASE("SIGKILL of the launcher: every node process exits within seconds") {
    auto marker = it::unique_marker("sigkill");
    process p(faulty({"--launch=local_mp"}, {"idle"}, marker));
    auto pids = started_nodes(p, marker);
    p.signal(SIGKILL);
    CHECK(p.wait(5s) == 128 + SIGKILL);
    CAPTURE(p.all());
    CHECK(it::all_gone(pids, marker, 5s));
  }

  TEST_CASE("node processes inherit none of the launcher's sockets") {
    // An inherited coordinator socket would keep the launcher's port open after it
    // died, and an inherited connection would hide the launcher's death from a node.
    auto marker = it::unique_marker("fds");
    process p(faulty({"--launch=local_mp"}, {"idle"}, marker));
    auto pids = started_nodes(p, marker);
    auto launcher = it::socket_inodes(p.pid());
    CHECK(!launcher.empty());
    for (pid_t node : pids) {
      CAPTURE(it::cmdline(node));
      for (const auto& inode : it::socket_inodes(node)) CHECK(launcher.count(inode) == 0);
    }
    p.signal(SIGTERM);
    CHECK(p.wait_or_kill(15s) == 143);
  }

  TEST_CASE("nodes are forked from the node forker (the launcher's children), or executed") {
    auto ppid_of = [](pid_t pid) {
      auto s = it::read_file("/proc/" + std::to_string(pid) + "/stat");
      long ppid = -1;
      auto close = s.rfind(')');
      if (close != std::string::npos) std::sscanf(s.c_str() + close + 2, "%*c %ld", &ppid);
      return ppid;
    };
    // The launcher's children whose command line holds `text`.
    auto children_with = [&](pid_t parent, const std::string& text) {
      std::vector<pid_t> out;
      if (DIR* d = ::opendir("/proc")) {
        while (dirent* e = ::readdir(d)) {
          pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
          if (pid > 0 && ppid_of(pid) == parent && it::cmdline(pid).find(text) != std::string::npos)
            out.push_back(pid);
        }
        ::closedir(d);
      }
      return out;
    };
    for (bool exec : {false, true}) {
      CAPTURE(exec);
      auto marker = it::unique_marker(exec ? "exec" : "forked");
      std::vector<std::string> flags{"--launch=local_mp"};
      if (exec) flags.push_back("--exec-nodes");
      process p(faulty(flags, {"idle"}, marker));
      auto pids = started_nodes(p, marker);
      // ps shows each node's role either way, and the launcher is each node's parent.
      for (pid_t node : pids) CHECK(ppid_of(node) == p.pid());
      CHECK(it::node_pids(marker, "worker/1").size() == 1);
      // ThreadSanitizer builds always execute (node_forker::supported()).
      bool forked = !exec && tlaunch::launch::node_forker::supported();
      CHECK(children_with(p.pid(), "(tlaunch node forker)").size() == (forked ? 1u : 0u));
      p.signal(SIGKILL);
      CHECK(p.wait(5s) == 128 + SIGKILL);
      CHECK(it::all_gone(pids, marker, 5s));
    }
  }

  TEST_CASE("a node that prints lines and stops the program: every line arrives, exit 0") {
    auto marker = it::unique_marker("lines");
    process p(faulty({"--launch=local_mp"}, {"lines", "500"}, marker));
    int code = p.wait_or_kill(20s);
    CAPTURE(p.err());
    CHECK(code == 0);
    CHECK(process::occurrences(p.out(), "[worker/0] line ") == 500);
    CHECK(has(p.out(), "[worker/0] line 500 of 500\n"));
    CHECK(it::node_pids(marker).empty());
  }

  TEST_CASE("--colocate: a group shares one process, calls within it are direct; exit 0") {
    // target and worker/0 together: worker/0's call never serializes its argument,
    // worker/1's (another process) does once.
    auto r = it::run(faulty({"--launch=local_mp", "--colocate", "target,worker/0"},
                            {"colocation"}, it::unique_marker("colocate")),
                     30s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    auto w0 = colocation_of(r.out, 0), w1 = colocation_of(r.out, 1);
    CHECK(w0.pid == w0.target_pid);
    CHECK(w0.saves == 0);
    CHECK(w1.pid != w1.target_pid);
    CHECK(w1.target_pid == w0.pid);
    CHECK(w1.saves == 1);
    CHECK(has(r.out, "[target/0+worker/0] colocation index=0"));

    // A node's name takes every replica: both workers in one process, target apart.
    r = it::run(faulty({"--launch=local_mp", "--colocate=worker"}, {"colocation"},
                       it::unique_marker("colocate")),
                30s);
    CAPTURE(r.all);
    CHECK(r.code == 0);
    w0 = colocation_of(r.out, 0);
    w1 = colocation_of(r.out, 1);
    CHECK(w0.pid == w1.pid);
    CHECK(w0.pid != w0.target_pid);
    CHECK(w0.saves == 1);
    CHECK(w1.saves == 1);
  }

  TEST_CASE("the program's colocation group, and --no-colocate and --colocate over it") {
    // faulty declares colocate<"worker/2", "worker/3">: with 4 workers they share a process.
    auto run = [](std::vector<std::string> flags) {
      flags.insert(flags.begin(), {"--launch=local_mp", "--replicas", "worker=4"});
      auto r = it::run(faulty(flags, {"colocation"}, it::unique_marker("colocate")), 30s);
      CHECK(r.code == 0);
      return r;
    };
    auto r = run({});
    CAPTURE(r.all);
    auto w = [&](int i) { return colocation_of(r.out, i); };
    CHECK(w(2).pid == w(3).pid);
    CHECK(w(1).pid != w(2).pid);
    CHECK(w(2).saves == 1);  // target is elsewhere
    CHECK(has(r.out, "[worker/2+worker/3] colocation index=2"));

    r = run({"--no-colocate"});
    CHECK(w(2).pid != w(3).pid);

    // The flag takes worker/3 out of the program's group, which keeps worker/2 alone.
    r = run({"--colocate", "target,worker/3"});
    CHECK(w(3).pid == w(3).target_pid);
    CHECK(w(3).saves == 0);
    CHECK(w(2).pid != w(3).pid);
    CHECK(w(2).pid != w(2).target_pid);
  }

  TEST_CASE("--colocate naming what the program lacks: exit 2, naming it") {
    auto r = it::run(faulty({"--launch=local_mp", "--colocate", "target,nosuch"}, {"idle"},
                            it::unique_marker("colocate")),
                     20s);
    CHECK(r.code == 2);
    CHECK(has(r.err, "--colocate target,nosuch names node 'nosuch', which is not in the program "
                     "(nodes: target, worker)"));
    r = it::run(faulty({"--launch=local_mp", "--colocate", "target,worker/2"}, {"idle"},
                       it::unique_marker("colocate")),
                20s);
    CHECK(r.code == 2);
    CHECK(has(r.err, "names 'worker/2', but node 'worker' has 2 replicas"));
  }

  TEST_CASE("a colocation group's process dies: it restarts as a whole, or the group fails") {
    // worker has no restart policy: the group cannot restart, and is named.
    auto marker = it::unique_marker("colocate-abort");
    auto r = it::run(faulty({"--launch=local_mp", "--colocate", "target,worker/0"}, {"abort"},
                            marker),
                     20s);
    CAPTURE(r.all);
    CHECK(r.code == 1);
    CHECK(has(r.err, "node target/0+worker/0 failed: killed by signal SIGABRT; worker/0 has no "
                     "restart policy (a colocation group restarts only as a whole)"));
    CHECK(it::node_pids(marker).empty());

    // With --restart worker=1 every member allows it: target aborts on its second call
    // (once), the group's process restarts, and the restarted worker/0 makes every call.
    std::string once = "/tmp/" + marker + ".once";
    ::setenv("FAULTY_TARGET_CRASH", "2", 1);
    ::setenv("FAULTY_ONCE", once.c_str(), 1);
    r = it::run(faulty({"--launch=local_mp", "--colocate", "target,worker/0", "--restart",
                        "worker=1"},
                       {"calls", "3"}, it::unique_marker("colocate-restart")),
                30s);
    ::unsetenv("FAULTY_TARGET_CRASH");
    ::unsetenv("FAULTY_ONCE");
    CAPTURE(r.all);
    CHECK(r.code == 0);
    CHECK(it::missing(r.err, {"node target/0+worker/0 failed: killed by signal SIGABRT; restart 1 of",
                              "node target/0+worker/0 restarted"}) == "");
    CHECK(has(r.out, "[target/0+worker/0] 3 good calls"));
    std::remove(once.c_str());
  }

  TEST_CASE("--terminal=tmux: a window per node process shows its lines; closing it stops all") {
    if (::access("/usr/bin/tmux", X_OK) != 0) {
      MESSAGE("skipped: no tmux");
      return;
    }
    private_tmux tmux;
    auto marker = it::unique_marker("tmux");
    process p(faulty({"--launch=local_mp", "--terminal=tmux"}, {"idle"}, marker));
    auto pids = started_nodes(p, marker);
    const std::string session = tmux_session_of(p.err());
    CAPTURE(p.all());
    CHECK(session == fmt::format("tlaunch-{}", p.pid()));
    CHECK(has(p.err(), fmt::format("tmux attach -t {}", session)));
    CHECK(tmux.run({"list-windows", "-t", fmt::format("={}", session), "-F", "#W"}).out ==
          "target/0\nworker/0\nworker/1\n");
    CHECK(tmux.shows(session, "worker/0", "ready pid="));
    CHECK(tmux.shows(session, "worker/1", "ready pid="));
    // Closing the session stops the program as SIGTERM does.
    CHECK(tmux.run({"kill-session", "-t", fmt::format("={}", session)}).code == 0);
    int code = p.wait_or_kill(20s);
    CAPTURE(p.all());
    CHECK(code == 143);
    CHECK(has(p.err(), fmt::format("tmux session {} closed: stopping every node", session)));
    CHECK(it::all_gone(pids, marker, 10s));
    CHECK_FALSE(std::filesystem::exists(std::filesystem::temp_directory_path() / session));
  }

  TEST_CASE("--terminal=tmux: the windows stay after the end, a restart keeps its window; "
            "--terminal-close closes them") {
    if (::access("/usr/bin/tmux", X_OK) != 0) {
      MESSAGE("skipped: no tmux");
      return;
    }
    private_tmux tmux;
    // target aborts on its second call (once) and is restarted (its policy); worker/0 makes
    // every call and stops the program: exit 0, and the session stays.
    auto marker = it::unique_marker("tmux-restart");
    std::string once = "/tmp/" + marker + ".once";
    ::setenv("FAULTY_TARGET_CRASH", "2", 1);
    ::setenv("FAULTY_ONCE", once.c_str(), 1);
    auto r = it::run(faulty({"--launch=local_mp", "--terminal=tmux"}, {"calls", "3"}, marker), 30s);
    ::unsetenv("FAULTY_TARGET_CRASH");
    ::unsetenv("FAULTY_ONCE");
    std::remove(once.c_str());
    CAPTURE(r.all);
    CHECK(r.code == 0);
    const std::string session = tmux_session_of(r.err);
    REQUIRE(!session.empty());
    CHECK(tmux.run({"has-session", "-t", fmt::format("={}", session)}).code == 0);
    CHECK(tmux.run({"list-windows", "-t", fmt::format("={}", session), "-F", "#W"}).out ==
          "target/0\nworker/0\nworker/1\n");
    CHECK(tmux.shows(session, "worker/0", "3 good calls"));
    CHECK(tmux.shows(session, "target/0", "--- killed by signal SIGABRT ---"));
    CHECK(tmux.shows(session, "target/0", "--- restarted ---"));
    // Its process ended with the program's stop: no exit code to read.
    CHECK(tmux.shows(session, "worker/1", "--- stopped ---"));
    CHECK(tmux.run({"kill-session", "-t", fmt::format("={}", session)}).code == 0);

    // --terminal-close: the session goes when the program ends, also when it fails.
    marker = it::unique_marker("tmux-close");
    r = it::run(faulty({"--launch=local_mp", "--terminal=tmux", "--terminal-close"}, {"throw"},
                       marker),
                20s);
    CAPTURE(r.all);
    CHECK(r.code == 1);
    const std::string closed = tmux_session_of(r.err);
    REQUIRE(!closed.empty());
    CHECK(tmux.run({"has-session", "-t", fmt::format("={}", closed)}).code != 0);
    CHECK(it::node_pids(marker).empty());
  }

  TEST_CASE("--terminal: refused where no node process's output passes through the launcher") {
    auto r = it::run(faulty({"--terminal=tmux"}, {"idle"}, it::unique_marker("tmux-mt")), 20s);
    CHECK(r.code == 2);
    CHECK(has(r.err, "--terminal=tmux: --launch=local_mt runs every node in this one process"));
    CHECK(has(r.err, "usage: "));
    r = it::run(faulty({"--launch=k8s", "--terminal=tmux"}, {"idle"}, "x"), 20s);
    CHECK(r.code == 2);
    CHECK(has(r.err, "--terminal=tmux: --launch=k8s starts nothing on this machine"));
    r = it::run(faulty({"--launch=local_mp", "--terminal=screen"}, {"idle"}, "x"), 20s);
    CHECK(r.code == 2);
    CHECK(has(r.err, "--terminal: 'screen' is not tmux"));
    r = it::run(faulty({"--launch=local_mp", "--terminal-close"}, {"idle"}, "x"), 20s);
    CHECK(r.code == 2);
    CHECK(has(r.err, "--terminal-close: there is no --terminal=tmux session to close"));
  }
}
