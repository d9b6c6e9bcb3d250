// --terminal=tmux: a tmux session on the launcher's machine with one window per node
// process (an instance, or a colocation group), each following that process's output
// live, whichever launcher started it (the coordinator feeds it: launch/process/coordinator.hpp).
// Every process's lines also go to a file of their own in a temporary directory, which its
// window follows (`tail -f`, by descriptor: the files are removed when the launcher ends,
// and the windows stay readable until the user closes the session, or the launcher closes
// it with --terminal-close). Closing the session while the program runs stops the program
// (as SIGTERM would).
//
// Nothing of the session outlives a launcher that dies without ending the program (kill -9,
// an uncaught SIGHUP or SIGQUIT): the tmux server is no child of the launcher, so no
// PR_SET_PDEATHSIG reaches the windows. A small shell of its own (in a session of its own,
// so a terminal's signals do not reach it) reads a stream whose only write end the launcher
// holds (an anonymous socket pair, close-on-exec: neither tmux nor a node process gets it); the launcher writes
// "end" on it when the program has ended (release()), and an EOF without it, which the
// kernel delivers whatever way the launcher died, makes the shell remove the windows' files
// and kill the session. No polling, no PID that could be reused.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../../error.hpp"
#include "../process/child.hpp"

extern char** environ;

namespace tlaunch::launch {

class tmux_terminal {
 public:
  // A session named `name`, or `name`-2, -3, ... when a session of that name exists
  // already; it is created with the first window.
  explicit tmux_terminal(const std::string& name) : name_(name) {
    for (int n = 2; run({"tmux", "has-session", "-t", "=" + name_}, false) == 0; ++n)
      name_ = name + "-" + std::to_string(n);
    dir_ = std::filesystem::temp_directory_path() / name_;
    std::filesystem::create_directories(dir_);
  }
  tmux_terminal(const tmux_terminal&) = delete;
  tmux_terminal& operator=(const tmux_terminal&) = delete;
  ~tmux_terminal() {
    stop_watching();
    release();  // a launcher that ends this way has ended its program
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);  // each window's tail keeps its file open
  }

