// A program whose stop reaches one node late, for the lifecycle tests. The launcher
// (local_mp) holds back worker/1's stop message (launch::options::hold_stop) until
// worker/1 reports or exits, so what worker/1 sees is always the same: worker/0 stops
// the program, store/0 stops and goes away, and worker/1's next call to it fails
// with tlaunch::unavailable before worker/1 knows of the stop.
//   stop_race [launcher flags] -- unavailable   worker/1's run() ends with that error:
//                                               caused by the stop, so the program
//                                               ends normally (exit 0)
//   stop_race [launcher flags] -- real          worker/1 turns it into an error of its
//                                               own: a real failure during the stop
//                                               (exit 1, worker/1 named)
#include <tlaunch/tlaunch.hpp>
// The launch layer's own entry points (compiled in the library; declared here).
#include <tlaunch/launch/local_mp.hpp>
#include <tlaunch/launch/node_process.hpp>
#include <tlaunch/launch/output.hpp>
#include <tlaunch/launch/registry.hpp>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

using namespace std::chrono_literals;

struct Store {
  std::int64_t get() const { return 7; }
  using rpc = tlaunch::methods<&Store::get>;
};

struct Worker {
  tlaunch::handle<Store> store;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    std::string mode = ctx.args().empty() ? "unavailable" : ctx.args()[0];
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
  o.hold_stop = {"worker/1"};
  launch::output_printer out(launch::color_mode::never, o.log_dir);
  return launch::run_local_mp(program, o, out);
}
