// Nodes with state for the tests of snapshots (state_tests.cpp), run with --state-dir or
// --resume. The program's arguments (after `--`) say what the counter does:
//
//   crash-at=A,B,C  its instance kills itself (SIGKILL) when the count reaches A in
//                   incarnation 0, B in incarnation 1, C in incarnation 2
//   until=N         the program stops when the count reaches N (default 40)
//   more=N          ... or N more than the count it started with
//   forever         it never stops by itself (the tests kill its launcher)
//
// The counter adds one every 10 ms and snapshots after each step (ctx.snapshot()); the
// ticker only counts, snapshotted by its policy (.snapshot({.every = 50 ms, .keep = 2})) and
// at a graceful stop; the replay data store holds one item per counter step, through the
// same snapshots. Each prints what a test reads: "start incarnation=I resumed=R count=C".
#include <signal.h>
#include <unistd.h>

#include <tlaunch/store/client.hpp>
#include <tlaunch/tlaunch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

using namespace std::chrono_literals;

struct Ticker {
  std::uint64_t ticks = 0;
  static constexpr std::uint32_t state_version = 1;
  template <class Archive>
  void state(Archive& ar, std::uint32_t /*version*/) {
    ar(ticks);
  }
  std::uint64_t get() { return ticks; }
  using rpc = tlaunch::methods<&Ticker::get>;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    ctx.log("start incarnation={} resumed={} count={}", ctx.incarnation(), ctx.resumed() ? 1 : 0,
            ticks);
    while (!ctx.stop_requested()) {
      ++ticks;
      co_await ctx.sleep_for(10ms);
    }
  }
};

struct Counter {
  tlaunch::handle<tlaunch::data_store> replay;
  std::uint64_t count = 0;
  std::vector<std::uint32_t> incarnations = {};  // each incarnation that counted

  template <class Archive>
  void state(Archive& ar) {
    ar(count, incarnations);
  }
  std::uint64_t get() { return count; }
  using rpc = tlaunch::methods<&Counter::get>;

  asio::awaitable<void> run(tlaunch::context& ctx) {
    std::vector<std::uint64_t> crash_at;
    std::uint64_t until = 40;
    bool forever = false;
    std::uint64_t more = 0;
    for (const auto& a : ctx.args()) {
      if (a.rfind("crash-at=", 0) == 0) {
        std::string v = a.substr(9);
        for (std::size_t at = 0; at <= v.size();) {
          auto comma = v.find(',', at);
          if (comma == std::string::npos) comma = v.size();
          crash_at.push_back(std::stoull(v.substr(at, comma - at)));
          at = comma + 1;
        }
      } else if (a.rfind("until=", 0) == 0) {
        until = std::stoull(a.substr(6));
      } else if (a.rfind("more=", 0) == 0) {
        more = std::stoull(a.substr(5));
      } else if (a == "forever") {
        forever = true;
      }
    }
    auto items = co_await replay.call<&tlaunch::data_store::info>();
    std::uint64_t stored = 0;
    for (const auto& t : items) stored += t.size;
    ctx.log("start incarnation={} resumed={} count={} stored={}", ctx.incarnation(),
            ctx.resumed() ? 1 : 0, count, stored);
    incarnations.push_back(ctx.incarnation());
    if (more > 0) until = count + more;
    while (forever || count < until) {
      ++count;
      std::vector<tlaunch::store::insert_item> step(1);
      step[0].key = count;
      co_await replay.call<&tlaunch::data_store::insert>(std::string("steps"), std::move(step));
      co_await ctx.snapshot();
      if (count % 5 == 0) ctx.log("count={}", count);
      const auto inc = ctx.incarnation();
      if (inc < crash_at.size() && count == crash_at[inc]) {
        ctx.log("killing myself at count={}", count);
        ::kill(::getpid(), SIGKILL);
      }
      co_await ctx.sleep_for(10ms);
    }
    std::string seen;
    for (auto i : incarnations) seen += (seen.empty() ? "" : ",") + std::to_string(i);
    ctx.log("final count={} incarnation={} incarnations={}", count, ctx.incarnation(), seen);
    ctx.stop_program();
  }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"replay", tlaunch::data_store>(tlaunch::store::table_config{.name = "steps"})
        .snapshot({.every = 100ms}),
    tlaunch::node<"ticker", Ticker>().snapshot({.every = 50ms, .keep = 2}),
    tlaunch::node<"counter", Counter>(tlaunch::ref<"replay">)
        .restart({.max_restarts = 3, .backoff = 50ms}));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
