// local_mt: every node in this process. Calls go straight to the target's
// strand (or over loopback TCP with --force-wire).
#pragma once

#include <asio/signal_set.hpp>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>

#include "../rpc/runtime.hpp"
#include "../rpc/snapshots.hpp"
#include "../detail/secret.hpp"
#include "../program_view.hpp"
#include "colocation.hpp"
#include "decl.hpp"
#include "entry_points.hpp"
#include "flags.hpp"
#include "launcher.hpp"
#include "lifecycle.hpp"
#include "node_env.hpp"
#include "plan.hpp"
#include "terminal/output.hpp"

namespace tlaunch::launch {

#if !defined(TLAUNCH_SEPARATE_COMPILATION) || defined(TLAUNCH_BUILDING_LAUNCH_LOCAL)
TLAUNCH_DECL int run_local_mt(const launch_plan& plan, output_printer& out,
                              const run_hooks& hooks) {
  const auto& p = plan.program;
  const options& o = plan.opt;
  if (auto w = one_process_warning(plan.nodes, o); !w.empty()) out.print("launcher", stream::err, w);
  // --tls applies: only --force-wire makes connections in this process.
  auto secret = tlaunch::detail::random_secret();
  tlaunch::rpc::runtime rt(plan.nodes, runtime_options_of(o, 2),
                              std::vector<std::uint8_t>(secret.begin(), secret.end()), "local");
  rt.log_line = [&out](const rpc::instance& i, std::string_view line) {
    out.print(i.id(), stream::out, line);
  };
  if (o.force_wire) {
    auto addr = rt.listen("127.0.0.1");
    rt.set_directory(std::vector<std::string>(rt.total_instances(), addr));
  }
  // An elastic node runs its initial replicas: local_mt cannot resize (ctx.resize says so).
  p.host(rt, [&](std::uint32_t f) { return starts_at_launch(plan.nodes, f); });
  try {
    rt.restore_states(0);  // --resume: each node's latest snapshot
  } catch (const std::exception& e) {
    throw launch_error(e.what());
  }

  // The program's lifecycle; `mu` guards its changes for `cv`, and runs_left.
  lifecycle life;
  std::mutex mu;
  std::condition_variable cv;
  std::size_t runs_left = 0;
  rt.for_each_hosted([&](rpc::instance& i) { runs_left += i.start_run ? 1 : 0; });

  auto begin_stop = [&] {
    {
      std::lock_guard lk(mu);
      if (!life.begin_stop("stop_program()")) return;
    }
    rt.stop_instances();
    cv.notify_all();
  };
  rt.stop_program = begin_stop;
  rt.run_finished = [&](rpc::instance& i, std::exception_ptr e) {
    bool all_done;
    {
      std::lock_guard lk(mu);
      // A run() that ends once the program is stopping was ended by the stop.
      if (e && !life.stopping())
        life.fail(i.id(), rpc::detail::exception_message(e), fault_of(e), /*stop=*/false);
      all_done = --runs_left == 0;
    }
    cv.notify_all();
    if (e || all_done) begin_stop();
  };
  if (hooks.publish_stop) hooks.publish_stop(begin_stop);
  struct unpublish {
    const std::function<void(std::function<void()>)>& f;
    ~unpublish() {
      if (f) f({});
    }
  } unpublish_on_return{hooks.publish_stop};

  // Not made at all without handle_signals: asio restores SIG_DFL, not the caller's
  // handler, when its last signal_set goes.
  std::optional<asio::signal_set> signals;
  if (o.handle_signals) signals.emplace(rt.io, SIGINT, SIGTERM);
  std::function<void(std::error_code, int)> on_signal = [&](std::error_code ec, int sig) {
    if (ec) return;
    {
      std::lock_guard lk(mu);
      if (life.stopping()) {
        std::fprintf(stderr, "tlaunch: second signal: exiting now\n");
        std::_Exit(128 + sig);
      }
      life.interrupted(sig);
    }
    out.print("launcher", stream::err, "interrupted: stopping every node");
    begin_stop();
    signals->async_wait(on_signal);
  };
  if (signals) signals->async_wait(on_signal);

  rt.start_threads();
  rt.start_runs();
  if (auto* s = rt.snapshots()) s->start();
  if (hooks.started) hooks.started(rt);
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return life.stopping(); });
    if (!cv.wait_for(lk, o.grace, [&] { return runs_left == 0; })) {
      out.print("launcher", stream::err,
                std::to_string(runs_left) + " run() bodies did not stop within the grace period");
      life.fail("launcher", "run() bodies did not stop within the grace period",
                fault::grace_overrun);
      std::fflush(stdout);
      std::_Exit(life.exit_code());
    }
  }
  if (signals) {
    std::error_code ec;
    signals->cancel(ec);
  }
  // A graceful stop: every node with state writes its snapshot (not after a failure).
  if (auto* s = rt.snapshots()) {
    s->stop();
    bool failed;
    {
      std::lock_guard lk(mu);
      failed = life.failure().has_value();
    }
    if (!failed) s->write_all();
  }
  rt.shutdown();
  life.stopped();
  if (auto f = life.failure()) {
    out.print("launcher", stream::err, "node " + f->where + " failed: " + f->why);
    if (hooks.failed) hooks.failed(*f);
  }
  return life.exit_code();
}
#endif


}  // namespace tlaunch::launch
