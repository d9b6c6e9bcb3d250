// Real programs for tests that run them (integration, launch, ssh_launch, netns, k8s, slurm):
// start a binary with its stdout and stderr captured, wait for output or exit with a
// deadline, signal it, check several parts of its output at once (missing), and find its
// node processes, whether they are gone, and their listening ports in /proc.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace tlaunch::integration {

using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;

// A started binary. The destructor kills it (SIGKILL) if it is still running.
class process {
 public:
  explicit process(std::vector<std::string> argv) : argv_(std::move(argv)) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC))
      throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    std::vector<char*> args;
    for (auto& a : argv_) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
      int devnull = ::open("/dev/null", O_RDONLY);
      ::dup2(devnull, 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    reader_ = std::thread([this] { pump(); });
  }
  process(const process&) = delete;
  process& operator=(const process&) = delete;
  ~process() {
    if (!exited_) {
      ::kill(pid_, SIGKILL);
      wait(5s);
    }
    quit_ = true;
    if (reader_.joinable()) reader_.join();
    ::close(out_fd_);
    ::close(err_fd_);
  }

  pid_t pid() const { return pid_; }
  void signal(int sig) {
    if (!exited_) ::kill(pid_, sig);
  }

  // The exit code (128 + signal number when killed by a signal), or -1 when it
  // is still running after `timeout`. Once it returned a code, the output is complete.
  int wait(ms timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!exited_) {
      int st = 0;
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        code_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(10ms);
    }
    // The pipes reach EOF once every writer is gone; give them a moment.
    std::unique_lock lk(mu_);
    cv_.wait_for(lk, 3s, [&] { return eof_ == 2; });
    return code_;
  }
  // Kills it if needed and returns the code; for a test that must end now.
  int wait_or_kill(ms timeout) {
    int c = wait(timeout);
    if (c >= 0) return c;
    timed_out_ = true;
    ::kill(pid_, SIGKILL);
    return wait(5s);
  }
  bool timed_out() const { return timed_out_; }

  // True once `needle` appeared `count` times in stdout+stderr.
  bool wait_for_output(std::string_view needle, ms timeout, std::size_t count = 1) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return occurrences(all_, needle) >= count || eof_ == 2; }) &&
           occurrences(all_, needle) >= count;
  }

  std::string out() const {
    std::lock_guard lk(mu_);
    return out_;
  }
  std::string err() const {
    std::lock_guard lk(mu_);
    return err_;
  }
  // stdout and stderr interleaved as read.
  std::string all() const {
    std::lock_guard lk(mu_);
    return all_;
  }

  static std::size_t occurrences(std::string_view hay, std::string_view needle) {
    std::size_t n = 0;
    for (auto at = hay.find(needle); at != std::string_view::npos; at = hay.find(needle, at + 1)) ++n;
    return n;
  }

 private:
  void pump() {
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    char buf[8192];
    while (!quit_) {
      int r = ::poll(fds, 2, 50);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        std::lock_guard lk(mu_);
        if (n <= 0) {
          fds[i].fd = -1;
          ++eof_;
        } else {
          (i == 0 ? out_ : err_).append(buf, static_cast<std::size_t>(n));
          all_.append(buf, static_cast<std::size_t>(n));
        }
        cv_.notify_all();
      }
      std::lock_guard lk(mu_);
      if (eof_ == 2) return;
    }
  }

  std::vector<std::string> argv_;
  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  bool exited_ = false, timed_out_ = false;
  int code_ = -1;
  std::atomic<bool> quit_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int eof_ = 0;
  std::string out_, err_, all_;
  std::thread reader_;
};

// Starts argv and waits for it to end; the process, to inspect its output.
struct finished {
  int code;
  std::string out, err, all;
  bool timed_out;
};
inline finished run(std::vector<std::string> argv, ms timeout = 30s) {
  process p(std::move(argv));
  int c = p.wait_or_kill(timeout);
  return {c, p.out(), p.err(), p.all(), p.timed_out()};
}

