// tlaunch::start: a launch from inside a program, that the program waits for or stops,
// and then launches the next (a sweep). tlaunch::main is the command-line entry point;
// start takes its options as a value and parses no flag.
//
//   tlaunch::launch_options o;
//   o.launch = tlaunch::launcher::local_mp;
//   auto run = tlaunch::start(tlaunch::program(tlaunch::node<"trainer", Trainer>(0.1)), o);
//   int code = run.wait();  // 0, or 1 and run.failure() says which node failed and why
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "detail/config.hpp"
#include "launch_options.hpp"
#include "program.hpp"
#include "program_view.hpp"

namespace tlaunch {

class running_program;

namespace detail {
// What a started program and its launching thread share (impl/start.hpp).
struct launch_state;

// The body of tlaunch::start: not a template, so it is compiled once with
// TLAUNCH_SEPARATE_COMPILATION (impl/src.hpp), else inline (impl/start.hpp, included below).
TLAUNCH_DECL running_program start_view(const program_view& p, std::shared_ptr<const void> keep,
                                        launch_options o);
}  // namespace detail

// A program started by tlaunch::start, which alone makes one. Move-only; its destructor
// stops the program and waits for it if wait() was not called.
class running_program {
 public:
  TLAUNCH_DECL running_program(running_program&&) noexcept;
  TLAUNCH_DECL running_program& operator=(running_program&& o) noexcept;
  running_program(const running_program&) = delete;
  running_program& operator=(const running_program&) = delete;
  TLAUNCH_DECL ~running_program();

  // Blocks until the program has stopped (by itself, after stop(), or on a failure) and
  // returns its exit code: 0 when it stopped normally, 1 when a node failed (or the
  // launch itself did), 2 when the launcher refused its options (start() throws for most
  // such errors itself). Calling it again returns the same code. One thread at a time.
  TLAUNCH_DECL int wait();

  // Asks the program to stop with its grace period, as ctx.stop_program() does: every
  // node is told to stop, run() bodies are cancelled, what does not stop within the
  // grace is killed (local_mp). Returns at once; from any thread; does nothing once the
  // program has stopped.
  TLAUNCH_DECL void stop();

  // Makes elastic node `node` (node<...>(...).elastic(max)) run n replicas, 0 to max, and
  // returns once every process knows the new set: new replicas registered (a broadcast
  // started after this reaches them), removed ones finished the calls they were serving
  // and stopped. From any thread; resizes are done one after the other. Under local_mp
  // only (local_mt runs a fixed set). Throws launch_error naming the node when it is
  // refused: not elastic, n over its max, the program not running. docs/guide/elastic.md.
  TLAUNCH_DECL void resize(const std::string& node, std::uint32_t n);

  // Whether the program has stopped (wait() then returns at once).
  TLAUNCH_DECL bool finished() const;
  // After wait(): what wait() returned.
  TLAUNCH_DECL int exit_code() const;
  // After wait(): "" when the program stopped normally; else what made it fail, naming
  // the node ("node trainer/0 failed: run() ended with an error: diverged").
  TLAUNCH_DECL std::string failure() const;

 private:
  friend running_program detail::start_view(const detail::program_view&,
                                            std::shared_ptr<const void>, launch_options);
  TLAUNCH_DECL explicit running_program(std::shared_ptr<detail::launch_state> s) noexcept;
  TLAUNCH_DECL void end();

  std::shared_ptr<detail::launch_state> s_;
};

// Starts p with o.launch (launcher::local_mt or launcher::local_mp) on a thread of its
// own and returns at once. p is copied: a temporary is fine. Throws launch_error when the
// options do not fit the program (an unknown node in replicas, restart or env). Under
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
