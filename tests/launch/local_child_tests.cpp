#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <tlaunch/launch/process/local_child.hpp>
#include <tlaunch/launch/process/node_watch.hpp>

#include "../common/process.hpp"

using namespace std::chrono_literals;
using tlaunch::launch::exit_status;
using tlaunch::launch::start_local_child;
using tlaunch::launch::stream;

namespace {

// Run as the middle process of the PDEATHSIG test: this binary, started again with
// TLAUNCH_TEST_MIDDLE=1, starts `sleep 60` as its own node, prints its pid and waits
// to be killed. It runs before doctest's main, in a freshly exec'ed process.
const bool middle_process = [] {
  if (std::getenv("TLAUNCH_TEST_MIDDLE") == nullptr) return false;
  auto c = start_local_child({"sleep", "60"}, {});
  std::printf("%ld\n", c->pid());
  std::fflush(stdout);
  for (;;) ::pause();
}();

// Collects what a child reports and lets the test wait for its end.
struct recorder {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<stream, std::string>> lines;
  std::optional<exit_status> status;
  int exits = 0;
  bool line_after_exit = false;

  tlaunch::launch::child_callbacks callbacks() {
    tlaunch::launch::child_callbacks cb;
    cb.on_line = [this](stream s, std::string_view l) {
      std::lock_guard lk(mu);
      if (exits > 0) line_after_exit = true;
      lines.emplace_back(s, std::string(l));
      cv.notify_all();
    };
    cb.on_exit = [this](const exit_status& st) {
      std::lock_guard lk(mu);
      status = st;
      ++exits;
      cv.notify_all();
    };
    return cb;
  }
  exit_status wait_exit(std::chrono::milliseconds limit = 10s) {
    std::unique_lock lk(mu);
    REQUIRE(cv.wait_for(lk, limit, [&] { return status.has_value(); }));
    return *status;
  }
  std::vector<std::string> of(stream s) {
    std::lock_guard lk(mu);
    std::vector<std::string> out;
    for (auto& [st, l] : lines)
      if (st == s) out.push_back(l);
    return out;
  }
  std::string first_line(std::chrono::milliseconds limit = 10s) {
    std::unique_lock lk(mu);
    REQUIRE(cv.wait_for(lk, limit, [&] { return !lines.empty(); }));
    return lines.front().second;
  }
};

// State letter and process group of a process from /proc; state 0 when it is gone.
struct proc_stat {
  char state = 0;
  long pgrp = 0;
};
proc_stat read_stat(long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), {});
  proc_stat st;
  auto close = text.rfind(')');
  if (close == std::string::npos) return st;
  std::istringstream rest(text.substr(close + 1));
  long ppid = 0;
  rest >> st.state >> ppid >> st.pgrp;
  return st;
}

// Running, sleeping or stopped: not gone and not a zombie.
bool alive(long pid) { return tlaunch::integration::alive(static_cast<pid_t>(pid)); }

std::string self_exe() {
  char buf[4096] = {};
  REQUIRE(::readlink("/proc/self/exe", buf, sizeof buf - 1) > 0);
  return buf;
}

}  // namespace