// The parts that `text` lacks, each on a line of its own; "" when it holds them all. A
// test checks several at once with CHECK(missing(r.out, {...}) == ""), which names the
// missing ones when it fails.
inline std::string missing(std::string_view text, std::initializer_list<std::string_view> parts) {
  std::string out;
  for (auto part : parts)
    if (text.find(part) == std::string_view::npos) out.append(part).append("\n");
  return out;
}

// ----- /proc ----------------------------------------------------------------------------

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// argv joined by spaces ("" when the process is gone).
inline std::string cmdline(pid_t pid) {
  auto s = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  for (auto& c : s)
    if (c == '\0') c = ' ';
  return s;
}

// The state letter from /proc/PID/stat ('R', 'S', 'Z', ...), or 0 when there is no such process.
inline char state(pid_t pid) {
  auto s = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto close = s.rfind(')');
  if (close == std::string::npos || close + 2 >= s.size()) return 0;
  return s[close + 2];
}
// Running, sleeping or stopped: not gone and not a zombie waiting to be reaped.
inline bool alive(pid_t pid) {
  char st = state(pid);
  return st != 0 && st != 'Z' && st != 'X';
}

// Live node processes (started with --tlaunch-role) whose argv holds `marker`;
// with a role, only that node instance.
inline std::vector<pid_t> node_pids(std::string_view marker, std::string_view role = {}) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    auto cl = cmdline(static_cast<pid_t>(pid));
    if (cl.find(marker) == std::string::npos) continue;
    auto at = cl.find("--tlaunch-role=");
    if (at == std::string::npos) continue;
    if (!role.empty() && cl.compare(at + 15, role.size() + 1, std::string(role) + " ") != 0)
      continue;
    if (alive(static_cast<pid_t>(pid))) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

// Waits until none of `pids` is alive; true if that happened within `timeout`.
inline bool all_gone(const std::vector<pid_t>& pids, ms timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool any = false;
    for (pid_t p : pids) any = any || alive(p);
    if (!any) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
}

// Waits (at most `timeout`) until none of `pids` is alive; true if they all went and no node
// process with `marker` in its argv is left either.
inline bool all_gone(const std::vector<pid_t>& pids, std::string_view marker, ms timeout) {
  return all_gone(pids, timeout) && node_pids(marker).empty();
}

// The socket inodes among pid's open files.
inline std::set<std::string> socket_inodes(pid_t pid) {
  std::string base = "/proc/" + std::to_string(pid) + "/fd";
  std::set<std::string> inodes;
  if (DIR* d = ::opendir(base.c_str())) {
    while (dirent* e = ::readdir(d)) {
      char link[256];
      ssize_t n = ::readlink((base + "/" + e->d_name).c_str(), link, sizeof link - 1);
      if (n <= 0) continue;
      std::string_view l(link, static_cast<std::size_t>(n));
      if (l.rfind("socket:[", 0) == 0) inodes.insert(std::string(l.substr(8, l.size() - 9)));
    }
    ::closedir(d);
  }
  return inodes;
}

// The TCP port `pid` listens on, or 0. A listening socket that `parent` holds as
// well is the parent's, inherited across exec, and is skipped.
inline int listen_port(pid_t pid, pid_t parent = 0) {
  auto inodes = socket_inodes(pid);
  if (parent > 0)
    for (const auto& i : socket_inodes(parent)) inodes.erase(i);
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::istringstream in(read_file("/proc/" + std::to_string(pid) + table));
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (st == "0A" && inodes.count(inode))
        return std::stoi(local.substr(local.rfind(':') + 1), nullptr, 16);
    }
  }
  return 0;
}

// A string no other process on the machine has in its argv.
inline std::string unique_marker(std::string_view what) {
  static std::atomic<int> n{0};
  std::random_device rd;
  return "tlaunch-itest-" + std::string(what) + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(n++) + "-" + std::to_string(rd() % 100000);
}

}  // namespace tlaunch::integration
