// A node process on this machine: fork/exec with pipes for stdin, stdout and
// stderr. The child dies with the launcher (PR_SET_PDEATHSIG) and has its own
// process group, so Ctrl-C in the terminal reaches only the launcher, which
// then stops the nodes itself.
//
// Threads: each child has one I/O thread that reads its stdout and stderr and
// calls the callbacks (a slow callback of one node never holds up another, and
// on_exit trivially follows that node's last line). Forks all happen on one
// long-lived thread of the process, because PR_SET_PDEATHSIG fires when the
// *thread* that forked exits, not the process: a child started from a pool
// thread or from another child's on_exit would otherwise be killed as soon as
// that thread ends.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <stdio_ext.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "../../detail/line_splitter.hpp"
#include "child.hpp"
#include "../decl.hpp"

extern "C" char** environ;

namespace tlaunch::launch {

struct local_child_options {
  // Variables set in the child on top of the launcher's environment (a name
  // given here replaces the launcher's value).
  std::vector<std::pair<std::string, std::string>> env;
  // Directory the child starts in; empty keeps the launcher's.
  std::string working_dir;
  // A child stopped (SIGSTOP, SIGTSTP...) for this long is killed, its exit_status::cause
  // saying so (0: never). The kernel still acknowledges a stopped process's TCP
  // traffic, so only its parent can tell it from a busy one. Stops under a debugger
  // (ptrace) are not seen.
  std::chrono::milliseconds stopped_limit{0};
};

namespace detail {

inline std::string errno_text(int e) { return std::system_category().message(e); }

// A file descriptor closed when it goes out of scope.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    reset(std::exchange(o.fd_, -1));
    return *this;
  }
  ~unique_fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// A close-on-exec pipe whose ends are both above 2, so the dup2 onto 0/1/2 in the
// child can never overwrite another end (a launcher started with stdin closed
// would otherwise get fd 0 from pipe2).
inline void make_pipe(unique_fd& read_end, unique_fd& write_end) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    throw std::runtime_error("cannot create a pipe for a node process: " + errno_text(errno));
  for (int& fd : p) {
    if (fd > 2) continue;
    int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int e = errno;
    ::close(fd);
    fd = moved;
    if (moved < 0) {
      ::close(p[0] == moved ? p[1] : p[0]);
      throw std::runtime_error("cannot create a pipe for a node process: " + errno_text(e));
    }
  }
  read_end.reset(p[0]);
  write_end.reset(p[1]);
}

// The file execve will run: argv[0] itself when it holds a '/', else the first
// executable match in PATH (looked up here, before fork, where allocating is allowed).
inline std::string find_executable(const std::string& file, const char* path_env) {
  if (file.find('/') != std::string::npos) return file;
  std::string_view path = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    auto colon = path.find(':');
    std::string dir(path.substr(0, colon));
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + file;
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  throw std::runtime_error("cannot start node binary " + file +
                           ": not found in any directory of PATH (give a path instead)");
}