TEST_SUITE("local_child") {
  TEST_CASE("stdout and stderr lines arrive separated, then the exit code") {
    recorder r;
    auto c = start_local_child({"sh", "-c", "echo out1; echo err1 >&2; echo out2; exit 3"},
                               r.callbacks());
    CHECK(c->pid() > 0);
    CHECK(c->host().empty());
    auto st = r.wait_exit();
    CHECK(st.code == 3);
    CHECK(st.signal == 0);
    CHECK_FALSE(st.ok());
    CHECK(r.of(stream::out) == std::vector<std::string>{"out1", "out2"});
    CHECK(r.of(stream::err) == std::vector<std::string>{"err1"});
    CHECK_FALSE(c->running());
  }

  TEST_CASE("stopped_limit: a child stopped that long is killed, its status saying why") {
    tlaunch::launch::local_child_options opt;
    opt.stopped_limit = 300ms;
    {
      recorder r;
      auto c = start_local_child({"sleep", "60"}, r.callbacks(), opt);
      ::kill(static_cast<pid_t>(c->pid()), SIGSTOP);
      auto st = r.wait_exit();
      CHECK(st.signal == SIGKILL);
      CHECK(st.describe() ==
            "stopped (SIGSTOP) for 0.3 s: it stopped answering (killed by signal SIGKILL)");
    }
    {
      // Stopped for less than the limit, then continued: it runs on, and ends as it would.
      opt.stopped_limit = 2s;
      recorder r;
      auto c = start_local_child({"sh", "-c", "kill -STOP $$; sleep 1; exit 5"}, r.callbacks(),
                                 opt);
      for (int i = 0; i < 500 && read_stat(c->pid()).state != 'T'; ++i)
        std::this_thread::sleep_for(10ms);
      CHECK(read_stat(c->pid()).state == 'T');
      ::kill(static_cast<pid_t>(c->pid()), SIGCONT);
      auto st = r.wait_exit();
      CHECK(st.code == 5);
      CHECK(st.cause.empty());
    }
  }

  TEST_CASE("a clean exit is ok") {
    recorder r;
    auto c = start_local_child({"/bin/true"}, r.callbacks());
    auto st = r.wait_exit();
    CHECK(st.ok());
    CHECK(st.describe() == "exited with code 0");
  }

  TEST_CASE("kill() ends the process with SIGKILL, terminate() with SIGTERM") {
    {
      recorder r;
      auto c = start_local_child({"sleep", "60"}, r.callbacks());
      CHECK(c->running());
      CHECK(alive(c->pid()));
      c->kill();
      auto st = r.wait_exit();
      CHECK(st.signal == SIGKILL);
      CHECK(st.signal_name == "KILL");
      CHECK(st.describe() == "killed by signal SIGKILL");
      CHECK_FALSE(c->running());
      c->kill();  // after the end: nothing happens
    }
    {
      recorder r;
      auto c = start_local_child({"sleep", "60"}, r.callbacks());
      static_cast<tlaunch::launch::local_child&>(*c).terminate();
      CHECK(r.wait_exit().signal == SIGTERM);
    }
  }

  TEST_CASE("kill() reaches the whole process group: what the node started dies too") {
    recorder r;
    auto c = start_local_child({"sh", "-c", "sleep 60 & echo $!; wait"}, r.callbacks());
    long grandchild = std::stol(r.first_line());
    CHECK(alive(grandchild));
    c->kill();
    CHECK(r.wait_exit().signal == SIGKILL);
    CHECK(tlaunch::integration::all_gone({static_cast<pid_t>(grandchild)}, 2s));
  }

  TEST_CASE("the child leads its own process group") {
    recorder r;
    auto c = start_local_child({"sleep", "60"}, r.callbacks());
    CHECK(read_stat(c->pid()).pgrp == c->pid());
    CHECK(read_stat(c->pid()).pgrp != read_stat(::getpid()).pgrp);
    c->kill();
    r.wait_exit();
  }

  TEST_CASE("stdin round trip: head -n1 echoes the first line") {
    recorder r;
    auto c = start_local_child({"head", "-n1"}, r.callbacks());
    c->write_stdin("hello\nworld\n");
    auto st = r.wait_exit();
    CHECK(st.ok());
    CHECK(r.of(stream::out) == std::vector<std::string>{"hello"});
  }

  TEST_CASE("close_stdin gives EOF to cat, even with other children running") {
    // A second child started in between must not hold the first one's stdin open.
    recorder r1, r2;
    auto c1 = start_local_child({"cat"}, r1.callbacks());
    auto c2 = start_local_child({"cat"}, r2.callbacks());
    c1->write_stdin("one\ntwo\n");
    c1->close_stdin();
    auto st = r1.wait_exit();
    CHECK(st.ok());
    CHECK(r1.of(stream::out) == std::vector<std::string>{"one", "two"});
    CHECK(c2->running());
    c1->write_stdin("ignored after close\n");  // no crash, no effect
    c2->close_stdin();
    CHECK(r2.wait_exit().ok());
  }

  TEST_CASE("a partial last line is delivered, before on_exit, which comes once") {
    recorder r;
    auto c = start_local_child({"printf", "a\\nb\\r\\nlast"}, r.callbacks());
    r.wait_exit();
    std::this_thread::sleep_for(50ms);  // room for a wrong second on_exit or late line
    std::lock_guard lk(r.mu);
    CHECK(r.exits == 1);
    CHECK_FALSE(r.line_after_exit);
    REQUIRE(r.lines.size() == 3);
    CHECK(r.lines[0].second == "a");
    CHECK(r.lines[1].second == "b");
    CHECK(r.lines[2].second == "last");
  }

  TEST_CASE("lots of output arrives whole and in order") {
    recorder r;
    auto c = start_local_child({"seq", "1", "20000"}, r.callbacks());
    CHECK(r.wait_exit().ok());
    auto out = r.of(stream::out);
    REQUIRE(out.size() == 20000);
    bool in_order = true;
    for (int i = 0; i < 20000; ++i) in_order = in_order && out[i] == std::to_string(i + 1);
    CHECK(in_order);
  }

  TEST_CASE("a binary that cannot run is an error naming it, not a silent exit") {
    recorder r;
    CHECK_THROWS_WITH(
        start_local_child({"/nonexistent/node-binary", "x"}, r.callbacks()),
        "cannot start node binary /nonexistent/node-binary: No such file or directory");
    CHECK_THROWS_WITH(
        start_local_child({"no-such-node-binary-here"}, r.callbacks()),
        doctest::Contains("cannot start node binary no-such-node-binary-here: not found"));
    char name[] = "/tmp/tlaunch_not_executable_XXXXXX";
    int fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    ::close(fd);
    CHECK_THROWS_WITH(start_local_child({name}, r.callbacks()),
                      doctest::Contains("Permission denied"));
    ::unlink(name);
    tlaunch::launch::local_child_options o;
    o.working_dir = "/nonexistent/dir";
    CHECK_THROWS_WITH(start_local_child({"/bin/true"}, r.callbacks(), o),
                      "cannot start node binary /bin/true: cannot change to directory "
                      "/nonexistent/dir: No such file or directory");
    CHECK_THROWS_AS(start_local_child({}, r.callbacks()), std::invalid_argument);
    std::lock_guard lk(r.mu);
    CHECK(r.exits == 0);  // no callbacks for a child that never ran
  }

  TEST_CASE("options: extra environment and working directory") {
    char dir[] = "/tmp/tlaunch_wd_XXXXXX";
    REQUIRE(::mkdtemp(dir));
    ::setenv("TLAUNCH_TEST_REPLACED", "launcher", 1);
    ::setenv("TLAUNCH_TEST_KEPT", "kept", 1);
    tlaunch::launch::local_child_options o;
    o.env = {{"TLAUNCH_TEST_ADDED", "a b=c"}, {"TLAUNCH_TEST_REPLACED", "node"}};
    o.working_dir = dir;
    recorder r;
    auto c = start_local_child({"sh", "-c",
                                "echo \"$TLAUNCH_TEST_ADDED\"; echo \"$TLAUNCH_TEST_REPLACED\"; "
                                "echo \"$TLAUNCH_TEST_KEPT\"; "
                                "env | grep -c '^TLAUNCH_TEST_REPLACED='; pwd"},
                               r.callbacks(), o);
    CHECK(r.wait_exit().ok());
    CHECK(r.of(stream::out) == std::vector<std::string>{"a b=c", "node", "kept", "1", dir});
    ::unsetenv("TLAUNCH_TEST_REPLACED");
    ::unsetenv("TLAUNCH_TEST_KEPT");
    ::rmdir(dir);
  }

  TEST_CASE("the node starts with no blocked signals and SIGPIPE not ignored") {
    struct sigaction ign {
    }, old{};
    ign.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ign, &old);  // as a launcher that ignores SIGPIPE would
    sigset_t term, old_mask;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &term, &old_mask);
    recorder r;
    auto c = start_local_child({"grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"}, r.callbacks());
    CHECK(r.wait_exit().ok());
    ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    ::sigaction(SIGPIPE, &old, nullptr);
    auto out = r.of(stream::out);
    REQUIRE(out.size() == 2);
    CHECK(out[0] == "SigBlk:\t0000000000000000");
    unsigned long long ignored = std::stoull(out[1].substr(out[1].find('\t') + 1), nullptr, 16);
    CHECK((ignored & (1ull << (SIGPIPE - 1))) == 0);
  }

  TEST_CASE("writing to a child that is gone raises no SIGPIPE and changes no disposition") {
    recorder r;
    auto c = start_local_child({"/bin/true"}, r.callbacks());
    r.wait_exit();
    std::string big(256 * 1024, 'x');
    c->write_stdin(big);  // EPIPE: the test process would die here on SIGPIPE
    c->write_stdin("again\n");
    struct sigaction now {};
    ::sigaction(SIGPIPE, nullptr, &now);
    CHECK((now.sa_handler == SIG_DFL));
    sigset_t pending;
    ::sigpending(&pending);
    CHECK_FALSE(sigismember(&pending, SIGPIPE));
  }

  TEST_CASE("a child started from a thread that ends keeps running") {
    // PR_SET_PDEATHSIG follows the forking thread: forks happen on a long-lived one.
    recorder r;
    tlaunch::launch::child_ptr c;
    std::thread([&] { c = start_local_child({"sleep", "60"}, r.callbacks()); }).join();
    std::this_thread::sleep_for(300ms);
    CHECK(alive(c->pid()));
    CHECK(c->running());
    c->kill();
    CHECK(r.wait_exit().signal == SIGKILL);
  }

  TEST_CASE("a node dies with its launcher (PR_SET_PDEATHSIG), even when SIGKILLed") {
    recorder r;
    tlaunch::launch::local_child_options o;
    o.env = {{"TLAUNCH_TEST_MIDDLE", "1"}};
    auto middle = start_local_child({self_exe()}, r.callbacks(), o);
    long sleeper = std::stol(r.first_line());
    CHECK(alive(sleeper));
    ::kill(static_cast<pid_t>(middle->pid()), SIGKILL);
    CHECK(r.wait_exit().signal == SIGKILL);
    CHECK(tlaunch::integration::all_gone({static_cast<pid_t>(sleeper)}, 2s));
  }

  TEST_CASE("the child object may be destroyed from its own on_exit") {
    std::mutex mu;
    std::condition_variable cv;
    tlaunch::launch::child_ptr c;
    bool destroyed = false;
    tlaunch::launch::child_callbacks cb;
    cb.on_exit = [&](const exit_status&) {
      std::unique_lock lk(mu);
      cv.wait(lk, [&] { return c != nullptr; });
      c.reset();
      destroyed = true;
      cv.notify_all();
    };
    {
      std::lock_guard lk(mu);
      c = start_local_child({"cat"}, std::move(cb));
      c->close_stdin();
    }
    cv.notify_all();
    std::unique_lock lk(mu);
    CHECK(cv.wait_for(lk, 10s, [&] { return destroyed; }));
  }

  TEST_CASE("destroying a running child kills it") {
    long pid;
    {
      auto c = start_local_child({"sleep", "60"}, {});
      pid = c->pid();
      CHECK(alive(pid));
    }
    CHECK_FALSE(alive(pid));
  }

  // --tlaunch-watch (launch/process/node_watch.hpp): a process forked here plays a Slurm task. Its
  // watch forks the node; `node` runs in that node and returns its exit code.
  template <class Node>
  pid_t watched_task(std::chrono::milliseconds limit, int err_fd, Node node) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::dup2(err_fd, 2);
      // SIGTERM blocked from the start: the node takes it with sigwait, however late it runs.
      sigset_t term;
      ::sigemptyset(&term);
      ::sigaddset(&term, SIGTERM);
      ::sigprocmask(SIG_BLOCK, &term, nullptr);
      auto code = tlaunch::launch::watch_node_process(limit);
      ::_exit(code ? *code : node());
    }
    return pid;
  }

  TEST_CASE("a watched node stopped past the limit is killed; its watch says so and dies of it") {
    int err[2];
    REQUIRE(::pipe(err) == 0);
    pid_t task = watched_task(300ms, err[1], [] {
      ::raise(SIGSTOP);
      return 0;
    });
    ::close(err[1]);
    int status = 0;
    REQUIRE(::waitpid(task, &status, 0) == task);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    std::string said;
    char buf[512];
    for (ssize_t n; (n = ::read(err[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<std::size_t>(n));
    ::close(err[0]);
    CHECK(said == "tlaunch: node process stopped (SIGSTOP) for 0.3 s: it stopped answering; killed\n");
  }

  TEST_CASE("a watched node stopped and continued within the limit is not killed") {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    pid_t task = watched_task(5000ms, 2, [w = fds[1]] {
      pid_t me = ::getpid();
      if (::write(w, &me, sizeof me) != sizeof me) return 1;
      ::raise(SIGSTOP);  // continued by the test through the watch (SIGCONT is passed on)
      return 5;
    });
    ::close(fds[1]);
    pid_t node = 0;
    REQUIRE(::read(fds[0], &node, sizeof node) == sizeof node);
    ::close(fds[0]);
    // Once the node is stopped, SIGCONT to its watch.
    for (int i = 0; i < 500; ++i) {
      std::ifstream stat("/proc/" + std::to_string(node) + "/stat");
      std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
      auto close = all.rfind(')');
      if (close != std::string::npos && close + 2 < all.size() && all[close + 2] == 'T') break;
      std::this_thread::sleep_for(10ms);
    }
    REQUIRE(::kill(task, SIGCONT) == 0);
    int status = 0;
    REQUIRE(::waitpid(task, &status, 0) == task);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 5);
  }

  TEST_CASE("a signal to the watch reaches its node, and the watch ends as the node did") {
    pid_t task = watched_task(1000ms, 2, [] {
      sigset_t set;
      ::sigemptyset(&set);
      ::sigaddset(&set, SIGTERM);
      int sig = 0;
      ::sigwait(&set, &sig);
      return sig == SIGTERM ? 7 : 1;
    });
    std::this_thread::sleep_for(200ms);
    REQUIRE(::kill(task, SIGTERM) == 0);
    int status = 0;
    REQUIRE(::waitpid(task, &status, 0) == task);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 7);

    // A node killed by a signal: its watch dies of the same one.
    pid_t killed = watched_task(1000ms, 2, [] {
      ::kill(::getpid(), SIGUSR1);
      return 0;
    });
    REQUIRE(::waitpid(killed, &status, 0) == killed);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGUSR1);
  }
}
