// node_fixture: a real node to test against, and a real peer to call it with.
//  - node_process: a process forked from the test that hosts echo_program's "echo/0"
//    (services.hpp) on 127.0.0.1, with its stderr in a file, optionally with a lowered
//    RLIMIT_NOFILE or RLIMIT_AS;
//  - real_peer: a runtime in the test's process holding the same launch secret, which
//    calls the node over a real hello exchange; call_from_new_peer, the same from a peer
//    that connects for that call; serves_on, whether both answer; unavailable_message, what
//    a call fails with; fork_reporting, a child process that reports one line back;
//  - raw_peer: a wire_peer (wire_peer.hpp) named "raw" that has proven the launch secret;
//  - slurp, count, status_kb: a file's text, how often a string occurs, /proc/PID/status;
//  - TLAUNCH_TEST_MEMORY_BOUND: 0 under sanitizers, whose padding makes a process's memory
//    say nothing of what it keeps, so bounds on it are checked only without them.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TLAUNCH_TEST_MEMORY_BOUND 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TLAUNCH_TEST_MEMORY_BOUND 0
#endif
#endif
#ifndef TLAUNCH_TEST_MEMORY_BOUND
#define TLAUNCH_TEST_MEMORY_BOUND 1
#endif

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <tlaunch/tlaunch.hpp>

#include "errors.hpp"
#include "services.hpp"
#include "wire_peer.hpp"

namespace tlaunch::test_support {

using namespace std::chrono_literals;

// The launch secret node_process and real_peer share (a wire_peer proves it too).
inline const std::vector<std::uint8_t> launch_secret(32, 7);

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::size_t count(const std::string& s, std::string_view needle) {
  std::size_t n = 0;
  for (auto at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

// A value in kB from /proc/<pid>/status ("VmRSS", "VmHWM").
inline long status_kb(pid_t pid, std::string_view field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(std::string(field) + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

// A child forked from the test that is killed when the test ends, with its stderr (and with
// stdout_too its stdout) in the file log_path. body(report) runs in it; report(line) sends the
// parent one line (an address, a port), which fork_reporting waits for and returns with the
// child's PID. The child ends when body returns.
template <class Body>
std::pair<pid_t, std::string> fork_reporting(const std::string& log_path, bool stdout_too,
                                             Body&& body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (stdout_too) ::dup2(log, 1);
    ::dup2(log, 2);
    body([&](std::string line) {
      line += "\n";
      if (::write(fds[1], line.data(), line.size()) < 0) ::_exit(1);
    });
    ::_exit(0);
  }
  ::close(fds[1]);
  char buf[128];
  ssize_t n = ::read(fds[0], buf, sizeof buf);
  ::close(fds[0]);
  REQUIRE(n > 0);
  return {pid, std::string(buf, static_cast<std::size_t>(n) - 1)};
}

// The node: a process of its own with its stderr in a file.
class node_process {
 public:
  // nofile: its RLIMIT_NOFILE; more_address_space: its RLIMIT_AS is that much above its size.
  node_process(tlaunch::rpc::runtime_options ro, rlim_t nofile = 0,
               rlim_t more_address_space = 0) {
    err_path_ = (std::filesystem::temp_directory_path() /
                 ("tlaunch-fault-" + std::to_string(::getpid()) + "-" + std::to_string(++serial_)))
                    .string();
    std::tie(pid_, address_) = fork_reporting(err_path_, false, [&](auto report) {
      if (nofile) {
        rlimit r{nofile, nofile};
        ::setrlimit(RLIMIT_NOFILE, &r);
      }
      if (more_address_space) {
        rlim_t v = static_cast<rlim_t>(status_kb(::getpid(), "VmSize")) * 1024 + more_address_space;
        rlimit r{v, v};
        ::setrlimit(RLIMIT_AS, &r);
      }
      tlaunch::rpc::runtime rt(tlaunch::detail::describe(echo_program, {}), ro, launch_secret, "echo/0");
      std::string addr = rt.listen("127.0.0.1");
      rt.set_directory({addr});
      tlaunch::detail::host_program(rt, echo_program, [](std::uint32_t) { return true; });
      rt.start_threads();
      report(addr);
      for (;;) ::pause();
    });
    port_ = std::stoi(address_.substr(address_.rfind(':') + 1));
  }
  ~node_process() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    std::filesystem::remove(err_path_);
  }
  pid_t pid() const { return pid_; }
  int port() const { return port_; }
  const std::string& address() const { return address_; }
  std::string err() const { return slurp(err_path_); }
  // Waits (a few seconds at most) for its stderr to contain `needle`.
  bool wait_for_err(std::string_view needle) const {
    for (int i = 0; i < 500; ++i) {
      if (err().find(needle) != std::string::npos) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

 private:
  static inline int serial_ = 0;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string address_, err_path_;
};

// A peer that holds the launch secret: a runtime of its own, with its own connection.
class real_peer {
 public:
  explicit real_peer(const std::string& address, tlaunch::rpc::runtime_options ro = {})
      : rt_(tlaunch::detail::describe(echo_program, {}), ro, launch_secret, "caller") {
    rt_.set_directory({address});
    rt_.start_threads();
  }
  int call(int x) {
    auto h = tlaunch::detail::handle_access::make<Echo>(&rt_, 0);
    return h.sync<&Echo::twice>(tlaunch::call_options{.timeout = 10s}, x);
  }
  auto later(int x) {  // no deadline
    return tlaunch::detail::handle_access::make<Echo>(&rt_, 0).async<&Echo::later>(x);
  }

 private:
  tlaunch::rpc::runtime rt_;
};

// The answer to x from a real peer that connects now (a new connection to the node).
inline int call_from_new_peer(const node_process& node, int x) {
  real_peer fresh(node.address());
  return fresh.call(x);
}

// Whether the node still serves: `peer` (a connection it has) and a peer that connects now.
inline bool serves_on(const node_process& node, real_peer& peer) {
  return peer.call(5) == 10 && call_from_new_peer(node, 7) == 14;
}

// What `call` throws as tlaunch::unavailable, or "" when it throws nothing.
template <class Call>
std::string unavailable_message(Call&& call) {
  return message_of<tlaunch::unavailable>(std::forward<Call>(call)).value_or("");
}

// A wire_peer to 127.0.0.1:port, named "raw", that has completed the hello exchange with
// launch_secret; rcvbuf as for wire_peer.
inline wire_peer raw_peer(int port, int rcvbuf = 0) {
  wire_peer p(port, rcvbuf);
  p.authenticate(launch_secret);
  return p;
}

}  // namespace tlaunch::test_support
