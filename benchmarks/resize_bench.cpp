// resize_bench: how long a resize of an elastic node takes (docs/guide/elastic.md), from
// ctx.resize to the new replicas serving: the resize itself (every new replica started and
// registered, every process told and acknowledging), then the first broadcast that reaches
// all of them. Its baseline in the same run: the same for one replica more (4 -> 5), the cost
// of starting one process and one directory round. Shrinks are timed too (the removed
// replicas finish their calls and exit before resize returns).
//
//   ./resize_bench --launch=local_mp -- --to=64 --rounds=5
//   ./resize_bench --launch=ssh --hosts=h1,h2 -- --to=64
//
// Arguments after `--`: --to=N (the grown size, at most 64; default 64), --rounds=N (5).
// Prints one line per figure: the median, p90 and max over the rounds, in milliseconds.
#include <tlaunch/tlaunch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace {

std::int64_t arg(const std::vector<std::string>& args, std::string_view name, std::int64_t fallback) {
  const std::string prefix = fmt::format("--{}=", name);
  for (const auto& a : args)
    if (a.rfind(prefix, 0) == 0) return std::stoll(a.substr(prefix.size()));
  return fallback;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

struct figures {
  std::vector<double> resize, serving, shrink;
};

std::string line(std::string_view what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<std::size_t>(q * double(v.size())))]; };
  return fmt::format("{:<34} p50 {:8.1f} ms  p90 {:8.1f} ms  max {:8.1f} ms  ({} runs)", what,
                     at(0.5), at(0.9), v.back(), v.size());
}

}  // namespace

struct Actor {
  std::uint32_t ping() { return 1; }
  using rpc = tlaunch::methods<&Actor::ping>;
};

struct Scaler {
  tlaunch::handles<Actor> actors;

  // One resize from `from` to `to` and back, timed.
  asio::awaitable<void> round(tlaunch::context& ctx, std::uint32_t from, std::uint32_t to, figures& f) {
    const auto t0 = std::chrono::steady_clock::now();
    co_await ctx.resize<"actor">(to);
    f.resize.push_back(ms_since(t0));
    std::vector<std::uint32_t> answers = co_await actors.broadcast<&Actor::ping>();
    f.serving.push_back(ms_since(t0));
    if (answers.size() != to) throw std::runtime_error("a broadcast after resize missed replicas");
    const auto t1 = std::chrono::steady_clock::now();
    co_await ctx.resize<"actor">(from);
    f.shrink.push_back(ms_since(t1));
  }

  asio::awaitable<void> run(tlaunch::context& ctx) {
    const auto to = static_cast<std::uint32_t>(arg(ctx.args(), "to", 64));
    const auto rounds = arg(ctx.args(), "rounds", 5);
    const std::uint32_t from = static_cast<std::uint32_t>(actors.size());
    figures one, many;
    for (std::int64_t r = 0; r < rounds; ++r) {
      co_await round(ctx, from, from + 1, one);
      co_await round(ctx, from, to, many);
    }
    ctx.log("{}", line(fmt::format("resize {} -> {} (baseline)", from, from + 1), one.resize));
    ctx.log("{}", line(fmt::format("resize {} -> {}", from, to), many.resize));
    ctx.log("{}", line(fmt::format("  ... and all {} answered (baseline)", from + 1), one.serving));
    ctx.log("{}", line(fmt::format("  ... and all {} answered", to), many.serving));
    ctx.log("{}", line(fmt::format("resize {} -> {} (baseline)", from + 1, from), one.shrink));
    ctx.log("{}", line(fmt::format("resize {} -> {}", to, from), many.shrink));
    ctx.stop_program();
  }
};

constexpr auto program =
    tlaunch::program(tlaunch::node<"actor", Actor>().replicas(4).elastic(64),
                     tlaunch::node<"scaler", Scaler>(tlaunch::ref<"actor">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
