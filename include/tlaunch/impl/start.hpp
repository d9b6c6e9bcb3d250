// The body of tlaunch::start (start.hpp): inline in each translation unit that includes
// start.hpp, or, with TLAUNCH_SEPARATE_COMPILATION, compiled once in the library's part
// impl/src/launch_main.hpp.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "../error.hpp"
#include "../launch/flags.hpp"
#include "../launch/launcher.hpp"
#include "../launch/entry_points.hpp"
#include "../launch/plan.hpp"
#include "../launch/node_env.hpp"
#include "../launch/terminal/output.hpp"
#include "../program_view.hpp"
#include "../start.hpp"

// Header-only: the bodies of the two launchers tlaunch::start runs.
#if !defined(TLAUNCH_SEPARATE_COMPILATION)
#include "../launch/local_mp.hpp"
#include "../launch/local_mt.hpp"
#endif


namespace tlaunch::detail {

// What a started program and its launching thread share.
struct launch_state {
  std::mutex mu;
  std::function<void()> stop;  // set while the launcher accepts a stop
  launch::run_hooks::resize_fn resize;  // set while the launcher accepts a resize (local_mp)
  bool multi_process = false;
  bool stop_asked = false;     // stop() before the launcher published its function
  bool finished = false;
  int exit_code = 0;
  std::string failure;
  std::thread thread;                    // runs the launcher
  std::shared_ptr<const void> program;  // the copy of the program the view refers to
};

TLAUNCH_DECL running_program start_view(const program_view& p,
                                        std::shared_ptr<const void> keep,
                                        launch_options options) {
  launch::options o = launch::to_options(options);
  o.handle_signals = false;  // the caller's dispositions stay as they are
  // Resolved as tlaunch::main resolves it, before the launch: what does not fit the
  // program is thrown here rather than reported by wait().
  auto plan = launch::plan_launch(p, std::move(o));

  auto s = std::make_shared<launch_state>();
  s->program = std::move(keep);
  s->multi_process = plan.opt.launch == "local_mp";
  // The thread never outlives s: running_program joins it before it lets s go.
  s->thread = std::thread([st = s.get(), plan = std::move(plan)] {
    const launch::options& o = plan.opt;
    int code = 1;
    std::string failure;
    // local_mt publishes its stop before its run() bodies start; a stop that early would
    // miss them, so it is handed out once they run (`started`).
    std::function<void()> not_yet;
    auto publish = [st](std::function<void()> f) {
      bool asked = false;
      {
        std::lock_guard lk(st->mu);
        st->stop = f;
        asked = st->stop_asked;
      }
      if (f && asked) f();
    };
    try {
      launch::output_printer out(o.color, o.log_dir);
      launch::run_hooks hooks;
      hooks.failed = [&failure](const launch::failure_report& f) {
        failure = fmt::format("node {} failed: {}", f.where, f.why);
      };
      if (o.launch == "local_mp") {
        hooks.fork_nodes = true;
        hooks.publish_stop = publish;
        hooks.publish_resize = [st](launch::run_hooks::resize_fn f) {
          std::lock_guard lk(st->mu);
          st->resize = std::move(f);
        };
        code = launch::run_local_mp(plan, out, hooks);
      } else {
        hooks.publish_stop = [&](std::function<void()> f) {
          if (f)
            not_yet = std::move(f);
          else
            publish({});
        };
        hooks.started = [&](tlaunch::rpc::runtime&) { publish(not_yet); };
        code = launch::run_local_mt(plan, out, hooks);
      }
    } catch (const launch_error& e) {
      code = 2;
      failure = e.what();
    } catch (const std::exception& e) {
      code = 1;
      failure = e.what();
    }
    std::lock_guard lk(st->mu);
    st->stop = nullptr;
    st->exit_code = code;
    if (code != 0 && failure.empty())
      failure = fmt::format("the program ended with exit code {}", code);
    st->failure = std::move(failure);
    st->finished = true;
  });
  return running_program(std::move(s));
}

}  // namespace tlaunch::detail

namespace tlaunch {

TLAUNCH_DECL running_program::running_program(std::shared_ptr<detail::launch_state> s) noexcept
    : s_(std::move(s)) {}

TLAUNCH_DECL running_program::running_program(running_program&&) noexcept = default;

TLAUNCH_DECL running_program& running_program::operator=(running_program&& o) noexcept {
  if (this != &o) {
    end();
    s_ = std::move(o.s_);
  }
  return *this;
}

TLAUNCH_DECL running_program::~running_program() { end(); }

TLAUNCH_DECL int running_program::wait() {
  if (s_->thread.joinable()) s_->thread.join();
  return s_->exit_code;
}

TLAUNCH_DECL void running_program::stop() {
  // Under the lock: the launcher withdraws its stop function before it returns.
  std::lock_guard lk(s_->mu);
  s_->stop_asked = true;
  if (s_->stop) s_->stop();
}

TLAUNCH_DECL void running_program::resize(const std::string& node, std::uint32_t n) {
  auto done = std::make_shared<std::promise<std::string>>();
  std::future<std::string> result = done->get_future();
  if (!s_->multi_process)
    throw launch_error("running_program::resize(\"" + node +
                       "\"): local_mt runs a fixed set of instances; launch with local_mp");
  for (;;) {
    // Under the lock: the launcher withdraws its resize function before it returns.
    std::unique_lock lk(s_->mu);
    if (s_->finished || s_->stop_asked)
      throw launch_error("resize: node '" + node + "': the program " +
                         (s_->finished ? "has stopped" : "is stopping"));
    if (s_->resize) {
      s_->resize(node, n, [done](std::string refused) { done->set_value(std::move(refused)); });
      break;
    }
    // The launcher has not published it yet (it does before it starts the nodes).
    lk.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string refused;
  try {
    refused = result.get();
  } catch (const std::future_error&) {  // the launcher ended before it got to it
    refused = "resize: the program has stopped";
  }
  if (!refused.empty()) throw launch_error(refused);
}

TLAUNCH_DECL bool running_program::finished() const {
  std::lock_guard lk(s_->mu);
  return s_->finished;
}

TLAUNCH_DECL int running_program::exit_code() const {
  std::lock_guard lk(s_->mu);
  return s_->exit_code;
}

TLAUNCH_DECL std::string running_program::failure() const {
  std::lock_guard lk(s_->mu);
  return s_->failure;
}

TLAUNCH_DECL void running_program::end() {
  if (!s_ || !s_->thread.joinable()) return;
  stop();
  s_->thread.join();
}

}  // namespace tlaunch

