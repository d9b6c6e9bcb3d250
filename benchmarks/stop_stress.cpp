// stop_stress: a parameter server and workers that call it in a loop, until worker/0 stops
// the program with ctx.stop_program(). Every stop must end with exit code 0: a call that a
// peer's stop ends (tlaunch::stopping), or that this node's own stop cancels, is no
// failure. benchmarks/stop_stress.sh runs it many times under CPU load and counts the
// runs that exit otherwise.
//   stop_stress --launch=local_mp [--replicas=worker=8] [--tls] [-- MS]
// MS: how long worker/0 calls before it stops the program (default 300).
#include <tlaunch/tlaunch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

struct ParamServer {
  std::vector<double> weights = std::vector<double>(64, 0.0);
  std::int64_t version = 0;

  std::int64_t apply(std::vector<double> gradient) {
    for (std::size_t i = 0; i < weights.size() && i < gradient.size(); ++i)
      weights[i] -= 0.01 * gradient[i];
    return ++version;
  }
  using rpc = tlaunch::methods<&ParamServer::apply>;
};

struct Worker {
  tlaunch::handle<ParamServer> ps;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    const int ms = ctx.args().empty() ? 300 : std::stoi(ctx.args()[0]);
    std::vector<double> gradient(64, 1.0 + ctx.index());
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (ctx.index() != 0 || std::chrono::steady_clock::now() < until)
      co_await ps.call<&ParamServer::apply>(gradient);
    ctx.stop_program();
    co_await ctx.stopped();
  }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"ps", ParamServer>(),
    tlaunch::node<"worker", Worker>(tlaunch::ref<"ps">).replicas(4));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
