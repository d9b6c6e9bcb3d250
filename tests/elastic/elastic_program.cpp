// An elastic node resized while a broadcast loop runs, for elastic_tests.cpp: `actor` (4 at
// launch, at most 64) counts the calls it serves; `driver` broadcasts to every actor in a loop
// and counts, per replica, the calls it sent; `scaler` resizes `actor` through the steps the
// program's arguments give (after `--`), then asks the driver for its counts and stops the
// program. What each prints is what the tests read:
//
//   actor I served N incarnation K      as each actor stops (removed or at the end)
//   resized to N in T ms: scaler sees A driver sees D
//   removed replica: <what tlaunch::removed said>   (a call to a replica a resize removed)
//   driver rounds=R failures=F sizes=4,16,2 sent=S0,S1,... error=E
//
// Arguments: steps=16,2 (the counts, in order; default 16,2), hold-ms=300 (the wait before
// and after each step).
#include <tlaunch/tlaunch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

using namespace std::chrono_literals;

struct Actor {
  std::int64_t served = 0;
  std::int64_t bump(std::int64_t round) {
    ++served;
    return round;
  }
  using rpc = tlaunch::methods<&Actor::bump>;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    co_await ctx.stopped();
    ctx.log("actor {} served {} incarnation {}", ctx.index(), served, ctx.incarnation());
  }
};

struct Driver {
  tlaunch::handles<Actor> actors;
  std::vector<std::int64_t> sent = {};
  std::vector<std::size_t> sizes = {};
  std::int64_t rounds = 0, failures = 0;
  std::string first_error = {};
  bool stop = false, over = false;

  std::uint32_t size_now() { return static_cast<std::uint32_t>(actors.size()); }

  // Ends the loop; its counts once it has.
  asio::awaitable<std::string> finish() {
    stop = true;
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer t(ex);
    while (!over) {
      t.expires_after(1ms);
      co_await t.async_wait(asio::use_awaitable);
    }
    std::string s = "rounds=" + std::to_string(rounds) + " failures=" + std::to_string(failures) +
                    " sizes=";
    for (std::size_t i = 0; i < sizes.size(); ++i) s += (i ? "," : "") + std::to_string(sizes[i]);
    s += " sent=";
    for (std::size_t i = 0; i < sent.size(); ++i) s += (i ? "," : "") + std::to_string(sent[i]);
    s += " error=" + (first_error.empty() ? std::string("none") : first_error);
    co_return s;
  }
  using rpc = tlaunch::methods<&Driver::size_now, &Driver::finish>;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    while (!stop && !ctx.stop_requested()) {
      try {
        std::vector<std::int64_t> r = co_await actors.broadcast<&Actor::bump>(rounds);
        if (sent.size() < r.size()) sent.resize(r.size());
        for (std::size_t i = 0; i < r.size(); ++i) {
          if (r[i] != rounds) ++failures;
          ++sent[i];
        }
        if (sizes.empty() || sizes.back() != r.size()) sizes.push_back(r.size());
      } catch (const std::exception& e) {
        ++failures;
        if (first_error.empty()) first_error = e.what();
      }
      ++rounds;
    }
    over = true;
    co_await ctx.stopped();
  }
};

struct Scaler {
  tlaunch::handles<Actor> actors;
  tlaunch::handle<Driver> driver;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    std::vector<std::uint32_t> steps = {16, 2};
    auto hold = 300ms;
    for (const auto& a : ctx.args()) {
      if (a.rfind("steps=", 0) == 0) {
        steps.clear();
        for (std::size_t at = 6; at < a.size();) {
          auto comma = a.find(',', at);
          steps.push_back(static_cast<std::uint32_t>(std::stoul(a.substr(at, comma - at))));
          at = comma == std::string::npos ? a.size() : comma + 1;
        }
      } else if (a.rfind("hold-ms=", 0) == 0) {
        hold = std::chrono::milliseconds(std::stoll(a.substr(8)));
      }
    }
    co_await ctx.sleep_for(hold);
    for (std::uint32_t n : steps) {
      // The last replica, about to be removed when the node shrinks.
      tlaunch::handle<Actor> leaving;
      if (n < actors.size()) leaving = actors[actors.size() - 1];
      const auto t0 = std::chrono::steady_clock::now();
      co_await ctx.resize<"actor">(n);
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
      const std::uint32_t seen = co_await driver.call<&Driver::size_now>();
      ctx.log("resized to {} in {} ms: scaler sees {} driver sees {}", n, ms, actors.size(), seen);
      if (leaving.valid()) {
        try {
          co_await leaving.call<&Actor::bump>(-1);
          ctx.log("removed replica answered");
        } catch (const tlaunch::removed& e) {
          ctx.log("removed replica: {}", e.what());
        }
      }
      co_await ctx.sleep_for(hold);
    }
    const std::string counts = co_await driver.call<&Driver::finish>();
    ctx.log("driver {}", counts);
    ctx.stop_program();
  }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"actor", Actor>().replicas(4).elastic(64),
    tlaunch::node<"driver", Driver>(tlaunch::ref<"actor">),
    tlaunch::node<"scaler", Scaler>(tlaunch::ref<"actor">, tlaunch::ref<"driver">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
