// A program whose stop reaches one node late, for the lifecycle tests. The launcher
// (local_mp) holds back worker/1's stop message (coordinator_test_access::hold_stop) until
// worker/1 reports or exits, so what worker/1 sees is always the same: worker/0 stops
// the program, store/0 stops and goes away, and worker/1's next call to it fails
// with tlaunch::unavailable before worker/1 knows of the stop.
//   stop_race [launcher flags] -- unavailable   worker/1's run() ends with that error:
//                                               caused by the stop, so the program
//                                               ends normally (exit 0); store/0 said it
//                                               stops with the program, so the error is
//                                               a tlaunch::stopping
//   stop_race [launcher flags] -- in_flight     worker/1's call is in flight when store/0
//                                               stops: Store::hang never replies, and
//                                               worker/0 stops the program once store/0
//                                               serves it. The call ends with
//                                               tlaunch::stopping, worker/1's run() with
//                                               it: not a failure, no error line, exit 0
//   stop_race [launcher flags] -- real          worker/1 turns it into an error of its
//                                               own: a real failure during the stop
//                                               (exit 1, worker/1 named)
#include <tlaunch/tlaunch.hpp>
// The launch layer's own entry points (compiled in the library; declared here).
#include <tlaunch/main.hpp>
#include <tlaunch/launch/local_mp.hpp>
#include <tlaunch/launch/process/node_process.hpp>
#include <tlaunch/launch/terminal/output.hpp>
#include <tlaunch/launch/registry.hpp>

#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

using namespace std::chrono_literals;

struct Store {
  std::int64_t get() const { return 7; }
  // Never replies on its own: the call stays in flight until store/0's process ends.
  asio::awaitable<std::int64_t> hang() {
    ++hanging;
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::hours(1));
    co_await t.async_wait(asio::use_awaitable);
    co_return 0;
  }
  // How many hang() calls have begun.
  std::int64_t hung() const { return hanging.load(); }
  std::atomic<std::int64_t> hanging{0};
  using rpc = tlaunch::methods<&Store::get, &Store::hang, &Store::hung>;
};

struct Worker {
  tlaunch::handle<Store> store;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    std::string mode = ctx.args().empty() ? "unavailable" : ctx.args()[0];
    if (mode == "in_flight") {
      if (ctx.index() == 0) {
        while (co_await store.call<&Store::hung>() == 0) co_await ctx.sleep_for(10ms);
        ctx.log("worker/1's call is in flight: stopping the program");
        ctx.stop_program();
        co_await ctx.stopped();
        co_return;
      }
      try {
        co_await store.call<&Store::hang>();
      } catch (const tlaunch::stopping& e) {
        ctx.log("in flight: tlaunch::stopping: {}", e.what());
        throw;
      } catch (const tlaunch::call_error& e) {
        ctx.log("in flight: another call error: {}", e.what());
        throw;
      }
      co_return;
    }
    if (ctx.index() == 0) {
      co_await ctx.sleep_for(300ms);
      ctx.log("stopping the program");
      ctx.stop_program();
      co_await ctx.stopped();
      co_return;
    }
    std::int64_t calls = 0;
    try {
      for (;; ++calls) {
        co_await store.call<&Store::get>();
        co_await ctx.sleep_for(2ms);
      }
    } catch (const tlaunch::unavailable& e) {
      ctx.log("after {} calls: {}", calls, e.what());
      if (mode == "real") throw std::runtime_error("worker/1 gave up for real");
      throw;
    }
  }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"store", Store>(),
    tlaunch::node<"worker", Worker>(tlaunch::ref<"store">).replicas(2));

int main(int argc, char** argv) {
  namespace launch = tlaunch::launch;
  launch::options o;
  try {
    o = launch::parse(argc, argv);
  } catch (const launch::usage_error& e) {
    std::fprintf(stderr, "stop_race: %s\n", e.what());
    return 2;
  }
  if (!o.role.empty()) return launch::run_node_process(program, o);
  // A host's agent under --launch=ssh: as tlaunch::main runs it.
  if (o.agent) return launch::run_main(program, argc, argv);
  launch::detail::coordinator_test_access::hold_stop({"worker/1"});
  launch::output_printer out(launch::color_mode::never, o.log_dir);
  auto plan = launch::plan_launch(program, o);
  if (o.launch == "ssh") return launch::registered_launchers::run(plan, out);
  return launch::run_local_mp(plan, out);
}
