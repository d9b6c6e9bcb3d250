// --ssh-terminal=tmux: a tmux session on the launcher's machine with one window per node
// instance, each following that node's output live. Every node's lines also go to a file of
// their own in a temporary directory, which its window follows (`tail -f`, by descriptor:
// the files are removed when the launcher ends, and the windows stay readable until the
// user closes the session). Closing the session while the program runs stops the program
// (as SIGTERM would).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
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

#include "exec_channel.hpp"

extern char** environ;

namespace tlaunch::ssh {

class tmux_terminal {
 public:
  // Creates the session (detached) named `name`; throws std::runtime_error when tmux
  // cannot be run.
  explicit tmux_terminal(std::string name) : name_(std::move(name)) {
    dir_ = std::filesystem::temp_directory_path() / name_;
    std::filesystem::create_directories(dir_);
  }
  tmux_terminal(const tmux_terminal&) = delete;
  tmux_terminal& operator=(const tmux_terminal&) = delete;
  ~tmux_terminal() {
    stop_watching();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);  // each window's tail keeps its file open
  }

  // No more on_closed calls once this returns (the program has ended).
  void stop_watching() {
    stop_watch_ = true;
    if (watcher_.joinable()) watcher_.join();
  }

  const std::string& name() const { return name_; }

  // A window named `window` ("worker/3") following `where`'s lines; call before its lines.
  // A restarted instance (the same `where` again) keeps its window: its new process's lines
  // follow the old ones after a "--- restarted ---" line.
  void add_window(const std::string& where, const std::string& window) {
    std::filesystem::path file;
    {
      std::lock_guard lk(mu_);
      if (auto it = files_.find(where); it != files_.end()) {
        *it->second << "--- restarted ---\n";
        it->second->flush();
        return;
      }
      file = dir_ / (std::to_string(files_.size()) + ".log");
      std::ofstream(file).flush();
      files_[where] = std::make_unique<std::ofstream>(file, std::ios::app);
    }
    std::string follow = "tail -n +1 -f " + shell_quote(file.string()) + " 2>/dev/null";
    if (!started_) {
      run({"tmux", "new-session", "-d", "-s", name_, "-n", window, "-x", "200", "-y", "50", follow});
      started_ = true;
    } else {
      run({"tmux", "new-window", "-d", "-t", name_ + ":", "-n", window, follow});
    }
  }

  // One line of `where`'s output (any thread).
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
        if (run({"tmux", "has-session", "-t", name_}, false) != 0) {
          on_closed();
          return;
        }
      }
    });
  }

 private:
  // Runs tmux and waits for it; its exit code. Throws when it cannot run or (check) fails.
  int run(const std::vector<std::string>& argv, bool check = true) {
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid = -1;
    int rc = ::posix_spawnp(&pid, "tmux", &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error("--ssh-terminal=tmux: cannot run tmux: " + std::string(std::strerror(rc)));
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (check && code != 0)
      throw std::runtime_error("--ssh-terminal=tmux: `tmux " + argv[1] + "` failed (exit " +
                               std::to_string(code) + ")");
    return code;
  }

  std::string name_;
  std::filesystem::path dir_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<std::ofstream>> files_;
  bool started_ = false;
  std::atomic<bool> stop_watch_{false};
  std::thread watcher_;
};

}  // namespace tlaunch::ssh
