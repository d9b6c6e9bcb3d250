// A program for the metrics tests: workers call a parameter server in a loop until the
// program is stopped (SIGTERM, Ctrl-C). Each worker adds 1 (ParamServer::add) every 2 ms,
// calls ParamServer::fail (which throws) every tenth round, and counts its rounds in its
// own counter "rounds", its last value in the gauge "last_total" and the time each add
// took in the histogram "add_seconds". With the program
// argument `idle` (after `--`), the workers make no calls and wait for the stop
// (benchmarks/observe_bench.py: a large program's launcher serving its dashboard).
#include <tlaunch/tlaunch.hpp>

#include <chrono>
#include <cstdint>
#include <stdexcept>

using namespace std::chrono_literals;

struct ParamServer {
  std::int64_t total = 0;
  std::int64_t add(std::int64_t n) { return total += n; }
  int fail() { throw std::runtime_error("fails on purpose"); }
  using rpc = tlaunch::methods<&ParamServer::add, &ParamServer::fail>;
};

struct Worker {
  tlaunch::handle<ParamServer> ps;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    bool idle = false;
    for (const auto& a : ctx.args()) idle = idle || a == "idle";
    if (idle) {
      co_await ctx.stopped();
      co_return;
    }
    ctx.log("{} calls ps", ctx.id());
    auto rounds = ctx.metrics().counter("rounds");
    auto last = ctx.metrics().gauge("last_total");
    auto add_seconds = ctx.metrics().histogram("add_seconds", {1e-4, 1e-3, 1e-2, 1e-1});
    for (std::uint64_t i = 0; !ctx.stop_requested(); ++i) {
      const auto start = std::chrono::steady_clock::now();
      const std::int64_t total = co_await ps.call<&ParamServer::add>(1);
      add_seconds.observe(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      last.set(static_cast<double>(total));
      if (i % 10 == 0) {
        try {
          co_await ps.call<&ParamServer::fail>();
        } catch (const tlaunch::remote_error&) {
        }
      }
      rounds.add(1);
      co_await ctx.sleep_for(2ms);
    }
  }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"ps", ParamServer>(),
    tlaunch::node<"worker", Worker>(tlaunch::ref<"ps">).replicas(2));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
