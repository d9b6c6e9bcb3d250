// Counter::add takes a std::int64_t; the call passes a std::string as its first argument.
// expect-first-gcc: use of deleted function 'void tlaunch::detail::argument_does_not_convert_to_parameter_type\(\) \[with auto Method = &Counter::add; long unsigned int Argument = 1; Given = std::__cxx11::basic_string<char>&&; Parameter = long int\]'
// expect-first-clang: static_assert failed due to requirement 'argument_converts_to_parameter_type<&Counter::add, 1UL, std::basic_string<char.*> &&, long>' "tlaunch: an argument of this call cannot be converted to the method's parameter type"
// expect-only-error
#include "common.hpp"

#include <string>

struct Adder {
  tlaunch::handle<Counter> counter;
  asio::awaitable<void> run(tlaunch::context&) {
    co_await counter.call<&Counter::add>(std::string("one"));
  }
};

constexpr auto program = tlaunch::program(
    tlaunch::node<"counter", Counter>(),
    tlaunch::node<"adder", Adder>(tlaunch::ref<"counter">));

int main(int argc, char** argv) { return tlaunch::main(program, argc, argv); }