// "NAME=value" strings: the launcher's environment with `extra` applied.
inline std::vector<std::string> child_environment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    auto name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (auto& [k, v] : extra) replaced = replaced || k == name;
    if (!replaced) env.emplace_back(kv);
  }
  for (auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

// The thread every fork happens on (see the top of this file). It lives as long
// as the process; its signals are blocked so process-directed signals go elsewhere.
class fork_thread {
 public:
  static fork_thread& instance() {
    static std::mutex m;
    static fork_thread* t = nullptr;
    static pid_t owner = 0;
    std::lock_guard lk(m);
    // A forked copy of the launcher has no fork thread (only the forking thread
    // survives fork), so it gets its own. The old one is left, never destroyed,
    // like the first: a detached thread may still be waiting on its members.
    if (t == nullptr || owner != ::getpid()) {
      t = new fork_thread;
      owner = ::getpid();
    }
    return *t;
  }

  // The child's pid, or -errno when fork failed (errno itself is this thread's).
  pid_t fork(const std::function<void()>& in_child) {
    std::packaged_task<pid_t()> task([&] {
      pid_t pid = ::fork();
      if (pid == 0) in_child();  // does not return
      return pid < 0 ? -errno : pid;
    });
    auto result = task.get_future();
    {
      std::lock_guard lk(mu_);
      jobs_.push_back([&task] { task(); });
    }
    cv_.notify_one();
    return result.get();
  }

 private:
  fork_thread() {
    std::thread([this] {
      sigset_t all;
      ::sigfillset(&all);
      ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
      for (;;) {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [this] { return !jobs_.empty(); });
        auto job = std::move(jobs_.front());
        jobs_.pop_front();
        lk.unlock();
        job();
      }
    }).detach();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
};

// Blocks SIGPIPE in this thread for a write to a pipe whose reader may be gone,
// and swallows the SIGPIPE that write raises, so neither the launcher's
// disposition nor other threads are touched.
class sigpipe_blocker {
 public:
  sigpipe_blocker() {
    ::sigemptyset(&pipe_);
    ::sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    ::sigpending(&pending);
    was_pending_ = ::sigismember(&pending, SIGPIPE) == 1;
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~sigpipe_blocker() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  sigpipe_blocker(const sigpipe_blocker&) = delete;
  sigpipe_blocker& operator=(const sigpipe_blocker&) = delete;
  // After EPIPE: take the SIGPIPE our write queued (not one that was already pending).
  void consume() {
    if (was_pending_) return;
    timespec zero{};
    while (::sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }

 private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

// In a node process forked without exec (local_child's forked constructor, the node
// forker): what exec and an executed node's setup would have done. The signal mask is
// emptied, caught handlers (and SIGPIPE) go back to the default (ignored signals stay
// ignored), the process leads its own group and dies with `parent` (exits 127 when
// `parent` is already gone), the parent's unwritten stdio buffers are dropped (they are
// its output, not the node's) and `in`, `out`, `err` become 0, 1 and 2.
inline void become_node_process(pid_t parent, int in, int out, int err) {
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa {};
    if (::sigaction(sig, nullptr, &sa) != 0) continue;
    bool caught = (sa.sa_flags & SA_SIGINFO) != 0 ||
                  (sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN);
    if (!caught && sig != SIGPIPE) continue;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
  }
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent died before prctl
  ::__fpurge(stdout);
  ::__fpurge(stderr);
  ::dup2(in, 0);
  ::dup2(out, 1);
  ::dup2(err, 2);
}

// Closes every descriptor above 2 marked close-on-exec, but `keep`: what an exec would
// close (the launcher's sockets and pipes, other nodes' pipes, the caller's own such files).
inline void close_cloexec_fds(int keep = -1) {
  std::vector<int> fds;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    int own = ::dirfd(d);
    while (dirent* e = ::readdir(d)) {
      int fd = std::atoi(e->d_name);
      if (fd > 2 && fd != own && fd != keep) fds.push_back(fd);
    }
    ::closedir(d);
  } else {
    long max = std::min(::sysconf(_SC_OPEN_MAX), 65536L);
    for (int fd = 3; fd < max; ++fd)
      if (fd != keep) fds.push_back(fd);
  }
  for (int fd : fds) {
    int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) != 0) ::close(fd);
  }
}

// The end of a node process forked without exec: runs `body`, reports what it threw,
// flushes stdio and exits with its result (1 when it threw).
[[noreturn]] inline void run_node_and_exit(const std::function<int()>& body) {
  int code = 1;
  try {
    code = body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tlaunch: node process failed: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "tlaunch: node process failed\n");
  }
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(code);
}

// The signal that stopped child `pid` (SIGSTOP, SIGTSTP...), or 0: running, or stopped
// under ptrace. WNOWAIT: the stop stays reportable while it lasts (waitpid without
// WUNTRACED never reports it).
inline int stop_signal_of(pid_t pid) {
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WNOHANG | WNOWAIT) == 0 &&
      info.si_pid == pid && info.si_code == CLD_STOPPED)
    return info.si_status;
  return 0;
}

// "stopped (SIGSTOP) for 2 s: it stopped answering": why a child stopped past `limit`
// was killed.
inline std::string stopped_cause(int sig, std::chrono::milliseconds limit) {
  const char* abbrev = ::sigabbrev_np(sig);
  char text[160];
  std::snprintf(text, sizeof text, "stopped (SIG%s) for %g s: it stopped answering",
                abbrev ? abbrev : "?", static_cast<double>(limit.count()) / 1000.0);
  return text;
}