  // The program has ended: the session stays (until the user closes it, or close()) after
  // the launcher exits. Without this call, the launcher's death closes the session.
  void release() {
    if (guard_fd_ < 0) return;
    static const char end[] = "end\n";
    // MSG_NOSIGNAL: a guard that is gone already costs no SIGPIPE.
    while (::send(guard_fd_, end, sizeof end - 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
    ::close(guard_fd_);
    guard_fd_ = -1;
    int st = 0;
    while (::waitpid(guard_pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }

  // No more on_closed calls once this returns (the program has ended).
  void stop_watching() {
    stop_watch_ = true;
    if (watcher_.joinable()) watcher_.join();
  }

  // Closes the session (--terminal-close); nothing when the user closed it already.
  void close() { run({"tmux", "kill-session", "-t", "=" + name_}, false); }

  const std::string& name() const { return name_; }

  // A window named `window` ("worker/3") following `where`'s lines; the first one creates
  // the session. Throws launch_error when tmux cannot be run or refuses.
  void add_window(const std::string& where, const std::string& window) {
    std::filesystem::path file;
    {
      std::lock_guard lk(mu_);
      if (files_.count(where) != 0) return;
      file = dir_ / (std::to_string(files_.size()) + ".log");
      std::ofstream(file).flush();
      files_[where] = std::make_unique<std::ofstream>(file, std::ios::app);
    }
    std::string follow = "tail -n +1 -f " + shell_quote(file.string()) + " 2>/dev/null";
    if (!started_) {
      run({"tmux", "new-session", "-d", "-s", name_, "-n", window, "-x", "200", "-y", "50", follow});
      started_ = true;
      guard();
    } else {
      run({"tmux", "new-window", "-d", "-t", "=" + name_ + ":", "-n", window, follow});
    }
  }

  // The last line of a node's window: how its process ended, or, when it ended with the
  // program's stop and that is no failure (exit code 0, or the error of a call its stop
  // ended), that it stopped.
  static std::string exit_line(const exit_status& st, bool stopped) {
    if (stopped)
      return st.ok() ? "--- stopped ---"
                     : "--- stopped (" + st.describe() + ", caused by the stop: no failure) ---";
    return "--- " + st.describe() + " ---";
  }

  // One line of `where`'s output (any thread); nothing for a `where` without a window.
  void line(const std::string& where, std::string_view text) {
    std::lock_guard lk(mu_);
    auto it = files_.find(where);
    if (it == files_.end()) return;
    it->second->write(text.data(), static_cast<std::streamsize>(text.size())).put('\n');
    it->second->flush();
  }

  // Calls on_closed once (from a thread of its own) when the session is gone.
  void watch(std::function<void()> on_closed) {
    watcher_ = std::thread([this, on_closed = std::move(on_closed)] {
      while (!stop_watch_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (stop_watch_) return;
        if (run({"tmux", "has-session", "-t", "=" + name_}, false) != 0) {
          on_closed();
          return;
        }
      }
    });
  }

 private:
  // Quotes s for the shell tmux runs a window's command with.
  static std::string shell_quote(std::string_view s) {
    std::string out = "'";
    for (char c : s) {
      if (c == '\'')
        out += "'\\''";
      else
        out += c;
    }
    return out + "'";
  }

  // Starts the shell that closes the session when the launcher dies (see the top).
  void guard() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      std::string why = "--terminal=tmux: socketpair: ";
      why += std::strerror(errno);
      throw launch_error(why);
    }
    const std::string script =
        "if ! read -r x || [ \"$x\" != end ]; then\n"
        "  rm -rf -- \"$2\"; tmux kill-session -t \"=$1\"\n"
        "fi";
    const std::string dir = dir_.string();
    std::vector<char*> args{const_cast<char*>("sh"), const_cast<char*>("-c"),
                            const_cast<char*>(script.c_str()), const_cast<char*>("sh"),
                            const_cast<char*>(name_.c_str()), const_cast<char*>(dir.c_str()),
                            nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[0], 0);  // dup2 leaves close-on-exec off
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
    pid_t pid = -1;
    int rc = ::posix_spawn(&pid, "/bin/sh", &fa, &at, args.data(), environ);
    posix_spawnattr_destroy(&at);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[0]);
    if (rc != 0) {
      ::close(fds[1]);
      close();
      std::string why = "--terminal=tmux: cannot run /bin/sh: ";
      why += std::strerror(rc);
      throw launch_error(why);
    }
    guard_fd_ = fds[1];
    guard_pid_ = pid;
  }

  // Runs tmux and waits for it; its exit code (127 when it cannot run and !check). Throws
  // launch_error when it cannot run or (check) fails.
  int run(const std::vector<std::string>& argv, bool check = true) {
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    // tmux's complaint about what was only asked ("no server running") is no news; that of a
    // command that must work goes to the launcher's stderr.
    if (!check) posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    int rc = ::posix_spawnp(&pid, "tmux", &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      if (!check) return 127;
      std::string why = "--terminal=tmux: cannot run tmux: ";
      why += std::strerror(rc);
      throw launch_error(why);
    }
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (check && code != 0) {
      std::string why = "--terminal=tmux: `tmux ";
      why += argv[1];
      why += "` failed (exit " + std::to_string(code) + ")";
      throw launch_error(why);
    }
    return code;
  }

  std::string name_;
  std::filesystem::path dir_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<std::ofstream>> files_;
  bool started_ = false;
  int guard_fd_ = -1;     // the launcher's end of the guard's stream (see the top)
  pid_t guard_pid_ = -1;  // the guard's shell
  std::atomic<bool> stop_watch_{false};
  std::thread watcher_;
};

}  // namespace tlaunch::launch
