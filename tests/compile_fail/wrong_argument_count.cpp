// Counter::add takes one argument; the call passes two.
// expect-first-gcc: use of deleted function 'void tlaunch::detail::wrong_number_of_arguments\(\) \[with auto Method = &Counter::add; long unsigned int Expected = 1; long unsigned int Given = 2\]'
// expect-first-clang: static_assert failed due to requirement 'argument_count_matches<&Counter::add, 1UL, 2UL>' "tlaunch: wrong number of arguments for this method"
// expect-only-error
#include "common.hpp"

struct Adder {
  tlaunch::handle<Counter> counter;
  asio::awaitable<void> run(tlaunch::context&) { co_await counter.call<&Counter::add>(1, 2); }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"adder", Adder>(tlaunch::ref<"counter">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