// A node process's four pipes: stdin, stdout, stderr, and the status pipe on which the
// child reports a failed setup (closed once it is set up). child_ends are the child's
// ends, in that order (dup2'd to 0, 1, 2 and kept for the status).
struct child_pipes {
  detail::unique_fd in_r, in_w, out_r, out_w, err_r, err_w, status_r, status_w;
  int child_ends[4];
  child_pipes() {
    detail::make_pipe(in_r, in_w);
    detail::make_pipe(out_r, out_w);
    detail::make_pipe(err_r, err_w);
    detail::make_pipe(status_r, status_w);
    child_ends[0] = in_r.get();
    child_ends[1] = out_w.get();
    child_ends[2] = err_w.get();
    child_ends[3] = status_w.get();
  }
};
}  // namespace detail

class local_child final : public child {
 public:
  local_child(const std::vector<std::string>& argv, child_callbacks cb,
              const local_child_options& opt = {})
      : cb_(std::move(cb)), stopped_limit_(opt.stopped_limit) {
    if (argv.empty() || argv[0].empty())
      throw std::invalid_argument("start_local_child: no binary given (empty argv)");
    const std::string& name = argv[0];

    // Everything the child needs is built here: between fork and exec only
    // async-signal-safe calls are allowed (the launcher has other threads).
    auto env = detail::child_environment(opt.env);
    const char* path_env = ::getenv("PATH");
    for (auto& [k, v] : opt.env)
      if (k == "PATH") path_env = v.c_str();
    std::string file = detail::find_executable(name, path_env);
    std::vector<char*> args, envp;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const char* dir = opt.working_dir.empty() ? nullptr : opt.working_dir.c_str();

    detail::child_pipes pipes;

    const pid_t parent = ::getpid();
    const auto& fds = pipes.child_ends;
    pid_ = detail::fork_thread::instance().fork(
        [&] { exec_in_child(parent, fds, file.c_str(), args.data(), envp.data(), dir); });
    if (pid_ < 0)
      throw std::runtime_error("cannot start node binary " + name +
                               ": fork: " + detail::errno_text(-pid_));
    start_pump(name, opt.working_dir, pipes);
  }

  // A node process that is a fork of this one, running `body` (whose return is its exit
  // code) instead of a binary: the program as it is in this process's memory.
  // Otherwise like an executed child (pipes, process group, parent-death signal), and
  // what exec would have done is done by hand: caught signals reset to their default,
  // close-on-exec descriptors closed. Only the forking thread exists in the child.
  local_child(const std::function<int()>& body, child_callbacks cb,
              const local_child_options& opt = {})
      : cb_(std::move(cb)), stopped_limit_(opt.stopped_limit) {
    detail::child_pipes pipes;
    const pid_t parent = ::getpid();
    const auto& fds = pipes.child_ends;
    // What this process has buffered is not the node's output.
    std::fflush(stdout);
    std::fflush(stderr);
    pid_ = detail::fork_thread::instance().fork([&] { run_in_child(parent, fds, body); });
    if (pid_ < 0)
      throw std::runtime_error("cannot fork a node process: " + detail::errno_text(-pid_));
    start_pump("a forked node process", "", pipes);
  }

  // A node process started by `spawn` (node_forker.hpp), which gets the child's ends of its
  // stdin, stdout, stderr and status pipe (close-on-exec; the child closes the status pipe
  // once set up) and returns the pid, or -errno. `name` is what errors call it.
  local_child(const std::string& name, const std::function<pid_t(const int (&)[4])>& spawn,
              child_callbacks cb, const local_child_options& opt = {})
      : cb_(std::move(cb)), stopped_limit_(opt.stopped_limit) {
    detail::child_pipes pipes;
    const auto& fds = pipes.child_ends;
    pid_ = spawn(fds);
    if (pid_ < 0)
      throw std::runtime_error("cannot start node binary " + name +
                               ": fork: " + detail::errno_text(-pid_));
    start_pump(name, "", pipes);
  }

