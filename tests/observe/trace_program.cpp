// A chain of calls for the tests of --trace: front's run() calls Middle::relay `rounds` times
// (the first program argument after `--`, default 20); each relay calls Back::leaf twice, the
// second time after the first has returned (a step of the coroutine after it resumed).
// Then front's run() returns and the program ends.
#include <tlaunch/tlaunch.hpp>

#include <cstdint>
#include <string>

struct Back {
  std::int64_t leaf(std::int64_t x) { return x + 1; }
  using rpc = tlaunch::methods<&Back::leaf>;
};

struct Middle {
  tlaunch::handle<Back> back;
  asio::awaitable<std::int64_t> relay(std::int64_t x) {
    const std::int64_t a = co_await back.call<&Back::leaf>(x);
    co_return co_await back.call<&Back::leaf>(a);
  }
  using rpc = tlaunch::methods<&Middle::relay>;
};

struct Front {
  tlaunch::handle<Middle> middle;
  asio::awaitable<void> run(tlaunch::context& ctx) {
    int rounds = 20;
    if (!ctx.args().empty()) rounds = std::stoi(ctx.args().front());
    std::int64_t sum = 0;
    for (int i = 0; i < rounds; ++i) sum += co_await middle.call<&Middle::relay>(i);
    ctx.log("{} relays, sum {}", rounds, sum);
  }
};

constexpr auto program = tlaunch::program(tlaunch::node<"back", Back>(),
                                          tlaunch::node<"middle", Middle>(tlaunch::ref<"back">),
                                          tlaunch::node<"front", Front>(tlaunch::ref<"middle">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
