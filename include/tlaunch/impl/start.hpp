// The body of tlaunch::start (start.hpp): inline in each translation unit that includes
// start.hpp, or, with TLAUNCH_SEPARATE_COMPILATION, compiled once in the library's part
// impl/src/launch_main.hpp.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "../error.hpp"
#include "../launch/launcher.hpp"
#include "../launch/entry_points.hpp"
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

TLAUNCH_DECL running_program start_view(const program_view& p,
                                        std::shared_ptr<const void> keep,
                                        launch_options o) {
  if (o.launch != "local_mt" && o.launch != "local_mp")
    throw launch_error(fmt::format(
        "tlaunch::start runs programs with local_mt or local_mp, not '{}' (other launchers: "
        "through tlaunch::main)",
        o.launch));
  // What tlaunch::main checks before it runs a launcher, thrown here rather than
  // reported by wait().
  auto nodes = p.describe(o.replicas);
  launch::check_env_nodes(nodes, o);
  launch::apply_restart_flags(nodes, o);
  o.handle_signals = false;  // the caller's dispositions stay as they are
  o.help = o.agent = false;
  o.role.clear();

  auto s = std::make_shared<launch_state>();
  s->program = std::move(keep);
  // The thread never outlives s: running_program joins it before it lets s go.
  s->thread = std::thread([st = s.get(), p, o = std::move(o)] {
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
      launch::output_printer out(launch::parse_color_mode(o.color), o.log_dir);
      launch::run_hooks hooks;
      hooks.failed = [&failure](const launch::failure_report& f) {
        failure = fmt::format("node {} failed: {}", f.where, f.why);
      };
      if (o.launch == "local_mp") {
        hooks.fork_nodes = true;
        hooks.publish_stop = publish;
        code = launch::run_local_mp(p, o, out, hooks);
      } else {
        hooks.publish_stop = [&](std::function<void()> f) {
          if (f)
            not_yet = std::move(f);
          else
            publish({});
        };
        hooks.started = [&](tlaunch::detail::runtime&) { publish(not_yet); };
        code = launch::run_local_mt(p, o, out, hooks);
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