 private:
  // The parent's side once the child is forked: closes the child's ends, waits for the
  // child's setup and starts the I/O thread.
  void start_pump(const std::string& name, const std::string& working_dir, detail::child_pipes& p) {
    p.in_r.reset();
    p.out_w.reset();
    p.err_w.reset();
    p.status_w.reset();
    auto& status_r = p.status_r;

    // The status pipe closes on a successful exec; a failure arrives as {stage, errno}.
    int report[2] = {0, 0};
    ssize_t n;
    do n = ::read(status_r.get(), report, sizeof report);
    while (n < 0 && errno == EINTR);
    if (n == sizeof report) {
      while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
      }
      std::string what = report[0] == stage_chdir
                             ? "cannot change to directory " + working_dir + ": "
                             : std::string();
      throw std::runtime_error("cannot start node binary " + name + ": " + what +
                               detail::errno_text(report[1]));
    }
    stdin_ = p.in_w.release();
    out_ = p.out_r.release();
    err_ = p.err_r.release();
    thread_ = std::thread([this] { pump(); });
  }

 public:
  // Kills the process if it still runs, and waits for its I/O thread (unless
  // called from that thread, e.g. from on_exit).
  ~local_child() override {
    close_stdin();
    kill();
    if (thread_.joinable()) {
      if (thread_.get_id() == std::this_thread::get_id())
        thread_.detach();
      else
        thread_.join();
    }
  }

  local_child(const local_child&) = delete;
  local_child& operator=(const local_child&) = delete;

  // Writes all of data, blocking while the pipe is full (kill() unblocks it).
  // Bytes for a process that has closed its stdin or exited are dropped: its
  // end is reported through on_exit.
  void write_stdin(std::string_view data) override {
    std::lock_guard lk(stdin_mu_);
    if (stdin_ < 0) return;
    detail::sigpipe_blocker no_sigpipe;
    while (!data.empty()) {
      ssize_t n = ::write(stdin_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        if (errno == EPIPE) no_sigpipe.consume();
        return;
      }
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  void close_stdin() override {
    std::lock_guard lk(stdin_mu_);
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
  }
  // SIGKILL to the child's process group (what it started dies with it).
  void kill() override { signal_group(SIGKILL); }
  // SIGTERM to the child's process group: a polite stop for non-tlaunch binaries.
  void terminate() { signal_group(SIGTERM); }
  bool running() const override { return running_; }
  std::string host() const override { return {}; }
  long pid() const override { return pid_; }

 private:
  static constexpr int stage_chdir = 1, stage_exec = 2;

  // Runs in the forked child: async-signal-safe calls only.
  [[noreturn]] static void exec_in_child(pid_t parent, const int (&fds)[4], const char* file,
                                         char* const* args, char* const* envp, const char* dir) {
    auto fail = [&](int stage) {
      int report[2] = {stage, errno};
      ssize_t w = ::write(fds[3], report, sizeof report);
      (void)w;
      ::_exit(127);
    };
    // The fork thread blocks every signal, and the launcher may ignore SIGPIPE:
    // the node starts with neither.
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGPIPE, &dfl, nullptr);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl
    ::dup2(fds[0], 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[2], 2);
    if (dir != nullptr && ::chdir(dir) != 0) fail(stage_chdir);
    ::execve(file, args, envp);
    fail(stage_exec);
    ::_exit(127);
  }

  // Runs in the forked child (on the copy of the fork thread, its only thread) and never
  // returns. Unlike exec_in_child it runs the node itself, so it is not limited to
  // async-signal-safe calls; the parent's other threads are gone, and a lock one held
  // at the fork stays held (glibc resets malloc's and stdio's own).
  [[noreturn]] static void run_in_child(pid_t parent, const int (&fds)[4],
                                        const std::function<int()>& body) {
    detail::become_node_process(parent, fds[0], fds[1], fds[2]);
    detail::close_cloexec_fds();  // the status pipe among them: the parent sees the setup done
    detail::run_node_and_exit(body);
  }

  void signal_group(int sig) {
    // Under the lock the pid is not reaped yet, so it cannot name a recycled process.
    std::lock_guard lk(reap_mu_);
    if (reaped_) return;
    if (::kill(-pid_, sig) != 0 && errno == ESRCH) ::kill(pid_, sig);  // it left its group
  }

  // Kills the child once it has been stopped by a signal for stopped_limit_ (I/O thread).
  void watch_stop(std::chrono::steady_clock::time_point& since) {
    if (!stop_cause_.empty()) return;
    int sig = 0;
    {
      std::lock_guard lk(reap_mu_);
      if (reaped_) return;
      sig = detail::stop_signal_of(pid_);
    }
    const auto now = std::chrono::steady_clock::now();
    if (sig == 0) {
      since = {};
      return;
    }
    if (since == std::chrono::steady_clock::time_point{}) since = now;
    if (now - since < stopped_limit_) return;
    stop_cause_ = detail::stopped_cause(sig, stopped_limit_);
    signal_group(SIGKILL);
  }

  void pump() {
    tlaunch::detail::line_splitter split[2];
    char buf[65536];
    pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    int open = 2;
    // With a stopped_limit, the child's state is looked at every 100 ms.
    const int tick_ms = stopped_limit_.count() > 0 ? 100 : -1;
    std::chrono::steady_clock::time_point stopped_since{};  // epoch: running
    while (open > 0) {
      int r = ::poll(fds, 2, tick_ms);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) break;
      if (tick_ms > 0) watch_stop(stopped_since);
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        auto s = i == 0 ? stream::out : stream::err;
        auto emit = [&](std::string_view l) {
          if (cb_.on_line) cb_.on_line(s, l);
        };
        if (n <= 0) {
          split[i].finish(emit);
          ::close(fds[i].fd);
          fds[i].fd = -1;
          --open;
          continue;
        }
        split[i].feed({buf, static_cast<std::size_t>(n)}, emit);
      }
    }
    for (auto& f : fds)
      if (f.fd >= 0) ::close(f.fd);

    // Wait without reaping, then reap under the lock signal_group() takes.
    siginfo_t info;
    while (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) < 0 &&
           errno == EINTR) {
    }
    int st = 0;
    {
      std::lock_guard lk(reap_mu_);
      while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
      }
      reaped_ = true;
    }
    exit_status es;
    es.cause = stop_cause_;
    if (WIFEXITED(st)) es.code = WEXITSTATUS(st);
    if (WIFSIGNALED(st)) {
      es.signal = WTERMSIG(st);
      if (const char* abbrev = ::sigabbrev_np(es.signal)) es.signal_name = abbrev;
    }
    running_ = false;
    // on_exit may destroy this object: nothing here is touched after it.
    auto on_exit = std::move(cb_.on_exit);
    if (on_exit) on_exit(es);
  }

  child_callbacks cb_;
  pid_t pid_ = -1;
  std::mutex stdin_mu_;
  int stdin_ = -1;
  int out_ = -1, err_ = -1;  // owned by the I/O thread once it runs
  std::mutex reap_mu_;
  bool reaped_ = false;
  std::atomic<bool> running_{true};
  const std::chrono::milliseconds stopped_limit_;
  std::string stop_cause_;  // the I/O thread's
  std::thread thread_;
};

// Starts argv[0] (a path, or a name looked up in PATH) with argv. Throws
// std::runtime_error naming the binary when it cannot run ("cannot start node
// binary ./app: No such file or directory").
TLAUNCH_DECL child_ptr start_local_child(const std::vector<std::string>& argv, child_callbacks cb,
                                         const local_child_options& opt = {});

// Forks a node process that runs `body` and exits with its result (see the second
// local_child constructor); for tlaunch::start under local_mp.
TLAUNCH_DECL child_ptr start_forked_child(const std::function<int()>& body, child_callbacks cb,
                                          const local_child_options& opt = {});

// Compiled once in the library's process part (tlaunch/impl/src/launch_process.hpp), with
// local_child's members; inline when header-only.
#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_PROCESS)
TLAUNCH_DECL child_ptr start_local_child(const std::vector<std::string>& argv, child_callbacks cb,
                                         const local_child_options& opt) {
  return std::make_unique<local_child>(argv, std::move(cb), opt);
}

TLAUNCH_DECL child_ptr start_forked_child(const std::function<int()>& body, child_callbacks cb,
                                          const local_child_options& opt) {
  return std::make_unique<local_child>(body, std::move(cb), opt);
}
#endif

}  // namespace tlaunch::launch
