// Counter::reset exists but is not in Counter's tlaunch::methods<...> list.
// expect-message: this method is not exposed
// expect-line: exposure_check<Counter, &Counter::reset>
#include "common.hpp"

struct Resetter {
  tlaunch::handle<Counter> counter;
  asio::awaitable<void> run(tlaunch::context&) { co_await counter.call<&Counter::reset>(); }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"resetter", Resetter>(tlaunch::ref<"counter">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
