// tlaunch::start: a launch from inside a program, that the program waits for or stops,
// and then launches the next (a sweep). tlaunch::main is the command-line entry point;
// start takes its options as a value and parses no flag.
//
//   tlaunch::launch_options o;
//   o.launch = "local_mp";
//   auto run = tlaunch::start(tlaunch::program(tlaunch::node<"trainer", Trainer>(0.1)), o);
//   int code = run.wait();  // 0, or 1 and run.failure() says which node failed and why
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "detail/config.hpp"
#include "launch/flags.hpp"
#include "program.hpp"
#include "program_view.hpp"

namespace tlaunch {

// The options tlaunch::main fills from its flags (launch/flags.hpp): launch ("local_mt",
// the default, or "local_mp"), replicas, grace, start_timeout, threads, log_dir, color,
// env, restart, user_args (what ctx.args() returns), ...
using launch_options = launch::options;

namespace detail {

// What a started program and its launching thread share.
struct launch_state {
  std::mutex mu;
  std::function<void()> stop;  // set while the launcher accepts a stop
  bool stop_asked = false;     // stop() before the launcher published its function
  bool finished = false;
  int exit_code = 0;
  std::string failure;
  std::thread thread;                    // runs the launcher
  std::shared_ptr<const void> program;  // the copy of the program the view refers to
};

}  // namespace detail

// A program started by tlaunch::start. Move-only; its destructor stops the program and
// waits for it if wait() was not called.
class running_program {
 public:
  explicit running_program(std::shared_ptr<detail::launch_state> s) : s_(std::move(s)) {}
  running_program(running_program&&) noexcept = default;
  running_program& operator=(running_program&& o) noexcept {
    if (this != &o) {
      end();
      s_ = std::move(o.s_);
    }
    return *this;
  }
  running_program(const running_program&) = delete;
  running_program& operator=(const running_program&) = delete;
  ~running_program() { end(); }

  // Blocks until the program has stopped (by itself, after stop(), or on a failure) and
  // returns its exit code: 0 when it stopped normally, 1 when a node failed (or the
  // launch itself did), 2 when the launcher refused its options (start() throws for most
  // such errors itself). Calling it again returns the same code. One thread at a time.
  int wait() {
    if (s_->thread.joinable()) s_->thread.join();
    return s_->exit_code;
  }

  // Asks the program to stop with its grace period, as ctx.stop_program() does: every
  // node is told to stop, run() bodies are cancelled, what does not stop within the
  // grace is killed (local_mp). Returns at once; from any thread; does nothing once the
  // program has stopped.
  void stop() {
    // Under the lock: the launcher withdraws its stop function before it returns.
    std::lock_guard lk(s_->mu);
    s_->stop_asked = true;
    if (s_->stop) s_->stop();
  }

  // Whether the program has stopped (wait() then returns at once).
  bool finished() const {
    std::lock_guard lk(s_->mu);
    return s_->finished;
  }
  // After wait(): what wait() returned.
  int exit_code() const {
    std::lock_guard lk(s_->mu);
    return s_->exit_code;
  }
  // After wait(): "" when the program stopped normally; else what made it fail, naming
  // the node ("node trainer/0 failed: run() ended with an error: diverged").
  std::string failure() const {
    std::lock_guard lk(s_->mu);
    return s_->failure;
  }

 private:
  void end() {
    if (!s_ || !s_->thread.joinable()) return;
    stop();
    s_->thread.join();
  }

  std::shared_ptr<detail::launch_state> s_;
};

}  // namespace tlaunch

// The body of tlaunch::start: not a template, so it is compiled once with
// TLAUNCH_SEPARATE_COMPILATION (impl/src.hpp), else inline (impl/start.hpp, included below).
namespace tlaunch::detail {
TLAUNCH_DECL running_program start_view(const program_view& p, std::shared_ptr<const void> keep,
                                        launch_options o);
}  // namespace tlaunch::detail

namespace tlaunch {

// Starts p with o.launch (local_mt or local_mp) on a thread of its own and returns at
// once. p is copied: a temporary is fine. Throws launch_error when the options do not
// fit the program (an unknown node in replicas or env, another launcher). Under
// local_mp every node process is a fork of this process (docs/guide/launch-api.md).
template <class... Nodes>
running_program start(const program_t<Nodes...>& p, launch_options o = {}) {
  auto copy = std::make_shared<const program_t<Nodes...>>(p);
  detail::program_view view(*copy);
  return detail::start_view(view, std::move(copy), std::move(o));
}

}  // namespace tlaunch

#if !defined(TLAUNCH_SEPARATE_COMPILATION)
#include "impl/start.hpp"
#endif
