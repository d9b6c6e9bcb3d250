// Counter::reset exists but is not in Counter's tlaunch::methods<...> list.
// expect-first-gcc: use of deleted function 'void tlaunch::detail::method_not_exposed\(\) \[with Service = Counter; auto Method = &Counter::reset\]'
// expect-first-clang: static_assert failed due to requirement 'method_is_in_the_rpc_list<Counter, &Counter::reset>' "tlaunch: this method is not exposed
// expect-line-gcc: = delete; +// tlaunch: add it to the service's `using rpc = tlaunch::methods<...>;` list
// expect-only-error
#include "common.hpp"

struct Resetter {
  tlaunch::handle<Counter> counter;
  asio::awaitable<void> run(tlaunch::context&) { co_await counter.call<&Counter::reset>(); }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"resetter", Resetter>(tlaunch::ref<"counter">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
