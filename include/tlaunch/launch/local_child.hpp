// A node process on this machine: fork/exec with pipes for stdin, stdout and
// stderr. The child dies with the launcher (PR_SET_PDEATHSIG) and has its own
// process group, so Ctrl-C in the terminal reaches only the launcher, which
// then stops the nodes itself.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../detail/line_splitter.hpp"
#include "child.hpp"

namespace tlaunch::launch {

class local_child final : public child {
 public:
  local_child(const std::vector<std::string>& argv, child_callbacks cb) : cb_(std::move(cb)) {
    if (argv.empty()) throw std::invalid_argument("start_local_child: empty argv");
    static std::once_flag sigpipe_once;
    std::call_once(sigpipe_once, [] { ::signal(SIGPIPE, SIG_IGN); });
    int in[2], out[2], err[2], status[2];
    if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC) ||
        ::pipe2(status, O_CLOEXEC))
      throw std::runtime_error(std::string("cannot create pipes: ") + std::strerror(errno));
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::signal(SIGPIPE, SIG_DFL);
      ::execv(args[0], args.data());
      int e = errno;
      ssize_t w = ::write(status[1], &e, sizeof e);
      (void)w;
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    ::close(status[1]);
    int e = 0;
    ssize_t n;
    do n = ::read(status[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    ::close(status[0]);
    if (n == sizeof e) {
      ::close(in[1]);
      ::close(out[0]);
      ::close(err[0]);
      ::waitpid(pid_, nullptr, 0);
      throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(e));
    }
    stdin_ = in[1];
    out_ = out[0];
    err_ = err[0];
    thread_ = std::thread([this] { pump(); });
  }

  ~local_child() override {
    close_stdin();
    if (thread_.joinable()) {
      if (running_) kill();
      thread_.join();
    }
  }

  void write_stdin(std::string_view data) override {
    std::lock_guard lk(mu_);
    while (stdin_ >= 0 && !data.empty()) {
      ssize_t n = ::write(stdin_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  void close_stdin() override {
    std::lock_guard lk(mu_);
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
  }
  void kill() override {
    if (running_) ::kill(-pid_, SIGKILL);
  }
  // SIGTERM to the child's process group.
  void terminate() {
    if (running_) ::kill(-pid_, SIGTERM);
  }
  bool running() const override { return running_; }
  std::string host() const override { return {}; }
  long pid() const override { return pid_; }

 private:
  void pump() {
    tlaunch::detail::line_splitter so, se;
    char buf[65536];
    pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    int open = 2;
    while (open > 0) {
      int r = ::poll(fds, 2, -1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) break;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        auto s = i == 0 ? stream::out : stream::err;
        auto& sp = i == 0 ? so : se;
        if (n <= 0) {
          sp.finish([&](std::string_view l) { emit(s, l); });
          ::close(fds[i].fd);
          fds[i].fd = -1;
          --open;
          continue;
        }
        sp.feed({buf, static_cast<std::size_t>(n)}, [&](std::string_view l) { emit(s, l); });
      }
    }
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    exit_status es;
    if (WIFEXITED(st)) es.code = WEXITSTATUS(st);
    if (WIFSIGNALED(st)) {
      es.signal = WTERMSIG(st);
      const char* abbrev = sigabbrev_np(es.signal);
      if (abbrev) es.signal_name = abbrev;
    }
    running_ = false;
    if (cb_.on_exit) cb_.on_exit(es);
  }
  void emit(stream s, std::string_view l) {
    if (cb_.on_line) cb_.on_line(s, l);
  }

  child_callbacks cb_;
  pid_t pid_ = -1;
  std::mutex mu_;
  int stdin_ = -1, out_ = -1, err_ = -1;
  std::atomic<bool> running_{true};
  std::thread thread_;
};

// Starts argv[0] (a path) with argv; throws naming the binary if it cannot run.
inline child_ptr start_local_child(const std::vector<std::string>& argv, child_callbacks cb) {
  return std::make_unique<local_child>(argv, std::move(cb));
}

}  // namespace tlaunch::launch
