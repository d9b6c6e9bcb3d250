// Counter::add takes one argument; the call passes two.
// expect-message: wrong number of arguments for this method
// g++ names the method in "[with auto M = ...]", clang in "make_args<...>".
// expect-line: (make_args<&Counter::add, int, int>|auto M = &Counter::add; A = \{int, int\})
#include "common.hpp"

struct Adder {
  tlaunch::handle<Counter> counter;
  asio::awaitable<void> run(tlaunch::context&) { co_await counter.call<&Counter::add>(1, 2); }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"adder", Adder>(tlaunch::ref<"counter">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
